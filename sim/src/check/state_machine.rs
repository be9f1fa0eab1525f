//! State machine safety: every member applies the same operation at each
//! index, in index order, and members that applied the same prefix hold
//! the same state.

use super::{EntryId, Violation};
use std::collections::BTreeMap;

/// Applied operations of every member.
#[derive(Default, Debug)]
pub struct StateMachineSafety {
    applied: BTreeMap<u64, (EntryId, usize)>,
    last_index: BTreeMap<usize, u64>,
}

impl StateMachineSafety {
    /// `node` applied `e` to its state machine.
    pub fn observe_apply(&mut self, time_ns: u64, node: usize, e: EntryId) -> Option<Violation> {
        let last = self.last_index.entry(node).or_insert(0);
        if e.index <= *last {
            return Some(Violation {
                invariant: "state machine safety",
                time_ns,
                detail: format!(
                    "node {node} applied index {} after index {}",
                    e.index, *last
                ),
            });
        }
        *last = e.index;
        match self.applied.get(&e.index) {
            Some((first, by)) if *first != e => Some(Violation {
                invariant: "state machine safety",
                time_ns,
                detail: format!("node {node} applied {e:?} where node {by} applied {first:?}"),
            }),
            Some(_) => None,
            None => {
                self.applied.insert(e.index, (e, node));
                None
            }
        }
    }

    /// `node` restarted with empty memory: it applies from index 1 again
    /// (each entry must still be the one applied there before).
    pub fn restart(&mut self, node: usize) {
        self.last_index.remove(&node);
    }

    /// Members with the same apply index must hold the same state:
    /// `(node, apply_index, state_digest)`.
    pub fn check_final(&self, time_ns: u64, states: &[(usize, u64, u64)]) -> Vec<Violation> {
        let mut out = Vec::new();
        for (i, a) in states.iter().enumerate() {
            for b in &states[i + 1..] {
                if a.1 == b.1 && a.2 != b.2 {
                    out.push(Violation {
                        invariant: "state machine safety",
                        time_ns,
                        detail: format!(
                            "nodes {} and {} applied up to index {} but their states differ",
                            a.0, b.0, a.1
                        ),
                    });
                }
            }
        }
        out
    }

    /// The operation applied at `index`, if any.
    pub fn applied(&self, index: u64) -> Option<EntryId> {
        self.applied.get(&index).map(|(e, _)| *e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u64, term: u64, digest: u64) -> EntryId {
        EntryId {
            index,
            term,
            digest,
        }
    }

    #[test]
    fn different_operations_at_one_index_are_caught() {
        let mut s = StateMachineSafety::default();
        assert!(s.observe_apply(0, 0, e(2, 1, 5)).is_none());
        assert!(s.observe_apply(0, 1, e(2, 1, 5)).is_none());
        assert!(s.observe_apply(0, 2, e(2, 1, 6)).is_some());
    }

    #[test]
    fn out_of_order_apply_and_diverging_states_are_caught() {
        let mut s = StateMachineSafety::default();
        assert!(s.observe_apply(0, 0, e(3, 1, 5)).is_none());
        assert!(s.observe_apply(0, 0, e(2, 1, 4)).is_some());
        assert!(s
            .check_final(0, &[(0, 9, 1), (1, 9, 1), (2, 8, 2)])
            .is_empty());
        assert_eq!(s.check_final(0, &[(0, 9, 1), (1, 9, 2)]).len(), 1);
    }
}
