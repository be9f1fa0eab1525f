//! Heartbeat-counter accuracy (uKharon §4.2): a member reports a peer
//! stalled only if that peer really did not run at some moment since the
//! first of the two READs that returned the same counter. A peer that ran
//! the whole time increments its counter at least every
//! `counter_increment_period_ns`, and the two READs are at least
//! `counter_read_gap_ns` (≥ twice that) apart, so it cannot be seen
//! stuck. Completeness is the first detector's business and is not
//! checked here.

use super::Violation;
use std::collections::BTreeMap;

/// Remembers when each member was not running (paused, zombie, crashed).
#[derive(Default, Debug)]
pub struct CounterAccuracy {
    /// Per member: closed intervals `[from, to]` of not running; an open
    /// one has `to == u64::MAX`.
    stopped: BTreeMap<usize, Vec<(u64, u64)>>,
    reports: u64,
}

impl CounterAccuracy {
    /// `node` stops running at `time_ns`.
    pub fn stopped(&mut self, node: usize, time_ns: u64) {
        let v = self.stopped.entry(node).or_default();
        if v.last().is_none_or(|&(_, to)| to != u64::MAX) {
            v.push((time_ns, u64::MAX));
        }
    }

    /// `node` runs again at `time_ns`.
    pub fn resumed(&mut self, node: usize, time_ns: u64) {
        if let Some(last) = self.stopped.entry(node).or_default().last_mut() {
            if last.1 == u64::MAX {
                last.1 = time_ns;
            }
        }
    }

    /// `reporter` says at `time_ns` that `peer` has not run since
    /// `since_ns` (both simulated time).
    pub fn observe_stall(
        &mut self,
        time_ns: u64,
        reporter: usize,
        peer: usize,
        since_ns: u64,
    ) -> Option<Violation> {
        self.reports += 1;
        let stopped_in_window = self.stopped.get(&peer).is_some_and(|v| {
            v.iter()
                .any(|&(from, to)| from <= time_ns && to >= since_ns)
        });
        if stopped_in_window {
            None
        } else {
            Some(Violation {
                invariant: "heartbeat counter accuracy",
                time_ns,
                detail: format!(
                    "node {reporter} reported node {peer} stalled since {:.3} ms, but it ran all the time",
                    since_ns as f64 / 1e6
                ),
            })
        }
    }

    /// Stall reports seen.
    pub fn reports(&self) -> u64 {
        self.reports
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_peer_reported_stalled_is_caught() {
        let mut c = CounterAccuracy::default();
        let v = c.observe_stall(5_000, 0, 1, 1_000).expect("violation");
        assert!(v.detail.contains("node 0 reported node 1"));
        // A pause that ended before the window does not excuse it.
        c.stopped(1, 100);
        c.resumed(1, 900);
        assert!(c.observe_stall(5_000, 0, 1, 1_000).is_some());
        // One that started after the report does not either.
        c.stopped(1, 6_000);
        assert!(c.observe_stall(5_000, 0, 1, 1_000).is_some());
        assert_eq!(c.reports(), 3);
    }

    #[test]
    fn a_pause_inside_the_window_explains_the_report() {
        let mut c = CounterAccuracy::default();
        c.stopped(2, 2_000);
        c.resumed(2, 3_000);
        assert!(c.observe_stall(5_000, 0, 2, 1_000).is_none());
        // Still stopped (open interval) also explains it.
        c.stopped(2, 4_000);
        assert!(c.observe_stall(9_000, 1, 2, 8_000).is_none());
        // Stopping twice keeps one open interval.
        c.stopped(2, 4_500);
        c.resumed(2, 10_000);
        assert!(c.observe_stall(12_000, 1, 2, 11_000).is_some());
    }
}
