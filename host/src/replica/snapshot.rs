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
            // SAFETY: fork has no preconditions; the child only runs
            // `write` (no allocation, locks or I/O beyond stores into a
            // shared mapping, see the module documentation) and `_exit`.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return Err(io::Error::last_os_error());
            }
            if pid == 0 {
                write();
                // SAFETY: ends the child without running the parent's
                // destructors or atexit handlers (they are not its own).
                unsafe { libc::_exit(0) };
            }
            std::thread::Builder::new()
                .name("verbatim-snapshot-reaper".into())
                .spawn(move || {
                    let mut status = 0;
                    // SAFETY: waits for our own child; `status` is valid.
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
        let inline = AtomicU64::new(0);
        run(SnapshotWriter::Inline, || inline.store(1, Ordering::SeqCst)).unwrap();
        assert_eq!(inline.load(Ordering::SeqCst), 1);
    }
}
