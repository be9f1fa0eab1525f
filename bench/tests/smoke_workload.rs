//! One short `workload` run of the `verbatim-bench` binary over the three
//! replication modes: each runs the same mix side by side with the CPU
//! split, and the run succeeds. Speed is not asserted (this runs on a
//! shared 2-core machine next to other tests); a mode the replicas refuse
//! is skipped (`cluster::tests` cover the refusal).

mod common;

use common::run_bench;
use std::time::Duration;

#[test]
fn the_three_modes_run_side_by_side() {
    let (out, doc) = run_bench(
        &[
            "workload",
            "--modes",
            "log,backup-memory,primary-backup",
            "--mixes",
            "a",
            "--keys",
            "200",
            "--client-cores",
            "none",
            "--duration-ms",
            "300",
            "--warmup-ms",
            "50",
            "--set",
            "backup.slab_count=8",
        ],
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    let w = &doc["workload"];
    let modes = w["modes"].as_array().expect("modes");
    let names: Vec<&str> = modes.iter().filter_map(|m| m["mode"].as_str()).collect();
    assert_eq!(names, ["log", "backup-memory", "primary-backup"]);
    assert!(
        modes.iter().all(|m| m["skipped"].is_null()),
        "{modes:?}: {stderr}"
    );
    assert!(w["clock_ticks_per_s"].as_u64().expect("ticks") > 0);
    let points = w["points"].as_array().expect("points");
    // Mix A, uniform and zipfian, for each mode that ran.
    let got: Vec<(&str, &str)> = points
        .iter()
        .map(|p| {
            (
                p["mode"].as_str().expect("mode"),
                p["distribution"].as_str().expect("distribution"),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("log", "uniform"),
            ("log", "zipfian"),
            ("backup-memory", "uniform"),
            ("backup-memory", "zipfian"),
            ("primary-backup", "uniform"),
            ("primary-backup", "zipfian"),
        ]
    );
    for p in points {
        assert!(p["ops"].as_u64().expect("ops") > 0, "{p}");
        // A leader change under load leaves the split out (a note says
        // so); otherwise both figures are there.
        if !p["leader"].is_null() {
            for f in ["leader_cpu_us_per_op", "backups_cpu_us_per_op"] {
                let v = p[f].as_f64().unwrap_or_else(|| panic!("{f} in {p}"));
                assert!(v >= 0.0 && v.is_finite(), "{f} in {p}");
            }
        }
    }
}
