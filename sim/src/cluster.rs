//! A simulated group: members running `verbatim-core` nodes over the
//! simulated network, clients running a key-value workload, faults on a
//! schedule, and the invariant checkers watching. Everything runs in
//! virtual time from one seed, so a seed reproduces a run exactly.

use crate::check::acknowledged::check_reply;
use crate::check::committed::CommittedLog;
use crate::check::completeness::{
    check_electable_completeness, check_leader_completeness, check_view_completeness, MemberLog,
};
use crate::check::configurations::ConfigurationAgreement;
use crate::check::counters::CounterAccuracy;
use crate::check::election::ElectionSafety;
use crate::check::linearizability::{check_history_measured, Verdict, DEFAULT_STEPS_PER_KEY};
use crate::check::log_matching::check_log_matching;
use crate::check::state_machine::StateMachineSafety;
use crate::check::streams::{check_streams, StreamInput, StreamOperation, StreamOutput};
use crate::check::suspicions::FalseSuspicionAccuracy;
use crate::check::votes::{OneVotePerTerm, VoteReliability};
use crate::check::{EntryId, Violation};
use crate::history::{KvInput, KvOutput, Operation};
use crate::kvsm::RecordingKv;
use crate::loggp::NetParams;
use crate::memory::SimMemory;
use crate::net::{Cuts, DelaySpike, LinkWindow, Net, NetEvent, Reordering, Schedule, Tearing};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use verbatim_core::backup::engine::{
    BackupRole, BackupStatus, CopyState, STORE_LOCAL_REGION, STORE_REGION,
};
use verbatim_core::checksum::Checksum;
use verbatim_core::config::Mutation;
use verbatim_core::fabric::{
    Access, Addr, Channel, Completion, Fabric, FabricError, Op, RegionId, WorkRequest,
};
use verbatim_core::heartbeat::CounterEvent;
use verbatim_core::kv::{KvError, KvLimits, KvOp, KvReply};
use verbatim_core::log::Ring;
use verbatim_core::mem::Memory;
use verbatim_core::multicast::HaltCause;
use verbatim_core::node::{Event, ReconfigOp, Role};
use verbatim_core::rng::SplitMix64;
use verbatim_core::sst::Row;
use verbatim_core::stream::{
    encode_pairs, pairs_iter, range_entries, IdSpec, StreamId, StreamOp, StreamReply,
};
use verbatim_core::{Config, Layout, MemberId};
use verbatim_driver::{
    Answer, Driver, DriverEvent, Engines, Host, Incoming, McastDelivery, McastPersist,
    McastSendError, PersistMark, Refusal, RestartTail, SubgroupEngine,
};

/// Whether `wr` is a WRITE of the backup-memory engine (a write's plan or
/// forward, or a bulk copy).
fn is_backup_write(wr: &WorkRequest) -> bool {
    verbatim_core::engine::EngineTag::split(wr.wr_id).0 == verbatim_core::engine::EngineTag::BACKUP
        && matches!(wr.op, Op::Write { .. } | Op::WriteInline { .. })
}

/// With interleaving, one read by a member's CPU in this many lets a piece
/// of a WRITE in flight into its memory land first (while there is one).
const INTERLEAVE_ONE_IN: u64 = 8;

/// A scheduled fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The member's process and memory are gone; requests to it time out.
    Crash {
        /// Member.
        node: u8,
        /// When.
        at_ns: u64,
    },
    /// The member leading at `at_ns` crashes (as [`Fault::Crash`]); with
    /// nobody leading then, nothing happens.
    CrashLeader {
        /// When.
        at_ns: u64,
    },
    /// The member crashes (as [`Fault::Crash`]) and comes back `down_ns`
    /// later as a new process with empty memory and its own id; its peers
    /// keep their copies of its row. With `after_vote`, the crash waits,
    /// from `at_ns`, for the end of the first step in which the member
    /// published a vote or private vote (DARE §3.2.3: "the server may fail
    /// after voting for a candidate, and then, recover during the same
    /// term").
    Restart {
        /// Member.
        node: u8,
        /// When (or from when, with `after_vote`).
        at_ns: u64,
        /// Down for this long.
        down_ns: u64,
        /// Crash right after a vote.
        after_vote: bool,
    },
    /// Derecho's total failure (persistent multicast): every multicast
    /// member's process dies at once, losing what its disk had not
    /// synced; each comes back within `stagger_ns` and restarts from its
    /// log. (The simulator restarts the multicast engines only: the log
    /// engine runs on, as if the multicast ran in processes of its own.)
    McastTotalRestart {
        /// When.
        at_ns: u64,
        /// Each member comes back within this long.
        stagger_ns: u64,
    },
    /// DARE §5 "zombie": the CPU stops for good, memory and NIC still
    /// answer (the leader may keep using its log).
    Zombie {
        /// Member.
        node: u8,
        /// When.
        at_ns: u64,
    },
    /// SIGSTOP in the middle of a copy (the shared-memory fabric copies
    /// with the writer's CPU): the member leading at `from_ns` stops in
    /// the middle of placing its next log WRITE into a follower (half of
    /// it lands), before the rest of its step (later posts, answers). The
    /// follower cannot confirm a revoke of the writer's log access until
    /// the writer resumes at `to_ns`; then the rest of the copy lands and
    /// the step goes on.
    PauseMidCopy {
        /// From.
        from_ns: u64,
        /// Until.
        to_ns: u64,
    },
    /// The CPU stops for a while (a GC pause, SIGSTOP), then resumes.
    Pause {
        /// Member.
        node: u8,
        /// From.
        from_ns: u64,
        /// Until.
        to_ns: u64,
    },
    /// `side` cannot reach the others (symmetric), or only its outgoing
    /// links are cut (asymmetric: it still receives).
    Partition {
        /// Members on one side.
        side: Vec<u8>,
        /// From.
        from_ns: u64,
        /// Until.
        to_ns: u64,
        /// Both directions?
        symmetric: bool,
    },
    /// The next member to win an election at or after `from_ns` is cut off
    /// from the other members link by link, each link (both directions) at
    /// its own random instant within `delay_ns` after the win, for
    /// `for_ns` (at most until the end of the safety phase): a leader
    /// deposed while its no-op reaches some followers and not others,
    /// which leaves entries of several terms on minorities (Raft's
    /// Figure 8).
    Depose {
        /// Armed from.
        from_ns: u64,
        /// Links are cut within this long after the win.
        delay_ns: u64,
        /// For this long.
        for_ns: u64,
    },
    /// The member leading at `from_ns` and `companions` others (drawn at
    /// random then) are cut off from the rest, both directions, until
    /// `to_ns`: the leader goes on appending client writes that reach only
    /// its side (a minority), while the other side elects a leader of its
    /// own.
    IsolateLeader {
        /// From.
        from_ns: u64,
        /// Until.
        to_ns: u64,
        /// Members cut off with the leader.
        companions: u8,
    },
    /// The member leading at `from_ns` stops running until `to_ns` (as
    /// [`Fault::Pause`]: its memory still answers, SIGSTOP); with nobody
    /// leading then, nothing happens.
    PauseLeader {
        /// From.
        from_ns: u64,
        /// Until.
        to_ns: u64,
    },
    /// Views (issue 14): the member named leader by the first view decided
    /// from `from_ns` on, that does not lead yet, stops running at once
    /// (as [`Fault::Pause`]) until `to_ns`: a claim won by a member that
    /// then does not campaign (log mode) or take over (primary-backup
    /// mode) in time, or does so late, after newer views.
    PauseNamedLeader {
        /// From.
        from_ns: u64,
        /// Until.
        to_ns: u64,
    },
    /// A restart that loses acknowledged entries the others lack: at
    /// `from_ns`, the followers but one (the *keeper*) are cut off from the
    /// leader and the keeper for `lag_ns`, so entries commit on the leader
    /// and the keeper alone; halfway, the keeper restarts with empty
    /// memory (down `down_ns`); when the others come back, the leader is
    /// cut off for `isolate_ns`. The survivors lack what was committed, and
    /// the keeper must not vote before its log holds it again.
    LoseAckedLog {
        /// From.
        from_ns: u64,
        /// The other followers lag this long.
        lag_ns: u64,
        /// The keeper is down this long.
        down_ns: u64,
        /// Then the leader is cut off this long.
        isolate_ns: u64,
    },
    /// DARE §3.4, a change of leader in the middle of a recovery: from
    /// `from_ns` on, the first time a member is copying a snapshot, the
    /// member leading then crashes, and comes back `down_ns` later with
    /// empty memory.
    RestartLeaderWhileCopying {
        /// From.
        from_ns: u64,
        /// The leader is down this long.
        down_ns: u64,
    },
    /// DARE §3.4: the member leading at `at_ns` is asked to reconfigure
    /// the group (it may refuse: one at a time, or it does not fit; the
    /// run goes on).
    Reconfigure {
        /// When.
        at_ns: u64,
        /// What.
        op: ReconfigFault,
    },
    /// Backup-memory mode (MacR, issue 16): from `from_ns` on, the first
    /// step in which the primary starts a client write that changes the
    /// store, it crashes right after the fabric took `writes` of that
    /// write's WRITEs (its plan, or its forward, to every backup in turn):
    /// the rest are never posted. With `down_ns`, it comes back that much
    /// later with empty memory.
    CrashPrimaryMidWrite {
        /// Armed from.
        from_ns: u64,
        /// WRITEs posted before it dies.
        writes: u32,
        /// Back after this long (`None`: for good).
        down_ns: Option<u64>,
    },
    /// Backup-memory mode: from `from_ns` on, the first time the primary
    /// is in the middle of copying its store to a member (a bulk copy,
    /// after a take-over or to a member back with empty memory), that
    /// member crashes and comes back `down_ns` later with empty memory;
    /// with `kill_another`, a member that is neither the primary nor the
    /// one copied crashes for good at the same instant.
    RestartMidBulkCopy {
        /// Armed from.
        from_ns: u64,
        /// The member copied is down this long.
        down_ns: u64,
        /// Another member crashes for good too.
        kill_another: bool,
    },
    /// Extra latency on one directed link.
    Delay {
        /// Source.
        from: u8,
        /// Target.
        to: u8,
        /// From.
        from_ns: u64,
        /// Until.
        to_ns: u64,
        /// Added latency.
        extra_ns: u64,
    },
}

/// A reconfiguration the simulator asks for (DARE §3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconfigFault {
    /// Take this member out.
    Remove(u8),
    /// Take the leader of the moment out (it steps down once done).
    RemoveLeader,
    /// Put this member in (a free slot, or the next slot of a full group).
    Add(u8),
    /// Shrink to this size.
    Resize(u8),
}

impl Fault {
    /// True for faults that last forever (count against f).
    pub fn permanent(&self) -> bool {
        matches!(
            self,
            Fault::Crash { .. }
                | Fault::CrashLeader { .. }
                | Fault::Zombie { .. }
                | Fault::CrashPrimaryMidWrite { down_ns: None, .. }
                | Fault::RestartMidBulkCopy {
                    kill_another: true,
                    ..
                }
        )
    }

    /// True for faults that lose a member's state: the permanent ones and
    /// restarts with empty memory (a member that lost its log is a failure
    /// until it has caught up). The swarm keeps them within f.
    pub fn loses_state(&self) -> bool {
        self.permanent()
            || matches!(
                self,
                Fault::Restart { .. }
                    | Fault::LoseAckedLog { .. }
                    | Fault::RestartLeaderWhileCopying { .. }
                    | Fault::CrashPrimaryMidWrite { .. }
                    | Fault::RestartMidBulkCopy { .. }
            )
    }

    /// The member a fault is about, if one.
    pub fn node(&self) -> Option<u8> {
        match self {
            Fault::Crash { node, .. }
            | Fault::Restart { node, .. }
            | Fault::Zombie { node, .. }
            | Fault::Pause { node, .. } => Some(*node),
            _ => None,
        }
    }
}

/// Everything a run depends on.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The seed: same options, same run.
    pub seed: u64,
    /// Group size.
    pub members: u8,
    /// Concurrent clients (each has one operation outstanding).
    pub clients: usize,
    /// Distinct keys of each kind (values and counters).
    pub keys: usize,
    /// Per mille of operations that are GETs.
    pub read_permille: u64,
    /// Per mille that are INCRs.
    pub incr_permille: u64,
    /// Per mille that are CASes.
    pub cas_permille: u64,
    /// Per mille that are DELs (the rest are SETs).
    pub del_permille: u64,
    /// Per mille of all operations that go to the stream service (half
    /// `XADD`, half whole-stream `XRANGE`), before the key-value mix.
    pub stream_permille: u64,
    /// Largest value written.
    pub value_bytes_max: usize,
    /// Smallest value written (model runs fix the size).
    pub value_bytes_min: usize,
    /// Client think time between operations, at most.
    pub think_ns_max: u64,
    /// A client retries on another member after this long.
    pub client_timeout_ns: u64,
    /// Network model.
    pub net: NetParams,
    /// CPU time a member spends per byte of a snapshot it restores (a
    /// step that restores a piece takes that much longer: the swarm can
    /// model a state far larger than its few keys).
    pub restore_ns_per_byte: f64,
    /// Torn placement of large writes.
    pub tearing: bool,
    /// A member's step is not an instant: the pieces of a torn WRITE in
    /// flight into its memory may land in the middle of what its CPU reads
    /// (a row, a log walk, an entry being applied), and READs of it by
    /// peers are not instant snapshots either (needs `tearing`).
    pub interleaving: bool,
    /// Data of a request may be placed before that of an earlier request
    /// on the same connection (completions stay in order).
    pub reordering: bool,
    /// A crash is announced to the other members shortly after (like the
    /// host's pidfd process-exit notification on one machine).
    pub crash_notify: bool,
    /// Clock drift of each member (parts per million).
    pub drift_ppm: Vec<i64>,
    /// Faults.
    pub faults: Vec<Fault>,
    /// Faults happen before this; temporary ones are healed here.
    pub safety_ns: u64,
    /// After healing, a leader must commit a write within this.
    pub liveness_ns: u64,
    /// Configuration of every member (its `self_id` is set per member).
    pub config: Config,
    /// Log-matching snapshots every this often.
    pub snapshot_every_ns: u64,
    /// Record a human-readable trace.
    pub trace: bool,
    /// Stop the client workload at the end of the safety phase (model runs
    /// use a fixed number of operations instead).
    pub ops_limit: Option<u64>,
    /// Multicast workload (with `config.mcast_window > 0`): about this
    /// often, a random member multicasts a message. 0: none.
    pub mcast_send_period_ns: u64,
    /// Persistent multicast (`config.mcast_persistent`): how long a
    /// member's disk takes to sync what it was handed.
    pub mcast_sync_ns: u64,
    /// Large messages (with `config.rdmc_slots > 0`): about one send in
    /// this many is longer than a ring slot (up to
    /// `config.rdmc_message_bytes_max`) and goes on RDMC. 0: none.
    pub mcast_large_one_in: u64,
}

impl ClusterOptions {
    /// A fault-free run with sensible defaults.
    pub fn new(seed: u64, members: u8) -> ClusterOptions {
        let mut config = Config::new(members, MemberId(0));
        config.log_ring_bytes = 64 * 1024;
        config.entry_payload_bytes_max = 1024;
        config.session_slot_count = 64;
        // Members pruned past recover by state transfer (DARE §3.4).
        config.snapshot_bytes_max = 1 << 20;
        config.snapshot_read_bytes = 16 * 1024;
        // A restore in pieces of a record or two, paced: the swarm steps
        // through half-restored states (votes, elections, crashes in
        // between).
        config.snapshot_restore_step_bytes = 256;
        config.snapshot_restore_pause_ns = 10_000;
        config.prune_grace_ns = 20_000_000;
        config.reconnect_backoff_ns = 200_000;
        // Heartbeat counters on the simulated network's time scale.
        config.counter_increment_period_ns = 100_000;
        config.counter_read_gap_ns = 500_000;
        config.seed = seed;
        ClusterOptions {
            seed,
            members,
            clients: 3,
            keys: 4,
            read_permille: 300,
            incr_permille: 150,
            cas_permille: 100,
            del_permille: 50,
            stream_permille: 100,
            value_bytes_max: 64,
            value_bytes_min: 0,
            think_ns_max: 20_000,
            client_timeout_ns: 1_000_000,
            net: NetParams::DARE,
            restore_ns_per_byte: 1.0,
            tearing: false,
            interleaving: false,
            reordering: false,
            crash_notify: false,
            drift_ppm: vec![0; usize::from(members)],
            faults: Vec::new(),
            safety_ns: 20_000_000,
            liveness_ns: 40_000_000,
            config,
            snapshot_every_ns: 1_000_000,
            trace: false,
            ops_limit: None,
            mcast_send_period_ns: 0,
            mcast_sync_ns: 0,
            mcast_large_one_in: 4,
        }
    }

    /// Sets the mutation of every member.
    pub fn with_mutation(mut self, m: Mutation) -> Self {
        self.config.mutation = m;
        self
    }

    /// MacR's backup-memory mode (issue 16) with a small store: 256
    /// entries, 32 slabs of `slab_bytes`, bulk copies in 4 KiB WRITEs, and
    /// a write forwarded to the backups' CPUs when its allocator changes
    /// span more than two structures (it carves a slab), so that both
    /// paths run. Call it once the workload is set: the store's key and
    /// value limits are the workload's, and it carries no stream
    /// operation (the store serves the key-value service alone). Views
    /// decide the primary, so every member is a coordinator (no DARE
    /// fallback), and neither DARE's reconfigurations nor zombie removal
    /// run (the views list the members), as in primary-backup mode.
    pub fn use_backup_memory(&mut self, slab_bytes: u32) {
        let c = &mut self.config;
        c.mode = verbatim_core::Mode::BackupMemory;
        if c.lease_ns == 0 {
            c.lease_ns = 100_000;
        }
        c.coordinator_count = c.member_count;
        c.zombie_remove_ns = 0;
        c.initial_members = c.member_count;
        c.backup_entry_count = 256;
        c.backup_slab_bytes = slab_bytes;
        c.backup_slab_count = 32;
        c.backup_sync_chunk_bytes = 4096;
        c.backup_forward_threshold = 2;
        let limits = workload_limits(self.value_bytes_max);
        c.backup_key_bytes_max = limits.key_bytes_max;
        c.backup_value_bytes_max = limits.value_bytes_max;
        // The store keeps one session record per slot, the slot chosen by
        // the client's id alone (no probing): two clients that share one
        // evict each other's record, and a retry of either may be applied
        // twice (`verbatim_core::backup::StoreParams::session_count`).
        // The clients here get a slot each.
        let clients = self.clients as u64;
        for count in 64.. {
            c.session_slot_count = count;
            let geo = c.backup_store_params().geometry().expect("valid store");
            let slots: std::collections::BTreeSet<u64> =
                (1..=clients).map(|id| geo.session_offset(id)).collect();
            if slots.len() as u64 == clients {
                break;
            }
        }
        self.stream_permille = 0;
        self.faults
            .retain(|f| !matches!(f, Fault::Reconfigure { .. }));
    }
}

/// The key-value limits of the simulated workload (keys are a few bytes;
/// values at most `value_bytes_max`, and never below 16 bytes: a client
/// writes its id and request number).
pub fn workload_limits(value_bytes_max: usize) -> KvLimits {
    KvLimits {
        key_bytes_max: 32,
        value_bytes_max: (value_bytes_max as u32).max(16),
    }
}

/// What a run produced.
#[derive(Debug, Default)]
pub struct RunReport {
    /// Broken invariants.
    pub violations: Vec<Violation>,
    /// Operations answered.
    pub ops_ok: u64,
    /// Operations invoked.
    pub ops_total: u64,
    /// Terms that had a leader.
    pub terms_with_leader: usize,
    /// Committed entries observed.
    pub committed: usize,
    /// Members that needed recovery at some point.
    pub needs_recovery: u64,
    /// Snapshots donors wrote, and recoveries completed (DARE §3.4).
    pub snapshots_served: u64,
    /// Recoveries completed.
    pub recoveries: u64,
    /// Reconfigurations a leader started (DARE §3.4), and the last
    /// configuration committed.
    pub reconfigurations: u64,
    /// See `reconfigurations`.
    pub configuration: Option<verbatim_core::membership::Configuration>,
    /// Members leaders removed as silent (zombies), and added back.
    pub zombies_removed: u64,
    /// See `zombies_removed`.
    pub zombies_readded: u64,
    /// Writes leaders refused because the log was full, over all members.
    pub log_full: u64,
    /// Of `log_full`, those refused after the first member was marked for
    /// recovery.
    pub log_full_since_recovery_marked: u64,
    /// Prunes past a recovering member's snapshot (its transfer would
    /// have filled the log), over all members.
    pub recovery_holds_released: u64,
    /// True when the linearizability search gave up (budget): the seed
    /// is undecided, which is not a pass.
    pub linearizability_unknown: bool,
    /// Most search steps the linearizability checker took on one key.
    pub linearizability_steps: u64,
    /// Row copies the members refused as torn or corrupt, and log entries
    /// refused by validation (not arrived yet, or torn), over all members:
    /// how often the guarded paths ran.
    pub rows_refused: u64,
    /// See `rows_refused`.
    pub entries_refused: u64,
    /// Pieces of torn WRITEs that landed in the middle of a read (a
    /// member's, or a peer's READ) instead of at their own time.
    pub landed_mid_read: u64,
    /// Suspicions of a leader that was alive after all, and timeouts that
    /// fired late and were given a fresh window (the core's counters,
    /// summed over the members' last processes).
    pub false_suspicions: u64,
    /// See `false_suspicions`.
    pub late_timeouts_forgiven: u64,
    /// Reads a leader answered under its lease (no round of term checks),
    /// summed over the members' last processes.
    pub lease_reads: u64,
    /// Samples in which a member held an active lease.
    pub lease_samples: u64,
    /// Primary-backup mode: members that became primary by a view (no
    /// election), and DARE elections started (none in that mode), summed
    /// over the members' last processes.
    pub view_takeovers: u64,
    /// See `view_takeovers`.
    pub elections_started: u64,
    /// Primary-backup mode: operations a primary executed ahead of their
    /// commit, and times a primary that stopped leading rolled such
    /// operations back, summed like `view_takeovers`.
    pub operations_speculated: u64,
    /// See `operations_speculated`.
    pub speculation_rollbacks: u64,
    /// Multicast: data messages sent, and deliveries (over all members).
    pub mcast_sent: u64,
    /// See `mcast_sent`.
    pub mcast_delivered: u64,
    /// Multicast: members whose engine wedged (at the end).
    pub mcast_wedged: u64,
    /// Multicast: views installed after a view change (all members), and
    /// members that left their group for good (at the end).
    pub mcast_installs: u64,
    /// See `mcast_installs`.
    pub mcast_halted: u64,
    /// Restart cuts delivered after total failures of the persistent
    /// multicast (one per member that restarted into the group).
    pub mcast_restarts: u64,
    /// Multicast: processes that joined a running group.
    pub mcast_joins: u64,
    /// Multicast: large messages (on RDMC) sent, and delivered (over all
    /// members).
    pub mcast_large_sent: u64,
    /// See `mcast_large_sent`.
    pub mcast_large: u64,
    /// Multicast subgroups (`config.mcast_subgroups`): data messages sent,
    /// and deliveries (over all subgroups and members).
    pub subgroup_sent: u64,
    /// See `subgroup_sent`.
    pub subgroup_delivered: u64,
    /// Subgroups: views installed after a view change (all subgroups and
    /// members), and processes that joined a running subgroup.
    pub subgroup_installs: u64,
    /// See `subgroup_installs`.
    pub subgroup_joins: u64,
    /// Crashes of processes of members that belong to a subgroup.
    pub subgroup_member_crashes: u64,
    /// Subgroups whose final view ran whole, agreed and unwedged at the
    /// end, so that the subgroup liveness check judged it, and the
    /// (message sent in that view, member of it) pairs it checked.
    pub subgroups_judged_live: u64,
    /// See `subgroups_judged_live`.
    pub subgroup_final_deliveries_checked: u64,
    /// Suspicions of a leader whose heartbeat counter stood still (the
    /// second detector level acting), summed like `view_takeovers`.
    pub counter_suspicions: u64,
    /// Log mode with views: campaigns a decided view started, summed like
    /// `view_takeovers`.
    pub view_campaigns: u64,
    /// The newest epoch any member knows when the run ended (views
    /// decided; 0 with views off).
    pub views_decided: u64,
    /// Times a member fell a lap of the view slot ring behind and skipped
    /// ahead, summed over the members' last processes.
    pub view_slots_skipped: u64,
    /// Restarted coordinators that counted again (rejoined behind a
    /// fence), summed over the members' last processes.
    pub coordinator_rejoins: u64,
    /// Backup-memory mode: take-overs completed (each audited), copies
    /// of the store completed, writes replicated by WRITEs alone and
    /// forwarded to the backups' CPUs, and forwarded writes replayed
    /// (summed over every process).
    pub backup_takeovers: u64,
    /// See `backup_takeovers`.
    pub backup_copies: u64,
    /// See `backup_takeovers`.
    pub backup_zero_copy: u64,
    /// See `backup_takeovers`.
    pub backup_forwarded: u64,
    /// See `backup_takeovers`.
    pub backup_replays: u64,
    /// Backup-memory mode: synced copies compared byte for byte with the
    /// primary's store, and the bytes compared.
    pub backup_copies_compared: u64,
    /// See `backup_copies_compared`.
    pub backup_bytes_compared: u64,
    /// Backup-memory mode: primaries crashed in the middle of a write's
    /// WRITEs, and members crashed in the middle of a copy to them (the
    /// `CrashPrimaryMidWrite` and `RestartMidBulkCopy` faults, fired).
    pub backup_crashes_mid_write: u64,
    /// See `backup_crashes_mid_write`.
    pub backup_crashes_mid_copy: u64,
    /// The member that crashed in the middle of a copy to it, if one did.
    pub backup_crashed_mid_copy: Option<usize>,
    /// Backup-memory mode, at the end of the run: the running primary,
    /// the members of the view it follows, and the members whose copy it
    /// reports synced (itself included), a bit per member id.
    pub backup_final: Option<(usize, u64, u64)>,
    /// When the run ended (virtual ns).
    pub end_ns: u64,
    /// Each member's apply index when the run ended (None: not running).
    pub final_apply_index: Vec<Option<u64>>,
    /// When, after healing, the first write was acknowledged.
    pub first_ack_after_heal_ns: Option<u64>,
    /// Digest of every event processed: equal for equal seeds.
    pub digest: u64,
    /// Human-readable trace (when asked for).
    pub trace: Vec<String>,
    /// The client history.
    pub history: Vec<Operation>,
    /// The stream operations of the history.
    pub stream_history: Vec<StreamOperation>,
}

#[derive(Debug)]
enum ClientAnswer {
    Done(KvOutput),
    StreamDone(StreamOutput),
    Redirect(Option<MemberId>),
    Busy,
}

#[derive(Debug)]
struct ClientRequest {
    client: usize,
    request_id: u64,
    write: bool,
    stream: bool,
    payload: Vec<u8>,
}

#[derive(Debug)]
enum Ev {
    Net(NetEvent),
    Wake {
        node: usize,
        generation: u64,
    },
    ClientSend {
        client: usize,
    },
    ClientArrive {
        node: usize,
        req: ClientRequest,
    },
    ClientReply {
        client: usize,
        request_id: u64,
        answer: ClientAnswer,
    },
    ClientTimeout {
        client: usize,
        attempt: u32,
    },
    FaultStart(usize),
    FaultEnd(usize),
    Snapshot,
    Heal,
    PeerDown {
        node: usize,
        peer: MemberId,
    },
    /// A random member multicasts a message (the multicast workload).
    McastSend,
    /// A random member of a random subgroup multicasts a message in it
    /// (the subgroup workload).
    SubgroupSend,
    /// A crashed member comes back with empty memory.
    Restart {
        node: usize,
    },
    /// A member crashes, to come back after `down_ns`.
    CrashThenRestart {
        node: usize,
        down_ns: u64,
    },
    /// A member learns that a peer it saw die runs again.
    PeerUp {
        node: usize,
        peer: MemberId,
    },
    /// A multicast member's process comes back after a total failure and
    /// restarts from its log.
    McastRestart {
        node: usize,
    },
}

impl Ev {
    fn code(&self) -> u64 {
        match self {
            Ev::Net(NetEvent::Land { .. }) => 1,
            Ev::Net(NetEvent::LandWord { .. }) => 2,
            Ev::Net(NetEvent::Complete { .. }) => 3,
            Ev::Net(NetEvent::Place { .. }) => 4,
            Ev::Wake { node, .. } => 10 + *node as u64,
            Ev::ClientSend { client } => 100 + *client as u64,
            Ev::ClientArrive { node, .. } => 200 + *node as u64,
            Ev::ClientReply { client, .. } => 300 + *client as u64,
            Ev::ClientTimeout { client, .. } => 400 + *client as u64,
            Ev::FaultStart(i) => 500 + *i as u64,
            Ev::FaultEnd(i) => 600 + *i as u64,
            Ev::Snapshot => 700,
            Ev::Heal => 701,
            Ev::McastSend => 702,
            Ev::SubgroupSend => 703,
            Ev::PeerDown { node, .. } => 800 + *node as u64,
            Ev::Restart { node } => 900 + *node as u64,
            Ev::CrashThenRestart { node, .. } => 1100 + *node as u64,
            Ev::PeerUp { node, .. } => 1000 + *node as u64,
            Ev::McastRestart { node } => 1200 + *node as u64,
        }
    }
}

struct Item {
    time: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.seq) == (o.time, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> Ordering {
        // Min-heap on (time, seq): the earliest event first, FIFO on ties.
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Item>,
    seq: u64,
}

impl Queue {
    fn push(&mut self, time: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Item {
            time,
            seq: self.seq,
            ev,
        });
    }
}

impl Schedule for Queue {
    fn at(&mut self, at_ns: u64, ev: NetEvent) {
        self.push(at_ns, Ev::Net(ev));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeState {
    Running,
    Paused,
    Zombie,
    Crashed,
}

/// Where a member's answer goes: the client and its request.
#[derive(Clone, Copy, Debug)]
struct SimRoute {
    client: usize,
    request_id: u64,
    write: bool,
    /// A stream operation (its answers decode differently).
    stream: bool,
}

/// An answer as the simulated member sends it back.
#[derive(Clone, Debug)]
enum SentAnswer {
    Ok(Vec<u8>),
    NotLeader(Option<MemberId>),
    Busy,
    Refused(Refusal),
}

type SimDriver = Driver<SimMemory, RecordingKv, SimRoute>;

struct SimNode {
    driver: SimDriver,
    state: NodeState,
    busy_until: u64,
    next_wake: u64,
    wake_generation: u64,
    inbox: VecDeque<ClientRequest>,
    peer_down: Vec<MemberId>,
    peer_up: Vec<MemberId>,
    /// Persistent multicast: syncs under way (done at, local time; what
    /// they cover, and how far into the disk's records), lost if the
    /// process crashes.
    syncs: VecDeque<(u64, PersistMark, usize)>,
    /// Persistent multicast: the member's log.
    disk: crate::mcast_disk::McastDisk,
    /// Persistent multicast: the sync of a view's record under way (done
    /// at, local time; the epoch; how far into the disk's records).
    view_sync: Option<(u64, u64, usize)>,
    /// A total restart's tail, read from the log, until delivered.
    mcast_tail: Option<verbatim_driver::restart::RestartLog>,
    /// The memory its CPU reads through (a multicast engine that restarts
    /// without the log engine gets it too).
    mem_view: SimMemory,
    /// The last mark a sync was started for.
    sync_covered: Option<PersistMark>,
    /// False suspicions its log engine counted so far.
    false_suspicions: u64,
    /// The log engine's `lease_reads` after the last step observed.
    lease_reads_seen: u64,
    /// Operations its state machine executed ahead of their commit (a
    /// primary-backup primary's speculation), observed as applied once
    /// its apply index passes them, dropped if it rolls them back.
    executed_ahead: Vec<EntryId>,
    /// The log engine's `speculation_rollbacks` after the last step.
    rollbacks_seen: u64,
    /// The log engine's `log_full` after the last step observed (its
    /// counters start again at a restart).
    log_full_seen: u64,
    /// Armed by a `Restart { after_vote }` fault: crash after the step
    /// that publishes a vote newer than this (term), then come back after
    /// this long.
    crash_after_vote: Option<(u64, u64)>,
    /// Armed by a `PauseMidCopy` fault: stop in the middle of the next log
    /// WRITE posted before this time.
    stop_mid_copy_until: Option<u64>,
    /// Stopped by a `PauseMidCopy` fault (resumed at its end), with the
    /// rest of the step it was stopped in.
    paused_mid_copy: bool,
    deferred_posts: Vec<WorkRequest>,
    deferred_answers: Vec<(SimRoute, SentAnswer)>,
    drift_ppm: i64,
    commit_cursor: Option<(u64, u64)>,
}

struct Outstanding {
    /// Index in the history (the stream history when `stream`).
    op: usize,
    stream: bool,
    request_id: u64,
    write: bool,
    payload: Vec<u8>,
    attempt: u32,
}

struct Client {
    rng: SplitMix64,
    next_request: u64,
    target: usize,
    outstanding: Option<Outstanding>,
    last_seen: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

/// A running simulation.
pub struct Cluster {
    /// Armed by a `RestartLeaderWhileCopying` fault: how long the leader
    /// stays down.
    restart_leader_while_copying: Option<u64>,
    opts: ClusterOptions,
    queue: Queue,
    net: Net,
    nodes: Vec<SimNode>,
    clients: Vec<Client>,
    ring: Ring,
    limits: KvLimits,
    history: Vec<Operation>,
    stream_history: Vec<StreamOperation>,
    now: u64,
    end_ns: u64,
    healed: bool,
    first_ack_after_heal: Option<u64>,
    /// Since when the group, having shown liveness, has nothing left to
    /// finish (see the run loop).
    quiet_since: Option<u64>,
    ops_issued: u64,
    election: ElectionSafety,
    votes: OneVotePerTerm,
    vote_reliability: VoteReliability,
    suspicions: FalseSuspicionAccuracy,
    leases: crate::check::leases::LeaseSafety,
    view_agreement: crate::check::view_agreement::ViewAgreement,
    /// The newest view any member was seen to know: a record that only
    /// moves forward (a member's memory does not survive its restart, a
    /// decided view does).
    newest_view_seen: Option<(u64, verbatim_core::views::View)>,
    view_leaders: crate::check::view_leaders::ViewLeaders,
    counters: CounterAccuracy,
    committed: CommittedLog,
    /// A `Fault::PauseNamedLeader` (by index) waiting for a view.
    pause_named: Option<usize>,
    /// The member each `Fault::PauseLeader` or `PauseNamedLeader` (by
    /// index) stopped.
    paused_leaders: Vec<(usize, usize)>,
    sm_safety: StateMachineSafety,
    violations: Vec<Violation>,
    needs_recovery: u64,
    /// Writes refused for a full log (all members, all incarnations), and
    /// that count when the first member was marked for recovery.
    log_full_total: u64,
    log_full_at_first_mark: Option<u64>,
    /// The end of the run waited for a recovery under way.
    waited_for_recovery: bool,
    /// Members some leader reported as needing state transfer.
    needing_recovery: std::collections::BTreeSet<usize>,
    /// Configurations applied (DARE §3.4), and reconfigurations started.
    configurations: ConfigurationAgreement,
    reconfigurations: u64,
    /// The latest configuration in the log [`Cluster::read_log`] read last,
    /// and per member, the one in its log to its tail as last read.
    read_configuration: verbatim_core::membership::Configuration,
    /// `read_log` reads through the NIC's mapping, not the member's: no
    /// WRITE piece in flight lands in the middle of a checker's read (see
    /// `Net::place_pending_for_check`).
    read_plain: bool,
    log_configurations: Vec<verbatim_core::membership::Configuration>,
    /// Snapshots written by donors, and recoveries completed (DARE §3.4).
    snapshots_served: u64,
    recoveries: u64,
    /// `Depose` faults waiting for the next leader: (delay, length).
    depose_armed: Vec<(u64, u64)>,
    depose_rng: SplitMix64,
    trace: Vec<String>,
    digest: Checksum,
    payload_buf: Vec<u8>,
    /// The multicast history (deliveries checked as they happen).
    mcast: crate::check::multicast::McastOrder,
    mcast_durable: crate::check::multicast::McastDurable,
    mcast_rng: SplitMix64,
    /// Which sends are large, and how long (a stream of its own: a seed
    /// without RDMC sends what it sent before large messages existed).
    mcast_large_rng: SplitMix64,
    /// Large messages sent, and delivered (all members).
    mcast_large_sent: u64,
    mcast_large_delivered: u64,
    /// Processes that joined a running multicast group.
    mcast_joins: u64,
    /// Total restarts of the persistent multicast (one message per
    /// sequence number, no rollback).
    mcast_restarts: crate::check::multicast::McastRestarts,
    /// Multicast processes restarted after a total failure (their
    /// incarnations).
    mcast_generation: u64,
    /// The declared multicast subgroups (member masks, by place), each
    /// one's multicast history (checked as the top-level group's is, in
    /// member ids), and the subgroup checkers.
    subgroup_masks: Vec<u8>,
    subgroup_orders: Vec<crate::check::multicast::McastOrder>,
    subgroup_membership: crate::check::subgroups::SubgroupMembership,
    subgroup_bytes: crate::check::subgroups::SubgroupBytes,
    subgroup_liveness: crate::check::subgroups::SubgroupLiveness,
    /// Which subgroup sends, who, and what (a stream of its own: a seed
    /// without subgroups draws nothing from it).
    subgroup_rng: SplitMix64,
    /// Processes that joined a running subgroup, crashes of subgroup
    /// members' processes, and subgroups judged by the liveness check.
    subgroup_joins: u64,
    subgroup_member_crashes: u64,
    subgroups_judged_live: u64,
    /// When each member's process last started (virtual ns).
    started_at: Vec<u64>,
    /// Backup-memory mode: the store's regions, and the checkers of
    /// `check::backup`.
    backup_layout: Option<verbatim_core::backup::engine::BackupLayout>,
    backup_audit: crate::check::backup::TakeoverAudit,
    backup_copies: crate::check::backup::CopyIdentity,
    backup_replays: crate::check::backup::ReplayFailures,
    backup_dormant: crate::check::backup::DormantBackups,
    backup_outside_views: crate::check::backup::CopiesOutsideViews,
    /// Each backup engine's counters as last seen, per process.
    backup_counters: BTreeMap<(usize, u64), verbatim_core::backup::engine::BackupCounters>,
    /// Armed by a `CrashPrimaryMidWrite` fault: WRITEs to let out, and
    /// how long the primary stays down (`None`: for good).
    crash_mid_write: Option<(u32, Option<u64>)>,
    /// Armed by a `RestartMidBulkCopy` fault: how long the member copied
    /// stays down, and whether another crashes for good.
    restart_mid_copy: Option<(u64, bool)>,
    /// Primaries crashed in the middle of a write's WRITEs, and members
    /// crashed in the middle of their copy (the faults above, fired).
    backup_crashes_mid_write: u64,
    backup_crashes_mid_copy: u64,
    backup_crashed_mid_copy: Option<usize>,
}

impl Cluster {
    /// Builds the group, the clients and the fault schedule.
    pub fn new(opts: ClusterOptions) -> Cluster {
        let n = usize::from(opts.members);
        let layout = Layout::new(&opts.config).expect("simulator configuration is valid");
        let limits = workload_limits(opts.value_bytes_max);
        if opts.config.mode == verbatim_core::Mode::BackupMemory {
            // The store serves every request: what the workload sends
            // must fit it (`ClusterOptions::use_backup_memory`).
            assert!(
                opts.config.backup_key_bytes_max >= limits.key_bytes_max
                    && opts.config.backup_value_bytes_max >= limits.value_bytes_max
                    && opts.stream_permille == 0,
                "backup-memory mode: the store's limits ({} B keys, {} B values) must cover the workload's ({} B, {} B), with no stream operation",
                opts.config.backup_key_bytes_max,
                opts.config.backup_value_bytes_max,
                limits.key_bytes_max,
                limits.value_bytes_max
            );
        }
        let mut memories = Vec::new();
        let mut nodes = Vec::new();
        for i in 0..n {
            let mem = SimMemory::new(&layout);
            memories.push(mem.clone());
            // The member's CPU reads through its own view (interleaving).
            let mem = if opts.interleaving {
                mem.node_view(opts.seed ^ (0x1D7E << 8) ^ i as u64, INTERLEAVE_ONE_IN)
            } else {
                mem
            };
            let mut cfg = opts.config.clone();
            cfg.self_id = MemberId(i as u8);
            cfg.incarnation = 1;
            // A GET's value or a whole stream (XRANGE - +).
            let read_bytes_max = (limits.value_bytes_max as usize + 1).max(1 << 20);
            let driver = Driver::new(
                cfg,
                mem.clone(),
                RecordingKv::new(limits),
                0,
                read_bytes_max,
            )
            .expect("valid config");
            nodes.push(SimNode {
                driver,
                state: NodeState::Running,
                busy_until: 0,
                next_wake: u64::MAX,
                wake_generation: 0,
                inbox: VecDeque::new(),
                peer_down: Vec::new(),
                peer_up: Vec::new(),
                syncs: VecDeque::new(),
                sync_covered: None,
                disk: Default::default(),
                view_sync: None,
                mcast_tail: None,
                mem_view: mem,
                false_suspicions: 0,
                lease_reads_seen: 0,
                executed_ahead: Vec::new(),
                rollbacks_seen: 0,
                log_full_seen: 0,
                crash_after_vote: None,
                stop_mid_copy_until: None,
                paused_mid_copy: false,
                deferred_posts: Vec::new(),
                deferred_answers: Vec::new(),
                drift_ppm: opts.drift_ppm.get(i).copied().unwrap_or(0),
                commit_cursor: None,
            });
        }
        let mut net = Net::new(opts.net, &layout, memories, opts.seed);
        net.interleave_reads = opts.interleaving;
        if opts.tearing {
            net.faults.push(Box::new(Tearing));
        }
        if opts.reordering {
            net.faults.push(Box::new(Reordering));
        }
        let all: Vec<u8> = (0..opts.members).collect();
        let mut cuts = Cuts::default();
        for f in &opts.faults {
            match f {
                Fault::Partition {
                    side,
                    from_ns,
                    to_ns,
                    symmetric,
                } => {
                    for &a in side {
                        for &b in all.iter().filter(|b| !side.contains(b)) {
                            cuts.0.push(LinkWindow {
                                from: a,
                                to: b,
                                start_ns: *from_ns,
                                end_ns: *to_ns,
                            });
                            if *symmetric {
                                cuts.0.push(LinkWindow {
                                    from: b,
                                    to: a,
                                    start_ns: *from_ns,
                                    end_ns: *to_ns,
                                });
                            }
                        }
                    }
                }
                Fault::Delay {
                    from,
                    to,
                    from_ns,
                    to_ns,
                    extra_ns,
                } => net.faults.push(Box::new(DelaySpike {
                    window: LinkWindow {
                        from: *from,
                        to: *to,
                        start_ns: *from_ns,
                        end_ns: *to_ns,
                    },
                    extra_ns: *extra_ns,
                })),
                _ => {}
            }
        }
        net.faults.push(Box::new(cuts));
        let mut seeder = SplitMix64::new(opts.seed ^ 0x00C1_1E17);
        let clients = (0..opts.clients)
            .map(|_| Client {
                rng: SplitMix64::new(seeder.next_u64()),
                next_request: 1,
                target: seeder.range_inclusive(0, n as u64 - 1) as usize,
                outstanding: None,
                last_seen: BTreeMap::new(),
            })
            .collect();
        let end_ns = opts.safety_ns + opts.liveness_ns;
        let seed = opts.seed;
        let opts_config = opts.config.clone();
        let initial_members = opts.config.initial_members;
        let n_members = usize::from(opts.members);
        // The places in use (they come first), with the multicast on.
        let subgroup_masks: Vec<u8> = if opts.config.mcast_window > 0 {
            opts.config
                .mcast_subgroups
                .iter()
                .copied()
                .take_while(|&m| m != 0)
                .collect()
        } else {
            Vec::new()
        };
        Cluster {
            restart_leader_while_copying: None,
            ring: Ring::new(&layout.log),
            payload_buf: vec![0u8; opts.config.entry_payload_bytes_max as usize],
            opts,
            queue: Queue::default(),
            net,
            nodes,
            clients,
            limits,
            history: Vec::new(),
            stream_history: Vec::new(),
            now: 0,
            end_ns,
            healed: false,
            first_ack_after_heal: None,
            quiet_since: None,
            ops_issued: 0,
            election: ElectionSafety::default(),
            votes: OneVotePerTerm::default(),
            vote_reliability: VoteReliability::default(),
            suspicions: FalseSuspicionAccuracy::default(),
            leases: Default::default(),
            view_agreement: Default::default(),
            newest_view_seen: None,
            view_leaders: Default::default(),
            counters: CounterAccuracy::default(),
            committed: CommittedLog::default(),
            paused_leaders: Vec::new(),
            pause_named: None,
            sm_safety: StateMachineSafety::default(),
            violations: Vec::new(),
            needs_recovery: 0,
            log_full_total: 0,
            log_full_at_first_mark: None,
            waited_for_recovery: false,
            needing_recovery: Default::default(),
            configurations: ConfigurationAgreement::initial(
                verbatim_core::membership::Configuration::initial(initial_members),
            ),
            reconfigurations: 0,
            read_configuration: verbatim_core::membership::Configuration::initial(initial_members),
            read_plain: false,
            log_configurations: vec![
                verbatim_core::membership::Configuration::initial(
                    initial_members
                );
                n_members
            ],
            snapshots_served: 0,
            recoveries: 0,
            depose_armed: Vec::new(),
            depose_rng: SplitMix64::new(seed ^ 0x4445_504F),
            trace: Vec::new(),
            digest: Checksum::new(0x0053_494D),
            mcast: crate::check::multicast::McastOrder::new(),
            mcast_durable: crate::check::multicast::McastDurable::default(),
            mcast_rng: SplitMix64::new(seed ^ 0x4D43_4153),
            mcast_large_rng: SplitMix64::new(seed ^ 0x004C_4152_4745), // "LARGE"
            mcast_large_sent: 0,
            mcast_large_delivered: 0,
            mcast_joins: 0,
            mcast_restarts: Default::default(),
            mcast_generation: 0,
            subgroup_orders: subgroup_masks
                .iter()
                .map(|_| crate::check::multicast::McastOrder::new())
                .collect(),
            subgroup_membership: crate::check::subgroups::SubgroupMembership::new(&subgroup_masks),
            subgroup_bytes: crate::check::subgroups::SubgroupBytes::new(&subgroup_masks),
            subgroup_liveness: Default::default(),
            subgroup_masks,
            subgroup_rng: SplitMix64::new(seed ^ 0x5355_4247_5253), // "SUBGRS"
            subgroup_joins: 0,
            subgroup_member_crashes: 0,
            subgroups_judged_live: 0,
            started_at: vec![0; n_members],
            backup_layout: verbatim_core::backup::engine::BackupLayout::for_config(&opts_config),
            backup_audit: Default::default(),
            backup_copies: Default::default(),
            backup_replays: Default::default(),
            backup_dormant: Default::default(),
            backup_outside_views: Default::default(),
            backup_counters: BTreeMap::new(),
            crash_mid_write: None,
            restart_mid_copy: None,
            backup_crashes_mid_write: 0,
            backup_crashes_mid_copy: 0,
            backup_crashed_mid_copy: None,
        }
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if self.opts.trace {
            let l = line();
            self.trace
                .push(format!("[{:>10.3} µs] {l}", self.now as f64 / 1e3));
        }
    }

    fn violation(&mut self, v: Violation) {
        self.log(|| format!("VIOLATION {v}"));
        self.violations.push(v);
    }

    fn local(&self, i: usize, t: u64) -> u64 {
        let ppm = i128::from(self.nodes[i].drift_ppm);
        (i128::from(t) + i128::from(t) * ppm / 1_000_000).max(0) as u64
    }

    fn global(&self, i: usize, local: u64) -> u64 {
        if local == u64::MAX {
            return u64::MAX;
        }
        let ppm = i128::from(self.nodes[i].drift_ppm);
        let g = (i128::from(local) * 1_000_000).div_euclid(1_000_000 + ppm) + 1;
        g.clamp(0, i128::from(u64::MAX)) as u64
    }

    fn wake(&mut self, i: usize, at: u64) {
        if at == u64::MAX {
            return;
        }
        let at = at.max(self.now);
        let n = &mut self.nodes[i];
        if at < n.next_wake {
            n.next_wake = at;
            n.wake_generation += 1;
            let generation = n.wake_generation;
            self.queue.push(
                at,
                Ev::Wake {
                    node: i,
                    generation,
                },
            );
        }
    }

    /// Runs to the end and checks everything.
    pub fn run(mut self) -> RunReport {
        let n = self.nodes.len();
        for i in 0..n {
            self.wake(i, 0);
        }
        for c in 0..self.clients.len() {
            let t = self.clients[c].rng.range_inclusive(0, 100_000);
            self.queue.push(t, Ev::ClientSend { client: c });
        }
        for (k, f) in self.opts.faults.clone().iter().enumerate() {
            let (start, end) = match f {
                Fault::Crash { at_ns, .. }
                | Fault::CrashLeader { at_ns }
                | Fault::Zombie { at_ns, .. }
                | Fault::Restart { at_ns, .. }
                | Fault::McastTotalRestart { at_ns, .. } => (*at_ns, None),
                Fault::Depose { from_ns, .. } => (*from_ns, None),
                Fault::IsolateLeader { from_ns, .. } => (*from_ns, None),
                Fault::LoseAckedLog { from_ns, .. } => (*from_ns, None),
                Fault::RestartLeaderWhileCopying { from_ns, .. } => (*from_ns, None),
                Fault::CrashPrimaryMidWrite { from_ns, .. }
                | Fault::RestartMidBulkCopy { from_ns, .. } => (*from_ns, None),
                Fault::Reconfigure { at_ns, .. } => (*at_ns, None),
                Fault::Pause { from_ns, to_ns, .. }
                | Fault::PauseLeader { from_ns, to_ns }
                | Fault::PauseNamedLeader { from_ns, to_ns }
                | Fault::PauseMidCopy { from_ns, to_ns, .. }
                | Fault::Partition { from_ns, to_ns, .. }
                | Fault::Delay { from_ns, to_ns, .. } => (*from_ns, Some(*to_ns)),
            };
            self.queue.push(start, Ev::FaultStart(k));
            if let Some(e) = end {
                self.queue.push(e, Ev::FaultEnd(k));
            }
        }
        self.queue.push(self.opts.snapshot_every_ns, Ev::Snapshot);
        self.queue.push(self.opts.safety_ns, Ev::Heal);
        if self.opts.mcast_send_period_ns > 0 && self.opts.config.mcast_window > 0 {
            self.queue
                .push(self.opts.mcast_send_period_ns, Ev::McastSend);
            if !self.subgroup_masks.is_empty() {
                let first = self
                    .subgroup_rng
                    .range_inclusive(1, 2 * self.opts.mcast_send_period_ns);
                self.queue.push(first, Ev::SubgroupSend);
            }
        }

        // A run that stops advancing in time (events scheduled at the same
        // instant over and over: a member that asks to be called again at
        // once forever) would hang the swarm; it is a violation instead.
        let (mut same_instant, mut last_time) = (0u64, u64::MAX);
        while let Some(item) = self.queue.heap.pop() {
            if item.time > self.end_ns {
                break;
            }
            if item.time == last_time {
                same_instant += 1;
                if same_instant > 1_000_000 {
                    let ev = format!("{:?}", item.ev);
                    self.violation(Violation {
                        invariant: "simulation progress",
                        time_ns: item.time,
                        detail: format!(
                            "a million events at one instant, the last {}",
                            &ev[..ev.len().min(200)]
                        ),
                    });
                    break;
                }
            } else {
                (same_instant, last_time) = (0, item.time);
            }
            self.now = item.time;
            self.digest.word(item.time);
            self.digest.word(item.ev.code());
            self.dispatch(item.ev);
            if let Some(t) = self.first_ack_after_heal {
                // Liveness shown; let the group settle a little, then stop:
                // once no change of the group is between phases and (with
                // zombie removal) no running member is away, since the
                // checks at the end need the time to finish those.
                let zombies_off = self.opts.config.zombie_remove_ns == 0;
                let recovering = self.recovery_under_way();
                self.waited_for_recovery |= recovering;
                let quiet = self.configuration_settled()
                    && (zombies_off || !self.running_member_away())
                    && !recovering;
                if !quiet {
                    self.quiet_since = None;
                    self.end_ns = self.opts.safety_ns + self.opts.liveness_ns;
                } else {
                    // After a recovery, the time to catch up counts from
                    // its end.
                    let since = *self.quiet_since.get_or_insert(
                        if zombies_off && !self.waited_for_recovery {
                            t
                        } else {
                            self.now.max(t)
                        },
                    );
                    self.end_ns = self.end_ns.min(since + 2_000_000);
                }
            }
        }
        self.finish()
    }

    /// True when the configuration committed last is stable (no change of
    /// the group is between phases).
    fn configuration_settled(&self) -> bool {
        self.configurations
            .latest()
            .is_none_or(|c| c.state == verbatim_core::membership::ConfigState::Stable)
    }

    /// A running member copies or restores a snapshot, or a running
    /// leader marks a running member for recovery (it has not started, or
    /// waits between two attempts): the checks at the end (every member
    /// caught up) need the time to let it finish.
    fn recovery_under_way(&self) -> bool {
        let running = |n: &SimNode| n.state == NodeState::Running;
        let marked = self
            .nodes
            .iter()
            .filter(|n| running(n) && n.driver.log().role() == Role::Leader)
            .fold(0u64, |m, n| m | n.driver.log().published_row().recover_mask);
        self.nodes.iter().enumerate().any(|(i, n)| {
            running(n)
                && (n.driver.log().recovery_status().active
                    || marked & Row::recover_bit(MemberId(i as u8)) != 0)
        })
    }

    /// True when the configuration committed last marks a running
    /// member away (removed as a zombie, not added back yet).
    fn running_member_away(&self) -> bool {
        self.configurations.latest().is_some_and(|c| {
            c.away.iter().any(|m| {
                self.nodes
                    .get(m.index())
                    .is_some_and(|n| n.state == NodeState::Running)
            })
        })
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Net(ne) => {
                if let Some(m) = self.net.handle(&mut self.queue, self.now, ne) {
                    self.wake(m, self.now);
                }
            }
            Ev::Wake { node, generation } => {
                if self.nodes[node].wake_generation == generation {
                    self.nodes[node].next_wake = u64::MAX;
                    self.step(node);
                }
            }
            Ev::ClientSend { client } => self.client_new_op(client),
            Ev::McastSend => self.mcast_send(),
            Ev::SubgroupSend => self.subgroup_send(),
            Ev::ClientArrive { node, req } => {
                if self.nodes[node].state != NodeState::Crashed {
                    self.nodes[node].inbox.push_back(req);
                    self.wake(node, self.now);
                }
            }
            Ev::ClientReply {
                client,
                request_id,
                answer,
            } => self.client_reply(client, request_id, answer),
            Ev::ClientTimeout { client, attempt } => {
                let matches = self.clients[client]
                    .outstanding
                    .as_ref()
                    .is_some_and(|o| o.attempt == attempt);
                if matches {
                    let n = self.nodes.len();
                    let c = &mut self.clients[client];
                    c.target = (c.target + 1) % n;
                    c.outstanding.as_mut().unwrap().attempt += 1;
                    self.client_send(client);
                }
            }
            Ev::FaultStart(k) => self.fault_start(k),
            Ev::FaultEnd(k) => self.fault_end(k),
            Ev::Snapshot => {
                self.snapshot();
                self.queue
                    .push(self.now + self.opts.snapshot_every_ns, Ev::Snapshot);
            }
            Ev::PeerDown { node, peer } => {
                if self.nodes[node].state != NodeState::Crashed {
                    self.nodes[node].peer_down.push(peer);
                    self.wake(node, self.now);
                }
            }
            Ev::PeerUp { node, peer } => {
                if self.nodes[node].state != NodeState::Crashed {
                    self.nodes[node].peer_up.push(peer);
                    self.wake(node, self.now);
                }
            }
            Ev::Restart { node } => self.restart_node(node),
            Ev::McastRestart { node } => self.mcast_restart(node),
            Ev::CrashThenRestart { node, down_ns } => {
                if self.nodes[node].state == NodeState::Running {
                    self.crash_node(node);
                    self.queue.push(self.now + down_ns, Ev::Restart { node });
                }
            }
            Ev::Heal => {
                self.healed = true;
                self.log(|| "heal: temporary faults are over; liveness phase".to_string());
            }
        }
    }

    fn fault_start(&mut self, k: usize) {
        let f = self.opts.faults[k].clone();
        self.log(|| format!("fault: {f:?}"));
        match f {
            Fault::Crash { node, .. } => self.crash_node(usize::from(node)),
            Fault::CrashLeader { .. } => {
                if let Some(l) = self.leader_now() {
                    self.log(|| format!("fault: leader {l} crashes"));
                    self.crash_node(l);
                }
            }
            Fault::Restart {
                node,
                down_ns,
                after_vote,
                ..
            } => {
                let i = usize::from(node);
                if self.nodes[i].state != NodeState::Running {
                    // (Stopped or gone already: the swarm keeps state
                    // losses within f, this one does not happen.)
                } else if after_vote {
                    let voted = self.nodes[i].driver.log().published_row();
                    let term = voted.vote.term.max(voted.private_vote.term);
                    self.nodes[i].crash_after_vote = Some((term, down_ns));
                } else {
                    self.crash_node(i);
                    self.queue.push(self.now + down_ns, Ev::Restart { node: i });
                }
            }
            Fault::RestartLeaderWhileCopying { down_ns, .. } => {
                self.restart_leader_while_copying = Some(down_ns);
            }
            Fault::CrashPrimaryMidWrite {
                writes, down_ns, ..
            } => self.crash_mid_write = Some((writes, down_ns)),
            Fault::RestartMidBulkCopy {
                down_ns,
                kill_another,
                ..
            } => self.restart_mid_copy = Some((down_ns, kill_another)),
            Fault::McastTotalRestart { stagger_ns, .. } => self.mcast_total_crash(stagger_ns),
            Fault::Zombie { node, .. } => {
                self.counters.stopped(usize::from(node), self.now);
                self.suspicions
                    .stopped_for_good(usize::from(node), self.now);
                self.nodes[usize::from(node)].state = NodeState::Zombie
            }
            Fault::Pause { node, .. } => {
                let n = &mut self.nodes[usize::from(node)];
                if n.state == NodeState::Running {
                    n.state = NodeState::Paused;
                    self.counters.stopped(usize::from(node), self.now);
                }
            }
            Fault::PauseLeader { .. } => {
                if let Some(l) = self.leader_now() {
                    self.log(|| format!("fault: leader {l} stops"));
                    self.pause_for_fault(k, l);
                }
            }
            Fault::PauseNamedLeader { .. } => self.pause_named = Some(k),
            Fault::PauseMidCopy { to_ns, .. } => {
                let leader = (0..self.nodes.len()).find(|&i| {
                    self.nodes[i].state == NodeState::Running
                        && self.nodes[i].driver.log().role() == Role::Leader
                });
                if let Some(w) = leader {
                    self.nodes[w].stop_mid_copy_until = Some(to_ns);
                }
            }
            Fault::Depose {
                delay_ns, for_ns, ..
            } => self.depose_armed.push((delay_ns, for_ns)),
            Fault::IsolateLeader {
                to_ns, companions, ..
            } => self.isolate_leader(to_ns, usize::from(companions)),
            Fault::LoseAckedLog {
                lag_ns,
                down_ns,
                isolate_ns,
                ..
            } => self.lose_acked_log(lag_ns, down_ns, isolate_ns),
            Fault::Reconfigure { op, .. } => self.reconfigure(op),
            Fault::Partition { .. } | Fault::Delay { .. } => {}
        }
    }

    /// The running member that leads the highest term, if any.
    fn leader_now(&self) -> Option<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i].state == NodeState::Running
                    && self.nodes[i].driver.log().role() == Role::Leader
            })
            .max_by_key(|&i| self.nodes[i].driver.log().term())
    }

    /// Asks the leader of the moment for `op` (DARE §3.4).
    fn reconfigure(&mut self, op: ReconfigFault) {
        let Some(leader) = self.leader_now() else {
            self.log(|| format!("reconfigure {op:?}: no leader"));
            return;
        };
        let op = match op {
            ReconfigFault::Remove(m) => ReconfigOp::Remove(MemberId(m)),
            ReconfigFault::RemoveLeader => ReconfigOp::Remove(MemberId(leader as u8)),
            ReconfigFault::Add(m) => ReconfigOp::Add(MemberId(m)),
            ReconfigFault::Resize(s) => ReconfigOp::Resize(s),
        };
        let local = self.local(leader, self.now);
        let r = self.nodes[leader].driver.log_mut().reconfigure(local, op);
        self.log(|| format!("node {leader}: reconfigure {op:?}: {r:?}"));
        if r.is_ok() {
            self.reconfigurations += 1;
        }
        self.wake(leader, self.now);
    }

    fn isolate_leader(&mut self, to_ns: u64, companions: usize) {
        let n = self.nodes.len();
        let Some(leader) = self.leader_now() else {
            return;
        };
        let mut side = vec![leader];
        while side.len() < (companions + 1).min(n - 1) {
            let m = self.depose_rng.range_inclusive(0, n as u64 - 1) as usize;
            if !side.contains(&m) {
                side.push(m);
            }
        }
        self.log(|| format!("fault: leader {leader} isolated with {side:?} until {to_ns} ns"));
        for &a in &side {
            for b in (0..n).filter(|b| !side.contains(b)) {
                for (from, to) in [(a, b), (b, a)] {
                    self.net.late_cuts.0.push(LinkWindow {
                        from: from as u8,
                        to: to as u8,
                        start_ns: self.now,
                        end_ns: to_ns,
                    });
                }
            }
        }
    }

    fn cut_between(&mut self, a: &[usize], b: &[usize], start_ns: u64, end_ns: u64) {
        let end_ns = end_ns.min(self.opts.safety_ns);
        for &x in a {
            for &y in b {
                for (from, to) in [(x, y), (y, x)] {
                    self.net.late_cuts.0.push(LinkWindow {
                        from: from as u8,
                        to: to as u8,
                        start_ns,
                        end_ns,
                    });
                }
            }
        }
    }

    fn lose_acked_log(&mut self, lag_ns: u64, down_ns: u64, isolate_ns: u64) {
        let n = self.nodes.len();
        let Some(leader) = self.leader_now() else {
            return;
        };
        let others: Vec<usize> = (0..n)
            .filter(|&i| i != leader && self.nodes[i].state == NodeState::Running)
            .collect();
        if others.len() < 2 {
            return;
        }
        let keeper = others[self.depose_rng.range_inclusive(0, others.len() as u64 - 1) as usize];
        let lagging: Vec<usize> = others.iter().copied().filter(|&i| i != keeper).collect();
        let now = self.now;
        self.log(|| {
            format!(
                "fault: {lagging:?} lag behind leader {leader} and keeper {keeper}, which restarts"
            )
        });
        self.cut_between(&lagging, &[leader, keeper], now, now + lag_ns);
        self.queue.push(
            now + lag_ns / 2,
            Ev::CrashThenRestart {
                node: keeper,
                down_ns,
            },
        );
        let all_but: Vec<usize> = (0..n).filter(|&i| i != leader).collect();
        self.cut_between(&[leader], &all_but, now + lag_ns, now + lag_ns + isolate_ns);
    }

    /// The member's process and memory are gone (told to the others
    /// shortly after when crashes are announced).
    fn crash_node(&mut self, node: usize) {
        // A crashed process acts on no lease any more.
        let _ = self.leases.observe(self.now, node, None);
        self.counters.stopped(node, self.now);
        self.suspicions.stopped_for_good(node, self.now);
        self.nodes[node].state = NodeState::Crashed;
        if self.subgroup_masks.iter().any(|&m| m & (1 << node) != 0) {
            self.subgroup_member_crashes += 1;
        }
        self.nodes[node].disk.crash();
        self.nodes[node].view_sync = None;
        self.net.crash(node);
        if self.opts.crash_notify {
            for other in 0..self.nodes.len() {
                if other != node {
                    let delay = 1_000 + 10_000 * (other as u64 % 5);
                    self.queue.push(
                        self.now + delay,
                        Ev::PeerDown {
                            node: other,
                            peer: MemberId(node as u8),
                        },
                    );
                }
            }
        }
    }

    /// Persistent multicast: restarts `engine` (member `i`'s, new) from
    /// member `i`'s log, if it holds a view; returns the tail it may
    /// deliver.
    fn restart_from_disk(
        &mut self,
        i: usize,
        engine: Option<&mut verbatim_core::multicast::McastEngine<SimMemory>>,
    ) -> Option<verbatim_driver::restart::RestartLog> {
        if !self.opts.config.mcast_persistent {
            return None;
        }
        let engine = engine?;
        let (point, tail) = self.nodes[i].disk.recover()?;
        if let Err(e) = engine.restart(point) {
            panic!("node {i}: a restart point of its own log refused: {e:?}");
        }
        let members = engine.members();
        self.log(|| {
            format!(
                "node {i}: multicast restarts from its log: epoch {}, members {:#b}, on disk {:?}, delivered {}",
                point.epoch,
                point.view,
                &point.persisted[..members],
                point.delivered
            )
        });
        Some(tail)
    }

    /// Derecho's total failure: every multicast member's process dies at
    /// once (what its disk had not synced is lost; its in-flight WRITEs
    /// never land, their completions go nowhere, its region is registered
    /// afresh), and comes back within `stagger_ns`.
    fn mcast_total_crash(&mut self, stagger_ns: u64) {
        let Some(region) =
            verbatim_core::multicast::McastLayout::new(&self.opts.config).map(|l| l.region())
        else {
            return;
        };
        let is_mcast = |wr_id: verbatim_core::fabric::WrId| {
            verbatim_core::engine::EngineTag::split(wr_id).0
                == verbatim_core::engine::EngineTag::MULTICAST
        };
        let members = usize::from(self.opts.config.initial_members).min(self.nodes.len());
        for i in 0..members {
            let n = &mut self.nodes[i];
            n.driver.replace_multicast(None);
            n.disk.crash();
            n.view_sync = None;
            n.syncs.clear();
            n.sync_covered = None;
            n.mcast_tail = None;
            self.net
                .restart_region(i, region, |c: &Completion| is_mcast(c.wr_id));
            let back = self.mcast_rng.range_inclusive(0, stagger_ns);
            self.queue
                .push(self.now + back, Ev::McastRestart { node: i });
        }
        self.queue.heap.retain(|item| {
            !matches!(&item.ev, Ev::Net(NetEvent::Complete { src, completion, .. })
                if *src < members && is_mcast(completion.wr_id))
        });
        self.mcast_restarts.crashed_all();
        self.log(|| "fault: every multicast member's process dies".to_string());
    }

    /// A multicast member's process comes back after a total failure: a
    /// new engine (new incarnation) restarts from its log. (A member
    /// crashed meanwhile restarts with its node.)
    fn mcast_restart(&mut self, i: usize) {
        if self.nodes[i].state == NodeState::Crashed
            || self.nodes[i].driver.engines().multicast.is_some()
        {
            return;
        }
        self.mcast_generation += 1;
        let mut cfg = self.opts.config.clone();
        cfg.self_id = MemberId(i as u8);
        cfg.incarnation = (self.mcast_generation << 16) | 0xFFFF;
        let local = self.local(i, self.now);
        let mut engine =
            verbatim_core::multicast::McastEngine::new(&cfg, self.nodes[i].mem_view.clone(), local);
        let tail = self.restart_from_disk(i, engine.as_mut());
        self.nodes[i].driver.replace_multicast(engine);
        self.nodes[i].mcast_tail = tail;
        self.wake(i, self.now);
    }

    /// A crashed member comes back as a new process: zeroed memory, its
    /// id, its configuration; it reads its row back from its peers before
    /// it publishes anything (the core's startup), and applies from the
    /// start again as the leader refills its log.
    fn restart_node(&mut self, i: usize) {
        if self.nodes[i].state != NodeState::Crashed {
            return;
        }
        self.configurations.restarted(i);
        let layout = Layout::new(&self.opts.config).expect("simulator configuration is valid");
        let mem = SimMemory::new(&layout);
        let incarnation = self.net.nic(i).incarnation + 1;
        let mut cfg = self.opts.config.clone();
        cfg.self_id = MemberId(i as u8);
        // A new process draws new timeouts.
        cfg.seed ^= incarnation << 40;
        cfg.incarnation = incarnation + 1;
        let read_bytes_max = (self.limits.value_bytes_max as usize + 1).max(1 << 20);
        let local = self.local(i, self.now);
        let view = if self.opts.interleaving {
            mem.node_view(
                self.opts.seed ^ (0x1D7E << 8) ^ i as u64 ^ (incarnation << 32),
                INTERLEAVE_ONE_IN,
            )
        } else {
            mem.clone()
        };
        let mut driver = Driver::new(
            cfg,
            view.clone(),
            RecordingKv::new(self.limits),
            local,
            read_bytes_max,
        )
        .expect("valid config");
        self.net.restart(i, mem, &layout);
        // Persistent multicast: the new process restarts from its log (it
        // joins the group if that runs on; see `McastEngine::restart`).
        let tail = self.restart_from_disk(i, driver.multicast_mut());
        let n = &mut self.nodes[i];
        n.driver = driver;
        n.mem_view = view;
        n.mcast_tail = tail;
        n.state = NodeState::Running;
        n.busy_until = self.now;
        n.next_wake = u64::MAX;
        n.wake_generation += 1;
        n.inbox.clear();
        n.peer_down.clear();
        n.peer_up.clear();
        // Syncs under way died with the process (what they covered may
        // or may not be on disk: the checker counts only completed ones).
        n.syncs.clear();
        n.sync_covered = None;
        n.false_suspicions = 0;
        n.lease_reads_seen = 0;
        n.executed_ahead.clear();
        n.rollbacks_seen = 0;
        n.log_full_seen = 0;
        n.crash_after_vote = None;
        n.stop_mid_copy_until = None;
        n.paused_mid_copy = false;
        n.deferred_posts.clear();
        n.deferred_answers.clear();
        n.commit_cursor = None;
        self.started_at[i] = self.now;
        // It applies and learns commits from the start again.
        self.sm_safety.restart(i);
        self.committed.restart(i);
        self.counters.resumed(i, self.now);
        self.suspicions.restarted(i);
        self.log(|| format!("restart: node {i} is back with empty memory"));
        if self.opts.crash_notify {
            for other in (0..self.nodes.len()).filter(|&o| o != i) {
                self.queue.push(
                    self.now + 1_000,
                    Ev::PeerUp {
                        node: other,
                        peer: MemberId(i as u8),
                    },
                );
            }
        }
        self.wake(i, self.now);
    }

    /// A member won an election: an armed `Depose` fault cuts it off.
    fn depose(&mut self, leader: usize) {
        let Some((delay_ns, for_ns)) = self.depose_armed.pop() else {
            return;
        };
        let end_ns = (self.now + delay_ns + for_ns).min(self.opts.safety_ns);
        for other in 0..self.nodes.len() {
            if other == leader {
                continue;
            }
            let start_ns = self.now + self.depose_rng.range_inclusive(0, delay_ns);
            self.log(|| format!("fault: link {leader}-{other} cut from {start_ns} to {end_ns} ns"));
            for (from, to) in [(leader, other), (other, leader)] {
                self.net.late_cuts.0.push(LinkWindow {
                    from: from as u8,
                    to: to as u8,
                    start_ns,
                    end_ns,
                });
            }
        }
    }

    fn fault_end(&mut self, k: usize) {
        let f = self.opts.faults[k].clone();
        self.log(|| format!("fault over: {f:?}"));
        if self.pause_named == Some(k) {
            // No view named anyone in time.
            self.pause_named = None;
        }
        if let Fault::PauseMidCopy { .. } = f {
            for i in 0..self.nodes.len() {
                self.nodes[i].stop_mid_copy_until = None;
                if std::mem::take(&mut self.nodes[i].paused_mid_copy) {
                    self.resume_mid_copy(i);
                }
            }
        }
        let paused = match f {
            Fault::Pause { node, .. } => Some(usize::from(node)),
            Fault::PauseLeader { .. } | Fault::PauseNamedLeader { .. } => self
                .paused_leaders
                .iter()
                .find(|(fault, _)| *fault == k)
                .map(|(_, node)| *node),
            _ => None,
        };
        if let Some(i) = paused {
            // One stopped in the middle of a copy resumes with that fault.
            if self.nodes[i].state == NodeState::Paused && !self.nodes[i].paused_mid_copy {
                self.nodes[i].state = NodeState::Running;
                self.counters.resumed(i, self.now);
                self.wake(i, self.now);
            }
        }
    }

    /// The multicast workload: a random running member multicasts a
    /// message naming itself and a counter; the next one is scheduled
    /// until the safety phase ends. With RDMC on, about one in
    /// `mcast_large_one_in` is longer than a ring slot (the driver sends
    /// it on RDMC), its every 8-byte word distinct, so that a chunk
    /// placed at another offset or from another message shows.
    fn mcast_send(&mut self) {
        let n = self.nodes.len() as u64;
        let i = self.mcast_rng.range_inclusive(0, n - 1) as usize;
        if self.nodes[i].state == NodeState::Running {
            let tag = self.mcast.sent_total;
            let len = self.mcast_rng.range_inclusive(0, 24) as usize;
            let slot_bytes = u64::from(self.opts.config.mcast_payload_bytes_max);
            let large_len = (self.opts.config.rdmc_slots > 0
                && self.opts.mcast_large_one_in > 0
                && self.mcast_large_rng.chance(1, self.opts.mcast_large_one_in))
            .then(|| {
                self.mcast_large_rng
                    .range_inclusive(slot_bytes + 1, self.opts.config.rdmc_message_bytes_max)
                    as usize
            });
            let mut payload = tag.to_le_bytes().to_vec();
            match large_len {
                None => {
                    payload.extend((0..len).map(|k| (tag as u8).wrapping_add(k as u8)));
                    payload.truncate(slot_bytes as usize);
                }
                Some(large) => {
                    let mut k = 1u64;
                    while payload.len() < large {
                        payload.extend((tag << 24 | k).to_le_bytes());
                        k += 1;
                    }
                    payload.truncate(large);
                }
            }
            let driver = &mut self.nodes[i].driver;
            let who = driver
                .engines()
                .multicast
                .as_ref()
                .map(|m| (m.incarnation(), m.epoch()));
            if let (Ok(index), Some((inc, epoch))) = (driver.multicast_send(&payload), who) {
                self.log(|| {
                    format!(
                        "node {i}: multicast {index} in epoch {epoch} ({} bytes)",
                        payload.len()
                    )
                });
                self.mcast.sent(i, inc, epoch, index, &payload);
                self.mcast_large_sent += u64::from(large_len.is_some());
                self.wake(i, self.now);
            }
        }
        let next = self.now
            + self
                .mcast_rng
                .range_inclusive(1, 2 * self.opts.mcast_send_period_ns);
        if next < self.opts.safety_ns {
            self.queue.push(next, Ev::McastSend);
        }
    }

    /// Records a member's multicast receipts after its step, then checks
    /// the deliveries of that step.
    fn observe_multicast(
        &mut self,
        i: usize,
        before: Option<McastSeen>,
        delivered: Vec<(McastDelivery, Vec<u8>)>,
    ) {
        let Some(m) = self.nodes[i].driver.engines().multicast.as_ref() else {
            return;
        };
        let (Some(after), inc) = (McastSeen::of(m), m.incarnation()) else {
            return;
        };
        // The view the step began in (an engine that started in this
        // step began in the one it is in now: a process that joined a
        // running group did, in a later epoch).
        let joined = before.is_none() && after.epoch > 0;
        let before = before.unwrap_or(after);
        for s in 0..m.members() {
            let sender = MemberId(s as u8);
            if let Some(s_inc) = m.pinned_incarnation(sender) {
                self.mcast
                    .received(i, inc, s, s_inc, after.epoch, m.received(sender));
            }
        }
        let trim = m.status().last_trim;
        let ending = m.ending();
        let mut found = Vec::new();
        let unreachable = match m.halted() {
            Some(HaltCause::TrimUnreadable(s)) => Some(format!(
                "the decided trim holds a message of node {} it does not have whole",
                s.0
            )),
            Some(HaltCause::TrimBehind) => Some(
                "the decided trim ends before what it delivered, or holds more than it received"
                    .to_string(),
            ),
            _ => None,
        };
        if let (Some(why), None) = (unreachable, before.halted) {
            // Only a protocol error gets a member a trim it cannot reach
            // (the simulator corrupts no ring once received).
            found.push(Violation {
                invariant: "multicast trim reachable",
                time_ns: self.now,
                detail: format!("node {i} stopped: {why}"),
            });
        }
        let mut installed = after.epoch == before.epoch;
        for (d, payload) in delivered {
            self.mcast_large_delivered += u64::from(d.large.is_some());
            if d.epoch != before.epoch && !installed {
                found.extend(self.mcast_installed(None, i, inc, before, after, trim));
                installed = true;
            }
            let seen = if d.epoch == before.epoch {
                before
            } else {
                after
            };
            if self.opts.config.mcast_persistent {
                // On disk where it must be: at every member of the view
                // (stable), or inside a trim at every member of the ended
                // view that the next one keeps.
                let required = if d.in_trim {
                    let t = if after.epoch > d.epoch { trim } else { ending };
                    t.map_or(seen.view, |t| {
                        t.members & seen.view & !t.join.map_or(0, |(j, _)| 1 << j.0)
                    })
                } else {
                    seen.view
                };
                found.extend(self.mcast_durable.delivered(
                    self.now,
                    i,
                    d.epoch,
                    d.sender.index(),
                    d.index,
                    required,
                ));
            }
            found.extend(self.one_message_per_sequence_number(i, &d, &payload));
            found.extend(self.mcast.delivered(
                self.now,
                crate::check::multicast::Delivered {
                    member: i,
                    incarnation: inc,
                    digest: seen.digest,
                    view: seen.view,
                    ending: d.in_trim,
                    sender: d.sender.index(),
                    sender_incarnation: d.sender_incarnation,
                    epoch: d.epoch,
                    index: d.index,
                    payload: &payload,
                },
            ));
        }
        if !installed {
            found.extend(self.mcast_installed(None, i, inc, before, after, trim));
        }
        if joined {
            self.mcast_joins += 1;
            self.log(|| {
                format!(
                    "node {i}: joined the multicast group in view {} (members {:#b})",
                    after.epoch, after.view
                )
            });
        }
        for v in found {
            self.violation(v);
        }
    }

    /// Whether member `i`'s delivery `d` names the message every other
    /// delivery of its epoch and sequence number named.
    fn one_message_per_sequence_number(
        &mut self,
        i: usize,
        d: &McastDelivery,
        payload: &[u8],
    ) -> Option<Violation> {
        self.mcast_restarts.delivered(
            self.now,
            i,
            d.epoch,
            d.seq,
            d.sender.index(),
            d.index,
            payload,
        )
    }

    /// Member `i` installed the next view of the top-level group
    /// (`subgroup` `None`) or of a subgroup (in member ids): the order
    /// checker of that group judges it.
    fn mcast_installed(
        &mut self,
        subgroup: Option<usize>,
        i: usize,
        inc: u64,
        before: McastSeen,
        after: McastSeen,
        trim: Option<verbatim_core::multicast::Trim>,
    ) -> Vec<Violation> {
        assert_eq!(after.epoch, before.epoch + 1, "one view change per step");
        let trim = trim.expect("a view change records its trim");
        let group = subgroup.map_or("multicast".to_string(), |k| format!("subgroup {k}"));
        self.log(|| {
            format!(
                "node {i}: {group} view {} installed: members {:#b}, trim {:?}",
                after.epoch, after.view, trim.counts
            )
        });
        let installed = crate::check::multicast::Installed {
            member: i,
            incarnation: inc,
            ended_digest: before.digest,
            digest: after.digest,
            view: after.view,
            trim: trim.counts.to_vec(),
            joiner: trim.join.map(|(j, _)| j.index()),
        };
        match subgroup {
            None => self.mcast.installed(self.now, installed),
            Some(k) => self.subgroup_orders[k].installed(self.now, installed),
        }
    }

    /// The subgroup workload (Derecho's subgroups and shards): about
    /// every `mcast_send_period_ns`, a random member of a random subgroup
    /// multicasts in it a small message naming the subgroup, itself and a
    /// counter (the subgroup's sends so far). A send the engine refuses
    /// for now (window full, group not formed, wedged, halted) is not
    /// recorded: the next one goes instead, as with top-level sends. The
    /// next send is scheduled until the safety phase ends.
    fn subgroup_send(&mut self) {
        let k = self
            .subgroup_rng
            .range_inclusive(0, self.subgroup_masks.len() as u64 - 1) as usize;
        let mask = self.subgroup_masks[k];
        let members: Vec<usize> = (0..8).filter(|m| mask & (1 << m) != 0).collect();
        let i = members[self
            .subgroup_rng
            .range_inclusive(0, members.len() as u64 - 1) as usize];
        let len = self.subgroup_rng.range_inclusive(0, 24) as usize;
        if i < self.nodes.len() && self.nodes[i].state == NodeState::Running {
            let counter = self.subgroup_orders[k].sent_total;
            let mut payload = vec![b'S', k as u8, i as u8];
            payload.extend(counter.to_le_bytes());
            payload.extend((0..len).map(|j| (counter as u8).wrapping_add(j as u8)));
            payload.truncate(self.opts.config.mcast_payload_bytes_max as usize);
            let driver = &mut self.nodes[i].driver;
            let who = driver
                .engines()
                .subgroup(k)
                .map(|g| (g.engine().incarnation(), g.engine().epoch()));
            match (driver.subgroup_send(k, &payload), who) {
                (Ok(index), Some((inc, epoch))) => {
                    self.log(|| {
                        format!(
                            "node {i}: subgroup {k} multicast {index} in epoch {epoch} ({} bytes)",
                            payload.len()
                        )
                    });
                    self.subgroup_orders[k].sent(i, inc, epoch, index, &payload);
                    self.subgroup_liveness.sent(k, i, inc, epoch, index);
                    self.wake(i, self.now);
                }
                // Refused by the engine for now (window full, not formed,
                // wedged, halted): the next send goes instead.
                (Err(McastSendError::Engine(_)), _) | (Ok(_), None) => {}
                (Err(e), _) => {
                    self.violation(Violation {
                        invariant: "subgroup sends reach the member's engine",
                        time_ns: self.now,
                        detail: format!(
                            "node {i}, a member of subgroup {k}, sent {} bytes in it: {e}",
                            payload.len()
                        ),
                    });
                }
            }
        }
        let next = self.now
            + self
                .subgroup_rng
                .range_inclusive(1, 2 * self.opts.mcast_send_period_ns);
        if next < self.opts.safety_ns {
            self.queue.push(next, Ev::SubgroupSend);
        }
    }

    /// Records member `i`'s subgroup receipts after its step, then checks
    /// the subgroup deliveries of that step: membership, and per
    /// subgroup what `observe_multicast` checks for the top-level group
    /// (its own history, in member ids). `before`: each of its subgroup
    /// engines' view as the step began.
    fn observe_subgroups(
        &mut self,
        i: usize,
        before: Vec<(usize, Option<McastSeen>)>,
        delivered: Vec<(usize, McastDelivery, Vec<u8>)>,
    ) {
        let mut found = Vec::new();
        for (k, d, _) in &delivered {
            found.extend(
                self.subgroup_membership
                    .delivered(self.now, *k, i, d.sender.index()),
            );
        }
        for (k, before) in before {
            let Some(g) = self.nodes[i].driver.engines().subgroup(k) else {
                continue;
            };
            let m = g.engine();
            let (Some(after), inc) = (McastSeen::of_subgroup(g), m.incarnation()) else {
                continue;
            };
            let received: Vec<(usize, u64, u64)> = (0..m.members())
                .filter_map(|r| {
                    let rank = MemberId(r as u8);
                    Some((
                        g.member(rank).index(),
                        m.pinned_incarnation(rank)?,
                        m.received(rank),
                    ))
                })
                .collect();
            let trim = g.status().last_trim;
            let unreachable = match m.halted() {
                Some(HaltCause::TrimUnreadable(s)) => Some(format!(
                    "the decided trim holds a message of node {} it does not have whole",
                    g.member(s).0
                )),
                Some(HaltCause::TrimBehind) => Some(
                    "the decided trim ends before what it delivered, or holds more than it received"
                        .to_string(),
                ),
                _ => None,
            };
            let joined = before.is_none() && after.epoch > 0;
            let before = before.unwrap_or(after);
            for (s, s_inc, count) in received {
                self.subgroup_orders[k].received(i, inc, s, s_inc, after.epoch, count);
            }
            let mut here = Vec::new();
            if let (Some(why), None) = (unreachable, before.halted) {
                here.push(Violation {
                    invariant: "multicast trim reachable",
                    time_ns: self.now,
                    detail: format!("node {i} stopped: {why}"),
                });
            }
            let mut installed = after.epoch == before.epoch;
            for (_, d, payload) in delivered.iter().filter(|(dk, _, _)| *dk == k) {
                if d.epoch != before.epoch && !installed {
                    here.extend(self.mcast_installed(Some(k), i, inc, before, after, trim));
                    installed = true;
                }
                let seen = if d.epoch == before.epoch {
                    before
                } else {
                    after
                };
                self.subgroup_liveness.delivered(
                    k,
                    i,
                    inc,
                    d.sender.index(),
                    d.sender_incarnation,
                    d.epoch,
                    d.index,
                );
                here.extend(self.subgroup_orders[k].delivered(
                    self.now,
                    crate::check::multicast::Delivered {
                        member: i,
                        incarnation: inc,
                        digest: seen.digest,
                        view: seen.view,
                        ending: d.in_trim,
                        sender: d.sender.index(),
                        sender_incarnation: d.sender_incarnation,
                        epoch: d.epoch,
                        index: d.index,
                        payload,
                    },
                ));
            }
            if !installed {
                here.extend(self.mcast_installed(Some(k), i, inc, before, after, trim));
            }
            if joined {
                self.subgroup_joins += 1;
                self.log(|| {
                    format!(
                        "node {i}: joined subgroup {k} in view {} (members {:#b})",
                        after.epoch, after.view
                    )
                });
            }
            // The top-level group's invariants, in subgroup `k`.
            found.extend(here.into_iter().map(|mut v| {
                v.detail = format!("subgroup {k}: {}", v.detail);
                v
            }));
        }
        for v in found {
            self.violation(v);
        }
    }

    /// At the end of a run, per subgroup: if the newest view its running
    /// members are in has every member running, in it (one digest),
    /// formed, neither wedged nor ending it, nor halted, every message a
    /// member of it sent in it must have been delivered at every member
    /// of it (the sends stopped when the faults healed, at least 2 ms
    /// before), and a member of the subgroup that runs outside it, started
    /// over a millisecond ago, should have joined it (a restarted member
    /// rejoins every subgroup it belongs to).
    fn check_subgroups_live(&mut self) {
        /// A running member's engine of a subgroup at the end.
        struct End {
            member: usize,
            incarnation: u64,
            epoch: u64,
            digest: Option<u64>,
            view: u64,
            healthy: bool,
            joining: bool,
            /// Wedged for a view change that is not over.
            wedged: bool,
        }
        let mut found = Vec::new();
        for k in 0..self.subgroup_masks.len() {
            let mask = self.subgroup_masks[k];
            let ends: Vec<End> = (0..self.nodes.len())
                .filter(|&m| mask & (1 << m) != 0 && self.nodes[m].state == NodeState::Running)
                .filter_map(|m| {
                    let g = self.nodes[m].driver.engines().subgroup(k)?;
                    let e = g.engine();
                    let st = e.status();
                    Some(End {
                        member: m,
                        incarnation: e.incarnation(),
                        epoch: e.epoch(),
                        digest: e.view_digest(),
                        view: g.view_members(),
                        healthy: st.started
                            && st.wedged.is_none()
                            && st.halted.is_none()
                            && !st.joining
                            && e.ending().is_none(),
                        joining: st.joining,
                        wedged: st.wedged.is_some() && st.halted.is_none(),
                    })
                })
                .collect();
            let Some(newest) = ends
                .iter()
                .filter(|e| e.digest.is_some())
                .max_by_key(|e| e.epoch)
            else {
                continue;
            };
            let (epoch, digest, view) = (newest.epoch, newest.digest, newest.view);
            // Every process of the multicast group runs (none stopped dead
            // or a zombie, which the top-level group cannot remove without
            // a death notice), the faults healed: a view change under way
            // must have finished (a subgroup that lost a member goes on
            // once the top-level group removed it, whatever its size, and
            // adds the new process in its place).
            let initial = usize::from(self.opts.config.initial_members);
            let all_running = (0..initial.min(self.nodes.len()))
                .all(|m| self.nodes[m].state == NodeState::Running);
            if all_running && ends.iter().any(|e| e.wedged) {
                found.push(Violation {
                    invariant: "subgroup view changes finish (liveness)",
                    time_ns: self.now,
                    detail: format!(
                        "every member of subgroup {k} runs, yet {} stay wedged at the end (newest epoch {epoch}, view {view:#b})",
                        ends.iter()
                            .filter(|e| e.wedged)
                            .map(|e| format!("node {}", e.member))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
                continue;
            }
            let whole: Vec<crate::check::subgroups::FinalMember> = ends
                .iter()
                .filter(|e| {
                    view & (1 << e.member) != 0
                        && e.healthy
                        && (e.epoch, e.digest) == (epoch, digest)
                })
                .map(|e| crate::check::subgroups::FinalMember {
                    member: e.member,
                    incarnation: e.incarnation,
                })
                .collect();
            if whole.len() != view.count_ones() as usize {
                self.log(|| {
                    format!(
                        "subgroup {k}: liveness not judged: the view {view:#b} of epoch {epoch} is not whole, agreed and unwedged at the end"
                    )
                });
                continue;
            }
            self.subgroups_judged_live += 1;
            found.extend(
                self.subgroup_liveness
                    .check_final(self.now, k, epoch, &whole),
            );
            for e in ends.iter().filter(|e| view & (1 << e.member) == 0) {
                if self.now.saturating_sub(self.started_at[e.member]) > 1_000_000 {
                    found.push(Violation {
                        invariant: "subgroup members rejoin (liveness)",
                        time_ns: self.now,
                        detail: format!(
                            "node {} (incarnation {}, running since {:.3} ms, joining {}) is not in subgroup {k}'s view {view:#b} of epoch {epoch}, which runs unwedged",
                            e.member,
                            e.incarnation,
                            self.started_at[e.member] as f64 / 1e6,
                            e.joining
                        ),
                    });
                }
            }
        }
        for v in found {
            self.violation(v);
        }
    }

    /// One iteration of a member's host loop (see the core's driving
    /// contract), charged with DARE's LogGP overheads.
    fn step(&mut self, i: usize) {
        if self.nodes[i].state != NodeState::Running {
            return;
        }
        let t = self.now;
        if t < self.nodes[i].busy_until {
            let b = self.nodes[i].busy_until;
            self.wake(i, b);
            return;
        }
        let local = self.local(i, t);
        let recovery_before = self.nodes[i].driver.log().recovery_status();
        // The member's host loop is the driver's: the simulator supplies
        // only the fabric (posts are buffered and scheduled with their
        // LogGP departure times below), the clock and the gateway.
        let mut posted = Vec::new();
        let mut answers = Vec::new();
        let mut events = Vec::new();
        let mut mcast_delivered = Vec::new();
        let mut mcast_synced = Vec::new();
        let mut restart_delivered = Vec::new();
        let mcast_before = self.nodes[i]
            .driver
            .engines()
            .multicast
            .as_ref()
            .and_then(McastSeen::of);
        let mut subgroup_delivered = Vec::new();
        let mut subgroup_posts = Vec::new();
        let subgroups_before: Vec<(usize, Option<McastSeen>)> = self.nodes[i]
            .driver
            .engines()
            .subgroups
            .iter()
            .map(|g| (g.index(), McastSeen::of_subgroup(g)))
            .collect();
        let counters_before = self.nodes[i].driver.counters();
        // Backup-memory mode: the used part of this member's store each
        // time it acknowledges a write (before the step goes on: the next
        // write may start in the same step).
        let mut acknowledged_stores = Vec::new();
        let store_watch = self.backup_layout.map(|layout| StoreWatch {
            mem: self.net.nic(i).mem.clone(),
            layout,
        });
        {
            let SimNode {
                driver,
                inbox,
                peer_down,
                peer_up,
                syncs,
                sync_covered,
                disk,
                view_sync,
                mcast_tail,
                ..
            } = &mut self.nodes[i];
            let mut fabric = SimEndpoint {
                net: &mut self.net,
                me: i,
                posted: &mut posted,
            };
            let mut host = SimHost {
                inbox,
                peer_down,
                peer_up,
                answers: &mut answers,
                events: &mut events,
                mcast: &mut mcast_delivered,
                syncs,
                sync_covered,
                sync_ns: self.opts.mcast_sync_ns,
                synced: &mut mcast_synced,
                disk,
                view_sync,
                tail: mcast_tail,
                restart_delivered: &mut restart_delivered,
                subgroup: &mut subgroup_delivered,
                subgroup_posts: &mut subgroup_posts,
                store_watch,
                acknowledged_stores: &mut acknowledged_stores,
            };
            driver.step(local, &mut fabric, &mut host);
        }
        for mark in mcast_synced {
            self.mcast_durable.synced(i, mark.epoch, &mark.counts);
        }
        for (tail, delivered) in restart_delivered {
            self.log(|| {
                format!(
                    "node {i}: restart cut of epoch {} at {}: delivers {}..{} from its log ({} messages)",
                    tail.epoch,
                    tail.to,
                    tail.from,
                    tail.to,
                    delivered.len()
                )
            });
            let mut found = self
                .mcast_restarts
                .restarted(self.now, i, tail.epoch, tail.to);
            for (d, payload) in delivered {
                found.extend(self.one_message_per_sequence_number(i, &d, &payload));
            }
            for v in found {
                self.violation(v);
            }
        }
        self.observe_multicast(i, mcast_before, mcast_delivered);
        for action in subgroup_posts {
            if let Some(v) = self.subgroup_bytes.executed(self.now, i, &action) {
                self.violation(v);
            }
        }
        self.observe_subgroups(i, subgroups_before, subgroup_delivered);
        let epoch = self.nodes[i]
            .driver
            .engines()
            .multicast
            .as_ref()
            .map_or(0, |m| m.epoch());
        if let Some(v) = crate::check::large::check_large_whole(
            self.now,
            i,
            epoch,
            &counters_before,
            &self.nodes[i].driver.counters(),
        ) {
            self.violation(v);
        }
        // Backup-memory mode: the engine's status after the step, and
        // whether it started a client write that changes the store (its
        // WRITEs are among this step's posts).
        let backup_status = self.nodes[i]
            .driver
            .engines()
            .backup
            .as_ref()
            .map(|b| b.status());
        let process = (i, self.net.nic(i).incarnation);
        let write_started = backup_status.is_some_and(|st| {
            let before = self
                .backup_counters
                .get(&process)
                .copied()
                .unwrap_or_default();
            st.counters.writes_zero_copy + st.counters.writes_forwarded
                > before.writes_zero_copy + before.writes_forwarded
        });
        // An armed `CrashPrimaryMidWrite`: the WRITEs it lets out before
        // the primary dies, and how long it stays down.
        let dies_mid_write = self.crash_mid_write.filter(|_| write_started);
        let mut let_out = dies_mid_write.map(|(writes, _)| writes);
        let mut depart = t + self.opts.net.poll_ns as u64;
        // The CPU time of the piece of a restore this step did.
        let recovery_after = self.nodes[i].driver.log().recovery_status();
        let restored_to = if recovery_after.bytes_restored > 0 {
            recovery_after.bytes_restored
        } else if recovery_after.completed > recovery_before.completed {
            recovery_before.bytes_total
        } else {
            0
        };
        let restored = restored_to.saturating_sub(recovery_before.bytes_restored);
        depart += (restored as f64 * self.opts.restore_ns_per_byte) as u64;
        let mut stopped = false;
        let mut died = false;
        for wr in posted {
            if died {
                // The process died before it got to these.
                continue;
            }
            if let (Some(left), false) = (let_out.as_mut(), stopped) {
                if is_backup_write(&wr) {
                    if *left == 0 {
                        died = true;
                        continue;
                    }
                    *left -= 1;
                }
            }
            if stopped {
                // The CPU stopped before it got to these.
                self.nodes[i].deferred_posts.push(wr);
                continue;
            }
            depart += self.net.post_overhead_ns(&wr.op);
            let stop_here = self.nodes[i]
                .stop_mid_copy_until
                .is_some_and(|until| until > t)
                && matches!(wr.op, Op::Write { remote, .. } | Op::WriteInline { remote, .. }
                    if remote.region == RegionId::Log || remote.region == STORE_REGION);
            if stop_here {
                self.net.post_stuck(&mut self.queue, depart, i, wr);
                stopped = true;
            } else {
                self.net.post(&mut self.queue, depart, i, wr);
            }
        }
        if stopped {
            self.log(|| format!("fault: node {i} stops in the middle of a log or store copy"));
            let n = &mut self.nodes[i];
            n.stop_mid_copy_until = None;
            n.paused_mid_copy = true;
            n.state = NodeState::Paused;
            n.deferred_answers.append(&mut answers);
            self.counters.stopped(i, t);
        }
        self.nodes[i].busy_until = depart;
        for e in events {
            match e {
                DriverEvent::Log(e) => self.on_node_event(i, e),
                DriverEvent::Counter(e) => self.on_counter_event(i, e),
                DriverEvent::View(e) => {
                    self.log(|| format!("node {i}: {e:?}"));
                    if let verbatim_core::views::ViewEvent::Decided { epoch, view, .. } = e {
                        if let Some(v) = self.view_agreement.observe(self.now, i, epoch, view) {
                            self.violation(v);
                        }
                        self.leases.view(epoch, view);
                        self.view_leaders.view(view);
                        self.pause_named_leader(view);
                    }
                }
            }
        }
        for (route, answer) in answers {
            let (answer, bytes) = self.client_answer(route, answer);
            let at = depart + self.opts.net.ud_ns(bytes as u64) as u64;
            self.queue.push(
                at,
                Ev::ClientReply {
                    client: route.client,
                    request_id: route.request_id,
                    answer,
                },
            );
        }
        self.observe(i);
        if let Some(st) = backup_status {
            self.observe_backup(i, st, acknowledged_stores);
        }
        if let (Some((writes, down_ns)), false) = (dies_mid_write, stopped) {
            // Its first `writes` WRITEs of the write are on the wire (at
            // most); it dies now: the rest are never posted, and the write
            // is never answered. (Stopped in the middle of a copy in this
            // step instead, it stays armed for a later write.)
            self.log(|| {
                format!("fault: primary {i} crashes in the middle of a write, {writes} of its WRITEs posted")
            });
            self.crash_mid_write = None;
            self.backup_crashes_mid_write += 1;
            self.crash_node(i);
            if let Some(d) = down_ns {
                self.queue.push(self.now + d, Ev::Restart { node: i });
            }
            return;
        }
        if let Some(down_ns) = self.restart_leader_while_copying {
            let copying = self.nodes[i].driver.log().recovery_status().bytes_total > 0;
            let leader = (0..self.nodes.len()).find(|&l| {
                self.nodes[l].state == NodeState::Running
                    && self.nodes[l].driver.log().role() == verbatim_core::Role::Leader
            });
            if let (true, Some(l)) = (copying, leader) {
                self.log(|| format!("fault: leader {l} crashes while node {i} copies a snapshot"));
                self.restart_leader_while_copying = None;
                self.crash_node(l);
                self.queue.push(self.now + down_ns, Ev::Restart { node: l });
                if l == i {
                    return;
                }
            }
        }
        if let Some((term, down_ns)) = self.nodes[i].crash_after_vote {
            let row = self.nodes[i].driver.log().published_row();
            if row.vote.term.max(row.private_vote.term) > term {
                // Its posts of this step are on the wire; it dies now.
                self.log(|| format!("fault: node {i} crashes right after voting"));
                self.nodes[i].crash_after_vote = None;
                self.crash_node(i);
                self.queue.push(self.now + down_ns, Ev::Restart { node: i });
                return;
            }
        }
        let mut deadline = self.nodes[i].driver.next_deadline();
        if let Some(&(done, _, _)) = self.nodes[i].syncs.front() {
            // The disk's completion wakes the member, as an io_uring
            // completion would.
            deadline = deadline.min(done);
        }
        if let Some((done, _, _)) = self.nodes[i].view_sync {
            deadline = deadline.min(done);
        }
        let g = self.global(i, deadline);
        self.wake(i, g.max(depart));
    }

    /// A member stopped in the middle of a copy resumes: the rest of the
    /// copy lands, then the rest of its step runs (posts, answers).
    fn resume_mid_copy(&mut self, i: usize) {
        for target in self.net.release_stuck(&mut self.queue, self.now, i) {
            self.wake(target, self.now);
        }
        let mut depart = self.now + self.opts.net.poll_ns as u64;
        for wr in std::mem::take(&mut self.nodes[i].deferred_posts) {
            depart += self.net.post_overhead_ns(&wr.op);
            self.net.post(&mut self.queue, depart, i, wr);
        }
        for (route, answer) in std::mem::take(&mut self.nodes[i].deferred_answers) {
            let (answer, bytes) = self.client_answer(route, answer);
            let at = depart + self.opts.net.ud_ns(bytes as u64) as u64;
            self.queue.push(
                at,
                Ev::ClientReply {
                    client: route.client,
                    request_id: route.request_id,
                    answer,
                },
            );
        }
        self.nodes[i].busy_until = depart;
        if self.nodes[i].state == NodeState::Paused {
            self.nodes[i].state = NodeState::Running;
            self.counters.resumed(i, self.now);
        }
        self.wake(i, depart);
    }

    /// Decodes a member's answer as the client sees it (and its size on
    /// the wire).
    fn client_answer(&mut self, route: SimRoute, answer: SentAnswer) -> (ClientAnswer, usize) {
        let stream = route.stream;
        match answer {
            SentAnswer::Ok(bytes) if stream => {
                let out = if route.write {
                    match StreamReply::from_bytes(&bytes) {
                        Some(StreamReply::Id(id)) => Some(StreamOutput::Id(id)),
                        _ => None,
                    }
                } else {
                    range_entries(&bytes).map(|entries| {
                        StreamOutput::Entries(
                            entries
                                .map(|e| {
                                    let tag = pairs_iter(e.pairs)
                                        .next()
                                        .map_or(Vec::new(), |(_, v)| v.to_vec());
                                    (e.id, tag)
                                })
                                .collect(),
                        )
                    })
                };
                match out {
                    Some(out) => (ClientAnswer::StreamDone(out), bytes.len() + 8),
                    None => {
                        self.violation(Violation {
                            invariant: "client replies",
                            time_ns: self.now,
                            detail: format!("unexpected stream reply {bytes:?}"),
                        });
                        (ClientAnswer::Busy, 16)
                    }
                }
            }
            SentAnswer::Ok(bytes) if route.write => {
                let a = match KvReply::from_bytes(&bytes) {
                    Some(KvReply::Ok) => ClientAnswer::Done(KvOutput::Ok),
                    Some(KvReply::Int(v)) => ClientAnswer::Done(KvOutput::Int(v)),
                    Some(KvReply::Err(KvError::NotInteger)) => {
                        ClientAnswer::Done(KvOutput::NotInteger)
                    }
                    Some(KvReply::Err(KvError::Overflow)) => ClientAnswer::Done(KvOutput::Overflow),
                    other => {
                        self.violation(Violation {
                            invariant: "client replies",
                            time_ns: self.now,
                            detail: format!("unexpected write reply {other:?}"),
                        });
                        ClientAnswer::Busy
                    }
                };
                (a, 16)
            }
            SentAnswer::Ok(bytes) => {
                let out = match bytes.split_first() {
                    Some((1, v)) => KvOutput::Value(Some(v.to_vec())),
                    _ => KvOutput::Value(None),
                };
                (ClientAnswer::Done(out), bytes.len() + 8)
            }
            SentAnswer::NotLeader(hint) => (ClientAnswer::Redirect(hint), 16),
            SentAnswer::Busy => (ClientAnswer::Busy, 16),
            // An old attempt of a request the client has moved past: the
            // client ignores answers to requests it no longer waits for.
            SentAnswer::Refused(Refusal::Superseded) => (ClientAnswer::Busy, 16),
            SentAnswer::Refused(why) => {
                self.violation(Violation {
                    invariant: "client replies",
                    time_ns: self.now,
                    detail: format!("a valid request was refused: {}", why.message()),
                });
                (ClientAnswer::Busy, 16)
            }
        }
    }

    fn on_counter_event(&mut self, i: usize, e: CounterEvent) {
        self.log(|| format!("node {i}: {e:?}"));
        if let CounterEvent::Stalled { peer, since_ns, .. } = e {
            let since = self.global(i, since_ns);
            if let Some(v) = self
                .counters
                .observe_stall(self.now, i, peer.index(), since)
            {
                self.violation(v);
            }
        }
    }

    fn on_node_event(&mut self, i: usize, e: Event) {
        match e {
            Event::RoleChanged { role, term, leader } => {
                self.log(|| format!("node {i}: {role:?} term {term} leader {leader:?}"));
                if role == Role::Leader {
                    if let Some(v) = self.election.observe_leader(self.now, term, i) {
                        self.violation(v);
                    }
                    self.depose(i);
                    let st = self.nodes[i].driver.log().status();
                    let log = self.read_log(i, st.apply_pos, st.apply_index, st.tail_pos);
                    for v in check_leader_completeness(
                        self.now,
                        i,
                        term,
                        st.apply_index,
                        &log,
                        &self.committed,
                    ) {
                        self.violation(v);
                    }
                    self.nodes[i].commit_cursor = Some((st.commit_pos, st.commit_index));
                } else {
                    self.nodes[i].commit_cursor = None;
                }
            }
            Event::LogCorrupt { pos } => self.violation(Violation {
                invariant: "log integrity",
                time_ns: self.now,
                detail: format!("node {i} found a corrupt committed entry at position {pos}"),
            }),
            Event::PeerNeedsRecovery { peer } => {
                if self.log_full_at_first_mark.is_none() {
                    // With this step's refusals, which came before the
                    // mark (the host submits before the node's timers).
                    let step = self.nodes[i]
                        .driver
                        .log()
                        .counters()
                        .log_full
                        .saturating_sub(self.nodes[i].log_full_seen);
                    self.log_full_at_first_mark = Some(self.log_full_total + step);
                }
                self.needs_recovery += 1;
                self.needing_recovery.insert(peer.index());
                self.log(|| format!("node {i}: peer {} needs recovery", peer.0));
            }
            // The host's part of a donor's snapshot (DARE §3.4): the state
            // machine's bytes, before the node's next step.
            Event::SnapshotWanted { generation } => {
                let bytes = self.nodes[i].driver.log().write_snapshot();
                self.snapshots_served += 1;
                self.log(|| format!("node {i}: snapshot {generation} written ({bytes:?} bytes)"));
            }
            Event::Recovered { apply_index, bytes } => {
                self.recoveries += 1;
                self.needing_recovery.remove(&i);
                self.log(|| {
                    format!("node {i}: recovered from a snapshot up to index {apply_index} ({bytes} bytes)")
                });
            }
            Event::LogFull => self.log(|| format!("node {i}: log full")),
            Event::RecoveryHoldReleased { peer, held_bytes } => self.log(|| {
                format!(
                    "node {i}: pruned past recovering peer {} ({held_bytes} bytes held)",
                    peer.0
                )
            }),
            Event::PeerUnreachable { peer } => {
                self.log(|| format!("node {i}: peer {} unreachable", peer.0))
            }
            Event::PeerReachable { peer } => {
                self.log(|| format!("node {i}: peer {} reachable", peer.0))
            }
            // Answered by the driver.
            Event::ConfigurationChanged {
                configuration,
                index,
            } => self.log(|| format!("node {i}: goes by {configuration:?} (entry {index})")),
            Event::ConfigurationApplied {
                configuration,
                index,
            } => self.on_configuration_applied(i, index, configuration),
            Event::Reconfigured { op, configuration } => {
                self.log(|| format!("node {i}: {op:?} done: {configuration:?}"))
            }
            Event::Reply { index, .. } => {
                let commit_index = self.nodes[i].driver.log().commit_index();
                if let Some(v) = check_reply(self.now, i, index, commit_index) {
                    self.violation(v);
                }
            }
            Event::ReadReady { .. } | Event::ReadAborted { .. } => {}
        }
    }

    fn on_configuration_applied(
        &mut self,
        i: usize,
        index: u64,
        c: verbatim_core::membership::Configuration,
    ) {
        self.log(|| format!("node {i}: applied {c:?} (entry {index})"));
        for v in self.configurations.observe_applied(self.now, i, index, c) {
            self.violation(v);
        }
    }

    /// Reads `[from_pos, to_pos)` of a member's log as entry identities.
    /// The latest configuration among them (DARE §3.4), or the one
    /// applied before them, is left in `read_configuration`.
    fn read_log(&mut self, i: usize, from_pos: u64, from_index: u64, to_pos: u64) -> Vec<EntryId> {
        let mem = if self.read_plain {
            self.net.nic(i).mem.clone()
        } else {
            self.nodes[i].driver.log().memory().clone()
        };
        let max = self.opts.config.entry_payload_bytes_max;
        let mut out = Vec::new();
        let mut pos = from_pos;
        let mut index = from_index;
        self.read_configuration = self.nodes[i].driver.log().applied_configuration();
        while pos < to_pos {
            match self.ring.read_entry(&mem, pos, max, &mut self.payload_buf) {
                Ok((h, _, end)) if h.index == index && end <= to_pos => {
                    let payload = &self.payload_buf[..h.payload_len as usize];
                    if h.kind == verbatim_core::log::EntryKind::Config {
                        if let Ok(c) = verbatim_core::membership::Configuration::decode(
                            payload,
                            self.opts.members,
                        ) {
                            self.read_configuration = c;
                        }
                    }
                    out.push(EntryId::of(&h, payload));
                    pos = end;
                    index += 1;
                }
                _ => break,
            }
        }
        out
    }

    /// Votes: the votes for member `i` that it may count.
    fn check_votes(&mut self, i: usize) {
        let n = self.nodes.len();
        let log = self.nodes[i].driver.log();
        // The votes that count are those a candidate may count: its peers'
        // votes for it as its table holds them, and its own once it leads
        // (a private vote that never left its member, or a self-vote that
        // never became reliable, elects nobody).
        let mut found = Vec::new();
        if log.role() == Role::Leader {
            found.push((i, log.term()));
        }
        let mut counted = Vec::new();
        for b in (0..n).filter(|&b| b != i) {
            let row = log.peer_row(MemberId(b as u8));
            if row.vote.term > 0 && row.vote.member == Some(MemberId(i as u8)) {
                found.push((b, row.vote.term));
                if !self.vote_reliability.judged(b, row.vote.term) {
                    counted.push((b, row.vote.term));
                }
            }
        }
        for (b, t) in found {
            if let Some(v) = self.votes.observe_vote(self.now, b, t, i) {
                self.violation(v);
            }
        }
        let quorum = usize::from(self.opts.members) / 2 + 1;
        for (b, t) in counted {
            // Who stores b's private vote of t (or later)? b itself, and
            // every member whose copy of b's row says so. A copy that does
            // not validate (a push landing right now) gets the benefit of
            // the doubt.
            let mut holders = 0;
            for m in 0..n {
                let holds = if self.nodes[m].state == NodeState::Crashed {
                    // Its memory is gone; it may have held a copy when
                    // the vote was answered (an acknowledged WRITE whose
                    // data it had not made visible yet dies with it).
                    true
                } else if m == b {
                    self.nodes[b].driver.log().published_row().private_vote.term >= t
                } else {
                    let mem = self.nodes[m].driver.log().memory();
                    let at = self.nodes[m].driver.log().layout().row(MemberId(b as u8));
                    match verbatim_core::sst::Row::read(mem, at) {
                        Ok((r, _)) => r.private_vote.term >= t,
                        Err(_) => true,
                    }
                };
                holders += usize::from(holds);
            }
            if let Some(v) = self
                .vote_reliability
                .observe_counted_vote(self.now, b, i, t, holders, quorum)
            {
                self.violation(v);
            }
        }
    }

    /// A `Fault::PauseNamedLeader` waiting for a view stops the member
    /// `view` names, unless it leads already.
    fn pause_named_leader(&mut self, view: verbatim_core::views::View) {
        let Some(k) = self.pause_named else { return };
        let l = usize::from(view.leader.0);
        let Some(node) = self.nodes.get(l) else {
            return;
        };
        let leads = node.driver.log().role() == Role::Leader;
        if node.state == NodeState::Running && !leads {
            self.log(|| format!("fault: node {l}, named by a view, stops"));
            self.pause_named = None;
            self.pause_for_fault(k, l);
        }
    }

    /// Stops member `l` for fault `k` (a `PauseLeader` or
    /// `PauseNamedLeader`), until the fault ends.
    fn pause_for_fault(&mut self, k: usize, l: usize) {
        self.nodes[l].state = NodeState::Paused;
        self.counters.stopped(l, self.now);
        self.paused_leaders.push((k, l));
    }

    fn observe(&mut self, i: usize) {
        self.check_votes(i);
        if let Some((epoch, view)) = self.nodes[i]
            .driver
            .engines()
            .views
            .as_ref()
            .and_then(|v| v.latest())
        {
            if self.newest_view_seen.is_none_or(|(e, _)| epoch > e) {
                self.newest_view_seen = Some((epoch, view));
            }
        }
        {
            let log = self.nodes[i].driver.log();
            if log.role() == Role::Leader {
                let (term, by_view) = (log.term(), log.leads_by_view());
                let usable = log.views_usable();
                if let Some(v) = self
                    .view_leaders
                    .observe_leader(self.now, i, term, by_view, usable)
                {
                    self.violation(v);
                }
            }
        }
        let log_full = self.nodes[i].driver.log().counters().log_full;
        self.log_full_total += log_full.saturating_sub(self.nodes[i].log_full_seen);
        self.nodes[i].log_full_seen = log_full;
        if let Some(v) = &self.nodes[i].driver.engines().views {
            let leased = v
                .leased(self.local(i, self.now))
                .map(|(epoch, view, _)| (epoch, view));
            if let Some(v) = self.leases.observe(self.now, i, leased) {
                self.violation(v);
            }
            let lease_reads = self.nodes[i].driver.log().counters().lease_reads;
            if lease_reads > self.nodes[i].lease_reads_seen {
                self.nodes[i].lease_reads_seen = lease_reads;
                let term = self.nodes[i].driver.log().term();
                if let Some(v) = self.leases.lease_read(self.now, i, term) {
                    self.violation(v);
                }
            }
        }
        let counted = self.nodes[i].driver.log().counters().false_suspicions;
        if counted > self.nodes[i].false_suspicions {
            self.nodes[i].false_suspicions = counted;
            if let Some((l, term, at)) = self.nodes[i].driver.log().last_false_suspicion() {
                let at = self.global(i, at);
                self.log(|| format!("node {i}: false suspicion of leader {} (term {term})", l.0));
                let faults = &self.opts.faults;
                let link_delay_ns = |at: u64| {
                    faults
                        .iter()
                        .filter_map(|f| match *f {
                            Fault::Delay {
                                from,
                                to,
                                from_ns,
                                to_ns,
                                extra_ns,
                            } if usize::from(from) == l.index()
                                && usize::from(to) == i
                                && (from_ns..=to_ns).contains(&at) =>
                            {
                                Some(extra_ns)
                            }
                            _ => None,
                        })
                        .max()
                        .unwrap_or(0)
                };
                if let Some(v) =
                    self.suspicions
                        .observe(self.now, (i, l.index()), term, at, link_delay_ns)
                {
                    self.violation(v);
                }
            }
        }
        // What a primary executed ahead of the commit is applied only once
        // its apply index passes it, and never if it rolled it back.
        let applied_to = self.nodes[i].driver.log().apply_index();
        let mut ahead = std::mem::take(&mut self.nodes[i].executed_ahead);
        ahead.extend(self.nodes[i].driver.log().state_machine().drain_applied());
        let rollbacks = self.nodes[i].driver.log().counters().speculation_rollbacks;
        if rollbacks > self.nodes[i].rollbacks_seen {
            self.nodes[i].rollbacks_seen = rollbacks;
            // Forgotten only with the state that holds them: a member
            // that keeps its state machine after a roll back still has
            // them applied (and applying those indices again breaks state
            // machine safety).
            if !self.nodes[i].driver.log().state_machine_current() {
                let before = ahead.len();
                ahead.retain(|e| e.index < applied_to);
                let dropped = before - ahead.len();
                self.log(|| {
                    format!(
                        "node {i}: rolled back {dropped} operations executed ahead of their commit"
                    )
                });
            }
        }
        let split = ahead.partition_point(|e| e.index < applied_to);
        let applied: Vec<EntryId> = ahead.drain(..split).collect();
        self.nodes[i].executed_ahead = ahead;
        for e in applied {
            if let Some(v) = self.sm_safety.observe_apply(self.now, i, e) {
                self.violation(v);
            }
            if let Some(c) = self.committed.get(e.index) {
                if *c != e {
                    let c = *c;
                    self.violation(Violation {
                        invariant: "committed entries never change",
                        time_ns: self.now,
                        detail: format!("node {i} applied {e:?} where {c:?} was committed"),
                    });
                }
            }
        }
        let st = self.nodes[i].driver.log().status();
        if let Some(v) = self
            .committed
            .observe_commit_index(self.now, i, st.commit_index)
        {
            self.violation(v);
        }
        if st.role == Role::Leader {
            if let Some((pos, index)) = self.nodes[i].commit_cursor {
                if pos < st.commit_pos {
                    let entries = self.read_log(i, pos, index, st.commit_pos);
                    let mut new_index = index;
                    let mut earlier_terms = false;
                    for e in &entries {
                        if let Some(v) = self.committed.observe_committed(self.now, i, *e) {
                            self.violation(v);
                        }
                        self.leases.committed(self.now, e.term);
                        new_index = e.index + 1;
                        earlier_terms |= e.term < st.term;
                    }
                    if earlier_terms {
                        // Entries of earlier terms just committed: the
                        // moment a too-early commit (before the no-op of
                        // this term is on a majority) is visible.
                        self.check_electable();
                    }
                    if new_index != st.commit_index {
                        self.violation(Violation {
                            invariant: "committed entries never change",
                            time_ns: self.now,
                            detail: format!(
                                "leader {i} commit index {} but its log below the commit point ends at {new_index}",
                                st.commit_index
                            ),
                        });
                    }
                    self.nodes[i].commit_cursor = Some((st.commit_pos, st.commit_index));
                }
            }
        }
    }

    /// Backup-memory mode: member `i`'s backup engine after its step
    /// (`st`, its status; `acknowledged`: the used part of its store each
    /// time the step acknowledged a write): the checkers of
    /// `check::backup`, and the `RestartMidBulkCopy` fault.
    fn observe_backup(&mut self, i: usize, st: BackupStatus, acknowledged: Vec<Vec<u8>>) {
        let Some(lay) = self.backup_layout else {
            return;
        };
        let inc = self.net.nic(i).incarnation;
        let c = st.counters;
        let before = self.backup_counters.insert((i, inc), c).unwrap_or_default();
        let mut found = Vec::new();
        self.backup_dormant.forwarded(i, inc, c.writes_forwarded);
        found.extend(self.backup_dormant.replayed(self.now, i, inc, c.replays));
        found.extend(
            self.backup_replays
                .observe(self.now, i, inc, c.replay_failures, c.replays),
        );
        let mem = self.net.nic(i).mem.clone();
        found.extend(
            self.backup_audit
                .observe(self.now, i, inc, c.takeovers, || audit_store(&mem, &lay)),
        );
        if c.takeovers > before.takeovers {
            self.log(|| format!("node {i}: took over the store: {:?}", st.recovery));
        }
        if st.role == BackupRole::Primary {
            let n = self.nodes.len();
            let incarnations = self.incarnations();
            self.backup_copies
                .observe_copies((i, inc), &st.copies[..n], &incarnations);
            let view = st.view.map_or(0, |(_, _, members)| members);
            found.extend(self.backup_outside_views.observe(
                self.now,
                (i, inc),
                view,
                &st.copies[..n],
            ));
            if c.copies_done > before.copies_done {
                self.log(|| format!("node {i}: copies {:?}", &st.copies[..n]));
            }
            // At each acknowledgement the primary was quiescent (the
            // write answered was the only one in flight); the backups'
            // regions have not changed since (the WRITEs of a write it
            // started after are posted once its step is over).
            for mine in acknowledged {
                let view = st.view.map_or(0, |(_, _, members)| members);
                found.extend(self.backup_copies.acknowledged(
                    self.now,
                    (i, inc),
                    view,
                    &st.copies[..n],
                    &incarnations,
                ));
                found.extend(self.compare_backups(i, &st, Some(mine)));
            }
            self.restart_mid_copy(i, &st);
        } else {
            // Copies it began as a primary end with its role: the next
            // ones (if it leads again) begin anew.
            let none = vec![None; self.nodes.len()];
            self.backup_copies.observe_copies((i, inc), &none, &[]);
        }
        for v in found {
            self.violation(v);
        }
    }

    /// Each member's running process (`None`: crashed).
    fn incarnations(&self) -> Vec<Option<u64>> {
        (0..self.nodes.len())
            .map(|m| {
                (self.nodes[m].state != NodeState::Crashed).then(|| self.net.nic(m).incarnation)
            })
            .collect()
    }

    /// Compares the used part of primary `p`'s store (status `st`; `mine`:
    /// its used part as taken, or as it is now) with every synced copy, as
    /// the NICs' mappings hold them (no piece of a WRITE in flight lands in
    /// the middle).
    fn compare_backups(
        &mut self,
        p: usize,
        st: &BackupStatus,
        mine: Option<Vec<u8>>,
    ) -> Vec<Violation> {
        let Some(lay) = self.backup_layout else {
            return Vec::new();
        };
        let incarnations = self.incarnations();
        let primary = (p, self.net.nic(p).incarnation);
        let n = self.nodes.len();
        let synced = self
            .backup_copies
            .synced_members(primary, &st.copies[..n], &incarnations);
        let watch = |m: usize| StoreWatch {
            mem: self.net.nic(m).mem.clone(),
            layout: lay,
        };
        let mine = mine.unwrap_or_else(|| watch(p).used_part());
        let mut found = Vec::new();
        for m in synced {
            let mut theirs = vec![0u8; mine.len()];
            watch(m)
                .mem
                .read(Addr::new(STORE_REGION, lay.mailbox_bytes), &mut theirs);
            let backup = (m, self.net.nic(m).incarnation);
            found.extend(
                self.backup_copies
                    .compare(self.now, primary, backup, &lay, &mine, &theirs),
            );
        }
        found
    }

    /// Backup-memory mode, at the end of a run: a serving primary with no
    /// write in flight and none of its store's WRITEs on their way holds
    /// what every synced copy holds (copies made after the last write
    /// are judged here; the others at every write answered).
    fn compare_backups_at_end(&mut self) {
        for p in 0..self.nodes.len() {
            let readable = self.nodes[p]
                .driver
                .engines()
                .backup
                .as_ref()
                .is_some_and(|b| b.readable());
            if self.nodes[p].state != NodeState::Running || !readable {
                continue;
            }
            if !self.backup_quiet(p) {
                self.log(|| {
                    format!("end: primary {p}'s store WRITEs are on their way: copies not compared")
                });
                continue;
            }
            let st = self.nodes[p]
                .driver
                .engines()
                .backup
                .as_ref()
                .expect("checked")
                .status();
            let found = self.with_settled_memory(|c| c.compare_backups(p, &st, None));
            for v in found {
                self.violation(v);
            }
        }
    }

    /// Whether none of member `p`'s backup-engine requests is on its way
    /// (landing, or completing) and no piece of its store WRITEs is still
    /// to land.
    fn backup_quiet(&self, p: usize) -> bool {
        let backup = |wr_id| {
            verbatim_core::engine::EngineTag::split(wr_id).0
                == verbatim_core::engine::EngineTag::BACKUP
        };
        !self.queue.heap.iter().any(|item| match &item.ev {
            Ev::Net(NetEvent::Land { src, wr, .. }) => *src == p && backup(wr.wr_id),
            Ev::Net(NetEvent::LandWord { src, at, .. }) => *src == p && at.region == STORE_REGION,
            Ev::Net(NetEvent::Complete {
                src, completion, ..
            }) => *src == p && backup(completion.wr_id),
            _ => false,
        })
    }

    /// An armed `RestartMidBulkCopy`: primary `p` (status `st`) is in the
    /// middle of copying its store to a member, which crashes now (and
    /// another with it, if asked).
    fn restart_mid_copy(&mut self, p: usize, st: &BackupStatus) {
        let Some((down_ns, kill_another)) = self.restart_mid_copy else {
            return;
        };
        let mailbox = self.backup_layout.map_or(0, |l| l.mailbox_bytes);
        let Some(m) = (0..self.nodes.len()).find(|&m| {
            self.nodes[m].state == NodeState::Running
                && matches!(st.copies[m], Some(CopyState::Copying { next, end }) if next > mailbox && next < end)
        }) else {
            return;
        };
        self.restart_mid_copy = None;
        self.backup_crashes_mid_copy += 1;
        self.backup_crashed_mid_copy = Some(m);
        self.log(|| format!("fault: node {m} crashes in the middle of primary {p}'s copy to it"));
        self.crash_node(m);
        self.queue.push(self.now + down_ns, Ev::Restart { node: m });
        if kill_another {
            let others: Vec<usize> = (0..self.nodes.len())
                .filter(|&o| o != p && o != m && self.nodes[o].state == NodeState::Running)
                .collect();
            if !others.is_empty() {
                let o =
                    others[self.depose_rng.range_inclusive(0, others.len() as u64 - 1) as usize];
                self.log(|| format!("fault: node {o} crashes for good during the copy"));
                self.crash_node(o);
            }
        }
    }

    /// The status of every member not crashed, taken before a checker
    /// places pending WRITE data: a status reads the member's own memory,
    /// where a piece in flight may land (`Net::place_pending_for_check`).
    fn live_statuses(&self) -> Vec<(usize, verbatim_core::NodeStatus)> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].state != NodeState::Crashed)
            .map(|i| (i, self.nodes[i].driver.log().status()))
            .collect()
    }

    /// Runs `f` on memory as the WRITEs already executed will leave it
    /// (`Net::place_pending_for_check`), `read_log` reading through the
    /// NICs' mappings, then puts the memory back.
    fn with_settled_memory<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let undo = self.net.place_pending_for_check();
        self.read_plain = true;
        let r = f(self);
        self.read_plain = false;
        self.net.undo_placed(undo);
        r
    }

    /// Every member a majority would vote for holds every committed entry.
    fn check_electable(&mut self) {
        let statuses = self.live_statuses();
        let logs = self.with_settled_memory(|c| {
            let mut logs = Vec::new();
            for (i, st) in statuses {
                let log = c.read_log(i, st.apply_pos, st.apply_index, st.tail_pos);
                c.log_configurations[i] = c.read_configuration;
                logs.push((i, log));
            }
            logs
        });
        self.check_electable_logs(logs);
    }

    /// The newest view decided, with its epoch: the newest any member
    /// knows, or knew before a restart wiped its memory (a decided view
    /// stays decided: the checker must not fall back to an older one that
    /// only the restarted member's loss hides).
    fn newest_view(&self) -> Option<(u64, verbatim_core::views::View)> {
        self.nodes
            .iter()
            .filter_map(|n| n.driver.engines().views.as_ref()?.latest())
            .chain(self.newest_view_seen)
            .chain(self.view_agreement.newest())
            .max_by_key(|(epoch, _)| *epoch)
    }

    /// [`Cluster::check_electable`] with the members' logs (from their
    /// apply pointers to their tails) already read.
    fn check_electable_logs(&mut self, logs: Vec<(usize, Vec<EntryId>)>) {
        let mut members = Vec::new();
        for (i, log) in logs {
            let node = self.nodes[i].driver.log();
            members.push(MemberLog {
                node: i,
                apply_index: node.apply_index(),
                applied_term: node.last_applied_term(),
                log,
                // Crashed and zombie members never vote again; one that
                // restarted votes once it says it may (caught up).
                voter: matches!(self.nodes[i].state, NodeState::Running | NodeState::Paused)
                    && node.can_vote(),
                configuration: self.log_configurations[i],
            });
        }
        if self.opts.config.mode.view_primary() {
            // No election: any member of the newest view may take over
            // (in backup-memory mode the log carries views' no-ops only,
            // committed as in primary-backup mode).
            let newest = self.newest_view();
            let Some((_, view)) = newest else { return };
            for m in members.iter_mut() {
                let node = self.nodes[m.node].driver.log();
                m.voter = matches!(
                    self.nodes[m.node].state,
                    NodeState::Running | NodeState::Paused
                ) && node.pb_may_take_over();
            }
            let view_members = verbatim_core::sst::MemberMask(u32::from(view.members));
            for v in check_view_completeness(self.now, &members, view_members, &self.committed) {
                self.violation(v);
            }
            return;
        }
        for v in check_electable_completeness(self.now, &members, &self.committed) {
            self.violation(v);
        }
    }

    fn snapshot(&mut self) {
        let statuses = self.live_statuses();
        let logs = self.with_settled_memory(|c| {
            let mut logs = Vec::new();
            for (i, st) in statuses {
                // Beyond its own commit point a member may hold stale
                // entries that a later leader will overwrite; below it,
                // every entry must be the committed one.
                let known_committed = c.read_log(i, st.apply_pos, st.apply_index, st.commit_pos);
                for v in c.committed.check_log(c.now, i, &known_committed) {
                    c.violation(v);
                }
                let log = c.read_log(i, st.apply_pos, st.apply_index, st.tail_pos);
                c.log_configurations[i] = c.read_configuration;
                logs.push((i, log));
            }
            logs
        });
        for v in check_log_matching(self.now, &logs) {
            self.violation(v);
        }
        self.check_electable_logs(logs);
    }

    // ----- clients ---------------------------------------------------------

    fn client_new_op(&mut self, c: usize) {
        if self.clients[c].outstanding.is_some() {
            return;
        }
        if let Some(limit) = self.opts.ops_limit {
            if self.ops_issued >= limit {
                return;
            }
        }
        self.ops_issued += 1;
        let keys = self.opts.keys.max(1) as u64;
        let o = &self.opts;
        let (read_p, incr_p, cas_p, del_p) = (
            o.read_permille,
            o.incr_permille,
            o.cas_permille,
            o.del_permille,
        );
        let vmax = o.value_bytes_max.max(16);
        let vmin = o.value_bytes_min;
        let stream_p = o.stream_permille;
        let client = &mut self.clients[c];
        let request_id = client.next_request;
        client.next_request += 1;
        if stream_p > 0 && client.rng.range_inclusive(0, 999) < stream_p {
            self.client_new_stream_op(c, request_id);
            return;
        }
        let client = &mut self.clients[c];
        let r = client.rng.range_inclusive(0, 999);
        let value_key = format!("k{}", client.rng.range_inclusive(0, keys - 1)).into_bytes();
        let counter_key = format!("n{}", client.rng.range_inclusive(0, keys - 1)).into_bytes();
        let mut fresh = format!("c{c}r{request_id}").into_bytes();
        let lo = (fresh.len() as u64).max(vmin as u64);
        let len = client.rng.range_inclusive(lo, (vmax as u64).max(lo)) as usize;
        fresh.resize(len, b'.');
        let input = if r < read_p {
            let key = if client.rng.chance(1, 2) {
                value_key
            } else {
                counter_key
            };
            KvInput::Get { key }
        } else if r < read_p + incr_p {
            let delta = client.rng.range_inclusive(1, 5) as i64 - 2;
            KvInput::Incr {
                key: counter_key,
                delta,
            }
        } else if r < read_p + incr_p + cas_p {
            let expected = client.last_seen.get(&value_key).cloned().flatten();
            KvInput::Cas {
                key: value_key,
                expected,
                new: fresh,
            }
        } else if r < read_p + incr_p + cas_p + del_p {
            KvInput::Del { key: value_key }
        } else {
            KvInput::Set {
                key: value_key,
                value: fresh,
            }
        };
        let op = match &input {
            KvInput::Get { key } => KvOp::Get { key },
            KvInput::Set { key, value } => KvOp::Set { key, value },
            KvInput::Del { key } => KvOp::Del { key },
            KvInput::Incr { key, delta } => KvOp::Incr { key, delta: *delta },
            KvInput::Cas { key, expected, new } => KvOp::Cas {
                key,
                expected: expected.as_deref(),
                new,
            },
        };
        let mut payload = vec![0u8; self.limits.encoded_bytes_max() as usize];
        let n = op
            .encode(&mut payload)
            .expect("buffer sized for the largest operation");
        payload.truncate(n);
        let write = !matches!(input, KvInput::Get { .. });
        self.history.push(Operation {
            client: c as u64,
            input,
            call_ns: self.now,
            return_ns: u64::MAX,
            output: None,
        });
        self.clients[c].outstanding = Some(Outstanding {
            op: self.history.len() - 1,
            stream: false,
            request_id,
            write,
            payload,
            attempt: 0,
        });
        self.client_send(c);
    }

    /// A stream operation: an `XADD` of a unique tag (automatic id from
    /// the client's clock) or a whole-stream `XRANGE`, on one of two
    /// streams.
    fn client_new_stream_op(&mut self, c: usize, request_id: u64) {
        let client = &mut self.clients[c];
        let key = format!("s{}", client.rng.range_inclusive(0, 1)).into_bytes();
        let (input, write) = if client.rng.chance(1, 2) {
            let tag = format!("c{c}r{request_id}").into_bytes();
            (StreamInput::Add { key, tag }, true)
        } else {
            (StreamInput::Range { key }, false)
        };
        let mut pairs = vec![0u8; 64];
        let op = match &input {
            StreamInput::Add { key, tag } => {
                let n = encode_pairs([(&b"tag"[..], &tag[..])].into_iter(), &mut pairs)
                    .expect("a short tag fits");
                pairs.truncate(n);
                StreamOp::Add {
                    key,
                    id: IdSpec::Auto {
                        hint_ms: self.now / 1_000_000,
                    },
                    maxlen: None,
                    pairs: &pairs,
                }
            }
            StreamInput::Range { key } => StreamOp::Range {
                key,
                start: StreamId::MIN,
                end: StreamId::MAX,
                count: None,
            },
        };
        let mut payload = vec![0u8; 256];
        let n = op.encode(&mut payload).expect("a short operation fits");
        payload.truncate(n);
        self.stream_history.push(StreamOperation {
            client: c as u64,
            input,
            call_ns: self.now,
            return_ns: u64::MAX,
            output: None,
        });
        self.clients[c].outstanding = Some(Outstanding {
            op: self.stream_history.len() - 1,
            stream: true,
            request_id,
            write,
            payload,
            attempt: 0,
        });
        self.client_send(c);
    }

    fn client_send(&mut self, c: usize) {
        let client = &self.clients[c];
        let Some(o) = &client.outstanding else { return };
        let req = ClientRequest {
            client: c,
            request_id: o.request_id,
            write: o.write,
            stream: o.stream,
            payload: o.payload.clone(),
        };
        let at = self.now + self.opts.net.ud_ns(req.payload.len() as u64) as u64;
        let attempt = o.attempt;
        let node = client.target;
        self.queue.push(at, Ev::ClientArrive { node, req });
        self.queue.push(
            self.now + self.opts.client_timeout_ns,
            Ev::ClientTimeout { client: c, attempt },
        );
    }

    fn client_reply(&mut self, c: usize, request_id: u64, answer: ClientAnswer) {
        let matches = self.clients[c]
            .outstanding
            .as_ref()
            .is_some_and(|o| o.request_id == request_id);
        if !matches {
            return;
        }
        self.log(|| {
            format!("client {c}: reply to request {request_id} (current: {matches}): {answer:?}")
        });
        let n = self.nodes.len();
        match answer {
            ClientAnswer::StreamDone(out) => {
                let o = self.clients[c].outstanding.take().unwrap();
                let op = &mut self.stream_history[o.op];
                op.output = Some(out);
                op.return_ns = self.now;
                let think = self.clients[c]
                    .rng
                    .range_inclusive(0, self.opts.think_ns_max);
                self.queue
                    .push(self.now + think, Ev::ClientSend { client: c });
            }
            ClientAnswer::Done(out) => {
                let o = self.clients[c].outstanding.take().unwrap();
                let op = &mut self.history[o.op];
                op.output = Some(out.clone());
                op.return_ns = self.now;
                match (&op.input, &out) {
                    (KvInput::Get { key }, KvOutput::Value(v)) => {
                        self.clients[c].last_seen.insert(key.clone(), v.clone());
                    }
                    (KvInput::Set { key, value }, _) => {
                        self.clients[c]
                            .last_seen
                            .insert(key.clone(), Some(value.clone()));
                    }
                    _ => {}
                }
                if self.healed
                    && o.write
                    && self.history[o.op].call_ns >= self.opts.safety_ns
                    && self.first_ack_after_heal.is_none()
                {
                    self.first_ack_after_heal = Some(self.now);
                    self.log(|| {
                        "liveness: a write invoked after healing is acknowledged".to_string()
                    });
                }
                let think = self.clients[c]
                    .rng
                    .range_inclusive(0, self.opts.think_ns_max);
                self.queue
                    .push(self.now + think, Ev::ClientSend { client: c });
            }
            ClientAnswer::Redirect(hint) => {
                let client = &mut self.clients[c];
                client.target = match hint {
                    Some(m) if m.index() < n => m.index(),
                    _ => (client.target + 1) % n,
                };
                client.outstanding.as_mut().unwrap().attempt += 1;
                self.client_send(c);
            }
            ClientAnswer::Busy => {
                self.clients[c].outstanding.as_mut().unwrap().attempt += 1;
                // Back off a little before asking the same member again.
                let o = self.clients[c].outstanding.as_ref().unwrap();
                let req = ClientRequest {
                    client: c,
                    request_id: o.request_id,
                    write: o.write,
                    stream: o.stream,
                    payload: o.payload.clone(),
                };
                let attempt = o.attempt;
                let node = self.clients[c].target;
                self.queue
                    .push(self.now + 50_000, Ev::ClientArrive { node, req });
                self.queue.push(
                    self.now + self.opts.client_timeout_ns,
                    Ev::ClientTimeout { client: c, attempt },
                );
            }
        }
    }

    fn finish(mut self) -> RunReport {
        self.snapshot();
        self.compare_backups_at_end();
        if self.opts.trace {
            for c in 0..self.clients.len() {
                if let Some(o) = &self.clients[c].outstanding {
                    let op = if o.stream {
                        format!("{:?}", self.stream_history[o.op])
                    } else {
                        format!("{:?}", self.history[o.op])
                    };
                    let (attempt, target) = (o.attempt, self.clients[c].target);
                    self.log(|| {
                        format!(
                            "end client {c}: outstanding attempt {attempt} target {target}: {op}"
                        )
                    });
                }
            }
            for i in 0..self.nodes.len() {
                let st = self.nodes[i].driver.log().status();
                let state = self.nodes[i].state;
                let recovery = self.nodes[i].driver.log().recovery_status();
                let peers: Vec<String> = st.peers[..self.nodes.len()]
                    .iter()
                    .filter(|p| p.id.index() != i)
                    .map(|p| {
                        format!(
                            "{}:{:?} sent={} acked={} ch={:?} apply_seen={}",
                            p.id.0,
                            p.repl,
                            p.sent_pos,
                            p.acked_pos,
                            p.channel_broken,
                            p.row.apply_pos
                        )
                    })
                    .collect();
                self.log(|| {
                    format!(
                        "end node {i} {state:?} {:?} term {} leader {:?} granted {:?} head {} apply {}@{} commit {}@{} tail {}@{}\n      peers {}\n      recovery {:?}\n      {:?}",
                        st.role,
                        st.term,
                        st.leader,
                        st.log_granted_to,
                        st.head_pos,
                        st.apply_index,
                        st.apply_pos,
                        st.commit_index,
                        st.commit_pos,
                        st.tail_index,
                        st.tail_pos,
                        peers.join("; "),
                        recovery,
                        st.counters
                    )
                });
                if let Some(v) = &self.nodes[i].driver.engines().views {
                    let vs = v.status(self.local(i, self.now));
                    self.log(|| format!("      views {vs:?}"));
                }
            }
        }
        let mut states = Vec::new();
        for (i, sn) in self.nodes.iter().enumerate() {
            // A member stopped (a zombie) in the middle of a restore holds
            // a half-restored state under its old apply index: it is not
            // that index's state, and nothing reads it.
            if sn.state != NodeState::Crashed && sn.driver.log().state_machine_current() {
                states.push((
                    i,
                    sn.driver.log().apply_index(),
                    sn.driver.log().state_machine().digest(),
                ));
            }
        }
        for v in self.sm_safety.check_final(self.now, &states) {
            self.violation(v);
        }
        if let Err(v) = check_streams(&self.stream_history) {
            self.violation(Violation {
                invariant: "stream linearizability",
                time_ns: self.now,
                detail: format!("stream {:?}: {}", String::from_utf8_lossy(&v.key), v.detail),
            });
        }
        let mut unknown = false;
        let (verdict, linearizability_steps) =
            check_history_measured(&self.history, DEFAULT_STEPS_PER_KEY);
        match verdict {
            Verdict::Linearizable => {}
            Verdict::Violation { key, operations } => {
                let ops: Vec<String> = operations
                    .iter()
                    .take(40)
                    .map(|&k| format!("{:?}", self.history[k]))
                    .collect();
                self.violation(Violation {
                    invariant: "linearizability",
                    time_ns: self.now,
                    detail: format!(
                        "key {:?}: no linearization of {} operations:\n    {}",
                        String::from_utf8_lossy(&key),
                        operations.len(),
                        ops.join("\n    ")
                    ),
                });
            }
            Verdict::Unknown { key } => {
                unknown = true;
                self.log(|| format!("linearizability: search budget exhausted on key {key:?}"));
            }
        }
        self.check_subgroups_live();
        let live = self
            .nodes
            .iter()
            .filter(|n| n.state == NodeState::Running)
            .count();
        // Members pruned past come back through state transfer, from a
        // follower or, when none can give, from the leader: with a
        // majority running and at least one of them whole (to lead and
        // give), the group must make progress.
        let recoverable = (0..self.nodes.len())
            .filter(|i| {
                self.nodes[*i].state == NodeState::Running && !self.needing_recovery.contains(i)
            })
            .count();
        // Running members that may vote (a member restarted with empty
        // memory may not until its log holds what it acknowledged) must
        // hold a majority of every group of the configuration committed
        // last (DARE §3.4), and of the one each running member goes by if
        // a reconfiguration was under way.
        let running = (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i].state == NodeState::Running && self.nodes[i].driver.log().can_vote()
            })
            .fold(verbatim_core::sst::MemberMask::NONE, |m, i| {
                m.with(MemberId(i as u8))
            });
        let committed = self
            .configurations
            .latest()
            .expect("the initial configuration is known");
        let in_effect = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].state == NodeState::Running)
            .map(|i| self.nodes[i].driver.log().configuration())
            .all(|c| c.is_quorum(running));
        let mut liveness_expected = committed.is_quorum(running) && in_effect && recoverable >= 1;
        if self.opts.config.mode.view_primary() {
            // Primary-backup (and backup-memory): a majority of the
            // coordinators (every member here) running, and a member of
            // the newest view that may take over (or leads): when every
            // member of it lost its memory, the entries (or the store's
            // copies) only they held are gone, and the group rightly
            // stops.
            let newest = self.newest_view();
            let view_members = newest.map_or(u32::MAX, |(_, v)| u32::from(v.members));
            let can_lead = (0..self.nodes.len()).any(|i| {
                let log = self.nodes[i].driver.log();
                view_members & (1 << i) != 0
                    && self.nodes[i].state == NodeState::Running
                    && (log.role() == Role::Leader || log.pb_may_take_over())
            });
            liveness_expected = live * 2 > self.nodes.len() && can_lead && recoverable >= 1;
            if !can_lead {
                self.log(|| {
                    format!("liveness not judged: no running member of the newest view {newest:?} may take over")
                });
            }
        }
        if liveness_expected && committed.state != verbatim_core::membership::ConfigState::Stable {
            // A change between phases is finished by whoever leads (DARE
            // §3.4: a new leader goes on where its predecessor stopped).
            self.violation(Violation {
                invariant: "reconfigurations finish",
                time_ns: self.now,
                detail: format!(
                    "the group was still {committed:?} at the end; leader {:?}",
                    self.leader_now()
                ),
            });
        }
        if liveness_expected {
            // Members removed as silent that run again are back.
            let running_now = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].state == NodeState::Running)
                .fold(verbatim_core::sst::MemberMask::NONE, |m, i| {
                    m.with(MemberId(i as u8))
                });
            for mut v in crate::check::configurations::check_zombies_returned(
                self.now,
                &committed,
                running_now,
            ) {
                // What the leader of the moment knows of the members away.
                if let Some(l) = self.leader_now() {
                    let log = self.nodes[l].driver.log();
                    v.detail += &format!(
                        "; leader {l}: reconfiguring {}, config entry {}, apply index {}",
                        log.reconfiguring(),
                        log.config_index(),
                        log.apply_index()
                    );
                    let st = log.status();
                    for m in committed.away.iter() {
                        let p = &st.peers[m.index()];
                        v.detail += &format!(
                            "; leader {l} sees member {}: row changed at {:.3} ms, reachable {}, replication {:?}",
                            m.0,
                            p.row_changed_ns as f64 / 1e6,
                            p.reachable,
                            p.repl
                        );
                    }
                }
                self.violation(v);
            }
        }
        if !liveness_expected && self.first_ack_after_heal.is_none() {
            let (needing, n) = (self.needing_recovery.len(), self.nodes.len());
            self.log(|| {
                format!(
                    "liveness not judged: {needing} members need state transfer, {recoverable} of {n} can serve"
                )
            });
        }
        if self.first_ack_after_heal.is_none() && liveness_expected {
            self.violation(Violation {
                invariant: "liveness",
                time_ns: self.now,
                detail: format!(
                    "no write invoked after healing (at {} ms) was acknowledged within {} ms ({live} of {} members running)",
                    self.opts.safety_ns / 1_000_000,
                    self.opts.liveness_ns / 1_000_000,
                    self.nodes.len()
                ),
            });
        }
        // A view engine counter summed over the members' last processes.
        let views_sum = |f: fn(&verbatim_core::views::ViewStatus) -> u64| -> u64 {
            self.nodes
                .iter()
                .filter_map(|n| n.driver.engines().views.as_ref())
                .map(|v| f(&v.status(self.now)))
                .sum()
        };
        // A log-engine counter summed over the members' last processes.
        let log_sum = |f: fn(&verbatim_core::node::Counters) -> u64| -> u64 {
            self.nodes
                .iter()
                .map(|n| f(n.driver.log().counters()))
                .sum()
        };
        let backup_sum = |f: fn(&verbatim_core::backup::engine::BackupCounters) -> u64| -> u64 {
            self.backup_counters.values().map(f).sum()
        };
        let view_slots_skipped = views_sum(|s| s.slots_skipped);
        let coordinator_rejoins = views_sum(|s| s.own_acceptor_rejoins);
        RunReport {
            ops_ok: self.history.iter().filter(|o| o.output.is_some()).count() as u64,
            ops_total: self.history.len() as u64,
            terms_with_leader: self.election.terms(),
            committed: self.committed.len(),
            needs_recovery: self.needs_recovery,
            snapshots_served: self.snapshots_served,
            recoveries: self.recoveries,
            reconfigurations: self.reconfigurations,
            zombies_removed: log_sum(|c| c.zombies_removed),
            zombies_readded: log_sum(|c| c.zombies_readded),
            log_full: self.log_full_total,
            log_full_since_recovery_marked: self
                .log_full_at_first_mark
                .map_or(0, |at| self.log_full_total.saturating_sub(at)),
            recovery_holds_released: log_sum(|c| c.recovery_holds_released),
            final_apply_index: self
                .nodes
                .iter()
                .map(|n| (n.state == NodeState::Running).then(|| n.driver.log().apply_index()))
                .collect(),
            configuration: Some(committed),
            linearizability_unknown: unknown,
            linearizability_steps,
            rows_refused: log_sum(|c| c.rows_rejected),
            entries_refused: log_sum(|c| c.entries_rejected),
            landed_mid_read: (0..self.nodes.len())
                .map(|i| self.net.nic(i).mem.landed_mid_read())
                .sum(),
            false_suspicions: log_sum(|c| c.false_suspicions),
            late_timeouts_forgiven: log_sum(|c| c.late_timeouts_forgiven),
            lease_reads: log_sum(|c| c.lease_reads),
            lease_samples: self.leases.active_samples,
            view_takeovers: log_sum(|c| c.view_takeovers),
            elections_started: log_sum(|c| c.elections_started),
            operations_speculated: log_sum(|c| c.operations_speculated),
            speculation_rollbacks: log_sum(|c| c.speculation_rollbacks),
            mcast_sent: self.mcast.sent_total,
            mcast_delivered: self.mcast.delivered_total,
            mcast_wedged: self
                .nodes
                .iter()
                .filter_map(|n| n.driver.engines().multicast.as_ref())
                .filter(|m| m.wedged().is_some())
                .count() as u64,
            mcast_installs: self.mcast.installs,
            mcast_joins: self.mcast_joins,
            mcast_large_sent: self.mcast_large_sent,
            mcast_large: self.mcast_large_delivered,
            subgroup_sent: self.subgroup_orders.iter().map(|o| o.sent_total).sum(),
            subgroup_delivered: self.subgroup_orders.iter().map(|o| o.delivered_total).sum(),
            subgroup_installs: self.subgroup_orders.iter().map(|o| o.installs).sum(),
            subgroup_joins: self.subgroup_joins,
            subgroup_member_crashes: self.subgroup_member_crashes,
            subgroups_judged_live: self.subgroups_judged_live,
            subgroup_final_deliveries_checked: self.subgroup_liveness.checked,
            mcast_restarts: self.mcast_restarts.restarts,
            mcast_halted: self
                .nodes
                .iter()
                .filter_map(|n| n.driver.engines().multicast.as_ref())
                .filter(|m| m.halted().is_some())
                .count() as u64,
            view_campaigns: log_sum(|c| c.view_campaigns),
            views_decided: self
                .nodes
                .iter()
                .filter_map(|n| n.driver.engines().views.as_ref())
                .filter_map(|v| v.latest().map(|(e, _)| e))
                .max()
                .unwrap_or(0),
            view_slots_skipped,
            coordinator_rejoins,
            counter_suspicions: log_sum(|c| c.counter_suspicions),
            backup_takeovers: self.backup_audit.audits,
            backup_copies: backup_sum(|c| c.copies_done),
            backup_zero_copy: backup_sum(|c| c.writes_zero_copy),
            backup_forwarded: backup_sum(|c| c.writes_forwarded),
            backup_replays: backup_sum(|c| c.replays),
            backup_copies_compared: self.backup_copies.compared,
            backup_bytes_compared: self.backup_copies.bytes_compared,
            backup_crashes_mid_write: self.backup_crashes_mid_write,
            backup_crashes_mid_copy: self.backup_crashes_mid_copy,
            backup_crashed_mid_copy: self.backup_crashed_mid_copy,
            backup_final: (0..self.nodes.len()).find_map(|i| {
                let b = self.nodes[i].driver.engines().backup.as_ref()?;
                (self.nodes[i].state == NodeState::Running && b.role() == BackupRole::Primary).then(
                    || {
                        let st = b.status();
                        let view = st.view.map_or(0, |(_, _, m)| m);
                        // Copies synced (a write may be in flight at the
                        // end: `synced_members` leaves those out).
                        let synced = st
                            .copies
                            .iter()
                            .enumerate()
                            .filter(|(_, c)| **c == Some(CopyState::Synced))
                            .fold(1u64 << i, |m, (j, _)| m | 1 << j);
                        (i, view, synced)
                    },
                )
            }),
            end_ns: self.now,
            first_ack_after_heal_ns: self.first_ack_after_heal,
            digest: self.digest.finish(),
            violations: self.violations,
            trace: self.trace,
            history: self.history,
            stream_history: self.stream_history,
        }
    }
}

/// A full scan of the store in `mem` (a member's registered memory, read
/// through its NIC's mapping: the scan lets no piece of a WRITE in flight
/// land; it writes only the store's scratch bitmaps in local memory,
/// which recovery rebuilds before it uses them).
fn audit_store(
    mem: &SimMemory,
    lay: &verbatim_core::backup::engine::BackupLayout,
) -> verbatim_core::backup::Audit {
    let store = verbatim_core::backup::Store::attach(
        mem.clone(),
        lay.geo,
        Addr::new(STORE_REGION, lay.mailbox_bytes),
        Addr::new(STORE_LOCAL_REGION, 0),
    );
    let p = lay.geo.params;
    let mut scratch = vec![0u8; (p.key_bytes_max + p.value_bytes_max) as usize];
    store.audit(&mut scratch)
}

/// Runs one simulation; a panic inside the core is reported as a violation
/// (assertions are invariants too).
pub fn run(opts: ClusterOptions) -> RunReport {
    let trace = opts.trace;
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Cluster::new(opts).run()));
    match result {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            RunReport {
                violations: vec![Violation {
                    invariant: "no panic (core assertion)",
                    time_ns: 0,
                    detail: msg,
                }],
                trace: if trace {
                    vec!["(trace lost in panic)".into()]
                } else {
                    Vec::new()
                },
                ..RunReport::default()
            }
        }
    }
}

/// A member's fabric endpoint on the simulated network, for one step:
/// access changes and reconnects take effect at once, work requests are
/// collected and scheduled by the caller with their departure times.
struct SimEndpoint<'a> {
    net: &'a mut Net,
    me: usize,
    posted: &'a mut Vec<WorkRequest>,
}

impl Fabric for SimEndpoint<'_> {
    fn post(&mut self, wr: &WorkRequest) {
        self.posted.push(*wr);
    }

    fn poll_completion(&mut self) -> Option<Completion> {
        self.net.nic_mut(self.me).cq.pop_front()
    }

    fn set_access(
        &mut self,
        peer: MemberId,
        region: RegionId,
        access: Access,
    ) -> Result<(), FabricError> {
        self.net.set_access(self.me, peer, region, access);
        if access == Access::Revoked && self.net.revoke_blocked(self.me, peer.index(), region) {
            // New requests are refused, but a copy that entered before is
            // still in progress: not exclusive yet.
            return Err(FabricError::RevokeUnconfirmed);
        }
        Ok(())
    }

    fn reconnect(&mut self, peer: MemberId, channel: Channel) -> Result<(), FabricError> {
        self.net.reconnect(self.me, peer, channel);
        Ok(())
    }
}

/// The simulated process around a member's driver: its inbox of client
/// requests, the crash notifications it got, and what it sends back.
struct SimHost<'a> {
    inbox: &'a mut VecDeque<ClientRequest>,
    peer_down: &'a mut Vec<MemberId>,
    peer_up: &'a mut Vec<MemberId>,
    answers: &'a mut Vec<(SimRoute, SentAnswer)>,
    events: &'a mut Vec<DriverEvent>,
    mcast: &'a mut Vec<(McastDelivery, Vec<u8>)>,
    /// Persistent multicast: the member's disk (syncs under way, how long
    /// one takes) and the syncs that completed in this step.
    syncs: &'a mut VecDeque<(u64, PersistMark, usize)>,
    sync_covered: &'a mut Option<PersistMark>,
    sync_ns: u64,
    synced: &'a mut Vec<PersistMark>,
    disk: &'a mut crate::mcast_disk::McastDisk,
    view_sync: &'a mut Option<(u64, u64, usize)>,
    /// A total restart's tail, and what the host delivered of it.
    tail: &'a mut Option<verbatim_driver::restart::RestartLog>,
    restart_delivered: &'a mut Vec<(RestartTail, Deliveries)>,
    /// Subgroup deliveries of the step (subgroup, delivery, payload).
    subgroup: &'a mut Vec<(usize, McastDelivery, Vec<u8>)>,
    /// Work requests the step posted into subgroup regions.
    subgroup_posts: &'a mut Vec<verbatim_core::fabric::Action>,
    /// Backup-memory mode: the member's store, and its used part each
    /// time the step acknowledged a write.
    store_watch: Option<StoreWatch>,
    acknowledged_stores: &'a mut Vec<Vec<u8>>,
}

/// A member's store region, read through its NIC's mapping (no piece of
/// a WRITE in flight lands in the middle of the read).
struct StoreWatch {
    mem: SimMemory,
    layout: verbatim_core::backup::engine::BackupLayout,
}

impl StoreWatch {
    /// The used part of the store (header to the last slab carved), from
    /// the end of the mailbox.
    fn used_part(&self) -> Vec<u8> {
        let lay = &self.layout;
        let control = self.mem.load_u64(Addr::new(
            STORE_REGION,
            lay.mailbox_bytes + lay.geo.control_offset(),
        ));
        let carved = (control as u32).min(lay.geo.params.slab_count);
        let mut b = vec![0u8; lay.geo.used_bytes(carved) as usize];
        self.mem
            .read(Addr::new(STORE_REGION, lay.mailbox_bytes), &mut b);
        b
    }
}

/// Multicast deliveries of one step, with their payloads.
type Deliveries = Vec<(McastDelivery, Vec<u8>)>;

impl Host<SimMemory, RecordingKv> for SimHost<'_> {
    type Route = SimRoute;

    fn take_peer_down(&mut self) -> Option<MemberId> {
        if self.peer_down.is_empty() {
            None
        } else {
            Some(self.peer_down.remove(0))
        }
    }

    fn take_peer_up(&mut self) -> Option<MemberId> {
        if self.peer_up.is_empty() {
            None
        } else {
            Some(self.peer_up.remove(0))
        }
    }

    fn next_request(&mut self) -> Option<Incoming<SimRoute>> {
        let req = self.inbox.pop_front()?;
        Some(Incoming {
            // Client ids start at 1 (0 is the no-op's).
            client_id: req.client as u64 + 1,
            request_id: req.request_id,
            write: req.write,
            payload: req.payload,
            route: SimRoute {
                client: req.client,
                request_id: req.request_id,
                write: req.write,
                stream: req.stream,
            },
        })
    }

    fn answer(&mut self, route: SimRoute, answer: Answer<'_>) {
        if let (Some(w), true, Answer::Ok(_)) = (&self.store_watch, route.write, &answer) {
            self.acknowledged_stores.push(w.used_part());
        }
        let a = match answer {
            Answer::Ok(b) => SentAnswer::Ok(b.to_vec()),
            Answer::NotLeader(h) => SentAnswer::NotLeader(h),
            Answer::Busy => SentAnswer::Busy,
            Answer::Refused(r) => SentAnswer::Refused(r),
        };
        self.answers.push((route, a));
    }

    fn event(
        &mut self,
        _now_ns: u64,
        _engines: &Engines<SimMemory, RecordingKv>,
        event: DriverEvent,
    ) {
        self.events.push(event);
    }

    fn multicast_delivered(&mut self, _now_ns: u64, delivery: &McastDelivery, payload: &[u8]) {
        // A delivery inside a trim is synced before the application sees
        // it (the replica's log does so).
        self.disk
            .delivered(delivery.epoch, delivery.seq, delivery.in_trim);
        self.mcast.push((*delivery, payload.to_vec()));
    }

    fn subgroup_delivered(
        &mut self,
        _now_ns: u64,
        subgroup: usize,
        delivery: &McastDelivery,
        payload: &[u8],
    ) {
        self.subgroup.push((subgroup, *delivery, payload.to_vec()));
    }

    /// Work requests into subgroup regions go to the subgroup checker
    /// (bytes stay among a subgroup's members).
    fn action_executed(
        &mut self,
        action: &verbatim_core::fabric::Action,
        _result: Result<(), FabricError>,
    ) {
        if let verbatim_core::fabric::Action::Post(wr) = action {
            if crate::check::subgroups::subgroup_of_region(wr.op.remote().region).is_some() {
                self.subgroup_posts.push(*action);
            }
        }
    }

    fn multicast_persist(&mut self, _now_ns: u64, record: &McastPersist, payload: &[u8]) {
        self.disk.message(record, payload);
    }

    /// The view's record, synced as messages are (`sync_ns`).
    fn multicast_view(&mut self, now_ns: u64, epoch: u64, members: u64) -> bool {
        match *self.view_sync {
            Some((done, e, upto)) if e == epoch => {
                if now_ns < done {
                    return false;
                }
                self.disk.synced(upto);
                *self.view_sync = None;
                true
            }
            _ => {
                self.disk.view(epoch, members);
                *self.view_sync = Some((now_ns + self.sync_ns, epoch, self.disk.len()));
                false
            }
        }
    }

    /// Delivers the tail from the log read at restart, each delivery
    /// synced.
    fn multicast_restart(&mut self, _now_ns: u64, tail: &RestartTail) -> bool {
        let Some(log) = self.tail.take() else {
            return true;
        };
        let deliveries =
            verbatim_driver::restart::tail_deliveries(tail, &log).unwrap_or_else(|(s, k)| {
                panic!("restart tail {tail:?}: message {k} of {} not on disk", s.0)
            });
        let mut out = Vec::new();
        for (d, payload) in deliveries {
            self.disk.delivered(d.epoch, d.seq, true);
            out.push((d, payload.to_vec()));
        }
        self.restart_delivered.push((*tail, out));
        true
    }

    /// A sync starts whenever the engine handed out more than the last
    /// one covers, and completes `sync_ns` later (a disk that takes its
    /// time: meanwhile the message is received but not locally stable).
    fn multicast_sync(&mut self, now_ns: u64, mark: PersistMark) -> Option<PersistMark> {
        if *self.sync_covered != Some(mark) && mark.counts.iter().any(|&c| c > 0) {
            *self.sync_covered = Some(mark);
            self.syncs
                .push_back((now_ns + self.sync_ns, mark, self.disk.len()));
        }
        let mut done = None;
        while self.syncs.front().is_some_and(|(at, _, _)| *at <= now_ns) {
            let (_, m, upto) = self.syncs.pop_front().expect("front checked");
            self.disk.synced(upto);
            self.synced.push(m);
            done = Some(m);
        }
        done
    }
}

/// A multicast engine's view, as a step began or ended.
#[derive(Clone, Copy, Debug)]
struct McastSeen {
    halted: Option<HaltCause>,
    epoch: u64,
    digest: u64,
    view: u64,
}

impl McastSeen {
    fn of<M: verbatim_core::Memory>(m: &verbatim_core::multicast::McastEngine<M>) -> Option<Self> {
        Some(McastSeen {
            halted: m.halted(),
            epoch: m.epoch(),
            digest: m.view_digest()?,
            view: m.view(),
        })
    }

    /// A subgroup engine's view, its members in member ids (the digest
    /// is over its ranks: compared only within its subgroup).
    fn of_subgroup<M: verbatim_core::Memory>(g: &SubgroupEngine<M>) -> Option<Self> {
        Some(McastSeen {
            view: g.view_members(),
            ..McastSeen::of(g.engine())?
        })
    }
}
