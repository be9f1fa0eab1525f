//! Derecho's multicast subgroups and shards (issue 15 item 5) in the
//! simulator: the swarm's seeds that declare subgroups keep every
//! invariant and deliver in them, a restarted member rejoins every
//! subgroup it is in, and the subgroup checkers catch an engine that
//! takes its ranks for member ids (`subgroup-ranks-as-ids`).

use verbatim_core::config::Mutation;
use verbatim_sim::cluster::{run, ClusterOptions, Fault, RunReport};
use verbatim_sim::swarm::{describe, options_for_seed, run_seed};

/// The first `count` swarm seeds from `from` on that declare subgroups
/// (but those in backup-memory mode, judged in `tests/backup.rs`: these are
/// the seeds, with the scenarios, this test ran before that mode was
/// drawn).
fn subgroup_seeds(from: u64, count: usize) -> Vec<u64> {
    let seeds: Vec<u64> = (from..from + 2000)
        .filter(|&s| {
            let o = options_for_seed(s);
            o.config.mcast_subgroups[0] != 0 && o.config.mode != verbatim_core::Mode::BackupMemory
        })
        .take(count)
        .collect();
    assert_eq!(seeds.len(), count, "too few swarm seeds with subgroups");
    seeds
}

/// Runs `seeds` on two threads; returns each seed's options and report.
fn run_all(seeds: &[u64], mutation: Mutation) -> Vec<(u64, ClusterOptions, RunReport)> {
    let halves: Vec<Vec<u64>> = (0..2)
        .map(|t| seeds.iter().copied().skip(t).step_by(2).collect())
        .collect();
    let handles: Vec<_> = halves
        .into_iter()
        .map(|half| {
            std::thread::spawn(move || {
                half.into_iter()
                    .map(|s| {
                        let r = run_seed(s, mutation, false);
                        (s, r.options, r.report)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("worker"))
        .collect()
}

/// About one swarm seed in twelve declares subgroups (half of the
/// volatile multicast seeds): a batch of them (beyond the 300 the swarm
/// test runs) keeps every invariant, delivers in the subgroups, judges
/// final views live, and has subgroup members crash (and restart). (A
/// subgroup changes its view only in the few seeds with death notices
/// whose crash hits a subgroup of three or more: the restart scenario
/// below covers view changes and joins.)
#[test]
fn swarm_seeds_with_subgroups_keep_every_invariant_and_deliver() {
    let seeds = subgroup_seeds(300, 24);
    let mut failures = Vec::new();
    let (mut delivered, mut crashed, mut judged, mut checked) = (0, 0, 0, 0);
    for (s, o, r) in run_all(&seeds, Mutation::None) {
        if !r.violations.is_empty() || r.linearizability_unknown {
            failures.push(format!(
                "seed {s} ({}): {:?}",
                describe(&o),
                r.violations.iter().take(3).collect::<Vec<_>>()
            ));
        }
        delivered += r.subgroup_delivered;
        crashed += u64::from(r.subgroup_member_crashes > 0);
        judged += r.subgroups_judged_live;
        checked += r.subgroup_final_deliveries_checked;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        delivered > 1000,
        "{delivered} subgroup deliveries over seeds {seeds:?}"
    );
    assert!(crashed >= 3, "{crashed} seeds crashed a subgroup member");
    assert!(
        judged >= 5 && checked > 500,
        "{judged} final views judged live, {checked} final deliveries checked"
    );
}

/// Five members; subgroups {1, 2, 3}, {0, 2, 4} and the shard {0, 1};
/// every member multicasts at the top level and in its subgroups every
/// 20 µs on average; member 2 restarts (a new process) at 4 ms, with
/// death notices.
fn restart_scenario(seed: u64, mutation: Mutation) -> ClusterOptions {
    let mut o = ClusterOptions::new(seed, 5).with_mutation(mutation);
    o.config.mcast_window = 8;
    o.config.mcast_payload_bytes_max = 64;
    o.config.mcast_subgroups[..3].copy_from_slice(&[0b01110, 0b10101, 0b00011]);
    o.mcast_send_period_ns = 20_000;
    o.safety_ns = 12_000_000;
    o.crash_notify = true;
    o.faults.push(Fault::Restart {
        node: 2,
        at_ns: 4_000_000,
        down_ns: 300_000,
        after_vote: false,
    });
    o
}

/// The two subgroups member 2 is in each remove its predecessor and add
/// the new process as it asks to join (Derecho §3.4, per subgroup); the
/// shard without it never changes its view; every subgroup's final view
/// is whole and everything sent in it is delivered at all its members.
#[test]
fn a_restarted_member_rejoins_every_subgroup_it_is_in() {
    for seed in [1u64, 2, 3] {
        let r = run(restart_scenario(seed, Mutation::None));
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
        assert_eq!(
            r.subgroup_joins, 2,
            "seed {seed}: the new process joined both its subgroups"
        );
        // Per subgroup of 3: the removal (two installs) and the join (two
        // installs, the joiner's own not counted).
        assert!(
            r.subgroup_installs >= 8,
            "seed {seed}: {} installs",
            r.subgroup_installs
        );
        assert_eq!(r.subgroups_judged_live, 3, "seed {seed}");
        assert!(
            r.subgroup_delivered > 1000 && r.subgroup_final_deliveries_checked > 300,
            "seed {seed}: {} delivered, {} final deliveries checked",
            r.subgroup_delivered,
            r.subgroup_final_deliveries_checked
        );
    }
}

/// A subgroup engine that takes its ranks for member ids
/// (`subgroup-ranks-as-ids`) posts into its region at members outside
/// the subgroup: bytes leave the subgroup.
#[test]
fn taking_subgroup_ranks_for_member_ids_is_caught() {
    let r = run(restart_scenario(1, Mutation::SubgroupRanksAsIds));
    assert!(
        r.violations
            .iter()
            .any(|v| v.invariant == "subgroup bytes stay among its members"),
        "{:?}",
        r.violations
    );
}

/// The swarm's own subgroup seeds catch `subgroup-ranks-as-ids` within
/// their first few (a subgroup of the first members, ranks equal to ids,
/// hides it; shards over a random order of the members rarely are).
#[test]
fn the_swarm_catches_subgroup_ranks_taken_for_member_ids() {
    let seeds = subgroup_seeds(0, 6);
    let caught: Vec<u64> = run_all(&seeds, Mutation::SubgroupRanksAsIds)
        .into_iter()
        .filter(|(_, _, r)| {
            r.violations
                .iter()
                .any(|v| v.invariant == "subgroup bytes stay among its members")
        })
        .map(|(s, _, _)| s)
        .collect();
    assert!(
        caught.len() >= 3,
        "only seeds {caught:?} of {seeds:?} caught subgroup ranks taken for member ids"
    );
}

/// Four members in two shards of two, {0, 2} and {1, 3}; member 3
/// restarts (a new process) at 4 ms, with death notices. Its shard's
/// survivor has no majority of two on its own: it ends the epoch once the
/// top-level group (three of four) decided a view without member 3, then
/// adds the new process as it asks to join.
fn shards_of_two_scenario(seed: u64, mutation: Mutation) -> ClusterOptions {
    let mut o = ClusterOptions::new(seed, 4).with_mutation(mutation);
    o.config.mcast_window = 8;
    o.config.mcast_payload_bytes_max = 64;
    o.config.mcast_subgroups[..2].copy_from_slice(&[0b0101, 0b1010]);
    o.mcast_send_period_ns = 20_000;
    o.safety_ns = 12_000_000;
    o.crash_notify = true;
    o.faults.push(Fault::Restart {
        node: 3,
        at_ns: 4_000_000,
        down_ns: 300_000,
        after_vote: false,
    });
    o
}

#[test]
fn a_shard_of_two_goes_on_after_the_top_level_removes_a_member() {
    for seed in [1u64, 2, 3] {
        let r = run(shards_of_two_scenario(seed, Mutation::None));
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
        assert_eq!(
            r.subgroup_joins, 1,
            "seed {seed}: the new process joined its shard"
        );
        assert_eq!(r.subgroups_judged_live, 2, "seed {seed}");
        assert!(
            r.subgroup_final_deliveries_checked > 100,
            "seed {seed}: {} final deliveries checked",
            r.subgroup_final_deliveries_checked
        );
    }
}

/// A subgroup that ignores the top-level group's removals
/// (`subgroup-ignores-parent-removals`) stays wedged: the new process
/// never joins its shard (the liveness checker sees it outside the view).
#[test]
fn ignoring_the_top_level_removals_is_caught() {
    let r = run(shards_of_two_scenario(
        1,
        Mutation::SubgroupIgnoresParentRemovals,
    ));
    assert!(
        r.violations
            .iter()
            .any(|v| v.invariant.starts_with("subgroup view changes finish")),
        "{:?}",
        r.violations
    );
}
