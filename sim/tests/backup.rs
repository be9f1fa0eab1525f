//! MacR's backup-memory mode (issue 16) in the simulator: a primary that
//! dies between any two of a write's WRITEs, members that die in the
//! middle of a bulk copy, long random runs with the swarm's faults, and
//! the five broken rules (`BackupEntryBeforeItem`,
//! `BackupReplyBeforeCompletion`, `BackupCopyInView`,
//! `BackupReplayAnySender`, `BackupTakeOverUncopied`) caught. Besides the client history
//! (linearizable: no acknowledged write lost), the checkers of
//! `verbatim_sim::check::backup` watch every run: the store audited at
//! every take-over, copies compared byte for byte with the primary's at
//! every write acknowledged, no replay refused, no replay never forwarded.

use verbatim_core::config::Mutation;
use verbatim_sim::cluster::{run, ClusterOptions, Fault, RunReport};
use verbatim_sim::swarm::{describe, options_for_seed};

const MS: u64 = 1_000_000;

/// Three (or `members`) members in backup-memory mode with 8 KiB slabs,
/// every one a coordinator, 100 µs leases, death notices; four clients on
/// one value key and one counter (updates to a key that exists: a lost
/// write shows), reads 40 %, values of 16 to 200 bytes (so an update
/// often changes size class, and a slab is carved now and then: both the
/// zero-copy and the forwarded path run); 14 ms of faults.
fn base(seed: u64, members: u8, mutation: Mutation) -> ClusterOptions {
    let mut o = ClusterOptions::new(seed, members).with_mutation(mutation);
    o.clients = 4;
    o.keys = 1;
    o.read_permille = 400;
    o.incr_permille = 150;
    o.cas_permille = 100;
    o.del_permille = 30;
    o.value_bytes_min = 16;
    o.value_bytes_max = 200;
    o.crash_notify = true;
    o.config.lease_ns = 100_000;
    o.safety_ns = 14 * MS;
    o.use_backup_memory(8192);
    o
}

/// A primary that crashes right after the fabric took `writes` WRITEs of
/// a client write (from 4 ms on), back 1 ms later with empty memory. With
/// `one_size`, every value is 48 bytes: an update stays in its size class
/// and is replicated by WRITEs alone (its plan: allocation, item, session
/// record, entry, free), where the base's sizes often forward it (two
/// WRITEs per backup, replayed by their CPUs).
fn crash_mid_write(seed: u64, writes: u32, one_size: bool, mutation: Mutation) -> ClusterOptions {
    let mut o = base(seed, 3, mutation);
    if one_size {
        o.value_bytes_min = 48;
        o.value_bytes_max = 48;
    }
    o.faults.push(Fault::CrashPrimaryMidWrite {
        from_ns: 4 * MS,
        writes,
        down_ns: Some(MS),
    });
    o
}

/// WRITEs of one write to both backups of three members: a plan has at
/// most 8 ranges; a forward is two WRITEs.
const WRITES_OF_ONE_WRITE: u32 = 16;

fn violations(r: &RunReport) -> Vec<String> {
    r.violations.iter().map(|v| v.to_string()).collect()
}

/// (a) For every prefix of a write's WRITEs (none of them, one, ...,
/// all of them to both backups), the primary dies right after it; the
/// next primary recovers whatever prefix its copy holds, serves, and
/// copies its store to the others: no acknowledged write is lost
/// (linearizability), its store is audited clean at the take-over, and
/// every copy equals its store at every write acknowledged.
#[test]
fn a_primary_crashing_between_any_two_of_its_writes_loses_no_acknowledged_write() {
    let mut failures = Vec::new();
    let mut takeovers = 0;
    for (seed, one_size) in [(1, false), (2, false), (1, true), (2, true)] {
        for writes in 0..=WRITES_OF_ONE_WRITE {
            let o = crash_mid_write(seed, writes, one_size, Mutation::None);
            let at = describe(&o);
            let r = run(o);
            if !r.violations.is_empty() || r.linearizability_unknown {
                failures.push(format!(
                    "seed {seed}, {writes} WRITEs ({at}): {:?}",
                    violations(&r)
                ));
                continue;
            }
            assert_eq!(
                r.backup_crashes_mid_write, 1,
                "seed {seed}, {writes} WRITEs: the primary did not crash mid-write"
            );
            // The first primary's take-over, and its successor's.
            assert!(
                r.backup_takeovers >= 2,
                "seed {seed}, {writes} WRITEs: {} take-overs",
                r.backup_takeovers
            );
            assert!(r.backup_copies_compared > 0 && r.first_ack_after_heal_ns.is_some());
            takeovers += r.backup_takeovers;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(takeovers >= 4 * 2 * u64::from(WRITES_OF_ONE_WRITE + 1));
}

/// (b) A member is restarted with empty memory at 3 ms, so the primary
/// copies its store to it; in the middle of that copy the member crashes
/// again (back 1 ms later, copied anew) and, with `kill_another`, another
/// backup crashes for good at the same instant. The group recovers: the
/// restarted member ends synced and back in the primary's view, writes
/// go on after the faults (liveness), nothing acknowledged is lost.
fn crash_mid_copy(seed: u64, kill_another: bool) -> ClusterOptions {
    // Seven members: when the member restarted first is the primary, the
    // copies are its successor's to every member, and with the member
    // crashed mid-copy and the one killed, three members have lost their
    // state (views tolerate three of seven coordinators).
    let mut o = base(seed, 7, Mutation::None);
    o.faults.push(Fault::Restart {
        node: 3,
        at_ns: 3 * MS,
        down_ns: 200_000,
        after_vote: false,
    });
    o.faults.push(Fault::RestartMidBulkCopy {
        from_ns: 3 * MS,
        down_ns: MS,
        kill_another,
    });
    o
}

#[test]
fn a_member_crashing_in_the_middle_of_its_copy_is_copied_again_and_the_group_recovers() {
    let mut failures = Vec::new();
    for seed in 1..=3 {
        for kill_another in [false, true] {
            let o = crash_mid_copy(seed, kill_another);
            let at = describe(&o);
            let r = run(o);
            if !r.violations.is_empty() || r.linearizability_unknown {
                failures.push(format!(
                    "seed {seed}, kill_another {kill_another} ({at}): {:?}",
                    violations(&r)
                ));
                continue;
            }
            assert_eq!(
                r.backup_crashes_mid_copy, 1,
                "seed {seed}: no member crashed mid-copy"
            );
            let (primary, view, synced) = r.backup_final.expect("a primary at the end");
            let m = r
                .backup_crashed_mid_copy
                .expect("the member crashed mid-copy");
            assert!(
                synced & (1 << m) != 0 && view & (1 << m) != 0,
                "seed {seed}, kill_another {kill_another}: member {m} not copied back \
                 (primary {primary}, view {view:#b}, synced {synced:#b})"
            );
            assert!(r.first_ack_after_heal_ns.is_some());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The swarm's first `count` backup-memory seeds from `from` on.
fn swarm_backup_seeds(from: u64, count: usize) -> Vec<u64> {
    (from..)
        .filter(|&s| options_for_seed(s).config.mode == verbatim_core::Mode::BackupMemory)
        .take(count)
        .collect()
}

/// Runs `runs`; returns the failures and the sum of the mode's counters.
fn run_all(runs: impl Iterator<Item = ClusterOptions>) -> (Vec<String>, RunReport) {
    let mut failures = Vec::new();
    let mut total = RunReport::default();
    for o in runs {
        let (seed, at) = (o.seed, describe(&o));
        let r = run(o);
        if !r.violations.is_empty() || r.linearizability_unknown {
            failures.push(format!("seed {seed} ({at}): {:?}", violations(&r)));
        }
        total.backup_takeovers += r.backup_takeovers;
        total.backup_copies += r.backup_copies;
        total.backup_zero_copy += r.backup_zero_copy;
        total.backup_forwarded += r.backup_forwarded;
        total.backup_replays += r.backup_replays;
        total.backup_copies_compared += r.backup_copies_compared;
        total.backup_crashes_mid_write += r.backup_crashes_mid_write;
    }
    (failures, total)
}

/// (c) A long random workload with faults: 60 ms of faults on five
/// members, six clients on four keys of each kind, torn and reordered
/// placement; the primary crashes, a backup stops, two members are cut
/// off, a primary dies in the middle of a write, and a primary stops in
/// the middle of a store WRITE. Every invariant holds, and the mode's
/// mechanisms all ran: take-overs, copies, zero-copy and forwarded
/// writes, replays, byte comparisons.
#[test]
fn a_long_random_run_with_faults_keeps_every_invariant() {
    let mut long = base(7, 5, Mutation::None);
    long.keys = 4;
    long.clients = 6;
    long.safety_ns = 60 * MS;
    long.tearing = true;
    long.reordering = true;
    // Again, for the six clients (a session record each).
    long.use_backup_memory(8192);
    long.faults.extend([
        Fault::CrashLeader { at_ns: 8 * MS },
        Fault::Pause {
            node: 2,
            from_ns: 15 * MS,
            to_ns: 18 * MS,
        },
        Fault::Partition {
            side: vec![1, 4],
            from_ns: 25 * MS,
            to_ns: 29 * MS,
            symmetric: true,
        },
        Fault::CrashPrimaryMidWrite {
            from_ns: 35 * MS,
            writes: 3,
            down_ns: Some(2 * MS),
        },
        Fault::PauseMidCopy {
            from_ns: 45 * MS,
            to_ns: 46 * MS,
        },
    ]);
    let (failures, total) = run_all(std::iter::once(long));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(total.backup_takeovers >= 3, "{total:?}");
    assert_eq!(total.backup_crashes_mid_write, 1);
    assert!(total.backup_copies >= 8 && total.backup_copies_compared > 1000);
    assert!(total.backup_zero_copy > 1000 && total.backup_forwarded > 100);
    assert!(total.backup_replays >= total.backup_forwarded);
}

/// (c) The swarm's backup-memory seeds (a twelfth of the seeds: a third of
/// those with views) under their drawn faults: crashes, restarts,
/// zombies, pauses, partitions, delays, torn and reordered placement,
/// drifting clocks, leaders deposed or isolated, stops in the middle of a
/// WRITE, and the crashes in the middle of a write or a copy drawn for
/// this mode. `tests/swarm.rs` and `tests/subgroups.rs` leave these seeds
/// to this test.
///
/// These seeds found eight engine bugs (2026-11-28 and 12-02), each fixed:
/// a primary whose lease lapsed dropped its write in flight and then
/// answered its retry from its own session record; a primary that stepped
/// down replayed its own last forwarded write from its mailbox; a zombie
/// backup held every forwarded write back for ever; a member of the view
/// copied anew held a torn store while the copy ran and could take over
/// with it; a reply was given on a lease that had run out during a pause;
/// a write that changed nothing (a failing CAS) kept no record of its
/// reply, so a copy of it delivered later ran again and succeeded; a
/// backup granted its next primary while a stopped old one's copy WRITE
/// could still land; a restarted member took over with its empty store.
#[test]
fn swarm_backup_memory_seeds_keep_every_invariant() {
    let seeds = swarm_backup_seeds(0, 24);
    let (failures, total) = run_all(seeds.iter().map(|&s| options_for_seed(s)));
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed:\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
    assert!(total.backup_takeovers > 24 && total.backup_copies > 24);
    assert!(total.backup_zero_copy > 1000 && total.backup_forwarded > 100);
}

/// (d) An update that WRITEs its entry before its item (MacR's Algorithm 1
/// order), with the primary dying between the two: the member that takes
/// over reclaims the entry naming no item, and the key's acknowledged
/// value is gone. Some prefix of the WRITEs of an update replicated by
/// WRITEs alone (values of one size) leaves the successor's copy there;
/// the client history shows it.
#[test]
fn writing_the_entry_before_the_item_is_caught() {
    let mut caught = Vec::new();
    for seed in 1..=2 {
        for writes in 0..=WRITES_OF_ONE_WRITE {
            let mut o = crash_mid_write(seed, writes, true, Mutation::BackupEntryBeforeItem);
            // Two value keys: the clients whose writes were in flight at
            // the crash set their key again when they retry, which hides
            // its lost value; a read of the other key shows it.
            o.keys = 2;
            let r = run(o);
            if r.violations
                .iter()
                .any(|v| v.invariant == "linearizability")
            {
                caught.push((seed, writes));
            }
        }
    }
    assert!(
        !caught.is_empty(),
        "no prefix of a write's WRITEs lost an acknowledged value"
    );
}

/// (d) A primary that answers a write once its WRITEs are posted, not once
/// they completed: at the acknowledgement the backups' copies lack the
/// write (caught in every run: the next write's WRITEs are not even
/// posted yet).
#[test]
fn replying_before_the_writes_completed_is_caught() {
    for seed in 1..=3 {
        let r = run(base(seed, 3, Mutation::BackupReplyBeforeCompletion));
        assert!(
            r.violations
                .iter()
                .any(|v| v.invariant == "backups are copies"),
            "seed {seed}: {:?}",
            violations(&r)
        );
    }
}

/// (d) A primary that copies a member still in its view (and asks no view
/// to drop it): the member's store is torn while the copy runs, and it may
/// take over with it. Caught at the first take-over, when every backup is
/// copied.
#[test]
fn copying_a_member_of_the_view_is_caught() {
    for seed in 1..=2 {
        let r = run(base(seed, 3, Mutation::BackupCopyInView));
        assert!(
            r.violations
                .iter()
                .any(|v| v.invariant == "a member of the view is never copied"),
            "seed {seed}: {:?}",
            violations(&r)
        );
    }
}

/// (d) A backup that replays a forwarded write whoever forwarded it: a
/// primary that steps down replays its own last forward, staged in its own
/// mailbox, on a store its successor copies (seeds 33 and 55: primaries
/// deposed and isolated).
#[test]
fn replaying_a_forward_of_any_sender_is_caught() {
    for seed in [33, 55] {
        assert_seed_catches(seed, Mutation::BackupReplayAnySender, "replays never fail");
    }
}

/// Swarm seed `seed` keeps every invariant, and breaks `invariant` under
/// `mutation`.
fn assert_seed_catches(seed: u64, mutation: Mutation, invariant: &str) {
    let r = run(options_for_seed(seed).with_mutation(mutation));
    assert!(
        r.violations.iter().any(|v| v.invariant == invariant),
        "seed {seed}, {mutation:?}: {:?}",
        violations(&r)
    );
    let clean = run(options_for_seed(seed));
    assert!(
        clean.violations.is_empty(),
        "seed {seed}: {:?}",
        violations(&clean)
    );
}

/// (d) A member that takes over with a store no copy has filled since its
/// process started: seed 4558 restarts a member of the view (its store
/// empty) and then pauses the primary, and the restarted member, its log
/// caught up (the log carries no operation in this mode), claims and
/// serves an empty store: the client history loses every value.
#[test]
fn taking_over_with_an_uncopied_store_is_caught() {
    assert_seed_catches(4558, Mutation::BackupTakeOverUncopied, "linearizability");
}
