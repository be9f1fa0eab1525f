//! Lease safety (uKharon §6.1, issue 14): no two overlapping active views,
//! and no lease read that misses a write committed in a newer term.
//!
//! The simulator samples, after every step of a member, the view that
//! member holds an active lease on (its own `Active`, on its own drifting
//! clock). What it acted on is what it sampled: a member reads under its
//! lease only inside a step. So the sampled intervals, in simulated real
//! time, are what must not overlap: an interval of view `e` and one of a
//! newer view `f` overlap only if every view from `e + 1` to `f` is
//! compatible with its predecessor (same leader and term, §6.3).

use super::Violation;
use std::collections::BTreeMap;
use verbatim_core::views::View;

#[derive(Clone, Copy, Debug)]
struct Interval {
    node: usize,
    epoch: u64,
    first_ns: u64,
    last_ns: u64,
}

/// The checker (one per run).
#[derive(Default)]
pub struct LeaseSafety {
    intervals: Vec<Interval>,
    /// Index in `intervals` of each member's interval still open.
    open: BTreeMap<usize, usize>,
    views: BTreeMap<u64, View>,
    /// Samples taken while some member held a lease.
    pub active_samples: u64,
}

impl LeaseSafety {
    /// A view decided somewhere (for compatibility).
    pub fn view(&mut self, epoch: u64, view: View) {
        self.views.insert(epoch, view);
    }

    /// Member `node` holds an active lease on `leased` (or none) at real
    /// time `now_ns`.
    pub fn observe(
        &mut self,
        now_ns: u64,
        node: usize,
        leased: Option<(u64, View)>,
    ) -> Option<Violation> {
        let Some((epoch, view)) = leased else {
            self.open.remove(&node);
            return None;
        };
        self.active_samples += 1;
        self.views.insert(epoch, view);
        let me = match self.open.get(&node) {
            Some(&k) if self.intervals[k].epoch == epoch => {
                self.intervals[k].last_ns = now_ns;
                k
            }
            _ => {
                self.intervals.push(Interval {
                    node,
                    epoch,
                    first_ns: now_ns,
                    last_ns: now_ns,
                });
                let k = self.intervals.len() - 1;
                self.open.insert(node, k);
                k
            }
        };
        let a = self.intervals[me];
        for (k, b) in self.intervals.iter().enumerate() {
            if k == me || b.epoch == a.epoch {
                continue;
            }
            let (older, newer) = if b.epoch < a.epoch { (*b, a) } else { (a, *b) };
            if self.compatible_chain(older.epoch, newer.epoch) {
                continue;
            }
            if newer.first_ns <= older.last_ns {
                return Some(Violation {
                    invariant: "no two overlapping active views",
                    time_ns: now_ns,
                    detail: format!(
                        "node {} held view {} active until {} ns, node {} held the newer view {} active from {} ns",
                        older.node, older.epoch, older.last_ns, newer.node, newer.epoch, newer.first_ns
                    ),
                });
            }
        }
        None
    }

    fn compatible_chain(&self, older: u64, newer: u64) -> bool {
        (older + 1..=newer).all(|k| match (self.views.get(&(k - 1)), self.views.get(&k)) {
            (Some(p), Some(v)) => v.compatible_with(p),
            _ => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_core::MemberId;

    fn view(leader: u8, term: u64) -> View {
        View {
            leader: MemberId(leader),
            log_term: term,
            lease_ns: 20_000,
        }
    }

    #[test]
    fn sequential_views_pass() {
        let mut c = LeaseSafety::default();
        assert!(c.observe(10, 0, Some((1, view(0, 1)))).is_none());
        assert!(c.observe(20, 0, Some((1, view(0, 1)))).is_none());
        assert!(c.observe(25, 0, None).is_none());
        assert!(c.observe(30, 1, Some((2, view(1, 2)))).is_none());
        assert!(c.observe(40, 1, Some((2, view(1, 2)))).is_none());
        assert_eq!(c.active_samples, 4);
    }

    #[test]
    fn a_newer_view_active_while_an_older_one_is_is_caught() {
        let mut c = LeaseSafety::default();
        assert!(c.observe(10, 0, Some((1, view(0, 1)))).is_none());
        assert!(c.observe(30, 1, Some((2, view(1, 2)))).is_none());
        // The old leader still acts on view 1 after view 2 began.
        let v = c.observe(35, 0, Some((1, view(0, 1)))).expect("overlap");
        assert_eq!(v.invariant, "no two overlapping active views");
    }

    #[test]
    fn an_older_view_that_becomes_active_after_a_newer_one_is_caught() {
        let mut c = LeaseSafety::default();
        assert!(c.observe(30, 1, Some((2, view(1, 2)))).is_none());
        assert!(c.observe(50, 1, None).is_none());
        assert!(c.observe(40, 0, Some((1, view(0, 1)))).is_some());
    }

    #[test]
    fn compatible_views_may_overlap() {
        let mut c = LeaseSafety::default();
        let mut longer = view(0, 1);
        longer.lease_ns = 40_000;
        assert!(c.observe(10, 0, Some((1, view(0, 1)))).is_none());
        assert!(c.observe(20, 1, Some((2, longer))).is_none());
        assert!(c.observe(25, 0, Some((1, view(0, 1)))).is_none());
    }
}
