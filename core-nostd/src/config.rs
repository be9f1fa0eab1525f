//! The configuration of one member: group size, memory sizes, timing.
//!
//! Everything the core allocates is sized from here, once, at
//! construction; everything it waits for is a duration from here. Time is
//! in nanoseconds of a monotonic clock that the host reads and passes in.

use crate::fabric::{MemberId, MAX_MEMBERS};
use core::fmt;

/// Largest entry payload the core can handle. The configuration picks the
/// actual limit (`entry_payload_bytes_max`) at or below it; the apply path
/// copies payloads out of peer-written memory into a buffer of this size.
pub const ENTRY_PAYLOAD_BYTES_CAP: u32 = 64 * 1024;
/// Upper bound of [`Config::reply_bytes_max`]: the log engine keeps one
/// reply buffer of this size for the state machine to write into.
pub const REPLY_BYTES_CAP: u32 = 4096;

/// How the group replicates (issue 14).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// DARE: a leader elected by votes commits once a majority holds an
    /// entry; with views on, a view decides who campaigns (`node::view_led`).
    #[default]
    Log,
    /// uKharon-KV's primary-backup replication (§7.3) on the same log: the
    /// coordinators decide who is primary in a view that also lists the
    /// members that count (`View::members`), and an entry commits once
    /// every one of them holds it. `f + 1` members then survive `f`
    /// failures, and any member of the view can take over without a vote
    /// (it holds every committed entry). No DARE election runs: a primary
    /// suspected or reported dead is replaced by a view the first member
    /// in line proposes. Needs views (`lease_ns > 0`).
    PrimaryBackup,
    /// MacR's backup-memory replication (issue 16): the views decide the
    /// primary as in [`Mode::PrimaryBackup`], but the key-value store
    /// lives in registered memory and the primary WRITEs the bytes each
    /// write changed straight into the backups' copies
    /// ([`crate::backup`]); the log carries no operations. Needs views.
    BackupMemory,
}

impl Mode {
    /// The name used in manifests and status.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Log => "log",
            Mode::PrimaryBackup => "primary-backup",
            Mode::BackupMemory => "backup-memory",
        }
    }

    /// Whether the views decide the primary and the members whose copy
    /// counts (both primary-backup modes): the log engine then follows
    /// views instead of electing.
    pub fn view_primary(self) -> bool {
        matches!(self, Mode::PrimaryBackup | Mode::BackupMemory)
    }

    /// The mode a manifest names.
    pub fn parse(name: &str) -> Option<Mode> {
        match name {
            "log" => Some(Mode::Log),
            "primary-backup" => Some(Mode::PrimaryBackup),
            "backup-memory" => Some(Mode::BackupMemory),
            _ => None,
        }
    }
}

/// Deliberately broken protocol rules (simulator mutation tests only).
#[cfg(feature = "mutation-testing")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The correct protocol.
    None,
    /// Commit once a minority (instead of a majority) holds the entry.
    CommitOnMinority,
    /// Grant votes without checking that the candidate's log is up to date.
    VoteWithoutLogCheck,
    /// Serve reads without confirming the term with a majority.
    ReadWithoutTermCheck,
    /// Write a follower's commit pointer up to what was sent to it rather
    /// than what it acknowledged.
    CommitPointerBeyondAck,
    /// Treat a revoke the fabric could not confirm as done (vote and grant
    /// while a writer may still be placing data in the log).
    IgnoreRevokeFailure,
    /// Heartbeat engine: re-read a peer's counter at once instead of
    /// waiting `counter_read_gap_ns` (uKharon §4.2), so a running peer
    /// that had no chance to increment is reported stalled.
    CounterReadWithoutGap,
    /// Candidates and voters do not revoke log access (DARE §3.2.1): an
    /// outdated leader keeps writing into logs that vote for, and grant
    /// access to, a newer one.
    SkipRevoke,
    /// A voter answers in the same push that carries its private vote,
    /// without waiting until a majority stores it (DARE §3.2.3).
    SkipVoteReplication,
    /// Count entries of earlier terms as committed once a majority holds
    /// them, before the leader's own no-op of its term is (DARE §3.3, Raft
    /// §5.4.2).
    CommitBeforeOwnNoop,
    /// Write entries into a follower's ring over positions it has not
    /// applied yet (DARE §3.3.2).
    DropOverwriteGuard,
    /// Apply a retried request again instead of answering from the session
    /// table (exactly-once, DARE §3.3 "unique request IDs").
    SkipSessionCheck,
    /// A recovering member restores a snapshot from any donor, even one
    /// behind what it has applied itself (DARE §3.4; its applied entries
    /// may be part of a committed majority).
    RecoverFromAnyDonor,
    /// A member that starts with empty memory takes its row version back
    /// from its peers but neither its term nor its private vote (DARE
    /// §3.2.3), and votes at once, whatever its log lost.
    RestartWithoutVoteRecovery,
    /// Count a suspicion as false as soon as the suspected leader's
    /// heartbeat is seen again, moved or not (a dead leader's last one).
    FalseSuspicionWithoutProof,
    /// A follower whose Δ check (or a candidate whose election timeout)
    /// fires late because it was not running itself acts on the silence
    /// anyway: after every stall of the whole machine the leader is
    /// suspected although it was stopped with everyone else.
    ActOnOwnStall,
    /// A transitional configuration counts the new group's majority only
    /// (DARE §3.4 asks for both): while a group shrinks, the new group's
    /// majority commits without the old group's.
    TransitionalNewMajorityOnly,
    /// A member removed as a zombie is never added back when it returns.
    NeverReaddZombies,
    /// Primary-backup mode: commit once a majority holds an entry instead
    /// of every member of the view (a member of the view that then takes
    /// over may lack committed entries).
    PbCommitOnMajority,
    /// Log mode with views: the member a view names leads on the view
    /// alone, without the votes (and their log checks) of a majority.
    ViewLeaderWithoutVotes,
    /// Log mode with views: a member runs DARE's own election while views
    /// can still be decided, instead of claiming a view.
    CampaignWithoutView,
    /// A member copying a snapshot votes and grants its log (which the
    /// restore then replaces under the leader that counts on it).
    GrantWhileCopying,
    /// A member whose copy is whole but restored only in part (a piece
    /// per step) votes and grants its log again, as if the recovery were
    /// over (the last piece then replaces the log under the leader that
    /// counts on it).
    GrantWhileRestoring,
    /// Consensus engine (uKharon §5): a proposer skips the prepare phase
    /// and CASes its own value in without a majority of promises and
    /// without adopting what acceptors accepted, so two proposers can
    /// decide different values in one slot.
    AcceptWithoutPrepare,
    /// Consensus engine: a proposer takes the word of a later slot of the
    /// ring (a later lap) for the state of its own slot, and CASes it back
    /// to its own lap: a stale proposer undoes a recycled slot.
    RecycleIgnoresLap,
    /// Consensus engine: a restarted acceptor counts again at once with
    /// empty words, as if it had never promised or accepted anything
    /// before it lost its memory.
    RejoinWithoutFence,
    /// Leases (uKharon §6): no drift allowance, a lease is held for the
    /// nominal δ and a new view waits only δ, so a fast clock starts a
    /// view while a slow one still holds the previous.
    LeaseWithoutDriftAllowance,
    /// A new leader commits before its view is active, while a deposed
    /// leader may still answer reads under its lease on the older view.
    CommitBeforeViewActive,
    /// A recovering member holds the log back until the ring is full,
    /// whatever `recovery_log_hold_percent` says: clients wait for the
    /// transfer.
    HoldLogForRecoveryUntilFull,
    /// Primary-backup mode: the primary replies to a write as soon as it
    /// has executed it speculatively, before the write is replicated to
    /// the view's members (uKharon-KV replies only once the WRITE
    /// completed).
    ReplyOnSpeculation,
    /// Primary-backup mode: a primary that stops leading with operations
    /// executed ahead of their commit keeps its state machine (as if the
    /// new primary would commit them all) instead of replacing it.
    KeepSpeculationWhenDeposed,
    /// Multicast engine (Derecho §3.4): deliver a message once it is
    /// received here, without waiting until every member's row shows it
    /// received (stable), so a member may deliver what another never gets.
    DeliverBeforeStable,
    /// Multicast view change (Derecho §3.4): act on a ragged trim as soon
    /// as it is in our row (our own proposal, or our echo of the
    /// leader's), without waiting until a majority of the view echoes it,
    /// so a leader that fails right after proposing may have acted on a
    /// trim its successor never learns.
    TrimBeforeEcho,
    /// Multicast view change: a new leader proposes without waiting until
    /// every unsuspected member is wedged and shows the leader's
    /// suspicions (so it may miss a predecessor's trim that is being
    /// echoed, and count receipts that still grow).
    IgnoreSuspicions,
    /// Multicast persistent mode: report a message locally stable on
    /// receipt, before the host has it on disk, so a message may be
    /// delivered that some member would lose in a crash.
    DeliverBeforePersisted,
    /// A total restart cuts the logs' last view where every restarted disk
    /// holds it, ignoring what a member delivered beyond (a delivery
    /// inside a ragged trim is rolled back).
    RestartAtCommonPrefix,
    /// RDMC: a chunk's flag is written right behind the chunk instead of
    /// once the chunk's WRITE completed, so a receiver whose CPU sees the
    /// flag's data before the chunk's delivers stale bytes.
    RdmcFlagWithChunk,
    /// Atomic multicast of large messages: a reference counts as received
    /// before its RDMC payload is whole here, so a message may be
    /// delivered whose payload some member lacks.
    LargeRefBeforePayload,
    /// Multicast subgroups: a subgroup's engine addresses its peers by
    /// their member ids instead of translating its ranks (a subgroup of
    /// members 1 and 3 writes into members 0 and 1), so bytes go to
    /// members outside the subgroup.
    SubgroupRanksAsIds,
    /// Multicast subgroups: a subgroup ignores the members the top-level
    /// group removed, so a subgroup of two that lost a member stays
    /// wedged (its survivor never has a majority) and a new process in
    /// the lost one's place never joins it.
    SubgroupIgnoresParentRemovals,
    /// Backup-memory mode: an update WRITEs its entry before its item
    /// (MacR's Algorithm 1 order), so a primary that dies between the
    /// two leaves an entry naming an item that is not there, which
    /// failover reclaims: the key's acknowledged value is lost.
    BackupEntryBeforeItem,
    /// Backup-memory mode: the primary answers a write once its WRITEs
    /// are posted, not once they completed at every backup.
    BackupReplyBeforeCompletion,
    /// Backup-memory mode: the primary copies a member whose copy is not
    /// synced while a view still counts it (and asks no view to drop
    /// it), so a member whose store is torn by the copy may take over.
    BackupCopyInView,
    /// Backup-memory mode: a backup replays a forwarded write whoever
    /// forwarded it (an earlier primary, itself after stepping down), on
    /// top of the copy its new primary made.
    BackupReplayAnySender,
    /// Backup-memory mode: a member takes over with a store no copy has
    /// filled since its process started (a restarted member's empty store:
    /// the log's catch-up says nothing of it in this mode).
    BackupTakeOverUncopied,
    /// Views (primary-backup modes): the leader does not decide its view
    /// again while a restarted coordinator waits to rejoin, so in a group
    /// whose views do not change it never counts again, and one more
    /// failure leaves no majority of coordinators.
    NoRefreshForRejoin,
}

/// Configuration of one member. Construct with [`Config::new`], adjust
/// fields, then hand it to [`crate::Node::new`], which validates it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Most members the group can have (memory, rows and peers are laid
    /// out for them), 1 to [`MAX_MEMBERS`]: member ids are below it.
    pub member_count: u8,
    /// Size P of the group's first configuration (DARE §3.4), 1 to
    /// `member_count`: members `0 .. initial_members`. The others start
    /// outside the group and join when the leader adds them.
    pub initial_members: u8,
    /// This member's id, below `member_count`.
    pub self_id: MemberId,
    /// Bytes of the log ring (DARE §3.1.1), a multiple of 64, at least
    /// four maximal entries, at most 1 GiB (one WRITE carries at most
    /// 4 GiB).
    pub log_ring_bytes: u64,
    /// Largest entry payload accepted, at most [`ENTRY_PAYLOAD_BYTES_CAP`].
    pub entry_payload_bytes_max: u32,
    /// Client sessions remembered for exactly-once writes.
    pub session_slot_count: u32,
    /// Largest reply to a write, in bytes, at most [`REPLY_BYTES_CAP`]. A
    /// service whose reply would be longer answers with an error instead;
    /// every member must use the same value (it is part of the layout).
    pub reply_bytes_max: u32,
    /// Leader heartbeat period (DARE §4.2.2).
    pub heartbeat_period_ns: u64,
    /// Initial failure-detector check period Δ (DARE §4.2.2); must exceed
    /// the heartbeat period.
    pub fd_check_period_ns: u64,
    /// Upper bound for the adaptive Δ.
    pub fd_check_period_max_ns: u64,
    /// How much Δ grows each time an outdated heartbeat is found.
    pub fd_check_period_step_ns: u64,
    /// Randomized election timeout range (DARE §3.2.2, Raft §5.2).
    pub election_timeout_min_ns: u64,
    /// Upper end of the election timeout range.
    pub election_timeout_max_ns: u64,
    /// A leader that has not heard from a majority for this long steps down
    /// (so clients of a partitioned leader fail over).
    pub leader_quorum_timeout_ns: u64,
    /// How often a member republishes its apply pointer (for pruning).
    pub apply_publish_period_ns: u64,
    /// How often the leader tries to prune the log (DARE §3.3.2).
    pub prune_period_ns: u64,
    /// A member whose row has not changed for this long is left out of the
    /// pruning minimum (it will need recovery if it falls behind the head).
    pub prune_grace_ns: u64,
    /// A member silent for this long (its row has not changed, or its
    /// process is known dead) is removed from the group by a CONFIG entry,
    /// and added back once its row moves again (DARE §3.3.2, zombies).
    /// 0: never (the default). At least `prune_grace_ns`: the log is
    /// pruned past a silent member before that anyway, so it never fills;
    /// the removal only stops replication to it. It costs availability: a
    /// member removed while away cannot help elect a leader until it is
    /// added back, which takes a leader (see README, Limits).
    pub zombie_remove_ns: u64,
    /// Wait before re-establishing a channel that failed.
    pub reconnect_backoff_ns: u64,
    /// Entries applied per call at most (bounds the work of one call).
    pub apply_batch_max: u32,
    /// Bytes of log entries the leader sends a follower in one batch at
    /// most (whole entries, at least one). A follower far behind (just
    /// restored, or back from a pause) is caught up in many batches: one
    /// WRITE of the whole backlog stalled the leader's loop for seconds
    /// on the shared-memory fabric, whose WRITEs are the poster's copies.
    pub log_batch_bytes_max: u64,
    /// A member that recovers by state transfer holds the log back (the
    /// entries after its snapshot must still be there when it is
    /// restored) only while the log fills at most this percentage of the
    /// ring. Past it the leader prunes past the member, which recovers
    /// again from a newer snapshot later, rather than make every client
    /// wait for one member's transfer (a group that stalled writes for a
    /// joiner was unavailable for as long as the transfer took). 100:
    /// hold until the ring is full (writes wait for the transfer).
    pub recovery_log_hold_percent: u8,
    /// How many times in a row the leader releases one recovering
    /// member's hold (`recovery_log_hold_percent`) before it holds the
    /// log for it until full, writes waiting, so that the member does
    /// rejoin: under a steady write rate a ring too small for one transfer
    /// outruns every attempt, and a group left a member short is one
    /// failure from unavailable. `u32::MAX`: always release.
    pub recovery_releases_max: u32,
    /// Bytes of the snapshot a member can give to a recovering one (DARE
    /// §3.4): its session table and its state machine's snapshot must fit.
    /// 0 disables recovery by state transfer (no snapshot region).
    pub snapshot_bytes_max: u64,
    /// Bytes a recovering member READs from its donor in one request.
    pub snapshot_read_bytes: u32,
    /// Bytes of a copied snapshot a recovering member checks and restores
    /// in one step at most (a record is never split): a large state is
    /// restored over many steps, so the member keeps its row alive and the
    /// processes sharing its core run in between.
    pub snapshot_restore_step_bytes: u64,
    /// Pause between two pieces of a restore: the member parks meanwhile,
    /// so a restore takes at most a share of the core it shares with
    /// others (a leader's latency) instead of all of it. 0: back to back.
    pub snapshot_restore_pause_ns: u64,
    /// A recovering member that sees no progress from its donor for this
    /// long asks another one.
    pub snapshot_wait_ns: u64,
    /// Seed of the PRNG that randomizes timeouts.
    pub seed: u64,
    /// Heartbeat engine (uKharon §4.2): the member bumps its counter on
    /// every call and at least this often.
    pub counter_increment_period_ns: u64,
    /// Heartbeat engine: wait this long after a READ of a peer's counter
    /// completes before the next one. Two READs that return the same value
    /// report the peer stalled, so this must comfortably exceed the
    /// increment period plus the host's scheduling jitter.
    pub counter_read_gap_ns: u64,
    /// Views and leases (uKharon §5–6, [`crate::views`]): the nominal
    /// lease δ on a view, in nanoseconds. 0 turns views off: no view
    /// engine, no consensus regions, reads confirmed by a round of term
    /// checks, commits never wait for a view.
    pub lease_ns: u64,
    /// Bound on any member's clock rate error, in parts per million: the
    /// drift allowance `⌈δ·ρ⌉` of [`crate::lease`].
    pub lease_drift_ppm: u32,
    /// A lease is renewed when less than this is left of it.
    pub lease_renew_margin_ns: u64,
    /// Coordinators: members `0 .. coordinator_count` are the acceptors
    /// that decide views (uKharon's default is three). At most
    /// `member_count`.
    pub coordinator_count: u8,
    /// Coordinator slot words: a ring that views reuse lap after lap (a
    /// view change takes the next slot). Bounds the views a member may
    /// fall behind and still learn each one; one further behind goes on
    /// from two slots before the later slot it met (only the newest view
    /// matters). Laps wrap: a group lives 2^15 laps of the ring (134
    /// million views at 4096 slots) before a member restarted from slot 0
    /// would misread them (see the limits in [`crate::consensus`]).
    pub view_slot_count: u32,
    /// A member that does not need a lease learns the newest view this
    /// often (status, the view it follows).
    pub view_learn_period_ns: u64,
    /// How the group replicates: DARE's majority log, or primary-backup
    /// under views.
    pub mode: Mode,
    /// Multicast engine ([`crate::multicast`], Derecho's SMC and atomic
    /// multicast): slots per sender ring. 0 (the default) turns
    /// multicast off (no engine, no region).
    pub mcast_window: u32,
    /// Multicast engine: largest message payload, in bytes, at most
    /// [`crate::multicast::MCAST_PAYLOAD_BYTES_CAP`].
    pub mcast_payload_bytes_max: u32,
    /// Multicast engine, Derecho's persistent mode: a message is locally
    /// stable (counted in our row, so that it may be delivered) only once
    /// the host reports it on disk ([`crate::multicast::McastEngine::poll_persist`],
    /// [`crate::multicast::McastEngine::mark_persisted`]); false: on
    /// receipt (volatile mode).
    pub mcast_persistent: bool,
    /// RDMC engine ([`crate::rdmc`], Derecho's large-message multicast on
    /// a binomial pipeline): message slots per sender, at most
    /// [`crate::rdmc::RDMC_SLOTS_CAP`]. 0 (the default) turns RDMC off
    /// (no engine, no region).
    pub rdmc_slots: u32,
    /// RDMC engine: bytes of a chunk, a multiple of 64 between
    /// [`crate::rdmc::RDMC_CHUNK_BYTES_MIN`] and
    /// [`crate::rdmc::RDMC_CHUNK_BYTES_MAX`].
    pub rdmc_chunk_bytes: u32,
    /// RDMC engine: largest message, in bytes, at most
    /// [`crate::rdmc::RDMC_MESSAGE_BYTES_CAP`] and
    /// [`crate::rdmc::RDMC_CHUNKS_CAP`] chunks.
    pub rdmc_message_bytes_max: u64,
    /// Multicast subgroups (Derecho §3.4 "subgroups and shards"): the
    /// members of each, a bit per member id among `0 .. initial_members`
    /// (0: no subgroup in that place; the used places come first). Each
    /// subgroup runs its own atomic multicast among its members only,
    /// with the top-level group's `mcast_window` and
    /// `mcast_payload_bytes_max`, in its own region
    /// ([`crate::subgroup`]).
    pub mcast_subgroups: [u8; crate::subgroup::SUBGROUPS_MAX],
    /// Backup-memory mode ([`Mode::BackupMemory`]): index entries, the
    /// most keys the store holds.
    pub backup_entry_count: u32,
    /// Backup-memory mode: bytes of a slab of the store's heap (a power
    /// of two of at least 4096, at least the largest item).
    pub backup_slab_bytes: u32,
    /// Backup-memory mode: slabs in the heap.
    pub backup_slab_count: u32,
    /// Backup-memory mode: the largest key and value (the service's
    /// limits).
    pub backup_key_bytes_max: u32,
    /// Backup-memory mode: the largest value.
    pub backup_value_bytes_max: u32,
    /// Backup-memory mode: a write whose allocator changes span more
    /// separate structures than this is forwarded to the backups' CPUs
    /// (MacR §III-C).
    pub backup_forward_threshold: u8,
    /// Backup-memory mode: bytes of one WRITE of a bulk copy.
    pub backup_sync_chunk_bytes: u32,
    /// This process's incarnation: a number that differs from one process
    /// start to the next (the host draws it at random, the simulator
    /// counts restarts). The multicast engine ties a member's messages
    /// and row to it, so a restarted process never passes for the one it
    /// replaces.
    pub incarnation: u64,
    /// A deliberately broken rule, for mutation tests.
    #[cfg(feature = "mutation-testing")]
    pub mutation: Mutation,
}

impl Config {
    /// The backup-memory store's parameters.
    pub fn backup_store_params(&self) -> crate::backup::StoreParams {
        crate::backup::StoreParams {
            entry_count: self.backup_entry_count,
            slab_bytes: self.backup_slab_bytes,
            slab_count: self.backup_slab_count,
            key_bytes_max: self.backup_key_bytes_max,
            value_bytes_max: self.backup_value_bytes_max,
            session_count: self.session_slot_count,
        }
    }

    /// Defaults tuned for a shared-memory fabric on one host: heartbeats
    /// every 50 µs, elections after 300–600 µs of silence.
    pub fn new(member_count: u8, self_id: MemberId) -> Config {
        Config {
            member_count,
            initial_members: member_count,
            self_id,
            log_ring_bytes: 1 << 20,
            entry_payload_bytes_max: 8 * 1024,
            session_slot_count: 1024,
            reply_bytes_max: 64,
            heartbeat_period_ns: 50_000,
            fd_check_period_ns: 200_000,
            fd_check_period_max_ns: 5_000_000,
            fd_check_period_step_ns: 50_000,
            election_timeout_min_ns: 300_000,
            election_timeout_max_ns: 600_000,
            leader_quorum_timeout_ns: 2_000_000,
            apply_publish_period_ns: 200_000,
            prune_period_ns: 1_000_000,
            prune_grace_ns: 50_000_000,
            zombie_remove_ns: 0,
            reconnect_backoff_ns: 1_000_000,
            apply_batch_max: 256,
            log_batch_bytes_max: 1 << 20,
            recovery_log_hold_percent: 90,
            recovery_releases_max: 1,
            snapshot_bytes_max: 0,
            snapshot_read_bytes: 64 * 1024,
            snapshot_restore_step_bytes: 256 * 1024,
            snapshot_restore_pause_ns: 200_000,
            snapshot_wait_ns: 20_000_000,
            seed: 0x5EED,
            counter_increment_period_ns: 5_000_000,
            counter_read_gap_ns: 40_000_000,
            lease_ns: 0,
            lease_drift_ppm: 1_000,
            lease_renew_margin_ns: 0,
            coordinator_count: 3,
            view_slot_count: 1024,
            view_learn_period_ns: 10_000_000,
            mode: Mode::Log,
            mcast_window: 0,
            mcast_payload_bytes_max: 256,
            mcast_persistent: false,
            rdmc_slots: 0,
            rdmc_chunk_bytes: 1 << 20,
            rdmc_message_bytes_max: 1 << 24,
            mcast_subgroups: [0; crate::subgroup::SUBGROUPS_MAX],
            backup_entry_count: 65_536,
            backup_slab_bytes: 1 << 20,
            backup_slab_count: 64,
            backup_key_bytes_max: 256,
            backup_value_bytes_max: 4096,
            backup_forward_threshold: 2,
            backup_sync_chunk_bytes: 1 << 20,
            incarnation: 1,
            #[cfg(feature = "mutation-testing")]
            mutation: Mutation::None,
        }
    }

    /// The lease parameters views are held under. The renewal margin
    /// defaults (0) to half the lease.
    pub fn lease_config(&self) -> crate::lease::LeaseConfig {
        let margin = if self.lease_renew_margin_ns == 0 {
            self.lease_ns / 2
        } else {
            self.lease_renew_margin_ns
        };
        #[allow(unused_mut)]
        let mut c = crate::lease::LeaseConfig::new(self.lease_ns, self.lease_drift_ppm, margin);
        #[cfg(feature = "mutation-testing")]
        {
            c.mutation = self.mutation;
        }
        c
    }

    /// The quorum size q = ⌈(P+1)/2⌉ (DARE §3).
    #[inline]
    pub fn quorum(&self) -> usize {
        usize::from(self.member_count) / 2 + 1
    }

    /// Checks every field; the error names the field and what to change.
    pub fn validate(&self) -> Result<(), ConfigError> {
        use ConfigError::*;
        if self.member_count == 0 || usize::from(self.member_count) > MAX_MEMBERS {
            return Err(OutOfRange {
                field: "member_count",
                value: u64::from(self.member_count),
                min: 1,
                max: MAX_MEMBERS as u64,
            });
        }
        if self.initial_members == 0 || self.initial_members > self.member_count {
            return Err(OutOfRange {
                field: "initial_members",
                value: u64::from(self.initial_members),
                min: 1,
                max: u64::from(self.member_count),
            });
        }
        if self.self_id.0 >= self.member_count {
            return Err(OutOfRange {
                field: "self_id",
                value: u64::from(self.self_id.0),
                min: 0,
                max: u64::from(self.member_count) - 1,
            });
        }
        if self.entry_payload_bytes_max == 0
            || self.entry_payload_bytes_max > ENTRY_PAYLOAD_BYTES_CAP
        {
            return Err(OutOfRange {
                field: "entry_payload_bytes_max",
                value: u64::from(self.entry_payload_bytes_max),
                min: 1,
                max: u64::from(ENTRY_PAYLOAD_BYTES_CAP),
            });
        }
        let entry_max = crate::log::entry_bytes(self.entry_payload_bytes_max);
        if !self.log_ring_bytes.is_multiple_of(64) {
            return Err(Inconsistent {
                field: "log_ring_bytes",
                reason: "must be a multiple of 64 bytes",
            });
        }
        if self.log_ring_bytes < 4 * entry_max || self.log_ring_bytes > (1 << 30) {
            return Err(OutOfRange {
                field: "log_ring_bytes",
                value: self.log_ring_bytes,
                min: 4 * entry_max,
                max: 1 << 30,
            });
        }
        if self.session_slot_count < 8 || self.session_slot_count > (1 << 24) {
            return Err(OutOfRange {
                field: "session_slot_count",
                value: u64::from(self.session_slot_count),
                min: 8,
                max: 1 << 24,
            });
        }
        if self.reply_bytes_max < 16 || self.reply_bytes_max > REPLY_BYTES_CAP {
            return Err(OutOfRange {
                field: "reply_bytes_max",
                value: u64::from(self.reply_bytes_max),
                min: 16,
                max: u64::from(REPLY_BYTES_CAP),
            });
        }
        if self.snapshot_bytes_max > (1 << 40) || !self.snapshot_bytes_max.is_multiple_of(64) {
            return Err(Inconsistent {
                field: "snapshot_bytes_max",
                reason: "must be a multiple of 64 bytes, at most 1 TiB (0 disables recovery)",
            });
        }
        if self.snapshot_read_bytes < 64
            || self.snapshot_read_bytes > (1 << 30)
            || !self.snapshot_read_bytes.is_multiple_of(8)
        {
            return Err(OutOfRange {
                field: "snapshot_read_bytes",
                value: u64::from(self.snapshot_read_bytes),
                min: 64,
                max: 1 << 30,
            });
        }
        if !(64..=(1 << 40)).contains(&self.snapshot_restore_step_bytes) {
            return Err(OutOfRange {
                field: "snapshot_restore_step_bytes",
                value: self.snapshot_restore_step_bytes,
                min: 64,
                max: 1 << 40,
            });
        }
        if !(4096..=(1 << 30)).contains(&self.log_batch_bytes_max) {
            return Err(OutOfRange {
                field: "log_batch_bytes_max",
                value: self.log_batch_bytes_max,
                min: 4096,
                max: 1 << 30,
            });
        }
        if !(1..=100).contains(&self.recovery_log_hold_percent) {
            return Err(OutOfRange {
                field: "recovery_log_hold_percent",
                value: u64::from(self.recovery_log_hold_percent),
                min: 1,
                max: 100,
            });
        }
        if self.mcast_window != 0 {
            if !(2..=crate::multicast::MCAST_WINDOW_CAP).contains(&self.mcast_window) {
                return Err(OutOfRange {
                    field: "mcast_window",
                    value: u64::from(self.mcast_window),
                    min: 2,
                    max: u64::from(crate::multicast::MCAST_WINDOW_CAP),
                });
            }
            if !(1..=crate::multicast::MCAST_PAYLOAD_BYTES_CAP)
                .contains(&self.mcast_payload_bytes_max)
            {
                return Err(OutOfRange {
                    field: "mcast_payload_bytes_max",
                    value: u64::from(self.mcast_payload_bytes_max),
                    min: 1,
                    max: u64::from(crate::multicast::MCAST_PAYLOAD_BYTES_CAP),
                });
            }
            let ring_bytes = u64::from(self.mcast_window)
                * u64::from(self.initial_members)
                * (u64::from(self.mcast_payload_bytes_max) + 128);
            if ring_bytes > 1 << 30 {
                return Err(Inconsistent {
                    field: "mcast_window",
                    reason: "the rings (window × members × slot) would exceed 1 GiB: lower mcast_window or mcast_payload_bytes_max",
                });
            }
        }
        if self.rdmc_slots != 0 {
            use crate::rdmc::*;
            if self.rdmc_slots > RDMC_SLOTS_CAP {
                return Err(OutOfRange {
                    field: "rdmc_slots",
                    value: u64::from(self.rdmc_slots),
                    min: 1,
                    max: u64::from(RDMC_SLOTS_CAP),
                });
            }
            if !(RDMC_CHUNK_BYTES_MIN..=RDMC_CHUNK_BYTES_MAX).contains(&self.rdmc_chunk_bytes) {
                return Err(OutOfRange {
                    field: "rdmc_chunk_bytes",
                    value: u64::from(self.rdmc_chunk_bytes),
                    min: u64::from(RDMC_CHUNK_BYTES_MIN),
                    max: u64::from(RDMC_CHUNK_BYTES_MAX),
                });
            }
            if !self.rdmc_chunk_bytes.is_multiple_of(64) {
                return Err(Inconsistent {
                    field: "rdmc_chunk_bytes",
                    reason: "must be a multiple of 64 (chunks are cache-line aligned)",
                });
            }
            if !(1..=RDMC_MESSAGE_BYTES_CAP).contains(&self.rdmc_message_bytes_max) {
                return Err(OutOfRange {
                    field: "rdmc_message_bytes_max",
                    value: self.rdmc_message_bytes_max,
                    min: 1,
                    max: RDMC_MESSAGE_BYTES_CAP,
                });
            }
            if self
                .rdmc_message_bytes_max
                .div_ceil(u64::from(self.rdmc_chunk_bytes))
                > RDMC_CHUNKS_CAP
            {
                return Err(Inconsistent {
                    field: "rdmc_chunk_bytes",
                    reason: "cuts the largest message into more than 2^20 chunks: raise rdmc_chunk_bytes or lower rdmc_message_bytes_max",
                });
            }
            if self.mcast_window != 0 && self.mcast_persistent {
                return Err(Inconsistent {
                    field: "rdmc_slots",
                    reason: "large messages are not logged in the multicast's persistent mode: set rdmc_slots = 0 or mcast_persistent = false",
                });
            }
            if self.mcast_window != 0
                && (self.mcast_payload_bytes_max as usize) < crate::multicast::LARGE_REF_BYTES
            {
                return Err(Inconsistent {
                    field: "mcast_payload_bytes_max",
                    reason: "must be at least 16 with large messages on (a slot carries a large message's reference)",
                });
            }
            if RdmcLayout::region_bytes_for(self).is_none_or(|b| b > RDMC_REGION_BYTES_CAP) {
                return Err(Inconsistent {
                    field: "rdmc_slots",
                    reason: "the slots (members × rdmc_slots × rdmc_message_bytes_max) would exceed 16 GiB: lower rdmc_slots or rdmc_message_bytes_max",
                });
            }
        }
        let mut subgroups_ended = false;
        for &mask in &self.mcast_subgroups {
            if mask == 0 {
                subgroups_ended = true;
                continue;
            }
            let reason = if subgroups_ended {
                "has a subgroup after an empty place: list the subgroups first"
            } else if self.mcast_window == 0 {
                "needs the multicast on: set mcast_window (the subgroups use its window and payload size)"
            } else if u32::from(mask) >> self.initial_members != 0 {
                "names a member outside 0 .. initial_members: a subgroup's members are top-level members"
            } else if self.mcast_persistent {
                "run in the volatile mode only: set mcast_persistent = false or remove the subgroups"
            } else {
                continue;
            };
            return Err(Inconsistent {
                field: "mcast_subgroups",
                reason,
            });
        }
        if self.snapshot_restore_pause_ns > 1_000_000_000 {
            return Err(OutOfRange {
                field: "snapshot_restore_pause_ns",
                value: self.snapshot_restore_pause_ns,
                min: 0,
                max: 1_000_000_000,
            });
        }
        for (field, v) in [
            ("heartbeat_period_ns", self.heartbeat_period_ns),
            ("fd_check_period_ns", self.fd_check_period_ns),
            ("election_timeout_min_ns", self.election_timeout_min_ns),
            ("leader_quorum_timeout_ns", self.leader_quorum_timeout_ns),
            ("apply_publish_period_ns", self.apply_publish_period_ns),
            ("prune_period_ns", self.prune_period_ns),
            ("prune_grace_ns", self.prune_grace_ns),
            ("reconnect_backoff_ns", self.reconnect_backoff_ns),
            ("snapshot_wait_ns", self.snapshot_wait_ns),
            (
                "counter_increment_period_ns",
                self.counter_increment_period_ns,
            ),
            ("counter_read_gap_ns", self.counter_read_gap_ns),
        ] {
            if v == 0 || v > 3_600_000_000_000 {
                return Err(OutOfRange {
                    field,
                    value: v,
                    min: 1,
                    max: 3_600_000_000_000,
                });
            }
        }
        if self.fd_check_period_ns <= self.heartbeat_period_ns {
            return Err(Inconsistent {
                field: "fd_check_period_ns",
                reason: "must be longer than heartbeat_period_ns, or a live leader is suspected",
            });
        }
        if self.fd_check_period_max_ns < self.fd_check_period_ns {
            return Err(Inconsistent {
                field: "fd_check_period_max_ns",
                reason: "must be at least fd_check_period_ns",
            });
        }
        if self.election_timeout_max_ns < self.election_timeout_min_ns {
            return Err(Inconsistent {
                field: "election_timeout_max_ns",
                reason: "must be at least election_timeout_min_ns",
            });
        }
        if self.zombie_remove_ns != 0 && self.zombie_remove_ns < self.prune_grace_ns {
            return Err(Inconsistent {
                field: "zombie_remove_ns",
                reason: "must be 0 (never remove) or at least prune_grace_ns",
            });
        }
        if self.leader_quorum_timeout_ns < self.fd_check_period_ns {
            return Err(Inconsistent {
                field: "leader_quorum_timeout_ns",
                reason: "must be at least fd_check_period_ns",
            });
        }
        if self.counter_read_gap_ns < 2 * self.counter_increment_period_ns {
            return Err(Inconsistent {
                field: "counter_read_gap_ns",
                reason: "must be at least twice counter_increment_period_ns, or a running peer is reported stalled",
            });
        }
        if self.lease_ns != 0 {
            if self.lease_ns < 1_000 || self.lease_ns > 10_000_000_000 {
                return Err(OutOfRange {
                    field: "lease_ns",
                    value: self.lease_ns,
                    min: 1_000,
                    max: 10_000_000_000,
                });
            }
            let lease = self.lease_config();
            if let Err(e) = lease.validate() {
                return Err(Inconsistent {
                    field: match e {
                        crate::lease::LeaseConfigError::MarginExceedsLease => "lease_renew_margin_ns",
                        _ => "lease_drift_ppm",
                    },
                    reason: "makes no usable lease: the drift allowance must leave a lease to hold, and the margin must be below lease_ns",
                });
            }
            if lease.renew_margin_ns >= lease.hold_ns() {
                return Err(Inconsistent {
                    field: "lease_renew_margin_ns",
                    reason: "must be below the lease minus its drift allowance, or a renewal is always due",
                });
            }
            if self.coordinator_count == 0 || self.coordinator_count > self.member_count {
                return Err(OutOfRange {
                    field: "coordinator_count",
                    value: u64::from(self.coordinator_count),
                    min: 1,
                    max: u64::from(self.member_count),
                });
            }
            if self.view_slot_count < crate::consensus::layout::SLOT_COUNT_MIN
                || self.view_slot_count > crate::consensus::layout::SLOT_COUNT_MAX
            {
                return Err(OutOfRange {
                    field: "view_slot_count",
                    value: u64::from(self.view_slot_count),
                    min: u64::from(crate::consensus::layout::SLOT_COUNT_MIN),
                    max: u64::from(crate::consensus::layout::SLOT_COUNT_MAX),
                });
            }
            if self.view_learn_period_ns == 0 {
                return Err(OutOfRange {
                    field: "view_learn_period_ns",
                    value: 0,
                    min: 1,
                    max: u64::MAX,
                });
            }
        }
        if self.mode.view_primary() && self.zombie_remove_ns != 0 {
            return Err(Inconsistent {
                field: "zombie_remove_ns",
                reason: "must be 0 in modes primary-backup and backup-memory: the views list the members there, and the primary drops a silent one itself",
            });
        }
        if self.mode.view_primary() && self.initial_members != self.member_count {
            return Err(Inconsistent {
                field: "initial_members",
                reason: "must equal member_count in modes primary-backup and backup-memory: DARE reconfiguration is for log mode",
            });
        }
        if self.mode.view_primary() && self.lease_ns == 0 {
            return Err(Inconsistent {
                field: "lease_ns",
                reason: "is 0 (views off), but modes primary-backup and backup-memory need views: their primary is decided by the coordinators and leased (set views.lease_us, e.g. 50)",
            });
        }
        if self.mode == Mode::BackupMemory {
            use crate::backup::StoreParamsError as E;
            let reason = match self.backup_store_params().geometry() {
                Ok(_) => None,
                Err(E::EntryCount) => Some(("backup_entry_count", "must be between 1 and 2^31")),
                Err(E::SlabBytes) => Some(("backup_slab_bytes", "must be a power of two of at least 4096")),
                Err(E::SlabCount) => Some(("backup_slab_count", "must be at least 1, and the heap (slab_count × slab_bytes) below 256 GiB")),
                Err(E::ItemLargerThanSlab) => Some(("backup_slab_bytes", "is smaller than the largest item (32 bytes, the largest key and the largest value): raise it or lower the key or value limit")),
                Err(E::KeyOrValueLimit) => Some(("backup_key_bytes_max", "must be 1..=65535 (and the value limit at least 1)")),
            };
            if let Some((field, reason)) = reason {
                return Err(Inconsistent { field, reason });
            }
            if self.backup_sync_chunk_bytes < 4096 || self.backup_sync_chunk_bytes > 1 << 30 {
                return Err(OutOfRange {
                    field: "backup_sync_chunk_bytes",
                    value: u64::from(self.backup_sync_chunk_bytes),
                    min: 4096,
                    max: 1 << 30,
                });
            }
        }
        if self.apply_batch_max == 0 || self.apply_batch_max > 1 << 16 {
            return Err(OutOfRange {
                field: "apply_batch_max",
                value: u64::from(self.apply_batch_max),
                min: 1,
                max: 1 << 16,
            });
        }
        Ok(())
    }
}

/// Why a configuration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A value outside its allowed range.
    OutOfRange {
        /// The field.
        field: &'static str,
        /// What it was.
        value: u64,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
    /// A value that contradicts another.
    Inconsistent {
        /// The field to change.
        field: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::OutOfRange {
                field,
                value,
                min,
                max,
            } => write!(f, "`{field}` is {value}; set it between {min} and {max}"),
            ConfigError::Inconsistent { field, reason } => write!(f, "`{field}` {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_errors_name_the_field() {
        let c = Config::new(3, MemberId(1));
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.quorum(), 2);
        assert_eq!(Config::new(5, MemberId(0)).quorum(), 3);
        assert_eq!(Config::new(4, MemberId(0)).quorum(), 3);

        let mut bad = c.clone();
        bad.self_id = MemberId(3);
        let e = bad.validate().unwrap_err();
        assert!(matches!(
            e,
            ConfigError::OutOfRange {
                field: "self_id",
                ..
            }
        ));

        let mut bad = c.clone();
        bad.fd_check_period_ns = bad.heartbeat_period_ns;
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::Inconsistent {
                field: "fd_check_period_ns",
                ..
            })
        ));

        let mut bad = c.clone();
        bad.log_ring_bytes = 1000;
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::Inconsistent {
                field: "log_ring_bytes",
                ..
            })
        ));

        let mut bad = c;
        bad.member_count = 9;
        assert!(bad.validate().is_err());
    }
}
