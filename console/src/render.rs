//! The pure renderer: `impl Widget for &App`. It reads the app and
//! draws; it never changes state, reads a clock or does I/O, so a frame
//! is a function of the app alone and tests assert it cell by cell.
//!
//! Layout: a tab line, the panel, and a help line that is always there.
//! Every panel is laid out for 80x24 first; wider screens get more
//! columns, smaller ones get less and never a panic.

use crate::app::{App, Panel};
use crate::format::{self, UNKNOWN};
use crate::state::{EventEntry, EventSource, Grant, LinkState, Model, ReplicaState};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Cell, Clear, Gauge, HighlightSpacing, Paragraph, RenderDirection, Row, Sparkline, Table,
    TableState, Tabs, Widget,
};
use std::time::Duration;
use unicode_width::UnicodeWidthStr;

/// Smallest area the panels are drawn in; below it a one-line notice.
const AREA_MIN: (u16, u16) = (40, 8);
/// Inner width from which tables show their extra columns.
const WIDE_COLUMNS: u16 = 100;

const DIM: Style = Style::new().fg(Color::DarkGray);
const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);
const KEY: Style = Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD);
const BAD: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
const GOOD: Style = Style::new().fg(Color::Green);

impl Widget for &App {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width < AREA_MIN.0 || area.height < AREA_MIN.1 {
            Paragraph::new(format!(
                "terminal too small ({}x{}); need 40x8, 80x24 is best",
                area.width, area.height
            ))
            .render(area, buf);
            return;
        }
        let [tabs, body, help] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(0),
            Constraint::Length(1),
        ])
        .areas(area);
        let model = self.view();
        render_tab_line(self, model, tabs, buf);
        match self.panel {
            Panel::Overview => render_overview(self, model, body, buf),
            Panel::Failovers => render_failovers(model, body, buf),
            Panel::Events => render_events_panel(self, model, body, buf),
            Panel::Replica => render_replica(self, model, body, buf),
        }
        render_help_line(self, model, help, buf);
        if self.show_help {
            render_help_popup(area, buf);
        }
    }
}

/// Renders `app` into a `width`x`height` buffer and returns its text,
/// one string per row with trailing blanks trimmed (`--once`).
pub fn render_text(app: &App, width: u16, height: u16) -> Vec<String> {
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    app.render(area, &mut buf);
    buffer_lines(&buf)
}

/// The text of a buffer, one string per row, trailing blanks trimmed.
/// A wide character's hidden neighbour cell is skipped.
pub fn buffer_lines(buf: &Buffer) -> Vec<String> {
    let area = buf.area;
    (area.top()..area.bottom())
        .map(|y| {
            let mut line = String::new();
            let mut x = area.left();
            while x < area.right() {
                let symbol = buf[(x, y)].symbol();
                line.push_str(symbol);
                x += (symbol.width() as u16).max(1);
            }
            line.trim_end().to_string()
        })
        .collect()
}

// ---- frame -------------------------------------------------------------

fn render_tab_line(app: &App, model: &Model, area: Rect, buf: &mut Buffer) {
    let mut right = Vec::new();
    if app.paused() {
        right.push(Span::styled(
            " PAUSED ",
            Style::new().fg(Color::Black).bg(Color::Yellow),
        ));
        right.push(Span::raw(" "));
    }
    match (model.current_term(), model.leader()) {
        (Some(term), Some(leader)) => {
            right.push(Span::styled(format!("term {term}"), BOLD));
            right.push(Span::raw(" · "));
            right.push(Span::styled(
                format!("leader r{leader}"),
                Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
            ));
        }
        (Some(term), None) => {
            right.push(Span::styled(format!("term {term}"), BOLD));
            right.push(Span::raw(" · "));
            right.push(Span::styled("no leader", BAD));
        }
        _ => right.push(Span::styled("waiting for replicas…", DIM)),
    }
    right.push(Span::raw(" "));
    let right = Line::from(right);
    let right_width = (right.width() as u16).min(area.width);
    let [left, right_area] =
        Layout::horizontal([Constraint::Min(0), Constraint::Length(right_width)]).areas(area);
    let titles = Panel::ALL
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{} {}", i + 1, p.title()));
    Tabs::new(titles)
        .select(app.panel.index())
        .style(DIM)
        .highlight_style(
            Style::new()
                .fg(Color::Black)
                .bg(Color::Cyan)
                .add_modifier(Modifier::BOLD),
        )
        .divider("│")
        .render(left, buf);
    right.right_aligned().render(right_area, buf);
}

fn render_help_line(app: &App, model: &Model, area: Rect, buf: &mut Buffer) {
    let keys: [(&str, &str); 5] = [
        ("q", "quit"),
        ("p", if app.paused() { "resume" } else { "pause" }),
        ("Tab/1-4", "panel"),
        ("↑↓/jk", "select"),
        ("?", "help"),
    ];
    let mut spans = vec![Span::raw(" ")];
    for (k, what) in keys {
        spans.push(Span::styled(k, KEY));
        spans.push(Span::raw(format!(" {what}  ")));
    }
    let left = Line::from(spans);
    let mut status = vec![Span::raw(format!(
        "{}/{} up",
        model.up_count(),
        model.replicas.len()
    ))];
    if model.garbage_total > 0 {
        status.push(Span::raw(" · "));
        status.push(Span::styled(
            format!("{} garbage", model.garbage_total),
            Style::new().fg(Color::Yellow),
        ));
    }
    status.push(Span::raw(" "));
    let status = Line::from(status);
    let status_width = (status.width() as u16).min(area.width);
    let [l, r] =
        Layout::horizontal([Constraint::Min(0), Constraint::Length(status_width)]).areas(area);
    buf.set_style(area, Style::new().bg(Color::Rgb(30, 30, 40)));
    left.render(l, buf);
    status.right_aligned().render(r, buf);
}

fn render_help_popup(area: Rect, buf: &mut Buffer) {
    let lines = [
        ("q, Esc, Ctrl-C", "quit (Esc closes this help first)"),
        ("p, Space", "pause: freeze the display, keep receiving"),
        ("Tab, Shift-Tab", "next / previous panel"),
        ("1 2 3 4", "overview, failovers, events, replica"),
        ("↑ ↓, j k", "select a replica"),
        ("Enter", "show the selected replica"),
        ("PgUp PgDn Home End", "scroll the event list"),
        ("?, h, F1", "toggle this help"),
    ];
    let text: Vec<Line> = lines
        .iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::styled(format!("{k:<19}"), KEY),
                Span::raw(*what),
            ])
        })
        .collect();
    let width = (text.iter().map(Line::width).max().unwrap_or(0) as u16 + 4).min(area.width);
    let height = (text.len() as u16 + 2).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    Clear.render(popup, buf);
    Paragraph::new(text)
        .block(
            Block::bordered()
                .title(" Keys ")
                .title_style(BOLD)
                .style(Style::new().bg(Color::Black)),
        )
        .render(popup, buf);
}

// ---- overview ------------------------------------------------------------

fn render_overview(app: &App, model: &Model, area: Rect, buf: &mut Buffer) {
    let down_rows = model.replicas.iter().filter(|r| !r.is_up()).count() as u16;
    let table_height = model.replicas.len() as u16 + 3 + down_rows;
    let [summary, table, charts, events] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(table_height),
        Constraint::Length(5),
        Constraint::Min(3),
    ])
    .areas(area);
    summary_line(model).render(summary, buf);
    render_replica_table(app, model, table, buf);
    render_charts(model, charts, buf);
    render_event_list(model, 0, " Recent events ", events, buf);
}

/// `demo · 0 1 2 of 3, quorum 2 · shm/adaptive · hb 200µs Δ 1000µs · lease none`.
fn summary_line(model: &Model) -> Line<'static> {
    let mut spans = Vec::new();
    let leaders = model.leaders_in_current_term();
    if leaders.len() > 1 {
        let ids: Vec<String> = leaders.iter().map(|l| format!("r{l}")).collect();
        spans.push(Span::styled(
            format!("TWO LEADERS in one term: {} · ", ids.join(" ")),
            BAD,
        ));
    }
    let name = model
        .config()
        .map(|c| c.cluster.clone())
        .filter(|c| !c.is_empty())
        .or_else(|| model.cluster.clone());
    spans.push(Span::styled(
        name.unwrap_or_else(|| "cluster ?".into()),
        BOLD,
    ));
    if let Some(c) = model.config() {
        // The group (DARE §3.4), compact to fit 80 columns: "0 1 2 of 3"
        // (members of a 3-slot group), "0 1 2 3 of 3→4 transitional"
        // while it changes size; yellow until its CONFIG entry commits.
        let (members, style) = match model.group() {
            Some(g) => {
                let ids: Vec<String> = g.members.iter().map(u8::to_string).collect();
                let phase = match g.state.as_str() {
                    "extended" => {
                        format!("{}+{} extended", g.size, g.new_size.saturating_sub(g.size))
                    }
                    "transitional" => format!("{}→{} transitional", g.size, g.new_size),
                    _ => g.size.to_string(),
                };
                let changing = !(g.state == "stable" && g.committed && !g.in_progress);
                (
                    format!(
                        "{} of {phase}{}, ",
                        ids.join(" "),
                        if changing { " (changing)" } else { "" }
                    ),
                    if changing {
                        Style::new().fg(Color::Yellow)
                    } else {
                        Style::new()
                    },
                )
            }
            None => (format!("{} members, ", c.members), Style::new()),
        };
        spans.push(Span::raw(" · "));
        spans.push(Span::styled(members, style));
        spans.push(Span::raw(format!(
            "quorum {} · {}/{} · hb {}µs Δ {}µs",
            c.quorum, c.fabric, c.poll, c.heartbeat_period_us, c.fd_check_period_us
        )));
    } else {
        spans.push(Span::styled(" · no snapshot yet", DIM));
    }
    spans.push(Span::raw(format!(
        " · lease {}",
        model.lease().unwrap_or("none")
    )));
    Line::from(spans)
}

fn role_style(role: &str) -> Style {
    match role {
        "leader" => Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
        "candidate" => Style::new().fg(Color::Yellow),
        _ => Style::new(),
    }
}

/// `1✓2✗`: each peer and whether both channels to it work.
fn peers_cell(r: &ReplicaState) -> Line<'static> {
    let Some(s) = r.snapshot.as_ref() else {
        return Line::from(UNKNOWN);
    };
    let spans: Vec<Span> = s
        .peers
        .iter()
        .flat_map(|p| {
            let (mark, style) = if p.dead || !p.reachable {
                ("✗", Style::new().fg(Color::Red))
            } else if p.control_broken || p.log_broken {
                ("~", Style::new().fg(Color::Yellow))
            } else {
                ("✓", Style::new().fg(Color::Green))
            };
            [Span::raw(p.id.to_string()), Span::styled(mark, style)]
        })
        .collect();
    Line::from(spans)
}

fn grant_cell(g: Grant) -> Cell<'static> {
    match g {
        Grant::ToLeader => Cell::from("yes").style(Style::new().fg(Color::Green)),
        Grant::ToOther(id) => Cell::from(format!("r{id}")).style(Style::new().fg(Color::Yellow)),
        Grant::Nobody => Cell::from("no").style(Style::new().fg(Color::Yellow)),
        Grant::IsLeader => Cell::from("leads").style(Style::new().add_modifier(Modifier::DIM)),
        Grant::Unknown => Cell::from(UNKNOWN),
    }
}

fn link_age(model: &Model, since: std::time::Instant) -> String {
    format::age(model.now.mono.saturating_duration_since(since))
}

fn render_replica_table(app: &App, model: &Model, area: Rect, buf: &mut Buffer) {
    let block = Block::bordered()
        .title(Line::from(vec![
            Span::styled(" Replicas ", BOLD),
            Span::raw(format!("{}/{} up ", model.up_count(), model.replicas.len())),
        ]))
        .title_bottom(
            Line::from(" lag = leader tail − apply (entries) ")
                .right_aligned()
                .style(DIM),
        );
    let inner = block.inner(area);
    block.render(area, buf);
    let wide = inner.width >= WIDE_COLUMNS;
    let down: Vec<&ReplicaState> = model.replicas.iter().filter(|r| !r.is_up()).collect();
    let [table_area, notes_area] =
        Layout::vertical([Constraint::Min(0), Constraint::Length(down.len() as u16)]).areas(inner);

    let mut header = vec!["ID", "ROLE", "TERM", "LDR"];
    let mut widths = vec![3, 11, 5, 3];
    if wide {
        header.push("HEAD B");
        widths.push(7);
    }
    header.extend(["APPLY", "COMMIT", "TAIL", "LAG"]);
    widths.extend([7, 7, 7, 7]);
    if wide {
        header.push("LAG B");
        widths.push(8);
    }
    header.extend(["PEERS", "GRANT"]);
    widths.extend([8, 5]);
    if wide {
        header.push("SNAP AGE");
        widths.push(8);
    }

    let rows = model.replicas.iter().map(|r| {
        let up = r.is_up();
        let (role, role_st) = match (&r.link, r.snapshot.as_ref()) {
            (LinkState::Down { .. }, _) => ("unreachable".to_string(), BAD),
            (LinkState::Connecting { .. }, _) => ("connecting".to_string(), DIM),
            // Recovering by state transfer (DARE §3.4): how much of the
            // donor's snapshot is copied.
            (LinkState::Up { .. }, Some(s)) if s.recovery.active => {
                let r = &s.recovery;
                let text = match r.bytes_total {
                    0 => "recovering".to_string(),
                    total if r.bytes_restored > 0 => {
                        format!("restore {}%", r.bytes_restored.saturating_mul(100) / total)
                    }
                    total => format!("recover {}%", r.bytes_copied.saturating_mul(100) / total),
                };
                (text, Style::new().fg(Color::Yellow))
            }
            // Outside the group: a spare, or a member removed (DARE §3.4).
            (LinkState::Up { .. }, Some(s)) if s.group.size > 0 && !s.group.is_member => {
                ("spare".to_string(), DIM)
            }
            (LinkState::Up { .. }, Some(s)) => (s.role.clone(), role_style(&s.role)),
            (LinkState::Up { .. }, None) => (UNKNOWN.to_string(), DIM),
        };
        let s = r.snapshot.as_ref();
        let num = |f: &dyn Fn(&verbatim_status::Snapshot) -> u64| {
            s.map(|s| format::count(f(s)))
                .unwrap_or_else(|| UNKNOWN.to_string())
        };
        let mut cells: Vec<Cell> = vec![
            Cell::from(r.label()).style(BOLD),
            Cell::from(role).style(role_st),
            Cell::from(num(&|s| s.term)),
            Cell::from(
                s.map(|s| format::replica(s.leader))
                    .unwrap_or_else(|| UNKNOWN.into()),
            ),
        ];
        if wide {
            cells.push(Cell::from(num(&|s| s.log.head_pos)));
        }
        let lag = match (up, model.leader(), r.id()) {
            (true, Some(l), Some(id)) if l == id => String::new(),
            _ => model
                .lag_entries(r.index)
                .map(format::count)
                .unwrap_or_else(|| UNKNOWN.into()),
        };
        cells.extend([
            Cell::from(num(&|s| s.log.apply_index)),
            Cell::from(num(&|s| s.log.commit_index)),
            Cell::from(num(&|s| s.log.tail_index)),
            Cell::from(lag),
        ]);
        if wide {
            cells.push(Cell::from(
                model
                    .lag_bytes(r.index)
                    .map(format::count)
                    .unwrap_or_else(|| UNKNOWN.into()),
            ));
        }
        cells.push(Cell::from(peers_cell(r)));
        cells.push(grant_cell(model.grant(r.index)));
        if wide {
            let age = r
                .snapshot_at
                .map(|t| link_age(model, t))
                .unwrap_or_else(|| UNKNOWN.into());
            cells.push(Cell::from(age));
        }
        let row = Row::new(cells);
        if up {
            row
        } else {
            // Stale values stay visible, greyed, so the last known term
            // and pointers of a lost replica can still be read.
            row.style(DIM)
        }
    });
    let table = Table::new(rows, widths.into_iter().map(Constraint::Length))
        .header(Row::new(header).style(Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)))
        .row_highlight_style(Style::new().bg(Color::Rgb(40, 40, 60)))
        .highlight_symbol(">")
        .highlight_spacing(HighlightSpacing::Always);
    let mut state = TableState::default().with_selected(Some(app.selected_index()));
    ratatui::widgets::StatefulWidget::render(table, table_area, buf, &mut state);

    let notes: Vec<Line> = down
        .iter()
        .map(|r| {
            let text = match &r.link {
                LinkState::Down { since, reason } => {
                    format!(
                        " {} unreachable since {}: {reason}",
                        r.label(),
                        link_age(model, *since)
                    )
                }
                LinkState::Connecting { since } => {
                    format!(
                        " {} connecting for {} ({})",
                        r.label(),
                        link_age(model, *since),
                        r.endpoint.socket.display()
                    )
                }
                LinkState::Up { .. } => String::new(),
            };
            Line::styled(text, DIM)
        })
        .collect();
    Paragraph::new(notes).render(notes_area, buf);
}

fn render_charts(model: &Model, area: Rect, buf: &mut Buffer) {
    let cols = Layout::horizontal([Constraint::Ratio(1, 3); 3]).split(area);
    let last = model.history.samples.back().copied().unwrap_or_default();
    let charts: [(String, Vec<Option<u64>>, Color); 3] = [
        (
            format!(
                " ops/s {} ",
                last.ops_per_sec
                    .map(format::rate)
                    .unwrap_or_else(|| UNKNOWN.into())
            ),
            model.history.series(|s| s.ops_per_sec),
            Color::Cyan,
        ),
        (
            format!(
                " p50 write {} ",
                last.p50_ns
                    .map(format::ns_as_micros)
                    .unwrap_or_else(|| UNKNOWN.into())
            ),
            model.history.series(|s| s.p50_ns),
            Color::Green,
        ),
        (
            format!(
                " p99 write {} ",
                last.p99_ns
                    .map(format::ns_as_micros)
                    .unwrap_or_else(|| UNKNOWN.into())
            ),
            model.history.series(|s| s.p99_ns),
            Color::Magenta,
        ),
    ];
    for ((title, series, color), col) in charts.into_iter().zip(cols.iter()) {
        // Newest on the right: reversed data drawn right-to-left, so a
        // narrow chart shows the latest seconds rather than the oldest.
        let data: Vec<Option<u64>> = series.into_iter().rev().collect();
        Sparkline::default()
            .block(
                Block::bordered()
                    .title(Line::styled(title, BOLD))
                    .title_bottom(Line::from(" 60s ").right_aligned().style(DIM)),
            )
            .data(data)
            .direction(RenderDirection::RightToLeft)
            .style(Style::new().fg(color))
            .render(*col, buf);
    }
}

fn event_style(kind: &str) -> Style {
    match kind {
        "leader" | "leader-change" => Style::new().fg(Color::Green),
        "unreachable" | "replica-lost" | "log-corrupt" | "needs-recovery" => {
            Style::new().fg(Color::Red)
        }
        "replica-back" | "recovered" => Style::new().fg(Color::Cyan),
        "revoke" | "log-full" => Style::new().fg(Color::Yellow),
        _ => Style::new(),
    }
}

fn event_line(e: &EventEntry) -> Line<'static> {
    let source = match e.source {
        EventSource::Replica(id) => format!("r{id}"),
        EventSource::Console => "console".to_string(),
    };
    Line::from(vec![
        Span::styled(format::clock_ms(e.at_unix_ms), DIM),
        Span::raw(" "),
        Span::styled(format!("{source:<7}"), DIM),
        Span::raw(" "),
        Span::styled(format!("{:<13}", e.kind), event_style(&e.kind)),
        Span::raw(" "),
        Span::raw(e.detail.clone()),
    ])
}

fn render_event_list(model: &Model, skip: usize, title: &str, area: Rect, buf: &mut Buffer) {
    let block = Block::bordered().title(Line::styled(title.to_string(), BOLD));
    let rows = block.inner(area).height as usize;
    let mut lines: Vec<Line> = model
        .events()
        .skip(skip)
        .take(rows)
        .map(|e| event_line(&e))
        .collect();
    if lines.is_empty() {
        lines.push(Line::styled("no events yet", DIM));
    }
    Paragraph::new(lines).block(block).render(area, buf);
}

// ---- failovers -----------------------------------------------------------

fn render_failovers(model: &Model, area: Rect, buf: &mut Buffer) {
    let failover_count = model.failovers().count() as u16;
    let table_height = (failover_count.max(1) + 3).min(area.height.saturating_sub(5).max(4));
    let [table_area, timeline_area] =
        Layout::vertical([Constraint::Length(table_height), Constraint::Min(0)]).areas(area);

    let block = Block::bordered()
        .title(Line::from(vec![
            Span::styled(" Failovers ", BOLD),
            Span::raw("(µs, timed by the new leader) "),
        ]))
        .title_bottom(
            Line::from(" CLIENT = client-visible gap · +v = leader by a view ")
                .right_aligned()
                .style(DIM),
        );
    let inner = block.inner(table_area);
    block.render(table_area, buf);
    if failover_count == 0 {
        Paragraph::new(Line::styled("no failovers seen yet", DIM)).render(inner, buf);
    } else {
        // With views on, the wait for the new leader's view (inside its
        // first commit), where the width allows.
        let views = model.failovers().any(|r| r.failover.view_wait_us.is_some())
            && inner.width >= WIDE_COLUMNS;
        let mut header = vec![
            "TERM", "OLD", "NEW", "AT (UTC)", "DETECT", "ELECT", "COMMIT", "CLIENT", "TOTAL", "BY",
        ];
        let mut widths = vec![5, 3, 3, 12, 7, 7, 7, 7, 7, 11];
        if views {
            header.insert(6, "VIEW");
            widths.insert(6, 7);
        }
        let rows = model.failovers().map(|row| {
            let f = &row.failover;
            let mut cells = vec![
                Cell::from(f.term.to_string()).style(BOLD),
                Cell::from(format::replica(f.old_leader)),
                Cell::from(format!("r{}", f.new_leader)).style(Style::new().fg(Color::Green)),
                Cell::from(format::clock_ms(f.at_unix_ms)),
                Cell::from(format::micros(f.detection_us)),
                Cell::from(format::micros(f.election_us)),
                Cell::from(format::micros_opt(f.first_commit_us)),
                Cell::from(format::micros_opt(row.client_gap_us)),
                Cell::from(format::micros_opt(row.total_us())).style(BOLD),
                Cell::from(if f.decided_by == "view" {
                    format!("{}+v", f.detected_by)
                } else {
                    f.detected_by.clone()
                }),
            ];
            if views {
                cells.insert(6, Cell::from(format::micros_opt(f.view_wait_us)));
            }
            Row::new(cells)
        });
        let table = Table::new(rows, widths.into_iter().map(Constraint::Length)).header(
            Row::new(header).style(Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)),
        );
        Widget::render(table, inner, buf);
    }
    render_timeline(model, timeline_area, buf);
}

/// Terms newest first, each with its leader, when it was first seen and
/// a bar as long as it lasted (relative to the longest shown).
fn render_timeline(model: &Model, area: Rect, buf: &mut Buffer) {
    let block = Block::bordered().title(Line::from(vec![
        Span::styled(" Terms ", BOLD),
        Span::raw("newest first "),
    ]));
    let inner = block.inner(area);
    block.render(area, buf);
    let terms: Vec<_> = model.terms().take(inner.height as usize).collect();
    if terms.is_empty() {
        Paragraph::new(Line::styled("no term seen yet", DIM)).render(inner, buf);
        return;
    }
    // Each term lasted until the next one was first seen.
    let mut next_seen = None;
    let all: Vec<_> = model.terms().collect();
    let durations: Vec<Option<u64>> = all
        .iter()
        .map(|t| {
            let d = next_seen.map(|n: u64| n.saturating_sub(t.first_seen_unix_ms));
            next_seen = Some(t.first_seen_unix_ms);
            d
        })
        .collect();
    let longest_ms = durations
        .iter()
        .flatten()
        .copied()
        .max()
        .unwrap_or(1)
        .max(1);
    let bar_cells_max = inner.width.saturating_sub(40).clamp(1, 30) as u64;
    let current = model.current_term();
    let lines: Vec<Line> = terms
        .iter()
        .zip(&durations)
        .map(|(t, d)| {
            let mut spans = vec![
                Span::styled(format!("T{:<6}", t.term), BOLD),
                Span::styled(
                    format!("{:<4}", format::replica(t.leader)),
                    Style::new().fg(Color::Green),
                ),
                Span::styled(format::clock_ms(t.first_seen_unix_ms), DIM),
                Span::raw("  "),
            ];
            match d {
                Some(ms) => {
                    let cells = (ms * bar_cells_max).div_ceil(longest_ms).max(1);
                    spans.push(Span::styled(
                        "█".repeat(cells as usize),
                        Style::new().fg(Color::Blue),
                    ));
                    spans.push(Span::raw(format!(
                        " {}",
                        format::age(Duration::from_millis(*ms))
                    )));
                }
                None if Some(t.term) == current => {
                    spans.push(Span::styled("current", Style::new().fg(Color::Green)))
                }
                None => spans.push(Span::styled("latest seen", DIM)),
            }
            Line::from(spans)
        })
        .collect();
    Paragraph::new(lines).render(inner, buf);
}

// ---- events --------------------------------------------------------------

fn render_events_panel(app: &App, model: &Model, area: Rect, buf: &mut Buffer) {
    let title = format!(" Events {} (newest first, PgUp/PgDn) ", model.event_count());
    render_event_list(model, app.events_scroll, &title, area, buf);
}

// ---- replica detail --------------------------------------------------------

fn render_replica(app: &App, model: &Model, area: Rect, buf: &mut Buffer) {
    let Some(r) = model.replicas.get(app.selected_index()) else {
        Paragraph::new("no replica").render(area, buf);
        return;
    };
    let peer_count = r.snapshot.as_ref().map_or(0, |s| s.peers.len()) as u16;
    let views = r.snapshot.as_ref().and_then(|s| s.views.as_ref());
    let multicast = r.snapshot.as_ref().and_then(|s| s.multicast.as_ref());
    let backup = r.snapshot.as_ref().and_then(|s| s.backup.as_ref());
    let [info, log, peers, views_area, mcast_area, backup_area, rest] = Layout::vertical([
        Constraint::Length(5),
        Constraint::Length(6),
        Constraint::Length(peer_count.max(1) + 3),
        Constraint::Length(if views.is_some() { 6 } else { 0 }),
        Constraint::Length(match multicast {
            Some(m) => 6 + u16::from(m.large.is_some()) + m.subgroups.len() as u16,
            None => 0,
        }),
        Constraint::Length(match backup {
            Some(b) => 5 + b.copies.len() as u16,
            None => 0,
        }),
        Constraint::Min(0),
    ])
    .areas(area);
    render_replica_info(model, r, info, buf);
    render_log(r, log, buf);
    render_peers(r, peers, buf);
    if let Some(v) = views {
        render_views(v, r.snapshot.as_ref(), views_area, buf);
    }
    if let Some(m) = multicast {
        render_multicast(m, mcast_area, buf);
    }
    if let Some(b) = backup {
        Paragraph::new(backup_lines(b))
            .block(Block::bordered().title(Line::styled(" Backup memory ", BOLD)))
            .render(backup_area, buf);
    }
    let [counters, latency] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(rest);
    render_counters(r, counters, buf);
    render_latency_config(r, latency, buf);
}

/// The backup-memory store (MacR): role and view, the store, the share of
/// writes each replication path took, the last take-over, and at the
/// primary each member's copy (a bulk copy's progress).
fn backup_lines(b: &verbatim_status::BackupState) -> Vec<Line<'static>> {
    let members = b
        .members
        .iter()
        .map(|m| format!("r{m}"))
        .collect::<Vec<_>>()
        .join(" ");
    let head = format!(
        "{} · epoch {} primary {} · members {members} · {} keys · {} in use",
        b.role,
        b.epoch,
        b.primary.map_or("none".to_string(), |p| format!("r{p}")),
        format::count(b.keys),
        format::bytes(b.used_bytes)
    );
    let replicated = b.writes_zero_copy + b.writes_forwarded;
    let share = |n: u64| {
        if replicated == 0 {
            "0 %".to_string()
        } else {
            format!("{:.1} %", 100.0 * n as f64 / replicated as f64)
        }
    };
    let mut lines = vec![
        Line::styled(
            head,
            match b.role.as_str() {
                "primary" => GOOD,
                "taking-over" => BAD,
                _ => Style::default(),
            },
        ),
        Line::from(format!(
            "writes: zero-copy {} ({}) · forwarded {} ({}) · unchanged {} · replayed here {} (failed {})",
            format::count(b.writes_zero_copy),
            share(b.writes_zero_copy),
            format::count(b.writes_forwarded),
            share(b.writes_forwarded),
            format::count(b.writes_unchanged),
            format::count(b.replays),
            b.replay_failures
        )),
        Line::styled(
            match &b.recovery {
                Some(r) => format!(
                    "take-overs {} · last: {} keys, {} half-finished entries and {} phantom chunks reclaimed, {} free lists cut, {} sessions cleared · bulk copies {} ({})",
                    b.takeovers,
                    format::count(r.keys),
                    r.entries_reclaimed,
                    r.chunks_reclaimed,
                    r.free_lists_cut,
                    r.sessions_cleared,
                    b.copies_done,
                    format::bytes(b.copy_bytes)
                ),
                None => format!(
                    "take-overs {} · bulk copies {} ({})",
                    b.takeovers,
                    b.copies_done,
                    format::bytes(b.copy_bytes)
                ),
            },
            DIM,
        ),
    ];
    for c in &b.copies {
        let text = match c.state.as_str() {
            "copying" => format!(
                "copy of r{}: copying {} of {} ({:.0} %)",
                c.member,
                format::bytes(c.done_bytes),
                format::bytes(c.total_bytes),
                100.0 * c.done_bytes as f64 / c.total_bytes.max(1) as f64
            ),
            s => format!("copy of r{}: {s}", c.member),
        };
        lines.push(Line::styled(
            text,
            if c.state == "synced" { GOOD } else { BAD },
        ));
    }
    lines
}

/// Atomic multicast (Derecho): the view and its state, what this replica
/// sent, received per sender and delivered, and the last ragged trim.
fn render_multicast(m: &verbatim_status::MulticastState, area: Rect, buf: &mut Buffer) {
    let block = Block::bordered().title(Line::styled(" Multicast ", BOLD));
    let list = |ms: &[u8]| {
        ms.iter()
            .map(|m| format!("r{m}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let view = format!("epoch {} · view {}", m.epoch, list(&m.view));
    let state = match (&m.halted, &m.wedged, m.started) {
        (Some(why), _, _) => Line::styled(format!("LEFT THE GROUP: {why}"), BAD),
        (None, Some(why), _) => Line::styled(
            format!(
                "{view} · WEDGED (view change): {why} · suspects {}{}",
                list(&m.suspected),
                if m.minority {
                    " · cut off from a majority: waiting"
                } else {
                    ""
                }
            ),
            BAD,
        ),
        (None, None, true) => Line::styled(
            format!("{view} · running · window {} slots", m.window),
            GOOD,
        ),
        (None, None, false) if m.restarting => Line::styled(
            format!(
                "restarting from its multicast log (last view epoch {}): waiting for every member of that view",
                m.epoch
            ),
            BAD,
        ),
        (None, None, false) if m.joining => Line::styled(
            "joining the running group (the next view change adds this replica)",
            DIM,
        ),
        (None, None, false) => Line::styled(
            format!("{view} · forming (waiting for every member's row)"),
            DIM,
        ),
    };
    let trim = match &m.last_trim {
        Some(t) => format!(
            "last trim: epoch {} by {} kept {} → view {} · view changes {} · own trimmed {}",
            t.epoch,
            if t.restart {
                "the total restart's cut".to_string()
            } else {
                format!("r{}", t.leader)
            },
            t.counts
                .iter()
                .enumerate()
                .map(|(s, n)| format!("r{s} {n}"))
                .collect::<Vec<_>>()
                .join(" "),
            list(&t.members),
            m.view_changes,
            m.trimmed_own
        ),
        None => "no view change yet".to_string(),
    };
    let received = m
        .received
        .iter()
        .enumerate()
        .map(|(s, n)| format!("r{s} {}", format::count(*n)))
        .collect::<Vec<_>>()
        .join(" · ");
    let lines = vec![
        state,
        Line::from(format!(
            "sent {} ({} nulls) · window full {} · write errors {}",
            format::count(m.sent),
            format::count(m.sent_nulls),
            m.window_full,
            m.write_errors
        )),
        Line::from(format!(
            "received {received} · delivered {} ({} messages)",
            format::count(m.delivered),
            format::count(m.delivered_messages)
        )),
        Line::styled(trim, DIM),
    ];
    let mut lines = lines;
    if let Some(l) = &m.large {
        lines.push(large_line(l));
    }
    lines.extend(m.subgroups.iter().map(subgroup_line));
    Paragraph::new(lines).block(block).render(area, buf);
}

/// One multicast subgroup this replica is in: its view and state, what
/// its members sent and it delivered.
fn subgroup_line(g: &verbatim_status::SubgroupState) -> Line<'static> {
    let m = &g.state;
    let list = |ms: &[u8]| {
        ms.iter()
            .map(|m| format!("r{m}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let received = g
        .members
        .iter()
        .map(|&s| {
            let n = m.received.get(usize::from(s)).copied().unwrap_or(0);
            format!("r{s} {}", format::count(n))
        })
        .collect::<Vec<_>>()
        .join(" ");
    let head = format!(
        "subgroup {} ({}): epoch {} view {}",
        g.name,
        list(&g.members),
        m.epoch,
        list(&m.view)
    );
    let counts = format!(
        "sent {} · received {received} · delivered {} messages",
        format::count(m.sent),
        format::count(m.delivered_messages)
    );
    match (&m.halted, &m.wedged, m.started) {
        (Some(why), _, _) => Line::styled(format!("{head} · LEFT: {why}"), BAD),
        (None, Some(why), _) => Line::styled(format!("{head} · WEDGED: {why} · {counts}"), BAD),
        (None, None, true) => Line::from(format!("{head} · running · {counts}")),
        (None, None, false) if m.joining => Line::styled(format!("{head} · joining"), DIM),
        (None, None, false) => Line::styled(format!("{head} · forming"), DIM),
    }
}

/// The multicast's large messages (RDMC): the view's session, what it
/// holds and delivered per sender, and what this replica relayed.
fn large_line(l: &verbatim_status::LargeState) -> Line<'static> {
    let per_sender = |v: &[u64]| {
        v.iter()
            .enumerate()
            .map(|(s, n)| format!("r{s} {}", format::count(*n)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let Some(epoch) = l.epoch else {
        return Line::styled(
            format!(
                "large (RDMC): {} slots × {} B chunks · no session until the group forms",
                l.slots, l.chunk_bytes
            ),
            DIM,
        );
    };
    let text = format!(
        "large (RDMC) epoch {epoch}: received {} · delivered {} · relayed {} chunks ({} MiB)",
        per_sender(&l.received),
        per_sender(&l.delivered),
        format::count(l.chunks_written),
        l.bytes_written >> 20
    );
    match &l.wedged {
        Some(why) => Line::styled(format!("{text} · WEDGED: {why}"), BAD),
        None => Line::from(text),
    }
}

/// Views and leases (uKharon): the view, the lease, the coordinators.
fn render_views(
    v: &verbatim_status::ViewsState,
    s: Option<&verbatim_status::Snapshot>,
    area: Rect,
    buf: &mut Buffer,
) {
    let block = Block::bordered().title(Line::styled(" Views · lease ", BOLD));
    let list = |ms: &[u8]| {
        if ms.is_empty() {
            "none".to_string()
        } else {
            ms.iter()
                .map(|m| format!("r{m}"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    let view = match v.leader {
        Some(l) if v.epoch > 0 && v.mode == "primary-backup" => format!(
            "view {} · primary r{l} · members {} · term {} · lease {} µs",
            v.epoch,
            list(&v.members),
            v.log_term,
            v.lease_us
        ),
        Some(l) if v.epoch > 0 => format!(
            "view {} · leader r{l} · term {} · lease {} µs",
            v.epoch, v.log_term, v.lease_us
        ),
        _ => "no view decided yet".to_string(),
    };
    let mut lease = if v.fallback {
        Line::styled(
            "DARE fallback: no lease (a majority of coordinators lost)",
            BAD,
        )
    } else if v.lease_active {
        Line::styled(
            format!("lease held · {} µs left", v.lease_remaining_us),
            GOOD,
        )
    } else {
        Line::styled("lease not held (only the view's leader holds one)", DIM)
    };
    let counter = |name: &str| s.and_then(|s| s.counters.get(name)).copied().unwrap_or(0);
    if v.mode == "primary-backup" {
        // A roll back costs a state transfer: worth seeing at a glance.
        let rollbacks = counter("speculation_rollbacks");
        lease.push_span(Span::styled(
            format!(
                " · executed ahead {} (rolled back {rollbacks})",
                format::count(counter("operations_speculated"))
            ),
            if rollbacks > 0 { BAD } else { Style::default() },
        ));
    }
    let lines = vec![
        Line::from(view),
        lease,
        Line::from(format!(
            "coordinators {} · out {}{} · slot ring {} (lap {}, skipped {}) · proposed {} (won {})",
            list(&v.coordinators),
            list(&v.coordinators_out),
            if v.own_acceptor_no_loopback {
                " · own memory not asked (no loopback)"
            } else {
                ""
            },
            v.slot_count,
            v.epoch.saturating_sub(1) / v.slot_count.max(1),
            v.slots_skipped,
            v.proposed,
            v.won,
        )),
        Line::from(format!(
            "renewals {} (superseded {}, abandoned {}) · leased reads {} · commits awaiting view {}",
            format::count(v.renewals),
            v.renewals_superseded,
            v.renewals_abandoned,
            format::count(counter("lease_reads")),
            format::count(counter("commits_awaiting_view")),
        )),
    ];
    Paragraph::new(lines).block(block).render(area, buf);
}

fn render_replica_info(model: &Model, r: &ReplicaState, area: Rect, buf: &mut Buffer) {
    let s = r.snapshot.as_ref();
    let mut title = vec![Span::styled(format!(" {} ", r.label()), BOLD)];
    if let Some(s) = s {
        title.push(Span::styled(format!("{} ", s.role), role_style(&s.role)));
        title.push(Span::raw(format!("· term {} ", s.term)));
    }
    let mut lines = Vec::new();
    lines.push(match &r.link {
        LinkState::Up { since } => Line::from(format!(
            "link up for {} · {} snapshots · {} reconnects",
            link_age(model, *since),
            r.reports,
            r.link_ups.saturating_sub(1)
        )),
        LinkState::Down { since, reason } => {
            let stale = r
                .snapshot_at
                .map(|t| format!(" · last snapshot {} old", link_age(model, t)))
                .unwrap_or_default();
            Line::styled(
                format!(
                    "unreachable since {}: {reason}{stale}",
                    link_age(model, *since)
                ),
                BAD,
            )
        }
        LinkState::Connecting { since } => {
            Line::styled(format!("connecting for {}", link_age(model, *since)), DIM)
        }
    });
    if let Some(s) = s {
        let grant = match s.log_granted_to {
            Some(g) if Some(g) == model.leader() => format!("r{g} (the leader)"),
            Some(g) => format!("r{g} (not the leader)"),
            None => "nobody".into(),
        };
        lines.push(Line::from(format!(
            "pid {} · up {} · knows leader {} · log granted to {grant}",
            s.pid,
            format::age(Duration::from_millis(s.uptime_ms)),
            format::replica(s.leader),
        )));
    } else {
        lines.push(Line::styled("no snapshot yet", DIM));
    }
    let garbage = match &r.last_garbage {
        Some(why) => format!("{} garbage lines (last: {why}) · ", r.garbage_lines),
        None => String::new(),
    };
    lines.push(Line::styled(
        format!("{garbage}{}", r.endpoint.socket.display()),
        DIM,
    ));
    Paragraph::new(lines)
        .block(Block::bordered().title(Line::from(title)))
        .render(area, buf);
}

fn render_log(r: &ReplicaState, area: Rect, buf: &mut Buffer) {
    let block = Block::bordered().title(Line::from(vec![
        Span::styled(" Log ", BOLD),
        Span::raw("entry index and byte position "),
    ]));
    let inner = block.inner(area);
    block.render(area, buf);
    let Some(s) = r.snapshot.as_ref() else { return };
    let l = &s.log;
    let [table_area, gauge_area] =
        Layout::vertical([Constraint::Length(3), Constraint::Length(1)]).areas(inner);
    let widths = [
        Constraint::Length(6),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
    ];
    let rows = [
        Row::new(vec![
            Cell::from("index"),
            Cell::from(UNKNOWN),
            Cell::from(format::count(l.apply_index)),
            Cell::from(format::count(l.commit_index)),
            Cell::from(format::count(l.tail_index)),
        ]),
        Row::new(vec![
            Cell::from("bytes"),
            Cell::from(format::bytes(l.head_pos)),
            Cell::from(format::bytes(l.apply_pos)),
            Cell::from(format::bytes(l.commit_pos)),
            Cell::from(format::bytes(l.tail_pos)),
        ]),
    ];
    let table = Table::new(rows, widths).header(
        Row::new(["", "HEAD", "APPLY", "COMMIT", "TAIL"])
            .style(Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)),
    );
    Widget::render(table, table_area, buf);
    let used = l.tail_pos.saturating_sub(l.head_pos);
    let ratio = if l.ring_bytes == 0 {
        0.0
    } else {
        (used as f64 / l.ring_bytes as f64).clamp(0.0, 1.0)
    };
    Gauge::default()
        .ratio(ratio)
        .label(format!(
            "ring {:.0}% of {} ({} in use)",
            ratio * 100.0,
            format::bytes(l.ring_bytes),
            format::bytes(used)
        ))
        .gauge_style(
            Style::new()
                .fg(if ratio > 0.9 { Color::Red } else { Color::Blue })
                .bg(Color::Black),
        )
        .render(gauge_area, buf);
}

fn render_peers(r: &ReplicaState, area: Rect, buf: &mut Buffer) {
    let block = Block::bordered().title(Line::from(vec![
        Span::styled(" Peers ", BOLD),
        Span::raw("as this replica sees them "),
    ]));
    let inner = block.inner(area);
    block.render(area, buf);
    let Some(s) = r.snapshot.as_ref() else { return };
    let wide = inner.width >= WIDE_COLUMNS;
    let ok = |broken: bool| {
        if broken {
            Cell::from("broken").style(Style::new().fg(Color::Red))
        } else {
            Cell::from("ok").style(Style::new().fg(Color::Green))
        }
    };
    let mut header = vec!["PEER", "LINK", "CTRL", "LOG", "TERM"];
    let mut widths = vec![4, 6, 6, 6, 5];
    if wide {
        header.push("ROLE");
        widths.push(9);
    }
    header.extend(["APPLY", "REPLICATION", "LAG B", "LAG #"]);
    widths.extend([7, 14, 7, 6]);
    if wide {
        header.push("ACKED");
        widths.push(8);
    }
    header.push("ROW AGE");
    widths.push(8);
    let rows = s.peers.iter().map(|p| {
        let link = if p.dead {
            Cell::from("dead").style(BAD)
        } else if !p.reachable {
            Cell::from("lost").style(BAD)
        } else {
            Cell::from("up").style(Style::new().fg(Color::Green))
        };
        let mut cells = vec![
            Cell::from(format!("r{}", p.id)).style(BOLD),
            link,
            ok(p.control_broken),
            ok(p.log_broken),
            Cell::from(p.term.to_string()),
        ];
        if wide {
            cells.push(Cell::from(p.role.clone()).style(role_style(&p.role)));
        }
        cells.extend([
            Cell::from(format::count(p.apply_index)),
            Cell::from(p.replication.clone()),
            Cell::from(format::count(p.lag_bytes)),
            Cell::from(format::count(p.lag_entries)),
        ]);
        if wide {
            cells.push(Cell::from(format::count(p.acked_pos)));
        }
        cells.push(Cell::from(format!("{}µs", format::micros(p.row_age_us))));
        Row::new(cells)
    });
    let table = Table::new(rows, widths.into_iter().map(Constraint::Length))
        .header(Row::new(header).style(Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)));
    Widget::render(table, inner, buf);
}

fn render_counters(r: &ReplicaState, area: Rect, buf: &mut Buffer) {
    let block = Block::bordered().title(Line::styled(" Counters ", BOLD));
    let Some(s) = r.snapshot.as_ref() else {
        block.render(area, buf);
        return;
    };
    let name_width = block.inner(area).width.saturating_sub(9);
    let rows = s
        .counters
        .iter()
        .map(|(k, v)| Row::new(vec![Cell::from(k.clone()), Cell::from(format::count(*v))]));
    let table = Table::new(
        rows,
        [Constraint::Length(name_width), Constraint::Length(8)],
    )
    .block(block);
    Widget::render(table, area, buf);
}

fn render_latency_config(r: &ReplicaState, area: Rect, buf: &mut Buffer) {
    let block = Block::bordered().title(Line::styled(" Latency · config ", BOLD));
    let Some(s) = r.snapshot.as_ref() else {
        block.render(area, buf);
        return;
    };
    let lat = &s.latency;
    let pct = |name: &str, p: &verbatim_status::Percentiles| {
        Line::from(format!(
            "{name} p50 {} p99 {} max {} ({})",
            format::ns_as_micros(p.p50_ns),
            format::ns_as_micros(p.p99_ns),
            format::ns_as_micros(p.max_ns),
            format::count(p.count)
        ))
    };
    let c = &s.config;
    let lines = vec![
        Line::from(format!(
            "{} ops/s over {} ms",
            format::rate(lat.ops_per_sec.max(0.0).round() as u64),
            lat.window_ms
        )),
        pct("writes", &lat.writes),
        pct("reads ", &lat.reads),
        Line::from(format!(
            "{}/{} · core {} · numa {}",
            c.fabric,
            c.poll,
            c.core
                .map(|v| v.to_string())
                .unwrap_or_else(|| UNKNOWN.into()),
            c.numa_node
                .map(|v| v.to_string())
                .unwrap_or_else(|| UNKNOWN.into())
        )),
        Line::from(format!(
            "resp {}",
            c.resp_addr.as_deref().unwrap_or(UNKNOWN)
        )),
        Line::from(format!(
            "ring {} · value ≤ {} B",
            format::bytes(c.log_ring_bytes),
            c.value_bytes_max
        )),
        Line::from(format!("layout {} · status v{}", c.layout_hash, s.version)),
    ];
    Paragraph::new(lines).block(block).render(area, buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::snapshot;
    use crate::link::{LinkMessage, Report};
    use crate::state::Now;
    use crate::target::{Endpoint, Target};
    use ratatui::backend::TestBackend;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use ratatui::Terminal;
    use std::collections::BTreeMap;
    use std::time::Instant;
    use verbatim_status::{EventRecord, Failover};

    const T0_UNIX_MS: u64 = 1_700_000_000_000;

    fn report(endpoint: usize, snapshot: verbatim_status::Snapshot) -> LinkMessage {
        LinkMessage::Report {
            endpoint,
            report: Box::new(Report {
                snapshot,
                client_gaps_us: BTreeMap::new(),
            }),
        }
    }

    /// r0 led term 3 and died; r1 won term 4 (detection 42 µs, election
    /// 17 µs, first commit 23 µs); r2 follows r1.
    fn after_failover() -> App {
        let t0 = Now {
            mono: Instant::now(),
            unix_ms: T0_UNIX_MS,
        };
        let target = Target {
            endpoints: (0..3)
                .map(|i| Endpoint {
                    id: Some(i),
                    socket: format!("/run/v/replica-{i}.sock").into(),
                })
                .collect(),
            cluster: Some("demo".into()),
        };
        let mut app = App::new(&target, t0);
        for (i, role) in ["leader", "follower", "follower"].iter().enumerate() {
            app.handle_message(report(i, snapshot(i as u8, role, 3, Some(0))), t0);
        }
        app.tick(t0);
        let t1 = t0.after(Duration::from_secs(1));
        app.handle_message(
            LinkMessage::Down {
                endpoint: 0,
                reason: "closed by the replica".into(),
            },
            t1,
        );
        let mut leader = snapshot(1, "leader", 4, Some(1));
        leader.at_unix_ms = T0_UNIX_MS + 1_000;
        leader.failovers = vec![Failover {
            term: 4,
            old_leader: Some(0),
            new_leader: 1,
            at_unix_ms: T0_UNIX_MS + 1_000,
            detection_us: 42,
            election_us: 17,
            first_commit_us: Some(23),
            detected_by: "pidfd".into(),
            decided_by: "election".into(),
            view_wait_us: None,
            timeline: None,
        }];
        leader.events = vec![EventRecord {
            at_unix_ms: T0_UNIX_MS + 1_000,
            kind: "leader-change".into(),
            detail: "r1 leads term 4 after r0 died".into(),
        }];
        let dead = leader.peers.iter_mut().find(|p| p.id == 0).unwrap();
        dead.reachable = false;
        dead.dead = true;
        dead.replication = "broken".into();
        let mut follower = snapshot(2, "follower", 4, Some(1));
        follower.at_unix_ms = T0_UNIX_MS + 1_000;
        follower.log.apply_index -= 7;
        app.handle_message(report(1, leader), t1);
        app.handle_message(report(2, follower), t1);
        app.handle_message(
            LinkMessage::Down {
                endpoint: 0,
                reason: "Connection refused (os error 111)".into(),
            },
            t1,
        );
        let t4 = t0.after(Duration::from_secs(4));
        app.tick(t0.after(Duration::from_secs(2)));
        app.tick(t4);
        app
    }

    fn draw(app: &App, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|f| f.render_widget(app, f.area())).unwrap();
        buffer_lines(terminal.backend().buffer())
    }

    fn press(app: &mut App, code: KeyCode) {
        app.handle_key(KeyEvent::new(code, KeyModifiers::NONE));
    }

    fn frame(app: &App, width: u16, height: u16) -> String {
        draw(app, width, height).join("\n")
    }

    /// Borders are intact: every row between the first boxed row and the
    /// help line starts and ends with a border character, so no text ran
    /// over a frame.
    fn assert_boxes_intact(lines: &[String], first_boxed_row: usize) {
        let body = &lines[first_boxed_row..lines.len() - 1];
        for (i, line) in body.iter().enumerate() {
            let first = line.chars().next().unwrap_or(' ');
            let last = line.chars().last().unwrap_or(' ');
            assert!(
                "┌│└".contains(first) && "┐│┘".contains(last),
                "row {} is not boxed: {line:?}\n{}",
                i + first_boxed_row,
                lines.join("\n")
            );
        }
    }

    #[test]
    fn the_overview_at_80x24_names_the_leader_the_term_and_the_lost_replica() {
        let app = after_failover();
        let lines = draw(&app, 80, 24);
        let all = lines.join("\n");
        assert_eq!(lines.len(), 24);
        assert_eq!(
            lines[0],
            " 1 Overview │ 2 Failovers │ 3 Events │ 4 Replica             term 4 · leader r1"
        );
        assert_eq!(
            lines[1],
            "demo · 0 1 2 of 3, quorum 2 · shm/adaptive · hb 200µs Δ 1000µs · lease none"
        );
        assert_eq!(
            lines[3],
            "│ ID  ROLE        TERM  LDR APPLY   COMMIT  TAIL    LAG     PEERS    GRANT     │"
        );
        assert_eq!(
            lines[4],
            "│>r0  unreachable 3     r0  1300    1300    1300    —       1✓2✓     —         │"
        );
        assert_eq!(
            lines[5],
            "│ r1  leader      4     r1  1400    1400    1400            0✗2✓     leads     │"
        );
        assert_eq!(
            lines[6],
            "│ r2  follower    4     r1  1393    1400    1400    7       0✓1✓     yes       │"
        );
        assert!(
            lines[7].contains("r0 unreachable since 3s: Connection refused (os error 111)"),
            "{all}"
        );
        assert!(
            all.contains("ops/s 25.0k")
                && all.contains("p50 write 3.2µs")
                && all.contains("p99 write 12.5µs"),
            "{all}"
        );
        assert!(
            all.contains("leader-change r1 leads term 4 after r0 died"),
            "{all}"
        );
        assert!(
            lines[23].starts_with(" q quit  p pause  Tab/1-4 panel  ↑↓/jk select  ? help"),
            "{all}"
        );
        assert!(lines[23].ends_with("2/3 up"), "{all}");
        assert_boxes_intact(&lines, 2);
    }

    /// Issue 13: a replica copying a snapshot shows how far it is.
    #[test]
    fn a_recovering_replica_shows_its_progress() {
        let mut app = after_failover();
        let t = Now {
            mono: Instant::now(),
            unix_ms: T0_UNIX_MS + 5_000,
        };
        let mut s = snapshot(2, "follower", 4, Some(1));
        s.recovery.active = true;
        s.recovery.donor = Some(0);
        s.recovery.bytes_copied = 3 << 20;
        s.recovery.bytes_total = 8 << 20;
        app.handle_message(report(2, s), t);
        app.tick(t);
        let lines = draw(&app, 80, 24);
        assert!(
            lines[6].starts_with("│ r2  recover 37% 4 "),
            "{}",
            lines.join("\n")
        );
        // Copied whole, then restored a piece per step.
        let mut s = snapshot(2, "follower", 4, Some(1));
        s.recovery.active = true;
        s.recovery.donor = Some(0);
        s.recovery.bytes_copied = 8 << 20;
        s.recovery.bytes_total = 8 << 20;
        s.recovery.bytes_restored = 6 << 20;
        app.handle_message(report(2, s), t);
        app.tick(t);
        let lines = draw(&app, 80, 24);
        assert!(
            lines[6].starts_with("│ r2  restore 75% 4 "),
            "{}",
            lines.join("\n")
        );
    }

    /// Issue 13: the summary shows the group while it changes size, and a
    /// replica outside it is a spare.
    #[test]
    fn a_changing_group_and_a_spare_are_shown() {
        let mut app = after_failover();
        let t = Now {
            mono: Instant::now(),
            unix_ms: T0_UNIX_MS + 5_000,
        };
        let mut l = snapshot(1, "leader", 4, Some(1));
        l.group.state = "transitional".into();
        l.group.new_size = 2;
        l.group.committed = false;
        l.group.members = vec![1, 2];
        app.handle_message(report(1, l), t);
        let mut s = snapshot(2, "follower", 4, Some(1));
        s.group.is_member = false;
        app.handle_message(report(2, s), t);
        app.tick(t);
        let lines = draw(&app, 100, 24);
        assert!(
            lines[1].starts_with("demo · 1 2 of 3→2 transitional (changing), quorum 2"),
            "{}",
            lines.join("\n")
        );
        assert!(lines[6].starts_with("│ r2  spare "), "{}", lines.join("\n"));
    }

    #[test]
    fn the_failover_panel_shows_the_timings_and_the_terms() {
        let mut app = after_failover();
        press(&mut app, KeyCode::Char('2'));
        let lines = draw(&app, 80, 24);
        let all = lines.join("\n");
        assert_eq!(
            lines[2],
            "│TERM  OLD NEW AT (UTC)     DETECT  ELECT   COMMIT  CLIENT  TOTAL   BY         │"
        );
        assert_eq!(
            lines[3],
            "│4     r0  r1  22:13:21.000 42      17      23      —       82      pidfd      │"
        );
        assert!(all.contains("T4     r1  22:13:21.000  current"), "{all}");
        assert!(
            all.contains("T3     r0  22:13:20.000  ") && all.contains("█ 1s"),
            "{all}"
        );
        assert_boxes_intact(&lines, 1);
    }

    #[test]
    fn with_views_a_wide_failover_panel_shows_the_wait_for_the_view() {
        let mut app = after_failover();
        let mut leader = app.live.leader_snapshot().unwrap().clone();
        leader.failovers[0].view_wait_us = Some(12);
        let report = Report {
            snapshot: leader,
            client_gaps_us: BTreeMap::new(),
        };
        app.handle_message(
            LinkMessage::Report {
                endpoint: 1,
                report: Box::new(report),
            },
            app.live.now,
        );
        press(&mut app, KeyCode::Char('2'));
        let lines = draw(&app, 110, 24);
        assert!(
            lines[2].starts_with(
                "│TERM  OLD NEW AT (UTC)     DETECT  ELECT   VIEW    COMMIT  CLIENT  TOTAL   BY"
            ),
            "{}",
            lines.join("\n")
        );
        assert!(
            lines[3].starts_with("│4     r0  r1  22:13:21.000 42      17      12      23 "),
            "{}",
            lines.join("\n")
        );
        // Too narrow for it: the column goes, the rest stays.
        let lines = draw(&app, 80, 24);
        assert!(!lines[2].contains("VIEW"), "{}", lines[2]);
    }

    #[test]
    fn a_client_gap_fills_its_column_when_the_host_reports_it() {
        let mut app = after_failover();
        let mut leader = app.live.leader_snapshot().unwrap().clone();
        leader.failovers[0].first_commit_us = Some(30);
        let report = Report {
            snapshot: leader,
            client_gaps_us: BTreeMap::from([(4, 2_500)]),
        };
        app.handle_message(
            LinkMessage::Report {
                endpoint: 1,
                report: Box::new(report),
            },
            app.live.now,
        );
        press(&mut app, KeyCode::Char('2'));
        let lines = draw(&app, 80, 24);
        assert_eq!(
            lines[3],
            "│4     r0  r1  22:13:21.000 42      17      30      2500    89      pidfd      │"
        );
    }

    #[test]
    fn the_event_panel_lists_everything_newest_first_and_scrolls() {
        let mut app = after_failover();
        press(&mut app, KeyCode::Char('3'));
        let lines = draw(&app, 80, 24);
        let all = lines.join("\n");
        assert!(lines[1].contains("Events 4"), "{all}");
        assert_eq!(
            lines[2],
            "│22:13:21.000 console unreachable   r0: closed by the replica                  │"
        );
        assert!(
            all.contains("22:13:20.000 console leader        r0 leads term 3"),
            "{all}"
        );
        press(&mut app, KeyCode::PageDown);
        let scrolled = draw(&app, 80, 24);
        assert!(
            scrolled[2].contains("r0 leads term 3"),
            "{}",
            scrolled.join("\n")
        );
    }

    #[test]
    fn the_replica_panel_shows_peers_log_and_counters_of_the_selection() {
        let mut app = after_failover();
        press(&mut app, KeyCode::Down);
        press(&mut app, KeyCode::Enter);
        let lines = draw(&app, 80, 24);
        let all = lines.join("\n");
        assert!(lines[1].starts_with("┌ r1 leader · term 4 "), "{all}");
        assert!(
            all.contains("pid 4001 · up 1m00s · knows leader r1 · log granted to r1 (the leader)"),
            "{all}"
        );
        assert!(
            all.contains(
                "│PEER LINK   CTRL   LOG    TERM  APPLY   REPLICATION    LAG B   LAG #  ROW AGE │"
            ),
            "{all}"
        );
        assert!(
            all.contains("│r0   dead   ok     ok     4     1400    broken "),
            "{all}"
        );
        assert!(all.contains("ring 2% of 4.0 MiB"), "{all}");
        assert!(all.contains("writes_committed"), "{all}");
        assert_boxes_intact(&lines, 1);
        // The lost replica: its last snapshot, greyed, with why.
        press(&mut app, KeyCode::Up);
        let all = frame(&app, 80, 24);
        assert!(
            all.contains(
                "unreachable since 3s: Connection refused (os error 111) · last snapshot 4s old"
            ),
            "{all}"
        );
    }

    /// An app watching one replica (r1), and its clock.
    fn one_replica_app() -> (App, Now) {
        let t0 = Now {
            mono: Instant::now(),
            unix_ms: T0_UNIX_MS,
        };
        let target = Target {
            endpoints: vec![Endpoint {
                id: Some(1),
                socket: "/run/v/replica-1.sock".into(),
            }],
            cluster: Some("demo".into()),
        };
        (App::new(&target, t0), t0)
    }

    #[test]
    fn the_replica_panel_shows_the_view_the_lease_and_the_coordinators() {
        let (mut app, t0) = one_replica_app();
        let mut s = snapshot(1, "leader", 4, Some(1));
        s.views = Some(verbatim_status::ViewsState {
            epoch: 3,
            leader: Some(1),
            mode: "log".into(),
            members: vec![],
            log_term: 4,
            lease_us: 50,
            lease_active: true,
            lease_remaining_us: 31,
            coordinators: vec![0, 1, 2],
            coordinators_out: vec![0],
            fallback: false,
            slot_count: 4096,
            slots_skipped: 0,
            own_acceptor_rejoins: 0,
            own_acceptor_no_loopback: false,
            proposed: 2,
            won: 2,
            renewals: 1234,
            renewals_superseded: 1,
            renewals_abandoned: 0,
        });
        s.counters.insert("lease_reads".into(), 567);
        app.handle_message(report(0, s.clone()), t0);
        app.tick(t0);
        press(&mut app, KeyCode::Enter);
        let lines = draw(&app, 100, 30);
        let all = lines.join("\n");
        assert!(all.contains("Views · lease"), "{all}");
        assert!(
            all.contains("view 3 · leader r1 · term 4 · lease 50 µs"),
            "{all}"
        );
        assert!(all.contains("lease held · 31 µs left"), "{all}");
        assert!(
            all.contains("coordinators r0 r1 r2 · out r0 · slot ring 4096 (lap 0, skipped 0)"),
            "{all}"
        );
        assert!(
            all.contains("renewals 1234 (superseded 1, abandoned 0) · leased reads 567"),
            "{all}"
        );
        assert_boxes_intact(&lines, 1);
        let mut pb = s.clone();
        // In the fallback, the panel says so instead of a lease.
        let v = s.views.as_mut().unwrap();
        v.fallback = true;
        v.lease_active = false;
        app.handle_message(report(0, s), t0);
        let all = frame(&app, 100, 30);
        assert!(all.contains("DARE fallback: no lease"), "{all}");
        assert!(!all.contains("lease held"), "{all}");
        // Primary-backup mode: the view names the primary and its members.
        let v = pb.views.as_mut().unwrap();
        v.mode = "primary-backup".into();
        v.members = vec![1, 2];
        pb.counters.insert("operations_speculated".into(), 42);
        pb.counters.insert("speculation_rollbacks".into(), 1);
        app.handle_message(report(0, pb), t0);
        let all = frame(&app, 100, 30);
        assert!(
            all.contains("view 3 · primary r1 · members r1 r2 · term 4"),
            "{all}"
        );
        assert!(
            all.contains("lease held · 31 µs left · executed ahead 42 (rolled back 1)"),
            "{all}"
        );
    }

    #[test]
    fn the_replica_panel_shows_the_multicast_group() {
        let (mut app, t0) = one_replica_app();
        let mut s = snapshot(1, "leader", 4, Some(1));
        s.multicast = Some(verbatim_status::MulticastState {
            started: true,
            wedged: None,
            window: 64,
            sent: 120,
            sent_nulls: 20,
            received: vec![100, 120, 90],
            delivered: 270,
            delivered_messages: 250,
            window_full: 3,
            write_errors: 0,
            epoch: 0,
            view: vec![0, 1, 2],
            ..Default::default()
        });
        app.handle_message(report(0, s.clone()), t0);
        app.tick(t0);
        press(&mut app, KeyCode::Enter);
        let lines = draw(&app, 100, 34);
        let all = lines.join("\n");
        assert!(all.contains(" Multicast "), "{all}");
        assert!(
            all.contains("epoch 0 · view r0 r1 r2 · running · window 64 slots"),
            "{all}"
        );
        assert!(all.contains("no view change yet"), "{all}");
        assert!(!all.contains("large (RDMC)"), "{all}");
        assert!(all.contains("sent 120 (20 nulls) · window full 3"), "{all}");
        assert!(
            all.contains("received r0 100 · r1 120 · r2 90 · delivered 270 (250 messages)"),
            "{all}"
        );
        assert_boxes_intact(&lines, 1);
        let m = s.multicast.as_mut().unwrap();
        m.wedged = Some("member 2 is gone".into());
        m.suspected = vec![2];
        app.handle_message(report(0, s.clone()), t0);
        let all = frame(&app, 100, 34);
        assert!(
            all.contains("WEDGED (view change): member 2 is gone · suspects r2"),
            "{all}"
        );
        // The next view: without member 2, and the trim that ended epoch 0.
        let m = s.multicast.as_mut().unwrap();
        m.wedged = None;
        m.suspected = vec![];
        m.epoch = 1;
        m.view = vec![0, 1];
        m.view_changes = 1;
        m.last_trim = Some(verbatim_status::McastTrim {
            epoch: 0,
            leader: 0,
            members: vec![0, 1],
            counts: vec![40, 41, 39],
            restart: false,
        });
        app.handle_message(report(0, s.clone()), t0);
        let all = frame(&app, 120, 34);
        assert!(all.contains("epoch 1 · view r0 r1 · running"), "{all}");
        assert!(
            all.contains("last trim: epoch 0 by r0 kept r0 40 r1 41 r2 39 → view r0 r1"),
            "{all}"
        );
        // A total restart: waiting for the others, then the restart's cut.
        let m = s.multicast.as_mut().unwrap();
        let running = m.clone();
        m.started = false;
        m.restarting = true;
        app.handle_message(report(0, s.clone()), t0);
        let all = frame(&app, 130, 34);
        assert!(
            all.contains("restarting from its multicast log (last view epoch 1)"),
            "{all}"
        );
        let m = s.multicast.as_mut().unwrap();
        *m = running;
        m.epoch = 2;
        m.last_trim = Some(verbatim_status::McastTrim {
            epoch: 1,
            leader: 255,
            members: vec![0, 1],
            counts: vec![50, 50],
            restart: true,
        });
        app.handle_message(report(0, s.clone()), t0);
        let all = frame(&app, 130, 34);
        assert!(
            all.contains("last trim: epoch 1 by the total restart's cut kept r0 50 r1 50"),
            "{all}"
        );
        s.multicast.as_mut().unwrap().halted = Some("excluded".into());
        app.handle_message(report(0, s), t0);
        let all = frame(&app, 100, 34);
        assert!(all.contains("LEFT THE GROUP: excluded"), "{all}");
    }

    #[test]
    fn the_multicast_panel_shows_each_subgroup() {
        let (mut app, t0) = one_replica_app();
        let mut s = snapshot(1, "leader", 4, Some(1));
        let sub = |name: &str, members: Vec<u8>, state| verbatim_status::SubgroupState {
            index: 0,
            name: name.into(),
            members,
            state,
        };
        s.multicast = Some(verbatim_status::MulticastState {
            started: true,
            window: 64,
            view: vec![0, 1, 2],
            received: vec![1, 1, 1],
            subgroups: vec![
                sub(
                    "orders",
                    vec![1, 2],
                    verbatim_status::MulticastState {
                        started: true,
                        epoch: 2,
                        view: vec![1, 2],
                        sent: 7,
                        received: vec![0, 7, 9],
                        delivered_messages: 16,
                        ..Default::default()
                    },
                ),
                sub(
                    "kv.0",
                    vec![0, 1],
                    verbatim_status::MulticastState {
                        started: true,
                        view: vec![0, 1],
                        wedged: Some("member 0 is gone".into()),
                        received: vec![3, 0, 0],
                        ..Default::default()
                    },
                ),
            ],
            ..Default::default()
        });
        app.handle_message(report(0, s), t0);
        app.tick(t0);
        press(&mut app, KeyCode::Enter);
        let all = frame(&app, 150, 40);
        assert!(
            all.contains("subgroup orders (r1 r2): epoch 2 view r1 r2 · running · sent 7 · received r1 7 r2 9 · delivered 16 messages"),
            "{all}"
        );
        assert!(
            all.contains("subgroup kv.0 (r0 r1): epoch 0 view r0 r1 · WEDGED: member 0 is gone"),
            "{all}"
        );
    }

    #[test]
    fn the_replica_panel_shows_the_backup_memory_store_and_a_copy_in_progress() {
        let (mut app, t0) = one_replica_app();
        let mut s = snapshot(1, "leader", 4, Some(1));
        s.backup = Some(verbatim_status::BackupState {
            role: "primary".into(),
            epoch: 5,
            primary: Some(1),
            members: vec![1, 2],
            keys: 1200,
            used_bytes: 3 << 20,
            copies: vec![
                verbatim_status::BackupCopy {
                    member: 0,
                    state: "copying".into(),
                    done_bytes: 1 << 20,
                    total_bytes: 4 << 20,
                },
                verbatim_status::BackupCopy {
                    member: 2,
                    state: "synced".into(),
                    ..Default::default()
                },
            ],
            recovery: Some(verbatim_status::BackupRecovery {
                keys: 1200,
                chunks_reclaimed: 1,
                ..Default::default()
            }),
            writes_zero_copy: 990,
            writes_forwarded: 10,
            takeovers: 1,
            ..Default::default()
        });
        app.handle_message(report(0, s), t0);
        app.tick(t0);
        press(&mut app, KeyCode::Enter);
        let all = frame(&app, 170, 50);
        assert!(
            all.contains("primary · epoch 5 primary r1 · members r1 r2"),
            "{all}"
        );
        assert!(
            all.contains("zero-copy 990 (99.0 %) · forwarded 10 (1.0 %)"),
            "{all}"
        );
        assert!(all.contains("1 phantom chunks reclaimed"), "{all}");
        assert!(all.contains("copy of r0: copying"), "{all}");
        assert!(all.contains("(25 %)"), "{all}");
        assert!(all.contains("copy of r2: synced"), "{all}");
    }

    #[test]
    fn the_multicast_panel_shows_the_large_messages_session() {
        let (mut app, t0) = one_replica_app();
        let mut s = snapshot(1, "leader", 4, Some(1));
        s.multicast = Some(verbatim_status::MulticastState {
            started: true,
            window: 64,
            view: vec![0, 1, 2],
            received: vec![1, 1, 1],
            large: Some(verbatim_status::LargeState {
                epoch: None,
                slots: 2,
                chunk_bytes: 65536,
                ..Default::default()
            }),
            ..Default::default()
        });
        app.handle_message(report(0, s.clone()), t0);
        app.tick(t0);
        press(&mut app, KeyCode::Enter);
        let all = frame(&app, 140, 36);
        assert!(
            all.contains(
                "large (RDMC): 2 slots × 65536 B chunks · no session until the group forms"
            ),
            "{all}"
        );
        let l = s.multicast.as_mut().unwrap().large.as_mut().unwrap();
        l.epoch = Some(3);
        l.received = vec![4, 5, 6];
        l.delivered = vec![4, 5, 5];
        l.chunks_written = 96;
        l.bytes_written = 6 << 20;
        app.handle_message(report(0, s.clone()), t0);
        let lines = draw(&app, 140, 36);
        let all = lines.join("\n");
        assert!(
            all.contains("large (RDMC) epoch 3: received r0 4 r1 5 r2 6 · delivered r0 4 r1 5 r2 5 · relayed 96 chunks (6 MiB)"),
            "{all}"
        );
        assert_boxes_intact(&lines, 1);
        s.multicast.as_mut().unwrap().large.as_mut().unwrap().wedged =
            Some("the view changes".into());
        app.handle_message(report(0, s), t0);
        let all = frame(&app, 160, 36);
        assert!(all.contains("WEDGED: the view changes"), "{all}");
    }

    #[test]
    fn wide_screens_get_the_extra_columns() {
        let mut app = after_failover();
        let all = frame(&app, 120, 40);
        assert!(
            all.contains("HEAD B") && all.contains("LAG B") && all.contains("SNAP AGE"),
            "{all}"
        );
        assert!(all.contains(" r1  leader      4     r1  "), "{all}");
        assert!(all.contains("r0 unreachable since 3s"), "{all}");
        assert_boxes_intact(&draw(&app, 120, 40), 2);
        for key in ['2', '3', '4'] {
            press(&mut app, KeyCode::Char(key));
            let lines = draw(&app, 120, 40);
            assert_boxes_intact(&lines, 1);
            assert!(
                lines[0].ends_with("term 4 · leader r1"),
                "{}",
                lines.join("\n")
            );
        }
        press(&mut app, KeyCode::Down);
        let all = frame(&app, 120, 40);
        assert!(
            all.contains("ROLE")
                && all.contains("ACKED")
                && all.contains("layout 9e3779b97f4a7c15"),
            "{all}"
        );
    }

    #[test]
    fn any_size_renders_without_panicking() {
        let mut app = after_failover();
        for key in ['1', '2', '3', '4', '?'] {
            press(&mut app, KeyCode::Char(key));
            for (w, h) in [
                (1, 1),
                (10, 3),
                (39, 7),
                (40, 8),
                (60, 15),
                (79, 23),
                (80, 24),
                (200, 60),
                (300, 5),
            ] {
                let lines = draw(&app, w, h);
                assert_eq!(lines.len(), usize::from(h));
            }
        }
        assert!(frame(&app, 20, 4).contains("terminal too small"));
        // An empty model too.
        let empty = App::new(&Target::sockets(Vec::new()), after_failover().live.now);
        for key in ['1', '2', '3', '4'] {
            let mut e = empty.clone();
            press(&mut e, KeyCode::Char(key));
            let all = frame(&e, 80, 24);
            assert!(all.contains("waiting for replicas"), "{all}");
        }
    }

    #[test]
    fn pause_garbage_and_help_show_in_the_frame() {
        let mut app = after_failover();
        app.handle_message(
            LinkMessage::Garbage {
                endpoint: 2,
                reason: "not JSON".into(),
            },
            app.live.now,
        );
        press(&mut app, KeyCode::Char('p'));
        let lines = draw(&app, 80, 24);
        assert!(
            lines[0].contains("PAUSED") && lines[0].ends_with("term 4 · leader r1"),
            "{}",
            lines[0]
        );
        assert!(
            lines[23].contains("p resume") && lines[23].ends_with("2/3 up · 1 garbage"),
            "{}",
            lines[23]
        );
        press(&mut app, KeyCode::Char('?'));
        let all = frame(&app, 80, 24);
        assert!(
            all.contains("┌ Keys ") && all.contains("pause: freeze the display, keep receiving"),
            "{all}"
        );
    }

    #[test]
    fn no_leader_is_said_plainly() {
        let mut app = after_failover();
        let now = app.live.now;
        app.handle_message(
            LinkMessage::Down {
                endpoint: 1,
                reason: "closed by the replica".into(),
            },
            now,
        );
        app.handle_message(report(2, snapshot(2, "candidate", 5, None)), now);
        let lines = draw(&app, 80, 24);
        assert!(lines[0].ends_with("term 5 · no leader"), "{}", lines[0]);
        assert!(lines[23].ends_with("1/3 up"), "{}", lines[23]);
    }
}
