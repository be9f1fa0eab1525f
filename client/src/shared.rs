//! Files mapped by several processes at once: replica segments, client-slot
//! segments, death notices.
//!
//! Whoever maps such a file shares it with processes that write it behind
//! the compiler's back (peers, clients, possibly a hostile local process),
//! so nothing in it is ever behind a Rust reference to plain data: words
//! are `AtomicU64`/`AtomicU32`, byte ranges are copied in and out word by
//! word with atomics ([`SharedMap::read`], [`SharedMap::write`]), and
//! every offset is checked against the mapping.

use crate::error::ShmError;
use memmap2::MmapRaw;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

/// A shared file mapped read-write.
pub struct SharedMap {
    map: MmapRaw,
    len: u64,
    path: PathBuf,
}

// SAFETY: the mapping is only accessed through atomics (words, and the
// copies of `copy_shared`), so sharing it between threads is sound.
unsafe impl Send for SharedMap {}
// SAFETY: as above.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Creates a private (0600) file of `len` zero bytes at `tmp` and maps
    /// it; the caller initialises it and then [`SharedMap::publish`]es it
    /// under its real name, so nobody maps a half-initialised file.
    pub fn create(tmp: &Path, len: u64) -> Result<SharedMap, ShmError> {
        let file =
            crate::files::create_private_file(tmp).map_err(|e| ShmError::io(tmp, "create", e))?;
        file.set_len(len)
            .map_err(|e| ShmError::io(tmp, "size", e))?;
        let map = MmapRaw::map_raw(&file).map_err(|e| ShmError::io(tmp, "map", e))?;
        Ok(SharedMap {
            map,
            len,
            path: tmp.to_owned(),
        })
    }

    /// Renames a file made by [`SharedMap::create`] to `path` (replacing a
    /// stale one; whoever still maps the old inode keeps a valid mapping).
    pub fn publish(&mut self, path: &Path) -> Result<(), ShmError> {
        std::fs::rename(&self.path, path).map_err(|e| ShmError::io(path, "publish", e))?;
        self.path = path.to_owned();
        Ok(())
    }

    /// Maps an existing file, refusing one shorter than `min_len` with
    /// `too_short`.
    pub fn open(path: &Path, min_len: u64, too_short: &'static str) -> Result<SharedMap, ShmError> {
        let (file, len) = open_shared_file(path, min_len, too_short)?;
        let map = MmapRaw::map_raw(&file).map_err(|e| ShmError::io(path, "map", e))?;
        Ok(SharedMap {
            map,
            len,
            path: path.to_owned(),
        })
    }

    /// Bytes mapped.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty mapping.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the file (clean shutdown). Mappings stay valid.
    pub fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// True when `[offset, offset + len)` lies inside the mapping.
    #[inline]
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// The 8-byte word at `offset`. Panics when it is misaligned or out of
    /// bounds: offsets come from our own layouts, never from the file.
    #[inline]
    pub fn word(&self, offset: u64) -> &AtomicU64 {
        assert!(offset.is_multiple_of(8) && self.contains(offset, 8));
        // SAFETY: 8-aligned (the mapping is page-aligned) and in bounds of
        // a live mapping; every process accesses the word atomically.
        unsafe { &*(self.map.as_mut_ptr().add(offset as usize) as *const AtomicU64) }
    }

    /// The 4-byte word at `offset` (futex words). Panics as [`SharedMap::word`].
    pub fn word32(&self, offset: u64) -> &AtomicU32 {
        assert!(offset.is_multiple_of(4) && self.contains(offset, 4));
        // SAFETY: as for `word`, with 4-byte alignment.
        unsafe { &*(self.map.as_mut_ptr().add(offset as usize) as *const AtomicU32) }
    }

    /// Copies `dst.len()` bytes at `offset` out (Acquire: what was
    /// published before a word the caller loaded is seen). Panics when out
    /// of bounds.
    #[inline]
    pub fn read(&self, offset: u64, dst: &mut [u8]) {
        assert!(self.contains(offset, dst.len() as u64));
        std::sync::atomic::fence(Ordering::Acquire);
        // SAFETY: in bounds (asserted) of a live mapping; `dst` is private.
        unsafe {
            copy_shared(
                self.map.as_mut_ptr().add(offset as usize),
                dst.as_mut_ptr(),
                dst.len(),
            )
        }
        std::sync::atomic::fence(Ordering::Acquire);
    }

    /// Copies `src` in at `offset` (Release: a word stored after it
    /// publishes it). Panics when out of bounds.
    #[inline]
    pub fn write(&self, offset: u64, src: &[u8]) {
        assert!(self.contains(offset, src.len() as u64));
        std::sync::atomic::fence(Ordering::Release);
        // SAFETY: in bounds (asserted) of a live mapping; `src` is private.
        unsafe {
            copy_shared(
                src.as_ptr(),
                self.map.as_mut_ptr().add(offset as usize),
                src.len(),
            )
        }
        std::sync::atomic::fence(Ordering::Release);
    }

    /// The base of the mapping, for code that checks its own bounds (the
    /// shared-memory fabric's regions, RDMA registration). Access the
    /// memory only through atomics or [`copy_shared`].
    pub fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
}

/// Opens a shared file for mapping (read and write) and returns it with its
/// length, refusing one shorter than `min_len` with `too_short`.
pub fn open_shared_file(
    path: &Path,
    min_len: u64,
    too_short: &'static str,
) -> Result<(std::fs::File, u64), ShmError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| ShmError::io(path, "open", e))?;
    let len = file
        .metadata()
        .map_err(|e| ShmError::io(path, "stat", e))?
        .len();
    if len < min_len {
        return Err(ShmError::Malformed {
            path: path.to_owned(),
            what: too_short,
        });
    }
    Ok((file, len))
}

/// Copies `len` bytes between two locations either of which may be shared
/// with other processes, word by word where both are aligned.
///
/// # Safety
/// `src` and `dst` must be valid for `len` bytes (of a live mapping or a
/// private buffer), and shared memory among them only ever accessed
/// atomically by other parties.
#[inline]
pub unsafe fn copy_shared(src: *const u8, dst: *mut u8, len: usize) {
    // Bytes up to the first 8-byte boundary of both (when they share one),
    // then whole words in a tight loop, then the tail bytes: the alignment
    // test stays out of the word loop, which every WRITE and READ of the
    // shared-memory fabric runs.
    let same_phase = (src as usize) % 8 == (dst as usize) % 8;
    let head = if same_phase {
        ((8 - (src as usize) % 8) % 8).min(len)
    } else {
        len
    };
    // SAFETY: in bounds (caller); bytes are always aligned.
    unsafe { copy_bytes(src, dst, head) };
    let words = (len - head) / 8;
    for k in 0..words {
        let at = head + 8 * k;
        // SAFETY: both 8-byte aligned (same phase, past the head), in
        // bounds (caller), atomically accessed.
        let w = unsafe { (*(src.add(at) as *const AtomicU64)).load(Ordering::Relaxed) };
        // SAFETY: as above.
        unsafe { (*(dst.add(at) as *const AtomicU64)).store(w, Ordering::Relaxed) };
    }
    let done = head + 8 * words;
    // SAFETY: in bounds (caller).
    unsafe { copy_bytes(src.add(done), dst.add(done), len - done) };
}

/// Byte-wise atomic copy.
///
/// # Safety
/// As [`copy_shared`].
#[inline]
unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    for i in 0..len {
        // SAFETY: in bounds (caller); single bytes are always aligned.
        let b = unsafe { (*(src.add(i) as *const AtomicU8)).load(Ordering::Relaxed) };
        // SAFETY: as above.
        unsafe { (*(dst.add(i) as *const AtomicU8)).store(b, Ordering::Relaxed) };
    }
}

/// Sleeps while `*word == expected`, at most `timeout` (FUTEX_WAIT on a
/// shared word: not FUTEX_PRIVATE, the waker is another process).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 inside a live mapping,
    // with a valid timespec; the kernel only reads the word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes one sleeper on `word`.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 of a live mapping.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1);
    }
}

/// `struct futex_waitv` (linux/futex.h).
#[repr(C)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// FUTEX2_SIZE_U32 (linux/futex.h): a 32-bit futex, shared (no
/// FUTEX2_PRIVATE).
const FUTEX2_SIZE_U32: u32 = 0x02;
/// The futex_waitv system call (Linux 5.16; same number on every
/// architecture that has it).
const SYS_FUTEX_WAITV: libc::c_long = 449;

/// Sleeps until any of `words` differs from its expected value, one is
/// woken, or `timeout` passes (futex_waitv). A replica parks on two
/// doorbells: the one its peers ring in its segment, the one its clients
/// ring in its client-slot segment. On a kernel without futex_waitv it
/// sleeps on the first word only, for at most 50 µs at a time, so the
/// others are still looked at often.
pub fn futex_wait_any(words: &[(&AtomicU32, u32)], timeout: Duration) {
    const MAX_WORDS: usize = 4;
    assert!(!words.is_empty() && words.len() <= MAX_WORDS);
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let total_ns = now.tv_nsec as u64 + u64::from(timeout.subsec_nanos());
    let deadline = libc::timespec {
        tv_sec: now.tv_sec
            + timeout.as_secs().min(i32::MAX as u64) as libc::time_t
            + (total_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (total_ns % 1_000_000_000) as _,
    };
    let mut waiters: [FutexWaitv; MAX_WORDS] = std::array::from_fn(|_| FutexWaitv {
        val: 0,
        uaddr: 0,
        flags: 0,
        reserved: 0,
    });
    for (w, (word, expected)) in waiters.iter_mut().zip(words) {
        w.val = u64::from(*expected);
        w.uaddr = word.as_ptr() as u64;
        w.flags = FUTEX2_SIZE_U32;
    }
    // SAFETY: `waiters[..n]` are valid futex_waitv records naming aligned
    // u32 words of live mappings; the deadline is a valid absolute
    // CLOCK_MONOTONIC timespec; the kernel only reads them.
    let r = unsafe {
        libc::syscall(
            SYS_FUTEX_WAITV,
            waiters.as_ptr(),
            words.len() as libc::c_uint,
            0 as libc::c_uint,
            &deadline as *const libc::timespec,
            libc::CLOCK_MONOTONIC,
        )
    };
    if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        let (word, expected) = words[0];
        futex_wait(word, expected, timeout.min(Duration::from_micros(50)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn bytes_and_words_round_trip_and_bounds_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = SharedMap::create(&dir.path().join("x.tmp"), 4096).unwrap();
        m.publish(&dir.path().join("x")).unwrap();
        m.write(13, b"unaligned bytes");
        let mut out = [0u8; 15];
        m.read(13, &mut out);
        assert_eq!(&out, b"unaligned bytes");
        m.word(4088).store(7, Ordering::Release);
        let again = SharedMap::open(&dir.path().join("x"), 64, "short").unwrap();
        assert_eq!(again.word(4088).load(Ordering::Acquire), 7);
        assert!(!again.contains(4089, 8));
        assert!(std::panic::catch_unwind(|| again.word(4096).load(Ordering::Relaxed)).is_err());
        assert!(matches!(
            SharedMap::open(&dir.path().join("x"), 8192, "too short"),
            Err(ShmError::Malformed {
                what: "too short",
                ..
            })
        ));
    }

    #[test]
    fn copy_shared_copies_every_byte_at_every_alignment_and_nothing_else() {
        let src: Vec<u8> = (0..96u8)
            .map(|b| b.wrapping_mul(37).wrapping_add(11))
            .collect();
        for src_off in 0..9 {
            for dst_off in 0..9 {
                for len in 0..40 {
                    let mut dst = vec![0xEEu8; 96];
                    // SAFETY: both buffers are private and long enough.
                    unsafe {
                        copy_shared(
                            src.as_ptr().add(src_off),
                            dst.as_mut_ptr().add(dst_off),
                            len,
                        )
                    };
                    assert_eq!(&dst[dst_off..dst_off + len], &src[src_off..src_off + len]);
                    assert!(dst[..dst_off].iter().all(|&b| b == 0xEE));
                    assert!(dst[dst_off + len..].iter().all(|&b| b == 0xEE));
                }
            }
        }
    }

    #[test]
    fn a_wait_on_two_words_ends_when_either_is_rung() {
        let dir = tempfile::tempdir().unwrap();
        let m = Arc::new(SharedMap::create(&dir.path().join("f"), 4096).unwrap());
        for rung in [0u64, 64] {
            let m2 = m.clone();
            let waker = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                m2.word32(rung).fetch_add(1, Ordering::SeqCst);
                futex_wake(m2.word32(rung));
            });
            let began = Instant::now();
            let (a, b) = (m.word32(0), m.word32(64));
            let (va, vb) = (a.load(Ordering::SeqCst), b.load(Ordering::SeqCst));
            // A generous timeout: the wait must end by the ring, well before.
            while a.load(Ordering::SeqCst) == va && b.load(Ordering::SeqCst) == vb {
                futex_wait_any(&[(a, va), (b, vb)], Duration::from_secs(20));
            }
            assert!(began.elapsed() < Duration::from_secs(20));
            waker.join().unwrap();
        }
    }
}
