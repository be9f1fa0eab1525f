//! False-suspicion accuracy (DARE §4.2.2, issue 12 item 8): a member
//! counts a suspicion of its leader as false only if the leader was in
//! fact alive, i.e. its heartbeat moved on after the suspicion. A leader
//! that had stopped for good (crashed, or a zombie whose CPU is gone)
//! before it was suspected cannot have been suspected falsely.

use super::Violation;
use std::collections::BTreeMap;

/// A heartbeat pushed just before the leader stopped may still land after
/// a suspicion: stops this recent are not held against a count (plus any
/// delay a fault adds to the link, see [`FalseSuspicionAccuracy::observe`]).
pub const IN_FLIGHT_SLACK_NS: u64 = 50_000;

/// When each member stopped for good (until it restarts).
#[derive(Default, Debug)]
pub struct FalseSuspicionAccuracy {
    stopped_at: BTreeMap<usize, u64>,
    counted: u64,
}

impl FalseSuspicionAccuracy {
    /// `node` crashed or became a zombie at `time_ns`.
    pub fn stopped_for_good(&mut self, node: usize, time_ns: u64) {
        self.stopped_at.entry(node).or_insert(time_ns);
    }

    /// `node` runs again as a new process.
    pub fn restarted(&mut self, node: usize) {
        self.stopped_at.remove(&node);
    }

    /// `node` counted a false suspicion of `leader` (of `term`), which it
    /// had suspected at `suspected_at_ns`; `link_delay_ns`: what faults
    /// added to the leader's link to it when the leader stopped (its last
    /// heartbeats land that much later).
    pub fn observe(
        &mut self,
        time_ns: u64,
        (node, leader): (usize, usize),
        term: u64,
        suspected_at_ns: u64,
        link_delay_ns: impl Fn(u64) -> u64,
    ) -> Option<Violation> {
        self.counted += 1;
        let stopped = *self.stopped_at.get(&leader)?;
        if stopped + IN_FLIGHT_SLACK_NS + link_delay_ns(stopped) > suspected_at_ns {
            return None;
        }
        Some(Violation {
            invariant: "false suspicion accuracy",
            time_ns,
            detail: format!(
                "member {node} counted its suspicion of leader {leader} (term {term}, at {:.3} ms) as false, but the leader had stopped for good at {:.3} ms",
                suspected_at_ns as f64 / 1e6,
                stopped as f64 / 1e6
            ),
        })
    }

    /// False suspicions counted.
    pub fn counted(&self) -> u64 {
        self.counted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_leader_counted_as_falsely_suspected_is_caught() {
        let mut c = FalseSuspicionAccuracy::default();
        // Leader 0 is alive: any count is fine.
        let none = |_| 0;
        assert!(c.observe(10, (1, 0), 3, 5, none).is_none());
        // It crashes at 1 ms; a suspicion 10 µs later may still see a
        // heartbeat it pushed before (in flight).
        c.stopped_for_good(0, 1_000_000);
        assert!(c.observe(2_000_000, (1, 0), 3, 1_010_000, none).is_none());
        // A suspicion at 2 ms counted false: it was dead.
        let v = c
            .observe(3_000_000, (2, 0), 3, 2_000_000, none)
            .expect("violation");
        assert_eq!(v.invariant, "false suspicion accuracy");
        // Unless a fault delayed its link by more than that: its last
        // heartbeats landed after the suspicion (seed 403902).
        let slow = |at: u64| if at == 1_000_000 { 1_100_000 } else { 0 };
        assert!(c.observe(3_000_000, (2, 0), 3, 2_000_000, slow).is_none());
        // After a restart it may be suspected falsely again.
        c.restarted(0);
        assert!(c.observe(4_000_000, (2, 0), 5, 3_500_000, none).is_none());
        assert_eq!(c.counted(), 5);
    }
}
