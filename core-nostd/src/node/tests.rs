//! Scenario tests: each drives nodes through one step of the protocol and
//! asserts the exact work requests emitted, naming the section of the DARE
//! paper (Poke & Hoefler, HPDC'15) it checks.
//!
//! The harness executes actions synchronously and in order: a WRITE lands
//! in the target's memory as soon as it is executed and its completion is
//! queued for the initiator's next call.

extern crate std;
use super::*;
use crate::fabric::{Access, Addr, Op, RegionId, WcStatus, WorkRequest, WrId, REGIONS_MAX};
use crate::kv::{KvBackend, KvLimits, KvOp, KvReply, KvStateMachine};
use crate::layout::{ADJUST_HEADER_BYTES, ROW_BYTES};
use crate::test_memory::TestMemory;
use std::collections::VecDeque;
use std::vec::Vec;

use crate::test_backends::MapKv;

type TestNode = Node<TestMemory, KvStateMachine<MapKv>>;
const LIMITS: KvLimits = KvLimits {
    key_bytes_max: 16,
    value_bytes_max: 64,
};

struct Harness {
    nodes: Vec<TestNode>,
    access: Vec<[[Access; REGIONS_MAX]; MAX_MEMBERS]>,
    cq: Vec<VecDeque<Completion>>,
    down: Vec<bool>,
    /// Per node: its fabric cannot confirm revokes of log access (a writer
    /// stopped in the middle of a copy); the access stays as it was.
    fail_revokes: Vec<bool>,
    now: u64,
}

fn config(n: u8, id: u8) -> Config {
    let mut c = Config::new(n, MemberId(id));
    c.log_ring_bytes = 8 * 1024;
    c.entry_payload_bytes_max = 256;
    c.session_slot_count = 16;
    c.seed = 7;
    c
}

impl Harness {
    fn new(n: u8) -> Harness {
        Harness::with(n, |_| {})
    }

    /// A group whose every member's configuration `tune` adjusts.
    fn with(n: u8, tune: impl Fn(&mut Config)) -> Harness {
        let nodes = (0..n)
            .map(|i| {
                let mut cfg = config(n, i);
                tune(&mut cfg);
                let layout = Layout::new(&cfg).unwrap();
                Node::new(
                    cfg,
                    TestMemory::new(&layout),
                    KvStateMachine::new(MapKv::default(), LIMITS),
                    0,
                )
                .unwrap()
            })
            .collect();
        let mut access = Vec::new();
        for _ in 0..n {
            let mut a = [[Access::Revoked; REGIONS_MAX]; MAX_MEMBERS];
            for p in a.iter_mut() {
                p[RegionId::Control.index()] = Access::Granted;
                p[RegionId::Snapshot.index()] = Access::Granted;
            }
            access.push(a);
        }
        let mut h = Harness {
            nodes,
            access,
            cq: (0..n).map(|_| VecDeque::new()).collect(),
            down: std::vec![false; n as usize],
            fail_revokes: std::vec![false; n as usize],
            now: 0,
        };
        // Startup (DARE §3.2.3): every member reads its row back from its
        // peers (nothing there in a new group), then publishes it.
        h.start_all();
        h
    }

    /// Runs the startup read-back of every live member to its end: READs
    /// on the first call, their completions on the second.
    fn start_all(&mut self) {
        for _ in 0..2 {
            for i in 0..self.nodes.len() {
                if !self.down[i] && !self.nodes[i].votes_known() {
                    self.tick(i);
                }
            }
        }
        assert!(self.nodes.iter().all(|n| n.votes_known()));
    }

    fn exec(&mut self, i: usize, wr: WorkRequest) -> WcStatus {
        let dst = wr.peer.index();
        if self.down[dst] {
            return WcStatus::Unreachable;
        }
        let remote = wr.op.remote();
        if self.access[dst][i][remote.region.index()] != Access::Granted {
            return WcStatus::AccessDenied;
        }
        let (src, tgt) = (self.nodes[i].memory(), self.nodes[dst].memory());
        match wr.op {
            Op::Write { local, remote, len } => {
                let mut b = std::vec![0u8; len as usize];
                src.read(local, &mut b);
                tgt.write(remote, &b);
            }
            Op::WriteInline { remote, len, data } => tgt.write(remote, &data[..len as usize]),
            Op::Read { remote, local, len } => {
                let mut b = std::vec![0u8; len as usize];
                tgt.read(remote, &mut b);
                src.write(local, &b);
            }
            Op::CompareSwap {
                remote,
                local,
                expect,
                swap,
            } => {
                let old = tgt.load_u64(remote);
                if old == expect {
                    tgt.store_u64(remote, swap);
                }
                src.store_u64(local, old);
            }
            Op::FetchAdd { remote, local, add } => {
                let old = tgt.load_u64(remote);
                tgt.store_u64(remote, old.wrapping_add(add));
                src.store_u64(local, old);
            }
        }
        WcStatus::Ok
    }

    /// Drains node `i`'s actions, executes them in order, returns them.
    fn run_actions(&mut self, i: usize) -> Vec<Action> {
        let mut out = Vec::new();
        while let Some(a) = self.nodes[i].poll_action() {
            match a {
                Action::Post(wr) => {
                    let status = self.exec(i, wr);
                    self.cq[i].push_back(Completion {
                        wr_id: wr.wr_id,
                        peer: wr.peer,
                        status,
                    });
                }
                Action::SetAccess {
                    peer: _,
                    region: RegionId::Log,
                    access: Access::Revoked,
                } if self.fail_revokes[i] => self.nodes[i].handle_action_failed(
                    self.now,
                    &a,
                    crate::fabric::FabricError::RevokeUnconfirmed,
                ),
                Action::SetAccess {
                    peer,
                    region,
                    access,
                } => self.access[i][peer.index()][region.index()] = access,
                Action::Reconnect { .. } => {}
            }
            out.push(a);
        }
        out
    }

    /// One host-loop iteration of node `i`: completions, then timers and
    /// memory, then actions.
    fn tick(&mut self, i: usize) -> Vec<Action> {
        while let Some(c) = self.cq[i].pop_front() {
            self.nodes[i].handle_completion(self.now, c);
        }
        self.nodes[i].handle_timeout(self.now);
        self.run_actions(i)
    }

    fn events(&mut self, i: usize) -> Vec<Event> {
        let mut v = Vec::new();
        while let Some(e) = self.nodes[i].poll_event() {
            v.push(e);
        }
        v
    }

    /// Ticks every live node `rounds` times.
    fn settle(&mut self, rounds: usize) {
        for _ in 0..rounds {
            for i in 0..self.nodes.len() {
                if !self.down[i] {
                    self.tick(i);
                }
            }
        }
    }

    /// Node `i` comes back as a new process: zeroed memory, its id, new
    /// registrations (control data open to members, the log to nobody).
    /// Its peers keep their copies of its row.
    fn restart(&mut self, i: usize) {
        let n = self.nodes.len() as u8;
        let cfg = config(n, i as u8);
        let layout = Layout::new(&cfg).unwrap();
        self.nodes[i] = Node::new(
            cfg,
            TestMemory::new(&layout),
            KvStateMachine::new(MapKv::default(), LIMITS),
            self.now,
        )
        .unwrap();
        let mut a = [[Access::Revoked; REGIONS_MAX]; MAX_MEMBERS];
        for p in a.iter_mut() {
            p[RegionId::Control.index()] = Access::Granted;
        }
        self.access[i] = a;
        self.cq[i].clear();
        self.down[i] = false;
    }

    /// Elects node 0: fire its election timer first, then settle.
    fn elect_zero(&mut self) {
        self.now = self.nodes[0].timers[Timer::Election as usize].unwrap();
        self.settle(8);
        assert_eq!(self.nodes[0].role(), Role::Leader);
        for i in 1..self.nodes.len() {
            assert_eq!(self.nodes[i].leader(), Some(MemberId(0)));
        }
    }
}

fn posts(actions: &[Action]) -> Vec<(MemberId, Op)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Post(wr) => Some((wr.peer, wr.op)),
            _ => None,
        })
        .collect()
}

/// The peers a row push from `from` went to (any staging copy).
fn row_push_targets(layout: &Layout, from: MemberId, actions: &[Action]) -> Vec<MemberId> {
    posts(actions)
        .into_iter()
        .filter(|(_, op)| match *op {
            Op::Write { local, remote, len } => {
                local.region == RegionId::Scratch
                    && local.offset < layout.scratch.row_landing_offset
                    && remote == layout.row(from)
                    && len == ROW_BYTES as u32
            }
            _ => false,
        })
        .map(|(p, _)| p)
        .collect()
}

fn set(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut b = std::vec![0u8; 128];
    let n = KvOp::Set { key, value }.encode(&mut b).unwrap();
    b.truncate(n);
    b
}

/// §3.2.2 "Becoming a candidate": revoke remote access to the log first,
/// then write the vote request into every other server's control data.
#[test]
fn candidate_revokes_log_access_then_pushes_its_vote_request() {
    let mut h = Harness::new(3);
    let l = *h.nodes[0].layout();
    // Publish initial rows so that the interesting step stands alone.
    h.settle(1);
    h.now = h.nodes[0].timers[Timer::Election as usize].unwrap();
    let first = h.tick(0);
    assert_eq!(
        first,
        std::vec![
            Action::SetAccess {
                peer: MemberId(1),
                region: RegionId::Log,
                access: Access::Revoked
            },
            Action::SetAccess {
                peer: MemberId(2),
                region: RegionId::Log,
                access: Access::Revoked
            },
        ],
        "nothing is sent before the revokes are executed"
    );
    assert_eq!(h.nodes[0].role(), Role::Candidate);
    let second = h.tick(0);
    assert_eq!(posts(&second).len(), 2);
    assert_eq!(
        row_push_targets(&l, MemberId(0), &second),
        std::vec![MemberId(1), MemberId(2)]
    );
    // The pushed row carries the request: term 1, empty log.
    let (row, _) = Row::read(h.nodes[1].memory(), l.row(MemberId(0))).unwrap();
    assert_eq!(
        row.vote_request,
        crate::sst::VoteRequest {
            term: 1,
            last_index: 0,
            last_term: 0
        }
    );
    assert_eq!(row.private_vote, crate::sst::Ballot::new(1, MemberId(0)));
}

/// §3.2.3 "Answering vote requests": the voter takes exclusive access to
/// its log, replicates its decision as private data to a majority, and
/// only then answers (and grants log access to the candidate, §3.2.1).
#[test]
fn voter_makes_its_vote_reliable_before_answering() {
    let mut h = Harness::new(3);
    let l = *h.nodes[0].layout();
    h.settle(1);
    h.now = h.nodes[0].timers[Timer::Election as usize].unwrap();
    h.tick(0);
    h.tick(0); // vote request pushed
               // Voter 1 sees the request: it moves to term 1 and revokes.
    let a = h.tick(1);
    assert_eq!(
        a,
        std::vec![
            Action::SetAccess {
                peer: MemberId(0),
                region: RegionId::Log,
                access: Access::Revoked
            },
            Action::SetAccess {
                peer: MemberId(2),
                region: RegionId::Log,
                access: Access::Revoked
            },
        ]
    );
    // Next call: log checked; private vote pushed to both peers; no grant.
    let b = h.tick(1);
    assert_eq!(posts(&b).len(), 2);
    assert_eq!(
        row_push_targets(&l, MemberId(1), &b),
        std::vec![MemberId(0), MemberId(2)]
    );
    let (row, _) = Row::read(h.nodes[0].memory(), l.row(MemberId(1))).unwrap();
    assert_eq!(row.private_vote, crate::sst::Ballot::new(1, MemberId(0)));
    assert_eq!(
        row.vote,
        crate::sst::Ballot::default(),
        "not answered before the vote is reliable"
    );
    // Completions arrive: the vote is at a majority; grant, then answer.
    let c = h.tick(1);
    assert_eq!(
        c[0],
        Action::SetAccess {
            peer: MemberId(0),
            region: RegionId::Log,
            access: Access::Granted
        }
    );
    assert_eq!(posts(&c).len(), 2);
    assert_eq!(
        row_push_targets(&l, MemberId(1), &c),
        std::vec![MemberId(0), MemberId(2)]
    );
    let (row, _) = Row::read(h.nodes[0].memory(), l.row(MemberId(1))).unwrap();
    assert_eq!(row.vote, crate::sst::Ballot::new(1, MemberId(0)));
    assert_eq!(row.grant, crate::sst::Ballot::new(1, MemberId(0)));
    // The adjustment list was prepared for this leader and term.
    let hdr = crate::log::AdjustHeader::load(h.nodes[1].memory(), l.adjust_header()).unwrap();
    assert_eq!(
        (hdr.grant_term, hdr.grant_leader, hdr.count),
        (1, MemberId(0), 0)
    );
}

/// Issue 12 item 1 (DARE §3.2.1): a revoke the fabric cannot confirm (a
/// writer stopped inside the log) is not acted on: the voter neither
/// checks its log nor votes until a retry succeeds.
#[test]
fn an_unconfirmed_revoke_holds_the_vote_until_a_retry_succeeds() {
    let mut h = Harness::new(3);
    h.settle(1);
    h.now = h.nodes[0].timers[Timer::Election as usize].unwrap();
    h.tick(0);
    h.tick(0); // vote request pushed
    h.fail_revokes[1] = true;
    let a = h.tick(1);
    assert_eq!(
        a.iter()
            .filter(|a| matches!(
                a,
                Action::SetAccess {
                    access: Access::Revoked,
                    ..
                }
            ))
            .count(),
        2
    );
    let backoff = h.nodes[1].cfg.reconnect_backoff_ns;
    for _ in 0..5 {
        h.now += backoff;
        h.tick(1);
        assert_eq!(
            h.nodes[1].row.private_vote.term, 0,
            "no vote while the revoke is unconfirmed"
        );
    }
    assert!(h.nodes[1].counters().revokes_unconfirmed >= 4);
    // The writer left: the next retry confirms, then the vote proceeds.
    h.fail_revokes[1] = false;
    h.now += backoff;
    let retry = h.tick(1);
    assert!(retry.iter().any(|a| matches!(
        a,
        Action::SetAccess {
            region: RegionId::Log,
            access: Access::Revoked,
            ..
        }
    )));
    h.tick(1);
    // It votes now: for node 0, or for itself if its own election timer
    // fired while it waited (the time steps above are long).
    assert!(h.nodes[1].row.private_vote.term >= 1, "the vote proceeds");
}

/// Issue 12 item 2 (DARE §3.2.1, §3.2.3): a vote request in the current
/// term makes a voter revoke the leader it granted in that term before it
/// inspects its log, so that two members never hold write access to it.
#[test]
fn a_vote_request_in_the_current_term_revokes_the_granted_leader_first() {
    let mut h = Harness::new(3);
    h.elect_zero();
    assert_eq!(h.nodes[2].log_granted_to(), Some(MemberId(0)));
    // As if node 2 had missed the election and adopted the winner from its
    // heartbeat (it never voted in this term).
    h.nodes[2].row.private_vote = crate::sst::Ballot::default();
    // Its leader's process exits; node 1 asks for votes in the same term.
    h.nodes[2].handle_peer_down(h.now, MemberId(0));
    let term = h.nodes[2].term();
    let mut forged = h.nodes[1].row;
    forged.term = term;
    forged.vote_request = crate::sst::VoteRequest {
        term,
        last_index: 100,
        last_term: term,
    };
    let l = *h.nodes[2].layout();
    crate::sst::write_row_words(
        h.nodes[2].memory(),
        l.row(MemberId(1)),
        &forged.encode(1000),
    );
    let a = h.tick(2);
    assert!(
        a.contains(&Action::SetAccess {
            peer: MemberId(0),
            region: RegionId::Log,
            access: Access::Revoked
        }),
        "the granted leader is revoked before the log is inspected: {a:?}"
    );
    assert_eq!(h.nodes[2].log_granted_to(), None);
}

/// Issue 12 item 3: entries and the pointers above them may be placed out
/// of order; an entry below the commit pointer that has not arrived yet is
/// waited for, never treated as permanent corruption.
#[test]
fn an_entry_below_the_commit_pointer_that_lands_late_is_applied() {
    let mut h = Harness::new(3);
    let l = *h.nodes[1].layout();
    h.elect_zero();
    h.settle(3);
    let applied = h.nodes[1].apply_index();
    let ring = crate::log::Ring::new(&l.log);
    let pos = h.nodes[1].status().apply_pos;
    let at = ring.addr(ring.place(pos)).add(48);
    h.nodes[0]
        .submit_write(h.now, 4, 1, &set(b"late", b"v"))
        .unwrap();
    h.tick(0);
    // As if the pointers had been placed before the entry's last word.
    let good = h.nodes[1].memory().load_u64(at);
    h.nodes[1].memory().store_u64(at, !good);
    h.settle(3);
    assert_eq!(
        h.nodes[1].apply_index(),
        applied,
        "not applied while invalid"
    );
    h.now += h.nodes[1].cfg.leader_quorum_timeout_ns / 2;
    h.settle(2);
    // The rest of the placement lands.
    h.nodes[1].memory().store_u64(at, good);
    h.settle(2);
    assert_eq!(h.nodes[1].apply_index(), applied + 1);
    assert!(!h
        .events(1)
        .iter()
        .any(|e| matches!(e, Event::LogCorrupt { .. })));
    assert_eq!(
        h.nodes[1].state_machine().backend().get(b"late"),
        Some(&b"v"[..])
    );
}

/// §3.2: a server cannot vote twice in the same term.
#[test]
fn a_voter_never_votes_twice_in_a_term() {
    let mut h = Harness::new(3);
    h.settle(1);
    h.now = h.nodes[0].timers[Timer::Election as usize].unwrap();
    h.settle(3);
    let voted = h.nodes[1].row.private_vote;
    assert_eq!(voted.term, 1);
    // Node 2 asks for term 1 too (forged row, as if it raced node 0).
    let mut forged = h.nodes[2].row;
    forged.term = 1;
    forged.vote_request = crate::sst::VoteRequest {
        term: 1,
        last_index: 5,
        last_term: 9,
    };
    let l = *h.nodes[1].layout();
    crate::sst::write_row_words(
        h.nodes[1].memory(),
        l.row(MemberId(2)),
        &forged.encode(1000),
    );
    h.tick(1);
    h.tick(1);
    assert_eq!(
        h.nodes[1].row.private_vote, voted,
        "the first vote of the term stands"
    );
    assert_eq!(h.nodes[1].row.vote.member, Some(MemberId(0)));
}

/// §3.3.1 "Log adjustment": read the remote not-committed list (a), then
/// set the remote tail to the first non-matching entry (b).
#[test]
fn new_leader_reads_the_list_then_writes_the_remote_tail() {
    let mut h = Harness::new(3);
    let l = *h.nodes[0].layout();
    h.settle(1);
    h.now = h.nodes[0].timers[Timer::Election as usize].unwrap();
    let mut seen = Vec::new();
    for _ in 0..10 {
        for i in 0..3 {
            let a = h.tick(i);
            if i == 0 {
                seen.extend(posts(&a));
            }
        }
    }
    assert_eq!(h.nodes[0].role(), Role::Leader);
    let reads: Vec<_> = seen
        .iter()
        .filter(|(_, op)| matches!(op, Op::Read { .. }))
        .collect();
    let first = ADJUST_HEADER_BYTES + ADJUST_ITEMS_FIRST_READ * 16;
    for p in [MemberId(1), MemberId(2)] {
        assert!(reads.contains(&&(
            p,
            Op::Read {
                remote: l.adjust_header(),
                local: l.adjust_landing(p),
                len: first as u32
            }
        )));
        // (b): empty logs everywhere, so the remote tail goes to 0.
        assert!(
            seen.contains(&(p, Op::write_u64(l.log_tail(), 0))),
            "{p:?}: {seen:?}"
        );
    }
    let adjust_tail_at = seen
        .iter()
        .position(|x| x.1 == Op::write_u64(l.log_tail(), 0))
        .unwrap();
    let read_at = seen
        .iter()
        .position(|x| matches!(x.1, Op::Read { .. }))
        .unwrap();
    assert!(read_at < adjust_tail_at);
}

/// §3.3.1 "Direct log update": write the entries between the remote and
/// local tails (c), then the remote tail (d); commit at a majority; update
/// the remote commit pointer lazily (e).
#[test]
fn direct_log_update_writes_entries_then_tail_then_commit() {
    let mut h = Harness::new(3);
    let l = *h.nodes[0].layout();
    h.elect_zero();
    h.settle(3);
    let before = h.nodes[0].status();
    let payload = set(b"k", b"v");
    let r = h.nodes[0].submit_write(h.now, 9, 1, &payload).unwrap();
    assert_eq!(
        r,
        Submitted::Appended {
            index: before.tail_index
        }
    );
    let a = h.tick(0);
    let end = h.nodes[0].status().tail_pos;
    let ring = crate::log::Ring::new(&l.log);
    let span = Op::Write {
        local: ring.addr(before.tail_pos),
        remote: ring.addr(before.tail_pos),
        len: (end - before.tail_pos) as u32,
    };
    let p = posts(&a);
    for f in [MemberId(1), MemberId(2)] {
        let mine: Vec<Op> = p
            .iter()
            .filter(|(m, _)| *m == f)
            .map(|(_, op)| *op)
            .collect();
        assert_eq!(mine[0], span, "(c) entries first");
        assert_eq!(
            mine[1],
            Op::write_u64(l.log_tail(), end),
            "(d) then the tail"
        );
    }
    // Completions: commit advances, reply emitted, remote commit written.
    let a = h.tick(0);
    assert_eq!(h.nodes[0].status().commit_pos, end);
    let ev = h.events(0);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Reply {
                client_id: 9,
                request_id: 1,
                ..
            }
        )),
        "{ev:?}"
    );
    let p = posts(&a);
    for f in [MemberId(1), MemberId(2)] {
        assert!(
            p.contains(&(f, Op::write_u64(l.log_commit(), end))),
            "(e) lazy commit: {p:?}"
        );
    }
    // Followers apply once they see the commit pointer.
    h.settle(2);
    for f in 1..3 {
        assert_eq!(
            h.nodes[f].state_machine().backend().get(b"k"),
            Some(&b"v"[..])
        );
    }
}

/// §3.3 "Write requests": consecutive requests are batched into one
/// replication round; request ids make retries exactly-once.
#[test]
fn consecutive_writes_are_batched_and_retries_applied_once() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(3);
    let incr = |d| {
        let mut b = std::vec![0u8; 64];
        let n = KvOp::Incr {
            key: b"n",
            delta: d,
        }
        .encode(&mut b)
        .unwrap();
        b.truncate(n);
        b
    };
    h.nodes[0].submit_write(h.now, 1, 1, &incr(1)).unwrap();
    h.nodes[0].submit_write(h.now, 2, 1, &incr(10)).unwrap();
    // A retry of client 1's request before it is applied: appended again.
    h.nodes[0].submit_write(h.now, 1, 1, &incr(1)).unwrap();
    let a = h.tick(0);
    let entry_writes = posts(&a)
        .iter()
        .filter(|(p, op)| *p == MemberId(1) && matches!(op, Op::Write { .. }))
        .count();
    assert_eq!(entry_writes, 1, "three entries, one WRITE per follower");
    h.settle(3);
    assert_eq!(
        h.nodes[0].state_machine().backend().get(b"n"),
        Some(&b"11"[..]),
        "applied once"
    );
    // A retry after it was applied is answered from the session table.
    match h.nodes[0].submit_write(h.now, 1, 1, &incr(1)).unwrap() {
        Submitted::Duplicate { stage } => {
            let mut out = [0u8; 64];
            let n = h.nodes[0].copy_reply(stage, &mut out);
            assert_eq!(KvReply::from_bytes(&out[..n]), Some(KvReply::Int(1)));
        }
        other => panic!("expected a duplicate, got {other:?}"),
    }
    assert_eq!(
        h.nodes[0].submit_write(h.now, 2, 0, &incr(1)),
        Err(SubmitError::Stale)
    );
    assert_eq!(
        h.nodes[1].state_machine().backend().get(b"n"),
        Some(&b"11"[..])
    );
}

/// §3.3 "Read requests": before answering, the leader reads the term of
/// the other servers and applies every committed entry.
#[test]
fn reads_wait_for_a_majority_term_check() {
    let mut h = Harness::new(3);
    let l = *h.nodes[0].layout();
    h.elect_zero();
    h.settle(3);
    h.nodes[0].submit_read(h.now, 77).unwrap();
    h.nodes[0].submit_read(h.now, 78).unwrap();
    let a = h.tick(0);
    let reads: Vec<_> = posts(&a)
        .into_iter()
        .filter(|(_, op)| matches!(op, Op::Read { .. }))
        .collect();
    assert_eq!(
        reads,
        std::vec![
            (
                MemberId(1),
                Op::Read {
                    remote: l.row(MemberId(1)),
                    local: l.row_landing(MemberId(1)),
                    len: ROW_BYTES as u32
                }
            ),
            (
                MemberId(2),
                Op::Read {
                    remote: l.row(MemberId(2)),
                    local: l.row_landing(MemberId(2)),
                    len: ROW_BYTES as u32
                }
            ),
        ],
        "one term check for the whole batch"
    );
    assert!(!h
        .events(0)
        .iter()
        .any(|e| matches!(e, Event::ReadReady { .. })));
    h.tick(0);
    let ready: Vec<_> = h
        .events(0)
        .into_iter()
        .filter(|e| matches!(e, Event::ReadReady { .. }))
        .collect();
    assert_eq!(
        ready,
        std::vec![
            Event::ReadReady { token: 77 },
            Event::ReadReady { token: 78 }
        ]
    );
    // Followers refuse reads.
    assert_eq!(
        h.nodes[1].submit_read(h.now, 1),
        Err(SubmitError::NotLeader {
            leader: Some(MemberId(0))
        })
    );
}

/// §3.3 "an outdated leader cannot answer read requests": a term check
/// that finds a higher term makes the leader step down and abort reads.
#[test]
fn an_outdated_leader_aborts_its_reads() {
    let mut h = Harness::new(3);
    let l = *h.nodes[0].layout();
    h.elect_zero();
    h.settle(3);
    // Both followers moved on to term 5 (their own rows say so).
    for f in [1usize, 2] {
        let mut row = h.nodes[f].row;
        row.term = 5;
        crate::sst::write_row_words(
            h.nodes[f].memory(),
            l.row(MemberId(f as u8)),
            &row.encode(900),
        );
    }
    h.nodes[0].submit_read(h.now, 5).unwrap();
    h.tick(0);
    h.tick(0);
    assert_eq!(h.nodes[0].role(), Role::Follower);
    assert_eq!(h.nodes[0].term(), 5);
    assert!(h.events(0).contains(&Event::ReadAborted { token: 5 }));
}

/// §3.2.1 "Managing log access": once a follower revokes, the old leader's
/// writes fail and change nothing; the leader stops using that log.
#[test]
fn after_a_revoke_the_old_leaders_writes_do_not_land() {
    let mut h = Harness::new(3);
    let l = *h.nodes[0].layout();
    h.elect_zero();
    h.settle(3);
    // Follower 2 revokes (as if it became a candidate).
    h.access[2][0][RegionId::Log.index()] = Access::Revoked;
    let log_before: Vec<u8> = {
        let mut b = std::vec![0u8; l.log.region_bytes as usize];
        h.nodes[2]
            .memory()
            .read(Addr::new(RegionId::Log, 0), &mut b);
        b
    };
    h.nodes[0]
        .submit_write(h.now, 3, 1, &set(b"a", b"b"))
        .unwrap();
    h.tick(0);
    h.tick(0);
    let mut after = std::vec![0u8; l.log.region_bytes as usize];
    h.nodes[2]
        .memory()
        .read(Addr::new(RegionId::Log, 0), &mut after);
    assert_eq!(log_before, after, "nothing landed in the revoked log");
    assert_eq!(h.nodes[0].status().peers[2].repl, ReplState::Broken);
    // The write still commits with node 1 (a majority of 3).
    h.settle(2);
    assert_eq!(
        h.nodes[1].state_machine().backend().get(b"a"),
        Some(&b"b"[..])
    );
}

/// §4.2.2 "Leader failure detection": heartbeats every period; a follower
/// whose Δ check sees no progress suspects the leader and starts an
/// election; a heartbeat from an older term grows Δ.
#[test]
fn followers_suspect_a_silent_leader_and_grow_delta_on_stale_heartbeats() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(2);
    let hb0 = h.nodes[0].row.heartbeat.counter;
    h.now += h.nodes[0].cfg.heartbeat_period_ns;
    h.tick(0);
    assert_eq!(
        h.nodes[0].row.heartbeat.counter,
        hb0 + 1,
        "one heartbeat per period"
    );
    // The leader stops (a zombie keeps its memory but pushes nothing).
    h.down[0] = true;
    let delta = h.nodes[1].fd_period_ns;
    for _ in 0..4 {
        h.now += delta;
        h.tick(1);
        h.tick(2);
    }
    assert_ne!(
        h.nodes[1].leader(),
        Some(MemberId(0)),
        "suspected after Δ without heartbeats"
    );
    // Fast-forward to an election among 1 and 2.
    for _ in 0..40 {
        h.now += 100_000;
        h.tick(1);
        h.tick(2);
    }
    let leader = h.nodes[1].leader().expect("a new leader");
    assert_ne!(leader, MemberId(0));
    // The old leader's last heartbeat, still in the followers' tables, is
    // not evidence of anything: Δ stays.
    assert_eq!(
        (h.nodes[1].fd_period_ns, h.nodes[2].fd_period_ns),
        (delta, delta)
    );
    assert_eq!(h.nodes[1].counters().false_suspicions, 0);
    // It was only stopped: it runs again and its heartbeat (of the older
    // term) moves. The suspicion was false, and Δ grows at the followers
    // (eventual strong accuracy).
    h.down[0] = false;
    h.now += h.nodes[0].cfg.heartbeat_period_ns;
    h.tick(0);
    h.tick(1);
    h.tick(2);
    assert!(h.nodes[1].fd_period_ns > delta || h.nodes[2].fd_period_ns > delta);
    let counted: u64 = (1..3).map(|i| h.nodes[i].counters().false_suspicions).sum();
    assert!(counted >= 1, "a live leader was suspected");
    let (who, term, _) = h.nodes[1]
        .last_false_suspicion()
        .or(h.nodes[2].last_false_suspicion())
        .unwrap();
    assert_eq!((who, term), (MemberId(0), 1));
}

/// A stall of every member at once (the machine's CPU quota spent, a VM
/// paused) is not a leader failure: the followers' Δ checks run late, find
/// the leader's heartbeat where it was (the leader was stopped with them)
/// and give it a fresh window instead of deposing it. A leader stopped
/// alone is still suspected, within Δ of the followers running again.
#[test]
fn a_stall_of_every_member_keeps_the_leader_and_a_stall_of_the_leader_does_not() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(2);
    let term = h.nodes[0].term;
    let delta = h.nodes[1].fd_period_ns;
    let hb = h.nodes[0].cfg.heartbeat_period_ns;
    for stall in [3 * delta, 40 * delta, delta + delta / 2] {
        // Everyone stops; the followers happen to run first afterwards.
        h.now += stall;
        h.tick(1);
        h.tick(2);
        for i in 1..3 {
            assert_eq!(
                h.nodes[i].leader(),
                Some(MemberId(0)),
                "member {i} deposed the leader after a stall of {stall} ns of every member"
            );
        }
        // Then all run on, heartbeats timely: nothing changes.
        for _ in 0..(4 * delta / hb) {
            h.now += hb;
            h.tick(0);
            h.tick(1);
            h.tick(2);
        }
        assert_eq!(h.nodes[0].role(), Role::Leader);
        assert_eq!(h.nodes[0].term, term, "no election");
    }
    let forgiven: u64 = (1..3)
        .map(|i| h.nodes[i].counters().late_timeouts_forgiven)
        .sum();
    assert!(forgiven >= 3, "{forgiven}");
    assert_eq!(h.nodes[1].counters().false_suspicions, 0);
    // Now the leader alone stops; the followers keep running (ticks well
    // within Δ, so their checks are on time): suspected within Δ or so.
    h.down[0] = true;
    let stopped_at = h.now;
    while h.nodes[1].leader() == Some(MemberId(0)) {
        h.now += hb;
        h.tick(1);
        h.tick(2);
        assert!(
            h.now - stopped_at <= 2 * delta + hb,
            "a leader stopped alone was not suspected within 2Δ"
        );
    }
}

/// DARE §4.2.2 and issue 12 item 8: Δ grows on each false suspicion and
/// comes back down once heartbeats are timely again, halfway to its
/// configured value after every 32 timely checks, so that a burst of
/// load does not leave the group slow to notice a real failure.
#[test]
fn delta_grows_on_false_suspicions_and_comes_back_down() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(2);
    let base = h.nodes[1].cfg.fd_check_period_ns;
    let hb = h.nodes[0].cfg.heartbeat_period_ns;
    // The leader is slow (not stopped for good): each time its heartbeat
    // stands still for Δ the followers suspect it, then see it move on in
    // the same term and follow it again.
    for _ in 0..6 {
        h.now += h.nodes[1].fd_period_ns;
        h.tick(1);
        assert_eq!(h.nodes[1].leader(), None, "suspected");
        // Its overdue heartbeat goes out now, before any election.
        h.tick(0);
        h.tick(1);
        assert_eq!(h.nodes[1].leader(), Some(MemberId(0)), "trusted again");
    }
    let grown = h.nodes[1].fd_period_ns;
    assert_eq!(h.nodes[1].counters().false_suspicions, 6);
    assert_eq!(grown, base + 6 * h.nodes[1].cfg.fd_check_period_step_ns);
    // Timely heartbeats from now on: Δ comes back down step by step.
    let mut seen = std::vec![grown];
    for _ in 0..20_000 {
        h.now += hb;
        h.tick(0);
        h.tick(1);
        h.tick(2);
        if *seen.last().unwrap() != h.nodes[1].fd_period_ns {
            seen.push(h.nodes[1].fd_period_ns);
        }
        if h.nodes[1].fd_period_ns == base {
            break;
        }
    }
    assert_eq!(h.nodes[1].leader(), Some(MemberId(0)));
    assert_eq!(
        *seen.last().unwrap(),
        base,
        "back to the configured Δ: {seen:?}"
    );
    assert!(seen.windows(2).all(|w| w[1] < w[0]), "{seen:?}");
    assert_eq!(
        seen[1],
        base + (grown - base) / 2,
        "halfway after {} timely checks",
        crate::node::FD_TIMELY_CHECKS_TO_SHRINK
    );
    assert_eq!(
        h.nodes[1].counters().fd_period_shrinks,
        seen.len() as u64 - 1
    );
}

/// A leader reported dead (its process exited) is not followed again when
/// its last heartbeat, written just before it died, is observed only after
/// the notification: the followers elect a new leader at once instead of
/// waiting Δ for that heartbeat to go stale.
#[test]
fn a_leader_reported_dead_is_not_trusted_again_by_its_last_heartbeat() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(2);
    // The leader's last heartbeat lands in the followers' memory ...
    h.now += h.nodes[0].cfg.heartbeat_period_ns;
    h.tick(0);
    h.down[0] = true;
    // ... but they hear of its death before they look at their rows.
    for i in 1..3 {
        h.nodes[i].handle_peer_down(h.now, MemberId(0));
        assert_eq!(h.nodes[i].leader(), None, "member {i} suspects at once");
    }
    // Well within Δ, one of them leads.
    let delta = h.nodes[1].fd_period_ns;
    let mut elected = None;
    for _ in 0..40 {
        h.now += 20_000;
        h.tick(1);
        h.tick(2);
        for i in 1..3 {
            assert_ne!(
                h.nodes[i].leader(),
                Some(MemberId(0)),
                "member {i} follows the dead leader again"
            );
        }
        if let Some(l) = (1..3).find(|&i| h.nodes[i].role() == Role::Leader) {
            elected = Some(l);
            break;
        }
    }
    assert!(
        elected.is_some(),
        "a new leader within {} µs (Δ is {} µs)",
        40 * 20,
        delta / 1000
    );
}

/// §3.3.2 "Log pruning": the head follows the group's minimum apply pointer
/// through HEAD entries; a full log is reported, never overwritten.
#[test]
fn the_log_fills_up_and_pruning_frees_it() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(3);
    let big = set(b"k", &[b'x'; 64]);
    let mut full_at = None;
    for r in 1..1000u64 {
        match h.nodes[0].submit_write(h.now, 1, r, &big) {
            Ok(_) => {}
            Err(SubmitError::LogFull) => {
                full_at = Some(r);
                break;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    let full_at = full_at.expect("an 8 KiB ring fills up");
    assert!(h.events(0).contains(&Event::LogFull));
    // Replicate and apply everywhere, publish apply pointers, prune.
    for _ in 0..6 {
        h.now += h.nodes[0].cfg.apply_publish_period_ns;
        h.settle(2);
    }
    h.now += h.nodes[0].cfg.prune_period_ns;
    h.settle(2);
    assert!(h.nodes[0].counters().prunes >= 1);
    assert!(h.nodes[0].status().head_pos > 0);
    assert!(
        h.nodes[0].submit_write(h.now, 1, full_at, &big).is_ok(),
        "room again after pruning"
    );
    h.settle(3);
    // Followers moved their head when they applied the HEAD entry.
    assert!(h.nodes[1].status().head_pos > 0);
}

/// Derecho §3.2 / the brief: a reader never acts on a torn row. Half of a
/// vote request lands; the voter does nothing until the rest lands.
#[test]
fn a_half_written_vote_request_is_ignored() {
    let mut h = Harness::new(3);
    let l = *h.nodes[1].layout();
    h.settle(1);
    let mut req = h.nodes[2].row;
    req.term = 4;
    req.vote_request = crate::sst::VoteRequest {
        term: 4,
        last_index: 0,
        last_term: 0,
    };
    let words = req.encode(50);
    let at = l.row(MemberId(2));
    // The first half lands (head version included), the tail does not.
    for (k, w) in words.iter().enumerate().take(12) {
        h.nodes[1].memory().store_u64(at.add(8 * k as u64), *w);
    }
    let a = h.tick(1);
    assert!(
        a.is_empty()
            || posts(&a)
                .iter()
                .all(|(_, op)| !matches!(op, Op::Read { .. }))
    );
    assert_eq!(h.nodes[1].term(), 0, "a torn row is not acted on");
    assert!(h.nodes[1].counters().rows_rejected >= 1);
    for (k, w) in words.iter().enumerate().skip(12) {
        h.nodes[1].memory().store_u64(at.add(8 * k as u64), *w);
    }
    h.tick(1);
    assert_eq!(h.nodes[1].term(), 4, "the complete row is");
}

/// Completions from outside (stale, duplicated or forged ids) are ignored,
/// never trusted or panicked on.
#[test]
fn unknown_completions_are_ignored() {
    let mut h = Harness::new(3);
    h.elect_zero();
    let before = h.nodes[0].status();
    for id in [0u64, 1 << 40, u64::MAX, 5] {
        h.nodes[0].handle_completion(
            h.now,
            Completion {
                wr_id: WrId(id),
                peer: MemberId(1),
                status: WcStatus::Ok,
            },
        );
    }
    h.nodes[0].handle_completion(
        h.now,
        Completion {
            wr_id: WrId(3),
            peer: MemberId(7),
            status: WcStatus::Flushed,
        },
    );
    assert!(h.nodes[0].counters().completions_unknown >= 4);
    assert_eq!(h.nodes[0].role(), before.role);
}

/// Entries are validated when read: a corrupt committed entry stops the
/// apply loop (and is reported) instead of being applied.
#[test]
fn a_corrupt_committed_entry_is_never_applied() {
    let mut h = Harness::new(3);
    let l = *h.nodes[1].layout();
    h.elect_zero();
    h.settle(3);
    let applied = h.nodes[1].apply_index();
    h.nodes[0]
        .submit_write(h.now, 4, 1, &set(b"x", b"y"))
        .unwrap();
    h.tick(0);
    // Corrupt the entry in follower 1's ring before it applies it.
    let ring = crate::log::Ring::new(&l.log);
    let pos = h.nodes[1].status().apply_pos;
    let at = ring.addr(ring.place(pos)).add(56);
    h.nodes[1].memory().store_u64(at, 0xdead_beef);
    h.settle(3);
    assert_eq!(
        h.nodes[1].apply_index(),
        applied,
        "the bad entry was not applied"
    );
    assert!(
        !h.events(1)
            .iter()
            .any(|e| matches!(e, Event::LogCorrupt { .. })),
        "not reported at once: it may not have arrived yet"
    );
    // Still invalid after the grace: reported corrupt, still not applied.
    h.now += h.nodes[1].cfg.leader_quorum_timeout_ns;
    h.settle(2);
    assert_eq!(h.nodes[1].apply_index(), applied);
    assert!(h
        .events(1)
        .iter()
        .any(|e| matches!(e, Event::LogCorrupt { .. })));
    assert_eq!(h.nodes[1].state_machine().backend().get(b"x"), None);
    assert_eq!(
        h.nodes[2].state_machine().backend().get(b"x"),
        Some(&b"y"[..])
    );
}

/// §3.4 "Recovery": a member the leader can no longer bring up to date
/// (it was cut off while the log was pruned past it) asks a follower, never
/// the leader, for a snapshot, copies it with one-sided READs, restores
/// it, grants the leader its log again and is adjusted and replicated like
/// any follower: it ends with the same state and applies new writes.
#[test]
fn a_member_pruned_past_recovers_from_a_follower_snapshot() {
    recover_member_two(false, false);
}

/// §3.4 "Recovery" when no follower can give a snapshot: of 3 members one
/// is down and the other is the one pruned past. Asking only followers,
/// the group could never commit again (the leader alone is no majority);
/// the joiner asks the leader, restores its snapshot and the two commit.
#[test]
fn a_member_pruned_past_recovers_from_the_leader_when_no_follower_can() {
    recover_member_two(false, true);
}

/// §3.4 "Recovery", hostile memory: a snapshot whose bytes changed after
/// the donor checksummed them is never restored; the member asks again,
/// someone other than the donor that failed it (the leader, the only other
/// member), and restores a good one.
#[test]
fn a_corrupt_snapshot_is_never_restored() {
    recover_member_two(true, false);
}

/// §3.4 "Recovery" across a change of leader: the leader dies while the
/// joiner waits for its donor's snapshot. The joiner neither stands (it
/// cannot win: its log lacks what the leader pruned) nor votes (a vote
/// grants its log, which the restore replaces), and it does not give up
/// its copy: the donor needs no leader to give. Once restored it votes,
/// the donor becomes leader and brings it up to date. One snapshot, one
/// recovery. (A joiner that abandoned its copy whenever it lost sight of
/// the leader made the donor start over for every attempt, and one that
/// stood deposed working leaders: an election storm under
/// `verbatim-bench recovery`.)
#[test]
fn a_recovery_goes_on_across_a_change_of_leader() {
    let (mut h, request) = member_two_pruned_past();
    h.down[2] = false;
    // Until member 1 is asked for a snapshot.
    let mut asked = false;
    for _ in 0..2000 {
        h.now += 50_000;
        for i in 0..3 {
            h.tick(i);
            asked |= i == 1
                && h.events(i)
                    .iter()
                    .any(|e| matches!(e, Event::SnapshotWanted { .. }));
        }
        if asked {
            break;
        }
    }
    assert!(asked, "member 2 asked member 1");
    assert!(h.nodes[2].recovery_status().active);
    // The leader dies before the snapshot is written.
    h.down[0] = true;
    for i in [1, 2] {
        h.nodes[i].handle_peer_down(h.now, MemberId(0));
    }
    let mut candidate_two = false;
    for _ in 0..400 {
        h.now += 50_000;
        for i in [1, 2] {
            h.tick(i);
            h.events(i);
        }
        candidate_two |= h.nodes[2].role() != Role::Follower;
    }
    assert!(!candidate_two, "a joiner never stands");
    assert_eq!(
        h.nodes[1].role(),
        Role::Candidate,
        "no majority without the joiner's vote"
    );
    let status = h.nodes[2].recovery_status();
    assert!(
        status.active && status.abandoned == 0,
        "the copy goes on: {status:?}"
    );
    // The donor's host writes the snapshot now.
    assert!(h.nodes[1].write_snapshot().is_some());
    for _ in 0..2000 {
        h.now += 50_000;
        for i in [1, 2] {
            h.tick(i);
            for e in h.events(i) {
                assert!(
                    !matches!(e, Event::SnapshotWanted { .. }),
                    "one snapshot is enough"
                );
            }
        }
        candidate_two |= h.nodes[2].role() != Role::Follower;
        if h.nodes[1].role() == Role::Leader
            && h.nodes[2].apply_index() == h.nodes[1].apply_index()
            && h.nodes[1].status().peers[2].repl == ReplState::Replicating
        {
            break;
        }
    }
    assert!(!candidate_two, "a joiner never stands");
    assert_eq!(h.nodes[1].role(), Role::Leader);
    let status = h.nodes[2].recovery_status();
    assert_eq!((status.completed, status.abandoned), (1, 0), "{status:?}");
    assert!(!status.active);
    // The new leader commits with it: a write reaches both.
    h.nodes[1]
        .submit_write(h.now, 7, request, &set(b"after", b"failover"))
        .unwrap();
    for _ in 0..10 {
        h.now += 50_000;
        for i in [1, 2] {
            h.tick(i);
        }
    }
    assert_eq!(h.nodes[2].apply_index(), h.nodes[1].apply_index());
    assert_eq!(
        h.nodes[2].state_machine().backend(),
        h.nodes[1].state_machine().backend()
    );
}

/// A pre-vote from the table: a member whose log lacks entries a majority
/// of the voters applied cannot win, so it does not raise the term (which
/// would depose a working leader, or here delay the one that can win).
/// Member 2 was down while 0 and 1 committed; 0 dies as 2 returns: 2
/// times out first, gives its campaign up unpublished, and 1 wins the
/// very next term.
#[test]
fn a_member_that_cannot_win_does_not_raise_the_term() {
    let mut h = Harness::new(3);
    h.elect_zero();
    let term = h.nodes[0].term();
    h.down[2] = true;
    for k in 0..20u64 {
        let key = std::format!("k{k}");
        h.nodes[0]
            .submit_write(h.now, 7, k + 1, &set(key.as_bytes(), b"v"))
            .unwrap();
        h.now += 10_000;
        h.settle(3);
    }
    assert!(h.nodes[1].apply_index() > h.nodes[2].apply_index() + 10);
    // 2 returns and hears from everyone, but 0 can no longer write its
    // log (its access was lost): 2 stays behind. Then 0 dies; only 2
    // runs for a while.
    h.down[2] = false;
    h.access[2][0][RegionId::Log.index()] = Access::Revoked;
    for k in 0..5u64 {
        h.nodes[0]
            .submit_write(h.now, 7, 100 + k, &set(b"late", b"v"))
            .unwrap();
        // (Long enough for channels to 2, broken while it was away, to be
        // tried again.)
        h.now += 1_000_000;
        h.settle(3);
    }
    assert!(h.nodes[1].apply_index() > h.nodes[2].apply_index() + 10);
    h.down[0] = true;
    for _ in 0..400 {
        h.now += 20_000;
        h.tick(2);
        h.events(2);
    }
    assert!(
        h.nodes[2].counters().campaigns_forgone > 0,
        "2 timed out and gave up"
    );
    assert_eq!(h.nodes[2].term(), term);
    assert_eq!(
        h.nodes[2].published_row().term,
        term,
        "never published a higher term"
    );
    // Now 1 runs too: it stands and wins the next term.
    for _ in 0..400 {
        h.now += 20_000;
        for i in [1, 2] {
            h.tick(i);
            h.events(i);
        }
        if h.nodes[1].role() == Role::Leader && h.nodes[2].leader() == Some(MemberId(1)) {
            break;
        }
    }
    assert_eq!(h.nodes[1].role(), Role::Leader);
    assert_eq!(
        h.nodes[1].term(),
        term + 1,
        "the first election after 0 died won"
    );
    assert_eq!(h.nodes[2].leader(), Some(MemberId(1)));
}

/// Three members with snapshots on; member 2 is cut off (its memory is
/// unreachable, it does not run) while member 0 leads and writes until the
/// log was pruned past it. Returns the harness (member 2 still down) and
/// the next request id.
fn member_two_pruned_past() -> (Harness, u64) {
    member_two_pruned_past_with(|_| {})
}

/// [`member_two_pruned_past`] with every member's configuration adjusted
/// further by `tune`.
fn member_two_pruned_past_with(tune: impl Fn(&mut Config)) -> (Harness, u64) {
    let mut h = Harness::with(3, |c| {
        c.snapshot_bytes_max = 64 * 1024;
        c.snapshot_read_bytes = 512;
        // A few records per step: the restore takes many steps.
        c.snapshot_restore_step_bytes = 64;
        c.prune_grace_ns = 2_000_000;
        c.prune_period_ns = 500_000;
        tune(c);
    });
    h.elect_zero();
    h.down[2] = true;
    let mut request = 1;
    for round in 0..40u64 {
        for k in 0..8u64 {
            let key = std::format!("k{}", (round * 8 + k) % 23);
            let value = std::format!("v{round}-{k}");
            if h.nodes[0]
                .submit_write(h.now, 7, request, &set(key.as_bytes(), value.as_bytes()))
                .is_ok()
            {
                request += 1;
            }
        }
        h.now += 200_000;
        h.settle(3);
    }
    assert!(
        h.nodes[0].status().head_pos > 0,
        "the log was pruned past the silent member"
    );
    (h, request)
}

/// Member 2 is pruned past and recovers; with `follower_down`, member 1
/// (the only follower that could give) is down by then.
fn recover_member_two(corrupt_first: bool, follower_down: bool) {
    let (mut h, request) = member_two_pruned_past();
    // It comes back: the leader finds its log beyond repair and marks it.
    h.down[2] = false;
    let donor = if follower_down {
        h.down[1] = true;
        for i in [0, 2] {
            h.nodes[i].handle_peer_down(h.now, MemberId(1));
        }
        0
    } else {
        1
    };
    let mut served = 0;
    let mut recovered = None;
    let mut restoring_steps = 0;
    for _ in 0..4000 {
        h.now += 50_000;
        for i in 0..3 {
            if h.down[i] {
                continue;
            }
            let applied_before = h.nodes[i].apply_index();
            h.tick(i);
            let r = h.nodes[i].recovery_status();
            if r.bytes_restored > 0 {
                // Restoring in pieces: nothing applied, nothing given,
                // the row kept alive.
                restoring_steps += 1;
                assert!(r.bytes_restored <= r.bytes_total);
                assert!(
                    !h.nodes[i].state_intact(),
                    "a half-restored state is not used"
                );
                assert_eq!(h.nodes[i].apply_index(), applied_before);
                assert!(h.nodes[i].copying(), "no vote or grant while restoring");
            }
            for e in h.events(i) {
                match e {
                    Event::SnapshotWanted { .. } => {
                        // After the corrupt copy, the joiner asks someone
                        // else: here only the leader is left.
                        let expected = if corrupt_first && served >= 1 {
                            0
                        } else {
                            donor
                        };
                        assert_eq!(
                            i, expected,
                            "a follower gives when one can, else the leader"
                        );
                        assert!(h.nodes[i].write_snapshot().is_some());
                        served += 1;
                        if corrupt_first && served == 1 {
                            // A byte of the state machine's part flips.
                            let m = h.nodes[1].memory();
                            let at = h.nodes[1]
                                .layout()
                                .snapshot_payload(h.nodes[1].layout().sessions_bytes + 9);
                            let mut b = [0u8; 1];
                            m.read(at, &mut b);
                            b[0] ^= 0x20;
                            m.write(at, &b);
                        }
                    }
                    Event::Recovered { apply_index, .. } => {
                        assert_eq!(i, 2);
                        recovered = Some(apply_index);
                    }
                    _ => {}
                }
            }
        }
        if recovered.is_some()
            && h.nodes[2].apply_index() == h.nodes[0].apply_index()
            && h.nodes[0].status().peers[2].repl == ReplState::Replicating
        {
            break;
        }
    }
    assert!(served >= 1);
    let from = recovered.expect("member 2 restored a snapshot");
    assert!(from > 1, "the snapshot held applied entries");
    // Let the last entries appended meanwhile reach everyone.
    h.settle(8);
    assert_eq!(h.nodes[2].apply_index(), h.nodes[0].apply_index());
    assert_eq!(
        h.nodes[2].state_machine().backend(),
        h.nodes[0].state_machine().backend()
    );
    assert_eq!(
        h.nodes[0].published_row().recover_mask,
        0,
        "the mark is cleared"
    );
    // And it takes part again: a new write reaches it.
    h.nodes[0]
        .submit_write(h.now, 7, request, &set(b"after", b"recovery"))
        .unwrap();
    h.settle(6);
    assert_eq!(
        h.nodes[2]
            .state_machine()
            .backend()
            .0
            .get(&b"after"[..])
            .map(|v| v.as_slice()),
        Some(&b"recovery"[..])
    );
    assert_eq!(h.nodes[2].recovery_status().completed, 1);
    assert!(
        restoring_steps >= 2,
        "the restore took several steps ({restoring_steps})"
    );
    if corrupt_first {
        assert!(served >= 2, "asked again after the corrupt copy");
        assert!(h.nodes[2].recovery_status().abandoned >= 1);
    }
}

/// What a slow recovery of member 2 looked like to the leader's clients.
struct OutrunRun {
    /// Writes the leader refused for a full log while member 2 recovered.
    refused_full: u64,
    /// Writes it took meanwhile.
    accepted: u64,
    /// `RecoveryHoldReleased` events about member 2.
    released: u64,
    /// The leader's row told member 2 its restore came too late.
    outrun_told: bool,
    /// From member 2's first restore to its next copy (ns).
    restart_after_ns: Option<u64>,
    harness: Harness,
}

/// Member 2, pruned past, recovers with a slow restore (1 ms between
/// pieces of 64 bytes) while the leader takes a write every 100 µs,
/// more than its 8 KiB ring holds over the transfer. The writes stop once
/// the leader released member 2 (or after 400 steps); the run goes on
/// until member 2 is caught up and replicated to.
fn recover_member_two_while_writing(hold_percent: u8) -> OutrunRun {
    let (mut h, mut request) = member_two_pruned_past_with(|c| {
        c.snapshot_restore_pause_ns = 1_000_000;
        c.recovery_log_hold_percent = hold_percent;
    });
    h.down[2] = false;
    let mut run = OutrunRun {
        refused_full: 0,
        accepted: 0,
        released: 0,
        outrun_told: false,
        restart_after_ns: None,
        harness: Harness::new(1),
    };
    let mut writing_steps = 0;
    let mut first_restore_ns = None;
    let mut regranted = false;
    for _ in 0..20_000 {
        h.now += 100_000;
        let recovering = h.nodes[2].recovery_status().active
            || h.nodes[0].status().peers[2].repl == ReplState::NeedsRecovery;
        if recovering && run.released == 0 && writing_steps < 400 {
            writing_steps += 1;
            let key = std::format!("w{}", request % 13);
            match h.nodes[0].submit_write(h.now, 9, request, &set(key.as_bytes(), b"during")) {
                Ok(_) => {
                    run.accepted += 1;
                    request += 1;
                }
                Err(SubmitError::LogFull) => run.refused_full += 1,
                Err(e) => panic!("unexpected refusal {e:?}"),
            }
        }
        for i in 0..3 {
            h.tick(i);
            for e in h.events(i) {
                match e {
                    Event::SnapshotWanted { .. } => {
                        assert!(h.nodes[i].write_snapshot().is_some());
                    }
                    Event::RecoveryHoldReleased { peer, held_bytes } => {
                        assert_eq!((i, peer), (0, MemberId(2)));
                        assert!(held_bytes > 0);
                        run.released += 1;
                    }
                    Event::Recovered { .. } if i == 2 => {
                        first_restore_ns.get_or_insert(h.now);
                    }
                    _ => {}
                }
            }
        }
        run.outrun_told |=
            h.nodes[0].published_row().recover_mask & Row::outrun_bit(MemberId(2)) != 0;
        // After the first restore its request is withdrawn (the grant),
        // then made again for the second copy.
        let asking = h.nodes[2].published_row().snapshot_request.from.is_some();
        if let (Some(at), None) = (first_restore_ns, run.restart_after_ns) {
            if !asking {
                regranted = true;
            } else if regranted {
                run.restart_after_ns = Some(h.now - at);
            }
        }
        if !recovering
            && h.nodes[2].apply_index() == h.nodes[0].apply_index()
            && h.nodes[0].status().peers[2].repl == ReplState::Replicating
        {
            break;
        }
    }
    h.settle(8);
    assert_eq!(
        h.nodes[0].status().peers[2].repl,
        ReplState::Replicating,
        "member 2 rejoined"
    );
    assert_eq!(h.nodes[2].apply_index(), h.nodes[0].apply_index());
    assert_eq!(
        h.nodes[2].state_machine().backend(),
        h.nodes[0].state_machine().backend()
    );
    run.harness = h;
    run
}

/// Issue 13 (a held log that fills): a recovering member holds the log
/// back only up to `recovery_log_hold_percent` of the ring. Past it the
/// leader prunes past the member's snapshot, so no client write waits
/// for the transfer; the member, restored from a snapshot whose entries
/// are gone, is marked again and recovers a second time.
#[test]
fn a_recovery_outrun_by_the_log_recovers_again_and_no_write_waits() {
    let run = recover_member_two_while_writing(90);
    assert_eq!(run.refused_full, 0, "a write waited for the transfer");
    assert!(run.accepted > 40, "the writes went on ({})", run.accepted);
    assert_eq!(run.released, 1, "the leader released member 2 once");
    let h = &run.harness;
    assert_eq!(h.nodes[0].counters().recovery_holds_released, 1);
    assert_eq!(
        h.nodes[2].recovery_status().completed,
        2,
        "the outrun restore, then one from a newer snapshot"
    );
    // It was told, and went again at once: well within the window it
    // waits when nobody tells it (`2 × snapshot_wait_ns`).
    assert!(run.outrun_told);
    let again = run.restart_after_ns.expect("a second copy");
    assert!(
        again < h.nodes[2].cfg.snapshot_wait_ns,
        "the second copy started {again} ns after the first restore"
    );
    assert_eq!(
        h.nodes[0].published_row().recover_mask,
        0,
        "both bits cleared once it rejoined"
    );
}

/// The same with a hold of 100%: the member holds the log until it is
/// full, writes are refused until its transfer ends, and one recovery is
/// enough (the choice an operator makes for recovery over availability).
#[test]
fn a_full_hold_makes_writes_wait_for_the_transfer() {
    let run = recover_member_two_while_writing(100);
    assert!(
        run.refused_full > 0,
        "the log never filled: the test is void"
    );
    assert_eq!(run.released, 0);
    assert!(!run.outrun_told);
    assert_eq!(run.harness.nodes[2].recovery_status().completed, 1);
}

/// §3.2.3 "private data", and issue 12 item 6: a member that restarts with
/// empty memory reads its own row back from the others before it votes or
/// stands, adopts the vote its previous incarnation made reliable, and
/// therefore cannot vote a second time in that term; its next row is
/// numbered above every copy the others hold.
#[test]
fn a_restarted_member_reads_its_vote_back_and_never_votes_twice_in_a_term() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(3);
    let term = h.nodes[0].term();
    assert_eq!(
        h.nodes[1].published_row().private_vote,
        crate::sst::Ballot::new(term, MemberId(0))
    );
    let l = *h.nodes[1].layout();
    let (_, old_version) = crate::sst::Row::read(h.nodes[0].memory(), l.row(MemberId(1))).unwrap();
    // Member 1 restarts: a new process, its memory zeroed.
    let cfg = config(3, 1);
    h.nodes[1] = Node::new(
        cfg,
        TestMemory::new(&l),
        KvStateMachine::new(MapKv::default(), LIMITS),
        h.now,
    )
    .unwrap();
    h.cq[1].clear();
    assert!(!h.nodes[1].votes_known());
    // Member 2 asks for votes in the same term (a split vote).
    let mut forged = h.nodes[2].row;
    forged.term = term;
    forged.vote_request = crate::sst::VoteRequest {
        term,
        last_index: 1000,
        last_term: term,
    };
    crate::sst::write_row_words(
        h.nodes[1].memory(),
        l.row(MemberId(2)),
        &forged.encode(5000),
    );
    // Before its votes are read back it does nothing about the request.
    let first = h.tick(1);
    assert!(
        posts(&first)
            .iter()
            .all(|(_, op)| matches!(op, Op::Read { remote, .. } if *remote == l.row(MemberId(1)))),
        "only READs of its own row: {first:?}"
    );
    for _ in 0..6 {
        h.tick(1);
    }
    assert!(h.nodes[1].votes_known());
    assert_eq!(h.nodes[1].term(), term);
    let row = h.nodes[1].published_row();
    assert_eq!(
        row.private_vote,
        crate::sst::Ballot::new(term, MemberId(0)),
        "the vote of its previous incarnation"
    );
    assert_ne!(
        row.vote.member,
        Some(MemberId(2)),
        "no second vote in the term"
    );
    // Its pushes are accepted again: numbered above the copies.
    let (_, new_version) = crate::sst::Row::read(h.nodes[0].memory(), l.row(MemberId(1))).unwrap();
    assert!(new_version > old_version, "{new_version} > {old_version}");
}

/// §3.2.3 "private data": a member that comes back with empty memory reads
/// its row back from its peers' copies before it publishes anything,
/// takes its term and private vote from them, continues its row versions
/// above theirs, and neither votes nor stands until its log holds what it
/// may have acknowledged before; the leader, whose list nonce no longer
/// matches, adjusts its log afresh and refills it.
#[test]
fn a_restarted_member_reads_its_vote_back_and_is_refilled_before_it_votes() {
    let mut h = Harness::new(3);
    let l = *h.nodes[0].layout();
    h.elect_zero();
    h.settle(3);
    for k in 0..3u64 {
        h.nodes[0]
            .submit_write(h.now, 9, k + 1, &set(b"k", b"v"))
            .unwrap();
        h.settle(3);
    }
    assert_eq!(
        h.nodes[2].state_machine().backend().get(b"k"),
        Some(&b"v"[..])
    );
    let voted = h.nodes[2].published_row();
    assert_eq!(voted.private_vote, crate::sst::Ballot::new(1, MemberId(0)));
    let old_version = h.nodes[2].row_version;
    let adjustments = h.nodes[0].counters().adjustments;

    // Node 2 dies: the leader's next log WRITE to it fails (its channel
    // breaks while it was replicating).
    h.down[2] = true;
    h.nodes[0]
        .submit_write(h.now, 9, 4, &set(b"k", b"w"))
        .unwrap();
    h.settle(2);
    // It comes back with empty memory.
    h.restart(2);
    let first = h.tick(2);
    assert!(!h.nodes[2].votes_known());
    let reads: Vec<(MemberId, Op)> = posts(&first);
    assert_eq!(reads.len(), 2, "its row's copy at P - q + 1 = 2 peers");
    for (_, op) in &reads {
        let Op::Read { remote, .. } = *op else {
            panic!("only READs before the row is read back: {first:?}");
        };
        assert_eq!(remote, l.row(MemberId(2)));
    }
    h.tick(2);
    assert!(h.nodes[2].votes_known());
    assert_eq!(h.nodes[2].term(), 1);
    let back = h.nodes[2].published_row();
    assert_eq!(back.private_vote, voted.private_vote, "its vote read back");
    assert_eq!(back.vote, voted.vote);
    assert!(h.nodes[2].row_version > old_version + crate::node::RESTART_VERSION_GAP - 1);
    assert!(
        !h.nodes[2].can_vote(),
        "its log may lack what it acknowledged"
    );
    assert_eq!(h.nodes[2].counters().restarts_read_back, 1);
    // Its peers take its new rows (versions continue above theirs).
    h.settle(1);
    assert_eq!(h.nodes[0].sst.version(MemberId(2)), h.nodes[2].row_version);
    // It follows the leader's heartbeat and grants it its log again: the
    // same grant as before the restart, in the same term.
    // (A heartbeat seen for the first time is not news of a live leader:
    // it follows once the next one moves.)
    for _ in 0..3 {
        h.now += h.nodes[0].config().heartbeat_period_ns;
        h.settle(2);
    }
    assert_eq!(h.nodes[2].log_granted_to(), Some(MemberId(0)));
    assert_eq!(
        h.nodes[0].peer_row(MemberId(2)).grant,
        crate::sst::Ballot::new(1, MemberId(0))
    );

    // The leader reconnects, reads the list header, finds a new nonce and
    // adjusts afresh (resuming at the position it had would write entries
    // into a log that lacks everything below): the member's log is refilled
    // from the start and it applies everything again, then it may vote.
    h.now += 4 * h.nodes[0].config().reconnect_backoff_ns;
    h.settle(12);
    assert!(h.nodes[0].counters().adjustments > adjustments);
    h.nodes[0]
        .submit_write(h.now, 9, 5, &set(b"k", b"x"))
        .unwrap();
    h.settle(6);
    assert_eq!(
        h.nodes[2].state_machine().backend().get(b"k"),
        Some(&b"x"[..])
    );
    assert_eq!(h.nodes[2].apply_index(), h.nodes[0].apply_index());
    assert!(
        h.nodes[2].can_vote(),
        "caught up past the leader's last index"
    );
}

/// §3.3.1: a leader whose log channel to a follower broke (a lost
/// acknowledgement) resumes where it knows the entries landed when the
/// follower's list header is still the one it adjusted from: the log it
/// wrote to is still there, and re-adjusting from a stale list could
/// remove entries counted as committed.
#[test]
fn a_broken_log_channel_resumes_without_readjusting_when_the_list_is_unchanged() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(3);
    let adjustments = h.nodes[0].counters().adjustments;
    h.down[2] = true;
    h.nodes[0]
        .submit_write(h.now, 9, 1, &set(b"k", b"v"))
        .unwrap();
    h.settle(2);
    h.down[2] = false;
    h.now += 4 * h.nodes[0].config().reconnect_backoff_ns;
    h.settle(6);
    assert_eq!(h.nodes[0].counters().adjustments, adjustments, "resumed");
    h.nodes[0]
        .submit_write(h.now, 9, 2, &set(b"k", b"w"))
        .unwrap();
    h.settle(6);
    assert_eq!(
        h.nodes[2].state_machine().backend().get(b"k"),
        Some(&b"w"[..])
    );
}

/// §3.3.1 after a restart: an idle leader posts nothing to a follower that
/// restarted with empty memory, so no write of its fails; it learns from
/// the follower's row, which no longer grants it the log, and adjusts the
/// new log afresh once it is granted again (instead of writing at the old
/// position into a log that lacks everything below).
#[test]
fn an_idle_leader_adjusts_a_restarted_follower_afresh() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(3);
    h.nodes[0]
        .submit_write(h.now, 9, 1, &set(b"k", b"v"))
        .unwrap();
    h.settle(4);
    assert_eq!(
        h.nodes[2].state_machine().backend().get(b"k"),
        Some(&b"v"[..])
    );
    let adjustments = h.nodes[0].counters().adjustments;
    h.restart(2);
    h.start_all();
    for _ in 0..6 {
        h.now += h.nodes[0].config().heartbeat_period_ns;
        h.settle(2);
    }
    assert!(
        h.nodes[0].counters().adjustments > adjustments,
        "adjusted afresh"
    );
    h.nodes[0]
        .submit_write(h.now, 9, 2, &set(b"k", b"w"))
        .unwrap();
    h.settle(6);
    assert_eq!(
        h.nodes[2].state_machine().backend().get(b"k"),
        Some(&b"w"[..])
    );
    assert_eq!(h.nodes[2].apply_index(), h.nodes[0].apply_index());
}

// ----- reconfiguration (DARE §3.4) -----------------------------------------

use crate::membership::{ConfigState, Configuration};
use crate::node::{ReconfigError, ReconfigOp};

fn reconfigured(h: &mut Harness, i: usize) -> Option<Configuration> {
    h.events(i).into_iter().find_map(|e| match e {
        Event::Reconfigured { configuration, .. } => Some(configuration),
        _ => None,
    })
}

/// Removing a member is one CONFIG entry; once it commits every member
/// goes by it, the removed member is no longer replicated to, and a
/// majority is still counted in P (two of the three slots).
#[test]
fn removing_a_member_keeps_majorities_of_p() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(3);
    let c = h.nodes[0]
        .reconfigure(h.now, ReconfigOp::Remove(MemberId(2)))
        .unwrap();
    assert_eq!(c.active.count(), 2);
    assert_eq!(
        h.nodes[0].reconfigure(h.now, ReconfigOp::Remove(MemberId(1))),
        Err(ReconfigError::InProgress),
        "one at a time"
    );
    h.settle(6);
    let done = reconfigured(&mut h, 0).expect("the removal completes");
    assert_eq!(done, c);
    for i in 0..3 {
        assert_eq!(h.nodes[i].configuration(), c, "member {i}");
    }
    // Removing another would leave one of three slots: refused.
    assert!(matches!(
        h.nodes[0].reconfigure(h.now, ReconfigOp::Remove(MemberId(1))),
        Err(ReconfigError::Invalid(_))
    ));
    // The removed member is not needed for commits, the other one is.
    h.down[2] = true;
    let r = h.nodes[0]
        .submit_write(h.now, 9, 1, &set(b"k", b"v"))
        .unwrap();
    let Submitted::Appended { index } = r else {
        panic!("{r:?}")
    };
    h.settle(4);
    assert!(h.nodes[0].commit_index() > index, "committed by 0 and 1");
    h.down[1] = true;
    let r = h.nodes[0]
        .submit_write(h.now, 9, 2, &set(b"k", b"w"))
        .unwrap();
    let Submitted::Appended { index } = r else {
        panic!("{r:?}")
    };
    h.settle(4);
    assert!(
        h.nodes[0].commit_index() <= index,
        "one of three slots is no majority"
    );
}

/// Shrinking goes through a transitional configuration (both majorities)
/// to a stable one of the new size; adding a member to the full group
/// then goes through extended (it recovers, without a say), transitional
/// and stable again. Every member ends in the same configuration.
#[test]
fn shrinking_and_growing_go_through_the_intermediate_configurations() {
    let mut h = Harness::new(4);
    h.elect_zero();
    h.settle(3);
    let c = h.nodes[0]
        .reconfigure(h.now, ReconfigOp::Resize(3))
        .unwrap();
    assert_eq!(c.state, ConfigState::Transitional);
    let mut seen = std::vec![c];
    for _ in 0..12 {
        h.settle(1);
        let now = h.nodes[0].configuration();
        if *seen.last().unwrap() != now {
            seen.push(now);
        }
    }
    let stable3 = Configuration::initial(3);
    assert_eq!(seen, std::vec![c, stable3]);
    assert_eq!(reconfigured(&mut h, 0), Some(stable3));
    for i in 0..4 {
        assert_eq!(h.nodes[i].configuration(), stable3, "member {i}");
    }
    // Member 3 is outside the group: it never stands for election.
    assert!(!h.nodes[3].configuration().voters().contains(MemberId(3)));
    // Grow back: 3 is the next slot of the full group.
    let c = h.nodes[0]
        .reconfigure(h.now, ReconfigOp::Add(MemberId(3)))
        .unwrap();
    assert_eq!(c.state, ConfigState::Extended);
    let mut seen = std::vec![c];
    for _ in 0..20 {
        h.settle(1);
        let now = h.nodes[0].configuration();
        if *seen.last().unwrap() != now {
            seen.push(now);
        }
    }
    let states: Vec<ConfigState> = seen.iter().map(|c| c.state).collect();
    assert_eq!(
        states,
        [
            ConfigState::Extended,
            ConfigState::Transitional,
            ConfigState::Stable
        ]
    );
    assert_eq!(*seen.last().unwrap(), Configuration::initial(4));
    for i in 0..4 {
        assert_eq!(
            h.nodes[i].configuration(),
            Configuration::initial(4),
            "member {i}"
        );
    }
    assert_eq!(h.nodes[0].role(), Role::Leader);
    assert_eq!(h.nodes[0].term, 1, "no election on the way");
}

/// DARE §3.4: a leader outside the new group removes itself once the
/// operation completes; the rest elect a leader among themselves, and the
/// removed member does not stand.
#[test]
fn a_leader_that_removes_itself_steps_down_and_the_rest_elect() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(3);
    h.nodes[0]
        .reconfigure(h.now, ReconfigOp::Remove(MemberId(0)))
        .unwrap();
    h.settle(6);
    assert_ne!(h.nodes[0].role(), Role::Leader, "stepped down");
    for _ in 0..200 {
        h.now += 50_000;
        h.settle(1);
        assert_ne!(
            h.nodes[0].role(),
            Role::Candidate,
            "a removed member does not stand"
        );
        if [1, 2].iter().any(|&i| h.nodes[i].role() == Role::Leader) {
            break;
        }
    }
    let leader = (1..3)
        .find(|&i| h.nodes[i].role() == Role::Leader)
        .expect("a new leader");
    let r = h.nodes[leader]
        .submit_write(h.now, 9, 1, &set(b"k", b"v"))
        .unwrap();
    let Submitted::Appended { index } = r else {
        panic!("{r:?}")
    };
    h.settle(4);
    assert!(h.nodes[leader].commit_index() > index);
}

/// What does not fit is refused with a reason, and nothing is appended.
#[test]
fn reconfigurations_that_do_not_fit_are_refused() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(3);
    assert!(matches!(
        h.nodes[1].reconfigure(h.now, ReconfigOp::Remove(MemberId(2))),
        Err(ReconfigError::NotLeader {
            leader: Some(MemberId(0))
        })
    ));
    let tail = h.nodes[0].status().tail_index;
    for op in [
        ReconfigOp::Add(MemberId(1)),
        ReconfigOp::Add(MemberId(3)), // beyond the members laid out
        ReconfigOp::Resize(3),
        ReconfigOp::Resize(5),
        ReconfigOp::Resize(0),
        ReconfigOp::Remove(MemberId(4)),
    ] {
        assert!(
            matches!(
                h.nodes[0].reconfigure(h.now, op),
                Err(ReconfigError::Invalid(_))
            ),
            "{op:?}"
        );
    }
    assert_eq!(h.nodes[0].status().tail_index, tail);
}

/// Zombies (DARE §3.3.2), when `zombie_remove_ns` is set: a member that
/// falls silent is removed by a CONFIG entry and marked away; the group
/// commits without it (two of three slots); once it runs again (its row
/// moves) the leader adds it back and it catches up.
#[test]
fn a_silent_member_is_removed_and_added_back_when_it_returns() {
    let mut h = Harness::with(3, |c| {
        c.prune_grace_ns = 2_000_000;
        c.zombie_remove_ns = 4_000_000;
    });
    h.elect_zero();
    h.settle(3);
    h.down[2] = true;
    let stopped_at = h.now;
    let mut removed_at = None;
    for _ in 0..200 {
        h.now += 100_000;
        h.settle(2);
        if h.nodes[0].configuration().away.contains(MemberId(2)) {
            removed_at = Some(h.now);
            break;
        }
    }
    let removed_at = removed_at.expect("the silent member is removed");
    assert!(
        removed_at - stopped_at > h.nodes[0].config().zombie_remove_ns,
        "not before it was silent for zombie_remove_ns"
    );
    let c = h.nodes[0].configuration();
    assert!(!c.active.contains(MemberId(2)));
    assert_eq!(h.nodes[0].counters().zombies_removed, 1);
    h.settle(4);
    assert_eq!(h.nodes[1].configuration(), c, "the follower goes by it");
    let r = h.nodes[0]
        .submit_write(h.now, 9, 1, &set(b"k", b"v"))
        .unwrap();
    let Submitted::Appended { index } = r else {
        panic!("{r:?}")
    };
    h.settle(4);
    assert!(h.nodes[0].commit_index() > index, "committed without it");
    // It runs again: its row moves, and the leader adds it back.
    h.down[2] = false;
    let mut back = false;
    for _ in 0..200 {
        h.now += 100_000;
        h.settle(2);
        let c = h.nodes[0].configuration();
        if c.active.contains(MemberId(2)) && c.away == MemberMask::NONE {
            back = true;
            break;
        }
    }
    assert!(back, "the member that returned is added back");
    assert_eq!(h.nodes[0].counters().zombies_readded, 1);
    // It may campaign first (it heard no leader while away); its log is
    // behind, so a member that has the write leads, and it catches up.
    for _ in 0..400 {
        if h.nodes[2].state_machine().backend().get(b"k") == Some(&b"v"[..]) {
            break;
        }
        h.now += 100_000;
        h.settle(2);
    }
    let leader = (0..3)
        .find(|&i| h.nodes[i].role() == Role::Leader)
        .expect("a leader");
    let st = h.nodes[leader].status();
    assert_eq!(
        h.nodes[2].state_machine().backend().get(b"k"),
        Some(&b"v"[..]),
        "it caught up: {:?} / {:?} role {:?} term {}",
        st.peers[2],
        h.nodes[2].configuration(),
        h.nodes[2].role(),
        h.nodes[2].term()
    );
    assert_eq!(h.nodes[2].configuration(), h.nodes[leader].configuration());
}

/// Without `zombie_remove_ns` (the default) a silent member stays in the
/// group however long it is silent.
#[test]
fn a_silent_member_stays_without_zombie_removal() {
    let mut h = Harness::with(3, |c| c.prune_grace_ns = 2_000_000);
    h.elect_zero();
    h.settle(3);
    h.down[2] = true;
    for _ in 0..200 {
        h.now += 100_000;
        h.settle(2);
    }
    assert_eq!(h.nodes[0].configuration(), Configuration::initial(3));
    assert_eq!(h.nodes[0].counters().zombies_removed, 0);
}

/// A leader that loses leadership in the middle of a change forgets it:
/// when it leads again it can change the group again (swarm seed 4015: a
/// stale change blocked every later one, zombies were never added back).
#[test]
fn a_change_cut_short_does_not_block_the_next_leadership() {
    let mut h = Harness::new(3);
    h.elect_zero();
    h.settle(3);
    // The change starts but never leaves member 0.
    h.down[0] = true;
    h.nodes[0]
        .reconfigure(h.now, ReconfigOp::Remove(MemberId(2)))
        .unwrap();
    assert!(h.nodes[0].reconfiguring());
    // Member 1 leads meanwhile.
    let mut led = false;
    for _ in 0..400 {
        h.now += 100_000;
        h.settle(1);
        if h.nodes[1].role() == Role::Leader || h.nodes[2].role() == Role::Leader {
            led = true;
            break;
        }
    }
    assert!(led, "a new leader");
    // Member 0 returns as a follower; its change is gone with its term.
    h.down[0] = false;
    for _ in 0..50 {
        h.now += 100_000;
        h.settle(1);
    }
    assert_ne!(h.nodes[0].role(), Role::Leader);
    assert!(
        !h.nodes[0].reconfiguring(),
        "the change left with the leadership"
    );
    // Its log is adjusted to the leader's: the entry of the change is gone
    // (the walk of the log before it would vote or campaign finds it so).
    let leader = (1..3).find(|&i| h.nodes[i].role() == Role::Leader).unwrap();
    h.nodes[leader]
        .submit_write(h.now, 9, 1, &set(b"k", b"v"))
        .unwrap();
    for _ in 0..50 {
        h.now += 100_000;
        h.settle(1);
    }
    assert_eq!(
        h.nodes[0].state_machine().backend().get(b"k"),
        Some(&b"v"[..])
    );
    assert_eq!(
        h.nodes[0].applied_configuration(),
        Configuration::initial(3)
    );
}

/// A follower far behind is caught up in batches of at most
/// `log_batch_bytes_max` (whole entries): one WRITE of the whole backlog
/// stalled the leader's loop for seconds on the shared-memory fabric, whose
/// WRITEs are the poster's own copies (found by `verbatim-bench recovery`
/// after a 1 GiB restore).
#[test]
fn a_far_behind_follower_is_caught_up_in_bounded_batches() {
    let cap = 4096u64;
    let mut h = Harness::with(3, |c| {
        c.log_batch_bytes_max = cap;
        c.log_ring_bytes = 256 * 1024;
        c.prune_grace_ns = 1_000_000_000;
        // Member 2 must not suspect the leader when it runs again.
        c.fd_check_period_ns = 1_000_000_000;
        c.fd_check_period_max_ns = 1_000_000_000;
        c.leader_quorum_timeout_ns = 1_000_000_000;
    });
    h.elect_zero();
    h.settle(3);
    // Member 2 stops reading and answering; the leader commits with 1.
    h.down[2] = true;
    let value = [b'v'; 32];
    let mut request = 1;
    for round in 0..60u64 {
        for k in 0..6u64 {
            let key = std::format!("k{}", round * 6 + k);
            if h.nodes[0]
                .submit_write(h.now, 7, request, &set(key.as_bytes(), &value))
                .is_ok()
            {
                request += 1;
            }
        }
        h.now += 100_000;
        h.settle(2);
        // (Replies are events: a leader whose events nobody takes stops
        // applying, its queue being bounded.)
        h.events(0);
    }
    let backlog = h.nodes[0].status().tail_pos;
    assert!(
        backlog > 4 * cap,
        "a backlog of several batches ({backlog} bytes)"
    );
    h.down[2] = false;
    let entry_max = crate::log::entry_bytes(h.nodes[0].cfg.entry_payload_bytes_max);
    let mut batches = 0;
    for _ in 0..4000 {
        h.now += 50_000;
        for i in 0..3 {
            for a in h.tick(i) {
                if let Action::Post(wr) = a {
                    if let Op::Write { remote, len, .. } = wr.op {
                        if remote.region == RegionId::Log {
                            assert!(
                                u64::from(len) < cap + entry_max,
                                "a batch of {len} bytes, over the cap"
                            );
                            if wr.peer == MemberId(2) {
                                batches += 1;
                            }
                        }
                    }
                }
            }
        }
        for i in 0..3 {
            h.events(i);
        }
        let done = (0..3).map(|i| h.nodes[i].commit_index()).max().unwrap();
        if (0..3).all(|i| h.nodes[i].apply_index() == done) {
            break;
        }
    }
    let applied: std::vec::Vec<u64> = (0..3).map(|i| h.nodes[i].apply_index()).collect();
    assert!(
        applied.iter().all(|&a| a == applied[0]) && applied[0] >= backlog / 200,
        "everyone caught up: {applied:?}"
    );
    assert!(batches >= 4, "the backlog took several batches ({batches})");
    assert_eq!(
        h.nodes[2].state_machine().backend(),
        h.nodes[0].state_machine().backend()
    );
}

/// Three members in primary-backup mode (50 µs leases, snapshots of
/// `snapshot_bytes_max`), started, every one following view 1, which
/// names member 0 primary of all three.
fn primary_backup_group(snapshot_bytes_max: u64) -> (Harness, crate::views::View) {
    let mut h = Harness::with(3, |c| {
        c.mode = crate::config::Mode::PrimaryBackup;
        c.lease_ns = 50_000;
        c.snapshot_bytes_max = snapshot_bytes_max;
    });
    h.start_all();
    h.settle(4);
    let view = crate::views::View {
        leader: MemberId(0),
        log_term: 1,
        lease_ns: 50_000,
        members: 0b111,
    };
    for i in 0..3 {
        h.nodes[i].follow_view(h.now, 1, view);
    }
    (h, view)
}

/// Primary-backup mode (uKharon-KV §7.3, issue 14): the primary leads by a
/// view (no election), an entry commits only once every member of the view
/// holds it, the primary asks for a view without a member reported dead,
/// and commits go on once that view is followed.
#[test]
fn primary_backup_commits_with_every_member_of_the_view() {
    let (mut h, view) = primary_backup_group(0);
    assert_eq!(h.nodes[0].known_new_process(), Some(true));
    // Named primary, it leads once its lease on the view is active.
    assert_eq!(h.nodes[0].pb_want(), (Some(view), 1));
    h.settle(2);
    assert_ne!(h.nodes[0].role(), Role::Leader, "not before its lease");
    let lease_end = h.now + 40_000;
    h.nodes[0].set_read_lease(1, lease_end);
    h.nodes[0].clear_commit(1);
    h.settle(8);
    assert_eq!(h.nodes[0].role(), Role::Leader);
    assert_eq!(h.nodes[0].counters().view_takeovers, 1);
    for i in 1..3 {
        assert_eq!(h.nodes[i].leader(), Some(MemberId(0)));
    }
    // Every member holds the write: it commits.
    h.nodes[0]
        .submit_write(h.now, 9, 1, &set(b"a", b"1"))
        .unwrap();
    h.settle(3);
    let committed = h.nodes[0].status().commit_pos;
    assert_eq!(committed, h.nodes[0].status().tail_pos);
    h.events(0);
    // Member 2 is gone: a majority holds the next write, not the view.
    h.down[2] = true;
    h.nodes[0]
        .submit_write(h.now, 9, 2, &set(b"b", b"2"))
        .unwrap();
    h.settle(3);
    assert_eq!(h.nodes[0].status().commit_pos, committed, "needs member 2");
    assert!(!h
        .events(0)
        .iter()
        .any(|e| matches!(e, Event::Reply { request_id: 2, .. })));
    // Reported dead, the primary asks for a view without it ...
    h.nodes[0].handle_peer_down(h.now, MemberId(2));
    h.tick(0);
    let (want, base) = h.nodes[0].pb_want();
    let want = want.expect("a view without member 2");
    assert_eq!(
        (want.members, want.leader, want.log_term, base),
        (0b011, MemberId(0), 1, 1)
    );
    // ... and once it is decided, the write commits without member 2.
    h.nodes[0].follow_view(h.now, 2, want);
    h.nodes[1].follow_view(h.now, 2, want);
    h.settle(3);
    assert!(h.nodes[0].status().commit_pos > committed);
    assert!(h
        .events(0)
        .iter()
        .any(|e| matches!(e, Event::Reply { request_id: 2, .. })));
    // Member 2 is back and catches up: the primary asks to add it, and
    // from then on commits wait for it too.
    h.down[2] = false;
    h.nodes[0].handle_peer_up(h.now, MemberId(2));
    for _ in 0..40 {
        h.now += 10_000;
        h.settle(1);
        if h.nodes[0].pb_want().0.is_some_and(|w| w.members == 0b111) {
            break;
        }
    }
    assert_eq!(h.nodes[0].pb_want().0.map(|w| w.members), Some(0b111));
    assert!(h.nodes[0].pb_commit_members().contains(MemberId(2)));
    // Gone again before that view is decided: it stays in the view asked
    // for (a proposal carrying it may still be decided) ...
    h.down[2] = true;
    h.nodes[0].handle_peer_down(h.now, MemberId(2));
    assert_eq!(h.nodes[0].pb_want().0.map(|w| w.members), Some(0b111));
    // ... and once that view is decided, the next one drops it.
    let with_2 = h.nodes[0].pb_want().0.unwrap();
    h.nodes[0].follow_view(h.now, 3, with_2);
    h.tick(0);
    assert_eq!(h.nodes[0].pb_want().0.map(|w| w.members), Some(0b011));
    // Nobody ran an election.
    h.now += 10_000_000;
    h.settle(3);
    assert!(h.nodes.iter().all(|n| n.counters().elections_started == 0));
}

/// Primary-backup speculation (uKharon-KV §7.3): the primary executes a
/// write while it waits for its members, holds the reply (and every read)
/// until the write commits, and, deposed with a write executed ahead,
/// counts its state machine as lost.
#[test]
fn a_primary_executes_ahead_and_holds_replies_until_they_commit() {
    use crate::kv::KvBackend;
    use crate::views::View;
    let (mut h, view) = primary_backup_group(1 << 16);
    h.settle(2);
    h.nodes[0].set_read_lease(1, h.now + 40_000);
    h.nodes[0].clear_commit(1);
    h.settle(8);
    assert_eq!(h.nodes[0].role(), Role::Leader);
    h.events(0);
    // Member 2 is gone: the write cannot commit, but it is executed.
    h.down[2] = true;
    h.nodes[0]
        .submit_write(h.now, 9, 1, &set(b"a", b"1"))
        .unwrap();
    h.settle(3);
    assert_eq!(h.nodes[0].counters().operations_speculated, 1);
    assert_eq!(
        h.nodes[0].state_machine().backend().get(b"a"),
        Some(&b"1"[..]),
        "executed ahead of its commit"
    );
    assert!(!h.nodes[0].state_machine_current());
    h.nodes[0].submit_read(h.now, 77).unwrap();
    // A retry is not answered from the session table: it goes into the
    // log (and is answered once committed, as a duplicate).
    assert!(matches!(
        h.nodes[0].submit_write(h.now, 9, 1, &set(b"a", b"1")),
        Ok(Submitted::Appended { .. })
    ));
    h.settle(3);
    let early = h.events(0);
    assert!(
        !early
            .iter()
            .any(|e| matches!(e, Event::Reply { .. } | Event::ReadReady { .. })),
        "no reply, no read before the commit: {early:?}"
    );
    // A view without member 2: the write commits, the reply and the read
    // go out, the state machine is the committed one.
    let without_2 = View {
        members: 0b011,
        ..view
    };
    h.nodes[0].follow_view(h.now, 2, without_2);
    h.nodes[1].follow_view(h.now, 2, without_2);
    h.nodes[0].set_read_lease(1, h.now + 40_000);
    h.settle(4);
    let late = h.events(0);
    assert!(late
        .iter()
        .any(|e| matches!(e, Event::Reply { request_id: 1, .. })));
    assert!(late
        .iter()
        .any(|e| matches!(e, Event::ReadReady { token: 77 })));
    assert!(h.nodes[0].state_machine_current());
    assert_eq!(h.nodes[0].counters().speculation_rollbacks, 0);
    // Member 1 is gone too: the next write is executed ahead and never
    // commits; a view naming member 1 primary in a higher term deposes
    // member 0, which rolls back.
    h.down[1] = true;
    h.nodes[0]
        .submit_write(h.now, 9, 2, &set(b"b", b"2"))
        .unwrap();
    h.settle(3);
    // (The retry above waited behind the read: it was applied once
    // committed, not executed ahead.)
    assert_eq!(h.nodes[0].counters().operations_speculated, 2);
    let deposed = View {
        leader: MemberId(1),
        log_term: 2,
        lease_ns: 50_000,
        members: 0b011,
    };
    h.nodes[0].follow_view(h.now, 3, deposed);
    h.tick(0);
    assert_ne!(h.nodes[0].role(), Role::Leader);
    assert_eq!(h.nodes[0].counters().speculation_rollbacks, 1);
    assert!(
        !h.nodes[0].state_machine_current(),
        "its state machine holds a write that never committed"
    );
    assert!(!h.nodes[0].pb_may_take_over());
    assert!(!h
        .events(0)
        .iter()
        .any(|e| matches!(e, Event::Reply { request_id: 2, .. })));
    // It follows member 1, and grants it its log only once a snapshot
    // replaced its state (here member 1 can give one at once: it applied
    // as far, so the copy starts; see `run_duty` for a deposed primary
    // ahead of every donor).
    h.down[1] = false;
    h.settle(4);
    assert_eq!(h.nodes[0].leader(), Some(MemberId(1)));
    assert_ne!(h.nodes[0].log_granted_to(), Some(MemberId(1)));
}

/// Issue 14 item 1 (uKharon §4.2): a stalled heartbeat counter of the
/// leader is a suspicion like Δ of silence: the follower drops its leader
/// and a member stands for the next term; a stalled follower, or a stall
/// seen by the leader, changes nothing.
#[test]
fn a_leader_whose_counter_stalls_is_suspected_and_replaced() {
    let mut h = Harness::new(3);
    h.elect_zero();
    let term = h.nodes[1].term();
    // A stalled follower is not the leader: nothing to suspect.
    h.nodes[1].handle_peer_stalled(h.now, MemberId(2));
    h.nodes[0].handle_peer_stalled(h.now, MemberId(1));
    assert_eq!(h.nodes[1].leader(), Some(MemberId(0)));
    assert_eq!(h.nodes[0].role(), Role::Leader);
    assert_eq!(h.nodes[1].counters().counter_suspicions, 0);
    // The leader stops running (its memory still answers).
    h.down[0] = true;
    for i in [1, 2] {
        h.nodes[i].handle_peer_stalled(h.now, MemberId(0));
        assert_eq!(h.nodes[i].leader(), None, "member {i} suspects");
        assert_eq!(h.nodes[i].counters().counter_suspicions, 1);
    }
    let mut new_leader = None;
    for _ in 0..400 {
        h.now += 50_000;
        for i in [1, 2] {
            h.tick(i);
            h.events(i);
            if h.nodes[i].role() == Role::Leader {
                new_leader = Some(i);
            }
        }
        if new_leader.is_some() {
            break;
        }
    }
    let l = new_leader.expect("a new leader");
    assert!(h.nodes[l].term() > term);
}

/// Log mode with views (issue 14, item 4(b)): a member that would start an
/// election asks for a view naming it instead; the member a decided view
/// names campaigns in the view's term and wins DARE's votes, the others
/// move to that term and vote in it for the named member only; a newer
/// view deposes a leader the same way; once views cannot be decided,
/// elections are DARE's own again.
#[test]
fn in_log_mode_a_decided_view_names_who_campaigns() {
    use crate::views::View;
    let mut h = Harness::with(3, |c| c.lease_ns = 50_000);
    for i in 0..3 {
        h.nodes[i].set_views_usable(true);
    }
    h.start_all();
    h.settle(4);
    // Node 0's election timeout: a claim, no campaign.
    h.now = h.nodes[0].timers[Timer::Election as usize].unwrap();
    h.settle(2);
    assert_ne!(h.nodes[0].role(), Role::Candidate);
    assert_eq!(h.nodes[0].term(), 0, "no term is taken before a view");
    let (claim, base) = h.nodes[0].log_claim().expect("a claim");
    assert_eq!((claim.leader, claim.log_term, base), (MemberId(0), 1, 0));
    assert_eq!(h.nodes[0].counters().view_claims, 1);
    // The coordinators decide node 1's claim instead.
    let view = |leader: u8, log_term: u64| View {
        leader: MemberId(leader),
        log_term,
        lease_ns: 50_000,
        members: 0,
    };
    for i in 0..3 {
        h.nodes[i].follow_view(h.now, 1, view(1, 1));
    }
    assert_eq!(h.nodes[0].log_claim(), None, "settled by the view");
    assert_eq!(h.nodes[1].role(), Role::Candidate);
    assert!(h.nodes[0].vote_against_view(MemberId(2), 1));
    assert!(!h.nodes[0].vote_against_view(MemberId(1), 1));
    h.settle(8);
    assert_eq!(h.nodes[1].role(), Role::Leader);
    assert!(h.nodes[1].leads_by_view());
    assert_eq!(h.nodes[1].counters().view_campaigns, 1);
    for i in [0, 2] {
        assert_eq!(h.nodes[i].leader(), Some(MemberId(1)));
        assert_eq!(h.nodes[i].row.private_vote.member, Some(MemberId(1)));
    }
    // A newer view names node 2: node 1 steps down, node 2 is elected.
    for i in 0..3 {
        h.nodes[i].follow_view(h.now, 2, view(2, 2));
    }
    assert_ne!(h.nodes[1].role(), Role::Leader);
    h.settle(8);
    assert_eq!(h.nodes[2].role(), Role::Leader);
    assert_eq!(h.nodes[2].term(), 2);
    assert!(h.nodes[2].leads_by_view());
    // No view can be decided any more: node 2's death starts DARE's own
    // election at the member after it (node 0).
    for i in 0..3 {
        h.nodes[i].set_views_usable(false);
    }
    h.down[2] = true;
    for i in 0..2 {
        h.nodes[i].handle_peer_down(h.now, MemberId(2));
    }
    h.now = h.nodes[0].timers[Timer::Election as usize].unwrap();
    h.settle(8);
    assert_eq!(h.nodes[0].role(), Role::Leader);
    assert_eq!(h.nodes[0].term(), 3);
    assert!(!h.nodes[0].leads_by_view(), "elected, not named");
    assert_eq!(h.nodes[0].counters().view_campaigns, 0);
    assert_eq!(h.nodes[0].log_claim(), None);
}
