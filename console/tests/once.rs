//! `verbatim-console --once` against fake status servers: the printed
//! frame, exit codes, and garbage on the wire.

mod common;

use common::{console, fake, run_with_deadline, socket, write_manifest, RUN_DEADLINE};
use verbatim_console::fake::snapshot;
use verbatim_status::Failover;

/// r0 led term 3 and is gone; r1 won term 4; r2 follows r1.
fn after_leader_change(dir: &std::path::Path) -> Vec<verbatim_console::fake::FakeReplica> {
    let mut r0 = fake(dir, 0, snapshot(0, "leader", 3, Some(0)));
    r0.kill();
    let mut leader = snapshot(1, "leader", 4, Some(1));
    leader.failovers = vec![Failover {
        term: 4,
        old_leader: Some(0),
        new_leader: 1,
        at_unix_ms: leader.at_unix_ms,
        detection_us: 42,
        election_us: 17,
        first_commit_us: Some(23),
        detected_by: "pidfd".into(),
        decided_by: "election".into(),
        view_wait_us: None,
        timeline: None,
    }];
    let r1 = fake(dir, 1, leader);
    let r2 = fake(dir, 2, snapshot(2, "follower", 4, Some(1)));
    vec![r0, r1, r2]
}

#[test]
fn once_prints_the_new_leader_its_term_and_the_lost_replica_at_80x24() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_manifest(dir.path(), 3);
    let _fakes = after_leader_change(dir.path());
    let m = manifest.to_str().unwrap();
    let run = console(&[
        "--connect",
        m,
        "--once",
        "--width",
        "80",
        "--height",
        "24",
        "--timeout-ms",
        "1500",
    ]);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    println!("{}", run.stdout);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 24, "{}", run.stdout);
    assert!(
        lines
            .iter()
            .all(|l| unicode_width::UnicodeWidthStr::width(*l) <= 80),
        "{}",
        run.stdout
    );
    assert!(lines[0].ends_with("term 4 · leader r1"), "{}", run.stdout);
    assert!(
        lines[1].starts_with("demo · 0 1 2 of 3, quorum 2"),
        "{}",
        run.stdout
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("│ r1  leader      4     r1  1400")),
        "{}",
        run.stdout
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("│ r2  follower    4     r1  1400")),
        "{}",
        run.stdout
    );
    assert!(
        lines.iter().any(|l| l.starts_with("│>r0  unreachable —")),
        "{}",
        run.stdout
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("r0 unreachable since") && l.contains("No such file or directory")),
        "{}",
        run.stdout
    );
    assert!(lines[23].ends_with("2/3 up"), "{}", run.stdout);

    let run = console(&[
        "--connect",
        m,
        "--once",
        "--width",
        "80",
        "--height",
        "24",
        "--panel",
        "failovers",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    println!("{}", run.stdout);
    assert!(
        run.stdout.contains(
            "│4     r0  r1  22:13:20.000 42      17      23      —       82      pidfd      │"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("T4     r1  22:13:20.000  current"),
        "{}",
        run.stdout
    );
}

#[test]
fn once_shows_the_selected_replica_in_detail() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_manifest(dir.path(), 3);
    let _fakes = after_leader_change(dir.path());
    let m = manifest.to_str().unwrap();
    let run = console(&[
        "--connect",
        m,
        "--once",
        "--panel",
        "replica",
        "--select",
        "2",
        "--width",
        "100",
        "--height",
        "30",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    println!("{}", run.stdout);
    assert!(
        run.stdout.contains("┌ r2 follower · term 4 "),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("pid 4002"), "{}", run.stdout);
    assert!(
        run.stdout.contains("log granted to r1 (the leader)"),
        "{}",
        run.stdout
    );
}

#[test]
fn once_attaches_to_a_single_socket() {
    let dir = tempfile::tempdir().unwrap();
    let _r1 = fake(dir.path(), 1, snapshot(1, "leader", 9, Some(1)));
    let sock = socket(dir.path(), 1);
    let run = console(&[
        "--connect",
        sock.to_str().unwrap(),
        "--once",
        "--width",
        "80",
        "--height",
        "24",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        run.stdout
            .lines()
            .next()
            .unwrap()
            .ends_with("term 9 · leader r1"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.lines().last().unwrap().ends_with("1/1 up"),
        "{}",
        run.stdout
    );
}

#[test]
fn once_exits_1_when_no_replica_answers() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_manifest(dir.path(), 2);
    let run = console(&[
        "--connect",
        manifest.to_str().unwrap(),
        "--once",
        "--timeout-ms",
        "300",
    ]);
    assert_eq!(run.status.code(), Some(1), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(
        run.stderr.contains("no replica answered within 300 ms"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("r0: ") && run.stderr.contains("r1: "),
        "{}",
        run.stderr
    );
}

#[test]
fn a_bad_target_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing.toml");
    let run = console(&["--connect", missing.to_str().unwrap(), "--once"]);
    assert_eq!(run.status.code(), Some(1));
    assert!(run.stderr.contains("does not exist"), "{}", run.stderr);
}

#[test]
fn garbage_on_the_wire_is_counted_and_survived() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_manifest(dir.path(), 1);
    let r0 = fake(dir.path(), 0, snapshot(0, "leader", 2, Some(0)));
    r0.set_greeting(vec![
        "not json at all".into(),
        r#"{"error": "unknown request"}"#.into(),
        r#"{"id": 0, "role": "leader"}"#.into(),
        String::new(),
    ]);
    let run = console(&[
        "--connect",
        manifest.to_str().unwrap(),
        "--once",
        "--width",
        "80",
        "--height",
        "24",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let last = run.stdout.lines().last().unwrap();
    assert!(last.ends_with("1/1 up · 4 garbage"), "{}", run.stdout);
    assert!(
        run.stdout
            .lines()
            .next()
            .unwrap()
            .ends_with("term 2 · leader r0"),
        "{}",
        run.stdout
    );
}

/// Without `--connect` the console attaches to the local cluster, found as
/// `verbatim status` finds it (`$XDG_RUNTIME_DIR/verbatim-local/cluster.toml`).
#[test]
fn once_finds_the_local_cluster_without_connect() {
    let runtime = tempfile::tempdir().unwrap();
    let local = runtime.path().join("verbatim-local");
    std::fs::create_dir(&local).unwrap();
    let mut text = String::from("[cluster]\nname = \"local\"\n");
    for id in 0..3 {
        text.push_str(&format!("[[members]]\nid = {id}\n"));
    }
    std::fs::write(local.join("cluster.toml"), text).unwrap();
    let _fakes = after_leader_change(&local);
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_verbatim-console"));
    command
        .env("XDG_RUNTIME_DIR", runtime.path())
        .args(["--once", "--width", "80", "--height", "24"]);
    let run = run_with_deadline(command, RUN_DEADLINE);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(run.stdout.contains("term 4 · leader r1"), "{}", run.stdout);
    assert!(run.stdout.contains("Replicas 2/3 up"), "{}", run.stdout);

    // No local cluster: a clear error that says what to do.
    let empty = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_verbatim-console"));
    command
        .env("XDG_RUNTIME_DIR", empty.path())
        .args(["--once"]);
    let run = run_with_deadline(command, RUN_DEADLINE);
    assert!(!run.status.success());
    assert!(run.stderr.contains("verbatim up"), "{}", run.stderr);
}
