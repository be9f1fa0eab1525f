//! Death notices: learning that a replica's process died before the
//! kernel has finished tearing it down.
//!
//! A pidfd only becomes readable at the very end of a process's exit,
//! after its address space is unmapped: with three mapped segments of
//! ~11 MB that takes 1–3 ms here, all of it failover time. The kernel
//! does something much earlier in `do_exit`: before it releases the
//! memory it walks each dying thread's *robust futex list*, marks every
//! futex that thread held with `FUTEX_OWNER_DIED` and wakes a waiter
//! (Documentation/locking/robust-futexes.rst). So every replica holds, on
//! its poll thread, one robust process-shared mutex per possible watcher
//! in a small file of its own; a peer's watcher thread waits to lock its
//! mutex and gets `EOWNERDEAD` within ~0.15 ms of a SIGKILL, the same
//! notification uKharon's "deadbeat" kernel module gives, without a
//! module.
//!
//! ```text
//! page: 0 magic | 8 owner pid | 16 owner tid (u32) | 20 ready (u32)
//!       512 + 64·k: robust mutex of watcher k (k < MAX_MEMBERS)
//! ```
//! While the owner holds them, each mutex's futex word (its first 32
//! bits, the robust-futex ABI: owner TID plus two flag bits) equals the
//! owner's TID: anyone can check liveness with one load (clients do).
//!
//! The owner's mapping is never unmapped: glibc links the robust mutexes a
//! thread holds through the mutexes themselves, so unmapping one that is
//! held would make the next lock or unlock of that thread touch unmapped
//! memory. A watcher unlocks before it drops its mapping.

use crate::error::ShmError;
use memmap2::MmapRaw;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use verbatim_core::fabric::{MemberId, MAX_MEMBERS};

const MAGIC: u64 = u64::from_le_bytes(*b"VBNOTICE");
const N_MAGIC: usize = 0;
const N_PID: usize = 8;
const N_TID: usize = 16;
const N_READY: usize = 20;
const N_MUTEXES: usize = 512;
const MUTEX_STRIDE: usize = 64;
const FILE_BYTES: usize = 4096;
/// The robust-futex word's owner TID bits (linux/futex.h).
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;

const _: () = assert!(std::mem::size_of::<libc::pthread_mutex_t>() <= MUTEX_STRIDE);
const _: () = assert!(N_MUTEXES + MAX_MEMBERS * MUTEX_STRIDE <= FILE_BYTES);

/// The death-notice file next to a segment.
pub fn notice_path(segment_path: &Path) -> PathBuf {
    let mut s = segment_path.as_os_str().to_owned();
    s.push(".alive");
    PathBuf::from(s)
}

fn mutex_at(base: *mut u8, k: usize) -> *mut libc::pthread_mutex_t {
    assert!(k < MAX_MEMBERS);
    // SAFETY: N_MUTEXES + k·64 + 64 <= FILE_BYTES (asserted above), inside
    // the mapping; 64-byte offsets keep the mutex 8-aligned.
    unsafe { base.add(N_MUTEXES + k * MUTEX_STRIDE) as *mut libc::pthread_mutex_t }
}

fn word64(base: *mut u8, at: usize) -> &'static AtomicU64 {
    // SAFETY: `at` is 8-aligned and inside a mapping that is either leaked
    // (owner) or outlives every use (watchers borrow through `self`); the
    // word is only accessed atomically.
    unsafe { &*(base.add(at) as *const AtomicU64) }
}

fn word32(base: *mut u8, at: usize) -> &'static AtomicU32 {
    // SAFETY: as for `word64`, 4-aligned.
    unsafe { &*(base.add(at) as *const AtomicU32) }
}

/// The owner's side: holds one robust mutex per watcher until the process
/// (more exactly, the thread that called [`DeathNotices::hold`]) exits.
pub struct DeathNotices {
    base: *mut u8,
    path: PathBuf,
}

// SAFETY: `base` points into a leaked shared mapping accessed atomically
// or through pthread calls made by the holding thread.
unsafe impl Send for DeathNotices {}
// SAFETY: as above.
unsafe impl Sync for DeathNotices {}

impl DeathNotices {
    /// Creates the file at `path` (replacing a stale one), initialises the
    /// mutexes and locks them all on the calling thread, which must live
    /// as long as the replica: its exit is what the notices announce.
    pub fn hold(path: &Path) -> Result<DeathNotices, ShmError> {
        // A live replica's notices are never replaced (a second replica
        // with the same id is refused by its segment right after).
        if NoticeWatch::open(path).is_ok_and(|w| w.owner_alive()) {
            return Err(ShmError::Malformed {
                path: path.to_owned(),
                what: "death notices held by a running replica",
            });
        }
        let tmp = {
            let mut s = path.as_os_str().to_owned();
            s.push(format!(".tmp{}", std::process::id()));
            PathBuf::from(s)
        };
        let file =
            crate::files::create_private_file(&tmp).map_err(|e| ShmError::io(&tmp, "create", e))?;
        file.set_len(FILE_BYTES as u64)
            .map_err(|e| ShmError::io(&tmp, "size", e))?;
        let map = MmapRaw::map_raw(&file).map_err(|e| ShmError::io(&tmp, "map", e))?;
        let base = map.as_mut_ptr();
        // Never unmapped (module docs): the robust list runs through it.
        std::mem::forget(map);
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        for k in 0..MAX_MEMBERS {
            let m = mutex_at(base, k);
            // SAFETY: `m` is a properly aligned, writable pthread_mutex_t
            // in fresh memory nobody else maps yet; the attribute object
            // lives on our stack for the duration of the calls.
            unsafe {
                let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
                libc::pthread_mutexattr_init(&mut attr);
                libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
                libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
                let rc = libc::pthread_mutex_init(m, &attr);
                libc::pthread_mutexattr_destroy(&mut attr);
                if rc != 0 || libc::pthread_mutex_lock(m) != 0 {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(ShmError::io(
                        &tmp,
                        "lock a death notice",
                        std::io::Error::from_raw_os_error(rc),
                    ));
                }
            }
        }
        word64(base, N_PID).store(u64::from(std::process::id()), Ordering::Relaxed);
        word32(base, N_TID).store(tid, Ordering::Relaxed);
        word64(base, N_MAGIC).store(MAGIC, Ordering::Relaxed);
        word32(base, N_READY).store(1, Ordering::Release);
        std::fs::rename(&tmp, path).map_err(|e| ShmError::io(path, "publish", e))?;
        Ok(DeathNotices {
            base,
            path: path.to_owned(),
        })
    }

    /// Removes the file (at shutdown); the mapping stays, as it must.
    pub fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for DeathNotices {
    fn drop(&mut self) {
        self.unlink();
    }
}

impl DeathNotices {
    /// True while the notices are held (for tests).
    pub fn held(&self) -> bool {
        let tid = word32(self.base, N_TID).load(Ordering::Relaxed);
        (0..MAX_MEMBERS).all(|k| {
            word32(mutex_at(self.base, k) as *mut u8, 0).load(Ordering::Acquire) & FUTEX_TID_MASK
                == tid
        })
    }
}

/// A watcher's (or client's) view of another replica's notices.
pub struct NoticeWatch {
    map: MmapRaw,
    owner_tid: u32,
    owner_pid: i32,
}

// SAFETY: the mapping is only accessed atomically or through pthread
// calls on process-shared mutexes.
unsafe impl Send for NoticeWatch {}
// SAFETY: as above.
unsafe impl Sync for NoticeWatch {}

/// How a wait for a death notice ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeWait {
    /// The owner died (or released its notices on the way out).
    OwnerGone,
    /// `stop` was set.
    Stopped,
    /// The mutex misbehaved (not a notice file of ours): fall back to
    /// other detectors.
    Unusable,
}

impl NoticeWatch {
    /// Maps the notice file at `path` if it is complete.
    pub fn open(path: &Path) -> Result<NoticeWatch, ShmError> {
        let (file, _) = crate::shared::open_shared_file(
            path,
            FILE_BYTES as u64,
            "death-notice file too short",
        )?;
        let map = MmapRaw::map_raw(&file).map_err(|e| ShmError::io(path, "map", e))?;
        let base = map.as_mut_ptr();
        if word32(base, N_READY).load(Ordering::Acquire) != 1
            || word64(base, N_MAGIC).load(Ordering::Relaxed) != MAGIC
        {
            return Err(ShmError::Malformed {
                path: path.to_owned(),
                what: "death-notice file not initialised",
            });
        }
        Ok(NoticeWatch {
            owner_tid: word32(base, N_TID).load(Ordering::Relaxed),
            owner_pid: word64(base, N_PID).load(Ordering::Relaxed) as i32,
            map,
        })
    }

    /// The owner's process id.
    pub fn owner_pid(&self) -> i32 {
        self.owner_pid
    }

    /// One load: false once the owner no longer holds its notices (it
    /// died, or is exiting). Cheap enough for a client's spin loop.
    pub fn owner_alive(&self) -> bool {
        // Watcher 0's mutex is as good as any: the kernel marks all of
        // them at the owner's death, and only watcher 0 ever locks it.
        // The last one is used instead when watcher 0 is the owner itself
        // (never locked by anyone else either).
        let k = MAX_MEMBERS - 1;
        let w = word32(mutex_at(self.map.as_mut_ptr(), k) as *mut u8, 0).load(Ordering::Acquire);
        w & FUTEX_TID_MASK == self.owner_tid && w & FUTEX_TID_MASK != 0
    }

    /// Blocks until the owner is gone or `stop` is set (checked every
    /// `check`), waiting on the mutex reserved for watcher `me`. Only one
    /// thread may wait on a given (owner, watcher) pair.
    pub fn wait_owner_gone(&self, me: MemberId, stop: &AtomicBool, check: Duration) -> NoticeWait {
        if me.index() >= MAX_MEMBERS - 1 {
            // The last mutex is the clients' (never locked by a watcher).
            return NoticeWait::Unusable;
        }
        let m = mutex_at(self.map.as_mut_ptr(), me.index());
        loop {
            if stop.load(Ordering::Acquire) {
                return NoticeWait::Stopped;
            }
            let deadline = realtime_after(check);
            // SAFETY: `m` is a process-shared robust mutex initialised by
            // the owner (checked by `open`), inside our live mapping.
            let rc = unsafe { libc::pthread_mutex_timedlock(m, &deadline) };
            match rc {
                libc::ETIMEDOUT => continue,
                libc::EOWNERDEAD | 0 => {
                    // Leave it unrecoverable and off our robust list before
                    // the mapping can go away (module docs).
                    // SAFETY: we hold the mutex (EOWNERDEAD or 0 means we
                    // acquired it).
                    unsafe { libc::pthread_mutex_unlock(m) };
                    return NoticeWait::OwnerGone;
                }
                libc::ENOTRECOVERABLE => return NoticeWait::OwnerGone,
                _ => return NoticeWait::Unusable,
            }
        }
    }
}

fn realtime_after(d: Duration) -> libc::timespec {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    let total_ns = now.tv_nsec as u64 + u64::from(d.subsec_nanos());
    libc::timespec {
        tv_sec: now.tv_sec
            + d.as_secs() as libc::time_t
            + (total_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (total_ns % 1_000_000_000) as _,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    fn in_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn a_holder_thread_that_ends_is_seen_gone_by_a_watcher_and_a_client() {
        let dir = tempfile::tempdir().unwrap();
        let path = notice_path(&dir.path().join("seg"));
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let p = path.clone();
        let holder = std::thread::spawn(move || {
            let n = DeathNotices::hold(&p).unwrap();
            held_tx.send(n.held()).unwrap();
            end_rx.recv().unwrap();
            // The thread ends holding the notices: the kernel's robust
            // list walk marks them, as at a process death.
        });
        assert!(held_rx.recv().unwrap(), "the holder holds every notice");
        let watch = Arc::new(NoticeWatch::open(&path).unwrap());
        assert!(watch.owner_alive());
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s) = (watch.clone(), stop.clone());
        let waiter = std::thread::spawn(move || {
            let r = w.wait_owner_gone(MemberId(1), &s, Duration::from_millis(20));
            (r, Instant::now())
        });
        // Still alive while the holder lives: the waiter keeps waiting.
        std::thread::sleep(Duration::from_millis(60));
        assert!(!waiter.is_finished());
        let ended = Instant::now();
        end_tx.send(()).unwrap();
        holder.join().unwrap();
        let (r, at) = waiter.join().unwrap();
        assert_eq!(r, NoticeWait::OwnerGone);
        assert!(at >= ended);
        assert!(!watch.owner_alive(), "one load shows the owner gone");
        // A second watcher of the same owner learns it at once.
        let again = in_thread({
            let w = watch.clone();
            move || {
                w.wait_owner_gone(
                    MemberId(2),
                    &AtomicBool::new(false),
                    Duration::from_millis(20),
                )
            }
        });
        assert_eq!(again, NoticeWait::OwnerGone);
    }

    #[test]
    fn a_waiting_watcher_stops_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = notice_path(&dir.path().join("seg"));
        let n = DeathNotices::hold(&path).unwrap();
        let watch = NoticeWatch::open(&path).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let r = std::thread::scope(|scope| {
            let h =
                scope.spawn(|| watch.wait_owner_gone(MemberId(0), &s, Duration::from_millis(10)));
            std::thread::sleep(Duration::from_millis(30));
            stop.store(true, Ordering::Release);
            h.join().unwrap()
        });
        assert_eq!(r, NoticeWait::Stopped);
        assert!(watch.owner_alive() && n.held());
        // The last mutex is the clients': no watcher may take it.
        assert_eq!(
            watch.wait_owner_gone(
                MemberId(MAX_MEMBERS as u8 - 1),
                &stop,
                Duration::from_millis(1)
            ),
            NoticeWait::Unusable
        );
    }

    #[test]
    fn live_notices_are_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = notice_path(&dir.path().join("seg"));
        let n = DeathNotices::hold(&path).unwrap();
        assert!(
            DeathNotices::hold(&path).is_err(),
            "a running owner keeps its file"
        );
        assert!(NoticeWatch::open(&path).unwrap().owner_alive() && n.held());
    }

    #[test]
    fn files_that_are_not_notices_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, b"x").unwrap();
        assert!(NoticeWatch::open(&short).is_err());
        let zeros = dir.path().join("zeros");
        std::fs::write(&zeros, vec![0u8; FILE_BYTES]).unwrap();
        assert!(NoticeWatch::open(&zeros).is_err());
    }
}
