//! The built binary: exit codes and JSON output.

mod common;

use std::process::{Command, Output};

use common::fixture;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_verbatim-kernel-cfg"))
        .args(args)
        .output()
        .expect("run verbatim-kernel-cfg")
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "stdout is not JSON ({error}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[test]
fn check_untuned_json_fails_with_exit_1() {
    let root = fixture("untuned-2core");
    let output = run(&["check", "--root", root.to_str().unwrap(), "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let report = json(&output);
    assert_eq!(report["cores"], "1");
    let items = report["items"].as_array().unwrap();
    assert_eq!(items.len(), verbatim_kernel_cfg::check::ITEM_IDS.len());
    let nohz = items
        .iter()
        .find(|item| item["id"] == "cmdline.nohz_full")
        .unwrap();
    assert_eq!(nohz["status"], "fail");
    assert!(nohz["fix"].as_str().unwrap().contains("nohz_full=1"));
    for item in items {
        for field in ["id", "status", "summary", "found", "fix"] {
            assert!(item.get(field).is_some(), "{item} lacks {field}");
        }
    }
}

#[test]
fn check_tuned_passes_with_exit_0() {
    let root = fixture("tuned-8core");
    let output = run(&["--root", root.to_str().unwrap(), "check"]);
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("result: OK"), "{text}");
}

#[test]
fn check_with_cores_option() {
    let root = fixture("tuned-8core");
    let output = run(&[
        "check",
        "--root",
        root.to_str().unwrap(),
        "--cores",
        "2",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(json(&output)["cores"], "2");
}

#[test]
fn plan_json_and_refusals() {
    let root = fixture("untuned-2core");
    let root = root.to_str().unwrap();
    let output = run(&["plan", "--root", root, "--cores", "1", "--json"]);
    assert_eq!(output.status.code(), Some(0));
    let plan = json(&output);
    assert_eq!(plan["cores"], "1");
    assert_eq!(plan["housekeeping"], "0");
    assert!(plan["kernel_cmdline"]
        .as_str()
        .unwrap()
        .contains("nohz_full=1"));
    assert!(plan["replica_pins_toml"]
        .as_str()
        .unwrap()
        .contains("core = 1"));

    let all = run(&["plan", "--root", root, "--cores", "0-1"]);
    assert_eq!(all.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&all.stderr).contains("housekeeping"));
    let offline = run(&["plan", "--root", root, "--cores", "7"]);
    assert_eq!(offline.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&offline.stderr).contains("not online"));
}

#[test]
fn usage_and_io_errors_exit_2() {
    assert_eq!(run(&["check", "--cores", "garbage"]).status.code(), Some(2));
    assert_eq!(run(&["plan"]).status.code(), Some(2));
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        run(&["check", "--root", "/nonexistent-verbatim-root"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run(&["jitter", "--core", "0", "--seconds", "0"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run(&["jitter", "--core", "0", "--root", "/tmp"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(run(&["--help"]).status.code(), Some(0));
}

#[test]
fn jitter_json_is_one_object() {
    let output = run(&["jitter", "--core", "0", "--seconds", "0.1", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report = json(&output);
    let samples = report["samples"].as_u64().unwrap();
    assert!(samples > 0);
    let sum: u64 = report["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|bucket| bucket["count"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, samples);
    assert_eq!(report["threshold_ns"], 15_000);
    for field in ["gap_ns_p50", "gap_ns_p99", "gap_ns_p9999", "gap_ns_max"] {
        assert!(report[field].is_u64(), "{field}");
    }
}
