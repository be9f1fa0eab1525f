//! Shared by the integration tests: a fake group behind a manifest, and
//! running the console binary with a deadline.

#![allow(dead_code)] // each test file uses a different part

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use verbatim_console::fake::FakeReplica;
use verbatim_status::Snapshot;

/// Longest any console run may take before the test fails.
pub const RUN_DEADLINE: Duration = Duration::from_secs(30);

/// A manifest for `n` members whose status sockets live in `dir`.
pub fn write_manifest(dir: &Path, n: u8) -> PathBuf {
    let mut text = format!(
        "[cluster]\nname = \"demo\"\nrun_dir = \"{}\"\n",
        dir.display()
    );
    for id in 0..n {
        text.push_str(&format!("[[members]]\nid = {id}\n"));
    }
    let path = dir.join("demo.toml");
    std::fs::write(&path, text).expect("manifest written");
    path
}

/// The status socket of member `id` under `dir` (the host's default name).
pub fn socket(dir: &Path, id: u8) -> PathBuf {
    dir.join(format!("replica-{id}.sock"))
}

/// Starts a fake replica for member `id` under `dir`.
pub fn fake(dir: &Path, id: u8, snapshot: Snapshot) -> FakeReplica {
    FakeReplica::start(&socket(dir, id), snapshot).expect("fake replica bound")
}

/// Output of one console run.
pub struct Run {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs a program to completion, failing the test if it takes longer than
/// `deadline` (it is killed first).
pub fn run_with_deadline(mut command: Command, deadline: Duration) -> Run {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("program starts");
    // Readers drain the pipes so a large frame cannot block the child.
    let mut out = child.stdout.take().expect("stdout piped");
    let mut err = child.stderr.take().expect("stderr piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let until = Instant::now() + deadline;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait works") {
            break status;
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        status,
        stdout: out_reader.join().expect("reader"),
        stderr: err_reader.join().expect("reader"),
    }
}

/// Runs `verbatim-console` with `args`.
pub fn console(args: &[&str]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_verbatim-console"));
    command.args(args);
    run_with_deadline(command, RUN_DEADLINE)
}
