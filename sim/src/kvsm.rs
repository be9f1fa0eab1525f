//! The services as the simulator runs them: the core's key-value and
//! stream semantics over `BTreeMap`s, recording every applied operation for
//! the state-machine-safety checker.

use crate::check::EntryId;
use std::cell::RefCell;
use std::collections::BTreeMap;
use verbatim_core::checksum::Checksum;
use verbatim_core::kv::{KvBackend, KvLimits, KvStateMachine};
use verbatim_core::log::EntryHeader;
use verbatim_core::service::KvAndStreams;
use verbatim_core::sm::{ReadError, RequestError, StateMachine};
use verbatim_core::snapshot::{
    RestoreError, RestoreProgress, SnapshotFull, SnapshotSink, SnapshotSource,
};
use verbatim_core::stream::{StreamBackend, StreamId, StreamStateMachine};

/// A `BTreeMap` backend (deterministic iteration for state digests).
#[derive(Default, Debug)]
pub struct MapBackend(pub BTreeMap<Vec<u8>, Vec<u8>>);

impl KvBackend for MapBackend {
    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.0.get(key).map(Vec::as_slice)
    }
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), ()> {
        self.0.insert(key.to_vec(), value.to_vec());
        Ok(())
    }
    fn del(&mut self, key: &[u8]) -> bool {
        self.0.remove(key).is_some()
    }
    fn for_each(&self, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        for (k, v) in &self.0 {
            if !visit(k, v) {
                break;
            }
        }
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// One stream: its last id and its entries.
pub type MapStream = (StreamId, BTreeMap<StreamId, Vec<u8>>);

/// Streams in `BTreeMap`s.
#[derive(Default, Debug)]
pub struct MapStreams(pub BTreeMap<Vec<u8>, MapStream>);

impl StreamBackend for MapStreams {
    fn last_id(&self, key: &[u8]) -> Option<StreamId> {
        self.0.get(key).map(|s| s.0)
    }
    fn len(&self, key: &[u8]) -> u64 {
        self.0.get(key).map_or(0, |s| s.1.len() as u64)
    }
    fn append(&mut self, key: &[u8], id: StreamId, pairs: &[u8]) -> Result<(), ()> {
        let s = self.0.entry(key.to_vec()).or_default();
        s.0 = id;
        s.1.insert(id, pairs.to_vec());
        Ok(())
    }
    fn trim(&mut self, key: &[u8], maxlen: u64) -> u64 {
        let Some(s) = self.0.get_mut(key) else {
            return 0;
        };
        let mut removed = 0;
        while s.1.len() as u64 > maxlen {
            s.1.pop_first();
            removed += 1;
        }
        removed
    }
    fn range(
        &self,
        key: &[u8],
        start: StreamId,
        end: StreamId,
        visit: &mut dyn FnMut(StreamId, &[u8]) -> bool,
    ) {
        if start > end {
            return;
        }
        if let Some(s) = self.0.get(key) {
            for (id, p) in s.1.range(start..=end) {
                if !visit(*id, p) {
                    break;
                }
            }
        }
    }
    fn for_each_stream(&self, visit: &mut dyn FnMut(&[u8], StreamId) -> bool) {
        for (k, s) in &self.0 {
            if !visit(k, s.0) {
                break;
            }
        }
    }
    fn set_last_id(&mut self, key: &[u8], id: StreamId) {
        self.0.entry(key.to_vec()).or_default().0 = id;
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// The services (key-value store and streams) plus a record of what they
/// applied.
pub struct RecordingKv {
    inner: KvAndStreams<KvStateMachine<MapBackend>, StreamStateMachine<MapStreams>>,
    applied: RefCell<Vec<EntryId>>,
}

impl RecordingKv {
    /// An empty store.
    pub fn new(limits: KvLimits) -> Self {
        RecordingKv {
            inner: KvAndStreams::new(
                KvStateMachine::new(MapBackend::default(), limits),
                StreamStateMachine::new(MapStreams::default(), limits),
            ),
            applied: RefCell::new(Vec::new()),
        }
    }

    /// Takes the operations applied since the last call.
    pub fn drain_applied(&self) -> Vec<EntryId> {
        std::mem::take(&mut *self.applied.borrow_mut())
    }

    /// Digest of the whole state.
    pub fn digest(&self) -> u64 {
        let mut c = Checksum::new(0x0053_5441_5445); // "STATE"
        for (k, v) in &self.inner.kv.backend().0 {
            c.word(k.len() as u64);
            c.bytes(k);
            c.word(v.len() as u64);
            c.bytes(v);
        }
        for (k, (last, entries)) in &self.inner.streams.backend().0 {
            c.word(k.len() as u64);
            c.bytes(k);
            c.word(last.ms);
            c.word(last.seq);
            for (id, pairs) in entries {
                c.word(id.ms);
                c.word(id.seq);
                c.word(pairs.len() as u64);
                c.bytes(pairs);
            }
        }
        c.finish()
    }
}

impl StateMachine for RecordingKv {
    fn apply(&mut self, entry: &EntryHeader, payload: &[u8], reply: &mut [u8]) -> usize {
        self.applied.borrow_mut().push(EntryId::of(entry, payload));
        self.inner.apply(entry, payload, reply)
    }

    fn read(&self, query: &[u8], out: &mut [u8]) -> Result<usize, ReadError> {
        self.inner.read(query, out)
    }

    fn check_request(&self, payload: &[u8], write: bool) -> Result<(), RequestError> {
        self.inner.check_request(payload, write)
    }

    fn snapshot(&self, sink: &mut dyn SnapshotSink) -> Result<(), SnapshotFull> {
        self.inner.snapshot(sink)
    }

    fn restore_begin(&mut self) {
        self.inner.restore_begin()
    }

    fn restore_some(
        &mut self,
        source: &mut dyn SnapshotSource,
        scratch: &mut [u8],
        budget_bytes: u64,
    ) -> Result<RestoreProgress, RestoreError> {
        self.inner.restore_some(source, scratch, budget_bytes)
    }
}
