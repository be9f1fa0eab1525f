//! Bounded client sessions for exactly-once writes (DARE §3.3: "unique
//! request IDs").
//!
//! The table is part of the replicated state: every member applies the
//! same entries in the same order, so every member evicts the same
//! sessions. It lives in the local `Sessions` region so that it is sized
//! from the configuration and can be copied in bulk with the state
//! machine during recovery.
//!
//! Each client's request ids must grow. A slot remembers the last applied
//! request of one client and its reply. Lookup probes at most
//! [`PROBE_SLOTS`] slots from the client's hash; when they are all taken,
//! the least recently used of them is evicted, so a client silent for
//! longer than the table can remember may see a very old retry applied
//! twice (the usual bound of session tables; size `session_slot_count`
//! above the number of live clients).

use crate::checksum::mix64;
use crate::layout::Layout;
use crate::layout::SESSION_HEADER_BYTES;
use crate::mem::Memory;

/// Slots probed per lookup.
pub const PROBE_SLOTS: u64 = 16;

/// What the table knows about a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionCheck {
    /// Not applied yet: apply it.
    New,
    /// The client's latest applied request: do not apply again; its reply
    /// is in this session slot ([`Sessions::copy_reply`]).
    Duplicate {
        /// The session slot.
        slot: u64,
    },
    /// Older than the client's latest applied request: do not apply; the
    /// client has moved on and the reply is gone.
    Stale,
}

/// The session table (a view over the `Sessions` region).
#[derive(Clone, Copy, Debug)]
pub struct Sessions {
    slot_count: u64,
}

struct Slot {
    client_id: u64,
    request_id: u64,
    last_index: u64,
}

impl Sessions {
    /// The table of a layout.
    pub fn new(layout: &Layout) -> Sessions {
        Sessions {
            slot_count: layout.session_slot_count,
        }
    }

    fn load<M: Memory + ?Sized>(&self, mem: &M, layout: &Layout, slot: u64) -> Slot {
        let at = layout.session(slot);
        Slot {
            client_id: mem.load_u64(at),
            request_id: mem.load_u64(at.add(8)),
            last_index: mem.load_u64(at.add(16)),
        }
    }

    fn store<M: Memory + ?Sized>(
        &self,
        mem: &M,
        layout: &Layout,
        slot: u64,
        s: &Slot,
        reply: &[u8],
    ) {
        let at = layout.session(slot);
        let len = reply.len().min(layout.reply_bytes_max as usize);
        mem.store_u64(at, s.client_id);
        mem.store_u64(at.add(8), s.request_id);
        mem.store_u64(at.add(16), s.last_index);
        mem.store_u64(at.add(24), len as u64);
        mem.write(at.add(SESSION_HEADER_BYTES), &reply[..len]);
    }

    /// Copies the reply remembered in session `slot` into `out`; returns
    /// its length (at most `out.len()` and `reply_bytes_max`).
    pub fn copy_reply<M: Memory + ?Sized>(
        &self,
        mem: &M,
        layout: &Layout,
        slot: u64,
        out: &mut [u8],
    ) -> usize {
        let at = layout.session(slot);
        let len = (mem.load_u64(at.add(24)) as usize)
            .min(layout.reply_bytes_max as usize)
            .min(out.len());
        mem.read(at.add(SESSION_HEADER_BYTES), &mut out[..len]);
        len
    }

    /// Slot `k` of a client's probe sequence, from `home` (its
    /// [`Sessions::home`]): one division per lookup, not two per probe.
    #[inline]
    fn probe(&self, home: u64, k: u64) -> u64 {
        assert!(home < self.slot_count && k < self.slot_count);
        let slot = home + k;
        if slot >= self.slot_count {
            slot - self.slot_count
        } else {
            slot
        }
    }

    #[inline]
    fn home(&self, client_id: u64) -> u64 {
        mix64(client_id) % self.slot_count
    }

    /// Looks a request up. Client id 0 means "no session" (always new).
    pub fn check<M: Memory + ?Sized>(
        &self,
        mem: &M,
        layout: &Layout,
        client_id: u64,
        request_id: u64,
    ) -> SessionCheck {
        if client_id == 0 {
            return SessionCheck::New;
        }
        let home = self.home(client_id);
        for k in 0..PROBE_SLOTS.min(self.slot_count) {
            let slot = self.probe(home, k);
            let s = self.load(mem, layout, slot);
            if s.client_id == client_id {
                return if request_id == s.request_id {
                    SessionCheck::Duplicate { slot }
                } else if request_id < s.request_id {
                    SessionCheck::Stale
                } else {
                    SessionCheck::New
                };
            }
        }
        SessionCheck::New
    }

    /// The log index of the request session `slot` remembers.
    pub fn last_index<M: Memory + ?Sized>(&self, mem: &M, layout: &Layout, slot: u64) -> u64 {
        self.load(mem, layout, slot).last_index
    }

    /// Records an applied request and its reply (at log `index`).
    pub fn record<M: Memory + ?Sized>(
        &self,
        mem: &M,
        layout: &Layout,
        client_id: u64,
        request_id: u64,
        index: u64,
        reply: &[u8],
    ) {
        if client_id == 0 {
            return;
        }
        let new = Slot {
            client_id,
            request_id,
            last_index: index,
        };
        let mut victim: Option<(u64, u64)> = None; // (slot, last_index)
        let home = self.home(client_id);
        for k in 0..PROBE_SLOTS.min(self.slot_count) {
            let slot = self.probe(home, k);
            let s = self.load(mem, layout, slot);
            if s.client_id == client_id || s.client_id == 0 {
                // An empty slot earlier in the probe sequence cannot hide
                // the client further on: slots are never emptied.
                self.store(mem, layout, slot, &new, reply);
                return;
            }
            if victim.is_none_or(|(_, idx)| s.last_index < idx) {
                victim = Some((slot, s.last_index));
            }
        }
        let (slot, _) = victim.expect("at least one slot probed");
        self.store(mem, layout, slot, &new, reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::fabric::MemberId;
    use crate::test_memory::TestMemory;

    #[test]
    fn duplicates_and_stale_requests_are_recognised() {
        let mut cfg = Config::new(3, MemberId(0));
        cfg.session_slot_count = 64;
        let layout = Layout::new(&cfg).unwrap();
        let mem = TestMemory::new(&layout);
        let t = Sessions::new(&layout);
        assert_eq!(t.check(&mem, &layout, 7, 1), SessionCheck::New);
        t.record(&mem, &layout, 7, 1, 10, b"ok1");
        let SessionCheck::Duplicate { slot } = t.check(&mem, &layout, 7, 1) else {
            panic!("a recorded request is a duplicate");
        };
        let mut out = [0u8; 64];
        let n = t.copy_reply(&mem, &layout, slot, &mut out);
        assert_eq!(&out[..n], b"ok1");
        assert_eq!(t.check(&mem, &layout, 7, 2), SessionCheck::New);
        t.record(&mem, &layout, 7, 2, 11, b"ok2");
        assert_eq!(t.check(&mem, &layout, 7, 1), SessionCheck::Stale);
        assert_eq!(t.check(&mem, &layout, 8, 1), SessionCheck::New);
        assert_eq!(t.check(&mem, &layout, 0, 1), SessionCheck::New);
    }

    #[test]
    fn eviction_is_bounded_and_least_recently_used() {
        let mut cfg = Config::new(3, MemberId(0));
        cfg.session_slot_count = 8;
        let layout = Layout::new(&cfg).unwrap();
        let mem = TestMemory::new(&layout);
        let t = Sessions::new(&layout);
        for c in 1..=8u64 {
            t.record(&mem, &layout, c, 1, c, b"");
        }
        for c in 1..=8u64 {
            assert!(matches!(
                t.check(&mem, &layout, c, 1),
                SessionCheck::Duplicate { .. }
            ));
        }
        // Client 1 has the oldest index: it is evicted by client 9.
        t.record(&mem, &layout, 9, 1, 100, b"");
        assert_eq!(t.check(&mem, &layout, 1, 1), SessionCheck::New);
        assert!(matches!(
            t.check(&mem, &layout, 9, 1),
            SessionCheck::Duplicate { .. }
        ));
        assert!(matches!(
            t.check(&mem, &layout, 2, 1),
            SessionCheck::Duplicate { .. }
        ));
    }

    #[test]
    fn replies_up_to_the_configured_size_are_kept_whole() {
        let mut cfg = Config::new(3, MemberId(0));
        cfg.reply_bytes_max = 100;
        let layout = Layout::new(&cfg).unwrap();
        let mem = TestMemory::new(&layout);
        let t = Sessions::new(&layout);
        let long: [u8; 100] = core::array::from_fn(|i| i as u8 ^ 0x5A);
        t.record(&mem, &layout, 3, 1, 1, &long);
        t.record(&mem, &layout, 4, 1, 2, b"neighbour");
        let SessionCheck::Duplicate { slot } = t.check(&mem, &layout, 3, 1) else {
            panic!("recorded");
        };
        let mut out = [0u8; 128];
        let n = t.copy_reply(&mem, &layout, slot, &mut out);
        assert_eq!(&out[..n], &long[..]);
        // A short output buffer gets a prefix, never more than it holds.
        let mut short = [0u8; 10];
        assert_eq!(t.copy_reply(&mem, &layout, slot, &mut short), 10);
        assert_eq!(short, long[..10]);
    }
}
