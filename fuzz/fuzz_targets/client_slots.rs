//! Shared-memory client slots written by untrusted client processes: any
//! slot contents and pending bits are taken as requests (within the slot's
//! bounds) or answered with an error; never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};
use verbatim_core::fabric::{Addr, MemberId, RegionId};
use verbatim_core::layout::Layout;
use verbatim_core::mem::Memory;
use verbatim_core::Config;
use verbatim_host::shm::{Segment, ShmMemory};
use verbatim_host::slots::SlotServer;

fn setup() -> &'static (Layout, Arc<Segment>) {
    static S: OnceLock<(Layout, Arc<Segment>)> = OnceLock::new();
    S.get_or_init(|| {
        let mut cfg = Config::new(3, MemberId(0));
        cfg.client_slot_count = 8;
        cfg.client_slot_bytes = 512;
        let layout = Layout::new(&cfg).unwrap();
        let path = std::env::temp_dir().join(format!("verbatim-fuzz-slots-{}", std::process::id()));
        let seg = Arc::new(Segment::create(&path, &layout, MemberId(0)).unwrap());
        (layout, seg)
    })
}

fuzz_target!(|data: &[u8]| {
    let (layout, seg) = setup();
    let mem = ShmMemory::new(seg.clone());
    let bytes = layout.clients_bytes as usize;
    let mut region = vec![0u8; bytes];
    let n = data.len().saturating_sub(8).min(bytes);
    region[..n].copy_from_slice(&data[8.min(data.len())..8.min(data.len()) + n]);
    mem.write(Addr::new(RegionId::Clients, 0), &region);
    let mut bits = [0u8; 8];
    let k = data.len().min(8);
    bits[..k].copy_from_slice(&data[..k]);
    seg.client_pending(0).store(u64::from_le_bytes(bits), std::sync::atomic::Ordering::Release);
    let server = SlotServer::new(mem, layout);
    let mut out = Vec::new();
    server.take_pending(&mut out);
    for r in &out {
        assert!(r.slot < 8);
        assert!(r.payload.len() as u64 <= (512 - 64) / 2);
    }
});
