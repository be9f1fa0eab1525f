//! Shared-memory client slots written by untrusted client processes: any
//! slot contents and pending bits are taken as requests (within the slot's
//! bounds), answered with an error, or skipped as torn; never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, Mutex, OnceLock};
use verbatim_client::shared::SharedMap;
use verbatim_client::slots::{SlotGeometry, SlotSegment, SlotServer, HEADER_BYTES, PENDING_OFFSET};

const SLOTS: u64 = 8;
const SLOT_BYTES: u64 = 512;

fn setup() -> &'static (Mutex<SlotServer>, SharedMap) {
    static S: OnceLock<(Mutex<SlotServer>, SharedMap)> = OnceLock::new();
    S.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("verbatim-fuzz-slots-{}", std::process::id()));
        let seg = Arc::new(
            SlotSegment::create(&path, SlotGeometry::new(SLOTS, SLOT_BYTES).unwrap()).unwrap(),
        );
        let hostile = SharedMap::open(&path, HEADER_BYTES + SLOTS * SLOT_BYTES, "short").unwrap();
        (Mutex::new(SlotServer::new(seg)), hostile)
    })
}

fuzz_target!(|data: &[u8]| {
    let (server, hostile) = setup();
    let bytes = (SLOTS * SLOT_BYTES) as usize;
    let mut region = vec![0u8; bytes];
    let n = data.len().saturating_sub(8).min(bytes);
    region[..n].copy_from_slice(&data[8.min(data.len())..8.min(data.len()) + n]);
    hostile.write(HEADER_BYTES, &region);
    let mut bits = [0u8; 8];
    let k = data.len().min(8);
    bits[..k].copy_from_slice(&data[..k]);
    hostile
        .word(PENDING_OFFSET)
        .store(u64::from_le_bytes(bits), std::sync::atomic::Ordering::Release);
    let mut server = server.lock().unwrap();
    let area = SlotGeometry::new(SLOTS, SLOT_BYTES).unwrap().area_bytes;
    let mut out = Vec::new();
    server.take_pending(&mut out);
    for r in &out {
        assert!(r.slot < SLOTS);
        assert!(r.payload.len() as u64 <= area);
    }
});
