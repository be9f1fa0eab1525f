//! A [`Snapshot`] in the Prometheus text exposition format (version
//! 0.0.4), what a replica's `/metrics` endpoint serves so that the figures
//! the console shows can be scraped.
//!
//! Written by hand rather than through a client library's registry: the
//! snapshot is already the single source of the numbers (the poll loop
//! publishes it without blocking), so the exposition is a pure function of
//! it, and a registry of live metric handles would put updates on the
//! replica's hot path for nothing.
//!
//! Names are `verbatim_*`, units in the name (`_seconds`, `_bytes`); every
//! series carries `member` (this replica's id) and `cluster`.

use crate::Snapshot;
use std::fmt::Write as _;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Escapes a label value (backslash, double quote, newline).
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A metric name from a counter key: ASCII letters, digits and `_` only.
fn metric_name(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

struct Out {
    text: String,
    labels: String,
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, extra: &str, value: f64) {
        let sep = if extra.is_empty() { "" } else { "," };
        let _ = writeln!(self.text, "{name}{{{}{sep}{extra}}} {value}", self.labels);
    }

    fn one(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, "", value);
    }
}

/// The exposition of one snapshot.
pub fn render(s: &Snapshot) -> String {
    let mut o = Out {
        text: String::with_capacity(8 * 1024),
        labels: format!(
            "member=\"{}\",cluster=\"{}\"",
            s.id,
            escape(&s.config.cluster)
        ),
    };
    o.one("verbatim_up", "gauge", "1 while the replica answers.", 1.0);
    o.one(
        "verbatim_uptime_seconds",
        "gauge",
        "Seconds since the replica started.",
        s.uptime_ms as f64 / 1e3,
    );
    o.family("verbatim_role", "gauge", "1 for the role the replica has.");
    for role in ["leader", "follower", "candidate"] {
        let v = if s.role == role { 1.0 } else { 0.0 };
        o.sample("verbatim_role", &format!("role=\"{role}\""), v);
    }
    o.one("verbatim_term", "gauge", "Current term.", s.term as f64);
    o.one(
        "verbatim_leader",
        "gauge",
        "Id of the known leader (-1: none).",
        s.leader.map_or(-1.0, f64::from),
    );

    o.family(
        "verbatim_log_position_bytes",
        "gauge",
        "Log pointers as byte positions since the log began (DARE 3.1.1).",
    );
    for (p, v) in [
        ("head", s.log.head_pos),
        ("apply", s.log.apply_pos),
        ("commit", s.log.commit_pos),
        ("tail", s.log.tail_pos),
    ] {
        o.sample(
            "verbatim_log_position_bytes",
            &format!("pointer=\"{p}\""),
            v as f64,
        );
    }
    o.one(
        "verbatim_commit_index",
        "counter",
        "Entries known committed (its rate is the commit rate).",
        s.log.commit_index as f64,
    );
    o.one(
        "verbatim_apply_index",
        "counter",
        "Entries applied.",
        s.log.apply_index as f64,
    );
    o.one(
        "verbatim_log_ring_bytes",
        "gauge",
        "Bytes of the log ring.",
        s.log.ring_bytes as f64,
    );
    o.one(
        "verbatim_log_used_bytes",
        "gauge",
        "Bytes between head and tail.",
        s.log.tail_pos.saturating_sub(s.log.head_pos) as f64,
    );

    o.family(
        "verbatim_request_latency_seconds",
        "summary",
        "Server-side request latency (arrival to reply) over the last status window.",
    );
    for (kind, p) in [("write", &s.latency.writes), ("read", &s.latency.reads)] {
        for (q, v) in [("0.5", p.p50_ns), ("0.99", p.p99_ns), ("1", p.max_ns)] {
            o.sample(
                "verbatim_request_latency_seconds",
                &format!("kind=\"{kind}\",quantile=\"{q}\""),
                v as f64 / 1e9,
            );
        }
        o.sample(
            "verbatim_request_latency_seconds_count",
            &format!("kind=\"{kind}\""),
            p.count as f64,
        );
    }
    o.one(
        "verbatim_requests_per_second",
        "gauge",
        "Requests answered per second over the last status window.",
        s.latency.ops_per_sec,
    );
    if let (Some(&batches), Some(&entries)) = (
        s.counters.get("log_batches"),
        s.counters.get("entries_appended"),
    ) {
        o.one(
            "verbatim_batch_entries_mean",
            "gauge",
            "Entries per log append, averaged since start.",
            if batches == 0 {
                0.0
            } else {
                entries as f64 / batches as f64
            },
        );
    }

    o.family(
        "verbatim_peer_lag_bytes",
        "gauge",
        "Bytes a peer's log lags behind the leader's tail (leader's view).",
    );
    for p in &s.peers {
        o.sample(
            "verbatim_peer_lag_bytes",
            &format!("peer=\"{}\"", p.id),
            p.lag_bytes as f64,
        );
    }
    o.family(
        "verbatim_peer_reachable",
        "gauge",
        "1 while the peer is reachable.",
    );
    for p in &s.peers {
        let v = if p.reachable { 1.0 } else { 0.0 };
        o.sample("verbatim_peer_reachable", &format!("peer=\"{}\"", p.id), v);
    }
    o.family(
        "verbatim_peer_replication",
        "gauge",
        "1 for the replication state of each peer (leader's view).",
    );
    for p in &s.peers {
        o.sample(
            "verbatim_peer_replication",
            &format!("peer=\"{}\",state=\"{}\"", p.id, escape(&p.replication)),
            1.0,
        );
    }

    o.one(
        "verbatim_recovering",
        "gauge",
        "1 while this replica copies a snapshot (DARE 3.4 recovery).",
        if s.recovery.active { 1.0 } else { 0.0 },
    );
    o.one(
        "verbatim_recovery_copied_bytes",
        "gauge",
        "Bytes of the snapshot copied so far.",
        s.recovery.bytes_copied as f64,
    );
    o.one(
        "verbatim_recovery_restored_bytes",
        "gauge",
        "Bytes of the copied snapshot restored so far.",
        s.recovery.bytes_restored as f64,
    );
    o.one(
        "verbatim_recovery_total_bytes",
        "gauge",
        "Bytes of the snapshot being copied (0 until the donor wrote it).",
        s.recovery.bytes_total as f64,
    );
    o.one(
        "verbatim_recoveries",
        "counter",
        "Recoveries this replica completed.",
        s.recovery.completed as f64,
    );
    o.one(
        "verbatim_snapshots_served",
        "counter",
        "Snapshots this replica gave to recovering ones.",
        s.recovery.served as f64,
    );
    o.one(
        "verbatim_failovers_led",
        "counter",
        "Leader changes this replica led (kept in the status window).",
        s.failovers.len() as f64,
    );
    if let Some(f) = s.failovers.last() {
        o.family(
            "verbatim_last_failover_phase_seconds",
            "gauge",
            "Phases of the last leader change this replica led.",
        );
        let by = escape(&f.detected_by);
        for (phase, v) in [
            ("detection", Some(f.detection_us)),
            ("election", Some(f.election_us)),
            ("first_commit", f.first_commit_us),
        ] {
            if let Some(v) = v {
                o.sample(
                    "verbatim_last_failover_phase_seconds",
                    &format!("phase=\"{phase}\",detected_by=\"{by}\""),
                    v as f64 / 1e6,
                );
            }
        }
    }

    for (key, v) in &s.counters {
        let name = format!("verbatim_{}_total", metric_name(key));
        o.one(
            &name,
            "counter",
            &format!("Counter `{}`.", escape(key)),
            *v as f64,
        );
    }
    o.text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Failover, PeerSnapshot};

    fn snapshot() -> Snapshot {
        let mut s = Snapshot {
            id: 2,
            role: "leader".into(),
            term: 7,
            leader: Some(2),
            ..Snapshot::default()
        };
        s.config.cluster = "prod \"a\"".into();
        s.log.commit_index = 41;
        s.log.head_pos = 100;
        s.log.tail_pos = 612;
        s.latency.writes.p50_ns = 1_500;
        s.latency.writes.count = 9;
        s.counters.insert("log_batches".into(), 4);
        s.counters.insert("entries_appended".into(), 10);
        s.counters.insert("rows-rejected".into(), 3);
        s.peers.push(PeerSnapshot {
            id: 0,
            reachable: true,
            replication: "replicating".into(),
            lag_bytes: 64,
            ..PeerSnapshot::default()
        });
        s.failovers.push(Failover {
            term: 7,
            detection_us: 250,
            election_us: 300,
            first_commit_us: Some(40),
            detected_by: "notice".into(),
            decided_by: "election".into(),
            ..Failover::default()
        });
        s
    }

    #[test]
    fn every_sample_line_is_well_formed_and_labelled() {
        let text = render(&snapshot());
        let mut families = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(families.insert(name.to_string()), "{name} declared twice");
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            value
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("value of {line}"));
            let name = &series[..series.find('{').unwrap()];
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{name}"
            );
            assert!(series.contains("member=\"2\""), "{line}");
            assert!(series.contains("cluster=\"prod \\\"a\\\"\""), "{line}");
            assert!(series.ends_with('}'), "{line}");
        }
    }

    #[test]
    fn the_figures_of_the_snapshot_come_out() {
        let text = render(&snapshot());
        let has = |s: &str| assert!(text.contains(s), "missing {s} in\n{text}");
        has("verbatim_role{member=\"2\",cluster=\"prod \\\"a\\\"\",role=\"leader\"} 1");
        has("verbatim_term{member=\"2\",cluster=\"prod \\\"a\\\"\"} 7");
        has("verbatim_commit_index{member=\"2\",cluster=\"prod \\\"a\\\"\"} 41");
        has("verbatim_log_used_bytes{member=\"2\",cluster=\"prod \\\"a\\\"\"} 512");
        has("kind=\"write\",quantile=\"0.5\"} 0.0000015");
        has("verbatim_batch_entries_mean{member=\"2\",cluster=\"prod \\\"a\\\"\"} 2.5");
        has("peer=\"0\",state=\"replicating\"} 1");
        has("phase=\"election\",detected_by=\"notice\"} 0.0003");
        has("verbatim_rows_rejected_total{member=\"2\",cluster=\"prod \\\"a\\\"\"} 3");
    }
}
