//! The backup-memory engine (MacR §III, issue 16): the primary applies
//! each write to its own store and WRITEs the bytes that changed (the
//! write's [`Plan`]) into every backup's copy; a backup's CPU stays
//! dormant except for the rare write whose allocator changes are spread
//! too wide, which is forwarded to it and replayed ([`Store::replay`]).
//!
//! Who is primary comes from the views (the driver passes each newer
//! one, [`BackupEngine::follow_view`], and says when this member may
//! serve under its lease, [`BackupEngine::set_serving`]).
//!
//! * **Backup.** Grants its store region to the member its log engine
//!   grants its log to (the view's primary) and revokes the previous
//!   one's (the revoke is the fence: what the old primary executed is
//!   placed once it completed). Polls its mailbox for forwarded writes,
//!   one word per step.
//! * **Take-over.** Revokes every other member's access to its own
//!   region, then recovers its store (cross-validation, phantoms
//!   reclaimed, index rebuilt, [`Store::recover`]), then copies the used
//!   part of its region to every backup of the view (they may hold
//!   another prefix of the old primary's WRITEs) before it writes again.
//! * **Primary.** One write at a time: its plan goes to every backup of
//!   the view and to any member being copied; the client hears once every
//!   WRITE completed and every backup of the view holds a copy that
//!   includes the write (a backup whose WRITE failed is copied anew
//!   first, or dropped by the next view). Reads wait for no write in
//!   flight (a read must never see what a successor may lack).
//! * **Copies** (MacR §III-E1, bulk synchronisation): the used part of
//!   the region, `sync_chunk_bytes` per WRITE, a few in flight. Writes
//!   and copy WRITEs take turns (a WRITE's source must not change until
//!   it completed), and a member being copied receives every write's plan
//!   too: on one connection WRITEs execute in order, so each byte ends
//!   with its newest value.
//!
//! The mailbox (the start of the region): word 0 is the sequence number
//! of the last forwarded write, word 1 the one this member replayed
//! (shifted left once, bit 0 set when the replay failed), which the
//! primary READs. Line 1 holds the forwarded write's header, then its key
//! and value follow.

use super::{
    Audit, Effect, Geometry, RecoveryReport, SessionRecord, Store, StoreParams, LINE_BYTES,
};
use crate::checksum::Checksum;
use crate::engine::Engine;
use crate::fabric::{
    Access, Action, Addr, Channel, Completion, FabricError, MemberId, Op, RegionId, WorkRequest,
    WrId, MAX_MEMBERS,
};
use crate::kv::{KvOp, KvReply};
use crate::mem::Memory;
use heapless::Deque;

/// The replicated region: mailbox, then the store.
pub const STORE_REGION: RegionId = RegionId(16);
/// Local memory: the store's index and bitmaps, landing words for READs.
pub const STORE_LOCAL_REGION: RegionId = RegionId(17);

/// Actions queued at most (a write's plan to every backup, forwards).
const ACTION_QUEUE_CAP: usize = 128;
/// Copy WRITEs in flight per member at most.
pub const SYNC_IN_FLIGHT_MAX: u32 = 4;

const DOMAIN_FORWARD: u64 = 0x4657_4452; // "FWDR"
/// The forwarded write's header (two lines from offset 64), then its key
/// and value.
const FORWARD_HEADER_WORDS: usize = 16;
const FORWARD_BODY_OFFSET: u64 = 3 * LINE_BYTES;
/// Mailbox word 2: where a copy into this member's store stands
/// ([`StoreCopy`]), written by the copying primary: first "under way",
/// last (after every chunk: a connection executes WRITEs in order)
/// "whole".
const WORD_COPY: u64 = 16;
const COPY_UNDER_WAY: u64 = 2;
const COPY_WHOLE: u64 = 1;
/// Local words after the landing words: 0, 0, [`COPY_UNDER_WAY`] (a copy's
/// first WRITE, to mailbox words 0 to 2), then [`COPY_WHOLE`] (its last).
const COPY_MARKS_WORDS: u64 = 4;

/// The header word naming the forwarding member (its id + 1).
const WORD_SENDER: usize = 13;
const KIND_PLAN: u64 = 0;
const KIND_SYNC: u64 = 1;
const KIND_FORWARD: u64 = 2;
const KIND_ACK_READ: u64 = 3;

/// The engine's sizes and knobs, from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupConfig {
    /// This member.
    pub me: MemberId,
    /// Members of the group.
    pub member_count: u8,
    /// The store.
    pub params: StoreParams,
    /// Forward a write whose allocator changes span more separate
    /// structures than this (MacR §III-C).
    pub forward_threshold: u8,
    /// Bytes of one copy WRITE.
    pub sync_chunk_bytes: u32,
    /// Wait before a broken connection is re-established.
    pub reconnect_backoff_ns: u64,
    /// A member of the view that holds a forwarded write back this long
    /// (its CPU does not replay: a zombie) is dropped from the view (the
    /// log engine's `leader_quorum_timeout_ns`, its rule for members that
    /// hold commits back).
    pub hold_back_timeout_ns: u64,
    /// A deliberately broken rule (simulator mutation tests).
    #[cfg(feature = "mutation-testing")]
    pub mutation: crate::config::Mutation,
}

impl BackupConfig {
    /// The engine's part of a member's configuration.
    pub fn from_config(config: &crate::config::Config) -> BackupConfig {
        BackupConfig {
            me: config.self_id,
            member_count: config.member_count,
            params: config.backup_store_params(),
            forward_threshold: config.backup_forward_threshold,
            sync_chunk_bytes: config.backup_sync_chunk_bytes,
            reconnect_backoff_ns: config.reconnect_backoff_ns,
            hold_back_timeout_ns: config.leader_quorum_timeout_ns,
            #[cfg(feature = "mutation-testing")]
            mutation: config.mutation,
        }
    }
}

/// Where things are in the two regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupLayout {
    /// The store's geometry.
    pub geo: Geometry,
    /// Bytes of the mailbox (the store starts there).
    pub mailbox_bytes: u64,
    /// Bytes of the replicated region.
    pub region_bytes: u64,
    /// Offset of the READ landing words (one per member) in local memory,
    /// then a word that stays 0 (the source of a copy's first WRITE).
    pub landing_offset: u64,
    /// Bytes of local memory.
    pub local_bytes: u64,
}

impl BackupLayout {
    /// The layout for `config`, `None` outside backup-memory mode (or
    /// with store parameters the configuration's check refuses).
    pub fn for_config(config: &crate::config::Config) -> Option<BackupLayout> {
        if config.mode != crate::config::Mode::BackupMemory {
            return None;
        }
        config
            .backup_store_params()
            .geometry()
            .ok()
            .map(BackupLayout::new)
    }

    /// Words of the layout hash: members whose stores differ in shape
    /// must not connect.
    pub fn hash_words(&self) -> [u64; 3] {
        [self.geo.hash(), self.mailbox_bytes, self.local_bytes]
    }

    /// The two regions.
    pub fn regions(&self) -> [crate::layout::RegionSpec; 2] {
        [
            crate::layout::RegionSpec {
                id: STORE_REGION,
                bytes: self.region_bytes,
                remote: crate::layout::RemoteAccess::Granted,
            },
            crate::layout::RegionSpec {
                id: STORE_LOCAL_REGION,
                bytes: self.local_bytes,
                remote: crate::layout::RemoteAccess::Local,
            },
        ]
    }

    /// Lays the regions out.
    pub fn new(geo: Geometry) -> BackupLayout {
        let body = u64::from(geo.params.key_bytes_max) + u64::from(geo.params.value_bytes_max);
        let mailbox_bytes = FORWARD_BODY_OFFSET + body.div_ceil(LINE_BYTES) * LINE_BYTES;
        let landing_offset = geo.local_bytes;
        BackupLayout {
            geo,
            mailbox_bytes,
            region_bytes: mailbox_bytes + geo.region_bytes,
            landing_offset,
            local_bytes: (landing_offset + 8 * MAX_MEMBERS as u64 + 8 * COPY_MARKS_WORDS)
                .div_ceil(LINE_BYTES)
                * LINE_BYTES,
        }
    }
}

/// Where a copy into a member's own store stands (its mailbox's copy
/// word, written by the primary that copies it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreCopy {
    /// Never copied in this process: the store is what it was formatted
    /// with and then written into (whole for a member of the group's first
    /// view, empty for a process that took a restarted member's place).
    Never,
    /// A copy began and has not finished: the store is torn.
    UnderWay,
    /// The last copy finished: the store was whole then.
    Whole,
}

/// What this member does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupRole {
    /// Holds a copy; its CPU replays forwarded writes only.
    Backup,
    /// Named primary: revoking, recovering, copying to the backups.
    TakingOver,
    /// Serves.
    Primary,
}

/// Where a member's copy stands (at the primary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyState {
    /// Its copy holds every write acknowledged.
    Synced,
    /// It must be copied before its copy counts.
    Needed,
    /// Being copied: the next offset to WRITE, the end.
    Copying {
        /// Next offset of the region.
        next: u64,
        /// End of the used part when the copy began.
        end: u64,
    },
}

#[derive(Clone, Copy, Debug)]
struct Peer {
    copy: CopyState,
    down: bool,
    /// Work requests of ours in flight to it.
    in_flight: u32,
    /// A copy WRITE or write WRITE failed since the copy began.
    failed: bool,
    reconnect: bool,
    retry_at_ns: u64,
    /// Forwarded write awaiting its replay: its sequence number.
    forward_waiting: Option<u64>,
    /// When that forward was posted.
    forward_posted_ns: u64,
    /// Forwarded writes in a row it did not replay in time (its CPU may
    /// have stopped), and when a copy to it may begin again (backed off,
    /// so that a zombie is not copied over and over).
    hold_backs: u32,
    copy_after_ns: u64,
    /// An ack READ to post.
    ack_read_due: bool,
    /// When the copy began, and its bytes (status).
    copy_started_ns: u64,
}

impl Peer {
    const fn new() -> Peer {
        Peer {
            copy: CopyState::Needed,
            down: false,
            in_flight: 0,
            failed: false,
            reconnect: false,
            retry_at_ns: 0,
            forward_waiting: None,
            forward_posted_ns: 0,
            hold_backs: 0,
            copy_after_ns: 0,
            ack_read_due: false,
            copy_started_ns: 0,
        }
    }
}

/// The write in flight at the primary.
#[derive(Clone, Copy, Debug)]
struct Pending {
    client_id: u64,
    request_id: u64,
    reply: KvReply,
}

/// Counters (status).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackupCounters {
    /// Writes replicated by WRITEs alone.
    pub writes_zero_copy: u64,
    /// Writes forwarded to the backups' CPUs.
    pub writes_forwarded: u64,
    /// Writes that changed nothing and carried no session (nothing to
    /// replicate; with a session, the record of the reply is replicated).
    pub writes_unchanged: u64,
    /// Writes replicated (both paths) and answered.
    pub writes_answered: u64,
    /// Forwarded writes this member replayed as a backup.
    pub replays: u64,
    /// Replays refused (the copy differed; copied anew).
    pub replay_failures: u64,
    /// Copies completed to other members.
    pub copies_done: u64,
    /// Bytes WRITEn by copies.
    pub copy_bytes: u64,
    /// Take-overs completed.
    pub takeovers: u64,
    /// WRITEs that failed.
    pub write_errors: u64,
}

/// A snapshot for status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupStatus {
    /// The role.
    pub role: BackupRole,
    /// The view followed: epoch, primary, members.
    pub view: Option<(u64, MemberId, u64)>,
    /// Keys held.
    pub keys: u64,
    /// Bytes of the region in use (metadata and carved slabs).
    pub used_bytes: u64,
    /// Per member (primary): its copy's state.
    pub copies: [Option<CopyState>; MAX_MEMBERS],
    /// The last take-over's findings.
    pub recovery: Option<RecoveryReport>,
    /// A full scan of the store right after the last take-over's
    /// recovery (phantoms, dangling entries, conflicts: all 0 when the
    /// recovery did its job).
    pub audit: Option<Audit>,
    /// Counters.
    pub counters: BackupCounters,
}

/// A write taken by [`BackupEngine::start_write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// Applied; its reply comes out of [`BackupEngine::poll_reply`] once
    /// replicated.
    Applied,
    /// A retry of the client's last write, already applied: its reply.
    Duplicate(KvReply),
    /// Older than the client's last write (superseded).
    Stale,
}

/// Why a write was not started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartError {
    /// Not the serving primary: the view's primary, if known.
    NotPrimary(Option<MemberId>),
    /// A write, a copy or a take-over is under way: try again after the
    /// next step.
    Busy,
}

/// The backup-memory engine of one member.
pub struct BackupEngine<M: Memory> {
    cfg: BackupConfig,
    lay: BackupLayout,
    mem: M,
    store: Store<M>,
    now: u64,
    role: BackupRole,
    /// The view followed: epoch, primary, members (a bit per id).
    view: Option<(u64, MemberId, u64)>,
    /// Members counted besides the view's (a bit per id): those of a
    /// view the primary asked for and that may still be decided (the log
    /// engine's commit members, through the driver).
    counted_extra: u64,
    /// Members last reported synced to the log engine, which may add
    /// them to a view on that word ([`BackupEngine::report_synced_members`]).
    reported_synced: u64,
    serving: bool,
    /// Backup: the member we granted access to.
    granted_to: Option<MemberId>,
    /// The term of the view that named this member primary last.
    reign_term: Option<u64>,
    /// Revokes not yet confirmed (a bit per member): a take-over's, or a
    /// backup's of its previous grantee.
    revokes_due: u64,
    /// Backup: the grant of `granted_to` waits for `revokes_due`.
    grant_due: bool,
    /// Take-over: revokes that failed, posted again next step.
    revokes_retry: u64,
    peers: [Peer; MAX_MEMBERS],
    actions: Deque<Action, ACTION_QUEUE_CAP>,
    pending: Option<Pending>,
    /// Versions of writes (never 0; a take-over starts above the
    /// recovered maximum).
    next_version: u64,
    /// Sequence numbers of forwarded writes.
    forward_seq: u64,
    /// Backup: the last forwarded write replayed.
    replayed_seq: u64,
    recovery: Option<RecoveryReport>,
    audit: Option<Audit>,
    counters: BackupCounters,
    wr_seq: u64,
}

fn wr_id(kind: u64, peer: MemberId, seq: u64) -> WrId {
    WrId((kind << 53) | (u64::from(peer.0) << 45) | (seq & ((1 << 45) - 1)))
}

fn forward_checksum(words: &[u64; FORWARD_HEADER_WORDS], body: &[u8]) -> u64 {
    let mut c = Checksum::new(DOMAIN_FORWARD);
    for w in &words[..FORWARD_HEADER_WORDS - 1] {
        c.word(*w);
    }
    c.bytes(body);
    c.finish()
}

fn wr_kind(id: WrId) -> u64 {
    (id.0 >> 53) & 0x7
}

impl<M: Memory + Clone> BackupEngine<M> {
    /// The engine over `mem` (its two regions laid out by
    /// [`BackupLayout`]); the store is formatted empty (a member that
    /// joins is copied before it counts).
    pub fn new(cfg: BackupConfig, lay: BackupLayout, mem: M) -> BackupEngine<M> {
        let store = Store::format(
            mem.clone(),
            lay.geo,
            Addr::new(STORE_REGION, lay.mailbox_bytes),
            Addr::new(STORE_LOCAL_REGION, 0),
        );
        for w in 0..lay.mailbox_bytes / 8 {
            mem.store_u64(Addr::new(STORE_REGION, 8 * w), 0);
        }
        let marks = lay.landing_offset + 8 * MAX_MEMBERS as u64;
        for (i, w) in [0, 0, COPY_UNDER_WAY, COPY_WHOLE].iter().enumerate() {
            mem.store_u64(Addr::new(STORE_LOCAL_REGION, marks + 8 * i as u64), *w);
        }
        #[cfg(feature = "mutation-testing")]
        let store = {
            let mut store = store;
            store.entry_before_item =
                cfg.mutation == crate::config::Mutation::BackupEntryBeforeItem;
            store
        };
        BackupEngine {
            cfg,
            lay,
            mem,
            store,
            now: 0,
            role: BackupRole::Backup,
            view: None,
            counted_extra: 0,
            reported_synced: 0,
            serving: false,
            granted_to: None,
            reign_term: None,
            revokes_due: 0,
            grant_due: false,
            revokes_retry: 0,
            peers: [Peer::new(); MAX_MEMBERS],
            actions: Deque::new(),
            pending: None,
            next_version: 1,
            forward_seq: 0,
            replayed_seq: 0,
            recovery: None,
            audit: None,
            counters: BackupCounters::default(),
            wr_seq: 0,
        }
    }
}

impl<M: Memory> BackupEngine<M> {
    /// The role.
    pub fn role(&self) -> BackupRole {
        self.role
    }

    /// The store (reads at the primary, checkers).
    pub fn store(&self) -> &Store<M> {
        &self.store
    }

    /// Members whose copy holds every acknowledged write (bit per id; the
    /// primary's own included while it serves): only they may be added
    /// to a view. A member with WRITEs or a forwarded write of ours in
    /// flight is not among them until they completed.
    pub fn synced_members(&self) -> u64 {
        if self.role != BackupRole::Primary {
            return 0;
        }
        let mut mask = 1 << self.cfg.me.0;
        for m in 0..usize::from(self.cfg.member_count) {
            let p = &self.peers[m];
            if p.copy == CopyState::Synced
                && !p.down
                && p.in_flight == 0
                && p.forward_waiting.is_none()
            {
                mask |= 1 << m;
            }
        }
        mask
    }

    /// [`BackupEngine::synced_members`], for the log engine, which may add
    /// them to a view on this word: until the next report, a write is
    /// answered only once every member reported holds it too (or was
    /// found lacking it and is reported no more).
    pub fn report_synced_members(&mut self) -> u64 {
        self.reported_synced = self.synced_members() & !(1 << self.cfg.me.0);
        self.reported_synced | (self.synced_members() & (1 << self.cfg.me.0))
    }

    /// A status snapshot.
    pub fn status(&self) -> BackupStatus {
        let mut copies = [None; MAX_MEMBERS];
        if self.role != BackupRole::Backup {
            for (m, c) in copies
                .iter_mut()
                .enumerate()
                .take(usize::from(self.cfg.member_count))
            {
                if m != self.cfg.me.index() {
                    *c = Some(self.peers[m].copy);
                }
            }
        }
        BackupStatus {
            role: self.role,
            view: self.view,
            keys: self.store.counters().keys,
            // (A backup's control word is whatever its primary wrote last.)
            used_bytes: self.lay.mailbox_bytes
                + self.lay.geo.used_bytes(
                    self.store
                        .slabs_carved()
                        .min(self.lay.geo.params.slab_count),
                ),
            copies,
            recovery: self.recovery,
            audit: self.audit,
            counters: self.counters,
        }
    }

    fn others(&self) -> impl Iterator<Item = MemberId> + '_ {
        (0..self.cfg.member_count)
            .map(MemberId)
            .filter(|&m| m != self.cfg.me)
    }

    fn view_members(&self) -> u64 {
        self.view.map_or(0, |(_, _, m)| m)
    }

    /// Follows a newer decided view: who is primary, whose copies count.
    ///
    /// `term` is the primary's reign (views of one term only add or drop
    /// members). A primary named again in another term took over anew:
    /// another may have led in between (a view it never learnt), writing
    /// into the copies it counts as synced, so it recovers and copies
    /// again.
    pub fn follow_view(
        &mut self,
        now_ns: u64,
        epoch: u64,
        primary: MemberId,
        term: u64,
        members: u64,
    ) {
        self.now = now_ns;
        if self.view.is_some_and(|(e, _, _)| e >= epoch) {
            return;
        }
        self.view = Some((epoch, primary, members));
        let same_reign = primary == self.cfg.me && self.reign_term == Some(term);
        if self.role != BackupRole::Backup && !same_reign {
            self.step_down();
        }
        if primary == self.cfg.me {
            self.reign_term = Some(term);
        }
    }

    /// A backup grants its store to the member its log engine grants its
    /// log to (the store is fenced exactly as the log is: DARE's and the
    /// views' rules decide it once, and a restarted member that has not
    /// learnt a view yet follows the primary whose heartbeats it sees).
    /// The old grantee's access ends before the new one's begins (the
    /// fabric completes what it executed: the fence).
    pub fn follow_grant(&mut self, now_ns: u64, grantee: Option<MemberId>) {
        self.now = now_ns;
        if self.role != BackupRole::Backup || grantee == self.granted_to {
            return;
        }
        if grantee == Some(self.cfg.me) {
            return;
        }
        if let Some(old) = self.granted_to {
            self.revokes_due |= 1 << old.0;
            self.push_action(Action::SetAccess {
                peer: old,
                region: STORE_REGION,
                access: Access::Revoked,
            });
        }
        // The new grant waits until the old grantee's revoke is confirmed
        // (`step`): a copy WRITE it had started may still be landing (a
        // stopped writer), and the new primary's copy must come after it.
        self.grant_due = grantee.is_some();
        self.granted_to = grantee;
    }

    /// Whether this member may serve as the view's primary now (its view
    /// names it and its lease on the view is active). A member that stops
    /// serving answers nothing more.
    pub fn set_serving(&mut self, now_ns: u64, serving: bool) {
        self.now = now_ns;
        let named = self.view.is_some_and(|(_, p, _)| p == self.cfg.me);
        let serving = serving && named;
        if serving == self.serving {
            return;
        }
        self.serving = serving;
        if !serving {
            // Lease gone: nothing is answered meanwhile. The write in
            // flight stays in flight: it is applied to our store, so
            // forgetting it would let its retry be answered from our own
            // session record (and reads see it) while no backup may hold
            // it. If the lease comes back in the same reign, its WRITEs
            // completed or their failures were handled and it is
            // answered; if another primary follows, we step down.
            return;
        }

        if self.role == BackupRole::Backup {
            self.role = BackupRole::TakingOver;
            self.revokes_due = 0;
            self.revokes_retry = 0;
            self.grant_due = false;
            // Our own region is ours alone from now on.
            self.granted_to = None;
            for p in self
                .others()
                .collect::<heapless::Vec<MemberId, MAX_MEMBERS>>()
            {
                self.revokes_due |= 1 << p.0;
                self.push_action(Action::SetAccess {
                    peer: p,
                    region: STORE_REGION,
                    access: Access::Revoked,
                });
            }
            for p in &mut self.peers {
                p.copy = CopyState::Needed;
                p.failed = false;
                p.forward_waiting = None;
                p.ack_read_due = false;
            }
            self.recovery = None;
        }
    }

    fn step_down(&mut self) {
        self.role = BackupRole::Backup;
        self.serving = false;
        self.pending = None;
        self.recovery = None;
    }

    fn push_action(&mut self, a: Action) {
        self.actions
            .push_back(a)
            .expect("the action queue is drained after every call");
    }

    fn post(&mut self, kind: u64, peer: MemberId, op: Op) {
        self.wr_seq += 1;
        let wr = WorkRequest {
            wr_id: wr_id(kind, peer, self.wr_seq),
            peer,
            op,
            notify: false,
        };
        self.peers[peer.index()].in_flight += 1;
        self.push_action(Action::Post(wr));
    }

    /// Whether a write may start now (see [`BackupEngine::start_write`]):
    /// the serving primary, no write in flight, no copy WRITE in flight,
    /// every WRITE to a synced member completed (the next write changes
    /// the WRITEs' source) and every member counted holds a synced copy.
    pub fn ready(&self) -> bool {
        self.readable()
            && !self.copy_in_flight()
            && self.others().all(|p| {
                let peer = &self.peers[p.index()];
                peer.copy != CopyState::Synced || peer.in_flight == 0
            })
    }

    /// Whether a read (or a retry answered from its session record) may be
    /// answered now: the primary, recovered, serving, with no write in
    /// flight, and every member counted holding a synced copy. Right
    /// after a take-over the recovered store may hold the last write of
    /// the old primary, which the other members may lack: nothing of it
    /// is shown before they hold it too.
    pub fn readable(&self) -> bool {
        self.role == BackupRole::Primary
            && self.serving
            && self.pending.is_none()
            && self.counted_synced()
    }

    /// Members whose copy counts (a bit per id, this one excluded): the
    /// followed view's and those of a view asked for.
    pub fn counted(&self) -> u64 {
        (self.view_members() | self.counted_extra) & !(1 << self.cfg.me.0)
    }

    /// Every member counted holds a synced copy.
    fn counted_synced(&self) -> bool {
        let counted = self.counted();
        self.others().all(|p| {
            let peer = &self.peers[p.index()];
            counted & (1 << p.0) == 0 || (peer.copy == CopyState::Synced && !peer.down)
        })
    }

    /// The driver: the members the log engine counts in its commits (the
    /// decided view's and those of a view asked for, a bit per id). A
    /// member among them is never copied (a copy tears its store while it
    /// runs, and a member of a view may take over).
    pub fn set_counted_members(&mut self, now_ns: u64, members: u64) {
        self.now = now_ns;
        self.counted_extra = members;
    }

    /// Primary: the members to drop from the view so that they can be
    /// copied (a bit per id). A member whose copy is not synced may not
    /// be copied while a view counts it (see
    /// [`BackupEngine::set_counted_members`]), and nothing is answered
    /// while one is counted, so it leaves the view, is copied, and comes
    /// back once synced ([`BackupEngine::synced_members`]). While no
    /// member of the view is synced (right after a take-over) and a copy
    /// to another member is under way, the lowest one stays: its store
    /// holds every acknowledged write, so a view always names a member
    /// besides the primary that may take over.
    pub fn members_to_drop(&self) -> u64 {
        if self.role == BackupRole::Backup {
            return 0;
        }
        let counted = self.counted();
        let mut unsynced = 0u64;
        let mut synced = 0u64;
        let mut holding_back = 0u64;
        let mut copying = false;
        for p in self.others() {
            let peer = &self.peers[p.index()];
            let bit = 1u64 << p.0;
            let whole = peer.copy == CopyState::Synced && !peer.down;
            if peer.forward_waiting.is_some()
                && self.now.saturating_sub(peer.forward_posted_ns) > self.cfg.hold_back_timeout_ns
            {
                // Its CPU does not replay (a zombie's memory takes our
                // WRITEs, its CPU nothing): it holds every write back.
                holding_back |= bit;
            }
            if counted & bit != 0 {
                if whole {
                    synced |= bit;
                } else {
                    unsynced |= bit;
                }
            } else if matches!(peer.copy, CopyState::Copying { .. }) && !peer.down {
                copying = true;
            }
        }
        #[cfg(feature = "mutation-testing")]
        if self.cfg.mutation == crate::config::Mutation::BackupCopyInView {
            return 0;
        }
        let holding_back = holding_back & counted;
        if synced != 0 || unsynced == 0 {
            return unsynced | holding_back;
        }
        let lowest = unsynced & unsynced.wrapping_neg();
        holding_back
            | if copying || unsynced != lowest {
                unsynced & !lowest
            } else {
                unsynced
            }
    }

    fn copy_in_flight(&self) -> bool {
        self.others().any(|p| {
            matches!(self.peers[p.index()].copy, CopyState::Copying { .. })
                && self.peers[p.index()].in_flight > 0
        })
    }

    /// The view's primary as a hint for a client.
    pub fn primary_hint(&self) -> Option<MemberId> {
        self.view.map(|(_, p, _)| p).filter(|&p| p != self.cfg.me)
    }

    /// Applies a write and posts its plan (or forwards it) to every
    /// backup; its reply comes out of [`BackupEngine::poll_reply`] once
    /// replicated. `scratch` holds a key and value (limits' bytes).
    pub fn start_write(
        &mut self,
        now_ns: u64,
        client_id: u64,
        request_id: u64,
        op: &KvOp<'_>,
        scratch: &mut [u8],
    ) -> Result<Started, StartError> {
        self.now = now_ns;
        if self.role == BackupRole::Backup || !self.serving {
            return Err(StartError::NotPrimary(self.primary_hint()));
        }
        if !self.ready() {
            return Err(StartError::Busy);
        }
        if let Some(r) = self.store.session(client_id) {
            // Exactly-once: its record is replicated (no write is in
            // flight when one starts).
            if r.request_id == request_id {
                return Ok(Started::Duplicate(r.reply));
            }
            if r.request_id > request_id {
                return Ok(Started::Stale);
            }
        }
        let version = self.next_version;
        self.next_version += 1;
        let applied = self
            .store
            .apply(op, version, Some((client_id, request_id)), scratch);
        self.pending = Some(Pending {
            client_id,
            request_id,
            reply: applied.reply,
        });
        if applied.plan.is_empty() {
            self.counters.writes_unchanged += 1;
            return Ok(Started::Applied);
        }
        let forward = applied.plan.alloc_ranges > self.cfg.forward_threshold
            && applied.effect != Effect::None;
        let mut forwarded = false;
        let base = self.lay.mailbox_bytes;
        for p in self
            .others()
            .collect::<heapless::Vec<MemberId, MAX_MEMBERS>>()
        {
            let peer = self.peers[p.index()];
            if peer.down || peer.copy == CopyState::Needed {
                continue;
            }
            if forward && peer.copy == CopyState::Synced {
                if !forwarded {
                    let record = self.store.session(client_id);
                    self.stage_forward(&applied.effect, record.as_ref(), scratch);
                    forwarded = true;
                }
                let seq = self.forward_seq;
                // The write's header and body, then the sequence word
                // that announces it; then the ack READ.
                let len = self.forward_bytes();
                self.post(
                    KIND_FORWARD,
                    p,
                    Op::Write {
                        local: Addr::new(STORE_REGION, LINE_BYTES),
                        remote: Addr::new(STORE_REGION, LINE_BYTES),
                        len: len as u32,
                    },
                );
                self.post(
                    KIND_FORWARD,
                    p,
                    Op::Write {
                        local: Addr::new(STORE_REGION, 0),
                        remote: Addr::new(STORE_REGION, 0),
                        len: 8,
                    },
                );
                let now = self.now;
                let peer = &mut self.peers[p.index()];
                peer.forward_waiting = Some(seq);
                peer.forward_posted_ns = now;
                peer.ack_read_due = true;
                continue;
            }
            for r in applied.plan.ranges() {
                self.post(
                    KIND_PLAN,
                    p,
                    Op::Write {
                        local: Addr::new(STORE_REGION, base + r.offset),
                        remote: Addr::new(STORE_REGION, base + r.offset),
                        len: r.len as u32,
                    },
                );
            }
        }
        if forwarded {
            self.counters.writes_forwarded += 1;
        } else {
            self.counters.writes_zero_copy += 1;
        }
        Ok(Started::Applied)
    }

    fn forward_bytes(&self) -> u64 {
        let len = self.mem.load_u64(Addr::new(STORE_REGION, LINE_BYTES + 40));
        FORWARD_BODY_OFFSET - LINE_BYTES + len
    }

    /// Writes the forwarded write into our own mailbox (the WRITEs'
    /// source): its header (the effect, the client's record, a
    /// checksum), its key and value, then the sequence word.
    fn stage_forward(
        &mut self,
        effect: &Effect,
        record: Option<&SessionRecord>,
        scratch: &mut [u8],
    ) {
        self.forward_seq += 1;
        let seq = self.forward_seq;
        let (kind, entry, chunk, version, key_len, value_len) = match *effect {
            Effect::Put {
                entry,
                chunk,
                version,
            } => {
                let (k, v) = self
                    .store
                    .item_bytes(chunk, scratch)
                    .expect("the item just written");
                (1u64, entry, chunk, version, k, v)
            }
            Effect::Delete { entry } => (2, entry, 0, 0, 0, 0),
            Effect::None => unreachable!("forwarded only with an effect"),
        };
        let body = key_len + value_len;
        let mut words = [0u64; FORWARD_HEADER_WORDS];
        words[..7].copy_from_slice(&[
            seq,
            kind,
            u64::from(entry),
            u64::from(chunk),
            version,
            body as u64,
            key_len as u64,
        ]);
        if let Some(r) = record {
            let reply = r.reply.to_bytes();
            let mut val = [0u8; 8];
            val.copy_from_slice(&reply[1..]);
            words[7] = 1;
            words[8] = r.client_id;
            words[9] = r.request_id;
            words[10] = u64::from(reply[0]);
            words[11] = u64::from_le_bytes(val);
            words[12] = r.version;
        }
        words[WORD_SENDER] = u64::from(self.cfg.me.0) + 1;
        words[FORWARD_HEADER_WORDS - 1] = forward_checksum(&words, &scratch[..body]);
        let line = Addr::new(STORE_REGION, LINE_BYTES);
        for (i, w) in words.iter().enumerate() {
            // Word 5 (offset 40) is the body length `forward_bytes` reads.
            self.mem.store_u64(line.add(8 * i as u64), *w);
        }
        self.mem.write(
            Addr::new(STORE_REGION, FORWARD_BODY_OFFSET),
            &scratch[..body],
        );
        self.mem.store_u64(Addr::new(STORE_REGION, 0), seq);
    }

    /// Backup: replays a forwarded write if one is announced and whole.
    fn poll_mailbox(&mut self, scratch: &mut [u8]) {
        let seq = self.mem.load_u64(Addr::new(STORE_REGION, 0));
        if seq == 0 || seq == self.replayed_seq {
            return;
        }
        let line = Addr::new(STORE_REGION, LINE_BYTES);
        let mut words = [0u64; FORWARD_HEADER_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = self.mem.load_u64(line.add(8 * i as u64));
        }
        let [wseq, kind, entry, chunk, version, body, key_len, ..] = words;
        let limit = u64::from(self.lay.geo.params.key_bytes_max)
            + u64::from(self.lay.geo.params.value_bytes_max);
        if wseq != seq || body > limit || key_len > body || body as usize > scratch.len() {
            // Not whole yet (placement may lag the sequence word), or
            // garbage: looked at again next step.
            return;
        }
        // Only the member we grant our store to forwards to us: not an
        // earlier primary whose forward we had not replayed when our
        // grant moved on (its successor copies us; replayed on top of
        // that copy it would make ours diverge), and not ourselves (a
        // primary that steps down finds its own last forward staged in
        // its mailbox).
        let sender_ok = self
            .granted_to
            .is_some_and(|g| words[WORD_SENDER] == u64::from(g.0) + 1);
        #[cfg(feature = "mutation-testing")]
        let sender_ok =
            sender_ok || self.cfg.mutation == crate::config::Mutation::BackupReplayAnySender;
        if !sender_ok {
            return;
        }
        let body = body as usize;
        self.mem.read(
            Addr::new(STORE_REGION, FORWARD_BODY_OFFSET),
            &mut scratch[..body],
        );
        if forward_checksum(&words, &scratch[..body]) != words[FORWARD_HEADER_WORDS - 1] {
            return;
        }
        let effect = match kind {
            1 => Effect::Put {
                entry: entry as u32,
                chunk: chunk as u32,
                version,
            },
            _ => Effect::Delete {
                entry: entry as u32,
            },
        };
        let record = if words[7] == 1 {
            let mut reply = [0u8; KvReply::ENCODED_BYTES];
            reply[0] = words[10] as u8;
            reply[1..].copy_from_slice(&words[11].to_le_bytes());
            KvReply::from_bytes(&reply).map(|reply| SessionRecord {
                client_id: words[8],
                request_id: words[9],
                version: words[12],
                effect,
                reply,
            })
        } else {
            None
        };
        let (key, value) = scratch[..body].split_at(key_len as usize);
        let failed = self
            .store
            .replay(&effect, key, value, record.as_ref())
            .is_err();
        if failed {
            self.counters.replay_failures += 1;
        }
        self.counters.replays += 1;
        self.replayed_seq = seq;
        self.mem
            .store_u64(Addr::new(STORE_REGION, 8), (seq << 1) | u64::from(failed));
    }

    /// Everything that needs a scratch buffer (key and value limits'
    /// bytes): a take-over's recovery, a backup's replay, posting copies
    /// and ack READs. Called by the driver every step.
    pub fn step(&mut self, now_ns: u64, scratch: &mut [u8]) {
        self.now = now_ns;
        for m in 0..self.cfg.member_count {
            if self.revokes_retry & (1 << m) != 0 {
                self.revokes_retry &= !(1 << m);
                self.push_action(Action::SetAccess {
                    peer: MemberId(m),
                    region: STORE_REGION,
                    access: Access::Revoked,
                });
            }
        }
        match self.role {
            BackupRole::Backup => {
                if self.grant_due && self.revokes_due == 0 && self.actions.is_empty() {
                    if let Some(g) = self.granted_to {
                        self.push_action(Action::SetAccess {
                            peer: g,
                            region: STORE_REGION,
                            access: Access::Granted,
                        });
                    }
                    self.grant_due = false;
                }
                self.poll_mailbox(scratch)
            }
            BackupRole::TakingOver => {
                if self.revokes_due == 0 && self.actions.is_empty() && self.serving {
                    match self.store.recover(scratch) {
                        Ok(report) => {
                            self.next_version = self.next_version.max(report.version_max + 1);
                            // Forwarded sequence numbers of ours never
                            // repeat an older primary's.
                            let epoch = self.view.map_or(0, |(e, _, _)| e);
                            self.forward_seq = self.forward_seq.max(epoch << 32);
                            self.recovery = Some(report);
                            // The full scan the issue asks for, once per
                            // take-over (bounded like the recovery).
                            self.audit = Some(self.store.audit(scratch));
                            self.role = BackupRole::Primary;
                            self.counters.takeovers += 1;
                        }
                        Err(_) => {
                            // Our copy is no store: we cannot lead. Stay
                            // taking over; the view moves on without us.
                        }
                    }
                }
            }
            BackupRole::Primary => {}
        }
        if self.role == BackupRole::Primary {
            self.post_ack_reads();
            self.post_copies();
        }
    }

    fn post_ack_reads(&mut self) {
        for p in self
            .others()
            .collect::<heapless::Vec<MemberId, MAX_MEMBERS>>()
        {
            let peer = self.peers[p.index()];
            if peer.ack_read_due && !peer.down && peer.in_flight == 0 {
                self.peers[p.index()].ack_read_due = false;
                self.post(
                    KIND_ACK_READ,
                    p,
                    Op::Read {
                        remote: Addr::new(STORE_REGION, 8),
                        local: Addr::new(
                            STORE_LOCAL_REGION,
                            self.lay.landing_offset + 8 * u64::from(p.0),
                        ),
                        len: 8,
                    },
                );
            }
        }
    }

    /// Copies to members that need it: when no write is in flight, the
    /// next chunks (a few per member in flight).
    fn post_copies(&mut self) {
        if self.pending_in_flight() {
            return;
        }
        let used = self.lay.mailbox_bytes + self.lay.geo.used_bytes(self.store.slabs_carved());
        for p in self
            .others()
            .collect::<heapless::Vec<MemberId, MAX_MEMBERS>>()
        {
            let i = p.index();
            if self.peers[i].down || self.peers[i].reconnect {
                continue;
            }
            #[cfg(feature = "mutation-testing")]
            let counted = if self.cfg.mutation == crate::config::Mutation::BackupCopyInView {
                0
            } else {
                self.counted()
            };
            #[cfg(not(feature = "mutation-testing"))]
            let counted = self.counted();
            if self.peers[i].copy == CopyState::Needed
                && self.peers[i].in_flight == 0
                && counted & (1 << p.0) == 0
                && self.peers[i].copy_after_ns <= self.now
            {
                // (Never a member a view counts: its store would be torn
                // while the copy runs, and it may take over. It leaves
                // the view first, `members_to_drop`.)
                // The store only: the mailbox stays the member's own (its
                // replayed word must not go back).
                self.peers[i].copy = CopyState::Copying {
                    next: self.lay.mailbox_bytes,
                    end: used,
                };
                self.peers[i].failed = false;
                self.peers[i].copy_started_ns = self.now;
                // First its mailbox's sequence word goes to 0 (a forwarded
                // write it has not replayed yet, its CPU stopped: that is
                // why it is copied, must not be replayed on top of the copy
                // once it runs again) and its copy word says "under way".
                self.post(
                    KIND_SYNC,
                    p,
                    Op::Write {
                        local: Addr::new(STORE_LOCAL_REGION, self.copy_marks()),
                        remote: Addr::new(STORE_REGION, 0),
                        len: 24,
                    },
                );
            }
            while let CopyState::Copying { next, end } = self.peers[i].copy {
                if next >= end || self.peers[i].in_flight >= SYNC_IN_FLIGHT_MAX {
                    break;
                }
                let len = (end - next).min(u64::from(self.cfg.sync_chunk_bytes));
                self.post(
                    KIND_SYNC,
                    p,
                    Op::Write {
                        local: Addr::new(STORE_REGION, next),
                        remote: Addr::new(STORE_REGION, next),
                        len: len as u32,
                    },
                );
                self.counters.copy_bytes += len;
                self.peers[i].copy = CopyState::Copying {
                    next: next + len,
                    end,
                };
                if next + len >= end {
                    // Last, after every chunk: the copy word says "whole".
                    self.post(
                        KIND_SYNC,
                        p,
                        Op::Write {
                            local: Addr::new(STORE_LOCAL_REGION, self.copy_marks() + 24),
                            remote: Addr::new(STORE_REGION, WORD_COPY),
                            len: 8,
                        },
                    );
                }
            }
        }
    }

    fn copy_marks(&self) -> u64 {
        self.lay.landing_offset + 8 * MAX_MEMBERS as u64
    }

    /// Where a copy into this member's own store stands (a member that
    /// restarted holds an empty store until one is whole: it may not take
    /// over before; the driver tells the log engine).
    pub fn store_copy(&self) -> StoreCopy {
        match self.mem.load_u64(Addr::new(STORE_REGION, WORD_COPY)) {
            0 => StoreCopy::Never,
            COPY_WHOLE => StoreCopy::Whole,
            _ => StoreCopy::UnderWay,
        }
    }

    /// Whether a write's WRITEs (or forward) are still in flight.
    fn pending_in_flight(&self) -> bool {
        self.pending.is_some()
            && self.others().any(|p| {
                let peer = &self.peers[p.index()];
                !matches!(peer.copy, CopyState::Copying { .. })
                    && (peer.in_flight > 0 || peer.forward_waiting.is_some())
            })
    }

    /// Whether the write in flight is held by every member that is
    /// counted (a view's, or one asked for) or that the log engine may
    /// still add to a view on our last report
    /// ([`BackupEngine::report_synced_members`]): their WRITEs completed,
    /// their forwarded write replayed, their copy synced. A synced member
    /// not counted is waited for too, but not for ever: one whose
    /// forwarded write is not replayed within the hold-back timeout (a
    /// zombie's CPU never replays) is copied again before it counts, and,
    /// if reported, the answer waits for the next report, which leaves it
    /// out.
    fn write_replicated(&mut self) -> bool {
        let counted = self.counted();
        let reported = self.reported_synced & !counted;
        let mut done = true;
        #[cfg(feature = "mutation-testing")]
        let early = self.cfg.mutation == crate::config::Mutation::BackupReplyBeforeCompletion;
        #[cfg(not(feature = "mutation-testing"))]
        let early = false;
        for p in self
            .others()
            .collect::<heapless::Vec<MemberId, MAX_MEMBERS>>()
        {
            let bit = 1u64 << p.0;
            let peer = &mut self.peers[p.index()];
            // (A WRITE to a member being copied is not waited for: the
            // copy is synced only once it completed. Nor one to a member
            // to copy again.)
            let waited = counted & bit != 0 || peer.copy == CopyState::Synced;
            if waited && peer.in_flight > 0 && !early {
                done = false;
            }
            if counted & bit != 0 {
                if (peer.forward_waiting.is_some() && !early)
                    || peer.copy != CopyState::Synced
                    || peer.down
                {
                    done = false;
                }
                continue;
            }
            if peer.forward_waiting.is_some() && peer.copy == CopyState::Synced && !early {
                if self.now.saturating_sub(peer.forward_posted_ns) <= self.cfg.hold_back_timeout_ns
                {
                    // A synced member on its way into the view replays
                    // soon: waited for (copying it anew each time would
                    // keep it out for good).
                    done = false;
                    continue;
                }
                // Not counted and its CPU does not replay: it is copied
                // anew, later each time this repeats.
                peer.copy = CopyState::Needed;
                peer.forward_waiting = None;
                peer.ack_read_due = false;
                let backoff = self.cfg.hold_back_timeout_ns << peer.hold_backs.min(6);
                peer.copy_after_ns = self.now.saturating_add(backoff);
                peer.hold_backs = peer.hold_backs.saturating_add(1);
            }
            if reported & bit != 0 && (peer.copy != CopyState::Synced || peer.down) {
                // Reported synced, and the log engine may be adding it
                // on that word: wait until it is told otherwise.
                done = false;
            }
        }
        done
    }

    /// The reply to the write in flight once it is replicated
    /// ([`BackupEngine::write_replicated`], judged now): (client, request,
    /// reply). None while this member does not serve: a reply is given
    /// only while the lease holds at the moment it is given (completions
    /// may have made the write whole while our lease ran out unnoticed: a
    /// stopped process, a late step; and a member may have failed since).
    /// A replicated write is answered once the lease is back, or never if
    /// another primary follows.
    pub fn poll_reply(&mut self) -> Option<(u64, u64, KvReply)> {
        if !self.serving || self.role != BackupRole::Primary || self.pending.is_none() {
            return None;
        }
        if !self.write_replicated() {
            return None;
        }
        let p = self.pending.take().expect("checked");
        self.counters.writes_answered += 1;
        Some((p.client_id, p.request_id, p.reply))
    }

    /// Answers a read at the primary ([`BackupEngine::readable`]): the
    /// value's length, `None` when absent, `Err(len)` when `out` is too
    /// small.
    pub fn read(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, usize> {
        self.store.get(key, out)
    }

    fn member_failed(&mut self, p: MemberId) {
        let peer = &mut self.peers[p.index()];
        peer.failed = true;
        peer.copy = CopyState::Needed;
        peer.forward_waiting = None;
        peer.ack_read_due = false;
        if !peer.reconnect {
            peer.reconnect = true;
            peer.retry_at_ns = self.now.saturating_add(self.cfg.reconnect_backoff_ns);
        }
    }
}

impl<M: Memory> Engine for BackupEngine<M> {
    fn name(&self) -> &'static str {
        "backup"
    }

    fn handle_completion(&mut self, now_ns: u64, c: Completion) {
        self.now = now_ns;
        let i = c.peer.index();
        if i >= MAX_MEMBERS {
            return;
        }
        let peer = &mut self.peers[i];
        peer.in_flight = peer.in_flight.saturating_sub(1);
        if !c.status.is_ok() {
            self.counters.write_errors += 1;
            if self.role == BackupRole::Primary {
                self.member_failed(c.peer);
            }
            return;
        }
        // A copy is done once its last WRITE and every write's WRITE
        // posted to it meanwhile completed, whichever completes last.
        let peer = &mut self.peers[i];
        if let CopyState::Copying { next, end } = peer.copy {
            if next >= end && peer.in_flight == 0 && !peer.failed {
                peer.copy = CopyState::Synced;
                self.counters.copies_done += 1;
            }
        }
        if wr_kind(c.wr_id) == KIND_ACK_READ {
            let word = self.mem.load_u64(Addr::new(
                STORE_LOCAL_REGION,
                self.lay.landing_offset + 8 * c.peer.0 as u64,
            ));
            let peer = &mut self.peers[i];
            if let Some(seq) = peer.forward_waiting {
                if word == seq << 1 {
                    peer.forward_waiting = None;
                    peer.hold_backs = 0;
                } else if word == (seq << 1) | 1 {
                    // Its replay refused: its copy differs.
                    self.member_failed(c.peer);
                } else {
                    peer.ack_read_due = true;
                }
            }
        }
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.now = now_ns;
    }

    fn handle_peer_down(&mut self, now_ns: u64, peer: MemberId) {
        self.now = now_ns;
        if let Some(p) = self.peers.get_mut(peer.index()) {
            p.down = true;
            p.in_flight = 0;
            p.copy = CopyState::Needed;
            p.forward_waiting = None;
            p.ack_read_due = false;
        }
    }

    fn handle_peer_up(&mut self, now_ns: u64, peer: MemberId) {
        self.now = now_ns;
        if let Some(p) = self.peers.get_mut(peer.index()) {
            p.down = false;
            p.copy = CopyState::Needed;
            p.reconnect = true;
            p.retry_at_ns = now_ns;
            p.hold_backs = 0;
            p.copy_after_ns = 0;
        }
        if self.granted_to == Some(peer) {
            // A forwarded write of its predecessor that we have not
            // replayed is never replayed now: the new process takes over
            // anew and copies us.
            self.replayed_seq = self.mem.load_u64(Addr::new(STORE_REGION, 0));
            // A new process: grant it again (its channel is new), once no
            // revoke waits.
            self.grant_due = true;
        }
    }

    fn poll_action(&mut self) -> Option<Action> {
        if let Some(a) = self.actions.pop_front() {
            if let Action::SetAccess {
                peer,
                access: Access::Revoked,
                ..
            } = a
            {
                // Done once executed, unless it comes back failed
                // (`handle_action_failed`, before the next action runs).
                self.revokes_due &= !(1 << peer.0);
            }
            return Some(a);
        }
        for m in 0..usize::from(self.cfg.member_count) {
            let p = &mut self.peers[m];
            if m != self.cfg.me.index()
                && p.reconnect
                && !p.down
                && p.in_flight == 0
                && p.retry_at_ns <= self.now
            {
                p.reconnect = false;
                return Some(Action::Reconnect {
                    peer: MemberId(m as u8),
                    channel: Channel::for_region(STORE_REGION),
                });
            }
        }
        None
    }

    fn handle_action_failed(&mut self, now_ns: u64, action: &Action, error: FabricError) {
        self.now = now_ns;
        match *action {
            Action::Reconnect { peer, .. } => {
                if let Some(p) = self.peers.get_mut(peer.index()) {
                    p.reconnect = true;
                    p.retry_at_ns = now_ns.saturating_add(self.cfg.reconnect_backoff_ns);
                }
            }
            Action::SetAccess {
                peer,
                access: Access::Revoked,
                ..
            } => {
                // Not confirmed: tried again next step (a stopped writer
                // must leave before our copy is ours, or before the next
                // grantee's copy), unless it is gone for good.
                if error != FabricError::PeerGone && error != FabricError::UnknownPeer {
                    self.revokes_due |= 1 << peer.0;
                    self.revokes_retry |= 1 << peer.0;
                }
                return;
            }
            _ => {}
        }
        let _ = error;
    }

    fn next_deadline(&self) -> u64 {
        // A write in flight waits for completions (they wake the loop) or
        // for a copy (due below) or a view (the view engine's deadline):
        // no spinning for it, which on a shared core would starve the
        // members whose heartbeats keep this primary in place.
        if self.role == BackupRole::TakingOver
            || self.revokes_retry != 0
            || (self.role == BackupRole::Backup && self.grant_due)
        {
            return self.now;
        }
        let mut next = u64::MAX;
        if self.pending.is_some() {
            let lacking = self.others().any(|p| {
                let peer = &self.peers[p.index()];
                self.reported_synced & (1 << p.0) != 0
                    && (peer.copy != CopyState::Synced || peer.down)
            });
            if lacking {
                // A write waits for the next report of the synced members.
                next = self.now;
            }
        }
        for m in 0..usize::from(self.cfg.member_count) {
            let p = &self.peers[m];
            if p.reconnect && !p.down {
                next = next.min(p.retry_at_ns);
            }
            // A copy to begin or to go on, an ack to READ: now (a
            // primary's only; a broken connection waits for its retry).
            let copy_due = match p.copy {
                CopyState::Copying { .. } => true,
                CopyState::Needed if p.copy_after_ns > self.now => {
                    if self.role == BackupRole::Primary && !p.down {
                        next = next.min(p.copy_after_ns);
                    }
                    false
                }
                CopyState::Needed => !p.down && !p.reconnect,
                CopyState::Synced => false,
            };
            if self.role == BackupRole::Primary
                && m != self.cfg.me.index()
                && (copy_due || p.ack_read_due)
            {
                next = self.now;
            }
        }
        next
    }
}

#[cfg(test)]
mod tests;
