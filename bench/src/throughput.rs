//! `throughput`: 1 to N client threads in a closed loop, all SETs, then
//! all GETs, for a fixed time per point (DARE §6, figure 9); then one
//! client thread with a pipeline of D requests in flight (each lane a
//! sequential client of its own, so exactly-once is unchanged). Batching
//! is made visible from the leader's counters over the measured window:
//! reads served per read round (one round of row reads confirms every
//! read queued behind it) and log entries per replication batch (one
//! WRITE of the entries and one of the tail to a follower).

use crate::cluster::{BenchCluster, ClusterSpec};
use crate::measure::{run_clients_recording, OpKind};
use crate::progress::Progress;
use crate::stats::Summary;
use crate::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use verbatim_client::client::Wait;

/// Counter names that, if the status has one, count replication batches
/// (one WRITE of entries plus the tail to one follower).
pub const BATCH_COUNTERS: [&str; 4] = [
    "log_batches",
    "replication_batches",
    "entry_batches",
    "batches",
];

/// What to measure.
#[derive(Clone, Debug)]
pub struct ThroughputOptions {
    /// Group size.
    pub replicas: u8,
    /// Largest number of client threads (points are 1..=this).
    pub clients_max: usize,
    /// Measured window per point.
    pub duration: Duration,
    /// Unmeasured run before each window.
    pub warmup: Duration,
    /// Value size (bytes).
    pub value_bytes: usize,
    /// Distinct keys.
    pub keys: u64,
    /// How clients wait (None: spin when every client has a core of its
    /// own, else yield so that clients sharing a core take turns).
    pub wait: Option<Wait>,
    /// Client attempt timeout.
    pub attempt_timeout: Duration,
    /// Cores for the client threads (round-robin; empty: unpinned).
    pub client_cores: Vec<usize>,
    /// Pipeline depths measured with one client thread (empty: none).
    pub pipeline_depths: Vec<usize>,
}

/// Batching seen on the leader over one window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Batching {
    /// Log entries the leader appended.
    pub entries_appended: u64,
    /// Reads the leader served.
    pub reads_served: u64,
    /// Read rounds (term confirmations) completed.
    pub read_rounds: u64,
    /// Reads per round (1.0 = no batching).
    pub reads_per_round: Option<f64>,
    /// The replication-batch counter used, if the status has one.
    pub batch_counter: Option<String>,
    /// Replication batches posted (all followers).
    pub replication_batches: Option<u64>,
    /// Entries per batch to one follower (1.0 = no batching).
    pub entries_per_batch: Option<f64>,
}

/// The difference of two counter snapshots.
pub fn batching(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    followers: u64,
) -> Batching {
    let d = |k: &str| {
        after
            .get(k)
            .copied()
            .unwrap_or(0)
            .saturating_sub(before.get(k).copied().unwrap_or(0))
    };
    let ratio = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
    let entries = d("entries_appended");
    let reads = d("reads_served");
    let rounds = d("read_rounds");
    let counter = BATCH_COUNTERS
        .iter()
        .find(|k| after.contains_key(**k))
        .map(|k| k.to_string());
    let batches = counter.as_deref().map(d);
    Batching {
        entries_appended: entries,
        reads_served: reads,
        read_rounds: rounds,
        reads_per_round: ratio(reads, rounds),
        entries_per_batch: batches.and_then(|b| ratio(entries * followers.max(1), b)),
        batch_counter: counter,
        replication_batches: batches,
    }
}

/// One point.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThroughputPoint {
    /// Client threads.
    pub clients: usize,
    /// Requests each thread keeps in flight (1: synchronous client).
    #[serde(default = "one")]
    pub depth: usize,
    /// "set" or "get".
    pub op: String,
    /// Requests completed in the window.
    pub ops: u64,
    /// Window (s).
    pub window_s: f64,
    /// Requests per second.
    pub ops_per_sec: f64,
    /// Per-request latency.
    pub latency: Summary,
    /// The leader's batching.
    pub batching: Batching,
}

fn one() -> usize {
    1
}

impl ThroughputPoint {
    /// Requests in flight: threads × depth.
    pub fn in_flight(&self) -> usize {
        self.clients * self.depth.max(1)
    }

    /// "2 set" for two synchronous clients, "1×16 set" for one thread with
    /// a pipeline of 16.
    pub fn label(&self) -> String {
        if self.depth > 1 {
            format!("{}×{} {}", self.clients, self.depth, self.op)
        } else {
            format!("{} {}", self.clients, self.op)
        }
    }
}

/// The `throughput` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThroughputReport {
    /// Group size.
    pub replicas: u8,
    /// Value size.
    pub value_bytes: usize,
    /// Where client threads ran.
    pub client_placement: String,
    /// How they waited.
    pub client_wait: String,
    /// Window per point (s).
    pub window_s: f64,
    /// Every point.
    pub points: Vec<ThroughputPoint>,
    /// How the pipelined points were measured (or why there are none).
    pub pipelined: String,
    /// Batching caveats (missing counters).
    pub notes: Vec<String>,
}

impl ThroughputReport {
    /// The highest rate measured for `op`.
    pub fn max_rate(&self, op: &str) -> Option<&ThroughputPoint> {
        self.points
            .iter()
            .filter(|p| p.op == op)
            .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
    }
}

/// The wait mode for `clients` threads on `cores`.
pub fn auto_wait(clients: usize, cores: &[usize]) -> Wait {
    if !cores.is_empty() && clients <= cores.len() {
        Wait::Spin
    } else {
        Wait::Yield
    }
}

/// Runs the sweep.
pub fn run(
    spec: &ClusterSpec,
    o: &ThroughputOptions,
    progress: &Progress,
) -> Result<ThroughputReport> {
    let cluster = BenchCluster::start(spec, o.replicas, false)?;
    let (mut leader, mut term) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
    progress.println(format!(
        "throughput: {} replicas up, member {leader} leads term {term}",
        o.replicas
    ));
    let keys = std::sync::Arc::new(crate::latency::keys(o.keys.max(1)));
    let value = std::sync::Arc::new(vec![b'v'; o.value_bytes]);
    // Every key exists before the GET points.
    {
        let mut c = cluster.shm_client(Wait::Yield, o.attempt_timeout);
        for k in keys.iter() {
            c.set(k, &value)?;
        }
    }
    let mut points = Vec::new();
    let mut waits = Vec::new();
    let mut notes = Vec::new();
    let shapes = (1..=o.clients_max).map(|c| (c, 1)).chain(
        o.pipeline_depths
            .iter()
            .filter(|&&d| d > 1)
            .map(|&d| (1, d)),
    );
    for (clients, depth) in shapes {
        let wait = o
            .wait
            .unwrap_or_else(|| auto_wait(clients, &o.client_cores));
        if depth == 1 {
            waits.push(format!("{clients}: {}", crate::cluster::wait_name(wait)));
        }
        for op in [OpKind::Write, OpKind::Read] {
            let name = if op == OpKind::Write { "set" } else { "get" };
            // The leader can change under a loaded machine: take the
            // current one for this point's counters.
            (leader, term) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
            let shape = if depth > 1 {
                format!("1 client, pipeline {depth}")
            } else {
                format!("{clients} clients")
            };
            progress.stage(1000, format!("throughput {shape}, {name}"));
            let (before, after) = (
                std::cell::RefCell::new(BTreeMap::new()),
                std::cell::RefCell::new(BTreeMap::new()),
            );
            let counters = || {
                cluster
                    .status_of(leader, Duration::from_secs(1))
                    .map(|s| s.counters)
                    .unwrap_or_default()
            };
            let make = |t: usize| -> Result<RequestFn> {
                let (keys, value) = (keys.clone(), value.clone());
                let mut i = t as u64 * 7919;
                if depth > 1 {
                    let mut pipe = PipelinedOps::new(
                        cluster.shm_pipeline(wait, o.attempt_timeout, depth)?,
                        wait,
                    );
                    return Ok(Box::new(move |record: &mut dyn FnMut(OpKind, u64)| {
                        pipe.step(
                            op,
                            record,
                            || {
                                i += 1;
                                keys[(i % keys.len() as u64) as usize].clone()
                            },
                            &value,
                        )
                    }));
                }
                let mut client = cluster.shm_client(wait, o.attempt_timeout);
                Ok(Box::new(move |record: &mut dyn FnMut(OpKind, u64)| {
                    i += 1;
                    let k = &keys[(i % keys.len() as u64) as usize];
                    let t0 = std::time::Instant::now();
                    match op {
                        OpKind::Write => client.set(k, &value)?,
                        OpKind::Read => {
                            client.get(k)?;
                        }
                    }
                    record(op, t0.elapsed().as_nanos() as u64);
                    Ok(())
                }))
            };
            let fns = (0..clients).map(make).collect::<Result<Vec<_>>>()?;
            let fns = std::sync::Mutex::new(fns.into_iter().map(Some).collect::<Vec<_>>());
            let run = run_clients_recording(
                clients,
                &o.client_cores,
                o.warmup,
                o.duration,
                progress,
                |t| {
                    fns.lock().expect("not poisoned")[t]
                        .take()
                        .expect("one function per thread")
                },
                |start| {
                    if start {
                        *before.borrow_mut() = counters();
                    } else {
                        *after.borrow_mut() = counters();
                    }
                },
            )?;
            let h = if op == OpKind::Write {
                &run.writes
            } else {
                &run.reads
            };
            let mut b = batching(&before.borrow(), &after.borrow(), u64::from(o.replicas) - 1);
            // Counters of two leaders cannot be subtracted.
            let still = cluster
                .status_of(leader, Duration::from_secs(1))
                .is_some_and(|s| s.role == "leader" && s.term == term);
            if !still {
                notes.push(format!(
                    "{clients} clients {name}: the leader changed during the window (member \
                     {leader} led term {term}); its batching counters are left out"
                ));
                b = Batching::default();
            }
            let secs = run.window.as_secs_f64();
            points.push(ThroughputPoint {
                clients,
                depth,
                op: name.into(),
                ops: run.ops(),
                window_s: secs,
                ops_per_sec: run.ops() as f64 / secs.max(1e-9),
                latency: Summary::of(h),
                batching: b,
            });
        }
    }
    if points.iter().all(|p| p.batching.batch_counter.is_none()) {
        notes.push(format!(
            "the status has no replication-batch counter (looked for {}): entries per batch \
             cannot be computed; reads per round shows read batching",
            BATCH_COUNTERS.join(", ")
        ));
    }
    Ok(ThroughputReport {
        replicas: o.replicas,
        value_bytes: o.value_bytes,
        client_placement: if o.client_cores.is_empty() {
            "unpinned (no core free of replicas)".into()
        } else {
            format!("pinned round-robin to core(s) {:?}", o.client_cores)
        },
        client_wait: if o.wait.is_some() {
            waits.first().cloned().unwrap_or_default()
        } else {
            format!(
                "auto (spin while every client has its own core, else yield): {}",
                waits.join(", ")
            )
        },
        window_s: o.duration.as_secs_f64(),
        points,
        pipelined: if o.pipeline_depths.iter().any(|&d| d > 1) {
            "1×D rows: one client thread keeps D requests in flight (verbatim_client::pipeline: D \
             lanes, each a sequential client with its own id and slot); each latency runs from \
             the request's submission to its completion"
                .into()
        } else {
            "not measured (--pipeline none)".into()
        },
        notes,
    })
}

/// One client thread's request function for `run_clients_recording`.
type RequestFn = Box<dyn FnMut(&mut dyn FnMut(OpKind, u64)) -> Result<()> + Send>;

/// Keeps a pipeline full of one kind of request and reports each
/// completion with its latency from submission.
struct PipelinedOps {
    pipe: verbatim_client::pipeline::Pipeline,
    wait: Wait,
    submitted_at: std::collections::HashMap<u64, std::time::Instant>,
    done: Vec<(
        u64,
        std::result::Result<verbatim_client::client::Outcome, verbatim_client::client::ClientError>,
    )>,
}

impl PipelinedOps {
    fn new(pipe: verbatim_client::pipeline::Pipeline, wait: Wait) -> PipelinedOps {
        PipelinedOps {
            wait,
            submitted_at: std::collections::HashMap::with_capacity(pipe.depth()),
            done: Vec::with_capacity(pipe.depth()),
            pipe,
        }
    }

    /// Fills every free lane, then polls until at least one request
    /// completed (bounded by the pipeline's own timeouts).
    fn step(
        &mut self,
        op: OpKind,
        record: &mut dyn FnMut(OpKind, u64),
        mut next_key: impl FnMut() -> Vec<u8>,
        value: &[u8],
    ) -> Result<()> {
        use verbatim_core::kv::KvOp;
        while self.pipe.in_flight() < self.pipe.depth() {
            let key = next_key();
            let kv = match op {
                OpKind::Write => KvOp::Set { key: &key, value },
                OpKind::Read => KvOp::Get { key: &key },
            };
            let now = std::time::Instant::now();
            match self.pipe.submit(&kv)? {
                Some(t) => {
                    self.submitted_at.insert(t, now);
                }
                None => break,
            }
        }
        let mut idle = 0u32;
        while self.pipe.poll(&mut self.done) == 0 {
            idle += 1;
            match self.wait {
                Wait::Yield if idle > 64 => std::thread::yield_now(),
                _ => std::hint::spin_loop(),
            }
        }
        let now = std::time::Instant::now();
        for (ticket, outcome) in self.done.drain(..) {
            outcome?;
            if let Some(t0) = self.submitted_at.remove(&ticket) {
                record(op, now.duration_since(t0).as_nanos() as u64);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batching_is_computed_from_counter_deltas() {
        let before: BTreeMap<String, u64> = [
            ("entries_appended".to_string(), 100),
            ("reads_served".to_string(), 10),
            ("read_rounds".to_string(), 10),
        ]
        .into();
        let mut after = before.clone();
        after.insert("entries_appended".into(), 1100);
        after.insert("reads_served".into(), 410);
        after.insert("read_rounds".into(), 110);
        let b = batching(&before, &after, 2);
        assert_eq!(b.entries_appended, 1000);
        assert_eq!(b.reads_per_round, Some(4.0));
        assert_eq!(b.entries_per_batch, None);
        after.insert("log_batches".into(), 500);
        let b = batching(&before, &after, 2);
        // 1000 entries to each of 2 followers in 500 batches: 4 per batch.
        assert_eq!(b.entries_per_batch, Some(4.0));
        assert_eq!(b.batch_counter.as_deref(), Some("log_batches"));
    }
}
