//! The key-value state machine as the simulator runs it: the core's
//! semantics over a `BTreeMap`, recording every applied operation for the
//! state-machine-safety checker.

use crate::check::EntryId;
use std::cell::RefCell;
use std::collections::BTreeMap;
use verbatim_core::checksum::Checksum;
use verbatim_core::kv::{KvBackend, KvLimits, KvStateMachine};
use verbatim_core::log::EntryHeader;
use verbatim_core::sm::{ReadError, RequestError, StateMachine};

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
}

/// The KV state machine plus a record of what it applied.
pub struct RecordingKv {
    inner: KvStateMachine<MapBackend>,
    applied: RefCell<Vec<EntryId>>,
}

impl RecordingKv {
    /// An empty store.
    pub fn new(limits: KvLimits) -> Self {
        RecordingKv {
            inner: KvStateMachine::new(MapBackend::default(), limits),
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
        for (k, v) in &self.inner.backend().0 {
            c.word(k.len() as u64);
            c.bytes(k);
            c.word(v.len() as u64);
            c.bytes(v);
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
}
