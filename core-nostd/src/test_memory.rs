//! A plain in-process [`Memory`] for the core's own unit tests.

use crate::fabric::{Addr, RegionId, REGIONS_MAX};
use crate::layout::Layout;
use crate::mem::Memory;
use core::cell::RefCell;
extern crate std;
use std::rc::Rc;
use std::vec;
use std::vec::Vec;

/// Regions as byte vectors; clones share them (like two engines sharing a
/// member's registered memory).
#[derive(Clone)]
pub struct TestMemory {
    regions: Rc<[RefCell<Vec<u8>>; REGIONS_MAX]>,
}

impl TestMemory {
    /// Zeroed regions sized by the layout.
    pub fn new(layout: &Layout) -> TestMemory {
        TestMemory {
            regions: Rc::new(core::array::from_fn(|i| {
                RefCell::new(vec![0u8; layout.region_bytes(RegionId(i as u8)) as usize])
            })),
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
