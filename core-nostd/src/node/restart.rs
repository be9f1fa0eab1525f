//! A member that starts knows nothing of what its previous incarnation
//! voted (DARE keeps no stable storage): a process that restarted could
//! vote a second time in a term it already voted in, and two leaders could
//! win that term. DARE §3.2.3 is why this cannot happen: a vote is made
//! reliable before it is answered, replicated to a majority in the
//! member's own row ("private data"). So every member, when it starts,
//! READs its own row back from the other members' control regions (where
//! its pushes landed) and, once a majority (counting itself) has answered,
//! adopts the highest term and private vote found, and numbers its next
//! row above every copy. Until then it neither votes nor stands.
//!
//! A majority suffices: the vote's private copy reached a majority before
//! the vote was answered, and any two majorities share a member. At the
//! group's very first start the copies are empty and the member goes on at
//! once; the cost is one READ per peer at start.

use super::*;
use crate::fabric::Op;
use crate::sst::{Ballot, RowError};

/// Progress of reading our own row back.
#[derive(Clone, Copy, Debug)]
pub(super) struct VoteRecovery {
    pub(super) done: bool,
    /// Members that answered (bit per member).
    answered: u64,
    /// READs in flight (bit per member).
    inflight: u64,
    /// Highest term, private vote and answered vote found, and the highest
    /// version of our row any peer holds.
    term: u64,
    private_vote: Ballot,
    vote: Ballot,
    version: u64,
}

impl VoteRecovery {
    pub(super) const NEW: VoteRecovery = VoteRecovery {
        done: false,
        answered: 0,
        inflight: 0,
        term: 0,
        private_vote: Ballot {
            term: 0,
            member: None,
        },
        vote: Ballot {
            term: 0,
            member: None,
        },
        version: 0,
    };
}

impl<M: Memory, S: StateMachine> Node<M, S> {
    /// True once this member knows the votes of its previous incarnations
    /// (it may vote and stand).
    pub fn votes_known(&self) -> bool {
        self.vote_recovery.done
    }

    /// Every step until done: READ our row from each peer that has not
    /// answered (into the landing zone for that peer's rows: a member that
    /// has not recovered its votes cannot lead, so the leader's read round
    /// does not use it meanwhile).
    pub(super) fn vote_recovery_tick(&mut self) {
        if self.vote_recovery.done {
            return;
        }
        if self.member_count == 1 {
            self.adopt_recovered_votes();
            return;
        }
        for p in self.others() {
            let bit = 1u64 << p.0;
            if self.vote_recovery.answered & bit != 0
                || self.vote_recovery.inflight & bit != 0
                || self.peers[p.index()].down
                || !self.channel_ok(p, Channel::Control)
                || !self.can_post(1)
            {
                continue;
            }
            self.post(
                p,
                Op::Read {
                    remote: self.layout.row(self.me),
                    local: self.layout.row_landing(p),
                    len: crate::layout::ROW_BYTES as u32,
                },
                Purpose::ReadOwnRow,
            );
            self.vote_recovery.inflight |= bit;
        }
    }

    /// A READ of our row from `peer` completed.
    pub(super) fn on_own_row(&mut self, peer: MemberId, ok: bool) {
        let bit = 1u64 << peer.0;
        self.vote_recovery.inflight &= !bit;
        if self.vote_recovery.done || !ok {
            return; // a failed READ is posted again once the channel is back
        }
        match Row::read(&self.mem, self.layout.row_landing(peer)) {
            Ok((row, version)) => {
                let r = &mut self.vote_recovery;
                r.term = r.term.max(row.term);
                if row.private_vote.term > r.private_vote.term {
                    r.private_vote = row.private_vote;
                }
                if row.vote.term > r.vote.term {
                    r.vote = row.vote;
                }
                r.version = r.version.max(version);
                r.answered |= bit;
            }
            // Nothing of ours there: an answer too (first start).
            Err(RowError::Empty) => self.vote_recovery.answered |= bit,
            // A copy caught mid-push or damaged: ask again.
            Err(_) => {}
        }
        if self.vote_recovery.answered.count_ones() as usize + 1 >= self.quorum {
            self.adopt_recovered_votes();
        }
    }

    fn adopt_recovered_votes(&mut self) {
        let r = self.vote_recovery;
        self.vote_recovery.done = true;
        if r.term > self.term {
            self.advance_term(r.term);
        }
        if r.private_vote.term > self.row.private_vote.term {
            // Already reliable (a majority held it): it only stops us from
            // voting again in its term.
            self.row.private_vote = r.private_vote;
        }
        if r.vote.term > self.row.vote.term {
            self.row.vote = r.vote;
        }
        // Our next push must be newer than any copy a peer holds.
        self.row_version = self.row_version.max(r.version);
        self.row_dirty = true;
    }
}
