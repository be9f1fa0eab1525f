//! Leader completeness: a new leader holds every committed entry it has
//! not applied yet (DARE §4.1; entries it applied are checked by state
//! machine safety, which accounts for pruning).

use super::committed::CommittedLog;
use super::{EntryId, Violation};

/// Checks a member that just became leader: `log` is its log from its
/// apply pointer (`apply_index`) to its tail.
pub fn check_leader_completeness(
    time_ns: u64,
    node: usize,
    term: u64,
    apply_index: u64,
    log: &[EntryId],
    committed: &CommittedLog,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for c in committed.from(apply_index) {
        let held = log
            .first()
            .and_then(|first| c.index.checked_sub(first.index))
            .and_then(|k| log.get(k as usize));
        if held != Some(c) {
            out.push(Violation {
                invariant: "leader completeness",
                time_ns,
                detail: format!(
                    "node {node}, leader of term {term}, lacks committed {c:?} (holds {held:?})"
                ),
            });
            break; // one report per election is enough
        }
    }
    out
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
    fn a_leader_missing_a_committed_entry_is_caught() {
        let mut c = CommittedLog::default();
        for x in [e(1, 1, 1), e(2, 1, 2), e(3, 2, 3)] {
            c.observe_committed(0, 0, x);
        }
        // Applied up to 2, holds 2..: fine.
        assert!(
            check_leader_completeness(0, 1, 3, 2, &[e(2, 1, 2), e(3, 2, 3), e(4, 3, 9)], &c)
                .is_empty()
        );
        // Applied everything: nothing to hold.
        assert!(check_leader_completeness(0, 1, 3, 4, &[], &c).is_empty());
        // Lacks index 3.
        assert_eq!(
            check_leader_completeness(0, 1, 3, 2, &[e(2, 1, 2)], &c).len(),
            1
        );
        // Holds a different entry at 3.
        assert_eq!(
            check_leader_completeness(0, 1, 3, 3, &[e(3, 3, 7)], &c).len(),
            1
        );
    }
}
