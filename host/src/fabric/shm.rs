//! The shared-memory one-sided fabric: the default on any Linux machine.
//!
//! Each replica's registered regions live in one shared-memory segment (a
//! file under `/dev/shm`) that its peers map. A one-sided operation is
//! executed by the *initiator's* CPU on the mapped peer memory (a copy, or
//! an atomic), and completes through the initiator's completion queue, in
//! order per connection, exactly as the core expects from RDMA.
//!
//! * **Access** is a word per (region, peer) in the target's segment
//!   header: a "granted" bit and a count of writers in progress. A writer
//!   increments the count, checks the bit, copies, decrements. A revoke
//!   clears the bit and waits for the count to drain: once it returns, no
//!   write from that peer lands (DARE §3.2.1).
//! * **Peer death** is learned from the kernel, the spirit of uKharon's
//!   "deadbeat" notification without a kernel module: first from the
//!   peer's death notice (a robust futex its poll thread holds, released
//!   early in the kernel's exit path, ~0.05–0.4 ms after a SIGKILL here;
//!   see `notice`), one waiter thread per peer; and as a fallback from its
//!   pidfd (Linux ≥ 5.3), readable only once the whole process is torn
//!   down (1–3 ms). A dead peer's later operations complete `Unreachable`.
//!   A stopped (SIGSTOP) peer is not dead: its memory is still written,
//!   like DARE's zombie server.
//! * **Doorbells**: a replica that parks (adaptive polling) sleeps on a
//!   futex word in its own header. Writers ring it for work requests that
//!   carry the `notify` hint (election traffic) and clients ring it for
//!   requests; the replication path never wakes a follower.
//!
//! All accesses to mapped memory go through atomics (aligned words) so
//! that concurrent writers in other processes are never a data race.

use crate::fabric::liveness::{spawn_notice_waiter, PeerLiveness, Wake};
use memmap2::MmapRaw;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use verbatim_client::error::ShmError;
use verbatim_client::notice::{notice_path, NoticeWatch};
use verbatim_client::process::ProcessId;
use verbatim_client::shared::{copy_shared, futex_wait_any, futex_wake, open_shared_file};
use verbatim_client::slots::SlotSegment;
use verbatim_core::fabric::{
    Access, Addr, Channel, Completion, Fabric, FabricError, MemberId, Op, RegionId, WcStatus,
    WorkRequest, MAX_MEMBERS, REGIONS_MAX,
};
use verbatim_core::layout::Layout;
use verbatim_core::mem::Memory;

/// "VERBATIM" in little-endian.
pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"VERBATIM");
/// Bumped when the header layout changes.
pub const SEGMENT_VERSION: u64 = 5;
/// Bytes of the segment header (one page).
pub const HEADER_BYTES: u64 = 4096;

const PAGE: u64 = 4096;
const H_MAGIC: u64 = 0;
const H_VERSION: u64 = 8;
const H_LAYOUT_HASH: u64 = 16;
const H_PID: u64 = 24;
const H_INCARNATION: u64 = 32;
const H_READY: u64 = 40;
const H_MEMBER_COUNT: u64 = 48;
const H_ID: u64 = 56;
/// The futex word: its own cache line, written by peers and clients.
const H_DOORBELL: u64 = 64;
/// Set while the owner sleeps on the doorbell.
const H_PARKED: u64 = 128;
/// (offset, length) of each region.
const H_REGIONS: u64 = 192;
/// Access words: [region][member].
const H_ACCESS: u64 = 512;
const _: () = assert!(H_ACCESS + (REGIONS_MAX * MAX_MEMBERS * 8) as u64 <= HEADER_BYTES);
const _: () = assert!(H_REGIONS + (REGIONS_MAX * 16) as u64 <= H_OWNER_START);
/// The owner's start time (with its pid, an identity a reused pid does
/// not repeat).
const H_OWNER_START: u64 = 488;

/// The "granted" bit of an access word; the low bits count writers.
const GRANTED: u64 = 1 << 63;
const WRITERS: u64 = GRANTED - 1;

/// How long one revoke waits for a writer caught in the middle of a copy
/// before it reports the revoke unconfirmed (the engine retries; copies
/// take microseconds, so only a stopped or descheduled writer gets here).
const REVOKE_WAIT: Duration = Duration::from_millis(1);

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

pub use verbatim_client::files::segment_path;

/// Doorbell values seen before a step of the poll loop
/// ([`Segment::doorbells`]).
#[derive(Clone, Copy, Debug)]
pub struct Doorbells {
    own: u32,
    clients: Option<u32>,
}

/// A mapped segment: the header and the five regions.
pub struct Segment {
    map: MmapRaw,
    path: PathBuf,
    regions: [(u64, u64); REGIONS_MAX],
}

// SAFETY: the mapping is only accessed through atomics (see `Segment::word`
// and the copy helpers), so sharing it between threads is sound.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Segment {
    /// (offset, length) of every region the layout declares; (0, 0) for
    /// ids no engine uses.
    fn region_table(layout: &Layout) -> ([(u64, u64); REGIONS_MAX], u64) {
        let mut table = [(0u64, 0u64); REGIONS_MAX];
        let mut at = HEADER_BYTES;
        for r in layout.regions() {
            table[r.id.index()] = (at, r.bytes);
            at = round_up(at + r.bytes, PAGE);
        }
        (table, at)
    }

    /// Creates the segment of member `id` (replacing a stale one whose
    /// owner is gone) and publishes it once fully initialised.
    pub fn create(path: &Path, layout: &Layout, id: MemberId) -> Result<Segment, ShmError> {
        if let Ok(old) = Segment::open_any(path) {
            let owner = old.owner();
            let pid = owner.pid;
            if pid != 0 && pid != std::process::id() as i32 && owner.alive() {
                return Err(ShmError::InUse {
                    path: path.to_owned(),
                    pid,
                });
            }
        }
        let (regions, total) = Segment::region_table(layout);
        // Build under a temporary name and rename: peers never map a
        // half-initialised segment, and the old inode (if any) stays valid
        // for whoever still maps it.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let file = verbatim_client::files::create_private_file(&tmp)
            .map_err(|e| ShmError::io(&tmp, "create", e))?;
        file.set_len(total)
            .map_err(|e| ShmError::io(&tmp, "size", e))?;
        let map = MmapRaw::map_raw(&file).map_err(|e| ShmError::io(&tmp, "map", e))?;
        let seg = Segment {
            map,
            path: path.to_owned(),
            regions,
        };
        seg.word(H_MAGIC).store(SEGMENT_MAGIC, Ordering::Relaxed);
        seg.word(H_VERSION)
            .store(SEGMENT_VERSION, Ordering::Relaxed);
        seg.word(H_LAYOUT_HASH)
            .store(layout.hash, Ordering::Relaxed);
        let me = ProcessId::current();
        seg.word(H_PID).store(me.pid as u64, Ordering::Relaxed);
        seg.word(H_OWNER_START)
            .store(me.start_ticks, Ordering::Relaxed);
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        seg.word(H_INCARNATION)
            .store(incarnation, Ordering::Relaxed);
        seg.word(H_MEMBER_COUNT)
            .store(u64::from(layout.member_count), Ordering::Relaxed);
        seg.word(H_ID).store(u64::from(id.0), Ordering::Relaxed);
        for (r, (off, len)) in regions.iter().enumerate() {
            seg.word(H_REGIONS + 16 * r as u64)
                .store(*off, Ordering::Relaxed);
            seg.word(H_REGIONS + 16 * r as u64 + 8)
                .store(*len, Ordering::Relaxed);
        }
        // Regions every member may access from the start (the SST's rows,
        // heartbeat counters), or the members of a subgroup (its region);
        // the log is granted by the protocol; local regions never.
        for r in layout.regions() {
            for m in 0..MAX_MEMBERS {
                let m = MemberId(m as u8);
                if r.remote.granted_from_start(m) {
                    seg.access(r.id, m).store(GRANTED, Ordering::Relaxed);
                }
            }
        }
        // Words the engines need set before any peer can see the memory
        // (a restarted coordinator's slot words answer for nothing until
        // its view engine knows which slots it may answer for).
        for (at, value) in layout.initial_words() {
            let ptr = seg
                .ptr(at, 8)
                .expect("the layout's initial words lie inside its regions");
            // SAFETY: in bounds (checked by `ptr`), 8-aligned (slot words
            // are, and regions start on page boundaries); nobody else maps
            // the segment before it is renamed into place below.
            unsafe { (*(ptr as *const AtomicU64)).store(value, Ordering::Relaxed) };
        }
        seg.word(H_READY).store(1, Ordering::Release);
        std::fs::rename(&tmp, path).map_err(|e| ShmError::io(path, "publish", e))?;
        Ok(seg)
    }

    fn open_any(path: &Path) -> Result<Segment, ShmError> {
        let (file, len) = open_shared_file(path, HEADER_BYTES, "shorter than its header")?;
        let map = MmapRaw::map_raw(&file).map_err(|e| ShmError::io(path, "map", e))?;
        let mut seg = Segment {
            map,
            path: path.to_owned(),
            regions: [(0, 0); REGIONS_MAX],
        };
        if seg.word(H_MAGIC).load(Ordering::Acquire) != SEGMENT_MAGIC {
            return Err(ShmError::Malformed {
                path: path.to_owned(),
                what: "bad magic",
            });
        }
        for r in 0..REGIONS_MAX as u64 {
            let off = seg.word(H_REGIONS + 16 * r).load(Ordering::Relaxed);
            let rlen = seg.word(H_REGIONS + 16 * r + 8).load(Ordering::Relaxed);
            if (off, rlen) == (0, 0) {
                continue; // an id no engine of this layout uses
            }
            if off < HEADER_BYTES
                || off.checked_add(rlen).is_none_or(|end| end > len)
                || !off.is_multiple_of(8)
            {
                return Err(ShmError::Malformed {
                    path: path.to_owned(),
                    what: "region table out of bounds",
                });
            }
            seg.regions[r as usize] = (off, rlen);
        }
        Ok(seg)
    }

    /// Maps a peer's segment, checking it is complete and has our layout.
    pub fn open(path: &Path, layout: &Layout) -> Result<Segment, ShmError> {
        let seg = Segment::open_any(path)?;
        if seg.word(H_READY).load(Ordering::Acquire) != 1 {
            return Err(ShmError::NotReady {
                path: path.to_owned(),
            });
        }
        let version = seg.word(H_VERSION).load(Ordering::Relaxed);
        if version != SEGMENT_VERSION {
            return Err(ShmError::Version {
                path: path.to_owned(),
                found: version,
                expected: SEGMENT_VERSION,
            });
        }
        let hash = seg.word(H_LAYOUT_HASH).load(Ordering::Relaxed);
        if hash != layout.hash {
            return Err(ShmError::LayoutMismatch {
                path: path.to_owned(),
                found: hash,
                expected: layout.hash,
            });
        }
        for r in layout.regions() {
            if seg.regions[r.id.index()].1 < r.bytes {
                return Err(ShmError::Malformed {
                    path: path.to_owned(),
                    what: "region smaller than the layout",
                });
            }
        }
        Ok(seg)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A header word.
    fn word(&self, offset: u64) -> &AtomicU64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= HEADER_BYTES);
        // SAFETY: the offset is 8-aligned and inside the header page of a
        // live mapping (page-aligned base), and the word is only ever
        // accessed atomically by every process that maps it.
        unsafe { &*(self.map.as_mut_ptr().add(offset as usize) as *const AtomicU64) }
    }

    fn word32(&self, offset: u64) -> &AtomicU32 {
        assert!(offset.is_multiple_of(4) && offset + 4 <= HEADER_BYTES);
        // SAFETY: as for `word`, with 4-byte alignment.
        unsafe { &*(self.map.as_mut_ptr().add(offset as usize) as *const AtomicU32) }
    }

    /// The owner's process id.
    pub fn pid(&self) -> i32 {
        self.word(H_PID).load(Ordering::Acquire) as i32
    }

    /// The owning process (pid and start time).
    pub fn owner(&self) -> ProcessId {
        ProcessId {
            pid: self.pid(),
            start_ticks: self.word(H_OWNER_START).load(Ordering::Acquire),
        }
    }

    /// Changes with every (re)creation of the segment.
    pub fn incarnation(&self) -> u64 {
        self.word(H_INCARNATION).load(Ordering::Acquire)
    }

    /// The owner's member id.
    pub fn member_id(&self) -> u64 {
        self.word(H_ID).load(Ordering::Relaxed)
    }

    /// The access word of `member` for `region`.
    fn access(&self, region: RegionId, member: MemberId) -> &AtomicU64 {
        assert!(region.index() < REGIONS_MAX && member.index() < MAX_MEMBERS);
        self.word(H_ACCESS + 8 * (region.index() * MAX_MEMBERS + member.index()) as u64)
    }

    /// True when `member` may access `region`.
    pub fn granted(&self, region: RegionId, member: MemberId) -> bool {
        member.index() < MAX_MEMBERS
            && region.index() < REGIONS_MAX
            && self.access(region, member).load(Ordering::Acquire) & GRANTED != 0
    }

    /// The doorbell futex word.
    pub fn doorbell(&self) -> &AtomicU32 {
        self.word32(H_DOORBELL)
    }

    fn parked(&self) -> &AtomicU32 {
        self.word32(H_PARKED)
    }

    /// Pointer to `[at, at+len)`, checked against the region bounds.
    fn ptr(&self, at: Addr, len: u64) -> Option<*mut u8> {
        let (off, rlen) = *self.regions.get(at.region.index())?;
        let end = at.offset.checked_add(len)?;
        if end > rlen {
            return None;
        }
        // SAFETY: `off + at.offset + len <= off + rlen`, which lies inside
        // the mapping (checked when the segment was created or opened).
        Some(unsafe { self.map.as_mut_ptr().add((off + at.offset) as usize) })
    }

    /// Base pointer and length of a region (for registering it with an
    /// RDMA device). The memory is shared with other processes: access it
    /// only through atomics, as [`ShmMemory`] does.
    pub fn region_base(&self, region: RegionId) -> (*mut u8, u64) {
        let (off, len) = self.regions[region.index()];
        // SAFETY: `off` lies inside the mapping (checked at creation/open).
        (unsafe { self.map.as_mut_ptr().add(off as usize) }, len)
    }

    /// Bytes of a region.
    pub fn region_len(&self, region: RegionId) -> u64 {
        self.regions[region.index()].1
    }

    /// Rings this segment's doorbell when called (for the liveness
    /// watchers, which wake a parked poll loop).
    pub fn waker(self: &Arc<Self>) -> Wake {
        let seg = self.clone();
        Arc::new(move || seg.ring())
    }

    /// Wakes the owner if it sleeps on its doorbell.
    pub fn ring(&self) {
        self.doorbell().fetch_add(1, Ordering::SeqCst);
        if self.parked().load(Ordering::SeqCst) != 0 {
            futex_wake(self.doorbell());
        }
    }

    /// The values of this doorbell and of the client-slot segment's now.
    /// The poll loop takes them before a step looks at memory and parks on
    /// them ([`Segment::park`]): a ring that comes during the step, when
    /// the loop is not flagged parked and so is not woken, still changes a
    /// value and ends the park at once. (Read in `park`, after the step,
    /// such a ring was lost: a candidate slept out its timer, about a
    /// millisecond, with the vote it waited for already in its memory.)
    pub fn doorbells(&self, clients: Option<&SlotSegment>) -> Doorbells {
        Doorbells {
            own: self.doorbell().load(Ordering::SeqCst),
            clients: clients.map(|c| c.doorbell().load(Ordering::SeqCst)),
        }
    }

    /// Parks the owner: `idle_check` runs after the parked flags are set
    /// (a last look for work that arrived meanwhile); if it returns true
    /// the thread sleeps until this doorbell (peers, gateway threads) or
    /// the client-slot segment's (clients) is rung, or `timeout` passes.
    /// `seen` are the doorbells' values from before the caller last looked
    /// for work ([`Segment::doorbells`]): a ring since returns at once.
    pub fn park(
        &self,
        clients: Option<&SlotSegment>,
        seen: Doorbells,
        timeout: Duration,
        idle_check: impl FnOnce() -> bool,
    ) {
        self.parked().store(1, Ordering::SeqCst);
        if let Some(c) = clients {
            c.parked().store(1, Ordering::SeqCst);
        }
        let Doorbells {
            own: seen,
            clients: seen_clients,
        } = seen;
        if idle_check() {
            match (clients, seen_clients) {
                (Some(c), Some(sc)) => {
                    futex_wait_any(&[(self.doorbell(), seen), (c.doorbell(), sc)], timeout)
                }
                _ => futex_wait_any(&[(self.doorbell(), seen)], timeout),
            }
        }
        if let Some(c) = clients {
            c.parked().store(0, Ordering::SeqCst);
        }
        self.parked().store(0, Ordering::SeqCst);
    }

    /// Makes another process the owner that peers watch (tests use a child
    /// process as the "owner" of a segment created in-process).
    #[doc(hidden)]
    pub fn set_owner_pid(&self, pid: i32) {
        // The identity is pid and start time: a pid alone with the old
        // start time would name a process that never existed.
        let start = verbatim_client::process::start_ticks(pid).unwrap_or(0);
        self.word(H_OWNER_START).store(start, Ordering::Release);
        self.word(H_PID).store(pid as u64, Ordering::Release);
    }

    /// Removes the file (clean shutdown). Mappings stay valid.
    pub fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Copies mapped memory out into a private buffer.
///
/// # Safety
/// `src` valid for `dst.len()` bytes of a live mapping, atomically accessed.
unsafe fn copy_out(src: *const u8, dst: &mut [u8]) {
    // SAFETY: `dst` is a private buffer; atomics on it are harmless, and
    // the caller guarantees `src`.
    unsafe { copy_shared(src, dst.as_mut_ptr(), dst.len()) }
}

/// Copies a private buffer into mapped memory.
///
/// # Safety
/// `dst` valid for `src.len()` bytes of a live mapping, atomically accessed.
unsafe fn copy_in(src: &[u8], dst: *mut u8) {
    // SAFETY: as for `copy_out`.
    unsafe { copy_shared(src.as_ptr(), dst, src.len()) }
}

/// [`Memory`] over a mapped segment: what the core reads and writes.
#[derive(Clone)]
pub struct ShmMemory {
    seg: Arc<Segment>,
}

impl ShmMemory {
    /// The memory of a segment.
    pub fn new(seg: Arc<Segment>) -> ShmMemory {
        ShmMemory { seg }
    }

    /// The segment.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    fn ptr(&self, at: Addr, len: u64) -> *mut u8 {
        // Addresses come from the layout: out of bounds is a bug of ours.
        self.seg
            .ptr(at, len)
            .expect("core address outside its region")
    }
}

impl Memory for ShmMemory {
    fn load_u64(&self, at: Addr) -> u64 {
        assert!(at.offset.is_multiple_of(8), "misaligned word");
        // SAFETY: aligned, in bounds (ptr), accessed atomically everywhere.
        unsafe { (*(self.ptr(at, 8) as *const AtomicU64)).load(Ordering::Acquire) }
    }
    fn store_u64(&self, at: Addr, value: u64) {
        assert!(at.offset.is_multiple_of(8), "misaligned word");
        // SAFETY: as above.
        unsafe { (*(self.ptr(at, 8) as *const AtomicU64)).store(value, Ordering::Release) }
    }
    fn read(&self, at: Addr, dst: &mut [u8]) {
        let p = self.ptr(at, dst.len() as u64);
        std::sync::atomic::fence(Ordering::Acquire);
        // SAFETY: `p` is valid for `dst.len()` bytes (checked by `ptr`).
        unsafe { copy_out(p, dst) }
    }
    fn write(&self, at: Addr, src: &[u8]) {
        let p = self.ptr(at, src.len() as u64);
        // SAFETY: as above.
        unsafe { copy_in(src, p) }
        std::sync::atomic::fence(Ordering::Release);
    }
}

// ----- the fabric -------------------------------------------------------------

/// One member's endpoint on the shared-memory fabric.
pub struct ShmFabric {
    me: MemberId,
    layout: Layout,
    local: Arc<Segment>,
    peer_paths: Vec<PathBuf>,
    peers: Vec<Option<Arc<Segment>>>,
    broken: Vec<[bool; 2]>,
    cq: VecDeque<Completion>,
    liveness: Arc<PeerLiveness>,
    revoke_wait: Duration,
    /// Fence a peer stopped inside a write after its revoke has been
    /// unconfirmed this long (`cluster.fence_stopped_writer_ms`).
    fence_after: Option<Duration>,
    /// Since when each peer's revoke has been unconfirmed.
    unconfirmed_since: Vec<Option<Instant>>,
    /// Each mapped peer's death notice, checked (one load) before any
    /// request is served: from the instant the kernel releases a dead
    /// peer's notices, no member reaches its memory any more, whether or
    /// not its own watcher has seen the death yet. Leases depend on it: a
    /// coordinator counted dead by one member must not answer another's
    /// lease check (`verbatim_core::views`).
    notices: Vec<Option<NoticeWatch>>,
}

impl ShmFabric {
    /// An endpoint for `me`, whose peers' segments are at `peer_paths`
    /// (indexed by member id; our own entry is ignored).
    pub fn new(
        me: MemberId,
        layout: Layout,
        local: Arc<Segment>,
        peer_paths: Vec<PathBuf>,
        liveness: Arc<PeerLiveness>,
    ) -> ShmFabric {
        let n = peer_paths.len();
        ShmFabric {
            me,
            layout,
            local,
            peer_paths,
            peers: (0..n).map(|_| None).collect(),
            broken: vec![[false; 2]; n],
            cq: VecDeque::new(),
            liveness,
            revoke_wait: REVOKE_WAIT,
            fence_after: None,
            unconfirmed_since: vec![None; n],
            notices: (0..n).map(|_| None).collect(),
        }
    }

    /// Fences a peer found stopped inside a write to our memory once its
    /// revoke has stayed unconfirmed for `after` (see
    /// `cluster.fence_stopped_writer_ms`); `None` never fences.
    pub fn set_fencing(&mut self, after: Option<Duration>) {
        self.fence_after = after;
    }

    /// A revoke of `peer` is unconfirmed: after the fencing delay, a peer
    /// that is still stopped is SIGKILLed (its in-progress copy then can
    /// never continue, and the pidfd watcher reports it dead, which
    /// confirms the next retry). A writer that is merely descheduled is
    /// left alone: it finishes its copy and leaves.
    fn maybe_fence(&mut self, peer: MemberId) {
        let Some(after) = self.fence_after else {
            return;
        };
        let Some(since) = self.unconfirmed_since[peer.index()] else {
            return;
        };
        if since.elapsed() < after {
            return;
        }
        let Some(seg) = self.peers[peer.index()].as_ref() else {
            return;
        };
        let owner = seg.owner();
        if !owner.stopped() {
            return;
        }
        if owner.kill_through_pidfd() {
            tracing::error!(
                peer = peer.0,
                pid = owner.pid,
                unconfirmed_ms = since.elapsed().as_millis() as u64,
                "fenced: the peer stayed stopped inside a write to our log, which blocks our vote; \
                 SIGKILLed it (its supervisor restarts it and it rejoins by recovery; \
                 cluster.fence_stopped_writer_ms = 0 waits for it instead)"
            );
            // Once per episode: the kill takes effect when the kernel
            // tears the process down; a new incarnation stopped in a
            // write again starts a new one.
            self.unconfirmed_since[peer.index()] = None;
        }
    }

    /// Maps every peer not mapped yet; returns the ones still missing with
    /// the reason.
    pub fn connect_peers(&mut self) -> Vec<(MemberId, ShmError)> {
        let mut missing = Vec::new();
        for i in 0..self.peers.len() {
            let m = MemberId(i as u8);
            if m == self.me {
                continue;
            }
            let restarted = match &self.peers[i] {
                None => false,
                // A dead peer's segment may have been replaced by its next
                // process (a restart): map the new one and tell the poll
                // loop that the peer runs again.
                Some(old) if self.liveness.is_dead(m) => {
                    match Segment::open(&self.peer_paths[i], &self.layout) {
                        Ok(seg)
                            if seg.member_id() == i as u64
                                && seg.incarnation() != old.incarnation()
                                && seg.owner().alive() =>
                        {
                            true
                        }
                        _ => continue,
                    }
                }
                Some(_) => continue,
            };
            match Segment::open(&self.peer_paths[i], &self.layout) {
                // A segment left by a process that exited before we
                // first looked: not a peer we ever knew (its death is
                // nobody's news to us, and a notice of it would reach us
                // after its successor's first rows). Its successor's is
                // mapped once it is there.
                Ok(seg) if !restarted && !seg.owner().alive() => missing.push((
                    m,
                    ShmError::NotReady {
                        path: self.peer_paths[i].clone(),
                    },
                )),
                Ok(seg) if seg.member_id() == i as u64 => {
                    if restarted {
                        tracing::info!(
                            peer = i,
                            pid = seg.pid(),
                            "peer restarted: mapped its new segment"
                        );
                        self.liveness.revive(m, seg.pid());
                    }
                    self.liveness.watch(m, seg.pid());
                    // The notice file is published before the segment, so
                    // a replica that has one is seen with it.
                    self.notices[i] = NoticeWatch::open(&notice_path(&self.peer_paths[i]))
                        .ok()
                        .filter(|w| w.owner_pid() == seg.pid());
                    match NoticeWatch::open(&notice_path(&self.peer_paths[i])) {
                        Ok(w) if w.owner_pid() == seg.pid() => {
                            if let Err(e) = spawn_notice_waiter(
                                self.liveness.clone(),
                                self.local.waker(),
                                self.me,
                                m,
                                w,
                            ) {
                                tracing::warn!(peer = i, error = %e, "no death-notice thread; the pidfd remains");
                            }
                        }
                        Ok(_) => tracing::debug!(peer = i, "stale death notice; the pidfd remains"),
                        Err(e) => {
                            tracing::debug!(peer = i, error = %e, "no death notice; the pidfd remains")
                        }
                    }
                    self.peers[i] = Some(Arc::new(seg));
                }
                Ok(_) => missing.push((
                    m,
                    ShmError::Malformed {
                        path: self.peer_paths[i].clone(),
                        what: "segment of another member",
                    },
                )),
                Err(e) => missing.push((m, e)),
            }
        }
        missing
    }

    /// A mapped peer's segment.
    pub fn peer(&self, m: MemberId) -> Option<&Arc<Segment>> {
        self.peers.get(m.index()).and_then(|p| p.as_ref())
    }

    /// Our own segment.
    pub fn local(&self) -> &Arc<Segment> {
        &self.local
    }

    fn complete(&mut self, wr: &WorkRequest, status: WcStatus) {
        if !status.is_ok() {
            if let Some(b) = self.broken.get_mut(wr.peer.index()) {
                b[wr.op.channel().index()] = true;
            }
        }
        self.cq.push_back(Completion {
            wr_id: wr.wr_id,
            peer: wr.peer,
            status,
        });
    }

    fn execute(&mut self, wr: &WorkRequest) -> WcStatus {
        let p = wr.peer.index();
        if p >= self.peers.len() {
            return WcStatus::InvalidRequest;
        }
        if self.broken[p][wr.op.channel().index()] {
            return WcStatus::Flushed;
        }
        // A request to ourselves is a loopback request (a coordinator CASes
        // its own acceptor word as the others do): our own segment, with
        // the same access check.
        let target = if wr.peer == self.me {
            self.local.clone()
        } else {
            if self.liveness.is_dead(wr.peer)
                || self.notices[p].as_ref().is_some_and(|w| !w.owner_alive())
            {
                return WcStatus::Unreachable;
            }
            let Some(target) = self.peers[p].clone() else {
                return WcStatus::Unreachable;
            };
            target
        };
        let remote = wr.op.remote();
        let Some(dst) = target.ptr(remote, wr.op.remote_len()) else {
            return WcStatus::InvalidRequest;
        };
        let local_span = match wr.op {
            Op::Write { local, len, .. } | Op::Read { local, len, .. } => {
                Some((local, u64::from(len)))
            }
            Op::CompareSwap { local, .. } | Op::FetchAdd { local, .. } => Some((local, 8)),
            Op::WriteInline { .. } => None,
        };
        let local_ptr = match local_span {
            Some((at, len)) => match self.local.ptr(at, len) {
                Some(ptr) => Some(ptr),
                None => return WcStatus::InvalidRequest,
            },
            None => None,
        };
        let atomic = matches!(wr.op, Op::CompareSwap { .. } | Op::FetchAdd { .. });
        if atomic
            && (!remote.offset.is_multiple_of(8)
                || local_span.is_some_and(|(a, _)| a.offset % 8 != 0))
        {
            return WcStatus::InvalidRequest;
        }
        // Enter the target's access word for (region, us); local regions
        // never have the granted bit.
        if remote.region.index() >= REGIONS_MAX {
            return WcStatus::AccessDenied;
        }
        let access = target.access(remote.region, self.me);
        let prev = access.fetch_add(1, Ordering::AcqRel);
        if prev & GRANTED == 0 {
            access.fetch_sub(1, Ordering::AcqRel);
            return WcStatus::AccessDenied;
        }
        match wr.op {
            Op::Write { len, .. } => {
                // SAFETY: both spans were bounds-checked above; the mapping
                // is alive (we hold an Arc); peers access it atomically.
                unsafe { copy_shared(local_ptr.expect("write has a source"), dst, len as usize) }
            }
            Op::WriteInline { len, data, .. } => {
                let n = usize::from(len).min(data.len());
                // SAFETY: `dst` is valid for `remote_len() == len` bytes.
                unsafe { copy_in(&data[..n], dst) }
            }
            Op::Read { len, .. } => {
                // SAFETY: as for Write, in the other direction.
                unsafe {
                    copy_shared(
                        dst,
                        local_ptr.expect("read has a destination"),
                        len as usize,
                    )
                }
            }
            Op::CompareSwap { expect, swap, .. } => {
                // SAFETY: `dst` is 8-aligned and in bounds (checked above).
                let word = unsafe { &*(dst as *const AtomicU64) };
                let old = match word.compare_exchange(
                    expect,
                    swap,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(v) | Err(v) => v,
                };
                // SAFETY: local word 8-aligned and in bounds (checked above).
                unsafe {
                    (*(local_ptr.expect("atomic result") as *const AtomicU64))
                        .store(old, Ordering::Release)
                };
            }
            Op::FetchAdd { add, .. } => {
                // SAFETY: as for CompareSwap.
                let word = unsafe { &*(dst as *const AtomicU64) };
                let old = word.fetch_add(add, Ordering::AcqRel);
                // SAFETY: as for CompareSwap.
                unsafe {
                    (*(local_ptr.expect("atomic result") as *const AtomicU64))
                        .store(old, Ordering::Release)
                };
            }
        }
        // Publish the data before leaving the access word (a revoker that
        // sees the count drop also sees the data, and vice versa).
        access.fetch_sub(1, Ordering::Release);
        if wr.notify {
            target.ring();
        }
        WcStatus::Ok
    }
}

impl crate::fabric::HostFabric for ShmFabric {
    fn connect_peers(&mut self) -> Vec<(MemberId, crate::fabric::PeerProblem)> {
        ShmFabric::connect_peers(self)
            .into_iter()
            .map(|(m, e)| {
                (
                    m,
                    crate::fabric::PeerProblem {
                        retry: e.is_missing(),
                        message: e.to_string(),
                    },
                )
            })
            .collect()
    }

    fn liveness(&self) -> &PeerLiveness {
        &self.liveness
    }

    fn name(&self) -> &'static str {
        "shm"
    }
}

impl Fabric for ShmFabric {
    fn post(&mut self, wr: &WorkRequest) {
        let status = self.execute(wr);
        self.complete(wr, status);
    }

    fn poll_completion(&mut self) -> Option<Completion> {
        self.cq.pop_front()
    }

    fn set_access(
        &mut self,
        peer: MemberId,
        region: RegionId,
        access: Access,
    ) -> Result<(), FabricError> {
        if peer.index() >= MAX_MEMBERS {
            return Err(FabricError::UnknownPeer);
        }
        let word = self.local.access(region, peer);
        match access {
            Access::Granted => {
                word.fetch_or(GRANTED, Ordering::AcqRel);
                Ok(())
            }
            Access::Revoked => {
                word.fetch_and(!GRANTED, Ordering::AcqRel);
                // A writer that entered before the bit dropped may be
                // copying: wait until it leaves. Copies are short, so this
                // is microseconds, unless the writer died or was stopped in
                // the middle of one.
                let began = Instant::now();
                loop {
                    if word.load(Ordering::Acquire) & WRITERS == 0 {
                        self.unconfirmed_since[peer.index()] = None;
                        return Ok(());
                    }
                    if self.liveness.is_dead(peer) {
                        // A dead writer never finishes its copy.
                        word.fetch_and(GRANTED, Ordering::AcqRel);
                        self.unconfirmed_since[peer.index()] = None;
                        return Ok(());
                    }
                    if began.elapsed() > self.revoke_wait {
                        // Never reported as done: the rest of that copy
                        // would land after SIGCONT. The engine does not
                        // vote or grant until a retry finds no writer.
                        // Warned once per episode (the engine retries
                        // every loop iteration).
                        if self.unconfirmed_since[peer.index()].is_none() {
                            self.unconfirmed_since[peer.index()] = Some(Instant::now());
                            tracing::warn!(
                                peer = peer.0,
                                region = region.name(),
                                "revoke unconfirmed: the peer is stopped in the middle of a write; \
                                 no vote until it leaves, dies or is fenced"
                            );
                        }
                        self.maybe_fence(peer);
                        return Err(FabricError::RevokeUnconfirmed);
                    }
                    std::hint::spin_loop();
                }
            }
        }
    }

    fn reconnect(&mut self, peer: MemberId, channel: Channel) -> Result<(), FabricError> {
        let Some(b) = self.broken.get_mut(peer.index()) else {
            return Err(FabricError::UnknownPeer);
        };
        b[channel.index()] = false;
        if self.peers[peer.index()].is_none() {
            self.connect_peers();
        }
        if self.liveness.is_dead(peer) {
            return Err(FabricError::PeerGone);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_core::Config;

    /// A ring that comes after the poll loop took its doorbell values and
    /// before it parks (it was looking at memory then, so the ringer saw
    /// it not parked and woke nobody) must not be lost: the park returns
    /// at once instead of sleeping out its timeout. Read in `park`, the
    /// values already held the ring, and the park slept (a candidate slept
    /// out its timer with the vote it waited for in its memory).
    #[test]
    fn a_ring_between_the_look_and_the_park_ends_the_park() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(&Config::new(2, MemberId(0))).unwrap();
        let path = segment_path(dir.path(), "bell", 0);
        let seg = Segment::create(&path, &layout, MemberId(0)).unwrap();
        let seen = seg.doorbells(None);
        // A peer's notifying write, while we are not parked.
        seg.ring();
        let long = Duration::from_secs(4);
        let began = Instant::now();
        seg.park(None, seen, long, || true);
        assert!(
            began.elapsed() < long / 2,
            "the park slept through a ring it had not seen"
        );
        // Without a ring since the values were taken, it does sleep (until
        // its timeout here: nobody rings).
        let seen = seg.doorbells(None);
        let short = Duration::from_millis(20);
        let began = Instant::now();
        seg.park(None, seen, short, || true);
        assert!(began.elapsed() >= short);
    }

    /// Issue 12 item 1: a writer caught in the middle of a copy (stopped
    /// with SIGSTOP while inside the region) makes the revoke unconfirmed,
    /// never a success, until it leaves or is known dead.
    #[test]
    fn a_revoke_with_a_writer_inside_is_unconfirmed_until_it_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(&Config::new(2, MemberId(0))).unwrap();
        let paths: Vec<PathBuf> = (0..2)
            .map(|i| segment_path(dir.path(), "revoke", i))
            .collect();
        let seg = Arc::new(Segment::create(&paths[0], &layout, MemberId(0)).unwrap());
        let liveness = Arc::new(PeerLiveness::default());
        let mut fabric = ShmFabric::new(MemberId(0), layout, seg.clone(), paths, liveness.clone());
        let peer = MemberId(1);
        fabric
            .set_access(peer, RegionId::Log, Access::Granted)
            .unwrap();
        // The peer entered the log region to copy, and stopped there.
        let word = seg.access(RegionId::Log, peer);
        word.fetch_add(1, Ordering::AcqRel);
        assert_eq!(
            fabric.set_access(peer, RegionId::Log, Access::Revoked),
            Err(FabricError::RevokeUnconfirmed)
        );
        assert!(
            !seg.granted(RegionId::Log, peer),
            "no new writer may enter meanwhile"
        );
        assert_eq!(
            fabric.set_access(peer, RegionId::Log, Access::Revoked),
            Err(FabricError::RevokeUnconfirmed),
            "a retry is refused as long as the writer is inside"
        );
        // It finishes its copy (SIGCONT) and leaves.
        word.fetch_sub(1, Ordering::AcqRel);
        assert_eq!(
            fabric.set_access(peer, RegionId::Log, Access::Revoked),
            Ok(())
        );
        // A writer that dies inside never finishes: the revoke is done.
        fabric
            .set_access(peer, RegionId::Log, Access::Granted)
            .unwrap();
        word.fetch_add(1, Ordering::AcqRel);
        liveness.mark_dead(peer);
        assert_eq!(
            fabric.set_access(peer, RegionId::Log, Access::Revoked),
            Ok(())
        );
    }

    /// A peer stopped inside a write blocks our vote (previous test) only
    /// until the fencing delay: then, if it is still stopped, it is
    /// SIGKILLed; a peer that runs is never fenced.
    #[test]
    fn a_peer_stopped_inside_a_write_is_fenced_after_the_delay_and_a_running_one_never() {
        use std::os::unix::process::ExitStatusExt;
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(&Config::new(2, MemberId(0))).unwrap();
        let paths: Vec<PathBuf> = (0..2)
            .map(|i| segment_path(dir.path(), "fence", i))
            .collect();
        let seg = Arc::new(Segment::create(&paths[0], &layout, MemberId(0)).unwrap());
        let peer_seg = Segment::create(&paths[1], &layout, MemberId(1)).unwrap();
        let mut owner = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        peer_seg.set_owner_pid(owner.id() as i32);
        let liveness = Arc::new(PeerLiveness::default());
        let mut fabric = ShmFabric::new(MemberId(0), layout, seg.clone(), paths, liveness);
        assert!(fabric.connect_peers().is_empty());
        let fence_after = Duration::from_millis(20);
        fabric.set_fencing(Some(fence_after));
        let peer = MemberId(1);
        fabric
            .set_access(peer, RegionId::Log, Access::Granted)
            .unwrap();
        seg.access(RegionId::Log, peer)
            .fetch_add(1, Ordering::AcqRel);
        // Running (only descheduled, as far as we know): never fenced.
        let began = Instant::now();
        while began.elapsed() < fence_after * 3 {
            assert_eq!(
                fabric.set_access(peer, RegionId::Log, Access::Revoked),
                Err(FabricError::RevokeUnconfirmed)
            );
        }
        assert!(
            owner.try_wait().unwrap().is_none(),
            "a running peer was killed"
        );
        // Stopped: fenced once the delay has passed since the stop was
        // first seen.
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(owner.id() as i32, libc::SIGSTOP) };
        let owner_id = peer_seg.owner();
        let began = Instant::now();
        while !owner_id.stopped() {
            assert!(began.elapsed() < Duration::from_secs(5), "SIGSTOP not seen");
            std::thread::yield_now();
        }
        fabric.unconfirmed_since[peer.index()] = None;
        let began = Instant::now();
        let mut killed_after = None;
        while began.elapsed() < Duration::from_secs(5) {
            let _ = fabric.set_access(peer, RegionId::Log, Access::Revoked);
            if let Some(status) = owner.try_wait().unwrap() {
                assert_eq!(status.signal(), Some(libc::SIGKILL));
                killed_after = Some(began.elapsed());
                break;
            }
        }
        let killed_after = killed_after.expect("the stopped writer was not fenced within 5 s");
        assert!(
            killed_after >= fence_after,
            "fenced before the delay: {killed_after:?}"
        );
    }
}
