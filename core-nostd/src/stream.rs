//! An append-only stream service with Redis's stream semantics (`XADD`,
//! `XRANGE`, `XLEN`, `XTRIM`), the second service on the log beside the
//! key-value store.
//!
//! Entry ids are `ms-seq` pairs that grow strictly within a stream. The
//! state machine must be deterministic, so it never reads a clock: for an
//! automatic id (`XADD key * ...`) the gateway that accepts the command
//! puts its wall-clock milliseconds into the operation (`hint_ms`), and
//! apply picks `hint_ms-0` when that is past the stream's last id, or the
//! last id's `ms` with the next `seq` otherwise (Redis does the same with
//! its own clock: ids never go backwards when clocks do).
//!
//! ```text
//! op (u8) | key_len (u16 LE) | key | operands
//!   XADD   = 0x10: id_mode (u8: 0 auto, 1 ms-seq, 2 ms-*) | ms (u64) | seq (u64)
//!                  | maxlen (u64, u64::MAX: none) | pairs
//!   XRANGE = 0x11: start ms, seq | end ms, seq (u64 each) | count (u64, u64::MAX: all)
//!   XLEN   = 0x12: -
//!   XTRIM  = 0x13: maxlen (u64)
//! pairs: pair_count (u16 LE, ≥ 1) | (len (u32 LE) | field | len (u32 LE) | value) × pair_count
//! ```
//!
//! Write replies ([`StreamReply`]): tag 0 and the new id as text
//! (`ms-seq`, up to 41 bytes: longer than the 16 bytes replies were once
//! capped at), tag 1 and an `i64` (entries removed), tag 2 and an error
//! code. Read results: `XLEN` an `i64`; `XRANGE` a `u32` entry count, then
//! per entry `ms (u64) | seq (u64) | pairs_len (u32) | pairs` (the pairs
//! exactly as `XADD` carried them).

use crate::kv::KvLimits;
use crate::log::EntryHeader;
use crate::sm::{ReadError, RequestError, StateMachine};
use crate::snapshot::{
    restore_records, wire, RestoreCursor, RestoreError, RestoreProgress, SnapshotFull,
    SnapshotSink, SnapshotSource,
};

/// First operation code of the stream service.
pub const OP_XADD: u8 = 0x10;
/// Range read.
pub const OP_XRANGE: u8 = 0x11;
/// Length read.
pub const OP_XLEN: u8 = 0x12;
/// Trim.
pub const OP_XTRIM: u8 = 0x13;

/// True when an operation code belongs to the stream service.
pub const fn owns(op: u8) -> bool {
    op >= OP_XADD && op <= OP_XTRIM
}

/// A stream entry id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    /// Milliseconds part.
    pub ms: u64,
    /// Sequence within the millisecond.
    pub seq: u64,
}

impl StreamId {
    /// The smallest id (`-` in `XRANGE`).
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    /// The largest id (`+` in `XRANGE`).
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    /// The next id after this one, if any.
    pub fn next(self) -> Option<StreamId> {
        match self.seq.checked_add(1) {
            Some(seq) => Some(StreamId { ms: self.ms, seq }),
            None => Some(StreamId {
                ms: self.ms.checked_add(1)?,
                seq: 0,
            }),
        }
    }

    /// Writes `ms-seq` in decimal; returns the length (at most 41).
    pub fn format(self, out: &mut [u8; 41]) -> usize {
        let mut n = 0;
        for (i, part) in [self.ms, self.seq].into_iter().enumerate() {
            if i == 1 {
                out[n] = b'-';
                n += 1;
            }
            let mut digits = [0u8; 20];
            let mut d = 0;
            let mut v = part;
            loop {
                digits[d] = b'0' + (v % 10) as u8;
                d += 1;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
            for k in (0..d).rev() {
                out[n] = digits[k];
                n += 1;
            }
        }
        n
    }

    /// Parses `ms-seq` or `ms` (then `seq` is `default_seq`). Decimal, no
    /// sign, no spaces.
    pub fn parse(text: &[u8], default_seq: u64) -> Option<StreamId> {
        let (ms, seq) = match text.iter().position(|&b| b == b'-') {
            Some(i) => (&text[..i], Some(&text[i + 1..])),
            None => (text, None),
        };
        Some(StreamId {
            ms: parse_u64(ms)?,
            seq: match seq {
                Some(s) => parse_u64(s)?,
                None => default_seq,
            },
        })
    }
}

/// Parses a decimal `u64` (digits only, at least one).
pub fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &d in b {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(v)
}

/// How `XADD` names the new entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdSpec {
    /// `*`: from the gateway's clock (milliseconds) and the stream's last id.
    Auto {
        /// The gateway's wall clock in milliseconds when it took the command.
        hint_ms: u64,
    },
    /// `ms-seq`.
    Explicit(StreamId),
    /// `ms-*`: the given milliseconds, the next sequence.
    AutoSeq {
        /// Milliseconds part.
        ms: u64,
    },
}

/// A decoded stream operation, borrowing its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamOp<'a> {
    /// Append an entry.
    Add {
        /// The stream.
        key: &'a [u8],
        /// Its id.
        id: IdSpec,
        /// Trim to at most this many entries afterwards (`MAXLEN`).
        maxlen: Option<u64>,
        /// The field/value pairs as encoded (`pair_count` first).
        pairs: &'a [u8],
    },
    /// Entries with ids in `start..=end`, at most `count`.
    Range {
        /// The stream.
        key: &'a [u8],
        /// First id.
        start: StreamId,
        /// Last id.
        end: StreamId,
        /// Most entries returned.
        count: Option<u64>,
    },
    /// Number of entries.
    Len {
        /// The stream.
        key: &'a [u8],
    },
    /// Remove the oldest entries until at most `maxlen` remain.
    Trim {
        /// The stream.
        key: &'a [u8],
        /// Entries kept.
        maxlen: u64,
    },
}

/// Why bytes are not a valid stream operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamDecodeError {
    /// No bytes.
    Empty,
    /// Not a stream operation code.
    UnknownOp(u8),
    /// Shorter than its lengths say.
    Truncated,
    /// Bytes after the operation.
    TrailingBytes,
    /// A zero-length key.
    EmptyKey,
    /// Key above the limit.
    KeyTooLong,
    /// A field or value above the limit.
    ValueTooLong,
    /// An `XADD` without field/value pairs.
    NoPairs,
    /// An invalid id mode byte.
    BadIdMode,
}

/// Why an operation could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferTooSmall;

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StreamDecodeError> {
        let end = self.at.checked_add(n).ok_or(StreamDecodeError::Truncated)?;
        let s = self
            .bytes
            .get(self.at..end)
            .ok_or(StreamDecodeError::Truncated)?;
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, StreamDecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, StreamDecodeError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, StreamDecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, StreamDecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn id(&mut self) -> Result<StreamId, StreamDecodeError> {
        Ok(StreamId {
            ms: self.u64()?,
            seq: self.u64()?,
        })
    }
    /// Validates the pairs (count ≥ 1, every length within the limit) and
    /// returns their bytes.
    fn pairs(&mut self, limits: &KvLimits) -> Result<&'a [u8], StreamDecodeError> {
        let start = self.at;
        let count = self.u16()?;
        if count == 0 {
            return Err(StreamDecodeError::NoPairs);
        }
        for _ in 0..u32::from(count) * 2 {
            let len = self.u32()?;
            if len > limits.value_bytes_max {
                return Err(StreamDecodeError::ValueTooLong);
            }
            self.take(len as usize)?;
        }
        Ok(&self.bytes[start..self.at])
    }
}

struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, b: &[u8]) -> Result<(), BufferTooSmall> {
        let end = self.at.checked_add(b.len()).ok_or(BufferTooSmall)?;
        self.out
            .get_mut(self.at..end)
            .ok_or(BufferTooSmall)?
            .copy_from_slice(b);
        self.at = end;
        Ok(())
    }
    fn u64(&mut self, v: u64) -> Result<(), BufferTooSmall> {
        self.put(&v.to_le_bytes())
    }
}

/// Encodes field/value pairs the way [`StreamOp::Add`] carries them.
pub fn encode_pairs<'p>(
    pairs: impl ExactSizeIterator<Item = (&'p [u8], &'p [u8])>,
    out: &mut [u8],
) -> Result<usize, BufferTooSmall> {
    let mut w = Writer { out, at: 0 };
    let count = u16::try_from(pairs.len()).map_err(|_| BufferTooSmall)?;
    w.put(&count.to_le_bytes())?;
    for (f, v) in pairs {
        for part in [f, v] {
            let len = u32::try_from(part.len()).map_err(|_| BufferTooSmall)?;
            w.put(&len.to_le_bytes())?;
            w.put(part)?;
        }
    }
    Ok(w.at)
}

/// Iterates over encoded pairs (from a validated operation or a read
/// result). Stops at the first inconsistency instead of panicking.
pub fn pairs_iter(pairs: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut r = Reader {
        bytes: pairs,
        at: 0,
    };
    let count = r.u16().unwrap_or(0);
    (0..count).map_while(move |_| {
        let f_len = r.u32().ok()?;
        let f = r.take(f_len as usize).ok()?;
        let v_len = r.u32().ok()?;
        let v = r.take(v_len as usize).ok()?;
        Some((f, v))
    })
}

impl<'a> StreamOp<'a> {
    /// The stream's key.
    pub fn key(&self) -> &'a [u8] {
        match *self {
            StreamOp::Add { key, .. }
            | StreamOp::Range { key, .. }
            | StreamOp::Len { key }
            | StreamOp::Trim { key, .. } => key,
        }
    }

    /// True for operations served without the log.
    pub fn is_read(&self) -> bool {
        matches!(self, StreamOp::Range { .. } | StreamOp::Len { .. })
    }

    /// Decodes and validates against the limits.
    pub fn decode(bytes: &'a [u8], limits: &KvLimits) -> Result<StreamOp<'a>, StreamDecodeError> {
        let mut r = Reader { bytes, at: 0 };
        let op = r.u8().map_err(|_| StreamDecodeError::Empty)?;
        if !owns(op) {
            return Err(StreamDecodeError::UnknownOp(op));
        }
        let key_len = r.u16()?;
        if key_len == 0 {
            return Err(StreamDecodeError::EmptyKey);
        }
        if u32::from(key_len) > limits.key_bytes_max {
            return Err(StreamDecodeError::KeyTooLong);
        }
        let key = r.take(usize::from(key_len))?;
        let parsed = match op {
            OP_XADD => {
                let mode = r.u8()?;
                let ms = r.u64()?;
                let seq = r.u64()?;
                let id = match mode {
                    // The unused word must be zero: one operation, one
                    // encoding.
                    0 if seq == 0 => IdSpec::Auto { hint_ms: ms },
                    1 => IdSpec::Explicit(StreamId { ms, seq }),
                    2 if seq == 0 => IdSpec::AutoSeq { ms },
                    _ => return Err(StreamDecodeError::BadIdMode),
                };
                let maxlen = match r.u64()? {
                    u64::MAX => None,
                    n => Some(n),
                };
                StreamOp::Add {
                    key,
                    id,
                    maxlen,
                    pairs: r.pairs(limits)?,
                }
            }
            OP_XRANGE => StreamOp::Range {
                key,
                start: r.id()?,
                end: r.id()?,
                count: match r.u64()? {
                    u64::MAX => None,
                    n => Some(n),
                },
            },
            OP_XLEN => StreamOp::Len { key },
            _ => StreamOp::Trim {
                key,
                maxlen: r.u64()?,
            },
        };
        if r.at != bytes.len() {
            return Err(StreamDecodeError::TrailingBytes);
        }
        Ok(parsed)
    }

    /// Encodes into `out`, returning the length.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let mut w = Writer { out, at: 0 };
        let (code, key) = match *self {
            StreamOp::Add { key, .. } => (OP_XADD, key),
            StreamOp::Range { key, .. } => (OP_XRANGE, key),
            StreamOp::Len { key } => (OP_XLEN, key),
            StreamOp::Trim { key, .. } => (OP_XTRIM, key),
        };
        let key_len = u16::try_from(key.len()).map_err(|_| BufferTooSmall)?;
        w.put(&[code])?;
        w.put(&key_len.to_le_bytes())?;
        w.put(key)?;
        match *self {
            StreamOp::Add {
                id, maxlen, pairs, ..
            } => {
                let (mode, ms, seq) = match id {
                    IdSpec::Auto { hint_ms } => (0u8, hint_ms, 0),
                    IdSpec::Explicit(i) => (1, i.ms, i.seq),
                    IdSpec::AutoSeq { ms } => (2, ms, 0),
                };
                w.put(&[mode])?;
                w.u64(ms)?;
                w.u64(seq)?;
                w.u64(maxlen.unwrap_or(u64::MAX))?;
                w.put(pairs)?;
            }
            StreamOp::Range {
                start, end, count, ..
            } => {
                w.u64(start.ms)?;
                w.u64(start.seq)?;
                w.u64(end.ms)?;
                w.u64(end.seq)?;
                w.u64(count.unwrap_or(u64::MAX))?;
            }
            StreamOp::Len { .. } => {}
            StreamOp::Trim { maxlen, .. } => w.u64(maxlen)?,
        }
        Ok(w.at)
    }
}

/// Errors a stream write can reply with (the entry still counts as applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamError {
    /// The id is not greater than the stream's last id.
    IdTooSmall,
    /// `0-0` is not a valid id.
    IdZero,
    /// The store refused to grow.
    StoreFull,
    /// The operation could not be decoded.
    Malformed,
    /// A read sent through the log.
    NotAWrite,
    /// The reply does not fit `reply_bytes_max` (the entry was applied).
    ReplyTooLarge,
}

/// The reply to a stream write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamReply {
    /// `XADD`: the new entry's id.
    Id(StreamId),
    /// `XTRIM`: entries removed.
    Int(i64),
    /// The operation failed.
    Err(StreamError),
}

impl StreamReply {
    /// Largest encoding: a tag and a 41-byte id.
    pub const ENCODED_BYTES_MAX: usize = 42;

    /// Writes the encoding into `out` (at least
    /// [`StreamReply::ENCODED_BYTES_MAX`] long, or an id is replaced by
    /// [`StreamError::ReplyTooLarge`], which fits any buffer of the
    /// smallest allowed `reply_bytes_max`); returns the length.
    pub fn write_to(self, out: &mut [u8]) -> usize {
        match self {
            StreamReply::Id(id) => {
                let mut text = [0u8; 41];
                let n = id.format(&mut text);
                if out.len() < 1 + n {
                    return StreamReply::Err(StreamError::ReplyTooLarge).write_to(out);
                }
                out[0] = 0;
                out[1..1 + n].copy_from_slice(&text[..n]);
                1 + n
            }
            StreamReply::Int(v) => {
                out[0] = 1;
                out[1..9].copy_from_slice(&v.to_le_bytes());
                9
            }
            StreamReply::Err(e) => {
                out[0] = 2;
                out[1] = match e {
                    StreamError::IdTooSmall => 1,
                    StreamError::IdZero => 2,
                    StreamError::StoreFull => 3,
                    StreamError::Malformed => 4,
                    StreamError::NotAWrite => 5,
                    StreamError::ReplyTooLarge => 6,
                };
                2
            }
        }
    }

    /// Decodes bytes written by [`StreamReply::write_to`].
    pub fn from_bytes(b: &[u8]) -> Option<StreamReply> {
        match (b.first()?, b.len()) {
            (0, 2..=42) => Some(StreamReply::Id(StreamId::parse(&b[1..], u64::MAX)?)),
            (1, 9) => Some(StreamReply::Int(i64::from_le_bytes(
                b[1..9].try_into().ok()?,
            ))),
            (2, 2) => Some(StreamReply::Err(match b[1] {
                1 => StreamError::IdTooSmall,
                2 => StreamError::IdZero,
                3 => StreamError::StoreFull,
                4 => StreamError::Malformed,
                5 => StreamError::NotAWrite,
                6 => StreamError::ReplyTooLarge,
                _ => return None,
            })),
            _ => None,
        }
    }
}

/// Storage for streams (ordered maps on the host).
pub trait StreamBackend {
    /// The last id ever added to the stream (kept after trimming), or
    /// `None` when the stream does not exist.
    fn last_id(&self, key: &[u8]) -> Option<StreamId>;
    /// Entries in the stream (0 when it does not exist).
    fn len(&self, key: &[u8]) -> u64;
    /// Appends an entry (`id` is greater than [`StreamBackend::last_id`]);
    /// `Err(())` when the store cannot grow, with the state unchanged.
    #[allow(clippy::result_unit_err)]
    fn append(&mut self, key: &[u8], id: StreamId, pairs: &[u8]) -> Result<(), ()>;
    /// Removes the oldest entries until at most `maxlen` remain; returns
    /// how many were removed.
    fn trim(&mut self, key: &[u8], maxlen: u64) -> u64;
    /// Visits the entries with ids in `start..=end` in id order until
    /// `visit` returns false.
    fn range(
        &self,
        key: &[u8],
        start: StreamId,
        end: StreamId,
        visit: &mut dyn FnMut(StreamId, &[u8]) -> bool,
    );
    /// Visits every stream (any order) with its last id, until `visit`
    /// returns false.
    fn for_each_stream(&self, visit: &mut dyn FnMut(&[u8], StreamId) -> bool);
    /// Creates the stream if needed and sets its last id (a snapshot's
    /// restore: the last id outlives trimmed entries).
    fn set_last_id(&mut self, key: &[u8], id: StreamId);
    /// Removes every stream.
    fn clear(&mut self);
}

/// Magic of a stream snapshot ("STR1").
const STREAM_SNAPSHOT_MAGIC: u32 = u32::from_le_bytes(*b"STR1");
const STREAM_RECORD_STREAM: u8 = 2;
const STREAM_RECORD_END: u8 = 0;

/// The stream state machine over a backend.
pub struct StreamStateMachine<B> {
    backend: B,
    limits: KvLimits,
    /// Where a restore in pieces is.
    restore_at: RestoreCursor,
}

impl<B: StreamBackend> StreamStateMachine<B> {
    /// A state machine over `backend`; keys and each field and value obey
    /// `limits`.
    pub fn new(backend: B, limits: KvLimits) -> Self {
        StreamStateMachine {
            backend,
            limits,
            restore_at: RestoreCursor::Start,
        }
    }

    /// The backend (for inspection).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The id an `XADD` would get, or why it is refused (Redis 7's rules).
    pub fn next_id(last: Option<StreamId>, spec: IdSpec) -> Result<StreamId, StreamError> {
        let last = last.unwrap_or(StreamId::MIN);
        let id = match spec {
            IdSpec::Auto { hint_ms } if hint_ms > last.ms => StreamId {
                ms: hint_ms,
                seq: 0,
            },
            IdSpec::Auto { .. } => last.next().ok_or(StreamError::IdTooSmall)?,
            IdSpec::Explicit(id) => {
                if id == StreamId::MIN {
                    return Err(StreamError::IdZero);
                }
                id
            }
            IdSpec::AutoSeq { ms } if ms > last.ms => StreamId { ms, seq: 0 },
            IdSpec::AutoSeq { ms } if ms == last.ms => StreamId {
                ms,
                seq: last.seq.checked_add(1).ok_or(StreamError::IdTooSmall)?,
            },
            IdSpec::AutoSeq { .. } => return Err(StreamError::IdTooSmall),
        };
        if id <= last {
            // `0-*` on a new stream gives 0-0, which is below every id.
            return Err(if id == StreamId::MIN {
                StreamError::IdZero
            } else {
                StreamError::IdTooSmall
            });
        }
        Ok(id)
    }

    /// Applies one decoded write operation.
    pub fn apply_op(&mut self, op: &StreamOp<'_>) -> StreamReply {
        match *op {
            StreamOp::Range { .. } | StreamOp::Len { .. } => {
                StreamReply::Err(StreamError::NotAWrite)
            }
            StreamOp::Add {
                key,
                id,
                maxlen,
                pairs,
            } => {
                let id = match Self::next_id(self.backend.last_id(key), id) {
                    Ok(id) => id,
                    Err(e) => return StreamReply::Err(e),
                };
                if self.backend.append(key, id, pairs).is_err() {
                    return StreamReply::Err(StreamError::StoreFull);
                }
                if let Some(n) = maxlen {
                    self.backend.trim(key, n);
                }
                StreamReply::Id(id)
            }
            StreamOp::Trim { key, maxlen } => {
                StreamReply::Int(i64::try_from(self.backend.trim(key, maxlen)).unwrap_or(i64::MAX))
            }
        }
    }
}

impl<B: StreamBackend> StreamStateMachine<B> {
    fn put_id(sink: &mut dyn SnapshotSink, id: StreamId) -> Result<(), SnapshotFull> {
        wire::put_u64(sink, id.ms)?;
        wire::put_u64(sink, id.seq)
    }

    fn get_id(source: &mut dyn SnapshotSource) -> Result<StreamId, RestoreError> {
        Ok(StreamId {
            ms: wire::get_u64(source)?,
            seq: wire::get_u64(source)?,
        })
    }

    fn put_stream(
        &self,
        sink: &mut dyn SnapshotSink,
        key: &[u8],
        last: StreamId,
    ) -> Result<(), SnapshotFull> {
        wire::put_u8(sink, STREAM_RECORD_STREAM)?;
        // Stored keys obey the key limit (≤ 65535).
        wire::put_u16(sink, key.len() as u16)?;
        sink.write(key)?;
        Self::put_id(sink, last)?;
        wire::put_u64(sink, self.backend.len(key))?;
        let mut result = Ok(());
        self.backend
            .range(key, StreamId::MIN, StreamId::MAX, &mut |id, pairs| {
                result = (|| {
                    Self::put_id(sink, id)?;
                    wire::put_u32(sink, pairs.len() as u32)?;
                    sink.write(pairs)
                })();
                result.is_ok()
            });
        result
    }

    fn restore_stream(
        &mut self,
        source: &mut dyn SnapshotSource,
        scratch: &mut [u8],
    ) -> Result<(), RestoreError> {
        let key_len = usize::from(wire::get_u16(source)?);
        if key_len == 0 || key_len > self.limits.key_bytes_max as usize {
            return Err(RestoreError::Malformed);
        }
        // The key stays at the front of the scratch buffer; entries are
        // staged after it.
        if !source.read_exact(scratch.get_mut(..key_len).ok_or(RestoreError::Malformed)?) {
            return Err(RestoreError::Malformed);
        }
        let (key, rest) = scratch.split_at_mut(key_len);
        // Each stream once: a second record of the same key would merge
        // its entries into the first and could set a last id below them
        // (found by the snapshot_restore fuzz target).
        if self.backend.last_id(key).is_some() {
            return Err(RestoreError::Malformed);
        }
        let last = Self::get_id(source)?;
        let count = wire::get_u64(source)?;
        let mut previous = StreamId::MIN;
        for _ in 0..count {
            let id = Self::get_id(source)?;
            // Ids grow strictly and never pass the stream's last id.
            if id <= previous || id > last {
                return Err(RestoreError::Malformed);
            }
            previous = id;
            let len = wire::get_u32(source)? as usize;
            let pairs = wire::get_bytes(source, len, usize::MAX, rest)?;
            let mut r = Reader {
                bytes: pairs,
                at: 0,
            };
            match r.pairs(&self.limits) {
                Ok(p) if p.len() == pairs.len() => {}
                _ => return Err(RestoreError::Malformed),
            }
            self.backend
                .append(key, id, pairs)
                .map_err(|()| RestoreError::StoreFull)?;
        }
        self.backend.set_last_id(key, last);
        Ok(())
    }
}

impl<B: StreamBackend> StateMachine for StreamStateMachine<B> {
    /// `STR1`, then per stream `2 | key len u16 | key | last id (ms u64,
    /// seq u64) | entry count u64 | (id | pairs len u32 | pairs) × count`,
    /// then `0`.
    fn snapshot(&self, sink: &mut dyn SnapshotSink) -> Result<(), SnapshotFull> {
        wire::put_u32(sink, STREAM_SNAPSHOT_MAGIC)?;
        let mut result = Ok(());
        self.backend.for_each_stream(&mut |key, last| {
            result = self.put_stream(sink, key, last);
            result.is_ok()
        });
        result?;
        wire::put_u8(sink, STREAM_RECORD_END)
    }

    fn restore_begin(&mut self) {
        self.backend.clear();
        self.restore_at = RestoreCursor::Start;
    }

    /// A stream is one record: a long stream is restored in one call.
    fn restore_some(
        &mut self,
        source: &mut dyn SnapshotSource,
        scratch: &mut [u8],
        budget_bytes: u64,
    ) -> Result<RestoreProgress, RestoreError> {
        let mut at = self.restore_at;
        let progress = restore_records(
            &mut at,
            source,
            STREAM_SNAPSHOT_MAGIC,
            STREAM_RECORD_END,
            budget_bytes,
            |tag, source| match tag {
                STREAM_RECORD_STREAM => self.restore_stream(source, scratch),
                _ => Err(RestoreError::Malformed),
            },
        );
        self.restore_at = at;
        progress
    }

    fn apply(&mut self, _entry: &EntryHeader, payload: &[u8], reply: &mut [u8]) -> usize {
        let r = match StreamOp::decode(payload, &self.limits) {
            Ok(op) => self.apply_op(&op),
            Err(_) => StreamReply::Err(StreamError::Malformed),
        };
        r.write_to(reply)
    }

    fn check_request(&self, payload: &[u8], write: bool) -> Result<(), RequestError> {
        match StreamOp::decode(payload, &self.limits) {
            Ok(op) if op.is_read() != write => Ok(()),
            Ok(_) => Err(RequestError::WrongKind),
            Err(_) => Err(RequestError::Malformed),
        }
    }

    fn read(&self, query: &[u8], out: &mut [u8]) -> Result<usize, ReadError> {
        match StreamOp::decode(query, &self.limits).map_err(|_| ReadError::Malformed)? {
            StreamOp::Len { key } => {
                let n = i64::try_from(self.backend.len(key)).unwrap_or(i64::MAX);
                out.get_mut(..8)
                    .ok_or(ReadError::OutputTooSmall)?
                    .copy_from_slice(&n.to_le_bytes());
                Ok(8)
            }
            StreamOp::Range {
                key,
                start,
                end,
                count,
            } => {
                let mut w = Writer { out, at: 4 };
                let mut entries: u32 = 0;
                let mut too_small = false;
                let limit = count.unwrap_or(u64::MAX);
                if w.out.len() < 4 {
                    return Err(ReadError::OutputTooSmall);
                }
                if start <= end && limit > 0 {
                    self.backend.range(key, start, end, &mut |id, pairs| {
                        let ok = (|| {
                            w.u64(id.ms)?;
                            w.u64(id.seq)?;
                            let len = u32::try_from(pairs.len()).map_err(|_| BufferTooSmall)?;
                            w.put(&len.to_le_bytes())?;
                            w.put(pairs)
                        })();
                        if ok.is_err() {
                            too_small = true;
                            return false;
                        }
                        entries += 1;
                        u64::from(entries) < limit
                    });
                }
                if too_small {
                    // Never a silently shortened range: the client asks
                    // again with COUNT.
                    return Err(ReadError::OutputTooSmall);
                }
                w.out[..4].copy_from_slice(&entries.to_le_bytes());
                Ok(w.at)
            }
            StreamOp::Add { .. } | StreamOp::Trim { .. } => Err(ReadError::Malformed),
        }
    }
}

/// One entry of an `XRANGE` result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeEntry<'a> {
    /// Its id.
    pub id: StreamId,
    /// Its pairs, encoded ([`pairs_iter`]).
    pub pairs: &'a [u8],
}

/// Iterates over an `XRANGE` result produced by [`StreamStateMachine`]'s
/// read; `None` when the bytes are not one.
pub fn range_entries(result: &[u8]) -> Option<impl Iterator<Item = RangeEntry<'_>>> {
    let mut r = Reader {
        bytes: result,
        at: 0,
    };
    let count = r.u32().ok()?;
    // Validate the whole result first, so the iterator never meets junk.
    let body_start = r.at;
    for _ in 0..count {
        r.id().ok()?;
        let len = r.u32().ok()?;
        r.take(len as usize).ok()?;
    }
    if r.at != result.len() {
        return None;
    }
    let mut r = Reader {
        bytes: result,
        at: body_start,
    };
    Some((0..count).map_while(move |_| {
        let id = r.id().ok()?;
        let len = r.u32().ok()?;
        let pairs = r.take(len as usize).ok()?;
        Some(RangeEntry { id, pairs })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    use crate::test_backends::MapStreams;

    const LIMITS: KvLimits = KvLimits {
        key_bytes_max: 16,
        value_bytes_max: 32,
    };

    fn pairs(list: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut buf = [0u8; 256];
        let n = encode_pairs(list.iter().copied(), &mut buf).unwrap();
        buf[..n].to_vec()
    }

    fn enc(op: StreamOp<'_>) -> Vec<u8> {
        let mut buf = [0u8; 512];
        let n = op.encode(&mut buf).unwrap();
        buf[..n].to_vec()
    }

    fn header() -> EntryHeader {
        EntryHeader {
            index: 1,
            term: 1,
            kind: crate::log::EntryKind::Operation,
            payload_len: 0,
            client_id: 1,
            request_id: 1,
        }
    }

    fn apply(sm: &mut StreamStateMachine<MapStreams>, op: StreamOp<'_>) -> StreamReply {
        let mut out = [0u8; 64];
        let n = sm.apply(&header(), &enc(op), &mut out);
        StreamReply::from_bytes(&out[..n]).expect("a reply the codec reads back")
    }

    fn add<'a>(key: &'a [u8], id: IdSpec, p: &'a [u8]) -> StreamOp<'a> {
        StreamOp::Add {
            key,
            id,
            maxlen: None,
            pairs: p,
        }
    }

    #[test]
    fn codec_round_trips_and_is_canonical() {
        let p = pairs(&[(b"f", b"v"), (b"g", b"")]);
        for op in [
            add(b"s", IdSpec::Auto { hint_ms: 7 }, &p),
            add(b"s", IdSpec::Explicit(StreamId { ms: 1, seq: 2 }), &p),
            StreamOp::Add {
                key: b"s",
                id: IdSpec::AutoSeq { ms: 5 },
                maxlen: Some(3),
                pairs: &p,
            },
            StreamOp::Range {
                key: b"s",
                start: StreamId::MIN,
                end: StreamId::MAX,
                count: Some(2),
            },
            StreamOp::Len { key: b"s" },
            StreamOp::Trim {
                key: b"s",
                maxlen: 0,
            },
        ] {
            let bytes = enc(op);
            assert_eq!(StreamOp::decode(&bytes, &LIMITS), Ok(op));
        }
        // Junk is refused, never a panic.
        let good = enc(add(b"s", IdSpec::Auto { hint_ms: 1 }, &p));
        for cut in 0..good.len() {
            assert!(StreamOp::decode(&good[..cut], &LIMITS).is_err());
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(
            StreamOp::decode(&trailing, &LIMITS),
            Err(StreamDecodeError::TrailingBytes)
        );
        let no_pairs = enc(add(b"s", IdSpec::Auto { hint_ms: 1 }, &[0, 0]));
        assert_eq!(
            StreamOp::decode(&no_pairs, &LIMITS),
            Err(StreamDecodeError::NoPairs)
        );
        let long = [b'x'; 33];
        let too_long = pairs(&[(b"f", &long)]);
        assert_eq!(
            StreamOp::decode(
                &enc(add(b"s", IdSpec::Auto { hint_ms: 1 }, &too_long)),
                &LIMITS
            ),
            Err(StreamDecodeError::ValueTooLong)
        );
        assert_eq!(
            StreamOp::decode(&[0x05, 1, 0, b'k'], &LIMITS),
            Err(StreamDecodeError::UnknownOp(5))
        );
    }

    #[test]
    fn ids_follow_redis_rules() {
        let mut sm = StreamStateMachine::new(MapStreams::default(), LIMITS);
        let p = pairs(&[(b"f", b"v")]);
        let id = |ms, seq| StreamId { ms, seq };
        assert_eq!(
            apply(&mut sm, add(b"s", IdSpec::Auto { hint_ms: 100 }, &p)),
            StreamReply::Id(id(100, 0))
        );
        // Same or older clock: same ms, next seq (ids never go back).
        assert_eq!(
            apply(&mut sm, add(b"s", IdSpec::Auto { hint_ms: 100 }, &p)),
            StreamReply::Id(id(100, 1))
        );
        assert_eq!(
            apply(&mut sm, add(b"s", IdSpec::Auto { hint_ms: 90 }, &p)),
            StreamReply::Id(id(100, 2))
        );
        assert_eq!(
            apply(&mut sm, add(b"s", IdSpec::Explicit(id(100, 2)), &p)),
            StreamReply::Err(StreamError::IdTooSmall)
        );
        assert_eq!(
            apply(&mut sm, add(b"s", IdSpec::AutoSeq { ms: 100 }, &p)),
            StreamReply::Id(id(100, 3))
        );
        assert_eq!(
            apply(&mut sm, add(b"s", IdSpec::AutoSeq { ms: 99 }, &p)),
            StreamReply::Err(StreamError::IdTooSmall)
        );
        assert_eq!(
            apply(&mut sm, add(b"t", IdSpec::Explicit(id(0, 0)), &p)),
            StreamReply::Err(StreamError::IdZero)
        );
        assert_eq!(
            apply(&mut sm, add(b"t", IdSpec::AutoSeq { ms: 0 }, &p)),
            StreamReply::Id(id(0, 1))
        );
        // A failed XADD changes nothing.
        assert_eq!(sm.backend().len(b"s"), 4);
        let max = StreamId::MAX;
        assert_eq!(
            apply(&mut sm, add(b"u", IdSpec::Explicit(max), &p)),
            StreamReply::Id(max)
        );
        assert_eq!(
            apply(&mut sm, add(b"u", IdSpec::Auto { hint_ms: 1 }, &p)),
            StreamReply::Err(StreamError::IdTooSmall),
            "no id after the largest"
        );
    }

    #[test]
    fn ranges_lengths_and_trims() {
        let mut sm = StreamStateMachine::new(MapStreams::default(), LIMITS);
        for i in 1..=5u64 {
            let v = [b'0' + i as u8];
            let p = pairs(&[(b"n", &v)]);
            apply(
                &mut sm,
                add(b"s", IdSpec::Explicit(StreamId { ms: i, seq: 0 }), &p),
            );
        }
        let read = |sm: &StreamStateMachine<MapStreams>, op: StreamOp<'_>| {
            let mut out = [0u8; 1024];
            let n = sm.read(&enc(op), &mut out).unwrap();
            out[..n].to_vec()
        };
        assert_eq!(read(&sm, StreamOp::Len { key: b"s" }), 5i64.to_le_bytes());
        assert_eq!(
            read(&sm, StreamOp::Len { key: b"none" }),
            0i64.to_le_bytes()
        );
        let r = read(
            &sm,
            StreamOp::Range {
                key: b"s",
                start: StreamId { ms: 2, seq: 0 },
                end: StreamId::MAX,
                count: Some(2),
            },
        );
        let got: Vec<(u64, Vec<u8>)> = range_entries(&r)
            .unwrap()
            .map(|e| {
                let (f, v) = pairs_iter(e.pairs).next().unwrap();
                assert_eq!(f, b"n");
                (e.id.ms, v.to_vec())
            })
            .collect();
        assert_eq!(got, [(2, b"2".to_vec()), (3, b"3".to_vec())]);
        // A range that does not fit the output is an error, not a cut.
        let mut tiny = [0u8; 40];
        let q = enc(StreamOp::Range {
            key: b"s",
            start: StreamId::MIN,
            end: StreamId::MAX,
            count: None,
        });
        assert_eq!(sm.read(&q, &mut tiny), Err(ReadError::OutputTooSmall));
        assert_eq!(
            apply(
                &mut sm,
                StreamOp::Trim {
                    key: b"s",
                    maxlen: 2
                }
            ),
            StreamReply::Int(3)
        );
        assert_eq!(read(&sm, StreamOp::Len { key: b"s" }), 2i64.to_le_bytes());
        // Trimming keeps the last id: a smaller explicit id is still refused.
        let p = pairs(&[(b"n", b"x")]);
        assert_eq!(
            apply(
                &mut sm,
                add(b"s", IdSpec::Explicit(StreamId { ms: 3, seq: 0 }), &p)
            ),
            StreamReply::Err(StreamError::IdTooSmall)
        );
        // XADD with MAXLEN trims after appending.
        assert_eq!(
            apply(
                &mut sm,
                StreamOp::Add {
                    key: b"s",
                    id: IdSpec::Auto { hint_ms: 10 },
                    maxlen: Some(1),
                    pairs: &p,
                }
            ),
            StreamReply::Id(StreamId { ms: 10, seq: 0 })
        );
        assert_eq!(read(&sm, StreamOp::Len { key: b"s" }), 1i64.to_le_bytes());
    }

    #[test]
    fn replies_round_trip_and_ids_are_longer_than_sixteen_bytes() {
        let big = StreamReply::Id(StreamId::MAX);
        let mut out = [0u8; 64];
        let n = big.write_to(&mut out);
        assert_eq!(n, 42, "tag and 20+1+20 digits");
        assert_eq!(StreamReply::from_bytes(&out[..n]), Some(big));
        for r in [
            StreamReply::Id(StreamId { ms: 0, seq: 1 }),
            StreamReply::Int(-3),
            StreamReply::Err(StreamError::IdZero),
            StreamReply::Err(StreamError::NotAWrite),
        ] {
            let n = r.write_to(&mut out);
            assert_eq!(StreamReply::from_bytes(&out[..n]), Some(r));
        }
        // A reply buffer too short for the id gets an error that fits.
        let mut short = [0u8; 16];
        let n = big.write_to(&mut short);
        assert_eq!(
            StreamReply::from_bytes(&short[..n]),
            Some(StreamReply::Err(StreamError::ReplyTooLarge))
        );
        assert_eq!(
            StreamId::parse(b"12-34", 0),
            Some(StreamId { ms: 12, seq: 34 })
        );
        assert_eq!(StreamId::parse(b"12", 9), Some(StreamId { ms: 12, seq: 9 }));
        assert_eq!(StreamId::parse(b"-1", 0), None);
        assert_eq!(StreamId::parse(b"1-", 0), None);
        assert_eq!(StreamId::parse(b"99999999999999999999-0", 0), None);
    }
}
