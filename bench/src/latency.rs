//! `latency`: one client, sequential SETs then GETs, per value size and
//! group size (DARE §6, figure 8). Every point: a warm-up, then N
//! requests over a fixed set of keys, each latency recorded in an HDR
//! histogram.

use crate::cluster::{BenchCluster, ClusterSpec};
use crate::measure::sequential;
use crate::progress::Progress;
use crate::stats::{cdf, CdfPoint, Summary};
use crate::Result;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use verbatim_client::client::Wait;

/// Value sizes of the standard sweep (bytes).
pub const SIZES_DEFAULT: [usize; 10] = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

/// Writes run on each new cluster before its first point.
pub const CLUSTER_WARMUP: Duration = Duration::from_millis(300);

/// What to measure.
#[derive(Clone, Debug)]
pub struct LatencyOptions {
    /// Group sizes (a cluster each).
    pub group_sizes: Vec<u8>,
    /// Value sizes (bytes).
    pub value_sizes: Vec<usize>,
    /// Measured requests per point.
    pub ops: u64,
    /// Unmeasured requests before each point.
    pub warmup: u64,
    /// Distinct keys the requests cycle through.
    pub keys: u64,
    /// Open loop at this many requests per second (None: closed loop).
    pub rate_per_s: Option<f64>,
    /// Core of the client thread.
    pub client_core: Option<usize>,
    /// How the client waits for replies.
    pub wait: Wait,
    /// Client attempt timeout.
    pub attempt_timeout: Duration,
}

/// One measured series.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyPoint {
    /// Group size.
    pub replicas: u8,
    /// Value size (bytes of the value).
    pub value_bytes: usize,
    /// "set" or "get".
    pub op: String,
    /// Latency: per request (closed loop) or from the intended start
    /// (open loop).
    pub latency: Summary,
    /// Open loop only: from the actual send.
    pub service: Option<Summary>,
    /// Achieved requests per second.
    pub ops_per_sec: f64,
    /// CDF points of `latency`.
    pub cdf: Vec<CdfPoint>,
}

/// The `latency` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyReport {
    /// "closed-loop" or "open-loop".
    pub mode: String,
    /// Open loop: the scheduled rate.
    pub rate_per_s: Option<f64>,
    /// Measured requests per point.
    pub ops_per_point: u64,
    /// Warm-up requests per point.
    pub warmup_per_point: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Every series.
    pub points: Vec<LatencyPoint>,
}

impl LatencyReport {
    /// The series for (replicas, size, op), if measured.
    pub fn point(&self, replicas: u8, value_bytes: usize, op: &str) -> Option<&LatencyPoint> {
        self.points
            .iter()
            .find(|p| p.replicas == replicas && p.value_bytes == value_bytes && p.op == op)
    }
}

/// `key:00000042`-style keys.
pub fn keys(n: u64) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("key:{i:08}").into_bytes()).collect()
}

/// Runs the sweep.
pub fn run(spec: &ClusterSpec, o: &LatencyOptions, progress: &Progress) -> Result<LatencyReport> {
    let mut points = Vec::new();
    for &n in &o.group_sizes {
        let cluster = BenchCluster::start(spec, n, false)?;
        let (leader, term) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
        progress.println(format!(
            "latency: {n} replicas up, member {leader} leads term {term}"
        ));
        let manifest = cluster.local().manifest.clone();
        let o2 = o.clone();
        let pr = progress.clone();
        let mut got =
            crate::cluster::run_pinned(o.client_core, move || -> Result<Vec<LatencyPoint>> {
                let mut client = verbatim_client::client::Client::new(
                    &manifest,
                    crate::cluster::shm_options(o2.wait, o2.attempt_timeout),
                );
                let keys = keys(o2.keys.max(1));
                // A fresh cluster is slower for its first few hundred ms
                // (page faults in the log ring and the store, cold caches):
                // run it in before the first point.
                let warm = vec![b'w'; 64];
                let began = std::time::Instant::now();
                let mut i = 0usize;
                while began.elapsed() < CLUSTER_WARMUP {
                    crate::signals::check()?;
                    client.set(&keys[i % keys.len()], &warm)?;
                    i += 1;
                }
                let mut out = Vec::new();
                for &size in &o2.value_sizes {
                    let value = vec![b'v'; size];
                    pr.stage(o2.ops * 2, format!("latency {n} replicas, {size} B"));
                    let k = |i: u64| &keys[(i % keys.len() as u64) as usize];
                    // Every key holds a value of this size before the GETs
                    // (and the log has seen this size before the SETs).
                    for key in &keys {
                        client.set(key, &value)?;
                    }
                    let w = sequential(o2.ops, o2.warmup, o2.rate_per_s, &pr, |i| {
                        client.set(k(i), &value).map_err(Into::into)
                    })?;
                    let r = sequential(o2.ops, o2.warmup, o2.rate_per_s, &pr, |i| {
                        match client.get(k(i))? {
                            Some(v) if v.len() == size => Ok(()),
                            other => Err(crate::BenchError::Cluster(format!(
                                "GET returned {:?} bytes, wrote {size}",
                                other.map(|v| v.len())
                            ))),
                        }
                    })?;
                    for (op, s) in [("set", w), ("get", r)] {
                        out.push(LatencyPoint {
                            replicas: n,
                            value_bytes: size,
                            op: op.into(),
                            latency: Summary::of(&s.latency),
                            service: s.service.as_ref().map(Summary::of),
                            ops_per_sec: o2.ops as f64 / s.elapsed.as_secs_f64().max(1e-9),
                            cdf: cdf(&s.latency),
                        });
                    }
                }
                Ok(out)
            })?;
        points.append(&mut got);
        drop(cluster);
    }
    Ok(LatencyReport {
        mode: if o.rate_per_s.is_some() {
            "open-loop"
        } else {
            "closed-loop"
        }
        .into(),
        rate_per_s: o.rate_per_s,
        ops_per_point: o.ops,
        warmup_per_point: o.warmup,
        keys: o.keys,
        points,
    })
}
