//! The log ring (DARE §3.1.1) and the adjustment list (§3.3.1).
//!
//! Positions are monotonically growing byte counts; the physical offset of
//! position `p` is `p mod ring_bytes`. The four pointers of DARE (head,
//! apply, commit, tail) are positions, so "is `a` before `b`" is a plain
//! integer comparison and never confused by wrap-around.
//!
//! Entries never straddle the end of the ring: an entry starts at
//! [`Ring::place`] of the previous end, which skips to the next lap when
//! fewer than `entry_bytes_max` bytes remain. The rule depends only on the
//! position, so every replica places identical entries at identical
//! positions, and a reader can walk the ring without any side table.
//!
//! Every entry carries a checksum over its position, header and payload,
//! so a torn entry, or a stale entry from an earlier lap, never validates.

use crate::checksum::Checksum;
use crate::fabric::{Addr, MemberId, RegionId};
use crate::layout::{LogLayout, ADJUST_ITEM_BYTES, ENTRY_HEADER_BYTES};
use crate::mem::Memory;

const DOMAIN_ENTRY: u64 = 0x0045_4E54_5259; // "ENTRY"
const DOMAIN_ADJUST: u64 = 0x4144_4A55_5354; // "ADJUST"

/// Bytes an entry with `payload_len` bytes of payload occupies in the ring.
pub const fn entry_bytes(payload_len: u32) -> u64 {
    ENTRY_HEADER_BYTES + (payload_len as u64).div_ceil(8) * 8
}

/// What an entry is for (DARE §3.3, §3.3.2, §3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EntryKind {
    /// A client's state-machine operation.
    Operation = 1,
    /// Appended by a new leader so that earlier entries commit (§3.3).
    Noop = 2,
    /// Carries a new head position (log pruning, §3.3.2).
    Head = 3,
    /// Carries a group configuration (§3.4).
    Config = 4,
}

impl EntryKind {
    fn from_u8(v: u8) -> Option<EntryKind> {
        match v {
            1 => Some(EntryKind::Operation),
            2 => Some(EntryKind::Noop),
            3 => Some(EntryKind::Head),
            4 => Some(EntryKind::Config),
            _ => None,
        }
    }
}

/// The fixed part of a log entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHeader {
    /// Position of the entry in the log (1 for the first entry ever).
    pub index: u64,
    /// Term of the leader that created it.
    pub term: u64,
    /// What it is for.
    pub kind: EntryKind,
    /// Payload bytes following the header.
    pub payload_len: u32,
    /// Client that submitted the operation (0 for internal entries).
    pub client_id: u64,
    /// The client's request id (for exactly-once application).
    pub request_id: u64,
}

/// Why an entry read from the ring was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryError {
    /// Checksum mismatch: torn, stale or corrupt.
    Checksum,
    /// Unknown kind byte.
    Kind,
    /// Payload length above the configured maximum.
    Length,
    /// A valid entry, but not the index the reader expected.
    Index,
}

/// Geometry of the ring inside the log region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    base: u64,
    ring_bytes: u64,
    entry_bytes_max: u64,
}

fn entry_checksum(pos: u64, head: &[u64; 5], payload: &[u8]) -> u64 {
    let mut c = Checksum::new(DOMAIN_ENTRY);
    c.word(pos);
    for &w in head {
        c.word(w);
    }
    c.bytes(payload);
    c.finish()
}

fn header_words(h: &EntryHeader) -> [u64; 5] {
    [
        h.index,
        h.term,
        u64::from(h.kind as u8) | (u64::from(h.payload_len) << 32),
        h.client_id,
        h.request_id,
    ]
}

impl Ring {
    /// The ring of a log layout.
    pub fn new(log: &LogLayout) -> Ring {
        Ring {
            base: log.ring_offset,
            ring_bytes: log.ring_bytes,
            entry_bytes_max: log.entry_bytes_max,
        }
    }

    /// Bytes of the ring.
    #[inline]
    pub fn ring_bytes(&self) -> u64 {
        self.ring_bytes
    }

    /// Where an entry following position `pos` starts: `pos`, or the start
    /// of the next lap when a maximal entry would not fit before the end.
    #[inline]
    pub fn place(&self, pos: u64) -> u64 {
        let rest = self.ring_bytes - pos % self.ring_bytes;
        if rest < self.entry_bytes_max {
            pos + rest
        } else {
            pos
        }
    }

    /// The address of position `pos`.
    #[inline]
    pub fn addr(&self, pos: u64) -> Addr {
        Addr::new(RegionId::Log, self.base + pos % self.ring_bytes)
    }

    /// The contiguous byte spans (at most two) covering positions
    /// `[from, to)`, as (address, length) pairs; the second has length 0
    /// when there is no wrap.
    pub fn spans(&self, from: u64, to: u64) -> [(Addr, u64); 2] {
        assert!(
            from <= to && to - from <= self.ring_bytes,
            "span larger than the ring"
        );
        let first_end = (from / self.ring_bytes + 1) * self.ring_bytes;
        if to <= first_end {
            [(self.addr(from), to - from), (self.addr(to), 0)]
        } else {
            [
                (self.addr(from), first_end - from),
                (self.addr(first_end), to - first_end),
            ]
        }
    }

    /// Writes an entry at `place(pos)` and returns (start, end) positions.
    pub fn write_entry<M: Memory + ?Sized>(
        &self,
        mem: &M,
        pos: u64,
        header: &EntryHeader,
        payload: &[u8],
    ) -> (u64, u64) {
        assert_eq!(payload.len(), header.payload_len as usize);
        let start = self.place(pos);
        let end = start + entry_bytes(header.payload_len);
        assert!(
            end - start <= self.entry_bytes_max,
            "entry larger than the configured maximum"
        );
        let head = header_words(header);
        let sum = entry_checksum(start, &head, payload);
        let at = self.addr(start);
        mem.write(at.add(ENTRY_HEADER_BYTES), payload);
        let pad = (entry_bytes(header.payload_len) - ENTRY_HEADER_BYTES) as usize - payload.len();
        if pad > 0 {
            mem.write(
                at.add(ENTRY_HEADER_BYTES + payload.len() as u64),
                &[0u8; 8][..pad],
            );
        }
        for (i, &w) in head.iter().enumerate() {
            mem.store_u64(at.add(8 * i as u64), w);
        }
        mem.store_u64(at.add(40), sum);
        (start, end)
    }

    fn read_head<M: Memory + ?Sized>(
        &self,
        mem: &M,
        start: u64,
        payload_max: u32,
    ) -> Result<(EntryHeader, [u64; 5], u64), EntryError> {
        let at = self.addr(start);
        let mut head = [0u64; 5];
        for (i, w) in head.iter_mut().enumerate() {
            *w = mem.load_u64(at.add(8 * i as u64));
        }
        let stored = mem.load_u64(at.add(40));
        let kind = EntryKind::from_u8((head[2] & 0xFF) as u8).ok_or(EntryError::Kind)?;
        let payload_len = (head[2] >> 32) as u32;
        if payload_len > payload_max
            || entry_bytes(payload_len) > self.entry_bytes_max
            || head[2] & 0xFFFF_FF00 != 0
        {
            return Err(EntryError::Length);
        }
        let header = EntryHeader {
            index: head[0],
            term: head[1],
            kind,
            payload_len,
            client_id: head[3],
            request_id: head[4],
        };
        Ok((header, head, stored))
    }

    /// Reads the header of the entry following `pos` without checking the
    /// payload checksum: only for the leader's own log, which no peer
    /// writes while it leads.
    pub fn header_at<M: Memory + ?Sized>(
        &self,
        mem: &M,
        pos: u64,
    ) -> Result<(EntryHeader, u64, u64), EntryError> {
        let start = self.place(pos);
        let (header, _, _) = self.read_head(mem, start, u32::MAX)?;
        Ok((header, start, start + entry_bytes(header.payload_len)))
    }

    /// Reads and validates the entry following `pos`, copying its payload
    /// into `payload` (which must hold `payload_max` bytes). Returns the
    /// header, the entry's start and its end position.
    pub fn read_entry<M: Memory + ?Sized>(
        &self,
        mem: &M,
        pos: u64,
        payload_max: u32,
        payload: &mut [u8],
    ) -> Result<(EntryHeader, u64, u64), EntryError> {
        let start = self.place(pos);
        let (header, head, stored) = self.read_head(mem, start, payload_max)?;
        let len = header.payload_len as usize;
        let buf = &mut payload[..len];
        mem.read(self.addr(start).add(ENTRY_HEADER_BYTES), buf);
        if entry_checksum(start, &head, buf) != stored {
            return Err(EntryError::Checksum);
        }
        Ok((header, start, start + entry_bytes(header.payload_len)))
    }

    /// Like [`Ring::read_entry`] but without keeping the payload: it is
    /// checksummed through a small stack buffer (for walks that only need
    /// indices and terms).
    pub fn verify_entry<M: Memory + ?Sized>(
        &self,
        mem: &M,
        pos: u64,
        payload_max: u32,
    ) -> Result<(EntryHeader, u64, u64), EntryError> {
        let start = self.place(pos);
        let (header, head, stored) = self.read_head(mem, start, payload_max)?;
        let mut c = Checksum::new(DOMAIN_ENTRY);
        c.word(start);
        for &w in &head {
            c.word(w);
        }
        let mut chunk = [0u8; 512];
        let mut done = 0usize;
        let len = header.payload_len as usize;
        let at = self.addr(start).add(ENTRY_HEADER_BYTES);
        while done < len {
            let n = (len - done).min(chunk.len());
            mem.read(at.add(done as u64), &mut chunk[..n]);
            c.bytes(&chunk[..n]);
            done += n;
        }
        // `Checksum::bytes` over chunks of a multiple of 8 equals one call
        // over the whole payload, so this matches `entry_checksum`.
        if c.finish() != stored {
            return Err(EntryError::Checksum);
        }
        Ok((header, start, start + entry_bytes(header.payload_len)))
    }
}

/// Header of the adjustment list a follower prepares before granting log
/// access to a new leader (§3.3.1): its pointers and the number of
/// (index, term) items of its not-committed entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdjustHeader {
    /// Term of the grant this list was prepared for.
    pub grant_term: u64,
    /// Leader it was prepared for.
    pub grant_leader: MemberId,
    /// The follower's commit position.
    pub commit_pos: u64,
    /// Index of the entry at `commit_pos` (first not known committed).
    pub commit_index: u64,
    /// The follower's tail position.
    pub tail_pos: u64,
    /// Number of items (entries in `[commit_pos, tail_pos)`).
    pub count: u64,
    /// Checksum over the header fields and all items.
    pub checksum: u64,
    /// Distinguishes this grant from every earlier one of the member, also
    /// across restarts (it grows with the member's row version, which a
    /// restarted member continues above what its peers hold): a leader
    /// whose log channel broke resumes where it was only if the list is
    /// still the one it adjusted from, and adjusts afresh otherwise.
    pub nonce: u64,
}

impl AdjustHeader {
    fn words(&self) -> [u64; 7] {
        [
            self.grant_term,
            u64::from(self.grant_leader.0),
            self.commit_pos,
            self.commit_index,
            self.tail_pos,
            self.count,
            self.nonce,
        ]
    }

    /// Starts the checksum over the header fields; items are added with
    /// [`Checksum::word`] (index, then term).
    pub fn checksum_start(&self) -> Checksum {
        let mut c = Checksum::new(DOMAIN_ADJUST);
        for w in self.words() {
            c.word(w);
        }
        c
    }

    /// Writes the header (8 words) at `at`: six fields, the checksum,
    /// the nonce.
    pub fn store<M: Memory + ?Sized>(&self, mem: &M, at: Addr) {
        for (i, w) in self.words().iter().take(6).enumerate() {
            mem.store_u64(at.add(8 * i as u64), *w);
        }
        mem.store_u64(at.add(48), self.checksum);
        mem.store_u64(at.add(56), self.nonce);
    }

    /// Reads a header at `at` (not yet validated: the checksum also covers
    /// the items, see [`verify_adjust_list`]).
    pub fn load<M: Memory + ?Sized>(mem: &M, at: Addr) -> Option<AdjustHeader> {
        let leader = mem.load_u64(at.add(8));
        if leader >= crate::fabric::MAX_MEMBERS as u64 {
            return None;
        }
        Some(AdjustHeader {
            grant_term: mem.load_u64(at),
            grant_leader: MemberId(leader as u8),
            commit_pos: mem.load_u64(at.add(16)),
            commit_index: mem.load_u64(at.add(24)),
            tail_pos: mem.load_u64(at.add(32)),
            count: mem.load_u64(at.add(40)),
            checksum: mem.load_u64(at.add(48)),
            nonce: mem.load_u64(at.add(56)),
        })
    }
}

/// Reads item `k` of an adjustment list whose items start at `items`.
pub fn adjust_item<M: Memory + ?Sized>(mem: &M, items: Addr, k: u64) -> (u64, u64) {
    let at = items.add(k * ADJUST_ITEM_BYTES);
    (mem.load_u64(at), mem.load_u64(at.add(8)))
}

/// Validates a landed adjustment list (header checksum over all items).
pub fn verify_adjust_list<M: Memory + ?Sized>(mem: &M, header: &AdjustHeader, items: Addr) -> bool {
    let mut c = header.checksum_start();
    for k in 0..header.count {
        let (index, term) = adjust_item(mem, items, k);
        c.word(index);
        c.word(term);
    }
    c.finish() == header.checksum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::layout::Layout;
    use crate::test_memory::TestMemory;

    fn setup() -> (Layout, Ring, TestMemory) {
        let mut cfg = Config::new(3, MemberId(0));
        cfg.entry_payload_bytes_max = 200;
        cfg.log_ring_bytes = 1024;
        let layout = Layout::new(&cfg).unwrap();
        let ring = Ring::new(&layout.log);
        (layout, ring, TestMemory::new(&layout))
    }

    fn hdr(index: u64, len: u32) -> EntryHeader {
        EntryHeader {
            index,
            term: 3,
            kind: EntryKind::Operation,
            payload_len: len,
            client_id: 9,
            request_id: index,
        }
    }

    #[test]
    fn entries_round_trip_and_wrap_without_straddling() {
        let (_, ring, mem) = setup();
        let mut pos = 0;
        let mut buf = [0u8; 200];
        for i in 1..=40u64 {
            let len = (i * 13 % 200) as u32;
            let payload: heapless::Vec<u8, 200> = (0..len).map(|b| (b as u8) ^ (i as u8)).collect();
            let (start, end) = ring.write_entry(&mem, pos, &hdr(i, len), &payload);
            assert!(
                start % 1024 + (end - start) <= 1024,
                "entry straddles the ring end"
            );
            let (h, s, e) = ring.read_entry(&mem, pos, 200, &mut buf).unwrap();
            assert_eq!((h, s, e), (hdr(i, len), start, end));
            assert_eq!(&buf[..len as usize], &payload[..]);
            assert_eq!(ring.verify_entry(&mem, pos, 200).unwrap(), (h, s, e));
            pos = end;
        }
    }

    #[test]
    fn torn_and_stale_entries_fail_validation() {
        let (_, ring, mem) = setup();
        let (start, _) = ring.write_entry(&mem, 0, &hdr(1, 16), &[7u8; 16]);
        // A flipped payload byte.
        let at = ring.addr(start).add(ENTRY_HEADER_BYTES + 3);
        let mut b = [0u8; 1];
        mem.read(at, &mut b);
        mem.write(at, &[b[0] ^ 1]);
        assert_eq!(ring.verify_entry(&mem, 0, 200), Err(EntryError::Checksum));
        // A valid entry read at the same physical place one lap later is
        // stale: the position is part of the checksum.
        let (_, ring2, mem2) = setup();
        ring2.write_entry(&mem2, 0, &hdr(1, 16), &[7u8; 16]);
        assert_eq!(
            ring2.verify_entry(&mem2, 1024, 200),
            Err(EntryError::Checksum)
        );
        // Garbage kind / length.
        mem2.store_u64(ring2.addr(0).add(16), 99);
        assert_eq!(ring2.verify_entry(&mem2, 0, 200), Err(EntryError::Kind));
        mem2.store_u64(ring2.addr(0).add(16), 1 | (5000u64 << 32));
        assert_eq!(ring2.verify_entry(&mem2, 0, 200), Err(EntryError::Length));
    }

    #[test]
    fn spans_split_at_the_ring_end() {
        let (_, ring, _) = setup();
        let [(a, la), (_, lb)] = ring.spans(100, 300);
        assert_eq!(
            (a.offset % 1024, la, lb),
            ((ring.addr(100).offset) % 1024, 200, 0)
        );
        let [(a, la), (b, lb)] = ring.spans(1000, 1100);
        assert_eq!(la, 24);
        assert_eq!(lb, 76);
        assert_eq!(a, ring.addr(1000));
        assert_eq!(b, ring.addr(0));
        assert_eq!(
            ring.place(1024 - 100),
            1024,
            "less than a maximal entry left: skip"
        );
    }

    #[test]
    fn adjust_list_checksum_covers_items() {
        let (layout, _, mem) = setup();
        let at = layout.adjust_header();
        let items = Addr::new(RegionId::Log, layout.log.adjust_list_offset);
        let mut h = AdjustHeader {
            grant_term: 4,
            grant_leader: MemberId(1),
            commit_pos: 64,
            commit_index: 3,
            tail_pos: 256,
            count: 2,
            checksum: 0,
            nonce: 77,
        };
        let mut c = h.checksum_start();
        for (k, (i, t)) in [(3u64, 2u64), (4, 3)].into_iter().enumerate() {
            mem.store_u64(items.add(16 * k as u64), i);
            mem.store_u64(items.add(16 * k as u64 + 8), t);
            c.word(i);
            c.word(t);
        }
        h.checksum = c.finish();
        h.store(&mem, at);
        let loaded = AdjustHeader::load(&mem, at).unwrap();
        assert_eq!(loaded, h);
        assert!(verify_adjust_list(&mem, &loaded, items));
        mem.store_u64(items.add(24), 9);
        assert!(!verify_adjust_list(&mem, &loaded, items));
        // The nonce is covered too: a list of another grant never passes.
        mem.store_u64(items.add(24), 3);
        assert!(verify_adjust_list(&mem, &loaded, items));
        let other = AdjustHeader {
            nonce: 78,
            ..loaded
        };
        assert!(!verify_adjust_list(&mem, &other, items));
    }
}
