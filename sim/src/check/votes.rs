//! Votes (DARE §3.2.3): a member votes at most once per term, also across
//! a restart with empty memory, and a vote a candidate can count is stored
//! ("private data", raw replication) at a majority first, so that the
//! member finds it again after a restart.

use super::Violation;
use std::collections::{BTreeMap, BTreeSet};

/// One vote per member per term, whatever happens to the member's memory.
#[derive(Default, Debug)]
pub struct OneVotePerTerm {
    /// (member, term) → the candidate it voted for, and when it was seen.
    votes: BTreeMap<(usize, u64), (usize, u64)>,
    /// Second votes reported already (once each).
    reported: BTreeSet<(usize, u64, usize)>,
}

impl OneVotePerTerm {
    /// `candidate` may count `member`'s vote in `term` (it sees the vote
    /// in its copy of the member's row, or it is the member and leads).
    pub fn observe_vote(
        &mut self,
        time_ns: u64,
        member: usize,
        term: u64,
        candidate: usize,
    ) -> Option<Violation> {
        match self.votes.get(&(member, term)) {
            Some(&(other, _)) if other != candidate && !self.reported.insert((member, term, candidate)) => None,
            Some(&(other, at)) if other != candidate => Some(Violation {
                invariant: "one vote per term",
                time_ns,
                detail: format!(
                    "member {member} voted for {candidate} in term {term}, and for {other} at {:.3} ms",
                    at as f64 / 1e6
                ),
            }),
            Some(_) => None,
            None => {
                self.votes.insert((member, term), (candidate, time_ns));
                None
            }
        }
    }

    /// Votes seen.
    pub fn len(&self) -> usize {
        self.votes.len()
    }

    /// True when no vote was seen.
    pub fn is_empty(&self) -> bool {
        self.votes.is_empty()
    }
}

/// A vote is stored at a majority before a candidate can count it.
#[derive(Default, Debug)]
pub struct VoteReliability {
    checked: BTreeSet<(usize, u64)>,
}

impl VoteReliability {
    /// True when `voter`'s vote in `term` was judged already.
    pub fn judged(&self, voter: usize, term: u64) -> bool {
        self.checked.contains(&(voter, term))
    }

    /// A candidate sees `voter`'s vote for it in `term` while `holders`
    /// members (the voter included) store a private vote of `term` or
    /// later for the voter. Each (voter, term) is judged once, when a
    /// candidate first sees the vote: later losses of copies (a holder
    /// that restarts) are faults, not protocol errors.
    pub fn observe_counted_vote(
        &mut self,
        time_ns: u64,
        voter: usize,
        candidate: usize,
        term: u64,
        holders: usize,
        quorum: usize,
    ) -> Option<Violation> {
        if !self.checked.insert((voter, term)) || holders >= quorum {
            return None;
        }
        Some(Violation {
            invariant: "vote reliability",
            time_ns,
            detail: format!(
                "member {voter}'s vote for {candidate} in term {term} is visible to it while only {holders} members store that private vote (a majority is {quorum})"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_vote_in_a_term_is_caught() {
        let mut v = OneVotePerTerm::default();
        assert!(v.observe_vote(1, 0, 3, 1).is_none());
        assert!(v.observe_vote(2, 0, 3, 1).is_none(), "the same vote again");
        assert!(v.observe_vote(3, 0, 4, 2).is_none(), "another term");
        assert!(v.observe_vote(3, 1, 3, 2).is_none(), "another member");
        // Member 0 restarted and voted again in term 3, for member 2.
        let bad = v.observe_vote(4, 0, 3, 2).expect("violation");
        assert_eq!(bad.invariant, "one vote per term");
        assert!(bad.detail.contains("member 0 voted for 2 in term 3"));
        assert!(v.observe_vote(5, 0, 3, 2).is_none(), "reported once");
    }

    #[test]
    fn a_vote_counted_before_a_majority_stores_it_is_caught() {
        let mut r = VoteReliability::default();
        assert!(r.observe_counted_vote(1, 0, 1, 2, 3, 3).is_none());
        // Five members: the voter and the candidate hold it, not a third.
        let bad = r.observe_counted_vote(2, 3, 4, 2, 2, 3).expect("violation");
        assert_eq!(bad.invariant, "vote reliability");
        // Judged once.
        assert!(r.observe_counted_vote(3, 3, 4, 2, 2, 3).is_none());
    }
}
