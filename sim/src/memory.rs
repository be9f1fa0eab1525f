//! Simulated registered memory: words in cells, shared between a node and
//! the simulated NICs that write into it.

use std::cell::Cell;
use std::rc::Rc;
use verbatim_core::fabric::{Addr, RegionId, REGIONS_MAX};
use verbatim_core::layout::Layout;
use verbatim_core::mem::Memory;

/// The regions of one member. Cloning shares the memory (like a second
/// mapping): the node holds one handle, its simulated NIC another.
#[derive(Clone)]
pub struct SimMemory {
    regions: Rc<[Box<[Cell<u64>]>; REGIONS_MAX]>,
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

impl Memory for SimMemory {
    fn load_u64(&self, at: Addr) -> u64 {
        assert_eq!(at.offset % 8, 0, "misaligned word");
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
        // Whole aligned words at a time; bytes at the edges.
        while i < dst.len() {
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
