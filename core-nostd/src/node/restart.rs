//! Starting with empty memory (DARE §3.2.3, "private data"): a member
//! reads back what it published before a restart from the copies of its
//! row that its peers hold, adopts the highest term and private vote found,
//! continues its row versions above theirs, and only then publishes; after
//! a restart it neither votes nor stands until its log holds what it may
//! have acknowledged before (see [`CatchUp`]).
//!
//! Why this many peers: a private vote is stored at a majority (q members,
//! itself included, so q - 1 peers) before it is answered, and so is the
//! term in which a member grants log access to a leader (before it can
//! acknowledge any entry of that leader). Reading P - q + 1 peers meets
//! those q - 1 in at least one member, so the term and vote found are at
//! least every term we voted or acknowledged entries in. (A member none of
//! whose copies is found never voted nor acknowledged anything: it is new,
//! or was cut off all its previous life, and starts as new.)

use super::*;
use crate::fabric::Op;
use crate::layout::ROW_BYTES;
use crate::sst::{Row, RowError};

impl<M: Memory, S: StateMachine> Node<M, S> {
    /// Peers whose rows must be read: P - q + 1 (at most every peer).
    fn read_back_needed(&self) -> usize {
        // A restarted member knows no configuration: its row was stored
        // at a majority of all slots (io.rs), which P - q + 1 copies meet.
        let quorum = self.member_count / 2 + 1;
        (self.member_count - quorum + 1).min(self.member_count - 1)
    }

    /// True when the next call would ask another peer.
    pub(super) fn read_back_can_ask(&self) -> bool {
        let Some(r) = self.read_back else {
            return false;
        };
        r.answered.count() + r.asked.count() < self.read_back_needed()
            && self.others().any(|p| {
                !r.answered.contains(p)
                    && !r.asked.contains(p)
                    && self.channel_ok(p, Channel::Control)
            })
            || r.answered.count() >= self.read_back_needed()
    }

    /// Asks peers for their two rows until enough answered, then adopts
    /// what they hold.
    pub(super) fn read_back_step(&mut self) {
        let Some(mut r) = self.read_back else { return };
        let needed = self.read_back_needed();
        if r.answered.count() >= needed {
            self.finish_read_back(r);
            return;
        }
        let n = self.member_count;
        for k in 0..n {
            if r.answered.count() + r.asked.count() >= needed || !self.can_post(2) {
                break;
            }
            let p = MemberId(((r.offset + k) % n) as u8);
            if p == self.me
                || r.answered.contains(p)
                || r.asked.contains(p)
                || !self.channel_ok(p, Channel::Control)
            {
                continue;
            }
            // Its copy of our row.
            self.post(
                p,
                Op::Read {
                    remote: self.layout.row(self.me),
                    local: self.layout.read_back_landing(p),
                    len: ROW_BYTES as u32,
                },
                Purpose::ReadBackRow,
            );
            r.asked = r.asked.with(p);
        }
        self.read_back = Some(r);
    }

    /// A startup READ completed.
    pub(super) fn on_read_back(&mut self, p: MemberId, ok: bool) {
        let Some(mut r) = self.read_back else {
            return; // done meanwhile: a late answer changes nothing
        };
        if !r.asked.contains(p) {
            return;
        }
        r.asked = r.asked.without(p);
        if ok {
            match Row::read(&self.mem, self.layout.read_back_landing(p)) {
                Ok((row, version)) => {
                    r.version = r.version.max(version);
                    r.term = r.term.max(row.term).max(row.private_vote.term);
                    if row.private_vote.term > r.private_vote.term {
                        r.private_vote = row.private_vote;
                    }
                    if row.vote.term > r.vote.term {
                        r.vote = row.vote;
                    }
                    if row.heartbeat.counter > r.heartbeat.counter {
                        r.heartbeat = row.heartbeat;
                    }
                    r.answered = r.answered.with(p);
                }
                // It never received a row of ours.
                Err(RowError::Empty) => r.answered = r.answered.with(p),
                Err(_) => {
                    // Torn or corrupt: ask again, from another peer first.
                    self.counters.rows_rejected += 1;
                    r.offset += 1;
                }
            }
        }
        self.read_back = Some(r);
    }

    fn finish_read_back(&mut self, r: ReadBack) {
        self.read_back = None;
        #[allow(unused_mut)]
        let mut adopt = true;
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::RestartWithoutVoteRecovery {
            adopt = false;
        }
        if adopt {
            self.term = r.term;
            self.row.term = r.term;
            // Never take back what a candidate may have counted, nor vote
            // again in a term we voted in (react_to_vote_requests).
            self.row.private_vote = r.private_vote;
            self.row.vote = r.vote;
            self.row.heartbeat = r.heartbeat;
            if r.version > 0 && r.term > 0 {
                self.catch_up = Some(CatchUp {
                    term: r.term,
                    index: None,
                });
            }
        }
        if r.version > 0 || r.term > 0 {
            self.counters.restarts_read_back += 1;
            self.row_version = r.version + RESTART_VERSION_GAP;
            self.grant_nonce = self.row_version;
        }
        self.row_dirty = true;
        if self.timers[Timer::Election as usize].is_none_or(|at| at <= self.now) {
            let t = self.random_election_timeout();
            self.set_timer(Timer::Election, Some(self.now + t));
        }
        self.track_catch_up();
    }

    /// Ends the wait after a restart once our log holds what we may have
    /// acknowledged before it ([`CatchUp`]).
    pub(super) fn track_catch_up(&mut self) {
        let Some(mut c) = self.catch_up else { return };
        if c.index.is_none() {
            // The last index `c.term`'s leader published since our restart
            // (every copy in our table arrived after it).
            for l in self.others() {
                let row = self.peers[l.index()].row;
                if self.sst.version(l) != 0
                    && row.role == crate::sst::RoleCode::Leader
                    && row.term == c.term
                    && row.heartbeat.term == c.term
                {
                    c.index = Some(row.last_index);
                    break;
                }
            }
        }
        let caught_up =
            self.last_applied_term > c.term || c.index.is_some_and(|last| self.apply_index > last);
        self.catch_up = if caught_up { None } else { Some(c) };
    }
}
