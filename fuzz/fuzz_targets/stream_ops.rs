//! The stream service's codec and state machine on arbitrary bytes:
//! `StreamOp::decode` never panics, whatever it accepts encodes back to
//! exactly the same bytes, and applying or reading it on a stream that
//! already holds entries never panics and yields a reply (or a result) that
//! the decoders read back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use verbatim_core::kv::KvLimits;
use verbatim_core::log::{EntryHeader, EntryKind};
use verbatim_core::sm::StateMachine;
use verbatim_core::stream::{
    encode_pairs, range_entries, IdSpec, StreamId, StreamOp, StreamReply, StreamStateMachine,
};
use verbatim_host::replica::storage::StreamMap;

const LIMITS: [KvLimits; 2] = [
    KvLimits {
        key_bytes_max: 4,
        value_bytes_max: 8,
    },
    KvLimits {
        key_bytes_max: 64,
        value_bytes_max: 256,
    },
];

fuzz_target!(|data: &[u8]| {
    let Some((&select, bytes)) = data.split_first() else {
        return;
    };
    let limits = LIMITS[usize::from(select) % LIMITS.len()];
    let Ok(op) = StreamOp::decode(bytes, &limits) else {
        return;
    };
    let mut buf = vec![0u8; bytes.len() + 64];
    let n = op.encode(&mut buf).expect("a decoded operation encodes");
    assert_eq!(&buf[..n], bytes, "encoding is not canonical");

    // A stream with a few entries, on the key the operation names.
    let mut sm = StreamStateMachine::new(StreamMap::new(16), limits);
    let header = EntryHeader {
        index: 1,
        term: 1,
        kind: EntryKind::Operation,
        payload_len: 0,
        client_id: 1,
        request_id: 1,
    };
    let mut pairs = [0u8; 32];
    let p = encode_pairs([(&b"f"[..], &b"v"[..])].into_iter(), &mut pairs).unwrap();
    for ms in [1u64, 1, 5] {
        let add = StreamOp::Add {
            key: op.key(),
            id: IdSpec::Auto { hint_ms: ms },
            maxlen: None,
            pairs: &pairs[..p],
        };
        let mut payload = [0u8; 128];
        let len = add.encode(&mut payload).unwrap();
        let mut reply = [0u8; 64];
        let r = sm.apply(&header, &payload[..len], &mut reply);
        assert!(matches!(
            StreamReply::from_bytes(&reply[..r]),
            Some(StreamReply::Id(_))
        ));
    }
    if op.is_read() {
        let mut out = vec![0u8; 4096];
        if let Ok(len) = sm.read(bytes, &mut out) {
            if let StreamOp::Range { start, end, .. } = op {
                let entries = range_entries(&out[..len]).expect("a range result decodes");
                let mut last: Option<StreamId> = None;
                for e in entries {
                    assert!(e.id >= start && e.id <= end, "entry outside the range");
                    assert!(last.is_none_or(|l| l < e.id), "ids out of order");
                    last = Some(e.id);
                }
            } else {
                assert_eq!(len, 8);
            }
        }
    } else {
        // The smallest reply buffer a configuration allows.
        let mut reply = [0u8; 16];
        let r = sm.apply(&header, bytes, &mut reply);
        assert!(StreamReply::from_bytes(&reply[..r]).is_some(), "undecodable reply");
    }
});
