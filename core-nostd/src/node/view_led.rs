//! Log mode with views on: leaders decided by the coordinators (issue 14,
//! item 4(b)), with DARE's election as the fallback.
//!
//! * **Claim.** A follower that would start an election (it suspects its
//!   leader, its leader's process exited, or it knows none) asks for a
//!   view naming itself leader in the next term instead
//!   ([`Node::log_claim`]), derived from the newest view it knows. Claims
//!   take the turns elections take (the member right after a dead leader
//!   first). The coordinators decide one view per epoch: of claims made
//!   together, one wins, and the others are void (they were derived from
//!   an epoch that is no longer the newest).
//! * **Campaign.** The member a decided view names campaigns in the view's
//!   term at once ([`Node::follow_view`]); every other member that learns
//!   the view moves to its term (revoking the old leader's access to its
//!   log; a parked member is rung by the named member's vote request,
//!   which moves it to that term before it learns the view) and votes in
//!   that term for the named member only. The votes are DARE's: a voter
//!   grants its log only to a candidate whose log is at least as up to
//!   date as its own, and the candidate leads with the votes of a
//!   majority. So the view
//!   chooses *who* campaigns (no split votes, no randomized backoff), and
//!   leader completeness rests on the same majority of log checks as
//!   without views: a named member whose log misses a committed entry is
//!   refused by every member of the majority that holds it, and a later
//!   claim names another member.
//! * **Why not lead on the view alone,** as primary-backup mode does:
//!   there every member of a view holds every committed entry; here only
//!   a majority does, and the coordinators do not know which.
//! * **Lease overlap.** The view the new leader needs for its lease is the
//!   one that named it, decided before the vote: the wait for the older
//!   view's lease runs during the election instead of after it.
//! * **Fallback.** When no view can be decided any more (a majority of the
//!   coordinators known gone for a lease wait: the driver's
//!   [`Node::set_views_usable`]), elections are DARE's own again.
//!   A member that claims and hears nothing claims again after an election
//!   timeout, so a claim lost on the way costs one timeout.

use super::*;
use crate::views::View;

/// What a log-mode member knows and wants of views.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ViewLed {
    /// Views can still be decided (the driver says so each step).
    pub usable: bool,
    /// The view asked for, naming this member in the next term.
    pub claim: Option<View>,
    /// The epoch of the newest view known when the claim was made.
    pub claim_base: u64,
    /// The term this member campaigned in because a view named it (0:
    /// none).
    pub campaign_term: u64,
    /// Claims made in a row as the candidate a view named (its voters do
    /// not answer: a link down, a member descheduled): each waits twice
    /// as long as the last, so a candidate that cannot reach its voters
    /// does not use a view slot per election timeout.
    pub own_claims_in_row: u32,
}

/// Most doublings of the wait between a named candidate's claims (16
/// election timeouts).
const OWN_CLAIM_BACKOFF_MAX_SHIFT: u32 = 4;

impl<M: Memory, S: StateMachine> Node<M, S> {
    /// Log mode: whether views decide who campaigns (views on and still
    /// decidable). The driver calls it every step with the view engine's
    /// word; `false` (the default, and always with views off) leaves
    /// elections to DARE alone.
    pub fn set_views_usable(&mut self, usable: bool) {
        self.vl.usable = usable && !self.pb_mode();
        if !self.vl.usable {
            self.vl.claim = None;
        }
    }

    /// Log mode: whether views decide who campaigns here now.
    pub fn views_usable(&self) -> bool {
        self.vl.usable
    }

    /// Log mode: the view this member asks for to lead, and the epoch of
    /// the view it was derived from (propose it only while that is still
    /// the newest).
    pub fn log_claim(&self) -> Option<(View, u64)> {
        self.vl.claim.map(|c| (c, self.vl.claim_base))
    }

    /// Whether this member leads by a view (primary-backup mode, or a log
    /// -mode campaign a decided view started), rather than by an election
    /// it started itself.
    pub fn leads_by_view(&self) -> bool {
        self.role == Role::Leader
            && (self.pb_mode() || (self.vl.campaign_term == self.term && self.term > 0))
    }

    /// Instead of an election (log mode, views usable): ask for a view
    /// naming this member leader in the next term. Asked again after an
    /// election timeout if no view comes.
    pub(super) fn claim_leadership(&mut self) {
        let named_candidate = self.role == Role::Candidate && self.vl.campaign_term == self.term;
        if named_candidate {
            self.vl.own_claims_in_row = self.vl.own_claims_in_row.saturating_add(1);
        } else {
            self.vl.own_claims_in_row = 0;
        }
        self.set_claim_timer();
        // A claim, once decided, moves every member to its term and ends
        // any campaign of an older one, unlike a DARE campaign that finds
        // itself hopeless and takes its term back unseen. So a member that
        // cannot win does not claim: one that cannot stand now (copying a
        // snapshot), or one too many of whose voters applied entries past
        // the end of its log (DARE's pre-vote from the table, see
        // `campaign_is_hopeless`), by a read-only walk of its log.
        if !self.may_campaign() {
            return;
        }
        if self.campaign_is_hopeless(self.peek_tail_index()) {
            self.counters.claims_forgone += 1;
            return;
        }
        let known = self.pb.view.map_or(0, |v| v.log_term);
        let term = self.term.max(known).max(self.max_peer_term) + 1;
        self.vl.claim = Some(View {
            leader: self.me,
            log_term: term,
            lease_ns: self.cfg.lease_ns,
            members: 0,
        });
        self.vl.claim_base = self.pb.epoch;
        self.counters.view_claims += 1;
    }

    /// The next claim after an election timeout, doubled per claim this
    /// member made in a row as the named candidate.
    fn set_claim_timer(&mut self) {
        let shift = self.vl.own_claims_in_row.min(OWN_CLAIM_BACKOFF_MAX_SHIFT);
        let t = self.random_election_timeout() << shift;
        self.set_timer(Timer::Election, Some(self.now + t));
    }

    /// Log mode: follows a newer decided view (see the module docs).
    pub(super) fn follow_view_log(&mut self, epoch: u64, view: View) {
        self.pb.epoch = epoch;
        self.pb.view = Some(view);
        if let Some(c) = self.vl.claim {
            if view.log_term >= c.log_term || view.leader != self.me {
                // Settled: for us (we campaign below), or another member
                // campaigns now (if it fails, our timeout claims again;
                // claiming on would depose it for nothing).
                self.vl.claim = None;
            } else {
                // An older term of ours decided meanwhile: our claim
                // still stands, on the new base.
                self.vl.claim_base = epoch;
            }
        }
        if view.leader != self.me {
            self.vl.own_claims_in_row = 0;
            if view.log_term > self.term {
                self.advance_term(view.log_term);
            }
            return;
        }
        let fresh_term = view.log_term > self.term
            || (view.log_term == self.term
                && self.role == Role::Follower
                && self.leader.is_none()
                && self.row.private_vote.term < view.log_term
                && matches!(self.duty, Duty::None));
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::ViewLeaderWithoutVotes
            && fresh_term
            && self.may_campaign()
        {
            // Leads on the view alone, as in primary-backup mode (a
            // follower's grant checks no log).
            if view.log_term > self.term {
                self.advance_term(view.log_term);
            }
            self.vl.campaign_term = view.log_term;
            self.duty = Duty::TakeOver {
                term: view.log_term,
            };
            return;
        }
        if fresh_term && self.may_campaign() {
            self.vl.campaign_term = view.log_term;
            self.counters.view_campaigns += 1;
            self.campaign(view.log_term);
            // (The campaign's timeout, spaced out as our claims are.)
            self.set_claim_timer();
        } else if view.log_term > self.term {
            // Named, but unable to stand now (restarting, catching up,
            // copying a snapshot): the others' timeouts claim again.
            self.advance_term(view.log_term);
        }
    }

    /// The index one past the last entry of our log, as far as it
    /// validates from the apply point on: `walk_log` without its writes
    /// (no adjustment list, no tail fix-up), so it needs no exclusive
    /// access. A leader still writing (we suspect it wrongly) can only
    /// make it stop early; entries it holds are checked as the walk
    /// checks them. Bounded like the walk.
    fn peek_tail_index(&self) -> u64 {
        let tail_word = self.mem.load_u64(self.layout.log_tail());
        let limit = tail_word.max(self.commit_pos);
        let max_payload = self.cfg.entry_payload_bytes_max;
        let (mut pos, mut index) = (self.apply_pos, self.apply_index);
        for _ in 0..=self.layout.log.adjust_capacity {
            if pos >= limit {
                break;
            }
            match self.ring.verify_entry(&self.mem, pos, max_payload) {
                Ok((h, _, end)) if h.index == index && end <= limit => {
                    index += 1;
                    pos = end;
                }
                _ => break,
            }
        }
        index
    }

    /// Whether this member may campaign now: what an election timeout
    /// checks before it starts one (`may_stand_now`), and not catching up
    /// or copying a snapshot (which a DARE campaign waits out on its own).
    pub(super) fn may_campaign(&self) -> bool {
        self.may_stand_now() && self.catch_up.is_none() && !self.copying()
    }

    /// Whether a vote request from `candidate` in `term` goes against the
    /// newest decided view, which names another member in that term.
    pub(super) fn vote_against_view(&self, candidate: MemberId, term: u64) -> bool {
        !self.pb_mode()
            && self
                .pb
                .view
                .is_some_and(|v| v.log_term == term && v.leader != candidate)
    }
}
