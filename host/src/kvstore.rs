//! The replica's key-value storage: a hash map behind the core's
//! [`KvBackend`] trait (the semantics live in `verbatim_core::kv`).

use std::collections::HashMap;
use verbatim_core::kv::KvBackend;

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
}
