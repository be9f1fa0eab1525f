//! Ctrl-C, SIGTERM and SIGHUP (a closed terminal): the first one asks the run to stop (every loop
//! checks [`interrupted`] and unwinds, and the clusters' and Redis
//! groups' `Drop` stop their processes); if the run has not ended 3 s
//! later, or on a second signal, every registered process is killed here
//! and the benchmark exits with status 130. Nothing is left running.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// A process to kill and files to remove if the run must be abandoned.
#[derive(Clone, Debug)]
struct Registered {
    owner: u64,
    pids: Vec<u32>,
    paths: Vec<PathBuf>,
}

static REGISTRY: Mutex<Vec<Registered>> = Mutex::new(Vec::new());
static NEXT_OWNER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// True once Ctrl-C or SIGTERM arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// `Err(Interrupted)` once Ctrl-C arrived.
pub fn check() -> crate::Result<()> {
    if interrupted() {
        Err(crate::BenchError::Interrupted)
    } else {
        Ok(())
    }
}

/// Registers processes (and files) that belong to one owner; returns the
/// owner id for [`unregister`].
pub fn register(pids: Vec<u32>, paths: Vec<PathBuf>) -> u64 {
    let owner = NEXT_OWNER.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut r) = REGISTRY.lock() {
        r.push(Registered { owner, pids, paths });
    }
    owner
}

/// Forgets an owner's processes (they were stopped normally).
pub fn unregister(owner: u64) {
    if let Ok(mut r) = REGISTRY.lock() {
        r.retain(|x| x.owner != owner);
    }
}

/// Kills every registered process (SIGCONT first, so a stopped one dies
/// too) and removes the registered files.
fn kill_all() {
    let all = REGISTRY.lock().map(|r| r.clone()).unwrap_or_default();
    for r in &all {
        for &pid in &r.pids {
            // SAFETY: kill(2) on pids we spawned; a stale pid of ours is
            // at worst already gone (ESRCH).
            unsafe {
                libc::kill(pid as i32, libc::SIGCONT);
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
        for p in &r.paths {
            if p.is_dir() {
                let _ = std::fs::remove_dir_all(p);
            } else {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// Installs the SIGINT/SIGTERM/SIGHUP handling (once, from `main`).
pub fn install() -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for (n, _) in signals.forever().enumerate() {
                if n > 0 {
                    // A second Ctrl-C: do not wait for the run to unwind.
                    kill_all();
                    std::process::exit(130);
                }
                INTERRUPTED.store(true, Ordering::Relaxed);
                // The run unwinds and exits within the grace period (the
                // process ends and this thread with it), or is forced.
                std::thread::spawn(|| {
                    std::thread::sleep(Duration::from_secs(3));
                    kill_all();
                    std::process::exit(130);
                });
                // Not eprintln!: after a hang-up stderr is gone, and a
                // panic here would lose the second signal.
                let _ = writeln!(
                    std::io::stderr(),
                    "\ninterrupted: stopping the replicas and Redis servers (Ctrl-C again to force)"
                );
            }
        })?;
    Ok(())
}
