//! Lease safety (uKharon §6.1, issue 14): no two overlapping active views,
//! and no read served under an expired lease.
//!
//! The second is checked against the commit history rather than the
//! lease's own clock: a leader of term `t` that answers a read under its
//! lease after an entry of a newer term was committed anywhere acted on a
//! lease that had run out (a newer leader commits only once its own view
//! is active, when every older lease has ended), and its read may miss
//! that entry.
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
    /// Highest term of an entry observed committed, and when.
    committed_term: u64,
    committed_at_ns: u64,
    /// Steps in which a leader answered reads under its lease.
    pub lease_read_steps: u64,
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

    /// An entry of `term` was observed committed at `now_ns`.
    pub fn committed(&mut self, now_ns: u64, term: u64) {
        if term > self.committed_term {
            self.committed_term = term;
            self.committed_at_ns = now_ns;
        }
    }

    /// Member `node`, leader of `term`, answered reads under its lease in
    /// its step at `now_ns`.
    pub fn lease_read(&mut self, now_ns: u64, node: usize, term: u64) -> Option<Violation> {
        self.lease_read_steps += 1;
        (self.committed_term > term).then(|| Violation {
            invariant: "no read served under an expired lease",
            time_ns: now_ns,
            detail: format!(
                "node {node}, leader of term {term}, answered a read under its lease after an entry of term {} was committed at {} ns",
                self.committed_term, self.committed_at_ns
            ),
        })
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
    use crate::check::test_view as view;

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
    fn a_lease_read_after_a_newer_term_committed_is_caught() {
        let mut c = LeaseSafety::default();
        c.committed(10, 3);
        assert!(c.lease_read(20, 0, 3).is_none());
        c.committed(30, 4);
        let v = c.lease_read(40, 0, 3).expect("expired lease");
        assert_eq!(v.invariant, "no read served under an expired lease");
        assert!(c.lease_read(50, 1, 4).is_none());
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
