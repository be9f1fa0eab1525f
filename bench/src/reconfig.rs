//! `reconfig`: write throughput over time while the group is reconfigured
//! (DARE §6, figure 9a).
//!
//! A local cluster of `replicas` slots starts with `initial_members` of
//! them in the group (`cluster.initial_members`); the others run as spares
//! outside it. Client threads write continuously over shared memory, and
//! every completed write is counted in the fixed-length bucket of its
//! completion time (DARE samples "the number of answered requests in
//! intervals of 10 ms"). At fixed times the bench asks the leader for a
//! change of the group (`verbatim_status::change_group`, the library call
//! behind `verbatim member`), which returns once the change's last CONFIG
//! entry has committed. Each change records when it was asked and
//! confirmed, the configuration it left, and the throughput before, during
//! and after it. At the end every key is read back and compared with the
//! last value it was acknowledged with: an acknowledged write that is gone
//! is a lost write.

use crate::cluster::{BenchCluster, ClusterSpec};
use crate::progress::Progress;
use crate::setup::TimingUs;
use crate::{BenchError, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use verbatim_client::client::{Client, ClientOptions, Transport, Wait};
use verbatim_client::manifest::Manifest;
use verbatim_status::{GroupConfiguration, MemberChange, Snapshot};

/// The schedule of the default run: DARE's figure 9a in short (two joins,
/// the leader removes itself, the group shrinks back to three slots).
pub const SCHEDULE_DEFAULT: &str = "1000:add:3,2000:add:4,3000:remove,4000:resize:3";

/// How long one client write may take, all its retries included, before
/// the writer counts it as failed (in doubt: it may still have been
/// applied). Longer than any leader change the run causes.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A writer that fails this many writes in a row stops: the group is not
/// serving, and spinning on errors would only hide it.
const CONSECUTIVE_FAILURES_MAX: u64 = 3;

/// Bytes of a value that carry the write's sequence number (hex).
const SEQ_HEX_BYTES: usize = 16;

/// Lost writes listed by key in the report (the count has them all).
const LOST_EXAMPLES_MAX: usize = 10;

/// Which member a `remove` without an id takes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RemoveTarget {
    /// The leader of the moment (DARE: "the leader removes itself").
    Leader,
    /// The lowest-numbered member that does not lead.
    Follower,
}

/// Whom a scheduled change is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A member id (add, remove) or a size (resize).
    Number(u8),
    /// Resolved when the change is asked.
    Role(RemoveTarget),
}

/// The kind of a scheduled change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// Put a member into the group.
    Add,
    /// Take a member out.
    Remove,
    /// Shrink the group to a number of slots.
    Resize,
}

/// One change of the schedule: at `at` after the start of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduledChange {
    /// When to ask, from the start of the measured run.
    pub at: Duration,
    /// What to ask.
    pub kind: ChangeKind,
    /// Of whom.
    pub target: Target,
}

impl ScheduledChange {
    /// How the schedule names it: "add 3", "remove leader", "resize 3".
    pub fn label(&self) -> String {
        let verb = match self.kind {
            ChangeKind::Add => "add",
            ChangeKind::Remove => "remove",
            ChangeKind::Resize => "resize",
        };
        match self.target {
            Target::Number(n) => format!("{verb} {n}"),
            Target::Role(RemoveTarget::Leader) => format!("{verb} leader"),
            Target::Role(RemoveTarget::Follower) => format!("{verb} follower"),
        }
    }
}

/// Parses a schedule: comma-separated `MS:add:ID`, `MS:remove[:ID|leader|
/// follower]` or `MS:resize:SIZE`, with MS the milliseconds from the start
/// of the run; a bare `remove` takes out `bare_remove`. The changes must
/// be in time order (they are asked one after the other).
pub fn parse_schedule(text: &str, bare_remove: RemoveTarget) -> Result<Vec<ScheduledChange>> {
    let bad = |item: &str, why: &str| {
        BenchError::Options(format!(
            "--schedule item `{item}`: {why} (use MS:add:ID, MS:remove[:ID|leader|follower] or \
             MS:resize:SIZE, e.g. {SCHEDULE_DEFAULT})"
        ))
    };
    let mut out: Vec<ScheduledChange> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let parts: Vec<&str> = item.split(':').map(str::trim).collect();
        let at_ms: u64 = parts[0]
            .parse()
            .map_err(|_| bad(item, "the time is not a number of milliseconds"))?;
        let number = |s: &str| {
            s.parse::<u8>()
                .map_err(|_| bad(item, "the member id or size is not a number from 0 to 255"))
        };
        let (kind, target) = match parts.get(1..).unwrap_or(&[]) {
            ["add", n] => (ChangeKind::Add, Target::Number(number(n)?)),
            ["resize", n] => (ChangeKind::Resize, Target::Number(number(n)?)),
            ["remove"] => (ChangeKind::Remove, Target::Role(bare_remove)),
            ["remove", "leader"] => (ChangeKind::Remove, Target::Role(RemoveTarget::Leader)),
            ["remove", "follower"] => (ChangeKind::Remove, Target::Role(RemoveTarget::Follower)),
            ["remove", n] => (ChangeKind::Remove, Target::Number(number(n)?)),
            _ => return Err(bad(item, "not a change")),
        };
        let at = Duration::from_millis(at_ms);
        if out.last().is_some_and(|prev| prev.at > at) {
            return Err(bad(item, "earlier than the change before it"));
        }
        out.push(ScheduledChange { at, kind, target });
    }
    Ok(out)
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct ReconfigOptions {
    /// Replica processes (slots of the manifest).
    pub replicas: u8,
    /// Members of the first configuration (ids below it); the rest are
    /// spares.
    pub initial_members: u8,
    /// Writing client threads.
    pub clients: usize,
    /// Their cores, round-robin (empty: unpinned).
    pub client_cores: Vec<usize>,
    /// How they wait for a reply.
    pub wait: Wait,
    /// Client attempt timeout (how long it waits on a silent replica).
    pub attempt_timeout: Duration,
    /// Value size of the writes.
    pub value_bytes: usize,
    /// Distinct keys per client thread.
    pub keys: u64,
    /// Length of one throughput sample.
    pub bucket: Duration,
    /// Length of the run; it goes on for at least `window` past the last
    /// change's confirmation.
    pub duration: Duration,
    /// Window averaged before and after each change.
    pub window: Duration,
    /// The changes.
    pub schedule: Vec<ScheduledChange>,
    /// How long one change may take to be confirmed.
    pub change_timeout: Duration,
}

/// One change of the group, as it went.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangeRecord {
    /// 0-based, in schedule order.
    pub index: usize,
    /// As scheduled: "add 3", "remove leader".
    pub scheduled: String,
    /// As asked: "member add 3", "member remove 0".
    pub request: String,
    /// Scheduled time (ms from the start of the run).
    pub scheduled_ms: f64,
    /// When it was asked (later than scheduled if the change before it
    /// was still being confirmed).
    pub asked_ms: f64,
    /// When the leader confirmed it committed (None: it failed).
    pub confirmed_ms: Option<f64>,
    /// Asked → confirmed.
    pub took_ms: Option<f64>,
    /// The leader when it was asked.
    pub leader_before: Option<u8>,
    /// The first leader seen after the confirmation that is a member of
    /// the configuration committed (another one after the leader removed
    /// itself: it leads until it steps down).
    pub leader_after: Option<u8>,
    /// When `leader_after` was first seen leading (ms from the start).
    pub leader_after_ms: Option<f64>,
    /// Its term.
    #[serde(default)]
    pub leader_after_term: Option<u64>,
    /// The committed configuration, as an operator reads it.
    pub configuration: Option<String>,
    /// The committed configuration.
    pub group: Option<GroupConfiguration>,
    /// Why it failed.
    pub error: Option<String>,
    /// Mean writes/s over the window before it was asked.
    pub ops_per_s_before: Option<f64>,
    /// Mean writes/s from asked to confirmed.
    pub ops_per_s_during: Option<f64>,
    /// Mean writes/s over the window after it was confirmed (cut at the
    /// next change).
    pub ops_per_s_after: Option<f64>,
    /// Lowest bucket (as writes/s) from asked until the next change.
    pub ops_per_s_min: Option<f64>,
    /// Longest run of buckets without a completed write from asked until
    /// the next change (ms): unavailability, at bucket resolution.
    pub stall_ms: f64,
}

/// The acknowledged writes and what reading them back found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WriteCheck {
    /// Writes acknowledged to the clients.
    pub acknowledged: u64,
    /// Acknowledged writes that completed after the last full bucket (the
    /// writes in flight when the run ended), so not in `bucket_ops`.
    #[serde(default)]
    pub after_last_bucket: u64,
    /// Writes that failed (timed out): in doubt, either value is right.
    pub failed: u64,
    /// The last failure's text.
    pub last_failure: Option<String>,
    /// Keys read back at the end.
    pub keys_checked: u64,
    /// Keys whose last acknowledged value is gone (older, missing or
    /// garbled): lost writes.
    pub lost: u64,
    /// The first few of them: "key: expected seq N, found …".
    pub lost_examples: Vec<String>,
}

/// The `reconfig` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReconfigReport {
    /// Replica processes (slots).
    pub replicas: u8,
    /// Members at the start.
    pub initial_members: u8,
    /// Writing client threads.
    pub clients: usize,
    /// How they waited.
    pub client_wait: String,
    /// Where they ran.
    pub client_placement: String,
    /// Client attempt timeout (µs).
    pub client_attempt_timeout_us: u64,
    /// Value size of the writes.
    pub value_bytes: usize,
    /// Distinct keys per client.
    pub keys_per_client: u64,
    /// Protocol timing.
    pub timing: TimingUs,
    /// The leader at the start.
    pub first_leader: u8,
    /// Length of one sample (ms).
    pub bucket_ms: f64,
    /// Window averaged before and after each change (ms).
    pub window_ms: f64,
    /// Length of the run (ms).
    pub duration_ms: f64,
    /// Writes completed in each bucket, from the start of the run.
    pub bucket_ops: Vec<u64>,
    /// Every change.
    pub changes: Vec<ChangeRecord>,
    /// The group at the end, as the leader sees it.
    pub final_configuration: Option<String>,
    /// The same, in full.
    pub final_group: Option<GroupConfiguration>,
    /// The acknowledged writes, checked.
    pub writes: WriteCheck,
}

impl ReconfigReport {
    /// Writes/s of one bucket.
    pub fn rate(&self, bucket: usize) -> f64 {
        self.bucket_ops.get(bucket).copied().unwrap_or(0) as f64 * 1000.0 / self.bucket_ms
    }

    /// Writes/s over the whole run.
    pub fn mean_rate(&self) -> f64 {
        let total: u64 = self.bucket_ops.iter().sum();
        total as f64 * 1000.0 / self.duration_ms.max(1e-9)
    }

    /// True when every change was confirmed and no write was lost.
    pub fn passed(&self) -> bool {
        self.writes.lost == 0 && self.changes.iter().all(|c| c.error.is_none())
    }
}

/// Where a key stands: the last sequence number acknowledged, and the
/// ones that failed after it (each may or may not have been applied).
#[derive(Clone, Debug, Default)]
struct KeyState {
    acked: Option<u64>,
    in_doubt: Vec<u64>,
}

/// What one writer thread brings back.
#[derive(Default)]
struct WriterOutcome {
    buckets: Vec<u64>,
    keys: Vec<(Vec<u8>, KeyState)>,
    acknowledged: u64,
    failed: u64,
    last_failure: Option<String>,
}

/// State shared with the writers.
struct Shared {
    epoch: Instant,
    stop: AtomicBool,
    /// A writer that gave up says why here.
    error: Mutex<Option<String>>,
}

impl Shared {
    fn check(&self) -> Result<()> {
        crate::signals::check()?;
        match self.error.lock().map(|e| e.clone()) {
            Ok(Some(e)) => Err(BenchError::Cluster(format!(
                "a writing client gave up: {e}"
            ))),
            _ => Ok(()),
        }
    }

    fn since_ms(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64() * 1000.0
    }

    /// Sleeps until `t` from the epoch, failing early on Ctrl-C or a
    /// writer that gave up.
    fn sleep_until(&self, t: Duration) -> Result<()> {
        let end = self.epoch + t;
        loop {
            self.check()?;
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            std::thread::sleep((end - now).min(Duration::from_millis(5)));
        }
    }
}

/// The value of write `seq`: its number in hex, then padding.
fn value_of(seq: u64, value_bytes: usize) -> Vec<u8> {
    let mut v = vec![b'.'; value_bytes];
    v[..SEQ_HEX_BYTES].copy_from_slice(format!("{seq:016x}").as_bytes());
    v
}

/// The sequence number a value carries (None: not a value of ours).
fn seq_of(value: &[u8], value_bytes: usize) -> Option<u64> {
    if value.len() != value_bytes || value[SEQ_HEX_BYTES..].iter().any(|&b| b != b'.') {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(&value[..SEQ_HEX_BYTES]).ok()?, 16).ok()
}

fn writer(
    thread: usize,
    manifest: &Manifest,
    o: &ReconfigOptions,
    bucket_ns: u64,
    shared: &Shared,
) -> WriterOutcome {
    if !o.client_cores.is_empty() {
        crate::cluster::pin_current(Some(o.client_cores[thread % o.client_cores.len()]));
    }
    let mut client = Client::new(
        manifest,
        ClientOptions {
            transport: Transport::Shm,
            wait: o.wait,
            attempt_timeout: o.attempt_timeout,
            total_timeout: WRITE_TIMEOUT,
            client_id: None,
        },
    );
    let mut out = WriterOutcome {
        buckets: vec![0; (o.duration.as_nanos() as u64 / bucket_ns + 1) as usize],
        keys: (0..o.keys.max(1))
            .map(|k| {
                (
                    format!("rc:{thread:02}:{k:06}").into_bytes(),
                    KeyState::default(),
                )
            })
            .collect(),
        ..WriterOutcome::default()
    };
    let mut value = value_of(0, o.value_bytes);
    let mut seq = 0u64;
    let mut failures_in_a_row = 0u64;
    while !shared.stop.load(Ordering::Relaxed) && !crate::signals::interrupted() {
        seq += 1;
        let k = (seq % out.keys.len() as u64) as usize;
        value[..SEQ_HEX_BYTES].copy_from_slice(format!("{seq:016x}").as_bytes());
        let (key, state) = &mut out.keys[k];
        match client.set(key, &value) {
            Ok(()) => {
                let done_ns = shared.epoch.elapsed().as_nanos() as u64;
                let b = (done_ns / bucket_ns) as usize;
                if b >= out.buckets.len() {
                    out.buckets.resize(b + 1, 0);
                }
                out.buckets[b] += 1;
                state.acked = Some(seq);
                state.in_doubt.clear();
                out.acknowledged += 1;
                failures_in_a_row = 0;
            }
            Err(e) => {
                state.in_doubt.push(seq);
                out.failed += 1;
                failures_in_a_row += 1;
                let text = e.to_string();
                if failures_in_a_row >= CONSECUTIVE_FAILURES_MAX {
                    if let Ok(mut slot) = shared.error.lock() {
                        *slot = Some(format!(
                            "{failures_in_a_row} writes failed in a row, the last: {text}"
                        ));
                    }
                    out.last_failure = Some(text);
                    break;
                }
                out.last_failure = Some(text);
            }
        }
    }
    out
}

/// Waits (bounded) for a leader above `min_term`.
fn wait_leader_above(cluster: &BenchCluster, min_term: u64) -> Option<Snapshot> {
    wait_leader_among(cluster, min_term, &[])
}

/// Waits (bounded) for a leader above `min_term` that is one of `members`
/// (any member when empty).
fn wait_leader_among(cluster: &BenchCluster, min_term: u64, members: &[u8]) -> Option<Snapshot> {
    let deadline = Instant::now() + crate::cluster::LEADER_TIMEOUT;
    loop {
        if let Some(s) = cluster
            .leader_now()
            .filter(|s| s.term > min_term && (members.is_empty() || members.contains(&s.id)))
        {
            return Some(s);
        }
        if Instant::now() > deadline || crate::signals::interrupted() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The change to ask for, resolved against the leader of the moment.
fn resolve(c: &ScheduledChange, leader: &Snapshot) -> Result<MemberChange> {
    let member = match c.target {
        Target::Number(n) => n,
        Target::Role(RemoveTarget::Leader) => leader.id,
        Target::Role(RemoveTarget::Follower) => leader
            .group
            .members
            .iter()
            .copied()
            .find(|&m| m != leader.id)
            .ok_or_else(|| {
                BenchError::Options(format!(
                    "{}: the group has no member besides the leader ({})",
                    c.label(),
                    leader.group.describe()
                ))
            })?,
    };
    Ok(match c.kind {
        ChangeKind::Add => MemberChange::Add(member),
        ChangeKind::Remove => MemberChange::Remove(member),
        ChangeKind::Resize => MemberChange::Resize(member),
    })
}

/// Mean writes/s over buckets `[from, to)` (None when empty).
fn mean_rate(buckets: &[u64], bucket_ms: f64, from: usize, to: usize) -> Option<f64> {
    let to = to.min(buckets.len());
    (from < to).then(|| {
        buckets[from..to].iter().sum::<u64>() as f64 * 1000.0 / ((to - from) as f64 * bucket_ms)
    })
}

/// Fills the throughput figures of each change from the buckets: before
/// = the window before it was asked; during = asked → confirmed; after =
/// the window after confirmation; min and stall = from asked until the
/// next change was asked (or the end).
fn throughput_around(
    changes: &mut [ChangeRecord],
    buckets: &[u64],
    bucket_ms: f64,
    window_ms: f64,
) {
    let at = |ms: f64| (ms / bucket_ms).floor().max(0.0) as usize;
    let window = ((window_ms / bucket_ms).round() as usize).max(1);
    let ends: Vec<f64> = changes
        .iter()
        .skip(1)
        .map(|c| c.asked_ms)
        .chain([buckets.len() as f64 * bucket_ms])
        .collect();
    for (c, end_ms) in changes.iter_mut().zip(ends) {
        let asked = at(c.asked_ms);
        let span_end = at(end_ms).max(asked + 1).min(buckets.len());
        c.ops_per_s_before = mean_rate(buckets, bucket_ms, asked.saturating_sub(window), asked);
        if let Some(confirmed_ms) = c.confirmed_ms {
            let confirmed = at(confirmed_ms);
            c.ops_per_s_during = mean_rate(buckets, bucket_ms, asked, confirmed + 1);
            c.ops_per_s_after = mean_rate(
                buckets,
                bucket_ms,
                confirmed + 1,
                (confirmed + 1 + window).min(span_end),
            );
        }
        let span = buckets.get(asked..span_end).unwrap_or(&[]);
        c.ops_per_s_min = span
            .iter()
            .min()
            .map(|&ops| ops as f64 * 1000.0 / bucket_ms);
        let mut longest = 0usize;
        let mut run = 0usize;
        for &ops in span {
            run = if ops == 0 { run + 1 } else { 0 };
            longest = longest.max(run);
        }
        c.stall_ms = longest as f64 * bucket_ms;
    }
}

/// Runs the reconfiguration series.
pub fn run(spec: &ClusterSpec, o: &ReconfigOptions, progress: &Progress) -> Result<ReconfigReport> {
    if o.initial_members == 0 || o.initial_members > o.replicas {
        return Err(BenchError::Options(format!(
            "--initial-members {} must be between 1 and --replicas {}",
            o.initial_members, o.replicas
        )));
    }
    if o.value_bytes < SEQ_HEX_BYTES {
        return Err(BenchError::Options(format!(
            "--value-bytes must be at least {SEQ_HEX_BYTES} (a value carries its write's number)"
        )));
    }
    if o.clients == 0 || o.bucket.is_zero() {
        return Err(BenchError::Options(
            "--clients and --bucket-ms must be at least 1".into(),
        ));
    }
    let mut spec = spec.clone();
    // The user's own --set overrides come after ours and win.
    spec.overrides
        .insert(0, format!("cluster.initial_members={}", o.initial_members));
    let cluster = BenchCluster::start(&spec, o.replicas, false)?;
    let (first_leader, _) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
    progress.println(format!(
        "reconfig: {} replicas up ({} members, {} spares), member {first_leader} leads",
        o.replicas,
        o.initial_members,
        o.replicas - o.initial_members
    ));
    let manifest = cluster.local().manifest.clone();
    let sockets: Vec<PathBuf> = (0..o.replicas)
        .map(|id| manifest.status_socket(id))
        .collect();
    // A fresh cluster is slower for its first few hundred ms (page faults
    // in the log ring and the store): run it in before t = 0.
    {
        let mut c = cluster.shm_client(Wait::Yield, o.attempt_timeout);
        let value = value_of(0, o.value_bytes);
        let began = Instant::now();
        let mut i = 0u64;
        while began.elapsed() < crate::latency::CLUSTER_WARMUP {
            crate::signals::check()?;
            c.set(format!("warm:{:04}", i % 1000).as_bytes(), &value)?;
            i += 1;
        }
    }
    let bucket_ns = (o.bucket.as_nanos() as u64).max(1);
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        stop: AtomicBool::new(false),
        error: Mutex::new(None),
    });
    let writers: Vec<_> = (0..o.clients)
        .map(|t| {
            let (manifest, o, shared) = (manifest.clone(), o.clone(), shared.clone());
            std::thread::spawn(move || writer(t, &manifest, &o, bucket_ns, &shared))
        })
        .collect();
    let run_changes = || -> Result<(Vec<ChangeRecord>, f64)> {
        let mut changes = Vec::new();
        progress.stage(o.schedule.len().max(1) as u64, "reconfig");
        for (index, c) in o.schedule.iter().enumerate() {
            shared.sleep_until(c.at)?;
            let leader = wait_leader_above(&cluster, 0).ok_or_else(|| {
                BenchError::Cluster(format!("no leader to ask for {}", c.label()))
            })?;
            let change = resolve(c, &leader)?;
            let mut rec = ChangeRecord {
                index,
                scheduled: c.label(),
                request: change.request_line(),
                scheduled_ms: c.at.as_secs_f64() * 1000.0,
                asked_ms: shared.since_ms(),
                leader_before: Some(leader.id),
                ..ChangeRecord::default()
            };
            match verbatim_status::change_group(&sockets, change, o.change_timeout) {
                Ok(g) => {
                    let confirmed = shared.since_ms();
                    rec.confirmed_ms = Some(confirmed);
                    rec.took_ms = Some(confirmed - rec.asked_ms);
                    rec.configuration = Some(g.describe());
                    rec.group = Some(g);
                    // A leader that removed itself steps down once the
                    // change commits: the next one has a higher term.
                    let removed_leader = matches!(change, MemberChange::Remove(m) if m == leader.id)
                        || rec
                            .group
                            .as_ref()
                            .is_some_and(|g| !g.members.contains(&leader.id));
                    let min_term = if removed_leader { leader.term } else { 0 };
                    let members = rec
                        .group
                        .as_ref()
                        .map(|g| g.members.clone())
                        .unwrap_or_default();
                    if let Some(l) = wait_leader_among(&cluster, min_term, &members) {
                        rec.leader_after = Some(l.id);
                        rec.leader_after_ms = Some(shared.since_ms());
                        rec.leader_after_term = Some(l.term);
                    }
                }
                Err(e) => rec.error = Some(e.to_string()),
            }
            progress.println(format!(
                "{} at {:.0} ms: {}",
                rec.request,
                rec.asked_ms,
                match (&rec.configuration, &rec.error) {
                    (Some(g), _) => format!(
                        "confirmed after {:.1} ms, {g}; leader {}",
                        rec.took_ms.unwrap_or(0.0),
                        rec.leader_after.map_or("?".into(), |l| l.to_string())
                    ),
                    (None, Some(e)) => format!("failed: {e}"),
                    (None, None) => "?".into(),
                }
            ));
            progress.inc(1);
            changes.push(rec);
        }
        let last = changes
            .iter()
            .map(|c| c.leader_after_ms.or(c.confirmed_ms).unwrap_or(c.asked_ms))
            .fold(0.0f64, f64::max);
        let end = o.duration.max(Duration::from_secs_f64(
            (last + o.window.as_secs_f64() * 1000.0) / 1000.0,
        ));
        shared.sleep_until(end)?;
        Ok((changes, shared.since_ms()))
    };
    let result = run_changes();
    shared.stop.store(true, Ordering::Relaxed);
    let outcomes: Vec<WriterOutcome> = writers
        .into_iter()
        .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect();
    let (mut changes, end_ms) = result?;
    let bucket_ms = o.bucket.as_secs_f64() * 1000.0;
    let n_buckets = (end_ms / bucket_ms).floor() as usize;
    let mut bucket_ops = vec![0u64; n_buckets];
    let mut after_last_bucket = 0;
    for w in &outcomes {
        for (sum, &ops) in bucket_ops.iter_mut().zip(&w.buckets) {
            *sum += ops;
        }
        after_last_bucket += w.buckets.iter().skip(n_buckets).sum::<u64>();
    }
    let window_ms = o.window.as_secs_f64() * 1000.0;
    throughput_around(&mut changes, &bucket_ops, bucket_ms, window_ms);
    progress.stage(1, "reconfig: reading every key back");
    let mut writes = check_writes(&cluster, o, &outcomes)?;
    writes.after_last_bucket = after_last_bucket;
    let final_group = cluster.leader_now().map(|s| s.group);
    Ok(ReconfigReport {
        replicas: o.replicas,
        initial_members: o.initial_members,
        clients: o.clients,
        client_wait: crate::cluster::wait_name(o.wait).into(),
        client_placement: if o.client_cores.is_empty() {
            "unpinned".into()
        } else {
            format!("pinned round-robin to core(s) {:?}", o.client_cores)
        },
        client_attempt_timeout_us: o.attempt_timeout.as_micros() as u64,
        value_bytes: o.value_bytes,
        keys_per_client: o.keys.max(1),
        timing: cluster.timing(),
        first_leader,
        bucket_ms,
        window_ms,
        duration_ms: n_buckets as f64 * bucket_ms,
        bucket_ops,
        changes,
        final_configuration: final_group.as_ref().map(GroupConfiguration::describe),
        final_group,
        writes,
    })
}

/// Reads every key back and compares it with its last acknowledged value.
fn check_writes(
    cluster: &BenchCluster,
    o: &ReconfigOptions,
    outcomes: &[WriterOutcome],
) -> Result<WriteCheck> {
    let mut client = Client::new(
        &cluster.local().manifest,
        ClientOptions {
            transport: Transport::Shm,
            wait: Wait::Yield,
            attempt_timeout: o.attempt_timeout,
            total_timeout: WRITE_TIMEOUT,
            client_id: None,
        },
    );
    let mut check = WriteCheck::default();
    for w in outcomes {
        check.acknowledged += w.acknowledged;
        check.failed += w.failed;
        if w.last_failure.is_some() {
            check.last_failure.clone_from(&w.last_failure);
        }
        for (key, state) in &w.keys {
            if state.acked.is_none() && state.in_doubt.is_empty() {
                continue;
            }
            crate::signals::check()?;
            check.keys_checked += 1;
            let found = client.get(key)?;
            let seq = found.as_deref().and_then(|v| seq_of(v, o.value_bytes));
            let ok = match (seq, state.acked) {
                (Some(s), Some(a)) if s == a => true,
                (Some(s), _) => state.in_doubt.contains(&s),
                // Never acknowledged: absent is as right as any in-doubt value.
                (None, None) => found.is_none(),
                (None, Some(_)) => false,
            };
            if !ok {
                check.lost += 1;
                if check.lost_examples.len() < LOST_EXAMPLES_MAX {
                    check.lost_examples.push(format!(
                        "{}: acknowledged write {} (in doubt after it: {:?}), found {}",
                        String::from_utf8_lossy(key),
                        state.acked.map_or("none".into(), |a| a.to_string()),
                        state.in_doubt,
                        match (&found, seq) {
                            (None, _) => "no value".to_string(),
                            (Some(_), Some(s)) => format!("write {s}"),
                            (Some(v), None) => format!("{} bytes not written by this run", v.len()),
                        }
                    ));
                }
            }
        }
    }
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_bare_removes_take_the_option() {
        let s = parse_schedule(SCHEDULE_DEFAULT, RemoveTarget::Leader).unwrap();
        let labels: Vec<String> = s.iter().map(ScheduledChange::label).collect();
        assert_eq!(labels, ["add 3", "add 4", "remove leader", "resize 3"]);
        assert_eq!(s[2].at, Duration::from_millis(3000));
        let s = parse_schedule(SCHEDULE_DEFAULT, RemoveTarget::Follower).unwrap();
        assert_eq!(s[2].target, Target::Role(RemoveTarget::Follower));
        let s = parse_schedule(" 5:remove:2 , 9:remove:leader", RemoveTarget::Follower).unwrap();
        assert_eq!(s[0].target, Target::Number(2));
        assert_eq!(s[1].target, Target::Role(RemoveTarget::Leader));
        for bad in [
            "x:add:3",
            "1:add",
            "1:grow:3",
            "1:add:300",
            "2:add:3,1:add:4",
        ] {
            assert!(
                parse_schedule(bad, RemoveTarget::Leader).is_err(),
                "{bad} was accepted"
            );
        }
        assert!(parse_schedule("", RemoveTarget::Leader).unwrap().is_empty());
    }

    #[test]
    fn values_carry_their_write_number() {
        let v = value_of(0xabc, 64);
        assert_eq!(v.len(), 64);
        assert_eq!(seq_of(&v, 64), Some(0xabc));
        assert_eq!(seq_of(&v[..63], 64), None);
        let mut garbled = v.clone();
        garbled[40] = b'x';
        assert_eq!(seq_of(&garbled, 64), None);
    }

    #[test]
    fn throughput_is_split_around_each_change() {
        // 10 ms buckets: 100 writes each, a change asked at 50 ms and
        // confirmed at 75 ms during which nothing completes at 60-70 ms.
        let mut buckets = vec![100u64; 20];
        buckets[6] = 0;
        let mut changes = vec![ChangeRecord {
            asked_ms: 50.0,
            confirmed_ms: Some(75.0),
            ..ChangeRecord::default()
        }];
        throughput_around(&mut changes, &buckets, 10.0, 30.0);
        let c = &changes[0];
        assert_eq!(c.ops_per_s_before, Some(10_000.0));
        // Buckets 5, 6, 7: 200 writes in 30 ms.
        assert!((c.ops_per_s_during.unwrap() - 200.0 / 0.03).abs() < 1e-6);
        assert_eq!(c.ops_per_s_after, Some(10_000.0));
        assert_eq!(c.ops_per_s_min, Some(0.0));
        assert_eq!(c.stall_ms, 10.0);
    }
}
