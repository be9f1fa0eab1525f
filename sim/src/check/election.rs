//! Election safety: at most one leader per term (DARE §3.2).

use super::Violation;
use std::collections::BTreeMap;

/// Remembers the leader of every term.
#[derive(Default, Debug)]
pub struct ElectionSafety {
    leaders: BTreeMap<u64, usize>,
}

impl ElectionSafety {
    /// `node` became leader of `term`.
    pub fn observe_leader(&mut self, time_ns: u64, term: u64, node: usize) -> Option<Violation> {
        match self.leaders.get(&term) {
            Some(&other) if other != node => Some(Violation {
                invariant: "election safety",
                time_ns,
                detail: format!("term {term} has two leaders: node {other} and node {node}"),
            }),
            _ => {
                self.leaders.insert(term, node);
                None
            }
        }
    }

    /// Terms with a leader.
    pub fn terms(&self) -> usize {
        self.leaders.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_leaders_in_one_term_are_caught() {
        let mut c = ElectionSafety::default();
        assert!(c.observe_leader(1, 1, 0).is_none());
        assert!(c.observe_leader(2, 2, 1).is_none());
        assert!(
            c.observe_leader(3, 2, 1).is_none(),
            "the same leader twice is fine"
        );
        let v = c.observe_leader(4, 2, 2).expect("violation");
        assert!(v.detail.contains("node 1 and node 2"));
    }
}
