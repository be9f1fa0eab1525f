//! The replica's storage for its services: a hash map behind the core's
//! [`KvBackend`] trait and ordered maps behind [`StreamBackend`] (the
//! semantics live in `verbatim_core::kv` and `verbatim_core::stream`).

use std::collections::{BTreeMap, HashMap};
use verbatim_core::kv::KvBackend;
use verbatim_core::stream::{StreamBackend, StreamId};

/// A bounded hash map: refuses to grow past `keys_max` keys (the
/// operation is answered "store full" and the state stays unchanged on
/// every replica, since the bound is part of the configuration).
#[derive(Debug)]
pub struct HashBackend {
    map: HashMap<Vec<u8>, Vec<u8>>,
    keys_max: usize,
}

impl HashBackend {
    /// An empty store holding at most `keys_max` keys.
    pub fn new(keys_max: usize) -> HashBackend {
        HashBackend {
            map: HashMap::new(),
            keys_max,
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl KvBackend for HashBackend {
    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.map.get(key).map(Vec::as_slice)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), ()> {
        if let Some(v) = self.map.get_mut(key) {
            v.clear();
            v.extend_from_slice(value);
            return Ok(());
        }
        if self.map.len() >= self.keys_max {
            return Err(());
        }
        self.map.insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn del(&mut self, key: &[u8]) -> bool {
        self.map.remove(key).is_some()
    }

    fn for_each(&self, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        for (k, v) in &self.map {
            if !visit(k, v) {
                break;
            }
        }
    }

    fn clear(&mut self) {
        self.map.clear();
    }
}

/// One stream: its entries in id order and the last id ever added (kept
/// when trimming, as Redis does, so ids never repeat).
#[derive(Debug, Default)]
struct Stream {
    last_id: StreamId,
    entries: BTreeMap<StreamId, Vec<u8>>,
}

/// Streams, bounded like the key-value store: at most `entries_max`
/// entries over all streams (an `XADD` past it is answered "store full"
/// and changes nothing, identically on every replica).
#[derive(Debug)]
pub struct StreamMap {
    streams: HashMap<Vec<u8>, Stream>,
    entries: usize,
    entries_max: usize,
}

impl StreamMap {
    /// No streams; at most `entries_max` entries in all.
    pub fn new(entries_max: usize) -> StreamMap {
        StreamMap {
            streams: HashMap::new(),
            entries: 0,
            entries_max,
        }
    }

    /// Number of streams.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Entries over all streams.
    pub fn entry_count(&self) -> usize {
        self.entries
    }
}

impl StreamBackend for StreamMap {
    fn last_id(&self, key: &[u8]) -> Option<StreamId> {
        self.streams.get(key).map(|s| s.last_id)
    }

    fn len(&self, key: &[u8]) -> u64 {
        self.streams.get(key).map_or(0, |s| s.entries.len() as u64)
    }

    fn append(&mut self, key: &[u8], id: StreamId, pairs: &[u8]) -> Result<(), ()> {
        if self.entries >= self.entries_max {
            return Err(());
        }
        let s = self.streams.entry(key.to_vec()).or_default();
        s.last_id = id;
        s.entries.insert(id, pairs.to_vec());
        self.entries += 1;
        Ok(())
    }

    fn trim(&mut self, key: &[u8], maxlen: u64) -> u64 {
        let Some(s) = self.streams.get_mut(key) else {
            return 0;
        };
        let mut removed = 0;
        while s.entries.len() as u64 > maxlen {
            s.entries.pop_first();
            removed += 1;
        }
        self.entries -= removed as usize;
        removed
    }

    fn range(
        &self,
        key: &[u8],
        start: StreamId,
        end: StreamId,
        visit: &mut dyn FnMut(StreamId, &[u8]) -> bool,
    ) {
        let Some(s) = self.streams.get(key) else {
            return;
        };
        if start > end {
            return;
        }
        for (id, pairs) in s.entries.range(start..=end) {
            if !visit(*id, pairs) {
                break;
            }
        }
    }

    fn for_each_stream(&self, visit: &mut dyn FnMut(&[u8], StreamId) -> bool) {
        for (k, s) in &self.streams {
            if !visit(k, s.last_id) {
                break;
            }
        }
    }

    fn set_last_id(&mut self, key: &[u8], id: StreamId) {
        self.streams.entry(key.to_vec()).or_default().last_id = id;
    }

    fn clear(&mut self) {
        self.streams.clear();
        self.entries = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_refuses_new_keys_but_not_updates() {
        let mut b = HashBackend::new(2);
        assert!(b.set(b"a", b"1").is_ok());
        assert!(b.set(b"b", b"2").is_ok());
        assert!(b.set(b"c", b"3").is_err());
        assert!(b.set(b"a", b"9").is_ok());
        assert_eq!(b.get(b"a"), Some(&b"9"[..]));
        assert!(b.del(b"b"));
        assert!(b.set(b"c", b"3").is_ok());
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn streams_are_bounded_and_trims_free_room() {
        let mut m = StreamMap::new(2);
        let id = |ms| StreamId { ms, seq: 0 };
        assert!(m.append(b"a", id(1), b"x").is_ok());
        assert!(m.append(b"b", id(1), b"y").is_ok());
        assert!(m.append(b"a", id(2), b"z").is_err(), "full");
        assert_eq!(m.len(b"a"), 1);
        assert_eq!(m.trim(b"a", 0), 1);
        assert_eq!(
            m.last_id(b"a"),
            Some(id(1)),
            "the last id outlives trimming"
        );
        assert!(m.append(b"a", id(2), b"z").is_ok());
        let mut seen = Vec::new();
        m.range(b"a", StreamId::MIN, StreamId::MAX, &mut |i, p| {
            seen.push((i, p.to_vec()));
            true
        });
        assert_eq!(seen, [(id(2), b"z".to_vec())]);
        assert_eq!(m.entry_count(), 2);
        assert_eq!(m.stream_count(), 2);
    }
}
