//! Walking and applying the log (DARE §3.1.1, §3.3.2), and preparing the
//! adjustment list before granting log access (§3.3.1).

use super::*;
use crate::log::{AdjustHeader, EntryKind};
use crate::sessions::SessionCheck;

/// What a walk of our own log from the apply pointer to the tail found.
#[derive(Clone, Copy, Debug)]
pub(super) struct Walk {
    /// Index of the entry at the commit position.
    pub commit_index: u64,
    /// End of the last valid entry (the tail).
    pub tail_pos: u64,
    /// Index after the last valid entry.
    pub tail_index: u64,
    /// Term of the last valid entry (0 for an empty log).
    pub last_term: u64,
    /// Not-committed entries written as (index, term) items.
    pub items: u64,
}

impl<M: Memory, S: StateMachine> Node<M, S> {
    /// Follower: learn the commit point the leader wrote into our log.
    pub(super) fn follower_observe_log(&mut self) {
        let commit = self.mem.load_u64(self.layout.log_commit());
        let tail = self.mem.load_u64(self.layout.log_tail());
        // Both words are written by the leader; entries below them landed
        // first (same channel). Apply validates every entry anyway.
        let c = commit.min(tail);
        if c > self.commit_pos {
            self.commit_pos = c;
        }
    }

    /// Applies committed entries in order, a bounded number per call.
    pub(super) fn apply_committed(&mut self) {
        let mut applied = 0u32;
        let max_payload = self.cfg.entry_payload_bytes_max;
        let cycling_stage_slots = self.layout.reply_stage_slots - 1;
        loop {
            // An operation executed ahead holds its reply's stage slot
            // already; any other needs a free one.
            let stage_free = self.spec_end.is_some_and(|e| self.apply_pos < e)
                || self.replies_queued + (self.held.len() as u64) < cycling_stage_slots;
            if !(self.apply_pos < self.commit_pos
                && applied < self.cfg.apply_batch_max
                && EVENT_QUEUE_CAP - self.events.len() >= 2
                && stage_free)
            {
                break;
            }
            let result =
                self.ring
                    .read_entry(&self.mem, self.apply_pos, max_payload, &mut self.payload);
            let (h, _start, end) = match result {
                Ok((h, s, e)) if h.index == self.apply_index && e <= self.commit_pos => (h, s, e),
                _ => {
                    self.entry_not_valid_yet();
                    break;
                }
            };
            if self.bad_entry_since_ns.take().is_some() && self.corrupt {
                // What looked corrupt had not fully arrived: go on.
                self.corrupt = false;
            }
            let is_leader = self.role == Role::Leader;
            let executed_ahead = self.spec_end.is_some_and(|e| self.apply_pos < e);
            match h.kind {
                EntryKind::Operation if executed_ahead => {
                    // Executed ahead of its commit (`speculate`): now it
                    // counts, and its reply goes out.
                    let r = self
                        .held
                        .pop_front()
                        .expect("a held reply per operation executed ahead");
                    assert_eq!(r.index, h.index, "held replies in log order");
                    if !r.given {
                        self.give_reply(r);
                    }
                }
                EntryKind::Operation => {
                    if let Some(r) = self.execute_operation(&h, is_leader) {
                        self.give_reply(r);
                    }
                }
                _ if executed_ahead => {
                    unreachable!("only operations are executed ahead of their commit")
                }
                EntryKind::Head => {
                    // Followers move their head only on a committed HEAD
                    // entry (DARE §3.3.2).
                    if h.payload_len == 8 {
                        let new_head = u64::from_le_bytes(self.payload[..8].try_into().unwrap());
                        self.head_pos = self.head_pos.max(new_head.min(end));
                    }
                }
                EntryKind::Config => {
                    // Validated with the entry; a CONFIG entry that does not
                    // decode is no configuration (a bug of the writer).
                    let c = (h.payload_len as usize == crate::membership::CONFIGURATION_BYTES)
                        .then(|| {
                            crate::membership::Configuration::decode(
                                &self.payload[..crate::membership::CONFIGURATION_BYTES],
                                self.member_count as u8,
                            )
                            .ok()
                        })
                        .flatten();
                    if let Some(c) = c {
                        self.applied_config_index = h.index;
                        self.on_config_applied(c, h.index);
                    }
                }
                EntryKind::Noop => {}
            }
            self.apply_pos = end;
            self.apply_index += 1;
            self.last_applied_term = h.term;
            self.counters.entries_applied += 1;
            applied += 1;
            if self.spec_end == Some(self.apply_pos) {
                self.spec_end = None;
            }
        }
        let (pos, index) = self.published_apply_point();
        self.row.apply_pos = pos;
        self.row.apply_index = index;
        if self.role != Role::Leader && self.apply_pos == self.commit_pos {
            self.commit_index = self.apply_index;
            self.row.commit_index = self.apply_index;
        }
    }

    /// Executes one client operation against the state machine and the
    /// session table (a duplicate is answered from its session, a stale
    /// one with nothing); `stage` puts its reply in the next stage slot
    /// and returns it, to give now or once committed.
    pub(super) fn execute_operation(
        &mut self,
        h: &crate::log::EntryHeader,
        stage: bool,
    ) -> Option<pb::HeldReply> {
        let reply_max = self.layout.reply_bytes_max as usize;
        let cycling_stage_slots = self.layout.reply_stage_slots - 1;
        #[allow(unused_mut)]
        let mut check = self
            .sessions
            .check(&self.mem, &self.layout, h.client_id, h.request_id);
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::SkipSessionCheck {
            if let SessionCheck::Duplicate { .. } = check {
                check = SessionCheck::New;
            }
        }
        let at = self.reply_stage_next;
        let stale = match check {
            SessionCheck::New => {
                let payload = &self.payload[..h.payload_len as usize];
                let n = self.sm.apply(h, payload, &mut self.reply_buf[..reply_max]);
                // A service that reports more than it was given is a bug
                // in our own code, not outside input.
                assert!(n <= reply_max, "reply longer than reply_bytes_max");
                let reply = &self.reply_buf[..n];
                self.sessions.record(
                    &self.mem,
                    &self.layout,
                    h.client_id,
                    h.request_id,
                    h.index,
                    reply,
                );
                if stage {
                    self.stage_reply(at, reply);
                }
                self.counters.operations_applied += 1;
                false
            }
            SessionCheck::Duplicate { slot } => {
                self.counters.duplicates += 1;
                if stage {
                    self.stage_session_reply(at, slot);
                }
                false
            }
            SessionCheck::Stale => {
                if stage {
                    self.stage_reply(at, &[]);
                }
                true
            }
        };
        if !stage {
            return None;
        }
        self.reply_stage_next = (at + 1) % cycling_stage_slots;
        Some(pb::HeldReply {
            index: h.index,
            client_id: h.client_id,
            request_id: h.request_id,
            stage: at as u32,
            stale,
            given: false,
        })
    }

    /// Gives a staged reply to the host.
    pub(super) fn give_reply(&mut self, r: pb::HeldReply) {
        self.push_event(Event::Reply {
            client_id: r.client_id,
            request_id: r.request_id,
            index: r.index,
            stage: r.stage,
            stale: r.stale,
        });
    }

    /// The entry at the apply pointer, below the commit pointer, fails
    /// validation. Its bytes may not have arrived yet: a WRITE's placement
    /// is not ordered with a later WRITE of the pointers on every fabric
    /// (issue 12 item 3). It is re-checked on every call and never applied
    /// while invalid; only if it stays invalid for `leader_quorum_timeout_ns`
    /// is the log reported corrupt (this member then neither applies nor
    /// votes), and even then a later valid copy (a new leader rewriting it)
    /// clears the state.
    fn entry_not_valid_yet(&mut self) {
        self.counters.entries_rejected += 1;
        let since = *self.bad_entry_since_ns.get_or_insert(self.now);
        if !self.corrupt && self.now.saturating_sub(since) >= self.cfg.leader_quorum_timeout_ns {
            self.corrupt = true;
            self.push_event(Event::LogCorrupt {
                pos: self.apply_pos,
            });
        }
    }

    /// Walks our log from the apply pointer to the tail, validating every
    /// entry and writing the (index, term) of the not-committed ones into
    /// the adjustment list. Needs exclusive access (revokes executed).
    /// Bounded: the ring holds at most `adjust_capacity` entries.
    pub(super) fn walk_log(&mut self) -> Option<Walk> {
        let commit = self.commit_pos;
        let tail_word = self.mem.load_u64(self.layout.log_tail());
        let limit = tail_word.max(commit);
        let items_at = self
            .layout
            .adjust_header()
            .add(crate::layout::ADJUST_HEADER_BYTES);
        let max_payload = self.cfg.entry_payload_bytes_max;
        let mut pos = self.apply_pos;
        let mut index = self.apply_index;
        let mut last_term = self.last_applied_term;
        let mut commit_index = None;
        let mut items = 0u64;
        // The latest configuration in the log, committed or not (DARE
        // §3.4), from what was applied on.
        let mut configuration = (self.applied_configuration, self.applied_config_index);
        for _ in 0..=self.layout.log.adjust_capacity {
            if pos == commit {
                commit_index = Some(index);
            }
            if pos >= limit {
                break;
            }
            match self.ring.verify_entry(&self.mem, pos, max_payload) {
                Ok((h, _, end)) if h.index == index && end <= limit => {
                    if h.kind == EntryKind::Config {
                        match self.read_config_entry(pos) {
                            Some(c) => configuration = (c, h.index),
                            None => {
                                // Valid entry, no configuration in it: the
                                // log is not ours to trust.
                                self.counters.entries_rejected += 1;
                                return None;
                            }
                        }
                    }
                    if pos >= commit {
                        let at = items_at.add(items * crate::layout::ADJUST_ITEM_BYTES);
                        self.mem.store_u64(at, h.index);
                        self.mem.store_u64(at.add(8), h.term);
                        items += 1;
                    }
                    last_term = h.term;
                    index += 1;
                    pos = end;
                }
                _ if pos < commit => {
                    // Not arrived yet, or corrupt: no vote or grant on it
                    // now; the apply path decides which, over time.
                    self.counters.entries_rejected += 1;
                    return None;
                }
                _ => break, // garbage after the committed prefix: not ours
            }
        }
        let Some(commit_index) = commit_index else {
            // The commit pointer is not on an entry boundary we can see:
            // the entries below it have not all arrived (or are corrupt,
            // which the apply path reports over time).
            self.counters.entries_rejected += 1;
            return None;
        };
        if pos != tail_word {
            // Make memory agree with what is valid (we have exclusive access).
            self.mem.store_u64(self.layout.log_tail(), pos);
        }
        self.tail_index = index;
        self.adopt_configuration(configuration.0, configuration.1);
        Some(Walk {
            commit_index,
            tail_pos: pos,
            tail_index: index,
            last_term,
            items,
        })
    }

    /// Writes the adjustment header for `leader` in `term` (the items were
    /// written by the walk).
    pub(super) fn write_adjust_list(&mut self, w: &Walk, term: u64, leader: MemberId) {
        // A nonce no earlier grant of ours used, also before a restart
        // (row versions continue above what our peers held).
        self.grant_nonce = self.grant_nonce.max(self.row_version) + 1;
        let mut header = AdjustHeader {
            grant_term: term,
            grant_leader: leader,
            commit_pos: self.commit_pos,
            commit_index: w.commit_index,
            tail_pos: w.tail_pos,
            count: w.items,
            checksum: 0,
            nonce: self.grant_nonce,
        };
        let items_at = self
            .layout
            .adjust_header()
            .add(crate::layout::ADJUST_HEADER_BYTES);
        let mut c = header.checksum_start();
        for k in 0..w.items {
            let (index, term) = crate::log::adjust_item(&self.mem, items_at, k);
            c.word(index);
            c.word(term);
        }
        header.checksum = c.finish();
        header.store(&self.mem, self.layout.adjust_header());
    }
}
