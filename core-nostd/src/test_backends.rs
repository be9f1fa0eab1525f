//! Ordered-map backends of the services for the core's own tests (the
//! simulator and the host have their own): one place, so every test
//! exercises the same storage semantics.

extern crate std;

use crate::kv::KvBackend;
use crate::stream::{StreamBackend, StreamId};
use std::collections::BTreeMap;
use std::vec::Vec;

/// Key-value storage in a `BTreeMap`.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct MapKv(pub BTreeMap<Vec<u8>, Vec<u8>>);

impl KvBackend for MapKv {
    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.0.get(key).map(|v| v.as_slice())
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

/// A stream: its last id and its entries.
pub type Entries = (StreamId, BTreeMap<StreamId, Vec<u8>>);

/// Streams in `BTreeMap`s.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct MapStreams(pub BTreeMap<Vec<u8>, Entries>);

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
