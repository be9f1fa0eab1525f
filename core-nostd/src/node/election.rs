//! Failure detection, candidates, voters and log-access grants
//! (DARE §3.2 and §4.2.2).

use super::*;
use crate::sst::dare::col;

/// Timely failure-detector checks in a row after which Δ's excess over
/// its configured value halves (see `shrink_fd_period`). With Δ between
/// 0.2 and 5 ms, 32 checks are 6 to 160 ms of timely heartbeats: long
/// enough that one quiet moment inside a burst does not undo what the
/// burst taught, short enough that Δ is back near its configured value
/// within about half a second after the burst (five halvings from the
/// maximum).
pub const FD_TIMELY_CHECKS_TO_SHRINK: u32 = 32;
use crate::sst::{Ballot, RoleCode, VoteRequest};

impl<M: Memory, S: StateMachine> Node<M, S> {
    /// Accepts every peer row that changed and validates (Derecho §3.2:
    /// a reader never acts on a torn row; it keeps the last good copy).
    pub(super) fn observe_rows(&mut self) {
        let mut changed = false;
        for p in self.others() {
            let first = self.sst.version(p) == 0;
            let seen = self.sst.observe(&self.mem, p, self.layout.row(p));
            if seen.error.is_some() {
                self.counters.rows_rejected += 1;
            }
            if seen.changed() {
                changed = true;
                let peer = &mut self.peers[p.index()];
                peer.row = Row::from_checked(self.sst.words(p));
                peer.row_changed_ns = self.now;
                if first {
                    // The heartbeat in a row we see for the first time is
                    // not news of a live leader: only one that moves is.
                    peer.hb_counter_seen = peer.row.heartbeat.counter;
                }
            }
        }
        if changed {
            // Kept up to date here, where rows change, rather than reduced
            // over the table on every step of the poll loop.
            self.max_peer_term = self.sst.max(&col::TERM, 0, self.others_mask()).unwrap_or(0);
        }
    }

    /// Term changes, vote requests and heartbeats seen in peer rows.
    pub(super) fn react_to_rows(&mut self) {
        // An outdated leader or candidate steps down (DARE §3, §4.2.2).
        if self.role != Role::Follower && self.max_peer_term > self.term {
            self.advance_term(self.max_peer_term);
        }
        self.react_to_vote_requests();
        self.react_to_heartbeats();
    }

    fn react_to_vote_requests(&mut self) {
        // Not before we know what our previous incarnation voted, nor,
        // after a restart, before our log holds what we may have
        // acknowledged (restart.rs, CatchUp).
        if !self.votes_known() || self.catch_up.is_some() {
            return;
        }
        // Nor while we copy a snapshot: a vote grants the candidate our
        // log, which the restore is about to replace. We vote again once
        // restored (a copy needs only its donor, so it ends).
        if self.copying() {
            return;
        }
        let mut best: Option<(MemberId, u64)> = None;
        for c in self.others() {
            let peer = &self.peers[c.index()];
            if self.sst.version(c) == 0 {
                continue;
            }
            let req = peer.row.vote_request;
            // A request is live while its candidate is still in that term.
            if req.term == 0 || peer.row.term != req.term || req.term < self.term {
                continue;
            }
            // One vote per term (DARE §3.2): our private vote records it.
            if req.term <= self.row.private_vote.term {
                continue;
            }
            // Never vote against a leader we already follow in this term.
            if req.term == self.term && (self.leader.is_some() || self.role != Role::Follower) {
                continue;
            }
            // Nor against the member a view named for this term.
            if self.vote_against_view(c, req.term) {
                continue;
            }
            match self.duty {
                Duty::VoteCheck { term, .. } | Duty::VoteReplicate { term, .. }
                    if term >= req.term =>
                {
                    continue
                }
                _ => {}
            }
            if best.is_none_or(|(_, t)| req.term > t) {
                best = Some((c, req.term));
            }
        }
        if let Some((candidate, term)) = best {
            if term > self.term {
                self.advance_term(term);
            } else if self.granted_to.is_some() {
                // A voter revokes before it inspects its log (DARE §3.2.1),
                // also within the term: a leader we followed may hold it.
                self.revoke_all();
            }
            // The log check needs exclusive access: it runs once the host
            // has executed our revokes (DARE §3.2.3, Figure 4).
            self.duty = Duty::VoteCheck { candidate, term };
        }
    }

    fn react_to_heartbeats(&mut self) {
        for l in self.others() {
            let peer = &self.peers[l.index()];
            let hb = peer.row.heartbeat;
            // A peer whose process is gone is never followed again, even
            // if its last heartbeat, written just before it died, is only
            // observed after the death notification.
            let version = self.sst.version(l);
            if peer.down
                || version == 0
                || peer.row.role != RoleCode::Leader
                || hb.term == 0
                || hb.term != peer.row.term
            {
                continue;
            }
            let mut grown = false;
            if let Some(s) = self
                .suspicion
                .filter(|s| s.leader == l && hb.term == s.term)
            {
                // Its heartbeat moved on in the term we suspected it in: it
                // was alive, only slow (DARE §4.2.2). (A leader the host
                // reported dead is never suspected this way.)
                #[allow(unused_mut)]
                let mut proof = hb.counter > s.counter;
                #[cfg(feature = "mutation-testing")]
                if self.cfg.mutation == crate::config::Mutation::FalseSuspicionWithoutProof {
                    proof = hb.counter >= s.counter;
                }
                if proof {
                    self.suspicion = None;
                    self.counters.false_suspicions += 1;
                    self.last_false_suspicion = Some((l, s.term, s.at_ns));
                    self.grow_fd_period();
                    grown = true;
                }
            }
            let peer = &self.peers[l.index()];
            if hb.term > self.term {
                self.advance_term(hb.term);
                self.adopt_leader(l);
            } else if hb.term == self.term
                && self.leader.is_none()
                && self.role != Role::Leader
                && hb.counter != peer.hb_counter_seen
            {
                // Another member won this term: a candidate returns to idle.
                // A leader we suspected is only trusted again once its
                // heartbeat moves: its last heartbeat is still in our table.
                self.adopt_leader(l);
            } else if hb.term < self.term && hb.counter != peer.hb_counter_seen {
                // An outdated leader that is alive (its heartbeat moves):
                // grow Δ so that a slow but correct leader is eventually not
                // suspected (eventual strong accuracy, DARE §4.2.2). It
                // learns it is outdated from our row's term. (The last
                // heartbeat of a dead leader never moves: no growth.)
                self.peers[l.index()].hb_counter_seen = hb.counter;
                if !grown {
                    self.grow_fd_period();
                }
            }
        }
    }

    /// How late a timer due at `due_ns` fires now: how long this member
    /// was not running when it was due.
    fn late_ns(&self, due_ns: u64) -> u64 {
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::ActOnOwnStall {
            return 0;
        }
        self.now.saturating_sub(due_ns)
    }

    /// Δ grows by a step on evidence that a live leader was suspected
    /// (DARE §4.2.2), up to its maximum.
    fn grow_fd_period(&mut self) {
        self.fd_period_ns = (self.fd_period_ns + self.cfg.fd_check_period_step_ns)
            .min(self.cfg.fd_check_period_max_ns);
        self.timely_checks = 0;
    }

    /// Δ comes back down once heartbeats are timely again: after
    /// [`FD_TIMELY_CHECKS_TO_SHRINK`] checks in a row that found the
    /// heartbeat moving, the part of Δ above its configured value halves.
    /// Growth is additive and shrinking multiplicative and slow, so a
    /// leader that is slow for a while is not suspected again at once,
    /// and a real failure is detected within the configured Δ again soon
    /// after a burst of load is over (issue 12 item 8).
    fn shrink_fd_period(&mut self) {
        self.timely_checks += 1;
        if self.timely_checks < FD_TIMELY_CHECKS_TO_SHRINK {
            return;
        }
        self.timely_checks = 0;
        let base = self.cfg.fd_check_period_ns;
        if self.fd_period_ns > base {
            self.fd_period_ns = base + (self.fd_period_ns - base) / 2;
            self.counters.fd_period_shrinks += 1;
        }
    }

    pub(super) fn adopt_leader(&mut self, l: MemberId) {
        self.set_role(Role::Follower, Some(l));
        // A primary followed again is no longer to be replaced, nor a
        // leader.
        self.pb.claim = false;
        self.vl.claim = None;
        self.vl.own_claims_in_row = 0;
        self.peers[l.index()].hb_counter_seen = self.peers[l.index()].row.heartbeat.counter;
        self.set_timer(Timer::FdCheck, Some(self.now + self.fd_period_ns));
        self.set_timer(Timer::Election, None);
        let already = self.row.grant == Ballot::new(self.term, l) && self.granted_to == Some(l);
        self.duty = if already {
            Duty::None
        } else {
            Duty::Grant {
                leader: l,
                term: self.term,
            }
        };
    }

    /// Moves to a higher term as a follower without a leader, revoking
    /// every peer's access to our log first.
    pub(super) fn advance_term(&mut self, term: u64) {
        assert!(term > self.term, "terms only grow");
        if self.role == Role::Leader {
            self.leader_cleanup();
            self.counters.step_downs += 1;
        }
        self.term = term;
        self.row.term = term;
        if self.vl.claim.is_some_and(|c| c.log_term <= term) {
            // Someone campaigns in the term we asked for: too late.
            self.vl.claim = None;
        }
        self.revoke_all();
        self.duty = Duty::None;
        self.set_role(Role::Follower, None);
        let t = self.random_election_timeout();
        self.set_timer(Timer::Election, Some(self.now + t));
        self.set_timer(Timer::FdCheck, None);
        self.set_timer(Timer::Heartbeat, None);
        self.set_timer(Timer::Prune, None);
    }

    /// The leader is suspected (heartbeat stalled, or its process exited):
    /// start an election soon, after a small random delay so that the
    /// followers that noticed together do not all split the vote.
    pub(super) fn suspect_leader(&mut self, notified: bool) {
        let old = self.leader;
        // Only a heartbeat newer than the last one we saw may restore our
        // trust in this leader (its last one is still in our table).
        if let Some(l) = old {
            let counter = self.peers[l.index()].row.heartbeat.counter;
            self.peers[l.index()].hb_counter_seen = counter;
            // Silence may be slowness: remember, to learn if it was.
            self.suspicion = (!notified).then_some(Suspicion {
                leader: l,
                term: self.term,
                counter,
                at_ns: self.now,
            });
        }
        self.timely_checks = 0;
        self.set_role(Role::Follower, None);
        self.set_timer(Timer::FdCheck, None);
        let slot = self.cfg.election_timeout_min_ns / 4;
        let delay = match old {
            // A process-exit notification reaches every follower at the same
            // instant: instead of random delays, take turns in id order after
            // the dead leader, so the first in line usually wins at once.
            Some(l) if notified => {
                let n = self.member_count as u8;
                let rank = (1..n)
                    .map(|k| MemberId((l.0 + k) % n))
                    .take_while(|&m| m != self.me)
                    .filter(|m| self.peers[m.index()].reachable)
                    .count() as u64;
                rank * slot
            }
            // A silent heartbeat is seen by each follower at its own time.
            _ => self
                .rng
                .range_inclusive(0, self.cfg.election_timeout_min_ns / 2),
        };
        self.set_timer(Timer::Election, Some(self.now + delay));
    }

    fn start_election(&mut self) {
        if self.pb_mode() {
            // No election in primary-backup mode: the coordinators decide
            // who takes over.
            if self.catch_up.is_none() {
                self.pb_claim();
            } else {
                let t = self.random_election_timeout();
                self.set_timer(Timer::Election, Some(self.now + t));
            }
            return;
        }
        if self.catch_up.is_some() {
            // Not before we are caught up after a restart: wait again.
            let t = self.random_election_timeout();
            self.set_timer(Timer::Election, Some(self.now + t));
            return;
        }
        #[allow(unused_mut)]
        let mut claim = self.vl.usable;
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::CampaignWithoutView {
            claim = false;
        }
        if claim {
            // Views decide who campaigns (view_led.rs).
            self.claim_leadership();
            return;
        }
        self.campaign(self.term + 1);
    }

    /// Becomes a candidate in `term` (at least the current one): revokes
    /// every peer's access to our log, then asks for votes once the
    /// revokes are in effect (`Duty::Campaign`).
    pub(super) fn campaign(&mut self, term: u64) {
        assert!(term >= self.term, "terms only grow");
        if self.role == Role::Leader {
            self.leader_cleanup();
        }
        self.term = term;
        self.row.term = self.term;
        self.revoke_all();
        self.set_role(Role::Candidate, None);
        self.duty = Duty::Campaign { term: self.term };
        let t = self.random_election_timeout();
        self.set_timer(Timer::Election, Some(self.now + t));
        self.set_timer(Timer::FdCheck, None);
        self.counters.elections_started += 1;
    }

    /// Runs the local procedure that waits for exclusive log access.
    pub(super) fn run_duty(&mut self) {
        if self.revoke_pending || self.corrupt {
            if self.corrupt {
                self.duty = Duty::None;
            }
            return;
        }
        if self.copying() && !matches!(self.duty, Duty::None) {
            // Nobody gets our log while a snapshot is copied into place. A
            // vote is dropped (asked again from the rows); a grant waits:
            // the restore replaces it with one for the leader we follow
            // then (finish_recovery), and a copy abandoned without a
            // restore leaves our log as it was, so the grant goes ahead.
            // (Dropped, it was never given again: the leader waited for
            // it with a full log, swarm seed 712937947.)
            if !matches!(self.duty, Duty::Grant { .. }) {
                self.duty = Duty::None;
            }
            return;
        }
        match self.duty {
            Duty::None => {}
            Duty::Campaign { term } => {
                self.duty = Duty::None;
                if term != self.term || self.role != Role::Candidate {
                    return;
                }
                let Some(w) = self.walk_log() else { return };
                if !self.may_stand() {
                    // Our log says we are not one of the group's voters
                    // (removed, or added but not yet counted): no campaign.
                    self.set_role(Role::Follower, None);
                    return;
                }
                if self.campaign_is_hopeless(w.tail_index) {
                    self.counters.campaigns_forgone += 1;
                    if self.vl.campaign_term == term {
                        // A view started it: the others moved to this term
                        // already, and it may be the term we had (we may
                        // have acknowledged entries in it, which a restart
                        // must find). Stay in it, as a follower.
                        self.set_role(Role::Follower, None);
                        return;
                    }
                    // Nothing was published since the term went up (no
                    // push while a campaign is pending, see flush_row):
                    // take it back, so no leader is deposed for nothing.
                    self.term = term - 1;
                    self.row.term = self.term;
                    self.set_role(Role::Follower, None);
                    return;
                }
                self.tail_pos = w.tail_pos;
                self.tail_index = w.tail_index;
                self.last_term = w.last_term;
                self.commit_index = w.commit_index;
                self.row.vote_request = VoteRequest {
                    term,
                    last_index: w.tail_index - 1,
                    last_term: w.last_term,
                };
                self.row.last_index = w.tail_index - 1;
                // The candidate votes for itself; like every vote it is made
                // reliable before it counts (count_votes).
                self.row.private_vote = Ballot::new(term, self.me);
                self.row_dirty = true;
            }
            Duty::TakeOver { term } => {
                self.duty = Duty::None;
                if term != self.term || self.role == Role::Leader || !self.state_intact() {
                    return;
                }
                let Some(w) = self.walk_log() else { return };
                self.tail_pos = w.tail_pos;
                self.tail_index = w.tail_index;
                self.last_term = w.last_term;
                self.commit_index = w.commit_index;
                self.row.last_index = w.tail_index - 1;
                self.counters.view_takeovers += 1;
                self.pb.takeover = None;
                // Every member gets a fresh window under its new primary.
                self.pb.stalled_since = [None; MAX_MEMBERS];
                self.become_leader();
            }
            Duty::VoteCheck { candidate, term } => {
                self.duty = Duty::None;
                let req = self.peers[candidate.index()].row.vote_request;
                if term != self.term || req.term != term {
                    return;
                }
                let Some(w) = self.walk_log() else { return };
                let my_last_index = w.tail_index - 1;
                // Up to date: a higher last term, or the same term and at
                // least as long (DARE §3.2.3, Raft §5.4.1).
                #[allow(unused_mut)]
                let mut up_to_date = req.last_term > w.last_term
                    || (req.last_term == w.last_term && req.last_index >= my_last_index);
                #[cfg(feature = "mutation-testing")]
                if self.cfg.mutation == crate::config::Mutation::VoteWithoutLogCheck {
                    up_to_date = true;
                }
                self.row_dirty = true; // publish our new term either way
                if !up_to_date && self.vl.usable && self.vl.claim.is_none() {
                    // Our log is newer than that of the member a view
                    // named (or of a candidate): ask for a view naming
                    // us, soon, unless it wins meanwhile with the votes of
                    // others (then we follow it). Without this, the one
                    // who claims first after each timeout wins the view,
                    // however old its log.
                    let soon = self.now + self.cfg.election_timeout_min_ns / 4;
                    if self.timers[Timer::Election as usize].is_none_or(|t| t > soon) {
                        self.set_timer(Timer::Election, Some(soon));
                    }
                }
                if up_to_date {
                    self.write_adjust_list(&w, term, candidate);
                    self.row.private_vote = Ballot::new(term, candidate);
                    self.duty = Duty::VoteReplicate { candidate, term };
                    #[cfg(feature = "mutation-testing")]
                    if self.cfg.mutation == crate::config::Mutation::SkipVoteReplication {
                        self.answer_vote(candidate, term);
                    }
                }
            }
            Duty::VoteReplicate { candidate, term } => {
                if term != self.term {
                    self.duty = Duty::None;
                    return;
                }
                if self.private_vote_reliable() {
                    self.answer_vote(candidate, term);
                }
            }
            Duty::Grant { leader, term } => {
                self.duty = Duty::None;
                if term != self.term || self.leader != Some(leader) {
                    return;
                }
                if self.pb_mode() && self.recovery.state_lost {
                    // A primary that rolled back (pb.rs, "Speculation"):
                    // granted, it would be replicated to and added back to
                    // the view on its log alone, and the snapshot that
                    // replaces its state would then cut its log below the
                    // commit point of a view that counts it. It grants
                    // once restored (recovery.rs, `Regrant`).
                    return;
                }
                if !self.term_reliable() {
                    // Not before our term is stored at a majority (a
                    // restart must find every term we acknowledged entries
                    // in): push it, wait for the acknowledgements.
                    self.row_dirty |= self.row.term != self.last_pushed_row.term;
                    self.duty = Duty::Grant { leader, term };
                    return;
                }
                if self.granted_to.is_some_and(|g| g != leader) {
                    // Granting replaces: revoke the previous holder first,
                    // then come back once the revoke is in effect.
                    self.revoke_all();
                    self.duty = Duty::Grant { leader, term };
                    return;
                }
                let Some(w) = self.walk_log() else { return };
                self.write_adjust_list(&w, term, leader);
                self.grant_log(leader);
                self.row.grant = Ballot::new(term, leader);
                self.row_dirty = true;
                self.recovery_granted();
            }
        }
    }

    /// A pre-vote from the table (Raft's PreVote without its round trip):
    /// a campaign is hopeless when no majority could vote for us, because
    /// too many voters have applied an entry past the end of our log (an
    /// applied entry is committed, so its holder's log is more up to date
    /// than ours, DARE §3.2.3). Its only effect would be a higher term,
    /// which deposes a working leader: a member that had just restored a
    /// snapshot, still behind, did that over and over under `verbatim-bench
    /// recovery`. Rows we hold are at most as new as their owners', so the
    /// member with the most complete log is never held back (every applied
    /// entry is in its log) and an election can always happen.
    pub(super) fn campaign_is_hopeless(&self, tail_index: u64) -> bool {
        let could_vote = self
            .others()
            .filter(|&p| {
                self.sst.version(p) == 0 || self.peers[p.index()].row.apply_index <= tail_index
            })
            .fold(MemberMask::NONE, MemberMask::with);
        !self.is_quorum(could_vote, true)
    }

    /// Answers a vote whose private copy is stored at a majority: grant
    /// log access, then answer. The candidate only reads our list once it
    /// sees the vote/grant in our row, which is pushed after the grant is
    /// executed.
    fn answer_vote(&mut self, candidate: MemberId, term: u64) {
        self.grant_log(candidate);
        self.row.vote = Ballot::new(term, candidate);
        self.row.grant = Ballot::new(term, candidate);
        self.row_dirty = true;
        self.counters.votes_granted += 1;
        // A restored member's vote grants its log like its regrant would
        // (the candidate adjusts it from the list we just wrote).
        self.recovery_granted();
        // Give the candidate time before suspecting anyone (DARE §4.2.2,
        // last paragraph).
        let t = self.random_election_timeout();
        self.set_timer(Timer::Election, Some(self.now + t));
        self.duty = Duty::None;
    }

    /// What an election timeout checks before it starts an election or a
    /// claim: a member whose state machine a failed restore cleared must
    /// not lead (it would serve from it), nor one that has not read its
    /// votes back yet (restart.rs), nor one outside the group's voters as
    /// far as it knows, nor one a recovery holds back.
    pub(super) fn may_stand_now(&self) -> bool {
        self.state_intact()
            && self.votes_known()
            && self.may_stand()
            && self.recovery_allows_standing()
    }

    pub(super) fn fire_timers(&mut self) {
        if self.timer_due(Timer::Election) {
            let due_ns = self.timers[Timer::Election as usize].unwrap_or(self.now);
            let late_ns = self.late_ns(due_ns);
            self.set_timer(Timer::Election, None);
            match self.role {
                // A member whose state machine a failed restore cleared
                // must not lead (it would serve from it): it votes, and
                // waits for a snapshot. Nor does one that has not read its
                // votes back yet (restart.rs).
                _ if !self.may_stand_now() => {
                    // (Outside the group's voters, as far as we know: we do
                    // not stand; a walk of our log may tell us otherwise.)
                    let t = self.random_election_timeout();
                    self.set_timer(Timer::Election, Some(self.now + t));
                }
                Role::Follower if self.leader.is_none() => self.start_election(),
                // A candidate that was not running when its election timed
                // out (a stall of the process or of the whole machine) gave
                // the voters no time to answer: they may be answering now.
                // Its election goes on for another timeout instead of being
                // replaced by one in a higher term, which would void the
                // votes on their way (the same reasoning as the late Δ
                // check below).
                Role::Candidate if late_ns >= self.cfg.election_timeout_min_ns / 2 => {
                    self.counters.late_timeouts_forgiven += 1;
                    let t = self.random_election_timeout();
                    self.set_timer(Timer::Election, Some(self.now + t));
                }
                Role::Candidate => self.start_election(),
                _ => {}
            }
        }
        if self.timer_due(Timer::FdCheck) {
            let due_ns = self.timers[Timer::FdCheck as usize].unwrap_or(self.now);
            self.set_timer(Timer::FdCheck, None);
            if let (Role::Follower, Some(l)) = (self.role, self.leader) {
                let counter = self.peers[l.index()].row.heartbeat.counter;
                let late_ns = self.late_ns(due_ns);
                if counter == self.peers[l.index()].hb_counter_seen {
                    if late_ns >= self.fd_period_ns / 2 {
                        // We were not running when the check was due. When
                        // every process of a machine stops at once (a CPU
                        // quota spent, a VM or container paused), the
                        // leader stopped with us and had no chance to beat:
                        // suspecting it would depose a healthy leader after
                        // every stall. Its heartbeat gets a fresh window
                        // from now, in which it has run as long as we have.
                        // A leader that is really gone is suspected one Δ
                        // later.
                        self.counters.late_timeouts_forgiven += 1;
                        self.set_timer(Timer::FdCheck, Some(self.now + self.fd_period_ns));
                    } else {
                        self.suspect_leader(false);
                    }
                } else {
                    self.peers[l.index()].hb_counter_seen = counter;
                    self.shrink_fd_period();
                    self.set_timer(Timer::FdCheck, Some(self.now + self.fd_period_ns));
                }
            }
        }
        if self.timer_due(Timer::Heartbeat) {
            self.set_timer(Timer::Heartbeat, None);
            if self.role == Role::Leader {
                self.row.heartbeat.counter += 1;
                self.row_dirty = true;
                self.set_timer(
                    Timer::Heartbeat,
                    Some(self.now + self.cfg.heartbeat_period_ns),
                );
                self.check_quorum();
            }
        }
        if self.timer_due(Timer::ApplyPublish) {
            // Publish apply progress (for pruning), and a keep-alive well
            // within the prune grace so an idle but live member is never
            // mistaken for a dead one.
            let keep_alive_ns = self.cfg.prune_grace_ns / 4;
            if self.row.apply_index != self.published_apply_index
                || self.now.saturating_sub(self.last_push_ns) >= keep_alive_ns
            {
                self.row_dirty = true;
            }
            // Back off while nothing is applied (a read-only load, an idle
            // group): each follower wake takes the core from a leader that
            // shares it (measured with `verbatim-bench throughput`: 2,000
            // wakes a second per follower at the 500 µs default). Any
            // progress restores the period at once. Never longer than Δ,
            // which wakes the member anyway, nor the keep-alive.
            if self.row.apply_index == self.apply_index_at_publish {
                self.apply_idle_periods = self.apply_idle_periods.saturating_add(1).min(16);
            } else {
                self.apply_idle_periods = 0;
            }
            self.apply_index_at_publish = self.row.apply_index;
            let base = self.cfg.apply_publish_period_ns;
            let cap = self.fd_period_ns.min(keep_alive_ns).max(base);
            let period = base
                .saturating_mul(1u64 << self.apply_idle_periods)
                .min(cap);
            self.set_timer(Timer::ApplyPublish, Some(self.now + period));
        }
        if self.timer_due(Timer::Prune) {
            self.set_timer(Timer::Prune, None);
            if self.role == Role::Leader {
                self.prune();
                self.set_timer(Timer::Prune, Some(self.now + self.cfg.prune_period_ns));
            }
        }
    }

    /// A candidate becomes leader with votes from a majority, itself
    /// included (DARE §3.2.2).
    pub(super) fn count_votes(&mut self) {
        if matches!(self.duty, Duty::Campaign { .. }) || self.row.vote_request.term != self.term {
            return;
        }
        let me = Ballot::new(self.term, self.me);
        let (term, id) = (self.term, u64::from(self.me.0));
        let votes = self.sst.select(self.others_mask(), |r| {
            r.get(&col::VOTE_TERM) == Some(term) && r.get(&col::VOTE_MEMBER) == Some(id)
        });
        let own = self.row.private_vote == me && self.private_vote_reliable();
        if self.is_quorum(votes, own) {
            self.become_leader();
        }
    }
}
