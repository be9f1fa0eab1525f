//! The stream service's Redis commands: `XADD`, `XRANGE`, `XLEN`, `XTRIM`,
//! parsed from a request frame into the core's [`StreamOp`], and their
//! results written with Redis's reply shapes.
//!
//! What is supported, as in Redis 7:
//!
//! * `XADD key [MAXLEN [=|~] n] <* | ms | ms-seq | ms-*> field value [field value ...]`
//!   replies the new id as a bulk string. `~` trims exactly (Redis may
//!   keep a few more; exactly is within what it promises).
//! * `XRANGE key start end [COUNT n]` with `-`, `+`, `ms`, `ms-seq` and
//!   exclusive `(id` bounds replies an array of `[id, [field, value, ...]]`.
//! * `XLEN key` and `XTRIM key MAXLEN [=|~] n` reply integers.
//!
//! Not supported (a clear error): `NOMKSTREAM`, `MINID`, `LIMIT`, and the
//! other stream commands (groups, `XREAD`, `XDEL`). Streams have their own
//! keyspace: `SET s` and `XADD s` name different things (Redis would say
//! `WRONGTYPE`).

#![forbid(unsafe_code)]
// Fed by the network: nothing here may panic. Tests are exempt.
#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]

use crate::resp::{
    encode_array_header, encode_bulk, encode_error, encode_integer, Array, CommandError, Frame,
};
use verbatim_core::kv::{parse_i64, KvLimits};
use verbatim_core::stream::{
    encode_pairs, pairs_iter, range_entries, IdSpec, StreamError, StreamId, StreamOp, StreamReply,
};

/// How `XADD` names the entry, before the gateway's clock is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddId {
    /// `*`.
    Auto,
    /// `ms-*`.
    AutoSeq(u64),
    /// `ms` or `ms-seq`.
    Explicit(StreamId),
}

/// A stream command, understood. `XADD`'s pairs stay in the request frame
/// until [`StreamCommand::encode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamCommand<'a> {
    /// `XADD`.
    Add {
        /// The stream.
        key: &'a [u8],
        /// The id.
        id: AddId,
        /// `MAXLEN n`.
        maxlen: Option<u64>,
        /// The request (name first).
        request: Array<'a>,
        /// Index of the first field in `request`.
        first_pair: usize,
    },
    /// `XRANGE`; `None` bounds mean an empty range (an exclusive bound past
    /// the last or before the first id).
    Range {
        /// The stream.
        key: &'a [u8],
        /// Inclusive bounds.
        bounds: Option<(StreamId, StreamId)>,
        /// `COUNT n`.
        count: Option<u64>,
    },
    /// `XLEN`.
    Len {
        /// The stream.
        key: &'a [u8],
    },
    /// `XTRIM key MAXLEN n`.
    Trim {
        /// The stream.
        key: &'a [u8],
        /// Entries kept.
        maxlen: u64,
    },
}

/// True when `name` is one of the stream commands.
pub fn is_stream_command(name: &[u8]) -> bool {
    ["XADD", "XRANGE", "XLEN", "XTRIM"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
}

fn is(b: &[u8], word: &str) -> bool {
    b.eq_ignore_ascii_case(word.as_bytes())
}

/// Parses a stream command (`args[0]` is its name; every argument is a
/// bulk string of `request`).
pub fn parse<'a>(
    request: Array<'a>,
    args: &[&'a [u8]],
    limits: &KvLimits,
) -> Result<StreamCommand<'a>, CommandError<'a>> {
    let arg = |i: usize| -> &'a [u8] { args.get(i).copied().unwrap_or(&[]) };
    let name = arg(0);
    let argc = args.len();
    let key = |k: &'a [u8]| -> Result<&'a [u8], CommandError<'a>> {
        if k.is_empty() {
            return Err(CommandError::EmptyKey);
        }
        if k.len() > limits.key_bytes_max as usize {
            return Err(CommandError::KeyTooLarge {
                max: limits.key_bytes_max,
            });
        }
        Ok(k)
    };
    if is(name, "XLEN") {
        if argc != 2 {
            return Err(CommandError::WrongArity("xlen"));
        }
        return Ok(StreamCommand::Len { key: key(arg(1))? });
    }
    if is(name, "XTRIM") {
        if argc < 4 {
            return Err(CommandError::WrongArity("xtrim"));
        }
        let k = key(arg(1))?;
        let (maxlen, next) = trim_strategy(args, 2)?.ok_or(CommandError::Syntax)?;
        if next != argc {
            return Err(trailing_option(arg(next)));
        }
        return Ok(StreamCommand::Trim { key: k, maxlen });
    }
    if is(name, "XRANGE") {
        if argc != 4 && argc != 6 {
            return Err(CommandError::WrongArity("xrange"));
        }
        let k = key(arg(1))?;
        let start = bound(arg(2), true)?;
        let end = bound(arg(3), false)?;
        let count = if argc == 6 {
            if !is(arg(4), "COUNT") {
                return Err(CommandError::Syntax);
            }
            let n = parse_i64(arg(5)).ok_or(CommandError::NotInteger)?;
            // Redis: a negative COUNT is no limit... of zero entries.
            Some(u64::try_from(n).unwrap_or(0))
        } else {
            None
        };
        return Ok(StreamCommand::Range {
            key: k,
            bounds: start.zip(end),
            count,
        });
    }
    // XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT n]] id field value ...
    if argc < 5 {
        return Err(CommandError::WrongArity("xadd"));
    }
    let k = key(arg(1))?;
    let mut at = 2;
    let mut maxlen = None;
    if is(arg(at), "NOMKSTREAM") {
        return Err(CommandError::Unsupported("XADD NOMKSTREAM"));
    }
    if let Some((n, next)) = trim_strategy(args, at)? {
        maxlen = Some(n);
        at = next;
    }
    if is(arg(at), "LIMIT") {
        return Err(CommandError::Unsupported("XADD ... LIMIT"));
    }
    let id = add_id(arg(at))?;
    let first_pair = at.checked_add(1).ok_or(CommandError::Syntax)?;
    let pair_args = argc.saturating_sub(first_pair);
    if pair_args == 0 || pair_args % 2 != 0 {
        return Err(CommandError::WrongArity("xadd"));
    }
    for part in args.iter().skip(first_pair) {
        if part.len() > limits.value_bytes_max as usize {
            return Err(CommandError::ValueTooLarge {
                max: limits.value_bytes_max,
            });
        }
    }
    Ok(StreamCommand::Add {
        key: k,
        id,
        maxlen,
        request,
        first_pair,
    })
}

/// `MAXLEN [=|~] n` at `args[at..]`: the threshold and the index after it;
/// `None` when `args[at]` is not a trim strategy.
fn trim_strategy<'a>(
    args: &[&'a [u8]],
    at: usize,
) -> Result<Option<(u64, usize)>, CommandError<'a>> {
    let arg = |i: usize| -> &'a [u8] { args.get(i).copied().unwrap_or(&[]) };
    let word = arg(at);
    if is(word, "MINID") {
        return Err(CommandError::Unsupported("MINID trimming"));
    }
    if !is(word, "MAXLEN") {
        return Ok(None);
    }
    let mut i = at.saturating_add(1);
    if arg(i) == b"=" || arg(i) == b"~" {
        i = i.saturating_add(1);
    }
    if i >= args.len() {
        return Err(CommandError::Syntax);
    }
    let n = parse_i64(arg(i)).ok_or(CommandError::NotInteger)?;
    let n = u64::try_from(n).map_err(|_| CommandError::MaxlenNegative)?;
    Ok(Some((n, i.saturating_add(1))))
}

fn trailing_option(word: &[u8]) -> CommandError<'_> {
    if is(word, "LIMIT") {
        CommandError::Unsupported("XTRIM ... LIMIT")
    } else {
        CommandError::Syntax
    }
}

fn add_id(text: &[u8]) -> Result<AddId, CommandError<'_>> {
    if text == b"*" {
        return Ok(AddId::Auto);
    }
    if let Some(ms) = text.strip_suffix(b"-*") {
        return verbatim_core::stream::parse_u64(ms)
            .map(AddId::AutoSeq)
            .ok_or(CommandError::InvalidStreamId);
    }
    StreamId::parse(text, 0)
        .map(AddId::Explicit)
        .ok_or(CommandError::InvalidStreamId)
}

/// An `XRANGE` bound as an inclusive id; `None` for an exclusive bound
/// with nothing beyond it.
fn bound(text: &[u8], start: bool) -> Result<Option<StreamId>, CommandError<'_>> {
    match text {
        b"-" => return Ok(Some(StreamId::MIN)),
        b"+" => return Ok(Some(StreamId::MAX)),
        _ => {}
    }
    let (exclusive, id_text) = match text.strip_prefix(b"(") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    // `ms` alone is ms-0 as a start and ms-<max> as an end.
    let default_seq = if start { 0 } else { u64::MAX };
    let id = StreamId::parse(id_text, default_seq).ok_or(CommandError::InvalidStreamId)?;
    if !exclusive {
        return Ok(Some(id));
    }
    Ok(if start { id.next() } else { previous(id) })
}

fn previous(id: StreamId) -> Option<StreamId> {
    match id.seq.checked_sub(1) {
        Some(seq) => Some(StreamId { ms: id.ms, seq }),
        None => Some(StreamId {
            ms: id.ms.checked_sub(1)?,
            seq: u64::MAX,
        }),
    }
}

/// Why a command could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLarge;

impl StreamCommand<'_> {
    /// True for commands answered without the log.
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            StreamCommand::Range { .. } | StreamCommand::Len { .. }
        )
    }

    /// Encodes the operation; `now_ms` is the gateway's wall clock for an
    /// automatic id. `None` for an empty range (answered without asking
    /// the replica).
    pub fn encode(&self, now_ms: u64, out: &mut Vec<u8>) -> Result<Option<()>, TooLarge> {
        let mut pairs_buf = Vec::new();
        let op = match *self {
            StreamCommand::Add {
                key,
                id,
                maxlen,
                request,
                first_pair,
            } => {
                let parts: Vec<&[u8]> = request
                    .iter()
                    .skip(first_pair)
                    .map(|f| f.as_bytes().unwrap_or(&[]))
                    .collect();
                let pairs: Vec<(&[u8], &[u8])> = parts
                    .chunks_exact(2)
                    .filter_map(|c| Some((*c.first()?, *c.get(1)?)))
                    .collect();
                let bytes: usize = parts
                    .iter()
                    .fold(2usize, |n, p| n.saturating_add(4).saturating_add(p.len()));
                pairs_buf.resize(bytes, 0);
                let n = encode_pairs(pairs.into_iter(), &mut pairs_buf).map_err(|_| TooLarge)?;
                pairs_buf.truncate(n);
                let id = match id {
                    AddId::Auto => IdSpec::Auto { hint_ms: now_ms },
                    AddId::AutoSeq(ms) => IdSpec::AutoSeq { ms },
                    AddId::Explicit(i) => IdSpec::Explicit(i),
                };
                StreamOp::Add {
                    key,
                    id,
                    maxlen,
                    pairs: &pairs_buf,
                }
            }
            StreamCommand::Range { key, bounds, count } => match bounds {
                Some((start, end)) => StreamOp::Range {
                    key,
                    start,
                    end,
                    count,
                },
                None => return Ok(None),
            },
            StreamCommand::Len { key } => StreamOp::Len { key },
            StreamCommand::Trim { key, maxlen } => StreamOp::Trim { key, maxlen },
        };
        let room = pairs_buf
            .len()
            .saturating_add(op.key().len())
            .saturating_add(64);
        out.clear();
        out.resize(room, 0);
        let n = op.encode(out).map_err(|_| TooLarge)?;
        out.truncate(n);
        Ok(Some(()))
    }
}

/// Writes Redis's reply for a stream command's result (`bytes` from the
/// replica; `None` for an empty range answered locally).
pub fn reply(command: &StreamCommand<'_>, bytes: Option<&[u8]>, out: &mut Vec<u8>) {
    let Some(bytes) = bytes else {
        encode_array_header(0, out);
        return;
    };
    match command {
        StreamCommand::Add { .. } | StreamCommand::Trim { .. } => {
            match StreamReply::from_bytes(bytes) {
                Some(StreamReply::Id(id)) => {
                    let mut text = [0u8; 41];
                    let n = id.format(&mut text);
                    encode_bulk(text.get(..n).unwrap_or(&[]), out);
                }
                Some(StreamReply::Int(v)) => encode_integer(v, out),
                Some(StreamReply::Err(e)) => encode_error(error_message(e).as_bytes(), out),
                None => encode_error(b"ERR internal: undecodable reply", out),
            }
        }
        StreamCommand::Len { .. } => match <[u8; 8]>::try_from(bytes) {
            Ok(b) => encode_integer(i64::from_le_bytes(b), out),
            Err(_) => encode_error(b"ERR internal: undecodable reply", out),
        },
        StreamCommand::Range { .. } => {
            let Some(entries) = range_entries(bytes) else {
                encode_error(b"ERR internal: undecodable reply", out);
                return;
            };
            let entries: Vec<_> = entries.collect();
            encode_array_header(entries.len(), out);
            for e in entries {
                encode_array_header(2, out);
                let mut text = [0u8; 41];
                let n = e.id.format(&mut text);
                encode_bulk(text.get(..n).unwrap_or(&[]), out);
                let pairs: Vec<_> = pairs_iter(e.pairs).collect();
                encode_array_header(pairs.len().saturating_mul(2), out);
                for (f, v) in pairs {
                    encode_bulk(f, out);
                    encode_bulk(v, out);
                }
            }
        }
    }
}

/// Redis's wording for a stream write's error.
pub fn error_message(e: StreamError) -> &'static str {
    match e {
        StreamError::IdTooSmall => {
            "ERR The ID specified in XADD is equal or smaller than the target stream top item"
        }
        StreamError::IdZero => "ERR The ID specified in XADD must be greater than 0-0",
        StreamError::StoreFull => "ERR store is full",
        StreamError::Malformed => "ERR malformed operation",
        StreamError::NotAWrite => "ERR internal: a read was sent through the log",
        StreamError::ReplyTooLarge => {
            "ERR the reply is larger than cluster.reply_bytes_max (the entry was added)"
        }
    }
}

/// Frames from `request` as argument bytes (every element is a bulk
/// string once `parse_command` accepted the request).
pub fn args_of(request: Array<'_>) -> Vec<&[u8]> {
    request
        .iter()
        .map(|f| match f {
            Frame::Bulk(b) => b,
            _ => &[],
        })
        .collect()
}
