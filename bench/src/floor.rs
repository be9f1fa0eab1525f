//! The physical floor of this machine (issue 18 item 1): what a replicated
//! write cannot go below on shared memory.
//!
//! * **Cross-core round trip of one cache line**: two threads pinned to two
//!   cores pass a counter back and forth through one 64-byte line (each
//!   waits for the other's value, then writes the next). Half of it is the
//!   one-way latency of a store becoming visible on the other core; a
//!   replicated write needs about two such round trips (client → leader →
//!   followers' logs and back) plus copies.
//! * **memcpy** of an entry's size between two private buffers (warm
//!   caches): the copy a WRITE of that size costs on shared memory.
//!
//! Measured on the cores the benchmark itself uses (client core and the
//! replicas' core) and, when they differ, on every other pair too.

use crate::stats::Dist;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// One cache line, alone on its line.
#[repr(align(128))]
struct Line(AtomicU64);

/// The round trip between two cores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairFloor {
    /// The two cores.
    pub cores: (usize, usize),
    /// Round trips measured.
    pub round_trips: u64,
    /// Round-trip time of one cache line, in ns.
    pub rtt: Dist,
}

/// One copy size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CopyFloor {
    /// Bytes copied.
    pub bytes: usize,
    /// Nanoseconds per copy (median of batches).
    pub ns: f64,
    /// Bandwidth in GB/s (10^9 bytes per second).
    pub gb_per_s: f64,
}

/// The floor of this machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FloorReport {
    /// Every pair of cores measured; the first is the benchmark's own.
    pub pairs: Vec<PairFloor>,
    /// memcpy per entry size.
    pub copies: Vec<CopyFloor>,
}

impl FloorReport {
    /// The round-trip median of the benchmark's own core pair, in ns.
    pub fn rtt_p50_ns(&self) -> Option<f64> {
        self.pairs.first().map(|p| p.rtt.p50 as f64)
    }

    /// `latency_ns` as a multiple of the round trip, for tables.
    pub fn multiple(&self, latency_ns: u64) -> Option<f64> {
        self.rtt_p50_ns()
            .filter(|&f| f > 0.0)
            .map(|f| latency_ns as f64 / f)
    }
}

/// Measures the round trip between `a` and `b` (`round_trips` times after
/// a warm-up). The two threads spin; `a == b` measures a same-core hand
/// off, which the scheduler dominates (reported as such, never as a floor).
pub fn ping_pong(a: usize, b: usize, round_trips: u64) -> PairFloor {
    // Both sides on threads of their own: pinning the caller would leave
    // it (and every process it starts later, such as the replicas) on one
    // core.
    std::thread::spawn(move || ping_pong_pinned(a, b, round_trips))
        .join()
        .expect("ping thread")
}

fn ping_pong_pinned(a: usize, b: usize, round_trips: u64) -> PairFloor {
    let line = Arc::new(Line(AtomicU64::new(0)));
    let warm = round_trips / 10 + 100;
    let total = warm + round_trips;
    let echo = {
        let line = line.clone();
        std::thread::spawn(move || {
            let _ = core_affinity::set_for_current(core_affinity::CoreId { id: b });
            // Odd values are ours to answer with the next even one.
            let mut expect = 1u64;
            while expect < 2 * total {
                let mut spins = 0u32;
                while line.0.load(Ordering::Acquire) != expect {
                    spins += 1;
                    if a == b && spins.is_multiple_of(64) {
                        std::thread::yield_now();
                    }
                    std::hint::spin_loop();
                }
                line.0.store(expect + 1, Ordering::Release);
                expect += 2;
            }
        })
    };
    let _ = core_affinity::set_for_current(core_affinity::CoreId { id: a });
    let mut samples = Vec::with_capacity(round_trips as usize);
    for i in 0..total {
        let send = 2 * i + 1;
        let t = Instant::now();
        line.0.store(send, Ordering::Release);
        let mut spins = 0u32;
        while line.0.load(Ordering::Acquire) != send + 1 {
            spins += 1;
            if a == b && spins.is_multiple_of(64) {
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
        if i >= warm {
            samples.push(t.elapsed().as_nanos() as u64);
        }
    }
    echo.join().expect("echo thread");
    PairFloor {
        cores: (a, b),
        round_trips,
        rtt: Dist::of(&samples),
    }
}

/// Median time of a memcpy of `bytes` between two private buffers.
pub fn copy_time(bytes: usize) -> CopyFloor {
    let src = vec![0xA5u8; bytes];
    let mut dst = vec![0u8; bytes];
    // Enough copies per batch that the clock's cost disappears.
    let per_batch = (1 << 20) / bytes.max(64) + 16;
    let mut batches = Vec::with_capacity(31);
    for _ in 0..31 {
        let t = Instant::now();
        for _ in 0..per_batch {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        batches.push(t.elapsed().as_nanos() as f64 / per_batch as f64);
    }
    batches.sort_by(f64::total_cmp);
    let ns = batches[batches.len() / 2];
    CopyFloor {
        bytes,
        ns,
        gb_per_s: if ns > 0.0 { bytes as f64 / ns } else { 0.0 },
    }
}

/// The floor for the benchmark's cores (`client`, `replica`) first, then
/// every other pair of distinct cores, and copies of `sizes` bytes.
pub fn measure(client: usize, replica: usize, cores: &[usize], sizes: &[usize]) -> FloorReport {
    const ROUND_TRIPS: u64 = 200_000;
    let mut pairs = vec![ping_pong(client, replica, ROUND_TRIPS)];
    for (i, &a) in cores.iter().enumerate() {
        for &b in &cores[i + 1..] {
            let p = (a.min(b), a.max(b));
            if p != (client.min(replica), client.max(replica)) {
                pairs.push(ping_pong(a, b, ROUND_TRIPS));
            }
        }
    }
    FloorReport {
        pairs,
        copies: sizes.iter().map(|&s| copy_time(s)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_is_measured_and_ordered() {
        let p = ping_pong(0, 0, 2_000);
        assert_eq!(p.round_trips, 2_000);
        assert_eq!(p.rtt.count, 2_000);
        assert!(p.rtt.min <= p.rtt.p50 && p.rtt.p50 <= p.rtt.p90 && p.rtt.p90 <= p.rtt.max);
        assert!(p.rtt.p50 > 0);
    }

    /// The caller keeps its affinity: the replicas a benchmark starts after
    /// measuring the floor inherit it.
    #[test]
    fn measuring_does_not_pin_the_caller() {
        let before = core_affinity::get_core_ids().map(|v| v.len());
        let _ = ping_pong(0, 0, 100);
        assert_eq!(core_affinity::get_core_ids().map(|v| v.len()), before);
    }

    #[test]
    fn copies_report_bandwidth_consistent_with_time() {
        let c = copy_time(4096);
        assert_eq!(c.bytes, 4096);
        assert!(c.ns > 0.0);
        assert!((c.gb_per_s - 4096.0 / c.ns).abs() < 1e-9);
    }

    #[test]
    fn multiples_use_the_first_pair() {
        let r = FloorReport {
            pairs: vec![PairFloor {
                cores: (0, 1),
                round_trips: 1,
                rtt: Dist {
                    count: 1,
                    p50: 200,
                    ..Dist::default()
                },
            }],
            copies: vec![],
        };
        assert_eq!(r.multiple(1000), Some(5.0));
        assert_eq!(FloorReport::default().multiple(1000), None);
    }
}
