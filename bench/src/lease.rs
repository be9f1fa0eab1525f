//! The cost of `Active` (uKharon §6.2, issue 14): how long a process takes
//! to learn that its view is still active while it holds a lease. The
//! answer comes from local state and one timestamp, never the network;
//! uKharon measured 38 ns with a hardware timestamp.
//!
//! Each sample times one call of [`LeaseKeeper::active`] with its own
//! timestamp: a read of the time-stamp counter through `quanta` (the
//! monotonic clock when the counter is not usable), scaled to
//! nanoseconds, then the lease check. The timing around it (two more
//! counter reads) is measured alone as the overhead and reported beside
//! it. A background renewal runs every so often in the same loop, as the
//! replica's poll loop would do it; its calls are not timed.
//!
//! `quanta` rather than a hand-written `rdtsc`: it calibrates the counter
//! against the monotonic clock and falls back when the counter is not
//! invariant, which is what this needs.

use crate::stats::{histogram, record, Summary};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use verbatim_core::lease::{LeaseConfig, LeaseKeeper, LeasedView};

/// The lease used: δ = 20 µs as in uKharon, 100 ppm allowance, renewed
/// when less than half is left.
pub const LEASE_NS: u64 = 20_000;

/// Results of `verbatim-bench lease`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaseReport {
    /// Timed calls.
    pub calls: u64,
    /// Of them, how many answered "active" (all of them once the lease
    /// started, which the run waits for).
    pub active_answers: u64,
    /// One `Active` with its timestamp, timing overhead included (ns).
    pub active: Summary,
    /// The timing alone: two counter reads back to back (ns).
    pub overhead: Summary,
    /// Renewals done in the loop (untimed).
    pub renewals: u64,
    /// The core the loop ran on, if pinned.
    pub core: Option<usize>,
}

/// Runs `calls` timed `Active` calls on `core` (pinned when given).
pub fn measure(core: Option<usize>, calls: u64) -> LeaseReport {
    std::thread::spawn(move || {
        if let Some(c) = core {
            core_affinity::set_for_current(core_affinity::CoreId { id: c });
        }
        measure_here(calls, core)
    })
    .join()
    .expect("lease thread")
}

fn measure_here(calls: u64, core: Option<usize>) -> LeaseReport {
    let clock = quanta::Clock::new();
    let origin = clock.raw();
    let now_ns = || clock.delta_as_nanos(origin, clock.raw());
    let cfg = LeaseConfig::new(LEASE_NS, 100, LEASE_NS / 2);
    let mut keeper = LeaseKeeper::new(cfg).expect("a valid lease configuration");
    let epoch = 1;
    keeper.follow(
        LeasedView {
            epoch,
            compatible_with_previous: false,
            older_leases_ended: false,
        },
        now_ns(),
    );
    let mut renewals = 0u64;
    // The "coordinators" answer at once: the slot after the view is empty.
    let mut renew = |keeper: &mut LeaseKeeper, now: u64| {
        if keeper.renewal_due(now) {
            if let Some(r) = keeper.begin_renewal(now) {
                keeper.finish_renewal(r, true);
                renewals += 1;
            }
        }
    };
    // Wait out the first lease's start (δ plus the allowance).
    loop {
        let now = now_ns();
        renew(&mut keeper, now);
        if keeper.active(epoch, now) {
            break;
        }
        std::hint::spin_loop();
    }
    let mut active = histogram();
    let mut overhead = histogram();
    let mut active_answers = 0u64;
    for i in 0..calls {
        if i % 64 == 0 {
            renew(&mut keeper, now_ns());
        }
        let a = clock.raw();
        let b = clock.raw();
        record(&mut overhead, clock.delta_as_nanos(a, b));
        let start = clock.raw();
        let ok = black_box(&keeper).active(black_box(epoch), now_ns());
        let end = clock.raw();
        record(&mut active, clock.delta_as_nanos(start, end));
        active_answers += u64::from(black_box(ok));
    }
    LeaseReport {
        calls,
        active_answers,
        active: Summary::of(&active),
        overhead: Summary::of(&overhead),
        renewals,
        core,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_after_the_start_finds_the_lease_active() {
        let r = measure(None, 20_000);
        assert_eq!(r.calls, 20_000);
        // Renewed in the loop every 64 calls, a few µs, against a margin
        // of 10 µs: only a thread descheduled for longer (a loaded test
        // machine) sees it lapse, and then only until the next renewal.
        assert!(r.active_answers >= r.calls / 2, "{r:?}");
        assert!(r.renewals >= 2);
        assert_eq!(r.active.count, r.calls);
        assert!(r.active.is_ordered() && r.overhead.is_ordered());
    }
}
