//! The Redis protocol (RESP2) front end: an incremental frame parser, reply
//! encoders, and the command layer that turns requests into [`KvOp`]s.
//!
//! The module is pure: no sockets, no clock, no allocation while parsing.
//! Frames borrow from the caller's input buffer; arrays are validated once
//! and then iterated lazily over the validated bytes, so a request costs no
//! heap allocation until the caller encodes its reply into its own
//! `Vec<u8>`.
//!
//! # Driving contract
//!
//! A connection owns an input buffer and an output buffer. After every read:
//!
//! ```ignore
//! inbuf.extend_from_slice(&chunk[..n]);
//! let mut at = 0;
//! loop {
//!     match resp::parse_frame(&inbuf[at..], &resp_limits) {
//!         Ok(Some((frame, used))) => {
//!             at += used;
//!             match resp::parse_command(&frame, &kv_limits) {
//!                 Ok(cmd) => match resp::reply_local(&cmd, &mut out) {
//!                     Local::Replied => {}
//!                     Local::Close => { flush(&out); return close(); }
//!                     Local::Host => host.execute(&cmd, &mut out), // KV ops, INFO, HELLO
//!                 },
//!                 Err(e) => {
//!                     e.encode(&mut out);
//!                     if e.closes_connection() { flush(&out); return close(); }
//!                 }
//!             }
//!         }
//!         Ok(None) => break, // incomplete: read more before calling again
//!         Err(e) => { e.encode(&mut out); flush(&out); return close(); } // like Redis
//!     }
//! }
//! inbuf.drain(..at);
//! ```
//!
//! Cost: one call is O(header bytes of one frame). Bulk payloads are skipped
//! by their declared length (only their trailing CRLF is looked at), and no
//! byte past [`RespLimits::frame_bytes_max`] is ever examined. A partial
//! frame is re-validated from its start on the next call, so a caller calls
//! again only after new bytes arrived (never in a loop on `Ok(None)`); then
//! the work per frame is bounded by (reads while it was partial) × (its
//! header bytes), and the partial frame is never larger than
//! `frame_bytes_max`. Requests from real clients are a handful of headers.
//!
//! # Frames
//!
//! `+simple`, `-error`, `:integer`, `$bulk` (and `$-1`), `*array` (and
//! `*-1`) follow RESP2 strictly: CRLF line ends, lengths and integers written
//! as Redis writes them (no `+`, no leading zeros, no spaces, no `-0`). Any
//! other first byte starts an *inline command*, a line of words as typed into
//! `nc`/`telnet`, ended by LF or CRLF, which parses as an array of bulk
//! strings. Words are separated by spaces, tabs, CR, VT or FF; a word may be
//! wrapped in `"..."` or `'...'` to hold spaces. Redis also expands escapes
//! (`\n`, `\x41`) inside quotes and opens quotes in the middle of a word;
//! this parser refuses both (a protocol error) instead of returning bytes
//! that differ from what Redis would store, so a frame always borrows its
//! words from the input.
//!
//! # Commands
//!
//! Names and keywords are case-insensitive.
//!
//! | command | result | reply |
//! |---|---|---|
//! | `GET key` | [`KvOp::Get`] | bulk or `$-1` ([`reply_get`]) |
//! | `SET key value` | [`KvOp::Set`]; any option (`EX`, `NX`, ...) is refused | `+OK` |
//! | `DEL key` | [`KvOp::Del`]; one key only | `:1` / `:0` |
//! | `INCR`/`DECR key`, `INCRBY`/`DECRBY key n` | [`KvOp::Incr`] | `:new` |
//! | `CAS key new IFEQ expected` | [`KvOp::Cas`] with `expected: Some` | `:1` swapped / `:0` |
//! | `CAS key new NX` | [`KvOp::Cas`] with `expected: None` (key absent) | `:1` / `:0` |
//! | `PING [msg]`, `ECHO msg` | local | `+PONG` / bulk |
//! | `INFO [section]` | the host answers | bulk |
//! | `SELECT 0` | local (only database 0 exists) | `+OK` |
//! | `CONFIG GET pattern` | local: `save` is `""`, `appendonly` is `no` | flat array of pairs |
//! | `COMMAND`, `COMMAND DOCS ...`, `COMMAND INFO ...` | local | `*0` |
//! | `CLIENT SETNAME name`, `CLIENT SETINFO attr value` | local | `+OK` |
//! | `HELLO [2 [SETNAME name]]` | the host answers ([`reply_hello`]); `HELLO 3` gets `-NOPROTO` | RESP2 map as an array |
//! | `QUIT` | local | `+OK`, then close |
//!
//! CAS puts the keyword at a fixed position, after the new value, the way
//! Valkey's `SET key value IFEQ expected` does: a value can never be taken
//! for a keyword (`CAS k NX NX` sets `k` to `"NX"` if absent) and a missing
//! argument is an arity error, never a different meaning.
//!
//! DEL takes one key because one command is one log entry; a multi-key DEL
//! would need a multi-key operation to stay atomic. `DEL a b` is refused.
//!
//! Keys must be 1..=`key_bytes_max` bytes (the log's codec has no empty key
//! and a 16-bit key length), values at most `value_bytes_max`; anything
//! larger is refused with `-ERR key is too large (max N bytes)` or
//! `-ERR value is too large (max N bytes)`, never truncated.
//!
//! # What clients send on connect
//!
//! Observed with the 7.0 tools against a real Redis:
//! * `redis-cli` (interactive or reading stdin): `COMMAND DOCS`, for its
//!   hints; `*0` leaves it with its built-in ones. With `-n db` it sends
//!   `SELECT db`, with `-3` it sends `HELLO 3`.
//! * `redis-benchmark`: `CONFIG GET save` and `CONFIG GET appendonly`,
//!   pipelined, on a separate connection, answered exactly as Redis with no
//!   persistence answers them (`*2 save ""`, `*2 appendonly no`); then
//!   `SET key:000000000042 VXK` / `GET key:...` per request, pipelined
//!   with `-P`.
//! * RESP3-first libraries send `HELLO 3` and fall back to RESP2 on the
//!   `-NOPROTO` error.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
// Parsing is fed by the network: nothing in it may panic. Tests are exempt.
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

use std::fmt;
use std::io::Write as _;

use verbatim_core::kv::{format_i64, parse_i64, KvError, KvLimits, KvOp, KvReply};

/// Nesting the validator can track, whatever [`RespLimits::depth_max`]
/// says: it keeps one counter per open array in a fixed array instead of
/// recursing, so a hostile depth limit cannot grow the stack.
pub const DEPTH_CAP: usize = 32;

/// Content bytes of a length or integer line: `-9223372036854775808`.
const NUMBER_LINE_BYTES_MAX: usize = 20;

/// Limits on what one frame may hold. Every check happens before bytes are
/// waited for or stored, so a peer cannot make the caller buffer more than
/// `frame_bytes_max` bytes for one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RespLimits {
    /// Largest bulk string payload (Redis: `proto-max-bulk-len`, 512 MiB).
    pub bulk_bytes_max: usize,
    /// Most elements in one array, and most words in one inline command.
    pub array_len_max: usize,
    /// Most arrays nested in one another (a request needs 1); clamped to
    /// [`DEPTH_CAP`].
    pub depth_max: usize,
    /// Longest inline command, simple string or error line, without its
    /// line end (Redis: 64 KiB for inline commands).
    pub line_bytes_max: usize,
    /// Largest whole frame, headers included.
    pub frame_bytes_max: usize,
}

impl RespLimits {
    /// Slack above the largest key or value that a bulk string may carry,
    /// so a slightly oversized value gets the readable command error
    /// (`-ERR value is too large`) and the connection survives; far larger
    /// ones are a protocol error before their bytes are buffered.
    pub const BULK_MARGIN_BYTES: usize = 4096;
    /// Default for [`RespLimits::array_len_max`]: commands here take at
    /// most 7 arguments; this leaves room for unknown ones to be refused
    /// politely instead of dropping the connection.
    pub const ARRAY_LEN_MAX: usize = 1024;
    /// Default for [`RespLimits::depth_max`].
    pub const DEPTH_MAX: usize = 8;
    /// Default for [`RespLimits::line_bytes_max`], as Redis.
    pub const LINE_BYTES_MAX: usize = 64 * 1024;
    /// Header bytes a frame may add to its payloads under
    /// [`RespLimits::for_kv`] (array and bulk headers, command words).
    pub const HEADER_BYTES_MAX: usize = 1024;

    /// Limits fitted to a key-value store: a bulk string holds a key or a
    /// value plus [`RespLimits::BULK_MARGIN_BYTES`]; a frame holds the
    /// largest command, CAS (three such strings and a few words), or the
    /// longest inline line.
    pub fn for_kv(kv: &KvLimits) -> RespLimits {
        let key = usize::try_from(kv.key_bytes_max).unwrap_or(usize::MAX);
        let value = usize::try_from(kv.value_bytes_max).unwrap_or(usize::MAX);
        let bulk = key.max(value).saturating_add(Self::BULK_MARGIN_BYTES);
        let frame = bulk
            .saturating_mul(3)
            .saturating_add(Self::HEADER_BYTES_MAX)
            .max(Self::LINE_BYTES_MAX.saturating_add(2));
        RespLimits {
            bulk_bytes_max: bulk,
            array_len_max: Self::ARRAY_LEN_MAX,
            depth_max: Self::DEPTH_MAX,
            line_bytes_max: Self::LINE_BYTES_MAX,
            frame_bytes_max: frame,
        }
    }
}

impl RespLimits {
    /// These limits raised so that one bulk string may carry a publication
    /// of `publish_bytes_max` bytes (a multicast group with large
    /// messages: a PUBLISH, or the message a subscriber is pushed).
    pub fn with_publications(self, publish_bytes_max: u64) -> RespLimits {
        let publish = usize::try_from(publish_bytes_max)
            .unwrap_or(usize::MAX)
            .saturating_add(Self::BULK_MARGIN_BYTES);
        RespLimits {
            bulk_bytes_max: self.bulk_bytes_max.max(publish),
            frame_bytes_max: self
                .frame_bytes_max
                .max(publish.saturating_add(Self::HEADER_BYTES_MAX)),
            ..self
        }
    }
}

/// Limits used to re-read bytes that were validated already (array
/// iteration): the stricter check has been done once.
const REREAD: RespLimits = RespLimits {
    bulk_bytes_max: usize::MAX,
    array_len_max: usize::MAX,
    depth_max: DEPTH_CAP,
    line_bytes_max: usize::MAX,
    frame_bytes_max: usize::MAX,
};

/// Why bytes are not a RESP2 frame. All of them end the connection (as in
/// Redis: after a framing error the rest of the stream cannot be trusted);
/// [`RespError::encode`] writes the last reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RespError {
    /// Malformed bytes; the text follows Redis where Redis has one
    /// (`invalid bulk length`, `invalid multibulk length`, `unbalanced
    /// quotes in request`).
    #[error("Protocol error: {0}")]
    Protocol(&'static str),
    /// A bulk string declared longer than [`RespLimits::bulk_bytes_max`].
    #[error("Protocol error: bulk length {len} is above the limit of {max} bytes")]
    BulkTooLong {
        /// Declared length.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// An array (or inline command) longer than
    /// [`RespLimits::array_len_max`].
    #[error("Protocol error: multibulk length {len} is above the limit of {max}")]
    ArrayTooLong {
        /// Declared (or counted) elements.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// Arrays nested deeper than [`RespLimits::depth_max`].
    #[error("Protocol error: arrays nested deeper than {max}")]
    TooDeep {
        /// The limit in force.
        max: usize,
    },
    /// A line longer than [`RespLimits::line_bytes_max`].
    #[error("Protocol error: too big inline request (a line above {max} bytes)")]
    LineTooLong {
        /// The limit.
        max: usize,
    },
    /// A frame that needs more than [`RespLimits::frame_bytes_max`] bytes.
    #[error("Protocol error: request larger than {max} bytes")]
    FrameTooLarge {
        /// The limit.
        max: usize,
    },
}

impl RespError {
    /// Writes the `-ERR Protocol error: ...` reply.
    pub fn encode(&self, out: &mut Vec<u8>) {
        // Writing into a Vec cannot fail; the texts hold no CR or LF.
        let _ = write!(out, "-ERR {self}\r\n");
    }
}

fn protocol(what: &'static str) -> RespError {
    RespError::Protocol(what)
}

const BAD_MULTIBULK: &str = "invalid multibulk length";
const BAD_BULK: &str = "invalid bulk length";
const BAD_INTEGER: &str = "invalid integer";
const BAD_TYPE: &str = "unknown type byte";
const BAD_BULK_END: &str = "expected CRLF after bulk string";
const BAD_LINE_END: &str = "expected CRLF";
const LF_IN_LINE: &str = "line feed inside a simple string or error";
const UNBALANCED: &str = "unbalanced quotes in request";
const QUOTE_ESCAPE: &str = "escapes inside quoted inline arguments are not supported";
const QUOTE_INSIDE: &str = "quotes inside an inline argument are not supported";

/// One RESP2 value, borrowing its bytes from the parsed buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// `+OK`: a line without CR or LF.
    Simple(&'a [u8]),
    /// `-ERR message`.
    Error(&'a [u8]),
    /// `:42`.
    Integer(i64),
    /// `$3\r\nabc`: binary-safe bytes.
    Bulk(&'a [u8]),
    /// `$-1`: Redis's nil.
    NullBulk,
    /// `*n` followed by n frames, or an inline command (its words, as bulk
    /// strings).
    Array(Array<'a>),
    /// `*-1`.
    NullArray,
}

impl<'a> Frame<'a> {
    /// The bytes of a bulk or simple string.
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Frame::Bulk(b) | Frame::Simple(b) => Some(b),
            _ => None,
        }
    }
}

/// A validated array: its length and its elements' bytes, read lazily by
/// [`Array::iter`]. Equality compares elements, so an inline command equals
/// the RESP array of the same words.
#[derive(Clone, Copy)]
pub struct Array<'a> {
    len: usize,
    body: Body<'a>,
}

/// Where an array's elements live.
#[derive(Clone, Copy)]
enum Body<'a> {
    /// The encoded elements, back to back, validated.
    Resp(&'a [u8]),
    /// An inline command line (without its line end), validated.
    Inline(&'a [u8]),
}

impl<'a> Array<'a> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for `*0` and blank inline lines.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when the array came from an inline command.
    pub fn is_inline(&self) -> bool {
        matches!(self.body, Body::Inline(_))
    }

    /// The elements, in order. Each step re-reads one element's header
    /// from validated bytes (a nested array re-validates its subtree).
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter {
            remaining: self.len,
            state: match self.body {
                Body::Resp(bytes) => IterState::Resp { bytes, pos: 0 },
                Body::Inline(line) => IterState::Inline(InlineWords { rest: line }),
            },
        }
    }
}

impl<'a> IntoIterator for Array<'a> {
    type Item = Frame<'a>;
    type IntoIter = ArrayIter<'a>;
    fn into_iter(self) -> ArrayIter<'a> {
        self.iter()
    }
}

impl PartialEq for Array<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for Array<'_> {}

/// Iterator over an [`Array`]'s elements.
#[derive(Clone)]
pub struct ArrayIter<'a> {
    remaining: usize,
    state: IterState<'a>,
}

#[derive(Clone)]
enum IterState<'a> {
    Resp { bytes: &'a [u8], pos: usize },
    Inline(InlineWords<'a>),
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Frame<'a>;

    fn next(&mut self) -> Option<Frame<'a>> {
        if self.remaining == 0 {
            return None;
        }
        let item = match &mut self.state {
            IterState::Resp { bytes, pos } => match scan(bytes, *pos, &REREAD, usize::MAX) {
                Ok(Some((frame, end))) => {
                    *pos = end;
                    Some(frame)
                }
                // Unreachable for validated bytes; ending the iteration is
                // the panic-free answer if it ever were.
                _ => None,
            },
            IterState::Inline(words) => match words.next() {
                Some(Ok(word)) => Some(Frame::Bulk(word)),
                _ => None,
            },
        };
        self.remaining = if item.is_some() {
            self.remaining.saturating_sub(1)
        } else {
            0
        };
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

/// Bytes shown as `b"..."` with escapes, for `Debug`.
struct Escaped<'a>(&'a [u8]);

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("b\"")?;
        for &b in self.0 {
            for c in std::ascii::escape_default(b) {
                f.write_str(char::from(c).encode_utf8(&mut [0; 4]))?;
            }
        }
        f.write_str("\"")
    }
}

impl fmt::Debug for Frame<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Frame::Simple(b) => f.debug_tuple("Simple").field(&Escaped(b)).finish(),
            Frame::Error(b) => f.debug_tuple("Error").field(&Escaped(b)).finish(),
            Frame::Integer(v) => f.debug_tuple("Integer").field(&v).finish(),
            Frame::Bulk(b) => f.debug_tuple("Bulk").field(&Escaped(b)).finish(),
            Frame::NullBulk => f.write_str("NullBulk"),
            Frame::Array(a) => f.debug_tuple("Array").field(&a).finish(),
            Frame::NullArray => f.write_str("NullArray"),
        }
    }
}

impl fmt::Debug for Array<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Parses one frame from the start of `buf`.
///
/// * `Ok(None)`: the bytes so far are a valid beginning; call again once
///   more bytes arrived.
/// * `Ok(Some((frame, consumed)))`: a complete frame, `consumed <= buf.len()`
///   bytes long; the next frame starts at `buf[consumed..]`.
/// * `Err(_)`: the stream is malformed or over a limit; reply with
///   [`RespError::encode`] and close.
///
/// For any buffer, a prefix gives `Ok(None)` or the same answer as the whole
/// buffer: errors are reported as soon as the bytes seen prove them, and no
/// byte past `frame_bytes_max` is examined.
pub fn parse_frame<'a>(
    buf: &'a [u8],
    limits: &RespLimits,
) -> Result<Option<(Frame<'a>, usize)>, RespError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let frame_end_max = limits.frame_bytes_max;
    // The view makes "no byte past the frame budget is looked at" hold by
    // construction, so an error found later in the stream cannot depend on
    // how the bytes were split into reads.
    let view = buf.get(..frame_end_max).unwrap_or(buf);
    let found = if is_type_byte(first) {
        scan(view, 0, limits, frame_end_max)?
    } else {
        inline(view, limits)?
    };
    match found {
        Some(done) => Ok(Some(done)),
        None if buf.len() >= frame_end_max => Err(RespError::FrameTooLarge {
            max: limits.frame_bytes_max,
        }),
        None => Ok(None),
    }
}

fn is_type_byte(b: u8) -> bool {
    matches!(b, b'+' | b'-' | b':' | b'$' | b'*')
}

/// One element's header.
enum Head<'a> {
    /// A complete element (arrays of length 0 and -1 included).
    Leaf(Frame<'a>),
    /// An array header with this many (> 0) elements to follow.
    Open(usize),
}

/// Validates the typed frame starting at `start`, without recursion: one
/// counter of elements still expected per open array.
fn scan<'a>(
    buf: &'a [u8],
    start: usize,
    limits: &RespLimits,
    frame_end_max: usize,
) -> Result<Option<(Frame<'a>, usize)>, RespError> {
    let depth_max = limits.depth_max.min(DEPTH_CAP);
    let mut open = [0usize; DEPTH_CAP];
    let mut depth = 0usize;
    let mut pos = start;
    // The top frame: a leaf, or an array's length and where its body starts.
    let mut top_leaf: Option<Frame<'a>> = None;
    let mut top_array: Option<(usize, usize)> = None;
    loop {
        let Some((head, next)) = head(buf, pos, limits, frame_end_max)? else {
            return Ok(None);
        };
        let is_array = matches!(
            head,
            Head::Open(_) | Head::Leaf(Frame::Array(_) | Frame::NullArray)
        );
        if is_array && depth >= depth_max {
            return Err(RespError::TooDeep { max: depth_max });
        }
        let at_top = pos == start;
        pos = next;
        match head {
            Head::Open(len) => {
                if at_top {
                    top_array = Some((len, next));
                }
                let slot = open
                    .get_mut(depth)
                    .ok_or(RespError::TooDeep { max: depth_max })?;
                *slot = len;
                depth = depth.saturating_add(1);
                continue;
            }
            Head::Leaf(frame) => {
                if at_top {
                    top_leaf = Some(frame);
                }
            }
        }
        // An element ended at `pos`: count it against its array, and close
        // every array it completes.
        loop {
            let Some(inner) = depth.checked_sub(1) else {
                let frame = match (top_leaf, top_array) {
                    (Some(leaf), _) => leaf,
                    (None, Some((len, body_start))) => Frame::Array(Array {
                        len,
                        body: Body::Resp(buf.get(body_start..pos).unwrap_or(&[])),
                    }),
                    // The first header is always recorded as one or the
                    // other; an empty array is the harmless fallback.
                    (None, None) => Frame::Array(Array {
                        len: 0,
                        body: Body::Resp(&[]),
                    }),
                };
                return Ok(Some((frame, pos)));
            };
            let Some(slot) = open.get_mut(inner) else {
                return Err(RespError::TooDeep { max: depth_max });
            };
            *slot = slot.saturating_sub(1);
            if *slot > 0 {
                break;
            }
            depth = inner;
        }
    }
}

/// Reads the header (and, for bulk strings, the payload) at `pos`.
fn head<'a>(
    buf: &'a [u8],
    pos: usize,
    limits: &RespLimits,
    frame_end_max: usize,
) -> Result<Option<(Head<'a>, usize)>, RespError> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    let at = pos.saturating_add(1);
    match kind {
        b'+' | b'-' => {
            let Some((line, next)) = simple_line(buf, at, limits.line_bytes_max)? else {
                return Ok(None);
            };
            let frame = if kind == b'+' {
                Frame::Simple(line)
            } else {
                Frame::Error(line)
            };
            Ok(Some((Head::Leaf(frame), next)))
        }
        b':' => {
            let Some((v, next)) = number_line(buf, at, BAD_INTEGER)? else {
                return Ok(None);
            };
            Ok(Some((Head::Leaf(Frame::Integer(v)), next)))
        }
        b'$' => {
            let Some((n, next)) = number_line(buf, at, BAD_BULK)? else {
                return Ok(None);
            };
            if n == -1 {
                return Ok(Some((Head::Leaf(Frame::NullBulk), next)));
            }
            let len = u64::try_from(n).map_err(|_| protocol(BAD_BULK))?;
            let max = limits.bulk_bytes_max;
            let len_ok = usize::try_from(len).ok().filter(|&l| l <= max);
            let Some(len) = len_ok else {
                return Err(RespError::BulkTooLong { len, max });
            };
            let data_end = next.saturating_add(len);
            let end = data_end.saturating_add(2);
            // Refuse before waiting for (and buffering) the payload.
            if end > frame_end_max {
                return Err(RespError::FrameTooLarge {
                    max: limits.frame_bytes_max,
                });
            }
            let tail = buf.get(data_end..).unwrap_or(&[]);
            if !tail.iter().zip(b"\r\n").all(|(a, b)| a == b) {
                return Err(protocol(BAD_BULK_END));
            }
            match buf.get(next..data_end) {
                Some(data) if tail.len() >= 2 => Ok(Some((Head::Leaf(Frame::Bulk(data)), end))),
                _ => Ok(None),
            }
        }
        b'*' => {
            let Some((n, next)) = number_line(buf, at, BAD_MULTIBULK)? else {
                return Ok(None);
            };
            if n == -1 {
                return Ok(Some((Head::Leaf(Frame::NullArray), next)));
            }
            let len = u64::try_from(n).map_err(|_| protocol(BAD_MULTIBULK))?;
            let max = limits.array_len_max;
            let len_ok = usize::try_from(len).ok().filter(|&l| l <= max);
            let Some(len) = len_ok else {
                return Err(RespError::ArrayTooLong { len, max });
            };
            if len == 0 {
                let empty = Array {
                    len: 0,
                    body: Body::Resp(&[]),
                };
                return Ok(Some((Head::Leaf(Frame::Array(empty)), next)));
            }
            Ok(Some((Head::Open(len), next)))
        }
        _ => Err(protocol(BAD_TYPE)),
    }
}

/// A `+`/`-` line starting at `at`: its content and where the next frame
/// starts.
fn simple_line(
    buf: &[u8],
    at: usize,
    line_max: usize,
) -> Result<Option<(&[u8], usize)>, RespError> {
    let rest = buf.get(at..).unwrap_or(&[]);
    for (i, &b) in rest.iter().enumerate() {
        match b {
            b'\r' => {
                return match rest.get(i.saturating_add(1)) {
                    None => Ok(None),
                    Some(b'\n') => Ok(Some((
                        rest.get(..i).unwrap_or(&[]),
                        at.saturating_add(i).saturating_add(2),
                    ))),
                    Some(_) => Err(protocol(BAD_LINE_END)),
                };
            }
            b'\n' => return Err(protocol(LF_IN_LINE)),
            _ if i >= line_max => return Err(RespError::LineTooLong { max: line_max }),
            _ => {}
        }
    }
    Ok(None)
}

/// A length or integer line starting at `at`, parsed as Redis's
/// `string2ll` does. Any byte that cannot belong to such a line is refused
/// at once rather than after the line end arrives.
fn number_line(
    buf: &[u8],
    at: usize,
    what: &'static str,
) -> Result<Option<(i64, usize)>, RespError> {
    let rest = buf.get(at..).unwrap_or(&[]);
    for (i, &b) in rest.iter().enumerate() {
        if b == b'\r' {
            let v = parse_i64(rest.get(..i).unwrap_or(&[])).ok_or(protocol(what))?;
            return match rest.get(i.saturating_add(1)) {
                None => Ok(None),
                Some(b'\n') => Ok(Some((v, at.saturating_add(i).saturating_add(2)))),
                Some(_) => Err(protocol(what)),
            };
        }
        if i >= NUMBER_LINE_BYTES_MAX || !(b.is_ascii_digit() || b == b'-') {
            return Err(protocol(what));
        }
    }
    Ok(None)
}

/// An inline command: the line up to LF (a CR before it is dropped), split
/// into words.
fn inline<'a>(buf: &'a [u8], limits: &RespLimits) -> Result<Option<(Frame<'a>, usize)>, RespError> {
    let line_max = limits.line_bytes_max;
    let window = buf.get(..line_max.saturating_add(1)).unwrap_or(buf);
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() > line_max {
            return Err(RespError::LineTooLong { max: line_max });
        }
        return Ok(None);
    };
    let mut line = window.get(..lf).unwrap_or(&[]);
    if let Some(stripped) = line.strip_suffix(b"\r") {
        line = stripped;
    }
    let mut len = 0usize;
    for word in (InlineWords { rest: line }) {
        word.map_err(protocol)?;
        len = len.saturating_add(1);
    }
    if len > limits.array_len_max {
        return Err(RespError::ArrayTooLong {
            len: u64::try_from(len).unwrap_or(u64::MAX),
            max: limits.array_len_max,
        });
    }
    let array = Array {
        len,
        body: Body::Inline(line),
    };
    Ok(Some((Frame::Array(array), lf.saturating_add(1))))
}

/// The words of an inline line (the separators of Redis's `sdssplitargs`).
#[derive(Clone)]
struct InlineWords<'a> {
    rest: &'a [u8],
}

fn is_separator(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | 0x0b | 0x0c)
}

impl<'a> Iterator for InlineWords<'a> {
    type Item = Result<&'a [u8], &'static str>;

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.rest.iter().position(|&b| !is_separator(b))?;
        let word = self.rest.get(start..).unwrap_or(&[]);
        let (&first, after_first) = word.split_first()?;
        let result = if first == b'"' || first == b'\'' {
            match after_first.iter().position(|&b| b == first) {
                None => Err(UNBALANCED),
                Some(close) => {
                    let quoted = after_first.get(..close).unwrap_or(&[]);
                    let after = after_first.get(close.saturating_add(1)..).unwrap_or(&[]);
                    if after.first().is_some_and(|&b| !is_separator(b)) {
                        // Redis: the closing quote must be followed by a
                        // space or nothing at all.
                        Err(UNBALANCED)
                    } else if quoted.contains(&b'\\') {
                        Err(QUOTE_ESCAPE)
                    } else {
                        self.rest = after;
                        Ok(quoted)
                    }
                }
            }
        } else {
            let end = word
                .iter()
                .position(|&b| is_separator(b))
                .unwrap_or(word.len());
            let (plain, after) = word.split_at_checked(end).unwrap_or((word, &[]));
            if plain.iter().any(|&b| b == b'"' || b == b'\'') {
                Err(QUOTE_INSIDE)
            } else {
                self.rest = after;
                Ok(plain)
            }
        };
        if result.is_err() {
            self.rest = &[];
        }
        Some(result)
    }
}

// ---------------------------------------------------------------------------
// Encoders
// ---------------------------------------------------------------------------

fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i = i.saturating_sub(1);
        if let Some(d) = digits.get_mut(i) {
            // v % 10 < 10, so the cast and the addition are exact.
            *d = b'0'.saturating_add((v % 10) as u8);
        }
        v /= 10;
        if v == 0 || i == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(i..).unwrap_or(&[]));
}

fn put_len(out: &mut Vec<u8>, kind: u8, len: usize) {
    out.push(kind);
    put_u64(out, u64::try_from(len).unwrap_or(u64::MAX));
    out.extend_from_slice(b"\r\n");
}

/// Copies a line's content, turning CR and LF into spaces (as Redis does
/// for error replies) so the reply stream stays well framed.
fn put_line_content(out: &mut Vec<u8>, content: &[u8]) {
    out.extend(
        content
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
}

/// `+content\r\n`; CR and LF in `content` become spaces.
pub fn encode_simple(content: &[u8], out: &mut Vec<u8>) {
    out.push(b'+');
    put_line_content(out, content);
    out.extend_from_slice(b"\r\n");
}

/// `-message\r\n`. `message` starts with its code word: `ERR ...`,
/// `NOPROTO ...`, or a redirect such as `MOVED 3999 10.0.0.2:6379` (which
/// only cluster-mode clients follow). CR and LF become spaces.
pub fn encode_error(message: &[u8], out: &mut Vec<u8>) {
    out.push(b'-');
    put_line_content(out, message);
    out.extend_from_slice(b"\r\n");
}

/// `:v\r\n`.
pub fn encode_integer(v: i64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    out.push(b':');
    out.extend_from_slice(format_i64(v, &mut digits));
    out.extend_from_slice(b"\r\n");
}

/// `$len\r\nbytes\r\n`.
pub fn encode_bulk(bytes: &[u8], out: &mut Vec<u8>) {
    put_len(out, b'$', bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// `$-1\r\n`, Redis's nil.
pub fn encode_null_bulk(out: &mut Vec<u8>) {
    out.extend_from_slice(b"$-1\r\n");
}

/// `*len\r\n`; the caller writes the `len` elements after it.
pub fn encode_array_header(len: usize, out: &mut Vec<u8>) {
    put_len(out, b'*', len);
}

/// `*-1\r\n`.
pub fn encode_null_array(out: &mut Vec<u8>) {
    out.extend_from_slice(b"*-1\r\n");
}

/// Writes `frame` in canonical RESP2 (an inline command becomes an array of
/// bulk strings). Parsing the result gives back an equal frame.
pub fn encode_frame(frame: &Frame<'_>, out: &mut Vec<u8>) {
    match *frame {
        Frame::Simple(b) => encode_simple(b, out),
        Frame::Error(b) => encode_error(b, out),
        Frame::Integer(v) => encode_integer(v, out),
        Frame::Bulk(b) => encode_bulk(b, out),
        Frame::NullBulk => encode_null_bulk(out),
        Frame::NullArray => encode_null_array(out),
        Frame::Array(array) => {
            encode_array_header(array.len(), out);
            // Recursion is bounded: arrays only come from the parser, which
            // caps nesting at DEPTH_CAP.
            for element in array.iter() {
                encode_frame(&element, out);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------

/// A request, understood. Borrows from the frame's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// A store operation: GET (a read) or a write for the log.
    Kv(KvOp<'a>),
    /// A stream command (`XADD`, `XRANGE`, `XLEN`, `XTRIM`).
    Stream(crate::resp_stream::StreamCommand<'a>),
    /// `PING [message]`.
    Ping(Option<&'a [u8]>),
    /// `ECHO message`.
    Echo(&'a [u8]),
    /// `INFO [section]`: the host writes the text.
    Info(Option<&'a [u8]>),
    /// `SELECT 0` (the only database).
    Select,
    /// `CONFIG GET pattern`.
    ConfigGet(&'a [u8]),
    /// `COMMAND`, `COMMAND DOCS ...`, `COMMAND INFO ...`: no command table
    /// is published.
    CommandDocs,
    /// `CLIENT SETNAME name` (validated as Redis does).
    ClientSetName(&'a [u8]),
    /// `CLIENT SETINFO attribute value` (sent by recent client libraries).
    ClientSetInfo,
    /// `HELLO [2 [SETNAME name]]`: stay on RESP2.
    Hello {
        /// The connection name to set, if any.
        setname: Option<&'a [u8]>,
    },
    /// `QUIT`: reply `+OK`, then close.
    Quit,
    /// `PUBLISH channel message`: multicast to the group (issue 15).
    Publish {
        /// The channel.
        channel: &'a [u8],
        /// The message.
        message: &'a [u8],
    },
    /// `SUBSCRIBE channel [channel ...]`.
    Subscribe(Channels<'a>),
    /// `UNSUBSCRIBE [channel ...]` (none: every channel).
    Unsubscribe(Channels<'a>),
    /// An empty request (`*0`, `*-1`, a blank inline line): Redis sends no
    /// reply.
    Empty,
}

/// The channels of a `SUBSCRIBE` or `UNSUBSCRIBE` (at most
/// [`CHANNELS_PER_COMMAND_MAX`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Channels<'a> {
    names: [&'a [u8]; CHANNELS_PER_COMMAND_MAX],
    len: usize,
}

/// Channels one `SUBSCRIBE` or `UNSUBSCRIBE` names at most.
pub const CHANNELS_PER_COMMAND_MAX: usize = ARGS_MAX - 1;

impl<'a> Channels<'a> {
    /// The channel names, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.names.iter().take(self.len).copied()
    }
    /// Whether it names none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Why a request was refused. Replies come from [`CommandError::encode`];
/// only [`CommandError::Protocol`] ends the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandError<'a> {
    /// The frame is not an array of bulk strings (e.g. `:1` as a request,
    /// or an integer inside one). Redis closes the connection for these.
    Protocol(&'static str),
    /// An unknown command; the whole request, for Redis's message that
    /// quotes the first arguments.
    Unknown {
        /// The command name as sent.
        name: &'a [u8],
        /// The request (name first), all bulk strings.
        request: Array<'a>,
    },
    /// An unknown (or unsupported) subcommand.
    UnknownSubcommand {
        /// The command, upper case (`CONFIG`, `CLIENT`, `COMMAND`).
        command: &'static str,
        /// The subcommand as sent.
        subcommand: &'a [u8],
    },
    /// Wrong number of arguments; Redis's lower-case name (`get`,
    /// `config|get`).
    WrongArity(&'static str),
    /// A keyword where another was expected (`CAS k v XX`).
    Syntax,
    /// An argument that is not a Redis integer.
    NotInteger,
    /// `DECRBY key -9223372036854775808`: the delta cannot be negated.
    DecrementOverflow,
    /// `SET` with options (EX, PX, NX, XX, KEEPTTL, GET, ...).
    SetOptions,
    /// `DEL` with more than one key.
    DelManyKeys,
    /// A zero-length key.
    EmptyKey,
    /// A key above the limit.
    KeyTooLarge {
        /// Largest key, bytes.
        max: u32,
    },
    /// A value (or CAS expected value) above the limit.
    ValueTooLarge {
        /// Largest value, bytes.
        max: u32,
    },
    /// `SELECT n` for n other than 0.
    DbIndexOutOfRange,
    /// A `CLIENT SETNAME` name with spaces or special characters.
    BadClientName,
    /// A `SUBSCRIBE` or `UNSUBSCRIBE` naming more than
    /// [`CHANNELS_PER_COMMAND_MAX`] channels.
    TooManyChannels,
    /// `HELLO` with a protocol version that is not an integer.
    HelloVersionNotInteger,
    /// `HELLO` asked for a protocol other than RESP2.
    NoProto,
    /// `HELLO ... AUTH`: there is no authentication.
    AuthUnsupported,
    /// A stream id that is not `ms` or `ms-seq` (or `*`, `ms-*` for XADD).
    InvalidStreamId,
    /// `MAXLEN` below zero.
    MaxlenNegative,
    /// An option this server does not implement.
    Unsupported(&'static str),
}

/// Longest command name or argument prefix quoted in an error, as Redis.
const QUOTE_BYTES_MAX: usize = 128;

impl CommandError<'_> {
    /// True when the connection must be closed after the reply (as Redis
    /// does after a protocol error).
    pub fn closes_connection(&self) -> bool {
        matches!(self, CommandError::Protocol(_))
    }

    /// Writes the error reply, Redis's wording where Redis has one.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let quoted = |b: &[u8]| -> Vec<u8> { b.get(..QUOTE_BYTES_MAX).unwrap_or(b).to_vec() };
        let message: Vec<u8> = match *self {
            CommandError::Protocol(what) => format!("ERR Protocol error: {what}").into_bytes(),
            CommandError::Unknown { name, request } => {
                let mut m = b"ERR unknown command '".to_vec();
                m.extend_from_slice(&quoted(name));
                m.extend_from_slice(b"', with args beginning with: ");
                // Redis: quote arguments while fewer than 128 bytes of
                // quoted text were written, each cut to what is left.
                let mut written = 0usize;
                for arg in request.iter().skip(1) {
                    if written >= QUOTE_BYTES_MAX {
                        break;
                    }
                    let room = QUOTE_BYTES_MAX.saturating_sub(written);
                    let bytes = arg.as_bytes().unwrap_or(&[]);
                    let shown = bytes.get(..room).unwrap_or(bytes);
                    m.push(b'\'');
                    m.extend_from_slice(shown);
                    m.extend_from_slice(b"' ");
                    written = written.saturating_add(shown.len()).saturating_add(3);
                }
                m
            }
            CommandError::UnknownSubcommand {
                command,
                subcommand,
            } => {
                let mut m = b"ERR unknown subcommand '".to_vec();
                m.extend_from_slice(&quoted(subcommand));
                m.extend_from_slice(format!("'. Try {command} HELP.").as_bytes());
                m
            }
            CommandError::WrongArity(name) => {
                format!("ERR wrong number of arguments for '{name}' command").into_bytes()
            }
            CommandError::Syntax => b"ERR syntax error".to_vec(),
            CommandError::NotInteger => b"ERR value is not an integer or out of range".to_vec(),
            CommandError::DecrementOverflow => b"ERR decrement would overflow".to_vec(),
            CommandError::SetOptions => b"ERR SET options are not supported".to_vec(),
            CommandError::DelManyKeys => {
                b"ERR DEL takes a single key here (multi-key DEL is not supported)".to_vec()
            }
            CommandError::EmptyKey => b"ERR empty keys are not supported".to_vec(),
            CommandError::KeyTooLarge { max } => {
                format!("ERR key is too large (max {max} bytes)").into_bytes()
            }
            CommandError::ValueTooLarge { max } => {
                format!("ERR value is too large (max {max} bytes)").into_bytes()
            }
            CommandError::DbIndexOutOfRange => b"ERR DB index is out of range".to_vec(),
            CommandError::BadClientName => {
                b"ERR Client names cannot contain spaces, newlines or special characters.".to_vec()
            }
            CommandError::TooManyChannels => format!(
                "ERR at most {CHANNELS_PER_COMMAND_MAX} channels per SUBSCRIBE or UNSUBSCRIBE; send several"
            )
            .into_bytes(),
            CommandError::HelloVersionNotInteger => {
                b"ERR Protocol version is not an integer or out of range".to_vec()
            }
            CommandError::NoProto => b"NOPROTO unsupported protocol version".to_vec(),
            CommandError::AuthUnsupported => b"ERR AUTH is not supported".to_vec(),
            CommandError::InvalidStreamId => {
                b"ERR Invalid stream ID specified as stream command argument".to_vec()
            }
            CommandError::MaxlenNegative => b"ERR The MAXLEN argument must be >= 0.".to_vec(),
            CommandError::Unsupported(what) => format!("ERR {what} is not supported").into_bytes(),
        };
        encode_error(&message, out);
    }
}

impl fmt::Display for CommandError<'_> {
    /// The reply's text without `-` and CRLF, non-ASCII shown escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut reply = Vec::new();
        self.encode(&mut reply);
        let text = reply
            .strip_prefix(b"-")
            .and_then(|r| r.strip_suffix(b"\r\n"))
            .unwrap_or(&reply);
        for &b in text {
            if (b' '..=b'~').contains(&b) {
                f.write_str(char::from(b).encode_utf8(&mut [0; 4]))?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for CommandError<'_> {}

/// Arguments kept for dispatch; requests with more are refused by arity
/// (or quoted from the frame, for unknown commands).
const ARGS_MAX: usize = 8;

/// Understands a request frame. Names and keywords are case-insensitive;
/// checks run in Redis's order (unknown command, arity, then arguments).
pub fn parse_command<'a>(
    frame: &Frame<'a>,
    limits: &KvLimits,
) -> Result<Command<'a>, CommandError<'a>> {
    let request = match *frame {
        Frame::Array(array) => array,
        Frame::NullArray => return Ok(Command::Empty),
        Frame::Simple(_) => return Err(CommandError::Protocol("expected '*', got '+'")),
        Frame::Error(_) => return Err(CommandError::Protocol("expected '*', got '-'")),
        Frame::Integer(_) => return Err(CommandError::Protocol("expected '*', got ':'")),
        Frame::Bulk(_) | Frame::NullBulk => {
            return Err(CommandError::Protocol("expected '*', got '$'"))
        }
    };
    let mut args: [&'a [u8]; ARGS_MAX] = [&[]; ARGS_MAX];
    let mut argc = 0usize;
    for element in request.iter() {
        let bytes = match element {
            Frame::Bulk(b) => b,
            Frame::NullBulk => return Err(CommandError::Protocol(BAD_BULK)),
            Frame::Simple(_) => return Err(CommandError::Protocol("expected '$', got '+'")),
            Frame::Error(_) => return Err(CommandError::Protocol("expected '$', got '-'")),
            Frame::Integer(_) => return Err(CommandError::Protocol("expected '$', got ':'")),
            Frame::Array(_) | Frame::NullArray => {
                return Err(CommandError::Protocol("expected '$', got '*'"))
            }
        };
        if let Some(slot) = args.get_mut(argc) {
            *slot = bytes;
        }
        argc = argc.saturating_add(1);
    }
    if argc == 0 {
        return Ok(Command::Empty);
    }
    let arg = |i: usize| -> &'a [u8] { args.get(i).copied().unwrap_or(&[]) };
    let name = arg(0);
    let arity = |ok: bool, lower: &'static str| -> Result<(), CommandError<'a>> {
        if ok {
            Ok(())
        } else {
            Err(CommandError::WrongArity(lower))
        }
    };
    let is = |b: &[u8], word: &str| b.eq_ignore_ascii_case(word.as_bytes());

    if is(name, "GET") {
        arity(argc == 2, "get")?;
        return Ok(Command::Kv(KvOp::Get {
            key: key(arg(1), limits)?,
        }));
    }
    if is(name, "SET") {
        arity(argc >= 3, "set")?;
        let key = key(arg(1), limits)?;
        let value = value(arg(2), limits)?;
        if argc > 3 {
            return Err(CommandError::SetOptions);
        }
        return Ok(Command::Kv(KvOp::Set { key, value }));
    }
    if is(name, "DEL") {
        arity(argc >= 2, "del")?;
        if argc > 2 {
            return Err(CommandError::DelManyKeys);
        }
        return Ok(Command::Kv(KvOp::Del {
            key: key(arg(1), limits)?,
        }));
    }
    if is(name, "INCR") || is(name, "DECR") {
        let decr = is(name, "DECR");
        arity(argc == 2, if decr { "decr" } else { "incr" })?;
        let delta = if decr { -1 } else { 1 };
        return Ok(Command::Kv(KvOp::Incr {
            key: key(arg(1), limits)?,
            delta,
        }));
    }
    if is(name, "INCRBY") || is(name, "DECRBY") {
        let decr = is(name, "DECRBY");
        arity(argc == 3, if decr { "decrby" } else { "incrby" })?;
        let key = key(arg(1), limits)?;
        let n = parse_i64(arg(2)).ok_or(CommandError::NotInteger)?;
        let delta = if decr {
            n.checked_neg().ok_or(CommandError::DecrementOverflow)?
        } else {
            n
        };
        return Ok(Command::Kv(KvOp::Incr { key, delta }));
    }
    if is(name, "CAS") {
        arity(argc == 4 || argc == 5, "cas")?;
        let key = key(arg(1), limits)?;
        let new = value(arg(2), limits)?;
        let expected = match (argc, arg(3)) {
            (4, word) if is(word, "NX") => None,
            (5, word) if is(word, "IFEQ") => Some(value(arg(4), limits)?),
            _ => return Err(CommandError::Syntax),
        };
        return Ok(Command::Kv(KvOp::Cas { key, expected, new }));
    }
    if is(name, "PING") {
        arity(argc <= 2, "ping")?;
        return Ok(Command::Ping((argc == 2).then(|| arg(1))));
    }
    if is(name, "ECHO") {
        arity(argc == 2, "echo")?;
        return Ok(Command::Echo(arg(1)));
    }
    if is(name, "INFO") {
        arity(argc <= 2, "info")?;
        return Ok(Command::Info((argc == 2).then(|| arg(1))));
    }
    if is(name, "SELECT") {
        arity(argc == 2, "select")?;
        let db = parse_i64(arg(1)).ok_or(CommandError::NotInteger)?;
        if db != 0 {
            return Err(CommandError::DbIndexOutOfRange);
        }
        return Ok(Command::Select);
    }
    if is(name, "CONFIG") {
        arity(argc >= 2, "config")?;
        let sub = arg(1);
        if is(sub, "GET") {
            arity(argc == 3, "config|get")?;
            return Ok(Command::ConfigGet(arg(2)));
        }
        return Err(CommandError::UnknownSubcommand {
            command: "CONFIG",
            subcommand: sub,
        });
    }
    if is(name, "COMMAND") {
        if argc == 1 || is(arg(1), "DOCS") || is(arg(1), "INFO") {
            return Ok(Command::CommandDocs);
        }
        return Err(CommandError::UnknownSubcommand {
            command: "COMMAND",
            subcommand: arg(1),
        });
    }
    if is(name, "CLIENT") {
        arity(argc >= 2, "client")?;
        let sub = arg(1);
        if is(sub, "SETNAME") {
            arity(argc == 3, "client|setname")?;
            return Ok(Command::ClientSetName(client_name(arg(2))?));
        }
        if is(sub, "SETINFO") {
            arity(argc == 4, "client|setinfo")?;
            return Ok(Command::ClientSetInfo);
        }
        return Err(CommandError::UnknownSubcommand {
            command: "CLIENT",
            subcommand: sub,
        });
    }
    if is(name, "HELLO") {
        return hello(&args, argc);
    }
    if is(name, "QUIT") {
        return Ok(Command::Quit);
    }
    if is(name, "PUBLISH") {
        arity(argc == 3, "publish")?;
        return Ok(Command::Publish {
            channel: arg(1),
            message: arg(2),
        });
    }
    if is(name, "SUBSCRIBE") || is(name, "UNSUBSCRIBE") {
        let subscribe = is(name, "SUBSCRIBE");
        if subscribe {
            arity(argc >= 2, "subscribe")?;
        }
        // argc ≥ 1 here (the name).
        let named = argc.saturating_sub(1);
        if named > CHANNELS_PER_COMMAND_MAX {
            return Err(CommandError::TooManyChannels);
        }
        let mut channels = Channels {
            names: [&[]; CHANNELS_PER_COMMAND_MAX],
            len: named,
        };
        for (i, slot) in channels.names.iter_mut().enumerate().take(named) {
            *slot = arg(i.saturating_add(1));
        }
        return Ok(if subscribe {
            Command::Subscribe(channels)
        } else {
            Command::Unsubscribe(channels)
        });
    }
    if crate::resp_stream::is_stream_command(name) {
        let all = crate::resp_stream::args_of(request);
        return crate::resp_stream::parse(request, &all, limits).map(Command::Stream);
    }
    Err(CommandError::Unknown { name, request })
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`.
fn hello<'a>(args: &[&'a [u8]; ARGS_MAX], argc: usize) -> Result<Command<'a>, CommandError<'a>> {
    let arg = |i: usize| -> &'a [u8] { args.get(i).copied().unwrap_or(&[]) };
    if argc == 1 {
        return Ok(Command::Hello { setname: None });
    }
    let version = parse_i64(arg(1)).ok_or(CommandError::HelloVersionNotInteger)?;
    if version != 2 {
        return Err(CommandError::NoProto);
    }
    if argc > ARGS_MAX {
        return Err(CommandError::Syntax);
    }
    let mut setname = None;
    let mut i = 2;
    while i < argc {
        let option = arg(i);
        let left = argc.saturating_sub(i).saturating_sub(1);
        if option.eq_ignore_ascii_case(b"AUTH") && left >= 2 {
            return Err(CommandError::AuthUnsupported);
        } else if option.eq_ignore_ascii_case(b"SETNAME") && left >= 1 {
            setname = Some(client_name(arg(i.saturating_add(1)))?);
            i = i.saturating_add(2);
        } else {
            return Err(CommandError::Syntax);
        }
    }
    Ok(Command::Hello { setname })
}

/// Redis refuses names with bytes outside `!`..=`~` (spaces, newlines).
fn client_name(name: &[u8]) -> Result<&[u8], CommandError<'_>> {
    if name.iter().all(|&b| (b'!'..=b'~').contains(&b)) {
        Ok(name)
    } else {
        Err(CommandError::BadClientName)
    }
}

/// The largest key the log can carry: the configured limit, and the codec's
/// 16-bit key length.
fn key_bytes_max(limits: &KvLimits) -> u32 {
    limits.key_bytes_max.min(u32::from(u16::MAX))
}

fn key<'a>(key: &'a [u8], limits: &KvLimits) -> Result<&'a [u8], CommandError<'a>> {
    let max = key_bytes_max(limits);
    if key.is_empty() {
        return Err(CommandError::EmptyKey);
    }
    if u32::try_from(key.len()).map_or(true, |len| len > max) {
        return Err(CommandError::KeyTooLarge { max });
    }
    Ok(key)
}

fn value<'a>(value: &'a [u8], limits: &KvLimits) -> Result<&'a [u8], CommandError<'a>> {
    let max = limits.value_bytes_max;
    if u32::try_from(value.len()).map_or(true, |len| len > max) {
        return Err(CommandError::ValueTooLarge { max });
    }
    Ok(value)
}

// ---------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------

/// The error text (after `-`) for a failed write.
pub fn kv_error_message(error: KvError) -> &'static str {
    match error {
        KvError::NotInteger => "ERR value is not an integer or out of range",
        KvError::Overflow => "ERR increment or decrement would overflow",
        KvError::StoreFull => "ERR store is full",
        KvError::Malformed => "ERR malformed operation",
        KvError::NotAWrite => "ERR internal error: a read was logged as a write",
        KvError::Stale => "ERR request superseded by a newer one from the same client",
    }
}

/// The reply to a write: SET → `+OK`; DEL, INCR*, DECR*, CAS → `:n`;
/// errors with Redis's wording where Redis has one.
pub fn reply_for(reply: &KvReply, out: &mut Vec<u8>) {
    match *reply {
        KvReply::Ok => out.extend_from_slice(b"+OK\r\n"),
        KvReply::Int(v) => encode_integer(v, out),
        KvReply::Err(e) => encode_error(kv_error_message(e).as_bytes(), out),
    }
}

/// The reply to GET: the value as a bulk string, or `$-1` for no key.
pub fn reply_get(value: Option<&[u8]>, out: &mut Vec<u8>) {
    match value {
        Some(v) => encode_bulk(v, out),
        None => encode_null_bulk(out),
    }
}

/// Configuration parameters CONFIG GET answers, with the values that tell
/// a client no background saving happens (what redis-benchmark asks).
pub const CONFIG_PARAMS: [(&str, &str); 2] = [("save", ""), ("appendonly", "no")];

/// Redis-style glob match, case-insensitive, with `*` and `?` (`[` and `\`
/// match themselves). Linear in the name for each star (one backtrack
/// point), so a hostile pattern costs O(pattern × name).
fn glob_matches(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while let Some(&c) = name.get(n) {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p = p.saturating_add(1);
            }
            Some(&q) if q == b'?' || q.eq_ignore_ascii_case(&c) => {
                p = p.saturating_add(1);
                n = n.saturating_add(1);
            }
            _ => match star {
                Some((sp, sn)) => {
                    let retry = sn.saturating_add(1);
                    star = Some((sp, retry));
                    p = sp.saturating_add(1);
                    n = retry;
                }
                None => return false,
            },
        }
    }
    pattern.get(p..).unwrap_or(&[]).iter().all(|&c| c == b'*')
}

/// The reply to `CONFIG GET pattern`: matching name/value pairs of
/// [`CONFIG_PARAMS`] as a flat array (`*0` when none match).
pub fn reply_config_get(pattern: &[u8], out: &mut Vec<u8>) {
    let matching = || {
        CONFIG_PARAMS
            .iter()
            .filter(|(name, _)| glob_matches(pattern, name.as_bytes()))
    };
    encode_array_header(matching().count().saturating_mul(2), out);
    for (name, value) in matching() {
        encode_bulk(name.as_bytes(), out);
        encode_bulk(value.as_bytes(), out);
    }
}

/// The protocol level announced to clients by [`reply_hello`]: libraries
/// gate features on the server version, and the commands above behave as
/// Redis 7.0's do.
pub const REDIS_VERSION: &str = "7.0.0";

/// The reply to HELLO on RESP2: Redis's map, flattened into an array.
/// `role` is `master` on the leader and `replica` elsewhere.
pub fn reply_hello(client_id: i64, role: &[u8], out: &mut Vec<u8>) {
    encode_array_header(14, out);
    for (field, value) in [
        (&b"server"[..], &b"verbatim"[..]),
        (b"version", REDIS_VERSION.as_bytes()),
    ] {
        encode_bulk(field, out);
        encode_bulk(value, out);
    }
    encode_bulk(b"proto", out);
    encode_integer(2, out);
    encode_bulk(b"id", out);
    encode_integer(client_id, out);
    encode_bulk(b"mode", out);
    encode_bulk(b"standalone", out);
    encode_bulk(b"role", out);
    encode_bulk(role, out);
    encode_bulk(b"modules", out);
    encode_array_header(0, out);
}

/// True when `INFO [requested]` should include `section` (`server`,
/// `replication`, ...): no argument, `default`, `all` and `everything`
/// select every section, otherwise the names must match.
pub fn info_section_selected(requested: Option<&[u8]>, section: &str) -> bool {
    match requested {
        None => true,
        Some(r) => {
            r.eq_ignore_ascii_case(b"default")
                || r.eq_ignore_ascii_case(b"all")
                || r.eq_ignore_ascii_case(b"everything")
                || r.eq_ignore_ascii_case(section.as_bytes())
        }
    }
}

/// What [`reply_local`] did with a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// Answered (for [`Command::Empty`], with no bytes, as Redis).
    Replied,
    /// Answered `+OK`; close the connection once it is written (QUIT).
    Close,
    /// Not answerable here: [`Command::Kv`], [`Command::Info`],
    /// [`Command::Hello`]. Nothing was written.
    Host,
}

/// Answers the commands that need no replica state.
pub fn reply_local(command: &Command<'_>, out: &mut Vec<u8>) -> Local {
    match *command {
        Command::Ping(None) => encode_simple(b"PONG", out),
        Command::Ping(Some(message)) | Command::Echo(message) => encode_bulk(message, out),
        Command::Select | Command::ClientSetName(_) | Command::ClientSetInfo => {
            encode_simple(b"OK", out)
        }
        Command::ConfigGet(pattern) => reply_config_get(pattern, out),
        Command::CommandDocs => encode_array_header(0, out),
        Command::Empty => {}
        Command::Quit => {
            encode_simple(b"OK", out);
            return Local::Close;
        }
        Command::Kv(_)
        | Command::Stream(_)
        | Command::Info(_)
        | Command::Hello { .. }
        | Command::Publish { .. }
        | Command::Subscribe(_)
        | Command::Unsubscribe(_) => return Local::Host,
    }
    Local::Replied
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_core::rng::SplitMix64;

    /// An owned frame tree, to build inputs and compare results.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Owned {
        Simple(Vec<u8>),
        Error(Vec<u8>),
        Integer(i64),
        Bulk(Vec<u8>),
        NullBulk,
        Array(Vec<Owned>),
        NullArray,
    }

    fn own(frame: &Frame<'_>) -> Owned {
        match *frame {
            Frame::Simple(b) => Owned::Simple(b.to_vec()),
            Frame::Error(b) => Owned::Error(b.to_vec()),
            Frame::Integer(v) => Owned::Integer(v),
            Frame::Bulk(b) => Owned::Bulk(b.to_vec()),
            Frame::NullBulk => Owned::NullBulk,
            Frame::Array(a) => Owned::Array(a.iter().map(|f| own(&f)).collect()),
            Frame::NullArray => Owned::NullArray,
        }
    }

    fn write(o: &Owned, out: &mut Vec<u8>) {
        match o {
            Owned::Simple(b) => encode_simple(b, out),
            Owned::Error(b) => encode_error(b, out),
            Owned::Integer(v) => encode_integer(*v, out),
            Owned::Bulk(b) => encode_bulk(b, out),
            Owned::NullBulk => encode_null_bulk(out),
            Owned::Array(items) => {
                encode_array_header(items.len(), out);
                for i in items {
                    write(i, out);
                }
            }
            Owned::NullArray => encode_null_array(out),
        }
    }

    fn bulk_array(words: &[&[u8]]) -> Owned {
        Owned::Array(words.iter().map(|w| Owned::Bulk(w.to_vec())).collect())
    }

    fn request(words: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        write(&bulk_array(words), &mut out);
        out
    }

    const KV: KvLimits = KvLimits {
        key_bytes_max: 64,
        value_bytes_max: 256,
    };

    fn limits() -> RespLimits {
        RespLimits::for_kv(&KV)
    }

    fn parse_one(bytes: &[u8]) -> Result<Option<(Owned, usize)>, RespError> {
        parse_frame(bytes, &limits()).map(|r| r.map(|(f, n)| (own(&f), n)))
    }

    fn parse_all(bytes: &[u8], limits: &RespLimits) -> Result<Vec<Owned>, RespError> {
        let mut at = 0;
        let mut frames = Vec::new();
        while let Some((f, n)) = parse_frame(&bytes[at..], limits)? {
            assert!(n > 0 && n <= bytes.len() - at);
            frames.push(own(&f));
            at += n;
        }
        Ok(frames)
    }

    fn command(bytes: &[u8]) -> Result<Command<'_>, CommandError<'_>> {
        let (frame, n) = parse_frame(bytes, &limits()).unwrap().unwrap();
        assert_eq!(n, bytes.len(), "one whole frame");
        parse_command(&frame, &KV)
    }

    fn error_reply(bytes: &[u8]) -> String {
        let mut out = Vec::new();
        command(bytes).unwrap_err().encode(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn publish_and_subscriptions_parse_with_their_channels() {
        assert_eq!(
            command(b"*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n$2\r\nhi\r\n").unwrap(),
            Command::Publish {
                channel: b"ch",
                message: b"hi"
            }
        );
        let Command::Subscribe(c) = command(b"SUBSCRIBE a bb\r\n").unwrap() else {
            panic!("not a subscribe");
        };
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![&b"a"[..], &b"bb"[..]]);
        let Command::Unsubscribe(c) = command(b"unsubscribe\r\n").unwrap() else {
            panic!("not an unsubscribe");
        };
        assert!(c.is_empty(), "UNSUBSCRIBE alone names every channel");
        assert_eq!(
            error_reply(b"PUBLISH ch\r\n"),
            "-ERR wrong number of arguments for 'publish' command\r\n"
        );
        assert!(error_reply(b"SUBSCRIBE\r\n").contains("'subscribe'"));
        assert!(error_reply(b"SUBSCRIBE a b c d e f g h\r\n").contains("at most 7 channels"));
        let mut out = Vec::new();
        assert_eq!(
            reply_local(&command(b"PUBLISH a b\r\n").unwrap(), &mut out),
            Local::Host
        );
    }

    fn samples() -> Vec<Owned> {
        vec![
            Owned::Simple(b"OK".to_vec()),
            Owned::Simple(Vec::new()),
            Owned::Error(b"ERR wrong".to_vec()),
            Owned::Integer(0),
            Owned::Integer(i64::MIN),
            Owned::Integer(i64::MAX),
            Owned::Bulk(b"hello".to_vec()),
            Owned::Bulk(Vec::new()),
            Owned::Bulk(b"bin\r\n\0\xff".to_vec()),
            Owned::NullBulk,
            Owned::NullArray,
            Owned::Array(Vec::new()),
            bulk_array(&[b"SET", b"k", b"v"]),
            Owned::Array(vec![
                Owned::Integer(-7),
                Owned::Array(vec![Owned::NullBulk, Owned::Array(Vec::new())]),
                Owned::Simple(b"x".to_vec()),
                Owned::NullArray,
            ]),
        ]
    }

    #[test]
    fn frames_round_trip() {
        for sample in samples() {
            let mut bytes = Vec::new();
            write(&sample, &mut bytes);
            let (frame, n) = parse_frame(&bytes, &limits()).unwrap().unwrap();
            assert_eq!(n, bytes.len());
            assert_eq!(own(&frame), sample);
            // Canonical re-encoding is byte-exact.
            let mut again = Vec::new();
            encode_frame(&frame, &mut again);
            assert_eq!(again, bytes, "{sample:?}");
        }
    }

    #[test]
    fn pipelined_frames_parse_in_order() {
        let mut bytes = Vec::new();
        for s in samples() {
            write(&s, &mut bytes);
        }
        bytes.extend_from_slice(b"PING\r\nset a b\n");
        let frames = parse_all(&bytes, &limits()).unwrap();
        let mut expected = samples();
        expected.push(bulk_array(&[b"PING"]));
        expected.push(bulk_array(&[b"set", b"a", b"b"]));
        assert_eq!(frames, expected);
    }

    #[test]
    fn every_prefix_is_incomplete_or_the_right_frame() {
        let mut bytes = Vec::new();
        for s in samples() {
            write(&s, &mut bytes);
        }
        bytes.extend_from_slice(b"GET \"a b\"\r\n");
        let expected = parse_all(&bytes, &limits()).unwrap();
        let mut start = 0;
        for frame in &expected {
            let mut end = None;
            for cut in start..=bytes.len() {
                match parse_frame(&bytes[start..cut], &limits()) {
                    Ok(None) => assert!(end.is_none(), "incomplete after complete"),
                    Ok(Some((f, n))) => {
                        assert_eq!(&own(&f), frame);
                        assert_eq!(*end.get_or_insert(n), n);
                    }
                    Err(e) => panic!("prefix {start}..{cut} gave {e:?}"),
                }
            }
            start += end.unwrap();
        }
        assert_eq!(start, bytes.len());
    }

    #[test]
    fn inline_commands_are_arrays_of_bulk_strings() {
        type Case<'a> = (&'a [u8], &'a [&'a [u8]], usize);
        let cases: &[Case<'_>] = &[
            (b"PING\r\n", &[b"PING"], 6),
            (b"ping\n", &[b"ping"], 5),
            (b"  set\tk   v \r\n", &[b"set", b"k", b"v"], 14),
            (
                b"SET k \"hello world\"\n",
                &[b"SET", b"k", b"hello world"],
                20,
            ),
            (b"SET k 'it is' x\r\n", &[b"SET", b"k", b"it is", b"x"], 17),
            (b"SET k \"\"\n", &[b"SET", b"k", b""], 9),
            (b"a\\b c\n", &[b"a\\b", b"c"], 6),
            (b"\r\n", &[], 2),
            (b"\n", &[], 1),
        ];
        for &(bytes, words, used) in cases {
            let (frame, n) = parse_frame(bytes, &limits()).unwrap().unwrap();
            assert_eq!(n, used, "{bytes:?}");
            assert_eq!(own(&frame), bulk_array(words), "{bytes:?}");
            let Frame::Array(a) = frame else { panic!() };
            assert!(a.is_inline());
            // An inline command equals the RESP array of the same words.
            let resp = request(words);
            assert_eq!(frame, parse_frame(&resp, &limits()).unwrap().unwrap().0);
        }
        assert_eq!(parse_one(b"GET key"), Ok(None));
        assert_eq!(
            command(b"get k\r\n"),
            Ok(Command::Kv(KvOp::Get { key: b"k" }))
        );
        assert_eq!(command(b"\r\n"), Ok(Command::Empty));
    }

    #[test]
    fn malformed_inline_commands_are_protocol_errors() {
        for (bytes, what) in [
            (&b"SET k \"abc\n"[..], UNBALANCED),
            (b"SET k 'abc\n", UNBALANCED),
            (b"SET k \"a\"b\n", UNBALANCED),
            (b"SET k \"a\\nb\"\n", QUOTE_ESCAPE),
            (b"SET k a\"b\"\n", QUOTE_INSIDE),
            (b"SET k don't\n", QUOTE_INSIDE),
        ] {
            assert_eq!(
                parse_one(bytes),
                Err(RespError::Protocol(what)),
                "{bytes:?}"
            );
        }
        let mut out = Vec::new();
        RespError::Protocol(UNBALANCED).encode(&mut out);
        assert_eq!(
            out,
            b"-ERR Protocol error: unbalanced quotes in request\r\n"
        );
    }

    #[test]
    fn malformed_frames_are_protocol_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"*x\r\n", BAD_MULTIBULK),
            (b"*01\r\n", BAD_MULTIBULK),
            (b"*+1\r\n", BAD_MULTIBULK),
            (b"*-2\r\n", BAD_MULTIBULK),
            (b"*-0\r\n", BAD_MULTIBULK),
            (b"*1 \r\n", BAD_MULTIBULK),
            (b"*1\n$4\r\nPING\r\n", BAD_MULTIBULK),
            (b"*1\rx", BAD_MULTIBULK),
            (b"*99999999999999999999\r\n", BAD_MULTIBULK),
            (b"*123456789012345678901", BAD_MULTIBULK),
            (b"*1\r\n$x\r\n", BAD_BULK),
            (b"*1\r\n$04\r\nPING\r\n", BAD_BULK),
            (b"$-2\r\n", BAD_BULK),
            (b"$9223372036854775808\r\n", BAD_BULK),
            (b"*1\r\n$3\r\nabcd\r\n", BAD_BULK_END),
            (b"$3\r\nabc\n", BAD_BULK_END),
            (b"*1\r\n%1\r\n", BAD_TYPE),
            (b"*1\r\nPING\r\n", BAD_TYPE),
            (b":1.5\r\n", BAD_INTEGER),
            (b":-0\r\n", BAD_INTEGER),
            (b":\r\n", BAD_INTEGER),
            (b":9223372036854775808\r\n", BAD_INTEGER),
            (b"+a\nb\r\n", LF_IN_LINE),
            (b"-ab\rx", BAD_LINE_END),
        ];
        for &(bytes, what) in cases {
            assert_eq!(
                parse_one(bytes),
                Err(RespError::Protocol(what)),
                "{bytes:?}"
            );
        }
        let mut out = Vec::new();
        RespError::Protocol(BAD_MULTIBULK).encode(&mut out);
        assert_eq!(out, b"-ERR Protocol error: invalid multibulk length\r\n");
        out.clear();
        RespError::Protocol(BAD_BULK).encode(&mut out);
        assert_eq!(out, b"-ERR Protocol error: invalid bulk length\r\n");
    }

    #[test]
    fn errors_are_reported_before_the_rest_arrives() {
        // A bad byte or an oversized length is refused at once, not after
        // the peer has sent (or promised) more.
        assert_eq!(parse_one(b"*1x"), Err(RespError::Protocol(BAD_MULTIBULK)));
        assert!(matches!(
            parse_one(b"$1000000\r\n"),
            Err(RespError::BulkTooLong { len: 1_000_000, .. })
        ));
        assert_eq!(
            parse_one(b"$3\r\nabcX"),
            Err(RespError::Protocol(BAD_BULK_END))
        );
        assert_eq!(parse_one(b"$3\r\nabc\r"), Ok(None));
    }

    fn small() -> RespLimits {
        RespLimits {
            bulk_bytes_max: 8,
            array_len_max: 3,
            depth_max: 2,
            line_bytes_max: 10,
            frame_bytes_max: 40,
        }
    }

    #[test]
    fn each_limit_is_enforced_exactly() {
        let l = small();
        let p = |b: &[u8]| parse_frame(b, &l).map(|r| r.map(|(f, n)| (own(&f), n)));
        // Bulk length: 8 passes, 9 fails before the payload arrives.
        assert!(p(b"$8\r\n12345678\r\n").unwrap().is_some());
        assert_eq!(p(b"$9\r\n"), Err(RespError::BulkTooLong { len: 9, max: 8 }));
        // Array length, RESP and inline.
        assert!(p(b"*3\r\n:1\r\n:2\r\n:3\r\n").unwrap().is_some());
        assert_eq!(
            p(b"*4\r\n"),
            Err(RespError::ArrayTooLong { len: 4, max: 3 })
        );
        assert!(p(b"a b c\n").unwrap().is_some());
        assert_eq!(
            p(b"a b c d\n"),
            Err(RespError::ArrayTooLong { len: 4, max: 3 })
        );
        // Depth: two nested arrays pass, a third (even empty or null) fails.
        assert!(p(b"*1\r\n*1\r\n:1\r\n").unwrap().is_some());
        assert_eq!(p(b"*1\r\n*1\r\n*0\r\n"), Err(RespError::TooDeep { max: 2 }));
        assert_eq!(
            p(b"*1\r\n*1\r\n*-1\r\n"),
            Err(RespError::TooDeep { max: 2 })
        );
        // Lines: 10 content bytes pass, 11 fail without waiting for CRLF.
        assert!(p(b"+0123456789\r\n").unwrap().is_some());
        assert_eq!(p(b"+0123456789X"), Err(RespError::LineTooLong { max: 10 }));
        assert!(p(b"0123456789\n").unwrap().is_some());
        assert_eq!(p(b"0123456789X"), Err(RespError::LineTooLong { max: 10 }));
        assert_eq!(p(b"0123456789"), Ok(None));
        // Frame: a 40-byte frame passes; one needing a 41st byte fails, by
        // declared length or by arrival.
        let forty = b"*3\r\n$8\r\n12345678\r\n$8\r\n12345678\r\n$2\r\nxy\r\n";
        assert_eq!(forty.len(), 40);
        assert_eq!(p(forty).unwrap().unwrap().1, 40);
        let over = b"*3\r\n$8\r\n12345678\r\n$8\r\n12345678\r\n$3\r\n";
        assert_eq!(p(over), Err(RespError::FrameTooLarge { max: 40 }));
        // A long line arriving slowly: whichever of the line limit and the
        // frame budget binds first is the error, at the byte that proves it.
        let mut slow = b"*3\r\n:1\r\n:2\r\n+".to_vec();
        slow.resize(40, b'a');
        assert_eq!(p(&slow[..13 + 10]), Ok(None));
        assert_eq!(p(&slow[..13 + 11]), Err(RespError::LineTooLong { max: 10 }));
        let wide = RespLimits {
            line_bytes_max: 100,
            ..l
        };
        assert_eq!(parse_frame(&slow[..39], &wide), Ok(None));
        assert_eq!(
            parse_frame(&slow, &wide),
            Err(RespError::FrameTooLarge { max: 40 })
        );
        // Error replies name the limits.
        let mut out = Vec::new();
        RespError::BulkTooLong { len: 9, max: 8 }.encode(&mut out);
        assert_eq!(
            out,
            b"-ERR Protocol error: bulk length 9 is above the limit of 8 bytes\r\n"
        );
    }

    #[test]
    fn depth_is_capped_whatever_the_limit_says() {
        let l = RespLimits {
            depth_max: usize::MAX,
            ..RespLimits::for_kv(&KV)
        };
        let mut deep = b"*1\r\n".repeat(DEPTH_CAP);
        deep.extend_from_slice(b":1\r\n");
        assert!(parse_frame(&deep, &l).unwrap().is_some());
        let mut deeper = b"*1\r\n".repeat(DEPTH_CAP + 1);
        deeper.extend_from_slice(b":1\r\n");
        assert_eq!(
            parse_frame(&deeper, &l),
            Err(RespError::TooDeep { max: DEPTH_CAP })
        );
    }

    #[test]
    fn for_kv_limits_fit_the_largest_command() {
        let l = RespLimits::for_kv(&KV);
        assert_eq!(l.bulk_bytes_max, 256 + RespLimits::BULK_MARGIN_BYTES);
        let key = vec![b'k'; 64];
        let v = vec![b'v'; 256];
        let cas = request(&[b"CAS", &key, &v, b"IFEQ", &v]);
        assert!(cas.len() <= l.frame_bytes_max);
        let (frame, _) = parse_frame(&cas, &l).unwrap().unwrap();
        assert!(parse_command(&frame, &KV).is_ok());
        // A value just over the store's limit still gets a command error.
        let over = vec![b'v'; 257];
        let set = request(&[b"SET", b"k", &over]);
        let (frame, _) = parse_frame(&set, &l).unwrap().unwrap();
        assert_eq!(
            parse_command(&frame, &KV),
            Err(CommandError::ValueTooLarge { max: 256 })
        );
        // The largest kv limits do not overflow.
        let huge = RespLimits::for_kv(&KvLimits {
            key_bytes_max: u32::MAX,
            value_bytes_max: u32::MAX,
        });
        assert!(huge.frame_bytes_max >= huge.bulk_bytes_max);
    }

    #[test]
    fn redis_benchmark_requests() {
        let set = b"*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000042\r\n$3\r\nxxx\r\n";
        assert_eq!(
            command(set),
            Ok(Command::Kv(KvOp::Set {
                key: b"key:000000000042",
                value: b"xxx"
            }))
        );
        let get = b"*2\r\n$3\r\nGET\r\n$16\r\nkey:000000000042\r\n";
        assert_eq!(
            command(get),
            Ok(Command::Kv(KvOp::Get {
                key: b"key:000000000042"
            }))
        );
        // Without -r the key is sent with the placeholder unexpanded.
        let raw = b"*2\r\n$3\r\nGET\r\n$16\r\nkey:__rand_int__\r\n";
        assert_eq!(
            command(raw),
            Ok(Command::Kv(KvOp::Get {
                key: b"key:__rand_int__"
            }))
        );
        // With -P the requests arrive back to back in one read.
        let mut pipeline = Vec::new();
        for _ in 0..16 {
            pipeline.extend_from_slice(set);
            pipeline.extend_from_slice(get);
        }
        let frames = parse_all(&pipeline, &limits()).unwrap();
        assert_eq!(frames.len(), 32);
        // The configuration probe, answered byte for byte as Redis 7.0
        // with no persistence answers it (captured from a real server).
        let probe = b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$4\r\nsave\r\n\
                      *3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$10\r\nappendonly\r\n";
        let mut at = 0;
        let mut out = Vec::new();
        while let Some((frame, n)) = parse_frame(&probe[at..], &limits()).unwrap() {
            at += n;
            let cmd = parse_command(&frame, &KV).unwrap();
            assert_eq!(reply_local(&cmd, &mut out), Local::Replied);
        }
        assert_eq!(
            out,
            b"*2\r\n$4\r\nsave\r\n$0\r\n\r\n*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"
        );
    }

    #[test]
    fn redis_cli_handshake() {
        let docs = b"*2\r\n$7\r\nCOMMAND\r\n$4\r\nDOCS\r\n";
        let mut out = Vec::new();
        assert_eq!(
            reply_local(&command(docs).unwrap(), &mut out),
            Local::Replied
        );
        assert_eq!(out, b"*0\r\n");
        out.clear();
        let ping = b"*1\r\n$4\r\nping\r\n";
        reply_local(&command(ping).unwrap(), &mut out);
        assert_eq!(out, b"+PONG\r\n");
        out.clear();
        reply_local(&command(&request(&[b"PING", b"hi"])).unwrap(), &mut out);
        assert_eq!(out, b"$2\r\nhi\r\n");
        out.clear();
        assert_eq!(command(&request(&[b"select", b"0"])), Ok(Command::Select));
        assert_eq!(
            reply_local(&command(b"QUIT\r\n").unwrap(), &mut out),
            Local::Close
        );
        assert_eq!(out, b"+OK\r\n");
        out.clear();
        assert_eq!(
            reply_local(&command(b"get k\r\n").unwrap(), &mut out),
            Local::Host
        );
        assert_eq!(reply_local(&Command::Empty, &mut out), Local::Replied);
        assert!(out.is_empty());
    }

    #[test]
    fn commands_are_case_insensitive() {
        assert_eq!(
            command(b"GeT k\n"),
            Ok(Command::Kv(KvOp::Get { key: b"k" }))
        );
        assert_eq!(
            command(&request(&[b"sEt", b"K", b"V"])),
            Ok(Command::Kv(KvOp::Set {
                key: b"K",
                value: b"V"
            }))
        );
        assert_eq!(
            command(b"config GET SAVE\n"),
            Ok(Command::ConfigGet(b"SAVE"))
        );
        let mut out = Vec::new();
        reply_config_get(b"SAVE", &mut out);
        assert_eq!(out, b"*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
        assert_eq!(
            command(b"incr n\n"),
            Ok(Command::Kv(KvOp::Incr {
                key: b"n",
                delta: 1
            }))
        );
        assert_eq!(
            command(b"Decr n\n"),
            Ok(Command::Kv(KvOp::Incr {
                key: b"n",
                delta: -1
            }))
        );
        assert_eq!(
            command(b"incrBY n -5\n"),
            Ok(Command::Kv(KvOp::Incr {
                key: b"n",
                delta: -5
            }))
        );
        assert_eq!(
            command(b"DECRby n 9223372036854775807\n"),
            Ok(Command::Kv(KvOp::Incr {
                key: b"n",
                delta: -i64::MAX
            }))
        );
        assert_eq!(
            command(b"del k\n"),
            Ok(Command::Kv(KvOp::Del { key: b"k" }))
        );
        assert_eq!(command(b"echo hi\n"), Ok(Command::Echo(b"hi")));
        assert_eq!(command(b"info\n"), Ok(Command::Info(None)));
        assert_eq!(
            command(b"INFO Server\n"),
            Ok(Command::Info(Some(b"Server")))
        );
        assert_eq!(
            command(b"client SetName me\n"),
            Ok(Command::ClientSetName(b"me"))
        );
        assert_eq!(
            command(b"CLIENT SETINFO lib-name redis-py\n"),
            Ok(Command::ClientSetInfo)
        );
        assert_eq!(command(b"command\n"), Ok(Command::CommandDocs));
        assert_eq!(command(b"quit\n"), Ok(Command::Quit));
    }

    #[test]
    fn cas_syntax() {
        assert_eq!(
            command(b"CAS k new IFEQ old\n"),
            Ok(Command::Kv(KvOp::Cas {
                key: b"k",
                expected: Some(b"old"),
                new: b"new"
            }))
        );
        assert_eq!(
            command(b"cas k new nx\n"),
            Ok(Command::Kv(KvOp::Cas {
                key: b"k",
                expected: None,
                new: b"new"
            }))
        );
        // Values are never mistaken for keywords.
        assert_eq!(
            command(b"CAS k NX NX\n"),
            Ok(Command::Kv(KvOp::Cas {
                key: b"k",
                expected: None,
                new: b"NX"
            }))
        );
        assert_eq!(
            command(b"CAS k IFEQ IFEQ NX\n"),
            Ok(Command::Kv(KvOp::Cas {
                key: b"k",
                expected: Some(b"NX"),
                new: b"IFEQ"
            }))
        );
        assert_eq!(
            command(&request(&[b"CAS", b"k", b"", b"IFEQ", b""])),
            Ok(Command::Kv(KvOp::Cas {
                key: b"k",
                expected: Some(b""),
                new: b""
            }))
        );
        assert_eq!(command(b"CAS k new XX\n"), Err(CommandError::Syntax));
        assert_eq!(command(b"CAS k new NX extra\n"), Err(CommandError::Syntax));
        assert_eq!(command(b"CAS k new IFEQ\n"), Err(CommandError::Syntax));
        assert_eq!(
            command(b"CAS k new\n"),
            Err(CommandError::WrongArity("cas"))
        );
        assert_eq!(
            command(b"CAS k a IFEQ b c\n"),
            Err(CommandError::WrongArity("cas"))
        );
        let big = vec![b'x'; 257];
        assert_eq!(
            command(&request(&[b"CAS", b"k", b"v", b"IFEQ", &big])),
            Err(CommandError::ValueTooLarge { max: 256 })
        );
        assert_eq!(error_reply(b"CAS k v XX\n"), "-ERR syntax error\r\n");
    }

    #[test]
    fn redis_exact_error_replies() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"foo a b\n",
                "-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n",
            ),
            (
                b"foo\n",
                "-ERR unknown command 'foo', with args beginning with: \r\n",
            ),
            (
                b"GET\n",
                "-ERR wrong number of arguments for 'get' command\r\n",
            ),
            (
                b"get a b\n",
                "-ERR wrong number of arguments for 'get' command\r\n",
            ),
            (
                b"set k\n",
                "-ERR wrong number of arguments for 'set' command\r\n",
            ),
            (
                b"incrby k\n",
                "-ERR wrong number of arguments for 'incrby' command\r\n",
            ),
            (
                b"echo\n",
                "-ERR wrong number of arguments for 'echo' command\r\n",
            ),
            (
                b"ping a b\n",
                "-ERR wrong number of arguments for 'ping' command\r\n",
            ),
            (
                b"config get\n",
                "-ERR wrong number of arguments for 'config|get' command\r\n",
            ),
            (
                b"client\n",
                "-ERR wrong number of arguments for 'client' command\r\n",
            ),
            (
                b"incrby k abc\n",
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                b"incrby k 01\n",
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                b"incrby k +1\n",
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                b"incrby k 1.5\n",
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                b"incrby k 9223372036854775808\n",
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                b"decrby k -9223372036854775808\n",
                "-ERR decrement would overflow\r\n",
            ),
            (b"select 1\n", "-ERR DB index is out of range\r\n"),
            (b"select -1\n", "-ERR DB index is out of range\r\n"),
            (
                b"select x\n",
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                b"client foo\n",
                "-ERR unknown subcommand 'foo'. Try CLIENT HELP.\r\n",
            ),
            (
                b"config set a b\n",
                "-ERR unknown subcommand 'set'. Try CONFIG HELP.\r\n",
            ),
            (
                b"command count\n",
                "-ERR unknown subcommand 'count'. Try COMMAND HELP.\r\n",
            ),
            (
                b"client setname a\x01\n",
                "-ERR Client names cannot contain spaces, newlines or special characters.\r\n",
            ),
            (b"hello 3\n", "-NOPROTO unsupported protocol version\r\n"),
            (
                b"hello x\n",
                "-ERR Protocol version is not an integer or out of range\r\n",
            ),
            (b"set k v ex 10\n", "-ERR SET options are not supported\r\n"),
            (b"set k v nx\n", "-ERR SET options are not supported\r\n"),
            (
                b"del a b\n",
                "-ERR DEL takes a single key here (multi-key DEL is not supported)\r\n",
            ),
        ];
        for &(bytes, expected) in cases {
            assert_eq!(error_reply(bytes), expected, "{bytes:?}");
        }
        // Non-array requests and non-bulk arguments close the connection.
        let e = command(b":1\r\n").unwrap_err();
        assert!(e.closes_connection());
        let e = command(b"*2\r\n$3\r\nGET\r\n:1\r\n").unwrap_err();
        assert_eq!(e, CommandError::Protocol("expected '$', got ':'"));
        let mut out = Vec::new();
        e.encode(&mut out);
        assert_eq!(out, b"-ERR Protocol error: expected '$', got ':'\r\n");
        assert!(!CommandError::Syntax.closes_connection());
    }

    #[test]
    fn unknown_command_quotes_are_cut_and_sanitized() {
        let long = vec![b'a'; 200];
        let bytes = request(&[&long, b"x\r\ny", &long, b"never"]);
        let reply = error_reply(&bytes);
        let expected = format!(
            "-ERR unknown command '{}', with args beginning with: 'x  y' '{}' \r\n",
            "a".repeat(128),
            "a".repeat(128 - 7)
        );
        assert_eq!(reply, expected);
    }

    #[test]
    fn kv_limits_are_enforced_without_truncation() {
        let key64 = vec![b'k'; 64];
        let key65 = vec![b'k'; 65];
        let v256 = vec![b'v'; 256];
        let v257 = vec![b'v'; 257];
        assert!(command(&request(&[b"SET", &key64, &v256])).is_ok());
        assert_eq!(
            command(&request(&[b"SET", &key65, b"v"])),
            Err(CommandError::KeyTooLarge { max: 64 })
        );
        assert_eq!(
            command(&request(&[b"GET", &key65])),
            Err(CommandError::KeyTooLarge { max: 64 })
        );
        assert_eq!(
            command(&request(&[b"SET", b"k", &v257])),
            Err(CommandError::ValueTooLarge { max: 256 })
        );
        assert_eq!(
            command(&request(&[b"GET", b""])),
            Err(CommandError::EmptyKey)
        );
        assert_eq!(
            error_reply(&request(&[b"SET", b"k", &v257])),
            "-ERR value is too large (max 256 bytes)\r\n"
        );
        assert_eq!(
            error_reply(&request(&[b"GET", &key65])),
            "-ERR key is too large (max 64 bytes)\r\n"
        );
        // The codec's 16-bit key length caps a larger configured limit.
        let wide = KvLimits {
            key_bytes_max: 1 << 20,
            value_bytes_max: 16,
        };
        let key = vec![b'k'; 65_536];
        let bytes = request(&[b"GET", &key]);
        let big = RespLimits::for_kv(&wide);
        let (frame, _) = parse_frame(&bytes, &big).unwrap().unwrap();
        assert_eq!(
            parse_command(&frame, &wide),
            Err(CommandError::KeyTooLarge { max: 65_535 })
        );
        // Whatever parse_command accepts, the log's codec accepts.
        let ok = request(&[b"CAS", &key64, &v256, b"IFEQ", &v256]);
        let Command::Kv(op) = command(&ok).unwrap() else {
            panic!()
        };
        let mut buf = vec![0u8; KV.encoded_bytes_max() as usize];
        let n = op.encode(&mut buf).unwrap();
        assert_eq!(KvOp::decode(&buf[..n], &KV), Ok(op));
    }

    #[test]
    fn hello_stays_on_resp2() {
        assert_eq!(command(b"HELLO\n"), Ok(Command::Hello { setname: None }));
        assert_eq!(
            command(b"hello 2 setname app\n"),
            Ok(Command::Hello {
                setname: Some(b"app")
            })
        );
        assert_eq!(
            command(b"hello 2 auth u p\n"),
            Err(CommandError::AuthUnsupported)
        );
        assert_eq!(command(b"hello 2 bogus\n"), Err(CommandError::Syntax));
        assert_eq!(command(b"hello 2 setname\n"), Err(CommandError::Syntax));
        let mut out = Vec::new();
        reply_hello(7, b"master", &mut out);
        let (frame, n) = parse_frame(&out, &limits()).unwrap().unwrap();
        assert_eq!(n, out.len());
        let Owned::Array(items) = own(&frame) else {
            panic!()
        };
        assert_eq!(items.len(), 14);
        assert_eq!(items[5], Owned::Integer(2));
        assert_eq!(items[7], Owned::Integer(7));
        assert_eq!(items[11], Owned::Bulk(b"master".to_vec()));
    }

    #[test]
    fn write_and_get_replies() {
        let cases: &[(KvReply, &[u8])] = &[
            (KvReply::Ok, b"+OK\r\n"),
            (KvReply::Int(1), b":1\r\n"),
            (KvReply::Int(-42), b":-42\r\n"),
            (KvReply::Int(i64::MIN), b":-9223372036854775808\r\n"),
            (
                KvReply::Err(KvError::NotInteger),
                b"-ERR value is not an integer or out of range\r\n",
            ),
            (
                KvReply::Err(KvError::Overflow),
                b"-ERR increment or decrement would overflow\r\n",
            ),
            (KvReply::Err(KvError::StoreFull), b"-ERR store is full\r\n"),
        ];
        for (reply, bytes) in cases {
            let mut out = Vec::new();
            reply_for(reply, &mut out);
            assert_eq!(out, *bytes);
        }
        for e in [KvError::Malformed, KvError::NotAWrite, KvError::Stale] {
            let mut out = Vec::new();
            reply_for(&KvReply::Err(e), &mut out);
            assert!(out.starts_with(b"-ERR ") && out.ends_with(b"\r\n"));
            assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        }
        let mut out = Vec::new();
        reply_get(Some(b"VXK"), &mut out);
        reply_get(None, &mut out);
        reply_get(Some(b""), &mut out);
        assert_eq!(out, b"$3\r\nVXK\r\n$-1\r\n$0\r\n\r\n");
    }

    #[test]
    fn encoders_keep_the_stream_framed() {
        let mut out = Vec::new();
        encode_error(b"MOVED 3999 127.0.0.1:6381", &mut out);
        encode_error(b"ERR a\r\nb", &mut out);
        encode_simple(b"x\ny", &mut out);
        encode_array_header(2, &mut out);
        encode_integer(0, &mut out);
        encode_null_array(&mut out);
        assert_eq!(
            out,
            b"-MOVED 3999 127.0.0.1:6381\r\n-ERR a  b\r\n+x y\r\n*2\r\n:0\r\n*-1\r\n"
        );
        assert_eq!(parse_all(&out, &limits()).unwrap().len(), 4);
        let mut n = Vec::new();
        for v in [0u64, 9, 10, 12345, u64::MAX] {
            n.clear();
            put_u64(&mut n, v);
            assert_eq!(n, v.to_string().as_bytes());
        }
    }

    #[test]
    fn config_get_globs() {
        let names = |p: &[u8]| -> Vec<Vec<u8>> {
            let mut out = Vec::new();
            reply_config_get(p, &mut out);
            let (frame, _) = parse_frame(&out, &limits()).unwrap().unwrap();
            let Owned::Array(items) = own(&frame) else {
                panic!()
            };
            items
                .iter()
                .step_by(2)
                .map(|i| match i {
                    Owned::Bulk(b) => b.clone(),
                    _ => panic!(),
                })
                .collect()
        };
        assert_eq!(names(b"*"), vec![b"save".to_vec(), b"appendonly".to_vec()]);
        assert_eq!(names(b"append*"), vec![b"appendonly".to_vec()]);
        assert_eq!(names(b"s?v*"), vec![b"save".to_vec()]);
        assert_eq!(names(b"*ONLY"), vec![b"appendonly".to_vec()]);
        assert!(names(b"maxmemory").is_empty());
        assert!(names(b"").is_empty());
        assert!(glob_matches(b"**a**", b"save"));
        assert!(!glob_matches(b"*x*", b"save"));
        assert!(info_section_selected(None, "server"));
        assert!(info_section_selected(Some(b"ALL"), "server"));
        assert!(info_section_selected(Some(b"Server"), "server"));
        assert!(!info_section_selected(Some(b"clients"), "server"));
    }

    #[test]
    fn display_is_readable() {
        assert_eq!(
            CommandError::WrongArity("get").to_string(),
            "ERR wrong number of arguments for 'get' command"
        );
        let e = command(b"\xff\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "ERR unknown command '\\xff', with args beginning with: "
        );
        assert_eq!(
            format!("{:?}", command(b"*1\r\n$1\r\n\n\r\n")),
            "Err(Unknown { name: [10], request: [Bulk(b\"\\n\")] })"
        );
    }

    /// Checks the parser's contract on arbitrary bytes: no panic, consumed
    /// within bounds, prefixes consistent with the whole, re-encoding
    /// round-trips, and the command layer and its replies are total.
    fn check_bytes(bytes: &[u8], limits: &RespLimits) {
        let full = parse_frame(bytes, limits);
        if let Ok(Some((frame, n))) = &full {
            assert!(*n > 0 && *n <= bytes.len());
            let mut canonical = Vec::new();
            encode_frame(frame, &mut canonical);
            let again = parse_frame(&canonical, &REREAD).unwrap().unwrap();
            assert_eq!(again.0, *frame);
            assert_eq!(again.1, canonical.len());
            let mut out = Vec::new();
            match parse_command(frame, &KV) {
                Ok(cmd) => {
                    reply_local(&cmd, &mut out);
                }
                Err(e) => e.encode(&mut out),
            }
            parse_all(&out, &REREAD).unwrap();
        }
        if let Err(e) = &full {
            let mut out = Vec::new();
            e.encode(&mut out);
            assert_eq!(parse_all(&out, &REREAD).unwrap().len(), 1);
        }
        for cut in 0..bytes.len() {
            let part = parse_frame(&bytes[..cut], limits);
            match (&part, &full) {
                (Ok(None), _) => {}
                (Ok(Some((f, n))), Ok(Some((g, m)))) => assert!(f == g && n == m),
                (Err(a), Err(b)) => assert_eq!(a, b),
                _ => panic!("prefix {cut} of {bytes:?}: {part:?} vs {full:?}"),
            }
        }
    }

    fn mutate(rng: &mut SplitMix64, bytes: &mut Vec<u8>) {
        const INTERESTING: &[u8] = b"\r\n*$+-:0123456789 \"'\\";
        for _ in 0..rng.range_inclusive(1, 4) {
            let at = rng.range_inclusive(0, bytes.len() as u64) as usize;
            match rng.range_inclusive(0, 3) {
                0 if at < bytes.len() => {
                    bytes.remove(at);
                }
                1 => {
                    let b =
                        INTERESTING[rng.range_inclusive(0, INTERESTING.len() as u64 - 1) as usize];
                    bytes.insert(at, b);
                }
                2 if at < bytes.len() => bytes[at] = rng.next_u64() as u8,
                _ => bytes.truncate(at),
            }
        }
    }

    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut rng = SplitMix64::new(0x5EED_4E59);
        let mut valid = Vec::new();
        for s in samples() {
            let mut b = Vec::new();
            write(&s, &mut b);
            valid.push(b);
        }
        valid.push(request(&[b"CAS", b"k", b"v", b"IFEQ", b"w"]));
        valid.push(request(&[b"SET", b"key:000000000042", b"xxx"]));
        valid.push(b"SET k \"a b\" 'c'\r\n".to_vec());
        for round in 0..20_000 {
            let limits = if round % 2 == 0 { small() } else { limits() };
            let bytes = if round % 3 == 0 {
                let len = rng.range_inclusive(0, 48) as usize;
                (0..len).map(|_| rng.next_u64() as u8).collect()
            } else {
                let mut b = valid[rng.range_inclusive(0, valid.len() as u64 - 1) as usize].clone();
                if rng.chance(1, 2) {
                    let other = &valid[rng.range_inclusive(0, valid.len() as u64 - 1) as usize];
                    b.extend_from_slice(other);
                }
                mutate(&mut rng, &mut b);
                b
            };
            check_bytes(&bytes, &limits);
            // Pipelines: every frame is consumed within bounds.
            let mut at = 0;
            while let Ok(Some((_, n))) = parse_frame(&bytes[at..], &limits) {
                assert!(n >= 1 && n <= bytes.len() - at);
                at += n;
            }
        }
    }
}
