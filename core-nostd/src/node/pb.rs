//! Primary-backup mode (uKharon-KV, uKharon §7.3; issue 14): the same log,
//! replicated the same way, with the leader decided by the coordinators
//! instead of a vote, and commits counted over the members a view lists.
//!
//! * **Who leads.** The view engine decides views; the driver hands every
//!   newer one to [`Node::follow_view`]. A view names the primary, the
//!   term it leads in and the members whose copy counts. The primary
//!   becomes leader in that term without an election; every other member
//!   adopts it (and grants it its log) when it learns the view or sees the
//!   primary's heartbeat in the higher term, whichever comes first. No
//!   DARE election ever runs in this mode.
//! * **What commits.** An entry commits once every member of the view
//!   holds it (uKharon-KV replicates each write to every backup). So any
//!   member of the view holds every committed entry, and can take over
//!   without comparing logs: `f + 1` members survive `f` failures.
//! * **Failover.** A member that suspects the primary (Δ without a
//!   heartbeat, or its death notice) *claims*: it asks for the next view,
//!   naming itself primary in the next term, with the members of the view
//!   it knows minus the old primary and the members known dead. Claims
//!   take turns as DARE's notified elections do (the member right after
//!   the dead primary first); the coordinators decide one. The new
//!   primary commits only once its view is active, after every lease on
//!   an older view ran out (the driver's `clear_commit`).
//! * **Members.** The primary asks for a view without a member reported
//!   dead or silent for `leader_quorum_timeout_ns`, and for one with a
//!   member back once it holds the whole log. While such a view is asked
//!   for, commits count the members of both (the union): whichever is
//!   decided, its members hold every committed entry.
//! * **Who may claim.** Only a member of the newest view it knows, and not
//!   a restarted process whose memory lost what it held, until a view has
//!   dropped it (it is added back only once it holds the log again).
//! * **Reads** are served under the lease only: a round of term checks
//!   proves nothing here, because a new primary needs no majority of
//!   members to learn its term.
//!
//! * **Speculation** (uKharon-KV: "in parallel, P speculatively executes
//!   the requests"). In the step that posts an operation's WRITEs, the
//!   primary executes it (state machine and session table) and stages its
//!   reply, but *holds* the reply until the operation commits: the client
//!   hears of nothing that a member of the view may lack. Until then no
//!   read is served (it could see the operation; none is executed ahead
//!   while reads wait, so they wait one commit at most) and no snapshot is
//!   given (none is executed ahead while one is asked of us). A retry of
//!   an operation executed ahead is not answered from the session table:
//!   it goes into the log and is answered as a duplicate once committed.
//!   A primary that stops leading with operations executed ahead (a newer
//!   view, a higher term) *rolls back*: its state machine no longer
//!   matches its log, so it counts as lost and is replaced by a snapshot
//!   (recovery.rs), as after a failed restore. uKharon-KV skips the roll
//!   back because a removed node never comes back; here it comes back
//!   with a snapshot. So speculation is on only where snapshots are
//!   (`snapshot_bytes_max > 0`); without them the primary executes an
//!   operation once it commits, as any member does.
//!
//! Not built: a DARE fallback when a majority of the coordinators is gone
//! (the group then stops, as uKharon does: its coordinators are the
//! replicated part).

use super::*;
use crate::log::EntryKind;
use crate::views::View;

/// A reply staged for an operation, given once the operation commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct HeldReply {
    pub index: u64,
    pub client_id: u64,
    pub request_id: u64,
    /// Its reply stage slot.
    pub stage: u32,
    /// The request was older than the client's latest.
    pub stale: bool,
    /// Given already (only under the mutation that replies early).
    pub given: bool,
}

/// What a member knows and wants in primary-backup mode.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PrimaryBackup {
    /// The newest view followed, with its epoch (0: none yet).
    pub epoch: u64,
    pub view: Option<View>,
    /// Suspecting the primary (or knowing none), this member asks to take
    /// over.
    pub claim: bool,
    /// The view asked for, and the epoch it was derived from.
    pub want: Option<View>,
    /// Primary: members of views asked for since the last one decided,
    /// counted in commits besides the view's own.
    pub extra: MemberMask,
    /// A view names us primary in this term: we take over once the driver
    /// reports our lease on it active.
    pub takeover: Option<u64>,
    /// Primary: since when each member has held commits back (it does
    /// not replicate, or its acknowledgements stand still below our
    /// tail), and the acknowledged position last seen.
    pub stalled_since: [Option<u64>; MAX_MEMBERS],
    pub acked_seen: [u64; MAX_MEMBERS],
    /// When the wanted view is recomputed next on a step.
    pub update_due_ns: u64,
    /// Backup-memory mode: the members whose store copy holds every
    /// acknowledged write (from the backup engine, through the driver);
    /// only they may be added back.
    pub copies_synced: u64,
    /// Backup-memory mode: members of the view whose store copy must be
    /// redone, which the backup engine copies only once no view counts
    /// them (a copy tears a store while it runs).
    pub copies_to_drop: u64,
    /// Backup-memory mode: whether this member's own store holds every
    /// acknowledged write it may be asked for (not a restarted process's
    /// empty store before a copy filled it, nor a copy under way): only
    /// then may it take over.
    pub store_torn: bool,
}

impl<M: Memory, S: StateMachine> Node<M, S> {
    /// Whether this member runs in primary-backup mode.
    #[inline]
    pub(super) fn pb_mode(&self) -> bool {
        self.cfg.mode.view_primary()
    }

    /// Primary-backup mode: the view this member asks for, and the epoch
    /// of the view it was derived from (see the module documentation).
    pub fn pb_want(&self) -> (Option<View>, u64) {
        (self.pb.want, self.pb.epoch)
    }

    /// The newest view followed, with its epoch (both modes).
    pub fn followed_view(&self) -> Option<(u64, View)> {
        self.pb.view.map(|v| (self.pb.epoch, v))
    }

    /// Primary-backup mode: the members counted in commits now (the
    /// view's, and those of a view asked for).
    pub fn pb_commit_members(&self) -> MemberMask {
        let view = self
            .pb
            .view
            .map_or(MemberMask::NONE, |v| MemberMask(v.members.into()));
        view.or(self.pb.extra)
    }

    /// Primary-backup mode: this primary's commits wait for a member of the
    /// view that has not granted it its log yet. Its CPU is on the path
    /// (DARE's grant): a host whose poll loop shares a core with it should
    /// yield rather than spin.
    pub fn pb_waits_for_grants(&self) -> bool {
        self.pb_mode()
            && self.role == Role::Leader
            && self.pb_commit_members().iter().any(|p| {
                p != self.me
                    && !self.peers[p.index()].down
                    && self.peers[p.index()].repl.state == ReplState::AwaitGrant
            })
    }

    /// Follows a newer decided view (the driver passes each one once the
    /// view engine knows it). In log mode, see `view_led.rs`.
    pub fn follow_view(&mut self, now: u64, epoch: u64, view: View) {
        self.tick_clock(now);
        if epoch <= self.pb.epoch || self.read_back.is_some() {
            // (A restarted member follows nothing before it has read its
            // row back: the driver passes the view again.)
            return;
        }
        if !self.pb_mode() {
            self.follow_view_log(epoch, view);
            self.invariants();
            return;
        }
        self.pb.epoch = epoch;
        self.pb.view = Some(view);
        self.pb.extra = MemberMask::NONE;
        self.pb.claim = false;
        self.pb.takeover = None;
        if view.members & (1 << view.leader.0) == 0 {
            // Not a primary-backup view (no member set, or one without its
            // primary): nothing to follow. A correct proposer never makes
            // one; it is passed over, not acted on.
            return;
        }
        if view.log_term > self.term {
            self.advance_term(view.log_term);
        }
        if view.log_term == self.term {
            if view.leader == self.me {
                if self.role != Role::Leader && self.pb_may_take_over() {
                    // Leads once the lease on the view is active (see
                    // `set_read_lease`), our revokes are in effect and our
                    // log is walked (`run_duty`), as a campaign does.
                    self.pb.takeover = Some(self.term);
                }
            } else if self.role != Role::Leader && self.leader != Some(view.leader) {
                self.adopt_leader(view.leader);
            }
        }
        self.pb_update_want();
        self.invariants();
    }

    /// Instead of an election: ask to take over (see the module docs).
    pub(super) fn pb_claim(&mut self) {
        if !self.pb.claim {
            self.pb.claim = true;
            self.counters.view_claims += 1;
        }
        // Asked again after another timeout if no view comes.
        let t = self.random_election_timeout();
        self.set_timer(Timer::Election, Some(self.now + t));
        self.pb_update_want();
    }

    /// Primary-backup mode: may this member take over? A member of the
    /// newest view it knows (any member before the first view), whose
    /// memory holds what it acknowledged (a restarted one once it caught
    /// up), not corrupt, not restoring a snapshot.
    pub fn pb_may_take_over(&self) -> bool {
        let member = self
            .pb
            .view
            .is_none_or(|v| v.members & (1 << self.me.0) != 0);
        // A restarted process lost what it acknowledged: DARE's catch-up
        // holds it back until its log holds that again (restart.rs). Every
        // entry committed while it was a member needed its acknowledgement,
        // and it is added back only once it holds every committed entry,
        // so once caught up it holds them all.
        member
            && self.known_new_process().is_some()
            && self.can_vote()
            && self.state_intact()
            && !self.copying()
            && !self.store_torn()
    }

    fn store_torn(&self) -> bool {
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::BackupTakeOverUncopied {
            return false;
        }
        self.pb.store_torn
    }

    /// Backup-memory mode: the members whose store copy is complete (the
    /// backup engine's [`crate::backup::engine::BackupEngine::synced_members`]).
    /// A member comes back into a view only once it is among them.
    pub fn set_copies_synced(&mut self, members: u64) {
        self.pb.copies_synced = members;
    }

    /// Backup-memory mode: the members of the view the backup engine must
    /// copy anew ([`crate::backup::engine::BackupEngine::members_to_drop`]):
    /// the primary asks for a view without them.
    pub fn set_copies_to_drop(&mut self, members: u64) {
        self.pb.copies_to_drop = members;
    }

    /// Backup-memory mode: whether this member's own store copy lacks
    /// what the group acknowledged (a restarted process's store before a
    /// copy filled it, or a copy into it under way): such a member may
    /// not take over ([`Node::pb_may_take_over`]). In this mode the log
    /// carries no operation, so the log's catch-up after a restart says
    /// nothing of the store.
    pub fn set_store_torn(&mut self, torn: bool) {
        self.pb.store_torn = torn;
    }

    /// Recomputes the view this member asks for (after every step).
    pub(super) fn pb_update_want(&mut self) {
        self.pb.update_due_ns = self.now.saturating_add(self.cfg.heartbeat_period_ns);
        let all = self.configuration.replicas();
        let members = self.pb.view.map_or(all, |v| MemberMask(v.members.into()));
        let ours = self
            .pb
            .view
            .filter(|v| v.leader == self.me && v.log_term == self.term);
        let leading_view = ours.filter(|_| self.role == Role::Leader);
        self.pb.want = if ours.is_some() && leading_view.is_none() {
            // Named primary, not leading yet: the lease on it is what we
            // wait for (the view engine renews it while we want it).
            ours.filter(|_| self.pb.takeover.is_some())
        } else if let Some(v) = leading_view {
            let want = self.pb_primary_members(members, all);
            self.pb.extra = self.pb.extra.or(want.minus(members));
            // A member asked for once is in the view asked for until a
            // view is decided: a proposal carrying it may still be decided,
            // and commits count it meanwhile (`extra`). Asked for with it,
            // a view gets decided and `extra` ends; if it is gone by then,
            // the next view drops it.
            Some(View {
                members: want.or(self.pb.extra).0 as u8,
                ..v
            })
        } else if self.pb.claim
            && self.role != Role::Leader
            && self.leader.is_none()
            && self.pb_may_take_over()
            && !self.pb_primary_still_followed(members)
        {
            let old_primary = self
                .pb
                .view
                .map_or(MemberMask::NONE, |v| MemberMask::NONE.with(v.leader));
            let down = self
                .others()
                .filter(|p| self.peers[p.index()].down)
                .fold(MemberMask::NONE, MemberMask::with);
            let want = members.minus(down).minus(old_primary).with(self.me);
            let term = self.term.max(self.pb.view.map_or(0, |v| v.log_term)) + 1;
            Some(View {
                leader: self.me,
                log_term: term,
                lease_ns: self.cfg.lease_ns,
                members: want.0 as u8,
            })
        } else {
            None
        };
    }

    /// The primary's members for the next view: those of `members` minus
    /// any reported dead, silent or holding commits back for
    /// `leader_quorum_timeout_ns`, plus any of the group (`all`) back that
    /// holds every committed entry. Tracks who holds commits back.
    fn pb_primary_members(&mut self, members: MemberMask, all: MemberMask) -> MemberMask {
        let silent_ns = self.cfg.leader_quorum_timeout_ns;
        let mut want = members;
        for p in self.others() {
            let i = p.index();
            let peer = &self.peers[i];
            // A member holds commits back while it does not replicate (a
            // zombie's memory answers, its CPU never grants), or while its
            // acknowledgements stand still below our tail.
            let moving = peer.repl.state == ReplState::Replicating
                && (peer.repl.acked_pos >= self.tail_pos
                    || peer.repl.acked_pos != self.pb.acked_seen[i]);
            self.pb.acked_seen[i] = peer.repl.acked_pos;
            if moving {
                self.pb.stalled_since[i] = None;
            } else if self.pb.stalled_since[i].is_none() {
                self.pb.stalled_since[i] = Some(self.now);
            }
            let stalled =
                self.pb.stalled_since[i].is_some_and(|t| self.now.saturating_sub(t) > silent_ns);
            let silent = self.now.saturating_sub(peer.last_ok_ns) > silent_ns;
            let backup_memory = self.cfg.mode == crate::config::Mode::BackupMemory;
            let to_copy = backup_memory && self.pb.copies_to_drop & (1 << p.0) != 0;
            if members.contains(p) {
                if peer.down || stalled || silent || to_copy {
                    want = want.without(p);
                }
            } else if !peer.down
                && all.contains(p)
                && !silent
                && self.pb.stalled_since[i].is_none()
                && self.now.saturating_sub(peer.row_changed_ns) <= self.cfg.prune_grace_ns
                && peer.repl.acked_pos >= self.commit_pos
                && (!backup_memory || (self.pb.copies_synced & (1 << p.0) != 0 && !to_copy))
            {
                // It holds every committed entry, answers (a silent member
                // added would be dropped at once, and added again: views
                // flapping), its acknowledgements move and its CPU runs
                // (its row changed lately: a zombie's
                // memory acknowledges WRITEs until its ring is full, and
                // would be added and dropped again and again). From now on
                // every commit waits for it too (`extra`), so it still
                // holds every committed entry when the view adding it is
                // decided.
                want = want.with(p);
            }
        }
        want
    }

    /// Whether the primary of the newest view, and the members whose rows
    /// say they still follow it in its term, are a majority of the view:
    /// then our suspicion alone does not depose it (DARE's voters refuse a
    /// candidate while they follow a live leader, and this is the same
    /// filter; a primary reported dead counts as followed by nobody).
    fn pb_primary_still_followed(&self, members: MemberMask) -> bool {
        let Some(v) = self.pb.view else {
            return false;
        };
        let old = v.leader;
        if self.peers[old.index()].down || old == self.me {
            return false;
        }
        let following = self
            .others()
            .filter(|&p| p != old && members.contains(p) && !self.peers[p.index()].down)
            .filter(|&p| {
                // A row its owner has not pushed for twice the keep-alive
                // (a live member pushes at least every quarter prune grace)
                // says nothing about today: a frozen member still claims
                // to follow the primary it froze under.
                let peer = &self.peers[p.index()];
                let fresh =
                    self.now.saturating_sub(peer.row_changed_ns) <= self.cfg.prune_grace_ns / 2;
                fresh && peer.row.leader == Some(old) && peer.row.term == v.log_term
            })
            .count();
        (following + 1) * 2 > members.count()
    }

    /// Whether the primary may execute operations ahead of their commit
    /// now (see the module docs).
    fn may_speculate(&self) -> bool {
        self.pb_mode()
            && self.role == Role::Leader
            && self.snapshot_enabled()
            && self.state_intact()
            && self.recovery.phase == super::recovery::RecoveryPhase::Idle
            && !self.corrupt
            && self.reads.is_empty()
            && !self.snapshot_wanted_of_us()
            // Past our own no-op: what a new primary's log holds beyond
            // its commit point came from an older one, and is executed
            // when it commits.
            && self.commit_pos >= self.noop_end_pos
    }

    /// Primary: executes the operations appended after what it executed
    /// so far, while their WRITEs are in flight, holding their replies
    /// until they commit (`apply_committed` gives them). Stops at any
    /// other kind of entry (applied once committed) and when the held
    /// replies would take every reply stage slot.
    pub(super) fn speculate(&mut self) {
        if !self.may_speculate() {
            return;
        }
        let max_payload = self.cfg.entry_payload_bytes_max;
        let cycling_stage_slots = self.layout.reply_stage_slots - 1;
        if self.spec_end.is_none() && self.apply_pos < self.commit_pos {
            // Committed entries not applied yet (a batch limit): those
            // first, the ordinary way.
            return;
        }
        // One held reply per operation executed ahead, from the apply point.
        let mut pos = self.spec_end.unwrap_or(self.apply_pos);
        let mut index = self.apply_index + self.held.len() as u64;
        while pos < self.tail_pos
            && !self.held.is_full()
            && self.replies_queued + (self.held.len() as u64) < cycling_stage_slots
            && EVENT_QUEUE_CAP - self.events.len() >= 1
        {
            let end = match self
                .ring
                .read_entry(&self.mem, pos, max_payload, &mut self.payload)
            {
                Ok((h, _, end))
                    if h.index == index
                        && end <= self.tail_pos
                        && h.kind == EntryKind::Operation =>
                {
                    #[allow(unused_mut)]
                    let mut r = self
                        .execute_operation(&h, true)
                        .expect("a staged reply for every operation executed");
                    #[cfg(feature = "mutation-testing")]
                    if self.cfg.mutation == crate::config::Mutation::ReplyOnSpeculation {
                        self.give_reply(r);
                        r.given = true;
                    }
                    self.held
                        .push_back(r)
                        .expect("checked: the held replies have room");
                    end
                }
                _ => break,
            };
            self.counters.operations_speculated += 1;
            pos = end;
            index += 1;
        }
        if pos > self.apply_pos {
            self.spec_end = Some(pos);
        }
    }

    /// This member stops leading with operations executed ahead of their
    /// commit: a newer primary may never commit them, so its state machine
    /// and session table no longer follow its log. It counts as lost (no
    /// apply, no take-over, no snapshot given) until a snapshot replaces
    /// it (recovery.rs); the held replies are never given (clients retry
    /// at the new primary).
    pub(super) fn roll_back_speculation(&mut self) {
        self.spec_end = None;
        self.held.clear();
        self.counters.speculation_rollbacks += 1;
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::KeepSpeculationWhenDeposed {
            return;
        }
        self.recovery.state_lost = true;
    }

    /// The commit candidate in primary-backup mode: the smallest position
    /// that every counted member holds (`None` while one of them does not
    /// replicate).
    pub(super) fn pb_commit_position(
        &self,
        acked_pos: impl Fn(MemberId) -> Option<u64>,
    ) -> Option<u64> {
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::PbCommitOnMajority {
            return self.counting_configuration().quorum_position(acked_pos, 0);
        }
        let counted = self.pb_commit_members().with(self.me);
        let mut min: Option<u64> = None;
        for m in counted.iter() {
            let p = acked_pos(m)?;
            min = Some(min.map_or(p, |x| x.min(p)));
        }
        min
    }
}
