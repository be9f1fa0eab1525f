//! The leader: log adjustment and direct log update (DARE §3.3.1), commit,
//! pruning (§3.3.2), reads (§3.3) and client writes.

use super::*;
use crate::fabric::{Op, WcStatus};
use crate::layout::{ADJUST_HEADER_BYTES, ADJUST_ITEM_BYTES, ROW_BYTES};
use crate::log::{adjust_item, entry_bytes, verify_adjust_list, EntryHeader, EntryKind};
use crate::sessions::SessionCheck;
use crate::sst::dare::col;
use crate::sst::{Ballot, Heartbeat};

impl<M: Memory, S: StateMachine> Node<M, S> {
    pub(super) fn become_leader(&mut self) {
        if !self.pb_mode() {
            self.counters.elections_won += 1;
        }
        // Our head only moves on committed HEAD entries, which we may not
        // have applied yet; but the previous leader only overwrote ring
        // slots of positions we had applied (it checks our apply pointer),
        // so everything below `tail - ring` is applied here.
        let floor = self.tail_pos.saturating_sub(self.ring.ring_bytes());
        assert!(
            floor <= self.apply_pos,
            "ring holds unapplied entries beyond one lap"
        );
        self.head_pos = self.head_pos.max(floor);
        self.set_role(Role::Leader, Some(self.me));
        self.vl.claim = None;
        self.vl.own_claims_in_row = 0;
        for p in self.others() {
            let peer = &mut self.peers[p.index()];
            peer.repl = Repl {
                state: ReplState::AwaitGrant,
                ..Repl::IDLE
            };
            peer.last_ok_ns = self.now;
        }
        self.row.heartbeat = Heartbeat {
            term: self.term,
            counter: self.row.heartbeat.counter + 1,
        };
        self.row_dirty = true;
        self.read_round = None;
        self.log_full_reported = false;
        // A reconfiguration a predecessor left between phases (DARE §3.4):
        // if its latest CONFIG entry is applied here already, no apply
        // will start the next phase; the leader tick does.
        self.phase_pending = self.configuration.state != crate::membership::ConfigState::Stable
            && self.config_index < self.apply_index;
        // A new leader appends an entry of its own term so that every
        // earlier entry commits with it, and so that it learns its commit
        // point before serving reads (DARE §3.3).
        self.noop_end_pos = u64::MAX;
        self.try_append_noop();
        self.set_timer(
            Timer::Heartbeat,
            Some(self.now + self.cfg.heartbeat_period_ns),
        );
        self.set_timer(Timer::Prune, Some(self.now + self.cfg.prune_period_ns));
        self.set_timer(Timer::Election, None);
        self.set_timer(Timer::FdCheck, None);
    }

    fn try_append_noop(&mut self) {
        if self.noop_end_pos != u64::MAX {
            return;
        }
        if let Ok((_, end)) = self.append_entry(EntryKind::Noop, 0, 0, &[], true) {
            self.noop_end_pos = end;
        }
    }

    /// Leaves the leader role's state behind (reads, replication).
    pub(super) fn leader_cleanup(&mut self) {
        while let Some(r) = self.reads.pop_front() {
            self.push_event(Event::ReadAborted { token: r.token });
        }
        self.read_round = None;
        for p in self.others() {
            self.peers[p.index()].repl = Repl::IDLE;
        }
        self.noop_end_pos = 0;
        // What this leader was changing is finished by the next one; it
        // must not block this member's own changes if it leads again.
        self.reconfig = None;
        self.phase_pending = false;
        if self.row.recover_mask != 0 {
            self.row.recover_mask = 0;
            self.row_dirty = true;
        }
    }

    pub(super) fn step_down_same_term(&mut self) {
        self.leader_cleanup();
        self.counters.step_downs += 1;
        self.set_role(Role::Follower, None);
        self.set_timer(Timer::Heartbeat, None);
        self.set_timer(Timer::Prune, None);
        let t = self.random_election_timeout();
        self.set_timer(Timer::Election, Some(self.now + t));
    }

    /// A leader that has not heard from a majority for a while steps down,
    /// so that its clients look for the leader of the majority side.
    pub(super) fn check_quorum(&mut self) {
        let window = self.cfg.leader_quorum_timeout_ns;
        let now = self.now;
        let gap = core::mem::take(&mut self.longest_gap_ns);
        if gap >= window / 4 {
            // We were not running for a while (descheduled, stopped): the
            // silence is ours. Give the followers a fresh window to answer
            // the heartbeat we are about to push (in primary-backup mode,
            // before any is dropped from the view as silent or stalled).
            for p in self.others() {
                let peer = &mut self.peers[p.index()];
                peer.last_ok_ns = peer.last_ok_ns.max(now);
            }
            self.pb.stalled_since = [None; MAX_MEMBERS];
            return;
        }
        if self.pb_mode() {
            // A primary stays until a view replaces it (its lease deposes
            // it); it asks for a view without the members it lost instead.
            return;
        }
        let live = self
            .others()
            .filter(|p| now.saturating_sub(self.peers[p.index()].last_ok_ns) <= window)
            .fold(MemberMask::NONE, MemberMask::with);
        if !self.is_quorum(live, true) {
            self.step_down_same_term();
        }
    }

    /// Appends an entry to our own log. Operations keep one maximal entry
    /// of room free so that internal entries (no-op, HEAD) always fit.
    pub(super) fn append_entry(
        &mut self,
        kind: EntryKind,
        client_id: u64,
        request_id: u64,
        payload: &[u8],
        internal: bool,
    ) -> Result<(u64, u64), SubmitError> {
        assert_eq!(self.role, Role::Leader);
        let start = self.ring.place(self.tail_pos);
        let end = start + entry_bytes(payload.len() as u32);
        // Placement may skip up to one maximal entry at the ring's end, so
        // the room kept for internal entries is two maximal entries.
        let reserve = if internal {
            0
        } else {
            2 * self.layout.log.entry_bytes_max
        };
        // Never overwrite an entry that a live member has not applied:
        // positions below head are applied everywhere that matters.
        if end > self.head_pos + self.ring.ring_bytes() - reserve {
            return Err(SubmitError::LogFull);
        }
        let header = EntryHeader {
            index: self.tail_index,
            term: self.term,
            kind,
            payload_len: payload.len() as u32,
            client_id,
            request_id,
        };
        let (s, e) = self
            .ring
            .write_entry(&self.mem, self.tail_pos, &header, payload);
        // An invariant: the entry lands where the space was reserved.
        assert_eq!(
            (s, e),
            (start, end),
            "entry written elsewhere than reserved"
        );
        self.tail_pos = end;
        self.tail_index += 1;
        self.last_term = self.term;
        self.row.last_index = self.tail_index - 1;
        self.mem.store_u64(self.layout.log_tail(), self.tail_pos);
        self.counters.entries_appended += 1;
        Ok((start, end))
    }

    pub(super) fn leader_submit_write(
        &mut self,
        client_id: u64,
        request_id: u64,
        payload: &[u8],
    ) -> Result<Submitted, SubmitError> {
        if self.role != Role::Leader {
            return Err(SubmitError::NotLeader {
                leader: self.leader,
            });
        }
        if payload.len() > self.cfg.entry_payload_bytes_max as usize {
            return Err(SubmitError::TooLarge);
        }
        #[allow(unused_mut)]
        let mut check = self
            .sessions
            .check(&self.mem, &self.layout, client_id, request_id);
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::SkipSessionCheck {
            if let SessionCheck::Duplicate { .. } = check {
                check = SessionCheck::New;
            }
        }
        match check {
            // A primary's session may hold the reply of an operation it
            // executed ahead of its commit: that one is not given from
            // the table, the retry goes into the log and is answered once
            // committed, as a duplicate.
            SessionCheck::Duplicate { slot }
                if self.spec_end.is_none()
                    || self.sessions.last_index(&self.mem, &self.layout, slot)
                        < self.apply_index =>
            {
                self.counters.duplicates += 1;
                // The last stage slot is never used by apply: the reply
                // stays there until the host's next call.
                let stage = self.layout.reply_stage_slots - 1;
                self.stage_session_reply(stage, slot);
                return Ok(Submitted::Duplicate {
                    stage: stage as u32,
                });
            }
            SessionCheck::Stale => return Err(SubmitError::Stale),
            SessionCheck::New | SessionCheck::Duplicate { .. } => {}
        }
        let mut index = self.tail_index;
        let mut appended =
            self.append_entry(EntryKind::Operation, client_id, request_id, payload, false);
        if appended.is_err() && self.pruned_when_full_ns != Some(self.now) {
            // Full: prune now rather than at the next period (a fast
            // writer fills a small ring within one), once per instant. This
            // is also where a recovering member's hold gives way when it
            // is what fills the log.
            self.pruned_when_full_ns = Some(self.now);
            self.prune();
            index = self.tail_index;
            appended =
                self.append_entry(EntryKind::Operation, client_id, request_id, payload, false);
        }
        match appended {
            Ok(_) => {
                self.log_full_reported = false;
                Ok(Submitted::Appended { index })
            }
            Err(e) => {
                self.counters.log_full += 1;
                if !self.log_full_reported {
                    self.log_full_reported = true;
                    self.push_event(Event::LogFull);
                }
                Err(e)
            }
        }
    }

    pub(super) fn leader_submit_read(&mut self, token: u64) -> Result<(), SubmitError> {
        if self.role != Role::Leader {
            return Err(SubmitError::NotLeader {
                leader: self.leader,
            });
        }
        self.reads
            .push_back(PendingRead {
                token,
                round: self.next_read_round,
                read_index: None,
            })
            .map_err(|_| SubmitError::ReadQueueFull)
    }

    pub(super) fn leader_tick(&mut self) {
        self.try_append_noop();
        self.retry_pending_phase();
        self.tend_zombies();
        let me = Ballot::new(self.term, self.me);
        let replicas = self.configuration.replicas();
        for p in self.others() {
            // A member outside the group (removed, or a slot not in use)
            // is not taken on: no adjustment, no recovery. One we already
            // replicate to keeps receiving the log, so that it learns of
            // its removal (it then never stands for election) and is up
            // to date if it is added back; it does not count and does not
            // hold the log back from pruning.
            let member = replicas.contains(p);
            match self.peers[p.index()].repl.state {
                ReplState::AwaitGrant
                    if member
                        && self.peers[p.index()].row.grant == me
                        && self.channel_ok(p, Channel::Log)
                        && self.can_post(1) =>
                {
                    {
                        // (a) in Figure 6: read the not-committed list.
                        let first = self.layout.log.adjust_capacity.min(ADJUST_ITEMS_FIRST_READ);
                        let len = ADJUST_HEADER_BYTES + first * ADJUST_ITEM_BYTES;
                        self.post(
                            p,
                            Op::Read {
                                remote: self.layout.adjust_header(),
                                local: self.layout.adjust_landing(p),
                                len: len as u32,
                            },
                            Purpose::ReadAdjustHeader { term: self.term },
                        );
                        self.peers[p.index()].repl.state = ReplState::ReadHeader;
                    }
                }
                ReplState::Replicating if self.peers[p.index()].row.grant != me => {
                    // Its row no longer grants us its log: it revoked us,
                    // or it restarted with empty memory (a new process
                    // publishes no grant until it grants anew). Nothing we
                    // wrote there may be counted on any more; adjust afresh
                    // once it grants again (a new list, a new nonce). Its
                    // write channel may never have failed: an idle leader
                    // posts nothing that would.
                    let r = &mut self.peers[p.index()].repl;
                    r.state = ReplState::AwaitGrant;
                    r.verify = false;
                    r.was_replicating = false;
                    r.batches_inflight = 0;
                }
                ReplState::Replicating => self.send_entries(p),
                ReplState::NeedsRecovery if member => self.check_recovered(p),
                _ => {}
            }
        }
        self.compute_commit();
        self.send_commits();
        self.start_read_round();
    }

    fn repl_current(&self, p: MemberId, term: u64, state: ReplState) -> bool {
        self.role == Role::Leader && term == self.term && self.peers[p.index()].repl.state == state
    }

    pub(super) fn on_adjust_header(&mut self, p: MemberId, term: u64, status: WcStatus) {
        if !self.repl_current(p, term, ReplState::ReadHeader) {
            return;
        }
        if !status.is_ok() {
            // (A failed verifying read keeps what it was verifying: resume
            // or adjust afresh is decided by the list, once it can be read.)
            self.on_log_error(p, term, status);
            return;
        }
        let landing = self.layout.adjust_landing(p);
        let header = match crate::log::AdjustHeader::load(&self.mem, landing) {
            Some(h)
                if h.grant_term == self.term
                    && h.grant_leader == self.me
                    && h.count <= self.layout.log.adjust_capacity =>
            {
                h
            }
            _ => {
                // Not (yet) a list for us: read it again later.
                self.counters.entries_rejected += 1;
                self.peers[p.index()].repl.state = ReplState::AwaitGrant;
                return;
            }
        };
        let r = &mut self.peers[p.index()].repl;
        if core::mem::take(&mut r.verify) {
            if r.adjusted_nonce == Some(header.nonce) {
                // The list we adjusted from: the log is the one we wrote
                // to. Resume from what we know landed, never re-adjust
                // (its list is stale, and re-adjusting could remove
                // entries counted as committed).
                r.state = ReplState::Replicating;
                r.sent_pos = r.acked_pos;
                r.batches_inflight = 0;
                r.commit_sent_pos = 0;
                r.commit_inflight = false;
                return;
            }
            // A new grant (the follower restarted with empty memory, or
            // revoked and granted again): its list describes its log now.
            r.was_replicating = false;
        }
        let first = self.layout.log.adjust_capacity.min(ADJUST_ITEMS_FIRST_READ);
        if header.count > first {
            if !self.can_post(1) {
                self.peers[p.index()].repl.state = ReplState::AwaitGrant;
                return;
            }
            let offset = ADJUST_HEADER_BYTES + first * ADJUST_ITEM_BYTES;
            let len = (header.count - first) * ADJUST_ITEM_BYTES;
            self.post(
                p,
                Op::Read {
                    remote: self.layout.adjust_header().add(offset),
                    local: landing.add(offset),
                    len: len as u32,
                },
                Purpose::ReadAdjustList { term },
            );
            let r = &mut self.peers[p.index()].repl;
            r.header = Some(header);
            r.state = ReplState::ReadList;
        } else {
            self.process_adjust(p, header);
        }
    }

    pub(super) fn on_adjust_list(&mut self, p: MemberId, term: u64, ok: bool) {
        if !self.repl_current(p, term, ReplState::ReadList) {
            return;
        }
        if !ok {
            self.on_log_error(p, term, WcStatus::Flushed);
            return;
        }
        match self.peers[p.index()].repl.header {
            Some(h) => self.process_adjust(p, h),
            None => self.peers[p.index()].repl.state = ReplState::AwaitGrant,
        }
    }

    fn needs_recovery(&mut self, p: MemberId) {
        let peer = &mut self.peers[p.index()];
        peer.repl.state = ReplState::NeedsRecovery;
        peer.repl.recover_gen = peer.row.snapshot_request.generation;
        // Tell it (DARE §3.4): it fetches a snapshot from a follower. One
        // that restored and granted us its log is told its restore came
        // too late (we, or a leader before us, pruned past it), so it goes
        // again at once (see `check_recovered`).
        self.row.recover_mask |= Row::recover_bit(p);
        let req = peer.row.snapshot_request;
        if req.from.is_none() && req.generation > 0 {
            self.row.recover_mask |= Row::outrun_bit(p);
        }
        self.row_dirty = true;
        self.push_event(Event::PeerNeedsRecovery { peer: p });
    }

    /// A member marked for recovery that restored a snapshot (its request
    /// answered: a newer generation, no donor), whose log starts at or
    /// after our head, and that granted us its log again, is adjusted and
    /// replicated like any follower.
    ///
    /// One restored behind our head (we released its hold on the log
    /// during its transfer) is told so in our row (`Row::outrun_bit`), so
    /// that it recovers again at once; the bit goes when it asks again.
    fn check_recovered(&mut self, p: MemberId) {
        let me = Ballot::new(self.term, self.me);
        let peer = &self.peers[p.index()];
        let req = peer.row.snapshot_request;
        let outrun = Row::outrun_bit(p);
        if req.from.is_some() {
            if self.row.recover_mask & outrun != 0 {
                self.row.recover_mask &= !outrun;
                self.row_dirty = true;
            }
            return;
        }
        if req.generation <= peer.repl.recover_gen || peer.row.grant != me {
            return;
        }
        if peer.row.apply_pos >= self.head_pos && peer.row.apply_pos <= self.tail_pos {
            self.peers[p.index()].repl = Repl::IDLE;
            self.peers[p.index()].repl.state = ReplState::AwaitGrant;
            self.row.recover_mask &= !(Row::recover_bit(p) | outrun);
        } else {
            // Its answered request no longer holds the log either.
            self.peers[p.index()].repl.recover_gen = req.generation;
            self.row.recover_mask |= outrun;
        }
        self.row_dirty = true;
    }

    /// Log adjustment (DARE §3.3.1): the remote tail goes to the first
    /// entry that does not match ours, never below the remote commit.
    fn process_adjust(&mut self, p: MemberId, h: crate::log::AdjustHeader) {
        let items = self.layout.adjust_landing(p).add(ADJUST_HEADER_BYTES);
        if !verify_adjust_list(&self.mem, &h, items) {
            self.counters.entries_rejected += 1;
            self.peers[p.index()].repl.state = ReplState::AwaitGrant;
            return;
        }
        // Its committed prefix must still be in our ring and agree with it.
        if h.commit_pos < self.head_pos || h.commit_pos > self.tail_pos || h.tail_pos < h.commit_pos
        {
            self.needs_recovery(p);
            return;
        }
        let mut pos = h.commit_pos;
        let own_index_at_commit = if pos == self.tail_pos {
            Some(self.tail_index)
        } else {
            self.ring
                .header_at(&self.mem, pos)
                .ok()
                .map(|(oh, _, _)| oh.index)
        };
        if own_index_at_commit != Some(h.commit_index) {
            self.needs_recovery(p);
            return;
        }
        for k in 0..h.count {
            if pos >= self.tail_pos {
                break;
            }
            let Ok((own, _, end)) = self.ring.header_at(&self.mem, pos) else {
                break;
            };
            let (index, term) = adjust_item(&self.mem, items, k);
            if index != own.index || term != own.term {
                break;
            }
            pos = end;
        }
        if !self.can_post(1) {
            self.peers[p.index()].repl.state = ReplState::AwaitGrant;
            return;
        }
        // (b) in Figure 6.
        self.post(
            p,
            Op::write_u64(self.layout.log_tail(), pos),
            Purpose::WriteAdjustTail {
                term: self.term,
                pos,
            },
        );
        let r = &mut self.peers[p.index()].repl;
        r.state = ReplState::Adjusting;
        r.adjusted_pos = pos;
        r.adjusted_nonce = Some(h.nonce);
        self.counters.adjustments += 1;
    }

    pub(super) fn on_adjust_tail(&mut self, p: MemberId, term: u64, pos: u64, ok: bool) {
        if !self.repl_current(p, term, ReplState::Adjusting) {
            return;
        }
        if !ok {
            self.on_log_error(p, term, WcStatus::Flushed);
            return;
        }
        let r = &mut self.peers[p.index()].repl;
        r.state = ReplState::Replicating;
        r.sent_pos = pos;
        r.acked_pos = pos;
        r.commit_sent_pos = 0;
        r.commit_inflight = false;
    }

    pub(super) fn on_tail_ack(&mut self, p: MemberId, term: u64, pos: u64, status: WcStatus) {
        if term != self.term || self.role != Role::Leader {
            return;
        }
        let r = &mut self.peers[p.index()].repl;
        r.batches_inflight = r.batches_inflight.saturating_sub(1);
        if status.is_ok() {
            if matches!(r.state, ReplState::Replicating | ReplState::Broken) {
                r.acked_pos = r.acked_pos.max(pos);
            }
        } else {
            self.on_log_error(p, term, status);
        }
    }

    pub(super) fn on_log_error(&mut self, p: MemberId, term: u64, status: WcStatus) {
        if term != self.term || self.role != Role::Leader {
            return;
        }
        let r = &mut self.peers[p.index()].repl;
        if r.state != ReplState::Broken && r.state != ReplState::NeedsRecovery {
            // After an error we resume from what we know landed, never
            // re-adjust a log we already wrote to: its list is stale and
            // re-adjusting could remove entries counted as committed. (A
            // verifying read that fails keeps it that way.)
            r.was_replicating =
                (r.state == ReplState::Replicating || r.verify) && status != WcStatus::AccessDenied;
            r.verify = false;
            r.state = ReplState::Broken;
        }
    }

    pub(super) fn on_log_reconnected(&mut self, p: MemberId) {
        if self.role != Role::Leader {
            return;
        }
        let granted = self.peers[p.index()].row.grant == Ballot::new(self.term, self.me);
        let r = &mut self.peers[p.index()].repl;
        if r.state != ReplState::Broken {
            return;
        }
        // Read its list header first: resume only if it is still the one
        // we adjusted from (on_adjust_header). A follower that restarted
        // with empty memory, or granted anew, has a new one, and its log
        // is adjusted afresh instead of written at positions it lacks.
        r.verify = r.was_replicating && granted;
        r.batches_inflight = 0;
        r.state = ReplState::AwaitGrant;
    }

    /// Direct log update (DARE §3.3.1, (c) and (d) of Figure 6): write
    /// every entry between the remote and the local tail, then the tail.
    fn send_entries(&mut self, p: MemberId) {
        let r = self.peers[p.index()].repl;
        if r.sent_pos < self.head_pos {
            // The entries it needs were pruned while it was not heard from
            // (a pause or a cut return path longer than the prune grace):
            // only state transfer can bring it back. Say so, and stop
            // holding the log for it (issue 12 items 4 and 5).
            self.needs_recovery(p);
            return;
        }
        if r.sent_pos >= self.tail_pos
            || r.batches_inflight >= LOG_BATCHES_INFLIGHT_MAX
            || !self.channel_ok(p, Channel::Log)
        {
            return;
        }
        let end = self.batch_end(r.sent_pos);
        // Never overwrite entries the follower has not applied yet (its
        // apply pointer as last published): it is lagging, wait.
        #[allow(unused_mut)]
        let mut guard = true;
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::DropOverwriteGuard {
            guard = false;
        }
        if guard && self.peers[p.index()].row.apply_pos + self.ring.ring_bytes() < end {
            return;
        }
        let spans = self.ring.spans(r.sent_pos, end);
        let needed = 1 + spans.iter().filter(|s| s.1 > 0).count() + 1;
        if !self.can_post(needed) {
            return;
        }
        for (addr, len) in spans {
            if len > 0 {
                self.post(
                    p,
                    Op::Write {
                        local: addr,
                        remote: addr,
                        len: len as u32,
                    },
                    Purpose::WriteEntries { term: self.term },
                );
            }
        }
        self.post(
            p,
            Op::write_u64(self.layout.log_tail(), end),
            Purpose::WriteTail {
                term: self.term,
                pos: end,
            },
        );
        let r = &mut self.peers[p.index()].repl;
        r.sent_pos = end;
        r.batches_inflight += 1;
        self.counters.log_batches += 1;
        self.send_commit(p);
    }

    /// Where a batch from `from` ends: after whole entries, once
    /// `log_batch_bytes_max` is reached (at least one entry), or at our
    /// tail. Our own log, which nobody else writes while we lead: a
    /// header that does not read back is a bug, and the batch then runs
    /// to the tail as before.
    fn batch_end(&self, from: u64) -> u64 {
        let cap = self.cfg.log_batch_bytes_max;
        if self.tail_pos - from <= cap {
            return self.tail_pos;
        }
        let mut pos = from;
        // Bounded: every entry moves `pos` on, and the cap is reached
        // after at most cap / (the smallest entry) of them.
        while pos < self.tail_pos && pos - from < cap {
            match self.ring.header_at(&self.mem, pos) {
                Ok((_, _, end)) if end > pos && end <= self.tail_pos => pos = end,
                _ => return self.tail_pos,
            }
        }
        pos
    }

    /// (e) of Figure 6: the remote commit pointer, lazily (nobody waits).
    /// Never beyond what this follower acknowledged: a commit pointer
    /// visible before the entries below it would make the follower apply
    /// the stale (but valid) entries still in its ring there (issue 12
    /// item 3; the simulator's `reordering` shows it).
    fn send_commit(&mut self, p: MemberId) {
        let r = self.peers[p.index()].repl;
        #[allow(unused_mut)]
        let mut acked = r.acked_pos;
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::CommitPointerBeyondAck {
            acked = r.sent_pos;
        }
        let target = self.commit_pos.min(acked);
        if r.state != ReplState::Replicating
            || target <= r.commit_sent_pos
            || r.commit_inflight
            || !self.channel_ok(p, Channel::Log)
            || !self.can_post(1)
        {
            return;
        }
        self.post(
            p,
            Op::write_u64(self.layout.log_commit(), target),
            Purpose::WriteCommit { term: self.term },
        );
        let r = &mut self.peers[p.index()].repl;
        r.commit_sent_pos = target;
        r.commit_inflight = true;
    }

    fn send_commits(&mut self) {
        for p in self.others() {
            self.send_commit(p);
        }
    }

    /// Commit = the minimum tail among a majority, us included (DARE
    /// §3.3.1), and never before the no-op of our own term.
    fn compute_commit(&mut self) {
        // Nothing of ours is uncommitted: no follower holds more than we
        // do (we wrote everything it holds), so no quorum can either. The
        // common case of a read-only load, and the quorum count below is
        // a measurable share of the busy loop.
        if self.tail_pos <= self.commit_pos {
            return;
        }
        if !self.commit_cleared(self.term) {
            // Views on, and ours is not active yet: an older view's
            // leader may still answer reads under its lease.
            if self.commit_wait_counted_term != self.term {
                self.commit_wait_counted_term = self.term;
                self.counters.commits_awaiting_view += 1;
            }
            return;
        }
        // What a majority of every group holds: our tail, and what each
        // follower that replicates (or did until its channel broke, or is
        // being verified) acknowledged.
        let acked_pos = |p: MemberId| {
            if p == self.me {
                return Some(self.tail_pos);
            }
            let r = &self.peers[p.index()].repl;
            (r.state == ReplState::Replicating
                || (r.state == ReplState::Broken && r.was_replicating)
                || r.verify)
                .then_some(r.acked_pos)
        };
        #[allow(unused_mut)]
        let mut minority_of = 0;
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::CommitOnMinority {
            minority_of = 1;
        }
        let candidate = if self.pb_mode() {
            self.pb_commit_position(acked_pos)
        } else {
            self.counting_configuration()
                .quorum_position(acked_pos, minority_of)
        };
        let Some(candidate) = candidate else {
            return;
        };
        // Entries of earlier terms commit only with the no-op of ours: a
        // majority holding one of them does not stop a later leader
        // without it from being elected (Raft §5.4.2, Figure 8).
        #[allow(unused_mut)]
        let mut floor = self.noop_end_pos;
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::CommitBeforeOwnNoop {
            floor = 0;
        }
        if candidate <= self.commit_pos || candidate < floor {
            return;
        }
        let mut pos = self.commit_pos;
        let mut index = self.commit_index;
        while pos < candidate {
            let (h, _, end) = self
                .ring
                .header_at(&self.mem, pos)
                .expect("the leader's own log below its tail is valid");
            assert_eq!(h.index, index, "leader log indices are consecutive");
            index += 1;
            pos = end;
        }
        assert_eq!(pos, candidate, "commit lands on an entry boundary");
        self.commit_pos = candidate;
        self.commit_index = index;
        self.row.commit_index = index;
        self.mem.store_u64(self.layout.log_commit(), candidate);
    }

    fn recovery_hold_percent(&self) -> u8 {
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::HoldLogForRecoveryUntilFull {
            return 100;
        }
        self.cfg.recovery_log_hold_percent
    }

    /// Log pruning (DARE §3.3.2): the head moves to the smallest apply
    /// pointer among members heard from recently, announced by a HEAD
    /// entry so that later leaders know it.
    pub(super) fn prune(&mut self) {
        // Members silent for the grace period, known dead (the host saw
        // their process exit), or already past saving (they need state
        // transfer) do not hold the log back. A member that is merely
        // unreachable for a moment (a partition) does: pruning past it
        // would turn a transient fault into a lost replica.
        let ring = self.ring.ring_bytes();
        // A recovering member holds the log only while it fills at most
        // `recovery_log_hold_percent` of the room clients' writes may use
        // (`append_entry` keeps two maximal entries for internal ones):
        // past that, one member's transfer would make every client wait.
        // It recovers again later, from a newer snapshot.
        let hold_percent = self.recovery_hold_percent();
        let held_bytes = self.tail_pos - self.head_pos;
        let usable = ring.saturating_sub(2 * self.layout.log.entry_bytes_max);
        let past_hold = hold_percent < 100
            && u128::from(held_bytes) * 100 > u128::from(usable) * u128::from(hold_percent);
        let mut holders = MemberMask::NONE;
        let mut recovering_holders = MemberMask::NONE;
        // Members that can acknowledge now (us, and those heard from that
        // need no recovery).
        let mut healthy = MemberMask::NONE.with(self.me);
        let replicas = self.configuration.replicas();
        for p in self.others().filter(|&p| replicas.contains(p)) {
            let peer = &self.peers[p.index()];
            // A member that needs recovery holds the log only while it
            // fetches a snapshot (its row then shows the snapshot's apply
            // point): the entries after it must still be here when it is
            // restored.
            // So does one that restored its snapshot (its request
            // answered) until we adjust its log: pruning in between marked
            // it again, and it recovered over and over (found by
            // `verbatim-bench recovery` with a full log).
            // A member that asks for a snapshot recovers whoever marked it:
            // a leader elected during its transfer never adjusted it (its
            // grant is withdrawn), so never marked it itself (found by
            // `verbatim-bench recovery` with a 256 MiB ring: the new leader
            // held the log for it as for any follower until full).
            let req = peer.row.snapshot_request;
            let needs_recovery = peer.repl.state == ReplState::NeedsRecovery;
            let recovering =
                req.from.is_some() || (needs_recovery && req.generation > peer.repl.recover_gen);
            if !peer.down
                && (!needs_recovery || recovering)
                && self.now.saturating_sub(peer.row_changed_ns) <= self.cfg.prune_grace_ns
            {
                holders = holders.with(p);
                if !recovering {
                    healthy = healthy.with(p);
                } else if peer.repl.hold_releases < self.cfg.recovery_releases_max {
                    recovering_holders = recovering_holders.with(p);
                }
            }
        }
        // Releasing buys availability only when the others commit without
        // the recovering members: when one is needed for a majority, the
        // writes taken would not commit before it is back anyway, and
        // releasing it would only send it round again (found by the
        // swarm, seed 641770780: 3 members, one down, one recovering).
        let release_recovering = past_hold && self.configuration.is_quorum(healthy);
        if release_recovering {
            for p in recovering_holders.iter() {
                holders = holders.without(p);
            }
        }
        // The table's reducer skips members whose row it never accepted.
        let min = self
            .sst
            .min(&col::APPLY_POS, 0, holders)
            .map_or(self.apply_pos, |m| m.min(self.apply_pos));
        if min <= self.head_pos {
            return;
        }
        if min - self.head_pos < ring / 8 && self.tail_pos - self.head_pos < ring / 2 {
            return; // not worth an entry yet
        }
        if release_recovering {
            // Members whose snapshot's entries this prune gives up: they
            // will be marked again once restored (the operator hears of
            // it: a ring too small for the write rate during a transfer
            // never lets a large state recover).
            for p in recovering_holders.iter() {
                let at = self.peers[p.index()].row.apply_pos;
                if at >= self.head_pos && at < min {
                    self.peers[p.index()].repl.hold_releases += 1;
                    self.counters.recovery_holds_released += 1;
                    self.push_event(Event::RecoveryHoldReleased {
                        peer: p,
                        held_bytes,
                    });
                }
            }
        }
        // Advance our own head first, then announce it (DARE §3.3.2): a
        // full ring must be able to make room for the HEAD entry itself.
        self.head_pos = min;
        self.counters.prunes += 1;
        // If even that fails, followers learn the head from a later one.
        let _ = self.append_entry(EntryKind::Head, 0, 0, &min.to_le_bytes(), true);
    }

    fn start_read_round(&mut self) {
        if self.read_round.is_some()
            || self.commit_pos < self.noop_end_pos
            || !self.reads.iter().any(|r| r.read_index.is_none())
        {
            return;
        }
        let id = self.next_read_round;
        if self.read_lease_term == self.term && self.now < self.read_lease_end_ns {
            // Leased: no newer leader can have committed anything (it
            // waits for its own view, which waits out our lease).
            self.next_read_round += 1;
            for r in self.reads.iter_mut() {
                if r.read_index.is_none() {
                    r.read_index = Some(self.commit_index);
                    self.counters.lease_reads += 1;
                }
            }
            return;
        }
        if self.pb_mode() {
            // Under the lease only: a new primary needs no majority of the
            // members to know its term, so a round proves nothing.
            return;
        }
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::ReadWithoutTermCheck {
            self.next_read_round += 1;
            self.confirm_round(ReadRound {
                id,
                commit_index: self.commit_index,
                oks: 0,
                outstanding: 0,
            });
            return;
        }
        let targets = self
            .others()
            .filter(|&p| self.channel_ok(p, Channel::Control))
            .fold(MemberMask::NONE, MemberMask::with);
        // A round that cannot reach a majority would wait for completions
        // that never come: wait for channels to be re-established instead.
        if !self.is_quorum(targets, true) || !self.can_post(targets.count()) {
            return;
        }
        self.next_read_round += 1;
        // Read the term of the other members (DARE §3.3 "read requests"):
        // if none is higher than ours, no newer leader existed when the
        // reads began.
        for p in self.others() {
            if self.channel_ok(p, Channel::Control) {
                self.post(
                    p,
                    Op::Read {
                        remote: self.layout.row(p),
                        local: self.layout.row_landing(p),
                        len: ROW_BYTES as u32,
                    },
                    Purpose::ReadRow { round: id },
                );
            }
        }
        let round = ReadRound {
            id,
            commit_index: self.commit_index,
            oks: 0,
            outstanding: targets.count() as u32,
        };
        if self.is_quorum(MemberMask::NONE, true) {
            self.confirm_round(round);
        } else {
            self.read_round = Some(round);
        }
    }

    fn confirm_round(&mut self, round: ReadRound) {
        for r in self.reads.iter_mut() {
            if r.read_index.is_none() && r.round <= round.id {
                r.read_index = Some(round.commit_index);
            }
        }
        self.read_round = None;
        self.counters.read_rounds += 1;
    }

    pub(super) fn on_read_row(&mut self, p: MemberId, round: u64, ok: bool) {
        let Some(mut rr) = self.read_round else {
            return;
        };
        if rr.id != round || self.role != Role::Leader {
            return;
        }
        rr.outstanding -= 1;
        if ok {
            match Row::read_term(&self.mem, self.layout.row_landing(p)) {
                Ok(term) if term > self.term => {
                    self.advance_term(term);
                    return;
                }
                Ok(_) => rr.oks |= 1 << p.0,
                Err(_) => self.counters.rows_rejected += 1,
            }
        }
        if self.is_quorum(MemberMask(rr.oks), true) {
            self.confirm_round(rr);
        } else if rr.outstanding == 0 {
            // Not enough confirmations: those reads need a new round.
            let next = self.next_read_round;
            for r in self.reads.iter_mut() {
                if r.read_index.is_none() && r.round <= rr.id {
                    r.round = next;
                }
            }
            self.read_round = None;
        } else {
            self.read_round = Some(rr);
        }
    }

    /// Emits the reads whose round is confirmed and whose index is applied.
    pub(super) fn serve_reads(&mut self) {
        while let Some(front) = self.reads.front() {
            // Never from operations executed ahead of their commit.
            let ready = self.spec_end.is_none()
                && front.read_index.is_some_and(|ri| self.apply_index >= ri);
            if !ready || self.events.len() >= EVENT_QUEUE_CAP {
                break;
            }
            let token = front.token;
            self.reads.pop_front();
            self.counters.reads_served += 1;
            self.push_event(Event::ReadReady { token });
        }
    }
}
