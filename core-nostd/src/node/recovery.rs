//! Recovery by state transfer (DARE §3.4): a member whose log the leader
//! cannot bring up to date (the entries it needs were pruned: it restarted
//! with empty memory, or it was cut off for longer than the prune grace)
//! fetches a snapshot of a follower's state machine entirely with
//! one-sided operations, then rejoins through the ordinary log adjustment.
//!
//! 1. The leader marks the member in its row's recover mask when log
//!    adjustment finds its committed prefix gone (`needs_recovery`).
//! 2. The member (the *joiner*) picks a donor, a follower if one can give
//!    it a snapshot, and asks in its own row: `snapshot_request = (donor,
//!    generation)`. The leader is asked only when no follower can (all
//!    others down, behind us or recovering themselves, or the one asked
//!    last went silent): DARE keeps the leader off the recovery path, but a
//!    3-member group with one member down and one a ring behind would
//!    otherwise never commit again.
//! 3. The donor, at the end of a step (after applying), writes into its
//!    `Snapshot` region a header marked *writing*, its session table as it
//!    lies in its `Sessions` region, and asks its host for the state
//!    machine's bytes ([`Event::SnapshotWanted`]): the host calls
//!    [`Node::write_snapshot`] before the next step (the simulator) or in a
//!    fork of the process (the replica: the kernel's copy-on-write keeps
//!    the state as of that instant while the donor applies on), which
//!    marks the header *complete* with the payload's checksum.
//! 4. The joiner READs the donor's header until it is complete for its
//!    generation, READs the payload in bounded chunks into its own
//!    `Snapshot` region, READs the header again (unchanged: nothing was
//!    rewritten under it), then restores its state machine from its own
//!    copy a bounded piece per step (`snapshot_restore_step_bytes`),
//!    checksumming exactly the bytes it restores. A large state thus
//!    takes many short steps, between which the member keeps its row
//!    alive and the processes sharing its core run; until the last piece
//!    it applies and gives nothing. At the end it checks the payload's
//!    checksum, puts the session table in place, and sets its log
//!    pointers to the snapshot's apply position, with an empty log after
//!    it.
//! 5. It prepares a fresh adjustment list and grants the leader log access
//!    again (DARE: "sends a vote to the leader"), then withdraws its
//!    request. The leader sees the request answered (a newer generation,
//!    no donor) and adjusts and replicates as for any follower: the
//!    committed entries after the snapshot come from the leader's ring.
//!
//! A donor that does not answer within `snapshot_wait_ns` is replaced by
//! the next candidate; a torn, changed or corrupt snapshot is never
//! restored (the READ is repeated with a new generation).

use super::*;
use crate::fabric::{Op, RegionId};
use crate::snapshot::{
    ChecksummingSource, MemorySink, MemorySource, RestoreProgress, SnapshotHeader, SnapshotState,
    StreamChecksum,
};
use crate::sst::SnapshotRequest;

/// Chunk READs in flight at most while a joiner copies a snapshot.
const SNAPSHOT_READS_INFLIGHT_MAX: u64 = 4;

/// `no_restart_before_ns` until the step after a regrant sets it.
const NO_RESTART_PENDING: u64 = u64::MAX;

/// Heartbeats the leader we granted our restored log must have beaten
/// since before its mark still counts: it ran that many steps after our
/// row reached it, so it has seen the grant. (A window of time alone was
/// too short for a leader that shares its core with the restore: a 1 GiB
/// member recovered twice under `verbatim-bench recovery`.)
const REGRANT_LEADER_BEATS: u64 = 16;

/// How many `snapshot_wait_ns` a joiner waits for the row of a follower it
/// has not heard from yet before it asks the leader instead. A member that
/// restarts has no peer row until each peer notices the restart and
/// pushes its row again; asking the leader at once put the leader on the
/// recovery path (its fork, its memory bandwidth) though a follower could
/// give (found by `verbatim-bench recovery`).
const UNSEEN_DONOR_WAITS: u64 = 5;

/// Where a joiner is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RecoveryPhase {
    /// Not recovering.
    Idle,
    /// Asked a donor; READing its header until the snapshot is complete.
    AwaitSnapshot,
    /// Copying the payload.
    Copying,
    /// Payload copied: READing the header again to check it did not
    /// change.
    Confirming,
    /// Restoring the copy a piece per step (the state machine is cleared:
    /// nothing is applied or given until it is whole).
    Restoring,
    /// Restored: granting the leader access with a fresh adjustment list.
    Regrant,
}

/// A joiner's recovery state, and a donor's job.
#[derive(Clone, Copy, Debug)]
pub(super) struct Recovery {
    pub(super) phase: RecoveryPhase,
    donor: MemberId,
    generation: u64,
    /// When the donor last showed progress (or was asked).
    progress_ns: u64,
    header: SnapshotHeader,
    /// Payload bytes asked for and landed.
    requested: u64,
    landed: u64,
    /// Payload bytes restored (session table image first, then the state
    /// machine's bytes), and their running checksum.
    restored: u64,
    restored_checksum: StreamChecksum,
    /// The next piece of the restore is due then (paced by
    /// `snapshot_restore_pause_ns`).
    restore_due_ns: u64,
    reads_inflight: u64,
    /// A header READ is in flight.
    header_inflight: bool,
    /// Earliest time of the next header READ (a donor still writing is
    /// asked again after a short pause, not in a tight loop).
    header_read_at_ns: u64,
    /// A restore failed half-way: our state machine is no longer the one
    /// our apply pointer says. Nothing is applied or given away until a
    /// snapshot restores it.
    pub(super) state_lost: bool,
    /// Recoveries completed, and attempts abandoned.
    pub(super) completed: u64,
    pub(super) abandoned: u64,
    /// After a recovery, the leader's mark may still be set until it sees
    /// our new row: no new recovery before it cleared it (or this time).
    no_restart_before_ns: u64,
    /// Donors of attempts abandoned since the last recovery (silent, or
    /// their snapshot changed or was corrupt), a bit per member: the next
    /// attempt asks someone else while anyone else can give. (Without it a
    /// joiner that cannot tell two crashed donors from slow ones asked
    /// them in turn for ever: found by the swarm, seed 5108.)
    failed_donors: u64,
    /// The last leader we followed marks us for recovery (its row's
    /// recover mask, as of the last step we followed it).
    marked: bool,
    /// When `recovery_tick` last ran (to tell our own stalls from a
    /// donor's silence).
    last_tick_ns: u64,
    /// When we granted the leader our restored log (the step's clock).
    granted_at_ns: u64,
    /// The leader we granted our restored log, and its heartbeat counter
    /// then.
    regrant_beats: Option<(MemberId, u64)>,
    /// Since that grant, the leader's row was seen without our outrun
    /// bit: once it shows the bit, it is about this restore (an older
    /// one's bit is cleared when the leader sees us ask again).
    outrun_clear_seen: bool,
    /// While some follower's row is still unseen, the leader is asked
    /// for a snapshot only from this time on (0: not waiting).
    leader_asked_after_ns: u64,
    /// Donor: the generation last answered per member.
    served: [u64; MAX_MEMBERS],
    /// Donor: the snapshot being written (what `write_snapshot` writes).
    job: Option<SnapshotJob>,
}

/// A donor's snapshot whose state-machine bytes the host writes.
#[derive(Clone, Copy, Debug)]
struct SnapshotJob {
    header: SnapshotHeader,
    /// When it was asked for (a host that never writes it does not block
    /// the next one forever).
    started_ns: u64,
    /// The checksum over the session table image, continued by the
    /// state machine's bytes.
    checksum: StreamChecksum,
}

impl Recovery {
    pub(super) const NEW: Recovery = Recovery {
        phase: RecoveryPhase::Idle,
        donor: MemberId(0),
        generation: 0,
        progress_ns: 0,
        header: SnapshotHeader {
            generation: 0,
            state: SnapshotState::Empty,
            apply_index: 0,
            apply_pos: 0,
            last_term: 0,
            sessions_bytes: 0,
            sm_bytes: 0,
            payload_checksum: 0,
            configuration: [0; crate::membership::CONFIGURATION_BYTES],
            config_index: 0,
        },
        requested: 0,
        landed: 0,
        restored: 0,
        restored_checksum: StreamChecksum::NEW,
        restore_due_ns: 0,
        reads_inflight: 0,
        header_inflight: false,
        header_read_at_ns: 0,
        state_lost: false,
        completed: 0,
        abandoned: 0,
        no_restart_before_ns: 0,
        failed_donors: 0,
        marked: false,
        last_tick_ns: 0,
        leader_asked_after_ns: 0,
        granted_at_ns: 0,
        regrant_beats: None,
        outrun_clear_seen: false,
        served: [0; MAX_MEMBERS],
        job: None,
    };
}

impl Recovery {
    /// A peer restarted: the snapshot it asked for before is not its new
    /// process's (a donor answers the new one's first request).
    pub(super) fn forget(&mut self, peer: MemberId) {
        self.served[peer.index()] = 0;
    }
}

/// A recovering member's progress, for status endpoints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryStatus {
    /// Recovering now.
    pub active: bool,
    /// The donor asked.
    pub donor: Option<MemberId>,
    /// Payload bytes copied so far and in all (0 until the donor's
    /// snapshot is complete).
    pub bytes_copied: u64,
    /// Payload bytes of the snapshot being copied.
    pub bytes_total: u64,
    /// Payload bytes restored so far, once the copy is whole.
    pub bytes_restored: u64,
    /// Recoveries completed by this member.
    pub completed: u64,
    /// Attempts given up (donor silent, snapshot changed or corrupt).
    pub abandoned: u64,
}

impl<M: Memory, S: StateMachine> Node<M, S> {
    /// Recovery progress.
    pub fn recovery_status(&self) -> RecoveryStatus {
        let r = &self.recovery;
        let active = r.phase != RecoveryPhase::Idle;
        RecoveryStatus {
            active,
            donor: active.then_some(r.donor),
            bytes_copied: r.landed,
            bytes_total: if matches!(
                r.phase,
                RecoveryPhase::Copying | RecoveryPhase::Confirming | RecoveryPhase::Restoring
            ) {
                r.header.payload_bytes()
            } else {
                0
            },
            bytes_restored: if r.phase == RecoveryPhase::Restoring {
                r.restored
            } else {
                0
            },
            completed: r.completed,
            abandoned: r.abandoned,
        }
    }

    /// True when the state machine may apply committed entries (not while
    /// a failed restore left it cleared).
    pub(super) fn state_intact(&self) -> bool {
        !self.recovery.state_lost
    }

    /// True when the state machine holds exactly the entries up to the
    /// apply index: not while a restore replaces it a piece at a time, nor
    /// after a failed one cleared it (checkers compare only such states).
    pub fn state_machine_current(&self) -> bool {
        self.state_intact()
            && self.recovery.phase != RecoveryPhase::Restoring
            && self.spec_end.is_none()
    }

    /// The apply point our row publishes: while we copy a snapshot, the
    /// snapshot's, so that the leader does not prune past what we are
    /// about to restore (it holds the log for a recovering member as for
    /// any other it heard from recently).
    pub(super) fn published_apply_point(&self) -> (u64, u64) {
        match self.recovery.phase {
            RecoveryPhase::Copying | RecoveryPhase::Confirming | RecoveryPhase::Restoring => (
                self.recovery.header.apply_pos,
                self.recovery.header.apply_index,
            ),
            _ => (self.apply_pos, self.apply_index),
        }
    }

    /// A snapshot must be ahead of what we applied (off only for the
    /// mutation test that shows the swarm notices).
    fn never_back(&self) -> bool {
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::RecoverFromAnyDonor {
            return false;
        }
        true
    }

    pub(super) fn snapshot_enabled(&self) -> bool {
        self.layout.snapshot_bytes > 0
    }

    // ----- joiner ------------------------------------------------------

    /// True while a copy is under way (asked, copying, confirming or
    /// restoring): our log and state are about to be replaced, so we
    /// neither grant log access (to a leader or by a vote) nor stand.
    pub(super) fn copying(&self) -> bool {
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::GrantWhileCopying {
            return false;
        }
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::GrantWhileRestoring
            && self.recovery.phase == RecoveryPhase::Restoring
        {
            return false;
        }
        matches!(
            self.recovery.phase,
            RecoveryPhase::AwaitSnapshot
                | RecoveryPhase::Copying
                | RecoveryPhase::Confirming
                | RecoveryPhase::Restoring
        )
    }

    /// While a restore has pieces left, when the next one is due (the
    /// host steps us again then rather than park longer).
    pub(super) fn restore_due(&self) -> Option<u64> {
        (self.recovery.phase == RecoveryPhase::Restoring).then_some(self.recovery.restore_due_ns)
    }

    /// False while recovery says we cannot win an election, so a campaign
    /// would only raise the term and depose a working leader: a copy is
    /// under way, a restored member waits for a leader to take its grant,
    /// or the last leader we followed marked us for recovery (our log
    /// lacks entries that leader pruned, which a majority applied: no
    /// majority votes for us). Found by `verbatim-bench recovery`: a
    /// recovering member that stood, or abandoned its copy whenever it
    /// lost sight of the leader, kept the group in an election storm
    /// (terms 8 to 756 in one transfer).
    pub(super) fn recovery_allows_standing(&self) -> bool {
        self.recovery.phase == RecoveryPhase::Idle && !self.recovery.marked
    }

    /// Follower, every step: start, time out or advance a recovery. A
    /// copy goes on while we have no leader, or follow another one: it
    /// needs only the donor (a snapshot of a large state takes seconds,
    /// and starting over costs the donor another snapshot).
    pub(super) fn recovery_tick(&mut self) {
        if !self.snapshot_enabled() {
            return;
        }
        // Time we were not running (a stall of this process) is not the
        // donor's silence: the donor's window starts again.
        let stalled_ns = self.now.saturating_sub(self.recovery.last_tick_ns);
        self.recovery.last_tick_ns = self.now;
        if stalled_ns > self.cfg.snapshot_wait_ns / 2 {
            self.recovery.progress_ns = self.recovery.progress_ns.max(self.now);
        }
        let leader = match (self.role, self.leader) {
            (Role::Follower, Some(l)) if l != self.me => Some(l),
            _ => None,
        };
        if self.recovery.no_restart_before_ns == NO_RESTART_PENDING
            && self.now > self.recovery.granted_at_ns
        {
            self.recovery.no_restart_before_ns =
                self.now.saturating_add(2 * self.cfg.snapshot_wait_ns);
        }
        let leader_marks = leader.is_some_and(|l| {
            self.peers[l.index()].row.recover_mask & Row::recover_bit(self.me) != 0
        });
        if let (Some(l), Some((granted, _))) = (leader, self.recovery.regrant_beats) {
            if l == granted && !self.leader_says_outrun(l) {
                self.recovery.outrun_clear_seen = true;
            }
        }
        if leader.is_some() {
            // What the leader we follow says (kept when we lose it). Just
            // after a recovery its mark is for the log we had, until it
            // sees our new row.
            self.recovery.marked = leader_marks && leader.is_some_and(|l| !self.regrant_pending(l));
        }
        match self.recovery.phase {
            RecoveryPhase::Idle => {
                let Some(l) = leader else { return };
                if !leader_marks && !self.recovery.state_lost {
                    self.recovery.no_restart_before_ns = 0;
                    self.recovery.regrant_beats = None;
                    return;
                }
                if self.regrant_pending(l) {
                    return;
                }
                self.start_recovery(l);
            }
            RecoveryPhase::AwaitSnapshot | RecoveryPhase::Copying | RecoveryPhase::Confirming => {
                if self.now.saturating_sub(self.recovery.progress_ns) > self.cfg.snapshot_wait_ns {
                    // The donor is silent or gone: ask the next one (once
                    // a leader says we still must).
                    self.abandon_recovery();
                    if let Some(l) = leader {
                        self.start_recovery(l);
                    }
                    return;
                }
                self.recovery_reads();
            }
            RecoveryPhase::Restoring => {
                // Our own work, not the donor's: no timeout.
                self.recovery.progress_ns = self.now;
                if self.now >= self.recovery.restore_due_ns {
                    self.restore_piece();
                    self.recovery.restore_due_ns =
                        self.now.saturating_add(self.cfg.snapshot_restore_pause_ns);
                }
            }
            RecoveryPhase::Regrant => {}
        }
    }

    /// `leader`'s row says our restore came too late (`Row::outrun_bit`).
    fn leader_says_outrun(&self, leader: MemberId) -> bool {
        self.peers[leader.index()].row.recover_mask & Row::outrun_bit(self.me) != 0
    }

    /// True while the leader we granted our restored log may not have
    /// seen the grant yet: its mark is for the log we had.
    fn regrant_pending(&self, leader: MemberId) -> bool {
        // The leader saw our grant and says our log starts before its
        // head: no need to wait to be sure it saw it.
        if self.recovery.outrun_clear_seen
            && self
                .recovery
                .regrant_beats
                .is_some_and(|(l, _)| l == leader)
            && self.leader_says_outrun(leader)
        {
            return false;
        }
        if self.now < self.recovery.no_restart_before_ns {
            return true;
        }
        match self.recovery.regrant_beats {
            Some((l, beats)) if l == leader => {
                self.peers[l.index()].row.heartbeat.counter
                    < beats.saturating_add(REGRANT_LEADER_BEATS)
            }
            _ => false,
        }
    }

    /// Picks a donor and asks it in our row: nobody known down, cut off
    /// (its control channel broken) or itself marked for recovery, and only
    /// one that has applied more than we have (a snapshot must never take
    /// us back: our applied entries may be part of a committed majority).
    /// Among the followers that qualify and have not failed us since our
    /// last recovery, the one furthest ahead; the leader only when no
    /// follower qualifies. When everyone who qualifies has failed us, they
    /// are forgotten and asked again from the next call.
    fn start_recovery(&mut self, leader: MemberId) {
        // READs of an abandoned attempt still land in our snapshot region:
        // a new copy starts after they completed (every posted READ
        // completes, with an error if its channel broke), so that an old
        // chunk never overwrites a new one.
        if self.recovery.reads_inflight > 0 || self.recovery.header_inflight {
            return;
        }
        let marked = self.peers[leader.index()].row.recover_mask;
        let never_back = self.never_back();
        let previous = (self.recovery.generation != 0).then_some(self.recovery.donor);
        let can_give = |me: &Self, d: MemberId| {
            let peer = &me.peers[d.index()];
            !(peer.down
                || !me.channel_ok(d, Channel::Control)
                || me.recovery.failed_donors & (1u64 << d.0) != 0
                || marked & (1u64 << d.0) != 0
                || (never_back
                    && (peer.row.apply_index < me.apply_index
                        || (peer.row.apply_index == me.apply_index && !me.recovery.state_lost)))
                || peer.row.snapshot_request.from.is_some())
        };
        let mut best: Option<(MemberId, u64)> = None;
        for d in self.others() {
            if d == leader || !can_give(self, d) {
                continue;
            }
            // The one asked last time loses ties (and only ties). (The
            // mutation takes the first candidate in id order instead.)
            let score = if never_back {
                self.peers[d.index()].row.apply_index.saturating_mul(2)
                    + u64::from(Some(d) != previous)
            } else {
                u64::from(u8::MAX - d.0)
            };
            if best.is_none_or(|(_, s)| score > s) {
                best = Some((d, score));
            }
        }
        let donor = match best {
            Some((d, _)) => d,
            None if can_give(self, leader) => {
                // A follower whose row we have not seen yet (we just
                // started, and it has not noticed) may well give: wait for
                // its row a while before asking the leader.
                let unseen = self.others().any(|d| {
                    d != leader && self.sst.version(d) == 0 && !self.peers[d.index()].down
                });
                if unseen {
                    if self.recovery.leader_asked_after_ns == 0 {
                        self.recovery.leader_asked_after_ns = self
                            .now
                            .saturating_add(UNSEEN_DONOR_WAITS * self.cfg.snapshot_wait_ns);
                    }
                    if self.now < self.recovery.leader_asked_after_ns {
                        return;
                    }
                }
                leader
            }
            None => {
                // Nobody suitable: wait for one, and give those that
                // failed us another chance.
                self.recovery.failed_donors = 0;
                return;
            }
        };
        // Our log will be rewritten: nobody may write it meanwhile, and
        // our row says so (a leader that still saw its grant there READ
        // the revoked log over and over, backing its channel off until,
        // after a long restore, the member waited for the reconnect).
        if self.granted_to.is_some() {
            self.revoke_all();
        }
        self.row.grant = crate::sst::Ballot::default();
        // A generation no earlier request of ours used (also across a
        // restart: it follows the clock).
        let generation = self.now.max(self.recovery.generation + 1);
        let r = &mut self.recovery;
        r.leader_asked_after_ns = 0;
        r.phase = RecoveryPhase::AwaitSnapshot;
        r.donor = donor;
        r.generation = generation;
        r.progress_ns = self.now;
        r.header = Recovery::NEW.header;
        r.requested = 0;
        r.landed = 0;
        r.header_read_at_ns = self.now;
        self.row.snapshot_request = SnapshotRequest {
            from: Some(donor),
            generation,
        };
        self.row_dirty = true;
    }

    fn abandon_recovery(&mut self) {
        self.recovery.abandoned += 1;
        self.recovery.failed_donors |= 1u64 << self.recovery.donor.0;
        self.recovery.phase = RecoveryPhase::Idle;
        self.row.snapshot_request.from = None;
        self.row_dirty = true;
        // Our log is as it was: the leader we follow gets it back (the
        // copy withdrew the grant). Nothing is granted from a state a
        // failed restore cleared: another copy follows.
        if let (Role::Follower, Some(l), false) = (self.role, self.leader, self.recovery.state_lost)
        {
            if l != self.me && matches!(self.duty, Duty::None) {
                self.duty = Duty::Grant {
                    leader: l,
                    term: self.term,
                };
            }
        }
    }

    /// Posts what the current phase needs: header READs, chunk READs.
    fn recovery_reads(&mut self) {
        let donor = self.recovery.donor;
        if !self.channel_ok(donor, Channel::Control) {
            return;
        }
        match self.recovery.phase {
            RecoveryPhase::AwaitSnapshot | RecoveryPhase::Confirming => {
                if !self.recovery.header_inflight
                    && self.now >= self.recovery.header_read_at_ns
                    && self.can_post(1)
                {
                    self.post(
                        donor,
                        Op::Read {
                            remote: self.layout.snapshot_header(),
                            local: self.layout.snapshot_header(),
                            len: (8 * SnapshotHeader::WORDS) as u32,
                        },
                        Purpose::ReadSnapshotHeader {
                            generation: self.recovery.generation,
                        },
                    );
                    self.recovery.header_inflight = true;
                }
            }
            RecoveryPhase::Copying => {
                let total = self.recovery.header.payload_bytes();
                let chunk = u64::from(self.cfg.snapshot_read_bytes);
                while self.recovery.requested < total
                    && self.recovery.reads_inflight < SNAPSHOT_READS_INFLIGHT_MAX
                    && self.can_post(1)
                {
                    let offset = self.recovery.requested;
                    let len = chunk.min(total - offset);
                    self.post(
                        donor,
                        Op::Read {
                            remote: self.layout.snapshot_payload(offset),
                            local: self.layout.snapshot_payload(offset),
                            len: len as u32,
                        },
                        Purpose::ReadSnapshotChunk {
                            generation: self.recovery.generation,
                            len: len as u32,
                        },
                    );
                    self.recovery.requested += len;
                    self.recovery.reads_inflight += 1;
                }
            }
            RecoveryPhase::Idle | RecoveryPhase::Restoring | RecoveryPhase::Regrant => {}
        }
    }

    /// A READ of the donor's header completed (it landed in our own
    /// region's header words).
    pub(super) fn on_snapshot_header(&mut self, generation: u64, ok: bool) {
        // One header READ is in flight at most, of whichever attempt: this
        // is it. (Cleared only for the current attempt, a READ that
        // outlived an abandoned one left the flag set for good and the
        // joiner never read a header again: swarm seed 641770780.)
        self.recovery.header_inflight = false;
        if generation != self.recovery.generation {
            return;
        }
        // Asked again after a pause while the donor is still writing.
        self.recovery.header_read_at_ns = self.now.saturating_add(self.cfg.heartbeat_period_ns);
        if !ok {
            return; // retried on the next step (the channel recovers)
        }
        let words: [u64; SnapshotHeader::WORDS] =
            crate::mem::read_words(&self.mem, self.layout.snapshot_header());
        let header = SnapshotHeader::decode(&words);
        match (self.recovery.phase, header) {
            (RecoveryPhase::AwaitSnapshot, Some(h)) if h.generation == generation => {
                self.recovery.progress_ns = self.now;
                match h.state {
                    // Never back: a snapshot must be ahead of what we
                    // applied (the donor may have fallen behind meanwhile).
                    SnapshotState::Complete
                        if self.never_back()
                            && (h.apply_index < self.apply_index
                                || (h.apply_index == self.apply_index
                                    && !self.recovery.state_lost)) =>
                    {
                        self.abandon_recovery();
                    }
                    SnapshotState::Complete
                        if h.payload_bytes()
                            <= self.layout.snapshot_bytes - SnapshotHeader::PAYLOAD_OFFSET
                            && h.sessions_bytes == self.layout.sessions_bytes =>
                    {
                        self.recovery.header = h;
                        self.recovery.phase = RecoveryPhase::Copying;
                        // Hold the leader's head at the snapshot.
                        self.row.apply_pos = h.apply_pos;
                        self.row.apply_index = h.apply_index;
                        self.row_dirty = true;
                        self.recovery_reads();
                    }
                    SnapshotState::Complete | SnapshotState::TooLarge => {
                        // It cannot fit our region (or is of another
                        // layout): no donor can help; try another later.
                        self.abandon_recovery();
                    }
                    SnapshotState::Writing | SnapshotState::Empty => {}
                }
            }
            (RecoveryPhase::Confirming, Some(h)) if h == self.recovery.header => {
                self.begin_restore();
            }
            (RecoveryPhase::Confirming, _) => {
                // Rewritten while we copied: never restored.
                self.abandon_recovery();
            }
            _ => {}
        }
    }

    /// A chunk READ completed.
    pub(super) fn on_snapshot_chunk(&mut self, generation: u64, len: u32, ok: bool) {
        // Counted for every attempt: a new one starts only when the READs
        // of the last have completed (see `start_recovery`).
        self.recovery.reads_inflight -= 1;
        if generation != self.recovery.generation || self.recovery.phase != RecoveryPhase::Copying {
            return;
        }
        if !ok {
            self.abandon_recovery();
            return;
        }
        self.recovery.progress_ns = self.now;
        self.recovery.landed += u64::from(len);
        if self.recovery.landed == self.recovery.header.payload_bytes()
            && self.recovery.reads_inflight == 0
        {
            self.recovery.phase = RecoveryPhase::Confirming;
            self.recovery_reads();
        }
    }

    /// The copy is whole and unchanged: clear the state machine and
    /// restore the copy into it over the next steps.
    fn begin_restore(&mut self) {
        let h = self.recovery.header;
        // The group configuration as of the snapshot (DARE §3.4).
        if crate::membership::Configuration::decode(&h.configuration, self.member_count as u8)
            .is_err()
        {
            self.counters.entries_rejected += 1;
            self.abandon_recovery();
            return;
        }
        assert!(
            !self.never_back()
                || h.apply_index > self.apply_index
                || (h.apply_index == self.apply_index && self.recovery.state_lost),
            "a snapshot never takes a member back"
        );
        // From here on our state machine is neither the old one nor the
        // snapshot's until the last piece: nothing is applied or given
        // away (a restore that fails leaves it so until another snapshot
        // restores it).
        self.sm.restore_begin();
        self.recovery.state_lost = true;
        self.recovery.restored = 0;
        self.recovery.restored_checksum = StreamChecksum::new();
        self.recovery.restore_due_ns = self.now;
        self.recovery.phase = RecoveryPhase::Restoring;
    }

    /// One step's piece of a restore: about `snapshot_restore_step_bytes`
    /// of the copy (the session table image is only checksummed here and
    /// put in place at the end), through the checksum, into the state
    /// machine.
    fn restore_piece(&mut self) {
        let h = self.recovery.header;
        let mut budget = self.cfg.snapshot_restore_step_bytes;
        while self.recovery.restored < h.sessions_bytes && budget > 0 {
            let n = (h.sessions_bytes - self.recovery.restored)
                .min(self.payload.len() as u64)
                .min(budget) as usize;
            self.mem.read(
                self.layout.snapshot_payload(self.recovery.restored),
                &mut self.payload[..n],
            );
            self.recovery.restored_checksum.bytes(&self.payload[..n]);
            self.recovery.restored += n as u64;
            budget -= n as u64;
        }
        if budget == 0 {
            return;
        }
        let sm_restored = self.recovery.restored - h.sessions_bytes;
        let mut copy = MemorySource::new(
            &self.mem,
            self.layout.snapshot_payload(self.recovery.restored),
            h.sm_bytes - sm_restored,
        );
        let left_before = copy.remaining();
        let mut source = ChecksummingSource::new(&mut copy, &mut self.recovery.restored_checksum);
        let progress = self.sm.restore_some(&mut source, &mut self.payload, budget);
        self.recovery.restored += left_before - copy.remaining();
        let trailing = copy.remaining() != 0;
        match progress {
            Ok(RestoreProgress::More) => {}
            Ok(RestoreProgress::Done) if !trailing => self.finish_recovery(),
            // A snapshot that passed the header check but does not
            // restore (a donor's bug, or a hostile one): our state machine
            // stays cleared until another snapshot restores it.
            Ok(RestoreProgress::Done) | Err(_) => {
                self.counters.entries_rejected += 1;
                self.abandon_recovery();
            }
        }
    }

    /// The last piece is restored: check the whole payload's checksum,
    /// put the session table in place, and rejoin.
    fn finish_recovery(&mut self) {
        let h = self.recovery.header;
        let payload = h.payload_bytes();
        let configuration =
            crate::membership::Configuration::decode(&h.configuration, self.member_count as u8);
        let (Ok(configuration), true) = (
            configuration,
            self.recovery.restored_checksum.finish() == h.payload_checksum,
        ) else {
            self.counters.entries_rejected += 1;
            self.abandon_recovery();
            return;
        };
        self.recovery.state_lost = false;
        // The session table, as the donor's region held it.
        let mut offset = 0;
        while offset < h.sessions_bytes {
            let n = (h.sessions_bytes - offset).min(self.payload.len() as u64) as usize;
            self.mem
                .read(self.layout.snapshot_payload(offset), &mut self.payload[..n]);
            self.mem.write(
                crate::fabric::Addr::new(RegionId::Sessions, offset),
                &self.payload[..n],
            );
            offset += n as u64;
        }
        // The log: everything up to the snapshot is applied, nothing after
        // it is held (the leader's adjustment brings it).
        self.head_pos = h.apply_pos;
        self.apply_pos = h.apply_pos;
        self.commit_pos = h.apply_pos;
        self.apply_index = h.apply_index;
        self.commit_index = h.apply_index;
        self.tail_index = h.apply_index;
        self.last_applied_term = h.last_term;
        self.last_term = h.last_term;
        self.corrupt = false;
        self.bad_entry_since_ns = None;
        self.applied_configuration = configuration;
        self.applied_config_index = h.config_index;
        self.adopt_configuration(configuration, h.config_index);
        self.mem.store_u64(self.layout.log_commit(), h.apply_pos);
        self.mem.store_u64(self.layout.log_tail(), h.apply_pos);
        self.row.apply_pos = h.apply_pos;
        self.row.apply_index = h.apply_index;
        self.row.commit_index = h.apply_index;
        self.row.last_index = h.apply_index.saturating_sub(1);
        self.published_apply_index = 0;
        self.row_dirty = true;
        self.recovery.phase = RecoveryPhase::Regrant;
        // Restored: the mark was for the log we had (the leader clears it
        // when it sees our new row).
        self.recovery.marked = false;
        self.recovery.completed += 1;
        self.recovery.failed_donors = 0;
        self.push_event(Event::Recovered {
            apply_index: h.apply_index,
            bytes: payload,
        });
        // A fresh adjustment list and grant for the leader we follow.
        if let Some(l) = self.leader {
            self.row.grant = crate::sst::Ballot::default();
            self.duty = Duty::Grant {
                leader: l,
                term: self.term,
            };
        }
    }

    /// The grant after a recovery is done: withdraw the request, which
    /// tells the leader to adjust our log again.
    pub(super) fn recovery_granted(&mut self) {
        if self.recovery.phase == RecoveryPhase::Regrant {
            self.recovery.phase = RecoveryPhase::Idle;
            // The window starts at our next step, not this one's clock:
            // when the restore was one long step, a window counted from a
            // clock read before it had passed before the leader could see
            // our row, and we recovered again and again (`verbatim-bench
            // recovery`). The restore is now paced pieces, so this matters
            // only for a step the host itself stalled; with the leader's
            // beats (REGRANT_LEADER_BEATS) it may be simplified, which
            // changes election behaviour and waits for a swarm run.
            self.recovery.no_restart_before_ns = NO_RESTART_PENDING;
            self.recovery.granted_at_ns = self.now;
            self.recovery.regrant_beats = self
                .leader
                .map(|l| (l, self.peers[l.index()].row.heartbeat.counter));
            self.recovery.outrun_clear_seen = false;
            self.row.snapshot_request.from = None;
            self.row_dirty = true;
        }
    }

    // ----- donor -------------------------------------------------------

    /// Any member, at the end of a step (after it applied): answers a new
    /// snapshot request addressed to it (a joiner asks the leader only
    /// when no follower can give).
    pub(super) fn donor_tick(&mut self) {
        if !self.snapshot_enabled() {
            return;
        }
        if self.recovery.phase != RecoveryPhase::Idle || self.recovery.state_lost {
            return; // nothing whole to give
        }
        if self.spec_end.is_some() {
            // Operations executed ahead of their commit: not a state to
            // give (the primary executes no more while a request for a
            // snapshot of ours waits, so this ends within a commit).
            return;
        }
        if let Some(job) = self.recovery.job {
            // One snapshot at a time: a new request waits until the host
            // finished this one (its header is no longer "writing").
            let words: [u64; SnapshotHeader::WORDS] =
                crate::mem::read_words(&self.mem, self.layout.snapshot_header());
            match SnapshotHeader::decode(&words) {
                Some(h)
                    if h.generation == job.header.generation
                        && h.state == SnapshotState::Writing
                        && self.now.saturating_sub(job.started_ns) <= self.cfg.snapshot_wait_ns =>
                {
                    return;
                }
                _ => self.recovery.job = None,
            }
        }
        for p in self.others() {
            let req = self.peers[p.index()].row.snapshot_request;
            if req.from != Some(self.me) || req.generation == self.recovery.served[p.index()] {
                continue;
            }
            self.recovery.served[p.index()] = req.generation;
            self.start_snapshot(req.generation);
            return;
        }
    }

    /// A member asks us for a snapshot we have not started yet, or one is
    /// being written.
    pub(super) fn snapshot_wanted_of_us(&self) -> bool {
        self.recovery.job.is_some()
            || self.others().any(|p| {
                let req = self.peers[p.index()].row.snapshot_request;
                req.from == Some(self.me) && req.generation != self.recovery.served[p.index()]
            })
    }

    /// Writes the header ("writing") and the session table image, and asks
    /// the host for the state machine's bytes.
    fn start_snapshot(&mut self, generation: u64) {
        let sessions_bytes = self.layout.sessions_bytes;
        let mut header = SnapshotHeader {
            generation,
            state: SnapshotState::Writing,
            apply_index: self.apply_index,
            apply_pos: self.apply_pos,
            last_term: self.last_applied_term,
            sessions_bytes,
            sm_bytes: 0,
            payload_checksum: 0,
            configuration: self.applied_configuration.encode(),
            config_index: self.applied_config_index,
        };
        crate::mem::write_words(&self.mem, self.layout.snapshot_header(), &header.encode());
        if sessions_bytes > self.layout.snapshot_bytes - SnapshotHeader::PAYLOAD_OFFSET {
            header.state = SnapshotState::TooLarge;
            crate::mem::write_words(&self.mem, self.layout.snapshot_header(), &header.encode());
            return;
        }
        let mut checksum = StreamChecksum::new();
        let mut offset = 0;
        while offset < sessions_bytes {
            let n = (sessions_bytes - offset).min(self.payload.len() as u64) as usize;
            self.mem.read(
                crate::fabric::Addr::new(RegionId::Sessions, offset),
                &mut self.payload[..n],
            );
            checksum.bytes(&self.payload[..n]);
            self.mem
                .write(self.layout.snapshot_payload(offset), &self.payload[..n]);
            offset += n as u64;
        }
        self.recovery.job = Some(SnapshotJob {
            header,
            started_ns: self.now,
            checksum,
        });
        self.counters.snapshots_served += 1;
        self.push_event(Event::SnapshotWanted { generation });
    }

    /// Writes the state machine's bytes of the snapshot asked for by the
    /// last [`Event::SnapshotWanted`], as of the step that emitted it, and
    /// marks the snapshot complete (or too large). The host calls it before
    /// the node's next step, or in a fork of its process (only the
    /// snapshot region is written, through the memory handle). Returns the
    /// bytes written, or `None` when there is nothing to write or it did
    /// not fit.
    pub fn write_snapshot(&self) -> Option<u64> {
        let job = self.recovery.job?;
        let mut header = job.header;
        let start = SnapshotHeader::PAYLOAD_OFFSET + header.sessions_bytes;
        let end = self.layout.snapshot_bytes;
        let mut sink = MemorySink::new(
            &self.mem,
            crate::fabric::Addr::new(RegionId::Snapshot, start),
            end,
            job.checksum,
        );
        let fitted = self.sm.snapshot(&mut sink).is_ok();
        let (written, checksum) = sink.finish();
        if fitted {
            header.state = SnapshotState::Complete;
            header.sm_bytes = written;
            header.payload_checksum = checksum;
        } else {
            header.state = SnapshotState::TooLarge;
        }
        crate::mem::write_words(&self.mem, self.layout.snapshot_header(), &header.encode());
        fitted.then_some(written)
    }
}
