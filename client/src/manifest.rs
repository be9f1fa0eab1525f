//! The cluster manifest: one TOML file describing every member, the fabric
//! and the limits, plus command-line overrides (`--set key=value`).
//! Validation errors name the field and say what to change.
//!
//! ```toml
//! [cluster]
//! name = "demo"
//! fabric = "shm"          # shm | verbs
//! poll = "adaptive"       # busy | adaptive
//! value_bytes_max = 4096
//!
//! [timing]
//! heartbeat_period_us = 200
//!
//! [[members]]
//! id = 0
//! core = 1
//! resp_addr = "127.0.0.1:7000"
//! ```

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use verbatim_core::config::ConfigError as CoreConfigError;
use verbatim_core::fabric::{MemberId, MAX_MEMBERS};
use verbatim_core::kv::KvLimits;
use verbatim_core::Config;

/// A configuration problem: the field and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// Dotted path of the field (`members[1].core`).
    pub field: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl ConfigError {
    /// An error about `field`; an empty name (an override such as `=x`
    /// names none) becomes `--set`, so that every error names something
    /// the user can change.
    fn new(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        let field = field.into();
        ConfigError {
            field: if field.trim().is_empty() {
                "--set".to_string()
            } else {
                field
            },
            message: message.into(),
        }
    }
}

/// Which fabric the replicas use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FabricKind {
    /// Shared memory between processes of one host (the default).
    Shm,
    /// RDMA verbs (RoCE/InfiniBand), build feature `rdma`.
    Verbs,
}

impl fmt::Display for FabricKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FabricKind::Shm => "shm",
            FabricKind::Verbs => "verbs",
        })
    }
}

/// How the group replicates (`cluster.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicationMode {
    /// DARE's log: a leader elected by votes, commits on a majority.
    #[default]
    Log,
    /// uKharon-KV's primary-backup (issue 14): the coordinators decide
    /// the primary and the members that count in a view, an entry commits
    /// once all of them hold it (`f + 1` replicas survive `f` failures),
    /// and a member of the view takes over by a view, without an
    /// election. Needs views (`views.lease_us`).
    PrimaryBackup,
    /// MacR's backup-memory replication (issue 16): primaries and views
    /// as in primary-backup, but the key-value store lives in registered
    /// memory and the primary WRITEs the bytes a write changed straight
    /// into the backups' copies (`[backup]`); their CPUs stay dormant.
    /// Needs views (`views.lease_us`).
    BackupMemory,
}

impl From<ReplicationMode> for verbatim_core::Mode {
    fn from(m: ReplicationMode) -> Self {
        match m {
            ReplicationMode::Log => verbatim_core::Mode::Log,
            ReplicationMode::PrimaryBackup => verbatim_core::Mode::PrimaryBackup,
            ReplicationMode::BackupMemory => verbatim_core::Mode::BackupMemory,
        }
    }
}

/// How the poll loop waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PollMode {
    /// Spin on its core forever (lowest latency; owns the core).
    Busy,
    /// Spin for `spin_us`, then sleep until work or a deadline (so that
    /// several replicas and clients can share a small machine).
    Adaptive,
    /// Busy while leading, adaptive while following: followers' CPUs are
    /// not on the replication path (DARE), so only the leader needs a core.
    #[serde(rename = "leader-busy")]
    LeaderBusy,
}

impl fmt::Display for PollMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PollMode::Busy => "busy",
            PollMode::Adaptive => "adaptive",
            PollMode::LeaderBusy => "leader-busy",
        })
    }
}

fn default_fabric() -> FabricKind {
    FabricKind::Shm
}
fn default_poll() -> PollMode {
    // A replica owns its core and busy-polls unless told otherwise; local
    // clusters on small machines (`verbatim up`, the demo) ask for adaptive.
    PollMode::Busy
}
fn default_spin_us() -> u64 {
    50
}
fn default_log_ring_bytes() -> u64 {
    4 << 20
}
fn default_snapshot_bytes_max() -> u64 {
    64 << 20
}
fn default_snapshot_restore_step_bytes() -> u64 {
    256 << 10
}
fn default_recovery_log_hold_percent() -> u8 {
    90
}
fn default_recovery_releases_max() -> u32 {
    1
}
fn default_key_bytes_max() -> u32 {
    256
}
fn default_value_bytes_max() -> u32 {
    4096
}
fn default_session_slot_count() -> u32 {
    4096
}
fn default_resp_output_bytes_max() -> u64 {
    64 << 20
}
fn default_reply_bytes_max() -> u32 {
    64
}
fn default_client_slot_count() -> u32 {
    64
}
fn default_fence_stopped_writer_ms() -> u64 {
    1_000
}

/// `[cluster]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// Name: segment and socket names derive from it.
    pub name: String,
    /// Fabric.
    #[serde(default = "default_fabric")]
    pub fabric: FabricKind,
    /// Directory of the shared-memory segments (default `/dev/shm`).
    #[serde(default)]
    pub shm_dir: Option<PathBuf>,
    /// Directory of status sockets and logs (default
    /// `$XDG_RUNTIME_DIR/verbatim-<name>` or `/tmp/verbatim-<name>`).
    #[serde(default)]
    pub run_dir: Option<PathBuf>,
    /// Poll mode.
    #[serde(default = "default_poll")]
    pub poll: PollMode,
    /// Adaptive mode: spin this long after the last work before sleeping.
    #[serde(default = "default_spin_us")]
    pub spin_us: u64,
    /// Bytes of the log ring.
    #[serde(default = "default_log_ring_bytes")]
    pub log_ring_bytes: u64,
    /// Bytes of the snapshot a replica can give to a recovering one (DARE
    /// §3.4): the session table and the whole key-value and stream state
    /// must fit. 0 disables recovery by state transfer (a replica that
    /// restarts, or falls behind the pruned log, then cannot rejoin).
    #[serde(default = "default_snapshot_bytes_max")]
    pub snapshot_bytes_max: u64,
    /// Bytes of a copied snapshot a recovering replica restores per loop
    /// iteration at most (whole records): smaller pieces keep it
    /// responsive and its core's other tenants running.
    #[serde(default = "default_snapshot_restore_step_bytes")]
    pub snapshot_restore_step_bytes: u64,
    /// A recovering replica holds the log back (the leader keeps the
    /// entries after its snapshot) only until the log fills this
    /// percentage of the room writes may use. Past it the leader prunes
    /// past the replica, which recovers again later, so that no client
    /// waits for one replica's transfer. 100: hold until full (writes wait
    /// for the transfer). Size `log_ring_bytes` for the writes of one
    /// transfer, or large states never finish recovering under load.
    #[serde(default = "default_recovery_log_hold_percent")]
    pub recovery_log_hold_percent: u8,
    /// Times in a row the leader releases one recovering replica's hold
    /// before it holds the log for it until full (writes wait) so that it
    /// does rejoin. 4294967295: always release.
    #[serde(default = "default_recovery_releases_max")]
    pub recovery_releases_max: u32,
    /// How the group replicates: `"log"` (DARE, the default),
    /// `"primary-backup"` (uKharon-KV) or `"backup-memory"` (MacR; see
    /// `[backup]`); both of the latter need `views.lease_us`.
    #[serde(default)]
    pub mode: ReplicationMode,
    /// Largest key.
    #[serde(default = "default_key_bytes_max")]
    pub key_bytes_max: u32,
    /// Largest value.
    #[serde(default = "default_value_bytes_max")]
    pub value_bytes_max: u32,
    /// Client sessions remembered for exactly-once writes.
    #[serde(default = "default_session_slot_count")]
    pub session_slot_count: u32,
    /// Largest reply to a write (a stream entry id needs up to 41 bytes);
    /// every member must agree.
    #[serde(default = "default_reply_bytes_max")]
    pub reply_bytes_max: u32,
    /// RESP password (Redis's `requirepass`): when set, a connection must
    /// `AUTH` before any other command. Required to serve RESP on an
    /// address other than loopback (Redis's protected mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp_password: Option<String>,
    /// Shared secret of the verbs fabric's connection exchange (`fabric =
    /// "verbs"`): every exchange message carries an HMAC-SHA256 under it,
    /// so only members that know it can connect QPs or learn rkeys. At
    /// least 16 bytes, the same on every member; required when a member's
    /// `exchange_addr` is not a loopback address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange_secret: Option<String>,
    /// Close a RESP connection idle for this long (seconds; 0: never, as
    /// Redis's `timeout 0`).
    #[serde(default)]
    pub resp_idle_timeout_s: u64,
    /// Close a RESP connection whose unsent replies exceed this many bytes
    /// (Redis's `client-output-buffer-limit` hard limit).
    #[serde(default = "default_resp_output_bytes_max")]
    pub resp_output_bytes_max: u64,
    /// Shared-memory fabric: a peer stopped (SIGSTOP, a debugger) in the
    /// middle of a WRITE into our log keeps our revoke of its access
    /// unconfirmed, and we may not vote until no copy of it can land
    /// (DARE §3.2.1). After this many milliseconds of that, with the peer
    /// still stopped, it is fenced: SIGKILLed through a pidfd (its
    /// supervisor restarts it; it rejoins by recovery). 0: never fence,
    /// the member then waits for the peer to be continued.
    #[serde(default = "default_fence_stopped_writer_ms")]
    pub fence_stopped_writer_ms: u64,
    /// Shared-memory client slots per replica.
    #[serde(default = "default_client_slot_count")]
    pub client_slot_count: u32,
    /// Seed of the protocol's PRNG (timeouts); each member mixes in its id.
    #[serde(default)]
    pub seed: u64,
    /// Members of the group's first configuration (DARE §3.4): ids 0 to
    /// `initial_members - 1`. The others are spares: their processes run
    /// outside the group until `verbatim member add <id>`. Default: every
    /// listed member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_members: Option<u8>,
}

/// `[timing]`: protocol periods in microseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimingSection {
    /// Leader heartbeat period.
    pub heartbeat_period_us: u64,
    /// Initial failure-detector period Δ.
    pub fd_check_period_us: u64,
    /// Upper bound of Δ.
    pub fd_check_period_max_us: u64,
    /// Δ growth per outdated heartbeat.
    pub fd_check_period_step_us: u64,
    /// Election timeout range.
    pub election_timeout_min_us: u64,
    /// Election timeout range.
    pub election_timeout_max_us: u64,
    /// A leader without a majority for this long steps down.
    pub leader_quorum_timeout_us: u64,
    /// Apply pointer publication period.
    pub apply_publish_period_us: u64,
    /// Pruning period.
    pub prune_period_us: u64,
    /// Members silent for this long are left out of pruning.
    pub prune_grace_us: u64,
    /// A member silent this long is removed from the group and added
    /// back when it returns (DARE's zombies). 0: never (the default): the
    /// log is pruned past a silent member anyway, and a member removed
    /// while away cannot help elect a leader until it is added back.
    pub zombie_remove_us: u64,
    /// Wait before re-establishing a failed channel.
    pub reconnect_backoff_us: u64,
    /// Heartbeat-counter engine: the counter is bumped at least this often
    /// (and on every loop iteration).
    pub counter_increment_period_us: u64,
    /// Heartbeat-counter engine: wait between two READs of a peer's counter;
    /// the same value twice reports it stalled.
    pub counter_read_gap_us: u64,
    /// A recovering replica parks this long between two pieces of its
    /// restore (`cluster.snapshot_restore_step_bytes`), so that it takes a
    /// share of a core it shares (with a leader) rather than all of it.
    /// 0: back to back.
    pub snapshot_restore_pause_us: u64,
}

impl Default for TimingSection {
    fn default() -> Self {
        // Heartbeats are the fallback detector (a stopped process); a dead
        // one is noticed at once through its pidfd.
        // These suit a shared, untuned machine where a process may be
        // descheduled for milliseconds (a 2-core box running three replicas
        // and a client). On isolated cores with busy polling (see
        // `verbatim-kernel-cfg plan`) they can be ten times smaller.
        TimingSection {
            heartbeat_period_us: 500,
            fd_check_period_us: 5_000,
            fd_check_period_max_us: 100_000,
            fd_check_period_step_us: 1_000,
            election_timeout_min_us: 1_000,
            election_timeout_max_us: 2_000,
            leader_quorum_timeout_us: 20_000,
            apply_publish_period_us: 500,
            prune_period_us: 1_000,
            prune_grace_us: 2_000_000,
            zombie_remove_us: 0,
            reconnect_backoff_us: 1_000,
            // A parked follower wakes for every bump, on the core the
            // leader spins on: each wake is a context switch in the
            // leader's way (at 1 ms, SET p99 rose from ~3 to ~40 µs in
            // `verbatim-bench latency`). The read gap leaves a member
            // 35 ms of lateness before it is reported stalled (with a
            // 20 ms gap, replicas in the emulated Soft-RoCE VM were
            // reported stalled about once a second while they ran).
            counter_increment_period_us: 5_000,
            counter_read_gap_us: 40_000,
            snapshot_restore_pause_us: 200,
        }
    }
}

/// `[views]`: uKharon's views and leases (issue 14). Off unless
/// `lease_us` is set: then the coordinators decide a view per leader, the
/// leader answers reads under its lease without a round of term checks,
/// and a new leader commits once its view is active.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ViewsSection {
    /// Lease length δ in microseconds; 0 turns views off.
    pub lease_us: u64,
    /// Bound on any replica's clock rate error (parts per million).
    pub drift_ppm: u32,
    /// Renew when less than this is left (0: half the lease).
    pub renew_margin_us: u64,
    /// Members `0 .. coordinators` decide views.
    pub coordinators: u8,
    /// Coordinator slot words: a ring that views reuse lap after lap (at
    /// least 4; a replica this many views behind skips to the newest).
    pub slot_count: u32,
    /// A replica that holds no lease learns the newest view this often.
    pub learn_period_us: u64,
}

impl Default for ViewsSection {
    fn default() -> Self {
        ViewsSection {
            lease_us: 0,
            drift_ppm: 1_000,
            renew_margin_us: 0,
            coordinators: 3,
            slot_count: 4096,
            learn_period_us: 10_000,
        }
    }
}

/// `[backup]`: the key-value store of `cluster.mode = "backup-memory"`
/// (MacR), which lives in registered memory: its sizes are fixed when the
/// replica starts (every member must agree).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackupSection {
    /// Index entries (64 bytes each): the most keys the store holds.
    pub entry_count: u32,
    /// Bytes of a slab of the item heap: a power of two of at least 4096,
    /// at least the largest item (32 bytes, the largest key and value).
    pub slab_bytes: u32,
    /// Slabs in the heap (heap bytes = slab_count × slab_bytes).
    pub slab_count: u32,
    /// A write whose allocator changes touch more separate structures
    /// than this (a slab carved: 3) is forwarded to the backups' CPUs for
    /// replay instead of WRITEn (MacR's allocator-cooperative
    /// replication).
    pub forward_threshold: u8,
    /// Bytes of one WRITE when a member's copy is filled by bulk copy.
    pub sync_chunk_bytes: u32,
}

impl Default for BackupSection {
    fn default() -> Self {
        BackupSection {
            entry_count: 65_536,
            slab_bytes: 1 << 20,
            slab_count: 64,
            forward_threshold: 2,
            sync_chunk_bytes: 1 << 20,
        }
    }
}

/// `[multicast]`: Derecho's atomic multicast among the first
/// `initial_members` replicas (RESP `PUBLISH`/`SUBSCRIBE`,
/// `verbatim mcast`): every replica delivers every message, in one total
/// order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MulticastSection {
    /// Slots per sender ring; 0 turns multicast off. A sender waits for a
    /// free slot once this many of its messages are not yet delivered
    /// everywhere.
    pub window: u32,
    /// Largest message (channel name and payload together), at most 1024
    /// bytes: the small-message protocol.
    pub payload_bytes_max: u32,
    /// Derecho's persistent mode: every replica appends what it receives
    /// to its multicast log (`<log_dir>/mcast-<cluster>-<id>.log`) and syncs it
    /// before counting it, so a message is delivered only once it is on
    /// every member's disk.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub persistent: bool,
    /// Where the multicast logs are (a directory on a disk; needed with
    /// `persistent`): `<log_dir>/mcast-<cluster>-<id>.log`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_dir: Option<PathBuf>,
    /// Large messages (Derecho's RDMC, a binomial pipeline): message
    /// slots per sender; 0 (the default) turns them off. A message longer
    /// than `payload_bytes_max` then travels on RDMC and takes its place
    /// in the same total order. Not with `persistent`.
    #[serde(skip_serializing_if = "is_zero")]
    pub large_slots: u32,
    /// Large messages: bytes of a chunk (a multiple of 64).
    pub large_chunk_bytes: u32,
    /// Large messages: the longest (channel name and payload together).
    /// Every replica's memory holds `members × large_slots` of them.
    pub large_message_bytes_max: u64,
    /// `[[multicast.subgroups]]`: Derecho's subgroups. Each is a RESP
    /// channel of its own name whose messages move among its members only,
    /// in one total order of its own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subgroups: Vec<SubgroupSection>,
    /// `[[multicast.shards]]`: regular shardings. Each cuts its members
    /// into `shard_count` disjoint shards of `members_per_shard`, each a
    /// subgroup named `<name>.<shard>` (`kv.0`, `kv.1`, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardingSection>,
}

/// `[[multicast.subgroups]]`: one subgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubgroupSection {
    /// Its name, the RESP channel its messages are published on.
    pub name: String,
    /// Its members (ids among the initial members).
    pub members: Vec<u8>,
}

/// `[[multicast.shards]]`: a regular sharding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardingSection {
    /// The sharding's name; shard `k` is the subgroup (and channel)
    /// `<name>.<k>`.
    pub name: String,
    /// Shards.
    pub shard_count: u8,
    /// Members of each shard.
    pub members_per_shard: u8,
    /// The members cut into shards, in this order (shard 0 takes the
    /// first `members_per_shard`); by default the initial members in id
    /// order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<u8>>,
}

/// One subgroup as the replicas run it: its name (a RESP channel), its
/// place in the core's configuration and its members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subgroup {
    /// Its name, the channel its messages are published on.
    pub name: String,
    /// Its place among the subgroups (the core's
    /// `Config::mcast_subgroups` index).
    pub index: usize,
    /// Its members, a bit per member id.
    pub members: u8,
}

impl Subgroup {
    /// The subgroup of `subgroups` whose channel is `channel`, if any.
    pub fn of_channel<'a>(subgroups: &'a [Subgroup], channel: &[u8]) -> Option<&'a Subgroup> {
        subgroups.iter().find(|g| g.name.as_bytes() == channel)
    }

    /// Whether `id` is a member.
    pub fn has(&self, id: MemberId) -> bool {
        id.index() < 8 && self.members & (1 << id.0) != 0
    }

    /// Its members' ids, in order.
    pub fn member_ids(&self) -> Vec<u8> {
        (0..8).filter(|i| self.members & (1 << i) != 0).collect()
    }
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl MulticastSection {
    /// The longest publication (channel name and payload together): a
    /// slot's, or with large messages on, the largest of those.
    pub fn publish_bytes_max(&self) -> u64 {
        let small = u64::from(self.payload_bytes_max);
        if self.large_slots > 0 {
            self.large_message_bytes_max.max(small)
        } else {
            small
        }
    }
}

impl Default for MulticastSection {
    fn default() -> Self {
        MulticastSection {
            window: 0,
            payload_bytes_max: 512,
            persistent: false,
            log_dir: None,
            large_slots: 0,
            large_chunk_bytes: 64 * 1024,
            large_message_bytes_max: 1 << 20,
            subgroups: Vec::new(),
            shards: Vec::new(),
        }
    }
}

/// `[members.verbs]`: how to reach a member over RDMA.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerbsMember {
    /// RDMA device name (`rxe0`, `mlx5_0`).
    pub device: String,
    /// Port number (1-based).
    #[serde(default = "default_port")]
    pub port: u8,
    /// GID index (RoCEv2 needs a GID; InfiniBand uses the LID).
    #[serde(default)]
    pub gid_index: u8,
    /// TCP address for exchanging queue-pair information.
    pub exchange_addr: String,
    /// RC local ACK timeout exponent (4.096 µs × 2^n per try; 0 to 31).
    #[serde(default = "default_qp_timeout")]
    pub qp_timeout: u8,
    /// RC retries before a dead peer completes with retry-exceeded (0 to 7).
    #[serde(default = "default_qp_retry_count")]
    pub qp_retry_count: u8,
}

fn default_port() -> u8 {
    1
}
fn default_qp_timeout() -> u8 {
    // ≈ 4.2 ms per try: with 3 retries a dead peer surfaces after about
    // 17 ms at worst (about 30–40 ms seen under Soft-RoCE).
    10
}
fn default_qp_retry_count() -> u8 {
    3
}

/// `[[members]]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberSection {
    /// Member id: 0, 1, ... in order.
    pub id: u8,
    /// Core to pin the poll loop to.
    #[serde(default)]
    pub core: Option<usize>,
    /// Redis-protocol (RESP2) listener.
    #[serde(default)]
    pub resp_addr: Option<String>,
    /// Status socket (default `<run_dir>/replica-<id>.sock`).
    #[serde(default)]
    pub status_socket: Option<PathBuf>,
    /// Prometheus text endpoint (`GET /metrics` over HTTP), e.g.
    /// `127.0.0.1:9100`; none by default. Read-only figures (those of the
    /// status socket), so it may listen beyond loopback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_addr: Option<String>,
    /// RDMA settings (fabric = "verbs").
    #[serde(default)]
    pub verbs: Option<VerbsMember>,
}

/// The whole manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// `[cluster]`.
    pub cluster: ClusterSection,
    /// `[timing]`.
    #[serde(default)]
    pub timing: TimingSection,
    /// `[views]`.
    #[serde(default)]
    pub views: ViewsSection,
    /// `[multicast]`.
    #[serde(default)]
    pub multicast: MulticastSection,
    /// `[backup]` (mode backup-memory).
    #[serde(default)]
    pub backup: BackupSection,
    /// `[[members]]`.
    pub members: Vec<MemberSection>,
}

/// Sets `path = value` in a TOML table (`--set cluster.poll=busy`,
/// `--set members.1.core=3`). The value is parsed as TOML if it can be
/// (numbers, booleans, quoted strings), otherwise taken as a string.
pub fn apply_override(root: &mut toml::Value, assignment: &str) -> Result<(), ConfigError> {
    let (path, raw) = assignment.split_once('=').ok_or_else(|| {
        ConfigError::new(
            assignment,
            "an override is written key=value, e.g. cluster.poll=busy",
        )
    })?;
    let path = path.trim();
    if path.is_empty() {
        return Err(ConfigError::new(
            "--set",
            format!(
                "`{assignment}` has no key before '='; write key=value, e.g. cluster.poll=busy"
            ),
        ));
    }
    let value: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {}", raw.trim())) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.trim().to_string())),
        Err(_) => toml::Value::String(raw.trim().to_string()),
    };
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(ConfigError::new(path, "empty path segment in override"));
    }
    let mut cur = root;
    for (k, part) in parts.iter().enumerate() {
        let last = k + 1 == parts.len();
        match cur {
            toml::Value::Table(t) => {
                if last {
                    t.insert((*part).to_string(), value);
                    return Ok(());
                }
                cur = t
                    .entry((*part).to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            }
            toml::Value::Array(a) => {
                let i: usize = part.parse().map_err(|_| {
                    ConfigError::new(path, format!("`{part}` must be an index into the array"))
                })?;
                let len = a.len();
                let slot = a.get_mut(i).ok_or_else(|| {
                    ConfigError::new(
                        path,
                        format!("index {i} is out of range (there are {len} entries)"),
                    )
                })?;
                if last {
                    *slot = value;
                    return Ok(());
                }
                cur = slot;
            }
            _ => {
                return Err(ConfigError::new(
                    path,
                    format!("`{part}` is inside a value, not a table"),
                ))
            }
        }
    }
    Ok(())
}

impl Manifest {
    /// Parses manifest text, applies overrides, validates.
    pub fn parse(text: &str, overrides: &[String]) -> Result<Manifest, ConfigError> {
        let mut root: toml::Value = toml::from_str(text).map_err(|e| {
            ConfigError::new("manifest", format!("not valid TOML: {}", e.message()))
        })?;
        for o in overrides {
            apply_override(&mut root, o)?;
        }
        let m: Manifest = root.try_into().map_err(|e: toml::de::Error| {
            ConfigError::new("manifest", e.message().trim().to_string())
        })?;
        m.validate()?;
        Ok(m)
    }

    /// Reads a manifest file.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Manifest, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                path.display().to_string(),
                format!("cannot read the manifest: {e}"),
            )
        })?;
        Manifest::parse(&text, overrides)
    }

    /// A manifest for `n` local replicas on the shared-memory fabric,
    /// with RESP ports from `base_port` (used by `verbatim up` and the
    /// demo).
    pub fn local(name: &str, n: u8, base_port: u16) -> Manifest {
        Manifest {
            cluster: ClusterSection {
                name: name.to_string(),
                fabric: FabricKind::Shm,
                shm_dir: None,
                run_dir: None,
                poll: PollMode::Adaptive,
                spin_us: default_spin_us(),
                log_ring_bytes: default_log_ring_bytes(),
                snapshot_bytes_max: default_snapshot_bytes_max(),
                snapshot_restore_step_bytes: default_snapshot_restore_step_bytes(),
                recovery_log_hold_percent: default_recovery_log_hold_percent(),
                recovery_releases_max: default_recovery_releases_max(),
                mode: ReplicationMode::Log,
                key_bytes_max: default_key_bytes_max(),
                value_bytes_max: default_value_bytes_max(),
                session_slot_count: default_session_slot_count(),
                reply_bytes_max: default_reply_bytes_max(),
                resp_password: None,
                exchange_secret: None,
                resp_idle_timeout_s: 0,
                fence_stopped_writer_ms: default_fence_stopped_writer_ms(),
                resp_output_bytes_max: default_resp_output_bytes_max(),
                client_slot_count: default_client_slot_count(),
                seed: 0,
                initial_members: None,
            },
            timing: TimingSection::default(),
            views: ViewsSection::default(),
            multicast: MulticastSection::default(),
            backup: BackupSection::default(),
            members: (0..n)
                .map(|i| MemberSection {
                    id: i,
                    core: None,
                    resp_addr: Some(format!("127.0.0.1:{}", base_port + u16::from(i))),
                    status_socket: None,
                    metrics_addr: None,
                    verbs: None,
                })
                .collect(),
        }
    }

    /// As TOML text.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a manifest serialises")
    }

    /// Number of members.
    pub fn member_count(&self) -> u8 {
        self.members.len() as u8
    }

    /// The limits of keys and values.
    pub fn kv_limits(&self) -> KvLimits {
        KvLimits {
            key_bytes_max: self.cluster.key_bytes_max,
            value_bytes_max: self.cluster.value_bytes_max,
        }
    }

    /// Bytes of one shared-memory client slot: a request area and a reply
    /// area each large enough for the largest operation or value, with
    /// the slot's words (`verbatim_client::slots`).
    pub fn client_slot_bytes(&self) -> u32 {
        let area = u64::from(self.kv_limits().encoded_bytes_max()).div_ceil(64) * 64 + 64;
        crate::slots::SlotGeometry::slot_bytes_for_area(area) as u32
    }

    /// Where segments live.
    pub fn shm_dir(&self) -> PathBuf {
        self.cluster
            .shm_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/dev/shm"))
    }

    /// Where sockets live (one rule for every tool: `verbatim_status::paths`).
    pub fn run_dir(&self) -> PathBuf {
        verbatim_status::paths::run_dir(&self.cluster.name, self.cluster.run_dir.as_deref())
    }

    /// Status socket of a member.
    pub fn status_socket(&self, id: u8) -> PathBuf {
        self.members
            .get(usize::from(id))
            .and_then(|m| m.status_socket.clone())
            .unwrap_or_else(|| verbatim_status::paths::default_status_socket(&self.run_dir(), id))
    }

    /// Segment path of a member.
    pub fn segment_path(&self, id: u8) -> PathBuf {
        crate::files::segment_path(&self.shm_dir(), &self.cluster.name, id)
    }

    /// Client-slot segment path of a member (the only file of a replica a
    /// client maps).
    pub fn slots_path(&self, id: u8) -> PathBuf {
        crate::slots::slots_path(&self.segment_path(id))
    }

    /// The client slots' geometry.
    pub fn slot_geometry(&self) -> crate::slots::SlotGeometry {
        crate::slots::SlotGeometry::new(
            u64::from(self.cluster.client_slot_count),
            u64::from(self.client_slot_bytes()),
        )
        .expect("a validated manifest has a valid slot geometry")
    }

    /// The core configuration of member `id`. Durations saturate, so an
    /// absurd value reaches the core's validation (which names the field)
    /// instead of overflowing.
    pub fn core_config(&self, id: u8) -> Config {
        let c = &self.cluster;
        let t = &self.timing;
        let mut cfg = Config::new(self.member_count(), MemberId(id));
        cfg.log_ring_bytes = c.log_ring_bytes;
        cfg.snapshot_bytes_max = c.snapshot_bytes_max;
        cfg.snapshot_restore_step_bytes = c.snapshot_restore_step_bytes;
        cfg.recovery_log_hold_percent = c.recovery_log_hold_percent;
        cfg.recovery_releases_max = c.recovery_releases_max;
        cfg.mode = c.mode.into();
        cfg.snapshot_restore_pause_ns = us_to_ns(t.snapshot_restore_pause_us);
        cfg.entry_payload_bytes_max = self.kv_limits().encoded_bytes_max();
        cfg.session_slot_count = c.session_slot_count;
        cfg.reply_bytes_max = c.reply_bytes_max;
        cfg.heartbeat_period_ns = us_to_ns(t.heartbeat_period_us);
        cfg.fd_check_period_ns = us_to_ns(t.fd_check_period_us);
        cfg.fd_check_period_max_ns = us_to_ns(t.fd_check_period_max_us);
        cfg.fd_check_period_step_ns = us_to_ns(t.fd_check_period_step_us);
        cfg.election_timeout_min_ns = us_to_ns(t.election_timeout_min_us);
        cfg.election_timeout_max_ns = us_to_ns(t.election_timeout_max_us);
        cfg.leader_quorum_timeout_ns = us_to_ns(t.leader_quorum_timeout_us);
        cfg.apply_publish_period_ns = us_to_ns(t.apply_publish_period_us);
        cfg.prune_period_ns = us_to_ns(t.prune_period_us);
        cfg.prune_grace_ns = us_to_ns(t.prune_grace_us);
        cfg.zombie_remove_ns = us_to_ns(t.zombie_remove_us);
        cfg.reconnect_backoff_ns = us_to_ns(t.reconnect_backoff_us);
        cfg.counter_increment_period_ns = us_to_ns(t.counter_increment_period_us);
        cfg.counter_read_gap_ns = us_to_ns(t.counter_read_gap_us);
        let v = &self.views;
        cfg.lease_ns = us_to_ns(v.lease_us);
        cfg.lease_drift_ppm = v.drift_ppm;
        cfg.lease_renew_margin_ns = us_to_ns(v.renew_margin_us);
        cfg.coordinator_count = v.coordinators.min(self.member_count());
        cfg.view_slot_count = v.slot_count;
        cfg.view_learn_period_ns = us_to_ns(v.learn_period_us);
        cfg.seed = c.seed;
        cfg.initial_members = c.initial_members.unwrap_or(self.member_count());
        cfg.mcast_window = self.multicast.window;
        cfg.mcast_payload_bytes_max = self.multicast.payload_bytes_max;
        cfg.mcast_persistent = self.multicast.persistent;
        cfg.rdmc_slots = self.multicast.large_slots;
        cfg.rdmc_chunk_bytes = self.multicast.large_chunk_bytes;
        cfg.rdmc_message_bytes_max = self.multicast.large_message_bytes_max;
        let b = &self.backup;
        cfg.backup_entry_count = b.entry_count;
        cfg.backup_slab_bytes = b.slab_bytes;
        cfg.backup_slab_count = b.slab_count;
        cfg.backup_forward_threshold = b.forward_threshold;
        cfg.backup_sync_chunk_bytes = b.sync_chunk_bytes;
        cfg.backup_key_bytes_max = c.key_bytes_max;
        cfg.backup_value_bytes_max = c.value_bytes_max;
        if let Ok(subgroups) = self.subgroups() {
            for g in subgroups {
                if let Some(place) = cfg.mcast_subgroups.get_mut(g.index) {
                    *place = g.members;
                }
            }
        }
        cfg
    }

    /// The subgroups the manifest declares (`[[multicast.subgroups]]`,
    /// then each shard of each `[[multicast.shards]]`), checked: names
    /// unique and usable as channels, members among the initial members,
    /// at most [`verbatim_core::subgroup::SUBGROUPS_MAX`].
    pub fn subgroups(&self) -> Result<Vec<Subgroup>, ConfigError> {
        let initial = self.cluster.initial_members.unwrap_or(self.member_count());
        let mc = &self.multicast;
        let mut out: Vec<Subgroup> = Vec::new();
        let mask_of = |field: String, members: &[u8]| -> Result<u8, ConfigError> {
            let mut mask = 0u8;
            for &m in members {
                if m >= initial {
                    return Err(ConfigError::new(
                        field,
                        format!("member {m} is not an initial member (ids 0 to {}): a subgroup's members are the group's", initial - 1),
                    ));
                }
                if mask & (1 << m) != 0 {
                    return Err(ConfigError::new(
                        field,
                        format!("member {m} is listed twice"),
                    ));
                }
                mask |= 1 << m;
            }
            Ok(mask)
        };
        let push = |out: &mut Vec<Subgroup>, field: String, name: String, members: u8| {
            if name.is_empty()
                || name
                    .bytes()
                    .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
            {
                return Err(ConfigError::new(
                    field,
                    format!("`{name}` is not a usable channel name: give a name without spaces"),
                ));
            }
            if out.iter().any(|g| g.name == name) {
                return Err(ConfigError::new(
                    field,
                    format!("`{name}` names two subgroups"),
                ));
            }
            if members == 0 {
                return Err(ConfigError::new(field, "has no members: list at least one"));
            }
            out.push(Subgroup {
                index: out.len(),
                name,
                members,
            });
            Ok(())
        };
        for (i, g) in mc.subgroups.iter().enumerate() {
            let mask = mask_of(format!("multicast.subgroups.{i}.members"), &g.members)?;
            push(
                &mut out,
                format!("multicast.subgroups.{i}.name"),
                g.name.clone(),
                mask,
            )?;
        }
        for (i, sh) in mc.shards.iter().enumerate() {
            let field = format!("multicast.shards.{i}");
            let members: Vec<u8> = sh.members.clone().unwrap_or_else(|| (0..initial).collect());
            mask_of(format!("{field}.members"), &members)?;
            let per = usize::from(sh.members_per_shard);
            let count = usize::from(sh.shard_count);
            if per == 0 || count == 0 {
                return Err(ConfigError::new(
                    field,
                    "shard_count and members_per_shard must be at least 1",
                ));
            }
            if per * count > members.len() {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "{count} shards of {per} need {} members; it has {}: lower shard_count or members_per_shard, or list more members",
                        per * count,
                        members.len()
                    ),
                ));
            }
            for k in 0..count {
                let mask = mask_of(format!("{field}.members"), &members[k * per..(k + 1) * per])?;
                push(
                    &mut out,
                    format!("{field}.name"),
                    format!("{}.{k}", sh.name),
                    mask,
                )?;
            }
        }
        if out.len() > verbatim_core::subgroup::SUBGROUPS_MAX {
            return Err(ConfigError::new(
                "multicast.subgroups",
                format!(
                    "declares {} subgroups and shards; at most {} are supported",
                    out.len(),
                    verbatim_core::subgroup::SUBGROUPS_MAX
                ),
            ));
        }
        if !out.is_empty() && mc.window == 0 {
            return Err(ConfigError::new(
                "multicast.subgroups",
                "need the multicast on: set multicast.window (e.g. 64)",
            ));
        }
        if !out.is_empty() && mc.persistent {
            return Err(ConfigError::new(
                "multicast.subgroups",
                "run in the volatile mode only for now: remove multicast.persistent or the subgroups",
            ));
        }
        Ok(out)
    }

    /// The subgroup whose channel is `channel`, if any.
    pub fn subgroup_of_channel(&self, channel: &[u8]) -> Option<Subgroup> {
        Subgroup::of_channel(&self.subgroups().ok()?, channel).cloned()
    }

    /// Checks everything; the error names the manifest field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cluster.resp_password.as_deref() == Some("") {
            return Err(ConfigError::new(
                "cluster.resp_password",
                "is empty; remove the line (no authentication) or set a password",
            ));
        }
        if let Some(secret) = &self.cluster.exchange_secret {
            if secret.len() < EXCHANGE_SECRET_BYTES_MIN {
                return Err(ConfigError::new(
                    "cluster.exchange_secret",
                    format!(
                        "is {} bytes; use at least {EXCHANGE_SECRET_BYTES_MIN} random bytes, the same on \
                         every member (e.g. the output of `openssl rand -hex 32`)",
                        secret.len()
                    ),
                ));
            }
        }
        if self.cluster.resp_output_bytes_max < 1 << 16 {
            return Err(ConfigError::new(
                "cluster.resp_output_bytes_max",
                format!(
                    "is {}; allow at least 65536 bytes of unsent replies per connection",
                    self.cluster.resp_output_bytes_max
                ),
            ));
        }
        let c = &self.cluster;
        if c.name.is_empty()
            || c.name.len() > 32
            || !c
                .name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
        {
            return Err(ConfigError::new(
                "cluster.name",
                format!(
                    "`{}`: use 1 to 32 letters, digits, '-' or '_' (it names files and sockets)",
                    c.name
                ),
            ));
        }
        let n = self.members.len();
        if n == 0 || n > MAX_MEMBERS {
            return Err(ConfigError::new(
                "members",
                format!("{n} members: list between 1 and {MAX_MEMBERS} [[members]] (3 or 5 tolerate 1 or 2 failures)"),
            ));
        }
        if let Some(initial) = c.initial_members {
            if initial == 0 || usize::from(initial) > n {
                return Err(ConfigError::new(
                    "cluster.initial_members",
                    format!(
                        "is {initial}; use 1 to {n} (the members listed): the first configuration \
                         holds ids 0 to initial_members - 1, the rest are spares to add"
                    ),
                ));
            }
        }
        for (i, m) in self.members.iter().enumerate() {
            if usize::from(m.id) != i {
                return Err(ConfigError::new(
                    format!("members[{i}].id"),
                    format!(
                        "is {}; ids must be 0, 1, 2, ... in the order the members are listed",
                        m.id
                    ),
                ));
            }
            if let Some(addr) = &m.resp_addr {
                let Ok(parsed) = addr.parse::<std::net::SocketAddr>() else {
                    return Err(ConfigError::new(
                        format!("members[{i}].resp_addr"),
                        format!("`{addr}` is not an address like 127.0.0.1:7000"),
                    ));
                };
                // Redis's protected mode: no password, no network.
                if !parsed.ip().is_loopback() && self.cluster.resp_password.is_none() {
                    return Err(ConfigError::new(
                        format!("members[{i}].resp_addr"),
                        format!(
                            "`{addr}` is reachable from other hosts but cluster.resp_password is not set; \
                             set a password (clients then AUTH) or bind 127.0.0.1"
                        ),
                    ));
                }
            }
            if let Some(addr) = &m.metrics_addr {
                if addr.parse::<std::net::SocketAddr>().is_err() {
                    return Err(ConfigError::new(
                        format!("members[{i}].metrics_addr"),
                        format!("`{addr}` is not an address like 127.0.0.1:9100"),
                    ));
                }
            }
            if let Some(core) = m.core {
                let cores = core_affinity::get_core_ids().map(|v| v.len()).unwrap_or(0);
                if cores > 0 && core >= cores {
                    return Err(ConfigError::new(
                        format!("members[{i}].core"),
                        format!("core {core} does not exist here (cores 0-{}); pick one of them or remove it", cores - 1),
                    ));
                }
            }
            if let Some(v) = &m.verbs {
                // The exchange hands out QP numbers and rkeys (remote
                // write access to the log): like protected mode for RESP,
                // no secret, no network.
                if c.fabric == FabricKind::Verbs
                    && c.exchange_secret.is_none()
                    && !is_loopback_addr(&v.exchange_addr)
                {
                    return Err(ConfigError::new(
                        format!("members[{i}].verbs.exchange_addr"),
                        format!(
                            "`{}` is reachable from other hosts but cluster.exchange_secret is not set; \
                             add exchange_secret = \"...\" to [cluster] ({EXCHANGE_SECRET_BYTES_MIN} bytes or more, \
                             the same on every member, e.g. from `openssl rand -hex 32`) or bind 127.0.0.1",
                            v.exchange_addr
                        ),
                    ));
                }
                if v.qp_timeout > 31 {
                    return Err(ConfigError::new(
                        format!("members[{i}].verbs.qp_timeout"),
                        "set it between 0 and 31",
                    ));
                }
                if v.qp_retry_count > 7 {
                    return Err(ConfigError::new(
                        format!("members[{i}].verbs.qp_retry_count"),
                        "set it between 0 and 7",
                    ));
                }
            }
            if c.fabric == FabricKind::Verbs && m.verbs.is_none() {
                return Err(ConfigError::new(
                    format!("members[{i}].verbs"),
                    "fabric = \"verbs\" needs a [members.verbs] table (device, exchange_addr)",
                ));
            }
        }
        if !(1..=65535).contains(&c.key_bytes_max) {
            return Err(ConfigError::new(
                "cluster.key_bytes_max",
                "set it between 1 and 65535",
            ));
        }
        if c.value_bytes_max == 0 || c.value_bytes_max > 1 << 20 {
            return Err(ConfigError::new(
                "cluster.value_bytes_max",
                "set it between 1 and 1048576 (1 MiB)",
            ));
        }
        if u64::from(c.client_slot_count) > crate::slots::CLIENT_SLOTS_MAX {
            return Err(ConfigError::new(
                "cluster.client_slot_count",
                format!("at most {}", crate::slots::CLIENT_SLOTS_MAX),
            ));
        }
        if c.spin_us > 1_000_000 {
            return Err(ConfigError::new(
                "cluster.spin_us",
                "spin at most 1000000 µs before sleeping",
            ));
        }
        if self.multicast.persistent && self.multicast.window == 0 {
            return Err(ConfigError::new(
                "multicast.persistent",
                "needs multicast on: set multicast.window (e.g. 64) or remove persistent",
            ));
        }
        if self.multicast.persistent && self.multicast.log_dir.is_none() {
            return Err(ConfigError::new(
                "multicast.log_dir",
                "is not set: the persistent mode writes each replica's multicast log there; set it to a directory on a disk (not /dev/shm)",
            ));
        }
        self.subgroups()?;
        for id in 0..n as u8 {
            self.core_config(id)
                .validate()
                .map_err(|e| self.map_core_error(e))?;
        }
        Ok(())
    }

    /// Translates a core configuration error into the manifest's terms.
    fn map_core_error(&self, e: CoreConfigError) -> ConfigError {
        let (field, reason) = match e {
            CoreConfigError::OutOfRange {
                field,
                value,
                min,
                max,
            } => (field, format!("is {value}; allowed {min} to {max}")),
            CoreConfigError::Inconsistent { field, reason } => (field, reason.to_string()),
        };
        let (manifest_field, unit_ns) = match field {
            "log_ring_bytes" => ("cluster.log_ring_bytes", false),
            "entry_payload_bytes_max" => ("cluster.value_bytes_max (and key_bytes_max)", false),
            "session_slot_count" => ("cluster.session_slot_count", false),
            "snapshot_bytes_max" => ("cluster.snapshot_bytes_max", false),
            "snapshot_restore_step_bytes" => ("cluster.snapshot_restore_step_bytes", false),
            "recovery_log_hold_percent" => ("cluster.recovery_log_hold_percent", false),
            "snapshot_restore_pause_ns" => ("timing.snapshot_restore_pause_us", true),
            "reply_bytes_max" => ("cluster.reply_bytes_max", false),
            "heartbeat_period_ns" => ("timing.heartbeat_period_us", true),
            "fd_check_period_ns" => ("timing.fd_check_period_us", true),
            "fd_check_period_max_ns" => ("timing.fd_check_period_max_us", true),
            "election_timeout_min_ns" => ("timing.election_timeout_min_us", true),
            "election_timeout_max_ns" => ("timing.election_timeout_max_us", true),
            "leader_quorum_timeout_ns" => ("timing.leader_quorum_timeout_us", true),
            "apply_publish_period_ns" => ("timing.apply_publish_period_us", true),
            "prune_period_ns" => ("timing.prune_period_us", true),
            "prune_grace_ns" => ("timing.prune_grace_us", true),
            "zombie_remove_ns" => ("timing.zombie_remove_us", true),
            "reconnect_backoff_ns" => ("timing.reconnect_backoff_us", true),
            "counter_increment_period_ns" => ("timing.counter_increment_period_us", true),
            "counter_read_gap_ns" => ("timing.counter_read_gap_us", true),
            "lease_ns" => ("views.lease_us", true),
            "lease_drift_ppm" => ("views.drift_ppm", false),
            "lease_renew_margin_ns" => ("views.renew_margin_us", true),
            "coordinator_count" => ("views.coordinators", false),
            "view_slot_count" => ("views.slot_count", false),
            "view_learn_period_ns" => ("views.learn_period_us", true),
            "mcast_window" => ("multicast.window", false),
            "mcast_payload_bytes_max" => ("multicast.payload_bytes_max", false),
            "rdmc_slots" => ("multicast.large_slots", false),
            "rdmc_chunk_bytes" => ("multicast.large_chunk_bytes", false),
            "rdmc_message_bytes_max" => ("multicast.large_message_bytes_max", false),
            "mcast_subgroups" => ("multicast.subgroups", false),
            "backup_entry_count" => ("backup.entry_count", false),
            "backup_slab_bytes" => ("backup.slab_bytes", false),
            "backup_slab_count" => ("backup.slab_count", false),
            "backup_key_bytes_max" => ("cluster.key_bytes_max", false),
            "backup_sync_chunk_bytes" => ("backup.sync_chunk_bytes", false),
            other => (other, false),
        };
        let reason = if unit_ns {
            format!("{reason} (the core counts nanoseconds; the manifest says microseconds)")
        } else {
            reason
        };
        ConfigError::new(manifest_field, reason)
    }
}

/// Shortest `cluster.exchange_secret` (bytes): 128 bits if random.
pub const EXCHANGE_SECRET_BYTES_MIN: usize = 16;

/// Whether an `exchange_addr` can be reached only from this host: a
/// loopback IP, or `localhost`. Any other name may resolve to a routable
/// address, so it counts as reachable from other hosts.
fn is_loopback_addr(addr: &str) -> bool {
    if let Ok(a) = addr.parse::<std::net::SocketAddr>() {
        return a.ip().is_loopback();
    }
    addr.rsplit_once(':')
        .is_some_and(|(host, _)| host.eq_ignore_ascii_case("localhost"))
}

/// Microseconds from the manifest to the core's nanoseconds, saturating.
fn us_to_ns(us: u64) -> u64 {
    us.saturating_mul(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[cluster]
name = "t"
[[members]]
id = 0
resp_addr = "127.0.0.1:7000"
[[members]]
id = 1
[[members]]
id = 2
"#;

    #[test]
    fn subgroups_and_shards_become_the_cores_subgroups() {
        let text = format!(
            "{BASE}\n[multicast]\nwindow = 8\n[[multicast.subgroups]]\nname = \"orders\"\nmembers = [0, 2]\n[[multicast.shards]]\nname = \"kv\"\nshard_count = 2\nmembers_per_shard = 1\nmembers = [2, 1]\n"
        );
        let m = Manifest::parse(&text, &[]).unwrap();
        let gs = m.subgroups().unwrap();
        let named: Vec<(&str, usize, u8)> = gs
            .iter()
            .map(|g| (g.name.as_str(), g.index, g.members))
            .collect();
        assert_eq!(
            named,
            [("orders", 0, 0b101), ("kv.0", 1, 0b100), ("kv.1", 2, 0b010)]
        );
        assert_eq!(
            m.core_config(1).mcast_subgroups[..4],
            [0b101, 0b100, 0b010, 0]
        );
        assert_eq!(m.subgroup_of_channel(b"kv.1").map(|g| g.index), Some(2));
        assert!(m.subgroup_of_channel(b"news").is_none());
        // The same from the command line.
        let m = Manifest::parse(
            BASE,
            &[
                "multicast.window=8".into(),
                r#"multicast.subgroups=[{name="a", members=[1, 2]}]"#.into(),
            ],
        )
        .unwrap();
        assert_eq!(m.core_config(0).mcast_subgroups[0], 0b110);
    }

    #[test]
    fn bad_subgroups_are_refused_naming_what_to_change() {
        let refused = |sets: &[&str]| {
            let mut v = vec!["multicast.window=8".to_string()];
            v.extend(sets.iter().map(|s| s.to_string()));
            Manifest::parse(BASE, &v).unwrap_err()
        };
        let e = refused(&[r#"multicast.subgroups=[{name="a", members=[1, 3]}]"#]);
        assert_eq!(e.field, "multicast.subgroups.0.members");
        assert!(e.message.contains("member 3"), "{e}");
        let e = refused(&[r#"multicast.subgroups=[{name="a", members=[1, 1]}]"#]);
        assert!(e.message.contains("twice"), "{e}");
        let e = refused(&[r#"multicast.subgroups=[{name="a b", members=[1]}]"#]);
        assert_eq!(e.field, "multicast.subgroups.0.name");
        let e =
            refused(&[r#"multicast.subgroups=[{name="a", members=[1]}, {name="a", members=[2]}]"#]);
        assert!(e.message.contains("two subgroups"), "{e}");
        let e = refused(&[r#"multicast.subgroups=[{name="a", members=[]}]"#]);
        assert!(e.message.contains("no members"), "{e}");
        let e = refused(&[r#"multicast.shards=[{name="s", shard_count=2, members_per_shard=2}]"#]);
        assert_eq!(e.field, "multicast.shards.0");
        assert!(e.message.contains("need 4 members"), "{e}");
        let e = refused(&[r#"multicast.shards=[{name="s", shard_count=7, members_per_shard=0}]"#]);
        assert!(e.message.contains("at least 1"), "{e}");
        let e = Manifest::parse(
            BASE,
            &[r#"multicast.subgroups=[{name="a", members=[1]}]"#.into()],
        )
        .unwrap_err();
        assert!(e.message.contains("multicast.window"), "{e}");
    }

    #[test]
    fn a_minimal_manifest_gets_defaults() {
        let m = Manifest::parse(BASE, &[]).unwrap();
        assert_eq!(m.member_count(), 3);
        assert_eq!(m.cluster.fabric, FabricKind::Shm);
        assert_eq!(m.cluster.poll, PollMode::Busy);
        assert!(m.run_dir().ends_with("verbatim-t"));
        assert_eq!(m.core_config(2).self_id, MemberId(2));
        assert!(m.core_config(0).validate().is_ok());
    }

    #[test]
    fn overrides_reach_sections_and_members() {
        let m = Manifest::parse(
            BASE,
            &[
                "cluster.poll=busy".into(),
                "members.1.resp_addr=127.0.0.1:7101".into(),
                "timing.heartbeat_period_us=300".into(),
            ],
        )
        .unwrap();
        assert_eq!(m.cluster.poll, PollMode::Busy);
        assert_eq!(m.members[1].resp_addr.as_deref(), Some("127.0.0.1:7101"));
        assert_eq!(m.core_config(0).heartbeat_period_ns, 300_000);
        let e = Manifest::parse(BASE, &["members.7.core=1".into()]).unwrap_err();
        assert!(e.message.contains("out of range"), "{e}");
        assert!(Manifest::parse(BASE, &["nonsense".into()]).is_err());
    }

    /// Found by the `manifest` fuzz target (input `3d a5 e9 3d 0a`): an
    /// override with no key gave an error that named no field.
    #[test]
    fn an_override_without_a_key_names_what_to_change() {
        let text = String::from_utf8_lossy(&[0x3d, 0xa5, 0xe9, 0x3d]).into_owned();
        for o in [text.as_str(), "=x", "=", " = 1", ".=2", "a..b=3", ""] {
            let e = Manifest::parse(BASE, &[o.to_string()]).unwrap_err();
            assert!(!e.field.is_empty(), "{o:?}: {e}");
        }
        let e = Manifest::parse(BASE, &["=x".into()]).unwrap_err();
        assert_eq!(e.field, "--set");
        assert!(e.message.contains("key=value"), "{e}");
    }

    #[test]
    fn the_persistent_multicast_needs_multicast_and_a_log_directory() {
        let e = Manifest::parse(BASE, &["multicast.persistent=true".into()]).unwrap_err();
        assert_eq!(e.field, "multicast.persistent");
        assert!(e.message.contains("multicast.window"), "{e}");
        let e = Manifest::parse(
            BASE,
            &[
                "multicast.persistent=true".into(),
                "multicast.window=8".into(),
            ],
        )
        .unwrap_err();
        assert_eq!(e.field, "multicast.log_dir");
        assert!(e.message.contains("directory on a disk"), "{e}");
        let m = Manifest::parse(
            BASE,
            &[
                "multicast.persistent=true".into(),
                "multicast.window=8".into(),
                "multicast.log_dir=/var/lib/verbatim".into(),
            ],
        )
        .unwrap();
        assert!(m.core_config(0).mcast_persistent);
    }

    /// Redis's protected mode: a RESP address other hosts can reach needs
    /// a password.
    #[test]
    fn a_metrics_address_must_parse() {
        let e = Manifest::parse(BASE, &["members.0.metrics_addr=\"metrics\"".into()]).unwrap_err();
        assert_eq!(e.field, "members[0].metrics_addr");
        let m = Manifest::parse(BASE, &["members.0.metrics_addr=\"0.0.0.0:9100\"".into()]).unwrap();
        assert_eq!(m.members[0].metrics_addr.as_deref(), Some("0.0.0.0:9100"));
    }

    #[test]
    fn a_public_resp_address_needs_a_password() {
        let e =
            Manifest::parse(BASE, &["members.0.resp_addr=\"0.0.0.0:7000\"".into()]).unwrap_err();
        assert_eq!(e.field, "members[0].resp_addr");
        assert!(e.message.contains("resp_password"), "{e}");
        let m = Manifest::parse(
            BASE,
            &[
                "members.0.resp_addr=\"0.0.0.0:7000\"".into(),
                "cluster.resp_password=\"pw\"".into(),
            ],
        )
        .unwrap();
        assert_eq!(m.cluster.resp_password.as_deref(), Some("pw"));
        let e = Manifest::parse(BASE, &["cluster.initial_members=0".into()]).unwrap_err();
        assert_eq!(e.field, "cluster.initial_members");
        let e = Manifest::parse(BASE, &["cluster.initial_members=9".into()]).unwrap_err();
        assert!(e.to_string().contains("spares"), "{e}");
        let m = Manifest::parse(BASE, &["cluster.initial_members=2".into()]).unwrap();
        assert_eq!(m.core_config(0).initial_members, 2);
        let m = Manifest::parse(BASE, &[]).unwrap();
        assert_eq!(m.core_config(0).initial_members, m.member_count());
        let e = Manifest::parse(BASE, &["cluster.resp_password=\"\"".into()]).unwrap_err();
        assert_eq!(e.field, "cluster.resp_password");
        let e = Manifest::parse(BASE, &["cluster.resp_output_bytes_max=10".into()]).unwrap_err();
        assert_eq!(e.field, "cluster.resp_output_bytes_max");
    }

    fn verbs_manifest(addr: &str) -> String {
        let mut text = String::from("[cluster]\nname = \"v\"\nfabric = \"verbs\"\n");
        for i in 0..3 {
            text.push_str(&format!(
                "[[members]]\nid = {i}\nverbs = {{ device = \"rxe0\", exchange_addr = \"{addr}:{}\" }}\n",
                7900 + i
            ));
        }
        text
    }

    /// The verbs exchange hands out rkeys: an exchange address other hosts
    /// can reach needs `cluster.exchange_secret`, of at least 16 bytes.
    #[test]
    fn a_public_exchange_address_needs_a_secret() {
        for loopback in ["127.0.0.1", "[::1]", "localhost"] {
            let m = Manifest::parse(&verbs_manifest(loopback), &[]).unwrap();
            assert_eq!(m.cluster.exchange_secret, None);
        }
        for public in ["10.0.0.1", "0.0.0.0", "node1.example"] {
            let e = Manifest::parse(&verbs_manifest(public), &[]).unwrap_err();
            assert_eq!(e.field, "members[0].verbs.exchange_addr", "{public}");
            assert!(e.message.contains("exchange_secret = "), "{e}");
            assert!(e.message.contains("openssl rand"), "{e}");
        }
        let secret = "cluster.exchange_secret=\"0123456789abcdef0123\"".to_string();
        let m =
            Manifest::parse(&verbs_manifest("10.0.0.1"), std::slice::from_ref(&secret)).unwrap();
        assert_eq!(
            m.cluster.exchange_secret.as_deref(),
            Some("0123456789abcdef0123")
        );
        // It survives the round trip through TOML (what `verbatim up`
        // writes for its replicas).
        assert_eq!(Manifest::parse(&m.to_toml(), &[]).unwrap(), m);
        for short in ["", "short", "0123456789abcde"] {
            let e = Manifest::parse(
                &verbs_manifest("10.0.0.1"),
                &[format!("cluster.exchange_secret=\"{short}\"")],
            )
            .unwrap_err();
            assert_eq!(e.field, "cluster.exchange_secret", "{short:?}");
            assert!(e.message.contains("at least 16"), "{e}");
            // The message never repeats the secret.
            assert!(short.is_empty() || !e.message.contains(short), "{e}");
        }
        // Exactly 16 bytes is enough; the shm fabric ignores the field.
        Manifest::parse(
            &verbs_manifest("10.0.0.1"),
            &["cluster.exchange_secret=\"0123456789abcdef\"".into()],
        )
        .unwrap();
        let m = Manifest::parse(BASE, std::slice::from_ref(&secret)).unwrap();
        assert_eq!(m.cluster.fabric, FabricKind::Shm);
    }

    #[test]
    fn errors_name_the_field_and_the_fix() {
        let e = Manifest::parse(BASE, &["cluster.name=\"a b\"".into()]).unwrap_err();
        assert_eq!(e.field, "cluster.name");
        let e = Manifest::parse(BASE, &["members.2.id=5".into()]).unwrap_err();
        assert_eq!(e.field, "members[2].id");
        let e = Manifest::parse(BASE, &["members.0.resp_addr=\"localhost\"".into()]).unwrap_err();
        assert_eq!(e.field, "members[0].resp_addr");
        let e = Manifest::parse(BASE, &["members.0.core=999".into()]).unwrap_err();
        assert_eq!(e.field, "members[0].core");
        assert!(e.message.contains("does not exist"), "{e}");
        let e = Manifest::parse(BASE, &["timing.fd_check_period_us=100".into()]).unwrap_err();
        assert_eq!(e.field, "timing.fd_check_period_us");
        // Too large to count in nanoseconds: an error, not an overflow.
        let huge = format!("timing.heartbeat_period_us={}", i64::MAX);
        let e = Manifest::parse(BASE, &[huge]).unwrap_err();
        assert_eq!(e.field, "timing.heartbeat_period_us");
        let e = Manifest::parse(BASE, &["timing.counter_read_gap_us=1500".into()]).unwrap_err();
        assert_eq!(e.field, "timing.counter_read_gap_us");
        assert!(e.message.contains("twice"), "{e}");
        let e = Manifest::parse(BASE, &["cluster.log_ring_bytes=1000".into()]).unwrap_err();
        assert_eq!(e.field, "cluster.log_ring_bytes");
        let e =
            Manifest::parse(BASE, &["cluster.snapshot_restore_step_bytes=8".into()]).unwrap_err();
        assert_eq!(e.field, "cluster.snapshot_restore_step_bytes");
        let e = Manifest::parse(BASE, &["cluster.recovery_log_hold_percent=0".into()]).unwrap_err();
        assert_eq!(e.field, "cluster.recovery_log_hold_percent");
        assert!(e.message.contains("1 to 100"), "{e}");
        let m = Manifest::parse(BASE, &["cluster.recovery_log_hold_percent=100".into()]).unwrap();
        assert_eq!(m.core_config(0).recovery_log_hold_percent, 100);
        let m = Manifest::parse(BASE, &["cluster.recovery_releases_max=3".into()]).unwrap();
        assert_eq!(m.core_config(0).recovery_releases_max, 3);
        // Primary-backup mode needs views, and says where to turn them on.
        let m = Manifest::parse(
            BASE,
            &[
                "cluster.mode=primary-backup".into(),
                "views.lease_us=50".into(),
            ],
        )
        .unwrap();
        assert_eq!(m.core_config(0).mode, verbatim_core::Mode::PrimaryBackup);
        let e = Manifest::parse(BASE, &["cluster.mode=primary-backup".into()]).unwrap_err();
        assert!(e.to_string().contains("views.lease_us"), "{e}");
        assert!(Manifest::parse(BASE, &["cluster.mode=chain".into()]).is_err());
        // Zombie removal is DARE's; the primary drops silent members itself.
        let e = Manifest::parse(
            BASE,
            &[
                "cluster.mode=primary-backup".into(),
                "views.lease_us=50".into(),
                "timing.zombie_remove_us=100000".into(),
            ],
        )
        .unwrap_err();
        assert_eq!(e.field, "timing.zombie_remove_us");
        let e = Manifest::parse(BASE, &["timing.snapshot_restore_pause_us=5000000".into()])
            .unwrap_err();
        assert_eq!(e.field, "timing.snapshot_restore_pause_us");
        let m = Manifest::parse(BASE, &["timing.snapshot_restore_pause_us=0".into()]).unwrap();
        assert_eq!(m.core_config(0).snapshot_restore_pause_ns, 0);
        let e =
            Manifest::parse("[cluster]\nname='x'\nbogus=1\n[[members]]\nid=0\n", &[]).unwrap_err();
        assert!(e.message.contains("bogus"), "{e}");
        let e = Manifest::parse("not toml [", &[]).unwrap_err();
        assert!(e.message.contains("TOML"), "{e}");
        let e = Manifest::parse(
            "[cluster]\nname='x'\nfabric='verbs'\n[[members]]\nid=0\n",
            &[],
        )
        .unwrap_err();
        assert_eq!(e.field, "members[0].verbs");
    }

    #[test]
    fn local_manifests_round_trip_through_toml() {
        let m = Manifest::local("demo", 3, 7000);
        let back = Manifest::parse(&m.to_toml(), &[]).unwrap();
        assert_eq!(back, m);
        assert!(m.slot_geometry().area_bytes >= u64::from(m.kv_limits().encoded_bytes_max()));
    }
}
