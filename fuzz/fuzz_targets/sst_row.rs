//! SST rows written by peers: any 192 bytes decode to a row (that then
//! encodes back to the same words) or are refused; never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use verbatim_core::layout::ROW_WORDS;
use verbatim_core::sst::Row;

fuzz_target!(|data: &[u8]| {
    let mut words = [0u64; ROW_WORDS];
    for (i, chunk) in data.chunks(8).take(ROW_WORDS).enumerate() {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        words[i] = u64::from_le_bytes(b);
    }
    if let Ok((row, version)) = Row::decode(&words) {
        assert_eq!(row.encode(version), words, "an accepted row is canonical");
    }
});
