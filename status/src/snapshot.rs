//! The snapshot a replica's status endpoint serves: one Unix socket per
//! replica speaking newline-delimited JSON. The console, the bench and
//! `verbatim status` read it.
//!
//! Protocol (one request line, answered by JSON lines):
//! * `status` (or an empty line): one [`Snapshot`] line.
//! * `watch <interval_ms>`: a [`Snapshot`] line every interval (at least
//!   20 ms) until the client closes the connection.
//! * `member add|remove|resize <n>`: a change of the group (leader only),
//!   answered by one [`MemberReply`] line once its last CONFIG entry has
//!   committed (or at once if it is refused).
//! * anything else: `{"error": "..."}` and the connection stays open.
//!
//! Lines longer than 1 KiB or not UTF-8 get an error and the connection is
//! closed. The replica never waits for a status client: its poll loop
//! publishes a snapshot into a slot without blocking, and a separate thread
//! serves the sockets.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Schema version of [`Snapshot`].
pub const STATUS_VERSION: u32 = 1;

/// Log pointers (DARE §3.1.1): positions are bytes since the log began,
/// indices count entries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogPointers {
    /// Head position.
    pub head_pos: u64,
    /// Apply position.
    pub apply_pos: u64,
    /// First index not applied.
    pub apply_index: u64,
    /// Commit position.
    pub commit_pos: u64,
    /// First index not known committed.
    pub commit_index: u64,
    /// Tail position.
    pub tail_pos: u64,
    /// Index after the last entry (exact on the leader).
    pub tail_index: u64,
    /// Bytes of the ring.
    pub ring_bytes: u64,
}

/// A peer as this replica sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerSnapshot {
    /// Member id.
    pub id: u8,
    /// False after retries were exhausted or its process exited.
    pub reachable: bool,
    /// Its process exited (pidfd).
    pub dead: bool,
    /// Control channel broken.
    pub control_broken: bool,
    /// Log channel broken.
    pub log_broken: bool,
    /// Its term, from its last row.
    pub term: u64,
    /// Its role, from its last row.
    pub role: String,
    /// First index it has not applied, from its row.
    pub apply_index: u64,
    /// Leader's view of its replication: "idle", "await-grant",
    /// "adjusting", "replicating", "needs-recovery", "broken".
    pub replication: String,
    /// Log position it acknowledged (leader's view).
    pub acked_pos: u64,
    /// Bytes it lags behind the leader's tail (leader's view).
    pub lag_bytes: u64,
    /// Entries it lags behind our apply index, from its row.
    pub lag_entries: u64,
    /// Microseconds since its row last changed.
    pub row_age_us: u64,
    /// Its heartbeat counter as last READ by the heartbeat engine (uKharon
    /// §4.2), if read yet.
    #[serde(default)]
    pub counter: Option<u64>,
    /// Two READs of its counter returned the same value: its memory
    /// answers but its process does not run (stopped, stuck in the kernel).
    #[serde(default)]
    pub counter_stalled: bool,
}

/// The group's atomic multicast as one replica sees it (Derecho, issue
/// 15).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MulticastState {
    /// Every member's row was seen and the group formed (same
    /// incarnations pinned everywhere).
    pub started: bool,
    /// Why it wedged (a member gone, a slot overwritten), if it did.
    pub wedged: Option<String>,
    /// Slots per sender ring.
    pub window: u64,
    /// This replica's messages, data and null.
    pub sent: u64,
    /// Of which nulls (turns filled while others sent).
    pub sent_nulls: u64,
    /// Messages received per sender (member ids in order).
    pub received: Vec<u64>,
    /// Global sequence numbers delivered (nulls included).
    pub delivered: u64,
    /// Data messages delivered here.
    pub delivered_messages: u64,
    /// Sends refused because the window was full.
    pub window_full: u64,
    /// WRITEs that failed (posted again after a reconnect).
    pub write_errors: u64,
    /// The current epoch (view number; each view change adds one).
    #[serde(default)]
    pub epoch: u64,
    /// The current view's members.
    #[serde(default)]
    pub view: Vec<u8>,
    /// Members suspected in this epoch (a view change is under way).
    #[serde(default)]
    pub suspected: Vec<u8>,
    /// Why this member left the group for good, if it did.
    #[serde(default)]
    pub halted: Option<String>,
    /// It suspects a majority of its view: it waits (neither leads nor
    /// echoes) until the others decide a trim, or for good if it is the
    /// minority side of a partition.
    #[serde(default)]
    pub minority: bool,
    /// This replica's process asks to join the running group (it started
    /// after the group formed, or its predecessor was removed); the next
    /// view change adds it.
    #[serde(default)]
    pub joining: bool,
    /// This replica restarts from its persistent multicast log after the
    /// whole group failed: it waits for every member of the log's last
    /// view to restart too (Derecho's total restart).
    #[serde(default)]
    pub restarting: bool,
    /// Views installed after the first.
    #[serde(default)]
    pub view_changes: u64,
    /// When this replica was first seen in its current view, if that view
    /// came from a view change (CLOCK_MONOTONIC ns, so that a benchmark
    /// times it from its own kill of a member).
    #[serde(default)]
    pub view_installed_mono_ns: Option<u64>,
    /// The ragged trim that ended the previous epoch.
    #[serde(default)]
    pub last_trim: Option<McastTrim>,
    /// This replica's messages the trims left out (sent again in the next
    /// view when they were publications).
    #[serde(default)]
    pub trimmed_own: u64,
    /// Large messages (RDMC), when they are on.
    #[serde(default)]
    pub large: Option<LargeState>,
    /// The multicast subgroups this replica is a member of (Derecho's
    /// subgroups and shards), each with its own view and counters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subgroups: Vec<SubgroupState>,
}

/// One multicast subgroup as one of its members sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubgroupState {
    /// Its place among the manifest's subgroups.
    pub index: u8,
    /// Its name (the RESP channel its messages are published on).
    pub name: String,
    /// Its declared members.
    pub members: Vec<u8>,
    /// Its atomic multicast (views, counters, trims: member ids; no large
    /// messages and no subgroups of its own).
    pub state: MulticastState,
}

/// The view's RDMC session, which carries the multicast's large messages
/// (Derecho's binomial pipeline).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LargeState {
    /// The view (epoch) the session belongs to; `None` before the group
    /// formed (no session yet).
    pub epoch: Option<u64>,
    /// Why the session is wedged, if it is (a view change, a member gone).
    pub wedged: Option<String>,
    /// Message slots per sender.
    pub slots: u64,
    /// Bytes of a chunk.
    pub chunk_bytes: u64,
    /// Large messages whole here, per sender (member ids in order).
    pub received: Vec<u64>,
    /// Large messages delivered here, per sender.
    pub delivered: Vec<u64>,
    /// Chunks this replica wrote to others (its own and relayed), and
    /// their bytes.
    pub chunks_written: u64,
    /// See `chunks_written`.
    pub bytes_written: u64,
}

/// A ragged trim: how an epoch ended (Derecho §3.4).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McastTrim {
    /// The epoch it ended.
    pub epoch: u64,
    /// The member whose proposal it was (the leader then).
    pub leader: u8,
    /// The cut of a total restart (computed from the logs, no leader's).
    #[serde(default)]
    pub restart: bool,
    /// The next view's members.
    pub members: Vec<u8>,
    /// Per sender (member id), messages delivered in that epoch
    /// (nulls included).
    pub counts: Vec<u64>,
}

/// Views and leases as one replica sees them (uKharon §5–6).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewsState {
    /// The newest view known (0: none yet); view `k` is decided in
    /// coordinator slot `k − 1`.
    pub epoch: u64,
    /// The log leader it names (the primary in primary-backup mode).
    pub leader: Option<u8>,
    /// How the group replicates: "log" (DARE) or "primary-backup".
    #[serde(default)]
    pub mode: String,
    /// Primary-backup mode: the members the view lists (whose copy
    /// counts, and who may take over); empty in log mode.
    #[serde(default)]
    pub members: Vec<u8>,
    /// The DARE term it leads in.
    pub log_term: u64,
    /// The lease length δ it is held under (µs).
    pub lease_us: u64,
    /// This replica holds an active lease on it (only its leader does).
    pub lease_active: bool,
    /// Lease left (µs).
    pub lease_remaining_us: u64,
    /// The coordinators (members that decide views).
    pub coordinators: Vec<u8>,
    /// Coordinators not counted: reported dead, restarted, or our own
    /// after a restart.
    pub coordinators_out: Vec<u8>,
    /// A majority of coordinators is gone: the log engine goes by DARE's
    /// own election alone.
    pub fallback: bool,
    /// Coordinator slot words: a ring views reuse lap after lap.
    pub slot_count: u64,
    /// Times this replica fell a lap of the ring behind and skipped to
    /// the newest views.
    #[serde(default)]
    pub slots_skipped: u64,
    /// Times this replica's own coordinator memory counted again after a
    /// restart (it rejoined behind a fence).
    #[serde(default)]
    pub own_acceptor_rejoins: u64,
    /// The fabric refused this replica's requests to its own memory (no
    /// loopback connection), so its own coordinator memory is not asked
    /// (the others still count it).
    #[serde(default)]
    pub own_acceptor_no_loopback: bool,
    /// Views this replica proposed, and of those decided with its value.
    pub proposed: u64,
    /// See `proposed`.
    pub won: u64,
    /// Lease checks that started or extended a lease.
    pub renewals: u64,
    /// Lease checks that found a newer view.
    pub renewals_superseded: u64,
    /// Lease checks given up (too few coordinators answered).
    pub renewals_abandoned: u64,
}

/// One leader change, timed by the new leader (microseconds).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Failover {
    /// The new term.
    pub term: u64,
    /// The leader that was lost, if known.
    pub old_leader: Option<u8>,
    /// The new leader (the replica reporting).
    pub new_leader: u8,
    /// When it happened (Unix ms, the reporter's clock).
    pub at_unix_ms: u64,
    /// From the old leader's death (pidfd) or last heartbeat to suspicion.
    pub detection_us: u64,
    /// From suspicion to leadership.
    pub election_us: u64,
    /// From leadership to the first commit of the new term.
    pub first_commit_us: Option<u64>,
    /// How the loss was detected: "pidfd", "heartbeat" or "vote".
    pub detected_by: String,
    /// What made this replica leader: "election" (DARE's votes) or
    /// "view" (the coordinators decided it, primary-backup mode).
    #[serde(default)]
    pub decided_by: String,
    /// With views on: from leadership to its view being active (every
    /// lease on an older view ran out), before which it commits nothing
    /// (part of `first_commit_us`). None with views off.
    #[serde(default)]
    pub view_wait_us: Option<u64>,
    /// The same moments on the machine's CLOCK_MONOTONIC (ns), so that a
    /// benchmark can time each from its own kill of the old leader.
    #[serde(default)]
    pub timeline: Option<FailoverTimeline>,
}

/// A failover's moments on CLOCK_MONOTONIC (ns since boot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverTimeline {
    /// The old leader was lost: its death seen, or its last heartbeat.
    pub lost_ns: u64,
    /// We suspected it.
    pub suspected_ns: u64,
    /// We became leader.
    pub elected_ns: u64,
    /// The first commit of our term, if it came.
    pub first_commit_ns: Option<u64>,
    /// With views on: our view was active (we could commit).
    #[serde(default)]
    pub view_active_ns: Option<u64>,
}

/// Latency percentiles of one kind of request over the last window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Requests completed in the window.
    pub count: u64,
    /// Median (ns).
    pub p50_ns: u64,
    /// 99th percentile (ns).
    pub p99_ns: u64,
    /// Maximum (ns).
    pub max_ns: u64,
}

/// Server-side request latency (arrival to reply) over the last window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Window length (ms).
    pub window_ms: u64,
    /// Writes.
    pub writes: Percentiles,
    /// Reads.
    pub reads: Percentiles,
    /// Requests per second over the window.
    pub ops_per_sec: f64,
}

/// Something that happened, for the console's event list.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// When (Unix ms).
    pub at_unix_ms: u64,
    /// "leader-change", "replica-lost", "replica-back", "revoke",
    /// "log-full", "needs-recovery", "log-corrupt".
    pub kind: String,
    /// Human-readable detail.
    pub detail: String,
}

/// The configuration a replica runs with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigSnapshot {
    /// Cluster name.
    pub cluster: String,
    /// Group size.
    pub members: u8,
    /// Quorum size.
    pub quorum: u8,
    /// "shm" or "verbs".
    pub fabric: String,
    /// "busy" or "adaptive".
    pub poll: String,
    /// Pinned core, if any.
    pub core: Option<usize>,
    /// NUMA node of that core, if known.
    pub numa_node: Option<usize>,
    /// RESP listener.
    pub resp_addr: Option<String>,
    /// Layout hash (hex).
    pub layout_hash: String,
    /// Bytes of the log ring.
    pub log_ring_bytes: u64,
    /// Largest value.
    pub value_bytes_max: u32,
    /// Heartbeat period (µs).
    pub heartbeat_period_us: u64,
    /// Current failure-detector period Δ (µs).
    pub fd_check_period_us: u64,
}

/// One status report of a replica.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// [`STATUS_VERSION`].
    pub version: u32,
    /// Member id.
    pub id: u8,
    /// Process id.
    pub pid: u32,
    /// When the snapshot was taken (Unix ms).
    pub at_unix_ms: u64,
    /// Uptime (ms).
    pub uptime_ms: u64,
    /// "leader", "follower" or "candidate".
    pub role: String,
    /// Term.
    pub term: u64,
    /// Known leader.
    pub leader: Option<u8>,
    /// The member our log accepts writes from (DARE §3.2.1).
    pub log_granted_to: Option<u8>,
    /// Log pointers.
    pub log: LogPointers,
    /// Peers (excluding this replica).
    pub peers: Vec<PeerSnapshot>,
    /// Configuration.
    pub config: ConfigSnapshot,
    /// The last leader changes this replica led, newest last.
    pub failovers: Vec<Failover>,
    /// Counters (core and host).
    pub counters: BTreeMap<String, u64>,
    /// Latency and throughput.
    pub latency: LatencySummary,
    /// Recent events, newest last.
    pub events: Vec<EventRecord>,
    /// Views and leases (`[views]`, uKharon): the newest view this replica
    /// knows and whether it holds a lease on it; null with views off.
    pub lease: Option<String>,
    /// The same in detail (null with views off).
    #[serde(default)]
    pub views: Option<ViewsState>,
    /// Recovery by state transfer (DARE §3.4): this replica's own
    /// progress while it copies a snapshot, and its totals.
    #[serde(default)]
    pub recovery: RecoveryProgress,
    /// The group configuration this replica goes by (DARE §3.4).
    #[serde(default)]
    pub group: GroupConfiguration,
    /// Atomic multicast (`[multicast]`; null when off).
    #[serde(default)]
    pub multicast: Option<MulticastState>,
    /// The backup-memory store (`cluster.mode = "backup-memory"`; null in
    /// the other modes).
    #[serde(default)]
    pub backup: Option<BackupState>,
}

/// The backup-memory store as one replica sees it (MacR, issue 16).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupState {
    /// `backup` (holds a copy, its CPU dormant), `taking-over` (named
    /// primary: revoking, recovering, copying) or `primary`.
    pub role: String,
    /// The view followed: its epoch, primary and members.
    pub epoch: u64,
    /// The view's primary.
    pub primary: Option<u8>,
    /// The view's members.
    pub members: Vec<u8>,
    /// Keys in this replica's store (a backup's count is its last
    /// take-over's or 0: a dormant backup keeps no index).
    pub keys: u64,
    /// Bytes of the store in use (metadata and carved slabs): what a bulk
    /// copy moves.
    pub used_bytes: u64,
    /// At the primary: each other member's copy.
    pub copies: Vec<BackupCopy>,
    /// The last take-over's findings.
    pub recovery: Option<BackupRecovery>,
    /// Writes replicated by WRITEs alone (the backups' CPUs not involved).
    pub writes_zero_copy: u64,
    /// Writes forwarded to the backups' CPUs (allocator changes spread
    /// wider than `backup.forward_threshold`).
    pub writes_forwarded: u64,
    /// Writes that changed nothing (no replication).
    pub writes_unchanged: u64,
    /// Forwarded writes this replica replayed as a backup.
    pub replays: u64,
    /// Replays refused (its copy differed; copied anew).
    pub replay_failures: u64,
    /// Bulk copies completed to other members.
    pub copies_done: u64,
    /// Bytes WRITEn by bulk copies.
    pub copy_bytes: u64,
    /// Take-overs completed.
    pub takeovers: u64,
}

/// One member's copy of the store, at the primary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupCopy {
    /// The member.
    pub member: u8,
    /// `synced`, `needed` or `copying`.
    pub state: String,
    /// While copying: bytes done and the total.
    pub done_bytes: u64,
    /// While copying: the total.
    pub total_bytes: u64,
}

/// What a take-over found and mended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupRecovery {
    /// Keys served afterwards.
    pub keys: u64,
    /// Entries of half-finished writes cleared.
    pub entries_reclaimed: u64,
    /// Phantom chunks (counted used, named by no entry) freed.
    pub chunks_reclaimed: u64,
    /// Free lists cut at a bad link.
    pub free_lists_cut: u64,
    /// Session records cleared (torn, or of a write that did not commit).
    pub sessions_cleared: u64,
    /// A full scan right after: chunks counted used that no entry names
    /// (phantom items; must be 0).
    #[serde(default)]
    pub audit_phantoms: u64,
    /// Entries naming no valid item (must be 0).
    #[serde(default)]
    pub audit_dangling_entries: u64,
    /// Chunks both named and free, or named twice (must be 0).
    #[serde(default)]
    pub audit_conflicts: u64,
}

/// A group configuration (DARE §3.4) as a replica sees it: the latest
/// CONFIG entry in its log (committed or not) and the one it applied.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupConfiguration {
    /// "stable", "extended" or "transitional".
    pub state: String,
    /// Slots P of the group (majorities are of P).
    pub size: u8,
    /// The size it moves to (equal to `size` when stable).
    pub new_size: u8,
    /// The members, ascending.
    pub members: Vec<u8>,
    /// Members the leader removed because they fell silent (zombies), to
    /// be added back when they return.
    #[serde(default)]
    pub away: Vec<u8>,
    /// Log index of the CONFIG entry (0: the initial configuration).
    pub index: u64,
    /// The entry has been applied here, so it is committed.
    pub committed: bool,
    /// This replica is one of `members`.
    pub is_member: bool,
    /// A reconfiguration this replica leads is under way.
    pub in_progress: bool,
}

impl GroupConfiguration {
    /// An operator's reading: "stable, 3 slots, members 0 1 2",
    /// "transitional 3 -> 4, members 0 1 2 3", "stable, 3 slots, members
    /// 0 1 (away: 2)".
    pub fn describe(&self) -> String {
        let mut members: Vec<String> = self.members.iter().map(u8::to_string).collect();
        if !self.away.is_empty() {
            let away: Vec<String> = self.away.iter().map(u8::to_string).collect();
            members.push(format!("(away: {})", away.join(" ")));
        }
        let members = members.join(" ");
        match self.state.as_str() {
            "extended" => format!(
                "extended {} + {} recovering, members {members}",
                self.size,
                self.new_size.saturating_sub(self.size)
            ),
            "transitional" => format!(
                "transitional {} -> {}, members {members}",
                self.size, self.new_size
            ),
            _ => format!("stable, {} slots, members {members}", self.size),
        }
    }
}

/// A change of the group's members an operator asks of the leader
/// (`member add|remove|resize <n>` on the status socket).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberChange {
    /// Put member `n` into the group (a free slot, or the next slot).
    Add(u8),
    /// Take member `n` out of the group.
    Remove(u8),
    /// Shrink the group to `n` slots.
    Resize(u8),
}

impl MemberChange {
    /// The request line: `member add 3`.
    pub fn request_line(&self) -> String {
        match self {
            MemberChange::Add(n) => format!("member add {n}"),
            MemberChange::Remove(n) => format!("member remove {n}"),
            MemberChange::Resize(n) => format!("member resize {n}"),
        }
    }

    /// Parses the words after `member`.
    pub fn parse(verb: &str, arg: &str) -> Result<MemberChange, String> {
        let n: u8 = arg
            .parse()
            .map_err(|_| format!("`{arg}` is not a member id or size (0 to 255)"))?;
        match verb {
            "add" => Ok(MemberChange::Add(n)),
            "remove" => Ok(MemberChange::Remove(n)),
            "resize" => Ok(MemberChange::Resize(n)),
            _ => Err(format!(
                "unknown member change `{verb}`: use add, remove or resize"
            )),
        }
    }
}

/// The answer to a [`MemberChange`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemberReply {
    /// The configuration the group committed: the change is done.
    pub configuration: Option<GroupConfiguration>,
    /// Why the change was not made (or not confirmed).
    pub error: Option<String>,
    /// This replica does not lead; the leader it knows of.
    pub leader: Option<u8>,
    /// True when the replica is not the leader (ask `leader`).
    #[serde(default)]
    pub not_leader: bool,
    /// True when the change started but this replica lost leadership
    /// before it committed: the next leader finishes it.
    #[serde(default)]
    pub interrupted: bool,
    /// Refused for now (another change is under way, the log is full):
    /// the same request may succeed later.
    #[serde(default)]
    pub retry: bool,
}

/// A replica's recovery by state transfer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecoveryProgress {
    /// Copying a snapshot now.
    pub active: bool,
    /// The member it copies from.
    pub donor: Option<u8>,
    /// Bytes copied so far.
    pub bytes_copied: u64,
    /// Bytes of the snapshot (0 until the donor finished writing it).
    pub bytes_total: u64,
    /// Bytes of the copy restored so far (the copy is whole; restored a
    /// bounded piece per step).
    #[serde(default)]
    pub bytes_restored: u64,
    /// Recoveries completed by this replica.
    pub completed: u64,
    /// Attempts given up (donor silent, snapshot changed or corrupt).
    pub abandoned: u64,
    /// Snapshots this replica gave to recovering ones.
    pub served: u64,
}

/// A reply line that is not a snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// What was wrong with the request.
    pub error: String,
}
