//! The heartbeat-counter engine: uKharon's second failure-detector level
//! (§4.2, "kernel failures"), after Mu's detector.
//!
//! Every member bumps a counter in its own registered memory on every call
//! (and at least every `counter_increment_period_ns`, which the deadline
//! guarantees for a host that parks). Every member RDMA-READs each peer's
//! counter, one READ at a time per peer, waiting `counter_read_gap_ns`
//! after each completion before the next. Two READs that return the same
//! value mean the peer's process did not run in between, although its
//! memory still answers: a process stuck in the kernel, stopped
//! (SIGSTOP), or a zombie (DARE §5), which the process-exit notification
//! cannot see. The engine reports [`CounterEvent::Stalled`] then, and
//! [`CounterEvent::Resumed`] when the counter moves again.
//!
//! uKharon arranges members in a ring where each watches its successor;
//! groups here have at most [`MAX_MEMBERS`] members and every member shows
//! its own view in status, so each member watches every peer.
//!
//! A READ that fails (peer unreachable, channel broken) yields no sample:
//! unreachability is the first detector's business (error completions,
//! the log engine's heartbeats). A READ whose completion never comes (a
//! fabric may drop the requests of a connection it resets) is given up
//! after four gaps and re-posted under a new generation, so a late
//! completion is recognised as stale.

use crate::config::Config;
use crate::engine::Engine;
use crate::fabric::{
    Action, Completion, FabricError, MemberId, Op, WorkRequest, WrId, MAX_MEMBERS,
};
use crate::layout::Layout;
use crate::mem::Memory;
use heapless::Deque;

/// Actions queued between two drains, at most (one READ per peer).
pub const HEARTBEAT_ACTION_QUEUE_CAP: usize = MAX_MEMBERS;
/// Events queued between two drains, at most.
pub const HEARTBEAT_EVENT_QUEUE_CAP: usize = 2 * MAX_MEMBERS;
/// A READ without completion for this many gaps is given up.
const LOST_AFTER_GAPS: u64 = 4;

/// What the heartbeat engine tells the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterEvent {
    /// Two READs `counter_read_gap_ns` apart returned the same counter.
    Stalled {
        /// The peer.
        peer: MemberId,
        /// The counter it is stuck at.
        counter: u64,
        /// When the first READ that returned this value was posted (our
        /// clock): the peer has not run since at least then.
        since_ns: u64,
    },
    /// A peer reported stalled increments its counter again.
    Resumed {
        /// The peer.
        peer: MemberId,
    },
}

/// One peer as this engine sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterPeerStatus {
    /// The last counter value read (None before the first READ).
    pub counter: Option<u64>,
    /// When the first READ that returned `counter` was posted (our clock).
    pub counter_since_ns: u64,
    /// When the counter was last seen to change (our clock).
    pub changed_at_ns: u64,
    /// Reported stalled and not resumed since.
    pub stalled: bool,
    /// READs completed with a value.
    pub reads_ok: u64,
    /// READs that failed or were given up.
    pub reads_failed: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct PeerState {
    status: CounterPeerStatus,
    /// Generation of the READ in flight, if any.
    inflight: Option<u32>,
    posted_at_ns: u64,
    generation: u32,
    next_read_at_ns: u64,
    down: bool,
    /// The READ in flight was posted late (see `handle_timeout`).
    posted_late: bool,
}

/// The engine of one member.
pub struct HeartbeatEngine<M: Memory> {
    mem: M,
    layout: Layout,
    me: MemberId,
    member_count: usize,
    increment_period_ns: u64,
    read_gap_ns: u64,
    #[cfg(feature = "mutation-testing")]
    mutation: crate::config::Mutation,
    now: u64,
    counter: u64,
    next_increment_ns: u64,
    peers: [PeerState; MAX_MEMBERS],
    actions: Deque<Action, HEARTBEAT_ACTION_QUEUE_CAP>,
    events: Deque<CounterEvent, HEARTBEAT_EVENT_QUEUE_CAP>,
    stalls_reported: u64,
}

impl<M: Memory> HeartbeatEngine<M> {
    /// An engine over the member's registered memory (the layout's
    /// heartbeat region). The configuration is validated by the caller
    /// ([`Layout::new`] does it).
    pub fn new(config: &Config, layout: Layout, memory: M, now_ns: u64) -> Self {
        HeartbeatEngine {
            mem: memory,
            layout,
            me: config.self_id,
            member_count: usize::from(config.member_count),
            increment_period_ns: config.counter_increment_period_ns,
            read_gap_ns: config.counter_read_gap_ns,
            #[cfg(feature = "mutation-testing")]
            mutation: config.mutation,
            now: now_ns,
            counter: 0,
            next_increment_ns: now_ns,
            peers: [PeerState::default(); MAX_MEMBERS],
            actions: Deque::new(),
            events: Deque::new(),
            stalls_reported: 0,
        }
    }

    /// Our own counter.
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// What we know of `peer`.
    pub fn peer(&self, peer: MemberId) -> CounterPeerStatus {
        self.peers[peer.index()].status
    }

    /// Stall reports made so far.
    pub fn stalls_reported(&self) -> u64 {
        self.stalls_reported
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<CounterEvent> {
        self.events.pop_front()
    }

    fn others(&self) -> impl Iterator<Item = MemberId> {
        let me = self.me;
        (0..self.member_count as u8)
            .map(MemberId)
            .filter(move |&m| m != me)
    }

    fn gap_ns(&self) -> u64 {
        #[cfg(feature = "mutation-testing")]
        if self.mutation == crate::config::Mutation::CounterReadWithoutGap {
            return 0;
        }
        self.read_gap_ns
    }

    fn event(&mut self, e: CounterEvent) {
        // At most one event per peer per call (a completion or a timeout),
        // and the driver drains after every call.
        if self.events.push_back(e).is_err() {
            panic!("heartbeat event queue overflow: the driver must drain events after every call");
        }
    }

    fn bump(&mut self) {
        self.counter = self.counter.wrapping_add(1);
        self.mem
            .store_u64(self.layout.heartbeat_counter(), self.counter);
        self.next_increment_ns = self.now.saturating_add(self.increment_period_ns);
    }

    fn invariants(&self) {
        assert!(self.actions.len() <= self.member_count);
        for p in self.others() {
            let s = &self.peers[p.index()];
            assert!(
                s.inflight.is_none() || !s.down,
                "a READ posted to a dead peer"
            );
        }
    }
}

impl<M: Memory> Engine for HeartbeatEngine<M> {
    fn name(&self) -> &'static str {
        "heartbeat"
    }

    fn handle_completion(&mut self, now_ns: u64, c: Completion) {
        self.now = self.now.max(now_ns);
        let peer = c.peer;
        if peer.index() >= self.member_count || peer == self.me {
            return;
        }
        let generation = (c.wr_id.0 & 0xFFFF_FFFF) as u32;
        let gap_ns = self.gap_ns();
        let p = &mut self.peers[peer.index()];
        if p.inflight != Some(generation) || (c.wr_id.0 >> 32) != u64::from(peer.0) {
            // Stale (given up earlier) or not ours: never trusted.
            return;
        }
        p.inflight = None;
        p.next_read_at_ns = self.now.saturating_add(gap_ns);
        if !c.status.is_ok() {
            p.status.reads_failed += 1;
            return;
        }
        let value = self.mem.load_u64(self.layout.heartbeat_landing(peer));
        let posted_at_ns = p.posted_at_ns;
        p.status.reads_ok += 1;
        let previous = p.status.counter.replace(value);
        let event = match previous {
            // A READ posted late compares with nothing: this member was
            // not running when it was due, so the peer may have been
            // frozen with it (a paused VM, a spent CPU quota stops every
            // process) and not yet have run since. It starts a new
            // sample; the next READ, a gap later, judges.
            Some(v) if v == value && p.posted_late && !p.status.stalled => {
                p.status.counter_since_ns = posted_at_ns;
                None
            }
            Some(v) if v == value => {
                if p.status.stalled {
                    None
                } else {
                    p.status.stalled = true;
                    Some(CounterEvent::Stalled {
                        peer,
                        counter: value,
                        since_ns: p.status.counter_since_ns,
                    })
                }
            }
            _ => {
                p.status.changed_at_ns = self.now;
                p.status.counter_since_ns = posted_at_ns;
                if p.status.stalled {
                    p.status.stalled = false;
                    Some(CounterEvent::Resumed { peer })
                } else {
                    None
                }
            }
        };
        if let Some(e) = event {
            if matches!(e, CounterEvent::Stalled { .. }) {
                self.stalls_reported += 1;
            }
            self.event(e);
        }
        self.invariants();
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.now = self.now.max(now_ns);
        // Every call is proof of life: bump at once, not only when due.
        self.bump();
        let lost_after = self.read_gap_ns.saturating_mul(LOST_AFTER_GAPS);
        let read_gap_ns = self.read_gap_ns;
        for peer in self.others() {
            let now = self.now;
            let p = &mut self.peers[peer.index()];
            if p.down {
                continue;
            }
            if p.inflight.is_some() {
                if now.saturating_sub(p.posted_at_ns) < lost_after {
                    continue;
                }
                // Its completion is lost: give it up (a late one is stale).
                p.inflight = None;
                p.status.reads_failed += 1;
            }
            if now < p.next_read_at_ns {
                continue;
            }
            // Late by half a gap or more: we were not running when it
            // was due (the Δ check forgives the same way, election.rs).
            // Measured against the configured gap, so that a mutated zero
            // gap still compares.
            p.posted_late =
                p.next_read_at_ns != 0 && now > p.next_read_at_ns.saturating_add(read_gap_ns / 2);
            p.generation = p.generation.wrapping_add(1);
            p.inflight = Some(p.generation);
            p.posted_at_ns = now;
            let wr_id = WrId((u64::from(peer.0) << 32) | u64::from(p.generation));
            let wr = WorkRequest {
                wr_id,
                peer,
                op: Op::Read {
                    remote: self.layout.heartbeat_counter(),
                    local: self.layout.heartbeat_landing(peer),
                    len: 8,
                },
                notify: false,
            };
            if self.actions.push_back(Action::Post(wr)).is_err() {
                panic!("heartbeat action queue overflow: the driver must drain actions after every call");
            }
        }
        self.invariants();
    }

    fn handle_peer_down(&mut self, now_ns: u64, peer: MemberId) {
        self.now = self.now.max(now_ns);
        if peer.index() < self.member_count && peer != self.me {
            // Its memory is gone with it: nothing left to read. A READ in
            // flight still completes (with an error) and is ignored.
            let p = &mut self.peers[peer.index()];
            p.down = true;
            p.inflight = None;
        }
        self.invariants();
    }

    fn handle_peer_up(&mut self, now_ns: u64, peer: MemberId) {
        self.now = self.now.max(now_ns);
        if peer.index() < self.member_count && peer != self.me {
            // A new process with a counter of its own: start over, so its
            // first value is not compared with the old process's last.
            let p = &mut self.peers[peer.index()];
            let generation = p.generation.wrapping_add(1);
            *p = PeerState {
                generation,
                next_read_at_ns: self.now,
                ..PeerState::default()
            };
        }
        self.invariants();
    }

    fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    fn handle_action_failed(&mut self, now_ns: u64, _: &Action, _: FabricError) {
        // It only posts READs, which fail through their completions.
        self.now = self.now.max(now_ns);
    }

    fn next_deadline(&self) -> u64 {
        let mut at = self.next_increment_ns;
        let lost_after = self.read_gap_ns.saturating_mul(LOST_AFTER_GAPS);
        for peer in self.others() {
            let p = &self.peers[peer.index()];
            if p.down {
                continue;
            }
            at = at.min(match p.inflight {
                Some(_) => p.posted_at_ns.saturating_add(lost_after),
                None => p.next_read_at_ns,
            });
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::WcStatus;
    use crate::test_memory::TestMemory;

    fn engine(me: u8) -> (HeartbeatEngine<TestMemory>, TestMemory, Config) {
        let mut cfg = Config::new(3, MemberId(me));
        cfg.counter_increment_period_ns = 1_000;
        cfg.counter_read_gap_ns = 10_000;
        let layout = Layout::new(&cfg).unwrap();
        let mem = TestMemory::new(&layout);
        (HeartbeatEngine::new(&cfg, layout, mem.clone(), 0), mem, cfg)
    }

    fn reads(e: &mut HeartbeatEngine<TestMemory>) -> heapless::Vec<WorkRequest, 8> {
        let mut v = heapless::Vec::new();
        while let Some(a) = e.poll_action() {
            match a {
                Action::Post(wr) => v.push(wr).unwrap(),
                other => panic!("unexpected {other:?}"),
            }
        }
        v
    }

    /// Completes `wr` as if the peer's counter were `value`.
    fn land(
        e: &mut HeartbeatEngine<TestMemory>,
        mem: &TestMemory,
        wr: &WorkRequest,
        value: u64,
        now: u64,
    ) {
        let layout = e.layout;
        mem.store_u64(layout.heartbeat_landing(wr.peer), value);
        e.handle_completion(
            now,
            Completion {
                wr_id: wr.wr_id,
                peer: wr.peer,
                status: WcStatus::Ok,
            },
        );
    }

    #[test]
    fn the_own_counter_moves_on_every_call_and_is_due_periodically() {
        let (mut e, mem, _) = engine(0);
        e.handle_timeout(5);
        let a = mem.load_u64(e.layout.heartbeat_counter());
        e.handle_timeout(6);
        assert_eq!(mem.load_u64(e.layout.heartbeat_counter()), a + 1);
        assert!(e.next_deadline() <= 6 + 1_000);
    }

    #[test]
    fn same_value_twice_is_a_stall_and_a_change_resumes() {
        let (mut e, mem, _) = engine(0);
        e.handle_timeout(0);
        let first = reads(&mut e);
        assert_eq!(first.len(), 2, "one READ per peer");
        for wr in &first {
            land(&mut e, &mem, wr, 7, 100);
        }
        assert_eq!(e.poll_event(), None);
        // Nothing is read again before the gap.
        e.handle_timeout(5_000);
        assert!(reads(&mut e).is_empty());
        e.handle_timeout(10_100);
        let second = reads(&mut e);
        assert_eq!(second.len(), 2);
        land(&mut e, &mem, &second[0], 7, 10_200);
        land(&mut e, &mem, &second[1], 8, 10_200);
        assert_eq!(
            e.poll_event(),
            Some(CounterEvent::Stalled {
                peer: second[0].peer,
                counter: 7,
                since_ns: 0
            })
        );
        assert_eq!(e.poll_event(), None);
        assert!(e.peer(second[0].peer).stalled);
        e.handle_timeout(20_300);
        let third = reads(&mut e);
        land(&mut e, &mem, &third[0], 9, 20_400);
        assert_eq!(
            e.poll_event(),
            Some(CounterEvent::Resumed {
                peer: third[0].peer
            })
        );
        assert_eq!(e.stalls_reported(), 1);
    }

    /// A READ posted half a gap or more after it was due (this member was
    /// not running) starts a new sample instead of judging: the peer may
    /// have been frozen with it and not have run yet. The next one judges.
    #[test]
    fn a_read_posted_late_starts_a_sample_instead_of_reporting_a_stall() {
        let (mut e, mem, _) = engine(0);
        e.handle_timeout(0);
        for wr in &reads(&mut e) {
            land(&mut e, &mem, wr, 7, 100);
        }
        // Due at 10_100; we run again only at 30_000.
        e.handle_timeout(30_000);
        let late = reads(&mut e);
        assert_eq!(late.len(), 2);
        for wr in &late {
            land(&mut e, &mem, wr, 7, 30_100);
        }
        assert_eq!(e.poll_event(), None, "a late sample judges nothing");
        // On time again, a gap later: same value, a stall since the late
        // READ was posted.
        e.handle_timeout(40_100);
        let on_time = reads(&mut e);
        land(&mut e, &mem, &on_time[0], 7, 40_200);
        assert_eq!(
            e.poll_event(),
            Some(CounterEvent::Stalled {
                peer: on_time[0].peer,
                counter: 7,
                since_ns: 30_000
            })
        );
    }

    #[test]
    fn failed_stale_and_forged_completions_are_not_samples() {
        let (mut e, mem, _) = engine(1);
        e.handle_timeout(0);
        let first = reads(&mut e);
        land(&mut e, &mem, &first[0], 3, 10);
        // A second completion of the same READ is stale.
        land(&mut e, &mem, &first[0], 3, 20);
        // A completion naming another peer than its id is forged.
        let forged = WorkRequest {
            peer: first[1].peer,
            ..first[0]
        };
        land(&mut e, &mem, &forged, 3, 20);
        e.handle_completion(
            30,
            Completion {
                wr_id: first[1].wr_id,
                peer: first[1].peer,
                status: WcStatus::Unreachable,
            },
        );
        assert_eq!(e.poll_event(), None);
        assert_eq!(e.peer(first[0].peer).reads_ok, 1);
        assert_eq!(e.peer(first[1].peer).reads_failed, 1);
        assert_eq!(e.peer(first[1].peer).counter, None);
    }

    #[test]
    fn a_lost_completion_is_given_up_and_a_late_one_ignored() {
        let (mut e, mem, _) = engine(0);
        e.handle_timeout(0);
        let first = reads(&mut e);
        assert!(e.next_deadline() <= 40_000);
        e.handle_timeout(40_000);
        let again = reads(&mut e);
        assert_eq!(again.len(), 2, "both READs re-posted");
        assert_ne!(again[0].wr_id, first[0].wr_id);
        land(&mut e, &mem, &first[0], 1, 40_001);
        assert_eq!(e.peer(first[0].peer).reads_ok, 0, "late completion ignored");
        land(&mut e, &mem, &again[0], 1, 40_002);
        assert_eq!(e.peer(first[0].peer).reads_ok, 1);
    }

    #[test]
    fn a_dead_peer_is_not_read() {
        let (mut e, _, _) = engine(0);
        e.handle_peer_down(0, MemberId(2));
        e.handle_timeout(0);
        let r = reads(&mut e);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].peer, MemberId(1));
    }

    /// A restarted peer is read again, from scratch: the new process's
    /// first counter is not compared with the old one's last (which could
    /// be equal and look like a stall), and a READ posted to the old
    /// process is ignored when it completes.
    #[test]
    fn a_restarted_peer_is_read_again_from_scratch() {
        let (mut e, mem, _) = engine(0);
        e.handle_timeout(0);
        let first = reads(&mut e);
        let to2 = *first.iter().find(|w| w.peer == MemberId(2)).unwrap();
        land(&mut e, &mem, &to2, 7, 1);
        e.handle_peer_down(2, MemberId(2));
        e.handle_peer_up(3, MemberId(2));
        assert_eq!(e.peer(MemberId(2)).counter, None);
        e.handle_timeout(40_000);
        let again = reads(&mut e);
        let to2b = *again.iter().find(|w| w.peer == MemberId(2)).unwrap();
        land(&mut e, &mem, &to2b, 7, 40_001);
        assert_eq!(e.peer(MemberId(2)).counter, Some(7));
        assert!(
            !e.peer(MemberId(2)).stalled,
            "the first value of a new process"
        );
        assert_eq!(e.poll_event(), None);
    }
}
