//! `KvOp::decode` on arbitrary bytes: it never panics, and whatever it
//! accepts encodes back to exactly the same bytes (the codec is canonical)
//! within `encoded_bytes_max`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use verbatim_core::kv::{KvLimits, KvOp};

/// Limit presets, picked by the first input byte: small ones make the
/// limit checks reachable, the large one exercises 16-bit key lengths.
const LIMITS: [KvLimits; 3] = [
    KvLimits {
        key_bytes_max: 4,
        value_bytes_max: 8,
    },
    KvLimits {
        key_bytes_max: 64,
        value_bytes_max: 256,
    },
    KvLimits {
        key_bytes_max: u16::MAX as u32,
        value_bytes_max: 1 << 20,
    },
];

fuzz_target!(|data: &[u8]| {
    let Some((&select, bytes)) = data.split_first() else {
        return;
    };
    let limits = LIMITS[usize::from(select) % LIMITS.len()];
    let Ok(op) = KvOp::decode(bytes, &limits) else {
        return;
    };
    let mut buf = vec![0u8; limits.encoded_bytes_max() as usize];
    let n = op
        .encode(&mut buf)
        .expect("a decoded operation fits in encoded_bytes_max");
    let encoded = &buf[..n];
    assert_eq!(KvOp::decode(encoded, &limits), Ok(op), "re-decode differs");
    assert_eq!(encoded, bytes, "encoding is not canonical");
    assert_eq!(op.is_read(), matches!(op, KvOp::Get { .. }));
});
