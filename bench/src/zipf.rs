//! Key choosers for the YCSB-style workloads: uniform, and Zipfian by the
//! method of Gray et al., "Quickly Generating Billion-Record Synthetic
//! Databases" (SIGMOD 1994), as YCSB's `ZipfianGenerator` implements it.
//!
//! Rank 0 is the hottest key: P(rank = i) = 1 / ((i + 1)^θ · ζ(n, θ)).
//! The generator is exact for ranks 0 and 1 and approximates the rest by
//! inverting the continuous distribution; it is seeded, so one seed gives
//! one sequence.

use verbatim_core::rng::SplitMix64;

/// Uniform in `[0, 1)` from 53 random bits.
pub fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// ζ(n, θ) = Σ_{i=1..n} 1 / i^θ.
pub fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// A Zipfian generator over ranks `0..n`.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    half_pow_theta: f64,
    rng: SplitMix64,
}

impl Zipf {
    /// YCSB's default skew.
    pub const THETA_YCSB: f64 = 0.99;

    /// A generator over `n ≥ 2` ranks with skew `0 < θ < 1`, seeded.
    pub fn new(n: u64, theta: f64, seed: u64) -> Zipf {
        assert!(n >= 2, "a Zipf distribution needs at least two ranks");
        assert!(
            theta > 0.0 && theta < 1.0,
            "Gray et al.'s method needs 0 < theta < 1"
        );
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2, theta);
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
            half_pow_theta: 0.5f64.powf(theta),
            rng: SplitMix64::new(seed),
        }
    }

    /// Restarts the random sequence from `seed` (ζ is kept: it costs n
    /// powers to compute).
    pub fn reseed(&mut self, seed: u64) {
        self.rng = SplitMix64::new(seed);
    }

    /// Number of ranks.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// The exact probability of rank `i`.
    pub fn probability(&self, i: u64) -> f64 {
        1.0 / ((i + 1) as f64).powf(self.theta) / self.zetan
    }

    /// The next rank.
    pub fn next_rank(&mut self) -> u64 {
        let u = unit(&mut self.rng);
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1;
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// How keys are chosen.
#[derive(Clone, Debug)]
pub enum KeyChooser {
    /// Every key equally likely.
    Uniform {
        /// Keys.
        n: u64,
        /// The generator.
        rng: SplitMix64,
    },
    /// Zipfian (rank 0 hottest).
    Zipfian(Zipf),
}

impl KeyChooser {
    /// Uniform over `n` keys.
    pub fn uniform(n: u64, seed: u64) -> KeyChooser {
        KeyChooser::Uniform {
            n,
            rng: SplitMix64::new(seed),
        }
    }

    /// The next key index.
    pub fn next_key(&mut self) -> u64 {
        match self {
            KeyChooser::Uniform { n, rng } => rng.range_inclusive(0, *n - 1),
            KeyChooser::Zipfian(z) => z.next_rank(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_sequence() {
        let mut a = Zipf::new(1000, 0.99, 42);
        let mut b = Zipf::new(1000, 0.99, 42);
        let mut c = Zipf::new(1000, 0.99, 43);
        let sa: Vec<u64> = (0..1000).map(|_| a.next_rank()).collect();
        let sb: Vec<u64> = (0..1000).map(|_| b.next_rank()).collect();
        let sc: Vec<u64> = (0..1000).map(|_| c.next_rank()).collect();
        assert_eq!(sa, sb);
        assert_ne!(sa, sc);
        assert!(sa.iter().all(|&r| r < 1000));
    }

    #[test]
    fn the_top_keys_have_the_zipfian_frequencies() {
        // 100k keys, θ = 0.99 (YCSB): key 0 gets 1/ζ(n, θ) ≈ 8 % of draws.
        let n = 100_000;
        let mut z = Zipf::new(n, Zipf::THETA_YCSB, 7);
        let draws = 400_000u64;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            counts[z.next_rank() as usize] += 1;
        }
        let p0 = z.probability(0);
        assert!((0.07..0.09).contains(&p0), "p0 = {p0}");
        for rank in [0u64, 1] {
            let want = z.probability(rank);
            let got = counts[rank as usize] as f64 / draws as f64;
            assert!(
                (got - want).abs() / want < 0.05,
                "rank {rank}: got {got:.4}, want {want:.4}"
            );
        }
        // Skewed: the hottest 1 % of keys take far more than 1 % of the
        // draws (about 60 % for θ = 0.99), and frequencies fall with rank.
        let top: u64 = counts[..1000].iter().sum();
        let share = top as f64 / draws as f64;
        assert!((0.5..0.7).contains(&share), "top 1 % share {share}");
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[1000]);
    }

    #[test]
    fn uniform_keys_cover_the_space_evenly() {
        let mut k = KeyChooser::uniform(10, 3);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[k.next_key() as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn unit_is_in_range() {
        let mut r = SplitMix64::new(1);
        for _ in 0..10_000 {
            let u = unit(&mut r);
            assert!((0.0..1.0).contains(&u));
        }
    }
}
