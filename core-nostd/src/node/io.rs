//! Work requests, completions, row pushes and channel maintenance.

use super::*;
use crate::fabric::{Access, Op, RegionId, WcStatus, WorkRequest, WrId};
use crate::sst::{store_span, DARE_ROW};

/// Actions kept free for revokes and reconnects, which must never wait.
const ACTION_RESERVE: usize = 2 * MAX_MEMBERS + 8;

impl<M: Memory, S: StateMachine> Node<M, S> {
    /// True when `n` more work requests can be posted in this call.
    pub(super) fn can_post(&self, n: usize) -> bool {
        self.free_slots.len() >= n && ACTION_QUEUE_CAP - self.actions.len() >= n + ACTION_RESERVE
    }

    pub(super) fn emit(&mut self, a: Action) {
        if self.actions.push_back(a).is_err() {
            panic!("action queue overflow: the host must drain actions after every call");
        }
    }

    /// Posts a work request (the caller checked [`Node::can_post`]).
    pub(super) fn post(&mut self, peer: MemberId, op: Op, purpose: Purpose) {
        self.post_notify(peer, op, purpose, false);
    }

    /// Posts a work request that asks the target to wake up.
    pub(super) fn post_notify(&mut self, peer: MemberId, op: Op, purpose: Purpose, notify: bool) {
        let idx = self.free_slots.pop().expect("caller checked can_post");
        let slot = &mut self.slots[usize::from(idx)];
        assert!(!slot.busy, "free list holds a busy slot");
        // 24 bits of generation above 32 of index: the id stays inside the
        // engine's range (crate::engine::ENGINE_WR_ID_BITS).
        slot.generation = slot.generation.wrapping_add(1) & 0x00FF_FFFF;
        slot.busy = true;
        slot.peer = peer;
        slot.channel = op.channel();
        slot.purpose = purpose;
        let wr_id = WrId((u64::from(slot.generation) << 32) | u64::from(idx));
        self.peers[peer.index()].channels[op.channel().index()].inflight += 1;
        self.emit(Action::Post(WorkRequest {
            wr_id,
            peer,
            op,
            notify,
        }));
    }

    /// True when work requests may be posted on `channel` to `peer`.
    pub(super) fn channel_ok(&self, peer: MemberId, channel: Channel) -> bool {
        !self.peers[peer.index()].channels[channel.index()].broken
    }

    /// Revokes every peer's access to our log (DARE §3.2.1). Steps that
    /// need exclusive access wait until the host has executed these.
    pub(super) fn revoke_all(&mut self) {
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::SkipRevoke {
            self.granted_to = None;
            return;
        }
        for p in self.others() {
            self.emit(Action::SetAccess {
                peer: p,
                region: RegionId::Log,
                access: Access::Revoked,
            });
        }
        self.granted_to = None;
        self.revoke_pending = true;
    }

    /// Grants `leader` write access to our log. Grants replace, never add
    /// (DARE §3.2.1): the caller revoked every other peer first.
    pub(super) fn grant_log(&mut self, leader: MemberId) {
        assert!(
            self.granted_to.is_none_or(|g| g == leader) && !self.revoke_pending,
            "a grant must replace the previous one, after its revoke took effect"
        );
        self.emit(Action::SetAccess {
            peer: leader,
            region: RegionId::Log,
            access: Access::Granted,
        });
        self.granted_to = Some(leader);
    }

    pub(super) fn on_completion(&mut self, c: Completion) {
        let idx = (c.wr_id.0 & 0xFFFF_FFFF) as usize;
        let generation = (c.wr_id.0 >> 32) as u32;
        let valid = idx < INFLIGHT_CAP
            && self.slots[idx].busy
            && self.slots[idx].generation == generation
            && self.slots[idx].peer == c.peer;
        if !valid {
            // A duplicate, stale or forged completion: never trusted.
            self.counters.completions_unknown += 1;
            return;
        }
        let slot = self.slots[idx];
        self.slots[idx].busy = false;
        self.free_slots
            .push(idx as u16)
            .expect("a slot was just freed");
        let now = self.now;
        let backoff = self.cfg.reconnect_backoff_ns;
        let peer = &mut self.peers[slot.peer.index()];
        let ch = &mut peer.channels[slot.channel.index()];
        ch.inflight -= 1;
        let mut event = None;
        if c.status.is_ok() {
            ch.failures = 0;
            peer.last_ok_ns = now;
            if !peer.reachable {
                peer.reachable = true;
                event = Some(Event::PeerReachable { peer: slot.peer });
            }
        } else {
            if !ch.broken {
                ch.broken = true;
                ch.retry_at_ns = now + (backoff << ch.failures.min(6));
                ch.failures = ch.failures.saturating_add(1);
            }
            if c.status == WcStatus::Unreachable && peer.reachable {
                peer.reachable = false;
                event = Some(Event::PeerUnreachable { peer: slot.peer });
            }
        }
        if !c.status.is_ok() {
            self.counters.completion_errors += 1;
        }
        if let Some(e) = event {
            self.push_event(e);
        }
        let ok = c.status.is_ok();
        match slot.purpose {
            Purpose::RowPush { staging, version } => {
                self.staging_refs[usize::from(staging)] -= 1;
                if ok {
                    let p = &mut self.peers[slot.peer.index()];
                    p.acked_push = p.acked_push.max(version);
                }
            }
            Purpose::ReadRow { round } => self.on_read_row(slot.peer, round, ok),
            Purpose::ReadBackRow => self.on_read_back(slot.peer, ok),
            Purpose::ReadAdjustHeader { term } => self.on_adjust_header(slot.peer, term, c.status),
            Purpose::ReadAdjustList { term } => self.on_adjust_list(slot.peer, term, ok),
            Purpose::WriteAdjustTail { term, pos } => self.on_adjust_tail(slot.peer, term, pos, ok),
            Purpose::WriteEntries { term } => {
                if !ok {
                    self.on_log_error(slot.peer, term, c.status);
                }
            }
            Purpose::WriteTail { term, pos } => self.on_tail_ack(slot.peer, term, pos, c.status),
            Purpose::WriteCommit { term } => {
                if term == self.term {
                    self.peers[slot.peer.index()].repl.commit_inflight = false;
                }
                if !ok {
                    self.on_log_error(slot.peer, term, c.status);
                }
            }
            Purpose::ReadSnapshotHeader { generation } => self.on_snapshot_header(generation, ok),
            Purpose::ReadSnapshotChunk { generation, len } => {
                self.on_snapshot_chunk(generation, len, ok)
            }
        }
    }

    /// Re-establishes broken channels once drained and after the backoff.
    pub(super) fn maintain_channels(&mut self) {
        for p in self.others() {
            for channel in Channel::ALL {
                let ch = self.peers[p.index()].channels[channel.index()];
                if ch.broken && ch.inflight == 0 && ch.retry_at_ns <= self.now {
                    self.emit(Action::Reconnect { peer: p, channel });
                    self.peers[p.index()].channels[channel.index()].broken = false;
                    match channel {
                        // It missed pushes: send the current row again.
                        Channel::Control => self.row_dirty = true,
                        Channel::Log => self.on_log_reconnected(p),
                    }
                }
            }
        }
    }

    /// Pushes our row to every peer if it changed (Derecho §3.2: update the
    /// local copy, then one WRITE per peer). The pushed bytes come from an
    /// immutable staging copy, so a push in flight is never torn by a later
    /// update of the row.
    pub(super) fn flush_row(&mut self) {
        // A candidate's first push is its vote request (DARE §3.2.2), and a
        // voter's is its private vote (§3.2.3); both go out on the call
        // after the revokes took effect. Nothing is pushed in between.
        if !self.row_dirty
            || self.read_back.is_some()
            || matches!(self.duty, Duty::Campaign { .. } | Duty::VoteCheck { .. })
        {
            // (Nothing is published before our row is read back: a push
            // would replace, at our peers, the private vote we must find.)
            return;
        }
        let Some(slot) = self.staging_refs.iter().position(|&r| r == 0) else {
            return; // all staging copies in flight: retry on the next call
        };
        let targets = self
            .others()
            .filter(|&p| self.channel_ok(p, Channel::Control))
            .count();
        if !self.can_post(targets) {
            return;
        }
        self.row_version += 1;
        self.row.term = self.term;
        // Wake idle peers only for what elections wait on; heartbeats and
        // apply progress are read at the peers' own pace.
        let last = self.last_pushed_row;
        if self.row.term != last.term {
            self.term_push = self.row_version;
        }
        let notify = self.row.term != last.term
            || self.row.vote_request != last.vote_request
            || self.row.private_vote != last.private_vote
            || self.row.vote != last.vote
            || self.row.grant != last.grant
            || self.row.role != last.role
            || self.row.leader != last.leader;
        self.last_pushed_row = self.row;
        // The framework encodes and seals the row. DARE's row is a single
        // segment (the election reads its columns together), so every push
        // carries the whole row: its span is the row.
        let words = crate::sst::dare::widen(&self.row.encode(self.row_version));
        let span = DARE_ROW.whole_row();
        let own = self.layout.row(self.me);
        store_span(&self.mem, own, &words, span);
        let staging = self.layout.staging(slot);
        store_span(&self.mem, staging, &words, span);
        // Our own row in the table is the one peers now receive; what we
        // push must be what a reader accepts.
        let seen = self.sst.accept(self.me, &words);
        assert!(
            seen.changed() && seen.error.is_none(),
            "an own row the readers would refuse"
        );
        for p in self.others() {
            if self.channel_ok(p, Channel::Control) {
                self.post_notify(
                    p,
                    Op::Write {
                        local: staging.add(span.offset_bytes),
                        remote: own.add(span.offset_bytes),
                        len: span.len_bytes as u32,
                    },
                    Purpose::RowPush {
                        staging: slot as u8,
                        version: self.row_version,
                    },
                    notify,
                );
                self.staging_refs[slot] += 1;
            }
        }
        if self.row.private_vote != self.last_pushed_private {
            self.private_push = self.row_version;
            self.last_pushed_private = self.row.private_vote;
        }
        self.published_apply_index = self.row.apply_index;
        self.last_push_ns = self.now;
        self.row_dirty = false;
        self.counters.row_pushes += 1;
    }

    /// True once our current term is stored at a majority (us included),
    /// in the copies of our row that our peers hold. A member grants log
    /// access (and so acknowledges entries) only in a term made reliable
    /// this way, so that after a restart with empty memory it finds, in
    /// any P - q + 1 of those copies, every term it acknowledged entries
    /// in (restart.rs: it does not vote before its log holds them again).
    pub(super) fn term_reliable(&self) -> bool {
        if self.row_dirty && self.row.term != self.last_pushed_row.term {
            return false;
        }
        if self.term_push == 0 {
            return self.term == 0;
        }
        let acks = self
            .others()
            .filter(|p| self.peers[p.index()].acked_push >= self.term_push)
            .count();
        self.stored_at_majority_of_slots(acks)
    }

    /// True when our row, acknowledged by `acks` peers, is stored at a
    /// majority of every member slot (us included), whatever the group's
    /// configuration: a restarted member, which knows no configuration,
    /// reads its row back from P - q + 1 of its peers with P the slots
    /// (restart.rs), and only a majority of the slots meets every such
    /// set. Members outside the group store rows too, so a group that was
    /// shrunk still makes its votes reliable while most slots run.
    fn stored_at_majority_of_slots(&self, acks: usize) -> bool {
        acks + 1 > self.member_count / 2
    }

    /// True once some row of this process is stored at a majority of the
    /// member slots: from then on a restart of ours reads it back and
    /// knows it is one (restart.rs).
    pub(super) fn own_row_reliable(&self) -> bool {
        let acks = self
            .others()
            .filter(|p| self.peers[p.index()].acked_push > 0)
            .count();
        self.stored_at_majority_of_slots(acks)
    }

    /// True once our current private vote is stored at a majority (us
    /// included): DARE §3.2.3, raw replication of the vote.
    pub(super) fn private_vote_reliable(&self) -> bool {
        if self.row_dirty && self.row.private_vote != self.last_pushed_private {
            return false;
        }
        if self.private_push == 0 {
            return false;
        }
        let acks = self
            .others()
            .filter(|p| self.peers[p.index()].acked_push >= self.private_push)
            .count();
        self.stored_at_majority_of_slots(acks)
    }
}
