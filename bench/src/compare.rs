//! `compare`: the same single-client, sequential latency measurement, in
//! the same run, against Redis (a primary with two replicas) and against
//! Verbatim on both of its paths (RESP over TCP to the leader's port, and
//! the shared-memory client), reported as ratios (MacR §IV compares
//! against Redis the same way).
//!
//! Redis's replicated write is `SET` followed by `WAIT 2 0` (block until
//! both replicas acknowledged), measured two ways: `set+wait`, both
//! commands in one write, timed until WAIT's reply (the cheapest way to
//! issue them, and the one the ratios' goal uses); and `set;wait`, two
//! round trips (WAIT sent once SET answered), as a client without
//! pipelining does.
//! Redis runs first (with nothing else running), then Verbatim; Redis
//! servers are pinned to the replicas' cores and the client to the same
//! core as Verbatim's client. The RESP client code is the same for both.

use crate::cluster::{BenchCluster, ClusterSpec};
use crate::measure::sequential;
use crate::progress::Progress;
use crate::redis::{find_redis_server, redis_version, RedisGroup, REDIS_MISSING};
use crate::resp::{Reply, RespConn};
use crate::stats::{cdf, CdfPoint, Summary};
use crate::{BenchError, Result};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use verbatim_client::client::Wait;

/// What to measure.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Value sizes.
    pub value_sizes: Vec<usize>,
    /// Measured requests per series.
    pub ops: u64,
    /// Warm-up requests per series.
    pub warmup: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Verbatim group size.
    pub replicas: u8,
    /// Redis replicas of the primary.
    pub redis_replicas: usize,
    /// Core of the client thread.
    pub client_core: Option<usize>,
    /// Cores for the Redis servers (the replicas' cores).
    pub server_cores: Vec<usize>,
    /// Shared-memory client wait mode.
    pub wait: Wait,
    /// Shared-memory client attempt timeout.
    pub attempt_timeout: Duration,
    /// RESP client: poll a non-blocking socket instead of sleeping.
    pub tcp_spin: bool,
    /// Keep every vCPU busy with SCHED_IDLE spinners during the run.
    pub keep_busy: bool,
    /// Skip Redis even if installed.
    pub skip_redis: bool,
}

/// One measured series.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompareSeries {
    /// "redis" or "verbatim".
    pub system: String,
    /// "resp-tcp" or "shm".
    pub path: String,
    /// "set", "set+wait" or "get".
    pub op: String,
    /// Value size.
    pub value_bytes: usize,
    /// Latency.
    pub latency: Summary,
    /// Its CDF.
    pub cdf: Vec<CdfPoint>,
}

/// A ratio of two series' latencies: above 1, the denominator is faster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// Value size.
    pub value_bytes: usize,
    /// The slower side, e.g. "redis set+wait".
    pub numerator: String,
    /// The other, e.g. "verbatim shm set".
    pub denominator: String,
    /// Ratio of medians.
    pub p50: f64,
    /// Ratio of 99th percentiles.
    pub p99: f64,
}

/// The `compare` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompareReport {
    /// `redis-server --version`, when Redis ran.
    pub redis_version: Option<String>,
    /// Why Redis was skipped, if it was.
    pub redis_skipped: Option<String>,
    /// Redis replicas.
    pub redis_replicas: usize,
    /// Verbatim group size.
    pub replicas: u8,
    /// Measured requests per series.
    pub ops_per_series: u64,
    /// How the RESP client waits: "blocking read" or "spinning".
    pub tcp_client: String,
    /// "idle" (nothing else runs) or "kept busy (SCHED_IDLE spinners)".
    pub vcpus: String,
    /// How Redis's replicated write is issued.
    pub redis_wait: String,
    /// Every series.
    pub series: Vec<CompareSeries>,
    /// Ratios.
    pub ratios: Vec<Ratio>,
}

impl CompareReport {
    /// The series (system, path, op, size).
    pub fn get(&self, system: &str, path: &str, op: &str, size: usize) -> Option<&CompareSeries> {
        self.series
            .iter()
            .find(|s| s.system == system && s.path == path && s.op == op && s.value_bytes == size)
    }
}

/// SCHED_IDLE spinners, one per core: they run only when nothing else
/// wants the CPU, so the vCPUs never halt (no wake-up latency) without
/// taking time from the measured processes.
pub struct Spinners {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Spinners {
    /// One spinner per core in `cores`.
    pub fn start(cores: &[usize]) -> Spinners {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = cores
            .iter()
            .map(|&c| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    crate::cluster::pin_current(Some(c));
                    let p = libc::sched_param { sched_priority: 0 };
                    // SAFETY: sets this thread's policy; a valid param.
                    unsafe {
                        libc::sched_setscheduler(0, libc::SCHED_IDLE, &p);
                    }
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Spinners { stop, threads }
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn series(
    system: &str,
    path: &str,
    op: &str,
    size: usize,
    h: &hdrhistogram::Histogram<u64>,
) -> CompareSeries {
    CompareSeries {
        system: system.into(),
        path: path.into(),
        op: op.into(),
        value_bytes: size,
        latency: Summary::of(h),
        cdf: cdf(h),
    }
}

fn resp_err(addr: &str, m: String) -> BenchError {
    BenchError::Resp {
        addr: addr.to_string(),
        message: m,
    }
}

/// SET, optionally SET+WAIT, and GET over RESP against `addr`.
fn measure_resp(
    system: &'static str,
    addr: String,
    o: &CompareOptions,
    wait_replicas: Option<usize>,
    progress: &Progress,
) -> Result<Vec<CompareSeries>> {
    let o = o.clone();
    let pr = progress.clone();
    crate::cluster::run_pinned(o.client_core, move || -> Result<Vec<CompareSeries>> {
        let mut c = RespConn::connect(&addr, o.tcp_spin)?;
        let keys = crate::latency::keys(o.keys.max(1));
        let k = |i: u64| keys[(i % keys.len() as u64) as usize].as_slice();
        let mut out = Vec::new();
        for &size in &o.value_sizes {
            let value = vec![b'v'; size];
            for key in &keys {
                c.expect_ok(&[b"SET", key, &value])?;
            }
            pr.stage(o.ops * 4, format!("compare {system} resp {size} B"));
            let set = sequential(o.ops, o.warmup, None, &pr, |i| {
                match c.command(&[b"SET", k(i), &value])? {
                    Reply::Simple(_) => Ok(()),
                    r => Err(resp_err(&addr, format!("SET answered {r:?}"))),
                }
            })?;
            out.push(series(system, "resp-tcp", "set", size, &set.latency));
            if let Some(n) = wait_replicas {
                let n_text = n.to_string();
                let wait = sequential(o.ops, o.warmup, None, &pr, |i| {
                    let r = c.pipeline(&[
                        &[b"SET", k(i), &value],
                        &[b"WAIT", n_text.as_bytes(), b"0"],
                    ])?;
                    match r.as_slice() {
                        [Reply::Simple(_), Reply::Int(acked)] if *acked >= n as i64 => Ok(()),
                        other => Err(resp_err(&addr, format!("SET+WAIT answered {other:?}"))),
                    }
                })?;
                out.push(series(system, "resp-tcp", "set+wait", size, &wait.latency));
                // The same, as two round trips (SET, then WAIT once SET
                // answered), the way a client without pipelining does it.
                let two = sequential(o.ops, o.warmup, None, &pr, |i| {
                    match c.command(&[b"SET", k(i), &value])? {
                        Reply::Simple(_) => {}
                        r => return Err(resp_err(&addr, format!("SET answered {r:?}"))),
                    }
                    match c.command(&[b"WAIT", n_text.as_bytes(), b"0"])? {
                        Reply::Int(acked) if acked >= n as i64 => Ok(()),
                        r => Err(resp_err(&addr, format!("WAIT answered {r:?}"))),
                    }
                })?;
                out.push(series(system, "resp-tcp", "set;wait", size, &two.latency));
            }
            let get = sequential(o.ops, o.warmup, None, &pr, |i| {
                match c.command(&[b"GET", k(i)])? {
                    Reply::Bulk(Some(v)) if v.len() == size => Ok(()),
                    r => Err(resp_err(&addr, format!("GET answered {r:?}"))),
                }
            })?;
            out.push(series(system, "resp-tcp", "get", size, &get.latency));
        }
        Ok(out)
    })
}

/// The ratios of one value size.
pub fn ratios(series: &[CompareSeries], size: usize) -> Vec<Ratio> {
    let find = |sys: &str, path: &str, op: &str| {
        series
            .iter()
            .find(|s| s.system == sys && s.path == path && s.op == op && s.value_bytes == size)
    };
    let pairs = [
        (
            ("redis", "resp-tcp", "set+wait"),
            ("verbatim", "shm", "set"),
        ),
        (
            ("redis", "resp-tcp", "set;wait"),
            ("verbatim", "shm", "set"),
        ),
        (("redis", "resp-tcp", "set"), ("verbatim", "shm", "set")),
        (("redis", "resp-tcp", "get"), ("verbatim", "shm", "get")),
        (
            ("redis", "resp-tcp", "set+wait"),
            ("verbatim", "resp-tcp", "set"),
        ),
        (
            ("redis", "resp-tcp", "set;wait"),
            ("verbatim", "resp-tcp", "set"),
        ),
        (
            ("redis", "resp-tcp", "set"),
            ("verbatim", "resp-tcp", "set"),
        ),
        (
            ("redis", "resp-tcp", "get"),
            ("verbatim", "resp-tcp", "get"),
        ),
    ];
    pairs
        .iter()
        .filter_map(|(a, b)| {
            let (x, y) = (find(a.0, a.1, a.2)?, find(b.0, b.1, b.2)?);
            let r = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
            Some(Ratio {
                value_bytes: size,
                numerator: format!("{} {} {}", a.0, a.1, a.2),
                denominator: format!("{} {} {}", b.0, b.1, b.2),
                p50: r(x.latency.p50_ns, y.latency.p50_ns),
                p99: r(x.latency.p99_ns, y.latency.p99_ns),
            })
        })
        .collect()
}

/// Runs the comparison.
pub fn run(spec: &ClusterSpec, o: &CompareOptions, progress: &Progress) -> Result<CompareReport> {
    let _spinners = o
        .keep_busy
        .then(|| Spinners::start(&crate::cluster::core_ids()));
    let mut out = CompareReport {
        redis_replicas: o.redis_replicas,
        replicas: o.replicas,
        ops_per_series: o.ops,
        tcp_client: if o.tcp_spin {
            "spinning on a non-blocking socket"
        } else {
            "blocking read"
        }
        .into(),
        vcpus: if o.keep_busy {
            "kept busy (SCHED_IDLE spinner on every core)"
        } else {
            "idle (nothing else runs; the benchmark's own spinning client and leader aside)"
        }
        .into(),
        redis_wait: format!(
            "set+wait: SET and WAIT {0} 0 in one write, timed to WAIT's reply; \
             set;wait: SET, then WAIT {0} 0 after SET's reply (two round trips)",
            o.redis_replicas
        ),
        ..CompareReport::default()
    };
    match (o.skip_redis, find_redis_server()) {
        (true, _) => out.redis_skipped = Some("skipped (--no-redis)".into()),
        (false, None) => {
            progress.println(REDIS_MISSING);
            out.redis_skipped = Some(REDIS_MISSING.into());
        }
        (false, Some(server)) => {
            out.redis_version = Some(redis_version(&server));
            let group = RedisGroup::start(&server, o.redis_replicas, &o.server_cores)?;
            progress.println(format!(
                "compare: Redis primary on {} with {} replicas in sync",
                group.primary_addr(),
                o.redis_replicas
            ));
            let mut s = measure_resp(
                "redis",
                group.primary_addr(),
                o,
                Some(o.redis_replicas),
                progress,
            )?;
            out.series.append(&mut s);
            drop(group);
        }
    }
    let cluster = BenchCluster::start(spec, o.replicas, true)?;
    let (leader, term) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
    progress.println(format!(
        "compare: {} Verbatim replicas up, member {leader} leads term {term}",
        o.replicas
    ));
    let addr = cluster
        .resp_addr(leader)
        .ok_or_else(|| BenchError::Cluster("the leader has no RESP address".into()))?;
    let mut s = measure_resp("verbatim", addr, o, None, progress)?;
    out.series.append(&mut s);
    // The shared-memory path, same keys and sizes.
    let manifest = cluster.local().manifest.clone();
    let o2 = o.clone();
    let pr = progress.clone();
    let mut s =
        crate::cluster::run_pinned(o.client_core, move || -> Result<Vec<CompareSeries>> {
            let mut client = verbatim_client::client::Client::new(
                &manifest,
                crate::cluster::shm_options(o2.wait, o2.attempt_timeout),
            );
            let keys = crate::latency::keys(o2.keys.max(1));
            let k = |i: u64| keys[(i % keys.len() as u64) as usize].as_slice();
            let mut out = Vec::new();
            for &size in &o2.value_sizes {
                let value = vec![b'v'; size];
                pr.stage(o2.ops * 2, format!("compare verbatim shm {size} B"));
                let set = sequential(o2.ops, o2.warmup, None, &pr, |i| {
                    client.set(k(i), &value).map_err(Into::into)
                })?;
                let get = sequential(o2.ops, o2.warmup, None, &pr, |i| {
                    client.get(k(i)).map(|_| ()).map_err(Into::into)
                })?;
                out.push(series("verbatim", "shm", "set", size, &set.latency));
                out.push(series("verbatim", "shm", "get", size, &get.latency));
            }
            Ok(out)
        })?;
    out.series.append(&mut s);
    drop(cluster);
    for &size in &o.value_sizes {
        let mut r = ratios(&out.series, size);
        out.ratios.append(&mut r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(system: &str, path: &str, op: &str, p50: u64, p99: u64) -> CompareSeries {
        CompareSeries {
            system: system.into(),
            path: path.into(),
            op: op.into(),
            value_bytes: 64,
            latency: Summary {
                p50_ns: p50,
                p99_ns: p99,
                ..Summary::default()
            },
            cdf: Vec::new(),
        }
    }

    #[test]
    fn ratios_divide_redis_by_verbatim() {
        let all = vec![
            s("redis", "resp-tcp", "set+wait", 250_000, 500_000),
            s("redis", "resp-tcp", "set", 100_000, 200_000),
            s("redis", "resp-tcp", "get", 70_000, 140_000),
            s("verbatim", "shm", "set", 2_000, 10_000),
            s("verbatim", "shm", "get", 1_000, 5_000),
        ];
        let r = ratios(&all, 64);
        assert_eq!(r.len(), 3, "no TCP series, no TCP ratios, no set;wait");
        assert_eq!(r[0].numerator, "redis resp-tcp set+wait");
        assert_eq!(r[0].denominator, "verbatim shm set");
        assert_eq!(r[0].p50, 125.0);
        assert_eq!(r[0].p99, 50.0);
        assert_eq!(r[2].p50, 70.0);
        let mut all = all;
        all.push(s("redis", "resp-tcp", "set;wait", 400_000, 800_000));
        let r = ratios(&all, 64);
        assert_eq!(r.len(), 4);
        assert_eq!(r[1].numerator, "redis resp-tcp set;wait");
        assert_eq!(r[1].p50, 200.0);
        assert!(ratios(&all, 128).is_empty());
    }
}
