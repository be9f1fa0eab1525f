//! Simulated registered memory: words in cells, shared between a node and
//! the simulated NICs that write into it.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use verbatim_core::fabric::{Addr, RegionId, REGIONS_MAX};
use verbatim_core::layout::Layout;
use verbatim_core::mem::Memory;

/// One piece (at most a word) of a WRITE on its way into this memory: it
/// lands at its scheduled time, or earlier, in the middle of something
/// the member's CPU or another NIC is reading (see [`SimMemory::node_view`]).
#[derive(Clone, Debug)]
pub struct InFlight {
    /// Where.
    pub at: Addr,
    /// Its bytes.
    pub bytes: [u8; 8],
    /// Valid bytes.
    pub len: u8,
    /// Set once placed (early or on time): it is placed once.
    pub landed: Rc<Cell<bool>>,
    /// Set when it was refused (the writer's access was revoked since).
    pub denied: Rc<Cell<bool>>,
    /// The target's grant epoch for (writer, region), shared with the
    /// network, and the value the WRITE was posted under: a revoke bumps
    /// it and the piece is refused.
    pub epoch: (Rc<Cell<u64>>, u64),
}

/// Pieces in flight into a memory, and the seeded choice of when a read
/// by the member's CPU lets one of them land.
#[derive(Debug)]
struct Interleave {
    pieces: VecDeque<InFlight>,
    rng: u64,
    /// One read in this many places a piece (0: never).
    one_in: u64,
    /// Pieces placed in the middle of a read.
    landed_mid_read: u64,
}

/// The regions of one member. Cloning shares the memory (like a second
/// mapping): the node holds one handle, its simulated NIC another.
#[derive(Clone)]
pub struct SimMemory {
    regions: Rc<[Box<[Cell<u64>]>; REGIONS_MAX]>,
    interleave: Rc<RefCell<Interleave>>,
    /// The member's own view: its reads may see WRITEs in flight land
    /// between two words (its step is not an instant).
    node_view: bool,
}

impl SimMemory {
    /// Zeroed regions sized by the layout.
    pub fn new(layout: &Layout) -> SimMemory {
        let regions = core::array::from_fn(|i| {
            let words = (layout.region_bytes(RegionId(i as u8)) as usize).div_ceil(8);
            (0..words)
                .map(|_| Cell::new(0u64))
                .collect::<Vec<_>>()
                .into_boxed_slice()
        });
        SimMemory {
            regions: Rc::new(regions),
            interleave: Rc::new(RefCell::new(Interleave {
                pieces: VecDeque::new(),
                rng: 0,
                one_in: 0,
                landed_mid_read: 0,
            })),
            node_view: false,
        }
    }

    /// The handle the member's CPU reads through: with interleaving on,
    /// a read lets a piece of a WRITE in flight land first, one read in
    /// `one_in`, the choice drawn from `seed` (deterministic).
    pub fn node_view(&self, seed: u64, one_in: u64) -> SimMemory {
        {
            let mut i = self.interleave.borrow_mut();
            i.rng = seed | 1;
            i.one_in = one_in;
        }
        SimMemory {
            node_view: true,
            ..self.clone()
        }
    }

    /// A piece of a WRITE is on its way here (it lands on its own event,
    /// or earlier through [`SimMemory::land_one`]).
    pub fn in_flight(&self, piece: InFlight) {
        let mut i = self.interleave.borrow_mut();
        if i.one_in > 0 {
            i.pieces.push_back(piece);
        }
    }

    /// Places the oldest piece in flight (if any is left): what happens
    /// when a WRITE lands in the middle of a read. Returns true if one was.
    pub fn land_one(&self) -> bool {
        loop {
            let piece = {
                let mut i = self.interleave.borrow_mut();
                match i.pieces.pop_front() {
                    Some(p) => p,
                    None => return false,
                }
            };
            if piece.landed.replace(true) {
                continue; // placed on time already
            }
            if piece.epoch.0.get() != piece.epoch.1 {
                piece.denied.set(true);
            } else {
                self.write_raw(piece.at, &piece.bytes[..usize::from(piece.len)]);
            }
            self.interleave.borrow_mut().landed_mid_read += 1;
            return true;
        }
    }

    /// Pieces of WRITEs placed in the middle of a read of this memory.
    pub fn landed_mid_read(&self) -> u64 {
        self.interleave.borrow().landed_mid_read
    }

    /// Maybe lets a piece land before a read by the member's CPU.
    fn interleave(&self) {
        if !self.node_view {
            return;
        }
        let due = {
            let mut i = self.interleave.borrow_mut();
            if i.pieces.is_empty() || i.one_in == 0 {
                return;
            }
            // xorshift64: seeded, deterministic.
            i.rng ^= i.rng << 13;
            i.rng ^= i.rng >> 7;
            i.rng ^= i.rng << 17;
            i.rng.is_multiple_of(i.one_in)
        };
        if due {
            self.land_one();
        }
    }

    /// Bytes of a region.
    pub fn region_bytes(&self, region: RegionId) -> u64 {
        self.regions[region.index()].len() as u64 * 8
    }

    /// True when `[at, at+len)` is inside its region.
    pub fn contains(&self, at: Addr, len: u64) -> bool {
        at.offset
            .checked_add(len)
            .is_some_and(|end| end <= self.region_bytes(at.region))
    }

    fn byte(&self, region: RegionId, offset: u64) -> u8 {
        let w = self.regions[region.index()][(offset / 8) as usize].get();
        (w >> ((offset % 8) * 8)) as u8
    }

    fn set_byte(&self, region: RegionId, offset: u64, b: u8) {
        let cell = &self.regions[region.index()][(offset / 8) as usize];
        let shift = (offset % 8) * 8;
        cell.set((cell.get() & !(0xFFu64 << shift)) | (u64::from(b) << shift));
    }
}

impl SimMemory {
    fn write_raw(&self, at: Addr, src: &[u8]) {
        assert!(self.contains(at, src.len() as u64), "write out of bounds");
        let mut i = 0usize;
        let mut off = at.offset;
        while i < src.len() {
            if off.is_multiple_of(8) && src.len() - i >= 8 {
                let w = u64::from_le_bytes(src[i..i + 8].try_into().unwrap());
                self.regions[at.region.index()][(off / 8) as usize].set(w);
                i += 8;
                off += 8;
            } else {
                self.set_byte(at.region, off, src[i]);
                i += 1;
                off += 1;
            }
        }
    }
}

impl Memory for SimMemory {
    fn load_u64(&self, at: Addr) -> u64 {
        assert_eq!(at.offset % 8, 0, "misaligned word");
        self.interleave();
        self.regions[at.region.index()][(at.offset / 8) as usize].get()
    }

    fn store_u64(&self, at: Addr, value: u64) {
        assert_eq!(at.offset % 8, 0, "misaligned word");
        self.regions[at.region.index()][(at.offset / 8) as usize].set(value);
    }

    fn read(&self, at: Addr, dst: &mut [u8]) {
        assert!(self.contains(at, dst.len() as u64), "read out of bounds");
        let mut i = 0usize;
        let mut off = at.offset;
        // Whole aligned words at a time; bytes at the edges. A piece in
        // flight may land between two words (the CPU copies over time).
        while i < dst.len() {
            if off.is_multiple_of(64) {
                self.interleave();
            }
            if off.is_multiple_of(8) && dst.len() - i >= 8 {
                let w = self.regions[at.region.index()][(off / 8) as usize].get();
                dst[i..i + 8].copy_from_slice(&w.to_le_bytes());
                i += 8;
                off += 8;
            } else {
                dst[i] = self.byte(at.region, off);
                i += 1;
                off += 1;
            }
        }
    }

    fn write(&self, at: Addr, src: &[u8]) {
        self.write_raw(at, src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_core::{Config, MemberId};

    #[test]
    fn unaligned_bytes_round_trip() {
        let layout = Layout::new(&Config::new(3, MemberId(0))).unwrap();
        let m = SimMemory::new(&layout);
        let data: Vec<u8> = (0..37).collect();
        m.write(Addr::new(RegionId::Log, 5), &data);
        let mut out = vec![0u8; 37];
        m.read(Addr::new(RegionId::Log, 5), &mut out);
        assert_eq!(out, data);
        assert_eq!(
            m.load_u64(Addr::new(RegionId::Log, 8)),
            u64::from_le_bytes([3, 4, 5, 6, 7, 8, 9, 10])
        );
        let shared = m.clone();
        shared.store_u64(Addr::new(RegionId::Control, 0), 42);
        assert_eq!(m.load_u64(Addr::new(RegionId::Control, 0)), 42);
    }
}
