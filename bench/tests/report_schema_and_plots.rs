//! The JSON document round-trips through serde, and every SVG plot is
//! well-formed XML with text in it (no cluster needed).

use verbatim_bench::compare::{ratios, CompareReport, CompareSeries};
use verbatim_bench::failover::{FailoverReport, KillRecord, PhaseDists};
use verbatim_bench::latency::{LatencyPoint, LatencyReport};
use verbatim_bench::report::{render, Report};
use verbatim_bench::setup::{CpuState, Machine, Setup};
use verbatim_bench::stats::{cdf, histogram, record, Summary};
use verbatim_bench::throughput::{Batching, ThroughputPoint, ThroughputReport};
use verbatim_bench::workload::{WorkloadPoint, WorkloadReport};

fn hist(base_ns: u64) -> hdrhistogram::Histogram<u64> {
    let mut h = histogram();
    for i in 0..1000u64 {
        record(&mut h, base_ns + i * base_ns / 500);
    }
    h
}

/// A report with every section filled from synthetic histograms.
fn sample() -> Report {
    let mut r = Report::new(Setup {
        fabric: "shm".into(),
        poll: "leader-busy".into(),
        replica_cores: vec![1],
        client_core: Some(0),
        client_wait: "spin".into(),
        group_sizes: vec![3, 5],
        machine: Machine::probe(),
        cpu: CpuState {
            load_average: [0.1, 0.2, 0.3],
            busy_fraction: vec![0.01, 0.02],
            sample_ms: 500,
            vcpus_before: "idle".into(),
            during: "test".into(),
        },
        date_utc: "2026-01-01T00:00:00Z".into(),
        replica_binary: "/x/target/release/verbatim".into(),
        replica_build: "release".into(),
        bench_build: "release".into(),
        overrides: vec!["timing.heartbeat_period_us=200".into()],
        timing: Default::default(),
        method: "closed loop".into(),
        source_revision: "abc1234-dirty".into(),
    });
    let mut points = Vec::new();
    for replicas in [3u8, 5] {
        for (k, size) in [8usize, 64, 4096].into_iter().enumerate() {
            for (op, base) in [("set", 1_500u64), ("get", 1_000)] {
                let h = hist(base * (k as u64 + 1) + u64::from(replicas) * 100);
                points.push(LatencyPoint {
                    replicas,
                    value_bytes: size,
                    op: op.into(),
                    latency: Summary::of(&h),
                    service: None,
                    ops_per_sec: 500_000.0,
                    cdf: cdf(&h),
                });
            }
        }
    }
    r.latency = Some(LatencyReport {
        mode: "closed-loop".into(),
        rate_per_s: None,
        ops_per_point: 1000,
        warmup_per_point: 100,
        keys: 1000,
        points,
    });
    r.throughput = Some(ThroughputReport {
        replicas: 3,
        value_bytes: 64,
        client_placement: "pinned".into(),
        client_wait: "spin".into(),
        window_s: 1.0,
        points: (1..=4)
            .flat_map(|c| {
                ["set", "get"].map(|op| ThroughputPoint {
                    clients: c,
                    depth: 1,
                    op: op.into(),
                    ops: 100_000 * c as u64,
                    window_s: 1.0,
                    ops_per_sec: 100_000.0 * c as f64,
                    latency: Summary::of(&hist(2_000)),
                    batching: Batching {
                        entries_appended: 1000,
                        reads_served: 500,
                        read_rounds: 250,
                        reads_per_round: Some(2.0),
                        ..Batching::default()
                    },
                })
            })
            .collect(),
        pipelined: "not measured".into(),
        notes: vec!["note".into()],
    });
    r.workload = Some(WorkloadReport {
        replicas: 3,
        keys: 100_000,
        value_bytes: 64,
        theta: 0.99,
        seed: 1,
        window_s: 1.0,
        client_wait: "spin".into(),
        points: vec![WorkloadPoint {
            mix: "A".into(),
            distribution: "zipfian".into(),
            clients: 1,
            ops: 1000,
            ops_per_sec: 1000.0,
            reads: Summary::of(&hist(1_000)),
            updates: Summary::default(),
        }],
    });
    let kill = |i: usize, signal: &str| KillRecord {
        index: i,
        signal: signal.into(),
        old_leader: 0,
        old_term: 1,
        new_leader: Some(1),
        new_term: Some(2),
        process_exit_us: (signal == "SIGKILL").then_some(900 + i as u64 * 10),
        detection_us: Some(60),
        election_us: Some(400),
        first_commit_us: Some(70),
        detected_by: Some("pidfd".into()),
        client_gap_us: Some(1500),
        exit_to_client_us: Some(600),
        longest_op_us: 1500,
        rejoin_us: (signal == "SIGSTOP").then_some(3000),
        fd_period_us: Some(5000),
    };
    let sigkill: Vec<KillRecord> = (0..3).map(|i| kill(i, "SIGKILL")).collect();
    let sigstop: Vec<KillRecord> = (0..3).map(|i| kill(i, "SIGSTOP")).collect();
    r.failover = Some(FailoverReport {
        replicas: 3,
        kills: 3,
        timing: Default::default(),
        client_attempt_timeout_us: 10_000,
        sigkill_dist: PhaseDists::of(&sigkill),
        sigkill,
        sigstop_dist: PhaseDists::of(&sigstop),
        sigstop,
    });
    let series: Vec<CompareSeries> = [
        ("redis", "resp-tcp", "set", 100_000u64),
        ("redis", "resp-tcp", "set+wait", 250_000),
        ("redis", "resp-tcp", "get", 70_000),
        ("verbatim", "resp-tcp", "set", 60_000),
        ("verbatim", "resp-tcp", "get", 50_000),
        ("verbatim", "shm", "set", 2_000),
        ("verbatim", "shm", "get", 1_500),
    ]
    .into_iter()
    .map(|(s, p, o, ns)| {
        let h = hist(ns);
        CompareSeries {
            system: s.into(),
            path: p.into(),
            op: o.into(),
            value_bytes: 64,
            latency: Summary::of(&h),
            cdf: cdf(&h),
        }
    })
    .collect();
    r.compare = Some(CompareReport {
        redis_version: Some("Redis server v=7".into()),
        redis_skipped: None,
        redis_replicas: 2,
        replicas: 3,
        ops_per_series: 1000,
        tcp_client: "blocking read".into(),
        vcpus: "idle".into(),
        redis_wait: "SET then WAIT 2 0".into(),
        ratios: ratios(&series, 64),
        series,
    });
    r.evaluate_goals();
    r
}

#[test]
fn the_json_document_round_trips() {
    let r = sample();
    let text = serde_json::to_string_pretty(&r).unwrap();
    let back: Report = serde_json::from_str(&text).unwrap();
    // (Not assert_eq!: a failure would print megabytes of CDF points.)
    assert!(back == r, "the report changed in a JSON round trip");
    // The fields a reader looks for are where the README says.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["setup"]["fabric"], "shm");
    assert_eq!(v["setup"]["poll"], "leader-busy");
    assert!(v["setup"]["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(v["latency"]["points"][0]["latency"]["p50_ns"]
        .as_u64()
        .is_some());
    assert!(v["latency"]["points"][0]["latency"]["p98_ns"]
        .as_u64()
        .is_some());
    assert!(v["failover"]["sigkill_dist"]["client_gap"]["p90"]
        .as_u64()
        .is_some());
    assert!(v["compare"]["ratios"][0]["p50"].as_f64().unwrap() > 1.0);
    assert_eq!(v["goals"].as_array().unwrap().len(), 6);
}

#[test]
fn the_terminal_report_has_every_section_and_the_setup() {
    let text = render(&sample());
    for needle in [
        "setup: fabric shm, poll leader-busy",
        "machine:",
        "cpus before the run: idle",
        "LATENCY",
        "THROUGHPUT",
        "WORKLOAD",
        "FAILOVER",
        "COMPARE",
        "GOALS",
        "p98 µs",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn every_plot_is_well_formed_svg_with_text() {
    let dir = tempfile::tempdir().unwrap();
    let files = verbatim_bench::plot::write_all(&sample(), dir.path()).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "latency_vs_size.svg",
            "latency_cdf.svg",
            "throughput_vs_clients.svg",
            "failover_timeline.svg",
            "compare_cdf.svg"
        ]
    );
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(text.len() > 1000, "{} is nearly empty", f.display());
        let doc = roxmltree::Document::parse(&text)
            .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", f.display()));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .collect();
        assert!(
            texts.len() > 5,
            "{}: too little text: {texts:?}",
            f.display()
        );
        let shapes = doc
            .descendants()
            .filter(|n| {
                n.has_tag_name("polyline") || n.has_tag_name("rect") || n.has_tag_name("path")
            })
            .count();
        assert!(shapes > 3, "{}: nothing drawn", f.display());
    }
    let timeline = std::fs::read_to_string(dir.path().join("failover_timeline.svg")).unwrap();
    assert!(timeline.contains("SIGKILL #1") && timeline.contains("SIGSTOP #3"));
}
