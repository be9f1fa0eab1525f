//! One member of a DARE group, sans-IO.
//!
//! See the crate documentation for the driving contract. This module holds
//! the state and the public API; the protocol roles live in submodules:
//! `io` (work requests, pushes, channels), `election` (failure detection,
//! candidates, voters, grants), `leader` (log adjustment, direct update,
//! commit, pruning, reads) and `apply` (walking and applying the log).

mod apply;
mod election;
mod io;
mod leader;
mod pb;
mod reconfig;
mod recovery;
mod restart;
#[cfg(test)]
mod tests;
mod view_led;

pub use election::FD_TIMELY_CHECKS_TO_SHRINK;
pub use reconfig::{ReconfigError, ReconfigOp};
pub use recovery::RecoveryStatus;

use crate::config::{Config, ConfigError, ENTRY_PAYLOAD_BYTES_CAP, REPLY_BYTES_CAP};
use crate::fabric::{
    Access, Action, Channel, Completion, FabricError, MemberId, RegionId, MAX_MEMBERS,
};
use crate::layout::{Layout, STAGING_SLOTS};
use crate::log::{AdjustHeader, Ring};
use crate::mem::Memory;
use crate::rng::SplitMix64;
use crate::sessions::Sessions;
use crate::sm::StateMachine;
use crate::sst::{MemberMask, Row, Table, DARE_ROW};
use heapless::Deque;

/// Actions queued between two drains by the host, at most.
pub const ACTION_QUEUE_CAP: usize = 512;
/// Events queued between two drains by the host, at most.
pub const EVENT_QUEUE_CAP: usize = READ_QUEUE_CAP + 1024;
/// Work requests in flight, at most (the `wr_id` space).
pub const INFLIGHT_CAP: usize = 1024;
/// Reads waiting for term confirmation or apply, at most.
pub const READ_QUEUE_CAP: usize = 1024;
/// Log batches (entries + tail write) in flight per follower, at most.
pub const LOG_BATCHES_INFLIGHT_MAX: u32 = 8;
/// Adjustment items fetched by the first READ (most lists are short).
pub const ADJUST_ITEMS_FIRST_READ: u64 = 64;
/// Primary-backup mode: operations a primary executes ahead of their
/// commit at most (each holds its reply until then).
pub const SPECULATION_DEPTH_MAX: usize = 128;

/// The role of a member (DARE Figure 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Idle: follows a leader, or waits for one.
    Follower,
    /// Asks for votes.
    Candidate,
    /// Leads its term.
    Leader,
}

/// Something the host should know or do; drained with [`Node::poll_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A write was applied (or recognised as a duplicate): answer the
    /// client. Only the leader emits replies.
    Reply {
        /// The client.
        client_id: u64,
        /// Its request.
        request_id: u64,
        /// Log index of the applied entry.
        index: u64,
        /// Where the state machine's reply (the first one, for
        /// duplicates) waits: [`Node::copy_reply`] with this stage slot
        /// returns it until the next call into the node other than
        /// `poll_*` and the getters.
        stage: u32,
        /// True when the request had been superseded by a newer one of the
        /// same client, so no reply is remembered for it.
        stale: bool,
    },
    /// A read is linearizable now: the host may run it against the state
    /// machine ([`Node::state_machine`]) and answer.
    ReadReady {
        /// The host's token from [`Node::submit_read`].
        token: u64,
    },
    /// A read cannot be served here any more (leadership lost).
    ReadAborted {
        /// The token.
        token: u64,
    },
    /// Role, term or leader changed.
    RoleChanged {
        /// New role.
        role: Role,
        /// Current term.
        term: u64,
        /// Known leader.
        leader: Option<MemberId>,
    },
    /// The log is full; writes are refused until the group applies and
    /// the leader prunes (DARE §3.3.2).
    LogFull,
    /// A peer stopped answering (retries exhausted, or the host said so).
    PeerUnreachable {
        /// The peer.
        peer: MemberId,
    },
    /// A peer answers again.
    PeerReachable {
        /// The peer.
        peer: MemberId,
    },
    /// A follower is too far behind: the entries it needs were pruned, or
    /// its log disagrees with ours in a way adjustment cannot repair. It
    /// needs state transfer (DARE §3.4 "Recovery").
    PeerNeedsRecovery {
        /// The peer.
        peer: MemberId,
    },
    /// The leader pruned past the snapshot a recovering member is
    /// fetching or restoring: the log reached `recovery_log_hold_percent`
    /// of the ring during its transfer. The member recovers again from a
    /// newer snapshot; if this repeats, the ring is too small for the
    /// write rate over a transfer.
    RecoveryHoldReleased {
        /// The member.
        peer: MemberId,
        /// Bytes the log held when it was released.
        held_bytes: u64,
    },
    /// Our own log holds an entry that fails validation below the commit
    /// pointer: this member stops applying and does not vote.
    LogCorrupt {
        /// Position of the bad entry.
        pos: u64,
    },
    /// A recovering member asked us for a snapshot (DARE §3.4): the host
    /// calls [`Node::write_snapshot`] before the next step, or in a fork
    /// of its process (the state as of this step, while we apply on).
    SnapshotWanted {
        /// The request answered.
        generation: u64,
    },
    /// This member restored a snapshot and rejoins the group.
    Recovered {
        /// First log index after the snapshot.
        apply_index: u64,
        /// Bytes copied (session table and state machine).
        bytes: u64,
    },
    /// The configuration this member goes by changed (DARE §3.4): the
    /// latest in its log, committed or not.
    ConfigurationChanged {
        /// The new configuration.
        configuration: crate::membership::Configuration,
        /// Index of its CONFIG entry (0: the initial one, or a snapshot's).
        index: u64,
    },
    /// A CONFIG entry was applied here (it is committed): the group's
    /// configuration as of `index`, the same on every member that applies
    /// that index.
    ConfigurationApplied {
        /// The configuration.
        configuration: crate::membership::Configuration,
        /// Index of its CONFIG entry.
        index: u64,
    },
    /// A reconfiguration this leader started is done: the CONFIG entry of
    /// its last phase committed.
    Reconfigured {
        /// What was asked.
        op: ReconfigOp,
        /// The configuration now.
        configuration: crate::membership::Configuration,
    },
}

/// Accepted submissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Appended at this index; a [`Event::Reply`] follows once applied.
    Appended {
        /// Log index.
        index: u64,
    },
    /// Already applied earlier; nothing was appended. Its reply waits in
    /// this reply stage slot ([`Node::copy_reply`]) until the next call.
    Duplicate {
        /// The reply stage slot.
        stage: u32,
    },
}

/// Refused submissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// Not the leader; try the hinted member.
    NotLeader {
        /// The leader we follow, if any.
        leader: Option<MemberId>,
    },
    /// The log is full (DARE §3.3.2).
    LogFull,
    /// The payload exceeds `entry_payload_bytes_max`.
    TooLarge,
    /// Too many reads are waiting.
    ReadQueueFull,
    /// Older than the client's latest applied request.
    Stale,
    /// The leader cannot serve yet (its no-op is not committed).
    NotReady,
}

/// Counters, for status endpoints and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Entries appended by this member as leader (all kinds).
    pub entries_appended: u64,
    /// Entries applied.
    pub entries_applied: u64,
    /// Client operations applied to the state machine.
    pub operations_applied: u64,
    /// Retried writes recognised by the session table.
    pub duplicates: u64,
    /// Reads served.
    pub reads_served: u64,
    /// Term-confirmation rounds completed.
    pub read_rounds: u64,
    /// Reads confirmed by the lease on a view instead of a round
    /// ([`Node::set_read_lease`]).
    pub lease_reads: u64,
    /// Commits held back because this leader's view was not active yet
    /// ([`Node::clear_commit`]); counted once per term.
    pub commits_awaiting_view: u64,
    /// Elections started.
    pub elections_started: u64,
    /// Elections won.
    pub elections_won: u64,
    /// Primary-backup mode: times this member became primary by a view
    /// the coordinators decided (no election).
    pub view_takeovers: u64,
    /// Times this member asked for a view naming it: to take over as
    /// primary (primary-backup mode), or to campaign (log mode with
    /// views). It suspected its leader, or knew none.
    pub view_claims: u64,
    /// Primary-backup mode: operations executed ahead of their commit
    /// (uKharon-KV's speculative execution).
    pub operations_speculated: u64,
    /// Primary-backup mode: times this member stopped being primary with
    /// operations executed that had not committed; its state machine was
    /// then replaced by a snapshot.
    pub speculation_rollbacks: u64,
    /// Log mode with views: campaigns started because a decided view
    /// named this member (the others were DARE's own elections).
    pub view_campaigns: u64,
    /// Log mode with views: claims not made because too many voters
    /// applied past our log (DARE's pre-vote from the table).
    pub claims_forgone: u64,
    /// Times this member suspected its leader because the leader's
    /// heartbeat counter stood still (`handle_peer_stalled`).
    pub counter_suspicions: u64,
    /// Votes granted.
    pub votes_granted: u64,
    /// Times a leader stepped down.
    pub step_downs: u64,
    /// Row copies refused as torn or corrupt.
    pub rows_rejected: u64,
    /// Log entries refused by validation.
    pub entries_rejected: u64,
    /// Error completions.
    pub completion_errors: u64,
    /// Completions with an unknown or stale id.
    pub completions_unknown: u64,
    /// Writes refused because the log was full.
    pub log_full: u64,
    /// Row pushes posted.
    pub row_pushes: u64,
    /// Replication batches (entries + tail write) posted to followers;
    /// `entries_appended / log_batches` is the batching factor.
    pub log_batches: u64,
    /// Log adjustments done (DARE §3.3.1).
    pub adjustments: u64,
    /// HEAD entries appended (pruning).
    pub prunes: u64,
    /// Revokes of log access the fabric could not confirm (retried; no
    /// vote or grant until they are).
    pub revokes_unconfirmed: u64,
    /// Snapshots this member gave to recovering members (DARE §3.4).
    pub snapshots_served: u64,
    /// Starts that found, in the copies of our row at our peers, that we
    /// had run before (a restart with empty memory, DARE §3.2.3).
    pub restarts_read_back: u64,
    /// Suspicions of a leader that was alive after all: after we
    /// suspected it (its heartbeat stood still for Δ), its heartbeat moved
    /// on in the term we suspected it in. Each one grows Δ (DARE §4.2.2).
    pub false_suspicions: u64,
    /// Times Δ came back down (halfway to its configured value) after
    /// enough timely heartbeats.
    pub fd_period_shrinks: u64,
    /// Reconfigurations this member started as leader (DARE §3.4).
    pub reconfigurations: u64,
    /// Members this leader removed because they fell silent (zombies).
    pub zombies_removed: u64,
    /// Members away as zombies this leader added back when they returned.
    pub zombies_readded: u64,
    /// Prunes past the snapshot of a recovering member, because its
    /// transfer would have filled the log (`recovery_log_hold_percent`).
    pub recovery_holds_released: u64,
    /// Timeouts that fired late by half their length or more, so that
    /// this member was not running when they were due (descheduled, a CPU
    /// quota spent, a stopped VM), and were given a fresh window instead
    /// of acting on a silence that was ours: a Δ check that found the
    /// leader's heartbeat still (no suspicion), a candidate's election
    /// timeout (no new term).
    pub late_timeouts_forgiven: u64,
    /// Elections given up before they were published: too many voters had
    /// applied entries past the end of our log for any majority to vote
    /// for us (a pre-vote from the table, see `campaign_is_hopeless`).
    pub campaigns_forgone: u64,
}

/// Replication state of a follower, seen from the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplState {
    /// We are not the leader.
    Idle,
    /// Waiting for the follower to grant us log access.
    AwaitGrant,
    /// Reading its adjustment header.
    ReadHeader,
    /// Reading the rest of its adjustment list.
    ReadList,
    /// Writing its tail to the first non-matching entry.
    Adjusting,
    /// Direct log update (DARE §3.3.1).
    Replicating,
    /// It needs state transfer.
    NeedsRecovery,
    /// The log channel failed; waiting to reconnect.
    Broken,
}

/// A peer as seen by this member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerStatus {
    /// The peer.
    pub id: MemberId,
    /// Its last valid row.
    pub row: Row,
    /// Version of that row (0: none seen).
    pub row_version: u64,
    /// When the row last changed (our clock).
    pub row_changed_ns: u64,
    /// False after retries were exhausted, until it answers again.
    pub reachable: bool,
    /// Control and log channel broken?
    pub channel_broken: [bool; 2],
    /// Replication state (leader's view).
    pub repl: ReplState,
    /// Log position acknowledged by it (leader's view).
    pub acked_pos: u64,
    /// Log position sent to it (leader's view).
    pub sent_pos: u64,
}

/// A snapshot of a member's state (for status endpoints and consoles).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// This member.
    pub id: MemberId,
    /// Group size.
    pub member_count: u8,
    /// Role.
    pub role: Role,
    /// Term.
    pub term: u64,
    /// Known leader.
    pub leader: Option<MemberId>,
    /// The member whose writes our log accepts.
    pub log_granted_to: Option<MemberId>,
    /// Head position and the index of the entry there.
    pub head_pos: u64,
    /// Apply position.
    pub apply_pos: u64,
    /// First index not applied.
    pub apply_index: u64,
    /// Commit position.
    pub commit_pos: u64,
    /// First index not known committed (exact on the leader).
    pub commit_index: u64,
    /// Tail position.
    pub tail_pos: u64,
    /// Index after the last entry (exact on the leader; on a follower,
    /// exact once it applied everything, a lower bound before).
    pub tail_index: u64,
    /// Current failure-detector period Δ.
    pub fd_check_period_ns: u64,
    /// Per-peer state (the first `member_count` entries are valid).
    pub peers: [PeerStatus; MAX_MEMBERS],
    /// Counters.
    pub counters: Counters,
    /// Layout hash.
    pub layout_hash: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    Election = 0,
    FdCheck = 1,
    Heartbeat = 2,
    ApplyPublish = 3,
    Prune = 4,
}
const TIMER_COUNT: usize = 5;

/// Why a work request is in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    RowPush {
        staging: u8,
        version: u64,
    },
    ReadRow {
        round: u64,
    },
    ReadAdjustHeader {
        term: u64,
    },
    ReadAdjustList {
        term: u64,
    },
    WriteAdjustTail {
        term: u64,
        pos: u64,
    },
    WriteEntries {
        term: u64,
    },
    WriteTail {
        term: u64,
        pos: u64,
    },
    WriteCommit {
        term: u64,
    },
    ReadSnapshotHeader {
        generation: u64,
    },
    /// Startup: a peer's copy of our row.
    ReadBackRow,
    ReadSnapshotChunk {
        generation: u64,
        len: u32,
    },
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    generation: u32,
    busy: bool,
    peer: MemberId,
    channel: Channel,
    purpose: Purpose,
}

#[derive(Clone, Copy, Debug, Default)]
struct ChannelState {
    broken: bool,
    inflight: u32,
    retry_at_ns: u64,
    /// Consecutive failures: the reconnect backoff doubles with each, up
    /// to 64 times the configured backoff, and resets on success.
    failures: u32,
}

#[derive(Clone, Copy, Debug)]
struct Repl {
    state: ReplState,
    sent_pos: u64,
    acked_pos: u64,
    commit_sent_pos: u64,
    commit_inflight: bool,
    batches_inflight: u32,
    header: Option<AdjustHeader>,
    adjusted_pos: u64,
    /// Replicating before the channel broke (resume without re-adjusting).
    was_replicating: bool,
    /// The generation of the member's snapshot request when it was found
    /// to need recovery: a newer one, answered, means it recovered.
    recover_gen: u64,
    /// Nonce of the adjustment list we adjusted from (DARE §3.3.1).
    adjusted_nonce: Option<u64>,
    /// Reading its header again after a broken channel: resume only if it
    /// is still the list we adjusted from (the follower did not restart or
    /// grant anew), adjust afresh otherwise.
    verify: bool,
    /// Times we pruned past its snapshot while it recovered (since we last
    /// replicated to it): past `recovery_releases_max` we hold the log for
    /// it until full, so that it does rejoin.
    hold_releases: u32,
}

impl Repl {
    const IDLE: Repl = Repl {
        state: ReplState::Idle,
        sent_pos: 0,
        acked_pos: 0,
        commit_sent_pos: 0,
        commit_inflight: false,
        batches_inflight: 0,
        header: None,
        adjusted_pos: 0,
        was_replicating: false,
        recover_gen: 0,
        adjusted_nonce: None,
        verify: false,
        hold_releases: 0,
    };
}

#[derive(Clone, Copy, Debug)]
struct Peer {
    /// Typed view of the table's last good copy of its row (decoded when
    /// the table accepts a newer one; version 0 in the table: default).
    row: Row,
    row_changed_ns: u64,
    acked_push: u64,
    channels: [ChannelState; 2],
    reachable: bool,
    hb_counter_seen: u64,
    last_ok_ns: u64,
    repl: Repl,
    /// The host reported the peer's process gone (it cannot come back
    /// without state transfer).
    down: bool,
}

impl Peer {
    const NEW: Peer = Peer {
        row: Row::EMPTY,
        row_changed_ns: 0,
        acked_push: 0,
        channels: [ChannelState {
            broken: false,
            inflight: 0,
            retry_at_ns: 0,
            failures: 0,
        }; 2],
        reachable: true,
        hb_counter_seen: 0,
        last_ok_ns: 0,
        repl: Repl::IDLE,
        down: false,
    };
}

/// Multi-step local procedures that need exclusive access to our own log
/// (after revokes have been executed by the host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Duty {
    None,
    /// Candidate: find our last entry, then publish the vote request.
    Campaign {
        term: u64,
    },
    /// Voter: check the candidate's log, then replicate our vote.
    VoteCheck {
        candidate: MemberId,
        term: u64,
    },
    /// Voter: our vote is being made reliable (DARE §3.2.3).
    VoteReplicate {
        candidate: MemberId,
        term: u64,
    },
    /// Follower: prepare the adjustment list and grant log access.
    Grant {
        leader: MemberId,
        term: u64,
    },
    /// Primary-backup mode: a view names us primary in `term`; find our
    /// last entry (once our revokes are in effect), then lead.
    TakeOver {
        term: u64,
    },
}

/// Row versions after a restart continue this far above the highest copy
/// read back: a peer outside the members read may hold a newer copy (pushes
/// the others missed), and readers take only newer versions. Passing it
/// would take four billion more pushes than any of them got; a peer that
/// still holds a newer copy only ignores our rows until ours pass it
/// (liveness, never safety: everything in that copy we did publish).
pub const RESTART_VERSION_GAP: u64 = 1 << 32;

/// Startup (DARE §3.2.3): what we published before a restart (term,
/// private vote, row version) is read back from the copies of our row at
/// our peers before we publish anything.
#[derive(Clone, Copy, Debug)]
struct ReadBack {
    /// Peers whose two rows were read.
    answered: MemberMask,
    /// Peers with a READ in flight.
    asked: MemberMask,
    /// Peers are asked from here on (seeded), so that restarts spread
    /// their reads.
    offset: usize,
    term: u64,
    private_vote: crate::sst::Ballot,
    vote: crate::sst::Ballot,
    heartbeat: crate::sst::Heartbeat,
    version: u64,
}

/// After a restart that found a term: our log may lack entries we
/// acknowledged before, so we neither vote nor stand until it holds them
/// again (a vote compares logs, DARE §3.2.3). Every such entry is in the
/// log of any leader of a term after `term` (leader completeness), and
/// in the log of `term`'s own leader as it was after our restart (our
/// acknowledgements in `term` went to it; in later terms we granted
/// nobody: a grant waits until its term is stored at a majority, so
/// `term` is at least every term we granted in). So we are caught up once
/// we applied an entry of a later term, or past the last index `term`'s
/// leader published after our restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CatchUp {
    term: u64,
    index: Option<u64>,
}

/// A leader we suspected because its heartbeat stood still (not one the
/// host reported dead): if its heartbeat moves on in that term, the
/// suspicion was false.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Suspicion {
    leader: MemberId,
    term: u64,
    counter: u64,
    at_ns: u64,
}

#[derive(Clone, Copy, Debug)]
struct PendingRead {
    token: u64,
    round: u64,
    /// Set once the round is confirmed: serve when applied up to here.
    read_index: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct ReadRound {
    id: u64,
    commit_index: u64,
    oks: u32,
    outstanding: u32,
}

/// One member of the group. `M` is its registered memory, `S` its state
/// machine. See the crate documentation for the driving contract.
pub struct Node<M: Memory, S: StateMachine> {
    cfg: Config,
    layout: Layout,
    ring: Ring,
    mem: M,
    sm: S,
    sessions: Sessions,
    rng: SplitMix64,
    me: MemberId,
    member_count: usize,
    /// The group configuration every majority is counted in (DARE §3.4):
    /// the latest in our log, committed or not, and its entry's index.
    configuration: crate::membership::Configuration,
    config_index: u64,
    /// The configuration as of the apply pointer, and its entry's index.
    applied_configuration: crate::membership::Configuration,
    applied_config_index: u64,
    /// The leader's reconfiguration under way, and whether its next phase
    /// waits for room in the log.
    reconfig: Option<reconfig::Reconfig>,
    phase_pending: bool,
    now: u64,

    role: Role,
    term: u64,
    leader: Option<MemberId>,
    granted_to: Option<MemberId>,
    duty: Duty,
    /// Revokes were emitted and the host has not drained them yet, or one
    /// could not be confirmed: no step that needs exclusive log access.
    revoke_pending: bool,
    /// Peers whose log revoke the fabric could not confirm (retried).
    revoke_unconfirmed: [bool; MAX_MEMBERS],
    /// When to retry them.
    revoke_retry_at_ns: u64,

    /// Highest term in the other members' rows (the table's maximum,
    /// updated when a row changes).
    max_peer_term: u64,
    /// Recovery by state transfer: ours as a joiner, a donor's job.
    recovery: recovery::Recovery,
    /// The shared state table (DARE's schema): every member's last good
    /// row, ours as last pushed. Reducers over it drive step-down, vote
    /// counting and pruning.
    sst: Table,
    row: Row,
    row_version: u64,
    row_dirty: bool,
    /// Version of the first push that carried `row.private_vote`.
    private_push: u64,
    /// Version of the first push that carried our current term.
    term_push: u64,
    last_pushed_private: crate::sst::Ballot,
    /// The row as last pushed (to decide whether a push must wake peers).
    last_pushed_row: Row,
    published_apply_index: u64,
    /// Consecutive apply-publish periods in which nothing was applied: the
    /// next period doubles with each (up to Δ), so an idle follower does
    /// not wake every period on a core it shares with a spinning leader.
    apply_idle_periods: u8,
    /// The apply index seen at the last apply-publish wake.
    apply_index_at_publish: u64,
    /// When our row was last pushed (keep-alive for pruning).
    last_push_ns: u64,
    /// Reading our row back at startup: nothing is published until done.
    read_back: Option<ReadBack>,
    /// After a restart: no vote and no candidacy until caught up.
    catch_up: Option<CatchUp>,
    /// Nonce of our last adjustment list (see [`crate::log::AdjustHeader`]).
    grant_nonce: u64,

    head_pos: u64,
    apply_pos: u64,
    apply_index: u64,
    commit_pos: u64,
    commit_index: u64,
    /// Leader only: our own tail.
    tail_pos: u64,
    tail_index: u64,
    last_term: u64,
    /// Term of the entry before the apply pointer.
    last_applied_term: u64,
    /// Leader only: end of the no-op of our term; commits must reach it.
    noop_end_pos: u64,
    corrupt: bool,
    /// Since when the entry at the apply pointer fails validation.
    bad_entry_since_ns: Option<u64>,
    /// Longest pause between two calls since the last quorum check: a
    /// leader that was itself descheduled must not blame its followers.
    longest_gap_ns: u64,

    peers: [Peer; MAX_MEMBERS],
    slots: [Slot; INFLIGHT_CAP],
    free_slots: heapless::Vec<u16, INFLIGHT_CAP>,
    staging_refs: [u32; STAGING_SLOTS],

    timers: [Option<u64>; TIMER_COUNT],
    fd_period_ns: u64,
    /// Failure-detector checks in a row that found the heartbeat moving.
    timely_checks: u32,
    /// The last leader we suspected for its silence.
    suspicion: Option<Suspicion>,
    /// The last false suspicion counted: (leader, term, when we had
    /// suspected it, our clock).
    last_false_suspicion: Option<(MemberId, u64, u64)>,

    reads: Deque<PendingRead, READ_QUEUE_CAP>,
    next_read_round: u64,
    read_round: Option<ReadRound>,
    /// A lease on a view naming us leader in this term, until this time
    /// (our clock): reads need no round while it holds.
    read_lease_term: u64,
    read_lease_end_ns: u64,
    /// Views are on: a leader commits nothing before `clear_commit` for
    /// its term.
    commit_needs_view: bool,
    commit_cleared_term: u64,
    commit_wait_counted_term: u64,

    actions: Deque<Action, ACTION_QUEUE_CAP>,
    events: Deque<Event, EVENT_QUEUE_CAP>,
    log_full_reported: bool,
    /// When a write found the log full and pruned on the spot (once per
    /// instant: many writes may find it full in one).
    pruned_when_full_ns: Option<u64>,
    counters: Counters,
    payload: [u8; ENTRY_PAYLOAD_BYTES_CAP as usize],
    /// The state machine writes a write's reply here (the first
    /// `reply_bytes_max` bytes).
    reply_buf: [u8; REPLY_BYTES_CAP as usize],
    /// Next reply stage slot for an applied write (cycles below the last
    /// slot, which is the submission-time duplicate's).
    reply_stage_next: u64,
    /// Reply events queued and not yet polled: apply stops when every
    /// cycling stage slot holds one, so a reply is never overwritten
    /// before the host saw its event.
    replies_queued: u64,
    /// Primary-backup mode ([`pb`]); in both modes, the newest view
    /// followed.
    pb: pb::PrimaryBackup,
    /// Primary-backup primary: where the operations after the commit
    /// point it has executed already end, and their replies (one per
    /// operation, in log order), held until they commit ([`pb`],
    /// "Speculation").
    spec_end: Option<u64>,
    held: Deque<pb::HeldReply, SPECULATION_DEPTH_MAX>,
    /// Log mode with views: leaders decided by views ([`view_led`]).
    vl: view_led::ViewLed,
}

impl<M: Memory, S: StateMachine> Node<M, S> {
    /// Creates a member over zeroed registered memory laid out by
    /// [`Layout::new`]`(&config)`. Validates the configuration.
    ///
    /// The node is large (it holds a payload buffer of
    /// [`ENTRY_PAYLOAD_BYTES_CAP`] bytes); hosts usually box it.
    pub fn new(
        config: Config,
        memory: M,
        state_machine: S,
        now_ns: u64,
    ) -> Result<Self, ConfigError> {
        let layout = Layout::new(&config)?;
        let me = config.self_id;
        let member_count = usize::from(config.member_count);
        let mut free_slots = heapless::Vec::new();
        for i in (0..INFLIGHT_CAP as u16).rev() {
            free_slots.push(i).expect("capacity is INFLIGHT_CAP");
        }
        let mut rng = SplitMix64::new(config.seed ^ (u64::from(me.0) << 56) ^ 0xA5A5_0000);
        let election_at = now_ns
            + rng.range_inclusive(
                config.election_timeout_min_ns,
                config.election_timeout_max_ns,
            );
        let mut timers = [None; TIMER_COUNT];
        timers[Timer::Election as usize] = Some(election_at);
        timers[Timer::ApplyPublish as usize] = Some(now_ns + config.apply_publish_period_ns);
        let mut row = Row {
            apply_index: 1,
            commit_index: 1,
            ..Row::default()
        };
        row.role = crate::sst::RoleCode::Follower;
        // Where the startup read-back starts asking (spread by seed and
        // id; the PRNG's sequence is left to the timeouts).
        let offset = (config.seed as usize).wrapping_add(me.index()) % member_count;
        let node = Node {
            ring: Ring::new(&layout.log),
            sessions: Sessions::new(&layout),
            fd_period_ns: config.fd_check_period_ns,
            timely_checks: 0,
            suspicion: None,
            last_false_suspicion: None,
            configuration: crate::membership::Configuration::initial(config.initial_members),
            config_index: 0,
            applied_configuration: crate::membership::Configuration::initial(
                config.initial_members,
            ),
            applied_config_index: 0,
            reconfig: None,
            phase_pending: false,
            me,
            member_count,
            layout,
            mem: memory,
            sm: state_machine,
            rng,
            now: now_ns,
            role: Role::Follower,
            term: 0,
            leader: None,
            granted_to: None,
            duty: Duty::None,
            revoke_pending: false,
            revoke_unconfirmed: [false; MAX_MEMBERS],
            revoke_retry_at_ns: 0,
            sst: Table::new(&DARE_ROW, member_count),
            max_peer_term: 0,
            recovery: recovery::Recovery::NEW,
            row,
            row_version: 0,
            // Publish an initial row so peers see us (and our apply point),
            // once our row is read back (ReadBack).
            row_dirty: true,
            private_push: 0,
            term_push: 0,
            last_pushed_private: crate::sst::Ballot::default(),
            last_pushed_row: Row::default(),
            published_apply_index: 0,
            apply_idle_periods: 0,
            apply_index_at_publish: 0,
            last_push_ns: now_ns,
            read_back: Some(ReadBack {
                answered: MemberMask::NONE,
                asked: MemberMask::NONE,
                offset,
                term: 0,
                private_vote: crate::sst::Ballot {
                    term: 0,
                    member: None,
                },
                vote: crate::sst::Ballot {
                    term: 0,
                    member: None,
                },
                heartbeat: crate::sst::Heartbeat {
                    term: 0,
                    counter: 0,
                },
                version: 0,
            }),
            catch_up: None,
            grant_nonce: 0,
            head_pos: 0,
            apply_pos: 0,
            apply_index: 1,
            commit_pos: 0,
            commit_index: 1,
            tail_pos: 0,
            tail_index: 1,
            last_term: 0,
            last_applied_term: 0,
            noop_end_pos: 0,
            corrupt: false,
            bad_entry_since_ns: None,
            longest_gap_ns: 0,
            peers: [Peer::NEW; MAX_MEMBERS],
            slots: [Slot {
                generation: 0,
                busy: false,
                peer: MemberId(0),
                channel: Channel::Control,
                purpose: Purpose::WriteCommit { term: 0 },
            }; INFLIGHT_CAP],
            free_slots,
            staging_refs: [0; STAGING_SLOTS],
            timers,
            reads: Deque::new(),
            next_read_round: 1,
            read_round: None,
            read_lease_term: 0,
            read_lease_end_ns: 0,
            commit_needs_view: config.lease_ns > 0,
            commit_cleared_term: 0,
            commit_wait_counted_term: 0,
            actions: Deque::new(),
            events: Deque::new(),
            log_full_reported: false,
            pruned_when_full_ns: None,
            counters: Counters::default(),
            payload: [0; ENTRY_PAYLOAD_BYTES_CAP as usize],
            reply_buf: [0; REPLY_BYTES_CAP as usize],
            reply_stage_next: 0,
            replies_queued: 0,
            pb: pb::PrimaryBackup::default(),
            spec_end: None,
            held: Deque::new(),
            vl: view_led::ViewLed::default(),
            cfg: config,
        };
        Ok(node)
    }

    // ----- getters -------------------------------------------------------

    /// This member's id.
    pub fn id(&self) -> MemberId {
        self.me
    }

    /// The current role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The leader this member follows (itself when leading).
    pub fn leader(&self) -> Option<MemberId> {
        self.leader
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The memory layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The registered memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// The state machine (for reads, once [`Event::ReadReady`] arrives).
    pub fn state_machine(&self) -> &S {
        &self.sm
    }

    /// Counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// First log index not applied yet.
    pub fn apply_index(&self) -> u64 {
        self.apply_index
    }

    /// False while this member reads its row back after starting (it
    /// publishes nothing, votes for nobody and does not stand): what its
    /// previous incarnation voted is not known yet (restart.rs).
    pub fn votes_known(&self) -> bool {
        self.read_back.is_none()
    }

    /// Whether this process is known to be a new one, not a restart of a
    /// member that ran before: `Some(false)` after a restart (its row was
    /// read back); `Some(true)` once its row is read back empty and one of
    /// its own rows is stored at a majority (a later restart finds it);
    /// `None` until then. The view engine trusts its acceptor memory only
    /// on `Some(true)` (a process that dies before would be taken for new
    /// again, [`crate::views`]).
    pub fn known_new_process(&self) -> Option<bool> {
        if !self.votes_known() {
            return None;
        }
        if self.counters.restarts_read_back > 0 {
            return Some(false);
        }
        self.own_row_reliable().then_some(true)
    }

    /// True when this member may vote and stand for election: its row is
    /// read back, its log holds what it may have acknowledged before a
    /// restart, and it is not corrupt.
    pub fn can_vote(&self) -> bool {
        self.read_back.is_none() && self.catch_up.is_none() && !self.corrupt
    }

    /// The last false suspicion this member counted: the leader, the term,
    /// and when (our clock) it had suspected it.
    pub fn last_false_suspicion(&self) -> Option<(MemberId, u64, u64)> {
        self.last_false_suspicion
    }

    /// Our row as last pushed to the peers (what they may act on).
    pub fn published_row(&self) -> Row {
        self.last_pushed_row
    }

    /// The last good copy of `peer`'s row in our table (default when none
    /// was accepted; our own row as pushed for ourselves).
    pub fn peer_row(&self, peer: MemberId) -> Row {
        if peer == self.me {
            self.last_pushed_row
        } else {
            self.peers[peer.index()].row
        }
    }

    /// Term of the last applied entry (0: none); with the entries after
    /// it, what a vote compares (DARE §3.2.3).
    pub fn last_applied_term(&self) -> u64 {
        self.last_applied_term
    }

    /// Index of the last committed entry (cheap, unlike [`Node::status`]).
    pub fn commit_index(&self) -> u64 {
        self.commit_index
    }

    /// The member our log access is granted to, if any.
    pub fn log_granted_to(&self) -> Option<MemberId> {
        self.granted_to
    }

    /// Everything a status endpoint shows. Builds a copy of every peer's
    /// row: call it when asked, not on every poll.
    pub fn status(&self) -> NodeStatus {
        let mut peers = [PeerStatus {
            id: MemberId(0),
            row: Row::default(),
            row_version: 0,
            row_changed_ns: 0,
            reachable: false,
            channel_broken: [false; 2],
            repl: ReplState::Idle,
            acked_pos: 0,
            sent_pos: 0,
        }; MAX_MEMBERS];
        for (i, p) in self.peers.iter().enumerate().take(self.member_count) {
            peers[i] = PeerStatus {
                id: MemberId(i as u8),
                row: if i == self.me.index() {
                    self.row
                } else {
                    p.row
                },
                row_version: if i == self.me.index() {
                    self.row_version
                } else {
                    self.sst.version(MemberId(i as u8))
                },
                row_changed_ns: p.row_changed_ns,
                reachable: i == self.me.index() || p.reachable,
                channel_broken: [p.channels[0].broken, p.channels[1].broken],
                repl: p.repl.state,
                acked_pos: p.repl.acked_pos,
                sent_pos: p.repl.sent_pos,
            };
        }
        let (tail_pos, tail_index) = if self.role == Role::Leader {
            (self.tail_pos, self.tail_index)
        } else {
            // A follower learns indices only as it applies: exact when it
            // has applied its whole log, a lower bound otherwise.
            let tail_pos = self.mem.load_u64(self.layout.log_tail());
            let tail_index = if tail_pos == self.apply_pos {
                self.apply_index
            } else {
                self.tail_index.max(self.apply_index)
            };
            (tail_pos, tail_index)
        };
        NodeStatus {
            id: self.me,
            member_count: self.cfg.member_count,
            role: self.role,
            term: self.term,
            leader: self.leader,
            log_granted_to: self.granted_to,
            head_pos: self.head_pos,
            apply_pos: self.apply_pos,
            apply_index: self.apply_index,
            commit_pos: self.commit_pos,
            commit_index: self.commit_index,
            tail_pos,
            tail_index,
            fd_check_period_ns: self.fd_period_ns,
            peers,
            counters: self.counters,
            layout_hash: self.layout.hash,
        }
    }

    // ----- outputs -------------------------------------------------------

    /// The next action for the host, in order. Drain them all after every
    /// `handle_*` and `submit_*` call, before calling the node again.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next event for the host.
    pub fn poll_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front();
        if let Some(Event::Reply { .. }) = e {
            self.replies_queued -= 1;
        }
        e
    }

    /// Copies the reply waiting in reply stage slot `stage` (from an
    /// [`Event::Reply`] or [`Submitted::Duplicate`]) into `out`; returns
    /// its length, at most `reply_bytes_max` and `out.len()`.
    pub fn copy_reply(&self, stage: u32, out: &mut [u8]) -> usize {
        let stage = u64::from(stage);
        if stage >= self.layout.reply_stage_slots {
            return 0;
        }
        let at = self.layout.reply_stage(stage);
        let len = (self.mem.load_u64(at) as usize)
            .min(self.layout.reply_bytes_max as usize)
            .min(out.len());
        self.mem.read(
            at.add(crate::layout::REPLY_STAGE_HEADER_BYTES),
            &mut out[..len],
        );
        len
    }

    /// Work requests posted and not yet completed (their completions will
    /// come back through [`Node::handle_completion`]).
    pub fn inflight(&self) -> usize {
        INFLIGHT_CAP - self.free_slots.len()
    }

    /// When [`Node::handle_timeout`] must be called at the latest (our
    /// clock). Peers' writes are only noticed when the node is called, so a
    /// host that parks must also wake on its fabric's doorbell.
    pub fn next_deadline(&self) -> u64 {
        let mut at = self
            .timers
            .iter()
            .flatten()
            .copied()
            .min()
            .unwrap_or(u64::MAX);
        if self.revoke_unconfirmed.iter().any(|&u| u) {
            at = at.min(self.revoke_retry_at_ns);
        } else if self.read_back.is_some() {
            // READs go to peers whose control channel works; the others
            // are asked after they reconnect (channel deadlines below), and
            // completions wake the host anyway.
            if self.read_back_can_ask() {
                at = at.min(self.now);
            }
        } else if self.revoke_pending || self.row_dirty || self.duty != Duty::None {
            at = at.min(self.now);
        }
        if let Some(due_ns) = self.restore_due() {
            at = at.min(due_ns);
        }
        for p in self.peers.iter().take(self.member_count) {
            for ch in &p.channels {
                if ch.broken && ch.inflight == 0 {
                    at = at.min(ch.retry_at_ns);
                }
            }
        }
        at
    }

    // ----- inputs --------------------------------------------------------

    /// A completion reaped from the fabric.
    pub fn handle_completion(&mut self, now: u64, completion: Completion) {
        self.tick_clock(now);
        self.on_completion(completion);
        self.invariants();
    }

    /// The host learned that a peer is gone (its process exited: a pidfd,
    /// uKharon-style notification). Faster than the heartbeat detector.
    pub fn handle_peer_down(&mut self, now: u64, peer: MemberId) {
        self.tick_clock(now);
        if peer == self.me || peer.index() >= self.member_count {
            return;
        }
        self.peers[peer.index()].down = true;
        if self.peers[peer.index()].reachable {
            self.peers[peer.index()].reachable = false;
            self.push_event(Event::PeerUnreachable { peer });
        }
        if self.role == Role::Follower && self.leader == Some(peer) {
            self.suspect_leader(true);
        }
        if self.pb_mode() {
            // A primary asks at once for a view without it.
            self.pb_update_want();
        }
        self.invariants();
    }

    /// The heartbeat-counter engine (uKharon §4.2's second detector level)
    /// reports that `peer`'s process did not run between two READs of its
    /// counter a gap apart, although its memory answers: stopped, stuck in
    /// the kernel, a zombie. Our leader stalled is suspected as if its
    /// heartbeat had stayed silent for Δ: the same election follows (in
    /// primary-backup mode, the same claim), and a heartbeat that moves on
    /// afterwards proves the suspicion false the same way. With a read gap
    /// shorter than Δ this detects a stopped leader sooner; the host's
    /// default gap is longer, so there it backs Δ up.
    pub fn handle_peer_stalled(&mut self, now: u64, peer: MemberId) {
        self.tick_clock(now);
        if peer == self.me || peer.index() >= self.member_count {
            return;
        }
        if self.role == Role::Follower && self.leader == Some(peer) {
            self.counters.counter_suspicions += 1;
            self.suspect_leader(false);
        }
        self.invariants();
    }

    /// The host learned that a peer that was gone runs again: a new
    /// process with empty memory took its place (a restart). We trust it
    /// again: its rows are read afresh (a new process numbers them anew),
    /// its channels are re-established, and a leader adjusts its log (or
    /// finds it needs recovery, DARE §3.4).
    /// It reads its row back before it publishes, and a leader adjusts its
    /// log afresh (its adjustment list has a new nonce).
    pub fn handle_peer_up(&mut self, now: u64, peer: MemberId) {
        self.tick_clock(now);
        if peer == self.me || peer.index() >= self.member_count {
            return;
        }
        self.sst.clear(peer);
        self.max_peer_term = self
            .sst
            .max(&crate::sst::dare::col::TERM, 0, self.others_mask())
            .unwrap_or(0);
        self.recovery.forget(peer);
        let is_leader = self.role == Role::Leader;
        let p = &mut self.peers[peer.index()];
        p.down = false;
        p.row = Row::EMPTY;
        p.row_changed_ns = self.now;
        p.last_ok_ns = self.now;
        p.hb_counter_seen = 0;
        for ch in &mut p.channels {
            // Whatever was in flight went to the old process.
            ch.broken = true;
            ch.retry_at_ns = self.now;
            ch.failures = 0;
        }
        if !p.reachable {
            p.reachable = true;
            self.push_event(Event::PeerReachable { peer });
        }
        if is_leader {
            self.peers[peer.index()].repl = Repl {
                state: ReplState::AwaitGrant,
                ..Repl::IDLE
            };
            self.row.recover_mask &= !(Row::recover_bit(peer) | Row::outrun_bit(peer));
        }
        // It missed our pushes: send the current row again.
        self.row_dirty = true;
        self.invariants();
    }

    /// An action failed on the fabric. A revoke of log access that could
    /// not be confirmed keeps every step that needs exclusive access (a
    /// vote's log check, a grant) waiting, and is retried (DARE §3.2.1: a
    /// revoke must be in effect before the log is inspected).
    pub fn handle_action_failed(&mut self, now: u64, action: &Action, _error: FabricError) {
        self.tick_clock(now);
        if let Action::SetAccess {
            peer,
            region: RegionId::Log,
            access: Access::Revoked,
        } = *action
        {
            #[cfg(feature = "mutation-testing")]
            if self.cfg.mutation == crate::config::Mutation::IgnoreRevokeFailure {
                return;
            }
            if peer.index() < self.member_count && peer != self.me {
                self.revoke_unconfirmed[peer.index()] = true;
                self.revoke_pending = true;
                self.revoke_retry_at_ns =
                    self.now.saturating_add(self.cfg.reconnect_backoff_ns / 8);
                self.counters.revokes_unconfirmed += 1;
            }
        }
        self.invariants();
    }

    fn retry_unconfirmed_revokes(&mut self) {
        for p in 0..self.member_count {
            if core::mem::take(&mut self.revoke_unconfirmed[p]) {
                self.emit(Action::SetAccess {
                    peer: MemberId(p as u8),
                    region: RegionId::Log,
                    access: Access::Revoked,
                });
            }
        }
        self.revoke_pending = true;
    }

    /// Observes memory written by peers (rows, log pointers) and fires due
    /// timers. Call it on every loop iteration when busy-polling, and at
    /// the latest at [`Node::next_deadline`]; early calls are harmless.
    pub fn handle_timeout(&mut self, now: u64) {
        self.tick_clock(now);
        let unconfirmed = self.revoke_unconfirmed.iter().any(|&u| u);
        if self.actions.is_empty() && !unconfirmed {
            // Every action emitted before, revokes included, has been
            // executed by the host and none failed: exclusive log access
            // is in effect.
            self.revoke_pending = false;
        }
        if unconfirmed && self.revoke_retry_at_ns <= self.now {
            self.retry_unconfirmed_revokes();
        }
        self.observe_rows();
        if self.read_back.is_some() {
            self.read_back_step();
            if self.read_back.is_some() {
                self.maintain_channels();
                self.invariants();
                return;
            }
        }
        self.react_to_rows();
        self.run_duty();
        self.fire_timers();
        match self.role {
            Role::Candidate => self.count_votes(),
            Role::Leader => self.leader_tick(),
            Role::Follower => {
                self.recovery_tick();
                if self.recovery.phase == recovery::RecoveryPhase::Idle {
                    self.follower_observe_log();
                }
            }
        }
        if self.state_intact() {
            self.apply_committed();
            // While the WRITEs posted above are in flight (before the
            // snapshot below: a snapshot is never of executed operations
            // that have not committed).
            self.speculate();
        }
        self.track_catch_up();
        if self.role == Role::Leader {
            self.serve_reads();
        }
        // After applying: a snapshot taken now is of the state as applied.
        self.donor_tick();
        self.maintain_channels();
        if self.pb_mode() && (self.pb.claim || self.now >= self.pb.update_due_ns) {
            // Member changes are judged on millisecond windows: once per
            // heartbeat period is enough, and keeps this off every step of
            // a busy primary. A claim is judged on every step (the rows it
            // waits for change any time).
            self.pb_update_want();
        }
        self.flush_row();
        self.invariants();
    }

    /// Submits a client write. On the leader, the operation is appended to
    /// the log and replicated by the next [`Node::handle_timeout`] (which
    /// batches every write submitted since the previous one, DARE §3.3).
    pub fn submit_write(
        &mut self,
        now: u64,
        client_id: u64,
        request_id: u64,
        payload: &[u8],
    ) -> Result<Submitted, SubmitError> {
        self.tick_clock(now);
        let r = self.leader_submit_write(client_id, request_id, payload);
        self.invariants();
        r
    }

    /// The driver's word that this member holds an active lease on a view
    /// naming it leader in `term`, until `end_ns` (the clock of every
    /// other call). While it holds and `term` is the current term, a read
    /// needs no round of term checks: no other leader can have committed
    /// anything ([`crate::views`]). `(0, 0)` withdraws it.
    pub fn set_read_lease(&mut self, term: u64, end_ns: u64) {
        self.read_lease_term = term;
        self.read_lease_end_ns = end_ns;
        if self.pb.takeover == Some(term) && term == self.term && self.now < end_ns {
            // Primary-backup: our view is leased, so it was still the
            // newest when the lease was checked, and every lease on an
            // older one has ended: lead now (a view learnt late, with a
            // newer one decided meanwhile, never gets a lease).
            if self.role == Role::Leader {
                self.pb.takeover = None;
            } else if self.pb_may_take_over() && !matches!(self.duty, Duty::TakeOver { .. }) {
                // (Kept until it leads: `run_duty` may have to wait.)
                self.duty = Duty::TakeOver { term };
            }
        }
    }

    /// With views on, a leader commits nothing in `term` until the driver
    /// clears it: its view is active (every older lease ran out), or the
    /// coordinators are known gone for longer than a lease.
    pub fn clear_commit(&mut self, term: u64) {
        if term > self.commit_cleared_term {
            self.commit_cleared_term = term;
        }
    }

    /// Whether a leader of `term` may commit (always, with views off).
    pub fn commit_cleared(&self, term: u64) -> bool {
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::CommitBeforeViewActive {
            return true;
        }
        !self.commit_needs_view || self.commit_cleared_term >= term
    }

    /// Submits a read (DARE §3.3): once the leader has confirmed its term
    /// with a majority and applied every entry committed before, it emits
    /// [`Event::ReadReady`] with `token`.
    pub fn submit_read(&mut self, now: u64, token: u64) -> Result<(), SubmitError> {
        self.tick_clock(now);
        let r = self.leader_submit_read(token);
        self.invariants();
        r
    }

    // ----- internals shared by the submodules -----------------------------

    fn tick_clock(&mut self, now: u64) {
        // A host clock that goes backwards is ignored, never trusted.
        let gap = now.saturating_sub(self.now);
        self.longest_gap_ns = self.longest_gap_ns.max(gap);
        self.now = self.now.max(now);
    }

    /// Stores a reply in stage slot `stage`.
    fn stage_reply(&self, stage: u64, reply: &[u8]) {
        let at = self.layout.reply_stage(stage);
        let len = reply.len().min(self.layout.reply_bytes_max as usize);
        self.mem.store_u64(at, len as u64);
        self.mem.write(
            at.add(crate::layout::REPLY_STAGE_HEADER_BYTES),
            &reply[..len],
        );
    }

    /// Copies session `slot`'s remembered reply into stage slot `stage`.
    fn stage_session_reply(&mut self, stage: u64, slot: u64) {
        let max = self.layout.reply_bytes_max as usize;
        let n = self
            .sessions
            .copy_reply(&self.mem, &self.layout, slot, &mut self.reply_buf[..max]);
        let at = self.layout.reply_stage(stage);
        self.mem.store_u64(at, n as u64);
        self.mem.write(
            at.add(crate::layout::REPLY_STAGE_HEADER_BYTES),
            &self.reply_buf[..n],
        );
    }

    fn push_event(&mut self, e: Event) {
        // The queue is sized so that one call cannot overflow it when the
        // host drains after every call; apply checks space before going on.
        if let Event::Reply { .. } = e {
            self.replies_queued += 1;
        }
        if self.events.push_back(e).is_err() {
            panic!("event queue overflow: the host must drain events after every call");
        }
    }

    fn set_timer(&mut self, t: Timer, at: Option<u64>) {
        self.timers[t as usize] = at;
    }

    fn timer_due(&self, t: Timer) -> bool {
        self.timers[t as usize].is_some_and(|at| at <= self.now)
    }

    fn random_election_timeout(&mut self) -> u64 {
        self.rng.range_inclusive(
            self.cfg.election_timeout_min_ns,
            self.cfg.election_timeout_max_ns,
        )
    }

    /// Every member but us, as a mask for the table's reducers.
    /// True when `agree` and this member (whose own agreement the caller
    /// checked: `me_too`) hold a majority of every group.
    fn is_quorum(&self, agree: MemberMask, me_too: bool) -> bool {
        let agree = if me_too {
            agree.with(self.me)
        } else {
            agree.without(self.me)
        };
        self.counting_configuration().is_quorum(agree)
    }

    /// The configuration majorities are counted in (a mutation may count
    /// a transitional one as its new group alone).
    fn counting_configuration(&self) -> crate::membership::Configuration {
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::TransitionalNewMajorityOnly
            && self.configuration.state == crate::membership::ConfigState::Transitional
        {
            let c = self.configuration;
            return crate::membership::Configuration {
                state: crate::membership::ConfigState::Stable,
                size: c.new_size,
                new_size: c.new_size,
                active: c.active.and(MemberMask::first(c.new_size.into())),
                away: MemberMask::NONE,
            };
        }
        self.configuration
    }

    fn others_mask(&self) -> MemberMask {
        MemberMask::first(self.member_count).without(self.me)
    }

    fn others(&self) -> impl Iterator<Item = MemberId> {
        let me = self.me;
        (0..self.member_count as u8)
            .map(MemberId)
            .filter(move |&m| m != me)
    }

    fn set_role(&mut self, role: Role, leader: Option<MemberId>) {
        if self.role == Role::Leader && role != Role::Leader && self.spec_end.is_some() {
            self.roll_back_speculation();
        }
        let changed = self.role != role || self.leader != leader;
        self.role = role;
        self.leader = leader;
        self.row.role = match role {
            Role::Follower => crate::sst::RoleCode::Follower,
            Role::Candidate => crate::sst::RoleCode::Candidate,
            Role::Leader => crate::sst::RoleCode::Leader,
        };
        self.row.leader = leader;
        self.row_dirty = true;
        if changed {
            self.push_event(Event::RoleChanged {
                role,
                term: self.term,
                leader,
            });
        }
    }

    /// Checked at the end of every entry point (TigerBeetle style); these
    /// stay on in release builds.
    fn invariants(&self) {
        assert!(self.head_pos <= self.apply_pos, "head after apply");
        assert!(self.apply_pos <= self.commit_pos, "apply after commit");
        assert!(
            self.apply_index >= 1 && self.commit_index >= self.apply_index
                || self.role != Role::Leader
        );
        match self.role {
            Role::Leader => {
                assert_eq!(self.leader, Some(self.me));
                assert!(self.commit_pos <= self.tail_pos, "leader commit after tail");
                assert!(
                    self.tail_pos - self.head_pos <= self.ring.ring_bytes(),
                    "ring overrun"
                );
                // Until our no-op is committed, something of ours is not:
                // the no-op itself, or (while a full ring keeps it out)
                // nothing appended yet in this term.
                assert!(
                    self.commit_pos >= self.noop_end_pos
                        || self.commit_index < self.tail_index
                        || self.noop_end_pos == u64::MAX,
                    "a leader's commit passed its own no-op"
                );
            }
            Role::Candidate => assert_eq!(self.leader, None),
            Role::Follower => assert_ne!(self.leader, Some(self.me)),
        }
        assert!(self.row.term == self.term);
        assert!(
            self.fd_period_ns >= self.cfg.fd_check_period_ns
                && self.fd_period_ns <= self.cfg.fd_check_period_max_ns,
            "Δ outside its configured range"
        );
        assert!(
            self.read_back.is_none() || (self.role == Role::Follower && self.term == 0),
            "a member reading its row back neither leads nor stands"
        );
        assert!(
            self.catch_up.is_none() || self.role == Role::Follower,
            "a member catching up after a restart neither leads nor stands"
        );
        assert!(self.free_slots.len() <= INFLIGHT_CAP);
        match self.spec_end {
            Some(end) => {
                assert!(
                    self.role == Role::Leader && self.pb_mode(),
                    "only a primary executes ahead of the commit point"
                );
                assert!(
                    self.apply_pos < end && end <= self.tail_pos,
                    "executed ahead beyond the log, or not ahead"
                );
                assert_eq!(
                    self.held.front().map(|r| r.index),
                    Some(self.apply_index),
                    "one held reply per operation executed ahead, from the apply point"
                );
            }
            None => assert!(
                self.held.is_empty(),
                "a held reply with nothing executed ahead"
            ),
        }
    }
}

/// The log engine as the driver sees it (the client API stays on [`Node`]).
impl<M: Memory, S: StateMachine> crate::engine::Engine for Node<M, S> {
    fn name(&self) -> &'static str {
        "log"
    }

    fn handle_completion(&mut self, now_ns: u64, completion: Completion) {
        Node::handle_completion(self, now_ns, completion);
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        Node::handle_timeout(self, now_ns);
    }

    fn handle_peer_down(&mut self, now_ns: u64, peer: MemberId) {
        Node::handle_peer_down(self, now_ns, peer);
    }

    fn handle_peer_up(&mut self, now_ns: u64, peer: MemberId) {
        Node::handle_peer_up(self, now_ns, peer);
    }

    fn poll_action(&mut self) -> Option<Action> {
        Node::poll_action(self)
    }

    fn handle_action_failed(&mut self, now_ns: u64, action: &Action, error: FabricError) {
        Node::handle_action_failed(self, now_ns, action, error);
    }

    fn next_deadline(&self) -> u64 {
        Node::next_deadline(self)
    }
}
