//! `verbatim-sim`: swarm runs, single traced seeds, and the LogGP model.
//!
//! ```text
//! verbatim-sim --seeds N [--start S] [--threads T] [--mutation NAME] [--allow-undecided]
//! verbatim-sim --seed S [--trace] [--mutation NAME] [--allow-undecided]
//! verbatim-sim --model
//! verbatim-sim --rdmc --seeds N [--start S] [--threads T] [--members M] [--mutation NAME]
//! verbatim-sim --rdmc --seed S [--trace] [--members M] [--mutation NAME]
//! ```
//! A swarm run ends with `seeds: N, violations: V, undecided: U` and exits
//! 1 when V > 0 or U > 0: a seed whose linearizability search ran out of
//! budget proved nothing, so it is not a pass (`--allow-undecided` says
//! otherwise, for exploring).
//!
//! `--rdmc` runs Derecho's large-message multicast (`verbatim_sim::rdmc_run`)
//! alone instead of the cluster, with the same summary line and exit
//! status; a mutation that breaks RDMC itself (`rdmc-flag-with-chunk`) runs
//! there without `--rdmc` too: the cluster swarm runs RDMC only under the
//! atomic multicast's large messages, in about one seed in twelve.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use verbatim_core::config::Mutation;
use verbatim_sim::swarm::{describe, run_seed};

fn usage() -> ExitCode {
    eprintln!(
        "usage:\n  verbatim-sim --seeds N [--start S] [--threads T] [--mutation NAME] [--allow-undecided]\n  \
         verbatim-sim --seed S [--trace] [--mutation NAME] [--allow-undecided]\n  verbatim-sim --model\n  \
         verbatim-sim --rdmc --seeds N [--start S] [--threads T] [--members M] [--mutation NAME]\n  \
         verbatim-sim --rdmc --seed S [--trace] [--members M] [--mutation NAME]\n\
         mutations: none, commit-on-minority, vote-without-log-check, read-without-term-check, counter-read-without-gap, ignore-revoke-failure, commit-pointer-beyond-ack,\n  \
         skip-revoke, skip-vote-replication, commit-before-own-noop, drop-overwrite-guard, skip-session-check,\n  \
         recover-from-any-donor, restart-without-vote-recovery, false-suspicion-without-proof,\n  \
         act-on-own-stall, transitional-new-majority-only, never-readd-zombies, grant-while-copying,\n  \
         grant-while-restoring, commit-before-view-active, lease-without-drift-allowance,\n  \
         hold-log-for-recovery-until-full, pb-commit-on-majority, view-leader-without-votes,\n  \
         campaign-without-view, reply-on-speculation, keep-speculation-when-deposed,\n  \
         deliver-before-stable, trim-before-echo, ignore-suspicions, deliver-before-persisted,\n  \
         restart-at-common-prefix, rdmc-flag-with-chunk, large-ref-before-payload,\n  \
         subgroup-ranks-as-ids, subgroup-ignores-parent-removals, backup-entry-before-item,\n  \
         backup-reply-before-completion, backup-copy-in-view, backup-replay-any-sender,\n  \
         backup-take-over-uncopied, no-refresh-for-rejoin\n\
         verbatim-sim --list-mutations prints them one per line"
    );
    ExitCode::from(2)
}

/// Every mutation's name (the soak script runs each).
const MUTATIONS: [&str; 42] = [
    "commit-on-minority",
    "vote-without-log-check",
    "read-without-term-check",
    "counter-read-without-gap",
    "ignore-revoke-failure",
    "commit-pointer-beyond-ack",
    "skip-revoke",
    "skip-vote-replication",
    "commit-before-own-noop",
    "drop-overwrite-guard",
    "skip-session-check",
    "recover-from-any-donor",
    "restart-without-vote-recovery",
    "false-suspicion-without-proof",
    "act-on-own-stall",
    "transitional-new-majority-only",
    "never-readd-zombies",
    "grant-while-copying",
    "grant-while-restoring",
    "commit-before-view-active",
    "lease-without-drift-allowance",
    "hold-log-for-recovery-until-full",
    "pb-commit-on-majority",
    "view-leader-without-votes",
    "campaign-without-view",
    "reply-on-speculation",
    "keep-speculation-when-deposed",
    "deliver-before-stable",
    "trim-before-echo",
    "ignore-suspicions",
    "deliver-before-persisted",
    "restart-at-common-prefix",
    "rdmc-flag-with-chunk",
    "large-ref-before-payload",
    "subgroup-ranks-as-ids",
    "subgroup-ignores-parent-removals",
    "backup-entry-before-item",
    "backup-reply-before-completion",
    "backup-copy-in-view",
    "backup-replay-any-sender",
    "backup-take-over-uncopied",
    "no-refresh-for-rejoin",
];

fn parse_mutation(s: &str) -> Option<Mutation> {
    Some(match s {
        "none" => Mutation::None,
        "commit-on-minority" => Mutation::CommitOnMinority,
        "commit-before-view-active" => Mutation::CommitBeforeViewActive,
        "hold-log-for-recovery-until-full" => Mutation::HoldLogForRecoveryUntilFull,
        "lease-without-drift-allowance" => Mutation::LeaseWithoutDriftAllowance,
        "vote-without-log-check" => Mutation::VoteWithoutLogCheck,
        "read-without-term-check" => Mutation::ReadWithoutTermCheck,
        "counter-read-without-gap" => Mutation::CounterReadWithoutGap,
        "ignore-revoke-failure" => Mutation::IgnoreRevokeFailure,
        "commit-pointer-beyond-ack" => Mutation::CommitPointerBeyondAck,
        "skip-revoke" => Mutation::SkipRevoke,
        "skip-vote-replication" => Mutation::SkipVoteReplication,
        "commit-before-own-noop" => Mutation::CommitBeforeOwnNoop,
        "drop-overwrite-guard" => Mutation::DropOverwriteGuard,
        "skip-session-check" => Mutation::SkipSessionCheck,
        "recover-from-any-donor" => Mutation::RecoverFromAnyDonor,
        "restart-without-vote-recovery" => Mutation::RestartWithoutVoteRecovery,
        "false-suspicion-without-proof" => Mutation::FalseSuspicionWithoutProof,
        "act-on-own-stall" => Mutation::ActOnOwnStall,
        "transitional-new-majority-only" => Mutation::TransitionalNewMajorityOnly,
        "never-readd-zombies" => Mutation::NeverReaddZombies,
        "grant-while-copying" => Mutation::GrantWhileCopying,
        "grant-while-restoring" => Mutation::GrantWhileRestoring,
        "pb-commit-on-majority" => Mutation::PbCommitOnMajority,
        "view-leader-without-votes" => Mutation::ViewLeaderWithoutVotes,
        "campaign-without-view" => Mutation::CampaignWithoutView,
        "reply-on-speculation" => Mutation::ReplyOnSpeculation,
        "keep-speculation-when-deposed" => Mutation::KeepSpeculationWhenDeposed,
        "deliver-before-stable" => Mutation::DeliverBeforeStable,
        "trim-before-echo" => Mutation::TrimBeforeEcho,
        "ignore-suspicions" => Mutation::IgnoreSuspicions,
        "deliver-before-persisted" => Mutation::DeliverBeforePersisted,
        "restart-at-common-prefix" => Mutation::RestartAtCommonPrefix,
        "rdmc-flag-with-chunk" => Mutation::RdmcFlagWithChunk,
        "large-ref-before-payload" => Mutation::LargeRefBeforePayload,
        "subgroup-ranks-as-ids" => Mutation::SubgroupRanksAsIds,
        "subgroup-ignores-parent-removals" => Mutation::SubgroupIgnoresParentRemovals,
        "backup-entry-before-item" => Mutation::BackupEntryBeforeItem,
        "backup-reply-before-completion" => Mutation::BackupReplyBeforeCompletion,
        "backup-copy-in-view" => Mutation::BackupCopyInView,
        "backup-replay-any-sender" => Mutation::BackupReplayAnySender,
        "backup-take-over-uncopied" => Mutation::BackupTakeOverUncopied,
        "no-refresh-for-rejoin" => Mutation::NoRefreshForRejoin,
        _ => return None,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seeds: Option<u64> = None;
    let mut seed: Option<u64> = None;
    let mut start = 0u64;
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut trace = false;
    let mut model = false;
    let mut mutation = Mutation::None;
    let mut allow_undecided = false;
    let mut rdmc = false;
    let mut mutation_name = String::from("none");
    let mut members: Option<u8> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> Option<u64> {
            let v = it.next()?.parse().ok();
            if v.is_none() {
                eprintln!("{name} needs a number");
            }
            v
        };
        match a.as_str() {
            "--seeds" => match num("--seeds") {
                Some(v) => seeds = Some(v),
                None => return usage(),
            },
            "--seed" => match num("--seed") {
                Some(v) => seed = Some(v),
                None => return usage(),
            },
            "--start" => match num("--start") {
                Some(v) => start = v,
                None => return usage(),
            },
            "--threads" => match num("--threads") {
                Some(v) => threads = v.max(1) as usize,
                None => return usage(),
            },
            "--trace" => trace = true,
            "--rdmc" => rdmc = true,
            "--members" => match num("--members") {
                Some(v @ 2..=6) => members = Some(v as u8),
                Some(v) => {
                    eprintln!("--members takes 2 to 6, not {v}");
                    return usage();
                }
                None => return usage(),
            },
            "--list-mutations" => {
                for m in MUTATIONS {
                    println!("{m}");
                }
                return ExitCode::SUCCESS;
            }
            "--allow-undecided" => allow_undecided = true,
            "--model" => model = true,
            "--mutation" => match it.next().and_then(|m| Some((m, parse_mutation(m)?))) {
                Some((name, m)) => {
                    mutation = m;
                    mutation_name = name.clone();
                }
                None => return usage(),
            },
            "-h" | "--help" => {
                usage();
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other}");
                return usage();
            }
        }
    }
    if model {
        print!(
            "{}",
            verbatim_sim::model::render(&verbatim_sim::model::run_model())
        );
        return ExitCode::SUCCESS;
    }
    if rdmc || verbatim_sim::rdmc_run::is_rdmc_mutation(mutation) {
        return rdmc_main(RdmcArgs {
            seed,
            seeds,
            start,
            threads,
            members,
            mutation,
            mutation_name,
            trace,
        });
    }
    if members.is_some() {
        eprintln!("--members is for --rdmc runs (a cluster seed draws its group size)");
        return usage();
    }
    if let Some(s) = seed {
        let r = run_seed(s, mutation, trace);
        for line in &r.report.trace {
            println!("{line}");
        }
        println!("seed {s}: {}", describe(&r.options));
        println!(
            "ops {}/{} answered, {} terms with a leader, {} entries committed, end {:.3} ms, digest {:#018x}",
            r.report.ops_ok,
            r.report.ops_total,
            r.report.terms_with_leader,
            r.report.committed,
            r.report.end_ns as f64 / 1e6,
            r.report.digest
        );
        for v in &r.report.violations {
            println!("{v}");
        }
        let undecided = u64::from(r.report.linearizability_unknown);
        println!(
            "linearizability search: at most {} steps on one key",
            r.report.linearizability_steps
        );
        println!(
            "leases: {} reads answered under a lease, {} samples with a lease held",
            r.report.lease_reads, r.report.lease_samples
        );
        println!(
            "leaders: {} elections started, {} of them by a view; {} primaries by a view",
            r.report.elections_started, r.report.view_campaigns, r.report.view_takeovers
        );
        if r.report.mcast_sent > 0 {
            println!(
                "multicast: {} sent, {} deliveries checked, {} views installed; large (RDMC): \
                 {} sent, mcast_large {} delivered",
                r.report.mcast_sent,
                r.report.mcast_delivered,
                r.report.mcast_installs,
                r.report.mcast_large_sent,
                r.report.mcast_large
            );
        }
        if r.options.config.mode == verbatim_core::Mode::BackupMemory {
            println!(
                "backup-memory: {} take-overs audited, {} copies, {} writes by WRITEs alone, {} forwarded, \
                 {} replays, {} copies compared byte for byte ({} bytes), {} primaries crashed mid-write, \
                 {} members mid-copy",
                r.report.backup_takeovers,
                r.report.backup_copies,
                r.report.backup_zero_copy,
                r.report.backup_forwarded,
                r.report.backup_replays,
                r.report.backup_copies_compared,
                r.report.backup_bytes_compared,
                r.report.backup_crashes_mid_write,
                r.report.backup_crashes_mid_copy
            );
        }
        if r.report.subgroup_sent > 0 {
            println!(
                "subgroups: {} sent, {} deliveries checked, {} views installed, {} joins, \
                 {} subgroup member crashes, {} final views judged live ({} final deliveries checked)",
                r.report.subgroup_sent,
                r.report.subgroup_delivered,
                r.report.subgroup_installs,
                r.report.subgroup_joins,
                r.report.subgroup_member_crashes,
                r.report.subgroups_judged_live,
                r.report.subgroup_final_deliveries_checked
            );
        }
        println!(
            "seeds: 1, violations: {}, undecided: {undecided}",
            r.report.violations.len()
        );
        return if r.report.violations.is_empty() && (undecided == 0 || allow_undecided) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let Some(n) = seeds else { return usage() };
    let began = Instant::now();
    let next = Arc::new(AtomicU64::new(start));
    let failed = Arc::new(Mutex::new(Vec::new()));
    let undecided = Arc::new(Mutex::new(Vec::new()));
    let most_steps = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    // Seeds in which a view started a campaign, took a primary over, a
    // primary executed ahead of its commit, one rolled that back; seeds
    // that multicast, and the multicast deliveries checked; seeds that
    // drew large messages, those that delivered one, the large deliveries
    // checked, and the seeds with large messages that changed a view.
    // Then seeds that declared subgroups, subgroup deliveries checked,
    // seeds that changed a subgroup view, subgroup joins, seeds that
    // crashed a subgroup member, and final subgroup views judged live.
    // Then seeds in backup-memory mode, and over them: take-overs, copies
    // completed, writes replicated by WRITEs alone, writes forwarded,
    // replays, copies compared with the primary's, primaries crashed in
    // the middle of a write, members crashed in the middle of a copy.
    let by_view: Arc<[AtomicU64; 30]> = Arc::new(Default::default());
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (next, failed, undecided, most_steps, done, by_view) = (
                next.clone(),
                failed.clone(),
                undecided.clone(),
                most_steps.clone(),
                done.clone(),
                by_view.clone(),
            );
            std::thread::spawn(move || loop {
                let s = next.fetch_add(1, Ordering::Relaxed);
                if s >= start + n {
                    break;
                }
                let r = run_seed(s, mutation, false);
                most_steps.fetch_max(r.report.linearizability_steps, Ordering::Relaxed);
                by_view[0].fetch_add(u64::from(r.report.view_campaigns > 0), Ordering::Relaxed);
                by_view[1].fetch_add(u64::from(r.report.view_takeovers > 0), Ordering::Relaxed);
                by_view[2].fetch_add(
                    u64::from(r.report.operations_speculated > 0),
                    Ordering::Relaxed,
                );
                by_view[3].fetch_add(
                    u64::from(r.report.speculation_rollbacks > 0),
                    Ordering::Relaxed,
                );
                by_view[4].fetch_add(u64::from(r.report.mcast_sent > 0), Ordering::Relaxed);
                by_view[5].fetch_add(r.report.mcast_delivered, Ordering::Relaxed);
                by_view[6].fetch_add(u64::from(r.report.mcast_installs > 0), Ordering::Relaxed);
                by_view[7].fetch_add(r.report.mcast_installs, Ordering::Relaxed);
                by_view[8].fetch_add(r.report.mcast_joins, Ordering::Relaxed);
                by_view[9].fetch_add(u64::from(r.report.mcast_restarts > 0), Ordering::Relaxed);
                by_view[10].fetch_add(r.report.mcast_restarts, Ordering::Relaxed);
                by_view[11].fetch_add(
                    u64::from(r.options.config.rdmc_slots > 0),
                    Ordering::Relaxed,
                );
                by_view[12].fetch_add(u64::from(r.report.mcast_large > 0), Ordering::Relaxed);
                by_view[13].fetch_add(r.report.mcast_large, Ordering::Relaxed);
                by_view[14].fetch_add(
                    u64::from(r.report.mcast_large > 0 && r.report.mcast_installs > 0),
                    Ordering::Relaxed,
                );
                by_view[15].fetch_add(
                    u64::from(r.options.config.mcast_subgroups[0] != 0),
                    Ordering::Relaxed,
                );
                by_view[16].fetch_add(r.report.subgroup_delivered, Ordering::Relaxed);
                by_view[17].fetch_add(u64::from(r.report.subgroup_installs > 0), Ordering::Relaxed);
                by_view[18].fetch_add(r.report.subgroup_joins, Ordering::Relaxed);
                by_view[19].fetch_add(
                    u64::from(r.report.subgroup_member_crashes > 0),
                    Ordering::Relaxed,
                );
                by_view[20].fetch_add(r.report.subgroups_judged_live, Ordering::Relaxed);
                by_view[21].fetch_add(
                    u64::from(r.options.config.mode == verbatim_core::Mode::BackupMemory),
                    Ordering::Relaxed,
                );
                for (k, v) in [
                    r.report.backup_takeovers,
                    r.report.backup_copies,
                    r.report.backup_zero_copy,
                    r.report.backup_forwarded,
                    r.report.backup_replays,
                    r.report.backup_copies_compared,
                    r.report.backup_crashes_mid_write,
                    r.report.backup_crashes_mid_copy,
                ]
                .into_iter()
                .enumerate()
                {
                    by_view[22 + k].fetch_add(v, Ordering::Relaxed);
                }
                if r.report.linearizability_unknown {
                    eprintln!(
                        "seed {s} UNDECIDED: the linearizability search ran out of budget ({})",
                        describe(&r.options)
                    );
                    undecided.lock().unwrap().push(s);
                }
                if !r.report.violations.is_empty() {
                    eprintln!("seed {s} FAILED ({}):", describe(&r.options));
                    for v in &r.report.violations {
                        eprintln!("  {v}");
                    }
                    eprintln!(
                        "  reproduce: cargo run -p verbatim-sim --release -- --seed {s} --trace"
                    );
                    failed.lock().unwrap().push((s, r.report.violations.len()));
                }
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if d % 1000 == 0 {
                    eprintln!("... {d}/{n} seeds, {:.1} s", began.elapsed().as_secs_f64());
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker thread");
    }
    let failed = failed.lock().unwrap();
    let mut undecided = undecided.lock().unwrap();
    undecided.sort_unstable();
    let violations: usize = failed.iter().map(|(_, v)| v).sum();
    println!(
        "wall time {:.1} s, {} threads; linearizability search: at most {} steps on one key (budget {})",
        began.elapsed().as_secs_f64(),
        threads,
        most_steps.load(Ordering::Relaxed),
        verbatim_sim::check::linearizability::DEFAULT_STEPS_PER_KEY
    );
    println!(
        "seeds with a campaign started by a view: {}, with a primary taking over by a view: {}, \
         executing ahead of the commit: {} (rolled back: {}); multicasting: {} ({} deliveries checked; \
         {} seeds changed a multicast view, {} views installed, {} joins; {} seeds restarted a \
         persistent group from its logs, {} restart cuts delivered; {} seeds drew large messages \
         (RDMC), {} delivered some, mcast_large {} large deliveries checked, {} of those seeds \
         changed a view); seeds with subgroups: {} ({} subgroup deliveries checked; {} seeds \
         changed a subgroup view, {} subgroup joins, {} seeds crashed a subgroup member, {} final \
         subgroup views judged live)",
        by_view[0].load(Ordering::Relaxed),
        by_view[1].load(Ordering::Relaxed),
        by_view[2].load(Ordering::Relaxed),
        by_view[3].load(Ordering::Relaxed),
        by_view[4].load(Ordering::Relaxed),
        by_view[5].load(Ordering::Relaxed),
        by_view[6].load(Ordering::Relaxed),
        by_view[7].load(Ordering::Relaxed),
        by_view[8].load(Ordering::Relaxed),
        by_view[9].load(Ordering::Relaxed),
        by_view[10].load(Ordering::Relaxed),
        by_view[11].load(Ordering::Relaxed),
        by_view[12].load(Ordering::Relaxed),
        by_view[13].load(Ordering::Relaxed),
        by_view[14].load(Ordering::Relaxed),
        by_view[15].load(Ordering::Relaxed),
        by_view[16].load(Ordering::Relaxed),
        by_view[17].load(Ordering::Relaxed),
        by_view[18].load(Ordering::Relaxed),
        by_view[19].load(Ordering::Relaxed),
        by_view[20].load(Ordering::Relaxed)
    );
    println!(
        "seeds in backup-memory mode: {} ({} take-overs audited, {} copies of the store, {} writes \
         replicated by WRITEs alone, {} forwarded, {} replays, {} copies compared byte for byte, \
         {} primaries crashed in the middle of a write, {} members in the middle of a copy)",
        by_view[21].load(Ordering::Relaxed),
        by_view[22].load(Ordering::Relaxed),
        by_view[23].load(Ordering::Relaxed),
        by_view[24].load(Ordering::Relaxed),
        by_view[25].load(Ordering::Relaxed),
        by_view[26].load(Ordering::Relaxed),
        by_view[27].load(Ordering::Relaxed),
        by_view[28].load(Ordering::Relaxed),
        by_view[29].load(Ordering::Relaxed)
    );
    if !failed.is_empty() {
        let list: Vec<String> = failed.iter().map(|(s, _)| s.to_string()).collect();
        println!("failing seeds: {}", list.join(" "));
    }
    if !undecided.is_empty() {
        let list: Vec<String> = undecided.iter().map(|s| s.to_string()).collect();
        println!("undecided seeds: {}", list.join(" "));
    }
    println!(
        "seeds: {n}, violations: {violations}, undecided: {}",
        undecided.len()
    );
    if violations > 0 || (!undecided.is_empty() && !allow_undecided) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// What an RDMC run was asked for.
struct RdmcArgs {
    seed: Option<u64>,
    seeds: Option<u64>,
    start: u64,
    threads: usize,
    members: Option<u8>,
    mutation: Mutation,
    /// As given on the command line (for the reproduce line).
    mutation_name: String,
    trace: bool,
}

/// `--rdmc`: one traced seed, or a swarm of seeds on a few threads, with
/// the cluster swarm's closing line (`seeds: N, violations: V, undecided:
/// 0`; RDMC's checkers always decide) and exit status.
fn rdmc_main(a: RdmcArgs) -> ExitCode {
    use verbatim_sim::rdmc_run::{describe as describe_rdmc, run_seed_with_members};
    if let Some(s) = a.seed {
        let r = run_seed_with_members(s, a.members, a.mutation, a.trace);
        for line in &r.report.trace {
            println!("{line}");
        }
        println!("seed {s}: {}", describe_rdmc(&r.options));
        println!(
            "sent {}, delivered {}, chunks written {}, wedged members {}, late placements {}, \
             events {}, end {:.3} ms",
            r.report.sent,
            r.report.delivered,
            r.report.chunks_written,
            r.report.wedged,
            r.report.late_placements,
            r.report.events,
            r.report.end_ns as f64 / 1e6
        );
        for v in &r.report.violations {
            println!("{v}");
        }
        println!(
            "seeds: 1, violations: {}, undecided: 0",
            r.report.violations.len()
        );
        return if r.report.violations.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let Some(n) = a.seeds else { return usage() };
    let (start, members, mutation) = (a.start, a.members, a.mutation);
    let mutated = if mutation == Mutation::None {
        String::new()
    } else {
        format!(" --mutation {}", a.mutation_name)
    };
    let began = Instant::now();
    let next = Arc::new(AtomicU64::new(start));
    let failed = Arc::new(Mutex::new(Vec::new()));
    // Totals: messages sent, deliveries checked, seeds with reordering,
    // with a crash, with a wedged member.
    let totals: Arc<[AtomicU64; 5]> = Arc::new(Default::default());
    let workers: Vec<_> = (0..a.threads)
        .map(|_| {
            let (next, failed, totals, mutated) =
                (next.clone(), failed.clone(), totals.clone(), mutated.clone());
            std::thread::spawn(move || loop {
                let s = next.fetch_add(1, Ordering::Relaxed);
                if s >= start + n {
                    break;
                }
                let r = run_seed_with_members(s, members, mutation, false);
                totals[0].fetch_add(r.report.sent, Ordering::Relaxed);
                totals[1].fetch_add(r.report.delivered, Ordering::Relaxed);
                totals[2].fetch_add(u64::from(r.options.reordering), Ordering::Relaxed);
                totals[3].fetch_add(u64::from(r.options.crash.is_some()), Ordering::Relaxed);
                totals[4].fetch_add(u64::from(r.report.wedged > 0), Ordering::Relaxed);
                if !r.report.violations.is_empty() {
                    eprintln!("seed {s} FAILED ({}):", describe_rdmc(&r.options));
                    for v in r.report.violations.iter().take(10) {
                        eprintln!("  {v}");
                    }
                    let m = members.map_or(String::new(), |m| format!(" --members {m}"));
                    eprintln!(
                        "  reproduce: cargo run -p verbatim-sim --release -- --rdmc --seed {s}{m}{mutated} --trace"
                    );
                    failed
                        .lock()
                        .unwrap()
                        .push((s, r.report.violations.len()));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker thread");
    }
    let mut failed = failed.lock().unwrap();
    failed.sort_unstable();
    let violations: usize = failed.iter().map(|(_, v)| v).sum();
    println!(
        "wall time {:.1} s, {} threads; rdmc: {} messages sent, {} deliveries checked; seeds with \
         reordering: {}, with a crash: {}, with a wedged member: {}",
        began.elapsed().as_secs_f64(),
        a.threads,
        totals[0].load(Ordering::Relaxed),
        totals[1].load(Ordering::Relaxed),
        totals[2].load(Ordering::Relaxed),
        totals[3].load(Ordering::Relaxed),
        totals[4].load(Ordering::Relaxed)
    );
    if !failed.is_empty() {
        let list: Vec<String> = failed.iter().map(|(s, _)| s.to_string()).collect();
        println!("failing seeds: {}", list.join(" "));
    }
    println!("seeds: {n}, violations: {violations}, undecided: 0");
    if violations > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
