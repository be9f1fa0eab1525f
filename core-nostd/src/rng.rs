//! Seeded pseudo-random numbers: the core never reads an RNG of the
//! platform; the seed comes from the configuration (or the simulator).

/// SplitMix64: tiny, fast, full-period, good enough to randomize timeouts.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator with the given seed.
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        crate::checksum::mix64(self.state)
    }

    /// Uniform in `[low, high]` (inclusive); `low` when the range is empty.
    pub fn range_inclusive(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        let span = high - low;
        if span == u64::MAX {
            return self.next_u64();
        }
        // Multiply-shift maps 64 random bits onto the span without a division
        // and with negligible bias for the spans used here (timeouts).
        low + ((u128::from(self.next_u64()) * u128::from(span + 1)) >> 64) as u64
    }

    /// True with probability `numerator / denominator`.
    pub fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        denominator != 0 && self.range_inclusive(0, denominator - 1) < numerator
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_ranges_hold() {
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        for _ in 0..1000 {
            let x = a.range_inclusive(10, 20);
            assert_eq!(x, b.range_inclusive(10, 20));
            assert!((10..=20).contains(&x));
        }
        let mut c = SplitMix64::new(43);
        assert_ne!(SplitMix64::new(42).next_u64(), c.next_u64());
        assert_eq!(c.range_inclusive(5, 5), 5);
        assert_eq!(c.range_inclusive(9, 5), 9);
    }

    #[test]
    fn range_covers_both_ends() {
        let mut r = SplitMix64::new(1);
        let (mut lo, mut hi) = (false, false);
        for _ in 0..10_000 {
            match r.range_inclusive(0, 3) {
                0 => lo = true,
                3 => hi = true,
                _ => {}
            }
        }
        assert!(lo && hi);
    }
}
