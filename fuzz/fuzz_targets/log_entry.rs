//! Log entries written by a leader: any ring contents are read as valid
//! entries (which then check out) or refused; never a panic, never a read
//! outside the ring.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use verbatim_core::fabric::{Addr, MemberId, RegionId};
use verbatim_core::layout::Layout;
use verbatim_core::log::Ring;
use verbatim_core::mem::Memory;
use verbatim_core::Config;

struct Mem(RefCell<Vec<u8>>);
impl Memory for Mem {
    fn load_u64(&self, at: Addr) -> u64 {
        let o = at.offset as usize;
        u64::from_le_bytes(self.0.borrow()[o..o + 8].try_into().unwrap())
    }
    fn store_u64(&self, at: Addr, v: u64) {
        let o = at.offset as usize;
        self.0.borrow_mut()[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }
    fn read(&self, at: Addr, dst: &mut [u8]) {
        let o = at.offset as usize;
        dst.copy_from_slice(&self.0.borrow()[o..o + dst.len()]);
    }
    fn write(&self, at: Addr, src: &[u8]) {
        let o = at.offset as usize;
        self.0.borrow_mut()[o..o + src.len()].copy_from_slice(src);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut cfg = Config::new(3, MemberId(0));
    cfg.log_ring_bytes = 4096;
    cfg.entry_payload_bytes_max = 256;
    let layout = Layout::new(&cfg).unwrap();
    let ring = Ring::new(&layout.log);
    let mem = Mem(RefCell::new(vec![0u8; layout.log.region_bytes as usize]));
    let n = data.len().min(4096);
    mem.write(Addr::new(RegionId::Log, layout.log.ring_offset), &data[..n]);
    let mut payload = vec![0u8; 256];
    let mut pos = u64::from(data.first().copied().unwrap_or(0)) * 8;
    for _ in 0..64 {
        match ring.read_entry(&mem, pos, 256, &mut payload) {
            Ok((h, start, end)) => {
                assert!(end > start && end - start <= layout.log.entry_bytes_max);
                assert!(h.payload_len <= 256);
                assert_eq!(ring.verify_entry(&mem, pos, 256), Ok((h, start, end)));
                pos = end;
            }
            Err(_) => break,
        }
    }
});
