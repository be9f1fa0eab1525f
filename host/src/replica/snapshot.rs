//! The host's part of a donor's snapshot (DARE §3.4): the state machine's
//! bytes, written into the snapshot region as of the step that asked.
//!
//! On the shared-memory fabric the writing happens in a fork of the replica
//! process: the kernel's copy-on-write keeps the child's view of the state
//! machine as it was at the fork, while the parent goes on applying (the
//! parent pauses only for the fork itself, which copies page tables, not
//! the state). The child writes through the same shared mapping of the
//! snapshot region, marks the snapshot complete and exits. It runs one
//! function: iterating the maps and copying bytes into the mapping, with no
//! allocation, no lock and no logging, which is what a forked child of a
//! multi-threaded process may do. Its exit releases nothing of the
//! parent's: robust-futex lists (the death notices) are not inherited
//! across fork.
//!
//! On the verbs fabric the memory is registered with the device, and
//! forking a process with pinned registered memory is not something to do
//! lightly (copy-on-write of pinned pages); there the snapshot is written
//! in the poll loop, which pauses for as long as that takes.

use std::io;
use std::sync::Mutex;

/// The writer child running now, if any (one replica per process). Its
/// pid cannot be reused while it is here: the reaper takes it out before
/// it reaps the child.
static RUNNING_WRITER: Mutex<Option<libc::pid_t>> = Mutex::new(None);

/// Stops the writer child of an earlier request, if it still runs: its
/// snapshot is superseded (the joiner asks with a new generation), and two
/// writers would tear each other's payload in the one snapshot region.
fn stop_running_writer() {
    let slot = RUNNING_WRITER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(pid) = *slot {
        // SAFETY: kill(2) on our own child, not reaped yet (the reaper
        // clears the slot before it reaps), so the pid is still its own.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// How the state machine's bytes are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotWriter {
    /// In a forked child (copy-on-write), the poll loop goes on.
    Fork,
    /// In the poll loop.
    Inline,
}

/// Runs `write` (which writes the snapshot into shared memory) as
/// `how` says. With [`SnapshotWriter::Fork`], returns once the child is
/// started; a thread reaps it.
pub fn run(how: SnapshotWriter, write: impl FnOnce()) -> io::Result<()> {
    match how {
        SnapshotWriter::Inline => {
            write();
            Ok(())
        }
        SnapshotWriter::Fork => {
            stop_running_writer();
            // SAFETY: getpid has no preconditions.
            let parent = unsafe { libc::getpid() };
            // SAFETY: fork has no preconditions; the child only runs
            // `write` (no allocation, locks or I/O beyond stores into a
            // shared mapping, see the module documentation), prctl,
            // getppid and `_exit`, all async-signal-safe.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return Err(io::Error::last_os_error());
            }
            if pid == 0 {
                // A writer never outlives its replica: killed with it, and
                // gone at once if the replica died before this line.
                // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal
                // number; getppid has no preconditions.
                unsafe {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    if libc::getppid() != parent {
                        libc::_exit(1);
                    }
                }
                write();
                // SAFETY: ends the child without running the parent's
                // destructors or atexit handlers (they are not its own).
                unsafe { libc::_exit(0) };
            }
            *RUNNING_WRITER.lock().unwrap_or_else(|p| p.into_inner()) = Some(pid);
            std::thread::Builder::new()
                .name("verbatim-snapshot-reaper".into())
                .spawn(move || {
                    // Wait for the exit without reaping, take the pid out
                    // of the slot (so nobody signals it any more), then
                    // reap: the pid is never reused while it is listed.
                    // SAFETY: a zeroed siginfo_t is a valid out-parameter.
                    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                    // SAFETY: waits for our own child; `info` is valid.
                    unsafe {
                        libc::waitid(
                            libc::P_PID,
                            pid as libc::id_t,
                            &mut info,
                            libc::WEXITED | libc::WNOWAIT,
                        )
                    };
                    {
                        let mut slot = RUNNING_WRITER.lock().unwrap_or_else(|p| p.into_inner());
                        if *slot == Some(pid) {
                            *slot = None;
                        }
                    }
                    let mut status = 0;
                    // SAFETY: reaps our own child; `status` is valid.
                    unsafe { libc::waitpid(pid, &mut status, 0) };
                })
                .map(drop)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use verbatim_client::shared::SharedMap;

    /// The child's writes reach the parent through the shared mapping,
    /// and what the child saw is the state at the fork.
    #[test]
    fn a_forked_writer_writes_the_state_as_of_the_fork() {
        let dir = tempfile::tempdir().unwrap();
        let map = SharedMap::create(&dir.path().join("m"), 4096).unwrap();
        let state = AtomicU64::new(7);
        run(SnapshotWriter::Fork, || {
            // Give the parent time to change its copy first.
            std::thread::sleep(std::time::Duration::from_millis(50));
            map.word(0)
                .store(state.load(Ordering::SeqCst), Ordering::SeqCst);
            map.word(8).store(1, Ordering::SeqCst);
        })
        .unwrap();
        state.store(8, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while map.word(8).load(Ordering::SeqCst) != 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never wrote"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            map.word(0).load(Ordering::SeqCst),
            7,
            "the state as of the fork"
        );
        // A writer still running when the next request comes is stopped:
        // only the newest writes the region.
        run(SnapshotWriter::Fork, || {
            std::thread::sleep(std::time::Duration::from_secs(30));
            map.word(16).store(1, Ordering::SeqCst);
        })
        .unwrap();
        let first = RUNNING_WRITER.lock().unwrap().expect("a writer runs");
        run(SnapshotWriter::Fork, || {
            map.word(24).store(1, Ordering::SeqCst)
        })
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            // SAFETY: kill with signal 0 only checks that the pid exists.
            let gone = unsafe { libc::kill(first, 0) } != 0;
            if gone && map.word(24).load(Ordering::SeqCst) == 1 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the first writer was not stopped, or the second never wrote"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(
            map.word(16).load(Ordering::SeqCst),
            0,
            "the first never finished"
        );
        let inline = AtomicU64::new(0);
        run(SnapshotWriter::Inline, || inline.store(1, Ordering::SeqCst)).unwrap();
        assert_eq!(inline.load(Ordering::SeqCst), 1);
    }
}
