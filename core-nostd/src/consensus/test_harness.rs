//! A seeded model of a group running the consensus engine over a
//! one-sided fabric, for randomized model checking (TigerBeetle's VOPR in
//! miniature): one seed draws the group's shape and fault rates and
//! reproduces the whole run.
//!
//! * Acceptors are plain registered memory ([`HarnessMemory`]); proposers
//!   and a learner run [`ConsensusEngine`]s. In "overlap" groups proposer
//!   `i` is also acceptor `i` (uKharon's coordinators) and CASes its own
//!   words through a loopback channel; otherwise they are disjoint.
//! * Every (source, target) pair is one reliable connection: work
//!   requests execute in the order they were posted, their completions
//!   come back in that order, and execution and completion are separate,
//!   randomly interleaved steps (arbitrary delays).
//! * Faults (safety phase): a request fails with `Unreachable` (having
//!   landed or not) or `AccessDenied`, which breaks the connection until
//!   its owner reconnects (the rest flushes); proposers crash, losing
//!   their volatile state and local memory, with a prefix of their
//!   requests in flight landed and the rest lost, and restart; up to a
//!   minority of acceptors crash for good; crash notifications reach
//!   each engine late or never.
//! * Slots are decided in order, as the view engine decides them: a
//!   proposer proposes slot `s` only once it knows `s − 1` decided (or
//!   was told, by a word of a later lap, to go on from a later slot). In
//!   half of the seeds the ring of slot words is smaller than the slots a
//!   run uses (4 to 6 words), so words are recycled lap after lap while
//!   slow proposers still work on older slots.
//! * The liveness phase stops faults, restarts proposers, tells everyone
//!   who is gone, and requires the leader and the learner to reach two
//!   slots past the highest one decided so far, holding the value of
//!   every slot on the way that no word recycled or skipped.
//!
//! [`OneValuePerSlot`] checks every decision and every CAS.

extern crate std;

use super::engine::{ConsensusEngine, ConsensusEvent};
use super::layout::{ConsensusConfig, ConsensusLayout};
use super::record::decode_record;
use super::test_check::{OneValuePerSlot, Violation};
use crate::engine::Engine;
use crate::fabric::{
    Action, Addr, Completion, FabricError, MemberId, Op, WcStatus, WorkRequest, MAX_MEMBERS,
    REGIONS_MAX,
};
use crate::mem::Memory;
use crate::rng::SplitMix64;
use core::cell::RefCell;
use std::collections::VecDeque;
use std::format;
use std::rc::Rc;
use std::string::String;
use std::vec;
use std::vec::Vec;

/// One member's registered memory: both consensus regions as byte
/// vectors. Clones share them.
#[derive(Clone)]
pub struct HarnessMemory {
    regions: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl HarnessMemory {
    /// Zeroed regions sized by the layout.
    pub fn new(layout: &ConsensusLayout) -> Self {
        let regions = (0..REGIONS_MAX)
            .map(|i| vec![0u8; layout.region_bytes(crate::fabric::RegionId(i as u8)) as usize])
            .collect();
        HarnessMemory {
            regions: Rc::new(RefCell::new(regions)),
        }
    }

    /// Zeroes the local region (a restarted process has fresh memory).
    pub fn clear_local(&self, layout: &ConsensusLayout) {
        let mut r = self.regions.borrow_mut();
        r[layout.local_region.index()].fill(0);
    }

    /// A new process's acceptor memory: every slot word holds the invalid
    /// word nobody counts or CASes (as the fabric writes it before the
    /// memory is published), the records are zero.
    pub fn wipe_shared(&self, layout: &ConsensusLayout) {
        {
            let mut r = self.regions.borrow_mut();
            r[layout.shared_region.index()].fill(0);
        }
        for index in 0..layout.slot_count {
            self.store_u64(layout.slot_word(index), crate::views::UNTRUSTED_SLOT_WORD);
        }
    }

    fn span(at: Addr, len: usize) -> (usize, core::ops::Range<usize>) {
        let o = at.offset as usize;
        (at.region.index(), o..o + len)
    }
}

impl Memory for HarnessMemory {
    fn load_u64(&self, at: Addr) -> u64 {
        assert_eq!(at.offset % 8, 0, "misaligned word");
        let (r, span) = Self::span(at, 8);
        u64::from_le_bytes(self.regions.borrow()[r][span].try_into().unwrap())
    }
    fn store_u64(&self, at: Addr, value: u64) {
        assert_eq!(at.offset % 8, 0, "misaligned word");
        let (r, span) = Self::span(at, 8);
        self.regions.borrow_mut()[r][span].copy_from_slice(&value.to_le_bytes());
    }
    fn read(&self, at: Addr, dst: &mut [u8]) {
        let (r, span) = Self::span(at, dst.len());
        dst.copy_from_slice(&self.regions.borrow()[r][span]);
    }
    fn write(&self, at: Addr, src: &[u8]) {
        let (r, span) = Self::span(at, src.len());
        self.regions.borrow_mut()[r][span].copy_from_slice(src);
    }
}

/// The engine's deliberately broken rules the harness can run (the
/// crate's `Mutation`s, which exist only with the `mutation-testing`
/// feature).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// `Mutation::AcceptWithoutPrepare`.
    AcceptWithoutPrepare,
    /// `Mutation::RecycleIgnoresLap`.
    RecycleIgnoresLap,
    /// `Mutation::RejoinWithoutFence`.
    RejoinWithoutFence,
}

/// The shape of a run and its fault rates, drawn from a seed.
#[derive(Clone, Debug)]
pub struct Params {
    /// Acceptors (3 or 5).
    pub acceptors: usize,
    /// Proposers (1 to 3).
    pub proposers: usize,
    /// Proposer `i` is acceptor `i`.
    pub overlap: bool,
    /// Slot words (the ring).
    pub slot_count: u32,
    /// Slots a run uses (more than `slot_count` when words are recycled).
    pub slots: u32,
    /// Largest value.
    pub value_bytes_max: u32,
    /// Delivered requests that fail, per mille (safety phase).
    pub error_per_mille: u64,
    /// Steps that crash or restart something, per mille (safety phase).
    pub fault_per_mille: u64,
    /// Steps of the safety phase.
    pub safety_steps: usize,
    /// Steps the liveness phase may take at most.
    pub liveness_steps_max: usize,
    /// Run every proposer with this broken rule (mutation tests).
    pub mutation: Option<Broken>,
}

impl Params {
    /// Everything drawn from `seed`.
    pub fn from_seed(seed: u64) -> Params {
        let mut r = SplitMix64::new(seed ^ 0x5041_5241_4D53);
        let acceptors = if r.chance(1, 2) { 3 } else { 5 };
        let proposers = r.range_inclusive(1, 3) as usize;
        // Disjoint groups need acceptors + proposers ≤ MAX_MEMBERS.
        let overlap = r.chance(1, 3);
        let slots = r.range_inclusive(6, 24) as u32;
        Params {
            acceptors,
            proposers,
            overlap,
            slot_count: slots,
            slots,
            value_bytes_max: r.range_inclusive(8, 64) as u32,
            error_per_mille: [0, 5, 20, 60][r.range_inclusive(0, 3) as usize],
            fault_per_mille: [0, 2, 8][r.range_inclusive(0, 2) as usize],
            safety_steps: r.range_inclusive(1_000, 3_000) as usize,
            liveness_steps_max: 200_000,
            mutation: None,
        }
        .with_ring(seed)
    }

    /// In half of the seeds (a stream of their own), a ring of 4 to 6
    /// slot words that the run's slots recycle.
    fn with_ring(mut self, seed: u64) -> Params {
        let mut r = SplitMix64::new(seed ^ 0x5249_4E47_5321); // "RINGS!"
        if r.chance(1, 2) {
            self.slot_count = r.range_inclusive(4, 6) as u32;
        }
        self
    }

    /// A quiet group for scenario tests: no faults.
    pub fn quiet(acceptors: usize, proposers: usize) -> Params {
        Params {
            acceptors,
            proposers,
            overlap: false,
            slot_count: 16,
            slots: 16,
            value_bytes_max: 32,
            error_per_mille: 0,
            fault_per_mille: 0,
            safety_steps: 0,
            liveness_steps_max: 0,
            mutation: None,
        }
    }
}

struct Member {
    mem: HarnessMemory,
    engine: Option<ConsensusEngine<HarnessMemory>>,
    incarnation: u32,
    /// The process is gone: its memory answers nothing.
    dead: bool,
    acceptor: bool,
    proposer: bool,
    learner: bool,
    /// The lowest slot its client has not seen decided.
    client_slot: u32,
    /// A word of a later lap told it to go on from this slot (decided).
    skip_to: u32,
    client_counter: u32,
}

#[derive(Default)]
struct Conn {
    posted: VecDeque<WorkRequest>,
    done: VecDeque<Completion>,
    broken: bool,
    /// The next request fails this way (scenario tests).
    forced: Option<WcStatus>,
}

/// What a run did, for tests to look at.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Requests executed or failed.
    pub delivered: u64,
    /// Injected request failures.
    pub errors: u64,
    /// Proposer crashes.
    pub crashes: u64,
    /// Proposer restarts.
    pub restarts: u64,
    /// Acceptors crashed for good.
    pub acceptor_kills: u64,
    /// Decided events.
    pub decisions: u64,
    /// Distinct chosen (slot, proposal) pairs seen in memory.
    pub chosen: usize,
    /// Steps the liveness phase took.
    pub liveness_steps: usize,
    /// Reconnects executed.
    pub reconnects: u64,
    /// Proposal space exhaustions reported.
    pub exhausted: u64,
    /// Slots given up because their word moved on to a later lap.
    pub recycled: u64,
    /// Acceptors restarted with their memory lost (overlap groups).
    pub acceptor_restarts: u64,
    /// Restarted acceptors that counted again.
    pub acceptor_rejoins: u64,
}

/// The simulated group.
pub struct World {
    /// The run's shape.
    pub params: Params,
    seed: u64,
    rng: SplitMix64,
    /// Virtual time.
    pub now: u64,
    members: Vec<Member>,
    conns: Vec<Conn>,
    acceptors: Vec<MemberId>,
    proposers: Vec<MemberId>,
    layout: ConsensusLayout,
    /// The safety checker.
    pub checker: OneValuePerSlot,
    /// Crash and restart notifications not yet delivered:
    /// (engine's member, peer, up).
    notes: Vec<(usize, MemberId, bool)>,
    faults: bool,
    /// Every request executed (source, target, op), if logging is on.
    pub op_log: Option<Vec<(usize, usize, Op)>>,
    /// Every event (member, event), if logging is on.
    pub event_log: Option<Vec<(usize, ConsensusEvent)>>,
    /// Counters.
    pub summary: Summary,
    failure: Option<String>,
}

impl World {
    /// A group shaped by `params`; engines seeded from `seed`.
    pub fn new(seed: u64, params: Params) -> World {
        let (acceptors, proposers): (Vec<MemberId>, Vec<MemberId>) = if params.overlap {
            assert!(params.proposers <= params.acceptors);
            (
                (0..params.acceptors as u8).map(MemberId).collect(),
                (0..params.proposers as u8).map(MemberId).collect(),
            )
        } else {
            let a = params.acceptors as u8;
            (
                (0..a).map(MemberId).collect(),
                (a..a + params.proposers as u8).map(MemberId).collect(),
            )
        };
        // The learner: an acceptor that does not propose, or an extra member.
        let learner = acceptors
            .iter()
            .copied()
            .find(|m| !proposers.contains(m))
            .unwrap_or(MemberId(params.acceptors as u8));
        let count = acceptors
            .iter()
            .chain(proposers.iter())
            .chain([learner].iter())
            .map(|m| m.index() + 1)
            .max()
            .unwrap();
        assert!(count <= MAX_MEMBERS);
        let cfg0 = Self::config_for(&params, seed, MemberId(0), &acceptors, &proposers, 0);
        let layout = ConsensusLayout::new(&cfg0).expect("valid configuration");
        let mut w = World {
            rng: SplitMix64::new(seed),
            seed,
            now: 1_000,
            members: Vec::new(),
            conns: (0..MAX_MEMBERS * MAX_MEMBERS)
                .map(|_| Conn::default())
                .collect(),
            layout,
            checker: OneValuePerSlot::new(),
            notes: Vec::new(),
            faults: params.error_per_mille > 0 || params.fault_per_mille > 0,
            op_log: None,
            event_log: None,
            summary: Summary::default(),
            failure: None,
            acceptors: acceptors.clone(),
            proposers: proposers.clone(),
            params,
        };
        for i in 0..count {
            let id = MemberId(i as u8);
            w.members.push(Member {
                mem: HarnessMemory::new(&w.layout),
                engine: None,
                incarnation: 0,
                dead: false,
                acceptor: acceptors.contains(&id),
                proposer: proposers.contains(&id),
                learner: id == learner,
                client_slot: 0,
                skip_to: 0,
                client_counter: 0,
            });
            if w.members[i].proposer || w.members[i].learner {
                w.start_engine(i);
            }
        }
        w
    }

    fn config_for(
        params: &Params,
        seed: u64,
        me: MemberId,
        acceptors: &[MemberId],
        proposers: &[MemberId],
        incarnation: u32,
    ) -> ConsensusConfig {
        let mut c = ConsensusConfig::new(me, acceptors, proposers);
        c.slot_count = params.slot_count;
        c.value_bytes_max = params.value_bytes_max;
        c.backoff_min_ns = 1_000;
        c.backoff_max_ns = 64_000;
        c.reconnect_backoff_ns = 5_000;
        c.seed = seed ^ (u64::from(incarnation) << 32);
        #[cfg(feature = "mutation-testing")]
        if let Some(m) = params.mutation {
            c.mutation = match m {
                Broken::AcceptWithoutPrepare => crate::config::Mutation::AcceptWithoutPrepare,
                Broken::RecycleIgnoresLap => crate::config::Mutation::RecycleIgnoresLap,
                Broken::RejoinWithoutFence => crate::config::Mutation::RejoinWithoutFence,
            };
        }
        #[cfg(not(feature = "mutation-testing"))]
        assert!(
            params.mutation.is_none(),
            "mutations need the mutation-testing feature"
        );
        c
    }

    fn start_engine(&mut self, i: usize) {
        let id = MemberId(i as u8);
        let cfg = Self::config_for(
            &self.params,
            self.seed,
            id,
            &self.acceptors,
            &self.proposers,
            self.members[i].incarnation,
        );
        let mem = self.members[i].mem.clone();
        self.members[i].engine = Some(ConsensusEngine::new(&cfg, self.layout, mem, self.now));
    }

    /// The engine of member `m` (panics if it has none).
    pub fn engine(&mut self, m: usize) -> &mut ConsensusEngine<HarnessMemory> {
        self.members[m].engine.as_mut().expect("a running engine")
    }

    /// The learner's member index.
    pub fn learner(&self) -> usize {
        self.members.iter().position(|m| m.learner).unwrap()
    }

    /// The first violation or harness failure, with the seed.
    pub fn failure(&self) -> Option<&String> {
        self.failure.as_ref()
    }

    fn fail(&mut self, what: String) {
        if self.failure.is_none() {
            self.failure = Some(format!("seed {}: {what} ({:?})", self.seed, self.params));
        }
    }

    fn violated(&mut self, v: Result<(), Violation>) {
        if let Err(v) = v {
            self.fail(format!("violation at {} ns: {v:?}", self.now));
        }
    }

    /// Calls member `m`'s engine, then executes its actions and checks
    /// its events. `None` if it has no running engine.
    pub fn call<R>(
        &mut self,
        m: usize,
        f: impl FnOnce(&mut ConsensusEngine<HarnessMemory>, u64) -> R,
    ) -> Option<R> {
        let mut engine = self.members[m].engine.take()?;
        let r = f(&mut engine, self.now);
        let mut actions = Vec::new();
        while let Some(a) = engine.poll_action() {
            actions.push(a);
        }
        let mut events = Vec::new();
        while let Some(e) = engine.poll_event() {
            events.push(e);
        }
        self.members[m].engine = Some(engine);
        for a in actions {
            self.act(m, a);
        }
        for e in events {
            self.on_event(m, e);
        }
        Some(r)
    }

    fn act(&mut self, m: usize, a: Action) {
        match a {
            Action::Post(wr) => {
                assert!(
                    wr.peer.index() < self.members.len(),
                    "a request to a non-member"
                );
                self.conns[m * MAX_MEMBERS + wr.peer.index()]
                    .posted
                    .push_back(wr);
            }
            Action::Reconnect { peer, .. } => {
                let ci = m * MAX_MEMBERS + peer.index();
                assert!(
                    self.conns[ci].posted.is_empty() && self.conns[ci].done.is_empty(),
                    "reconnect with requests in flight"
                );
                self.summary.reconnects += 1;
                if self.members[peer.index()].dead {
                    self.call(m, |e, now| {
                        e.handle_action_failed(now, &a, FabricError::PeerGone)
                    });
                } else {
                    self.conns[ci].broken = false;
                }
            }
            Action::SetAccess { .. } => panic!("the consensus engine never changes access"),
        }
    }

    fn on_event(&mut self, m: usize, e: ConsensusEvent) {
        if let Some(log) = self.event_log.as_mut() {
            log.push((m, e.clone()));
        }
        match e {
            ConsensusEvent::Decided { slot, value, .. } => {
                self.summary.decisions += 1;
                let by = format!("member {m} incarnation {}", self.members[m].incarnation);
                let r = self.checker.decided(&by, slot, &value);
                self.violated(r);
            }
            ConsensusEvent::ProposalSpaceExhausted { .. } => self.summary.exhausted += 1,
            ConsensusEvent::Undecided { .. } => {}
            ConsensusEvent::AcceptorRejoined { .. } => self.summary.acceptor_rejoins += 1,
            ConsensusEvent::Recycled { later, .. } => {
                // Two slots before a touched one is decided (slots are
                // decided in order, one pre-prepared ahead).
                self.summary.recycled += 1;
                let member = &mut self.members[m];
                member.skip_to = member.skip_to.max(later.saturating_sub(2));
            }
        }
    }

    /// Executes `wr` from `src` at `dst` (the memory effects only).
    fn execute(&mut self, src: usize, dst: usize, wr: &WorkRequest) {
        let l = self.layout;
        let (s, d) = (self.members[src].mem.clone(), self.members[dst].mem.clone());
        match wr.op {
            Op::Read { remote, local, len } => {
                assert!(l.contains(remote, u64::from(len)) && l.contains(local, u64::from(len)));
                let mut buf = vec![0u8; len as usize];
                d.read(remote, &mut buf);
                s.write(local, &buf);
            }
            Op::Write { local, remote, len } => {
                assert!(l.contains(remote, u64::from(len)) && l.contains(local, u64::from(len)));
                assert!(
                    remote.offset >= l.proposals_offset,
                    "WRITEs only go to proposal areas"
                );
                let mut buf = vec![0u8; len as usize];
                s.read(local, &mut buf);
                d.write(remote, &buf);
                match decode_record(&buf, l.value_bytes_max as usize) {
                    Ok(r) => {
                        let v = self
                            .checker
                            .record_landed(r.slot, r.owner, r.proposal, r.value);
                        self.violated(v);
                    }
                    Err(e) => self.fail(format!("a malformed record was written: {e:?}")),
                }
            }
            Op::CompareSwap {
                remote,
                local,
                expect,
                swap,
            } => {
                assert!(l.contains(remote, 8) && l.contains(local, 8));
                assert!(
                    remote.offset < l.proposals_offset,
                    "CASes only go to slot words"
                );
                let old = d.load_u64(remote);
                if old == expect {
                    d.store_u64(remote, swap);
                    let index = (remote.offset / 8) as u32;
                    let ring = l.slot_count;
                    let v = self.checker.word_changed(
                        index,
                        ring,
                        old,
                        swap,
                        self.proposers.len() as u8,
                    );
                    self.violated(v);
                    let words: Vec<u64> = self
                        .acceptors
                        .iter()
                        .map(|a| self.members[a.index()].mem.load_u64(remote))
                        .collect();
                    let quorum = self.acceptors.len() / 2 + 1;
                    let v = self.checker.acceptor_words(
                        index,
                        ring,
                        &words,
                        self.proposers.len() as u8,
                        quorum,
                    );
                    self.violated(v);
                }
                s.store_u64(local, old);
            }
            Op::WriteInline { .. } | Op::FetchAdd { .. } => {
                panic!("the consensus engine never posts {:?}", wr.op)
            }
        }
        if let Some(log) = self.op_log.as_mut() {
            log.push((src, dst, wr.op));
        }
    }

    /// Executes (or fails) the oldest request on connection `ci`.
    fn deliver(&mut self, ci: usize) {
        let (src, dst) = (ci / MAX_MEMBERS, ci % MAX_MEMBERS);
        let Some(wr) = self.conns[ci].posted.pop_front() else {
            return;
        };
        self.summary.delivered += 1;
        let status = if self.conns[ci].broken {
            WcStatus::Flushed
        } else if let Some(forced) = self.conns[ci].forced.take() {
            forced
        } else if self.members[dst].dead {
            WcStatus::Unreachable
        } else if self.faults && self.rng.chance(self.params.error_per_mille, 1000) {
            self.summary.errors += 1;
            if self.rng.chance(1, 4) {
                WcStatus::AccessDenied
            } else {
                // A request whose acknowledgement was lost may have landed.
                if self.rng.chance(1, 2) {
                    self.execute(src, dst, &wr);
                }
                WcStatus::Unreachable
            }
        } else {
            self.execute(src, dst, &wr);
            WcStatus::Ok
        };
        if status != WcStatus::Ok {
            self.conns[ci].broken = true;
        }
        self.conns[ci].done.push_back(Completion {
            wr_id: wr.wr_id,
            peer: wr.peer,
            status,
        });
    }

    /// Hands the oldest completion of connection `ci` to its owner.
    fn reap(&mut self, ci: usize) {
        let src = ci / MAX_MEMBERS;
        if let Some(c) = self.conns[ci].done.pop_front() {
            self.call(src, |e, now| e.handle_completion(now, c));
        }
    }

    fn pick(&mut self, candidates: &[usize]) -> Option<usize> {
        if candidates.is_empty() {
            None
        } else {
            Some(candidates[self.rng.range_inclusive(0, candidates.len() as u64 - 1) as usize])
        }
    }

    fn running(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].engine.is_some())
            .collect()
    }

    /// A fresh value: who, which incarnation, which slot, a counter, and
    /// random filler, so no two proposals carry the same bytes.
    fn make_value(&mut self, m: usize, slot: u32) -> Vec<u8> {
        let member = &mut self.members[m];
        member.client_counter += 1;
        let mut v = vec![m as u8, member.incarnation as u8, slot as u8];
        v.extend_from_slice(&member.client_counter.to_le_bytes());
        let len = self
            .rng
            .range_inclusive(v.len() as u64, u64::from(self.params.value_bytes_max));
        while v.len() < len as usize {
            v.push(self.rng.next_u64() as u8);
        }
        v
    }

    /// Member `m`'s client proposes a fresh value for the lowest slot it
    /// has not seen decided, once it knows the slot before it decided
    /// (slots in order).
    pub fn client(&mut self, m: usize) {
        let Some(engine) = self.members[m].engine.as_ref() else {
            return;
        };
        // Below the frontier every slot is decided (in order): proposing
        // one adopts its value, unless its word has moved on.
        let known = engine.frontier().max(self.members[m].skip_to);
        let mut slot = self.members[m].client_slot.max(self.members[m].skip_to);
        while slot < self.params.slots && engine.decided(slot).is_some() {
            slot += 1;
        }
        self.members[m].client_slot = slot;
        if slot >= self.params.slots || slot > known {
            return;
        }
        let value = self.make_value(m, slot);
        // Recorded first: a rejected proposal never reaches an engine.
        self.checker.proposed(slot, &value);
        self.call(m, |e, now| e.propose(now, slot, &value));
    }

    /// Member `m` proposes `value` for `slot` (recorded as proposed).
    pub fn propose(
        &mut self,
        m: usize,
        slot: u32,
        value: &[u8],
    ) -> Result<(), super::engine::ProposeError> {
        self.checker.proposed(slot, value);
        self.call(m, |e, now| e.propose(now, slot, value))
            .expect("a running engine")
    }

    fn learn_next(&mut self, from: u32, upto: u32) {
        let m = self.learner();
        let Some(engine) = self.members[m].engine.as_ref() else {
            return;
        };
        // A word of a later lap told it to go on from `skip_to`.
        let from = from.max(self.members[m].skip_to);
        let slot = (from..=upto.min(self.params.slots - 1)).find(|&s| engine.decided(s).is_none());
        if let Some(slot) = slot {
            self.call(m, |e, now| e.learn(now, slot));
        }
    }

    /// The highest slot anyone ever decided (running engines may have
    /// restarted since and know less).
    fn highest_decided(&self) -> Option<u32> {
        self.members
            .iter()
            .filter_map(|m| m.engine.as_ref())
            .map(|e| e.frontier())
            .max()
            .and_then(|f| f.checked_sub(1))
            .max(self.checker.highest_slot())
    }

    /// Acceptors that count against the failures a group tolerates:
    /// dead, or restarted once (a restarted acceptor lost what it
    /// accepted: a slot decided with its accept may need every other
    /// acceptor of that majority, and it stays fenced there after it
    /// rejoined).
    fn dead_acceptors(&self) -> usize {
        self.members
            .iter()
            .filter(|m| m.acceptor && (m.dead || m.incarnation > 0))
            .count()
    }

    /// Crashes member `m`'s process: its engine and volatile state are
    /// gone; of its requests in flight, a random prefix per connection
    /// landed and the rest is lost.
    pub fn crash(&mut self, m: usize) {
        self.crash_landing(m, None);
    }

    /// [`World::crash`], with none of its requests in flight landing.
    pub fn crash_dropping(&mut self, m: usize) {
        self.crash_landing(m, Some(0));
    }

    fn crash_landing(&mut self, m: usize, landing: Option<usize>) {
        self.members[m].engine = None;
        self.members[m].dead = true;
        for dst in 0..self.members.len() {
            let ci = m * MAX_MEMBERS + dst;
            let pending: Vec<WorkRequest> = self.conns[ci].posted.drain(..).collect();
            let landed = match landing {
                Some(n) => n.min(pending.len()),
                None => self.rng.range_inclusive(0, pending.len() as u64) as usize,
            };
            if !self.conns[ci].broken && !self.members[dst].dead {
                for wr in &pending[..landed] {
                    self.execute(m, dst, wr);
                }
            }
            self.conns[ci] = Conn::default();
        }
        for i in self.running() {
            if self.rng.chance(9, 10) {
                self.notes.push((i, MemberId(m as u8), false));
            }
        }
    }

    /// Restarts a crashed proposer: a new process, fresh local memory, a
    /// new engine. One that is an acceptor too (overlap groups) comes
    /// back with its acceptor memory lost, and rejoins.
    pub fn restart(&mut self, m: usize) {
        assert!(self.members[m].dead && self.members[m].proposer);
        self.members[m].incarnation += 1;
        self.members[m].dead = false;
        self.members[m].client_slot = 0;
        self.members[m].skip_to = 0;
        self.members[m].mem.clear_local(&self.layout);
        let acceptor = self.members[m].acceptor;
        if acceptor {
            self.members[m].mem.wipe_shared(&self.layout);
            self.summary.acceptor_restarts += 1;
        }
        self.start_engine(m);
        if acceptor {
            self.call(m, |e, now| e.rejoin_own_acceptor(now));
        }
        for i in self.running() {
            if i != m {
                self.notes.push((i, MemberId(m as u8), true));
            }
        }
    }

    fn fault(&mut self) {
        let f = (self.acceptors.len() - 1) / 2;
        let live_proposers = self
            .members
            .iter()
            .filter(|m| m.proposer && !m.dead)
            .count();
        match self.rng.range_inclusive(0, 2) {
            0 => {
                // Crash a running proposer (crash-stop if it is an acceptor,
                // and then not the last one: someone must propose after).
                let c: Vec<usize> = (0..self.members.len())
                    .filter(|&i| {
                        let m = &self.members[i];
                        m.proposer
                            && !m.dead
                            && (!m.acceptor || (self.dead_acceptors() < f && live_proposers > 1))
                    })
                    .collect();
                if let Some(i) = self.pick(&c) {
                    self.summary.crashes += 1;
                    self.crash(i);
                }
            }
            1 => {
                let c: Vec<usize> = (0..self.members.len())
                    .filter(|&i| self.members[i].dead && self.members[i].proposer)
                    .collect();
                if let Some(i) = self.pick(&c) {
                    self.summary.restarts += 1;
                    self.restart(i);
                }
            }
            _ => {
                if self.dead_acceptors() < f {
                    let c: Vec<usize> = (0..self.members.len())
                        .filter(|&i| {
                            let m = &self.members[i];
                            m.acceptor && !m.dead && (!m.proposer || live_proposers > 1)
                        })
                        .collect();
                    if let Some(i) = self.pick(&c) {
                        self.summary.acceptor_kills += 1;
                        self.crash(i);
                    }
                }
            }
        }
    }

    fn deliver_note(&mut self, k: usize) {
        let (i, peer, up) = self.notes.swap_remove(k);
        self.call(i, |e, now| {
            if up {
                e.handle_peer_up(now, peer)
            } else {
                e.handle_peer_down(now, peer)
            }
        });
    }

    /// Delivers every request and completion in flight, then calls every
    /// engine's timeout: one round trip (scenario tests).
    pub fn round(&mut self) {
        for ci in 0..self.conns.len() {
            while !self.conns[ci].posted.is_empty() {
                self.deliver(ci);
            }
        }
        for ci in 0..self.conns.len() {
            while !self.conns[ci].done.is_empty() {
                self.reap(ci);
            }
        }
        self.now += 1_000;
        for i in self.running() {
            self.call(i, |e, now| e.handle_timeout(now));
        }
    }

    /// Executes (or fails) the oldest request from `src` to `dst`.
    pub fn deliver_conn(&mut self, src: usize, dst: usize) {
        self.deliver(src * MAX_MEMBERS + dst);
    }

    /// Makes the next request from `src` to `dst` fail with `status`.
    pub fn force_error(&mut self, src: usize, dst: usize, status: WcStatus) {
        self.conns[src * MAX_MEMBERS + dst].forced = Some(status);
    }

    /// True while the connection from `src` to `dst` is broken.
    pub fn broken(&self, src: usize, dst: usize) -> bool {
        self.conns[src * MAX_MEMBERS + dst].broken
    }

    /// Acceptor member `a`'s word of `slot`.
    pub fn word(&self, a: usize, slot: u32) -> u64 {
        self.members[a].mem.load_u64(self.layout.slot_word(slot))
    }

    /// Overwrites acceptor member `a`'s word of `slot` (scenario tests).
    pub fn set_word(&mut self, a: usize, slot: u32, raw: u64) {
        self.members[a]
            .mem
            .store_u64(self.layout.slot_word(slot), raw);
    }

    /// Overwrites the start of proposer `owner`'s record of `slot` at
    /// acceptor member `a` (scenario tests).
    pub fn scribble_record(&mut self, a: usize, owner: u8, slot: u32, bytes: &[u8]) {
        self.members[a]
            .mem
            .write(self.layout.proposal_record(owner, slot), bytes);
    }

    /// Tells member `m`'s engine that `peer` went down (or came back).
    pub fn notify(&mut self, m: usize, peer: usize, up: bool) {
        let peer = MemberId(peer as u8);
        self.call(m, |e, now| {
            if up {
                e.handle_peer_up(now, peer)
            } else {
                e.handle_peer_down(now, peer)
            }
        });
    }

    /// True when nothing is in flight.
    pub fn quiet(&self) -> bool {
        self.conns
            .iter()
            .all(|c| c.posted.is_empty() && c.done.is_empty())
    }

    /// One random step. `liveness`: the first slot the learner must learn
    /// in the liveness phase (`None` in the safety phase).
    pub fn step(&mut self, liveness: Option<u32>) {
        self.now += self.rng.range_inclusive(0, 1_000);
        let r = self.rng.range_inclusive(0, 999);
        match r {
            0..=399 => {
                let c: Vec<usize> = (0..self.conns.len())
                    .filter(|&i| !self.conns[i].posted.is_empty())
                    .collect();
                if let Some(ci) = self.pick(&c) {
                    self.deliver(ci);
                }
            }
            400..=699 => {
                let c: Vec<usize> = (0..self.conns.len())
                    .filter(|&i| !self.conns[i].done.is_empty())
                    .collect();
                if let Some(ci) = self.pick(&c) {
                    self.reap(ci);
                }
            }
            700..=819 => {
                // Engines are called at their deadline or earlier.
                let c = self.running();
                if let Some(i) = self.pick(&c) {
                    let due = self.members[i].engine.as_ref().unwrap().next_deadline();
                    if due <= self.now || self.rng.chance(1, 4) {
                        self.call(i, |e, now| e.handle_timeout(now));
                    }
                }
            }
            820..=899 => {
                let c: Vec<usize> = (0..self.members.len())
                    .filter(|&i| self.members[i].proposer && self.members[i].engine.is_some())
                    .collect();
                if let Some(i) = self.pick(&c) {
                    self.client(i);
                }
            }
            900..=939 => {
                let (from, upto) = match liveness {
                    Some(from) => (from, self.liveness_target()),
                    None => (
                        0,
                        self.rng
                            .range_inclusive(0, u64::from(self.params.slots) - 1)
                            as u32,
                    ),
                };
                self.learn_next(from, upto);
            }
            940..=979 => {
                if !self.notes.is_empty() {
                    let k = self.rng.range_inclusive(0, self.notes.len() as u64 - 1) as usize;
                    self.deliver_note(k);
                }
            }
            _ => {
                if self.faults && self.rng.chance(self.params.fault_per_mille, 20) {
                    self.fault();
                }
            }
        }
    }

    /// The slots from `from` to `target` whose values member `m` should
    /// hold and does not. Not owed: slots whose words a run may have
    /// recycled (a lap before the last slot it may touch: proposals stop
    /// below `slots`, and a leader pre-prepares at most `slots`), and
    /// slots below one a word of a later lap told the member to go on
    /// from (they are decided, and their values may be gone).
    fn missing(&self, m: usize, from: u32, target: u32) -> Vec<u32> {
        let kept_from = (self.params.slots + 1).saturating_sub(self.params.slot_count);
        let from = from.max(kept_from).max(self.members[m].skip_to);
        match self.members[m].engine.as_ref() {
            Some(e) => (from..=target)
                .filter(|&s| e.decided(s).is_none())
                .collect(),
            None => (from..=target).collect(),
        }
    }

    fn liveness_target(&self) -> u32 {
        self.highest_decided()
            .map_or(1, |h| h + 2)
            .min(self.params.slots - 1)
    }

    /// Stops faults, restarts crashed proposers, and tells every engine
    /// who is gone.
    pub fn heal(&mut self) {
        self.faults = false;
        for i in 0..self.members.len() {
            if self.members[i].dead && !self.members[i].acceptor {
                self.restart(i);
            }
        }
        while !self.notes.is_empty() {
            self.deliver_note(0);
        }
        for i in self.running() {
            for j in 0..self.members.len() {
                if self.members[j].dead {
                    self.call(i, |e, now| e.handle_peer_down(now, MemberId(j as u8)));
                }
            }
        }
    }

    /// Runs until the leader knows every slot up to the target and the
    /// learner every slot decided after healing, or fails. (Slots decided
    /// before may stay unlearnable by READs alone: a majority that
    /// accepted them may include acceptors that are gone, and only a
    /// proposer can re-accept them at live ones.)
    pub fn run_liveness(&mut self) -> Result<(), String> {
        let target = self.liveness_target();
        let learn_from = self.highest_decided().map_or(0, |h| h + 1);
        let leader = (0..self.members.len())
            .find(|&i| self.members[i].proposer && self.members[i].engine.is_some())
            .expect("a proposer runs after healing");
        let learner = self.learner();
        for step in 0..self.params.liveness_steps_max {
            if let Some(f) = &self.failure {
                return Err(f.clone());
            }
            let done = |w: &World, m: usize, from: u32| {
                from > target
                    || w.members[m].engine.as_ref().is_some_and(|e| {
                        e.frontier() > target && w.missing(m, from, target).is_empty()
                    })
            };
            if done(self, leader, 0)
                && (self.members[learner].dead || done(self, learner, learn_from))
            {
                self.summary.liveness_steps = step;
                return Ok(());
            }
            self.step(Some(learn_from));
        }
        let missing = self.missing(leader, 0, target);
        let learner_missing = self.missing(learner, learn_from, target);
        let e = self.members[leader].engine.as_ref().unwrap();
        Err(format!(
            "seed {}: liveness: the leader (member {leader}) did not reach slot {target} holding every value it owes in {} steps after the faults stopped (missing {missing:?}, learner missing {learner_missing:?}, frontier {}, {:?}, {}, {:?})",
            self.seed,
            self.params.liveness_steps_max,
            e.frontier(),
            e.status(),
            e.debug_state(),
            self.params
        ))
    }
}

/// Runs one seed: the safety phase, then (unless mutated) healing and the
/// liveness phase. `Err` names the seed and what failed.
pub fn run_seed(seed: u64, mutation: Option<Broken>) -> Result<Summary, String> {
    let mut params = Params::from_seed(seed);
    params.mutation = mutation;
    if mutation.is_some() {
        // A mutation is caught by safety, not liveness; contention helps.
        params.proposers = params.proposers.max(2);
        if params.overlap {
            params.proposers = params.proposers.min(params.acceptors);
        }
    }
    let mut w = World::new(seed, params);
    for _ in 0..w.params.safety_steps {
        w.step(None);
        if let Some(f) = w.failure() {
            return Err(f.clone());
        }
    }
    if mutation.is_none() {
        w.heal();
        w.run_liveness()?;
    }
    if let Some(f) = w.failure() {
        return Err(f.clone());
    }
    w.summary.chosen = w.checker.chosen.len();
    Ok(w.summary)
}
