//! Several services on one log: operations are routed by their first byte
//! (the operation code), which each service owns a range of.
//!
//! A service is a [`StateMachine`] (request validation, apply, read, reply
//! encoding) plus the operation codes it owns. The key-value store owns
//! 1–5 ([`crate::kv`]) and the stream service 0x10–0x13
//! ([`crate::stream`]); each keeps its own keyspace.

use crate::log::EntryHeader;
use crate::sm::{ReadError, RequestError, StateMachine};

/// The key-value store and the stream service on one log.
pub struct KvAndStreams<K, S> {
    /// The key-value store.
    pub kv: K,
    /// The streams.
    pub streams: S,
}

impl<K, S> KvAndStreams<K, S> {
    /// Both services.
    pub fn new(kv: K, streams: S) -> Self {
        KvAndStreams { kv, streams }
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
}
