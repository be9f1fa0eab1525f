//! A small, fast 64-bit checksum used to validate memory that peers write
//! behind our back (SST rows, log entries, the adjustment list).
//!
//! It is not cryptographic: it only has to make a torn or stale copy fail
//! validation with overwhelming probability. Word-at-a-time multiply/rotate
//! keeps it cheap for 4 KiB payloads on the replication hot path.

const K1: u64 = 0x9E37_79B9_7F4A_7C15;
const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// Final avalanche (from SplitMix64), so that a single flipped bit changes
/// about half of the output bits.
#[inline]
pub const fn mix64(mut h: u64) -> u64 {
    h ^= h >> 30;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

/// Incremental checksum over words and bytes.
#[derive(Clone, Copy, Debug)]
pub struct Checksum {
    state: u64,
    length_bytes: u64,
}

impl Checksum {
    /// Starts a checksum; `domain` separates uses (rows, entries, lists) so
    /// that a row can never validate as an entry.
    #[inline]
    pub const fn new(domain: u64) -> Self {
        Checksum {
            state: domain ^ K1,
            length_bytes: 0,
        }
    }

    /// Adds one 64-bit word.
    #[inline]
    pub fn word(&mut self, word: u64) {
        self.state = (self.state ^ word.wrapping_mul(K2))
            .rotate_left(29)
            .wrapping_mul(K1);
        self.length_bytes = self.length_bytes.wrapping_add(8);
    }

    /// Adds bytes; a trailing partial word is zero-padded (the length is
    /// mixed in by [`Checksum::finish`], so padding cannot collide).
    pub fn bytes(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            self.state = (self.state ^ u64::from_le_bytes(w).wrapping_mul(K2))
                .rotate_left(29)
                .wrapping_mul(K1);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.state = (self.state ^ u64::from_le_bytes(w).wrapping_mul(K2))
                .rotate_left(29)
                .wrapping_mul(K1);
        }
        self.length_bytes = self.length_bytes.wrapping_add(bytes.len() as u64);
    }

    /// The checksum value. Never returns 0, so an all-zero (never written)
    /// record can never validate.
    #[inline]
    pub fn finish(self) -> u64 {
        let h = mix64(self.state ^ self.length_bytes.wrapping_mul(K2));
        if h == 0 {
            K1
        } else {
            h
        }
    }
}

/// Checksum of a word slice in one call.
pub fn checksum_words(domain: u64, words: &[u64]) -> u64 {
    let mut c = Checksum::new(domain);
    for &w in words {
        c.word(w);
    }
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_flips_change_the_checksum() {
        let base = [1u64, 2, 3, 4, 5];
        let c0 = checksum_words(7, &base);
        for i in 0..base.len() {
            for bit in 0..64 {
                let mut w = base;
                w[i] ^= 1 << bit;
                assert_ne!(checksum_words(7, &w), c0, "word {i} bit {bit}");
            }
        }
    }

    #[test]
    fn domain_and_length_are_mixed_in() {
        assert_ne!(checksum_words(1, &[5]), checksum_words(2, &[5]));
        let mut a = Checksum::new(1);
        a.bytes(&[1, 0, 0]);
        let mut b = Checksum::new(1);
        b.bytes(&[1]);
        assert_ne!(a.finish(), b.finish());
        assert_ne!(Checksum::new(0).finish(), 0);
    }
}
