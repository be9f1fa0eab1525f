//! The result document (`--json` prints it; the schema round-trips through
//! serde) and its rendering as aligned tables for the terminal.

use crate::compare::CompareReport;
use crate::failover::{FailoverReport, KillRecord, PhaseDists};
use crate::floor::FloorReport;
use crate::latency::LatencyReport;
use crate::reconfig::ReconfigReport;
use crate::recovery::RecoveryReport;
use crate::setup::Setup;
use crate::stats::{us, Dist, Summary};
use crate::throughput::ThroughputReport;
use crate::workload::WorkloadReport;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Version of the JSON document's schema.
pub const SCHEMA_VERSION: u32 = 1;

/// A project goal and where this run stands against it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Goal {
    /// What is measured.
    pub name: String,
    /// The target, in words ("≤ 2 µs").
    pub target: String,
    /// The measured value, in `unit`.
    pub measured: Option<f64>,
    /// Unit of `measured`.
    pub unit: String,
    /// Whether the target is met.
    pub met: Option<bool>,
}

/// Everything one invocation measured, with its setup.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// "verbatim-bench <version>".
    pub tool: String,
    /// The setup.
    pub setup: Setup,
    /// `latency`.
    pub latency: Option<LatencyReport>,
    /// `throughput`.
    pub throughput: Option<ThroughputReport>,
    /// `workload`.
    pub workload: Option<WorkloadReport>,
    /// `failover`.
    pub failover: Option<FailoverReport>,
    /// `compare`.
    pub compare: Option<CompareReport>,
    /// The machine's floor (`floor`; also measured before `latency` and
    /// `compare`, whose latencies are then shown as multiples of it).
    #[serde(default)]
    pub floor: Option<FloorReport>,
    /// `reconfig`: write throughput while the group changes (DARE §6,
    /// figure 9a).
    #[serde(default)]
    pub reconfig: Option<ReconfigReport>,
    /// `recovery`: the leader's latency while a follower copies a large
    /// snapshot.
    #[serde(default)]
    pub recovery: Option<RecoveryReport>,
    /// `lease`: the cost of `Active` under a lease (uKharon §6).
    #[serde(default)]
    pub lease: Option<crate::lease::LeaseReport>,
    /// `multicast`: Derecho's SMC and atomic multicast (issue 15).
    #[serde(default)]
    pub multicast: Option<crate::multicast::McastReport>,
    /// `bulk-sync`: a backup-memory primary refilling a restarted member
    /// by bulk copy, against memcpy and the write path (issue 16).
    #[serde(default)]
    pub bulk_sync: Option<crate::bulk_sync::BulkSyncReport>,
    /// Goals this run has figures for.
    pub goals: Vec<Goal>,
}

impl Report {
    /// An empty report with this setup.
    pub fn new(setup: Setup) -> Report {
        Report {
            schema_version: SCHEMA_VERSION,
            tool: format!("verbatim-bench {}", env!("CARGO_PKG_VERSION")),
            setup,
            ..Report::default()
        }
    }

    /// Takes every section `other` has and `self` lacks.
    pub fn merge(&mut self, other: Report) {
        self.latency = self.latency.take().or(other.latency);
        self.throughput = self.throughput.take().or(other.throughput);
        self.workload = self.workload.take().or(other.workload);
        self.failover = self.failover.take().or(other.failover);
        self.compare = self.compare.take().or(other.compare);
        self.floor = self.floor.take().or(other.floor);
        self.reconfig = self.reconfig.take().or(other.reconfig);
        self.recovery = self.recovery.take().or(other.recovery);
        self.lease = self.lease.take().or(other.lease);
        self.multicast = self.multicast.take().or(other.multicast);
        self.bulk_sync = self.bulk_sync.take().or(other.bulk_sync);
        for g in other.setup.group_sizes {
            if !self.setup.group_sizes.contains(&g) {
                self.setup.group_sizes.push(g);
            }
        }
    }

    /// Fills [`Report::goals`] from the results present.
    pub fn evaluate_goals(&mut self) {
        let mut goals = Vec::new();
        let mut goal =
            |name: &str, target: &str, v: Option<f64>, unit: &str, ok: fn(f64) -> bool| {
                goals.push(Goal {
                    name: name.into(),
                    target: target.into(),
                    measured: v,
                    unit: unit.into(),
                    met: v.map(ok),
                });
            };
        if let Some(l) = &self.latency {
            let p50 = |op: &str| l.point(3, 64, op).map(|p| p.latency.p50_ns as f64 / 1000.0);
            if l.point(3, 64, "set").is_some() {
                goal(
                    "write p50 (64 B, 3 replicas, 1 client)",
                    "≤ 2 µs",
                    p50("set"),
                    "µs",
                    |v| v <= 2.0,
                );
                goal(
                    "read p50 (64 B, 3 replicas, 1 client)",
                    "≤ 1 µs",
                    p50("get"),
                    "µs",
                    |v| v <= 1.0,
                );
            }
        }
        if let Some(l) = &self.lease {
            goal(
                "Active p99 under a lease (with its timestamp)",
                "≤ 20 ns",
                Some(l.active.p99_ns as f64),
                "ns",
                |v| v <= 20.0,
            );
        }
        if let Some(m) = &self.multicast {
            if let Some(l) = m.latency_of(4) {
                goal(
                    "SMC p50 to 3 receivers (receipt)",
                    "≤ 2 µs",
                    Some(l.receipt.p50_ns as f64 / 1000.0),
                    "µs",
                    |v| v <= 2.0,
                );
            }
            if let Some(t) = m.throughput_of(3) {
                let least = t
                    .delivered_per_sec
                    .iter()
                    .copied()
                    .fold(f64::INFINITY, f64::min);
                goal(
                    "ordered multicast, 3 members all sending (per member)",
                    "≥ 650,000 /s",
                    least.is_finite().then_some(least),
                    "/s",
                    |v| v >= 650_000.0,
                );
            }
        }
        if let Some(t) = &self.throughput {
            goal(
                "writes per second (best point)",
                "≥ 1,000,000 /s",
                t.max_rate("set").map(|p| p.ops_per_sec),
                "/s",
                |v| v >= 1e6,
            );
        }
        if let Some(f) = &self.failover {
            if !f.sigkill.is_empty() {
                goal(
                    "client-visible failover, SIGKILL (p50 gap)",
                    "≤ 100 µs",
                    Some(f.sigkill_dist.client_gap.p50 as f64),
                    "µs",
                    |v| v <= 100.0,
                );
            }
            if !f.sigstop.is_empty() {
                goal(
                    "client-visible failover, SIGSTOP (p50 gap)",
                    "≤ 100 µs",
                    Some(f.sigstop_dist.client_gap.p50 as f64),
                    "µs",
                    |v| v <= 100.0,
                );
            }
        }
        if let Some(c) = &self.compare {
            let r = c.ratios.iter().find(|r| {
                r.value_bytes == 64
                    && r.numerator == "redis resp-tcp set+wait"
                    && r.denominator == "verbatim shm set"
            });
            if c.redis_skipped.is_none() {
                goal(
                    "Redis SET+WAIT p50 / Verbatim shm SET p50 (64 B)",
                    "≥ 50×",
                    r.map(|r| r.p50),
                    "×",
                    |v| v >= 50.0,
                );
            }
        }
        if let Some(r) = &self.recovery {
            goal(
                &format!(
                    "leader write p99 while a follower recovers {} MiB / without",
                    r.state_mib
                ),
                "≤ 2×",
                r.p99_ratio,
                "×",
                |v| v <= 2.0,
            );
            // A transfer that never completed meets nothing, whatever the
            // latencies were meanwhile.
            if r.transfer.failure.is_some() {
                if let Some(g) = goals.last_mut() {
                    g.met = Some(false);
                    g.name.push_str(" (the transfer did not complete)");
                }
            }
        }
        self.goals = goals;
    }
}

/// A text table: a header row with units, right-aligned numbers.
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are blank).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders with two spaces between columns; the first column is
    /// left-aligned, the others right-aligned.
    pub fn render(&self) -> String {
        let n = self.headers.len();
        let width = |i: usize| {
            std::iter::once(&self.headers[i])
                .chain(self.rows.iter().filter_map(|r| r.get(i)))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..n).map(width).collect();
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, w) in widths.iter().enumerate() {
                let c = cells.get(i).map(String::as_str).unwrap_or("");
                let pad = w.saturating_sub(c.chars().count());
                if i > 0 {
                    s.push_str("  ");
                }
                if i == 0 {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                } else {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                }
            }
            s.trim_end().to_string()
        };
        let mut out = line(&self.headers);
        out.push('\n');
        out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * n.saturating_sub(1)));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

fn summary_cells(s: &Summary) -> Vec<String> {
    vec![
        s.count.to_string(),
        us(s.p2_ns),
        us(s.p50_ns),
        us(s.p98_ns),
        us(s.p99_ns),
        us(s.p999_ns),
        us(s.max_ns),
    ]
}

const SUMMARY_HEADERS: [&str; 7] = [
    "n",
    "p2 µs",
    "p50 µs",
    "p98 µs",
    "p99 µs",
    "p99.9 µs",
    "max µs",
];

fn opt(v: Option<u64>) -> String {
    v.map_or("—".into(), |v| v.to_string())
}

/// The setup, as a few lines.
pub fn render_setup(s: &Setup) -> String {
    let m = &s.machine;
    let c = &s.cpu;
    format!(
        "setup: fabric {}, poll {}, replicas pinned to {:?}, client on core {}, client wait {}, group sizes {:?}\n\
         machine: {} cores, {}{}, {}, host {}\n\
         cpus before the run: {} (busy {:?}, load average {:.2} {:.2} {:.2}); during: {}\n\
         builds: replicas {} ({}), bench {}; source {}; date {}\n\
         timing: heartbeat {} µs, Δ {} µs (max {} µs), election timeout {}–{} µs{}\n\
         method: {}\n",
        s.fabric,
        s.poll,
        s.replica_cores,
        s.client_core.map_or("unpinned".into(), |c| c.to_string()),
        s.client_wait,
        s.group_sizes,
        m.cores,
        m.cpu_model,
        if m.virtualized { " (virtual CPUs)" } else { "" },
        m.kernel,
        m.hostname,
        c.vcpus_before,
        c.busy_fraction
            .iter()
            .map(|f| format!("{:.0}%", f * 100.0))
            .collect::<Vec<_>>(),
        c.load_average[0],
        c.load_average[1],
        c.load_average[2],
        c.during,
        s.replica_build,
        s.replica_binary,
        s.bench_build,
        s.source_revision,
        s.date_utc,
        s.timing.heartbeat_period_us,
        s.timing.fd_check_period_us,
        s.timing.fd_check_period_max_us,
        s.timing.election_timeout_min_us,
        s.timing.election_timeout_max_us,
        if s.overrides.is_empty() {
            String::new()
        } else {
            format!("; overrides {:?}", s.overrides)
        },
        s.method,
    )
}

/// The `lease` section.
pub fn render_lease(l: &crate::lease::LeaseReport) -> String {
    let mut out = format!(
        "\nLEASE (Active(view) under a {} µs lease: a counter timestamp and a local check; {} calls{}, {} renewals in the loop, {} answered active)\n",
        crate::lease::LEASE_NS / 1000,
        l.calls,
        l.core.map_or(String::new(), |c| format!(" on core {c}")),
        l.renewals,
        l.active_answers,
    );
    let mut t = Table::new(&["what", "min ns", "p50 ns", "p99 ns", "p99.9 ns", "max ns"]);
    for (what, s) in [("Active (timed)", &l.active), ("timing alone", &l.overhead)] {
        t.row(vec![
            what.to_string(),
            s.min_ns.to_string(),
            s.p50_ns.to_string(),
            s.p99_ns.to_string(),
            s.p999_ns.to_string(),
            s.max_ns.to_string(),
        ]);
    }
    out.push_str(&t.render());
    out
}

/// The `multicast` section.
pub fn render_multicast(m: &crate::multicast::McastReport) -> String {
    let us = |ns: u64| format!("{:.2}", ns as f64 / 1000.0);
    let mut out = format!(
        "\nMULTICAST (Derecho SMC and atomic multicast; member threads over the shared-memory fabric, {} cores, window {} slots)\n",
        m.cores, m.window
    );
    if !m.latency.is_empty() {
        out.push_str("one message at a time from member 0, to each receiver:\n");
        let mut t = Table::new(&[
            "receivers",
            "receipt p50 µs",
            "receipt p99 µs",
            "ordered p50 µs",
            "ordered p99 µs",
            "all ordered p50 µs",
            "all ordered p99 µs",
            "samples",
        ]);
        for l in &m.latency {
            t.row(vec![
                (l.members - 1).to_string(),
                us(l.receipt.p50_ns),
                us(l.receipt.p99_ns),
                us(l.delivery.p50_ns),
                us(l.delivery.p99_ns),
                us(l.delivery_all.p50_ns),
                us(l.delivery_all.p99_ns),
                l.delivery.count.to_string(),
            ]);
        }
        out.push_str(&t.render());
    }
    if !m.throughput.is_empty() {
        out.push_str("every member sending, messages per second at each member:\n");
        let mut t = Table::new(&[
            "members",
            "bytes",
            "sent/s per member",
            "received/s (raw)",
            "delivered/s (ordered)",
            "window full",
        ]);
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{:.0}", x))
                .collect::<Vec<_>>()
                .join(" ")
        };
        for x in &m.throughput {
            t.row(vec![
                x.members.to_string(),
                x.payload_bytes.to_string(),
                list(&x.sent_per_sec),
                list(&x.received_per_sec),
                list(&x.delivered_per_sec),
                x.window_full.to_string(),
            ]);
        }
        out.push_str(&t.render());
    }
    if !m.view_changes.is_empty() {
        out.push_str(
            "view change: the last member stopped dead while every member sends (its death told at once):\n",
        );
        let mut t = Table::new(&[
            "members",
            "kill → view installed, per survivor (µs)",
            "delivered in the ended epoch",
            "same sequence",
            "trimmed",
        ]);
        for v in &m.view_changes {
            t.row(vec![
                v.members.to_string(),
                v.install_us
                    .iter()
                    .map(|x| format!("{x:.1}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                v.delivered_in_epoch
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
                if v.same_sequence { "yes" } else { "NO" }.into(),
                v.trimmed.to_string(),
            ]);
        }
        out.push_str(&t.render());
    }
    if !m.sigkill.is_empty() {
        out.push_str(
            "view change after a SIGKILL of replica 2 (3 replica processes, a pipelined publisher on each, subscribers on the survivors):\n",
        );
        let mut t = Table::new(&[
            "kill → view installed, replicas 0 1 (µs)",
            "published (before the kill)",
            "PUBLISH errors",
            "received per subscriber",
            "same sequence",
        ]);
        for k in &m.sigkill {
            t.row(vec![
                k.install_us
                    .iter()
                    .map(|x| format!("{x:.0}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                format!("{} ({})", k.published, 2 * k.published_before_kill),
                k.publish_errors.to_string(),
                k.received
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
                if k.same_sequence { "yes" } else { "NO" }.into(),
            ]);
        }
        out.push_str(&t.render());
    }
    if !m.rdmc.is_empty() {
        out.push_str(
            "large messages (RDMC, binomial pipeline), one at a time from member 0, send → delivered (copied out) at the last member; memcpy of the same size beside it:\n",
        );
        let mut t = Table::new(&[
            "members",
            "message",
            "chunk",
            "messages",
            "p50 µs",
            "min µs",
            "max µs",
            "GB/s",
            "memcpy GB/s",
            "of memcpy",
        ]);
        for r in &m.rdmc {
            t.row(vec![
                r.members.to_string(),
                bytes_label(r.message_bytes),
                bytes_label(r.chunk_bytes),
                r.messages.to_string(),
                format!("{:.1}", r.p50_us),
                format!("{:.1}", r.min_us),
                format!("{:.1}", r.max_us),
                format!("{:.2}", r.gb_per_s),
                format!("{:.2}", r.memcpy_gb_per_s),
                if r.memcpy_gb_per_s > 0.0 {
                    format!("{:.0} %", 100.0 * r.gb_per_s / r.memcpy_gb_per_s)
                } else {
                    "-".into()
                },
            ]);
        }
        out.push_str(&t.render());
    }
    out
}

/// `65536` as `64 KiB`.
pub fn bytes_label(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

/// The floor section.
pub fn render_floor(f: &FloorReport) -> String {
    let mut out = String::from(
        "\nFLOOR (one cache line passed between two spinning threads; memcpy between private buffers)\n",
    );
    let mut t = Table::new(&[
        "cores",
        "round trips",
        "rtt min ns",
        "rtt p50 ns",
        "rtt p90 ns",
        "rtt max ns",
    ]);
    for p in &f.pairs {
        t.row(vec![
            format!("{}↔{}", p.cores.0, p.cores.1),
            p.round_trips.to_string(),
            p.rtt.min.to_string(),
            p.rtt.p50.to_string(),
            p.rtt.p90.to_string(),
            p.rtt.max.to_string(),
        ]);
    }
    out.push_str(&t.render());
    let mut t = Table::new(&["memcpy bytes", "ns", "GB/s"]);
    for c in &f.copies {
        t.row(vec![
            c.bytes.to_string(),
            format!("{:.1}", c.ns),
            format!("{:.1}", c.gb_per_s),
        ]);
    }
    out.push('\n');
    out.push_str(&t.render());
    if let Some(rtt) = f.rtt_p50_ns() {
        let _ = writeln!(
            out,
            "a replicated write needs about two round trips ({:.2} µs) plus its copies; \
             latencies below are also shown as multiples of one round trip ({rtt:.0} ns)",
            2.0 * rtt / 1000.0
        );
    }
    out
}

/// `latency` tables (with a ×floor column when the floor was measured).
pub fn render_latency(l: &LatencyReport, floor: Option<&FloorReport>) -> String {
    let mut out = format!(
        "\nLATENCY ({}, {} requests per point after {} warm-up{}; one client, sequential)\n",
        l.mode,
        l.ops_per_point,
        l.warmup_per_point,
        l.rate_per_s.map_or(String::new(), |r| format!(
            ", scheduled at {r:.0}/s, latency from the intended send time"
        ))
    );
    let mut headers = vec!["replicas op value B"];
    headers.extend(SUMMARY_HEADERS);
    headers.push("ops/s");
    if floor.is_some() {
        headers.push("p50 ×rtt");
    }
    let mut t = Table::new(&headers);
    for p in &l.points {
        let mut row = vec![format!("{} {} {}", p.replicas, p.op, p.value_bytes)];
        row.extend(summary_cells(&p.latency));
        row.push(format!("{:.0}", p.ops_per_sec));
        if let Some(f) = floor {
            row.push(
                f.multiple(p.latency.p50_ns)
                    .map_or("—".into(), |m| format!("{m:.1}")),
            );
        }
        t.row(row);
    }
    out.push_str(&t.render());
    out
}

/// `throughput` table.
pub fn render_throughput(r: &ThroughputReport) -> String {
    let mut out = format!(
        "\nTHROUGHPUT ({} replicas, {} B values, closed loop, {:.1} s per point)\nclients: {}; wait: {}\n",
        r.replicas, r.value_bytes, r.window_s, r.client_placement, r.client_wait
    );
    let mut t = Table::new(&[
        "clients op",
        "ops/s",
        "p50 µs",
        "p99 µs",
        "max µs",
        "entries",
        "reads/round",
        "entries/batch",
    ]);
    for p in &r.points {
        t.row(vec![
            p.label(),
            format!("{:.0}", p.ops_per_sec),
            us(p.latency.p50_ns),
            us(p.latency.p99_ns),
            us(p.latency.max_ns),
            p.batching.entries_appended.to_string(),
            p.batching
                .reads_per_round
                .map_or("—".into(), |v| format!("{v:.2}")),
            p.batching
                .entries_per_batch
                .map_or("—".into(), |v| format!("{v:.2}")),
        ]);
    }
    out.push_str(&t.render());
    let _ = writeln!(out, "pipelined: {}", r.pipelined);
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `workload` table: per mix and key distribution, one row per
/// replication mode, so that the modes read side by side.
pub fn render_workload(w: &WorkloadReport) -> String {
    let modes_ran: Vec<&str> = w
        .modes
        .iter()
        .filter(|m| m.skipped.is_none())
        .map(|m| m.mode.as_str())
        .collect();
    let mut out = format!(
        "\nWORKLOAD ({} replicas, {} keys preloaded, {} B values, zipfian θ = {}, {:.1} s per point, closed loop, wait {}{})\n",
        w.replicas,
        w.keys,
        w.value_bytes,
        w.theta,
        w.window_s,
        w.client_wait,
        if modes_ran.is_empty() {
            String::new()
        } else {
            format!(", modes {}", modes_ran.join(", "))
        }
    );
    let mut t = Table::new(&[
        "mix / keys",
        "mode",
        "clients",
        "ops/s",
        "read p50 µs",
        "read p99 µs",
        "update p50 µs",
        "update p99 µs",
        "leader CPU µs/op",
        "backups CPU µs/op",
    ]);
    // Rows grouped by (mix, distribution) in the order they were run; the
    // points come mode by mode.
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for p in &w.points {
        let key = (p.mix.as_str(), p.distribution.as_str());
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    let cell = |s: &Summary, f: fn(&Summary) -> u64| {
        if s.count == 0 {
            "—".to_string()
        } else {
            us(f(s))
        }
    };
    let cpu = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.2}"));
    for (mix, distribution) in groups {
        let rows = w
            .points
            .iter()
            .filter(|p| p.mix == mix && p.distribution == distribution);
        for p in rows {
            t.row(vec![
                format!("{} / {}", p.mix, p.distribution),
                if p.mode.is_empty() {
                    "—".into()
                } else {
                    p.mode.clone()
                },
                p.clients.to_string(),
                format!("{:.0}", p.ops_per_sec),
                cell(&p.reads, |s| s.p50_ns),
                cell(&p.reads, |s| s.p99_ns),
                cell(&p.updates, |s| s.p50_ns),
                cell(&p.updates, |s| s.p99_ns),
                cpu(p.leader_cpu_us_per_op),
                cpu(p.backups_cpu_us_per_op),
            ]);
        }
    }
    out.push_str(&t.render());
    if w.clock_ticks_per_s > 0 {
        let _ = writeln!(
            out,
            "CPU: utime + stime of each replica process (/proc/<pid>/stat) over the window, per \
             request; leader = the member leading (the primary), backups = the others summed; \
             resolution 1 tick = {:.0} ms",
            1000.0 / w.clock_ticks_per_s as f64
        );
    }
    for m in &w.modes {
        match &m.skipped {
            Some(why) => {
                let _ = writeln!(out, "mode {}: skipped: {why}", m.mode);
            }
            None => {
                let _ = writeln!(out, "mode {}: overrides {}", m.mode, m.overrides.join(" "));
            }
        }
    }
    for n in &w.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

fn dist_row(name: &str, d: &Dist) -> Vec<String> {
    if d.count == 0 {
        return vec![name.into(), "0".into()];
    }
    vec![
        name.into(),
        d.count.to_string(),
        d.min.to_string(),
        d.p50.to_string(),
        d.p90.to_string(),
        d.max.to_string(),
    ]
}

fn render_dists(d: &PhaseDists, kill: bool) -> String {
    let mut t = Table::new(&["phase", "n", "min µs", "p50 µs", "p90 µs", "max µs"]);
    if kill {
        t.row(dist_row("death notice (kill → notice)", &d.notice));
        t.row(dist_row("process exit (kill → pidfd)", &d.process_exit));
    }
    t.row(dist_row("detection", &d.detection));
    t.row(dist_row("election", &d.election));
    t.row(dist_row("first commit", &d.first_commit));
    if d.view_wait.count > 0 {
        t.row(dist_row("  of which view wait (views on)", &d.view_wait));
    }
    t.row(dist_row("client gap (signal → next op)", &d.client_gap));
    if kill {
        t.row(dist_row("kill → new leader saw it", &d.from_kill_seen));
        t.row(dist_row(
            "kill → new leader suspected",
            &d.from_kill_suspected,
        ));
        t.row(dist_row("kill → new leader elected", &d.from_kill_elected));
        t.row(dist_row("kill → first commit", &d.from_kill_first_commit));
        t.row(dist_row(
            "client gap from death notice",
            &d.notice_to_client,
        ));
        t.row(dist_row("client gap from process exit", &d.exit_to_client));
    } else {
        t.row(dist_row("rejoin after SIGCONT", &d.rejoin));
    }
    t.render()
}

fn kill_rows(kills: &[KillRecord]) -> String {
    let mut t = Table::new(&[
        "# signal",
        "old→new",
        "notice µs",
        "exit µs",
        "detect µs",
        "by",
        "elect µs",
        "commit µs",
        "gap µs",
        "Δ µs",
    ]);
    for k in kills {
        t.row(vec![
            format!("{} {}", k.index + 1, k.signal),
            format!(
                "{}{}→{}",
                k.old_leader,
                k.also_killed.map_or(String::new(), |c| format!("+{c}")),
                k.new_leader.map_or("?".into(), |l| l.to_string())
            ),
            opt(k.notice_us),
            opt(k.process_exit_us),
            opt(k.detection_us),
            k.detected_by.clone().unwrap_or_default(),
            opt(k.election_us),
            opt(k.first_commit_us),
            opt(k.client_gap_us),
            opt(k.fd_period_us),
        ]);
    }
    t.render()
}

/// `failover` tables.
pub fn render_failover(f: &FailoverReport) -> String {
    let mut out = format!(
        "\nFAILOVER ({} replicas, {} kills per signal; heartbeat {} µs, Δ {} µs, election timeout {}–{} µs; client attempt timeout {} µs)\n",
        f.replicas,
        f.kills,
        f.timing.heartbeat_period_us,
        f.timing.fd_check_period_us,
        f.timing.election_timeout_min_us,
        f.timing.election_timeout_max_us,
        f.client_attempt_timeout_us
    );
    if !f.sigkill.is_empty() {
        out.push_str(if f.with_coordinator_leader {
            "SIGKILL, two members at the same instant, the coordinator leader (member 0) among them (fresh cluster per kill; old→new shows the second as +N)\n"
        } else {
            "SIGKILL (fresh cluster per kill)\n"
        });
        out.push_str(&kill_rows(&f.sigkill));
        out.push_str(&render_dists(&f.sigkill_dist, true));
    }
    if !f.sigstop.is_empty() {
        out.push_str("SIGSTOP (zombie leader; one cluster, leader stopped then continued)\n");
        out.push_str(&kill_rows(&f.sigstop));
        out.push_str(&render_dists(&f.sigstop_dist, false));
    }
    out
}

/// `compare` tables.
pub fn render_compare(c: &CompareReport, floor: Option<&FloorReport>) -> String {
    let mut out = format!(
        "\nCOMPARE (one client, sequential, {} requests per series; RESP client: {}; vCPUs: {})\n",
        c.ops_per_series, c.tcp_client, c.vcpus
    );
    match (&c.redis_version, &c.redis_skipped) {
        (_, Some(why)) => {
            let _ = writeln!(out, "Redis: {why}");
        }
        (Some(v), None) => {
            let _ = writeln!(
                out,
                "Redis: {v}; primary + {} replicas; {}",
                c.redis_replicas, c.redis_wait
            );
        }
        _ => {}
    }
    let mut headers = vec!["system path op value B"];
    headers.extend(SUMMARY_HEADERS);
    if floor.is_some() {
        headers.push("p50 ×rtt");
    }
    let mut t = Table::new(&headers);
    for s in &c.series {
        let mut row = vec![format!(
            "{} {} {} {}",
            s.system, s.path, s.op, s.value_bytes
        )];
        row.extend(summary_cells(&s.latency));
        if let Some(f) = floor {
            row.push(
                f.multiple(s.latency.p50_ns)
                    .map_or("—".into(), |m| format!("{m:.1}")),
            );
        }
        t.row(row);
    }
    out.push_str(&t.render());
    let mut r = Table::new(&["ratio (value B)", "p50 ×", "p99 ×"]);
    for x in &c.ratios {
        r.row(vec![
            format!("{} / {} ({})", x.numerator, x.denominator, x.value_bytes),
            format!("{:.1}", x.p50),
            format!("{:.1}", x.p99),
        ]);
    }
    out.push_str(&r.render());
    out
}

fn rate(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.0}"))
}

fn ms(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.1}"))
}

/// `reconfig` tables.
pub fn render_reconfig(r: &ReconfigReport) -> String {
    let mut out = format!(
        "\nRECONFIG ({} replica slots, {} members at the start, first leader {}; {} client \
         thread(s), {} B SETs over {} keys each, closed loop, wait {}; writes counted in {} ms \
         buckets by completion time; {:.1} s)\nclients: {}; attempt timeout {} µs; heartbeat {} \
         µs, Δ {} µs\n",
        r.replicas,
        r.initial_members,
        r.first_leader,
        r.clients,
        r.value_bytes,
        r.keys_per_client,
        r.client_wait,
        r.bucket_ms,
        r.duration_ms / 1000.0,
        r.client_placement,
        r.client_attempt_timeout_us,
        r.timing.heartbeat_period_us,
        r.timing.fd_check_period_us,
    );
    let mut t = Table::new(&[
        "change",
        "asked ms",
        "took ms",
        "leader",
        "configuration committed",
        "before /s",
        "during /s",
        "after /s",
        "min /s",
        "stall ms",
    ]);
    for c in &r.changes {
        t.row(vec![
            format!("{} ({})", c.scheduled, c.request),
            format!("{:.0}", c.asked_ms),
            ms(c.took_ms),
            format!(
                "{}→{}",
                c.leader_before.map_or("?".into(), |l| l.to_string()),
                c.leader_after.map_or("?".into(), |l| l.to_string())
            ),
            match (&c.configuration, &c.error) {
                (Some(g), _) => g.clone(),
                (None, Some(e)) => format!("FAILED: {e}"),
                (None, None) => "—".into(),
            },
            rate(c.ops_per_s_before),
            rate(c.ops_per_s_during),
            rate(c.ops_per_s_after),
            rate(c.ops_per_s_min),
            format!("{:.0}", c.stall_ms),
        ]);
    }
    out.push_str(&t.render());
    let _ = writeln!(
        out,
        "before/after: mean over {:.0} ms before the change was asked and after it was \
         confirmed (cut at the next change); min and stall (longest run of empty buckets): from \
         asked to the next change",
        r.window_ms
    );
    let mut sorted = r.bucket_ops.clone();
    sorted.sort_unstable();
    let per_s = |ops: u64| ops as f64 * 1000.0 / r.bucket_ms;
    if !sorted.is_empty() {
        let _ = writeln!(
            out,
            "throughput over the run: mean {:.0}/s; buckets min {:.0}, median {:.0}, max {:.0} /s",
            r.mean_rate(),
            per_s(sorted[0]),
            per_s(sorted[sorted.len() / 2]),
            per_s(sorted[sorted.len() - 1]),
        );
    }
    if let Some(g) = &r.final_configuration {
        let _ = writeln!(out, "final configuration: {g}");
    }
    let w = &r.writes;
    let _ = writeln!(
        out,
        "writes: {} acknowledged ({} of them completed after the last full bucket), {} failed \
         (in doubt); {} keys read back: {} lost{}",
        w.acknowledged,
        w.after_last_bucket,
        w.failed,
        w.keys_checked,
        w.lost,
        if w.lost == 0 { "" } else { " — LOST WRITES" }
    );
    if let Some(f) = &w.last_failure {
        let _ = writeln!(out, "last failed write: {f}");
    }
    for e in &w.lost_examples {
        let _ = writeln!(out, "lost: {e}");
    }
    out
}

/// `recovery` tables.
pub fn render_recovery(r: &RecoveryReport) -> String {
    let mut out = format!(
        "\nRECOVERY ({} replicas; {} MiB of state: {} values of {} B, filled in {:.1} s at {:.0} \
         MB/s; snapshot region {} MiB, log ring {} MiB, prune grace {} s; one client, \
         sequential {} B SETs to member {} (the leader), closed loop)\n",
        r.replicas,
        r.state_mib,
        r.fill_keys,
        r.fill_value_bytes,
        r.fill_s,
        r.fill_mb_per_s,
        r.snapshot_bytes_max >> 20,
        r.log_ring_bytes >> 20,
        r.prune_grace_us as f64 / 1e6,
        r.probe_value_bytes,
        r.leader,
    );
    let mut headers = vec!["window"];
    headers.extend(SUMMARY_HEADERS);
    headers.extend(["ms", "ops/s"]);
    let mut t = Table::new(&headers);
    for w in &r.windows {
        let mut row = vec![w.name.clone()];
        row.extend(summary_cells(&w.latency));
        row.push(format!("{:.0}", w.duration_ms));
        row.push(format!("{:.0}", w.ops_per_sec));
        t.row(row);
    }
    out.push_str(&t.render());
    for w in &r.windows {
        if w.leader_counters.is_empty() {
            continue;
        }
        let counters: Vec<String> = w
            .leader_counters
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(out, "leader during {}: {}", w.name, counters.join(", "));
    }
    let ratio = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.2}×"));
    let _ = writeln!(
        out,
        "recovering / baseline: p99 {}, p99.9 {}",
        ratio(r.p99_ratio),
        ratio(r.p999_ratio)
    );
    let x = &r.transfer;
    let _ = writeln!(
        out,
        "transfer: member {} from donor {} (leader {}); after its restart: status up {} ms, \
         snapshot ready {} ms, copied and restored {} ms, caught up {} ms",
        x.member,
        x.donor.map_or("?".into(), |d| d.to_string()),
        x.leader_at_copy.map_or("?".into(), |d| d.to_string()),
        ms(x.started_ms),
        ms(x.snapshot_ready_ms),
        ms(x.completed_ms),
        ms(x.caught_up_ms),
    );
    let _ = writeln!(
        out,
        "          snapshot {} bytes ({:.1} MiB), {} bytes copied over every attempt; copy {} \
         ms at {} MB/s; {} MB/s from the restart; {} recoveries completed, {} abandoned",
        x.bytes_total,
        x.bytes_total as f64 / (1u64 << 20) as f64,
        x.bytes_copied,
        ms(x.copy_ms),
        rate(x.copy_mb_per_s),
        rate(x.end_to_end_mb_per_s),
        x.completed,
        x.abandoned,
    );
    if let Some(f) = &x.failure {
        let _ = writeln!(out, "FAILED: {f}");
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `bulk-sync` tables.
pub fn render_bulk_sync(b: &crate::bulk_sync::BulkSyncReport) -> String {
    let mib = |bytes: u64| bytes as f64 / (1u64 << 20) as f64;
    let gib = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.2}"));
    let s = &b.store;
    let f = &b.fill;
    let mut out = format!(
        "\nBULK SYNC ({} replicas, mode {}; store: {:.1} MiB used of a {:.1} MiB region \
         ({:.1} MiB asked), {} entries, {} slabs of {}, {} B values in {} B chunks; copy WRITEs \
         of {}, {} in flight; view lease {} µs; primary's status polled every {:.0} ms, \
         snapshots {})\n",
        b.replicas,
        b.mode,
        mib(f.used_bytes),
        mib(s.region_bytes),
        mib(b.target_bytes),
        s.entry_count,
        s.slab_count,
        bytes_label(u64::from(s.slab_bytes)),
        b.value_bytes,
        s.item_chunk_bytes,
        bytes_label(u64::from(s.sync_chunk_bytes)),
        s.sync_in_flight,
        b.views_lease_us,
        b.poll_ms,
        b.status_snapshot_period_ms
            .map_or("—".into(), |p| format!("every {p:.0} ms")),
    );
    let _ = writeln!(
        out,
        "fill: {} items ({} keys at the primary) in {:.2} s by {} pipelined client thread ({} in \
         flight): {:.0} items/s, {:.1} MiB/s of store, {:.1} MB/s of values",
        f.items,
        f.keys,
        f.seconds,
        f.client_threads,
        f.depth,
        f.items_per_s,
        f.used_mib_per_s,
        f.values_mb_per_s
    );
    if f.items_per_s_by_part.len() > 1 {
        let _ = writeln!(
            out,
            "fill rate by tenth of the items (items/s): {}",
            f.items_per_s_by_part
                .iter()
                .map(|r| format!("{r:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let mut t = Table::new(&[
        "round",
        "member",
        "kill→exit ms",
        "kill→noticed ms",
        "restart→status ms",
        "restart→copying ms",
        "restart→synced ms",
        "restart→in view ms",
        "copy window ms",
        "copied MiB",
        "GiB/s",
        "window GiB/s",
        "progress GiB/s",
    ]);
    for r in &b.rounds {
        t.row(vec![
            format!(
                "{}{}",
                r.round,
                if r.failure.is_some() {
                    " FAILED"
                } else if r.disturbed.is_some() {
                    " not counted"
                } else {
                    ""
                }
            ),
            format!("{} (from {})", r.member, r.primary),
            format!("{:.1}", r.kill_to_exit_ms),
            ms(r.kill_to_noticed_ms),
            ms(r.status_up_ms),
            ms(r.copying_seen_ms),
            ms(r.synced_ms),
            ms(r.in_view_ms),
            ms(r.copy_window_ms),
            format!("{:.1}", mib(r.bytes_copied)),
            gib(r.gib_per_s),
            gib(r.copy_window_gib_per_s),
            gib(r.progress_gib_per_s),
        ]);
    }
    if let Some(m) = &b.median {
        t.row(vec![
            format!("median of {}", m.rounds),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            format!("{:.1}", m.synced_ms),
            String::new(),
            String::new(),
            format!("{:.1}", mib(m.bytes_copied)),
            format!("{:.2}", m.gib_per_s),
            gib(m.copy_window_gib_per_s),
            gib(m.progress_gib_per_s),
        ]);
    }
    out.push_str(&t.render());
    let _ = writeln!(
        out,
        "times: the primary's status snapshots' own time stamps (whole ms, one snapshot per \
         publish period); GiB/s = copied / (restart → synced); window = copied / (last \
         snapshot before the copy → first after it), a lower bound of the copy's own rate; \
         progress = slope of the primary's done_bytes over the snapshots that saw the copy \
         running"
    );
    for r in &b.rounds {
        let at = |f: f64| ms(r.reached_ms(f));
        let _ = writeln!(
            out,
            "round {} progress (ms after the restart): 25 % posted {}, 50 % {}, 75 % {}, synced \
             {} ({} snapshots)",
            r.round,
            at(0.25),
            at(0.5),
            at(0.75),
            ms(r.synced_ms),
            r.samples.len()
        );
        if let Some(f) = &r.failure {
            let _ = writeln!(out, "round {} FAILED: {f}", r.round);
        }
        if let Some(d) = &r.disturbed {
            let _ = writeln!(out, "round {} not counted: {d}", r.round);
        }
    }
    let c = &b.memcpy;
    let _ = writeln!(
        out,
        "copies on this machine, same run ({} per repetition in {} pieces, {}):",
        bytes_label(c.buffer_bytes),
        bytes_label(c.piece_bytes),
        c.core
            .map_or("unpinned".to_string(), |k| format!("core {k}"))
    );
    let mut t = Table::new(&["copy", "reps", "GiB/s", "min", "max", "bulk sync / this"]);
    let bulk = b.median.as_ref().map(|m| m.gib_per_s);
    for x in &c.copies {
        t.row(vec![
            x.name.clone(),
            x.repetitions.to_string(),
            format!("{:.2}", x.gib_per_s),
            format!("{:.2}", x.gib_per_s_min),
            format!("{:.2}", x.gib_per_s_max),
            bulk.filter(|_| x.gib_per_s > 0.0).map_or("—".into(), |g| {
                format!("{:.0} %", 100.0 * g / x.gib_per_s)
            }),
        ]);
    }
    out.push_str(&t.render());
    for x in &c.copies {
        let _ = writeln!(out, "  {}: {}", x.name, x.what);
    }
    let r = &b.replay;
    let _ = writeln!(
        out,
        "{}: {:.2} s{}",
        r.label,
        r.seconds,
        r.vs_bulk_copy
            .map_or(String::new(), |v| format!(" ({v:.1}× the bulk copy)"))
    );
    for n in &b.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// Goals table.
pub fn render_goals(goals: &[Goal]) -> String {
    if goals.is_empty() {
        return String::new();
    }
    let mut t = Table::new(&["goal", "target", "measured", "met"]);
    for g in goals {
        t.row(vec![
            g.name.clone(),
            g.target.clone(),
            g.measured.map_or("—".into(), |v| {
                if v >= 1000.0 {
                    format!("{v:.0} {}", g.unit)
                } else {
                    format!("{v:.2} {}", g.unit)
                }
            }),
            g.met
                .map_or("—".into(), |m| if m { "yes" } else { "no" }.into()),
        ]);
    }
    format!("\nGOALS\n{}", t.render())
}

/// The whole report for the terminal.
pub fn render(r: &Report) -> String {
    let mut out = render_setup(&r.setup);
    if let Some(f) = &r.floor {
        out.push_str(&render_floor(f));
    }
    if let Some(l) = &r.latency {
        out.push_str(&render_latency(l, r.floor.as_ref()));
    }
    if let Some(t) = &r.throughput {
        out.push_str(&render_throughput(t));
    }
    if let Some(w) = &r.workload {
        out.push_str(&render_workload(w));
    }
    if let Some(f) = &r.failover {
        out.push_str(&render_failover(f));
    }
    if let Some(c) = &r.compare {
        out.push_str(&render_compare(c, r.floor.as_ref()));
    }
    if let Some(c) = &r.reconfig {
        out.push_str(&render_reconfig(c));
    }
    if let Some(c) = &r.recovery {
        out.push_str(&render_recovery(c));
    }
    if let Some(l) = &r.lease {
        out.push_str(&render_lease(l));
    }
    if let Some(m) = &r.multicast {
        out.push_str(&render_multicast(m));
    }
    if let Some(b) = &r.bulk_sync {
        out.push_str(&render_bulk_sync(b));
    }
    out.push_str(&render_goals(&r.goals));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_their_columns() {
        let mut t = Table::new(&["name", "p50 µs"]);
        t.row(vec!["a".into(), "1.5".into()]);
        t.row(vec!["longer".into(), "1234.5".into()]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "name    p50 µs");
        assert_eq!(lines[2], "a          1.5");
        assert_eq!(lines[3], "longer  1234.5");
    }
}
