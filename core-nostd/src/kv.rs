//! The key-value state machine (DARE §6) and its wire codec.
//!
//! Operations are encoded as compact binary payloads that travel in log
//! entries (writes) or read queries. The codec validates everything: a
//! payload that arrives from a client is outside input.
//!
//! ```text
//! op (u8) | key_len (u16 LE) | key | operands
//!   GET  = 1: -
//!   SET  = 2: value_len (u32 LE) | value
//!   DEL  = 3: -
//!   INCR = 4: delta (i64 LE)
//!   CAS  = 5: has_expected (u8: 0|1) | expected_len (u32 LE) | expected | new_len (u32 LE) | new
//! ```
//!
//! Write replies are a tag byte and an `i64` ([`KvReply`]). GET replies are
//! a tag byte (0 nil, 1 value) followed by the value.
//!
//! Storage is the host's ([`KvBackend`]); the semantics live here once, so
//! the simulator and the replica apply operations identically.

use crate::log::EntryHeader;
use crate::sm::{ReadError, RequestError, StateMachine};
use crate::snapshot::{
    restore_records, wire, RestoreCursor, RestoreError, RestoreProgress, SnapshotFull,
    SnapshotSink, SnapshotSource,
};

const OP_GET: u8 = 1;
const OP_SET: u8 = 2;
const OP_DEL: u8 = 3;
const OP_INCR: u8 = 4;
const OP_CAS: u8 = 5;

/// Limits on keys and values, from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLimits {
    /// Largest key.
    pub key_bytes_max: u32,
    /// Largest value.
    pub value_bytes_max: u32,
}

impl KvLimits {
    /// Bytes of the largest encoded operation (a CAS with two maximal
    /// values); the log's payload limit must be at least this.
    pub const fn encoded_bytes_max(&self) -> u32 {
        1 + 2 + self.key_bytes_max + 1 + 4 + self.value_bytes_max + 4 + self.value_bytes_max
    }
}

/// A decoded operation, borrowing its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvOp<'a> {
    /// Read a key.
    Get {
        /// The key.
        key: &'a [u8],
    },
    /// Set a key.
    Set {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// Delete a key.
    Del {
        /// The key.
        key: &'a [u8],
    },
    /// Add to an integer value (missing keys count as 0), Redis `INCRBY`.
    Incr {
        /// The key.
        key: &'a [u8],
        /// The addend.
        delta: i64,
    },
    /// Set `key` to `new` if its current value equals `expected` (`None`:
    /// the key is absent).
    Cas {
        /// The key.
        key: &'a [u8],
        /// The value expected.
        expected: Option<&'a [u8]>,
        /// The new value.
        new: &'a [u8],
    },
}

/// Why bytes are not a valid operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvDecodeError {
    /// No bytes.
    Empty,
    /// Unknown operation code.
    UnknownOp(u8),
    /// Shorter than its lengths say.
    Truncated,
    /// Bytes after the operation.
    TrailingBytes,
    /// A zero-length key.
    EmptyKey,
    /// Key above the limit.
    KeyTooLong,
    /// Value above the limit.
    ValueTooLong,
    /// An invalid flag byte.
    BadFlag,
    /// A CAS on an absent key carried a non-empty placeholder value.
    UnexpectedValue,
}

/// Why an operation could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferTooSmall;

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], KvDecodeError> {
        let end = self.at.checked_add(n).ok_or(KvDecodeError::Truncated)?;
        let s = self
            .bytes
            .get(self.at..end)
            .ok_or(KvDecodeError::Truncated)?;
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, KvDecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, KvDecodeError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, KvDecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i64(&mut self) -> Result<i64, KvDecodeError> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn value(&mut self, limits: &KvLimits) -> Result<&'a [u8], KvDecodeError> {
        let len = self.u32()?;
        if len > limits.value_bytes_max {
            return Err(KvDecodeError::ValueTooLong);
        }
        self.take(len as usize)
    }
}

struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, b: &[u8]) -> Result<(), BufferTooSmall> {
        let end = self.at + b.len();
        self.out
            .get_mut(self.at..end)
            .ok_or(BufferTooSmall)?
            .copy_from_slice(b);
        self.at = end;
        Ok(())
    }
}

impl<'a> KvOp<'a> {
    /// The key.
    pub fn key(&self) -> &'a [u8] {
        match *self {
            KvOp::Get { key }
            | KvOp::Set { key, .. }
            | KvOp::Del { key }
            | KvOp::Incr { key, .. }
            | KvOp::Cas { key, .. } => key,
        }
    }

    /// True for operations that do not modify state (served without the
    /// log, DARE §3.3 "read requests").
    pub fn is_read(&self) -> bool {
        matches!(self, KvOp::Get { .. })
    }

    /// Decodes and validates against the limits.
    pub fn decode(bytes: &'a [u8], limits: &KvLimits) -> Result<KvOp<'a>, KvDecodeError> {
        let mut r = Reader { bytes, at: 0 };
        let op = r.u8().map_err(|_| KvDecodeError::Empty)?;
        if !(OP_GET..=OP_CAS).contains(&op) {
            return Err(KvDecodeError::UnknownOp(op));
        }
        let key_len = r.u16()?;
        if key_len == 0 {
            return Err(KvDecodeError::EmptyKey);
        }
        if u32::from(key_len) > limits.key_bytes_max {
            return Err(KvDecodeError::KeyTooLong);
        }
        let key = r.take(usize::from(key_len))?;
        let parsed = match op {
            OP_GET => KvOp::Get { key },
            OP_SET => KvOp::Set {
                key,
                value: r.value(limits)?,
            },
            OP_DEL => KvOp::Del { key },
            OP_INCR => KvOp::Incr {
                key,
                delta: r.i64()?,
            },
            _ => {
                let expected = match r.u8()? {
                    0 => {
                        // "Absent" carries an empty placeholder: anything
                        // else would be junk stored in the log.
                        if !r.value(limits)?.is_empty() {
                            return Err(KvDecodeError::UnexpectedValue);
                        }
                        None
                    }
                    1 => Some(r.value(limits)?),
                    _ => return Err(KvDecodeError::BadFlag),
                };
                KvOp::Cas {
                    key,
                    expected,
                    new: r.value(limits)?,
                }
            }
        };
        if r.at != bytes.len() {
            return Err(KvDecodeError::TrailingBytes);
        }
        Ok(parsed)
    }

    /// Encodes into `out`, returning the length.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let mut w = Writer { out, at: 0 };
        let (code, key) = match *self {
            KvOp::Get { key } => (OP_GET, key),
            KvOp::Set { key, .. } => (OP_SET, key),
            KvOp::Del { key } => (OP_DEL, key),
            KvOp::Incr { key, .. } => (OP_INCR, key),
            KvOp::Cas { key, .. } => (OP_CAS, key),
        };
        let key_len = u16::try_from(key.len()).map_err(|_| BufferTooSmall)?;
        w.put(&[code])?;
        w.put(&key_len.to_le_bytes())?;
        w.put(key)?;
        let value = |w: &mut Writer<'_>, v: &[u8]| -> Result<(), BufferTooSmall> {
            let len = u32::try_from(v.len()).map_err(|_| BufferTooSmall)?;
            w.put(&len.to_le_bytes())?;
            w.put(v)
        };
        match *self {
            KvOp::Get { .. } | KvOp::Del { .. } => {}
            KvOp::Set { value: v, .. } => value(&mut w, v)?,
            KvOp::Incr { delta, .. } => w.put(&delta.to_le_bytes())?,
            KvOp::Cas { expected, new, .. } => {
                match expected {
                    None => {
                        w.put(&[0])?;
                        value(&mut w, &[])?;
                    }
                    Some(e) => {
                        w.put(&[1])?;
                        value(&mut w, e)?;
                    }
                }
                value(&mut w, new)?;
            }
        }
        Ok(w.at)
    }
}

/// Errors a write can reply with (the entry still counts as applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvError {
    /// INCR on a value that is not a decimal integer.
    NotInteger,
    /// INCR would overflow an i64.
    Overflow,
    /// The store refused to grow.
    StoreFull,
    /// The operation could not be decoded.
    Malformed,
    /// The operation is a read (it has no business in the log).
    NotAWrite,
    /// The request was superseded by a newer one of the same client.
    Stale,
}

/// The reply to a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvReply {
    /// Done.
    Ok,
    /// An integer result (DEL: keys removed; INCR: new value; CAS: 1 if
    /// swapped, 0 otherwise).
    Int(i64),
    /// The operation failed.
    Err(KvError),
}

impl KvReply {
    /// Bytes of an encoded reply: a tag byte and an `i64`.
    pub const ENCODED_BYTES: usize = 9;

    /// Encodes the reply (tag byte, then the value or error code).
    pub fn to_bytes(self) -> [u8; Self::ENCODED_BYTES] {
        let mut b = [0u8; Self::ENCODED_BYTES];
        let (tag, v): (u8, i64) = match self {
            KvReply::Ok => (0, 0),
            KvReply::Int(v) => (1, v),
            KvReply::Err(e) => (
                2,
                match e {
                    KvError::NotInteger => 1,
                    KvError::Overflow => 2,
                    KvError::StoreFull => 3,
                    KvError::Malformed => 4,
                    KvError::NotAWrite => 5,
                    KvError::Stale => 6,
                },
            ),
        };
        b[0] = tag;
        b[1..].copy_from_slice(&v.to_le_bytes());
        b
    }

    /// Decodes bytes produced by [`KvReply::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Option<KvReply> {
        if b.len() != Self::ENCODED_BYTES {
            return None;
        }
        let v = i64::from_le_bytes(b[1..9].try_into().ok()?);
        match b[0] {
            0 => Some(KvReply::Ok),
            1 => Some(KvReply::Int(v)),
            2 => Some(KvReply::Err(match v {
                1 => KvError::NotInteger,
                2 => KvError::Overflow,
                3 => KvError::StoreFull,
                4 => KvError::Malformed,
                5 => KvError::NotAWrite,
                6 => KvError::Stale,
                _ => return None,
            })),
            _ => None,
        }
    }

    /// Writes the encoding into `out` (at least [`KvReply::ENCODED_BYTES`]
    /// long, which `reply_bytes_max` guarantees); returns its length.
    pub fn write_to(self, out: &mut [u8]) -> usize {
        out[..Self::ENCODED_BYTES].copy_from_slice(&self.to_bytes());
        Self::ENCODED_BYTES
    }
}

/// Storage for the key-value state machine (a hash map on the host).
pub trait KvBackend {
    /// The value of a key.
    fn get(&self, key: &[u8]) -> Option<&[u8]>;
    /// Inserts or replaces. `Err(())` when the store cannot grow; the state
    /// must then be unchanged.
    #[allow(clippy::result_unit_err)]
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), ()>;
    /// Removes a key; true if it existed.
    fn del(&mut self, key: &[u8]) -> bool;
    /// Visits every key and value (any order) until `visit` returns false.
    fn for_each(&self, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool);
    /// Removes every key.
    fn clear(&mut self);
}

/// Magic of a key-value snapshot ("KVS1").
const KV_SNAPSHOT_MAGIC: u32 = u32::from_le_bytes(*b"KVS1");
const KV_RECORD_PAIR: u8 = 1;
const KV_RECORD_END: u8 = 0;

/// Parses a Redis-style decimal integer (optional '-', digits, no spaces).
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    let (neg, digits) = match b.first()? {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 19 || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(d - b'0');
        v = if neg {
            v.checked_mul(10)?.checked_sub(digit)?
        } else {
            v.checked_mul(10)?.checked_add(digit)?
        };
    }
    if neg && v == 0 {
        return None; // "-0" is not canonical
    }
    Some(v)
}

/// Formats an integer in decimal; returns the used part of `buf`.
pub fn format_i64(v: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut n = v.unsigned_abs();
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

/// The key-value state machine over a backend.
pub struct KvStateMachine<B> {
    backend: B,
    limits: KvLimits,
    /// Where a restore in pieces is.
    restore_at: RestoreCursor,
}

impl<B: KvBackend> KvStateMachine<B> {
    /// A state machine over `backend`.
    pub fn new(backend: B, limits: KvLimits) -> Self {
        KvStateMachine {
            backend,
            limits,
            restore_at: RestoreCursor::Start,
        }
    }

    /// The backend (for inspection).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The limits.
    pub fn limits(&self) -> KvLimits {
        self.limits
    }

    /// Applies one decoded write operation.
    pub fn apply_op(&mut self, op: &KvOp<'_>) -> KvReply {
        apply_write(&mut self.backend, op)
    }
}

/// What applying a write needs of a store: the key-value semantics
/// ([`apply_write`]) exist once, over a host's map ([`KvBackend`]) and over
/// the store that lives in registered memory ([`crate::backup`]), which
/// cannot lend a value out (peers write that memory) and compares or
/// parses it where it lies.
pub trait KvWriteAccess {
    /// Whether the key's value equals `expected` (`None`: the key is
    /// absent).
    fn value_equals(&mut self, key: &[u8], expected: Option<&[u8]>) -> bool;
    /// The key's value as a decimal integer: `Ok(None)` when absent,
    /// `Err(())` when it is not an integer.
    #[allow(clippy::result_unit_err)]
    fn value_as_i64(&mut self, key: &[u8]) -> Result<Option<i64>, ()>;
    /// Inserts or replaces. `Err(())` when the store cannot grow; the state
    /// must then be unchanged.
    #[allow(clippy::result_unit_err)]
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), ()>;
    /// Removes a key; true if it existed.
    fn del(&mut self, key: &[u8]) -> bool;
}

impl<B: KvBackend> KvWriteAccess for B {
    fn value_equals(&mut self, key: &[u8], expected: Option<&[u8]>) -> bool {
        self.get(key) == expected
    }
    fn value_as_i64(&mut self, key: &[u8]) -> Result<Option<i64>, ()> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => parse_i64(v).map(Some).ok_or(()),
        }
    }
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), ()> {
        KvBackend::set(self, key, value)
    }
    fn del(&mut self, key: &[u8]) -> bool {
        KvBackend::del(self, key)
    }
}

/// Applies one decoded write operation to a store (the key-value
/// semantics, the same in every replication mode).
pub fn apply_write<A: KvWriteAccess + ?Sized>(store: &mut A, op: &KvOp<'_>) -> KvReply {
    match *op {
        KvOp::Get { .. } => KvReply::Err(KvError::NotAWrite),
        KvOp::Set { key, value } => match store.set(key, value) {
            Ok(()) => KvReply::Ok,
            Err(()) => KvReply::Err(KvError::StoreFull),
        },
        KvOp::Del { key } => KvReply::Int(i64::from(store.del(key))),
        KvOp::Incr { key, delta } => {
            let current = match store.value_as_i64(key) {
                Ok(v) => v.unwrap_or(0),
                Err(()) => return KvReply::Err(KvError::NotInteger),
            };
            let Some(next) = current.checked_add(delta) else {
                return KvReply::Err(KvError::Overflow);
            };
            let mut buf = [0u8; 20];
            match store.set(key, format_i64(next, &mut buf)) {
                Ok(()) => KvReply::Int(next),
                Err(()) => KvReply::Err(KvError::StoreFull),
            }
        }
        KvOp::Cas { key, expected, new } => {
            if !store.value_equals(key, expected) {
                return KvReply::Int(0);
            }
            match store.set(key, new) {
                Ok(()) => KvReply::Int(1),
                Err(()) => KvReply::Err(KvError::StoreFull),
            }
        }
    }
}

impl<B: KvBackend> StateMachine for KvStateMachine<B> {
    fn apply(&mut self, _entry: &EntryHeader, payload: &[u8], reply: &mut [u8]) -> usize {
        let r = match KvOp::decode(payload, &self.limits) {
            Ok(op) => self.apply_op(&op),
            Err(_) => KvReply::Err(KvError::Malformed),
        };
        r.write_to(reply)
    }

    fn check_request(&self, payload: &[u8], write: bool) -> Result<(), RequestError> {
        match KvOp::decode(payload, &self.limits) {
            Ok(op) if op.is_read() != write => Ok(()),
            Ok(_) => Err(RequestError::WrongKind),
            Err(_) => Err(RequestError::Malformed),
        }
    }

    /// `KVS1`, then per key `1 | key len u16 | value len u32 | key |
    /// value`, then `0`.
    fn snapshot(&self, sink: &mut dyn SnapshotSink) -> Result<(), SnapshotFull> {
        wire::put_u32(sink, KV_SNAPSHOT_MAGIC)?;
        let mut result = Ok(());
        self.backend.for_each(&mut |key, value| {
            result = (|| {
                wire::put_u8(sink, KV_RECORD_PAIR)?;
                // Stored keys and values obey the limits (u16 and u32 fit).
                wire::put_u16(sink, key.len() as u16)?;
                wire::put_u32(sink, value.len() as u32)?;
                sink.write(key)?;
                sink.write(value)
            })();
            result.is_ok()
        });
        result?;
        wire::put_u8(sink, KV_RECORD_END)
    }

    fn restore_begin(&mut self) {
        self.backend.clear();
        self.restore_at = RestoreCursor::Start;
    }

    fn restore_some(
        &mut self,
        source: &mut dyn SnapshotSource,
        scratch: &mut [u8],
        budget_bytes: u64,
    ) -> Result<RestoreProgress, RestoreError> {
        let (backend, limits) = (&mut self.backend, &self.limits);
        restore_records(
            &mut self.restore_at,
            source,
            KV_SNAPSHOT_MAGIC,
            KV_RECORD_END,
            budget_bytes,
            |tag, source| {
                if tag != KV_RECORD_PAIR {
                    return Err(RestoreError::Malformed);
                }
                let key_len = usize::from(wire::get_u16(source)?);
                let value_len = wire::get_u32(source)? as usize;
                if key_len == 0
                    || key_len > limits.key_bytes_max as usize
                    || value_len > limits.value_bytes_max as usize
                {
                    return Err(RestoreError::Malformed);
                }
                let both = wire::get_bytes(source, key_len + value_len, usize::MAX, scratch)?;
                let (key, value) = both.split_at(key_len);
                backend
                    .set(key, value)
                    .map_err(|()| RestoreError::StoreFull)
            },
        )
    }

    fn read(&self, query: &[u8], out: &mut [u8]) -> Result<usize, ReadError> {
        let op = KvOp::decode(query, &self.limits).map_err(|_| ReadError::Malformed)?;
        let KvOp::Get { key } = op else {
            return Err(ReadError::Malformed);
        };
        match self.backend.get(key) {
            None => {
                *out.first_mut().ok_or(ReadError::OutputTooSmall)? = 0;
                Ok(1)
            }
            Some(v) => {
                let dst = out
                    .get_mut(..1 + v.len())
                    .ok_or(ReadError::OutputTooSmall)?;
                dst[0] = 1;
                dst[1..].copy_from_slice(v);
                Ok(1 + v.len())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    use crate::test_backends::MapKv as MapBackend;

    const LIMITS: KvLimits = KvLimits {
        key_bytes_max: 16,
        value_bytes_max: 32,
    };

    fn enc(op: KvOp<'_>) -> Vec<u8> {
        let mut buf = [0u8; 128];
        let n = op.encode(&mut buf).unwrap();
        buf[..n].to_vec()
    }

    #[test]
    fn codec_round_trips() {
        for op in [
            KvOp::Get { key: b"k" },
            KvOp::Set {
                key: b"k",
                value: b"v",
            },
            KvOp::Set {
                key: b"k",
                value: b"",
            },
            KvOp::Del { key: b"key" },
            KvOp::Incr {
                key: b"n",
                delta: -5,
            },
            KvOp::Cas {
                key: b"k",
                expected: None,
                new: b"x",
            },
            KvOp::Cas {
                key: b"k",
                expected: Some(b""),
                new: b"x",
            },
        ] {
            let bytes = enc(op);
            assert_eq!(KvOp::decode(&bytes, &LIMITS), Ok(op));
            // Every strict prefix is refused, never accepted or panicking.
            for cut in 0..bytes.len() {
                assert!(
                    KvOp::decode(&bytes[..cut], &LIMITS).is_err(),
                    "{op:?} cut at {cut}"
                );
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(
                KvOp::decode(&longer, &LIMITS),
                Err(KvDecodeError::TrailingBytes)
            );
        }
    }

    #[test]
    fn codec_enforces_limits() {
        let big = [b'x'; 33];
        assert_eq!(
            KvOp::decode(
                &enc(KvOp::Set {
                    key: b"k",
                    value: &big
                }),
                &LIMITS
            ),
            Err(KvDecodeError::ValueTooLong)
        );
        assert_eq!(
            KvOp::decode(&enc(KvOp::Get { key: &[b'k'; 17] }), &LIMITS),
            Err(KvDecodeError::KeyTooLong)
        );
        assert_eq!(
            KvOp::decode(&[9, 1, 0, b'k'], &LIMITS),
            Err(KvDecodeError::UnknownOp(9))
        );
        assert_eq!(
            KvOp::decode(&[1, 0, 0], &LIMITS),
            Err(KvDecodeError::EmptyKey)
        );
        assert_eq!(KvOp::decode(&[], &LIMITS), Err(KvDecodeError::Empty));
        // CAS-if-absent with junk in its placeholder is not canonical.
        assert_eq!(
            KvOp::decode(
                &[5, 1, 0, b'k', 0, 2, 0, 0, 0, b'j', b'j', 0, 0, 0, 0],
                &LIMITS
            ),
            Err(KvDecodeError::UnexpectedValue)
        );
        // A huge declared length is refused without overflow.
        assert_eq!(
            KvOp::decode(&[2, 1, 0, b'k', 0xFF, 0xFF, 0xFF, 0xFF], &LIMITS),
            Err(KvDecodeError::ValueTooLong)
        );
    }

    #[test]
    fn semantics_follow_redis() {
        let mut sm = KvStateMachine::new(MapBackend::default(), LIMITS);
        assert_eq!(
            sm.apply_op(&KvOp::Incr {
                key: b"n",
                delta: 1
            }),
            KvReply::Int(1)
        );
        assert_eq!(
            sm.apply_op(&KvOp::Incr {
                key: b"n",
                delta: 41
            }),
            KvReply::Int(42)
        );
        assert_eq!(sm.backend().get(b"n"), Some(&b"42"[..]));
        assert_eq!(
            sm.apply_op(&KvOp::Set {
                key: b"s",
                value: b"abc"
            }),
            KvReply::Ok
        );
        assert_eq!(
            sm.apply_op(&KvOp::Incr {
                key: b"s",
                delta: 1
            }),
            KvReply::Err(KvError::NotInteger)
        );
        sm.apply_op(&KvOp::Set {
            key: b"m",
            value: b"9223372036854775807",
        });
        assert_eq!(
            sm.apply_op(&KvOp::Incr {
                key: b"m",
                delta: 1
            }),
            KvReply::Err(KvError::Overflow)
        );
        assert_eq!(
            sm.apply_op(&KvOp::Cas {
                key: b"s",
                expected: Some(b"x"),
                new: b"y"
            }),
            KvReply::Int(0)
        );
        assert_eq!(
            sm.apply_op(&KvOp::Cas {
                key: b"s",
                expected: Some(b"abc"),
                new: b"y"
            }),
            KvReply::Int(1)
        );
        assert_eq!(
            sm.apply_op(&KvOp::Cas {
                key: b"z",
                expected: None,
                new: b"1"
            }),
            KvReply::Int(1)
        );
        assert_eq!(
            sm.apply_op(&KvOp::Cas {
                key: b"z",
                expected: None,
                new: b"2"
            }),
            KvReply::Int(0)
        );
        assert_eq!(sm.apply_op(&KvOp::Del { key: b"z" }), KvReply::Int(1));
        assert_eq!(sm.apply_op(&KvOp::Del { key: b"z" }), KvReply::Int(0));
        let mut out = [0u8; 64];
        let n = sm.read(&enc(KvOp::Get { key: b"s" }), &mut out).unwrap();
        assert_eq!(&out[..n], b"\x01y");
        let n = sm.read(&enc(KvOp::Get { key: b"zz" }), &mut out).unwrap();
        assert_eq!(&out[..n], b"\x00");
        assert_eq!(sm.read(&[1], &mut out), Err(ReadError::Malformed));
        // A malformed committed payload is answered, not a panic.
        let h = EntryHeader {
            index: 1,
            term: 1,
            kind: crate::log::EntryKind::Operation,
            payload_len: 1,
            client_id: 1,
            request_id: 1,
        };
        let mut out = [0u8; 64];
        let n = sm.apply(&h, &[77], &mut out);
        assert_eq!(
            KvReply::from_bytes(&out[..n]),
            Some(KvReply::Err(KvError::Malformed))
        );
    }

    #[test]
    fn integers_parse_and_format_strictly() {
        for v in [0i64, 1, -1, 42, i64::MAX, i64::MIN] {
            let mut b = [0u8; 20];
            assert_eq!(parse_i64(format_i64(v, &mut b)), Some(v));
        }
        for bad in [
            &b""[..],
            b"-",
            b"01",
            b"-0",
            b" 1",
            b"1x",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
        for r in [KvReply::Ok, KvReply::Int(-3), KvReply::Err(KvError::Stale)] {
            assert_eq!(KvReply::from_bytes(&r.to_bytes()), Some(r));
        }
    }
}
