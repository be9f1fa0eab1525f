//! Group reconfiguration (DARE §3.4): remove a member, add one (into a
//! free slot, or to a full group through the extended and transitional
//! configurations), and decrease the size (through a transitional
//! configuration). Only a leader in a stable configuration starts one;
//! each phase is one CONFIG entry, and the next phase is appended once
//! that entry has committed (when the leader applies it). Every member
//! uses the latest configuration in its log, committed or not: the leader
//! from the moment it appends a CONFIG entry, the others from their next
//! walk of the log (before they vote, campaign or grant) or, at the
//! latest, when they apply it.

use super::*;
use crate::log::EntryKind;
use crate::membership::{ConfigState, Configuration, CONFIGURATION_BYTES};

/// What an operator asks of the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconfigOp {
    /// Take a member out of the group (its slot stays; P does not change).
    Remove(MemberId),
    /// Put a member into the group: into a free slot below P, or into slot
    /// P of a full group, which grows P by one.
    Add(MemberId),
    /// Shrink the group to this many slots (members in the slots above go).
    Resize(u8),
}

/// Why a reconfiguration was not started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconfigError {
    /// Only the leader reconfigures; this is whom we follow, if anyone.
    NotLeader {
        /// The leader we know of.
        leader: Option<MemberId>,
    },
    /// A reconfiguration is under way (or its last CONFIG entry has not
    /// committed yet): one at a time.
    InProgress,
    /// The request does not fit the configuration; the text says why.
    Invalid(&'static str),
    /// The log has no room for the CONFIG entry now.
    LogFull,
}

/// The leader's reconfiguration under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Reconfig {
    pub(super) op: ReconfigOp,
}

impl<M: Memory, S: StateMachine> Node<M, S> {
    /// The group configuration this member goes by: the latest in its
    /// log, committed or not (DARE §3.4).
    pub fn configuration(&self) -> Configuration {
        self.configuration
    }

    /// The configuration as of the apply pointer (what a snapshot holds).
    pub fn applied_configuration(&self) -> Configuration {
        self.applied_configuration
    }

    /// Log index of the CONFIG entry of [`Node::configuration`] (0 for
    /// the initial configuration, which no entry carries).
    pub fn config_index(&self) -> u64 {
        self.config_index
    }

    /// True while a reconfiguration this member leads is under way.
    pub fn reconfiguring(&self) -> bool {
        self.reconfig.is_some()
    }

    /// Starts a reconfiguration (leader only). Returns the configuration
    /// of its first phase, already in effect here; [`Event::Reconfigured`]
    /// follows when the last phase's CONFIG entry has committed.
    pub fn reconfigure(
        &mut self,
        now: u64,
        op: ReconfigOp,
    ) -> Result<Configuration, ReconfigError> {
        self.tick_clock(now);
        let r = self.start_reconfig(op);
        self.invariants();
        r
    }

    fn start_reconfig(&mut self, op: ReconfigOp) -> Result<Configuration, ReconfigError> {
        if self.pb_mode() {
            // The views list the members there, and the primary changes
            // them itself (drops the silent, adds back the caught up).
            return Err(ReconfigError::Invalid(
                "primary-backup mode: the members are the view's, changed by the primary; DARE reconfiguration is for log mode",
            ));
        }
        if self.role != Role::Leader {
            return Err(ReconfigError::NotLeader {
                leader: self.leader,
            });
        }
        if self.reconfig.is_some() || self.config_index >= self.apply_index {
            return Err(ReconfigError::InProgress);
        }
        let c = self.configuration;
        if c.state != ConfigState::Stable {
            return Err(ReconfigError::InProgress);
        }
        let max = self.member_count as u8;
        let next = match op {
            ReconfigOp::Remove(m) => {
                if !c.active.contains(m) {
                    return Err(ReconfigError::Invalid("not a member of the group"));
                }
                let active = c.active.without(m);
                // The rest must still be able to form a majority of P.
                if active.count() <= usize::from(c.size) / 2 {
                    return Err(ReconfigError::Invalid(
                        "the members left would be no majority of the group's size: resize first",
                    ));
                }
                Configuration { active, ..c }
            }
            ReconfigOp::Add(m) => {
                if c.active.contains(m) {
                    return Err(ReconfigError::Invalid("already a member of the group"));
                }
                if m.0 < c.size {
                    Configuration {
                        active: c.active.with(m),
                        away: c.away.without(m),
                        ..c
                    }
                } else if m.0 == c.size && c.size < max {
                    // A new slot: the member recovers first, without a say
                    // (extended), then the group grows (transitional).
                    Configuration {
                        state: ConfigState::Extended,
                        size: c.size,
                        new_size: c.size + 1,
                        active: c.active.with(m),
                        away: c.away,
                    }
                } else {
                    return Err(ReconfigError::Invalid(
                        "add into a free slot below the group's size, or into the next slot (grows the group by one) within the members the memory was laid out for",
                    ));
                }
            }
            ReconfigOp::Resize(n) => {
                if n == 0 || n >= c.size {
                    return Err(ReconfigError::Invalid(
                        "resize only shrinks the group (grow it by adding members)",
                    ));
                }
                let kept = c.active.and(MemberMask::first(n.into()));
                if kept.count() <= usize::from(n) / 2 {
                    return Err(ReconfigError::Invalid(
                        "the members in the new size's slots would be no majority of it",
                    ));
                }
                Configuration {
                    state: ConfigState::Transitional,
                    size: c.size,
                    new_size: n,
                    active: c.active,
                    away: c.away,
                }
            }
        };
        self.append_config(next)?;
        self.reconfig = Some(Reconfig { op });
        self.counters.reconfigurations += 1;
        Ok(next)
    }

    /// Appends a CONFIG entry and goes by it at once (leader).
    pub(super) fn append_config(&mut self, c: Configuration) -> Result<(), ReconfigError> {
        let payload = c.encode();
        self.append_entry(EntryKind::Config, 0, 0, &payload, true)
            .map_err(|_| ReconfigError::LogFull)?;
        self.adopt_configuration(c, self.tail_index - 1);
        Ok(())
    }

    /// Goes by `c`, the configuration of the entry at `index`.
    pub(super) fn adopt_configuration(&mut self, c: Configuration, index: u64) {
        if c != self.configuration {
            self.push_event(Event::ConfigurationChanged {
                configuration: c,
                index,
            });
        }
        self.configuration = c;
        self.config_index = index;
    }

    /// A CONFIG entry was applied (it is committed). The leader moves on
    /// to the next phase of what it is doing, or of what a previous leader
    /// left unfinished; a leader outside the new group steps down.
    pub(super) fn on_config_applied(&mut self, c: Configuration, index: u64) {
        self.applied_configuration = c;
        self.push_event(Event::ConfigurationApplied {
            configuration: c,
            index,
        });
        if index > self.config_index {
            // Not seen by a walk yet: the latest we know of.
            self.adopt_configuration(c, index);
        }
        self.next_phase(c, index);
    }

    /// The leader starts the phase after the committed configuration `c`
    /// (at `index`), if `c` is the latest and not stable; once the last
    /// phase has committed, it reports its own operation done.
    fn next_phase(&mut self, c: Configuration, index: u64) {
        if self.role != Role::Leader || index != self.config_index {
            return;
        }
        let next = match c.state {
            ConfigState::Extended => Some(Configuration {
                state: ConfigState::Transitional,
                ..c
            }),
            ConfigState::Transitional => Some(Configuration {
                state: ConfigState::Stable,
                size: c.new_size,
                new_size: c.new_size,
                active: c.active.and(MemberMask::first(c.new_size.into())),
                away: c.away.and(MemberMask::first(c.new_size.into())),
            }),
            ConfigState::Stable => None,
        };
        // This apply starts the next phase: nothing is pending any more
        // unless the log refuses it.
        self.phase_pending = false;
        match next {
            Some(n) => {
                // If the log is full now, the next apply of this entry
                // cannot retry: the leader tick retries (`retry_pending_phase`).
                if self.append_config(n).is_err() {
                    self.phase_pending = true;
                }
            }
            None => {
                if let Some(r) = self.reconfig.take() {
                    self.push_event(Event::Reconfigured {
                        op: r.op,
                        configuration: c,
                    });
                }
                if !c.voters().contains(self.me) {
                    // DARE §3.4: the leader removes itself once the
                    // operation completes.
                    self.step_down_same_term();
                }
            }
        }
    }

    /// True when this member may stand for election: it is a voter of
    /// the latest configuration in its log, or of the one committed (a
    /// removal of it that has not committed may never commit: its log
    /// may be the only one that holds entries a new leader must have, and
    /// if it did not stand nobody could win). Votes are counted in the
    /// latest configuration either way, where a removed member's own vote
    /// does not count.
    pub(super) fn may_stand(&self) -> bool {
        self.configuration.voters().contains(self.me)
            || self.applied_configuration.voters().contains(self.me)
    }

    /// Zombies (DARE §3.3.2), when `zombie_remove_ns` is set (leader
    /// tick): a member silent for that long is removed by a CONFIG entry
    /// and marked away; a member away whose row moves again (it runs: rows
    /// are pushed at least every quarter of the prune grace) is added back.
    /// One change at a time, only from a committed stable configuration,
    /// and never one that the group's majority rule forbids.
    pub(super) fn tend_zombies(&mut self) {
        let c = self.configuration;
        if self.cfg.zombie_remove_ns == 0
            || self.role != Role::Leader
            || self.reconfig.is_some()
            || self.phase_pending
            || self.config_index >= self.apply_index
            || c.state != ConfigState::Stable
        {
            return;
        }
        let now = self.now;
        let silent_for = |p: &Peer| now.saturating_sub(p.row_changed_ns);
        #[cfg(feature = "mutation-testing")]
        let readd = self.cfg.mutation != crate::config::Mutation::NeverReaddZombies;
        #[cfg(not(feature = "mutation-testing"))]
        let readd = true;
        if readd {
            for m in c.away.iter() {
                let p = &self.peers[m.index()];
                if m != self.me
                    && !p.down
                    && p.row_changed_ns > 0
                    && silent_for(p) <= self.cfg.prune_grace_ns / 2
                {
                    let next = Configuration {
                        active: c.active.with(m),
                        away: c.away.without(m),
                        ..c
                    };
                    if self.start_zombie_change(next, ReconfigOp::Add(m)) {
                        self.counters.zombies_readded += 1;
                    }
                    return;
                }
            }
        }
        for m in c.active.iter() {
            let p = &self.peers[m.index()];
            if m == self.me || !(p.down || silent_for(p) > self.cfg.zombie_remove_ns) {
                continue;
            }
            let active = c.active.without(m);
            // The rest must still be a majority of P (as for an operator's
            // removal); if not, removing would not help anyway.
            if active.count() <= usize::from(c.size) / 2 {
                return;
            }
            let next = Configuration {
                active,
                away: c.away.with(m),
                ..c
            };
            if self.start_zombie_change(next, ReconfigOp::Remove(m)) {
                self.counters.zombies_removed += 1;
            }
            return;
        }
    }

    /// Appends the CONFIG entry of a zombie's removal or return; false if
    /// the log has no room now (the next tick tries again).
    fn start_zombie_change(&mut self, next: Configuration, op: ReconfigOp) -> bool {
        let started = self.append_config(next).is_ok();
        if started {
            self.reconfig = Some(Reconfig { op });
        }
        started
    }

    /// Starts a phase the full log refused, or one a predecessor left
    /// after its CONFIG entry was applied here (leader tick).
    pub(super) fn retry_pending_phase(&mut self) {
        if !self.phase_pending || self.role != Role::Leader {
            return;
        }
        if self.config_index < self.apply_index {
            let (c, index) = (self.configuration, self.config_index);
            self.next_phase(c, index);
        }
    }

    /// Reads the configuration a CONFIG entry at `pos` carries.
    pub(super) fn read_config_entry(&self, pos: u64) -> Option<Configuration> {
        let mut b = [0u8; CONFIGURATION_BYTES];
        match self
            .ring
            .read_entry(&self.mem, pos, CONFIGURATION_BYTES as u32, &mut b)
        {
            Ok((h, _, _)) if h.kind == EntryKind::Config => {
                Configuration::decode(&b, self.member_count as u8).ok()
            }
            _ => None,
        }
    }
}
