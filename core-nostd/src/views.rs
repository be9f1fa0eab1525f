//! Views held under leases: the view engine that puts uKharon's one-sided
//! Paxos ([`crate::consensus`], §5) and leases ([`crate::lease`], §6)
//! beside the log engine (issue 14).
//!
//! A *view* is the value decided in one consensus slot: view `k` (its
//! *epoch*) lives in slot `k - 1`. It names the log leader and the DARE
//! term it leads in, and the lease length. The coordinators (members
//! `0 .. coordinator_count`) are the acceptors; every member may propose.
//!
//! How the log engine uses it (the driver passes everything between them):
//!
//! * The member DARE elected leader in term `t` asks for a view naming it
//!   in `t` ([`ViewEngine::want_view`]) and proposes it at once.
//! * The view's leader, and only it, holds a lease on the view: its poll
//!   loop renews it in the background by READing the next slot's word at
//!   a majority of coordinators (Algorithm 2). Nobody else needs a lease,
//!   so followers stay parked.
//! * While the lease is active on a view that names it in its current
//!   term, the leader answers linearizable reads from its own state, with
//!   no round of term checks ([`crate::Node::set_read_lease`]).
//! * A leader commits nothing in its term before its own view is active
//!   ([`crate::Node::clear_commit`]): by then every lease on an older view
//!   has run out, so no deposed leader can still answer a read from a
//!   state that misses a write of the new term.
//! * Fallback: when a majority of coordinators is known gone (death
//!   notices, restarts), no view can be decided and nobody can renew
//!   one. Once that has been so for the lease wait, the
//!   leader may commit without a view ([`ViewEngine::fallback_allowed`]),
//!   with reads confirmed by term checks as in DARE. This relies on the
//!   death notices: a coordinator reported dead must be dead for everyone,
//!   not only cut off from us.
//!
//! Slot words are "empty" for a renewal when nothing is accepted in them:
//! a slot that is only prepared (a leader pre-prepares the next slot,
//! §5.3.1) holds no decision, and a decision needs accepts at a majority,
//! which the majority read meets.
//!
//! The coordinators' slots are a ring of `view_slot_count` words that
//! views reuse lap after lap (the lap is in the word, see
//! [`crate::consensus`]). Views are decided in order: a member proposes
//! slot `k` only once it knows slot `k − 1` decided, and the leader of the
//! coordinators pre-prepares one slot ahead, so a word is reused only when
//! the slot it held (a lap earlier) is decided. For a renewal, a word of
//! an earlier lap is empty (the next slot was not touched there) and one
//! of a later lap is filled (the next slot was decided, and reused since).
//! A member that fell a lap behind (a word moved on before it learnt the
//! slot) goes on learning from two slots before the later slot it saw:
//! that one is decided, and only the newest view matters.
//!
//! A restarted coordinator lost what its acceptor promised and accepted.
//! Its slot words start as [`UNTRUSTED_SLOT_WORD`] (the fabric writes them
//! before it publishes the memory: [`crate::Layout::initial_words`]),
//! which nobody counts and nobody CASes, until its log engine has read
//! back its row: a new process (no previous incarnation found) clears
//! them to empty. A restarted one, in primary-backup mode, rejoins
//! ([`ViewEngine::trust_own_acceptor`], the consensus engine's
//! "Coordinators back"): it READs the other coordinators' words to bound
//! the slots it may have touched before, waits until views up to that
//! bound are decided without it, fences its words up to the slot it
//! knows next and counts again; peers ask it again once it is reported
//! back, and count it once it answers with valid words. In log mode it
//! stays out for good, and so do restarted peers: the fallback above
//! lets DARE commit alone once a majority of coordinators is gone, which
//! is safe only if none of them ever helps renew a lease again (a
//! coordinator back could, for a view whose leader DARE has deposed in
//! the meantime). Once a majority of coordinators has died or restarted
//! there, views stop and DARE alone goes on.

use crate::config::Config;
use crate::consensus::word::{lap_order, LapOrder};
use crate::consensus::{
    ConsensusConfig, ConsensusEngine, ConsensusEvent, ConsensusLayout, ConsensusStatus, LearnError,
    ProposeError, SlotWord,
};
use crate::engine::Engine;
use crate::fabric::{
    Action, Completion, FabricError, MemberId, Op, WcStatus, WorkRequest, WrId, MAX_MEMBERS,
};
use crate::layout::Layout;
use crate::lease::{LeaseKeeper, LeasedView, RenewalOutcome};
use crate::mem::Memory;

/// Bytes of an encoded view.
pub const VIEW_BYTES: usize = 24;
/// Encoding version, the view's first byte.
pub const VIEW_VERSION: u8 = 1;
/// Marks the view engine's own work requests (the consensus engine's stay
/// below bit 40).
const OWN_WR: u64 = 1 << 48;
/// What a coordinator's slot words hold until it knows whether it is a new
/// process or a restarted one: not a valid acceptor state (an accepted
/// proposal above the promised one), so every proposer, learner and lease
/// check takes it as no answer, and nobody CASes it.
pub const UNTRUSTED_SLOT_WORD: u64 = 0x0000_FFFF_0000_0000;
/// Shortest learn period of a member that holds no lease, in the hurry
/// after a death. A quarter lease (12.5 µs at 50 µs) made every member
/// wake that often for a millisecond: on a core the members share, each
/// wake is a context switch, and the candidate and its voter waited
/// behind them (`verbatim-bench failover`, views on, SIGKILL: election p50
/// 1.29 ms, 0.27 ms with this floor). No vote waits on a view learnt: the
/// named member proposed the claim that was decided, and voters answer
/// its vote request as they see it. A claim does: a voter whose log is
/// newer claims a quarter election timeout after it refused the named
/// member, and that claim must build on the named member's view, so the
/// floor stays below an eighth of the shortest election timeout (see
/// `ViewEngine::hurry_learn_ns`).
const HURRY_LEARN_PERIOD_MIN_NS: u64 = 100_000;
/// Consensus slots resolved in one call at most (a member far behind
/// catches up over several calls).
const SLOTS_PER_CALL: usize = 4;

/// Views a leader decides again at its fastest so that a restarted
/// coordinator can rejoin, before it backs off (`ViewEngine::refresh_pending`).
const REFRESHES_BEFORE_BACKOFF: u32 = 8;

/// One decided view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct View {
    /// The log leader.
    pub leader: MemberId,
    /// The DARE term it leads in.
    pub log_term: u64,
    /// The lease length δ it is held under.
    pub lease_ns: u64,
    /// Primary-backup mode: the members whose copy counts (bit `m` for
    /// member `m`; the leader, its primary, among them): an entry commits
    /// once all of them hold it, and only they may take over. 0 in log
    /// mode, where majorities of the configuration count.
    pub members: u8,
}

/// Why bytes decided in a slot are not a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewError {
    /// Not [`VIEW_BYTES`] long.
    Length,
    /// Another encoding version.
    Version,
    /// A leader that is no member.
    Leader,
    /// A member set naming members outside the group, or without its
    /// leader.
    Members,
    /// Reserved bytes not zero, or a zero term or lease.
    Malformed,
}

impl View {
    /// The bytes proposed and decided.
    pub fn encode(&self) -> [u8; VIEW_BYTES] {
        let mut b = [0u8; VIEW_BYTES];
        b[0] = VIEW_VERSION;
        b[1] = self.leader.0;
        b[2] = self.members;
        b[8..16].copy_from_slice(&self.log_term.to_le_bytes());
        b[16..24].copy_from_slice(&self.lease_ns.to_le_bytes());
        b
    }

    /// Decodes and validates a decided value (it came from peers'
    /// memory: never trusted).
    pub fn decode(bytes: &[u8], member_count: u8) -> Result<View, ViewError> {
        if bytes.len() != VIEW_BYTES {
            return Err(ViewError::Length);
        }
        if bytes[0] != VIEW_VERSION {
            return Err(ViewError::Version);
        }
        if bytes[1] >= member_count {
            return Err(ViewError::Leader);
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let (log_term, lease_ns) = (word(8), word(16));
        if bytes[3..8].iter().any(|&b| b != 0) || log_term == 0 || lease_ns == 0 {
            return Err(ViewError::Malformed);
        }
        let members = bytes[2];
        let outside = u8::try_from((1u16 << member_count.min(8)) - 1).map_or(0, |all| !all);
        if members & outside != 0 || (members != 0 && members & (1 << bytes[1]) == 0) {
            return Err(ViewError::Members);
        }
        Ok(View {
            leader: MemberId(bytes[1]),
            log_term,
            lease_ns,
            members,
        })
    }

    /// Acting in both at once is harmless (uKharon §6.3): the lease length
    /// or the member set differs, not who leads in which term. (A primary
    /// that drops or adds a backup keeps its lease: while the change is
    /// decided it commits with the union of both sets.)
    pub fn compatible_with(&self, previous: &View) -> bool {
        self.leader == previous.leader && self.log_term == previous.log_term
    }
}

/// The consensus configuration of views for `config`, or `None` when
/// views are off (`lease_ns == 0`): the coordinators accept, every member
/// proposes.
pub fn consensus_config(config: &Config) -> Option<ConsensusConfig> {
    if config.lease_ns == 0 {
        return None;
    }
    let ids: [MemberId; MAX_MEMBERS] = core::array::from_fn(|i| MemberId(i as u8));
    let members = usize::from(config.member_count).min(MAX_MEMBERS);
    let coordinators = usize::from(config.coordinator_count).clamp(1, members);
    let mut c = ConsensusConfig::new(config.self_id, &ids[..coordinators], &ids[..members]);
    c.slot_count = config.view_slot_count;
    c.value_bytes_max = VIEW_BYTES as u32;
    c.reconnect_backoff_ns = config.reconnect_backoff_ns;
    c.seed = config.seed ^ 0x5649_4557; // "VIEW"
    #[cfg(feature = "mutation-testing")]
    {
        c.mutation = config.mutation;
    }
    Some(c)
}

/// What the view engine reports to the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewEvent {
    /// The newest view this member knows changed (decided here or learnt).
    Decided {
        /// Its epoch.
        epoch: u64,
        /// The view.
        view: View,
        /// Decided by this member's own proposal.
        ours: bool,
    },
    /// This member's lease on `epoch` became active.
    LeaseActive {
        /// The epoch.
        epoch: u64,
    },
    /// A slot's proposal numbers ran out (uKharon A.6, not implemented).
    ProposalSpaceExhausted {
        /// The slot.
        slot: u32,
    },
}

/// Counters and state, for status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ViewStatus {
    /// Epoch of the newest view known (0: none).
    pub epoch: u64,
    /// That view.
    pub view: Option<View>,
    /// This member holds an active lease on it.
    pub lease_active: bool,
    /// Lease left, in nanoseconds.
    pub lease_remaining_ns: u64,
    /// Views this member proposed.
    pub proposed: u64,
    /// Of those, decided with this member's value.
    pub won: u64,
    /// Lease checks that extended or started a lease.
    pub renewals: u64,
    /// Lease checks that found the next slot filled.
    pub renewals_superseded: u64,
    /// Lease checks given up (too few coordinators answered).
    pub renewals_abandoned: u64,
    /// Decided values that were not views.
    pub malformed_views: u64,
    /// Completions of the engine's own READs that were not expected.
    pub stale_completions: u64,
    /// A majority of coordinators is known gone.
    pub coordinators_lost: bool,
    /// Coordinators not counted (bit `a` for the `a`-th): reported dead,
    /// restarted, or our own after a restart.
    pub coordinators_out: u8,
    /// This member's own acceptor is not counted (it restarted, and has
    /// not rejoined yet).
    pub own_acceptor_excluded: bool,
    /// Times this member's own acceptor counted again after a restart.
    pub own_acceptor_rejoins: u64,
    /// Views this member decided again unchanged so that a restarted
    /// coordinator could rejoin (`ViewEngine::refresh_pending`).
    pub refreshes: u64,
    /// The fabric refused this member's requests to its own memory (no
    /// loopback connection): it does not ask its own acceptor, which the
    /// others still count.
    pub own_acceptor_no_loopback: bool,
    /// The coordinators, as member ids (bit `m` for member `m`).
    pub coordinator_members: u8,
    /// Coordinator slot words (a ring views reuse).
    pub slot_count: u32,
    /// Times this member fell a lap of the ring behind and skipped to a
    /// later slot.
    pub slots_skipped: u64,
    /// The log engine may commit without a view of its own (DARE alone):
    /// see [`ViewEngine::fallback_allowed`].
    pub fallback: bool,
    /// The consensus engine's counters.
    pub consensus: ConsensusStatus,
}

#[derive(Clone, Copy, Debug)]
struct RenewalRound {
    renewal: crate::lease::Renewal,
    generation: u32,
    /// The lap of the ring the next slot is in.
    lap: u16,
    asked: [bool; MAX_MEMBERS],
    empty: usize,
    failed: usize,
    filled: bool,
}

/// The view engine of one member (see the module documentation).
pub struct ViewEngine<M: Memory> {
    consensus: ConsensusEngine<M>,
    lease: LeaseKeeper,
    layout: ConsensusLayout,
    mem: M,
    me: MemberId,
    member_count: u8,
    acceptors: [MemberId; MAX_MEMBERS],
    acceptor_count: usize,
    quorum: usize,
    lease_ns: u64,
    /// Restarted coordinators rejoin (primary-backup mode). Not in log
    /// mode: its fallback to DARE alone counts on a majority of
    /// coordinators gone for good (no lease can be renewed again), which
    /// a coordinator back would break.
    readmit: bool,
    learn_period_ns: u64,
    /// Learn period of a member without a lease in the hurry after a
    /// death: a quarter lease, at least [`HURRY_LEARN_PERIOD_MIN_NS`] unless
    /// an eighth of the shortest election timeout is shorter, and never
    /// longer than the normal learn period.
    hurry_learn_ns: u64,
    /// One above the highest slot known decided.
    next_slot: u32,
    latest: Option<(u64, View)>,
    want: Option<View>,
    /// Primary-backup mode: the epoch the wanted view was derived from
    /// (its member set is the previous view's, changed). It is proposed
    /// only while that is still the newest view known: derived from an
    /// older one, it could name members that a newer view removed.
    want_base: Option<u64>,
    proposing: Option<u32>,
    learning: Option<u32>,
    learn_due_ns: u64,
    renewal: Option<RenewalRound>,
    renew_retry_at_ns: u64,
    outstanding: [u8; MAX_MEMBERS],
    next_generation: u32,
    lease_reported: u64,
    lost_since_ns: Option<u64>,
    /// This process is a restart (its acceptor lost its memory): the
    /// rejoin has been started.
    own_restart_seen: bool,
    /// Acceptors gone for good: reported dead, run again as a new process
    /// (its memory lost its promises), or our own after a restart. Our own
    /// acceptor unreachable for us alone (no loopback) is not gone: the
    /// others still count it.
    gone: [bool; MAX_MEMBERS],
    /// Members reported dead (death notices) and not back since.
    dead: [bool; MAX_MEMBERS],
    /// When this member learnt the newest view it knows.
    latest_learnt_ns: u64,
    /// After a death, a new view is likely soon (a new leader, a member
    /// dropped): until then, a member that finds the next slot undecided
    /// looks again soon rather than after the learn period.
    hurry_until_ns: u64,
    /// This member proposes no more views (its proposal numbers ran out
    /// for a slot, uKharon A.6, or the engine refused a proposal).
    exhausted: bool,
    /// The leader decides its view again (the same view, a new epoch) no
    /// earlier than this while a coordinator rejoins (`refresh_pending`).
    refresh_due_ns: u64,
    /// Views decided again since a coordinator last rejoined.
    refreshes_in_a_row: u32,
    /// A deliberately broken rule (simulator mutation tests).
    #[cfg(feature = "mutation-testing")]
    mutation: crate::config::Mutation,
    status: ViewStatus,
    actions: heapless::Deque<Action, { MAX_MEMBERS * 2 }>,
    events: heapless::Deque<ViewEvent, 16>,
    now: u64,
}

impl<M: Memory + Clone> ViewEngine<M> {
    /// The engine over `memory` laid out by `layout`, or `None` when views
    /// are off in `config`.
    pub fn new(config: &Config, layout: &Layout, memory: M, now_ns: u64) -> Option<Self> {
        let cc = consensus_config(config)?;
        let cl = layout.consensus?;
        let lease = LeaseKeeper::new(config.lease_config()).ok()?;
        let mut acceptors = [MemberId(0); MAX_MEMBERS];
        for (i, m) in cc.acceptors.iter().enumerate() {
            acceptors[i] = *m;
        }
        let acceptor_count = cc.acceptors.len();
        if cc.acceptor_index(cc.self_id).is_some() {
            for slot in 0..cl.slot_count {
                memory.store_u64(cl.slot_word(slot), UNTRUSTED_SLOT_WORD);
            }
        }
        Some(ViewEngine {
            quorum: cc.quorum(),
            consensus: ConsensusEngine::new(&cc, cl, memory.clone(), now_ns),
            lease,
            layout: cl,
            mem: memory,
            me: config.self_id,
            member_count: config.member_count,
            acceptors,
            acceptor_count,
            lease_ns: config.lease_ns,
            readmit: config.mode.view_primary(),
            learn_period_ns: config.view_learn_period_ns,
            hurry_learn_ns: (config.lease_ns / 4)
                .max(HURRY_LEARN_PERIOD_MIN_NS.min(config.election_timeout_min_ns / 8))
                .min(config.view_learn_period_ns),
            next_slot: 0,
            latest: None,
            want: None,
            want_base: None,
            proposing: None,
            learning: None,
            learn_due_ns: now_ns,
            renewal: None,
            renew_retry_at_ns: 0,
            outstanding: [0; MAX_MEMBERS],
            next_generation: 1,
            lease_reported: 0,
            lost_since_ns: None,
            gone: [false; MAX_MEMBERS],
            own_restart_seen: false,
            dead: [false; MAX_MEMBERS],
            latest_learnt_ns: 0,
            hurry_until_ns: 0,
            refresh_due_ns: 0,
            refreshes_in_a_row: 0,
            #[cfg(feature = "mutation-testing")]
            mutation: config.mutation,
            exhausted: false,
            status: ViewStatus::default(),
            actions: heapless::Deque::new(),
            events: heapless::Deque::new(),
            now: now_ns,
        })
    }

    /// The view this member wants decided: one naming it leader in its
    /// current DARE term while it leads, `None` otherwise.
    pub fn want_view(&mut self, now_ns: u64, want: Option<View>) {
        self.now = self.now.max(now_ns);
        if self.want != want || self.want_base.is_some() {
            self.want = want;
            self.want_base = None;
            self.progress();
        }
    }

    /// The view this member wants decided next, derived from the view of
    /// `base_epoch` (0: none known): proposed only while that is still
    /// the newest view known (primary-backup mode, where a view lists the
    /// members and the next one changes that list).
    pub fn want_view_based(&mut self, now_ns: u64, want: Option<View>, base_epoch: u64) {
        self.now = self.now.max(now_ns);
        if self.want != want || self.want_base != Some(base_epoch) {
            self.want = want;
            self.want_base = Some(base_epoch);
            self.progress();
        }
    }

    /// The epoch the wanted view was derived from (primary-backup mode).
    pub fn wanted_base(&self) -> Option<u64> {
        self.want_base
    }

    /// Whether this member's own acceptor memory may be counted: false
    /// after a restart (it lost its promises). Called once the log engine
    /// knows; an excluded acceptor stays excluded.
    pub fn trust_own_acceptor(&mut self, now_ns: u64, trusted: bool) {
        self.now = self.now.max(now_ns);
        if trusted && !self.status.own_acceptor_excluded && self.consensus.own_acceptor().is_some()
        {
            // A new process: it never promised nor accepted anything.
            for slot in 0..self.layout.slot_count {
                let at = self.layout.slot_word(slot);
                if self.mem.load_u64(at) == UNTRUSTED_SLOT_WORD {
                    self.mem.store_u64(at, 0);
                }
            }
        }
        if !trusted && !self.own_restart_seen {
            self.own_restart_seen = true;
            if let Some(a) = self.consensus.own_acceptor() {
                self.gone[a] = true;
                self.status.own_acceptor_excluded = true;
                if self.readmit {
                    // Not counted until it has fenced what it may have
                    // promised before the restart (see the module docs).
                    self.consensus.rejoin_own_acceptor(now_ns);
                    // It needs the views past its bound: learn now, and
                    // quickly from here on (not after a learn period).
                    self.learn_due_ns = self.now;
                } else {
                    self.consensus.exclude_acceptor(now_ns, self.me);
                }
                self.drain_consensus();
                self.note_lost();
            }
        }
    }

    /// The newest view known, with its epoch.
    pub fn latest(&self) -> Option<(u64, View)> {
        self.latest
    }

    /// The view this member holds an active lease on at `now_ns`, with
    /// its epoch and the local time the lease ends (uKharon's `Active`:
    /// local state only).
    #[inline]
    pub fn leased(&self, now_ns: u64) -> Option<(u64, View, u64)> {
        let (epoch, view) = self.latest?;
        if !self.lease.active(epoch, now_ns) {
            return None;
        }
        Some((epoch, view, now_ns + self.lease.remaining_ns(now_ns)))
    }

    /// Whether a leader may commit without a view of its own (DARE alone):
    /// once a majority of coordinators has been known gone for a lease
    /// wait (nobody can renew a lease: renewals need a majority of them).
    pub fn fallback_allowed(&self, now_ns: u64) -> bool {
        let wait = self.lease.config().wait_ns();
        self.lost_since_ns
            .is_some_and(|t| now_ns.saturating_sub(t) >= wait)
    }

    /// Whether this member may still propose views (false once a slot's
    /// proposal numbers ran out, uKharon A.6, or a proposal was refused).
    pub fn can_propose(&self) -> bool {
        !self.exhausted
    }

    /// The view this member currently asks for.
    pub fn wanted(&self) -> Option<View> {
        self.want
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ViewEvent> {
        self.events.pop_front()
    }

    /// State and counters.
    pub fn status(&self, now_ns: u64) -> ViewStatus {
        let mut s = self.status;
        s.epoch = self.latest.map_or(0, |(e, _)| e);
        s.view = self.latest.map(|(_, v)| v);
        s.lease_active = self.leased(now_ns).is_some();
        s.lease_remaining_ns = self.lease.remaining_ns(now_ns);
        s.coordinators_lost = self.lost_since_ns.is_some();
        s.coordinators_out = (0..self.acceptor_count)
            .filter(|&a| self.consensus.acceptor_out(a))
            .fold(0u8, |m, a| m | (1 << a));
        s.coordinator_members = self.acceptors[..self.acceptor_count]
            .iter()
            .fold(0u8, |m, a| m | (1 << a.0));
        s.slot_count = self.consensus.layout().slot_count;
        s.fallback = self.fallback_allowed(now_ns);
        s.consensus = self.consensus.status();
        s
    }

    /// The consensus engine (status, tests).
    pub fn consensus(&self) -> &ConsensusEngine<M> {
        &self.consensus
    }

    fn push_event(&mut self, e: ViewEvent) {
        // Drained after every call; a full queue drops the oldest (status
        // only: the state is in `latest` and the lease).
        if self.events.is_full() {
            self.events.pop_front();
        }
        let _ = self.events.push_back(e);
    }

    fn acceptor_index(&self, member: MemberId) -> Option<usize> {
        self.acceptors[..self.acceptor_count]
            .iter()
            .position(|&m| m == member)
    }

    fn epoch_of(slot: u32) -> u64 {
        u64::from(slot) + 1
    }

    /// A majority of acceptors is gone for good.
    fn note_lost(&mut self) {
        let out = self.gone[..self.acceptor_count]
            .iter()
            .filter(|&&g| g)
            .count();
        if self.acceptor_count - out < self.quorum {
            if self.lost_since_ns.is_none() {
                self.lost_since_ns = Some(self.now);
            }
        } else {
            self.lost_since_ns = None;
        }
    }

    fn drain_consensus(&mut self) {
        while let Some(e) = self.consensus.poll_event() {
            match e {
                ConsensusEvent::Decided { slot, value, ours } => {
                    self.on_decided(slot, &value, ours)
                }
                ConsensusEvent::Undecided { slot } => {
                    if self.learning == Some(slot)
                        && self.consensus.decided_through().is_some_and(|f| slot <= f)
                    {
                        // Decided, as our rejoin scan saw, but not
                        // learnable by reading (see `decided_through`):
                        // on to the newest the scan saw, then past it.
                        self.learning = None;
                        let f = self.consensus.decided_through().unwrap_or(slot);
                        self.next_slot = if slot < f { f } else { slot + 1 };
                        self.status.slots_skipped += 1;
                        self.learn_due_ns = self.now;
                    } else if self.learning == Some(slot) {
                        self.learning = None;
                        // Caught up. A superseded leader looks again soon:
                        // the slot that stopped its renewal is being
                        // decided.
                        let again = if self.holds_lease_role() {
                            self.lease_ns / 4
                        } else if self.now < self.hurry_until_ns || self.consensus.rejoining() {
                            // (A rejoining acceptor counts again once the
                            // slots past its bound are decided and it
                            // knows them: the leader decides them now.)
                            self.hurry_learn_ns
                        } else {
                            self.learn_period_ns
                        };
                        self.learn_due_ns = self.now.saturating_add(again.max(1));
                    }
                }
                ConsensusEvent::Recycled { slot, later } => {
                    if self.proposing == Some(slot) {
                        self.proposing = None;
                    }
                    if self.learning == Some(slot) {
                        self.learning = None;
                    }
                    // A lap behind: what was decided in `slot` may be gone.
                    // Two slots before a touched one is decided (see the
                    // module docs); go on from there at once.
                    let from = later.saturating_sub(2);
                    if from > self.next_slot {
                        self.next_slot = from;
                        self.status.slots_skipped += 1;
                    }
                    self.learn_due_ns = self.now;
                }
                ConsensusEvent::AcceptorRejoined { .. } => {
                    if let Some(a) = self.consensus.own_acceptor() {
                        self.gone[a] = false;
                    }
                    self.status.own_acceptor_excluded = false;
                    self.status.own_acceptor_rejoins += 1;
                    self.note_lost();
                }
                ConsensusEvent::ProposalSpaceExhausted { slot } => {
                    if self.proposing == Some(slot) {
                        self.proposing = None;
                        self.exhausted = true;
                    }
                    self.push_event(ViewEvent::ProposalSpaceExhausted { slot });
                }
            }
        }
    }

    fn on_decided(&mut self, slot: u32, value: &[u8], ours: bool) {
        self.next_slot = self.next_slot.max(slot + 1);
        if self.proposing == Some(slot) {
            self.proposing = None;
            if ours {
                self.status.won += 1;
            }
        }
        if self.learning == Some(slot) {
            self.learning = None;
            // Go on with the next slot at once.
            self.learn_due_ns = self.now;
        }
        let view = match View::decode(value, self.member_count) {
            Ok(v) => v,
            Err(_) => {
                self.status.malformed_views += 1;
                return;
            }
        };
        let epoch = Self::epoch_of(slot);
        if self.latest.is_some_and(|(e, _)| e >= epoch) {
            return;
        }
        let compatible = self
            .latest
            .is_some_and(|(e, prev)| e + 1 == epoch && view.compatible_with(&prev));
        // Only a view's leader ever holds a lease on it. If the previous
        // view's leader is dead, and we knew that view for a lease wait
        // (so every lease on a view before it had run out: those checks
        // fail once it is decided), nobody holds a lease on an older view.
        let older_leases_ended = self.latest.is_some_and(|(e, prev)| {
            e + 1 == epoch
                && self.dead[prev.leader.index()]
                && self.now.saturating_sub(self.latest_learnt_ns) >= self.lease.config().wait_ns()
        });
        self.latest = Some((epoch, view));
        self.latest_learnt_ns = self.now;
        self.lease.follow(
            LeasedView {
                epoch,
                compatible_with_previous: compatible,
                older_leases_ended,
            },
            self.now,
        );
        // Checks of the previous view are stale from now.
        self.renewal = None;
        self.renew_retry_at_ns = 0;
        self.push_event(ViewEvent::Decided { epoch, view, ours });
    }

    /// This member renews: the newest view is the one it wants (it names
    /// this member as the leader of its current term), or one compatible
    /// with it (a primary that asks to change its member set keeps its
    /// lease meanwhile).
    fn holds_lease_role(&self) -> bool {
        self.latest.is_some_and(|(_, v)| {
            self.want
                .is_some_and(|w| w.compatible_with(&v) && w.lease_ns == v.lease_ns)
        })
    }

    /// Whether this member, the leader of the newest view and holding its
    /// lease, wanting nothing else, should decide that view again: a
    /// coordinator restarted (it is up, not counted yet). It counts again
    /// only once the views up to a bound of the slots it may have touched
    /// before its restart are decided without it, and a group whose views
    /// do not change decides none: until then it does not count, and one
    /// more failure leaves no majority of coordinators (the second
    /// primary killed in a row found none). The same view again is
    /// compatible with the one before: the lease goes on, nothing else
    /// changes.
    fn refresh_pending(&self) -> bool {
        if !self.readmit || self.exhausted || !self.holds_lease_role() {
            return false;
        }
        let current = match (self.want, self.latest) {
            (Some(w), Some((e, v))) => w == v && self.want_base.is_none_or(|b| b == e),
            _ => false,
        };
        #[cfg(feature = "mutation-testing")]
        if self.mutation == crate::config::Mutation::NoRefreshForRejoin {
            return false;
        }
        let own = self.consensus.own_acceptor();
        current
            && (0..self.acceptor_count)
                .any(|a| Some(a) != own && self.gone[a] && !self.dead[self.acceptors[a].index()])
    }

    /// A coordinator back after a restart counts again once it answers
    /// (it has rejoined: its words were invalid until then).
    fn readmit_answering(&mut self) {
        if !self.readmit {
            return;
        }
        let own = self.consensus.own_acceptor();
        let mut changed = false;
        for a in 0..self.acceptor_count {
            if self.gone[a]
                && Some(a) != own
                && !self.consensus.acceptor_out(a)
                && self.consensus.answered_since_up(a)
            {
                self.gone[a] = false;
                changed = true;
            }
        }
        if changed {
            self.refreshes_in_a_row = 0;
            self.note_lost();
        }
    }

    fn progress(&mut self) {
        self.readmit_answering();
        for _ in 0..SLOTS_PER_CALL {
            self.drain_consensus();
            if !self.step_once() {
                break;
            }
        }
        self.drain_consensus();
        self.renew();
        if let Some((epoch, _, _)) = self.leased(self.now) {
            if self.lease_reported != epoch {
                self.lease_reported = epoch;
                self.push_event(ViewEvent::LeaseActive { epoch });
            }
        }
    }

    /// Proposes or learns one slot; true when a slot was resolved at once
    /// (another may follow).
    fn step_once(&mut self) -> bool {
        if self.proposing.is_some() || self.learning.is_some() {
            return false;
        }
        let slot = self.next_slot;
        // Never a view older than the newest known: a deposed leader that
        // has not heard of its successor's term yet must not take the
        // view back.
        let latest_epoch = self.latest.map_or(0, |(e, _)| e);
        let wanted = match (self.want, self.latest) {
            (Some(_), _) if self.exhausted => None,
            (Some(_), _) if self.want_base.is_some_and(|b| b != latest_epoch) => None,
            (Some(w), None) => Some(w),
            (Some(w), Some((_, v))) if w != v && w.log_term >= v.log_term => Some(w),
            _ => None,
        };
        let refresh = wanted.is_none() && self.refresh_pending() && self.now >= self.refresh_due_ns;
        let wanted = wanted.or(if refresh { self.want } else { None });
        if let Some(w) = wanted {
            match self.consensus.propose_now(self.now, slot, &w.encode()) {
                Ok(()) => {
                    if refresh {
                        // Faster than the lease at first; a rejoin that
                        // needs more (the member still learning its way
                        // up) backs off, doubling.
                        let period = self.lease_ns.max(self.hurry_learn_ns)
                            << (self.refreshes_in_a_row / REFRESHES_BEFORE_BACKOFF).min(6);
                        self.refreshes_in_a_row = self.refreshes_in_a_row.saturating_add(1);
                        self.refresh_due_ns = self.now.saturating_add(period);
                        self.status.refreshes += 1;
                    }
                    self.proposing = Some(slot);
                    self.status.proposed += 1;
                    self.drain_consensus();
                    false
                }
                Err(ProposeError::AlreadyDecided) => self.take_decided(slot),
                // A proposal of an earlier want still runs in that slot:
                // its outcome comes first.
                Err(ProposeError::InProgress | ProposeError::Busy) => false,
                Err(_) => {
                    self.exhausted = true;
                    false
                }
            }
        } else if self.now >= self.learn_due_ns {
            match self.consensus.learn(self.now, slot) {
                Ok(()) => {
                    self.learning = Some(slot);
                    self.learn_due_ns = self.now.saturating_add(self.learn_period_ns);
                    self.drain_consensus();
                    false
                }
                Err(LearnError::AlreadyDecided) => self.take_decided(slot),
                Err(LearnError::Busy) => false,
            }
        } else {
            false
        }
    }

    fn take_decided(&mut self, slot: u32) -> bool {
        match self.consensus.decided(slot) {
            Some(v) => {
                let bytes = v.clone();
                self.on_decided(slot, &bytes, false);
                true
            }
            None => false,
        }
    }

    // ---- lease renewal (Algorithm 2) ---------------------------------

    fn renew(&mut self) {
        if self.renewal.is_some()
            || !self.holds_lease_role()
            || self.now < self.renew_retry_at_ns
            || !self.lease.renewal_due(self.now)
        {
            return;
        }
        if (0..self.acceptor_count)
            .any(|a| self.outstanding[a] > 0 && self.consensus.acceptor_usable(a))
        {
            // A READ of an earlier check is still on its way: wait for it
            // (its completion runs this again). Counted as failed, it made
            // every check fail at once whenever a round trip outlasts the
            // retry pause and a check needs every live coordinator: two of
            // five dead, the checks alternated between the other two and
            // none ever reached a majority (swarm seed 2380).
            return;
        }
        let Some(r) = self.lease.begin_renewal(self.now) else {
            return;
        };
        // The next view's slot: epoch e lives in slot e - 1.
        let Ok(next_slot) = u32::try_from(r.epoch) else {
            // 2^32 views: no slot number is left for the next one.
            self.lease.abandon_renewal();
            self.renew_retry_at_ns = u64::MAX;
            return;
        };
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        let mut round = RenewalRound {
            renewal: r,
            generation,
            lap: self.layout.lap(next_slot),
            asked: [false; MAX_MEMBERS],
            empty: 0,
            failed: 0,
            filled: false,
        };
        for a in 0..self.acceptor_count {
            if !self.consensus.acceptor_usable(a) || self.outstanding[a] > 0 {
                round.failed += 1;
                continue;
            }
            if Some(a) == self.consensus.own_acceptor() {
                // Our own acceptor memory: a load is as atomic as the
                // CASes that change it.
                let raw = self.mem.load_u64(self.layout.slot_word(next_slot));
                Self::count_word(&mut round, raw, self.layout.proposer_count);
                continue;
            }
            let wr = WorkRequest {
                wr_id: WrId(OWN_WR | (u64::from(generation) << 8) | a as u64),
                peer: self.acceptors[a],
                op: Op::Read {
                    remote: self.layout.slot_word(next_slot),
                    local: self.layout.renewal_landing(a),
                    len: 8,
                },
                notify: false,
            };
            if self.actions.push_back(Action::Post(wr)).is_err() {
                round.failed += 1;
                continue;
            }
            self.outstanding[a] += 1;
            round.asked[a] = true;
        }
        self.renewal = Some(round);
        self.evaluate_renewal();
    }

    /// Counts one coordinator's word of the next slot: empty if nothing
    /// is accepted there for that slot (an earlier lap's word: the slot
    /// was not touched there yet), filled if something is, or if the word
    /// moved on to a later lap (the slot was decided, and reused since).
    fn count_word(round: &mut RenewalRound, raw: u64, proposer_count: u8) {
        match SlotWord::decode(raw, proposer_count) {
            Ok(w) => match lap_order(w.lap, round.lap) {
                // A restarted coordinator's fence: no answer (it may have
                // accepted the slot before it lost its memory).
                LapOrder::Same if w.is_fenced() => round.failed += 1,
                LapOrder::Older => round.empty += 1,
                LapOrder::Same if w.accepted_proposal == 0 => round.empty += 1,
                LapOrder::Same | LapOrder::Newer => round.filled = true,
            },
            Err(_) => round.failed += 1,
        }
    }

    fn evaluate_renewal(&mut self) {
        let Some(round) = self.renewal else { return };
        let r = round.renewal;
        if round.filled {
            self.renewal = None;
            let outcome = self.lease.finish_renewal(r, false);
            self.renewed(outcome);
            // Learn the view that filled it.
            self.learn_due_ns = self.now;
        } else if round.empty >= self.quorum {
            self.renewal = None;
            let outcome = self.lease.finish_renewal(r, true);
            self.renewed(outcome);
        } else if round.failed > self.acceptor_count - self.quorum {
            self.renewal = None;
            self.lease.abandon_renewal();
            self.status.renewals_abandoned += 1;
            // Not on every iteration: the coordinators that failed stay
            // failed for a while.
            self.renew_retry_at_ns = self.now.saturating_add((self.lease_ns / 8).max(1));
        }
    }

    fn renewed(&mut self, outcome: RenewalOutcome) {
        match outcome {
            RenewalOutcome::Started { .. } | RenewalOutcome::Extended { .. } => {
                self.status.renewals += 1
            }
            RenewalOutcome::Superseded => self.status.renewals_superseded += 1,
            RenewalOutcome::Stale => {}
        }
    }

    fn on_own_completion(&mut self, c: Completion) {
        let a = (c.wr_id.0 & 0xFF) as usize;
        let generation = ((c.wr_id.0 >> 8) & 0xFFFF_FFFF) as u32;
        if a >= self.acceptor_count || self.acceptors[a] != c.peer || self.outstanding[a] == 0 {
            self.status.stale_completions += 1;
            return;
        }
        self.outstanding[a] -= 1;
        if c.status != WcStatus::Ok {
            // The channel is broken: have it re-established.
            self.consensus.channel_failed(self.now, a);
        }
        let Some(mut round) = self.renewal else {
            return;
        };
        if round.generation != generation || !round.asked[a] {
            return;
        }
        round.asked[a] = false;
        if c.status == WcStatus::Ok {
            let raw = self.mem.load_u64(self.layout.renewal_landing(a));
            Self::count_word(&mut round, raw, self.layout.proposer_count);
        } else {
            round.failed += 1;
        }
        self.renewal = Some(round);
        self.evaluate_renewal();
    }
}

impl<M: Memory + Clone> Engine for ViewEngine<M> {
    fn name(&self) -> &'static str {
        "views"
    }

    fn handle_completion(&mut self, now_ns: u64, mut c: Completion) {
        self.now = self.now.max(now_ns);
        if c.peer == self.me && c.status == WcStatus::InvalidRequest {
            // A fabric without loopback requests (a verbs device that
            // could not connect a QP to itself): we cannot CAS our own
            // acceptor word the way the others do, so we stop asking it.
            // It is not gone: the others still count it.
            self.status.own_acceptor_no_loopback = true;
            if !self.status.own_acceptor_excluded {
                self.status.own_acceptor_excluded = true;
                self.consensus.exclude_acceptor(now_ns, self.me);
                self.drain_consensus();
            }
        }
        if c.wr_id.0 & OWN_WR != 0 {
            c.wr_id = WrId(c.wr_id.0 & !OWN_WR);
            self.on_own_completion(c);
        } else {
            self.consensus.handle_completion(now_ns, c);
        }
        self.progress();
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.now = self.now.max(now_ns);
        self.consensus.handle_timeout(now_ns);
        self.progress();
    }

    fn handle_peer_down(&mut self, now_ns: u64, peer: MemberId) {
        self.now = self.now.max(now_ns);
        if let Some(d) = self.dead.get_mut(peer.index()) {
            *d = true;
        }
        if let Some(a) = self.acceptor_index(peer) {
            self.gone[a] = true;
        }
        self.consensus.handle_peer_down(now_ns, peer);
        self.note_lost();
        // A death often means a new view soon (a new leader, a member
        // dropped): look for it now rather than at the next learn period.
        if self.learning.is_none() && self.learn_due_ns != u64::MAX {
            self.learn_due_ns = self.now;
        }
        // For a few leases' worth of decisions, and at least a millisecond.
        self.hurry_until_ns = self.now.saturating_add((self.lease_ns * 8).max(1_000_000));
        if let Some(mut round) = self.renewal {
            // Its READ may never complete: count it failed now.
            if let Some(a) = self.acceptors[..self.acceptor_count]
                .iter()
                .position(|&m| m == peer)
            {
                if round.asked[a] {
                    round.asked[a] = false;
                    round.failed += 1;
                    self.renewal = Some(round);
                    self.evaluate_renewal();
                }
            }
        }
        self.progress();
    }

    fn handle_peer_up(&mut self, now_ns: u64, peer: MemberId) {
        self.now = self.now.max(now_ns);
        // A new process in its place (also when its death was never
        // reported): an acceptor's memory lost its promises, and it answers
        // nothing until it has rejoined (see the module docs).
        if let Some(d) = self.dead.get_mut(peer.index()) {
            *d = false;
        }
        // Asked again by the consensus engine, but gone here (for the
        // fallback) until it answers: its words are invalid until it has
        // rejoined, which needs views decided without it.
        self.consensus.handle_peer_up(now_ns, peer);
        if let Some(a) = self.acceptor_index(peer).filter(|_| peer != self.me) {
            self.gone[a] = true;
            if !self.readmit {
                // Log mode: out for good (see `readmit`).
                self.consensus.exclude_acceptor(now_ns, peer);
            }
            self.drain_consensus();
            self.note_lost();
        }
        self.progress();
    }

    fn poll_action(&mut self) -> Option<Action> {
        // The consensus engine's first: its record WRITE precedes its CAS.
        self.consensus
            .poll_action()
            .or_else(|| self.actions.pop_front())
    }

    fn handle_action_failed(&mut self, now_ns: u64, action: &Action, error: FabricError) {
        self.now = self.now.max(now_ns);
        if let Action::Post(wr) = action {
            let (_, local) = crate::engine::EngineTag::split(wr.wr_id);
            if local.0 & OWN_WR != 0 {
                // A renewal READ the fabric refused to post: no completion
                // will come for it. Counted as failed at once; left
                // outstanding, it would hold every later check back.
                let a = (local.0 & 0xFF) as usize;
                let generation = ((local.0 >> 8) & 0xFFFF_FFFF) as u32;
                if a < self.acceptor_count && self.outstanding[a] > 0 {
                    self.outstanding[a] -= 1;
                    self.consensus.channel_failed(self.now, a);
                    if let Some(mut round) = self.renewal {
                        if round.generation == generation && round.asked[a] {
                            round.asked[a] = false;
                            round.failed += 1;
                            self.renewal = Some(round);
                            self.evaluate_renewal();
                        }
                    }
                }
                return;
            }
        }
        self.consensus.handle_action_failed(now_ns, action, error);
    }

    fn next_deadline(&self) -> u64 {
        let mut at = self.consensus.next_deadline();
        if self.proposing.is_none() && self.learning.is_none() {
            at = at.min(self.learn_due_ns);
        }
        if self.holds_lease_role() && self.renewal.is_none() {
            if let Some(due) = self.lease.renewal_due_at() {
                at = at.min(due.max(self.renew_retry_at_ns));
            }
        }
        if self.proposing.is_none() && self.learning.is_none() && self.refresh_pending() {
            at = at.min(self.refresh_due_ns);
        }
        at
    }
}

#[cfg(test)]
mod tests;
