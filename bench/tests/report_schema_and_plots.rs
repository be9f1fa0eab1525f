//! The JSON document round-trips through serde, and every SVG plot is
//! well-formed XML with text in it (no cluster needed).

use verbatim_bench::bulk_sync::{
    BulkSyncReport, CopyBandwidth, FillRecord, MemcpyReport, ReplayEstimate, StoreSizing,
    SyncMedian, SyncRound, SyncSample,
};
use verbatim_bench::compare::{ratios, CompareReport, CompareSeries};
use verbatim_bench::failover::{FailoverReport, KillRecord, PhaseDists};
use verbatim_bench::latency::{LatencyPoint, LatencyReport};
use verbatim_bench::reconfig::{ChangeRecord, ReconfigReport, WriteCheck};
use verbatim_bench::recovery::{LatencyWindow, RecoveryReport, Transfer};
use verbatim_bench::report::{render, Report};
use verbatim_bench::setup::{CpuState, Machine, Setup};
use verbatim_bench::stats::{cdf, histogram, record, Summary};
use verbatim_bench::throughput::{Batching, ThroughputPoint, ThroughputReport};
use verbatim_bench::workload::{ModeRun, WorkloadPoint, WorkloadReport};

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
        modes: vec![
            ModeRun {
                mode: "log".into(),
                overrides: vec!["cluster.mode=log".into()],
                skipped: None,
            },
            ModeRun {
                mode: "primary-backup".into(),
                overrides: vec![
                    "views.lease_us=50".into(),
                    "cluster.mode=primary-backup".into(),
                ],
                skipped: None,
            },
            ModeRun {
                mode: "backup-memory".into(),
                overrides: vec!["cluster.mode=backup-memory".into()],
                skipped: Some("manifest: unknown variant `backup-memory`".into()),
            },
        ],
        clock_ticks_per_s: 100,
        points: ["log", "primary-backup"]
            .into_iter()
            .enumerate()
            .map(|(i, mode)| WorkloadPoint {
                mode: mode.into(),
                mix: "A".into(),
                distribution: "zipfian".into(),
                clients: 1,
                ops: 1000,
                ops_per_sec: 1000.0,
                reads: Summary::of(&hist(1_000)),
                updates: Summary::default(),
                leader: Some(0),
                leader_cpu_us_per_op: Some(1000.0),
                backups_cpu_us_per_op: Some(10.0 * (i + 1) as f64),
            })
            .collect(),
        notes: Vec::new(),
    });
    let kill = |i: usize, signal: &str| KillRecord {
        index: i,
        signal: signal.into(),
        old_leader: 0,
        also_killed: None,
        coordinator_leader_killed: true,
        old_term: 1,
        new_leader: Some(1),
        new_term: Some(2),
        process_exit_us: (signal == "SIGKILL").then_some(900 + i as u64 * 10),
        detection_us: Some(60),
        election_us: Some(400),
        first_commit_us: Some(70),
        view_wait_us: Some(30),
        detected_by: Some("pidfd".into()),
        client_gap_us: Some(1500),
        exit_to_client_us: Some(600),
        longest_op_us: 1500,
        rejoin_us: (signal == "SIGSTOP").then_some(3000),
        fd_period_us: Some(5000),
        notice_us: (signal == "SIGKILL").then_some(300),
        notice_to_client_us: (signal == "SIGKILL").then_some(1200),
        from_kill_seen_us: (signal == "SIGKILL").then_some(350),
        from_kill_suspected_us: (signal == "SIGKILL").then_some(410),
        from_kill_elected_us: (signal == "SIGKILL").then_some(810),
        from_kill_first_commit_us: (signal == "SIGKILL").then_some(880),
    };
    let sigkill: Vec<KillRecord> = (0..3).map(|i| kill(i, "SIGKILL")).collect();
    let sigstop: Vec<KillRecord> = (0..3).map(|i| kill(i, "SIGSTOP")).collect();
    r.failover = Some(FailoverReport {
        replicas: 3,
        kills: 3,
        with_coordinator_leader: false,
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
    let group = |size: u8, members: Vec<u8>| verbatim_status::GroupConfiguration {
        state: "stable".into(),
        size,
        new_size: size,
        members,
        index: 7,
        committed: true,
        is_member: true,
        in_progress: false,
        ..Default::default()
    };
    let changes: Vec<ChangeRecord> = [
        ("add 3", "member add 3", group(4, vec![0, 1, 2, 3]), 0, 0),
        ("add 4", "member add 4", group(5, vec![0, 1, 2, 3, 4]), 0, 0),
        (
            "remove leader",
            "member remove 0",
            group(5, vec![1, 2, 3, 4]),
            0,
            3,
        ),
        ("resize 3", "member resize 3", group(3, vec![1, 2]), 3, 1),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (scheduled, request, g, before, after))| {
        let asked = 1000.0 * (i + 1) as f64;
        ChangeRecord {
            index: i,
            scheduled: scheduled.into(),
            request: request.into(),
            scheduled_ms: asked,
            asked_ms: asked,
            confirmed_ms: Some(asked + 12.0),
            took_ms: Some(12.0),
            leader_before: Some(before),
            leader_after: Some(after),
            leader_after_ms: Some(asked + 15.0),
            leader_after_term: Some(2),
            configuration: Some(g.describe()),
            group: Some(g),
            error: None,
            ops_per_s_before: Some(500_000.0),
            ops_per_s_during: Some(400_000.0),
            ops_per_s_after: Some(450_000.0),
            ops_per_s_min: Some(0.0),
            stall_ms: 10.0,
        }
    })
    .collect();
    r.reconfig = Some(ReconfigReport {
        replicas: 5,
        initial_members: 3,
        clients: 1,
        client_wait: "spin".into(),
        client_placement: "pinned".into(),
        client_attempt_timeout_us: 10_000,
        value_bytes: 64,
        keys_per_client: 1000,
        timing: Default::default(),
        first_leader: 0,
        bucket_ms: 10.0,
        window_ms: 200.0,
        duration_ms: 5000.0,
        bucket_ops: (0..500u64)
            .map(|i| if i % 100 == 31 { 0 } else { 4000 + i })
            .collect(),
        final_configuration: changes.last().and_then(|c| c.configuration.clone()),
        final_group: changes.last().and_then(|c| c.group.clone()),
        changes,
        writes: WriteCheck {
            acknowledged: 2_000_000,
            after_last_bucket: 1,
            failed: 0,
            last_failure: None,
            keys_checked: 1000,
            lost: 0,
            lost_examples: Vec::new(),
        },
    });
    let windows: Vec<LatencyWindow> = [
        ("baseline", 1_500u64),
        ("follower down", 1_400),
        ("recovering", 2_500),
    ]
    .into_iter()
    .map(|(name, base)| {
        let h = hist(base);
        LatencyWindow {
            name: name.into(),
            duration_ms: 3000.0,
            latency: Summary::of(&h),
            ops_per_sec: 400_000.0,
            cdf: cdf(&h),
            leader_counters: [("log_full".to_string(), 0), ("prunes".into(), 12)].into(),
        }
    })
    .collect();
    r.recovery = Some(RecoveryReport {
        replicas: 3,
        state_mib: 1024,
        state_bytes: 1 << 30,
        fill_keys: 33_555,
        fill_value_bytes: 32_000,
        fill_s: 5.0,
        fill_mb_per_s: 214.7,
        snapshot_bytes_max: 1224 << 20,
        log_ring_bytes: 32 << 20,
        prune_grace_us: 16_000_000,
        probe_value_bytes: 64,
        leader: 0,
        client_attempt_timeout_us: 50_000,
        p99_ratio: Some(windows[2].latency.p99_ns as f64 / windows[0].latency.p99_ns as f64),
        p999_ratio: Some(1.7),
        windows,
        transfer: Transfer {
            member: 1,
            donor: Some(2),
            leader_at_copy: Some(0),
            started_ms: Some(30.0),
            snapshot_ready_ms: Some(900.0),
            completed_ms: Some(3000.0),
            caught_up_ms: Some(3100.0),
            bytes_copied: 1 << 30,
            bytes_total: 1 << 30,
            copy_ms: Some(2100.0),
            copy_mb_per_s: Some(511.3),
            end_to_end_mb_per_s: Some(357.9),
            completed: 1,
            abandoned: 0,
            donor_served: 1,
            failure: None,
            events: vec!["recovered: member 1 restored a snapshot".into()],
        },
        notes: Vec::new(),
    });
    r.bulk_sync = Some(bulk_sync_sample());
    r.evaluate_goals();
    r
}

/// A `bulk-sync` section: one round copying 1 GiB in 1.1 s, the progress
/// every 50 ms.
fn bulk_sync_sample() -> BulkSyncReport {
    let total = 1u64 << 30;
    let samples: Vec<SyncSample> = (0..24)
        .map(|i| {
            let ms = 50.0 * i as f64;
            let (state, done) = match i {
                0 => ("needed", 0),
                23 => ("synced", total),
                _ => ("copying", (total / 22) * (i as u64 - 1)),
            };
            SyncSample {
                ms,
                seen_ms: ms + 2.0,
                state: state.into(),
                done_bytes: done,
                total_bytes: if i == 0 { 0 } else { total },
            }
        })
        .collect();
    let round = SyncRound {
        round: 1,
        member: 0,
        primary: 2,
        kill_to_exit_ms: 1.2,
        kill_to_noticed_ms: Some(3.0),
        status_up_ms: Some(27.0),
        copying_seen_ms: Some(50.0),
        synced_ms: Some(1150.0),
        in_view_ms: Some(1150.0),
        copy_window_ms: Some(1150.0),
        bytes_copied: total,
        copies_done: 1,
        gib_per_s: Some(0.87),
        copy_window_gib_per_s: Some(0.87),
        progress_gib_per_s: Some(0.95),
        samples,
        disturbed: None,
        failure: None,
    };
    let copy = |name: &str, g: f64| CopyBandwidth {
        name: name.into(),
        what: format!("{name}, synthetic"),
        buffer_bytes: total,
        repetitions: 3,
        gib_per_s: g,
        gib_per_s_min: g * 0.9,
        gib_per_s_max: g * 1.1,
    };
    BulkSyncReport {
        replicas: 3,
        mode: "backup-memory".into(),
        store_mib: 1024,
        target_bytes: total,
        value_bytes: 4096,
        key_bytes: 13,
        store: StoreSizing {
            entry_count: 148_480,
            slab_bytes: 1 << 20,
            slab_count: 1088,
            sync_chunk_bytes: 1 << 20,
            sync_in_flight: 4,
            forward_threshold: 2,
            value_bytes_max: 4096,
            region_bytes: 1_150_000_000,
            mailbox_bytes: 4544,
            metadata_bytes: 9_600_000,
            item_chunk_bytes: 8192,
        },
        fill: FillRecord {
            items: 129_793,
            value_bytes_total: 129_793 * 4096,
            used_bytes: total,
            keys: 129_793,
            seconds: 20.0,
            items_per_s: 6_490.0,
            used_mib_per_s: 51.2,
            values_mb_per_s: 26.6,
            items_per_s_by_part: vec![9_000.0, 6_000.0],
            client_threads: 1,
            depth: 16,
            ..FillRecord::default()
        },
        primary: 2,
        poll_ms: 5.0,
        status_snapshot_period_ms: Some(50.0),
        replica_overrides: vec!["cluster.mode=backup-memory".into()],
        views_lease_us: 50,
        rounds: vec![round],
        median: Some(SyncMedian {
            rounds: 1,
            bytes_copied: total,
            synced_ms: 1150.0,
            gib_per_s: 0.87,
            copy_window_gib_per_s: Some(0.87),
            progress_gib_per_s: Some(0.95),
        }),
        memcpy: MemcpyReport {
            buffer_bytes: total,
            piece_bytes: 1 << 20,
            core: Some(0),
            copies: vec![
                copy("private memcpy", 9.0),
                copy("shm memcpy", 8.0),
                copy("shm word copy", 6.0),
                copy("shm memcpy, fresh pages", 1.3),
                copy("shm word copy, fresh pages", 1.2),
            ],
            shm_error: None,
        },
        replay: ReplayEstimate {
            label: "write path replay estimate: 129793 items at the measured write rate".into(),
            items: 129_793,
            items_per_s: 6_490.0,
            seconds: 20.0,
            vs_bulk_copy: Some(17.4),
        },
        notes: vec!["a note".into()],
    }
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
    assert_eq!(v["reconfig"]["changes"][2]["leader_after"], 3);
    assert_eq!(v["reconfig"]["changes"][3]["group"]["members"][0], 1);
    assert!(v["recovery"]["p99_ratio"].as_f64().unwrap() > 1.0);
    assert_eq!(v["recovery"]["transfer"]["bytes_copied"], 1u64 << 30);
    assert_eq!(v["goals"].as_array().unwrap().len(), 7);
    // A document written before the two sections existed still loads.
    let mut old = v.clone();
    let map = old.as_object_mut().unwrap();
    map.remove("reconfig");
    map.remove("recovery");
    let back: Report = serde_json::from_value(old).unwrap();
    assert!(back.reconfig.is_none() && back.recovery.is_none());
    // The bulk-sync section, where bench/README.md says.
    let b = &v["bulk_sync"];
    assert_eq!(b["mode"], "backup-memory");
    assert_eq!(b["rounds"][0]["bytes_copied"], 1u64 << 30);
    assert_eq!(b["rounds"][0]["samples"][23]["state"], "synced");
    assert!(b["median"]["gib_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(
        b["memcpy"]["copies"][4]["name"],
        "shm word copy, fresh pages"
    );
    assert!(b["replay"]["label"]
        .as_str()
        .unwrap()
        .starts_with("write path replay estimate"));
    let mut old = v.clone();
    old.as_object_mut().unwrap().remove("bulk_sync");
    let back: Report = serde_json::from_value(old).unwrap();
    assert!(back.bulk_sync.is_none());
    // Workload points per mode, with the CPU split.
    assert_eq!(v["workload"]["points"][1]["mode"], "primary-backup");
    assert_eq!(v["workload"]["points"][1]["backups_cpu_us_per_op"], 20.0);
    assert!(v["workload"]["modes"][2]["skipped"].is_string());
    // A workload written before modes were compared still loads.
    let mut old = v.clone();
    let w = old["workload"].as_object_mut().unwrap();
    for field in ["modes", "clock_ticks_per_s", "notes"] {
        w.remove(field);
    }
    for p in w["points"].as_array_mut().unwrap() {
        let p = p.as_object_mut().unwrap();
        for field in [
            "mode",
            "leader",
            "leader_cpu_us_per_op",
            "backups_cpu_us_per_op",
        ] {
            p.remove(field);
        }
    }
    let back: Report = serde_json::from_value(old).unwrap();
    let w = back.workload.as_ref().unwrap();
    assert!(w.modes.is_empty() && w.points[0].mode.is_empty());
    assert!(render(&back).contains("WORKLOAD"));
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
        "backups CPU µs/op",
        "mode backup-memory: skipped: manifest: unknown variant",
        "FAILOVER",
        "kill → new leader elected",
        "client gap from death notice",
        "of which view wait (views on)",
        "COMPARE",
        "RECONFIG",
        "remove leader (member remove 0)",
        "stable, 3 slots, members 1 2",
        "0 lost",
        "RECOVERY",
        "recovering / baseline: p99",
        "GOALS",
        "p98 µs",
        "BULK SYNC",
        "median of 1",
        "write path replay estimate",
        "shm word copy, fresh pages",
        "25 % posted",
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
            "compare_cdf.svg",
            "reconfig_throughput.svg",
            "recovery_cdf.svg",
            "bulk_sync_progress.svg"
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
    let reconfig = std::fs::read_to_string(dir.path().join("reconfig_throughput.svg")).unwrap();
    for label in ["add 3", "add 4", "remove leader (0)", "resize 3"] {
        assert!(reconfig.contains(label), "no marker labelled {label:?}");
    }
    let recovery = std::fs::read_to_string(dir.path().join("recovery_cdf.svg")).unwrap();
    assert!(recovery.contains("recovering (p99") && recovery.contains("baseline (p99"));
    let bulk = std::fs::read_to_string(dir.path().join("bulk_sync_progress.svg")).unwrap();
    assert!(bulk.contains("round 1: member 0, synced at 1150 ms"));
}
