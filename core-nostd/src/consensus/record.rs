//! Proposal records: the value behind a slot word's indirection.
//!
//! Before its accept CAS on a slot, a proposer WRITEs the value it proposes
//! into its own proposal area at the acceptor, on the same reliable
//! connection, so a CAS that landed implies the record landed before it
//! (uKharon §5.3.1, FIFO on RC). The acceptor also keeps decided values
//! in this format in its local region.
//!
//! ```text
//! word 0 | slot (u32) | len (u32)                          |
//! word 1 | proposal (u16) | owner (u8) | version (u8) | 0  |
//! word 2 | checksum over words 0, 1 and the value bytes    |
//! word 3 | 0                                               |
//! bytes  | value (len bytes), zero-padded to the stride     |
//! ```
//!
//! The checksum is never 0, so a never-written (all-zero) record never
//! validates, and a record torn by a concurrent overwrite fails it.

use crate::checksum::Checksum;
use core::fmt;

/// Bytes before the value.
pub const RECORD_HEADER_BYTES: usize = 32;
/// Largest value the module supports; the configuration picks its own
/// `value_bytes_max` at or below it (values are copied through buffers of
/// this size, and events carry them).
pub const VALUE_BYTES_CAP: usize = 256;
/// Bytes of the largest record.
pub const RECORD_BYTES_CAP: usize = RECORD_HEADER_BYTES + VALUE_BYTES_CAP;
/// Bumped when the record format changes.
pub const RECORD_VERSION: u8 = 1;

const RECORD_DOMAIN: u64 = 0x5052_4F50_4F53_414C; // "PROPOSAL"
const DIGEST_DOMAIN: u64 = 0x5641_4C55_4544_4947; // "VALUEDIG"

/// A value, copied out of memory.
pub type Value = heapless::Vec<u8, VALUE_BYTES_CAP>;

/// The 8-bit digest of a value that a slot word carries next to the
/// record's name.
pub fn value_digest(value: &[u8]) -> u8 {
    let mut c = Checksum::new(DIGEST_DOMAIN);
    c.bytes(value);
    c.finish() as u8
}

/// A decoded, validated record (borrowing the bytes it was decoded from).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The slot it proposes a value for.
    pub slot: u32,
    /// The proposal it was written under.
    pub proposal: u16,
    /// The index of the proposer that wrote it.
    pub owner: u8,
    /// The value.
    pub value: &'a [u8],
}

/// Why bytes read from an acceptor are not a valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// Fewer bytes than a header.
    Short,
    /// Another format version (or never written).
    Version,
    /// A length above the configured maximum or beyond the bytes.
    Length,
    /// The checksum does not match: never written, torn or corrupt.
    Checksum,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecordError::Short => "shorter than a record header",
            RecordError::Version => "unknown record version",
            RecordError::Length => "value length out of range",
            RecordError::Checksum => "checksum mismatch",
        })
    }
}

fn word(bytes: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[8 * i..8 * i + 8]);
    u64::from_le_bytes(w)
}

fn checksum(w0: u64, w1: u64, value: &[u8]) -> u64 {
    let mut c = Checksum::new(RECORD_DOMAIN);
    c.word(w0);
    c.word(w1);
    c.bytes(value);
    c.finish()
}

/// Encodes a record into `out` and returns the bytes used
/// (`RECORD_HEADER_BYTES + value.len()`). Panics if `out` is too short or
/// the value longer than [`VALUE_BYTES_CAP`]: sizes come from the layout.
pub fn encode_record(slot: u32, proposal: u16, owner: u8, value: &[u8], out: &mut [u8]) -> usize {
    assert!(value.len() <= VALUE_BYTES_CAP, "value above the cap");
    let used = RECORD_HEADER_BYTES + value.len();
    assert!(out.len() >= used, "record buffer too short");
    let w0 = u64::from(slot) | ((value.len() as u64) << 32);
    let w1 = u64::from(proposal) | (u64::from(owner) << 16) | (u64::from(RECORD_VERSION) << 24);
    let sum = checksum(w0, w1, value);
    out[0..8].copy_from_slice(&w0.to_le_bytes());
    out[8..16].copy_from_slice(&w1.to_le_bytes());
    out[16..24].copy_from_slice(&sum.to_le_bytes());
    out[24..32].copy_from_slice(&0u64.to_le_bytes());
    out[RECORD_HEADER_BYTES..used].copy_from_slice(value);
    used
}

/// Decodes and validates a record copied out of memory. The caller checks
/// that slot, owner and proposal are the ones it asked for.
pub fn decode_record(bytes: &[u8], value_bytes_max: usize) -> Result<Record<'_>, RecordError> {
    if bytes.len() < RECORD_HEADER_BYTES {
        return Err(RecordError::Short);
    }
    let w0 = word(bytes, 0);
    let w1 = word(bytes, 1);
    let sum = word(bytes, 2);
    if (w1 >> 24) as u8 != RECORD_VERSION || w1 >> 32 != 0 || word(bytes, 3) != 0 {
        return Err(RecordError::Version);
    }
    let len = (w0 >> 32) as usize;
    if len > value_bytes_max.min(VALUE_BYTES_CAP) || RECORD_HEADER_BYTES + len > bytes.len() {
        return Err(RecordError::Length);
    }
    let value = &bytes[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + len];
    if checksum(w0, w1, value) != sum {
        return Err(RecordError::Checksum);
    }
    Ok(Record {
        slot: w0 as u32,
        proposal: w1 as u16,
        owner: (w1 >> 16) as u8,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    #[test]
    fn records_round_trip() {
        let mut buf = [0u8; RECORD_BYTES_CAP];
        for value in [&b""[..], b"x", b"a view: epoch 7, members 0 1 2"] {
            let used = encode_record(41, 1234, 2, value, &mut buf);
            assert_eq!(used, RECORD_HEADER_BYTES + value.len());
            let r = decode_record(&buf, 64).unwrap();
            assert_eq!(
                r,
                Record {
                    slot: 41,
                    proposal: 1234,
                    owner: 2,
                    value
                }
            );
        }
    }

    #[test]
    fn empty_torn_and_oversized_records_are_rejected() {
        let zero = [0u8; RECORD_BYTES_CAP];
        assert_eq!(decode_record(&zero, 64), Err(RecordError::Version));
        assert_eq!(decode_record(&zero[..8], 64), Err(RecordError::Short));
        let mut buf = [0u8; RECORD_BYTES_CAP];
        encode_record(3, 7, 1, b"hello world", &mut buf);
        assert_eq!(decode_record(&buf, 4), Err(RecordError::Length));
        // A record cut short by the buffer.
        assert_eq!(
            decode_record(&buf[..RECORD_HEADER_BYTES + 3], 64),
            Err(RecordError::Length)
        );
        // Every single-bit flip of header or value is caught.
        for byte in 0..RECORD_HEADER_BYTES + 11 {
            for bit in 0..8 {
                let mut t = buf;
                t[byte] ^= 1 << bit;
                assert!(decode_record(&t, 64).is_err(), "byte {byte} bit {bit}");
            }
        }
        // A value overwritten by a later record of another length (torn).
        let mut torn = buf;
        let mut other = [0u8; RECORD_BYTES_CAP];
        encode_record(3, 10, 1, b"HELLO", &mut other);
        torn[..16].copy_from_slice(&other[..16]);
        assert!(decode_record(&torn, 64).is_err());
        // Random bytes never panic.
        let mut rng = SplitMix64::new(9);
        for _ in 0..10_000 {
            let mut t = [0u8; 64];
            for b in t.iter_mut() {
                *b = rng.next_u64() as u8;
            }
            t[11] = RECORD_VERSION;
            let _ = decode_record(&t, 64);
        }
    }

    #[test]
    fn the_digest_depends_on_the_bytes() {
        assert_ne!(value_digest(b"view 1"), value_digest(b"view 2"));
        assert_eq!(value_digest(b"same"), value_digest(b"same"));
    }
}
