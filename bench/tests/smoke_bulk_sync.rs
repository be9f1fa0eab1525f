//! A short `bulk-sync` run of the `verbatim-bench` binary against a real
//! backup-memory cluster: an 8 MiB store is filled, a backup is killed
//! and restarted, and the primary copies the store to it. Speed is not
//! asserted (a shared 2-core machine); that the copy completed and the
//! document has its fields is.

mod common;

use common::run_bench;
use serde_json::Value;
use std::time::Duration;

fn f64_of(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

fn u64_of(v: &Value, what: &str) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{what} is not a count: {v}"))
}

#[test]
fn a_restarted_backup_is_copied_and_synced() {
    let plots = tempfile::tempdir().expect("a plot directory");
    let plot_dir = plots.path().to_string_lossy().into_owned();
    let (out, doc) = run_bench(
        &[
            "--plot",
            &plot_dir,
            "bulk-sync",
            "--store-mib",
            "8",
            "--rounds",
            "1",
            "--sync-timeout-s",
            "20",
        ],
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    let b = &doc["bulk_sync"];
    assert_eq!(b["replicas"], 3, "{b}");
    assert_eq!(b["mode"], "backup-memory");
    let target = u64_of(&b["target_bytes"], "target_bytes");
    assert_eq!(target, 8 << 20);
    // The store was sized for the target and filled up to it.
    let store = &b["store"];
    assert!(
        u64_of(&store["region_bytes"], "region_bytes") > target,
        "{store}"
    );
    let fill = &b["fill"];
    let used = u64_of(&fill["used_bytes"], "used_bytes");
    assert!(used >= target, "{fill}");
    let items = u64_of(&fill["items"], "items");
    assert!(items > 0, "{fill}");
    assert_eq!(
        fill["keys"], items,
        "every key written is in the store: {fill}"
    );
    assert!(f64_of(&fill["items_per_s"], "items_per_s") > 0.0);
    // Read back: every acknowledged SET is there.
    let check = &fill["check"];
    assert_eq!(check["keys_checked"], items, "{check}");
    assert_eq!(check["missing"], 0, "{check}");
    assert_eq!(check["wrong"], 0, "{check}");
    // One counted round, whose copy completed: the member is synced and
    // back in the view, after its restart.
    let rounds = b["rounds"].as_array().expect("rounds");
    let counted: Vec<&Value> = rounds
        .iter()
        .filter(|r| r["failure"].is_null() && r["disturbed"].is_null())
        .collect();
    assert_eq!(counted.len(), 1, "{rounds:?}");
    let r = counted[0];
    assert_ne!(r["member"], r["primary"], "{r}");
    let synced = f64_of(&r["synced_ms"], "synced_ms");
    assert!(synced > 0.0, "{r}");
    assert!(f64_of(&r["in_view_ms"], "in_view_ms") >= synced, "{r}");
    assert!(u64_of(&r["copies_done"], "copies_done") >= 1, "{r}");
    // The copy moves the used part of the store after the mailbox.
    let mailbox = u64_of(&store["mailbox_bytes"], "mailbox_bytes");
    assert!(
        u64_of(&r["bytes_copied"], "bytes_copied") >= used - mailbox,
        "{r}"
    );
    assert!(f64_of(&r["gib_per_s"], "gib_per_s") > 0.0, "{r}");
    let samples = r["samples"].as_array().expect("samples");
    assert_eq!(
        samples.last().map(|s| &s["state"]),
        Some(&Value::from("synced")),
        "{samples:?}"
    );
    let median = &b["median"];
    assert_eq!(median["rounds"], 1, "{median}");
    assert!(f64_of(&median["gib_per_s"], "median gib_per_s") > 0.0);
    // memcpy beside it, private and shared.
    let copies = b["memcpy"]["copies"].as_array().expect("memcpy copies");
    assert!(b["memcpy"]["shm_error"].is_null(), "{}", b["memcpy"]);
    assert_eq!(copies.len(), 6, "{copies:?}");
    for c in copies {
        assert!(f64_of(&c["gib_per_s"], "memcpy gib_per_s") > 0.0, "{c}");
    }
    // The replay comparison says what it is.
    let replay = &b["replay"];
    let label = replay["label"].as_str().expect("a label");
    assert!(label.starts_with("write path replay estimate"), "{label}");
    assert!(label.contains("not implemented"), "{label}");
    assert!(f64_of(&replay["seconds"], "replay seconds") > 0.0);
    // The setup the others have.
    assert_eq!(doc["setup"]["group_sizes"][0], 3);
    assert!(doc["setup"]["method"]
        .as_str()
        .is_some_and(|m| m.contains("SIGKILL")));
    let plot = plots.path().join("bulk_sync_progress.svg");
    let svg = std::fs::read_to_string(&plot).expect("the progress plot");
    assert!(svg.contains("round 1: member"), "{}", plot.display());
}
