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
//!
//! Each replication mode asked for (`--modes`: DARE's log, primary-backup,
//! …) runs the same mixes with the same seeds on a cluster of its own, one
//! after the other, so that the report sets them side by side. Next to
//! throughput and latency, each point has the CPU time the leader and the
//! backups spent per request ([`crate::cpu`]).

use crate::cluster::{BenchCluster, ClusterSpec, ReplicationMode};
use crate::measure::{run_clients, OpKind};
use crate::progress::Progress;
use crate::stats::Summary;
use crate::zipf::{KeyChooser, Zipf};
use crate::{BenchError, Result};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;
use verbatim_client::client::Wait;
use verbatim_client::manifest::PollMode;
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
    /// Replication modes, one cluster each, in this order.
    pub modes: Vec<ReplicationMode>,
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

/// One mix under one key distribution, in one replication mode.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadPoint {
    /// Replication mode of the cluster ("log", "primary-backup"; empty in
    /// documents written before modes were compared).
    #[serde(default)]
    pub mode: String,
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
    /// The member that led (the primary) through the window.
    #[serde(default)]
    pub leader: Option<u8>,
    /// The leader's process CPU time (user + system) over the window per
    /// request completed in it, µs; `None` when it could not be read or
    /// the leader changed during the window.
    #[serde(default)]
    pub leader_cpu_us_per_op: Option<f64>,
    /// The same for every other member (the backups), summed.
    #[serde(default)]
    pub backups_cpu_us_per_op: Option<f64>,
}

/// One replication mode of the run: what selected it, or why it did not
/// run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModeRun {
    /// "log", "primary-backup", "backup-memory".
    pub mode: String,
    /// Every manifest override its replicas ran with (the mode's and the
    /// user's `--set`s).
    pub overrides: Vec<String>,
    /// Why the mode was skipped (the replicas' manifest check refused
    /// it), when it was.
    pub skipped: Option<String>,
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
    /// The replication modes asked for, in order, run or skipped.
    #[serde(default)]
    pub modes: Vec<ModeRun>,
    /// Clock ticks per second of the CPU times (`sysconf(_SC_CLK_TCK)`):
    /// one tick is their resolution.
    #[serde(default)]
    pub clock_ticks_per_s: u64,
    /// Every point, mode by mode.
    pub points: Vec<WorkloadPoint>,
    /// What to keep in mind reading the figures.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// What every mode's cluster shares: the keys, the value, the Zipf
/// generator (ζ(n, θ) costs n powers: computed once, cloned per thread).
struct Shared {
    keys: Arc<Vec<Vec<u8>>>,
    value: Arc<Vec<u8>>,
    zipf: Zipf,
    clock_ticks_per_s: u64,
}

/// Runs every mix with both distributions on one preloaded cluster per
/// replication mode, the modes one after the other with the same seeds.
/// A mode the replicas refuse is skipped (the report says why); the run
/// fails only when no mode could run.
pub fn run(spec: &ClusterSpec, o: &WorkloadOptions, progress: &Progress) -> Result<WorkloadReport> {
    if o.modes.is_empty() {
        return Err(BenchError::Options(
            "workload needs a replication mode".into(),
        ));
    }
    let keys = Arc::new(crate::latency::keys(o.keys.max(2)));
    let shared = Shared {
        zipf: Zipf::new(keys.len() as u64, o.theta, o.seed),
        keys,
        value: Arc::new(vec![b'v'; o.value_bytes]),
        clock_ticks_per_s: crate::cpu::clock_ticks_per_s(),
    };
    let mut report = WorkloadReport {
        replicas: o.replicas,
        keys: o.keys,
        value_bytes: o.value_bytes,
        theta: o.theta,
        seed: o.seed,
        window_s: o.duration.as_secs_f64(),
        client_wait: crate::cluster::wait_name(o.wait).into(),
        clock_ticks_per_s: shared.clock_ticks_per_s,
        ..WorkloadReport::default()
    };
    // A spinning replica burns its core whether or not requests come: its
    // CPU per request is the window over the requests, not their cost.
    match spec.poll {
        PollMode::Adaptive => {}
        PollMode::LeaderBusy => report.notes.push(
            "poll leader-busy: the leader spins, so its CPU per request is the window over the \
             requests (what the load leaves of its core), not the work a request costs; \
             --poll adaptive measures that"
                .into(),
        ),
        PollMode::Busy => report.notes.push(
            "poll busy: every replica spins, so both CPU figures are the window over the \
             requests, not the work a request costs; --poll adaptive measures that"
                .into(),
        ),
    }
    for &mode in &o.modes {
        let mode_spec = spec.with_mode(mode);
        let mut record = ModeRun {
            mode: mode.name().into(),
            overrides: mode_spec.overrides.clone(),
            skipped: None,
        };
        if let Some(why) = spec.mode_refusal(mode, o.replicas) {
            progress.notice(format!(
                "workload: mode {} skipped: the replicas refuse it ({why})",
                mode.name()
            ));
            record.skipped = Some(why);
            report.modes.push(record);
            continue;
        }
        report.modes.push(record);
        let points = run_mode(&mode_spec, mode, o, &shared, &mut report.notes, progress)?;
        report.points.extend(points);
    }
    if report.points.is_empty() {
        let why: Vec<String> = report
            .modes
            .iter()
            .filter_map(|m| Some(format!("{}: {}", m.mode, m.skipped.as_ref()?)))
            .collect();
        return Err(BenchError::Options(format!(
            "no replication mode could run ({}); pick another with --modes",
            why.join("; ")
        )));
    }
    Ok(report)
}

/// Every mix and distribution on one fresh cluster in `mode`, stopped at
/// the end (before the next mode's starts: they would share the cores).
fn run_mode(
    spec: &ClusterSpec,
    mode: ReplicationMode,
    o: &WorkloadOptions,
    shared: &Shared,
    notes: &mut Vec<String>,
    progress: &Progress,
) -> Result<Vec<WorkloadPoint>> {
    let cluster = BenchCluster::start(spec, o.replicas, false)?;
    let (leader, term) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
    progress.println(format!(
        "workload {}: {} replicas up, member {leader} leads term {term}; preloading {} keys",
        mode.name(),
        o.replicas,
        o.keys
    ));
    let (keys, value) = (&shared.keys, &shared.value);
    progress.stage(
        keys.len() as u64,
        format!("workload {}: preload", mode.name()),
    );
    {
        let mut c = cluster.shm_client(Wait::Spin, o.attempt_timeout);
        for (i, k) in keys.iter().enumerate() {
            if i % 1024 == 0 {
                crate::signals::check()?;
                progress.inc(1024);
            }
            c.set(k, value)?;
        }
    }
    let mut points = Vec::new();
    for &mix in &o.mixes {
        for zipfian in [false, true] {
            let dist = if zipfian { "zipfian" } else { "uniform" };
            let what = format!("{} {} / {dist}", mode.name(), mix.name());
            progress.stage(1000, format!("workload {what}"));
            // The leader can change under a loaded machine: the current
            // one is this point's leader.
            let (leader, term) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
            let (before, after) = (RefCell::new(None), RefCell::new(None));
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
                        let mut z = shared.zipf.clone();
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
                // Right at the window's edges, on this thread: the CPU
                // time of the warm-up and of the client threads' start and
                // join stays out.
                |start| {
                    let sample = replica_cpu_ticks(&cluster, o.replicas);
                    let slot = if start { &before } else { &after };
                    *slot.borrow_mut() = Some(sample);
                },
            )?;
            let ops = run.ops();
            let mut point = WorkloadPoint {
                mode: mode.name().into(),
                mix: mix.name().into(),
                distribution: dist.into(),
                clients: o.clients,
                ops,
                ops_per_sec: ops as f64 / run.window.as_secs_f64().max(1e-9),
                reads: Summary::of(&run.reads),
                updates: Summary::of(&run.writes),
                leader: Some(leader),
                leader_cpu_us_per_op: None,
                backups_cpu_us_per_op: None,
            };
            // Whose CPU is the leader's holds only if it led throughout.
            let still = cluster
                .status_of(leader, Duration::from_secs(1))
                .is_some_and(|s| s.role == "leader" && s.term == term);
            let samples = (before.into_inner(), after.into_inner());
            match samples {
                _ if !still => {
                    point.leader = None;
                    notes.push(format!(
                        "{what}: the leader changed during the window (member {leader} led \
                         term {term}); its CPU split is left out"
                    ));
                }
                (Some(Ok(b)), Some(Ok(a))) => match split_cpu_ticks(&b, &a, leader) {
                    Some(split) => {
                        let per_op =
                            |t| crate::cpu::cpu_us_per_op(t, shared.clock_ticks_per_s, ops);
                        point.leader_cpu_us_per_op = per_op(split.leader_ticks);
                        point.backups_cpu_us_per_op = per_op(split.backups_ticks);
                    }
                    None => notes.push(format!(
                        "{what}: the replicas' CPU samples do not match (a process \
                         restarted?); CPU left out"
                    )),
                },
                (b, a) => {
                    let why = [b, a]
                        .into_iter()
                        .find_map(|s| s.and_then(|r| r.err()))
                        .map_or_else(|| "not sampled".to_string(), |e| e.to_string());
                    notes.push(format!("{what}: CPU time not read ({why})"));
                }
            }
            points.push(point);
        }
    }
    Ok(points)
}

/// `utime + stime` (clock ticks) of every replica of `cluster`, by member
/// id.
fn replica_cpu_ticks(cluster: &BenchCluster, replicas: u8) -> Result<Vec<(u8, u64)>> {
    (0..replicas)
        .map(|id| {
            let pid = cluster.local().pid(id).ok_or_else(|| {
                BenchError::ProcStat(format!("replica {id} has no running process"))
            })?;
            Ok((id, crate::cpu::process_cpu_ticks(pid)?))
        })
        .collect()
}

/// CPU ticks spent over a window by the leader and by every other member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CpuSplit {
    leader_ticks: u64,
    backups_ticks: u64,
}

/// The ticks between two samples of the same members, split into the
/// leader's and the others' sum; `None` when the samples name different
/// members, lack the leader, or go backwards (a new process, whose count
/// started again).
fn split_cpu_ticks(before: &[(u8, u64)], after: &[(u8, u64)], leader: u8) -> Option<CpuSplit> {
    if before.len() != after.len() || !before.iter().any(|&(id, _)| id == leader) {
        return None;
    }
    let mut split = CpuSplit {
        leader_ticks: 0,
        backups_ticks: 0,
    };
    for (&(id_b, b), &(id_a, a)) in before.iter().zip(after) {
        if id_a != id_b {
            return None;
        }
        let spent = a.checked_sub(b)?;
        if id_a == leader {
            split.leader_ticks += spent;
        } else {
            split.backups_ticks += spent;
        }
    }
    Some(split)
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

    #[test]
    fn cpu_ticks_split_into_the_leader_and_the_sum_of_the_others() {
        let before = [(0, 100), (1, 50), (2, 70)];
        let after = [(0, 130), (1, 55), (2, 72)];
        assert_eq!(
            split_cpu_ticks(&before, &after, 1),
            Some(CpuSplit {
                leader_ticks: 5,
                backups_ticks: 32
            })
        );
        // A member restarted (its count went back), another missing, or
        // a leader that is not in the sample: no split.
        assert_eq!(
            split_cpu_ticks(&before, &[(0, 130), (1, 40), (2, 72)], 1),
            None
        );
        assert_eq!(split_cpu_ticks(&before, &after[..2], 1), None);
        assert_eq!(
            split_cpu_ticks(&before, &[(0, 130), (3, 55), (2, 72)], 1),
            None
        );
        assert_eq!(split_cpu_ticks(&before, &after, 4), None);
    }
}
