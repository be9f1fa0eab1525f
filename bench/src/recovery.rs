//! `recovery`: what a large state transfer costs the leader's latency
//! (DARE §3.4; the issue: "Recovery moves a 1 GiB state machine without
//! the leader's latency p99 rising more than 2× during the transfer").
//!
//! A 3-replica group is filled with `state_mib` MiB of values (a pipelined
//! client, so the fill takes seconds), with `cluster.snapshot_bytes_max`
//! raised to hold the serialized state and a log ring smaller than the
//! state (so the log is pruned and a replica that restarts with empty
//! memory must copy a snapshot instead of replaying the log). Then one
//! client does sequential small SETs against the leader, each latency
//! recorded in an HDR histogram of the window it started in:
//!
//! * **baseline**: the group of three, nothing else happening;
//! * **follower down**: a follower was SIGKILLed (the leader commits with
//!   the other one);
//! * **recovering**: from the restart of that follower until it has
//!   copied a snapshot from the other follower (its status' `recovery.
//!   completed` went up) and applied everything the leader had committed
//!   by then.
//!
//! The transfer itself is timed from the recovering replica's status,
//! polled every [`POLL_PERIOD`]: restart → snapshot ready at the donor
//! (`bytes_total` known) → copied and restored (`completed`) → caught up.

use crate::cluster::{BenchCluster, ClusterSpec};
use crate::progress::Progress;
use crate::stats::{cdf, histogram, record, CdfPoint, Summary};
use crate::{BenchError, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use verbatim_client::client::{Client, ClientError, Outcome, Wait};
use verbatim_client::process::ProcessWatch;
use verbatim_core::kv::{KvOp, KvReply};

/// How often the recovering replica's status is read.
pub const POLL_PERIOD: Duration = Duration::from_millis(10);

/// Requests the fill keeps in flight.
pub const FILL_DEPTH: usize = 16;

/// Default value size of the fill: the largest that fits an entry
/// (`verbatim_core::config::ENTRY_PAYLOAD_BYTES_CAP`, 64 KiB, holds a SET
/// encoding of key + 2 × value_bytes_max, since a CAS carries two values).
pub const FILL_VALUE_BYTES_DEFAULT: usize = 32_000;

/// The log ring's size when the run picks it: the state's (the fill
/// wraps it once and the leader prunes), between [`RING_BYTES_MIN`] and
/// [`RING_BYTES_MAX`]. The leader keeps the log for a member while it
/// copies and restores its snapshot, and the measuring client writes
/// flat out, 15–25 MB/s of log entries here: a 1 GiB transfer of 20–30 s
/// needs 300–750 MiB. A quarter of the state (the old choice, 256 MiB
/// for 1 GiB) filled in ~10 s: the leader then releases the member
/// (`recovery_log_hold_percent`), which recovers again and, at that rate,
/// never finishes.
pub const RING_BYTES_MAX: u64 = 1 << 30;
/// See [`RING_BYTES_MAX`]; four entries of the largest size fit.
pub const RING_BYTES_MIN: u64 = 1 << 20;

/// Keys the measuring client cycles through.
const PROBE_KEYS: u64 = 1000;

/// Phases of the measuring client (an index into its histograms).
const PHASE_BASELINE: u8 = 0;
const PHASE_DOWN: u8 = 1;
const PHASE_RECOVERING: u8 = 2;
const PHASE_STOP: u8 = 3;
/// Before the baseline: requests are not recorded (the client maps the
/// leader's slots and the caches warm up).
const PHASE_WARMUP: u8 = 4;
const PHASES: usize = 3;

/// What to measure.
#[derive(Clone, Debug)]
pub struct RecoveryOptions {
    /// Group size.
    pub replicas: u8,
    /// State to fill the store with (MiB of values).
    pub state_mib: u64,
    /// Value size of the fill.
    pub fill_value_bytes: usize,
    /// Value size of the measured SETs.
    pub probe_value_bytes: usize,
    /// Measured window without recovery.
    pub baseline: Duration,
    /// How long the follower stays down before its restart.
    pub down: Duration,
    /// How long recovery (restart → caught up) may take.
    pub recovery_timeout: Duration,
    /// Log ring bytes (None: the state's size, see [`RING_BYTES_MAX`]).
    pub log_ring_bytes: Option<u64>,
    /// Core of the measuring client.
    pub client_core: Option<usize>,
    /// How it waits.
    pub wait: Wait,
    /// Client attempt timeout.
    pub attempt_timeout: Duration,
}

/// One measuring window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyWindow {
    /// "baseline", "follower down", "recovering".
    pub name: String,
    /// Length (ms).
    pub duration_ms: f64,
    /// Per-request latency of the SETs started in it.
    pub latency: Summary,
    /// Requests per second.
    pub ops_per_sec: f64,
    /// CDF points of `latency`.
    pub cdf: Vec<CdfPoint>,
    /// How the leader's counters moved over the window ([`LEADER_COUNTERS`]:
    /// log_full counts writes that waited for a full log to be pruned);
    /// empty when the leadership changed during the window.
    #[serde(default)]
    pub leader_counters: BTreeMap<String, u64>,
}

/// A leader at one instant: id, term, counters.
type LeaderAt = (u8, u64, BTreeMap<String, u64>);

/// The leader's counters recorded per window.
pub const LEADER_COUNTERS: [&str; 6] = [
    "entries_appended",
    "log_full",
    "prunes",
    "recovery_holds_released",
    "snapshots_served",
    "step_downs",
];

/// The state transfer, as the recovering replica's status showed it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    /// The replica killed and restarted.
    pub member: u8,
    /// The member it copied from.
    pub donor: Option<u8>,
    /// The leader it followed when it was first seen copying (or, for a
    /// copy between two polls, the leader at its restart): a donor equal
    /// to it means the leader gave the snapshot.
    #[serde(default)]
    pub leader_at_copy: Option<u8>,
    /// Restart → its status socket answers (ms).
    pub started_ms: Option<f64>,
    /// Restart → the donor's snapshot is complete (`bytes_total` known;
    /// None when the whole copy fell between two polls).
    pub snapshot_ready_ms: Option<f64>,
    /// Restart → copied, checked and restored (`completed` went up).
    pub completed_ms: Option<f64>,
    /// Restart → caught up: restored, replicated to by the leader, and
    /// applied what the leader had committed when it first looked so.
    pub caught_up_ms: Option<f64>,
    /// Bytes copied over every attempt (the snapshots restored, or the
    /// most the status showed if more).
    pub bytes_copied: u64,
    /// Bytes of the snapshot restored last.
    pub bytes_total: u64,
    /// Snapshot ready → completed: the copy and restore (ms).
    pub copy_ms: Option<f64>,
    /// `bytes_total` / `copy_ms` (10⁶ bytes per second).
    pub copy_mb_per_s: Option<f64>,
    /// `bytes_total` / `completed_ms`, restart included (10⁶ bytes/s).
    pub end_to_end_mb_per_s: Option<f64>,
    /// Recoveries completed by the replica (1 when it went as planned).
    pub completed: u64,
    /// Attempts it gave up (donor silent, snapshot changed).
    pub abandoned: u64,
    /// Snapshots the donor wrote for recovering members (its status'
    /// `recovery.served` at the end).
    #[serde(default)]
    pub donor_served: u64,
    /// Why the member did not recover and catch up in time (the windows
    /// then end at the timeout).
    #[serde(default)]
    pub failure: Option<String>,
    /// The events the restarted replica reported, "kind: detail"
    /// (recovered, needs-recovery, leader changes).
    #[serde(default)]
    pub events: Vec<String>,
}

/// The `recovery` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// Group size.
    pub replicas: u8,
    /// State asked for (MiB).
    pub state_mib: u64,
    /// Bytes of values written by the fill.
    pub state_bytes: u64,
    /// Keys of the fill.
    pub fill_keys: u64,
    /// Value size of the fill.
    pub fill_value_bytes: usize,
    /// Fill time (s).
    pub fill_s: f64,
    /// Fill rate (10⁶ bytes of values per second).
    pub fill_mb_per_s: f64,
    /// `cluster.snapshot_bytes_max` the replicas ran with.
    pub snapshot_bytes_max: u64,
    /// `cluster.log_ring_bytes`.
    pub log_ring_bytes: u64,
    /// `timing.prune_grace_us` the replicas ran with (the manifest's
    /// default, or the user's override).
    #[serde(default)]
    pub prune_grace_us: u64,
    /// Value size of the measured SETs.
    pub probe_value_bytes: usize,
    /// The leader when the baseline began.
    pub leader: u8,
    /// Client attempt timeout (µs).
    pub client_attempt_timeout_us: u64,
    /// Baseline, follower down, recovering.
    pub windows: Vec<LatencyWindow>,
    /// Recovering p99 / baseline p99.
    pub p99_ratio: Option<f64>,
    /// Recovering p99.9 / baseline p99.9.
    pub p999_ratio: Option<f64>,
    /// The transfer.
    pub transfer: Transfer,
    /// Caveats of this run (CPU sharing, a leader change).
    pub notes: Vec<String>,
}

impl RecoveryReport {
    /// The window called `name`.
    pub fn window(&self, name: &str) -> Option<&LatencyWindow> {
        self.windows.iter().find(|w| w.name == name)
    }
}

/// Bytes of memory available (MemAvailable in /proc/meminfo).
pub(crate) fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Free bytes of the file system at `path` (the segments' tmpfs).
pub(crate) fn fs_free_bytes(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs(3) fills a zeroed struct we own from a valid path.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid pointer to that struct.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

pub(crate) const MIB: u64 = 1 << 20;

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

/// The snapshot region for `state_bytes` of values: the state plus an
/// eighth for keys and framing, plus 16 MiB for the session table.
pub fn snapshot_bytes_for(state_bytes: u64) -> u64 {
    round_up(state_bytes + state_bytes / 8 + 16 * MIB, MIB)
}

/// The log ring the run picks for `state_bytes` (see [`RING_BYTES_MAX`]).
pub fn ring_bytes_for(state_bytes: u64) -> u64 {
    // Rounded down: never above the state, so the fill wraps it.
    (state_bytes / MIB * MIB).clamp(RING_BYTES_MIN, RING_BYTES_MAX)
}

/// Memory the run needs, roughly: every replica's store holds the state
/// (with allocator slack), the donor and the recovering replica each hold
/// the snapshot once more in their regions, and every replica its ring.
fn memory_needed(replicas: u8, state_bytes: u64, snapshot: u64, ring: u64) -> u64 {
    let r = u64::from(replicas);
    r * (state_bytes + state_bytes / 8) + 2 * snapshot + r * ring + 256 * MIB
}

/// Fills the store: `keys` values of `value_bytes`, `FILL_DEPTH` in
/// flight.
fn fill(cluster: &BenchCluster, o: &RecoveryOptions, keys: u64, progress: &Progress) -> Result<()> {
    let refused = fill_pipelined(
        cluster,
        o.attempt_timeout,
        "state:",
        0..keys,
        o.fill_value_bytes,
        |completed| progress.set_fraction(completed as f64 / keys as f64),
    )?;
    // The state must be what it claims to be.
    match refused.first_refusal {
        Some(first) => Err(BenchError::Cluster(format!(
            "{} SETs of the fill were refused (first: {first})",
            refused.refused
        ))),
        None => Ok(()),
    }
}

/// How a fill went: SETs the replicas answered with an error instead of
/// `Ok`, and the client's retries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FillOutcome {
    /// SETs refused.
    pub refused: u64,
    /// The first: its key and the reply.
    pub first_refusal: Option<String>,
    /// Attempts that timed out or hit a replica that exited.
    pub retries: u64,
    /// Redirects followed (to a new leader or primary).
    pub redirects: u64,
}

/// SETs the distinct keys `{prefix}{i:08}` for every `i` of `keys`, each a
/// value of `value_bytes` (at least 8: it starts with `i`), [`FILL_DEPTH`]
/// in flight from one pipelined client; `completed(n)` hears how many of
/// them are done after each batch of completions. The fastest way this
/// bench has to put bytes into a store (one thread: the leader batches
/// what several lanes submit, and a second thread would only share its
/// core on small machines). A SET answered with an error reply is
/// counted, not retried.
pub(crate) fn fill_pipelined(
    cluster: &BenchCluster,
    attempt_timeout: Duration,
    prefix: &str,
    keys: std::ops::Range<u64>,
    value_bytes: usize,
    mut completed: impl FnMut(u64),
) -> Result<FillOutcome> {
    let mut pipe = cluster.shm_pipeline(Wait::Yield, attempt_timeout, FILL_DEPTH)?;
    // At least 8 bytes: each value starts with its key's number.
    let mut value = vec![0u8; value_bytes.max(8)];
    // Not one repeated byte: a store or a page that deduplicates would
    // make the state smaller than it claims.
    for (i, b) in value.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let total = keys.end.saturating_sub(keys.start);
    let mut done = Vec::with_capacity(FILL_DEPTH);
    let mut next = keys.start;
    let mut finished = 0u64;
    let mut idle = 0u32;
    let mut key = String::with_capacity(prefix.len() + 8);
    let mut outcome = FillOutcome::default();
    // Which key each ticket wrote (for a refusal's message).
    let mut tickets = std::collections::HashMap::with_capacity(FILL_DEPTH);
    while finished < total {
        while next < keys.end && pipe.in_flight() < pipe.depth() {
            use std::fmt::Write as _;
            key.clear();
            let _ = write!(key, "{prefix}{next:08}");
            value[..8].copy_from_slice(&next.to_le_bytes());
            match pipe.submit(&KvOp::Set {
                key: key.as_bytes(),
                value: &value,
            })? {
                Some(ticket) => {
                    tickets.insert(ticket, next);
                    next += 1;
                }
                None => break,
            }
        }
        if pipe.poll(&mut done) == 0 {
            idle += 1;
            if idle > 64 {
                std::thread::yield_now();
            }
            continue;
        }
        idle = 0;
        for (ticket, answer) in done.drain(..) {
            let i = tickets.remove(&ticket);
            match answer? {
                Outcome::Write(KvReply::Ok) => {}
                other => {
                    outcome.refused += 1;
                    outcome.first_refusal.get_or_insert_with(|| {
                        format!(
                            "SET {prefix}{:08} answered {other:?}",
                            i.unwrap_or(u64::MAX)
                        )
                    });
                }
            }
            finished += 1;
        }
        crate::signals::check()?;
        completed(finished);
    }
    let stats = pipe.stats();
    outcome.retries = stats.retries;
    outcome.redirects = stats.redirects;
    Ok(outcome)
}

/// SIGKILLs member `victim` and waits (through a pidfd) until its process
/// is gone: its memory must be freed before a new process maps the same
/// segment names. `timeout` allows for the kernel freeing a large heap and
/// segment, seconds for a GiB on a loaded machine.
pub(crate) fn kill_and_wait_exit(
    cluster: &mut BenchCluster,
    victim: u8,
    timeout: Duration,
) -> Result<()> {
    let pid = cluster
        .local()
        .pid(victim)
        .ok_or_else(|| BenchError::Cluster(format!("member {victim} has no pid")))?;
    let watch = ProcessWatch::open(pid as i32)
        .ok_or_else(|| BenchError::Cluster(format!("cannot watch member {victim}")))?;
    cluster
        .local_mut()
        .kill(victim)
        .map_err(BenchError::Cluster)?;
    if !watch.wait_exit(timeout) {
        return Err(BenchError::Cluster(format!(
            "member {victim} did not exit within {timeout:?} of SIGKILL"
        )));
    }
    Ok(())
}

/// How long a SIGKILLed replica holding `state_mib` MiB may take to exit.
pub(crate) fn exit_timeout(state_mib: u64) -> Duration {
    crate::failover::FAILOVER_TIMEOUT + Duration::from_secs(state_mib / 32)
}

/// Waits until every replica has applied what the leader committed, and
/// the leader has pruned its log's beginning (so a replica restarting
/// empty cannot replay it and must recover by snapshot).
fn wait_settled(cluster: &BenchCluster, leader: u8, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        crate::signals::check()?;
        let st = cluster.local().status();
        if let Some(Some(l)) = st.get(usize::from(leader)) {
            let applied = st
                .iter()
                .flatten()
                .all(|s| s.log.apply_index >= l.log.commit_index);
            if applied && l.log.head_pos > 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError::Cluster(if l.log.head_pos == 0 {
                    format!(
                        "the leader has not pruned its log (ring {} bytes, head 0 after the \
                         fill): a restarted replica would replay the log instead of copying a \
                         snapshot; raise --state-mib or lower --log-ring-bytes",
                        l.log.ring_bytes
                    )
                } else {
                    format!("the followers did not apply the fill within {timeout:?}")
                }));
            }
        } else if Instant::now() > deadline {
            return Err(BenchError::Cluster(format!(
                "member {leader} stopped answering after the fill"
            )));
        }
        std::thread::sleep(POLL_PERIOD);
    }
}

/// The measuring client: sequential SETs until told to stop, each
/// latency into the histogram of the phase it started in.
fn spawn_probe(
    manifest: verbatim_client::manifest::Manifest,
    o: &RecoveryOptions,
    phase: Arc<AtomicU8>,
) -> std::thread::JoinHandle<std::result::Result<Vec<Histogram<u64>>, ClientError>> {
    let (core, wait, attempt_timeout, size) = (
        o.client_core,
        o.wait,
        o.attempt_timeout,
        o.probe_value_bytes,
    );
    std::thread::spawn(move || {
        crate::cluster::pin_current(core);
        let mut client = Client::new(
            &manifest,
            crate::cluster::shm_options(wait, attempt_timeout),
        );
        let keys: Vec<Vec<u8>> = (0..PROBE_KEYS)
            .map(|i| format!("probe:{i:04}").into_bytes())
            .collect();
        let value = vec![b'p'; size];
        let mut hists: Vec<Histogram<u64>> = (0..PHASES).map(|_| histogram()).collect();
        let mut i = 0usize;
        loop {
            let p = phase.load(Ordering::Acquire);
            if p == PHASE_STOP || crate::signals::interrupted() {
                return Ok(hists);
            }
            let t0 = Instant::now();
            client.set(&keys[i % keys.len()], &value)?;
            if let Some(h) = hists.get_mut(usize::from(p)) {
                record(h, t0.elapsed().as_nanos() as u64);
            }
            i += 1;
        }
    })
}

/// Sleeps `d`, failing early on Ctrl-C or a probe that ended.
fn sleep_checked<T>(d: Duration, probe: &std::thread::JoinHandle<T>) -> Result<()> {
    let end = Instant::now() + d;
    loop {
        crate::signals::check()?;
        if probe.is_finished() {
            return Err(BenchError::Cluster(
                "the measuring client stopped early".into(),
            ));
        }
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(Duration::from_millis(5)));
    }
}

/// The sizes of the snapshots restored, from a replica's events
/// ("recovered: member 2 restored a snapshot up to index 4499 (4850630
/// bytes) and rejoins"), oldest first.
fn restored_bytes(events: &[String]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| e.starts_with("recovered:"))
        .filter_map(|e| {
            let (before, _) = e.split_once(" bytes)")?;
            before.rsplit('(').next()?.parse().ok()
        })
        .collect()
}

/// Follows the restarted replica until it recovered and caught up, or
/// the timeout (then [`Transfer::failure`] says what it saw).
fn follow_recovery(
    cluster: &BenchCluster,
    victim: u8,
    restarted: Instant,
    timeout: Duration,
    probe: &std::thread::JoinHandle<std::result::Result<Vec<Histogram<u64>>, ClientError>>,
    progress: &Progress,
) -> Result<Transfer> {
    let ms = |t: Instant| t.duration_since(restarted).as_secs_f64() * 1000.0;
    let mut t = Transfer {
        member: victim,
        ..Transfer::default()
    };
    // Set when the member last looked rejoined: the leader's commit index
    // then, which it must apply to have caught up.
    let mut catch_up_target: Option<u64> = None;
    let deadline = restarted + timeout;
    loop {
        crate::signals::check()?;
        if probe.is_finished() {
            return Err(BenchError::Cluster(
                "the measuring client stopped during the recovery".into(),
            ));
        }
        let now = Instant::now();
        if let Some(s) = cluster.status_of(victim, Duration::from_millis(500)) {
            t.started_ms.get_or_insert(ms(now));
            let r = &s.recovery;
            if t.donor.is_none() && r.donor.is_some() {
                t.donor = r.donor;
                t.leader_at_copy = s.leader;
            }
            t.bytes_copied = t.bytes_copied.max(r.bytes_copied);
            t.bytes_total = t.bytes_total.max(r.bytes_total);
            t.completed = r.completed;
            t.abandoned = r.abandoned;
            t.events = s
                .events
                .iter()
                .map(|e| format!("{}: {}", e.kind, e.detail))
                .collect();
            if r.bytes_total > 0 {
                t.snapshot_ready_ms.get_or_insert(ms(now));
                // Half the bar copies, half restores.
                progress.set_fraction(
                    (r.bytes_copied + r.bytes_restored) as f64 / (2 * r.bytes_total) as f64,
                );
            }
            if r.completed > 0 && t.completed_ms.is_none() {
                t.completed_ms = Some(ms(now));
            }
            // Rejoined: restored, not copying again, and replicated to by
            // the leader like any follower (a member restored too late,
            // behind the pruned log, is marked for recovery again).
            let l = cluster.leader_now();
            let replicated = l.as_ref().is_some_and(|l| {
                l.peers
                    .iter()
                    .any(|p| p.id == victim && p.replication == "replicating")
            });
            if r.completed > 0 && !r.active && replicated {
                let target = *catch_up_target
                    .get_or_insert(l.as_ref().map_or(u64::MAX, |l| l.log.commit_index));
                if s.log.apply_index >= target {
                    t.caught_up_ms = Some(ms(now));
                    return Ok(t);
                }
            } else {
                catch_up_target = None;
            }
        }
        if now > deadline {
            // What the other members said last helps more than a count.
            let statuses: Vec<_> = (0..cluster.local().manifest.member_count())
                .filter(|&id| id != victim)
                .filter_map(|id| cluster.status_of(id, Duration::from_millis(500)))
                .collect();
            let released: u64 = statuses
                .iter()
                .filter_map(|s| s.counters.get("recovery_holds_released"))
                .sum();
            let outrun = if released > 0 {
                format!(
                    "its transfer outran the log {released} time(s) (the leader pruned past \
                     its snapshot): the ring is too small for the writes of one transfer, \
                     run with a larger --log-ring-bytes; "
                )
            } else {
                String::new()
            };
            let others: Vec<String> = statuses
                .iter()
                .map(|s| {
                    let last: Vec<String> = s
                        .events
                        .iter()
                        .rev()
                        .take(4)
                        .map(|e| format!("{}: {}", e.kind, e.detail))
                        .collect();
                    format!(
                        "member {} ({}, served {}): {}",
                        s.id,
                        s.role,
                        s.recovery.served,
                        last.join("; ")
                    )
                })
                .collect();
            t.failure = Some(format!(
                "member {victim} did not recover and catch up within {timeout:?} (copied {} of \
                 {} bytes, {} recoveries completed, {} abandoned); {outrun}its last events: {}; {}",
                t.bytes_copied,
                t.bytes_total,
                t.completed,
                t.abandoned,
                t.events
                    .iter()
                    .rev()
                    .take(6)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; "),
                others.join("; ")
            ));
            return Ok(t);
        }
        std::thread::sleep(POLL_PERIOD);
    }
}

/// Runs the fill, the baseline, the kill and the recovery.
pub fn run(spec: &ClusterSpec, o: &RecoveryOptions, progress: &Progress) -> Result<RecoveryReport> {
    if o.replicas < 3 {
        return Err(BenchError::Options(
            "--replicas must be at least 3: the recovering replica copies from a follower while \
             the leader commits with another"
                .into(),
        ));
    }
    if o.state_mib == 0 || o.fill_value_bytes < 8 || o.probe_value_bytes == 0 {
        return Err(BenchError::Options(
            "--state-mib must be at least 1, --fill-value-bytes at least 8 and \
             --value-bytes at least 1"
                .into(),
        ));
    }
    let state_target = o.state_mib * MIB;
    let keys = state_target.div_ceil(o.fill_value_bytes as u64);
    let state_bytes = keys * o.fill_value_bytes as u64;
    let snapshot = snapshot_bytes_for(state_bytes);
    let ring = o
        .log_ring_bytes
        .unwrap_or_else(|| ring_bytes_for(state_bytes));
    let needed = memory_needed(o.replicas, state_bytes, snapshot, ring);
    if let Some(avail) = mem_available_bytes() {
        if needed > avail {
            return Err(BenchError::Options(format!(
                "--state-mib {}: the run needs about {} MiB of memory (each replica's store, \
                 two snapshot copies, the rings) and {} MiB are available; lower --state-mib",
                o.state_mib,
                needed / MIB,
                avail / MIB
            )));
        }
    }
    let mut spec = spec.clone();
    let value_max = o.fill_value_bytes.max(o.probe_value_bytes);
    // The user's own --set overrides come after ours and win.
    let ours = [
        format!("cluster.value_bytes_max={value_max}"),
        format!("cluster.snapshot_bytes_max={snapshot}"),
        format!("cluster.log_ring_bytes={ring}"),
    ];
    spec.overrides.splice(0..0, ours);
    // What the replicas run with: the last override of the key.
    let prune_grace_us = spec
        .overrides
        .iter()
        .rev()
        .find_map(|o| {
            o.strip_prefix("timing.prune_grace_us=")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(verbatim_client::manifest::TimingSection::default().prune_grace_us);
    let probe_manifest = verbatim_client::manifest::Manifest::local("probe", o.replicas, 0);
    if let Some(free) = fs_free_bytes(&probe_manifest.shm_dir()) {
        // The segments hold the snapshot regions; the donor's and the
        // recovering replica's get written.
        if 2 * snapshot + u64::from(o.replicas) * ring > free {
            return Err(BenchError::Options(format!(
                "{} has {} MiB free and the snapshot regions need {} MiB; lower --state-mib",
                probe_manifest.shm_dir().display(),
                free / MIB,
                (2 * snapshot + u64::from(o.replicas) * ring) / MIB
            )));
        }
    }
    let mut cluster = BenchCluster::start(&spec, o.replicas, false)?;
    let (leader, term) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
    progress.println(format!(
        "recovery: {} replicas up, member {leader} leads term {term}; filling {} MiB ({keys} \
         values of {} B)",
        o.replicas, o.state_mib, o.fill_value_bytes
    ));
    progress.stage(1000, format!("recovery: filling {} MiB", o.state_mib));
    let fill_began = Instant::now();
    fill(&cluster, o, keys, progress)?;
    let fill_s = fill_began.elapsed().as_secs_f64();
    progress.stage(1, "recovery: waiting for the followers to apply");
    wait_settled(&cluster, leader, Duration::from_secs(60))?;
    let mut notes = Vec::new();
    let phase = Arc::new(AtomicU8::new(PHASE_WARMUP));
    let probe = spawn_probe(cluster.local().manifest.clone(), o, phase.clone());
    // Window i runs from marks[i] to marks[i + 1]; leaders[i] is the
    // leader (id, term, counters) at marks[i].
    let mut marks = [Instant::now(); PHASES + 1];
    let mut leaders: [Option<LeaderAt>; PHASES + 1] = Default::default();
    let leader_now =
        |cluster: &BenchCluster| cluster.leader_now().map(|s| (s.id, s.term, s.counters));
    let mut victim = 0;
    let transfer = (|| -> Result<Transfer> {
        progress.stage(1, "recovery: baseline");
        sleep_checked(crate::latency::CLUSTER_WARMUP, &probe)?;
        leaders[0] = leader_now(&cluster);
        marks[0] = Instant::now();
        phase.store(PHASE_BASELINE, Ordering::Release);
        sleep_checked(o.baseline, &probe)?;
        // The follower after the leader of this moment (it may have
        // changed on a loaded machine).
        let (leader, _) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
        victim = (leader + 1) % o.replicas;
        leaders[1] = leader_now(&cluster);
        marks[1] = Instant::now();
        phase.store(PHASE_DOWN, Ordering::Release);
        kill_and_wait_exit(&mut cluster, victim, exit_timeout(o.state_mib))?;
        sleep_checked(o.down, &probe)?;
        progress.stage(
            1000,
            format!("recovery: member {victim} copying a snapshot"),
        );
        leaders[2] = leader_now(&cluster);
        marks[2] = Instant::now();
        phase.store(PHASE_RECOVERING, Ordering::Release);
        cluster.restart(victim)?;
        let mut t = follow_recovery(
            &cluster,
            victim,
            marks[2],
            o.recovery_timeout,
            &probe,
            progress,
        )?;
        marks[3] = Instant::now();
        phase.store(PHASE_STOP, Ordering::Release);
        leaders[3] = leader_now(&cluster);
        if t.leader_at_copy.is_none() {
            t.leader_at_copy = leaders[2].as_ref().map(|l| l.0);
        }
        Ok(t)
    })();
    phase.store(PHASE_STOP, Ordering::Release);
    let hists = probe
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p));
    // A client that stopped says why (its error is the cause).
    let (mut transfer, hists) = match (transfer, hists) {
        (Err(BenchError::Cluster(what)), Err(client)) => {
            return Err(BenchError::Cluster(format!("{what}: {client}")))
        }
        (t, h) => (t?, h?),
    };
    let names = ["baseline", "follower down", "recovering"];
    // The leader's counters over a window, when one leader held it.
    let counters_over = |i: usize| -> Option<BTreeMap<String, u64>> {
        match (&leaders[i], &leaders[i + 1]) {
            (Some((a, ta, ca)), Some((b, tb, cb))) if a == b && ta == tb => Some(
                LEADER_COUNTERS
                    .iter()
                    .map(|&k| {
                        let at = |c: &BTreeMap<String, u64>| c.get(k).copied().unwrap_or(0);
                        (k.to_string(), at(cb).saturating_sub(at(ca)))
                    })
                    .collect(),
            ),
            _ => None,
        }
    };
    for (i, name) in names.iter().enumerate() {
        if counters_over(i).is_none() {
            let at = |l: &Option<LeaderAt>| {
                l.as_ref().map_or("none".to_string(), |(id, t, _)| {
                    format!("member {id} term {t}")
                })
            };
            notes.push(format!(
                "the leadership changed during the {name} window ({} → {}): its latencies \
                 include an election",
                at(&leaders[i]),
                at(&leaders[i + 1])
            ));
        }
    }
    let leader = leaders[0].as_ref().map_or(0, |l| l.0);
    // The status shows a copy's progress only while it runs (a later
    // attempt starts again from 0, and a copy can fall between two
    // polls): the sizes of the snapshots restored come from the replica's
    // "recovered" events.
    let restored = restored_bytes(&transfer.events);
    if let Some(&last) = restored.last() {
        transfer.bytes_total = last;
        transfer.bytes_copied = transfer.bytes_copied.max(restored.iter().sum());
    }
    // The donor as the recovering replica named it while copying, else
    // (a copy between two polls) the member that served snapshots.
    let served: Vec<(u8, u64)> = (0..o.replicas)
        .filter(|&id| id != victim)
        .filter_map(|id| {
            cluster
                .status_of(id, Duration::from_secs(1))
                .map(|s| (id, s.recovery.served))
        })
        .collect();
    if transfer.donor.is_none() {
        transfer.donor = served
            .iter()
            .filter(|(_, n)| *n > 0)
            .max_by_key(|(_, n)| *n)
            .map(|(id, _)| *id);
    }
    transfer.donor_served = served
        .iter()
        .find(|(id, _)| Some(*id) == transfer.donor)
        .map_or(0, |(_, n)| *n);
    if let Some(d) = transfer
        .donor
        .filter(|&d| Some(d) == transfer.leader_at_copy)
    {
        notes.push(format!(
            "the leader (member {d}) gave the snapshot, not the other follower: no follower \
             qualified as a donor when member {victim} asked (DARE keeps the leader off this \
             path), so the leader's loop paused for its fork and the recovering window measures \
             that too"
        ));
    }
    if transfer.completed != 1 {
        notes.push(format!(
            "member {victim} completed {} recoveries (expected 1) and abandoned {}; the donor \
             served {} snapshots; its events: {}",
            transfer.completed,
            transfer.abandoned,
            transfer.donor_served,
            transfer.events.join("; ")
        ));
    }
    if let (Some(ready), Some(done)) = (transfer.snapshot_ready_ms, transfer.completed_ms) {
        let copy_ms = (done - ready).max(POLL_PERIOD.as_secs_f64() * 1000.0);
        transfer.copy_ms = Some(copy_ms);
        transfer.copy_mb_per_s = Some(transfer.bytes_total as f64 / copy_ms / 1000.0);
    }
    if let Some(done) = transfer.completed_ms {
        transfer.end_to_end_mb_per_s = Some(transfer.bytes_total as f64 / done.max(1e-3) / 1000.0);
    }
    let windows: Vec<LatencyWindow> = hists
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let secs = marks[i + 1]
                .saturating_duration_since(marks[i])
                .as_secs_f64();
            LatencyWindow {
                name: names[i].into(),
                duration_ms: secs * 1000.0,
                latency: Summary::of(h),
                ops_per_sec: h.len() as f64 / secs.max(1e-9),
                cdf: cdf(h),
                leader_counters: counters_over(i).unwrap_or_default(),
            }
        })
        .collect();
    let ratio = |f: fn(&Summary) -> u64| {
        let (b, r) = (&windows[0].latency, &windows[2].latency);
        (f(b) > 0 && r.count > 0).then(|| f(r) as f64 / f(b) as f64)
    };
    Ok(RecoveryReport {
        replicas: o.replicas,
        state_mib: o.state_mib,
        state_bytes,
        fill_keys: keys,
        fill_value_bytes: o.fill_value_bytes,
        fill_s,
        fill_mb_per_s: state_bytes as f64 / fill_s.max(1e-9) / 1e6,
        snapshot_bytes_max: snapshot,
        log_ring_bytes: ring,
        prune_grace_us,
        probe_value_bytes: o.probe_value_bytes,
        leader,
        client_attempt_timeout_us: o.attempt_timeout.as_micros() as u64,
        p99_ratio: ratio(|s| s.p99_ns),
        p999_ratio: ratio(|s| s.p999_ns),
        windows,
        transfer,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restored_sizes_come_from_the_recovered_events() {
        let events = [
            "started: member 2 started (pid 1)".to_string(),
            "recovered: member 2 restored a snapshot up to index 4499 (4850630 bytes) and rejoins"
                .into(),
            "revoke: log access now granted to member 1 only".into(),
            "recovered: member 2 restored a snapshot up to index 5000 (4850700 bytes) and rejoins"
                .into(),
        ];
        assert_eq!(restored_bytes(&events), [4_850_630, 4_850_700]);
        assert!(restored_bytes(&events[..1]).is_empty());
    }

    #[test]
    fn the_regions_fit_the_state() {
        let state = 1024 * MIB;
        let snap = snapshot_bytes_for(state);
        assert!(snap > state + state / 16, "{snap}");
        assert_eq!(snap % 64, 0);
        // 1 GiB: a ring of the state's size (the largest the run picks).
        assert_eq!(ring_bytes_for(state), RING_BYTES_MAX);
        assert_eq!(ring_bytes_for(64 * MIB), 64 * MIB);
        // Below a MiB of state: the smallest ring.
        assert_eq!(ring_bytes_for(MIB / 2), RING_BYTES_MIN);
        // The ring never exceeds the state's MiB, so the fill's log (the
        // values plus keys and entry headers) wraps it and is pruned.
        for mib in [1, 4, 64, 1024, 4096] {
            assert!(ring_bytes_for(mib * MIB) <= mib * MIB);
        }
        // The defaults fit this machine's 23 GB with room to spare.
        assert!(memory_needed(3, state, snap, RING_BYTES_MAX) < 10 << 30);
    }
}
