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
//!   the view moves to its term, which revokes the old leader's access to
//!   its log before the vote request arrives, and votes in that term for
//!   the named member only. The votes are DARE's: a voter grants its log
//!   only to a candidate whose log is at least as up to date as its own,
//!   and the candidate leads with the votes of a majority. So the view
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
//!   coordinators known gone, or every slot used, for a lease wait: the
//!   driver's [`Node::set_views_usable`]), elections are DARE's own again.
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
    /// The tail index of our log when a campaign found it hopeless (see
    /// `claim_leadership`); forgotten once we follow a leader, which may
    /// make it grow.
    pub hopeless_tail_index: Option<u64>,
}

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
        let t = self.random_election_timeout();
        self.set_timer(Timer::Election, Some(self.now + t));
        // A claim, once decided, moves every member to its term and ends
        // any campaign of an older one, unlike a DARE campaign that finds
        // itself hopeless and takes its term back unseen. So a member that
        // cannot win does not claim: one that cannot stand now (copying a
        // snapshot), or whose last campaign found too many voters applied
        // past its log, as long as that still holds (rows only grow).
        // Someone can always claim: the member that applied the most is
        // never hopeless.
        if !self.may_campaign() {
            return;
        }
        if let Some(tail) = self.vl.hopeless_tail_index {
            if self.campaign_is_hopeless(tail) {
                return;
            }
            self.vl.hopeless_tail_index = None;
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

    /// Log mode: follows a newer decided view (see the module docs).
    pub(super) fn follow_view_log(&mut self, epoch: u64, view: View) {
        self.pb.epoch = epoch;
        self.pb.view = Some(view);
        if let Some(c) = self.vl.claim {
            if view.log_term >= c.log_term {
                // Settled: for us (we campaign below) or for another.
                self.vl.claim = None;
            } else {
                // An older term decided meanwhile: our claim still
                // stands, on the new base.
                self.vl.claim_base = epoch;
            }
        }
        if view.leader != self.me {
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
            // Leads on the view alone, as in primary-backup mode.
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
        } else if view.log_term > self.term {
            // Named, but unable to stand now (restarting, catching up,
            // copying a snapshot): the others' timeouts claim again.
            self.advance_term(view.log_term);
        }
    }

    /// Whether this member may campaign now (the checks an election
    /// timeout makes before it starts one).
    pub(super) fn may_campaign(&self) -> bool {
        self.state_intact()
            && self.votes_known()
            && self.may_stand()
            && self.recovery_allows_standing()
            && self.catch_up.is_none()
            && !self.copying()
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
