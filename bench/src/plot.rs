//! SVG plots (plotters' SVG backend, text as `<text>` elements, so no
//! system fonts are needed): latency vs value size, throughput vs
//! clients, latency CDFs, the failover timeline, and a bulk copy's
//! progress.

use crate::compare::CompareReport;
use crate::failover::{FailoverReport, KillRecord};
use crate::latency::LatencyReport;
use crate::reconfig::ReconfigReport;
use crate::report::Report;
use crate::stats::CdfPoint;
use crate::throughput::ThroughputReport;
use crate::{BenchError, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

const SIZE: (u32, u32) = (960, 600);
const FONT: &str = "sans-serif";

fn err<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> BenchError + '_ {
    move |e| BenchError::Plot(format!("{what}: {e:?}"))
}

fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    C[i % C.len()]
}

/// A tick label: no decimals from 10 up.
fn axis_number(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::MAX, 0.0f64);
    for v in values.filter(|v| *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if hi <= 0.0 {
        return (0.1, 10.0);
    }
    (lo / 1.5, hi * 1.5)
}

/// One labelled series: a line through `pts` and a dot at each.
fn line_with_points<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    pts: &[(X::ValueType, Y::ValueType)],
    label: impl Into<String>,
    c: RGBColor,
) -> Result<()>
where
    X: Ranged,
    Y: Ranged,
    X::ValueType: Copy + 'static,
    Y::ValueType: Copy + 'static,
{
    chart
        .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
        .map_err(err("series"))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    chart
        .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
        .map_err(err("points"))?;
    Ok(())
}

/// Latency (p50 and p99, SET and GET, per group size) against value size.
pub fn latency_vs_size(l: &LatencyReport, setup_line: &str) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err("fill"))?;
        let sizes: Vec<usize> = {
            let mut s: Vec<usize> = l.points.iter().map(|p| p.value_bytes).collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        let (x0, x1) = (
            *sizes.first().unwrap_or(&8) as f64 / 1.3,
            *sizes.last().unwrap_or(&4096) as f64 * 1.3,
        );
        let (y0, y1) = log_range(
            l.points
                .iter()
                .flat_map(|p| [p.latency.p50_ns, p.latency.p99_ns])
                .map(|ns| ns as f64 / 1000.0),
        );
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("Latency vs value size ({})", l.mode), (FONT, 22))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(err("chart"))?;
        chart
            .configure_mesh()
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| axis_number(*v))
            .x_desc(format!("value bytes — {setup_line}"))
            .y_desc("latency (µs)")
            .draw()
            .map_err(err("mesh"))?;
        let mut groups: Vec<u8> = l.points.iter().map(|p| p.replicas).collect();
        groups.sort_unstable();
        groups.dedup();
        let mut i = 0;
        for &g in &groups {
            for op in ["set", "get"] {
                for (q, dashed) in [("p50", false), ("p99", true)] {
                    let pts: Vec<(f64, f64)> = l
                        .points
                        .iter()
                        .filter(|p| p.replicas == g && p.op == op)
                        .map(|p| {
                            let ns = if dashed {
                                p.latency.p99_ns
                            } else {
                                p.latency.p50_ns
                            };
                            (p.value_bytes as f64, ns as f64 / 1000.0)
                        })
                        .collect();
                    if pts.is_empty() {
                        continue;
                    }
                    let c = color(i / 2);
                    let style = if dashed {
                        c.mix(0.5).stroke_width(2)
                    } else {
                        c.stroke_width(2)
                    };
                    chart
                        .draw_series(LineSeries::new(pts.clone(), style))
                        .map_err(err("series"))?
                        .label(format!("{g} replicas {op} {q}"))
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                        .map_err(err("points"))?;
                    i += 1;
                }
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(err("legend"))?;
        root.present().map_err(err("present"))?;
    }
    Ok(svg)
}

/// Requests per second against requests in flight (client threads ×
/// pipeline depth, log scale): synchronous clients and pipelined ones as
/// separate series.
pub fn throughput_vs_clients(t: &ThroughputReport, setup_line: &str) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err("fill"))?;
        let xmax = t.points.iter().map(|p| p.in_flight()).max().unwrap_or(1) as f64;
        let ymax = t
            .points
            .iter()
            .map(|p| p.ops_per_sec)
            .fold(1.0f64, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Throughput vs requests in flight ({} replicas, {} B)",
                    t.replicas, t.value_bytes
                ),
                (FONT, 22),
            )
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(90)
            .build_cartesian_2d((0.8f64..xmax * 1.25).log_scale(), 0f64..ymax)
            .map_err(err("chart"))?;
        chart
            .configure_mesh()
            .x_desc(format!(
                "requests in flight (threads × depth) — {setup_line}"
            ))
            .y_desc("requests per second")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{:.0}k", v / 1000.0))
            .draw()
            .map_err(err("mesh"))?;
        let series = [
            ("set", false, "writes/s (SET), client threads"),
            ("get", false, "reads/s (GET), client threads"),
            ("set", true, "writes/s (SET), 1 thread pipelined"),
            ("get", true, "reads/s (GET), 1 thread pipelined"),
        ];
        for (i, (op, pipelined, label)) in series.into_iter().enumerate() {
            let pts: Vec<(f64, f64)> = t
                .points
                .iter()
                .filter(|p| p.op == op && (p.depth > 1) == pipelined)
                .map(|p| (p.in_flight() as f64, p.ops_per_sec))
                .collect();
            if pts.is_empty() {
                continue;
            }
            let c = color(i);
            line_with_points(&mut chart, &pts, label, c)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err("legend"))?;
        root.present().map_err(err("present"))?;
    }
    Ok(svg)
}

/// Multicast latency against receivers: receipt (SMC) and ordered
/// delivery, p50 and p99.
pub fn multicast_latency(m: &crate::multicast::McastReport, setup_line: &str) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err("fill"))?;
        let us = |ns: u64| ns as f64 / 1000.0;
        let xmax = m.latency.iter().map(|l| l.members - 1).max().unwrap_or(1) as f64;
        let ymax = m
            .latency
            .iter()
            .map(|l| us(l.delivery.p99_ns).max(us(l.receipt.p99_ns)))
            .fold(1.0f64, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Multicast latency, one message at a time (window {})",
                    m.window
                ),
                (FONT, 22),
            )
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(0.5f64..xmax + 0.5, 0f64..ymax)
            .map_err(err("chart"))?;
        chart
            .configure_mesh()
            .x_desc(format!("receivers — {setup_line}"))
            .y_desc("µs from the send")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(err("mesh"))?;
        type Pick = fn(&crate::multicast::McastLatency) -> u64;
        let series: [(&str, Pick); 4] = [
            ("receipt p50 (SMC)", |l| l.receipt.p50_ns),
            ("receipt p99", |l| l.receipt.p99_ns),
            ("ordered delivery p50", |l| l.delivery.p50_ns),
            ("ordered delivery p99", |l| l.delivery.p99_ns),
        ];
        for (i, (label, pick)) in series.into_iter().enumerate() {
            let pts: Vec<(f64, f64)> = m
                .latency
                .iter()
                .map(|l| (f64::from(l.members - 1), us(pick(l))))
                .collect();
            let c = color(i);
            line_with_points(&mut chart, &pts, label, c)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err("legend"))?;
        root.present().map_err(err("present"))?;
    }
    Ok(svg)
}

/// Large-message (RDMC) bandwidth against message size, per group size,
/// with memcpy's on this machine beside it.
pub fn multicast_rdmc(m: &crate::multicast::McastReport, setup_line: &str) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err("fill"))?;
        let (x0, x1) = log_range(m.rdmc.iter().map(|r| r.message_bytes as f64 / 1024.0));
        // Log scale: memcpy of a cache-resident message is 50 times the
        // pipeline's rate, which a linear axis flattens to nothing.
        let (y0, y1) = log_range(m.rdmc.iter().flat_map(|r| [r.gb_per_s, r.memcpy_gb_per_s]));
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Large messages (RDMC binomial pipeline) against memcpy",
                (FONT, 22),
            )
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(err("chart"))?;
        chart
            .configure_mesh()
            .x_desc(format!("message (KiB) — {setup_line}"))
            .y_desc("GB/s (send → delivered at the last member)")
            .x_label_formatter(&|v| axis_number(*v))
            .y_label_formatter(&|v| axis_number(*v))
            .draw()
            .map_err(err("mesh"))?;
        let mut members: Vec<u8> = m.rdmc.iter().map(|r| r.members).collect();
        members.sort_unstable();
        members.dedup();
        let mut series: Vec<(String, Vec<(f64, f64)>)> = members
            .iter()
            .map(|&n| {
                (
                    format!("RDMC, {n} members"),
                    m.rdmc
                        .iter()
                        .filter(|r| r.members == n)
                        .map(|r| (r.message_bytes as f64 / 1024.0, r.gb_per_s))
                        .collect(),
                )
            })
            .collect();
        let mut memcpy: Vec<(f64, f64)> = m
            .rdmc
            .iter()
            .map(|r| (r.message_bytes as f64 / 1024.0, r.memcpy_gb_per_s))
            .collect();
        memcpy.dedup_by(|a, b| a.0 == b.0);
        series.push(("memcpy (one copy, this machine)".into(), memcpy));
        for (i, (label, pts)) in series.into_iter().enumerate() {
            let c = color(i);
            line_with_points(&mut chart, &pts, label, c)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err("legend"))?;
        root.present().map_err(err("present"))?;
    }
    Ok(svg)
}

/// Latency CDFs of named series (x: µs, log scale).
pub fn cdfs(title: &str, series: &[(String, &[CdfPoint])], setup_line: &str) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err("fill"))?;
        let (x0, x1) = log_range(
            series
                .iter()
                .flat_map(|(_, pts)| pts.iter().map(|p| p.ns as f64 / 1000.0)),
        );
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 22))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(60)
            .build_cartesian_2d((x0..x1).log_scale(), 0f64..1.0)
            .map_err(err("chart"))?;
        chart
            .configure_mesh()
            .x_label_formatter(&|v| axis_number(*v))
            .x_desc(format!("latency (µs) — {setup_line}"))
            .y_desc("fraction of requests ≤ x")
            .draw()
            .map_err(err("mesh"))?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(
                    pts.iter()
                        .map(|p| (p.ns.max(1) as f64 / 1000.0, p.quantile)),
                    c.stroke_width(2),
                ))
                .map_err(err("series"))?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(err("legend"))?;
        root.present().map_err(err("present"))?;
    }
    Ok(svg)
}

/// The failover timeline: one bar per kill, its phases stacked from the
/// signal (SIGKILL: process exit, detection, election, first commit;
/// SIGSTOP: detection, election, first commit), and a black tick where
/// the client completed its first request.
pub fn failover_timeline(f: &FailoverReport, setup_line: &str) -> Result<String> {
    let kills: Vec<&KillRecord> = f.sigkill.iter().chain(&f.sigstop).collect();
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (SIZE.0, 140 + 32 * kills.len().max(1) as u32))
                .into_drawing_area();
        root.fill(&WHITE).map_err(err("fill"))?;
        let end = |k: &KillRecord| {
            let phases = k.process_exit_us.unwrap_or(0)
                + k.detection_us.unwrap_or(0)
                + k.election_us.unwrap_or(0)
                + k.first_commit_us.unwrap_or(0);
            phases.max(k.client_gap_us.unwrap_or(0))
        };
        let xmax = kills.iter().map(|k| end(k)).max().unwrap_or(1).max(1) as f64 * 1.1;
        let n = kills.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Failover timeline per kill (µs from the signal)",
                (FONT, 22),
            )
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(110)
            .build_cartesian_2d(0f64..xmax, -0.5f64..n - 0.5)
            .map_err(err("chart"))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .x_desc(format!("µs since the signal — {setup_line}"))
            .draw()
            .map_err(err("mesh"))?;
        // One label per row, left of the axis (plotters' own key points
        // need not fall on the rows).
        for (i, k) in kills.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(0.0, i as f64));
            root.draw(&Text::new(
                format!("{} #{}", k.signal, k.index + 1),
                (px - 8, py),
                (FONT, 13)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(err("row label"))?;
        }
        let names = ["process exit", "detection", "election", "first commit"];
        for (p, name) in names.iter().enumerate() {
            let c = color(p);
            let bars: Vec<Rectangle<(f64, f64)>> = kills
                .iter()
                .enumerate()
                .filter_map(|(i, k)| {
                    let v = [
                        k.process_exit_us,
                        k.detection_us,
                        k.election_us,
                        k.first_commit_us,
                    ];
                    let start: u64 = v[..p].iter().map(|x| x.unwrap_or(0)).sum();
                    let len = v[p]?;
                    let y = i as f64;
                    Some(Rectangle::new(
                        [(start as f64, y - 0.3), ((start + len) as f64, y + 0.3)],
                        c.filled(),
                    ))
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(err("bars"))?
                .label(*name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], c.filled()));
        }
        let ticks: Vec<PathElement<(f64, f64)>> = kills
            .iter()
            .enumerate()
            .filter_map(|(i, k)| {
                let g = k.client_gap_us? as f64;
                Some(PathElement::new(
                    vec![(g, i as f64 - 0.45), (g, i as f64 + 0.45)],
                    BLACK.stroke_width(3),
                ))
            })
            .collect();
        chart
            .draw_series(ticks)
            .map_err(err("ticks"))?
            .label("client's first request after the signal")
            .legend(|(x, y)| {
                PathElement::new(vec![(x + 7, y - 6), (x + 7, y + 6)], BLACK.stroke_width(3))
            });
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(err("legend"))?;
        root.present().map_err(err("present"))?;
    }
    Ok(svg)
}

/// Write throughput over time while the group changes (DARE §6, figure
/// 9a): one point per bucket, a shaded band from each change's request to
/// its confirmation, and a dashed line at the request labelled with it.
pub fn reconfig_timeline(r: &ReconfigReport, setup_line: &str) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err("fill"))?;
        let pts: Vec<(f64, f64)> = (0..r.bucket_ops.len())
            .map(|i| ((i as f64 + 0.5) * r.bucket_ms / 1000.0, r.rate(i) / 1000.0))
            .collect();
        let xmax = (r.bucket_ops.len() as f64 * r.bucket_ms / 1000.0).max(0.1);
        let ymax = pts.iter().map(|p| p.1).fold(1.0f64, f64::max) * 1.25;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Write throughput during group reconfiguration ({} B, {} client(s), {} ms samples)",
                    r.value_bytes, r.clients, r.bucket_ms
                ),
                (FONT, 22),
            )
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)
            .map_err(err("chart"))?;
        chart
            .configure_mesh()
            .x_desc(format!("time (s) — {setup_line}"))
            .y_desc("writes per second (thousands)")
            .x_label_formatter(&|v| format!("{v:.1}"))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(err("mesh"))?;
        let band = color(1).mix(0.18);
        chart
            .draw_series(r.changes.iter().map(|c| {
                let end = c.confirmed_ms.unwrap_or(c.asked_ms + r.bucket_ms);
                Rectangle::new(
                    [(c.asked_ms / 1000.0, 0.0), (end / 1000.0, ymax)],
                    band.filled(),
                )
            }))
            .map_err(err("bands"))?
            .label("asked → committed")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], band.filled()));
        let c0 = color(0);
        chart
            .draw_series(LineSeries::new(pts, c0.stroke_width(1)))
            .map_err(err("series"))?
            .label("writes/s")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c0.stroke_width(2)));
        for (i, c) in r.changes.iter().enumerate() {
            let x = c.asked_ms / 1000.0;
            let mark = if c.error.is_some() {
                color(3)
            } else {
                color(1)
            };
            // A dashed line: plotters has no dash style for paths.
            let steps = 40;
            chart
                .draw_series((0..steps).step_by(2).map(|k| {
                    let y0 = ymax * k as f64 / steps as f64;
                    let y1 = ymax * (k + 1) as f64 / steps as f64;
                    PathElement::new(vec![(x, y0), (x, y1)], mark.stroke_width(2))
                }))
                .map_err(err("marker"))?;
            let who = match (&c.scheduled, c.request.rsplit(' ').next()) {
                (s, Some(id)) if s.ends_with("leader") || s.ends_with("follower") => {
                    format!("{s} ({id})")
                }
                (s, _) => s.clone(),
            };
            let label = if c.error.is_some() {
                format!("{who}: failed")
            } else {
                who
            };
            // Labels alternate between two heights so that close changes
            // stay readable.
            let y = ymax * if i % 2 == 0 { 0.97 } else { 0.91 };
            let (px, py) = chart.backend_coord(&(x, y));
            root.draw(&Text::new(
                label,
                (px + 4, py),
                (FONT, 14)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err("marker label"))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(err("legend"))?;
        root.present().map_err(err("present"))?;
    }
    Ok(svg)
}

/// Bytes copied over time during each bulk-sync round: MiB posted by the
/// primary against ms since the member's restart, one line per round.
pub fn bulk_sync_progress(
    b: &crate::bulk_sync::BulkSyncReport,
    setup_line: &str,
) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err("fill"))?;
        let mib = |v: u64| v as f64 / (1u64 << 20) as f64;
        let series: Vec<(String, Vec<(f64, f64)>)> = b
            .rounds
            .iter()
            .map(|r| {
                let pts = r
                    .samples
                    .iter()
                    .map(|s| (s.ms, mib(s.done_bytes)))
                    .collect();
                (
                    format!(
                        "round {}: member {}{}",
                        r.round,
                        r.member,
                        r.synced_ms
                            .map_or(" (not synced)".to_string(), |ms| format!(
                                ", synced at {ms:.0} ms"
                            ))
                    ),
                    pts,
                )
            })
            .collect();
        let xmax = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|p| p.0))
            .fold(1.0f64, f64::max)
            * 1.05;
        let ymax = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|p| p.1))
            .fold(mib(b.fill.used_bytes), f64::max)
            .max(1.0)
            * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Bulk synchronisation of {:.0} MiB to a restarted member (backup-memory, {} B values)",
                    mib(b.fill.used_bytes),
                    b.value_bytes
                ),
                (FONT, 22),
            )
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)
            .map_err(err("chart"))?;
        chart
            .configure_mesh()
            .x_desc(format!("ms since the restart — {setup_line}"))
            .y_desc("MiB copied (primary's done_bytes)")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(err("mesh"))?;
        for (i, (label, pts)) in series.into_iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(err("series"))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(err("legend"))?;
        root.present().map_err(err("present"))?;
    }
    Ok(svg)
}

fn compare_cdfs(c: &CompareReport, setup_line: &str) -> Result<Option<String>> {
    let size = c.series.first().map(|s| s.value_bytes).unwrap_or(64);
    let series: Vec<(String, &[CdfPoint])> = c
        .series
        .iter()
        .filter(|s| s.value_bytes == size && !s.cdf.is_empty())
        .map(|s| {
            (
                format!("{} {} {}", s.system, s.path, s.op),
                s.cdf.as_slice(),
            )
        })
        .collect();
    if series.is_empty() {
        return Ok(None);
    }
    cdfs(
        &format!("Latency CDF, Redis vs Verbatim ({size} B, one client)"),
        &series,
        setup_line,
    )
    .map(Some)
}

/// Writes every plot the report has data for into `dir`; returns the
/// files written.
pub fn write_all(r: &Report, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    let s = &r.setup;
    let setup_line = format!(
        "{} fabric, poll {}, replicas on {:?}, client on {}, {} cores, {}",
        s.fabric,
        s.poll,
        s.replica_cores,
        s.client_core
            .map_or("any core".into(), |c| format!("core {c}")),
        s.machine.cores,
        s.date_utc.get(..10).unwrap_or("")
    );
    let mut files: Vec<(String, String)> = Vec::new();
    if let Some(l) = &r.latency {
        files.push((
            "latency_vs_size.svg".into(),
            latency_vs_size(l, &setup_line)?,
        ));
        let size = if l.points.iter().any(|p| p.value_bytes == 64) {
            64
        } else {
            l.points.first().map_or(64, |p| p.value_bytes)
        };
        let series: Vec<(String, &[CdfPoint])> = l
            .points
            .iter()
            .filter(|p| p.value_bytes == size)
            .map(|p| {
                (
                    format!("{} replicas {}", p.replicas, p.op),
                    p.cdf.as_slice(),
                )
            })
            .collect();
        files.push((
            "latency_cdf.svg".into(),
            cdfs(
                &format!("Latency CDF ({size} B, one client)"),
                &series,
                &setup_line,
            )?,
        ));
    }
    if let Some(t) = &r.throughput {
        files.push((
            "throughput_vs_clients.svg".into(),
            throughput_vs_clients(t, &setup_line)?,
        ));
    }
    if let Some(f) = &r.failover {
        if !f.sigkill.is_empty() || !f.sigstop.is_empty() {
            files.push((
                "failover_timeline.svg".into(),
                failover_timeline(f, &setup_line)?,
            ));
        }
    }
    if let Some(c) = &r.compare {
        if let Some(svg) = compare_cdfs(c, &setup_line)? {
            files.push(("compare_cdf.svg".into(), svg));
        }
    }
    if let Some(c) = &r.reconfig {
        files.push((
            "reconfig_throughput.svg".into(),
            reconfig_timeline(c, &setup_line)?,
        ));
    }
    if let Some(c) = &r.recovery {
        let series: Vec<(String, &[CdfPoint])> = c
            .windows
            .iter()
            .filter(|w| !w.cdf.is_empty())
            .map(|w| {
                (
                    format!("{} (p99 {} µs)", w.name, crate::stats::us(w.latency.p99_ns)),
                    w.cdf.as_slice(),
                )
            })
            .collect();
        if !series.is_empty() {
            files.push((
                "recovery_cdf.svg".into(),
                cdfs(
                    &format!(
                        "Leader write latency while a follower recovers {} MiB ({} B SETs, one client)",
                        c.state_mib, c.probe_value_bytes
                    ),
                    &series,
                    &setup_line,
                )?,
            ));
        }
    }
    if let Some(m) = &r.multicast {
        if !m.latency.is_empty() {
            files.push((
                "multicast_latency.svg".into(),
                multicast_latency(m, &setup_line)?,
            ));
        }
        if !m.rdmc.is_empty() {
            files.push(("multicast_rdmc.svg".into(), multicast_rdmc(m, &setup_line)?));
        }
    }
    if let Some(b) = &r.bulk_sync {
        if !b.rounds.is_empty() {
            files.push((
                "bulk_sync_progress.svg".into(),
                bulk_sync_progress(b, &setup_line)?,
            ));
        }
    }
    let mut written = Vec::new();
    for (name, svg) in files {
        let path = dir.join(name);
        std::fs::write(&path, svg).map_err(|e| BenchError::Io {
            path: path.clone(),
            source: e,
        })?;
        written.push(path);
    }
    Ok(written)
}
