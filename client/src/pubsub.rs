//! Publish/subscribe over the multicast group (Derecho's atomic multicast,
//! issue 15): how a RESP `PUBLISH` becomes one multicast message, and how a
//! delivered message reaches a `SUBSCRIBE`d connection. Every replica of
//! the group delivers every message in the same order, so subscribers on
//! different replicas see the same sequence.
//!
//! A multicast payload is `| channel length (1 byte) | channel | message |`.

use thiserror::Error;

/// Longest channel name, bytes.
pub const CHANNEL_BYTES_MAX: usize = 255;

/// Why a publication cannot be encoded.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum PubSubError {
    /// The channel name is empty or longer than [`CHANNEL_BYTES_MAX`].
    #[error("channel names are 1 to 255 bytes")]
    Channel,
    /// Channel and message together exceed the multicast payload limit.
    #[error("channel and message take {bytes} bytes; the multicast payload limit is {max} (multicast.payload_bytes_max, at most 1024, or multicast.large_message_bytes_max with large_slots > 0)")]
    TooLarge {
        /// What they would take.
        bytes: usize,
        /// The limit.
        max: usize,
    },
}

/// Encodes a publication into a multicast payload of at most `max` bytes.
pub fn encode(
    channel: &[u8],
    message: &[u8],
    max: usize,
    out: &mut Vec<u8>,
) -> Result<(), PubSubError> {
    if channel.is_empty() || channel.len() > CHANNEL_BYTES_MAX {
        return Err(PubSubError::Channel);
    }
    let bytes = 1 + channel.len() + message.len();
    if bytes > max {
        return Err(PubSubError::TooLarge { bytes, max });
    }
    out.clear();
    out.push(channel.len() as u8);
    out.extend_from_slice(channel);
    out.extend_from_slice(message);
    Ok(())
}

/// Decodes a delivered multicast payload: `(channel, message)`, `None` if
/// it is not a publication (another use of the group).
pub fn decode(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&len, rest) = payload.split_first()?;
    let len = usize::from(len);
    if len == 0 || rest.len() < len {
        return None;
    }
    Some(rest.split_at(len))
}

/// The RESP2 push a subscriber gets: `message`, the channel, the message.
pub fn encode_message(channel: &[u8], message: &[u8], out: &mut Vec<u8>) {
    crate::resp::encode_array_header(3, out);
    crate::resp::encode_bulk(b"message", out);
    crate::resp::encode_bulk(channel, out);
    crate::resp::encode_bulk(message, out);
}

/// The confirmation of a (un)subscription: `kind` (`subscribe` or
/// `unsubscribe`), the channel (nil for an `UNSUBSCRIBE` of nothing), and
/// how many channels the connection is subscribed to now.
pub fn encode_confirmation(kind: &[u8], channel: Option<&[u8]>, count: usize, out: &mut Vec<u8>) {
    crate::resp::encode_array_header(3, out);
    crate::resp::encode_bulk(kind, out);
    match channel {
        Some(c) => crate::resp::encode_bulk(c, out),
        None => out.extend_from_slice(b"$-1\r\n"),
    }
    crate::resp::encode_integer(count as i64, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publication_round_trips() {
        let mut out = Vec::new();
        encode(b"news", b"hello world", 64, &mut out).unwrap();
        assert_eq!(decode(&out), Some((&b"news"[..], &b"hello world"[..])));
        encode(b"n", b"", 64, &mut out).unwrap();
        assert_eq!(decode(&out), Some((&b"n"[..], &b""[..])));
    }

    #[test]
    fn bad_channels_and_oversized_messages_are_refused() {
        let mut out = Vec::new();
        assert_eq!(encode(b"", b"x", 64, &mut out), Err(PubSubError::Channel));
        assert_eq!(
            encode(&[b'c'; 256], b"x", 1024, &mut out),
            Err(PubSubError::Channel)
        );
        assert_eq!(
            encode(b"ch", &[0; 62], 64, &mut out),
            Err(PubSubError::TooLarge { bytes: 65, max: 64 })
        );
        assert!(encode(b"ch", &[0; 61], 64, &mut out).is_ok());
    }

    #[test]
    fn payloads_that_are_not_publications_decode_to_none() {
        assert_eq!(decode(b""), None);
        assert_eq!(decode(&[0, b'a']), None);
        assert_eq!(decode(&[5, b'a', b'b']), None);
    }

    #[test]
    fn pushes_are_redis_shaped() {
        let mut out = Vec::new();
        encode_message(b"ch", b"hi", &mut out);
        assert_eq!(out, b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n");
        out.clear();
        encode_confirmation(b"subscribe", Some(b"ch"), 1, &mut out);
        assert_eq!(out, b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n");
        out.clear();
        encode_confirmation(b"unsubscribe", None, 0, &mut out);
        assert_eq!(out, b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n");
    }
}
