//! A plain in-process [`Memory`] for the core's own unit tests.

use crate::fabric::{Addr, RegionId};
use crate::layout::Layout;
use crate::mem::Memory;
use core::cell::RefCell;
extern crate std;
use std::vec;
use std::vec::Vec;

/// Regions as byte vectors.
pub struct TestMemory {
    regions: [RefCell<Vec<u8>>; 5],
}

impl TestMemory {
    /// Zeroed regions sized by the layout.
    pub fn new(layout: &Layout) -> TestMemory {
        TestMemory {
            regions: RegionId::ALL
                .map(|r| RefCell::new(vec![0u8; layout.region_bytes(r) as usize])),
        }
    }
}

impl Memory for TestMemory {
    fn load_u64(&self, at: Addr) -> u64 {
        assert_eq!(at.offset % 8, 0);
        let r = self.regions[at.region.index()].borrow();
        let o = at.offset as usize;
        u64::from_le_bytes(r[o..o + 8].try_into().unwrap())
    }
    fn store_u64(&self, at: Addr, value: u64) {
        assert_eq!(at.offset % 8, 0);
        let mut r = self.regions[at.region.index()].borrow_mut();
        let o = at.offset as usize;
        r[o..o + 8].copy_from_slice(&value.to_le_bytes());
    }
    fn read(&self, at: Addr, dst: &mut [u8]) {
        let r = self.regions[at.region.index()].borrow();
        let o = at.offset as usize;
        dst.copy_from_slice(&r[o..o + dst.len()]);
    }
    fn write(&self, at: Addr, src: &[u8]) {
        let mut r = self.regions[at.region.index()].borrow_mut();
        let o = at.offset as usize;
        r[o..o + src.len()].copy_from_slice(src);
    }
}
