//! The application: the model plus what the operator chose, and the keys.

use crate::link::LinkMessage;
use crate::state::{Model, Now};
use crate::target::Target;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// The panels, in `Tab` order; `1`–`4` jump to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Panel {
    /// Replica table, configuration, throughput and latency.
    Overview,
    /// Failover timings and the term timeline.
    Failovers,
    /// All events, newest first.
    Events,
    /// Everything about the selected replica.
    Replica,
}

impl Panel {
    /// All panels in order.
    pub const ALL: [Panel; 4] = [
        Panel::Overview,
        Panel::Failovers,
        Panel::Events,
        Panel::Replica,
    ];

    /// Tab title.
    pub fn title(self) -> &'static str {
        match self {
            Panel::Overview => "Overview",
            Panel::Failovers => "Failovers",
            Panel::Events => "Events",
            Panel::Replica => "Replica",
        }
    }

    /// Position in [`Panel::ALL`].
    pub fn index(self) -> usize {
        Panel::ALL
            .iter()
            .position(|&p| p == self)
            .expect("every panel is in ALL")
    }

    /// Parses a `--panel` name (case-insensitive, prefix allowed).
    pub fn parse(name: &str) -> Option<Panel> {
        let name = name.to_ascii_lowercase();
        if name.is_empty() {
            return None;
        }
        Panel::ALL
            .into_iter()
            .find(|p| p.title().to_ascii_lowercase().starts_with(&name))
    }
}

/// Rows moved by PageUp/PageDown in the event list.
const EVENTS_PAGE_ROWS: usize = 10;

/// State and key handling of the console.
#[derive(Clone, Debug)]
pub struct App {
    /// The live model, updated even while paused.
    pub live: Model,
    /// The model as it was when `p` was pressed; shown while paused.
    pub frozen: Option<Model>,
    /// Shown panel.
    pub panel: Panel,
    /// Selected replica (index into the model's replicas).
    pub selected: usize,
    /// Help overlay open.
    pub show_help: bool,
    /// Rows scrolled down in the event list.
    pub events_scroll: usize,
    /// Set by `q`, Esc or Ctrl-C.
    pub should_quit: bool,
}

impl App {
    /// An app over `target`, every replica connecting.
    pub fn new(target: &Target, now: Now) -> App {
        App {
            live: Model::new(target, now),
            frozen: None,
            panel: Panel::Overview,
            selected: 0,
            show_help: false,
            events_scroll: 0,
            should_quit: false,
        }
    }

    /// The model to draw: frozen while paused, live otherwise.
    pub fn view(&self) -> &Model {
        self.frozen.as_ref().unwrap_or(&self.live)
    }

    /// Paused (display frozen, data still received).
    pub fn paused(&self) -> bool {
        self.frozen.is_some()
    }

    /// A link message; always applied to the live model.
    pub fn handle_message(&mut self, message: LinkMessage, now: Now) {
        self.live.handle(message, now);
    }

    /// Time passes (histories, ages).
    pub fn tick(&mut self, now: Now) {
        self.live.tick(now);
    }

    /// One key. Only presses count (some terminals also report releases).
    pub fn handle_key(&mut self, key: KeyEvent) {
        if key.kind != KeyEventKind::Press {
            return;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && matches!(key.code, KeyCode::Char('c')) {
            self.should_quit = true;
            return;
        }
        match key.code {
            KeyCode::Char('q') => self.should_quit = true,
            // Esc closes the help first, so it never quits by surprise.
            KeyCode::Esc if self.show_help => self.show_help = false,
            KeyCode::Esc => self.should_quit = true,
            KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::F(1) => {
                self.show_help = !self.show_help
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => self.toggle_pause(),
            KeyCode::Tab => self.panel = Panel::ALL[(self.panel.index() + 1) % Panel::ALL.len()],
            KeyCode::BackTab => {
                self.panel =
                    Panel::ALL[(self.panel.index() + Panel::ALL.len() - 1) % Panel::ALL.len()]
            }
            KeyCode::Char(c @ '1'..='4') => self.panel = Panel::ALL[usize::from(c as u8 - b'1')],
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected =
                    (self.selected + 1).min(self.view().replicas.len().saturating_sub(1));
            }
            KeyCode::Enter => self.panel = Panel::Replica,
            KeyCode::PageDown => self.scroll_events(EVENTS_PAGE_ROWS as isize),
            KeyCode::PageUp => self.scroll_events(-(EVENTS_PAGE_ROWS as isize)),
            KeyCode::Home => self.events_scroll = 0,
            KeyCode::End => self.scroll_events(isize::MAX / 2),
            _ => {}
        }
    }

    fn toggle_pause(&mut self) {
        self.frozen = match self.frozen.take() {
            Some(_) => None,
            None => Some(self.live.clone()),
        };
    }

    fn scroll_events(&mut self, rows: isize) {
        let max = self.view().event_count().saturating_sub(1);
        self.events_scroll = self.events_scroll.saturating_add_signed(rows).min(max);
    }

    /// Selects the replica with id `id`; false if there is none.
    pub fn select_id(&mut self, id: u8) -> bool {
        match self.live.replicas.iter().position(|r| r.id() == Some(id)) {
            Some(i) => {
                self.selected = i;
                true
            }
            None => false,
        }
    }

    /// The selected replica, clamped to what exists.
    pub fn selected_index(&self) -> usize {
        self.selected
            .min(self.view().replicas.len().saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::snapshot;
    use crate::link::Report;
    use crate::target::Endpoint;
    use ratatui::crossterm::event::KeyEventState;
    use std::time::Instant;

    fn app() -> (App, Now) {
        let now = Now {
            mono: Instant::now(),
            unix_ms: 1_700_000_000_000,
        };
        let target = Target::sockets(
            (0..3)
                .map(|i| Endpoint {
                    id: Some(i),
                    socket: format!("/tmp/{i}.sock").into(),
                })
                .collect(),
        );
        (App::new(&target, now), now)
    }

    fn press(app: &mut App, code: KeyCode) {
        app.handle_key(KeyEvent::new(code, KeyModifiers::NONE));
    }

    fn report(term: u64) -> LinkMessage {
        LinkMessage::Report {
            endpoint: 0,
            report: Box::new(Report {
                snapshot: snapshot(0, "leader", term, Some(0)),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn q_and_ctrl_c_quit_and_esc_closes_help_first() {
        let (mut a, _) = app();
        press(&mut a, KeyCode::Char('?'));
        assert!(a.show_help);
        press(&mut a, KeyCode::Esc);
        assert!(!a.show_help && !a.should_quit);
        press(&mut a, KeyCode::Esc);
        assert!(a.should_quit);
        let (mut a, _) = app();
        press(&mut a, KeyCode::Char('q'));
        assert!(a.should_quit);
        let (mut a, _) = app();
        a.handle_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
        assert!(a.should_quit);
    }

    #[test]
    fn releases_are_ignored() {
        let (mut a, _) = app();
        a.handle_key(KeyEvent::new_with_kind_and_state(
            KeyCode::Char('q'),
            KeyModifiers::NONE,
            KeyEventKind::Release,
            KeyEventState::NONE,
        ));
        assert!(!a.should_quit);
    }

    #[test]
    fn tab_and_digits_switch_panels() {
        let (mut a, _) = app();
        let mut seen = vec![a.panel];
        for _ in 0..4 {
            press(&mut a, KeyCode::Tab);
            seen.push(a.panel);
        }
        assert_eq!(
            seen,
            vec![
                Panel::Overview,
                Panel::Failovers,
                Panel::Events,
                Panel::Replica,
                Panel::Overview
            ]
        );
        press(&mut a, KeyCode::BackTab);
        assert_eq!(a.panel, Panel::Replica);
        press(&mut a, KeyCode::Char('2'));
        assert_eq!(a.panel, Panel::Failovers);
        press(&mut a, KeyCode::Char('3'));
        assert_eq!(a.panel, Panel::Events);
        press(&mut a, KeyCode::Char('1'));
        press(&mut a, KeyCode::Enter);
        assert_eq!(a.panel, Panel::Replica);
    }

    #[test]
    fn selection_moves_within_the_replicas() {
        let (mut a, _) = app();
        press(&mut a, KeyCode::Up);
        assert_eq!(a.selected, 0);
        press(&mut a, KeyCode::Char('j'));
        press(&mut a, KeyCode::Down);
        press(&mut a, KeyCode::Down);
        assert_eq!(a.selected, 2);
        press(&mut a, KeyCode::Char('k'));
        assert_eq!(a.selected, 1);
    }

    #[test]
    fn pause_freezes_the_view_but_keeps_receiving() {
        let (mut a, now) = app();
        a.handle_message(report(3), now);
        press(&mut a, KeyCode::Char('p'));
        assert!(a.paused());
        a.handle_message(report(4), now);
        assert_eq!(a.view().current_term(), Some(3));
        assert_eq!(a.live.current_term(), Some(4));
        press(&mut a, KeyCode::Char('p'));
        assert!(!a.paused());
        assert_eq!(a.view().current_term(), Some(4));
    }

    #[test]
    fn the_event_list_scrolls_within_its_length() {
        let (mut a, now) = app();
        a.handle_message(report(3), now);
        press(&mut a, KeyCode::PageDown);
        assert_eq!(a.events_scroll, a.view().event_count() - 1);
        press(&mut a, KeyCode::PageUp);
        assert_eq!(a.events_scroll, 0);
        press(&mut a, KeyCode::End);
        press(&mut a, KeyCode::Home);
        assert_eq!(a.events_scroll, 0);
    }

    #[test]
    fn panel_names_parse() {
        assert_eq!(Panel::parse("fail"), Some(Panel::Failovers));
        assert_eq!(Panel::parse("Replica"), Some(Panel::Replica));
        assert_eq!(Panel::parse(""), None);
        assert_eq!(Panel::parse("nope"), None);
    }
}
