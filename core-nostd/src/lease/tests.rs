//! Unit tests of the lease rules, the overlap checker fed violating
//! histories, and a randomized harness: processes whose clocks drift
//! renew leases against coordinators while views are decided, and every
//! run's real-time active intervals must not conflict.

extern crate std;

use super::check::{no_overlapping_views, ActiveInterval, Overlap};
use super::*;
use crate::rng::SplitMix64;
use std::collections::BinaryHeap;
use std::vec::Vec;

const LEASE_NS: u64 = 20_000;

fn cfg(drift_ppm: u32) -> LeaseConfig {
    LeaseConfig::new(LEASE_NS, drift_ppm, LEASE_NS / 2)
}

fn view(epoch: u64) -> LeasedView {
    LeasedView {
        epoch,
        compatible_with_previous: false,
        older_leases_ended: false,
    }
}

#[test]
fn configurations_that_cannot_hold_a_lease_are_refused() {
    assert_eq!(
        LeaseConfig::new(0, 10, 0).validate(),
        Err(LeaseConfigError::ZeroLease)
    );
    assert_eq!(
        LeaseConfig::new(100, 1_000_000, 0).validate(),
        Err(LeaseConfigError::DriftTooLarge)
    );
    // 10 ns at 10 % is an allowance of 1 ns: fine; at 2 ns δ... 1 ns left.
    assert_eq!(LeaseConfig::new(10, 100_000, 0).validate(), Ok(()));
    assert_eq!(
        LeaseConfig::new(1, 100_000, 0).validate(),
        Err(LeaseConfigError::AllowanceExceedsLease)
    );
    assert_eq!(
        LeaseConfig::new(100, 0, 101).validate(),
        Err(LeaseConfigError::MarginExceedsLease)
    );
    assert!(LeaseKeeper::new(LeaseConfig::new(0, 0, 0)).is_err());
}

#[test]
fn the_allowance_shortens_holding_and_lengthens_waiting() {
    let c = cfg(1_000);
    assert_eq!(c.allowance_ns(), 20);
    assert_eq!(c.hold_ns(), 19_980);
    assert_eq!(c.wait_ns(), 20_020);
    // Rounded up: 20 µs at 1 ppm is 0.02 ns, still 1 ns.
    assert_eq!(cfg(1).allowance_ns(), 1);
    assert_eq!(cfg(0).allowance_ns(), 0);
    // No overflow at the extremes.
    let huge = LeaseConfig::new(u64::MAX, 999_999, 0);
    assert_eq!(
        huge.allowance_ns(),
        (u128::from(u64::MAX) * 999_999).div_ceil(1_000_000) as u64
    );
}

#[test]
fn a_new_view_waits_out_the_old_leases_then_is_active_until_its_hold_ends() {
    let c = cfg(1_000);
    let mut k = LeaseKeeper::new(c).unwrap();
    assert!(!k.active(1, 0), "no view yet");
    assert!(!k.renewal_due(0));
    assert!(k.follow(view(1), 1_000));
    assert!(k.renewal_due(1_000));
    let r = k.begin_renewal(1_000).unwrap();
    assert!(!k.renewal_due(1_001), "one check at a time");
    assert!(k.begin_renewal(1_001).is_none());
    assert_eq!(
        k.finish_renewal(r, true),
        RenewalOutcome::Started {
            start_ns: 1_000 + c.wait_ns()
        }
    );
    assert!(!k.active(1, 1_500), "during the wait");
    assert!(!k.active(1, 1_000 + c.wait_ns()), "not extended yet");
    // The next check is due a margin before the start, and opens it.
    let due = 1_000 + c.wait_ns() - c.renew_margin_ns;
    assert!(!k.renewal_due(due - 1));
    assert!(k.renewal_due(due));
    let r = k.begin_renewal(due).unwrap();
    assert_eq!(
        k.finish_renewal(r, true),
        RenewalOutcome::Extended {
            end_ns: due + c.hold_ns()
        }
    );
    assert!(!k.active(1, 1_000 + c.wait_ns() - 1));
    assert!(k.active(1, 1_000 + c.wait_ns()));
    assert!(k.active(1, due + c.hold_ns() - 1));
    assert!(!k.active(1, due + c.hold_ns()), "expired");
    assert!(!k.active(2, 1_000 + c.wait_ns()), "another view");
    assert_eq!(k.remaining_ns(due + c.hold_ns() - 5), 5);
}

#[test]
fn an_extension_never_shortens_the_lease() {
    let c = cfg(0);
    let mut k = LeaseKeeper::new(c).unwrap();
    k.follow(view(1), 0);
    let first = k.begin_renewal(0).unwrap();
    k.finish_renewal(first, true);
    let late = k.begin_renewal(30_000).unwrap();
    assert_eq!(
        k.finish_renewal(late, true),
        RenewalOutcome::Extended { end_ns: 50_000 }
    );
    // A check stamped earlier (it was slow to come back) does not move
    // the end backwards.
    let early = k.begin_renewal(25_000).unwrap();
    assert_eq!(
        k.finish_renewal(early, true),
        RenewalOutcome::Extended { end_ns: 50_000 }
    );
}

#[test]
fn a_filled_next_slot_ends_the_renewals_of_a_view() {
    let mut k = LeaseKeeper::new(cfg(0)).unwrap();
    k.follow(view(3), 0);
    let r = k.begin_renewal(0).unwrap();
    k.finish_renewal(r, true);
    let r = k.begin_renewal(15_000).unwrap();
    k.finish_renewal(r, true);
    assert!(k.active(3, 30_000));
    let r = k.begin_renewal(30_000).unwrap();
    assert_eq!(k.finish_renewal(r, false), RenewalOutcome::Superseded);
    assert!(!k.renewal_due(34_000), "never renewed again");
    assert!(k.begin_renewal(34_000).is_none());
    // What was granted before the check stays granted (the newer view
    // waits for it), then it is gone.
    assert!(k.active(3, 34_999));
    assert!(!k.active(3, 35_000));
}

#[test]
fn a_check_that_found_too_few_answers_is_abandoned_and_retried() {
    let mut k = LeaseKeeper::new(cfg(0)).unwrap();
    k.follow(view(1), 0);
    let r = k.begin_renewal(0).unwrap();
    k.abandon_renewal();
    assert!(k.renewal_due(1));
    assert_eq!(k.finish_renewal(r, true), RenewalOutcome::Stale);
    let r = k.begin_renewal(1).unwrap();
    assert!(matches!(
        k.finish_renewal(r, true),
        RenewalOutcome::Started { .. }
    ));
}

#[test]
fn a_check_of_a_view_left_behind_is_stale_and_views_only_move_forward() {
    let mut k = LeaseKeeper::new(cfg(0)).unwrap();
    k.follow(view(2), 0);
    let r = k.begin_renewal(0).unwrap();
    assert!(k.follow(view(3), 10));
    assert_eq!(k.finish_renewal(r, true), RenewalOutcome::Stale);
    assert!(!k.follow(view(3), 20));
    assert!(!k.follow(view(1), 20));
    assert_eq!(k.view(), Some(view(3)));
}

fn hold_active(k: &mut LeaseKeeper, epoch: u64, from_ns: u64) -> u64 {
    k.follow(view(epoch), from_ns);
    let r = k.begin_renewal(from_ns).unwrap();
    k.finish_renewal(r, true);
    let at = from_ns + k.config().wait_ns() - 1;
    let r = k.begin_renewal(at).unwrap();
    k.finish_renewal(r, true);
    let now = from_ns + k.config().wait_ns();
    assert!(k.active(epoch, now));
    now
}

#[test]
fn a_compatible_view_follows_an_active_one_without_a_wait() {
    let mut k = LeaseKeeper::new(cfg(1_000)).unwrap();
    let now = hold_active(&mut k, 1, 0);
    k.follow(
        LeasedView {
            epoch: 2,
            compatible_with_previous: true,
            older_leases_ended: false,
        },
        now,
    );
    assert!(!k.active(1, now), "the old view is left");
    let r = k.begin_renewal(now).unwrap();
    assert_eq!(
        k.finish_renewal(r, true),
        RenewalOutcome::Extended {
            end_ns: now + k.config().hold_ns()
        }
    );
    assert!(k.active(2, now));
}

#[test]
fn a_view_whose_older_leases_ended_starts_at_its_first_check() {
    let mut k = LeaseKeeper::new(cfg(1_000)).unwrap();
    k.follow(view(1), 0);
    k.follow(
        LeasedView {
            epoch: 2,
            compatible_with_previous: false,
            older_leases_ended: true,
        },
        10,
    );
    let r = k.begin_renewal(10).unwrap();
    assert_eq!(
        k.finish_renewal(r, true),
        RenewalOutcome::Extended {
            end_ns: 10 + k.config().hold_ns()
        }
    );
    assert!(k.active(2, 10), "no wait");
    assert!(!k.active(2, 10 + k.config().hold_ns()));
}

#[test]
fn a_compatible_view_waits_when_the_previous_was_not_active_here() {
    let mut k = LeaseKeeper::new(cfg(1_000)).unwrap();
    // View 1 known but never leased (no check yet): nothing proves that
    // the leases of views before it ran out.
    k.follow(view(1), 0);
    k.follow(
        LeasedView {
            epoch: 2,
            compatible_with_previous: true,
            older_leases_ended: false,
        },
        5,
    );
    let r = k.begin_renewal(5).unwrap();
    assert!(matches!(
        k.finish_renewal(r, true),
        RenewalOutcome::Started { .. }
    ));
    assert!(!k.active(2, 6));
    // And a compatible view whose predecessor was skipped waits too.
    let mut k = LeaseKeeper::new(cfg(1_000)).unwrap();
    let now = hold_active(&mut k, 1, 0);
    k.follow(
        LeasedView {
            epoch: 3,
            compatible_with_previous: true,
            older_leases_ended: false,
        },
        now,
    );
    let r = k.begin_renewal(now).unwrap();
    assert!(matches!(
        k.finish_renewal(r, true),
        RenewalOutcome::Started { .. }
    ));
}

fn iv(process: u32, epoch: u64, start: f64, end: f64) -> ActiveInterval {
    ActiveInterval {
        process,
        epoch,
        start_real_ns: start,
        end_real_ns: end,
    }
}

#[test]
fn the_checker_finds_overlapping_and_out_of_order_views() {
    let never = |_: u64| false;
    // Disjoint, in order: fine (same process or not).
    let ok = [
        iv(0, 1, 0.0, 10.0),
        iv(1, 2, 10.0, 20.0),
        iv(0, 2, 12.0, 30.0),
    ];
    assert_eq!(no_overlapping_views(&ok, never), Ok(()));
    // Overlap between processes.
    let bad = [iv(0, 1, 0.0, 10.5), iv(1, 2, 10.0, 20.0)];
    assert_eq!(
        no_overlapping_views(&bad, never),
        Err(Overlap {
            older: bad[0],
            newer: bad[1]
        })
    );
    // An older view active after a newer one was (property 2), listed in
    // any order.
    let late = [iv(1, 4, 10.0, 20.0), iv(0, 3, 25.0, 30.0)];
    assert!(no_overlapping_views(&late, never).is_err());
    // Skipping views does not excuse it.
    let skip = [iv(0, 1, 0.0, 10.5), iv(1, 5, 10.0, 20.0)];
    assert!(no_overlapping_views(&skip, never).is_err());
    // A compatible chain may overlap; a break in the chain may not.
    let chain = [iv(0, 1, 0.0, 10.5), iv(1, 3, 10.0, 20.0)];
    assert_eq!(no_overlapping_views(&chain, |k| k == 2 || k == 3), Ok(()));
    assert!(no_overlapping_views(&chain, |k| k == 3).is_err());
    // Empty intervals (a lease that never opened) conflict with nothing.
    let empty = [iv(0, 1, 10.0, 10.0), iv(1, 2, 5.0, 20.0)];
    assert_eq!(no_overlapping_views(&empty, never), Ok(()));
}

// ---------------------------------------------------------------------
// The drift harness.

/// A clock running at `rate` of real time from `offset_ns`.
#[derive(Clone, Copy)]
struct Clock {
    offset_ns: f64,
    rate: f64,
}

impl Clock {
    fn local(&self, real_ns: u64) -> u64 {
        (self.offset_ns + real_ns as f64 * self.rate) as u64
    }
    fn real(&self, local_ns: u64) -> f64 {
        (local_ns as f64 - self.offset_ns) / self.rate
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A process looks at its lease (its poll loop).
    Poll { process: usize },
    /// A process learns of a decided view.
    Learn { process: usize, epoch: u64 },
    /// A coordinator executes a process's READ of a slot.
    ReadAt {
        process: usize,
        coord: usize,
        check: u64,
    },
    /// The READ's answer is back at the process.
    Answer {
        process: usize,
        check: u64,
        filled: bool,
    },
}

struct Proc {
    clock: Clock,
    keeper: LeaseKeeper,
    check: u64,
    renewal: Option<Renewal>,
    answers: u32,
    any_filled: bool,
    /// Intervals of the current view, in local time (clipped when the
    /// view is left).
    segments: Vec<(u64, u64, u64)>,
}

/// Drift as a fraction of the bound the configuration allows, per mille:
/// clocks run anywhere within ±(drift_ppm · 0.95).
struct HarnessRun {
    intervals: Vec<ActiveInterval>,
    compatible: Vec<bool>,
    views_decided: u64,
    active_polls: u64,
}

fn run_harness(seed: u64, lease: LeaseConfig) -> HarnessRun {
    let mut rng = SplitMix64::new(seed);
    let processes = 2 + rng.range_inclusive(0, 2) as usize;
    const COORDS: usize = 3;
    const MAJORITY: u32 = 2;
    let end_real_ns: u64 = 600_000;
    let rho = f64::from(lease.drift_ppm) / 1e6 * 0.95;
    let mut procs: Vec<Proc> = (0..processes)
        .map(|_| {
            // Extremes are where the allowance matters: half the clocks
            // sit at a bound.
            let rate = match rng.range_inclusive(0, 3) {
                0 => 1.0 - rho,
                1 => 1.0 + rho,
                _ => 1.0 - rho + 2.0 * rho * (rng.range_inclusive(0, 1000) as f64 / 1000.0),
            };
            Proc {
                clock: Clock {
                    offset_ns: rng.range_inclusive(0, 1 << 40) as f64,
                    rate,
                },
                keeper: LeaseKeeper::new(lease).unwrap(),
                check: 0,
                renewal: None,
                answers: 0,
                any_filled: false,
                segments: Vec::new(),
            }
        })
        .collect();
    // Slot k's write time at each coordinator (u64::MAX: not written).
    let views_max = 64usize;
    let mut written = std::vec![[u64::MAX; COORDS]; views_max + 2];
    let mut compatible = std::vec![false; views_max + 2];
    let mut queue = BinaryHeap::new();
    let mut seq = 0u64;
    type Queue = BinaryHeap<std::cmp::Reverse<(u64, u64, Ev)>>;
    let mut push = |q: &mut Queue, at: u64, ev: Ev| {
        seq += 1;
        q.push(std::cmp::Reverse((at, seq, ev)));
    };
    // View 1 is there from the start; later views are decided at random
    // moments, each written at the coordinators over a spread of time
    // and decided once a majority holds it.
    written[1] = [0; COORDS];
    let mut decided_at = 0u64;
    let mut views_decided = 1u64;
    for k in 2..=views_max {
        decided_at += rng.range_inclusive(2_000, 40_000);
        if decided_at >= end_real_ns {
            break;
        }
        // Each coordinator's copy lands within 3 µs, one in ten much
        // later (a slow coordinator): the slot is partly filled before
        // it is decided, and a check reading it then must not extend.
        for w in written[k].iter_mut() {
            let late = if rng.chance(1, 10) {
                rng.range_inclusive(3_000, 50_000)
            } else {
                0
            };
            *w = decided_at + rng.range_inclusive(0, 3_000) + late;
        }
        compatible[k] = rng.chance(1, 3);
        let mut ws: Vec<u64> = written[k].to_vec();
        ws.sort_unstable();
        let decision = ws[MAJORITY as usize - 1];
        // The coordinators' leader proposes the next view only once this
        // one is decided: decisions are in slot order.
        decided_at = decision;
        views_decided = k as u64;
        for p in 0..processes {
            // Most learn of it within 8 µs; some much later (a process
            // that was not scheduled, a lost broadcast): those keep
            // acting on their lease of the old view, which is what the
            // lease is for.
            let learn_ns = if rng.chance(1, 4) {
                rng.range_inclusive(8_000, 60_000)
            } else {
                rng.range_inclusive(0, 8_000)
            };
            push(
                &mut queue,
                decision + learn_ns,
                Ev::Learn {
                    process: p,
                    epoch: k as u64,
                },
            );
        }
    }
    for p in 0..processes {
        push(
            &mut queue,
            0,
            Ev::Learn {
                process: p,
                epoch: 1,
            },
        );
        push(
            &mut queue,
            rng.range_inclusive(0, 500),
            Ev::Poll { process: p },
        );
    }
    let mut active_polls = 0u64;
    while let Some(std::cmp::Reverse((now, _, ev))) = queue.pop() {
        if now > end_real_ns {
            break;
        }
        match ev {
            Ev::Learn { process, epoch } => {
                let pr = &mut procs[process];
                let local = pr.clock.local(now);
                if pr.keeper.view().is_some_and(|v| v.epoch >= epoch) {
                    continue;
                }
                let left = pr.keeper.view().map(|v| v.epoch);
                pr.keeper.follow(
                    LeasedView {
                        epoch,
                        compatible_with_previous: compatible[epoch as usize],
                        older_leases_ended: false,
                    },
                    local,
                );
                if let Some(e) = left {
                    for s in pr.segments.iter_mut().filter(|s| s.0 == e) {
                        s.2 = s.2.min(local);
                    }
                }
                pr.renewal = None;
            }
            Ev::Poll { process } => {
                let pr = &mut procs[process];
                let local = pr.clock.local(now);
                if let Some(v) = pr.keeper.view() {
                    if pr.keeper.active(v.epoch, local) {
                        active_polls += 1;
                    }
                }
                if pr.keeper.renewal_due(local) {
                    let r = pr.keeper.begin_renewal(local).unwrap();
                    pr.check += 1;
                    pr.renewal = Some(r);
                    pr.answers = 0;
                    pr.any_filled = false;
                    for coord in 0..COORDS {
                        // Some READs never come back (a coordinator down).
                        if rng.chance(1, 12) {
                            continue;
                        }
                        push(
                            &mut queue,
                            now + rng.range_inclusive(200, 2_500),
                            Ev::ReadAt {
                                process,
                                coord,
                                check: pr.check,
                            },
                        );
                    }
                    // A check whose answers do not come gives up.
                }
                let gap = rng.range_inclusive(100, 3_000);
                push(&mut queue, now + gap, Ev::Poll { process });
                if let Some(r) = procs[process].renewal {
                    if procs[process].check_timed_out(now, r) {
                        procs[process].keeper.abandon_renewal();
                        procs[process].renewal = None;
                    }
                }
            }
            Ev::ReadAt {
                process,
                coord,
                check,
            } => {
                let pr = &procs[process];
                let Some(r) = pr.renewal.filter(|_| pr.check == check) else {
                    continue;
                };
                let next = r.epoch as usize + 1;
                let filled = next < written.len() && written[next][coord] <= now;
                push(
                    &mut queue,
                    now + rng.range_inclusive(200, 2_500),
                    Ev::Answer {
                        process,
                        check,
                        filled,
                    },
                );
            }
            Ev::Answer {
                process,
                check,
                filled,
            } => {
                let pr = &mut procs[process];
                let Some(r) = pr.renewal.filter(|_| pr.check == check) else {
                    continue;
                };
                pr.answers += 1;
                pr.any_filled |= filled;
                if pr.answers < MAJORITY {
                    continue;
                }
                let local = pr.clock.local(now);
                let outcome = pr.keeper.finish_renewal(r, !pr.any_filled);
                pr.renewal = None;
                if let RenewalOutcome::Extended { end_ns } = outcome {
                    // Active from now (or the start) until the end: the
                    // exact set of moments `active` answers true.
                    let start = pr.keeper.start_ns.max(local);
                    if end_ns > start {
                        pr.segments.push((r.epoch, start, end_ns));
                    }
                }
            }
        }
    }
    let mut intervals = Vec::new();
    for (i, pr) in procs.iter().enumerate() {
        for &(epoch, start, end) in &pr.segments {
            intervals.push(ActiveInterval {
                process: i as u32,
                epoch,
                start_real_ns: pr.clock.real(start),
                end_real_ns: pr.clock.real(end),
            });
        }
    }
    HarnessRun {
        intervals,
        compatible,
        views_decided,
        active_polls,
    }
}

impl Proc {
    /// A check with no majority of answers after 10 µs of local time is
    /// given up (its READs were lost).
    fn check_timed_out(&self, now_real: u64, r: Renewal) -> bool {
        self.clock.local(now_real) >= r.issued_ns + 10_000
    }
}

fn judge(run: &HarnessRun) -> Result<(), Overlap> {
    let compatible = run.compatible.clone();
    no_overlapping_views(&run.intervals, move |k| {
        compatible.get(k as usize).copied().unwrap_or(false)
    })
}

#[test]
fn drifting_clocks_never_hold_two_views_at_once() {
    // 10 % drift: far beyond real clocks, so that the allowance is what
    // keeps the views apart (a 20 µs lease, a 2 µs allowance).
    let lease = cfg(100_000);
    let mut polls_active = 0;
    let mut changes = 0;
    for seed in 0..2_000 {
        let run = run_harness(seed, lease);
        if let Err(o) = judge(&run) {
            panic!("seed {seed}: views overlap: {o:?}");
        }
        polls_active += run.active_polls;
        changes += run.views_decided - 1;
    }
    // The harness exercised something: views changed and leases were
    // active for a good share of the polls.
    assert!(changes > 2_000 * 5, "only {changes} view changes");
    assert!(
        polls_active > 2_000 * 50,
        "leases were rarely active ({polls_active} polls)"
    );
}

#[test]
fn a_stable_view_stays_leased_without_gaps() {
    // No view changes, no drift, prompt answers: once active the lease
    // never lapses, because renewals start a margin before the end.
    let c = cfg(0);
    let mut k = LeaseKeeper::new(c).unwrap();
    k.follow(view(1), 0);
    let mut now = 0u64;
    let mut became_active = None;
    let mut pending: Option<(Renewal, u64)> = None;
    while now < 1_000_000 {
        if let Some((r, back)) = pending {
            if now >= back {
                k.finish_renewal(r, true);
                pending = None;
            }
        }
        if k.renewal_due(now) {
            pending = Some((k.begin_renewal(now).unwrap(), now + 3_000));
        }
        match (k.active(1, now), became_active) {
            (true, None) => became_active = Some(now),
            (false, Some(at)) => panic!("lease lapsed at {now} after becoming active at {at}"),
            _ => {}
        }
        now += 500;
    }
    let at = became_active.expect("became active");
    assert!(at <= c.wait_ns() + 500, "active only at {at}");
}

#[cfg(feature = "mutation-testing")]
#[test]
fn leases_without_the_drift_allowance_are_caught() {
    let mut lease = cfg(100_000);
    lease.mutation = crate::config::Mutation::LeaseWithoutDriftAllowance;
    let caught = (0..2_000)
        .filter(|&seed| judge(&run_harness(seed, lease)).is_err())
        .count();
    std::println!("leases without a drift allowance: {caught} of 2000 seeds overlap");
    assert!(
        caught > 0,
        "no seed caught leases without a drift allowance"
    );
}
