//! The sans-IO consensus engine of one member: proposer (if it is one),
//! learner, and local reader of its own acceptor memory.
//!
//! See the [module docs](super) for the protocol and the driving contract.

use super::layout::{ConsensusConfig, ConsensusLayout, LANES, OPS_MAX, STAGING_COUNT, WINDOW};
use super::record::{
    decode_record, encode_record, value_digest, Record, Value, RECORD_BYTES_CAP,
    RECORD_HEADER_BYTES,
};
use super::word::{
    accept_step, first_proposal, highest_accepted, lap_order, owner_of, prepare_step,
    proposal_above, AcceptStep, LapOrder, PrepareStep, SlotWord, ValueRef,
};
use crate::engine::{Engine, ENGINE_WR_ID_LIMIT};
use crate::fabric::{
    Action, Channel, Completion, FabricError, MemberId, Op, WcStatus, WorkRequest, WrId,
    MAX_MEMBERS,
};
use crate::mem::Memory;
use crate::rng::SplitMix64;
use heapless::Deque;

/// Actions queued between two drains, at most: one per work request that
/// can be in flight, and one reconnect per acceptor.
pub const CONSENSUS_ACTION_QUEUE_CAP: usize = OPS_MAX + MAX_MEMBERS;
/// Events queued between two drains, at most.
pub const CONSENSUS_EVENT_QUEUE_CAP: usize = 8;
/// CASes at one acceptor per phase of an attempt: after a CAS that found
/// another word than expected (the old value it returns is a fresh READ),
/// the proposer may try again once with that word as the expected one,
/// as long as the acceptor still allows its proposal.
const CAS_TRIES_MAX: u8 = 2;
/// The backoff doubles per consecutive abort, at most this often.
const BACKOFF_DOUBLINGS_MAX: u32 = 16;
/// The learner's lane.
const LEARN_LANE: usize = WINDOW;

/// What the engine tells its driver.
// The decided value travels inside the event: without `alloc` there is
// nothing to box it in, and the queue holds only a few events.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsensusEvent {
    /// `value` is decided in `slot` (by this proposer, or learned). Every
    /// member that reports a decision for a slot reports the same value.
    Decided {
        /// The slot.
        slot: u32,
        /// The decided value.
        value: Value,
        /// This engine was proposing `value` for `slot` (through
        /// [`ConsensusEngine::propose`]). False when another proposer's
        /// value won the slot or it was learned: a caller whose own value
        /// lost proposes it again elsewhere if it still wants to.
        ours: bool,
    },
    /// The next proposal number for `slot` does not fit the 16 bits of the
    /// slot word (uKharon A.6). The attempt is given up. The paper falls
    /// back to two-sided RPC Paxos for such acceptors; this crate does not
    /// implement that fallback, so the caller must act (alert, move the
    /// sequence to fresh slots by reconfiguration).
    ProposalSpaceExhausted {
        /// The slot.
        slot: u32,
    },
    /// A [`ConsensusEngine::learn`] found no value accepted by a majority
    /// under one proposal among the acceptors it could read. The slot may
    /// be undecided, or decided with too many acceptors unreachable.
    Undecided {
        /// The slot.
        slot: u32,
    },
    /// This member's own acceptor counts again after a restart
    /// ([`ConsensusEngine::rejoin_own_acceptor`]): its words are fenced
    /// where it may have promised before, and open from `from` on.
    AcceptorRejoined {
        /// The first slot its words take part in.
        from: u32,
    },
    /// `slot` is over: an acceptor's word holds `later`, a slot of a later
    /// lap of the ring, and (when slots are decided in order) a word is
    /// reused only once its slot is decided. The proposal or learn of
    /// `slot` is given up; what was decided there may be gone, so a
    /// caller that fell this far behind goes on from a later slot.
    Recycled {
        /// The slot given up.
        slot: u32,
        /// The later slot the word was seen holding.
        later: u32,
    },
}

/// Why [`ConsensusEngine::propose`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProposeError {
    /// This member is not among the configured proposers.
    NotAProposer,
    /// The value is longer than `value_bytes_max`.
    ValueTooLong,
    /// The slot is decided already: see [`ConsensusEngine::decided`].
    AlreadyDecided,
    /// A value is being proposed for this slot already.
    InProgress,
    /// Both window entries are busy with values for other slots.
    Busy,
}

/// Why [`ConsensusEngine::learn`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LearnError {
    /// The slot is decided already here.
    AlreadyDecided,
    /// A learn is in progress.
    Busy,
}

/// Counters, for status and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsensusStatus {
    /// Slots decided (by this proposer or learned).
    pub decided: u64,
    /// Attempts started (each with a fresh proposal number).
    pub attempts: u64,
    /// Attempts aborted.
    pub aborts: u64,
    /// Prepare-phase CASes posted.
    pub prepare_cas_posted: u64,
    /// Accept-phase CASes posted.
    pub accept_cas_posted: u64,
    /// READs of slot words posted.
    pub slot_reads_posted: u64,
    /// Slot words read from this member's own acceptor memory.
    pub local_slot_reads: u64,
    /// Proposal records WRITTEn.
    pub record_writes_posted: u64,
    /// Proposal records READ.
    pub record_reads_posted: u64,
    /// Words from acceptors that failed validation.
    pub malformed_words: u64,
    /// Records that failed validation or did not match.
    pub bad_records: u64,
    /// Completions of requests given up earlier, or not ours.
    pub stale_completions: u64,
    /// Error completions.
    pub error_completions: u64,
    /// Proposal space exhaustions reported.
    pub proposals_exhausted: u64,
    /// Slots given up because a word had moved on to a later lap.
    pub recycled: u64,
    /// READs of another acceptor's whole array of words (rejoining).
    pub scans_posted: u64,
    /// Times this member's own acceptor counted again after a restart.
    pub rejoined: u64,
}

/// What one acceptor answered in the current phase of an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// Not yet.
    Pending,
    /// Prepare: it promised, from this state (its accepted value counts).
    Promise(SlotWord),
    /// Accept: it accepted.
    Accepted,
    /// It promised a proposal at or above ours.
    Nack(u16),
    /// Its word has moved on to this slot of a later lap: ours is over.
    Over(u32),
    /// No answer in this phase (error completion, peer down, malformed
    /// word, CAS tries used up).
    Silent,
}

/// One acceptor's slot word as a proposer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AcceptorView {
    /// The word: observed (from a READ or a CAS's result) or predicted.
    known: Option<SlotWord>,
    /// `known` was observed, not guessed.
    observed: bool,
    answer: Answer,
    cas_tries: u8,
    /// The accept phase's record WRITE to it is posted.
    record_posted: bool,
}

const VIEW_UNKNOWN: AcceptorView = AcceptorView {
    known: None,
    observed: false,
    answer: Answer::Pending,
    cas_tries: 0,
    record_posted: false,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Free,
    /// Waiting to (re)start after an abort, or a non-leader's first wait.
    Backoff {
        until_ns: u64,
    },
    Prepare,
    /// Prepared; fetching the record of the value to adopt.
    Fetch {
        want: ValueRef,
        /// Acceptors asked already (bit per acceptor index).
        tried: u8,
    },
    /// Prepared with nothing to adopt, waiting for a value (pre-prepared).
    Prepared,
    /// Waiting for a staging record whose WRITEs are still in flight.
    AcceptWait,
    Accept {
        staging: u8,
    },
}

/// One slot a proposer works on.
#[derive(Clone, Debug)]
struct Entry {
    phase: Phase,
    slot: u32,
    /// Unique per attempt (and per reuse of the entry): completions of
    /// other attempts are stale.
    attempt: u32,
    /// Current (or last) proposal number; 0 before the first attempt.
    proposal: u16,
    /// The caller's value for this slot (None: a pre-preparation).
    value: Option<Value>,
    /// The value of the accept phase (the caller's or an adopted one).
    candidate: Option<Value>,
    /// The proposal `candidate` was last staged under.
    written: Option<u16>,
    /// The accept phase's target word.
    target: SlotWord,
    views: [AcceptorView; MAX_MEMBERS],
    aborts: u32,
}

impl Entry {
    fn free() -> Entry {
        Entry {
            phase: Phase::Free,
            slot: 0,
            attempt: 0,
            proposal: 0,
            value: None,
            candidate: None,
            written: None,
            target: SlotWord::EMPTY,
            views: [VIEW_UNKNOWN; MAX_MEMBERS],
            aborts: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Heard {
    Pending,
    /// The word as it concerns the slot learnt (a word of an older lap
    /// holds nothing of it: empty).
    Word(SlotWord),
    /// The word has moved on to this later slot.
    Over(u32),
    Silent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LearnPhase {
    Idle,
    Reading,
    Fetch { want: ValueRef, tried: u8 },
}

#[derive(Clone, Copy, Debug)]
struct Learner {
    phase: LearnPhase,
    slot: u32,
    attempt: u32,
    heard: [Heard; MAX_MEMBERS],
}

/// Why a word is not a state of the slot asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NotOurs {
    /// It has moved on to this slot of a later lap: ours is over.
    Later(u32),
    /// A restarted acceptor fenced it: no answer for this slot.
    Fenced,
}

/// A restarted acceptor on its way back (see the module docs,
/// "Coordinators back").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rejoin {
    /// Nothing to do.
    Idle,
    /// READing the other acceptors' words, one acceptor at a time, until
    /// a majority of acceptors (ourselves not counted) answered.
    Scanning {
        /// Acceptors asked in this round (bit per index).
        tried: u8,
        /// Acceptors whose words were read.
        answered: u8,
        /// The highest slot touched (promised or accepted) in them.
        touched: Option<u32>,
        /// A READ is in flight.
        inflight: bool,
        /// When to try again after every usable acceptor was tried.
        retry_at_ns: u64,
    },
    /// Every slot we may have touched before the restart is at most
    /// `bound`: we fence once slots up to `bound` are decided (so the
    /// fence silences us only where nothing is left to decide).
    Waiting { bound: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    /// A READ of an acceptor's whole array of words (rejoining).
    Scan,
    SlotRead,
    /// `predicted`: `expect` was a guess, not a word seen.
    Cas {
        expect: u64,
        swap: u64,
        predicted: bool,
    },
    RecordWrite {
        staging: u8,
    },
    RecordRead,
}

/// A work request in flight; its index in the table is the low byte of
/// its id, its generation the bits above.
#[derive(Clone, Copy, Debug)]
struct OpSlot {
    in_use: bool,
    generation: u32,
    lane: u8,
    attempt: u32,
    acceptor: u8,
    /// Posted in an accept phase (a prepare-phase answer arriving after
    /// the accept started only updates what we know).
    accepting: bool,
    purpose: Purpose,
}

const OP_FREE: OpSlot = OpSlot {
    in_use: false,
    generation: 0,
    lane: 0,
    attempt: 0,
    acceptor: 0,
    accepting: false,
    purpose: Purpose::SlotRead,
};

/// Our channel to one acceptor.
#[derive(Clone, Copy, Debug, Default)]
struct Chan {
    broken: bool,
    inflight: u16,
    retry_at_ns: u64,
}

/// The consensus engine of one member. See the [module docs](super).
pub struct ConsensusEngine<M: Memory> {
    mem: M,
    layout: ConsensusLayout,
    cfg: ConsensusConfig,
    me_proposer: Option<u8>,
    me_acceptor: Option<usize>,
    proposer_count: u8,
    acceptor_count: usize,
    quorum: usize,
    now: u64,
    rng: SplitMix64,
    entries: [Entry; WINDOW],
    learner: Learner,
    ops: [OpSlot; OPS_MAX],
    lane_busy: [[u8; MAX_MEMBERS]; LANES],
    record_read_busy: [bool; LANES],
    staging_inflight: [u8; STAGING_COUNT],
    chans: [Chan; MAX_MEMBERS],
    /// Acceptors not asked: reported down (until reported back: a
    /// restarted one answers with invalid words until it has rejoined),
    /// or our own while it rejoins.
    acceptor_out: [bool; MAX_MEMBERS],
    /// A valid word was heard from the acceptor since it was last
    /// reported back (a restarted one answers only once it rejoined).
    answered_since_up: [bool; MAX_MEMBERS],
    proposer_down: [bool; MAX_MEMBERS],
    next_attempt: u32,
    /// One above the highest slot known decided.
    frontier: u32,
    /// A new leader's guess for the first slot it prepares: the previous
    /// leader pre-prepared it with its first proposal (§5.3.1).
    takeover: Option<(u32, SlotWord)>,
    preprepare_retry_at_ns: u64,
    /// The proposal floor a dropped pre-preparation reached, and its
    /// slot: the next one there starts above it (else it would start at
    /// our first proposal again and meet our own promise forever).
    preprepare_floor: Option<(u32, u16)>,
    rejoin: Rejoin,
    /// The highest slot the last rejoin scan saw decided at the others
    /// (every slot up to it is decided).
    scan_decided: Option<u32>,
    /// The last slot whose proposal space ran out: not pre-prepared again.
    exhausted_slot: Option<u32>,
    actions: Deque<Action, CONSENSUS_ACTION_QUEUE_CAP>,
    events: Deque<ConsensusEvent, CONSENSUS_EVENT_QUEUE_CAP>,
    status: ConsensusStatus,
}

impl<M: Memory> ConsensusEngine<M> {
    /// An engine over the member's registered memory (both regions of
    /// `layout`, zeroed for a fresh member). The configuration was
    /// validated by [`ConsensusLayout::new`].
    pub fn new(config: &ConsensusConfig, layout: ConsensusLayout, memory: M, now_ns: u64) -> Self {
        assert_eq!(config.validate(), Ok(()), "an invalid configuration");
        assert_eq!(
            ConsensusLayout::new(config).ok(),
            Some(layout),
            "a layout of another configuration"
        );
        let seed = config.seed ^ (u64::from(config.self_id.0) << 56) ^ now_ns;
        ConsensusEngine {
            mem: memory,
            layout,
            me_proposer: config.proposer_index(),
            me_acceptor: config.acceptor_index(config.self_id),
            proposer_count: config.proposers.len() as u8,
            acceptor_count: config.acceptors.len(),
            quorum: config.quorum(),
            cfg: config.clone(),
            now: now_ns,
            rng: SplitMix64::new(seed),
            entries: core::array::from_fn(|_| Entry::free()),
            learner: Learner {
                phase: LearnPhase::Idle,
                slot: 0,
                attempt: 0,
                heard: [Heard::Pending; MAX_MEMBERS],
            },
            ops: [OP_FREE; OPS_MAX],
            lane_busy: [[0; MAX_MEMBERS]; LANES],
            record_read_busy: [false; LANES],
            staging_inflight: [0; STAGING_COUNT],
            chans: [Chan::default(); MAX_MEMBERS],
            acceptor_out: [false; MAX_MEMBERS],
            answered_since_up: [true; MAX_MEMBERS],
            proposer_down: [false; MAX_MEMBERS],
            next_attempt: 1,
            frontier: 0,
            takeover: None,
            preprepare_retry_at_ns: 0,
            preprepare_floor: None,
            rejoin: Rejoin::Idle,
            scan_decided: None,
            exhausted_slot: None,
            actions: Deque::new(),
            events: Deque::new(),
            status: ConsensusStatus::default(),
        }
    }

    // ---- getters -----------------------------------------------------------

    /// The layout of both regions.
    pub fn layout(&self) -> &ConsensusLayout {
        &self.layout
    }

    /// Counters.
    pub fn status(&self) -> ConsensusStatus {
        self.status
    }

    /// True when this member is the lowest-indexed proposer not reported
    /// down (Mu's and uKharon's leader rule). Only the leader proposes at
    /// once and pre-prepares; others wait a randomized backoff first.
    pub fn is_leader(&self) -> bool {
        match self.me_proposer {
            Some(i) => (0..usize::from(i)).all(|j| self.proposer_down[j]),
            None => false,
        }
    }

    /// The proposer index of the leader as this engine sees it: the lowest
    /// one not reported down.
    pub fn leader_index(&self) -> Option<u8> {
        (0..self.proposer_count)
            .find(|&p| Some(p) == self.me_proposer || !self.proposer_down[usize::from(p)])
    }

    /// One above the highest slot this engine knows decided (0 if none).
    pub fn frontier(&self) -> u32 {
        self.frontier
    }

    /// The slot whose decided record is stored where `slot`'s would be,
    /// with its proposal, owner and value.
    fn decided_record_at(&self, slot: u32) -> Option<(u32, u16, u8, Value)> {
        let mut buf = [0u8; RECORD_BYTES_CAP];
        let len = RECORD_HEADER_BYTES + self.layout.value_bytes_max as usize;
        self.mem.read(self.layout.decided(slot), &mut buf[..len]);
        // Written only by us, but registered memory all the same: decoded
        // and checked like anything else.
        let r = decode_record(&buf[..len], self.layout.value_bytes_max as usize).ok()?;
        Some((
            r.slot,
            r.proposal,
            r.owner,
            Value::from_slice(r.value).ok()?,
        ))
    }

    /// The value decided in `slot`, if this engine decided or learned it.
    pub fn decided(&self, slot: u32) -> Option<Value> {
        match self.decided_record_at(slot) {
            Some((s, _, _, value)) if s == slot => Some(value),
            _ => None,
        }
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<ConsensusEvent> {
        self.events.pop_front()
    }

    // ---- commands ----------------------------------------------------------

    /// Proposes `value` for `slot`. The outcome comes as
    /// [`ConsensusEvent::Decided`] for `slot` (with `ours` false if
    /// another value won), or [`ConsensusEvent::ProposalSpaceExhausted`].
    /// The leader starts at once (in one round trip if the slot is
    /// pre-prepared); another proposer after a randomized backoff.
    pub fn propose(&mut self, now_ns: u64, slot: u32, value: &[u8]) -> Result<(), ProposeError> {
        self.propose_inner(now_ns, slot, value, false)
    }

    /// [`ConsensusEngine::propose`] without the non-leader's first
    /// backoff: for a proposer that has its own reason to decide now (the
    /// log leader asking for a view that names it). Safety does not
    /// depend on who proposes; a contended slot still backs off after
    /// an abort.
    pub fn propose_now(
        &mut self,
        now_ns: u64,
        slot: u32,
        value: &[u8],
    ) -> Result<(), ProposeError> {
        self.propose_inner(now_ns, slot, value, true)
    }

    /// This member's own acceptor lost its memory (a restarted process):
    /// its words hold an invalid word (written before its memory was
    /// published), so it answers nothing, and it is counted out here
    /// until it may count again. It READs the other acceptors' words to
    /// bound the slots it may have promised or accepted in before the
    /// restart, waits until the slots up to that bound are decided, then
    /// fences their words and opens the rest ([`ConsensusEvent::
    /// AcceptorRejoined`]; see the module docs, "Coordinators back").
    pub fn rejoin_own_acceptor(&mut self, now_ns: u64) {
        self.now = self.now.max(now_ns);
        let Some(me) = self.me_acceptor else {
            return;
        };
        self.count_out(me);
        for e in 0..WINDOW {
            self.evaluate(e);
        }
        self.evaluate_learn();
        self.rejoin = Rejoin::Scanning {
            tried: 0,
            answered: 0,
            touched: None,
            inflight: false,
            retry_at_ns: 0,
        };
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::RejoinWithoutFence {
            // Broken on purpose: back at once with every word empty, as
            // if nothing had been promised or accepted before the restart.
            self.fence(me, 0);
        }
        self.progress();
        self.invariants();
    }

    /// Whether this member's own acceptor is on its way back after a
    /// restart.
    pub fn rejoining(&self) -> bool {
        self.rejoin != Rejoin::Idle
    }

    /// A slot every slot up to which is decided, as the rejoin scan of a
    /// restarted acceptor saw the others' words (`None` before one). A
    /// restarted member may be unable to learn such a slot by reading: its
    /// old process's accept was one of the majority that decided it, and
    /// the others hold it at fewer than a majority. Only the newest view
    /// matters, so its learner moves past them.
    pub fn decided_through(&self) -> Option<u32> {
        self.scan_decided
    }

    /// Whether acceptor index `a` answered with a valid word since it was
    /// last reported back (a restarted acceptor answers nothing until it
    /// rejoined; see [`ConsensusEngine::rejoin_own_acceptor`]).
    pub fn answered_since_up(&self, a: usize) -> bool {
        a < self.acceptor_count && self.answered_since_up[a]
    }

    /// Counts acceptor `member` out for good: its memory is not to be
    /// trusted (our own acceptor after a restart lost what it promised
    /// and accepted). Nothing happens for a member that is no acceptor.
    pub fn exclude_acceptor(&mut self, now_ns: u64, member: MemberId) {
        self.now = self.now.max(now_ns);
        if let Some(a) = self.acceptor_slot(member) {
            self.count_out(a);
            for e in 0..WINDOW {
                self.evaluate(e);
            }
            self.evaluate_learn();
            self.progress();
        }
        self.invariants();
    }

    /// Acceptor `a` answers nothing any more: what we wait for from it
    /// counts as silence. The caller re-evaluates.
    fn count_out(&mut self, a: usize) {
        self.acceptor_out[a] = true;
        for e in self.entries.iter_mut() {
            if e.views[a].answer == Answer::Pending {
                e.views[a].answer = Answer::Silent;
            }
        }
        if self.learner.heard[a] == Heard::Pending {
            self.learner.heard[a] = Heard::Silent;
        }
    }

    /// A request of the caller's own to acceptor index `a` failed on the
    /// shared channel (the view engine's lease checks): the channel is
    /// broken for us too, and re-established like after our own errors.
    pub fn channel_failed(&mut self, now_ns: u64, a: usize) {
        self.now = self.now.max(now_ns);
        if a < self.acceptor_count && !self.chans[a].broken {
            self.chans[a].broken = true;
            self.chans[a].retry_at_ns = self.now.saturating_add(self.cfg.reconnect_backoff_ns);
        }
        self.maintain_channels();
        self.invariants();
    }

    /// Whether acceptor index `a` may be asked now: it is not counted out
    /// and its channel is not broken.
    pub fn acceptor_usable(&self, a: usize) -> bool {
        a < self.acceptor_count && !self.acceptor_out[a] && !self.chans[a].broken
    }

    /// Whether acceptor index `a` is counted out for good (reported down
    /// or excluded).
    pub fn acceptor_out(&self, a: usize) -> bool {
        a >= self.acceptor_count || self.acceptor_out[a]
    }

    /// This member's index among the acceptors, if it is one.
    pub fn own_acceptor(&self) -> Option<usize> {
        self.me_acceptor
    }

    fn propose_inner(
        &mut self,
        now_ns: u64,
        slot: u32,
        value: &[u8],
        at_once: bool,
    ) -> Result<(), ProposeError> {
        self.now = self.now.max(now_ns);
        if self.me_proposer.is_none() {
            return Err(ProposeError::NotAProposer);
        }
        if value.len() > self.layout.value_bytes_max as usize {
            return Err(ProposeError::ValueTooLong);
        }
        if self.decided(slot).is_some() {
            return Err(ProposeError::AlreadyDecided);
        }
        let v = Value::from_slice(value).expect("checked against value_bytes_max");
        if let Some(e) = self.entry_for(slot) {
            if self.entries[e].value.is_some() {
                return Err(ProposeError::InProgress);
            }
            self.entries[e].value = Some(v.clone());
            if self.entries[e].phase == Phase::Prepared {
                // Pre-prepared with nothing to adopt: one round trip.
                self.set_candidate(e, v);
                self.start_accept(e);
            }
            self.invariants();
            return Ok(());
        }
        let e = match self.entry_to_use() {
            Some(e) => e,
            None => return Err(ProposeError::Busy),
        };
        self.init_entry(e, slot, Some(v));
        if self.is_leader() || at_once {
            self.start_attempt(e);
        } else {
            // Let a live leader go first (uKharon §5.3.1).
            let wait_ns = self
                .rng
                .range_inclusive(self.cfg.backoff_min_ns, self.cfg.backoff_max_ns);
            let until_ns = self.now.saturating_add(wait_ns);
            self.entries[e].phase = Phase::Backoff { until_ns };
        }
        self.invariants();
        Ok(())
    }

    /// Learns `slot` by READing its word at every acceptor: a value
    /// accepted by a majority under one proposal is decided, and its
    /// record is READ. Answers with [`ConsensusEvent::Decided`] (`ours`
    /// false) or [`ConsensusEvent::Undecided`]. Any member may learn.
    pub fn learn(&mut self, now_ns: u64, slot: u32) -> Result<(), LearnError> {
        self.now = self.now.max(now_ns);
        if self.decided(slot).is_some() {
            return Err(LearnError::AlreadyDecided);
        }
        if self.learner.phase != LearnPhase::Idle {
            return Err(LearnError::Busy);
        }
        self.learner = Learner {
            phase: LearnPhase::Reading,
            slot,
            attempt: self.new_attempt(),
            heard: [Heard::Pending; MAX_MEMBERS],
        };
        self.progress();
        self.invariants();
        Ok(())
    }

    // ---- entries -----------------------------------------------------------

    fn new_attempt(&mut self) -> u32 {
        let a = self.next_attempt;
        self.next_attempt = self.next_attempt.wrapping_add(1).max(1);
        a
    }

    fn entry_for(&self, slot: u32) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.phase != Phase::Free && e.slot == slot)
    }

    /// A free entry, or else one that only pre-prepares (given up).
    fn entry_to_use(&self) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.phase == Phase::Free)
            .or_else(|| self.entries.iter().position(|e| e.value.is_none()))
    }

    fn init_entry(&mut self, e: usize, slot: u32, value: Option<Value>) {
        // The leader predicts what it will find (A.5): an empty slot, or,
        // for the first slot after a takeover, the previous leader's
        // pre-preparation. Others READ first (cas-rpc, line 2).
        let prediction = if self.is_leader() {
            Some(match self.takeover {
                Some((s, w)) if s == slot => w,
                _ => self.predicted_word(slot),
            })
        } else {
            None
        };
        let attempt = self.new_attempt();
        let entry = &mut self.entries[e];
        *entry = Entry::free();
        entry.slot = slot;
        entry.attempt = attempt;
        entry.value = value;
        entry.phase = Phase::Backoff { until_ns: 0 };
        for v in entry.views.iter_mut() {
            v.known = prediction;
        }
    }

    /// What a leader expects to find for a fresh `slot`: the empty word on
    /// the ring's first lap; a lap on, the word our own decision of the
    /// slot a lap before left where its value was accepted under the
    /// decided proposal (a stable leader decided it). A wrong guess costs
    /// a CAS whose result is the word, and no try.
    fn predicted_word(&self, slot: u32) -> SlotWord {
        let lap = self.layout.lap(slot);
        let before = slot.checked_sub(self.layout.slot_count);
        match (before, self.decided_record_at(slot)) {
            (Some(b), Some((s, proposal, owner, value))) if s == b => SlotWord {
                min_proposal: proposal,
                accepted_proposal: proposal,
                value: Some(ValueRef {
                    owner,
                    proposal,
                    digest: value_digest(&value),
                }),
                lap: self.layout.lap(b),
            },
            _ => SlotWord::empty(lap),
        }
    }

    fn free_entry(&mut self, e: usize) {
        // Requests in flight for it become stale (the attempt changes).
        let attempt = self.new_attempt();
        self.entries[e] = Entry::free();
        self.entries[e].attempt = attempt;
    }

    fn max_known_min(&self, e: usize) -> u16 {
        let slot = self.entries[e].slot;
        self.entries[e].views[..self.acceptor_count]
            .iter()
            .filter_map(|v| v.known)
            .filter_map(|w| self.interpret(slot, w).ok())
            .map(|w| w.min_proposal)
            .max()
            .unwrap_or(0)
    }

    /// What acceptor word `w` says about `slot`: its state if the word is
    /// about `slot`; the empty state if it is about an earlier slot of the
    /// ring (nobody touched `slot` there yet: a CAS from that word
    /// recycles it); not ours if it is about a later slot, or fenced.
    fn interpret(&self, slot: u32, w: SlotWord) -> Result<SlotWord, NotOurs> {
        let lap = self.layout.lap(slot);
        match lap_order(w.lap, lap) {
            LapOrder::Same if w.is_fenced() => Err(NotOurs::Fenced),
            LapOrder::Same => Ok(w),
            LapOrder::Older => Ok(SlotWord::empty(lap)),
            LapOrder::Newer => {
                #[cfg(feature = "mutation-testing")]
                if self.cfg.mutation == crate::config::Mutation::RecycleIgnoresLap {
                    // Broken on purpose: a later slot's state taken for ours.
                    return Ok(SlotWord { lap, ..w });
                }
                Err(NotOurs::Later(self.layout.slot_of(
                    self.layout.index(slot),
                    w.lap,
                    slot,
                )))
            }
        }
    }

    fn start_attempt(&mut self, e: usize) {
        let me = self.me_proposer.expect("only proposers start attempts");
        let floor = self.entries[e].proposal.max(self.max_known_min(e));
        let proposal = match proposal_above(floor, me, self.proposer_count) {
            Ok(p) => p,
            Err(_) => {
                self.exhausted(e);
                return;
            }
        };
        let attempt = self.new_attempt();
        let entry = &mut self.entries[e];
        entry.proposal = proposal;
        entry.attempt = attempt;
        for v in entry.views.iter_mut() {
            v.answer = Answer::Pending;
            v.cas_tries = 0;
            v.record_posted = false;
        }
        self.status.attempts += 1;
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::AcceptWithoutPrepare {
            // Broken on purpose: CAS our value in without a majority of
            // promises and without adopting what acceptors accepted.
            if let Some(v) = self.entries[e].value.clone() {
                self.set_candidate(e, v);
                self.start_accept(e);
                return;
            }
        }
        self.entries[e].phase = Phase::Prepare;
        self.drive_entry(e);
    }

    /// The value the next accept phase proposes. What we staged earlier
    /// no longer describes it, so our own record cannot stand in for it
    /// until it is staged again (see `prepared`).
    fn set_candidate(&mut self, e: usize, value: Value) {
        self.entries[e].candidate = Some(value);
        self.entries[e].written = None;
    }

    /// Gives the slot up for good (A.6) and says so, once per slot.
    fn exhausted(&mut self, e: usize) {
        let slot = self.entries[e].slot;
        self.free_entry(e);
        self.status.proposals_exhausted += 1;
        self.exhausted_slot = Some(slot);
        self.event(ConsensusEvent::ProposalSpaceExhausted { slot });
    }

    fn drive_entry(&mut self, e: usize) {
        for a in 0..self.acceptor_count {
            self.drive_acceptor(e, a);
        }
        self.evaluate(e);
    }

    /// Posts what acceptor `a` needs next in entry `e`'s current phase:
    /// the cas-rpc of Algorithm 1 (fetch or predict the state, compare
    /// locally, CAS), one request at a time per acceptor.
    fn drive_acceptor(&mut self, e: usize, a: usize) {
        let accepting = match self.entries[e].phase {
            Phase::Prepare => false,
            Phase::Accept { .. } => true,
            _ => return,
        };
        if self.entries[e].views[a].answer != Answer::Pending || self.lane_busy[e][a] > 0 {
            return;
        }
        if self.acceptor_out[a] || self.chans[a].broken {
            self.entries[e].views[a].answer = Answer::Silent;
            return;
        }
        let slot = self.entries[e].slot;
        let attempt = self.entries[e].attempt;
        if self.entries[e].views[a].known.is_none() {
            if Some(a) == self.me_acceptor {
                // Our own acceptor memory: read it in place.
                let raw = self.mem.load_u64(self.layout.slot_word(slot));
                self.status.local_slot_reads += 1;
                match SlotWord::decode(raw, self.proposer_count) {
                    Ok(w) => self.entries[e].views[a].known = Some(w),
                    Err(_) => {
                        self.status.malformed_words += 1;
                        self.entries[e].views[a].answer = Answer::Silent;
                        return;
                    }
                }
                self.entries[e].views[a].observed = true;
            } else {
                self.post_slot_read(e, attempt, a, accepting, slot);
                return;
            }
        }
        let view = self.entries[e].views[a];
        let word = view.known.expect("known above");
        let known = match self.interpret(slot, word) {
            Ok(w) => w,
            Err(NotOurs::Later(later)) => {
                // Observed or not (a prediction is always of our lap).
                self.entries[e].views[a].answer = Answer::Over(later);
                return;
            }
            Err(NotOurs::Fenced) => {
                self.entries[e].views[a].answer = Answer::Silent;
                return;
            }
        };
        let proposal = self.entries[e].proposal;
        // The CAS compares the word as it is: from an earlier lap's word,
        // it recycles it for our slot.
        let (swap, record) = if accepting {
            let target = self.entries[e].target;
            if view.observed && word == target {
                // Our accept landed although its completion said otherwise.
                self.entries[e].views[a].answer = Answer::Accepted;
                return;
            }
            match accept_step(
                known,
                proposal,
                target.value.expect("a target names a value"),
            ) {
                AcceptStep::Cas(to) => (to, !view.record_posted),
                AcceptStep::Nack { min_proposal } => {
                    self.refuse(e, a, view.observed, min_proposal, accepting);
                    return;
                }
            }
        } else {
            match prepare_step(known, proposal) {
                PrepareStep::Cas(to) => (to, false),
                PrepareStep::Nack { min_proposal } => {
                    self.refuse(e, a, view.observed, min_proposal, accepting);
                    return;
                }
            }
        };
        if record {
            // The value first, on the same connection: if the CAS lands,
            // so did the record (RC is FIFO; uKharon §5.3.1).
            let Phase::Accept { staging } = self.entries[e].phase else {
                unreachable!("record WRITEs only in the accept phase")
            };
            let len = (RECORD_HEADER_BYTES
                + self.entries[e].candidate.as_ref().map_or(0, |v| v.len()))
                as u32;
            let op = Op::Write {
                local: self.layout.staging(usize::from(staging)),
                remote: self
                    .layout
                    .proposal_record(self.me_proposer.expect("proposer"), slot),
                len,
            };
            self.post(
                e,
                attempt,
                a,
                accepting,
                Purpose::RecordWrite { staging },
                |_| op,
            );
            self.status.record_writes_posted += 1;
            self.entries[e].views[a].record_posted = true;
        }
        let (expect, swap) = (word.encode(), swap.encode());
        let remote = self.layout.slot_word(slot);
        let layout = self.layout;
        self.post(
            e,
            attempt,
            a,
            accepting,
            Purpose::Cas {
                expect,
                swap,
                predicted: !view.observed,
            },
            |i| Op::CompareSwap {
                remote,
                local: layout.landing_word(i),
                expect,
                swap,
            },
        );
        if accepting {
            self.status.accept_cas_posted += 1;
        } else {
            self.status.prepare_cas_posted += 1;
        }
    }

    /// The acceptor's word does not allow our proposal: a nack if we saw
    /// the word, a READ if we only guessed it.
    fn refuse(&mut self, e: usize, a: usize, observed: bool, min_proposal: u16, accepting: bool) {
        if observed {
            self.entries[e].views[a].answer = Answer::Nack(min_proposal);
        } else {
            self.entries[e].views[a].known = None;
            let (attempt, slot) = (self.entries[e].attempt, self.entries[e].slot);
            if Some(a) == self.me_acceptor {
                self.drive_acceptor(e, a);
            } else {
                self.post_slot_read(e, attempt, a, accepting, slot);
            }
        }
    }

    fn post_slot_read(&mut self, lane: usize, attempt: u32, a: usize, accepting: bool, slot: u32) {
        let remote = self.layout.slot_word(slot);
        let layout = self.layout;
        self.post(lane, attempt, a, accepting, Purpose::SlotRead, |i| {
            Op::Read {
                remote,
                local: layout.landing_word(i),
                len: 8,
            }
        });
        self.status.slot_reads_posted += 1;
    }

    /// Decides what the answers so far mean for entry `e`.
    fn evaluate(&mut self, e: usize) {
        let accepting = match self.entries[e].phase {
            Phase::Prepare => false,
            Phase::Accept { .. } => true,
            _ => return,
        };
        let (mut yes, mut pending, mut nack) = (0usize, 0usize, None::<u16>);
        let mut over = None;
        for v in &self.entries[e].views[..self.acceptor_count] {
            match v.answer {
                Answer::Promise(_) | Answer::Accepted => yes += 1,
                Answer::Pending => pending += 1,
                Answer::Nack(m) => nack = Some(nack.map_or(m, |n: u16| n.max(m))),
                Answer::Over(later) => over = Some(over.map_or(later, |o: u32| o.max(later))),
                Answer::Silent => {}
            }
        }
        if yes >= self.quorum {
            if accepting {
                self.decide(e);
            } else {
                self.prepared(e);
            }
        } else if let Some(later) = over {
            // The slot is over (a word moved on to a later lap): no
            // attempt can decide it any more.
            let slot = self.entries[e].slot;
            if self.entries[e].value.is_none() {
                // A pre-preparation: not again before a backoff.
                let backoff_ns = self.backoff_ns(0);
                self.preprepare_retry_at_ns = self.now.saturating_add(backoff_ns);
            }
            self.free_entry(e);
            self.recycled(slot, later);
        } else if let Some(m) = nack {
            // Someone with a higher proposal is at work (Algorithm 5, lines
            // 26 and 41): give up this attempt.
            self.abort(e, m);
        } else if yes + pending < self.quorum {
            self.abort(e, 0);
        }
    }

    /// Moves a rejoining acceptor on (see `rejoin_own_acceptor`).
    fn progress_rejoin(&mut self) {
        let Some(me) = self.me_acceptor else {
            return;
        };
        match self.rejoin {
            Rejoin::Idle => {}
            Rejoin::Scanning {
                mut tried,
                answered,
                touched,
                inflight,
                mut retry_at_ns,
            } => {
                if inflight {
                    return;
                }
                if answered.count_ones() as usize >= self.quorum {
                    // A slot touched before the restart is at most two past
                    // a slot decided then (slots are decided in order, one
                    // pre-prepared ahead), and every decided slot was
                    // accepted at a majority, which meets the majority of
                    // the others read here: it is seen, or a later lap is.
                    // (`touched` holds the highest slot seen decided.)
                    let bound = touched.map_or(1, |t| t.saturating_add(2));
                    self.scan_decided = touched;
                    self.rejoin = Rejoin::Waiting { bound };
                    self.progress_rejoin();
                    return;
                }
                if self.now < retry_at_ns {
                    return;
                }
                let pick = (0..self.acceptor_count).find(|&a| {
                    a != me
                        && (tried | answered) & (1 << a) == 0
                        && !self.acceptor_out[a]
                        && !self.chans[a].broken
                });
                let mut inflight = false;
                match pick {
                    Some(a) => {
                        tried |= 1 << a;
                        inflight = true;
                        let op = Op::Read {
                            remote: self.layout.slot_word(0),
                            local: self.layout.scan_landing(),
                            len: self.layout.slot_words_bytes() as u32,
                        };
                        self.post(LEARN_LANE, 0, a, false, Purpose::Scan, |_| op);
                        self.status.scans_posted += 1;
                    }
                    None => {
                        // Every usable acceptor asked: again after a pause.
                        tried = 0;
                        retry_at_ns = self.now.saturating_add(self.cfg.reconnect_backoff_ns);
                    }
                }
                self.rejoin = Rejoin::Scanning {
                    tried,
                    answered,
                    touched,
                    inflight,
                    retry_at_ns,
                };
            }
            Rejoin::Waiting { bound } => {
                if self.frontier > bound {
                    self.fence(me, bound);
                }
            }
        }
    }

    /// A scan READ of acceptor `a` completed.
    fn scan_completion(&mut self, a: usize, ok: bool) {
        let Rejoin::Scanning {
            tried,
            mut answered,
            mut touched,
            retry_at_ns,
            ..
        } = self.rejoin
        else {
            self.status.stale_completions += 1;
            return;
        };
        if ok {
            // The highest slot decided before the restart is at most the
            // highest slot accepted (or fenced) here, or two below one
            // only promised (a touched slot has the one two before it
            // decided). An acceptor with an invalid word (restarted, not
            // back yet) tells nothing: it does not count.
            let base = self.layout.scan_landing();
            let mut valid = true;
            let mut seen = touched;
            for index in 0..self.layout.slot_count {
                let raw = self.mem.load_u64(base.add(u64::from(index) * 8));
                let Ok(w) = SlotWord::decode(raw, self.proposer_count) else {
                    valid = false;
                    break;
                };
                if w.min_proposal == 0 && w.accepted_proposal == 0 {
                    continue;
                }
                let slot = self.layout.slot_of(index, w.lap, self.frontier);
                let decided_floor = if w.accepted_proposal != 0 || w.is_fenced() {
                    slot
                } else {
                    slot.saturating_sub(2)
                };
                seen = Some(seen.map_or(decided_floor, |t: u32| t.max(decided_floor)));
            }
            if valid {
                touched = seen;
                answered |= 1 << a;
            }
        }
        self.rejoin = Rejoin::Scanning {
            tried,
            answered,
            touched,
            inflight: false,
            retry_at_ns,
        };
    }

    /// Slots below the frontier are decided (`bound` among them), and none
    /// above `bound` was touched here before the restart: in the lap of
    /// words ending at the frontier, those of slots up to `bound` are
    /// fenced (this acceptor answers for none of them: it may have
    /// promised or accepted there before), the others are empty (slots it
    /// never touched: it answers for them as a new acceptor would, and
    /// any majority it is in meets, in another acceptor, the majority that
    /// decided such a slot without it, so the decided value is adopted).
    /// Fencing those too would leave a slot decided without us learnable
    /// only from its deciding majority: with three coordinators, one of
    /// them dead, the next view could never be decided (the second
    /// primary killed in a row found no view). Rejoining happens in the
    /// primary-backup modes only, where no DARE fallback commits without
    /// a lease. A slot of an earlier lap meets a word of a later one (at
    /// most the frontier: the slot two before it is decided); one of a
    /// later lap recycles it (above the frontier, so above `bound`). Words
    /// of the first lap past the frontier (a young ring) stay empty.
    fn fence(&mut self, me: usize, bound: u32) {
        let frontier = self.frontier;
        assert!(
            bound < frontier || bound == 0,
            "fenced before the bound was decided"
        );
        let n = self.layout.slot_count;
        let first = frontier.saturating_sub(n - 1);
        for t in first..first.saturating_add(n) {
            #[allow(unused_mut)]
            let mut word = if t <= bound {
                SlotWord::fenced(self.layout.lap(t))
            } else {
                SlotWord::empty(self.layout.lap(t))
            };
            #[cfg(feature = "mutation-testing")]
            if self.cfg.mutation == crate::config::Mutation::RejoinWithoutFence {
                word = SlotWord::EMPTY;
            }
            self.mem.store_u64(self.layout.slot_word(t), word.encode());
        }
        self.acceptor_out[me] = false;
        self.rejoin = Rejoin::Idle;
        self.status.rejoined += 1;
        let from = frontier.saturating_add(1);
        self.event(ConsensusEvent::AcceptorRejoined { from });
    }

    /// A majority promised: adopt the value with the highest accepted
    /// proposal among them (Algorithm 3, line 15), if any.
    fn prepared(&mut self, e: usize) {
        let promised = self.entries[e].views[..self.acceptor_count]
            .iter()
            .filter_map(|v| match v.answer {
                Answer::Promise(w) => Some(w),
                _ => None,
            });
        match highest_accepted(promised) {
            None => match self.entries[e].value.clone() {
                Some(v) => {
                    self.set_candidate(e, v);
                    self.start_accept(e);
                }
                None => self.entries[e].phase = Phase::Prepared,
            },
            Some(want) => {
                let entry = &self.entries[e];
                if Some(want.owner) == self.me_proposer
                    && entry.written == Some(want.proposal)
                    && entry.candidate.is_some()
                {
                    // Our own record of this incarnation: we have its bytes.
                    self.start_accept(e);
                } else {
                    self.entries[e].phase = Phase::Fetch { want, tried: 0 };
                    self.fetch_next(e);
                }
            }
        }
    }

    /// Is `record` (read from `want.owner`'s buffer for `slot`) a value we
    /// may adopt? The record named exactly, or a later record of the same
    /// proposer: a record is written only after its proposal's prepare
    /// completed, so its value is safe at its proposal and therefore at
    /// any lower one above the highest accepted (see the module docs).
    fn acceptable(&self, record: &Record<'_>, slot: u32, want: ValueRef) -> bool {
        record.slot == slot
            && record.owner == want.owner
            && owner_of(record.proposal, self.proposer_count) == want.owner
            && (record.proposal > want.proposal
                || (record.proposal == want.proposal && value_digest(record.value) == want.digest))
    }

    /// READs the record of the value to adopt from the next acceptor
    /// likely to have it: first those whose promise reported it.
    fn fetch_next(&mut self, e: usize) {
        loop {
            let Phase::Fetch { want, tried } = self.entries[e].phase else {
                return;
            };
            if self.record_read_busy[e] {
                // An older READ still lands there; wait for it.
                return;
            }
            let views = &self.entries[e].views;
            let pick = self.record_source(
                tried,
                |a| matches!(views[a].answer, Answer::Promise(w) if w.value == Some(want)),
            );
            let Some(a) = pick else {
                self.abort(e, 0);
                return;
            };
            self.entries[e].phase = Phase::Fetch {
                want,
                tried: tried | (1 << a),
            };
            let slot = self.entries[e].slot;
            if Some(a) == self.me_acceptor {
                let (buf, len) = self.read_own_record(want.owner, slot);
                if self.adopt(e, &buf[..len]) {
                    return;
                }
                continue;
            }
            let attempt = self.entries[e].attempt;
            let op = Op::Read {
                remote: self.layout.proposal_record(want.owner, slot),
                local: self.layout.record_landing(e),
                len: self.record_read_len() as u32,
            };
            self.post(e, attempt, a, false, Purpose::RecordRead, |_| op);
            self.status.record_reads_posted += 1;
            return;
        }
    }

    /// The acceptor to READ a wanted record from next: one not tried yet,
    /// not written off and with a working channel, preferring those that
    /// `reported` the wanted value (they hold its record).
    fn record_source(&self, tried: u8, reported: impl Fn(usize) -> bool) -> Option<usize> {
        let usable =
            |a: usize| tried & (1 << a) == 0 && !self.acceptor_out[a] && !self.chans[a].broken;
        let mut others = (0..self.acceptor_count).filter(|&a| usable(a));
        (0..self.acceptor_count)
            .find(|&a| usable(a) && reported(a))
            .or_else(|| others.find(|&a| !reported(a)))
    }

    /// A record in this member's own acceptor memory, read in place.
    fn read_own_record(&self, owner: u8, slot: u32) -> ([u8; RECORD_BYTES_CAP], usize) {
        let mut buf = [0u8; RECORD_BYTES_CAP];
        let len = self.record_read_len();
        self.mem
            .read(self.layout.proposal_record(owner, slot), &mut buf[..len]);
        (buf, len)
    }

    fn record_read_len(&self) -> usize {
        RECORD_HEADER_BYTES + self.layout.value_bytes_max as usize
    }

    /// Adopts the value in `bytes` if it is the record we want; true if
    /// it was (the accept phase has started).
    fn adopt(&mut self, e: usize, bytes: &[u8]) -> bool {
        let Phase::Fetch { want, .. } = self.entries[e].phase else {
            return false;
        };
        let slot = self.entries[e].slot;
        let value = match decode_record(bytes, self.layout.value_bytes_max as usize) {
            Ok(r) if self.acceptable(&r, slot, want) => Value::from_slice(r.value).ok(),
            _ => None,
        };
        match value {
            Some(v) => {
                self.set_candidate(e, v);
                self.start_accept(e);
                true
            }
            None => {
                self.status.bad_records += 1;
                false
            }
        }
    }

    /// Stages the candidate's record and runs the accept phase; a leader
    /// pre-prepares the next slot meanwhile (uKharon §5.3.1).
    fn start_accept(&mut self, e: usize) {
        let me = self.me_proposer.expect("only proposers accept");
        let Some(staging) = [2 * e, 2 * e + 1]
            .into_iter()
            .find(|&s| self.staging_inflight[s] == 0)
        else {
            self.entries[e].phase = Phase::AcceptWait;
            return;
        };
        let entry = &self.entries[e];
        let candidate = entry.candidate.as_ref().expect("a value to accept");
        let (slot, proposal) = (entry.slot, entry.proposal);
        let mut buf = [0u8; RECORD_BYTES_CAP];
        let used = encode_record(slot, proposal, me, candidate, &mut buf);
        let digest = value_digest(candidate);
        self.mem.write(self.layout.staging(staging), &buf[..used]);
        let entry = &mut self.entries[e];
        entry.written = Some(proposal);
        entry.target = SlotWord {
            min_proposal: proposal,
            accepted_proposal: proposal,
            value: Some(ValueRef {
                owner: me,
                proposal,
                digest,
            }),
            lap: self.layout.lap(slot),
        };
        entry.phase = Phase::Accept {
            staging: staging as u8,
        };
        for v in entry.views.iter_mut() {
            v.answer = Answer::Pending;
            v.cas_tries = 0;
            v.record_posted = false;
        }
        self.drive_entry(e);
        self.maybe_preprepare(slot.saturating_add(1));
    }

    fn decide(&mut self, e: usize) {
        let entry = &self.entries[e];
        let value = entry.candidate.clone().expect("decided a value");
        let (slot, proposal) = (entry.slot, entry.proposal);
        self.record_decision(slot, proposal, self.me_proposer.expect("proposer"), value);
    }

    /// `slot` is over: a word holds `later`. Every slot up to `later − 2`
    /// is decided (see the module docs), so the frontier moves there: the
    /// leader's idle pre-preparation then works on `later − 2`, adopting
    /// and re-accepting its value (a catch-up even when too few of its
    /// acceptors are left for a learner's READs), not on the dead slot.
    fn recycled(&mut self, slot: u32, later: u32) {
        self.frontier = self.frontier.max(later.saturating_sub(2));
        self.status.recycled += 1;
        self.event(ConsensusEvent::Recycled { slot, later });
    }

    /// Stores a decision, reports it once, and releases the entry that
    /// worked on the slot.
    fn record_decision(&mut self, slot: u32, proposal: u16, owner: u8, value: Value) {
        let working = self.entry_for(slot);
        let ours = working.is_some_and(|e| self.entries[e].value.as_ref() == Some(&value));
        if let Some(e) = working {
            self.free_entry(e);
        }
        // One read of the record stored where this slot's goes.
        let stored = self.decided_record_at(slot);
        if let Some((_, _, _, previous)) = stored.as_ref().filter(|r| r.0 == slot) {
            if *previous == value {
                return;
            }
            #[cfg(feature = "mutation-testing")]
            if self.cfg.mutation != crate::config::Mutation::None {
                // Let the checkers see the disagreement.
                self.event(ConsensusEvent::Decided { slot, value, ours });
                return;
            }
            panic!("slot {slot} decided twice with different values: agreement violated");
        }
        // A late decision of a slot a lap behind one already stored at the
        // same place (completions that arrive after the later slot was
        // learnt) is reported, not stored over the later one.
        if stored.is_none_or(|r| r.0 <= slot) {
            let mut buf = [0u8; RECORD_BYTES_CAP];
            let used = encode_record(slot, proposal, owner, &value, &mut buf);
            self.mem.write(self.layout.decided(slot), &buf[..used]);
        }
        self.frontier = self.frontier.max(slot.saturating_add(1));
        self.status.decided += 1;
        self.event(ConsensusEvent::Decided { slot, value, ours });
    }

    fn backoff_ns(&mut self, aborts: u32) -> u64 {
        let shift = aborts.min(BACKOFF_DOUBLINGS_MAX);
        let high = self
            .cfg
            .backoff_min_ns
            .saturating_mul(1u64 << shift)
            .min(self.cfg.backoff_max_ns);
        self.rng.range_inclusive(self.cfg.backoff_min_ns, high)
    }

    /// Gives the attempt up (Algorithm 5, `abort`): try again with a
    /// higher proposal after a randomized backoff.
    fn abort(&mut self, e: usize, seen_min: u16) {
        self.status.aborts += 1;
        let floor = self.entries[e]
            .proposal
            .max(seen_min)
            .max(self.max_known_min(e));
        self.entries[e].proposal = floor;
        let me = self.me_proposer.expect("only proposers abort");
        if proposal_above(floor, me, self.proposer_count).is_err() {
            // No retry can ever succeed here with 16-bit proposals (A.6).
            self.exhausted(e);
            return;
        }
        self.entries[e].aborts += 1;
        let aborts = self.entries[e].aborts;
        let backoff_ns = self.backoff_ns(aborts);
        if self.entries[e].value.is_none() {
            // A pre-preparation that met contention: drop it, and do not
            // pre-prepare again before the backoff.
            self.preprepare_floor = Some((self.entries[e].slot, floor));
            self.free_entry(e);
            self.preprepare_retry_at_ns = self.now.saturating_add(backoff_ns);
            return;
        }
        // Completions of this attempt still in flight are stale from now.
        let attempt = self.new_attempt();
        self.entries[e].attempt = attempt;
        self.entries[e].phase = Phase::Backoff {
            until_ns: self.now.saturating_add(backoff_ns),
        };
    }

    /// A leader keeps one slot prepared ahead (uKharon §5.3.1).
    fn maybe_preprepare(&mut self, slot: u32) {
        if self.now < self.preprepare_retry_at_ns || !self.preprepare_wanted(slot) {
            return;
        }
        let Some(e) = self.entries.iter().position(|x| x.phase == Phase::Free) else {
            return;
        };
        self.init_entry(e, slot, None);
        if let Some((s, floor)) = self.preprepare_floor {
            if s == slot {
                self.entries[e].proposal = floor;
            }
        }
        self.start_attempt(e);
    }

    // ---- learner -----------------------------------------------------------

    fn drive_learn(&mut self) {
        if self.learner.phase != LearnPhase::Reading {
            return;
        }
        let slot = self.learner.slot;
        for a in 0..self.acceptor_count {
            if self.learner.heard[a] != Heard::Pending || self.lane_busy[LEARN_LANE][a] > 0 {
                continue;
            }
            if self.acceptor_out[a] || self.chans[a].broken {
                self.learner.heard[a] = Heard::Silent;
            } else if Some(a) == self.me_acceptor {
                let raw = self.mem.load_u64(self.layout.slot_word(slot));
                self.status.local_slot_reads += 1;
                self.learner.heard[a] = self.heard_word(slot, raw);
            } else {
                let attempt = self.learner.attempt;
                self.post_slot_read(LEARN_LANE, attempt, a, false, slot);
            }
        }
        self.evaluate_learn();
    }

    fn heard_word(&mut self, slot: u32, raw: u64) -> Heard {
        match SlotWord::decode(raw, self.proposer_count) {
            Ok(w) => match self.interpret(slot, w) {
                Ok(w) => Heard::Word(w),
                Err(NotOurs::Later(later)) => Heard::Over(later),
                Err(NotOurs::Fenced) => Heard::Silent,
            },
            Err(_) => {
                self.status.malformed_words += 1;
                Heard::Silent
            }
        }
    }

    fn evaluate_learn(&mut self) {
        if self.learner.phase != LearnPhase::Reading {
            return;
        }
        let heard = &self.learner.heard[..self.acceptor_count];
        let mut chosen = None;
        for w in heard.iter() {
            let Heard::Word(SlotWord { value: Some(v), .. }) = *w else {
                continue;
            };
            let count = heard
                .iter()
                .filter(|h| matches!(h, Heard::Word(x) if x.value == Some(v)))
                .count();
            if count >= self.quorum {
                chosen = Some(v);
                break;
            }
        }
        if let Some(want) = chosen {
            self.learner.phase = LearnPhase::Fetch { want, tried: 0 };
            self.fetch_next_learn();
        } else if heard.iter().all(|h| *h != Heard::Pending) {
            let slot = self.learner.slot;
            let later = heard
                .iter()
                .filter_map(|h| match h {
                    Heard::Over(l) => Some(*l),
                    _ => None,
                })
                .max();
            self.learner.phase = LearnPhase::Idle;
            match later {
                Some(later) => self.recycled(slot, later),
                None => self.event(ConsensusEvent::Undecided { slot }),
            }
        }
    }

    fn fetch_next_learn(&mut self) {
        loop {
            let LearnPhase::Fetch { want, tried } = self.learner.phase else {
                return;
            };
            if self.record_read_busy[LEARN_LANE] {
                return;
            }
            let heard = &self.learner.heard;
            let pick = self.record_source(
                tried,
                |a| matches!(heard[a], Heard::Word(w) if w.value == Some(want)),
            );
            let slot = self.learner.slot;
            let Some(a) = pick else {
                self.learner.phase = LearnPhase::Idle;
                self.event(ConsensusEvent::Undecided { slot });
                return;
            };
            self.learner.phase = LearnPhase::Fetch {
                want,
                tried: tried | (1 << a),
            };
            if Some(a) == self.me_acceptor {
                let (buf, len) = self.read_own_record(want.owner, slot);
                if self.learned(&buf[..len]) {
                    return;
                }
                continue;
            }
            let attempt = self.learner.attempt;
            let op = Op::Read {
                remote: self.layout.proposal_record(want.owner, slot),
                local: self.layout.record_landing(LEARN_LANE),
                len: self.record_read_len() as u32,
            };
            self.post(LEARN_LANE, attempt, a, false, Purpose::RecordRead, |_| op);
            self.status.record_reads_posted += 1;
            return;
        }
    }

    /// Takes the learned value from `bytes` if it is the chosen record (or
    /// a later one of the same proposer, which carries the chosen value:
    /// every proposal above a chosen one proposes it).
    fn learned(&mut self, bytes: &[u8]) -> bool {
        let LearnPhase::Fetch { want, .. } = self.learner.phase else {
            return false;
        };
        let slot = self.learner.slot;
        let found = match decode_record(bytes, self.layout.value_bytes_max as usize) {
            Ok(r) if self.acceptable(&r, slot, want) => Value::from_slice(r.value)
                .ok()
                .map(|v| (r.proposal, r.owner, v)),
            _ => None,
        };
        match found {
            Some((proposal, owner, value)) => {
                self.learner.phase = LearnPhase::Idle;
                self.record_decision(slot, proposal, owner, value);
                true
            }
            None => {
                self.status.bad_records += 1;
                false
            }
        }
    }

    // ---- work requests -----------------------------------------------------

    fn post(
        &mut self,
        lane: usize,
        attempt: u32,
        a: usize,
        accepting: bool,
        purpose: Purpose,
        op: impl FnOnce(usize) -> Op,
    ) {
        let i = self
            .ops
            .iter()
            .position(|o| !o.in_use)
            .expect("the op table is sized for every request the lanes allow");
        let generation = self.ops[i].generation.wrapping_add(1);
        self.ops[i] = OpSlot {
            in_use: true,
            generation,
            lane: lane as u8,
            attempt,
            acceptor: a as u8,
            accepting,
            purpose,
        };
        match purpose {
            Purpose::Scan => {}
            Purpose::RecordRead => self.record_read_busy[lane] = true,
            Purpose::RecordWrite { staging } => {
                self.staging_inflight[usize::from(staging)] += 1;
                self.lane_busy[lane][a] += 1;
            }
            Purpose::SlotRead | Purpose::Cas { .. } => self.lane_busy[lane][a] += 1,
        }
        self.chans[a].inflight += 1;
        let wr_id = WrId((u64::from(generation) << 8) | i as u64);
        assert!(wr_id.0 < ENGINE_WR_ID_LIMIT);
        let wr = WorkRequest {
            wr_id,
            peer: self.cfg.acceptors[a],
            op: op(i),
            notify: false,
        };
        self.action(Action::Post(wr));
    }

    fn action(&mut self, a: Action) {
        if self.actions.push_back(a).is_err() {
            panic!(
                "consensus action queue overflow: the driver must drain actions after every call"
            );
        }
    }

    fn event(&mut self, e: ConsensusEvent) {
        if self.events.push_back(e).is_err() {
            panic!("consensus event queue overflow: the driver must drain events after every call");
        }
    }

    fn entry_completion(&mut self, op: OpSlot, ok: bool, i: usize) {
        let e = usize::from(op.lane);
        let a = usize::from(op.acceptor);
        if self.entries[e].phase == Phase::Free || op.attempt != self.entries[e].attempt {
            self.status.stale_completions += 1;
            return;
        }
        let accepting = matches!(self.entries[e].phase, Phase::Accept { .. });
        // Answers count only in the phase that asked; what we learn about
        // the word counts in either (same attempt, same slot).
        let answers = op.accepting == accepting
            && matches!(self.entries[e].phase, Phase::Prepare | Phase::Accept { .. });
        match op.purpose {
            Purpose::Scan => unreachable!("scans complete in scan_completion"),
            Purpose::RecordRead => {
                if matches!(self.entries[e].phase, Phase::Fetch { .. }) && ok {
                    let mut buf = [0u8; RECORD_BYTES_CAP];
                    let len = self.record_read_len();
                    self.mem
                        .read(self.layout.record_landing(e), &mut buf[..len]);
                    self.adopt(e, &buf[..len]);
                }
                // Otherwise (failed or not adopted) fetch_next runs in
                // progress(): the landing zone is free again.
            }
            Purpose::RecordWrite { .. } => {
                if !ok && answers && self.entries[e].views[a].answer == Answer::Pending {
                    // The CAS behind it is flushed.
                    self.entries[e].views[a].answer = Answer::Silent;
                }
            }
            Purpose::SlotRead => {
                let view = &mut self.entries[e].views[a];
                if !ok {
                    if answers && view.answer == Answer::Pending {
                        view.answer = Answer::Silent;
                    }
                    return;
                }
                let raw = self.mem.load_u64(self.layout.landing_word(i));
                match SlotWord::decode(raw, self.proposer_count) {
                    Ok(w) => {
                        let view = &mut self.entries[e].views[a];
                        view.known = Some(w);
                        view.observed = true;
                    }
                    Err(_) => {
                        self.status.malformed_words += 1;
                        let view = &mut self.entries[e].views[a];
                        view.known = None;
                        if answers && view.answer == Answer::Pending {
                            view.answer = Answer::Silent;
                        }
                    }
                }
            }
            Purpose::Cas {
                expect,
                swap,
                predicted,
            } => {
                if !ok {
                    // It may or may not have landed: we know nothing.
                    let view = &mut self.entries[e].views[a];
                    view.known = None;
                    if answers && view.answer == Answer::Pending {
                        view.answer = Answer::Silent;
                    }
                    return;
                }
                let old = self.mem.load_u64(self.layout.landing_word(i));
                let n = self.proposer_count;
                if old == expect {
                    // The state it promised from, as it concerns our slot
                    // (we CAS only from words that do: an earlier lap's
                    // word promised from the empty state).
                    let from = SlotWord::decode(expect, n).expect("we only expect valid words");
                    let from = self
                        .interpret(self.entries[e].slot, from)
                        .expect("we only CAS from words about our slot or before it");
                    let view = &mut self.entries[e].views[a];
                    view.known =
                        Some(SlotWord::decode(swap, n).expect("we only swap in valid words"));
                    view.observed = true;
                    if answers && view.answer == Answer::Pending {
                        view.answer = if accepting {
                            Answer::Accepted
                        } else {
                            Answer::Promise(from)
                        };
                    }
                    return;
                }
                // Another word than expected: the old value is a fresh
                // READ (Algorithm 5, line 25). Try once more with it.
                match SlotWord::decode(old, n) {
                    Ok(w) => {
                        let view = &mut self.entries[e].views[a];
                        view.known = Some(w);
                        view.observed = true;
                        // A wrong guess costs no try: the word it found
                        // is the READ a non-leader would have made first.
                        if answers && !predicted {
                            view.cas_tries += 1;
                            if view.cas_tries >= CAS_TRIES_MAX && view.answer == Answer::Pending {
                                view.answer = Answer::Silent;
                            }
                        }
                    }
                    Err(_) => {
                        self.status.malformed_words += 1;
                        let view = &mut self.entries[e].views[a];
                        view.known = None;
                        if answers && view.answer == Answer::Pending {
                            view.answer = Answer::Silent;
                        }
                    }
                }
            }
        }
    }

    fn learn_completion(&mut self, op: OpSlot, ok: bool, i: usize) {
        if self.learner.phase == LearnPhase::Idle || op.attempt != self.learner.attempt {
            self.status.stale_completions += 1;
            return;
        }
        let a = usize::from(op.acceptor);
        match op.purpose {
            Purpose::SlotRead => {
                if self.learner.phase != LearnPhase::Reading
                    || self.learner.heard[a] != Heard::Pending
                {
                    return;
                }
                self.learner.heard[a] = if ok {
                    let raw = self.mem.load_u64(self.layout.landing_word(i));
                    self.heard_word(self.learner.slot, raw)
                } else {
                    Heard::Silent
                };
            }
            Purpose::RecordRead => {
                if matches!(self.learner.phase, LearnPhase::Fetch { .. }) && ok {
                    let mut buf = [0u8; RECORD_BYTES_CAP];
                    let len = self.record_read_len();
                    self.mem
                        .read(self.layout.record_landing(LEARN_LANE), &mut buf[..len]);
                    self.learned(&buf[..len]);
                }
            }
            Purpose::Cas { .. } | Purpose::RecordWrite { .. } | Purpose::Scan => {
                unreachable!("the learner only reads slot words and records")
            }
        }
    }

    /// Moves every lane on as far as it can go now.
    fn progress(&mut self) {
        for e in 0..WINDOW {
            match self.entries[e].phase {
                Phase::Prepare | Phase::Accept { .. } => self.drive_entry(e),
                Phase::AcceptWait => self.start_accept(e),
                Phase::Fetch { .. } => self.fetch_next(e),
                Phase::Free | Phase::Backoff { .. } | Phase::Prepared => {}
            }
        }
        match self.learner.phase {
            LearnPhase::Reading => self.drive_learn(),
            LearnPhase::Fetch { .. } => self.fetch_next_learn(),
            LearnPhase::Idle => {}
        }
        self.progress_rejoin();
    }

    /// Re-establishes broken channels once drained and after the backoff.
    fn maintain_channels(&mut self) {
        let channel = Channel::for_region(self.layout.shared_region);
        for a in 0..self.acceptor_count {
            let c = self.chans[a];
            if c.broken && c.inflight == 0 && c.retry_at_ns <= self.now && !self.acceptor_out[a] {
                self.chans[a].broken = false;
                let peer = self.cfg.acceptors[a];
                self.action(Action::Reconnect { peer, channel });
            }
        }
    }

    /// Checked at the end of every entry point (TigerBeetle's
    /// `invariants()`): the bookkeeping of requests in flight matches the
    /// table, entries are consistent.
    fn invariants(&self) {
        let mut busy = [[0u8; MAX_MEMBERS]; LANES];
        let mut reads = [false; LANES];
        let mut staging = [0u8; STAGING_COUNT];
        let mut inflight = [0u16; MAX_MEMBERS];
        for o in self.ops.iter().filter(|o| o.in_use) {
            let (l, a) = (usize::from(o.lane), usize::from(o.acceptor));
            assert!(l < LANES && a < self.acceptor_count);
            inflight[a] += 1;
            match o.purpose {
                Purpose::Scan => {}
                Purpose::RecordRead => {
                    assert!(!reads[l], "one record READ per lane");
                    reads[l] = true;
                }
                Purpose::RecordWrite { staging: s } => {
                    assert!(
                        usize::from(s) / 2 == l,
                        "an entry writes from its own staging"
                    );
                    staging[usize::from(s)] += 1;
                    busy[l][a] += 1;
                }
                Purpose::SlotRead | Purpose::Cas { .. } => busy[l][a] += 1,
            }
        }
        assert_eq!(busy, self.lane_busy);
        assert_eq!(reads, self.record_read_busy);
        assert_eq!(staging, self.staging_inflight);
        for a in 0..MAX_MEMBERS {
            assert_eq!(inflight[a], self.chans[a].inflight);
            for lane in busy.iter() {
                assert!(lane[a] <= 2, "one exchange per lane and acceptor");
            }
        }
        for (i, e) in self.entries.iter().enumerate() {
            if e.phase == Phase::Free {
                continue;
            }
            assert!(
                self.entries[..i]
                    .iter()
                    .all(|o| o.phase == Phase::Free || o.slot != e.slot),
                "two entries on one slot"
            );
            if e.proposal != 0 && !matches!(e.phase, Phase::Backoff { .. }) {
                assert_eq!(
                    Some(owner_of(e.proposal, self.proposer_count)),
                    self.me_proposer,
                    "a proposal number of another proposer"
                );
            }
            if let Phase::Accept { staging } = e.phase {
                assert!(e.candidate.is_some() && e.written == Some(e.proposal));
                assert_eq!(usize::from(staging) / 2, i);
                assert_eq!(e.target.accepted_proposal, e.proposal);
                assert_eq!(
                    e.target.lap,
                    self.layout.lap(e.slot),
                    "a target of another lap"
                );
            }
            assert!(e.views[..self.acceptor_count]
                .iter()
                .all(|v| v.cas_tries <= CAS_TRIES_MAX));
        }
        assert!(self.actions.len() <= CONSENSUS_ACTION_QUEUE_CAP);
    }

    fn acceptor_slot(&self, peer: MemberId) -> Option<usize> {
        self.cfg.acceptor_index(peer)
    }

    fn proposer_slot(&self, peer: MemberId) -> Option<usize> {
        self.cfg.proposers.iter().position(|&m| m == peer)
    }

    /// Became the leader because `previous` (a proposer index), the
    /// leader until now, went down: pre-prepare the frontier, predicting
    /// that `previous` pre-prepared it with its first proposal (§5.3.1).
    fn take_over(&mut self, previous: u8) {
        let word = SlotWord {
            min_proposal: first_proposal(previous, self.proposer_count),
            ..SlotWord::empty(self.layout.lap(self.frontier))
        };
        self.takeover = Some((self.frontier, word));
        self.maybe_preprepare(self.frontier);
    }

    /// Whether the leader would pre-prepare `slot` now, if an entry is free.
    fn preprepare_wanted(&self, slot: u32) -> bool {
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::AcceptWithoutPrepare {
            return false;
        }
        self.is_leader()
            && self.exhausted_slot != Some(slot)
            && self.entry_for(slot).is_none()
            && self.decided(slot).is_none()
    }
}

impl<M: Memory> Engine for ConsensusEngine<M> {
    fn name(&self) -> &'static str {
        "consensus"
    }

    fn handle_completion(&mut self, now_ns: u64, c: Completion) {
        self.now = self.now.max(now_ns);
        let i = (c.wr_id.0 & 0xFF) as usize;
        let generation = (c.wr_id.0 >> 8) as u32;
        if i >= OPS_MAX
            || !self.ops[i].in_use
            || self.ops[i].generation != generation
            || c.wr_id.0 >> 40 != 0
            || self.cfg.acceptors.get(usize::from(self.ops[i].acceptor)) != Some(&c.peer)
        {
            // Not a request of ours in flight: never trusted.
            self.status.stale_completions += 1;
            return;
        }
        let op = self.ops[i];
        self.ops[i].in_use = false;
        let (lane, a) = (usize::from(op.lane), usize::from(op.acceptor));
        let ok = c.status == WcStatus::Ok;
        self.chans[a].inflight -= 1;
        if !ok {
            self.status.error_completions += 1;
            if !self.chans[a].broken {
                // The channel is broken: what follows it flushes. Nothing
                // new goes to this acceptor until it is re-established.
                self.chans[a].broken = true;
                self.chans[a].retry_at_ns = self.now.saturating_add(self.cfg.reconnect_backoff_ns);
            }
        }
        match op.purpose {
            Purpose::Scan => {}
            Purpose::RecordRead => self.record_read_busy[lane] = false,
            Purpose::RecordWrite { staging } => {
                self.staging_inflight[usize::from(staging)] -= 1;
                self.lane_busy[lane][a] -= 1;
            }
            Purpose::SlotRead | Purpose::Cas { .. } => self.lane_busy[lane][a] -= 1,
        }
        if ok && matches!(op.purpose, Purpose::SlotRead | Purpose::Cas { .. }) {
            let raw = self.mem.load_u64(self.layout.landing_word(i));
            if SlotWord::decode(raw, self.proposer_count).is_ok() {
                self.answered_since_up[a] = true;
            }
        }
        if op.purpose == Purpose::Scan {
            self.scan_completion(a, ok);
        } else if lane == LEARN_LANE {
            self.learn_completion(op, ok, i);
        } else {
            self.entry_completion(op, ok, i);
        }
        self.progress();
        self.maintain_channels();
        self.invariants();
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.now = self.now.max(now_ns);
        for e in 0..WINDOW {
            if let Phase::Backoff { until_ns } = self.entries[e].phase {
                if until_ns <= self.now {
                    self.start_attempt(e);
                }
            }
        }
        // Keep one slot prepared ahead while idle.
        self.maybe_preprepare(self.frontier);
        self.maintain_channels();
        self.progress();
        self.invariants();
    }

    fn handle_peer_down(&mut self, now_ns: u64, peer: MemberId) {
        self.now = self.now.max(now_ns);
        if peer == self.cfg.self_id {
            return;
        }
        let was_leader = self.is_leader();
        let leader_before = self.leader_index();
        if let Some(a) = self.acceptor_slot(peer) {
            self.count_out(a);
        }
        if let Some(p) = self.proposer_slot(peer) {
            self.proposer_down[p] = true;
        }
        for e in 0..WINDOW {
            self.evaluate(e);
        }
        self.evaluate_learn();
        if !was_leader && self.is_leader() {
            if let Some(previous) = leader_before {
                self.take_over(previous);
            }
        }
        self.progress();
        self.invariants();
    }

    fn handle_peer_up(&mut self, now_ns: u64, peer: MemberId) {
        self.now = self.now.max(now_ns);
        // A proposer is trusted again (it leads again if it is the lowest).
        // So is an acceptor: a new process's words hold an invalid word
        // (nobody counts it or CASes it) until it has rejoined and fenced
        // what it may have promised before (see `rejoin_own_acceptor`).
        if peer != self.cfg.self_id {
            if let Some(p) = self.proposer_slot(peer) {
                self.proposer_down[p] = false;
            }
            if let Some(a) = self.acceptor_slot(peer) {
                self.acceptor_out[a] = false;
                self.answered_since_up[a] = false;
            }
        }
        self.progress();
        self.maintain_channels();
        self.invariants();
    }

    fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    fn handle_action_failed(&mut self, now_ns: u64, action: &Action, _: FabricError) {
        self.now = self.now.max(now_ns);
        if let Action::Reconnect { peer, .. } = *action {
            if let Some(a) = self.acceptor_slot(peer) {
                self.chans[a].broken = true;
                self.chans[a].retry_at_ns = self.now.saturating_add(self.cfg.reconnect_backoff_ns);
            }
        }
        self.invariants();
    }

    fn next_deadline(&self) -> u64 {
        let mut at = u64::MAX;
        for e in &self.entries {
            if let Phase::Backoff { until_ns } = e.phase {
                at = at.min(until_ns);
            }
        }
        if self.preprepare_wanted(self.frontier)
            && self.entries.iter().any(|e| e.phase == Phase::Free)
        {
            at = at.min(self.preprepare_retry_at_ns.max(self.now));
        }
        for a in 0..self.acceptor_count {
            let c = self.chans[a];
            if c.broken && c.inflight == 0 && !self.acceptor_out[a] {
                at = at.min(c.retry_at_ns);
            }
        }
        if let Rejoin::Scanning {
            inflight: false,
            retry_at_ns,
            ..
        } = self.rejoin
        {
            at = at.min(retry_at_ns.max(self.now));
        }
        at
    }
}

#[cfg(test)]
mod debug {
    extern crate std;
    use super::*;

    impl<M: Memory> ConsensusEngine<M> {
        /// The window entries and the learner, for test diagnostics.
        pub(crate) fn debug_state(&self) -> std::string::String {
            let mut out = std::string::String::new();
            for e in &self.entries {
                out += &std::format!(
                    "[slot {} phase {:?} proposal {} value {:?} views {:?}] ",
                    e.slot,
                    e.phase,
                    e.proposal,
                    e.value.as_ref().map(|v| v.len()),
                    &e.views[..self.acceptor_count]
                        .iter()
                        .map(|v| (
                            v.known.map(|w| (w.min_proposal, w.accepted_proposal)),
                            v.answer
                        ))
                        .collect::<std::vec::Vec<_>>()
                );
            }
            out += &std::format!(
                "learner {:?} chans {:?} out {:?} down {:?} busy {:?}",
                self.learner.phase,
                &self.chans[..self.acceptor_count],
                &self.acceptor_out[..self.acceptor_count],
                &self.proposer_down[..usize::from(self.proposer_count)],
                self.lane_busy
            );
            out
        }
    }
}
