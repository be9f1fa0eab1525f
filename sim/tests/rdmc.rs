//! RDMC (Derecho's large-message multicast) in the simulator: seeds with
//! every checker of `check::rdmc`, the mutation that writes a chunk's flag
//! before the chunk is placed, and a member's crash.

use verbatim_core::config::Mutation;
use verbatim_sim::check::rdmc::{INTEGRITY, LIVENESS};
use verbatim_sim::rdmc_run::{
    describe, options_for_seed, run, run_seed, PlannedMessage, RdmcCrash, RdmcOptions,
};

/// Seeds run by `cargo test` (a few seconds in release; `verbatim-sim
/// --rdmc --seeds N` runs thousands a minute). CI runs the debug build,
/// whose profile optimises the core and the simulator (`opt-level = 2` in
/// the workspace's `Cargo.toml`); half as many keep it quick should that
/// change.
const TEST_SEEDS: u64 = if cfg!(debug_assertions) { 300 } else { 600 };

/// Runs seeds `range` on two threads; returns the failures, described.
fn run_seeds(range: std::ops::Range<u64>, mutation: Mutation) -> Vec<String> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(2) as u64;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let seeds: Vec<u64> = range.clone().filter(|s| s % threads == t).collect();
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for s in seeds {
                    let r = run_seed(s, mutation, false);
                    if !r.report.violations.is_empty() {
                        let first: Vec<String> = r
                            .report
                            .violations
                            .iter()
                            .take(3)
                            .map(|v| v.to_string())
                            .collect();
                        failures.push(format!(
                            "seed {s} ({}):\n  {}",
                            describe(&r.options),
                            first.join("\n  ")
                        ));
                    }
                }
                failures
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("worker"))
        .collect()
}

#[test]
fn rdmc_seeds_keep_every_invariant() {
    let failures = run_seeds(0..TEST_SEEDS, Mutation::None);
    assert!(
        failures.is_empty(),
        "{} of {TEST_SEEDS} seeds failed (reproduce with `cargo run -p verbatim-sim --release -- \
         --rdmc --seed S --trace`):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The seeds are not vacuous: they move messages of every size through
/// every member, under each fault, and the fault-free ones deliver
/// everything (the liveness checker's premise holds in most seeds).
#[test]
fn rdmc_seeds_deliver_under_every_fault() {
    let seeds = if cfg!(debug_assertions) { 40 } else { 200 };
    let (mut delivered, mut fault_free, mut reordered, mut crashed, mut wedged) = (0, 0, 0, 0, 0);
    for s in 0..seeds {
        let r = run_seed(s, Mutation::None, false);
        assert_eq!(r.report.violations, vec![], "seed {s}");
        delivered += r.report.delivered;
        if r.options.fault_free() {
            fault_free += 1;
            let n = u64::from(r.options.members);
            let planned: u64 = r.options.workload.iter().map(|w| w.len() as u64).sum();
            assert_eq!(r.report.sent, planned, "seed {s}: every message went out");
            assert_eq!(
                r.report.delivered,
                planned * n,
                "seed {s}: every member delivered every message"
            );
        }
        reordered += u64::from(r.options.reordering && r.report.late_placements > 0);
        crashed += u64::from(r.options.crash.is_some());
        wedged += u64::from(r.report.wedged > 0);
    }
    assert!(
        delivered > seeds * 20,
        "{delivered} deliveries in {seeds} seeds"
    );
    assert!(
        fault_free * 3 > seeds,
        "{fault_free} of {seeds} seeds fault-free"
    );
    assert!(
        reordered * 4 > seeds,
        "{reordered} of {seeds} seeds reordered"
    );
    assert!(crashed * 10 > seeds, "{crashed} of {seeds} seeds crashed");
    assert!(
        wedged * 10 > seeds,
        "{wedged} of {seeds} seeds wedged a member"
    );
}

/// Three members each multicasting multi-chunk messages on a network
/// whose WRITE data may show up after a later WRITE's (`Reordering`),
/// and nothing else.
fn reordered_scenario(mutation: Mutation) -> RdmcOptions {
    let mut o = RdmcOptions::new(7, 3).with_mutation(mutation);
    o.reordering = true;
    o.chunk_bytes = 128;
    o.message_bytes_max = 1024;
    o.slots = 2;
    o.workload = (0..3)
        .map(|_| {
            [1024, 300, 129, 700]
                .iter()
                .enumerate()
                .map(|(k, &len_bytes)| PlannedMessage {
                    len_bytes,
                    release_ns: 20_000 * k as u64,
                })
                .collect()
        })
        .collect();
    o
}

/// The correct protocol writes a chunk's flag once the chunk's WRITE
/// completed (its data is placed by then): the same scenario with the
/// mutation off delivers everything, whole.
#[test]
fn flags_after_completions_deliver_whole_messages_under_reordering() {
    let r = run(reordered_scenario(Mutation::None));
    assert_eq!(r.violations, vec![]);
    assert_eq!(r.delivered, 3 * 12);
    assert!(r.late_placements > 0, "some WRITE data showed up late");
}

/// `rdmc-flag-with-chunk`: a flag posted right behind its chunk lands
/// before the chunk's data is visible, and the receiver copies (or
/// forwards) the slot's stale bytes. The payload sum refuses them, so the
/// member wedges (`Corrupt`) in a run without faults that excuse a wedge:
/// the liveness checker says so (or, were the sum to miss it, the bytes
/// checker).
#[test]
fn a_flag_written_with_its_chunk_is_caught() {
    let r = run(reordered_scenario(Mutation::RdmcFlagWithChunk));
    assert!(
        r.violations.iter().any(caught_stale_bytes),
        "stale bytes went unnoticed: {:?}",
        r.violations
    );
    for v in &r.violations {
        assert!(matches!(v.invariant, INTEGRITY | LIVENESS), "{v}");
    }
}

/// A violation stale bytes explain: delivered, or refused by the payload
/// sum (a `Corrupt` wedge nothing else excuses; what the wedged member
/// then never sent or delivered follows as liveness violations).
fn caught_stale_bytes(v: &verbatim_sim::check::Violation) -> bool {
    v.invariant == INTEGRITY
        || (v.invariant == "rdmc liveness" && v.to_string().contains("Corrupt"))
}

/// The seeds catch it by themselves, early: half of them reorder.
#[test]
fn rdmc_seeds_catch_a_flag_written_with_its_chunk() {
    const WITHIN: u64 = 20;
    let caught = (0..WITHIN).find_map(|s| {
        let r = run_seed(s, Mutation::RdmcFlagWithChunk, false);
        (!r.report.violations.is_empty()).then_some((s, r))
    });
    let Some((seed, r)) = caught else {
        panic!("rdmc-flag-with-chunk not caught in {WITHIN} seeds");
    };
    assert!(
        r.options.reordering,
        "seed {seed} caught it without reordering"
    );
    assert!(
        r.report.violations.iter().any(caught_stale_bytes),
        "seed {seed}: {:?}",
        r.report.violations
    );
    for v in &r.report.violations {
        assert!(
            matches!(v.invariant, INTEGRITY | LIVENESS),
            "seed {seed}: {v}"
        );
    }
}

/// Four members multicast 4 KiB messages in 64-byte chunks; member 3
/// crashes in the middle and the others are told 20 to 60 µs later.
fn crash_scenario() -> RdmcOptions {
    let mut o = RdmcOptions::new(11, 4);
    o.chunk_bytes = 64;
    o.message_bytes_max = 4096;
    o.slots = 2;
    o.workload = (0..4)
        .map(|_| {
            (0..6)
                .map(|k| PlannedMessage {
                    len_bytes: 4096,
                    release_ns: 10_000 * k,
                })
                .collect()
        })
        .collect();
    o.crash = Some(RdmcCrash {
        member: 3,
        at_ns: 60_000,
        detect_ns: vec![20_000, 40_000, 60_000, 0],
    });
    o
}

#[test]
fn after_a_crash_the_survivors_wedge_and_deliver_nothing_more() {
    let o = crash_scenario();
    let r = run(o.clone());
    assert_eq!(r.violations, vec![]);
    let h = &r.history;
    assert_eq!(h.members[3].crashed_at_ns, Some(60_000));
    for (m, mh) in h.members.iter().enumerate().take(3) {
        let w = mh
            .wedged
            .as_ref()
            .unwrap_or_else(|| panic!("survivor {m} did not wedge"));
        assert!(
            w.cause.contains("MemberId(3)"),
            "member {m} wedged for {}",
            w.cause
        );
        // Told at 60 µs + its detection delay, it wedges at its next
        // step (after what it was posting then).
        assert!(
            w.time_ns <= 60_000 + o.crash.as_ref().unwrap().detect_ns[m] + 10_000,
            "member {m} wedged long after it was told"
        );
        assert!(w.time_ns >= 60_000, "member {m} wedged before the crash");
        assert_eq!(
            w.after_deliveries,
            mh.deliveries.len(),
            "member {m} delivered after it wedged"
        );
        assert!(
            mh.deliveries.iter().all(|d| d.time_ns <= w.time_ns),
            "member {m}: a delivery is later than the wedge"
        );
        assert!(!mh.deliveries.is_empty(), "member {m} delivered before");
    }
    // The crash cut the workload short: it is no vacuous scenario.
    assert!(r.delivered < 4 * 24, "{} deliveries", r.delivered);
}

/// In every seed with a crash, each survivor ends wedged (it is told),
/// and none of them delivers after its wedge.
#[test]
fn in_the_seeds_every_survivor_of_a_crash_wedges() {
    let seeds = if cfg!(debug_assertions) { 60 } else { 300 };
    let mut crashes = 0;
    for s in 0..seeds {
        let o = options_for_seed(s);
        let Some(c) = o.crash.clone() else { continue };
        crashes += 1;
        let r = run(o);
        assert_eq!(r.violations, vec![], "seed {s}");
        for (m, mh) in r.history.members.iter().enumerate() {
            if m == usize::from(c.member) {
                assert_eq!(mh.crashed_at_ns, Some(c.at_ns), "seed {s}");
                continue;
            }
            let w = mh
                .wedged
                .as_ref()
                .unwrap_or_else(|| panic!("seed {s}: survivor {m} did not wedge"));
            assert_eq!(w.after_deliveries, mh.deliveries.len(), "seed {s}");
        }
    }
    assert!(crashes * 10 > seeds, "{crashes} of {seeds} seeds crashed");
}

/// The liveness checker is armed in a fault-free run: a workload larger
/// than the run's time allows leaves messages undelivered, and it says so.
#[test]
fn a_run_cut_short_breaks_liveness() {
    let mut o = reordered_scenario(Mutation::None);
    o.time_limit_ns = 5_000;
    let r = run(o);
    assert!(
        r.violations.iter().any(|v| v.invariant == LIVENESS),
        "{:?}",
        r.violations
    );
}
