//! The shared-memory client fast path (HERD-style): a client claims a slot
//! in the `Clients` region of a replica's segment, writes its request into
//! it, sets the slot's bit in the segment's pending bitmap and rings the
//! replica's doorbell; the replica writes the reply into the same slot and
//! publishes it with a sequence word the client polls.
//!
//! ```text
//! slot: 0 owner pid | 8 request_seq | 16 client_id | 24 request_id
//!       32 kind (1 write, 2 read) | len << 32
//!       40 reply_seq | 48 status | hint << 8 | 56 reply_len
//!       64 request area | 64 + area reply area
//! ```
//! Everything in a slot is read by the other side through atomics and
//! validated (lengths against the area, kinds against the known values):
//! a slot is written by an untrusted client process.

use crate::shm::{process_alive, Segment, ShmMemory};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use verbatim_core::fabric::{Addr, MemberId, RegionId};
use verbatim_core::layout::Layout;
use verbatim_core::mem::Memory;

const S_OWNER: u64 = 0;
const S_REQUEST_SEQ: u64 = 8;
const S_CLIENT_ID: u64 = 16;
const S_REQUEST_ID: u64 = 24;
const S_KIND: u64 = 32;
const S_REPLY_SEQ: u64 = 40;
const S_STATUS: u64 = 48;
const S_REPLY_LEN: u64 = 56;
const S_AREAS: u64 = 64;

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

/// Geometry of the slots of a layout.
#[derive(Clone, Copy, Debug)]
pub struct SlotGeometry {
    /// Number of slots.
    pub count: u64,
    /// Bytes per slot.
    pub slot_bytes: u64,
    /// Bytes of the request area and of the reply area.
    pub area_bytes: u64,
}

impl SlotGeometry {
    /// Slots of a layout.
    pub fn new(layout: &Layout) -> SlotGeometry {
        let count = layout.client_slot_count.min(crate::shm::CLIENT_SLOTS_MAX);
        let slot_bytes = layout.client_slot_bytes;
        SlotGeometry {
            count,
            slot_bytes,
            area_bytes: (slot_bytes - S_AREAS) / 2 / 8 * 8,
        }
    }

    fn at(&self, slot: u64, field: u64) -> Addr {
        Addr::new(RegionId::Clients, slot * self.slot_bytes + field)
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

/// Why a slot's content was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotError {
    /// Unknown kind word.
    Kind,
    /// Length beyond the request area.
    Length,
}

/// The replica's side: finds pending requests, answers them.
pub struct SlotServer {
    mem: ShmMemory,
    geometry: SlotGeometry,
}

impl SlotServer {
    /// The slots of our own segment.
    pub fn new(mem: ShmMemory, layout: &Layout) -> SlotServer {
        SlotServer {
            mem,
            geometry: SlotGeometry::new(layout),
        }
    }

    /// True when some slot has a request waiting (cheap: bitmap words).
    pub fn any_pending(&self) -> bool {
        let words = self.geometry.count.div_ceil(64);
        (0..words).any(|k| self.mem.segment().client_pending(k).load(Ordering::Acquire) != 0)
    }

    /// Takes every pending request (bounded by the slot count). Malformed
    /// ones are answered with an error right away and not returned.
    pub fn take_pending(&self, out: &mut Vec<SlotRequest>) {
        let words = self.geometry.count.div_ceil(64);
        for k in 0..words {
            let word = self.mem.segment().client_pending(k);
            if word.load(Ordering::Acquire) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::AcqRel);
            while bits != 0 {
                let b = u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                let slot = k * 64 + b;
                if slot >= self.geometry.count {
                    continue; // a client set a bit beyond the slots: ignore
                }
                match self.read(slot) {
                    Ok(r) => out.push(r),
                    Err(_) => {
                        let seq = self.mem.load_u64(self.geometry.at(slot, S_REQUEST_SEQ));
                        self.reply(slot, seq, SlotStatus::Error, &[]);
                    }
                }
            }
        }
    }

    fn read(&self, slot: u64) -> Result<SlotRequest, SlotError> {
        let g = &self.geometry;
        let seq = self.mem.load_u64(g.at(slot, S_REQUEST_SEQ));
        let kind_word = self.mem.load_u64(g.at(slot, S_KIND));
        let kind = match kind_word & 0xFF {
            1 => SlotKind::Write,
            2 => SlotKind::Read,
            _ => return Err(SlotError::Kind),
        };
        let len = kind_word >> 32;
        if len > g.area_bytes {
            return Err(SlotError::Length);
        }
        let mut payload = vec![0u8; len as usize];
        self.mem.read(g.at(slot, S_AREAS), &mut payload);
        Ok(SlotRequest {
            slot,
            seq,
            client_id: self.mem.load_u64(g.at(slot, S_CLIENT_ID)),
            request_id: self.mem.load_u64(g.at(slot, S_REQUEST_ID)),
            kind,
            payload,
        })
    }

    /// Publishes a reply (truncated to the reply area, which is sized for
    /// the largest value, so only a malformed request can hit it).
    pub fn reply(&self, slot: u64, seq: u64, status: SlotStatus, bytes: &[u8]) {
        let g = &self.geometry;
        if slot >= g.count {
            return;
        }
        let n = bytes.len().min(g.area_bytes as usize);
        self.mem
            .write(g.at(slot, S_AREAS + g.area_bytes), &bytes[..n]);
        self.mem.store_u64(g.at(slot, S_STATUS), status.encode());
        self.mem.store_u64(g.at(slot, S_REPLY_LEN), n as u64);
        // Last: the client acts once the sequence matches.
        self.mem.store_u64(g.at(slot, S_REPLY_SEQ), seq);
    }
}

/// The client's side: one claimed slot in one replica's segment.
pub struct SlotClient {
    mem: ShmMemory,
    geometry: SlotGeometry,
    slot: u64,
    seq: u64,
}

impl SlotClient {
    /// Claims a free slot (or one whose owner process is gone).
    pub fn claim(seg: Arc<Segment>, layout: &Layout) -> Option<SlotClient> {
        let mem = ShmMemory::new(seg);
        let geometry = SlotGeometry::new(layout);
        let me = u64::from(std::process::id());
        for slot in 0..geometry.count {
            let at = geometry.at(slot, S_OWNER);
            let owner = mem.load_u64(at);
            let free = owner == 0 || !process_alive(owner as i32);
            if free && cas(&mem, at, owner, me) {
                // Start from the replica's last reply so sequences match.
                let seq = mem
                    .load_u64(geometry.at(slot, S_REPLY_SEQ))
                    .max(mem.load_u64(geometry.at(slot, S_REQUEST_SEQ)));
                return Some(SlotClient {
                    mem,
                    geometry,
                    slot,
                    seq,
                });
            }
        }
        None
    }

    /// Largest request.
    pub fn area_bytes(&self) -> u64 {
        self.geometry.area_bytes
    }

    /// Writes a request, flags it, rings the replica. Returns its sequence.
    pub fn send(&mut self, client_id: u64, request_id: u64, kind: SlotKind, payload: &[u8]) -> u64 {
        assert!(
            payload.len() as u64 <= self.geometry.area_bytes,
            "request larger than the slot"
        );
        let g = self.geometry;
        self.seq += 1;
        self.mem.write(g.at(self.slot, S_AREAS), payload);
        self.mem.store_u64(g.at(self.slot, S_CLIENT_ID), client_id);
        self.mem
            .store_u64(g.at(self.slot, S_REQUEST_ID), request_id);
        self.mem.store_u64(
            g.at(self.slot, S_KIND),
            kind as u64 | ((payload.len() as u64) << 32),
        );
        self.mem.store_u64(g.at(self.slot, S_REQUEST_SEQ), self.seq);
        let seg = self.mem.segment();
        seg.client_pending(self.slot / 64)
            .fetch_or(1 << (self.slot % 64), Ordering::AcqRel);
        seg.ring();
        self.seq
    }

    /// The reply to request `seq`, if published: status and bytes.
    pub fn poll(&self, seq: u64, buf: &mut Vec<u8>) -> Option<SlotStatus> {
        let g = self.geometry;
        if self.mem.load_u64(g.at(self.slot, S_REPLY_SEQ)) != seq {
            return None;
        }
        let status = SlotStatus::decode(self.mem.load_u64(g.at(self.slot, S_STATUS)));
        let len = self
            .mem
            .load_u64(g.at(self.slot, S_REPLY_LEN))
            .min(g.area_bytes) as usize;
        buf.resize(len, 0);
        self.mem.read(g.at(self.slot, S_AREAS + g.area_bytes), buf);
        Some(status)
    }
}

impl Drop for SlotClient {
    fn drop(&mut self) {
        self.mem.store_u64(self.geometry.at(self.slot, S_OWNER), 0);
    }
}

fn cas(mem: &ShmMemory, at: Addr, old: u64, new: u64) -> bool {
    // Claiming a slot must be atomic across client processes.
    mem.segment().compare_exchange_clients(at, old, new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_core::Config;

    #[test]
    fn a_request_and_its_reply_travel_through_a_slot() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::new(3, MemberId(0));
        cfg.client_slot_count = 4;
        cfg.client_slot_bytes = 1024;
        let layout = Layout::new(&cfg).unwrap();
        let seg = Arc::new(Segment::create(&dir.path().join("s"), &layout, MemberId(0)).unwrap());
        let server = SlotServer::new(ShmMemory::new(seg.clone()), &layout);
        let mut client = SlotClient::claim(seg.clone(), &layout).expect("a free slot");
        let other = SlotClient::claim(seg.clone(), &layout).expect("a second slot");
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
    }

    #[test]
    fn a_malformed_slot_is_answered_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::new(3, MemberId(0));
        cfg.client_slot_count = 4;
        cfg.client_slot_bytes = 1024;
        let layout = Layout::new(&cfg).unwrap();
        let seg = Arc::new(Segment::create(&dir.path().join("s"), &layout, MemberId(0)).unwrap());
        let server = SlotServer::new(ShmMemory::new(seg.clone()), &layout);
        let mem = ShmMemory::new(seg.clone());
        let g = SlotGeometry::new(&layout);
        // A hostile client: a huge length, an unknown kind, a bit past the end.
        mem.store_u64(g.at(1, S_REQUEST_SEQ), 5);
        mem.store_u64(g.at(1, S_KIND), 1 | (1u64 << 52));
        mem.store_u64(g.at(2, S_REQUEST_SEQ), 6);
        mem.store_u64(g.at(2, S_KIND), 77);
        seg.client_pending(0)
            .store((1 << 1) | (1 << 2) | (1 << 60), Ordering::Release);
        let mut reqs = Vec::new();
        server.take_pending(&mut reqs);
        assert!(reqs.is_empty());
        assert_eq!(mem.load_u64(g.at(1, S_REPLY_SEQ)), 5);
        assert_eq!(
            SlotStatus::decode(mem.load_u64(g.at(1, S_STATUS))),
            SlotStatus::Error
        );
        assert_eq!(mem.load_u64(g.at(2, S_REPLY_SEQ)), 6);
    }
}
