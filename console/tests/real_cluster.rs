//! The console against a real local cluster: `verbatim up --replicas 3`,
//! kill the leader, and the console must show the new leader, the new
//! term and the failover timings.
//!
//! It runs the `verbatim` binary of the workspace (built by
//! `cargo test --workspace` for the host's own tests; when it is missing,
//! this test builds it with cargo first). `VERBATIM_BIN` overrides the path.

mod common;

use common::console;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use verbatim_console::link::{fetch_status, spawn_all, WatchConfig, CHANNEL_CAPACITY};
use verbatim_console::{target, App, Now};

/// How long the cluster may take to start and elect a first leader.
const STARTUP_DEADLINE: Duration = Duration::from_secs(30);
/// How long after the kill the survivors must report a new leader.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(5);
/// How long after the kill the console's own state must show the new
/// leader: the operator's bar.
const CONSOLE_SEES_FAILOVER: Duration = Duration::from_secs(1);

fn verbatim_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("VERBATIM_BIN") {
        return PathBuf::from(p);
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/verbatim");
    if !path.is_file() {
        // `cargo test -p verbatim-console` alone does not build another
        // package's binary: build it (the same debug profile).
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "verbatim-host", "--bin", "verbatim"])
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
            .status()
            .expect("running cargo to build the verbatim binary");
        assert!(status.success(), "building the verbatim binary failed");
    }
    path
}

/// `verbatim up` in its own process group; dropping it ends the group
/// (the launcher and the replicas it started).
struct Cluster {
    child: Child,
    /// Where `verbatim up` put the manifest, sockets and logs; removed at
    /// the end (on success; kept when the test failed, for its logs).
    run_dir: Option<PathBuf>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
        if let Some(dir) = self.run_dir.take().filter(|_| !std::thread::panicking()) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The first token of `line` that names an existing `.toml` file.
fn manifest_in(line: &str) -> Option<PathBuf> {
    line.split_whitespace()
        .map(|t| {
            t.trim_matches(|c: char| c == '`' || c == '"' || c == '\'' || c == ',' || c == ':')
        })
        .filter(|t| t.ends_with(".toml"))
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// One frame of the console for the cluster of manifest `m`, 80 columns
/// wide and `height` rows tall.
fn frame(m: &str, height: &str, extra: &[&str]) -> common::Run {
    let mut args = vec![
        "--connect",
        m,
        "--once",
        "--width",
        "80",
        "--height",
        height,
    ];
    args.extend_from_slice(extra);
    console(&args)
}

/// A leader as it reports itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Leader {
    term: u64,
    id: u8,
    pid: u32,
    /// Index into the sockets it was found in.
    index: usize,
}

/// The replica among `sockets` that says it leads the highest term.
fn leader_of(sockets: &[PathBuf]) -> Option<Leader> {
    sockets
        .iter()
        .enumerate()
        .filter_map(|(index, s)| {
            let r = fetch_status(s, Duration::from_millis(300)).ok()?;
            let s = r.snapshot;
            (s.role == "leader").then_some(Leader {
                term: s.term,
                id: s.id,
                pid: s.pid,
                index,
            })
        })
        .max_by_key(|l| l.term)
}

/// A leader that stayed the same for `hold`, so that what the console
/// prints next can be compared with it.
fn stable_leader(sockets: &[PathBuf], hold: Duration, deadline: Instant) -> Leader {
    let mut seen: Option<(Leader, Instant)> = None;
    loop {
        let now = Instant::now();
        match (leader_of(sockets), seen) {
            (Some(l), Some((s, since))) if l == s => {
                if now.duration_since(since) >= hold {
                    return l;
                }
            }
            (Some(l), _) => seen = Some((l, now)),
            (None, _) => seen = None,
        }
        assert!(
            now < deadline,
            "no leader stayed in place for {hold:?} (last seen: {seen:?})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_console_shows_a_real_failover() {
    let bin = verbatim_bin();
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build -p verbatim-host` first (or set VERBATIM_BIN)",
        bin.display()
    );
    // A name and ports of its own, so that a cluster someone else started
    // with `verbatim up` (name "local", ports 7000+) is left alone.
    let name = format!("console-test-{}", std::process::id());
    let base_port = (20_000 + (std::process::id() % 10_000) * 3).to_string();
    let mut command = Command::new(&bin);
    command
        .args([
            "up",
            "--replicas",
            "3",
            "--name",
            &name,
            "--base-port",
            &base_port,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command.process_group(0);
    let mut child = command.spawn().expect("verbatim up starts");
    let stdout = child.stdout.take().expect("stdout piped");
    let mut cluster = Cluster {
        child,
        run_dir: None,
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    // The manifest path `verbatim up` prints.
    let deadline = Instant::now() + STARTUP_DEADLINE;
    let manifest = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(p) = manifest_in(&line) {
                    break p;
                }
            }
            Err(e) => {
                panic!("`verbatim up` printed no manifest path within {STARTUP_DEADLINE:?}: {e}")
            }
        }
    };
    // Only a directory of this test's own cluster is ever removed.
    if manifest
        .parent()
        .is_some_and(|d| d.ends_with(format!("verbatim-{name}")))
    {
        cluster.run_dir = manifest.parent().map(Path::to_path_buf);
    }
    let sockets: Vec<PathBuf> = target::resolve(&manifest)
        .expect("the manifest resolves")
        .endpoints
        .into_iter()
        .map(|e| e.socket)
        .collect();
    assert_eq!(sockets.len(), 3);

    // A first leader, settled, and the same one in the console's frame and
    // in its own pipeline (watchers + state, no terminal), attached before
    // the kill to time how soon the operator would see the change. On a
    // starved machine (a spent CPU quota stops every replica at once)
    // leadership may still move between two looks: then the check is
    // taken again with the leader of the moment, until the deadline.
    let m = manifest.to_str().unwrap();
    let target = target::resolve(&manifest).expect("the manifest resolves");
    let (tx, rx) = std::sync::mpsc::sync_channel(CHANNEL_CAPACITY);
    let watchers = spawn_all(&target, &WatchConfig::default(), &tx).expect("watchers start");
    drop(tx);
    let mut app = App::new(&target, Now::system());
    let first = 'agreed: loop {
        let first = stable_leader(&sockets, Duration::from_millis(500), deadline);
        let run = frame(m, "24", &[]);
        assert!(run.status.success(), "{}", run.stderr);
        if leader_of(&sockets) != Some(first) {
            println!("leadership moved during the console's frame; looking again");
            continue;
        }
        assert!(
            run.stdout
                .lines()
                .next()
                .unwrap()
                .contains(&format!("leader r{}", first.id)),
            "{}",
            run.stdout
        );
        loop {
            if app.live.leader() == Some(first.id) && app.live.current_term() == Some(first.term) {
                break 'agreed first;
            }
            if app.live.current_term().is_some_and(|t| t > first.term) {
                println!("leadership moved before the console saw it; looking again");
                continue 'agreed;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let message = rx
                .recv_timeout(left)
                .expect("the console sees the first leader");
            app.handle_message(message, Now::system());
        }
    };
    let (term, leader, pid, leader_index) = (first.term, first.id, first.pid, first.index);

    // Kill it; a new leader in a higher term must follow.
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success(), "could not kill the leader (pid {pid})");
    let killed_at = Instant::now();
    let survivors: Vec<PathBuf> = sockets
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader_index)
        .map(|(_, s)| s.clone())
        .collect();
    let (new_term, new_leader) = loop {
        if let Some(l) = leader_of(&survivors).filter(|l| l.term > term) {
            break (l.term, l.id);
        }
        assert!(
            killed_at.elapsed() < FAILOVER_DEADLINE,
            "no new leader within {FAILOVER_DEADLINE:?} of the kill"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    println!(
        "new leader r{new_leader} in term {new_term} after {:?}",
        killed_at.elapsed()
    );
    let seen = loop {
        let left = (killed_at + CONSOLE_SEES_FAILOVER).saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(message) => app.handle_message(message, Now::system()),
            Err(e) => panic!(
                "the console did not show a new leader within {CONSOLE_SEES_FAILOVER:?} of the kill ({e}); \
                 it shows term {:?}, leader {:?}",
                app.live.current_term(),
                app.live.leader()
            ),
        }
        if app.live.current_term().is_some_and(|t| t > term)
            && app.live.leader().is_some_and(|l| l != leader)
        {
            break killed_at.elapsed();
        }
    };
    println!("the console showed the new leader {seen:?} after the kill");
    drop(rx);
    drop(watchers);
    assert_ne!(new_leader, leader);

    // Compare the frame with the leader once it has settled (a second
    // election right after the first would otherwise race the check).
    // The console shows the new leader, the term, the dead replica and the
    // failover's timings (taken again if leadership moves meanwhile).
    let settle_deadline = Instant::now() + STARTUP_DEADLINE;
    let (settled, run) = loop {
        let settled = stable_leader(&survivors, Duration::from_millis(500), settle_deadline);
        let run = frame(m, "24", &["--timeout-ms", "1000"]);
        assert!(run.status.success(), "{}", run.stderr);
        if leader_of(&survivors) == Some(settled) {
            break (settled, run);
        }
        println!("leadership moved during the console's frame; looking again");
    };
    println!("{}", run.stdout);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 24);
    assert!(
        lines[0].ends_with(&format!("term {} · leader r{}", settled.term, settled.id)),
        "{}",
        run.stdout
    );
    // The old leader is shown lost, or (if `verbatim up` restarts what
    // dies) back as a follower; either way no longer as the leader.
    let old_row = lines
        .iter()
        .find(|l| {
            l.get(4..)
                .is_some_and(|rest| rest.starts_with(&format!("r{leader} ")))
        })
        .unwrap_or_else(|| panic!("no row for r{leader}:\n{}", run.stdout));
    assert!(
        old_row.contains("unreachable") || old_row.contains("follower"),
        "{old_row}"
    );
    // Tall: newest first, and on a starved machine elections after the
    // failover may have pushed its row down.
    let run = frame(m, "80", &["--panel", "failovers"]);
    assert!(run.status.success(), "{}", run.stderr);
    println!("{}", run.stdout);
    let row = run
        .stdout
        .lines()
        .find(|l| l.starts_with(&format!("│{new_term:<6}")))
        .unwrap_or_else(|| panic!("no failover row for term {new_term}:\n{}", run.stdout));
    assert!(row.contains(&format!("r{new_leader}")), "{row}");
    drop(cluster);
}
