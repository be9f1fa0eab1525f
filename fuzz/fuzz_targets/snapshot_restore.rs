//! A state-machine snapshot as a recovering member reads it from a peer's
//! memory (DARE §3.4), on arbitrary bytes: restoring never panics; what is
//! accepted is a state whose own snapshot restores to the same state and
//! is the same bytes again (the format is canonical for a given state up to
//! the backends' iteration order, which is fixed here). A restore in pieces
//! (as a recovering member restores, a budget per step) accepts and refuses
//! exactly what a restore in one call does, and gives the same state.
#![no_main]

use libfuzzer_sys::fuzz_target;
use verbatim_core::kv::{KvLimits, KvStateMachine};
use verbatim_core::service::KvAndStreams;
use verbatim_core::sm::{restore_in_pieces, StateMachine};
use verbatim_core::snapshot::{SliceSink, SliceSource};
use verbatim_core::stream::StreamStateMachine;
use verbatim_host::replica::storage::{HashBackend, StreamMap};

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

type Service = KvAndStreams<KvStateMachine<HashBackend>, StreamStateMachine<StreamMap>>;

fn service(limits: KvLimits) -> Service {
    KvAndStreams::new(
        KvStateMachine::new(HashBackend::new(64), limits),
        StreamStateMachine::new(StreamMap::new(64), limits),
    )
}

fuzz_target!(|data: &[u8]| {
    let Some((&select, bytes)) = data.split_first() else {
        return;
    };
    let limits = LIMITS[usize::from(select) % LIMITS.len()];
    let mut scratch = vec![0u8; 4096];
    let mut s = service(limits);
    let whole = s.restore(&mut SliceSource::new(bytes), &mut scratch);
    // The same bytes in pieces of a budget the input chooses.
    let budget = 1 + u64::from(select / 2) * 8;
    let mut p = service(limits);
    let pieces = restore_in_pieces(&mut p, &mut SliceSource::new(bytes), &mut scratch, budget);
    assert_eq!(whole, pieces.map(|_| ()), "a restore in pieces decides as one in one call");
    if whole.is_err() {
        return;
    }
    let mut out = vec![0u8; bytes.len() + 64];
    let mut sink = SliceSink::new(&mut out);
    s.snapshot(&mut sink).expect("an accepted state fits the bytes it came from");
    let n = sink.len();
    let mut out_pieces = vec![0u8; bytes.len() + 64];
    let mut sink = SliceSink::new(&mut out_pieces);
    p.snapshot(&mut sink).unwrap();
    // The same state: its snapshot's length and sizes (the backends'
    // iteration order differs between two tables).
    assert_eq!(sink.len(), n, "restored in pieces, a state of another size");
    assert_eq!(p.kv.backend().len(), s.kv.backend().len());
    assert_eq!(p.streams.backend().entry_count(), s.streams.backend().entry_count());
    let mut t = service(limits);
    t.restore(&mut SliceSource::new(&out[..n]), &mut scratch)
        .expect("a state's own snapshot restores");
    let mut again = vec![0u8; n + 64];
    let mut sink = SliceSink::new(&mut again);
    t.snapshot(&mut sink).unwrap();
    let m = sink.len();
    assert_eq!(m, n, "the restored state's snapshot has another length");
    assert_eq!(t.kv.backend().len(), s.kv.backend().len());
    assert_eq!(t.streams.backend().entry_count(), s.streams.backend().entry_count());
});
