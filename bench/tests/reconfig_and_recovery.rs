//! Short `reconfig` and `recovery` runs of the `verbatim-bench` binary
//! against real local clusters: every change commits with the expected
//! configuration and no acknowledged write is lost; a restarted follower
//! copies a snapshot and catches up. Speed is not asserted (this runs on
//! a shared 2-core machine next to other tests).

mod common;

use common::run_bench;
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;

/// One cluster at a time: two would share two cores with a debug build.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn members(v: &Value) -> Vec<u64> {
    v["members"]
        .as_array()
        .unwrap_or_else(|| panic!("no members in {v}"))
        .iter()
        .filter_map(Value::as_u64)
        .collect()
}

#[test]
fn a_reconfiguration_run_commits_every_change_and_loses_no_write() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (out, doc) = run_bench(
        &[
            "reconfig",
            "--client-cores",
            "none",
            "--duration-ms",
            "1800",
            "--bucket-ms",
            "5",
            "--window-ms",
            "100",
            "--schedule",
            "300:add:3,600:add:4,900:remove,1200:resize:3",
        ],
        Duration::from_secs(180),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    let r = &doc["reconfig"];
    assert_eq!(r["replicas"], 5);
    assert_eq!(r["initial_members"], 3);
    let changes = r["changes"].as_array().expect("changes");
    assert_eq!(changes.len(), 4, "{changes:?}");
    for c in changes {
        assert!(c["error"].is_null(), "{c}");
        let asked = c["asked_ms"].as_f64().expect("asked");
        let confirmed = c["confirmed_ms"].as_f64().expect("confirmed");
        assert!(
            c["scheduled_ms"].as_f64().expect("scheduled") <= asked,
            "{c}"
        );
        assert!(asked <= confirmed, "{c}");
        let g = &c["group"];
        assert_eq!(g["state"], "stable", "{c}");
        assert_eq!(g["committed"], true, "{c}");
        assert!(c["configuration"]
            .as_str()
            .is_some_and(|s| s.starts_with("stable")));
        let after = c["leader_after"]
            .as_u64()
            .expect("a leader after the change");
        assert!(members(g).contains(&after), "{c}");
    }
    // Two spares join: 4, then 5 slots.
    assert_eq!(changes[0]["group"]["size"], 4);
    assert_eq!(members(&changes[0]["group"]), [0, 1, 2, 3]);
    assert_eq!(changes[1]["group"]["size"], 5);
    assert_eq!(members(&changes[1]["group"]), [0, 1, 2, 3, 4]);
    // The leader removes itself; another one leads.
    let removed = changes[2]["leader_before"].as_u64().expect("a leader");
    assert_eq!(changes[2]["request"], format!("member remove {removed}"));
    let left = members(&changes[2]["group"]);
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(!left.contains(&removed));
    let next = changes[2]["leader_after"].as_u64().expect("a new leader");
    assert_ne!(next, removed);
    // Back to three slots: the members of slots 3 and 4 leave.
    assert_eq!(changes[3]["group"]["size"], 3);
    let expected: Vec<u64> = (0..3).filter(|&m| m != removed).collect();
    assert_eq!(members(&changes[3]["group"]), expected);
    assert_eq!(members(&r["final_group"]), expected);
    // The group serves after the last change.
    let bucket_ms = r["bucket_ms"].as_f64().expect("bucket_ms");
    let buckets: Vec<u64> = r["bucket_ops"]
        .as_array()
        .expect("bucket_ops")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let last = changes[3]["confirmed_ms"].as_f64().expect("confirmed");
    let after: u64 = buckets[(last / bucket_ms).ceil() as usize..].iter().sum();
    assert!(
        after > 0,
        "no write completed after the last change: {buckets:?}"
    );
    assert!(
        (buckets.len() as f64 * bucket_ms) >= 1800.0 - bucket_ms,
        "{}",
        buckets.len()
    );
    // Every acknowledged write is still there.
    let w = &r["writes"];
    assert!(
        w["acknowledged"].as_u64().expect("acknowledged") > 100,
        "{w}"
    );
    assert!(w["keys_checked"].as_u64().expect("keys_checked") > 0, "{w}");
    assert_eq!(w["lost"], 0, "{w}");
    assert_eq!(
        buckets.iter().sum::<u64>() + w["after_last_bucket"].as_u64().expect("after"),
        w["acknowledged"].as_u64().expect("acknowledged"),
        "every acknowledged write is counted once"
    );
}

#[test]
fn a_restarted_follower_copies_a_snapshot_and_catches_up() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (out, doc) = run_bench(
        &[
            "recovery",
            "--state-mib",
            "4",
            "--baseline-ms",
            "300",
            "--down-ms",
            "50",
            "--recovery-timeout-s",
            "60",
        ],
        Duration::from_secs(180),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    let r = &doc["recovery"];
    let state = r["state_bytes"].as_u64().expect("state_bytes");
    assert!(state >= 4 << 20, "{r}");
    // The ring was no larger than the state (the fill's log, values plus
    // keys and headers, wrapped it): the restart needed a snapshot.
    assert!(r["log_ring_bytes"].as_u64().expect("ring") <= state);
    let t = &r["transfer"];
    assert!(t["failure"].is_null(), "{t}");
    // At least one: a member sometimes copies a second snapshot when the
    // leader pruned past the first before taking it back (the report
    // notes it); either way it ends recovered.
    assert!(t["completed"].as_u64().expect("completed") >= 1, "{t}");
    let total = t["bytes_total"].as_u64().expect("bytes_total");
    assert!(total >= state, "the snapshot holds every value: {t}");
    assert!(
        t["bytes_copied"].as_u64().expect("bytes_copied") >= total,
        "{t}"
    );
    // Another member gave it: the other follower as DARE intends, or
    // sometimes the leader (the report then says so in a note).
    let donor = t["donor"].as_u64().expect("a donor");
    assert_ne!(Some(donor), t["member"].as_u64(), "{t}");
    if Some(donor) == r["leader"].as_u64() {
        assert!(
            r["notes"].to_string().contains("the leader (member"),
            "{}",
            r["notes"]
        );
    }
    assert!(
        t["donor_served"].as_u64().expect("donor_served") >= 1,
        "{t}"
    );
    let completed = t["completed_ms"].as_f64().expect("completed_ms");
    let caught_up = t["caught_up_ms"].as_f64().expect("caught_up_ms");
    assert!(0.0 < completed && completed <= caught_up, "{t}");
    let windows = r["windows"].as_array().expect("windows");
    let names: Vec<&str> = windows.iter().filter_map(|w| w["name"].as_str()).collect();
    assert_eq!(names, ["baseline", "follower down", "recovering"]);
    for w in [&windows[0], &windows[2]] {
        assert!(w["latency"]["count"].as_u64().expect("count") > 0, "{w}");
        assert!(w["latency"]["p99_ns"].as_u64().expect("p99") > 0, "{w}");
    }
    assert!(r["p99_ratio"].as_f64().is_some_and(|x| x > 0.0), "{r}");
    assert!(doc["goals"]
        .as_array()
        .expect("goals")
        .iter()
        .any(|g| g["name"].as_str().is_some_and(|n| n.contains("recovers"))));
}

#[test]
fn a_schedule_that_is_not_one_is_refused_before_anything_starts() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_verbatim-bench"))
        .args(["--quiet", "--binary"])
        .arg(common::verbatim_bin())
        .args(["reconfig", "--schedule", "100:grow:3"])
        .output()
        .expect("running verbatim-bench");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--schedule item `100:grow:3`"), "{stderr}");
}
