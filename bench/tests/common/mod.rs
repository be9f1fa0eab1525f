//! What the tests against real clusters share: the replica binary, and
//! running `verbatim-bench` with a deadline.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The debug `verbatim` binary (built here if this test runs alone).
pub fn verbatim_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("VERBATIM_BIN") {
        return PathBuf::from(p);
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/verbatim");
    if !path.is_file() {
        // `cargo test -p verbatim-bench` alone does not build another
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

/// Runs `verbatim-bench` with the options every test against a real
/// cluster uses on a shared 2-core machine (nobody spins, nothing is
/// pinned, JSON on stdout) followed by `args`; kills it if it has not
/// ended by `deadline` and fails the test then.
#[allow(dead_code)] // not every test binary runs the bench's binary
pub fn run_bench(args: &[&str], deadline: Duration) -> (Output, serde_json::Value) {
    let bin = verbatim_bin();
    let mut child = Command::new(env!("CARGO_BIN_EXE_verbatim-bench"))
        .args([
            "--json",
            "--quiet",
            "--poll",
            "adaptive",
            "--replica-cores",
            "none",
            "--client-core",
            "none",
            "--client-wait",
            "yield",
            "--binary",
        ])
        .arg(&bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting verbatim-bench");
    let began = Instant::now();
    // Read the pipes on threads: a child blocked on a full pipe would
    // never exit.
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut v).map(|_| v)
    });
    let err_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut v).map(|_| v)
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for verbatim-bench") {
            break status;
        }
        if began.elapsed() > deadline {
            // SIGTERM first: the bench stops its replicas and removes
            // their files; a kill would leave them running.
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
            let err = err_thread
                .join()
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            panic!(
                "verbatim-bench {args:?} did not end within {deadline:?}; stderr:\n{}",
                String::from_utf8_lossy(&err)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_thread.join().expect("stdout reader").expect("stdout");
    let stderr = err_thread.join().expect("stderr reader").expect("stderr");
    let output = Output {
        status,
        stdout,
        stderr,
    };
    let json = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "verbatim-bench {args:?} printed no JSON ({e}; {}); stderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output, json)
}
