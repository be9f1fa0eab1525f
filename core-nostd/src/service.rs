//! Several services on one log: operations are routed by their first byte
//! (the operation code), which each service owns a range of.
//!
//! A service is a [`StateMachine`] (request validation, apply, read, reply
//! encoding) plus the operation codes it owns. The key-value store owns
//! 1–5 ([`crate::kv`]) and the stream service 0x10–0x13
//! ([`crate::stream`]); each keeps its own keyspace.

use crate::log::EntryHeader;
use crate::sm::{ReadError, RequestError, StateMachine};
use crate::snapshot::{
    CountingSource, RestoreError, RestoreProgress, SnapshotFull, SnapshotSink, SnapshotSource,
};

/// The key-value store and the stream service on one log.
pub struct KvAndStreams<K, S> {
    /// The key-value store.
    pub kv: K,
    /// The streams.
    pub streams: S,
    /// A restore in pieces has reached the streams' part.
    restoring_streams: bool,
}

impl<K, S> KvAndStreams<K, S> {
    /// Both services.
    pub fn new(kv: K, streams: S) -> Self {
        KvAndStreams {
            kv,
            streams,
            restoring_streams: false,
        }
    }
}

fn is_stream(payload: &[u8]) -> bool {
    payload.first().is_some_and(|&op| crate::stream::owns(op))
}

impl<K: StateMachine, S: StateMachine> StateMachine for KvAndStreams<K, S> {
    fn apply(&mut self, entry: &EntryHeader, payload: &[u8], reply: &mut [u8]) -> usize {
        if is_stream(payload) {
            self.streams.apply(entry, payload, reply)
        } else {
            // Everything else, junk included, is the key-value store's to
            // refuse: it answers a malformed operation with an error.
            self.kv.apply(entry, payload, reply)
        }
    }

    fn read(&self, query: &[u8], out: &mut [u8]) -> Result<usize, ReadError> {
        if is_stream(query) {
            self.streams.read(query, out)
        } else {
            self.kv.read(query, out)
        }
    }

    fn check_request(&self, payload: &[u8], write: bool) -> Result<(), RequestError> {
        if is_stream(payload) {
            self.streams.check_request(payload, write)
        } else {
            self.kv.check_request(payload, write)
        }
    }

    /// The key-value store's snapshot, then the streams' (each is
    /// self-delimiting).
    fn snapshot(&self, sink: &mut dyn SnapshotSink) -> Result<(), SnapshotFull> {
        self.kv.snapshot(sink)?;
        self.streams.snapshot(sink)
    }

    fn restore_begin(&mut self) {
        self.kv.restore_begin();
        self.streams.restore_begin();
        self.restoring_streams = false;
    }

    fn restore_some(
        &mut self,
        source: &mut dyn SnapshotSource,
        scratch: &mut [u8],
        budget_bytes: u64,
    ) -> Result<RestoreProgress, RestoreError> {
        let mut source = CountingSource::new(source);
        if !self.restoring_streams {
            match self.kv.restore_some(&mut source, scratch, budget_bytes)? {
                RestoreProgress::More => return Ok(RestoreProgress::More),
                RestoreProgress::Done => self.restoring_streams = true,
            }
            if source.count() >= budget_bytes {
                return Ok(RestoreProgress::More);
            }
        }
        let left = budget_bytes - source.count();
        self.streams.restore_some(&mut source, scratch, left)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::kv::{KvLimits, KvOp, KvStateMachine};
    use crate::log::EntryKind;
    use crate::rng::SplitMix64;
    use crate::snapshot::{SliceSink, SliceSource};
    use crate::stream::{encode_pairs, IdSpec, StreamId, StreamOp, StreamStateMachine};
    use crate::test_backends::{MapKv, MapStreams};
    use std::vec;
    use std::vec::Vec;

    type Service = KvAndStreams<KvStateMachine<MapKv>, StreamStateMachine<MapStreams>>;

    const LIMITS: KvLimits = KvLimits {
        key_bytes_max: 16,
        value_bytes_max: 32,
    };

    fn service() -> Service {
        KvAndStreams::new(
            KvStateMachine::new(MapKv::default(), LIMITS),
            StreamStateMachine::new(MapStreams::default(), LIMITS),
        )
    }

    fn header(index: u64) -> EntryHeader {
        EntryHeader {
            index,
            term: 1,
            kind: EntryKind::Operation,
            payload_len: 0,
            client_id: 1,
            request_id: index,
        }
    }

    /// A state with keys, a stream with entries, a trimmed-empty stream
    /// whose last id outlives its entries.
    fn populated() -> Service {
        let mut s = service();
        let mut reply = [0u8; 64];
        let mut buf = [0u8; 256];
        let mut index = 1;
        let mut apply = |s: &mut Service, payload: &[u8]| {
            s.apply(&header(index), payload, &mut reply);
            index += 1;
        };
        for (k, v) in [
            (&b"a"[..], &b"1"[..]),
            (b"bb", b""),
            (b"key-16-bytes-max", b"v"),
        ] {
            let n = KvOp::Set { key: k, value: v }.encode(&mut buf).unwrap();
            apply(&mut s, &buf[..n]);
        }
        let mut pairs = [0u8; 64];
        let p = encode_pairs([(&b"f"[..], &b"x"[..])].into_iter(), &mut pairs).unwrap();
        for (key, ms) in [(&b"events"[..], 5), (b"events", 9), (b"gone", 3)] {
            let op = StreamOp::Add {
                key,
                id: IdSpec::Explicit(StreamId { ms, seq: 1 }),
                maxlen: None,
                pairs: &pairs[..p],
            };
            let n = op.encode(&mut buf).unwrap();
            apply(&mut s, &buf[..n]);
        }
        let n = StreamOp::Trim {
            key: b"gone",
            maxlen: 0,
        }
        .encode(&mut buf)
        .unwrap();
        apply(&mut s, &buf[..n]);
        s
    }

    fn snapshot_of(s: &Service) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let mut sink = SliceSink::new(&mut buf);
        s.snapshot(&mut sink).unwrap();
        let n = sink.len();
        buf.truncate(n);
        buf
    }

    #[test]
    fn a_restored_state_is_the_snapshotted_one() {
        let original = populated();
        let bytes = snapshot_of(&original);
        // Restoring replaces whatever state there was.
        let mut copy = populated();
        let mut buf = [0u8; 64];
        let n = KvOp::Set {
            key: b"stale",
            value: b"x",
        }
        .encode(&mut buf)
        .unwrap();
        copy.apply(&header(99), &buf[..n], &mut [0u8; 64]);
        assert!(copy.kv.backend().0.contains_key(&b"stale"[..]));
        let mut scratch = [0u8; 128];
        copy.restore(&mut SliceSource::new(&bytes), &mut scratch)
            .unwrap();
        assert_eq!(copy.kv.backend(), original.kv.backend());
        assert_eq!(copy.streams.backend(), original.streams.backend());
        assert_eq!(
            copy.streams.backend().0[&b"gone"[..]].0,
            StreamId { ms: 3, seq: 1 },
            "a trimmed stream keeps its last id"
        );
        // And its snapshot is the same bytes.
        assert_eq!(snapshot_of(&copy), bytes);
    }

    /// A restore in pieces of any budget gives the state a restore in one
    /// call gives; a small budget takes several calls, each of which reads
    /// at most one record past its budget.
    #[test]
    fn a_restore_in_pieces_is_the_restore_in_one() {
        let original = populated();
        let bytes = snapshot_of(&original);
        let mut scratch = [0u8; 128];
        // The largest record here (the stream with two entries) is under
        // 128 bytes.
        let record_max = 128;
        for budget in [1u64, 7, 16, 40, 100, u64::MAX] {
            let mut copy = populated();
            copy.restore_begin();
            let mut source = SliceSource::new(&bytes);
            let mut calls = 0;
            loop {
                let before = source.remaining();
                let progress = copy
                    .restore_some(&mut source, &mut scratch, budget)
                    .unwrap();
                let read = (before - source.remaining()) as u64;
                assert!(read > 0, "every call makes progress");
                assert!(
                    read <= budget.saturating_add(record_max + 4 + 4),
                    "budget {budget} read {read} of {}",
                    bytes.len()
                );
                calls += 1;
                if progress == RestoreProgress::Done {
                    break;
                }
            }
            assert_eq!(source.remaining(), 0, "budget {budget}");
            assert_eq!(copy.kv.backend(), original.kv.backend());
            assert_eq!(copy.streams.backend(), original.streams.backend());
            assert_eq!(snapshot_of(&copy), bytes);
            if budget <= 16 {
                assert!(calls >= 4, "budget {budget} took {calls} calls");
            } else if budget == u64::MAX {
                assert_eq!(calls, 1);
            }
        }
        // Begun again, a restore under way starts over.
        let mut copy = service();
        copy.restore_begin();
        let mut source = SliceSource::new(&bytes);
        assert_eq!(
            copy.restore_some(&mut source, &mut scratch, 1),
            Ok(RestoreProgress::More)
        );
        copy.restore(&mut SliceSource::new(&bytes), &mut scratch)
            .unwrap();
        assert_eq!(copy.kv.backend(), original.kv.backend());
    }

    #[test]
    fn a_snapshot_that_does_not_fit_is_refused() {
        let s = populated();
        let full = snapshot_of(&s).len();
        let mut buf = vec![0u8; full - 1];
        assert_eq!(s.snapshot(&mut SliceSink::new(&mut buf)), Err(SnapshotFull));
    }

    /// Every prefix of a snapshot is refused (a transfer cut short never
    /// restores a partial state as if it were whole), and so is every
    /// single corrupted byte that changes its meaning; nothing panics.
    #[test]
    fn truncated_and_corrupted_snapshots_are_refused_without_panic() {
        let bytes = snapshot_of(&populated());
        let mut scratch = [0u8; 128];
        for cut in 0..bytes.len() {
            let mut s = service();
            assert_eq!(
                s.restore(&mut SliceSource::new(&bytes[..cut]), &mut scratch),
                Err(RestoreError::Malformed),
                "prefix of {cut} bytes"
            );
        }
        let mut rng = SplitMix64::new(7);
        for _ in 0..5_000 {
            let mut b = bytes.clone();
            let i = rng.range_inclusive(0, b.len() as u64 - 1) as usize;
            b[i] ^= 1 << rng.range_inclusive(0, 7);
            let mut s = service();
            // Either refused, or a state whose own snapshot is canonical:
            // a corrupted value byte is still a valid state.
            if s.restore(&mut SliceSource::new(&b), &mut scratch).is_ok() {
                let again = snapshot_of(&s);
                let mut t = service();
                t.restore(&mut SliceSource::new(&again), &mut scratch)
                    .unwrap();
                assert_eq!(t.kv.backend(), s.kv.backend());
            }
        }
        for _ in 0..2_000 {
            let len = rng.range_inclusive(0, 300) as usize;
            let junk: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let _ = service().restore(&mut SliceSource::new(&junk), &mut scratch);
        }
    }

    #[test]
    fn records_past_the_limits_are_refused() {
        let mut scratch = [0u8; 256];
        // A key longer than key_bytes_max.
        let mut b = Vec::new();
        b.extend_from_slice(b"KVS1");
        b.push(1);
        b.extend_from_slice(&17u16.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&[b'k'; 17]);
        b.push(0);
        b.extend_from_slice(b"STR1\0");
        assert_eq!(
            service().restore(&mut SliceSource::new(&b), &mut scratch),
            Err(RestoreError::Malformed)
        );
        // A stream entry id above the stream's last id.
        let mut b = Vec::new();
        b.extend_from_slice(b"KVS1\0STR1");
        b.push(2);
        b.extend_from_slice(&1u16.to_le_bytes());
        b.push(b's');
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&6u64.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.push(0);
        assert_eq!(
            service().restore(&mut SliceSource::new(&b), &mut scratch),
            Err(RestoreError::Malformed)
        );
    }
}
