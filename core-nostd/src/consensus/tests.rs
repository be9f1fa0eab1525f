//! Scenario tests (each names the part of uKharon §5 / Appendix A it
//! checks and asserts the requests emitted) and the randomized model
//! checking runs.

extern crate std;

use super::engine::{ConsensusEngine, ConsensusEvent, LearnError, ProposeError};
use super::layout::{ConsensusConfig, ConsensusLayout};
use super::test_harness::{run_seed, Broken, HarnessMemory, Params, World};
use super::word::{first_proposal, SlotWord};
use crate::engine::Engine;
use crate::fabric::{Action, Completion, MemberId, Op, WcStatus, WorkRequest, WrId};
use std::string::String;
use std::vec;
use std::vec::Vec;

fn lone_engine(me: u8, proposers: &[u8]) -> (ConsensusEngine<HarnessMemory>, ConsensusLayout) {
    let acceptors = [MemberId(0), MemberId(1), MemberId(2)];
    let proposers: Vec<MemberId> = proposers.iter().map(|&p| MemberId(p)).collect();
    let cfg = ConsensusConfig::new(MemberId(me), &acceptors, &proposers);
    let layout = ConsensusLayout::new(&cfg).unwrap();
    let mem = HarnessMemory::new(&layout);
    (ConsensusEngine::new(&cfg, layout, mem, 0), layout)
}

fn posts(e: &mut ConsensusEngine<HarnessMemory>) -> Vec<WorkRequest> {
    let mut v = Vec::new();
    while let Some(a) = e.poll_action() {
        match a {
            Action::Post(wr) => v.push(wr),
            other => panic!("unexpected {other:?}"),
        }
    }
    v
}

/// Rounds until `done` holds, at most `max`; returns how many it took.
fn rounds_until(w: &mut World, max: usize, mut done: impl FnMut(&mut World) -> bool) -> usize {
    for r in 1..=max {
        w.round();
        assert_eq!(w.failure(), None);
        if done(w) {
            return r;
        }
    }
    panic!("not done after {max} rounds");
}

fn ops_of(log: &[(usize, usize, Op)]) -> (usize, usize, usize) {
    let mut reads = 0;
    let mut writes = 0;
    let mut cas = 0;
    for (_, _, op) in log {
        match op {
            Op::Read { .. } => reads += 1,
            Op::Write { .. } => writes += 1,
            Op::CompareSwap { .. } => cas += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    (reads, writes, cas)
}

fn take_log(w: &mut World) -> Vec<(usize, usize, Op)> {
    core::mem::take(w.op_log.as_mut().unwrap())
}

/// §5.3.1 "predicted state", A.5: the leader of a fresh group does not
/// READ; its first prepare CASes the empty word at every acceptor.
#[test]
fn the_leaders_first_prepare_cases_the_empty_word_at_every_acceptor() {
    let (mut e, layout) = lone_engine(3, &[3]);
    assert!(e.is_leader());
    e.handle_timeout(10);
    let wrs = posts(&mut e);
    let promised = SlotWord {
        min_proposal: first_proposal(0, 1),
        ..SlotWord::EMPTY
    };
    assert_eq!(wrs.len(), 3);
    for (i, wr) in wrs.iter().enumerate() {
        assert_eq!(wr.peer, MemberId(i as u8));
        match wr.op {
            Op::CompareSwap {
                remote,
                expect,
                swap,
                ..
            } => {
                assert_eq!(remote, layout.slot_word(0));
                assert_eq!(expect, 0);
                assert_eq!(swap, promised.encode());
            }
            other => panic!("expected a CAS, got {other:?}"),
        }
    }
}

/// Algorithm 1 line 2: a proposer that is not the leader has nothing to
/// predict from, waits a randomized backoff, then READs first.
#[test]
fn a_non_leader_waits_a_backoff_then_reads_first() {
    let (mut e, layout) = lone_engine(4, &[3, 4]);
    assert!(!e.is_leader());
    e.propose(0, 0, b"mine").unwrap();
    assert!(posts(&mut e).is_empty(), "the leader goes first");
    let due = e.next_deadline();
    assert!(due > 0 && due < u64::MAX);
    e.handle_timeout(due);
    let wrs = posts(&mut e);
    assert_eq!(wrs.len(), 3);
    for wr in wrs {
        assert!(
            matches!(wr.op, Op::Read { remote, len: 8, .. } if remote == layout.slot_word(0)),
            "{wr:?}"
        );
    }
    assert_eq!(e.propose(1, 0, b"again"), Err(ProposeError::InProgress));
    assert_eq!(e.propose(1, 1, &[0; 200]), Err(ProposeError::ValueTooLong));
    let (mut learner, _) = lone_engine(0, &[3, 4]);
    assert_eq!(learner.propose(0, 0, b"x"), Err(ProposeError::NotAProposer));
}

/// §5.3.1 "pre-preparation": a stable leader decides each slot in one
/// round trip (a record WRITE and a CAS per acceptor) and prepares the
/// next slot in the same round; it never READs.
#[test]
fn a_stable_leader_decides_in_one_round_after_pre_preparation() {
    let mut w = World::new(1, Params::quiet(3, 1));
    w.op_log = Some(Vec::new());
    let p = 3;
    // The idle leader pre-prepares slot 0 on its first timeout.
    let r = rounds_until(&mut w, 5, |w| w.quiet());
    assert!(r <= 2);
    assert_eq!(ops_of(&take_log(&mut w)), (0, 0, 3));
    for slot in 0..6u32 {
        let value = vec![slot as u8; 5 + slot as usize];
        w.propose(p, slot, &value).unwrap();
        let rounds = rounds_until(&mut w, 5, |w| w.engine(p).decided(slot).is_some());
        assert_eq!(rounds, 1, "slot {slot}");
        assert_eq!(w.engine(p).decided(slot).unwrap().as_slice(), &value[..]);
        // Accept: WRITE + CAS per acceptor; prepare of slot + 1: a CAS each.
        assert_eq!(ops_of(&take_log(&mut w)), (0, 3, 6), "slot {slot}");
    }
    let s = w.engine(p).status();
    assert_eq!(s.aborts, 0);
    assert_eq!(s.slot_reads_posted, 0);
    assert_eq!(s.decided, 6);
    assert_eq!(w.engine(p).frontier(), 6);
}

/// §5.3.1: "the new leader predicts that the last slot had been prepared
/// by the previous leader and uses this prediction as the expected value
/// of the RDMA CAS" — it re-prepares in one round, without a READ.
#[test]
fn a_new_leader_reprepares_in_one_round_from_the_predicted_word() {
    let mut w = World::new(2, Params::quiet(3, 2));
    let (p0, p1) = (3, 4);
    rounds_until(&mut w, 5, |w| w.quiet());
    for slot in 0..3u32 {
        w.propose(p0, slot, &[slot as u8; 4]).unwrap();
        rounds_until(&mut w, 3, |w| w.engine(p0).decided(slot).is_some());
    }
    // The follower catches up by learning (READs at every acceptor).
    for slot in 0..3u32 {
        w.call(p1, |e, now| e.learn(now, slot)).unwrap().unwrap();
        rounds_until(&mut w, 4, |w| w.engine(p1).decided(slot).is_some());
    }
    assert_eq!(w.engine(p1).frontier(), 3);
    // The leader keeps slot 3 prepared with its first proposal.
    let prepared = SlotWord {
        min_proposal: first_proposal(0, 2),
        ..SlotWord::EMPTY
    };
    for a in 0..3 {
        assert_eq!(w.word(a, 3), prepared.encode());
    }
    w.crash_dropping(p0);
    w.op_log = Some(Vec::new());
    w.notify(p1, p0, false);
    assert!(w.engine(p1).is_leader());
    assert_eq!(rounds_until(&mut w, 3, |w| w.quiet()), 1);
    let log = take_log(&mut w);
    assert_eq!(ops_of(&log), (0, 0, 3), "one CAS per acceptor, no READ");
    let ours = SlotWord {
        min_proposal: first_proposal(1, 2),
        ..SlotWord::EMPTY
    };
    for (src, _, op) in &log {
        assert_eq!(*src, p1);
        assert!(matches!(op, Op::CompareSwap { expect, swap, .. }
            if *expect == prepared.encode() && *swap == ours.encode()));
    }
    for a in 0..3 {
        assert_eq!(w.word(a, 3), ours.encode());
    }
    w.propose(p1, 3, b"new leader").unwrap();
    assert_eq!(
        rounds_until(&mut w, 3, |w| w.engine(p1).decided(3).is_some()),
        1
    );
    assert_eq!(w.engine(p1).status().aborts, 0);
}

/// Paxos's adopt rule (Algorithm 3 line 15) over indirection (§5.3.1): a
/// value the old leader got accepted by a majority before it crashed is
/// adopted by the new leader, whose own pre-preparation finds it and
/// READs its record.
#[test]
fn a_new_leader_adopts_the_value_the_old_one_got_chosen() {
    let mut w = World::new(3, Params::quiet(3, 2));
    w.event_log = Some(Vec::new());
    let (p0, p1) = (3, 4);
    rounds_until(&mut w, 5, |w| w.quiet());
    w.propose(p0, 0, b"old leader's").unwrap();
    // Its record WRITE and accept CAS land at acceptors 0 and 1 only.
    for a in [0, 1] {
        w.deliver_conn(p0, a);
        w.deliver_conn(p0, a);
    }
    assert_eq!(w.checker.chosen.len(), 1, "chosen in memory");
    w.crash_dropping(p0);
    w.notify(p1, p0, false);
    let r = rounds_until(&mut w, 6, |w| w.engine(p1).decided(0).is_some());
    assert!(r <= 4, "took {r} rounds");
    assert_eq!(w.engine(p1).decided(0).unwrap().as_slice(), b"old leader's");
    let s = w.engine(p1).status();
    assert!(s.record_reads_posted >= 1, "{s:?}");
    let events = w.event_log.take().unwrap();
    assert!(events.iter().any(|(m, e)| *m == p1
        && matches!(
            e,
            ConsensusEvent::Decided {
                slot: 0,
                ours: false,
                ..
            }
        )));
    // It then proposes its own value in the next slot.
    w.propose(p1, 1, b"mine").unwrap();
    rounds_until(&mut w, 4, |w| w.engine(p1).decided(1).is_some());
}

/// Learning (Algorithm 6's read of a slot at a majority): any member
/// READs the words; a value accepted by a majority under one proposal is
/// decided. Its own acceptor's word is read in place.
#[test]
fn a_learner_learns_decided_slots_and_reports_undecided_ones() {
    let mut w = World::new(4, Params::quiet(3, 1));
    w.event_log = Some(Vec::new());
    let p = 3;
    let learner = w.learner();
    assert_eq!(learner, 0, "the learner is acceptor 0");
    rounds_until(&mut w, 5, |w| w.quiet());
    w.propose(p, 0, b"zero").unwrap();
    rounds_until(&mut w, 3, |w| w.engine(p).decided(0).is_some());
    w.call(learner, |e, now| e.learn(now, 0)).unwrap().unwrap();
    assert_eq!(
        w.call(learner, |e, now| e.learn(now, 1)).unwrap(),
        Err(LearnError::Busy)
    );
    rounds_until(&mut w, 4, |w| w.engine(learner).decided(0).is_some());
    assert_eq!(w.engine(learner).decided(0).unwrap().as_slice(), b"zero");
    let s = w.engine(learner).status();
    assert_eq!(s.local_slot_reads, 1, "its own slot, read in place");
    assert_eq!(s.slot_reads_posted, 2);
    assert_eq!(
        w.call(learner, |e, now| e.learn(now, 0)).unwrap(),
        Err(LearnError::AlreadyDecided)
    );
    // Slot 1 is only prepared (by the leader): not decided.
    w.call(learner, |e, now| e.learn(now, 5)).unwrap().unwrap();
    rounds_until(&mut w, 4, |w| w.quiet());
    let events = w.event_log.take().unwrap();
    assert!(events
        .iter()
        .any(|(m, e)| *m == learner && *e == ConsensusEvent::Undecided { slot: 5 }));
}

/// Error completions count as no answer from that acceptor; the channel
/// is re-established once drained and after the backoff.
#[test]
fn an_error_completion_is_no_answer_and_the_channel_is_reconnected() {
    let mut w = World::new(5, Params::quiet(3, 1));
    let p = 3;
    rounds_until(&mut w, 5, |w| w.quiet());
    w.force_error(p, 2, WcStatus::Unreachable);
    w.propose(p, 0, b"value").unwrap();
    rounds_until(&mut w, 2, |w| w.engine(p).decided(0).is_some());
    assert!(
        w.broken(p, 2),
        "the WRITE failed; the CAS and prepare flushed"
    );
    assert_ne!(
        SlotWord::decode(w.word(2, 0), 1).unwrap().accepted_proposal,
        SlotWord::decode(w.word(0, 0), 1).unwrap().accepted_proposal
    );
    let r = rounds_until(&mut w, 20, |w| !w.broken(p, 2));
    assert!(r >= 2, "not before the reconnect backoff");
    assert!(w.summary.reconnects >= 1);
    // Acceptor 2 takes part again.
    w.op_log = Some(Vec::new());
    w.propose(p, 1, b"next").unwrap();
    rounds_until(&mut w, 4, |w| w.engine(p).decided(1).is_some() && w.quiet());
    assert!(take_log(&mut w).iter().any(|(_, dst, _)| *dst == 2));
    assert_eq!(w.engine(p).status().error_completions, 3);
}

/// A.6: when the next proposal number would not fit 16 bits, the engine
/// reports it instead of wrapping around.
#[test]
fn proposal_space_exhaustion_is_reported() {
    let mut w = World::new(6, Params::quiet(3, 1));
    w.event_log = Some(Vec::new());
    let p = 3;
    // Something accepted, every proposal promised (with nothing accepted
    // it would read as a fenced word: no answer rather than a nack).
    let full = SlotWord {
        min_proposal: u16::MAX,
        accepted_proposal: 3,
        value: Some(super::word::ValueRef {
            owner: 0,
            proposal: 3,
            digest: 0,
        }),
        lap: 0,
    };
    for a in 0..3 {
        w.set_word(a, 0, full.encode());
    }
    w.propose(p, 0, b"too late").unwrap();
    rounds_until(&mut w, 200, |w| {
        w.event_log
            .as_ref()
            .unwrap()
            .iter()
            .any(|(_, e)| *e == ConsensusEvent::ProposalSpaceExhausted { slot: 0 })
    });
    assert_eq!(w.engine(p).status().proposals_exhausted, 1);
    for a in 0..3 {
        assert_eq!(w.word(a, 0), full.encode(), "nothing wrapped around");
    }
    // The other slots still work.
    w.propose(p, 1, b"fine").unwrap();
    rounds_until(&mut w, 200, |w| w.engine(p).decided(1).is_some());
}

/// Words and records come from peers' memory: malformed ones are
/// counted and ignored, never trusted, never a panic.
#[test]
fn malformed_words_and_records_are_not_trusted() {
    let mut w = World::new(7, Params::quiet(3, 1));
    let p = 3;
    // accepted_proposal above min_proposal: not an acceptor state.
    let garbage = (1u64 << 48) | (5 << 32) | 0x0000_0500;
    w.set_word(0, 0, garbage);
    w.set_word(1, 0, garbage);
    w.propose(p, 0, b"value").unwrap();
    for _ in 0..50 {
        w.round();
    }
    assert_eq!(w.failure(), None);
    assert!(
        w.engine(p).decided(0).is_none(),
        "no majority of sane words"
    );
    assert!(w.engine(p).status().malformed_words >= 2);
    // Sane again: it decides.
    w.set_word(0, 0, 0);
    w.set_word(1, 0, 0);
    rounds_until(&mut w, 200, |w| w.engine(p).decided(0).is_some());

    // A value accepted under a proposal whose records are all scribbled
    // over: the new leader cannot adopt it, and does not decide anything
    // else either.
    let mut w = World::new(8, Params::quiet(3, 2));
    let (p0, p1) = (3, 4);
    rounds_until(&mut w, 5, |w| w.quiet());
    w.propose(p0, 0, b"old").unwrap();
    for a in 0..3 {
        w.deliver_conn(p0, a);
        w.deliver_conn(p0, a);
    }
    w.crash_dropping(p0);
    for a in 0..3 {
        w.scribble_record(a, 0, 0, &[0xAB; 16]);
    }
    w.notify(p1, p0, false);
    for _ in 0..100 {
        w.round();
    }
    assert_eq!(w.failure(), None);
    assert!(w.engine(p1).decided(0).is_none());
    assert!(w.engine(p1).status().bad_records >= 3);
    assert_eq!(
        w.propose(p1, 0, b"mine"),
        Ok(()),
        "it may keep trying; it never decides another value"
    );
    for _ in 0..100 {
        w.round();
    }
    assert_eq!(w.failure(), None);
    assert!(w.engine(p1).decided(0).is_none());
}

/// Completions that are not of a request in flight (forged ids, another
/// peer, duplicates) are ignored.
#[test]
fn completions_that_are_not_ours_are_ignored() {
    let (mut e, _) = lone_engine(3, &[3]);
    e.handle_timeout(0);
    let wrs = posts(&mut e);
    let first = wrs[0];
    let c = |wr_id, peer| Completion {
        wr_id,
        peer,
        status: WcStatus::Ok,
    };
    e.handle_completion(1, c(WrId(0xFFFF_FFFF_FFFF), MemberId(0)));
    e.handle_completion(1, c(WrId(first.wr_id.0 + (1 << 8)), first.peer));
    e.handle_completion(1, c(first.wr_id, MemberId(2)));
    assert_eq!(e.status().stale_completions, 3);
    // The real one, twice: the second is stale.
    e.handle_completion(1, c(first.wr_id, first.peer));
    e.handle_completion(1, c(first.wr_id, first.peer));
    assert_eq!(e.status().stale_completions, 4);
}

/// The harness is deterministic: one seed reproduces a run.
#[test]
fn a_seed_reproduces_its_run() {
    let a = run_seed(12345, None).unwrap();
    let b = run_seed(12345, None).unwrap();
    assert_eq!(std::format!("{a:?}"), std::format!("{b:?}"));
}

/// Seeds of the default randomized run.
const SEEDS: u64 = 2_000;

/// The seeds to run: `CONSENSUS_SEED_BASE` (default 0) and
/// `CONSENSUS_SEEDS` (default [`SEEDS`]) widen a run for a soak.
fn seed_range() -> core::ops::Range<u64> {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let base = var("CONSENSUS_SEED_BASE", 0);
    base..base + var("CONSENSUS_SEEDS", SEEDS)
}

/// Randomized model checking (A.3's uniform agreement and validity, A.5's
/// liveness once a single proposer runs obstruction-free): 2,000 seeds,
/// each a group of 3 or 5 acceptors and 1 to 3 proposers with random
/// delays, failed requests, proposer crashes and restarts, and acceptor
/// crashes; then faults stop and the leader and learner must catch up.
#[test]
fn randomized_runs_keep_one_value_per_slot_and_converge() {
    let mut failures: Vec<String> = Vec::new();
    let mut total = super::test_harness::Summary::default();
    let seeds = seed_range();
    let count = seeds.end - seeds.start;
    for seed in seeds {
        match run_seed(seed, None) {
            Ok(s) => {
                total.delivered += s.delivered;
                total.errors += s.errors;
                total.crashes += s.crashes;
                total.restarts += s.restarts;
                total.acceptor_kills += s.acceptor_kills;
                total.decisions += s.decisions;
                total.chosen += s.chosen;
                total.reconnects += s.reconnects;
                total.exhausted += s.exhausted;
                total.recycled += s.recycled;
                total.acceptor_restarts += s.acceptor_restarts;
                total.acceptor_rejoins += s.acceptor_rejoins;
                total.liveness_steps = total.liveness_steps.max(s.liveness_steps);
            }
            Err(f) => failures.push(f),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} seeds failed; first: {}",
        failures.len(),
        failures[0]
    );
    std::println!("{count} seeds: {total:?}");
    // The runs did exercise what they claim to.
    assert!(total.decisions > count * 10, "{total:?}");
    assert!(total.chosen as u64 > count * 5, "{total:?}");
    assert!(
        total.errors > 1_000 && total.reconnects > 1_000,
        "{total:?}"
    );
    assert!(total.crashes > 100 && total.restarts > 100, "{total:?}");
    assert!(total.acceptor_kills > 50, "{total:?}");
    assert!(
        total.recycled > 50,
        "slow proposers met recycled words: {total:?}"
    );
    assert!(
        total.acceptor_rejoins > 50 && total.acceptor_rejoins <= total.acceptor_restarts,
        "restarted acceptors rejoined: {total:?}"
    );
    assert_eq!(total.exhausted, 0);
}

/// Runs every seed with `mutation` and returns those the checker caught
/// (by one of `by`).
#[cfg(feature = "mutation-testing")]
fn caught_seeds(mutation: Broken, by: &[&str]) -> Vec<u64> {
    let mut caught = Vec::new();
    let seeds = seed_range();
    let count = seeds.end - seeds.start;
    for seed in seeds {
        if let Err(f) = run_seed(seed, Some(mutation)) {
            assert!(
                by.iter().any(|b| f.contains(b)),
                "caught by something else than the checker: {f}"
            );
            caught.push(seed);
        }
    }
    std::println!(
        "{mutation:?} caught in {} of {count} seeds (first: seed {:?})",
        caught.len(),
        caught.first()
    );
    caught
}

/// The mutation "accept without prepare" (a proposer CASes its value in
/// without a majority of promises) must be caught by the checker within
/// the seeds.
#[cfg(feature = "mutation-testing")]
#[test]
fn the_checker_catches_accept_without_prepare() {
    let caught = caught_seeds(
        Broken::AcceptWithoutPrepare,
        &["TwoValues", "ProposalReused"],
    );
    assert!(!caught.is_empty(), "the mutation survived every seed");
}

/// The mutation "recycle ignores lap" (a stale proposer takes a later
/// lap's word for its own slot's state, and CASes it back to its lap)
/// must be caught: the word goes back a lap, and the stale slot can be
/// decided again with another value.
#[cfg(feature = "mutation-testing")]
#[test]
fn the_checker_catches_a_recycle_that_ignores_the_lap() {
    let caught = caught_seeds(
        Broken::RecycleIgnoresLap,
        &["TwoValues", "BadWord", "NeverProposed", "ProposalReused"],
    );
    assert!(!caught.is_empty(), "the mutation survived every seed");
}

/// The mutation "rejoin without fence" (a restarted acceptor counts
/// again at once with empty words, forgetting what it accepted before)
/// must be caught: a proposer behind gets promises from it and from an
/// acceptor that missed the decided value, and decides another.
#[cfg(feature = "mutation-testing")]
#[test]
fn the_checker_catches_a_rejoin_without_fence() {
    let caught = caught_seeds(
        Broken::RejoinWithoutFence,
        &["TwoValues", "BadWord", "NeverProposed", "ProposalReused"],
    );
    assert!(!caught.is_empty(), "the mutation survived every seed");
}

/// Reproduces one seed with its diagnostics:
/// `SEED=113 cargo test -p verbatim-core --lib consensus::tests::one_seed -- --ignored --nocapture`.
#[test]
#[ignore]
fn one_seed() {
    let seed: u64 = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // MUTATED=1: accept without prepare; 2: recycle ignores lap; 3:
    // rejoin without fence.
    let mutation = match std::env::var("MUTATED").as_deref() {
        Ok("2") => Some(Broken::RecycleIgnoresLap),
        Ok("3") => Some(Broken::RejoinWithoutFence),
        Ok(_) => Some(Broken::AcceptWithoutPrepare),
        Err(_) => None,
    };
    std::println!("{:?}", run_seed(seed, mutation));
}

/// A restarted acceptor (uKharon's coordinators, all of them proposers
/// here) lost what it accepted. Slot 0 is chosen at acceptors 0 and 1;
/// member 1 restarts and, behind, proposes slot 0 itself while its link
/// to acceptor 0 fails: it must not count its own empty memory as a
/// promise. With `fenced`, it rejoins as built (invalid words, a scan, a
/// fence) and decides the chosen value; without, it counts again at once
/// with empty words and decides its own: two values (the mutation).
fn rejoin_scenario(mutation: Option<Broken>) -> World {
    let params = Params {
        overlap: true,
        mutation,
        ..Params::quiet(3, 2)
    };
    let mut w = World::new(11, params);
    let (p0, p1) = (0, 1);
    rounds_until(&mut w, 5, |w| w.quiet());
    w.propose(p0, 0, b"first").unwrap();
    // Its record WRITE and accept CAS land at acceptors 0 and 1 only.
    for a in [0, 1] {
        w.deliver_conn(p0, a);
        w.deliver_conn(p0, a);
    }
    w.force_error(p0, 2, WcStatus::Unreachable);
    w.deliver_conn(p0, 2);
    assert_eq!(w.checker.chosen.len(), 1, "chosen in memory");
    w.crash_dropping(p1);
    w.restart(p1);
    w.notify(p0, p1, true);
    w.force_error(p1, 0, WcStatus::Unreachable);
    w.propose(p1, 0, b"second").unwrap();
    for _ in 0..60 {
        w.round();
        if w.failure().is_some() || w.engine(p1).decided(0).is_some() {
            break;
        }
    }
    w
}

#[test]
fn a_restarted_acceptor_rejoins_behind_a_fence() {
    let mut w = rejoin_scenario(None);
    assert_eq!(w.failure(), None);
    assert_eq!(
        w.engine(1).decided(0).as_deref(),
        Some(&b"first"[..]),
        "the chosen value, adopted from acceptor 0"
    );
    assert!(
        w.engine(1).rejoining(),
        "not before slots past its bound are decided"
    );
    // The group goes on; once the slots it may have touched are decided,
    // it fences them and counts again.
    for slot in 1..6 {
        w.propose(0, slot, &[b'v', slot as u8]).unwrap();
        rounds_until(&mut w, 40, |w| w.engine(0).decided(slot).is_some());
    }
    for slot in 1..6 {
        let _ = w.call(1, |e, now| e.learn(now, slot));
        rounds_until(&mut w, 40, |w| w.engine(1).decided(slot).is_some());
    }
    rounds_until(&mut w, 40, |w| !w.engine(1).rejoining());
    assert_eq!(w.engine(1).status().rejoined, 1);
    let fenced = SlotWord::decode(w.word(1, 0), 2).unwrap();
    assert!(
        fenced.is_fenced(),
        "slot 0's word at the restarted acceptor"
    );
    // Fenced up to the frontier it had then (the next view's slot among
    // them, so past the slot 0 it may have accepted), it takes part in a
    // slot proposed after.
    let fenced_to = (0..16u32)
        .take_while(|&s| SlotWord::decode(w.word(1, s), 2).unwrap().is_fenced())
        .last()
        .expect("slot 0 fenced");
    assert!((1..6).contains(&fenced_to), "fenced to {fenced_to}");
    w.propose(0, 6, b"after").unwrap();
    rounds_until(&mut w, 40, |w| {
        w.engine(0).decided(6).is_some() && w.quiet()
    });
    let after = SlotWord::decode(w.word(1, 6), 2).unwrap();
    assert!(
        after.value.is_some(),
        "acceptor 1 accepted slot 6: {after:?}"
    );
    assert_eq!(w.failure(), None);
}

#[cfg(feature = "mutation-testing")]
#[test]
fn a_rejoin_without_a_fence_decides_a_second_value() {
    let w = rejoin_scenario(Some(Broken::RejoinWithoutFence));
    let f = w.failure().expect("caught");
    assert!(f.contains("TwoValues"), "{f}");
}
