//! Committed entries never change or vanish: once an entry is committed at
//! an index, every later observation of that index (by a leader's commit,
//! in any member's log, or applied by any member) is the same entry, and
//! no member's commit point moves backwards.

use super::{EntryId, Violation};
use std::collections::BTreeMap;

/// The committed prefix as observed so far.
#[derive(Default, Debug)]
pub struct CommittedLog {
    entries: BTreeMap<u64, EntryId>,
    commit_index: BTreeMap<usize, u64>,
}

impl CommittedLog {
    /// An entry observed committed (from a leader's log below its commit
    /// point).
    pub fn observe_committed(
        &mut self,
        time_ns: u64,
        node: usize,
        e: EntryId,
    ) -> Option<Violation> {
        match self.entries.get(&e.index) {
            Some(prev) if *prev != e => Some(Violation {
                invariant: "committed entries never change",
                time_ns,
                detail: format!("node {node} committed {e:?} where {prev:?} was committed"),
            }),
            Some(_) => None,
            None => {
                self.entries.insert(e.index, e);
                None
            }
        }
    }

    /// A member's commit index must never move backwards.
    pub fn observe_commit_index(
        &mut self,
        time_ns: u64,
        node: usize,
        commit_index: u64,
    ) -> Option<Violation> {
        let prev = self.commit_index.entry(node).or_insert(commit_index);
        if commit_index < *prev {
            let v = Violation {
                invariant: "committed entries never vanish",
                time_ns,
                detail: format!(
                    "node {node} commit index went back from {} to {commit_index}",
                    *prev
                ),
            };
            *prev = commit_index;
            return Some(v);
        }
        *prev = commit_index;
        None
    }

    /// `node` restarted with empty memory: its commit index starts over.
    pub fn restart(&mut self, node: usize) {
        self.commit_index.remove(&node);
    }

    /// Every committed index present in `log` must hold the committed
    /// entry.
    pub fn check_log(&self, time_ns: u64, node: usize, log: &[EntryId]) -> Vec<Violation> {
        log.iter()
            .filter_map(|e| match self.entries.get(&e.index) {
                Some(c) if c != e => Some(Violation {
                    invariant: "committed entries never change",
                    time_ns,
                    detail: format!("node {node} holds {e:?} at a committed index ({c:?})"),
                }),
                _ => None,
            })
            .collect()
    }

    /// The committed entry at `index`, if observed.
    pub fn get(&self, index: u64) -> Option<&EntryId> {
        self.entries.get(&index)
    }

    /// Committed entries at or above `from`.
    pub fn from(&self, from: u64) -> impl Iterator<Item = &EntryId> {
        self.entries.range(from..).map(|(_, e)| e)
    }

    /// Number of committed entries observed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing was committed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
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
    fn a_changed_committed_entry_is_caught() {
        let mut c = CommittedLog::default();
        assert!(c.observe_committed(0, 0, e(1, 1, 5)).is_none());
        assert!(c.observe_committed(1, 1, e(1, 1, 5)).is_none());
        assert!(c.observe_committed(2, 1, e(1, 2, 6)).is_some());
        assert!(c.check_log(3, 2, &[e(1, 1, 5), e(2, 3, 3)]).is_empty());
        assert_eq!(c.check_log(3, 2, &[e(1, 3, 5)]).len(), 1);
    }

    #[test]
    fn a_commit_index_going_back_is_caught() {
        let mut c = CommittedLog::default();
        assert!(c.observe_commit_index(0, 0, 3).is_none());
        assert!(c.observe_commit_index(1, 0, 7).is_none());
        assert!(c.observe_commit_index(2, 0, 5).is_some());
    }
}
