//! `workload`: YCSB-style mixes over a preloaded key space, with uniform
//! and Zipfian (θ = 0.99, Gray et al.) key choice. Closed loop: each
//! client thread issues its next request when the previous returns.
//!
//! | mix | reads | updates |
//! |---|---|---|
//! | A (update-heavy) | 50 % | 50 % |
//! | B (read-heavy) | 95 % | 5 % |
//! | C (read-only) | 100 % | 0 % |
//! | W (write-only) | 0 % | 100 % |

use crate::cluster::{BenchCluster, ClusterSpec};
use crate::measure::{run_clients, OpKind};
use crate::progress::Progress;
use crate::stats::Summary;
use crate::zipf::{KeyChooser, Zipf};
use crate::Result;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use verbatim_client::client::Wait;
use verbatim_core::rng::SplitMix64;

/// A YCSB-style mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// 50/50 read/update.
    A,
    /// 95/5 read/update.
    B,
    /// Read-only.
    C,
    /// Write-only.
    W,
}

impl Mix {
    /// All four, in report order.
    pub const ALL: [Mix; 4] = [Mix::A, Mix::B, Mix::C, Mix::W];

    /// Reads per 100 requests.
    pub fn read_percent(self) -> u64 {
        match self {
            Mix::A => 50,
            Mix::B => 95,
            Mix::C => 100,
            Mix::W => 0,
        }
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mix::A => "A update-heavy 50/50",
            Mix::B => "B read-heavy 95/5",
            Mix::C => "C read-only",
            Mix::W => "W write-only",
        }
    }

    /// Parses `a`, `b`, `c`, `w`.
    pub fn parse(s: &str) -> Option<Mix> {
        match s.to_ascii_lowercase().as_str() {
            "a" => Some(Mix::A),
            "b" => Some(Mix::B),
            "c" => Some(Mix::C),
            "w" | "write-only" => Some(Mix::W),
            _ => None,
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct WorkloadOptions {
    /// Group size.
    pub replicas: u8,
    /// Mixes.
    pub mixes: Vec<Mix>,
    /// Keys preloaded (and chosen from).
    pub keys: u64,
    /// Value size.
    pub value_bytes: usize,
    /// Client threads.
    pub clients: usize,
    /// Cores for them (round-robin; empty: unpinned).
    pub client_cores: Vec<usize>,
    /// How they wait.
    pub wait: Wait,
    /// Measured window per mix and distribution.
    pub duration: Duration,
    /// Unmeasured run before each window.
    pub warmup: Duration,
    /// Zipf skew.
    pub theta: f64,
    /// Seed of the key choosers and mixes.
    pub seed: u64,
    /// Client attempt timeout.
    pub attempt_timeout: Duration,
}

/// One mix under one key distribution.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadPoint {
    /// Mix name.
    pub mix: String,
    /// "uniform" or "zipfian".
    pub distribution: String,
    /// Client threads.
    pub clients: usize,
    /// Requests in the window.
    pub ops: u64,
    /// Requests per second.
    pub ops_per_sec: f64,
    /// Reads.
    pub reads: Summary,
    /// Updates.
    pub updates: Summary,
}

/// The `workload` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadReport {
    /// Group size.
    pub replicas: u8,
    /// Keys preloaded.
    pub keys: u64,
    /// Value size.
    pub value_bytes: usize,
    /// Zipf skew.
    pub theta: f64,
    /// Seed.
    pub seed: u64,
    /// Window per point (s).
    pub window_s: f64,
    /// Client wait mode.
    pub client_wait: String,
    /// Every point.
    pub points: Vec<WorkloadPoint>,
}

/// Runs every mix with both distributions on one preloaded cluster.
pub fn run(spec: &ClusterSpec, o: &WorkloadOptions, progress: &Progress) -> Result<WorkloadReport> {
    let cluster = BenchCluster::start(spec, o.replicas, false)?;
    let (leader, term) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
    progress.println(format!(
        "workload: {} replicas up, member {leader} leads term {term}; preloading {} keys",
        o.replicas, o.keys
    ));
    let keys = Arc::new(crate::latency::keys(o.keys.max(2)));
    let value = Arc::new(vec![b'v'; o.value_bytes]);
    progress.stage(keys.len() as u64, "workload: preload");
    {
        let mut c = cluster.shm_client(Wait::Spin, o.attempt_timeout);
        for (i, k) in keys.iter().enumerate() {
            if i % 1024 == 0 {
                crate::signals::check()?;
                progress.inc(1024);
            }
            c.set(k, &value)?;
        }
    }
    // ζ(n, θ) costs n powers: compute it once, clone per thread.
    let zipf = Zipf::new(keys.len() as u64, o.theta, o.seed);
    let mut points = Vec::new();
    for &mix in &o.mixes {
        for zipfian in [false, true] {
            let dist = if zipfian { "zipfian" } else { "uniform" };
            progress.stage(1000, format!("workload {} {dist}", mix.name()));
            let run = run_clients(
                o.clients,
                &o.client_cores,
                o.warmup,
                o.duration,
                progress,
                |t| {
                    let mut client = cluster.shm_client(o.wait, o.attempt_timeout);
                    let seed = o.seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let mut chooser = if zipfian {
                        let mut z = zipf.clone();
                        z.reseed(seed);
                        KeyChooser::Zipfian(z)
                    } else {
                        KeyChooser::uniform(keys.len() as u64, seed)
                    };
                    let mut coin = SplitMix64::new(seed.rotate_left(17));
                    let (keys, value) = (keys.clone(), value.clone());
                    let reads = mix.read_percent();
                    move || {
                        let k = &keys[chooser.next_key() as usize];
                        if coin.range_inclusive(0, 99) < reads {
                            client.get(k)?;
                            Ok(OpKind::Read)
                        } else {
                            client.set(k, &value)?;
                            Ok(OpKind::Write)
                        }
                    }
                },
                |_| {},
            )?;
            points.push(WorkloadPoint {
                mix: mix.name().into(),
                distribution: dist.into(),
                clients: o.clients,
                ops: run.ops(),
                ops_per_sec: run.ops() as f64 / run.window.as_secs_f64().max(1e-9),
                reads: Summary::of(&run.reads),
                updates: Summary::of(&run.writes),
            });
        }
    }
    Ok(WorkloadReport {
        replicas: o.replicas,
        keys: o.keys,
        value_bytes: o.value_bytes,
        theta: o.theta,
        seed: o.seed,
        window_s: o.duration.as_secs_f64(),
        client_wait: crate::cluster::wait_name(o.wait).into(),
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_have_the_ycsb_proportions() {
        assert_eq!(Mix::A.read_percent(), 50);
        assert_eq!(Mix::B.read_percent(), 95);
        assert_eq!(Mix::C.read_percent(), 100);
        assert_eq!(Mix::W.read_percent(), 0);
        assert_eq!(Mix::parse("B"), Some(Mix::B));
        assert_eq!(Mix::parse("x"), None);
    }
}
