//! The RESP2 parser and command layer on arbitrary bytes.
//!
//! Checks, for every input:
//! * no panic, and `consumed` within `1..=len`;
//! * a complete frame re-encodes canonically and parses back equal;
//! * `parse_command` is total, and every reply it leads to is valid RESP;
//! * every prefix gives `Ok(None)` or exactly the whole buffer's answer;
//! * a connection that receives the bytes in two reads, split anywhere,
//!   sees the same frames and the same final error as one that receives
//!   them at once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use verbatim_core::kv::KvLimits;
use verbatim_client::resp::{self, RespError, RespLimits};

const KV: KvLimits = KvLimits {
    key_bytes_max: 16,
    value_bytes_max: 64,
};

/// Limits picked by the first input byte: tiny ones make every limit
/// reachable by short inputs; the others are what a replica uses.
fn limits(select: u8) -> RespLimits {
    match select % 3 {
        0 => RespLimits {
            bulk_bytes_max: 8,
            array_len_max: 3,
            depth_max: 2,
            line_bytes_max: 12,
            frame_bytes_max: 48,
        },
        1 => RespLimits::for_kv(&KV),
        _ => RespLimits {
            depth_max: 40, // above DEPTH_CAP: the cap must hold
            ..RespLimits::for_kv(&KV)
        },
    }
}

/// Limits for re-reading our own output: nothing we encode may be refused.
const OUTPUT: RespLimits = RespLimits {
    bulk_bytes_max: usize::MAX,
    array_len_max: usize::MAX,
    depth_max: usize::MAX,
    line_bytes_max: usize::MAX,
    frame_bytes_max: usize::MAX,
};

/// Every frame in `out`, which must be well-formed RESP.
fn assert_valid_output(out: &[u8]) {
    let mut at = 0;
    while at < out.len() {
        match resp::parse_frame(&out[at..], &OUTPUT) {
            Ok(Some((_, n))) => at += n,
            other => panic!("invalid reply bytes {:?}: {other:?}", &out[at..]),
        }
    }
}

/// What a connection sees: each frame's canonical bytes, the replies, and
/// the error that ended the stream, if any.
#[derive(Debug, PartialEq)]
struct Seen {
    frames: Vec<Vec<u8>>,
    replies: Vec<u8>,
    error: Option<RespError>,
}

/// Feeds `chunks` to a connection loop the way a replica does: append,
/// parse until incomplete, drop the consumed bytes.
fn drive(chunks: &[&[u8]], limits: &RespLimits) -> Seen {
    let mut inbuf = Vec::new();
    let mut seen = Seen {
        frames: Vec::new(),
        replies: Vec::new(),
        error: None,
    };
    for chunk in chunks {
        inbuf.extend_from_slice(chunk);
        let mut at = 0;
        loop {
            match resp::parse_frame(&inbuf[at..], limits) {
                Ok(Some((frame, n))) => {
                    assert!(n >= 1 && n <= inbuf.len() - at, "consumed out of bounds");
                    at += n;
                    let mut canonical = Vec::new();
                    resp::encode_frame(&frame, &mut canonical);
                    let (again, m) = resp::parse_frame(&canonical, &OUTPUT)
                        .expect("canonical encoding parses")
                        .expect("canonical encoding is complete");
                    assert_eq!(m, canonical.len());
                    assert_eq!(again, frame, "re-encoding changed the frame");
                    seen.frames.push(canonical);
                    match resp::parse_command(&frame, &KV) {
                        Ok(cmd) => {
                            if resp::reply_local(&cmd, &mut seen.replies) == resp::Local::Close {
                                return seen;
                            }
                        }
                        Err(e) => {
                            e.encode(&mut seen.replies);
                            let _ = e.to_string();
                            if e.closes_connection() {
                                return seen;
                            }
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    e.encode(&mut seen.replies);
                    seen.error = Some(e);
                    return seen;
                }
            }
        }
        inbuf.drain(..at);
    }
    seen
}

fuzz_target!(|data: &[u8]| {
    let Some((&select, bytes)) = data.split_first() else {
        return;
    };
    let limits = limits(select);

    let full = resp::parse_frame(bytes, &limits);
    for cut in 0..bytes.len() {
        let part = resp::parse_frame(&bytes[..cut], &limits);
        match (&part, &full) {
            (Ok(None), _) => {}
            (Ok(Some((f, n))), Ok(Some((g, m)))) => {
                assert_eq!(f, g, "prefix {cut} gave another frame");
                assert_eq!(n, m, "prefix {cut} consumed differently");
            }
            (Err(a), Err(b)) => assert_eq!(a, b, "prefix {cut} gave another error"),
            _ => panic!("prefix {cut}: {part:?}, whole: {full:?}"),
        }
    }

    let whole = drive(&[bytes], &limits);
    assert_valid_output(&whole.replies);
    // Every split point for short inputs; a spread of them for long ones,
    // to keep each run cheap.
    let step = (bytes.len() / 256).max(1);
    for cut in (0..=bytes.len()).step_by(step) {
        let (a, b) = bytes.split_at(cut);
        assert_eq!(drive(&[a, b], &limits), whole, "split at {cut}");
    }
});
