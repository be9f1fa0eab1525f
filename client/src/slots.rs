//! The shared-memory client fast path (HERD-style), in a segment of its
//! own.
//!
//! Each replica owns a client-slot segment (`<segment>.clients`), separate
//! from the segment that holds its registered regions: a client maps only
//! this file, so the log, the shared state table and the access words are
//! never writable by a client process. A client claims a slot, writes its
//! request into it, sets the slot's bit in the pending bitmap and rings
//! the segment's doorbell; the replica writes the reply into the same slot.
//!
//! ```text
//! header: 0 magic | 8 version | 16 owner pid | 24 owner start ticks
//!         32 incarnation | 40 ready | 48 slot count | 56 slot bytes
//!         64 doorbell (u32, own cache line) | 128 parked (u32)
//!         192 leader hint (term << 8 | leader id + 1; 0: none)
//!         256 pending bitmap (CLIENT_SLOTS_MAX bits)
//! slot:   0 request seq (head) | 8 client id | 16 request id
//!         24 kind | len << 32 | 32 request seq (tail) | 40 request area
//!         R reply seq (head) | R+8 status | len << 32 | R+16 reply seq
//!         (tail) | R+24 the reply's first 40 bytes
//!         R+64 reply seq (second head) | R+72 the rest of the reply
//!         O owner pid | O+8 owner start ticks
//! ```
//!
//! Slots are 128-byte aligned, and each side's words are followed at
//! once by its bytes: a small request (a GET) is one cache line, a small
//! reply (up to 40 bytes) too. The client polls line R, the second line
//! of a 128-byte pair whose first line holds request bytes or padding:
//! the core's adjacent-line prefetch brings that stable line along, never
//! one the replica is writing. A longer reply's rest goes first, into the
//! next line under a head word of its own, and line R last in one burst,
//! so the polling client takes line R from the replica's core once (with
//! head, bytes, rest and tail in that order, line R moved back and forth
//! while the rest was written: 40-64 B GETs were ~0.2 µs slower than 8 B
//! ones). Every line a request or a reply touches is a transfer between
//! the client's and the replica's cores on the fast path (request words
//! apart from their bytes cost ~0.3 µs a request). The owner words,
//! written only when a slot is claimed, have a line of their own.
//!
//! Requests and replies are read seqlock-style: the writer stores the head
//! sequence, then the fields and bytes, then the tail sequence; the reader
//! loads the tail, copies, then loads the head, and uses the copy only if
//! both equal the sequence it expects. A torn slot (a client rewriting it
//! while the replica reads, or a hostile one) is never executed, and a
//! torn reply is never returned. Every field a client wrote is validated
//! (kind, length against the area) before anything acts on it.

use crate::error::ShmError;
use crate::process::ProcessId;
use crate::shared::{futex_wake, SharedMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use verbatim_core::fabric::MemberId;

/// Client slots the pending bitmap can track.
pub const CLIENT_SLOTS_MAX: u64 = 1024;
/// Slots start on this boundary (a pair of cache lines).
pub const SLOT_ALIGN: u64 = 128;

/// "VBCLIENT" in little-endian.
const MAGIC: u64 = u64::from_le_bytes(*b"VBCLIENT");
/// Bumped when the layout above changes.
pub const SLOTS_VERSION: u64 = 4;
/// Bytes of the header; slot 0 starts here.
pub const HEADER_BYTES: u64 = 4096;
const _: () = assert!(HEADER_BYTES.is_multiple_of(SLOT_ALIGN));

const H_MAGIC: u64 = 0;
const H_VERSION: u64 = 8;
const H_OWNER_PID: u64 = 16;
const H_OWNER_START: u64 = 24;
const H_INCARNATION: u64 = 32;
const H_READY: u64 = 40;
const H_SLOT_COUNT: u64 = 48;
const H_SLOT_BYTES: u64 = 56;
const H_DOORBELL: u64 = 64;
const H_PARKED: u64 = 128;
/// Who this replica believes leads, and in which term (its own line: the
/// replica writes it on a change of role or leader only).
const H_LEADER: u64 = 192;
/// Offset of the pending bitmap (what a client sets after writing a
/// request).
pub const PENDING_OFFSET: u64 = 256;
const H_PENDING: u64 = PENDING_OFFSET;
const _: () = assert!(H_PENDING + CLIENT_SLOTS_MAX / 8 <= HEADER_BYTES);

// The request's words, at the start of the slot; its bytes follow.
const S_REQ_HEAD: u64 = 0;
const S_CLIENT_ID: u64 = 8;
const S_REQUEST_ID: u64 = 16;
const S_KIND: u64 = 24;
const S_REQ_TAIL: u64 = 32;
const REQUEST_FIELDS_BYTES: u64 = 40;
// The reply's words, from the geometry's `reply_at`; its bytes follow.
const R_HEAD: u64 = 0;
/// Status in the low half, length in the high half.
const R_STATUS: u64 = 8;
const R_TAIL: u64 = 16;
/// The reply's first bytes follow its words in the polled line.
const R_INLINE: u64 = 24;
const REPLY_INLINE_BYTES: u64 = 64 - R_INLINE;
/// The rest of a longer reply starts the next line, after a head word
/// of its own (`R2_HEAD`), written before those bytes.
const R2_HEAD: u64 = 64;
const R2_BYTES: u64 = 72;
// The owner's words, from the geometry's `owner_at`, on a line of their own.
const O_PID: u64 = 0;
const O_START: u64 = 8;
const OWNER_BYTES: u64 = 64;

/// The client-slot segment next to a replica's segment.
pub fn slots_path(segment_path: &Path) -> PathBuf {
    let mut s = segment_path.as_os_str().to_owned();
    s.push(".clients");
    PathBuf::from(s)
}

/// What a request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotKind {
    /// A write (goes through the log).
    Write = 1,
    /// A read.
    Read = 2,
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotStatus {
    /// The reply bytes are valid.
    Ok,
    /// Not the leader; try the hinted member.
    NotLeader(Option<MemberId>),
    /// Try again shortly (log full, no leader yet).
    Busy,
    /// The request was malformed.
    Error,
}

impl SlotStatus {
    fn encode(self) -> u64 {
        match self {
            SlotStatus::Ok => 0,
            SlotStatus::NotLeader(None) => 1,
            SlotStatus::NotLeader(Some(m)) => 1 | (1 << 16) | (u64::from(m.0) << 8),
            SlotStatus::Busy => 2,
            SlotStatus::Error => 3,
        }
    }
    fn decode(w: u64) -> SlotStatus {
        match w & 0xFF {
            0 => SlotStatus::Ok,
            1 if w & (1 << 16) != 0 => SlotStatus::NotLeader(Some(MemberId((w >> 8) as u8))),
            1 => SlotStatus::NotLeader(None),
            2 => SlotStatus::Busy,
            _ => SlotStatus::Error,
        }
    }
}

/// Number and size of the slots, and where each part of a slot lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotGeometry {
    /// Number of slots.
    pub count: u64,
    /// Bytes per slot.
    pub slot_bytes: u64,
    /// Bytes of the request area and of the reply area.
    pub area_bytes: u64,
    /// Offset of the reply's words in a slot.
    reply_at: u64,
    /// Offset of the owner's words in a slot.
    owner_at: u64,
}

const fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

impl SlotGeometry {
    /// Offsets of the reply and owner words, and the slot size they need,
    /// for areas of `area_bytes`.
    const fn parts(area_bytes: u64) -> (u64, u64, u64) {
        // The second line of a pair: the line paired with it, which the
        // core fetches along with it while the client polls, is never
        // written during a reply (request bytes or padding).
        let reply_at = round_up(REQUEST_FIELDS_BYTES + area_bytes + 64, SLOT_ALIGN) - 64;
        let rest = area_bytes.saturating_sub(REPLY_INLINE_BYTES);
        let owner_at = round_up(reply_at + R2_BYTES + rest, 64);
        (
            reply_at,
            owner_at,
            round_up(owner_at + OWNER_BYTES, SLOT_ALIGN),
        )
    }

    /// Bytes of a slot whose request and reply areas hold `area_bytes`
    /// each.
    pub const fn slot_bytes_for_area(area_bytes: u64) -> u64 {
        Self::parts(round_up(area_bytes, 8)).2
    }

    /// `count` slots of `slot_bytes` each, with the largest areas that
    /// fit; `None` when they do not fit the format (too many slots, a
    /// size that is not a multiple of 128, or too small for the words and
    /// two 8-byte areas).
    pub fn new(count: u64, slot_bytes: u64) -> Option<SlotGeometry> {
        if count > CLIENT_SLOTS_MAX || !slot_bytes.is_multiple_of(SLOT_ALIGN) {
            return None;
        }
        // The padding of the three parts is at most 127 + 63 + 127 bytes,
        // so the largest area is at most 20 steps of 8 bytes below the
        // bound without padding: a bounded search down from it.
        let fixed = REQUEST_FIELDS_BYTES + R2_BYTES - REPLY_INLINE_BYTES + OWNER_BYTES;
        let mut area = slot_bytes.checked_sub(fixed)? / 2 / 8 * 8;
        loop {
            let (reply_at, owner_at, need) = Self::parts(area);
            if need <= slot_bytes {
                return (area >= 8).then_some(SlotGeometry {
                    count,
                    slot_bytes,
                    area_bytes: area,
                    reply_at,
                    owner_at,
                });
            }
            area = area.checked_sub(8)?;
        }
    }

    fn segment_bytes(&self) -> u64 {
        HEADER_BYTES + self.count * self.slot_bytes
    }

    #[inline]
    fn at(&self, slot: u64, field: u64) -> u64 {
        HEADER_BYTES + slot * self.slot_bytes + field
    }

    #[inline]
    fn request_area(&self, slot: u64) -> u64 {
        self.at(slot, REQUEST_FIELDS_BYTES)
    }

    #[inline]
    fn reply_inline(&self, slot: u64) -> u64 {
        self.at(slot, self.reply_at + R_INLINE)
    }

    #[inline]
    fn reply_rest(&self, slot: u64) -> u64 {
        self.at(slot, self.reply_at + R2_BYTES)
    }

    #[inline]
    fn reply_word(&self, field: u64) -> u64 {
        self.reply_at + field
    }

    #[inline]
    fn owner_word(&self, field: u64) -> u64 {
        self.owner_at + field
    }
}

/// A mapped client-slot segment (the replica's or a client's view).
pub struct SlotSegment {
    map: SharedMap,
    geometry: SlotGeometry,
}

impl SlotSegment {
    /// Creates the segment at `path` for the calling process (replacing a
    /// stale one whose owner is gone) and publishes it once initialised.
    pub fn create(path: &Path, geometry: SlotGeometry) -> Result<SlotSegment, ShmError> {
        if let Ok(old) = SlotSegment::open(path) {
            let owner = old.owner();
            if owner.pid != std::process::id() as i32 && owner.alive() {
                return Err(ShmError::InUse {
                    path: path.to_owned(),
                    pid: owner.pid,
                });
            }
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut map = SharedMap::create(&tmp, geometry.segment_bytes())?;
        let me = ProcessId::current();
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        for (at, v) in [
            (H_MAGIC, MAGIC),
            (H_VERSION, SLOTS_VERSION),
            (H_OWNER_PID, me.pid as u64),
            (H_OWNER_START, me.start_ticks),
            (H_INCARNATION, incarnation),
            (H_SLOT_COUNT, geometry.count),
            (H_SLOT_BYTES, geometry.slot_bytes),
        ] {
            map.word(at).store(v, Ordering::Relaxed);
        }
        map.word(H_READY).store(1, Ordering::Release);
        map.publish(path)?;
        Ok(SlotSegment { map, geometry })
    }

    /// Maps a replica's slot segment, checking its header and that the
    /// file holds every slot the header claims.
    pub fn open(path: &Path) -> Result<SlotSegment, ShmError> {
        let map = SharedMap::open(path, HEADER_BYTES, "shorter than its header")?;
        let bad = |what| ShmError::Malformed {
            path: path.to_owned(),
            what,
        };
        if map.word(H_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(bad("not a client-slot segment (bad magic)"));
        }
        if map.word(H_READY).load(Ordering::Acquire) != 1 {
            return Err(ShmError::NotReady {
                path: path.to_owned(),
            });
        }
        let version = map.word(H_VERSION).load(Ordering::Relaxed);
        if version != SLOTS_VERSION {
            return Err(ShmError::Version {
                path: path.to_owned(),
                found: version,
                expected: SLOTS_VERSION,
            });
        }
        let geometry = SlotGeometry::new(
            map.word(H_SLOT_COUNT).load(Ordering::Relaxed),
            map.word(H_SLOT_BYTES).load(Ordering::Relaxed),
        )
        .ok_or_else(|| bad("impossible slot geometry"))?;
        if geometry.segment_bytes() > map.len() {
            return Err(bad("shorter than its slots"));
        }
        Ok(SlotSegment { map, geometry })
    }

    /// The slots' geometry.
    pub fn geometry(&self) -> SlotGeometry {
        self.geometry
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.map.path()
    }

    /// The owning replica process.
    pub fn owner(&self) -> ProcessId {
        ProcessId {
            pid: self.map.word(H_OWNER_PID).load(Ordering::Acquire) as i32,
            start_ticks: self.map.word(H_OWNER_START).load(Ordering::Acquire),
        }
    }

    /// Changes with every (re)creation of the segment.
    pub fn incarnation(&self) -> u64 {
        self.map.word(H_INCARNATION).load(Ordering::Acquire)
    }

    /// The doorbell futex word the replica may sleep on.
    #[inline]
    pub fn doorbell(&self) -> &AtomicU32 {
        self.map.word32(H_DOORBELL)
    }

    /// Set by the replica while it may sleep on the doorbell.
    #[inline]
    pub fn parked(&self) -> &AtomicU32 {
        self.map.word32(H_PARKED)
    }

    /// The replica publishes who it believes leads and in which term
    /// (`None`: nobody known), for clients waiting on a replica that
    /// stopped (see [`SlotSegment::leader_hint`]).
    pub fn set_leader_hint(&self, term: u64, leader: Option<MemberId>) {
        let word = leader.map_or(0, |l| (term << 8) | (u64::from(l.0) + 1));
        self.map.word(H_LEADER).store(word, Ordering::Release);
    }

    /// What the replica last published: `(term, leader)`. A replica that
    /// leads publishes itself; one that stopped (SIGSTOP, stuck in the
    /// kernel) keeps its last word while others publish a newer term.
    pub fn leader_hint(&self) -> Option<(u64, MemberId)> {
        let word = self.map.word(H_LEADER).load(Ordering::Acquire);
        let id = (word & 0xFF) as u8;
        (id != 0).then(|| (word >> 8, MemberId(id - 1)))
    }

    /// Wakes the replica if it sleeps.
    #[inline]
    pub fn ring(&self) {
        self.doorbell().fetch_add(1, Ordering::SeqCst);
        if self.parked().load(Ordering::SeqCst) != 0 {
            futex_wake(self.doorbell());
        }
    }

    #[inline]
    fn pending(&self, k: u64) -> &AtomicU64 {
        assert!(k < CLIENT_SLOTS_MAX / 64);
        self.map.word(H_PENDING + 8 * k)
    }

    #[inline]
    fn slot_word(&self, slot: u64, field: u64) -> &AtomicU64 {
        assert!(slot < self.geometry.count);
        self.map.word(self.geometry.at(slot, field))
    }

    /// Removes the file (clean shutdown). Mappings stay valid.
    pub fn unlink(&self) {
        self.map.unlink();
    }
}

/// A request read out of a slot by the replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRequest {
    /// Slot index.
    pub slot: u64,
    /// Sequence number to echo in the reply.
    pub seq: u64,
    /// Client.
    pub client_id: u64,
    /// Request.
    pub request_id: u64,
    /// Write or read.
    pub kind: SlotKind,
    /// The encoded operation.
    pub payload: Vec<u8>,
}

/// Why a slot's content was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotError {
    /// Unknown kind word (answered with an error).
    Kind,
    /// Length beyond the request area (answered with an error).
    Length,
    /// Being rewritten while read: skipped, never answered (the client's
    /// next request sets its pending bit again).
    Torn,
}

/// Counters of a [`SlotServer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotServerCounters {
    /// Requests taken.
    pub taken: u64,
    /// Malformed requests answered with an error.
    pub malformed: u64,
    /// Torn requests skipped.
    pub torn: u64,
}

/// Payload buffers a [`SlotServer`] keeps for reuse (beyond these, a
/// returned buffer is freed).
const PAYLOAD_POOL_MAX: usize = 256;

/// The replica's side: finds pending requests, answers them.
pub struct SlotServer {
    seg: Arc<SlotSegment>,
    counters: SlotServerCounters,
    /// Request buffers given back ([`SlotServer::recycle`]): a request's
    /// bytes are copied into one of these rather than a new allocation.
    pool: Vec<Vec<u8>>,
}

impl SlotServer {
    /// The slots of our own segment.
    pub fn new(seg: Arc<SlotSegment>) -> SlotServer {
        SlotServer {
            seg,
            counters: SlotServerCounters::default(),
            pool: Vec::new(),
        }
    }

    /// Gives a request's payload buffer back for a later request (the
    /// replica's driver is done with it). Bounded: an oversized buffer or
    /// one beyond the pool's size is freed.
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.pool.len() < PAYLOAD_POOL_MAX
            && buf.capacity() as u64 <= self.seg.geometry.area_bytes
        {
            buf.clear();
            self.pool.push(buf);
        }
    }

    /// The segment (its doorbell, for parking).
    pub fn segment(&self) -> &Arc<SlotSegment> {
        &self.seg
    }

    /// What the server saw.
    pub fn counters(&self) -> SlotServerCounters {
        self.counters
    }

    /// True when some slot has a request waiting (cheap: bitmap words).
    pub fn any_pending(&self) -> bool {
        let words = self.seg.geometry.count.div_ceil(64);
        (0..words).any(|k| self.seg.pending(k).load(Ordering::Acquire) != 0)
    }

    /// Takes every pending request (bounded by the slot count). Malformed
    /// ones are answered with an error right away and not returned; torn
    /// ones are skipped.
    pub fn take_pending(&mut self, out: &mut Vec<SlotRequest>) {
        let words = self.seg.geometry.count.div_ceil(64);
        for k in 0..words {
            let word = self.seg.pending(k);
            if word.load(Ordering::Acquire) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::AcqRel);
            while bits != 0 {
                let b = u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                let slot = k * 64 + b;
                if slot >= self.seg.geometry.count {
                    continue; // a client set a bit beyond the slots: ignore
                }
                let buf = self.pool.pop().unwrap_or_default();
                match self.read(slot, buf) {
                    Ok(r) => {
                        self.counters.taken += 1;
                        out.push(r)
                    }
                    Err((SlotError::Torn, buf)) => {
                        self.counters.torn += 1;
                        self.recycle(buf);
                    }
                    Err((_, buf)) => {
                        self.recycle(buf);
                        self.counters.malformed += 1;
                        let seq = self.seg.slot_word(slot, S_REQ_TAIL).load(Ordering::Acquire);
                        self.reply(slot, seq, SlotStatus::Error, &[]);
                    }
                }
            }
        }
    }

    /// Reads a request into `payload` (a pooled buffer, given back with
    /// the error when the slot is not taken).
    fn read(&self, slot: u64, mut payload: Vec<u8>) -> Result<SlotRequest, (SlotError, Vec<u8>)> {
        let seg = &self.seg;
        let g = seg.geometry;
        let seq = seg.slot_word(slot, S_REQ_TAIL).load(Ordering::Acquire);
        let client_id = seg.slot_word(slot, S_CLIENT_ID).load(Ordering::Acquire);
        let request_id = seg.slot_word(slot, S_REQUEST_ID).load(Ordering::Acquire);
        let kind_word = seg.slot_word(slot, S_KIND).load(Ordering::Acquire);
        let kind = match kind_word & 0xFF {
            1 => SlotKind::Write,
            2 => SlotKind::Read,
            _ => return Err((self.torn_or(slot, seq, SlotError::Kind), payload)),
        };
        let len = kind_word >> 32;
        if len > g.area_bytes {
            return Err((self.torn_or(slot, seq, SlotError::Length), payload));
        }
        payload.clear();
        payload.resize(len as usize, 0);
        seg.map.read(g.request_area(slot), &mut payload);
        if seg.slot_word(slot, S_REQ_HEAD).load(Ordering::Acquire) != seq {
            return Err((SlotError::Torn, payload));
        }
        Ok(SlotRequest {
            slot,
            seq,
            client_id,
            request_id,
            kind,
            payload,
        })
    }

    /// A bad field seen while the slot was being rewritten is no verdict.
    fn torn_or(&self, slot: u64, seq: u64, e: SlotError) -> SlotError {
        if self.seg.slot_word(slot, S_REQ_HEAD).load(Ordering::Acquire) != seq {
            SlotError::Torn
        } else {
            e
        }
    }

    /// Publishes a reply (truncated to the reply area, which is sized for
    /// the largest value, so only a malformed request can hit it).
    pub fn reply(&self, slot: u64, seq: u64, status: SlotStatus, bytes: &[u8]) {
        let seg = &self.seg;
        let g = seg.geometry;
        if slot >= g.count {
            return;
        }
        let n = bytes.len().min(g.area_bytes as usize);
        let inline = n.min(REPLY_INLINE_BYTES as usize);
        if n > inline {
            // The line after the polled one first, under its own head: the
            // polled line is then written in one burst at the end, so the
            // client's polling takes it from this core only once.
            seg.slot_word(slot, g.reply_word(R2_HEAD))
                .store(seq, Ordering::Release);
            seg.map.write(g.reply_rest(slot), &bytes[inline..n]);
        }
        seg.slot_word(slot, g.reply_word(R_HEAD))
            .store(seq, Ordering::Release);
        seg.map.write(g.reply_inline(slot), &bytes[..inline]);
        seg.slot_word(slot, g.reply_word(R_STATUS))
            .store(status.encode() | ((n as u64) << 32), Ordering::Release);
        // Last: the client acts once both ends carry its sequence.
        seg.slot_word(slot, g.reply_word(R_TAIL))
            .store(seq, Ordering::Release);
    }
}

/// The client's side: one claimed slot in one replica's slot segment.
pub struct SlotClient {
    seg: Arc<SlotSegment>,
    slot: u64,
    seq: u64,
    me: ProcessId,
}

impl SlotClient {
    /// Claims a free slot (or one whose owner process is gone: pid and
    /// start time, so a reused pid does not keep a dead client's slot).
    pub fn claim(seg: Arc<SlotSegment>) -> Option<SlotClient> {
        let me = ProcessId::current();
        let g = seg.geometry;
        for slot in 0..g.count {
            let pid_word = seg.slot_word(slot, g.owner_word(O_PID));
            let owner_pid = pid_word.load(Ordering::Acquire);
            let owner = ProcessId {
                pid: owner_pid as i32,
                start_ticks: seg
                    .slot_word(slot, g.owner_word(O_START))
                    .load(Ordering::Acquire),
            };
            let free = owner_pid == 0 || !owner.alive();
            if free
                && pid_word
                    .compare_exchange(
                        owner_pid,
                        me.pid as u64,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
            {
                seg.slot_word(slot, g.owner_word(O_START))
                    .store(me.start_ticks, Ordering::Release);
                // Start from the replica's last reply so sequences match.
                let seq = seg
                    .slot_word(slot, g.reply_word(R_TAIL))
                    .load(Ordering::Acquire)
                    .max(seg.slot_word(slot, S_REQ_TAIL).load(Ordering::Acquire));
                return Some(SlotClient { seg, slot, seq, me });
            }
        }
        None
    }

    /// The slot's index.
    pub fn slot(&self) -> u64 {
        self.slot
    }

    /// Largest request.
    pub fn area_bytes(&self) -> u64 {
        self.seg.geometry.area_bytes
    }

    /// Writes a request, flags it, rings the replica. Returns its sequence.
    pub fn send(&mut self, client_id: u64, request_id: u64, kind: SlotKind, payload: &[u8]) -> u64 {
        let seg = &self.seg;
        let g = seg.geometry;
        assert!(
            payload.len() as u64 <= g.area_bytes,
            "request larger than the slot"
        );
        self.seq += 1;
        let s = self.slot;
        seg.slot_word(s, S_REQ_HEAD)
            .store(self.seq, Ordering::Release);
        seg.map.write(g.request_area(s), payload);
        seg.slot_word(s, S_CLIENT_ID)
            .store(client_id, Ordering::Release);
        seg.slot_word(s, S_REQUEST_ID)
            .store(request_id, Ordering::Release);
        seg.slot_word(s, S_KIND).store(
            kind as u64 | ((payload.len() as u64) << 32),
            Ordering::Release,
        );
        seg.slot_word(s, S_REQ_TAIL)
            .store(self.seq, Ordering::Release);
        seg.pending(s / 64)
            .fetch_or(1 << (s % 64), Ordering::AcqRel);
        seg.ring();
        self.seq
    }

    /// The reply to request `seq`, if published completely: status and
    /// bytes.
    pub fn poll(&self, seq: u64, buf: &mut Vec<u8>) -> Option<SlotStatus> {
        let seg = &self.seg;
        let g = seg.geometry;
        let s = self.slot;
        if seg
            .slot_word(s, g.reply_word(R_TAIL))
            .load(Ordering::Acquire)
            != seq
        {
            return None;
        }
        let word = seg
            .slot_word(s, g.reply_word(R_STATUS))
            .load(Ordering::Acquire);
        let status = SlotStatus::decode(word & 0xFFFF_FFFF);
        let len = (word >> 32).min(g.area_bytes) as usize;
        let inline = len.min(REPLY_INLINE_BYTES as usize);
        buf.resize(len, 0);
        seg.map.read(g.reply_inline(s), &mut buf[..inline]);
        if len > inline {
            seg.map.read(g.reply_rest(s), &mut buf[inline..]);
            if seg
                .slot_word(s, g.reply_word(R2_HEAD))
                .load(Ordering::Acquire)
                != seq
            {
                return None;
            }
        }
        // Both ends must carry our sequence: otherwise the replica was
        // still writing (or a stranger scribbled on our slot).
        (seg.slot_word(s, g.reply_word(R_HEAD))
            .load(Ordering::Acquire)
            == seq)
            .then_some(status)
    }
}

impl Drop for SlotClient {
    fn drop(&mut self) {
        // Release only what is still ours.
        let pid_word = self.seg.geometry.owner_word(O_PID);
        let _ = self.seg.slot_word(self.slot, pid_word).compare_exchange(
            self.me.pid as u64,
            0,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(dir: &Path) -> Arc<SlotSegment> {
        Arc::new(
            SlotSegment::create(&dir.join("s.clients"), SlotGeometry::new(4, 1024).unwrap())
                .unwrap(),
        )
    }

    #[test]
    fn a_request_and_its_reply_travel_through_a_slot() {
        let dir = tempfile::tempdir().unwrap();
        let seg = segment(dir.path());
        let mut server = SlotServer::new(seg.clone());
        // A client maps the file by its path, as another process would.
        let client_view = Arc::new(SlotSegment::open(seg.path()).unwrap());
        let mut client = SlotClient::claim(client_view.clone()).expect("a free slot");
        let other = SlotClient::claim(client_view.clone()).expect("a second slot");
        assert_ne!(client.slot, other.slot);
        assert!(!server.any_pending());
        let seq = client.send(7, 1, SlotKind::Write, b"hello");
        assert!(server.any_pending());
        let mut reqs = Vec::new();
        server.take_pending(&mut reqs);
        assert_eq!(reqs.len(), 1);
        assert_eq!(
            (reqs[0].client_id, reqs[0].request_id, reqs[0].kind),
            (7, 1, SlotKind::Write)
        );
        assert_eq!(reqs[0].payload, b"hello");
        let mut buf = Vec::new();
        assert_eq!(client.poll(seq, &mut buf), None, "no reply yet");
        server.reply(
            reqs[0].slot,
            reqs[0].seq,
            SlotStatus::NotLeader(Some(MemberId(2))),
            b"",
        );
        assert_eq!(
            client.poll(seq, &mut buf),
            Some(SlotStatus::NotLeader(Some(MemberId(2))))
        );
        let seq = client.send(7, 2, SlotKind::Read, b"q");
        reqs.clear();
        server.take_pending(&mut reqs);
        server.reply(reqs[0].slot, reqs[0].seq, SlotStatus::Ok, b"value");
        assert_eq!(client.poll(seq, &mut buf), Some(SlotStatus::Ok));
        assert_eq!(buf, b"value");
        // Replies that fill the polled line, spill into the next one, and
        // fill the whole area.
        let area = seg.geometry.area_bytes as usize;
        for (k, len) in [40usize, 41, 69, 300, area].into_iter().enumerate() {
            let long: Vec<u8> = (0..len).map(|i| (i * 7 + k) as u8).collect();
            let seq = client.send(7, 3 + k as u64, SlotKind::Read, b"q");
            reqs.clear();
            server.take_pending(&mut reqs);
            server.reply(reqs[0].slot, reqs[0].seq, SlotStatus::Ok, &long);
            assert_eq!(client.poll(seq, &mut buf), Some(SlotStatus::Ok));
            assert_eq!(buf, long, "a reply of {len} bytes");
        }
        assert_eq!(server.counters().taken, 7);
    }

    /// The leader hint a replica publishes reads back through another
    /// mapping, and "nobody" is told apart from member 0.
    #[test]
    fn the_leader_hint_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let seg = segment(dir.path());
        let view = SlotSegment::open(seg.path()).unwrap();
        assert_eq!(view.leader_hint(), None, "nothing published yet");
        seg.set_leader_hint(7, Some(MemberId(0)));
        assert_eq!(view.leader_hint(), Some((7, MemberId(0))));
        seg.set_leader_hint(1 << 40, Some(MemberId(31)));
        assert_eq!(view.leader_hint(), Some((1 << 40, MemberId(31))));
        seg.set_leader_hint(9, None);
        assert_eq!(view.leader_hint(), None);
    }

    #[test]
    fn a_malformed_slot_is_answered_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let seg = segment(dir.path());
        let g = seg.geometry;
        let mut server = SlotServer::new(seg.clone());
        // A hostile client: a huge length, an unknown kind, a bit past the end.
        for (slot, seq, kind) in [(1, 5, 1 | (1u64 << 52)), (2, 6, 77)] {
            seg.slot_word(slot, S_REQ_HEAD)
                .store(seq, Ordering::Release);
            seg.slot_word(slot, S_KIND).store(kind, Ordering::Release);
            seg.slot_word(slot, S_REQ_TAIL)
                .store(seq, Ordering::Release);
        }
        seg.pending(0)
            .store((1 << 1) | (1 << 2) | (1 << 60), Ordering::Release);
        let mut reqs = Vec::new();
        server.take_pending(&mut reqs);
        assert!(reqs.is_empty());
        for (slot, seq) in [(1, 5), (2, 6)] {
            assert_eq!(
                seg.slot_word(slot, g.reply_word(R_TAIL))
                    .load(Ordering::Acquire),
                seq
            );
            assert_eq!(
                SlotStatus::decode(
                    seg.slot_word(slot, g.reply_word(R_STATUS))
                        .load(Ordering::Acquire)
                ),
                SlotStatus::Error
            );
        }
        assert_eq!(server.counters().malformed, 2);
    }

    /// A slot whose head and tail sequences differ is being rewritten: it
    /// is never executed (nor answered), and a reply whose two ends differ
    /// is never returned.
    #[test]
    fn torn_requests_and_replies_are_never_used() {
        let dir = tempfile::tempdir().unwrap();
        let seg = segment(dir.path());
        let g = seg.geometry;
        let mut server = SlotServer::new(seg.clone());
        let mut client = SlotClient::claim(seg.clone()).unwrap();
        let seq = client.send(9, 1, SlotKind::Write, b"set k v");
        // The client starts its next request before the replica reads:
        // head moved on, tail still the old one.
        seg.slot_word(client.slot, S_REQ_HEAD)
            .store(seq + 1, Ordering::Release);
        let mut reqs = Vec::new();
        server.take_pending(&mut reqs);
        assert!(reqs.is_empty());
        assert_eq!(server.counters().torn, 1);
        assert_eq!(
            seg.slot_word(client.slot, g.reply_word(R_TAIL))
                .load(Ordering::Acquire),
            0,
            "a torn request is not answered"
        );
        // Once the client finishes, the request is taken.
        seg.slot_word(client.slot, S_REQ_HEAD)
            .store(seq, Ordering::Release);
        seg.pending(0).fetch_or(1 << client.slot, Ordering::AcqRel);
        server.take_pending(&mut reqs);
        assert_eq!(reqs.len(), 1);
        // A reply caught halfway: tail written, head not (as if the
        // replica's stores landed out of order) is not returned.
        server.reply(client.slot, seq, SlotStatus::Ok, b"OK");
        seg.slot_word(client.slot, g.reply_word(R_HEAD))
            .store(seq - 1, Ordering::Release);
        let mut buf = Vec::new();
        assert_eq!(client.poll(seq, &mut buf), None);
        seg.slot_word(client.slot, g.reply_word(R_HEAD))
            .store(seq, Ordering::Release);
        assert_eq!(client.poll(seq, &mut buf), Some(SlotStatus::Ok));
        assert_eq!(buf, b"OK");
        // A long reply whose rest is being rewritten (its own head moved
        // on) is not returned either, though the polled line is whole.
        let seq = client.send(9, 2, SlotKind::Read, b"get k");
        reqs.clear();
        server.take_pending(&mut reqs);
        server.reply(client.slot, seq, SlotStatus::Ok, &[5u8; 100]);
        seg.slot_word(client.slot, g.reply_word(R2_HEAD))
            .store(seq + 1, Ordering::Release);
        assert_eq!(client.poll(seq, &mut buf), None);
        seg.slot_word(client.slot, g.reply_word(R2_HEAD))
            .store(seq, Ordering::Release);
        assert_eq!(client.poll(seq, &mut buf), Some(SlotStatus::Ok));
        assert_eq!(buf, [5u8; 100]);
    }

    #[test]
    fn a_slot_of_a_dead_owner_is_reclaimed_and_a_live_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let seg = segment(dir.path());
        // Slot 0 "owned" by our own pid but another start time: a reused pid.
        let g = seg.geometry;
        seg.slot_word(0, g.owner_word(O_PID))
            .store(std::process::id() as u64, Ordering::Release);
        seg.slot_word(0, g.owner_word(O_START))
            .store(ProcessId::current().start_ticks + 1, Ordering::Release);
        let first = SlotClient::claim(seg.clone()).unwrap();
        assert_eq!(first.slot, 0, "the impostor's slot is free");
        let second = SlotClient::claim(seg.clone()).unwrap();
        assert_eq!(second.slot, 1, "our own live claim is kept");
        drop(first);
        assert_eq!(SlotClient::claim(seg.clone()).unwrap().slot, 0);
    }

    /// Every part of a slot lies inside it, none overlaps another, the
    /// reply's words are the second line of a 128-byte pair, and a slot
    /// sized for an area
    /// holds at least that area.
    #[test]
    fn a_slot_holds_its_parts_without_overlap_and_the_asked_area() {
        for asked in (8..=4096).step_by(8) {
            let bytes = SlotGeometry::slot_bytes_for_area(asked);
            let g = SlotGeometry::new(3, bytes).expect("a geometry for its own size");
            assert!(g.area_bytes >= asked, "area {asked}: got {}", g.area_bytes);
            assert_eq!(g.slot_bytes % SLOT_ALIGN, 0);
            assert_eq!(g.reply_at % SLOT_ALIGN, 64);
            assert!(REQUEST_FIELDS_BYTES + g.area_bytes <= g.reply_at);
            let rest = g.area_bytes.saturating_sub(REPLY_INLINE_BYTES);
            assert!(g.reply_at + R2_BYTES + rest <= g.owner_at);
            assert_eq!(g.owner_at % 64, 0);
            assert!(g.owner_at + OWNER_BYTES <= g.slot_bytes);
        }
        // Any aligned size: the largest area that fits is chosen.
        for bytes in (256..=8192).step_by(128) {
            let g = SlotGeometry::new(1, bytes).expect("fits");
            assert!(SlotGeometry::slot_bytes_for_area(g.area_bytes) <= bytes);
            assert!(SlotGeometry::slot_bytes_for_area(g.area_bytes + 8) > bytes);
        }
    }

    #[test]
    fn bad_files_and_geometries_are_refused() {
        assert!(SlotGeometry::new(CLIENT_SLOTS_MAX + 1, 1024).is_none());
        assert!(SlotGeometry::new(4, 100).is_none());
        assert!(SlotGeometry::new(4, 64).is_none());
        assert!(SlotGeometry::new(4, 128).is_none(), "no room for two areas");
        assert!(SlotGeometry::new(4, 1024 + 64).is_none(), "not 128-aligned");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("junk");
        std::fs::write(&p, vec![0u8; 8192]).unwrap();
        assert!(matches!(
            SlotSegment::open(&p),
            Err(ShmError::Malformed { .. })
        ));
        let seg = segment(dir.path());
        // A header that claims more slots than the file holds.
        seg.map.word(H_SLOT_COUNT).store(1000, Ordering::Release);
        assert!(matches!(
            SlotSegment::open(seg.path()),
            Err(ShmError::Malformed {
                what: "shorter than its slots",
                ..
            })
        ));
    }
}
