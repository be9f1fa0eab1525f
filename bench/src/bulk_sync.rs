//! `bulk-sync`: how fast a backup-memory primary refills a member that
//! came back empty (MacR §III-E1; issue 16: "Bulk synchronisation of
//! 1 GiB: time and bandwidth against pipelined replay, and against this
//! machine's memcpy bandwidth").
//!
//! * **Store.** A 3-replica group in `cluster.mode = "backup-memory"`
//!   (views and lease from [`ClusterSpec::with_mode`]), its `[backup]`
//!   store sized for `--store-mib` MiB of used store (`used_bytes` in the
//!   primary's status: metadata and carved slabs, what a bulk copy moves),
//!   filled with SETs of distinct keys by the pipelined client of
//!   [`crate::recovery`] until `used_bytes` reaches the target.
//! * **Rounds.** A backup of the view is SIGKILLed (alternating between
//!   the backups), the run waits for its exit and for the primary to mark
//!   its copy `needed`, restarts it (a new process, an empty store), and
//!   polls the primary's status every `--poll-ms` until that member's copy
//!   is `synced` (and then until the view lists it again). The copy's
//!   `done_bytes` is sampled at each poll for the progress line and
//!   `bulk_sync_progress.svg`; the bytes are the primary's `copy_bytes`
//!   counter's delta.
//! * **memcpy.** Before any cluster starts, the same number of bytes is
//!   copied between two private buffers, between two shared mappings of
//!   /dev/shm files (libc memcpy, and the fabric's own word-by-word copy),
//!   and into freshly truncated shared pages (what a restarted member's new
//!   segment is).
//! * **Replay.** The replica has no pipelined-replay path (a copy is always
//!   bulk): the comparison is the measured fill rate, i.e. the same items
//!   written through the client write path, expressed as the time the
//!   store's items would take.

use crate::cluster::{BenchCluster, ClusterSpec, ReplicationMode};
use crate::progress::Progress;
use crate::recovery::{
    exit_timeout, fill_pipelined, fs_free_bytes, kill_and_wait_exit, mem_available_bytes, MIB,
};
use crate::{BenchError, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use verbatim_client::client::{Outcome, Wait};
use verbatim_client::manifest::Manifest;
use verbatim_core::kv::KvOp;
use verbatim_status::{BackupState, Snapshot};

/// Bytes in a GiB (bandwidths here are GiB/s: 2^30 bytes per second).
const GIB: f64 = (1u64 << 30) as f64;

/// Prefix of the fill's keys (`bulk:00000042`).
const KEY_PREFIX: &str = "bulk:";

/// Bytes of a fill key: the prefix and eight digits (more only past 10^8
/// items, which no store here reaches).
const KEY_BYTES: u64 = KEY_PREFIX.len() as u64 + 8;

/// How long a group may take to have a primary with every member synced
/// and in its view (a start, or a member added back after its copy).
const STEADY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the primary may take to mark a killed member's copy `needed`
/// (its death notice arrives in well under a millisecond; a pidfd within
/// a few).
const NOTICE_TIMEOUT: Duration = Duration::from_secs(10);

/// Status polls of the primary that may fail in a row before the round
/// is given up (each waits up to [`STATUS_TIMEOUT`]).
const STATUS_FAILURES_MAX: u32 = 20;
/// How often a replica publishes its status snapshot (host's poll loop,
/// `STATUS_PERIOD`): the resolution of every time taken from it.
pub const STATUS_PERIOD_MS: f64 = 50.0;
/// The failure detector the run gives the replicas unless
/// `--manifest-timing`: Δ 50 ms (max 200 ms) instead of the manifest's
/// 5 ms. With 5 ms, the primary is deposed at nearly every copy of 64 MiB
/// or more here (2 cores: its poll loop, busy with the copy and sharing a
/// core with the restarting member, misses heartbeats for 10–30 ms), and
/// the take-over's copy to every backup replaces the one to measure. The
/// heartbeat counter's read gap goes to 400 ms (from 40 ms): the primary
/// maps a restarted member's new segment in its poll loop (127 ms for
/// 1 GiB here), its counter stands still meanwhile, and a backup would
/// suspect it.
pub const RELAXED_TIMING: [&str; 4] = [
    "timing.fd_check_period_us=50000",
    "timing.fd_check_period_max_us=200000",
    // At least Δ (the manifest's check).
    "timing.leader_quorum_timeout_us=200000",
    "timing.counter_read_gap_us=400000",
];

/// How long one status query may take.
const STATUS_TIMEOUT: Duration = Duration::from_millis(500);

/// What to measure.
#[derive(Clone, Debug)]
pub struct BulkSyncOptions {
    /// Group size.
    pub replicas: u8,
    /// Used store to fill (MiB of `used_bytes`: metadata and carved slabs).
    pub store_mib: u64,
    /// Value size of the fill.
    pub value_bytes: usize,
    /// `backup.slab_bytes` (a power of two, at least 4096).
    pub slab_bytes: u32,
    /// `backup.sync_chunk_bytes` (None: the manifest's, 1 MiB).
    pub sync_chunk_bytes: Option<u32>,
    /// Kill / restart / copy rounds that count.
    pub rounds: u32,
    /// Kill the backups in turn instead of the same one every round.
    pub alternate_backups: bool,
    /// Keep the killed member's old segment open until its copy is done
    /// (see [`run`]), so that the replicas do not free its pages.
    pub hold_old_segment: bool,
    /// Run with the manifest's failure detector, not [`RELAXED_TIMING`].
    pub manifest_timing: bool,
    /// Read every key back after the fill.
    pub check_fill: bool,
    /// Period of the primary's status polls during a copy.
    pub poll: Duration,
    /// How long restart → synced may take.
    pub sync_timeout: Duration,
    /// Buffer of the memcpy measurement (bytes; None: the store's size);
    /// copies repeat to the store's size, at least 3 times.
    pub memcpy_buffer_bytes: Option<u64>,
    /// Core of the filling client and the memcpy measurement.
    pub client_core: Option<usize>,
    /// Client attempt timeout.
    pub attempt_timeout: Duration,
}

/// The store the replicas ran with (from the manifest they parsed: the
/// bench's sizes, then `--set`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreSizing {
    /// `backup.entry_count`.
    pub entry_count: u32,
    /// `backup.slab_bytes`.
    pub slab_bytes: u32,
    /// `backup.slab_count`.
    pub slab_count: u32,
    /// `backup.sync_chunk_bytes`: bytes of one copy WRITE.
    pub sync_chunk_bytes: u32,
    /// Copy WRITEs in flight per member (the engine's constant).
    pub sync_in_flight: u32,
    /// `backup.forward_threshold`.
    pub forward_threshold: u8,
    /// `cluster.value_bytes_max`.
    pub value_bytes_max: u32,
    /// Bytes of each replica's store region (mailbox and store): what
    /// each replica maps in /dev/shm.
    pub region_bytes: u64,
    /// Bytes before the store in the region (the mailbox; a copy starts
    /// after it).
    pub mailbox_bytes: u64,
    /// Bytes of the store's metadata (header, allocator, slab map,
    /// entries, sessions): `used_bytes` with no slab carved.
    pub metadata_bytes: u64,
    /// Chunk of one fill item (32 B header, key, value, rounded up to a
    /// size class: 64 << c).
    pub item_chunk_bytes: u64,
}

/// The fill.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FillRecord {
    /// Items written (distinct keys).
    pub items: u64,
    /// Bytes of their values.
    pub value_bytes_total: u64,
    /// `used_bytes` at the primary afterwards.
    pub used_bytes: u64,
    /// Keys at the primary afterwards.
    pub keys: u64,
    /// Wall time of the fill (s), status checks included.
    pub seconds: f64,
    /// Items per second.
    pub items_per_s: f64,
    /// Used store per second (MiB/s): `used_bytes` over the fill time.
    pub used_mib_per_s: f64,
    /// Values per second (10^6 bytes/s).
    pub values_mb_per_s: f64,
    /// Items per second over each tenth of the fill (about), in order:
    /// whether the write path slows as the store grows.
    #[serde(default)]
    pub items_per_s_by_part: Vec<f64>,
    /// SETs answered with an error reply instead of `Ok`.
    #[serde(default)]
    pub refused: u64,
    /// The first of them.
    #[serde(default)]
    pub first_refusal: Option<String>,
    /// Client attempts that timed out or hit a replica that exited.
    #[serde(default)]
    pub client_retries: u64,
    /// Redirects the client followed (a new primary).
    #[serde(default)]
    pub client_redirects: u64,
    /// Every key read back from the primary after the fill.
    #[serde(default)]
    pub check: Option<FillCheck>,
    /// The primary at the end of the fill.
    #[serde(default)]
    pub primary: Option<u8>,
    /// Its backup-memory state then (counters: zero-copy and forwarded
    /// writes, bulk copies and their bytes, take-overs).
    #[serde(default)]
    pub primary_state: Option<BackupState>,
    /// The other members' backup-memory state then (replays of forwarded
    /// writes, and their failures).
    #[serde(default)]
    pub backups_state: Vec<MemberBackupState>,
    /// Client threads (one, pipelined).
    pub client_threads: u32,
    /// Requests in flight.
    pub depth: u32,
}

/// The fill read back: every key GET from the primary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FillCheck {
    /// Keys read.
    pub keys_checked: u64,
    /// Keys the primary does not have.
    pub missing: u64,
    /// Keys with another value than the one written.
    pub wrong: u64,
    /// The first few of either.
    pub examples: Vec<String>,
    /// Time it took (s).
    pub seconds: f64,
}

/// A member's backup-memory state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemberBackupState {
    /// The member.
    pub member: u8,
    /// Its state, as its status showed it.
    pub state: BackupState,
}

/// One status poll of the primary during a copy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncSample {
    /// Since the restart (ms), when the primary took the snapshot (its
    /// `at_unix_ms`, whole ms; the first may predate the restart).
    pub ms: f64,
    /// Since the restart (ms), when the bench received it.
    #[serde(default)]
    pub seen_ms: f64,
    /// The member's copy: `needed`, `copying`, `synced` ("" when the
    /// primary listed no copy for it).
    pub state: String,
    /// Bytes of the copy posted so far (0 unless copying; the whole copy
    /// once synced).
    pub done_bytes: u64,
    /// Bytes of the copy (0 unless copying or synced).
    pub total_bytes: u64,
}

/// One kill, restart and copy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncRound {
    /// 1, 2, …
    pub round: u32,
    /// The member killed and copied.
    pub member: u8,
    /// The primary that copied.
    pub primary: u8,
    /// SIGKILL → its process gone (ms).
    pub kill_to_exit_ms: f64,
    /// SIGKILL → the first primary snapshot that marks its copy not
    /// synced (ms, by the snapshot's own time stamp).
    pub kill_to_noticed_ms: Option<f64>,
    /// Restart → its own status socket answers (ms).
    pub status_up_ms: Option<f64>,
    /// Restart → the first primary snapshot showing the copy running (ms;
    /// None when the copy fell between two snapshots).
    pub copying_seen_ms: Option<f64>,
    /// Restart → the first primary snapshot showing the copy `synced` (ms,
    /// by the snapshot's time stamp): the time asked for.
    pub synced_ms: Option<f64>,
    /// Restart → the first primary snapshot whose view lists the member
    /// again (ms).
    pub in_view_ms: Option<f64>,
    /// From the last primary snapshot that showed the copy not started to
    /// the first that showed it synced (ms): an upper bound of the copy's
    /// own time (snapshots come every [`STATUS_PERIOD_MS`] or so).
    pub copy_window_ms: Option<f64>,
    /// Bytes the primary WRITEs in bulk copies meanwhile (its `copy_bytes`
    /// counter's delta).
    pub bytes_copied: u64,
    /// Bulk copies the primary completed meanwhile (1 when only this
    /// member was copied, once).
    pub copies_done: u64,
    /// `bytes_copied` / `synced_ms` (GiB/s): restart included.
    pub gib_per_s: Option<f64>,
    /// `bytes_copied` / `copy_window_ms` (GiB/s): a lower bound of the
    /// copy's own bandwidth.
    pub copy_window_gib_per_s: Option<f64>,
    /// Slope of `done_bytes` between the first and last snapshots that saw
    /// the copy running (GiB/s; None with fewer than two).
    pub progress_gib_per_s: Option<f64>,
    /// Every distinct primary snapshot from the restart to synced.
    pub samples: Vec<SyncSample>,
    /// Why the round does not count although nothing failed: the primary
    /// changed meanwhile (its lease lapsed), so a take-over's copy to
    /// every backup replaced the one measured. Another round is run.
    #[serde(default)]
    pub disturbed: Option<String>,
    /// Why the copy did not complete (the run fails).
    pub failure: Option<String>,
}

impl SyncRound {
    /// Restart → the first poll at which `fraction` of the copy was posted
    /// (ms).
    pub fn reached_ms(&self, fraction: f64) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| s.total_bytes > 0 && s.done_bytes as f64 >= fraction * s.total_bytes as f64)
            .map(|s| s.ms)
    }
}

/// Medians over the rounds that completed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncMedian {
    /// Rounds counted.
    pub rounds: u32,
    /// Bytes copied.
    pub bytes_copied: u64,
    /// Restart → synced (ms).
    pub synced_ms: f64,
    /// GiB/s, restart included.
    pub gib_per_s: f64,
    /// GiB/s over the copy window (a lower bound of the copy's own).
    pub copy_window_gib_per_s: Option<f64>,
    /// GiB/s from the progress samples.
    pub progress_gib_per_s: Option<f64>,
}

/// One way of copying the same bytes, timed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CopyBandwidth {
    /// Short name ("private memcpy", …).
    pub name: String,
    /// What exactly was copied, and how.
    pub what: String,
    /// Bytes per repetition.
    pub buffer_bytes: u64,
    /// Repetitions.
    pub repetitions: u32,
    /// Median over the repetitions (GiB/s).
    pub gib_per_s: f64,
    /// Slowest repetition (GiB/s).
    pub gib_per_s_min: f64,
    /// Fastest repetition (GiB/s).
    pub gib_per_s_max: f64,
}

/// This machine's copy bandwidth, measured in the same run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemcpyReport {
    /// Bytes per repetition.
    pub buffer_bytes: u64,
    /// Bytes per call (the copy WRITE's size).
    pub piece_bytes: u64,
    /// Core it ran on (None: unpinned).
    pub core: Option<usize>,
    /// Every way measured.
    pub copies: Vec<CopyBandwidth>,
    /// Why the shared-memory copies are missing, if they are.
    pub shm_error: Option<String>,
}

impl MemcpyReport {
    /// The copy called `name`.
    pub fn copy(&self, name: &str) -> Option<&CopyBandwidth> {
        self.copies.iter().find(|c| c.name == name)
    }
}

/// The write-path replay estimate (the replica has no pipelined replay).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayEstimate {
    /// What this is, in words.
    pub label: String,
    /// Items in the store.
    pub items: u64,
    /// The fill's rate (items/s).
    pub items_per_s: f64,
    /// items / items_per_s (s).
    pub seconds: f64,
    /// That, over the median restart → synced time.
    pub vs_bulk_copy: Option<f64>,
}

/// The `bulk-sync` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BulkSyncReport {
    /// Group size.
    pub replicas: u8,
    /// `cluster.mode`.
    pub mode: String,
    /// Used store asked for (MiB).
    pub store_mib: u64,
    /// The same in bytes: the fill stops once `used_bytes` reaches it.
    pub target_bytes: u64,
    /// Value size of the fill.
    pub value_bytes: usize,
    /// Key size of the fill.
    pub key_bytes: u64,
    /// The store.
    pub store: StoreSizing,
    /// The fill.
    pub fill: FillRecord,
    /// The primary when the rounds began.
    pub primary: u8,
    /// Status poll period during a copy (ms).
    pub poll_ms: f64,
    /// Median spacing of the primary's distinct status snapshots seen
    /// during the copies (ms): the resolution of the times above.
    #[serde(default)]
    pub status_snapshot_period_ms: Option<f64>,
    /// Every `--set` the replicas ran with, in order (the bench's sizes
    /// and timing, the user's, the mode's).
    #[serde(default)]
    pub replica_overrides: Vec<String>,
    /// `views.lease_us` the replicas ran with.
    #[serde(default)]
    pub views_lease_us: u64,
    /// Every round.
    pub rounds: Vec<SyncRound>,
    /// Medians of the rounds that completed.
    pub median: Option<SyncMedian>,
    /// This machine's copy bandwidth.
    pub memcpy: MemcpyReport,
    /// The write-path replay estimate.
    pub replay: ReplayEstimate,
    /// Caveats and comparisons in words.
    pub notes: Vec<String>,
}

impl BulkSyncReport {
    /// Why the run failed: a round's copy did not complete, or no round
    /// could be counted.
    pub fn failure(&self) -> Option<String> {
        if let Some(f) = self.rounds.iter().find_map(|r| r.failure.as_deref()) {
            return Some(f.to_string());
        }
        if let Some(c) = self.fill.check.as_ref().filter(|c| c.missing + c.wrong > 0) {
            return Some(format!(
                "{} of {} keys written and acknowledged by the fill are missing and {} have \
                 another value at the primary (first: {})",
                c.missing,
                c.keys_checked,
                c.wrong,
                c.examples.join("; ")
            ));
        }
        if self.median.is_none() {
            return Some(format!(
                "no round could be counted: every one was disturbed by a change of primary ({})",
                self.rounds
                    .iter()
                    .filter_map(|r| r.disturbed.as_deref())
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        None
    }
}

fn median_of(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn gib_per_s(bytes: u64, ms: f64) -> Option<f64> {
    (ms > 0.0).then(|| bytes as f64 / GIB / (ms / 1000.0))
}

/// The `[backup]` sizes for `target` bytes of used store of items of
/// `chunk` bytes, as manifest overrides: the heap holds the target plus a
/// sixteenth (at least 8 slabs) and the entries the items plus an eighth
/// (and 1024), so the fill never finds the store full.
fn sizing_overrides(target: u64, chunk: u64, slab_bytes: u32, value_bytes_max: u64) -> Vec<String> {
    let items = target.div_ceil(chunk);
    let entries = items + items / 8 + 1024;
    let slabs = target.div_ceil(u64::from(slab_bytes));
    let slab_count = slabs + (slabs / 16).max(8);
    vec![
        format!("cluster.value_bytes_max={value_bytes_max}"),
        format!("backup.entry_count={entries}"),
        format!("backup.slab_bytes={slab_bytes}"),
        format!("backup.slab_count={slab_count}"),
    ]
}

/// The store of the manifest the replicas will parse.
fn sizing_of(manifest: &Manifest, value_bytes: u64) -> Result<StoreSizing> {
    use verbatim_core::backup::engine::{BackupLayout, SYNC_IN_FLIGHT_MAX};
    let cfg = manifest.core_config(0);
    let lay = BackupLayout::for_config(&cfg).ok_or_else(|| {
        BenchError::Options(
            "the replicas would refuse these [backup] sizes (the store's geometry check); \
             change --slab-bytes or the --set overrides"
                .into(),
        )
    })?;
    let item = verbatim_core::backup::ITEM_HEADER_BYTES + KEY_BYTES + value_bytes;
    let b = &manifest.backup;
    Ok(StoreSizing {
        entry_count: b.entry_count,
        slab_bytes: b.slab_bytes,
        slab_count: b.slab_count,
        sync_chunk_bytes: b.sync_chunk_bytes,
        sync_in_flight: SYNC_IN_FLIGHT_MAX,
        forward_threshold: b.forward_threshold,
        value_bytes_max: manifest.cluster.value_bytes_max,
        region_bytes: lay.region_bytes,
        mailbox_bytes: lay.mailbox_bytes,
        metadata_bytes: lay.mailbox_bytes + lay.geo.used_bytes(0),
        item_chunk_bytes: 64 << verbatim_core::backup::class_of(item),
    })
}

/// The backup-memory state of a status snapshot.
fn backup_of(s: &Snapshot) -> Option<&BackupState> {
    s.backup.as_ref()
}

/// The serving primary of the newest view among the replicas that answer.
fn primary_now(cluster: &BenchCluster) -> Option<Snapshot> {
    cluster
        .local()
        .status()
        .into_iter()
        .flatten()
        .filter(|s| backup_of(s).is_some_and(|b| b.role == "primary"))
        .max_by_key(|s| backup_of(s).map_or(0, |b| b.epoch))
}

/// The primary's status as of a snapshot it took after `after_unix_ms`
/// (waits up to a few publish periods).
fn fresh_primary(cluster: &BenchCluster, after_unix_ms: f64) -> Result<Snapshot> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        crate::signals::check()?;
        match primary_now(cluster) {
            Some(s) if s.at_unix_ms as f64 > after_unix_ms => return Ok(s),
            Some(s) if Instant::now() > deadline => {
                return Err(BenchError::Cluster(format!(
                    "member {}'s status snapshot is older than {:.0} ms after the fill",
                    s.id,
                    unix_ms_now() - s.at_unix_ms as f64
                )))
            }
            None if Instant::now() > deadline => {
                return Err(BenchError::Cluster(
                    "no primary answered after the fill".into(),
                ))
            }
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Waits for a primary whose view lists all `replicas` members with every
/// copy synced: a group that can lose a backup and copy it anew.
fn wait_steady(cluster: &BenchCluster, replicas: u8, timeout: Duration) -> Result<Snapshot> {
    let began = Instant::now();
    let mut last = String::from("no replica answered");
    loop {
        crate::signals::check()?;
        if let Some(s) = primary_now(cluster) {
            if let Some(b) = backup_of(&s) {
                let all_in_view = b.members.len() == usize::from(replicas);
                let all_synced = b.copies.iter().all(|c| c.state == "synced");
                if all_in_view && all_synced {
                    return Ok(s);
                }
                last = format!(
                    "primary {} (epoch {}) lists members {:?}, copies {}",
                    s.id,
                    b.epoch,
                    b.members,
                    copies_text(b)
                );
            }
        }
        if began.elapsed() > timeout {
            return Err(BenchError::Cluster(format!(
                "no backup-memory primary with all {replicas} members synced within {timeout:?}: \
                 {last}; replica logs in {}",
                cluster.local().log_dir().display()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a replica's views engine says, for messages: the view it knows
/// and which coordinators it does not count.
fn views_text(s: &Snapshot) -> String {
    s.views.as_ref().map_or("views off".to_string(), |v| {
        format!(
            "views: epoch {}, coordinators out {:?}{}",
            v.epoch,
            v.coordinators_out,
            if v.fallback { " (fallback)" } else { "" }
        )
    })
}

/// `1 synced, 2 copying 4096/8192` for messages.
fn copies_text(b: &BackupState) -> String {
    b.copies
        .iter()
        .map(|c| {
            if c.state == "copying" {
                format!("{} copying {}/{}", c.member, c.done_bytes, c.total_bytes)
            } else {
                format!("{} {}", c.member, c.state)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Fills the store until the primary's `used_bytes` reaches `target`:
/// first the items that should carve exactly enough slabs, then a slab's
/// worth at a time while the status says it is short (the allocator's
/// order is its own business).
fn fill(
    cluster: &BenchCluster,
    o: &BulkSyncOptions,
    sizing: &StoreSizing,
    target: u64,
    progress: &Progress,
) -> Result<FillRecord> {
    let per_slab = (u64::from(sizing.slab_bytes) / sizing.item_chunk_bytes).max(1);
    let slabs = target
        .saturating_sub(sizing.metadata_bytes)
        .div_ceil(u64::from(sizing.slab_bytes))
        .max(1);
    // The first item of the last slab carves it.
    let mut planned = (slabs - 1) * per_slab + 1;
    let mut written = 0u64;
    let began = Instant::now();
    let mut used = 0u64;
    let mut keys = 0u64;
    let mut primary_state = None;
    let mut others = Vec::new();
    progress.stage(1000, format!("bulk-sync: filling {} MiB", o.store_mib));
    // Runs on the client core; the main thread stays unpinned, since a
    // replica it restarts would inherit its affinity.
    let core = o.client_core;
    // (items done, seconds since the start) every tenth of the items:
    // whether the write path slows as the store grows.
    let marks = std::sync::Mutex::new(Vec::new());
    let mark_every = (planned / 10).max(1);
    let (mut refused, mut retries, mut redirects) = (0u64, 0u64, 0u64);
    let mut first_refusal = None;
    for _attempt in 0..64 {
        let range = written..planned;
        let r = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    crate::cluster::pin_current(core);
                    let mut next_mark = range.start + mark_every;
                    fill_pipelined(
                        cluster,
                        o.attempt_timeout,
                        KEY_PREFIX,
                        range.clone(),
                        o.value_bytes,
                        |n| {
                            let done = range.start + n;
                            progress.set_fraction(done as f64 / planned as f64);
                            if done >= next_mark {
                                next_mark = done + mark_every;
                                if let Ok(mut m) = marks.lock() {
                                    m.push((done, began.elapsed().as_secs_f64()));
                                }
                            }
                        },
                    )
                })
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })?;
        refused += r.refused;
        first_refusal = first_refusal.or(r.first_refusal);
        retries += r.retries;
        redirects += r.redirects;
        written = planned;
        // A snapshot taken after the last write was answered: the replica
        // publishes one every STATUS_PERIOD_MS, and an older one lacks
        // the last writes.
        let s = fresh_primary(cluster, unix_ms_now())?;
        let b = backup_of(&s).ok_or_else(|| {
            BenchError::Cluster(format!("member {} reports no backup-memory store", s.id))
        })?;
        used = b.used_bytes;
        keys = b.keys;
        primary_state = Some((s.id, b.clone()));
        others = cluster
            .local()
            .status()
            .into_iter()
            .flatten()
            .filter(|o| o.id != s.id)
            .filter_map(|o| {
                Some(MemberBackupState {
                    member: o.id,
                    state: o.backup?,
                })
            })
            .collect();
        tracing::debug!(
            written,
            used,
            keys,
            target,
            primary = s.id,
            "bulk-sync fill"
        );
        if used >= target {
            break;
        }
        planned += per_slab
            * (target - used)
                .div_ceil(u64::from(sizing.slab_bytes))
                .max(1);
        if planned > u64::from(sizing.entry_count) {
            return Err(BenchError::Cluster(format!(
                "the store holds {used} bytes after {written} items and would need more than its \
                 {} entries to reach {target}",
                sizing.entry_count
            )));
        }
    }
    if used < target {
        return Err(BenchError::Cluster(format!(
            "the store holds {used} bytes after {written} items, short of {target}"
        )));
    }
    let seconds = began.elapsed().as_secs_f64().max(1e-9);
    let mut marks = marks.into_inner().unwrap_or_default();
    // The rest after the last mark, folded into the last part when it is
    // only a few items (a rate over them says nothing).
    if marks
        .last()
        .is_some_and(|&(n, _)| written.saturating_sub(n) < mark_every / 2)
    {
        marks.pop();
    }
    marks.push((written, seconds));
    let mut items_per_s_by_part = Vec::new();
    let mut prev = (0u64, 0.0f64);
    for &(n, t) in &marks {
        if t > prev.1 && n > prev.0 {
            items_per_s_by_part.push((n - prev.0) as f64 / (t - prev.1));
        }
        prev = (n, t);
    }
    let (primary, primary_state) = primary_state.unzip();
    Ok(FillRecord {
        refused,
        first_refusal,
        client_retries: retries,
        client_redirects: redirects,
        check: None,
        items_per_s_by_part,
        primary,
        primary_state,
        backups_state: others,
        items: written,
        value_bytes_total: written * o.value_bytes as u64,
        used_bytes: used,
        keys,
        seconds,
        items_per_s: written as f64 / seconds,
        used_mib_per_s: used as f64 / MIB as f64 / seconds,
        values_mb_per_s: (written * o.value_bytes as u64) as f64 / 1e6 / seconds,
        client_threads: 1,
        depth: crate::recovery::FILL_DEPTH as u32,
    })
}

/// Reads every key of the fill back (GETs, pipelined, on the client
/// core): an acknowledged SET must be there with its value.
fn check_fill(cluster: &BenchCluster, o: &BulkSyncOptions, items: u64) -> Result<FillCheck> {
    let began = Instant::now();
    let core = o.client_core;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                crate::cluster::pin_current(core);
                let mut pipe = cluster.shm_pipeline(
                    Wait::Yield,
                    o.attempt_timeout,
                    crate::recovery::FILL_DEPTH,
                )?;
                let mut check = FillCheck::default();
                let mut tickets = HashMap::with_capacity(pipe.depth());
                let mut done = Vec::with_capacity(pipe.depth());
                let mut next = 0u64;
                let mut key = String::with_capacity(KEY_BYTES as usize);
                while check.keys_checked < items {
                    while next < items && pipe.in_flight() < pipe.depth() {
                        use std::fmt::Write as _;
                        key.clear();
                        let _ = write!(key, "{KEY_PREFIX}{next:08}");
                        match pipe.submit(&KvOp::Get {
                            key: key.as_bytes(),
                        })? {
                            Some(t) => {
                                tickets.insert(t, next);
                                next += 1;
                            }
                            None => break,
                        }
                    }
                    if pipe.poll(&mut done) == 0 {
                        std::thread::yield_now();
                        continue;
                    }
                    for (t, outcome) in done.drain(..) {
                        let i = tickets.remove(&t).unwrap_or(u64::MAX);
                        check.keys_checked += 1;
                        let problem = match outcome? {
                            Outcome::Read(Some(v))
                                if v.len() == o.value_bytes
                                    && v.get(..8) == Some(&i.to_le_bytes()[..]) =>
                            {
                                None
                            }
                            Outcome::Read(None) => {
                                check.missing += 1;
                                Some("missing".to_string())
                            }
                            Outcome::Read(Some(v)) => {
                                check.wrong += 1;
                                Some(format!("{} bytes, not the value written", v.len()))
                            }
                            Outcome::Write(r) => {
                                check.wrong += 1;
                                Some(format!("a GET answered like a write: {r:?}"))
                            }
                        };
                        if let Some(p) = problem {
                            if check.examples.len() < 10 {
                                check.examples.push(format!("{KEY_PREFIX}{i:08}: {p}"));
                            }
                        }
                    }
                    crate::signals::check()?;
                }
                check.seconds = began.elapsed().as_secs_f64();
                Ok(check)
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Waits until the primary's status marks `member`'s copy not synced (it
/// learned of the death); the time of that snapshot (Unix ms), None when
/// it did not within [`NOTICE_TIMEOUT`].
fn wait_noticed(cluster: &BenchCluster, primary: u8, member: u8) -> Result<Option<f64>> {
    let deadline = Instant::now() + NOTICE_TIMEOUT;
    while Instant::now() < deadline {
        crate::signals::check()?;
        if let Some(s) = cluster.status_of(primary, STATUS_TIMEOUT) {
            let state = backup_of(&s)
                .and_then(|b| b.copies.iter().find(|c| c.member == member))
                .map(|c| c.state.clone());
            if state.as_deref() != Some("synced") {
                return Ok(Some(s.at_unix_ms as f64));
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(None)
}

/// Now on the wall clock (Unix ms, fractional): the clock a replica stamps
/// its status snapshots with (`at_unix_ms`).
fn unix_ms_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Polls the primary from `member`'s restart until its copy is synced and
/// the view lists it again, or the timeout (then `failure` says what was
/// seen).
fn follow_copy(
    cluster: &BenchCluster,
    o: &BulkSyncOptions,
    round: &mut SyncRound,
    (restarted, restarted_unix_ms): (Instant, f64),
    before: (u64, u64),
    copy_start: u64,
    progress: &Progress,
) -> Result<()> {
    let (primary, member) = (round.primary, round.member);
    let deadline = restarted + o.sync_timeout;
    let mut failures = 0u32;
    let mut last_needed: Option<f64> = None;
    let mut copying: Vec<(f64, u64)> = Vec::new();
    let mut last_state = String::from("(no status)");
    // A replica publishes a snapshot every few tens of ms: polls between
    // two see the same one, which says nothing new.
    let mut last_snapshot = 0u64;
    loop {
        crate::signals::check()?;
        if round.status_up_ms.is_none() && cluster.status_of(member, STATUS_TIMEOUT).is_some() {
            round.status_up_ms = Some(restarted.elapsed().as_secs_f64() * 1000.0);
        }
        match cluster.status_of(primary, STATUS_TIMEOUT) {
            Some(s) if s.at_unix_ms == last_snapshot => failures = 0,
            Some(s) => {
                failures = 0;
                last_snapshot = s.at_unix_ms;
                // When the primary took it, since the restart.
                let at = s.at_unix_ms as f64 - restarted_unix_ms;
                let Some(b) = backup_of(&s) else {
                    round.failure = Some(format!("member {primary} reports no backup store"));
                    return Ok(());
                };
                if b.role != "primary" {
                    round.disturbed = Some(format!(
                        "member {primary} stopped being primary during the copy (role {}, \
                         view epoch {}, primary {:?})",
                        b.role, b.epoch, b.primary
                    ));
                    return Ok(());
                }
                let copy = b.copies.iter().find(|c| c.member == member);
                let state = copy.map_or(String::new(), |c| c.state.clone());
                last_state = format!("copies {}, view members {:?}", copies_text(b), b.members);
                let done_copies = b.copies_done.saturating_sub(before.1);
                let synced = state == "synced" && done_copies > 0;
                let (done, total) = match copy {
                    Some(c) if c.state == "copying" => (
                        c.done_bytes.saturating_sub(copy_start),
                        c.total_bytes.saturating_sub(copy_start),
                    ),
                    _ if synced => {
                        let bytes = b.copy_bytes.saturating_sub(before.0);
                        (bytes, bytes)
                    }
                    _ => (0, 0),
                };
                if round.synced_ms.is_none() {
                    round.samples.push(SyncSample {
                        ms: at,
                        seen_ms: restarted.elapsed().as_secs_f64() * 1000.0,
                        state: state.clone(),
                        done_bytes: done,
                        total_bytes: total,
                    });
                }
                match state.as_str() {
                    "needed" if round.synced_ms.is_none() => last_needed = Some(at),
                    "copying" => {
                        round.copying_seen_ms.get_or_insert(at);
                        copying.push((at, done));
                        if total > 0 {
                            progress.set_fraction(done as f64 / total as f64);
                        }
                    }
                    _ => {}
                }
                if synced && round.synced_ms.is_none() {
                    round.synced_ms = Some(at);
                    round.bytes_copied = b.copy_bytes.saturating_sub(before.0);
                    round.copies_done = done_copies;
                    round.copy_window_ms = last_needed.map(|n| at - n);
                }
                if round.synced_ms.is_some() && b.members.contains(&member) {
                    round.in_view_ms = Some(at);
                    break;
                }
            }
            None => {
                failures += 1;
                if failures > STATUS_FAILURES_MAX {
                    round.failure = Some(format!(
                        "the primary (member {primary}) stopped answering its status socket \
                         during the copy; last seen: {last_state}"
                    ));
                    return Ok(());
                }
            }
        }
        if Instant::now() > deadline {
            let member_says =
                cluster
                    .status_of(member, STATUS_TIMEOUT)
                    .map_or("no status".to_string(), |s| {
                        let events: Vec<String> = s
                            .events
                            .iter()
                            .rev()
                            .take(4)
                            .map(|e| format!("{}: {}", e.kind, e.detail))
                            .collect();
                        let view = backup_of(&s).map_or("no backup store".to_string(), |b| {
                            format!(
                                "backup role {}, following view epoch {} (primary {})",
                                b.role,
                                b.epoch,
                                b.primary.map_or("none".to_string(), |p| p.to_string())
                            )
                        });
                        let never = if s.views.as_ref().is_some_and(|v| v.epoch == 0) {
                            " (it never learned a view, so it never granted the primary access to \
                         its store: every copy WRITE is refused)"
                        } else {
                            ""
                        };
                        format!(
                            "role {}, {view}, {}{never}, last events: {}",
                            s.role,
                            views_text(&s),
                            events.join("; ")
                        )
                    });
            let primary_views = cluster
                .status_of(primary, STATUS_TIMEOUT)
                .map_or("no status".to_string(), |s| views_text(&s));
            round.failure = Some(format!(
                "member {member}'s copy was not {} within {:?} of its restart; the primary \
                 (member {primary}) last showed {last_state} ({primary_views}); member \
                 {member}: {member_says}",
                if round.synced_ms.is_some() {
                    "back in the view"
                } else {
                    "synced"
                },
                o.sync_timeout
            ));
            return Ok(());
        }
        std::thread::sleep(o.poll);
    }
    let (Some(synced), bytes) = (round.synced_ms, round.bytes_copied) else {
        return Ok(());
    };
    round.gib_per_s = gib_per_s(bytes, synced);
    round.copy_window_gib_per_s = round.copy_window_ms.and_then(|w| gib_per_s(bytes, w));
    if let (Some(first), Some(last)) = (copying.first(), copying.last()) {
        if last.0 > first.0 && last.1 > first.1 {
            round.progress_gib_per_s = gib_per_s(last.1 - first.1, last.0 - first.0);
        }
    }
    Ok(())
}

/// Runs the memcpy measurement, the fill and the rounds.
pub fn run(spec: &ClusterSpec, o: &BulkSyncOptions, progress: &Progress) -> Result<BulkSyncReport> {
    if o.replicas < 2 {
        return Err(BenchError::Options(
            "--replicas must be at least 2: a primary and a backup to copy".into(),
        ));
    }
    if o.store_mib == 0 || o.rounds == 0 || o.value_bytes < 8 {
        return Err(BenchError::Options(
            "--store-mib and --rounds must be at least 1, --value-bytes at least 8".into(),
        ));
    }
    if !o.slab_bytes.is_power_of_two() || o.slab_bytes < 4096 {
        return Err(BenchError::Options(format!(
            "--slab-bytes {}: a power of two of at least 4096",
            o.slab_bytes
        )));
    }
    if o.poll.is_zero() {
        return Err(BenchError::Options("--poll-ms must be at least 1".into()));
    }
    let target = o.store_mib * MIB;
    let value_bytes = o.value_bytes as u64;
    let item = verbatim_core::backup::ITEM_HEADER_BYTES + KEY_BYTES + value_bytes;
    let chunk = 64u64 << verbatim_core::backup::class_of(item);
    // The manifest's own default stays when the values fit it.
    let value_max = value_bytes.max(u64::from(
        Manifest::local("probe", o.replicas, 0)
            .cluster
            .value_bytes_max,
    ));
    let mut ours = sizing_overrides(target, chunk, o.slab_bytes, value_max);
    if !o.manifest_timing {
        ours.extend(RELAXED_TIMING.iter().map(|s| s.to_string()));
    }
    if let Some(c) = o.sync_chunk_bytes {
        ours.push(format!("backup.sync_chunk_bytes={c}"));
    }
    // The user's own --set overrides come after ours and win; the mode's
    // (views, lease, cluster.mode) are placed by with_mode.
    let mut spec = spec.clone();
    spec.overrides.splice(0..0, ours);
    let spec = spec.with_mode(ReplicationMode::BackupMemory);
    let probe = Manifest::local("probe", o.replicas, 0);
    let manifest = Manifest::parse(&probe.to_toml(), &spec.overrides)
        .map_err(|e| BenchError::Options(format!("the replicas would refuse the manifest: {e}")))?;
    let sizing = sizing_of(&manifest, value_bytes)?;
    check_memory(o, &sizing, &manifest.shm_dir())?;

    // memcpy first, on an idle machine: no replica competes for the cores.
    progress.stage(1, "bulk-sync: measuring memcpy");
    let memcpy = measure_memcpy(
        target,
        o.memcpy_buffer_bytes.unwrap_or(target),
        u64::from(sizing.sync_chunk_bytes),
        &manifest.shm_dir(),
        o.client_core,
    )?;

    let mut cluster = BenchCluster::start(&spec, o.replicas, false)?;
    let steady = wait_steady(&cluster, o.replicas, STEADY_TIMEOUT)?;
    progress.println(format!(
        "bulk-sync: {} replicas up in backup-memory mode, member {} is primary; filling {} MiB \
         of store ({} B values in {} B chunks)",
        o.replicas, steady.id, o.store_mib, o.value_bytes, sizing.item_chunk_bytes
    ));
    let mut fill = fill(&cluster, o, &sizing, target, progress)?;
    if o.check_fill {
        progress.stage(1, "bulk-sync: reading every key back");
        fill.check = Some(check_fill(&cluster, o, fill.items)?);
    }
    progress.println(format!(
        "bulk-sync: filled {} items ({:.1} MiB used) in {:.2} s: {:.0} items/s, {:.1} MiB/s",
        fill.items,
        fill.used_bytes as f64 / MIB as f64,
        fill.seconds,
        fill.items_per_s,
        fill.used_mib_per_s
    ));

    let mut rounds: Vec<SyncRound> = Vec::new();
    let mut first_primary = None;
    let mut victim: Option<u8> = None;
    // Disturbed rounds (a primary change) are run again, a few times.
    let attempts_max = o.rounds * 2 + 2;
    let mut counted = 0;
    for attempt in 0..attempts_max {
        if counted == o.rounds {
            break;
        }
        let steady = wait_steady(&cluster, o.replicas, STEADY_TIMEOUT)?;
        let primary = steady.id;
        first_primary.get_or_insert(primary);
        let b = backup_of(&steady).ok_or_else(|| {
            BenchError::Cluster(format!("member {primary} reports no backup store"))
        })?;
        let backups: Vec<u8> = b
            .members
            .iter()
            .copied()
            .filter(|&m| m != primary)
            .collect();
        let member = if o.alternate_backups {
            backups[attempt as usize % backups.len()]
        } else {
            // The same backup every round (unless it became primary):
            // the rounds repeat one measurement. Killing them in turn
            // once left the second one restarted without a view (a
            // replica bug since fixed): --alternate-backups.
            *victim
                .filter(|v| backups.contains(v))
                .get_or_insert(backups[0])
        };
        victim = Some(member);
        let before = (b.copy_bytes, b.copies_done);
        let mut round = SyncRound {
            round: attempt + 1,
            member,
            primary,
            ..SyncRound::default()
        };
        progress.stage(
            1,
            format!("bulk-sync round {}: killing member {member}", attempt + 1),
        );
        // The killed member's segment: its pages are freed when the last
        // process that maps or opens it lets go, and without this that is
        // a replica, in its poll loop, when it maps the restarted member's
        // new segment (tens of ms per 64 MiB here: the primary then misses
        // its heartbeats and is deposed). Held by the bench until the copy
        // is done, the freeing lands here, outside the timed window.
        let old_segment = if o.hold_old_segment {
            let path = cluster.local().manifest.segment_path(member);
            Some(std::fs::File::open(&path).map_err(|source| BenchError::Io { path, source })?)
        } else {
            None
        };
        let (killed, killed_unix_ms) = (Instant::now(), unix_ms_now());
        kill_and_wait_exit(&mut cluster, member, exit_timeout(o.store_mib))?;
        round.kill_to_exit_ms = killed.elapsed().as_secs_f64() * 1000.0;
        round.kill_to_noticed_ms =
            wait_noticed(&cluster, primary, member)?.map(|at| (at - killed_unix_ms).max(0.0));
        if round.kill_to_noticed_ms.is_none() {
            round.failure = Some(format!(
                "the primary (member {primary}) still showed member {member}'s copy synced \
                 {NOTICE_TIMEOUT:?} after its SIGKILL"
            ));
            rounds.push(round);
            break;
        }
        progress.stage(
            1000,
            format!(
                "bulk-sync round {}: copying to member {member}",
                attempt + 1
            ),
        );
        let restarted_unix_ms = unix_ms_now();
        cluster.restart(member)?;
        follow_copy(
            &cluster,
            o,
            &mut round,
            (Instant::now(), restarted_unix_ms),
            before,
            sizing.mailbox_bytes,
            progress,
        )?;
        drop(old_segment);
        progress.println(round_line(&round));
        let failed = round.failure.is_some();
        if round.disturbed.is_none() && !failed {
            counted += 1;
        }
        rounds.push(round);
        if failed {
            break;
        }
    }
    let final_state = primary_now(&cluster);
    let status_snapshot_period_ms = median_of(
        rounds
            .iter()
            .flat_map(|r| r.samples.windows(2).map(|w| w[1].ms - w[0].ms))
            .collect(),
    );
    drop(cluster);

    let done: Vec<&SyncRound> = rounds
        .iter()
        .filter(|r| r.failure.is_none() && r.disturbed.is_none())
        .collect();
    let median = (!done.is_empty()).then(|| SyncMedian {
        rounds: done.len() as u32,
        bytes_copied: median_of(done.iter().map(|r| r.bytes_copied as f64).collect())
            .map_or(0, |b| b as u64),
        synced_ms: median_of(done.iter().filter_map(|r| r.synced_ms).collect()).unwrap_or(0.0),
        gib_per_s: median_of(done.iter().filter_map(|r| r.gib_per_s).collect()).unwrap_or(0.0),
        copy_window_gib_per_s: median_of(
            done.iter()
                .filter_map(|r| r.copy_window_gib_per_s)
                .collect(),
        ),
        progress_gib_per_s: median_of(done.iter().filter_map(|r| r.progress_gib_per_s).collect()),
    });
    let items = final_state
        .as_ref()
        .and_then(|s| backup_of(s).map(|b| b.keys))
        .filter(|&k| k > 0)
        .unwrap_or(fill.items);
    let replay_s = items as f64 / fill.items_per_s.max(1e-9);
    let replay = ReplayEstimate {
        label: format!(
            "write path replay estimate: {items} items at the measured write rate ({:.0} items/s, \
             the fill's); a backup-side pipelined replay is not implemented in the replica (a \
             copy is always bulk)",
            fill.items_per_s
        ),
        items,
        items_per_s: fill.items_per_s,
        seconds: replay_s,
        vs_bulk_copy: median
            .as_ref()
            .filter(|m| m.synced_ms > 0.0)
            .map(|m| replay_s * 1000.0 / m.synced_ms),
    };
    let notes = notes(
        o,
        manifest.views.lease_us,
        &sizing,
        &fill,
        median.as_ref(),
        &memcpy,
        &replay,
        &rounds,
    );
    Ok(BulkSyncReport {
        replicas: o.replicas,
        mode: ReplicationMode::BackupMemory.name().into(),
        store_mib: o.store_mib,
        target_bytes: target,
        value_bytes: o.value_bytes,
        key_bytes: KEY_BYTES,
        store: sizing,
        fill,
        primary: first_primary.unwrap_or(steady.id),
        poll_ms: o.poll.as_secs_f64() * 1000.0,
        rounds,
        views_lease_us: manifest.views.lease_us,
        replica_overrides: spec.overrides.clone(),
        status_snapshot_period_ms,
        median,
        memcpy,
        replay,
        notes,
    })
}

/// A round in one line, for the progress output.
fn round_line(r: &SyncRound) -> String {
    match (&r.failure, r.synced_ms) {
        (Some(f), _) => format!("bulk-sync round {}: FAILED: {f}", r.round),
        (None, _) if r.disturbed.is_some() => format!(
            "bulk-sync round {}: not counted: {}",
            r.round,
            r.disturbed.as_deref().unwrap_or("")
        ),
        (None, Some(ms)) => format!(
            "bulk-sync round {}: member {} copied {:.1} MiB, synced {ms:.1} ms after its restart \
             ({}), back in the view at {}",
            r.round,
            r.member,
            r.bytes_copied as f64 / MIB as f64,
            r.gib_per_s.map_or("—".into(), |g| format!("{g:.2} GiB/s")),
            r.in_view_ms.map_or("—".into(), |v| format!("{v:.1} ms")),
        ),
        (None, None) => format!("bulk-sync round {}: not synced", r.round),
    }
}

/// Refuses a store that does not fit: each replica maps its whole region
/// in the shared-memory directory (one more while a killed member's old
/// segment is still mapped by the primary), and tmpfs pages are memory.
fn check_memory(o: &BulkSyncOptions, sizing: &StoreSizing, shm_dir: &Path) -> Result<()> {
    let regions = (u64::from(o.replicas) + 1) * sizing.region_bytes;
    // The memcpy measurement's files come and go before the cluster
    // starts: a source, a destination, and one new file per repetition.
    let buffer = o.memcpy_buffer_bytes.unwrap_or(o.store_mib * MIB);
    let reps = (o.store_mib * MIB).div_ceil(buffer.max(1)).max(3);
    let measurement = (2 + reps) * buffer;
    if let Some(free) = fs_free_bytes(shm_dir) {
        if measurement > free {
            return Err(BenchError::Options(format!(
                "the memcpy measurement needs {} MiB in {} and it has {} MiB free; lower \
                 --memcpy-buffer-mib",
                measurement / MIB,
                shm_dir.display(),
                free / MIB
            )));
        }
        if regions > free {
            return Err(BenchError::Options(format!(
                "--store-mib {}: {} replicas map a {} MiB store region each in {} ({} MiB with a \
                 killed member's old segment) and it has {} MiB free; lower --store-mib",
                o.store_mib,
                o.replicas,
                sizing.region_bytes / MIB,
                shm_dir.display(),
                regions / MIB,
                free / MIB
            )));
        }
    }
    if let Some(avail) = mem_available_bytes() {
        // The regions are filled up to the target (one more for a killed
        // member's old segment), plus the local indexes; the memcpy
        // measurement's four buffers come and go before the cluster starts.
        let stores = (u64::from(o.replicas) + 1) * (o.store_mib * MIB);
        let needed = stores.max(measurement + buffer) + 512 * MIB;
        if needed > avail {
            return Err(BenchError::Options(format!(
                "--store-mib {}: the run needs about {} MiB of memory and {} MiB are available; \
                 lower --store-mib",
                o.store_mib,
                needed / MIB,
                avail / MIB
            )));
        }
    }
    Ok(())
}

/// The comparisons in words.
#[allow(clippy::too_many_arguments)] // one report's parts, each once
fn notes(
    o: &BulkSyncOptions,
    lease_us: u64,
    sizing: &StoreSizing,
    fill: &FillRecord,
    median: Option<&SyncMedian>,
    memcpy: &MemcpyReport,
    replay: &ReplayEstimate,
    rounds: &[SyncRound],
) -> Vec<String> {
    let mut notes = Vec::new();
    let item = verbatim_core::backup::ITEM_HEADER_BYTES + KEY_BYTES + o.value_bytes as u64;
    // Values under three quarters of their chunks: say where the rest of
    // the copied bytes are.
    if (o.value_bytes as u64) * 4 < sizing.item_chunk_bytes * 3 {
        notes.push(format!(
            "an item is {item} B (32 B header, {KEY_BYTES} B key, {} B value) and takes a {} B \
             chunk: {:.0} % of the copied heap is values (a value of {} B would fill its chunk)",
            o.value_bytes,
            sizing.item_chunk_bytes,
            100.0 * fill.value_bytes_total as f64 / fill.used_bytes.max(1) as f64,
            sizing.item_chunk_bytes - (item - o.value_bytes as u64)
        ));
    }
    if let Some(m) = median {
        let ratio = |name: &str| {
            memcpy
                .copy(name)
                .filter(|c| c.gib_per_s > 0.0)
                .map(|c| (c.gib_per_s, m.gib_per_s / c.gib_per_s))
        };
        let mut parts = Vec::new();
        for name in [
            "private memcpy",
            "shm memcpy",
            "shm word copy",
            "shm word copy, fresh pages",
            "shm word copy, new files",
        ] {
            if let Some((g, r)) = ratio(name) {
                parts.push(format!("{:.0} % of {name} ({g:.2} GiB/s)", 100.0 * r));
            }
        }
        if !parts.is_empty() {
            notes.push(format!(
                "the bulk copy ran at {:.2} GiB/s from the restart: {}. On this fabric a copy \
                 WRITE is a CPU copy by the primary over shared memory (the fabric's word-by-word \
                 loop, into the restarted member's new segment, whose pages are faulted in by \
                 the first write), {} B per WRITE, {} in flight, taking turns with the primary's \
                 other work in one poll loop; restart → synced also holds the new process's \
                 start and its joining the view, and on {} cores the replicas and this bench \
                 share the CPUs (the copier yields when others run)",
                m.gib_per_s,
                parts.join(", "),
                sizing.sync_chunk_bytes,
                sizing.sync_in_flight,
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ));
        }
        if let Some(v) = replay.vs_bulk_copy {
            notes.push(format!(
                "{}: {:.2} s, {v:.1}× the bulk copy's median restart → synced ({:.0} ms); the \
                 fill wrote to {} backups at once, a replay to one member might be faster",
                replay.label,
                replay.seconds,
                m.synced_ms,
                o.replicas.saturating_sub(1)
            ));
        }
    }
    let copy_bytes = fill.used_bytes.saturating_sub(sizing.mailbox_bytes);
    let redone: Vec<String> = rounds
        .iter()
        .filter(|r| r.copies_done == 1 && r.bytes_copied > copy_bytes + copy_bytes / 100)
        .map(|r| {
            format!(
                "round {}: {:.1} MiB",
                r.round,
                r.bytes_copied as f64 / MIB as f64
            )
        })
        .collect();
    if !redone.is_empty() {
        notes.push(format!(
            "the primary WRITE more than one copy's {:.1} MiB for a single completed copy ({}): \
             a first attempt failed part way (its WRITEs refused, most likely because the \
             restarted member had not yet granted the primary its store) and the copy began \
             again from the start",
            copy_bytes as f64 / MIB as f64,
            redone.join(", ")
        ));
    }
    if let Some(r) = rounds.iter().find(|r| r.copies_done > 1) {
        notes.push(format!(
            "round {}: the primary completed {} bulk copies meanwhile (another member was copied \
             too, or this one twice): bytes_copied counts them all",
            r.round, r.copies_done
        ));
    }
    if !o.manifest_timing {
        notes.push(format!(
            "the replicas ran with a failure detector of Δ 50 ms ({}) instead of the \
             manifest's 5 ms: with 5 ms the primary is deposed at nearly every copy of 64 MiB \
             or more on this machine, its loop missing heartbeats while it copies; \
             --manifest-timing runs with the manifest's",
            RELAXED_TIMING.join(" ")
        ));
    }
    if o.hold_old_segment {
        notes.push(
            "the bench held the killed member's old segment open until the copy was done, so \
             that the replica unmapping it last did not free its pages in its poll loop \
             (--no-hold-old-segment lets it)"
                .into(),
        );
    }
    if let Some(first) = &fill.first_refusal {
        notes.push(format!(
            "{} SETs of the fill were answered with an error (first: {first})",
            fill.refused
        ));
    }
    if let Some(c) = &fill.check {
        notes.push(format!(
            "every key read back from the primary after the fill ({} GETs in {:.2} s): {} \
             missing, {} with another value{}",
            c.keys_checked,
            c.seconds,
            c.missing,
            c.wrong,
            if c.examples.is_empty() {
                String::new()
            } else {
                format!(" ({})", c.examples.join("; "))
            }
        ));
    }
    if fill.keys != fill.items {
        notes.push(format!(
            "the primary counted {} keys after {} distinct keys were written and acknowledged",
            fill.keys, fill.items
        ));
    }
    if let Some(b) = fill.primary_state.as_ref().filter(|b| b.epoch > 1) {
        let r = b.recovery.clone().unwrap_or_default();
        notes.push(format!(
            "the views changed during the fill (epoch {} at its end, primary member {}; the \
             client retried {} times and followed {} redirects); the last take-over recovered \
             {} keys, cleared {} half-finished entries and {} session records",
            b.epoch,
            fill.primary.map_or("?".to_string(), |p| p.to_string()),
            fill.client_retries,
            fill.client_redirects,
            r.keys,
            r.entries_reclaimed,
            r.sessions_cleared
        ));
    }
    if let Some(b) = &fill.primary_state {
        // The first take-over copies the empty store to each backup.
        let initial = u64::from(o.replicas.saturating_sub(1)) * b.takeovers;
        if b.copies_done > initial {
            let replays: u64 = fill.backups_state.iter().map(|m| m.state.replays).sum();
            let failed: u64 = fill
                .backups_state
                .iter()
                .map(|m| m.state.replay_failures)
                .sum();
            notes.push(format!(
                "during the fill the primary (member {}) completed {} bulk copies of the store \
                 besides its take-over's (its copy_bytes counter: {:.1} MiB, {:.1}× the store): \
                 the backups refused {failed} of their {replays} replays of forwarded writes \
                 ({} forwarded, one per slab carved), and each refusal has the whole store \
                 copied to that backup anew while writes wait, so the fill slows as the store \
                 grows",
                fill.primary.map_or("?".to_string(), |p| p.to_string()),
                b.copies_done - initial.min(b.copies_done),
                b.copy_bytes as f64 / MIB as f64,
                b.copy_bytes as f64 / fill.used_bytes.max(1) as f64,
                b.writes_forwarded,
            ));
        }
    }
    let disturbed = rounds.iter().filter(|r| r.disturbed.is_some()).count();
    if disturbed > 0 {
        notes.push(format!(
            "{disturbed} round(s) not counted: the primary changed during the copy (under a \
             {lease_us} µs view lease, a primary that does not run for that long loses its \
             view, and the replicas share the cores with the restarting process), and the new \
             primary's take-over copied every backup instead"
        ));
    }
    if !o.alternate_backups && rounds.len() > 1 {
        notes.push(
            "every round kills the same backup (--alternate-backups kills them in turn)".into(),
        );
    }
    if let Some(e) = &memcpy.shm_error {
        notes.push(format!("shared-memory copies not measured: {e}"));
    }
    notes
}

// ---- memcpy ----

/// A shared mapping of a file in the shared-memory directory, removed on
/// drop.
struct ShmMap {
    ptr: *mut u8,
    len: usize,
    file: std::fs::File,
    path: PathBuf,
    owner: u64,
}

impl ShmMap {
    fn create(path: PathBuf, len: usize) -> Result<ShmMap> {
        use std::os::fd::AsRawFd;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| BenchError::Io { path, source }
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io(&path))?;
        // Removed on Ctrl-C too.
        let owner = crate::signals::register(Vec::new(), vec![path.clone()]);
        let unregister = |e| {
            crate::signals::unregister(owner);
            let _ = std::fs::remove_file(&path);
            e
        };
        file.set_len(len as u64)
            .map_err(io(&path))
            .map_err(unregister)?;
        // SAFETY: a new shared mapping of a file we created, of its length;
        // the result is checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(unregister(BenchError::Io {
                path: path.clone(),
                source: std::io::Error::last_os_error(),
            }));
        }
        Ok(ShmMap {
            ptr: ptr.cast(),
            len,
            file,
            path,
            owner,
        })
    }

    /// Writes every page (so that timed copies find them present).
    fn touch(&self, byte: u8) {
        // SAFETY: the mapping is ours, `len` bytes long, and no other
        // process maps the file.
        unsafe { std::ptr::write_bytes(self.ptr, byte, self.len) };
    }

    /// Gives the pages back: the next write to each faults in a zeroed
    /// page, like the first writes into a restarted member's new segment.
    /// Truncating unmaps the pages from the mapping too.
    fn drop_pages(&self) -> Result<()> {
        let io = |source| BenchError::Io {
            path: self.path.clone(),
            source,
        };
        self.file.set_len(0).map_err(io)?;
        self.file.set_len(self.len as u64).map_err(io)
    }
}

impl Drop for ShmMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `create`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
        let _ = std::fs::remove_file(&self.path);
        crate::signals::unregister(self.owner);
    }
}

/// Times `reps` copies of `bytes` (in pieces of `piece`) by `copy(src
/// offset, dst offset, len)`, with `before` run untimed before each.
fn time_copies(
    name: &str,
    what: String,
    bytes: usize,
    piece: usize,
    reps: u32,
    mut before: impl FnMut() -> Result<()>,
    mut copy: impl FnMut(usize, usize),
) -> Result<CopyBandwidth> {
    let mut rates = Vec::with_capacity(reps as usize);
    for _ in 0..reps {
        crate::signals::check()?;
        before()?;
        let t = Instant::now();
        let mut at = 0;
        while at < bytes {
            let len = piece.min(bytes - at);
            copy(at, len);
            at += len;
        }
        let s = t.elapsed().as_secs_f64().max(1e-9);
        rates.push(bytes as f64 / GIB / s);
    }
    let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let max = rates.iter().copied().fold(0.0, f64::max);
    Ok(CopyBandwidth {
        name: name.into(),
        what,
        buffer_bytes: bytes as u64,
        repetitions: reps,
        gib_per_s: median_of(rates).unwrap_or(0.0),
        gib_per_s_min: if min.is_finite() { min } else { 0.0 },
        gib_per_s_max: max,
    })
}

/// This machine's copy bandwidth for `total` bytes: buffers of at most
/// `buffer_max` bytes, copied again until `total` (at least 3 times), in
/// pieces of `piece` bytes (the copy WRITE's size), on `core`.
pub fn measure_memcpy(
    total: u64,
    buffer_max: u64,
    piece: u64,
    shm_dir: &Path,
    core: Option<usize>,
) -> Result<MemcpyReport> {
    let page = 4096u64;
    let bytes = (total.min(buffer_max.max(page)).div_ceil(page) * page) as usize;
    let reps = (total.div_ceil(bytes as u64) as u32).max(3);
    let piece = (piece.max(64) as usize).min(bytes);
    let shm_dir = shm_dir.to_path_buf();
    // On a thread of its own: pinning must not stick to the caller (the
    // replicas it starts later would inherit it).
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                crate::cluster::pin_current(core);
                let mut report = MemcpyReport {
                    buffer_bytes: bytes as u64,
                    piece_bytes: piece as u64,
                    core,
                    ..MemcpyReport::default()
                };
                {
                    let src: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
                    // Not zeroes: a zeroed allocation's pages would be
                    // faulted in by the first timed copy.
                    let mut dst = vec![1u8; bytes];
                    report.copies.push(time_copies(
                        "private memcpy",
                        "libc memcpy between two private, already touched buffers".into(),
                        bytes,
                        piece,
                        reps,
                        || Ok(()),
                        |at, len| {
                            dst[at..at + len]
                                .copy_from_slice(std::hint::black_box(&src[at..at + len]))
                        },
                    )?);
                    std::hint::black_box(&dst);
                }
                match shm_copies(&shm_dir, bytes, piece, reps) {
                    Ok(c) => report.copies.extend(c),
                    Err(e @ BenchError::Interrupted) => return Err(e),
                    Err(e) => report.shm_error = Some(e.to_string()),
                }
                Ok(report)
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// The copies between two shared mappings.
fn shm_copies(shm_dir: &Path, bytes: usize, piece: usize, reps: u32) -> Result<Vec<CopyBandwidth>> {
    let name = |k: &str| shm_dir.join(format!("verbatim-bench-memcpy-{}-{k}", std::process::id()));
    let a = ShmMap::create(name("src"), bytes)?;
    let b = ShmMap::create(name("dst"), bytes)?;
    a.touch(0xA5);
    b.touch(0);
    let (src, dst) = (a.ptr, b.ptr);
    let memcpy = |at: usize, len: usize| {
        // SAFETY: both mappings are `bytes` long and `at + len <= bytes`;
        // nothing else maps the files.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), len) }
    };
    let words = |at: usize, len: usize| {
        // SAFETY: as above; the fabric's own copy for WRITEs.
        unsafe { verbatim_client::shared::copy_shared(src.add(at), dst.add(at), len) }
    };
    let fresh = || b.drop_pages();
    Ok(vec![
        time_copies(
            "shm memcpy",
            "libc memcpy between two shared mappings of /dev/shm files, pages present".into(),
            bytes,
            piece,
            reps,
            || Ok(()),
            memcpy,
        )?,
        time_copies(
            "shm word copy",
            "the fabric's WRITE copy (verbatim_client::shared::copy_shared, 8-byte atomic \
             loads and stores) between the same mappings, pages present"
                .into(),
            bytes,
            piece,
            reps,
            || Ok(()),
            words,
        )?,
        time_copies(
            "shm memcpy, fresh pages",
            "libc memcpy into the destination file truncated before each repetition: every \
             page faulted in and zeroed by the kernel first"
                .into(),
            bytes,
            piece,
            reps,
            fresh,
            memcpy,
        )?,
        time_copies(
            "shm word copy, fresh pages",
            "the fabric's WRITE copy into freshly truncated pages: what a bulk copy into a \
             restarted member's new segment does"
                .into(),
            bytes,
            piece,
            reps,
            fresh,
            words,
        )?,
        new_file_copies(&name, src, bytes, piece, reps)?,
    ])
}

/// The fabric's WRITE copy into a new file for each repetition, every
/// file kept until the end: the kernel cannot hand back the pages it just
/// took from the previous repetition, as for a restarted member's new
/// segment while its old one is still held.
fn new_file_copies(
    name: &dyn Fn(&str) -> PathBuf,
    src: *mut u8,
    bytes: usize,
    piece: usize,
    reps: u32,
) -> Result<CopyBandwidth> {
    let files = std::cell::RefCell::new(Vec::with_capacity(reps as usize));
    let dst = std::cell::Cell::new(std::ptr::null_mut::<u8>());
    time_copies(
        "shm word copy, new files",
        "the fabric's WRITE copy into a new /dev/shm file each repetition, the earlier ones \
         kept: pages the kernel had to find anew, like a restarted member's segment while its \
         old one is held"
            .into(),
        bytes,
        piece,
        reps,
        || {
            let mut f = files.borrow_mut();
            let m = ShmMap::create(name(&format!("new{}", f.len())), bytes)?;
            dst.set(m.ptr);
            f.push(m);
            Ok(())
        },
        |at, len| {
            // SAFETY: `dst` is the newest mapping, `bytes` long, alive in
            // `files`; `at + len <= bytes`; nothing else maps the files.
            unsafe { verbatim_client::shared::copy_shared(src.add(at), dst.get().add(at), len) }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sizes_hold_the_target() {
        // 1 GiB of 4 KiB values: 8 KiB chunks, 1 MiB slabs.
        let o = sizing_overrides(1 << 30, 8192, 1 << 20, 4096);
        let get = |k: &str| -> u64 {
            o.iter()
                .find_map(|s| s.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in {o:?}"))
        };
        assert_eq!(get("backup.slab_bytes"), 1 << 20);
        assert!(get("backup.slab_count") >= 1024 + 8);
        assert!(get("backup.entry_count") >= (1 << 30) / 8192);
        assert_eq!(get("cluster.value_bytes_max"), 4096);
        // A tiny store still has room to spare.
        let o = sizing_overrides(8 << 20, 8192, 1 << 20, 4096);
        assert!(o.contains(&"backup.slab_count=16".to_string()), "{o:?}");
    }

    #[test]
    fn the_manifest_accepts_the_sizes_and_the_layout_fits_the_target() {
        let target = 64 * MIB;
        let mut overrides = sizing_overrides(target, 8192, 1 << 20, 4096);
        overrides.extend([
            "views.lease_us=50".to_string(),
            "cluster.mode=backup-memory".into(),
        ]);
        let m = Manifest::parse(&Manifest::local("probe", 3, 0).to_toml(), &overrides)
            .expect("the manifest check accepts the bench's sizes");
        let s = sizing_of(&m, 4096).expect("a geometry");
        assert_eq!(s.item_chunk_bytes, 8192);
        assert!(s.region_bytes > target, "{s:?}");
        assert!(s.metadata_bytes < target / 8, "{s:?}");
        assert_eq!(s.sync_in_flight, 4);
    }

    #[test]
    fn medians_and_rates() {
        assert_eq!(median_of(vec![]), None);
        assert_eq!(median_of(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_of(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(gib_per_s(1 << 30, 500.0), Some(2.0));
        assert_eq!(gib_per_s(1, 0.0), None);
        let r = SyncRound {
            samples: vec![
                SyncSample {
                    ms: 1.0,
                    state: "needed".into(),
                    ..SyncSample::default()
                },
                SyncSample {
                    ms: 6.0,
                    state: "copying".into(),
                    done_bytes: 30,
                    total_bytes: 100,
                    ..SyncSample::default()
                },
                SyncSample {
                    ms: 11.0,
                    state: "copying".into(),
                    done_bytes: 60,
                    total_bytes: 100,
                    ..SyncSample::default()
                },
            ],
            ..SyncRound::default()
        };
        assert_eq!(r.reached_ms(0.25), Some(6.0));
        assert_eq!(r.reached_ms(0.5), Some(11.0));
        assert_eq!(r.reached_ms(0.75), None);
    }

    #[test]
    fn copies_are_timed_on_private_and_shared_memory() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let r = measure_memcpy(1 << 20, 256 << 10, 64 << 10, dir.path(), None)
            .expect("the measurement");
        assert_eq!(r.buffer_bytes, 256 << 10);
        assert!(r.shm_error.is_none(), "{:?}", r.shm_error);
        let names: Vec<&str> = r.copies.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "private memcpy",
                "shm memcpy",
                "shm word copy",
                "shm memcpy, fresh pages",
                "shm word copy, fresh pages",
                "shm word copy, new files"
            ]
        );
        for c in &r.copies {
            assert_eq!(c.repetitions, 4, "{c:?}");
            assert!(
                c.gib_per_s_min <= c.gib_per_s && c.gib_per_s <= c.gib_per_s_max,
                "{c:?}"
            );
            assert!(c.gib_per_s > 0.0, "{c:?}");
        }
        // The files are gone.
        assert_eq!(
            std::fs::read_dir(dir.path()).map(|d| d.count()).ok(),
            Some(0)
        );
    }
}
