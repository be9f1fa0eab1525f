//! The multicast engine: Derecho's small-message multicast (SMC) with its
//! atomic (totally ordered) delivery on a shared state table (Derecho §3,
//! "Small messages", §3.2 and §3.4 "Multiple senders").
//!
//! # What moves where
//!
//! Every member of the multicast group's view (at first members
//! `0 .. initial_members`) is a sender and a receiver. Each member's multicast region holds, per
//! sender, a ring of `window` message slots. A sender writes its message
//! `k` into slot `k mod window` of its own ring copy (a store) and of every
//! other member's (one-sided WRITEs from that copy). Each member counts, in
//! its row of a multicast SST (the framework of [`crate::sst`]), how many
//! messages of each sender it has received, in sender order, and how many
//! messages it has delivered; it pushes that row to every peer whenever it
//! changes.
//!
//! # Order: round robin with null messages
//!
//! Message `k` of the sender at position `s` among the view's `n`
//! members has the epoch's global sequence number `k·n + s`. Message `g` is *stable* once every member's row
//! shows it received; a member delivers `g` once it is stable and `g − 1`
//! is delivered. So every member delivers the same messages in the same
//! order, and nobody delivers a message some member may lack. A sender
//! with nothing to send while another sends fills its turns with null
//! messages (counted, never delivered to the application), up to the
//! round the busiest sender reached: the order never waits on an idle
//! sender, and nobody sends while every sender is idle.
//!
//! # Slots, and why a message stays in place
//!
//! ```text
//! | head = k+1 | meta | incarnation | epoch | payload (padded to 8) | checksum | tail = k+1 |
//! meta: payload length (bits 0..32), kind (32..40: 1 data, 2 null), sender (40..48)
//! ```
//!
//! A sender reuses a slot (message `k + window`) only once every member's
//! row shows message `k` delivered, so a message stays in place from its
//! WRITE until its last delivery. Receipt validates it in place (head and
//! tail, the sender's incarnation, the checksum, which catches a WRITE
//! placed out of address order); delivery copies it out and validates the
//! copy again, and a copy that no longer validates (only a faulty sender
//! overwrites a slot early) wedges the engine instead of delivering it.
//!
//! # Incarnations
//!
//! A member's process picks an incarnation number at start
//! ([`crate::Config::incarnation`]) and writes it into its row and its
//! slots. Once a member has seen the row of every member it pins their
//! incarnations: from then on it ignores slots and rows of any other
//! incarnation (a member's counts stay as its pinned incarnation last
//! reported them), and counts a member's row only if it pinned the same
//! set (the row's `view_digest`). It sends only once every member's row
//! shows that same set. A restarted process therefore never joins the
//! running group: it sees the others' digests, made with its
//! predecessor's incarnation, differ from its own, so it never writes a
//! message into their rings, and nothing it reports is counted.
//!
//! # Failures: ending an epoch (Derecho §3.4)
//!
//! The group runs in epochs (views): epoch 0 has every member; each view
//! change ends an epoch and installs the next view. Counters, ring
//! indices and global sequence numbers restart at 0 in every epoch, and
//! a slot carries its epoch (a slot of an ended epoch is never taken).
//!
//! * **Suspicion and wedge.** A member that learns a peer is gone (a death
//!   notice) suspects it: it sets the peer's bit in its row's `suspected`
//!   column and *wedges*: it sends and receives nothing more in this
//!   epoch, so its received counts are final (its row says `wedged`).
//!   Suspicions spread virally: a member copies into its own row every
//!   suspicion it reads in a row of its view, and wedges too. A dead
//!   member's row is frozen as last seen.
//! * **Split-brain guard.** A member that suspects a majority of its view,
//!   or sees itself suspected, stops for good ([`HaltCause`]).
//! * **Leader and ragged trim.** The lowest-ranked unsuspected member
//!   leads. Once every unsuspected member's row shows it wedged and
//!   suspecting every member ranked below the leader (so it will echo no
//!   earlier leader's proposal), the leader proposes a [`Trim`]: the
//!   highest-ballot trim those rows echo, if any (a predecessor's trim
//!   that someone may have acted on), else a fresh one: per sender, the
//!   least any unsuspected member received, and the unsuspected members
//!   as the next view.
//! * **Echo before use.** Members echo their leader's proposal into their
//!   own rows. A trim is acted on only once a majority of the view shows
//!   it (Paxos: a later leader's prepare meets one of those rows, so it
//!   adopts the value); a member that sees a row of the next epoch learns
//!   the decided trim from it.
//! * **Delivery cut.** Acting on a trim, a member delivers, in round-robin
//!   order, every message inside it (each sender's first `counts[s]`),
//!   up to the first one outside, and drops the rest; then it installs the
//!   next view. What any member delivered was stable, so it lies inside
//!   any trim, and every member that installs the next view delivered
//!   the same messages in the ended epoch (virtual synchrony). A sender's
//!   messages the trim left out are counted (`trimmed_own`); the host
//!   sends publications again in the new view (exactly once: a trim is
//!   the same everywhere, so what it left out was delivered nowhere).
//! * Members known dead that a trim still lists (a predecessor's trim,
//!   adopted as is) are suspected at once in the new view, which ends it
//!   in turn.
//! * **Joins.** A process that starts while the group runs past its first
//!   view, or that the view went on without before it ever formed, asks to
//!   join (`joining` in its row). Rows go to every running member, so it
//!   reads the members' rows and they read its. A member that sees a
//!   joiner wedges (wedges spread as suspicions do); the leader's fresh
//!   trim names the joiner and its incarnation and adds it to the next
//!   view (one joiner per view change; a trim adopted from a predecessor
//!   keeps its own). The joiner installs that view once a member's row
//!   shows it installed, with counters from zero. A process known gone
//!   may leave its row in our memory with higher versions than its
//!   successor's first rows: rows of a gone incarnation are forgotten
//!   whenever read.
//!
//! # Persistent mode
//!
//! With [`Config::mcast_persistent`] a message is *locally stable* once
//! the host reports it on disk, not on receipt (Derecho's persistent
//! mode): [`McastEngine::poll_persist`] hands out what was received, the
//! host syncs and returns [`McastEngine::persist_mark`] through
//! [`McastEngine::mark_persisted`]. Our row reports locally stable counts,
//! so stability, window reuse and ragged trims all count only what is on
//! the members' disks.
//!
//! A WRITE that fails (a broken channel) is posted again after
//! `reconnect_backoff_ns`, once the engine has re-established the
//! channel.

use crate::checksum::Checksum;
use crate::config::Config;
use crate::engine::Engine;
use crate::fabric::{
    Action, Addr, Completion, FabricError, MemberId, Op, RegionId, WorkRequest, WrId, MAX_MEMBERS,
};
use crate::layout::{RegionSpec, RemoteAccess};
use crate::mem::Memory;
use crate::sst::{Column, Kind, OwnRow, Schema, Table};

/// The multicast engine's region: rows, staging rows and rings. Every
/// member may write it (its own row and its own ring in each peer).
pub const MCAST_REGION: RegionId = RegionId(8);
/// Largest message payload: SMC is for small messages (Derecho: 1 KB or
/// less; larger ones are RDMC's).
pub const MCAST_PAYLOAD_BYTES_CAP: u32 = 1024;
/// Most slots per sender ring.
pub const MCAST_WINDOW_CAP: u32 = 1 << 16;
/// Bytes of one multicast row (the schema's words, to cache lines).
pub const MCAST_ROW_BYTES: u64 = 256;
/// Work requests in flight to one peer at most (a queue pair's send queue
/// is bounded; more wait in the sender's ring and go out as these
/// complete).
pub const MCAST_INFLIGHT_MAX: u32 = 64;
/// Messages taken from one sender's ring in one call at most.
const RECEIVE_BATCH_MAX: u64 = 256;
/// Global sequence numbers one delivery call looks at at most (nulls are
/// skipped without returning).
const DELIVER_SCAN_MAX: u32 = 1024;

const SLOT_HEADER_BYTES: u64 = 32;
const SLOT_TRAILER_BYTES: u64 = 16;
const KIND_DATA: u64 = 1;
const KIND_NULL: u64 = 2;
/// A large message's reference: its payload travels on RDMC
/// ([`crate::rdmc`]); the slot carries its RDMC index and length.
const KIND_LARGE: u64 = 3;
/// Payload bytes of a large message's reference.
pub const LARGE_REF_BYTES: usize = 16;

const DOMAIN_ROW: u64 = 0x4D43_524F_5701; // "MCROW"
const DOMAIN_SLOT: u64 = 0x4D43_534C_4F54; // "MCSLOT"
const DOMAIN_VIEW: u64 = 0x4D43_5649_4557; // "MCVIEW"

const WR_KIND_SHIFT: u32 = 52;
const WR_SLOT: u64 = 1;
const WR_ROW: u64 = 2;
const WR_VALUE_MASK: u64 = (1 << WR_KIND_SHIFT) - 1;
/// A slot WRITE's work request carries the epoch's low bits above the
/// index, so that a completion from an ended epoch is told apart.
const WR_EPOCH_SHIFT: u32 = 40;
const WR_INDEX_MASK: u64 = (1 << WR_EPOCH_SHIFT) - 1;
const WR_EPOCH_MASK: u64 = (1 << (WR_KIND_SHIFT - WR_EPOCH_SHIFT)) - 1;

/// Received messages per sender (element `s`: messages of the member at
/// rank `s` taken from its ring, in its order).
pub const COL_RECEIVED: Column = Column::new("received", 0, MAX_MEMBERS as u16, Kind::U64);
/// Messages delivered (global sequence numbers, nulls included).
pub const COL_DELIVERED: Column = Column::u64("delivered", 8);
/// The row owner's incarnation (non-zero).
pub const COL_INCARNATION: Column = Column::u64("incarnation", 9);
/// Digest of the owner's view: its epoch, members and their pinned
/// incarnations (0: not started).
pub const COL_VIEW_DIGEST: Column = Column::u64("view_digest", 10);
/// The owner's epoch (view number, from 0).
pub const COL_EPOCH: Column = Column::u64("epoch", 11);
/// Members the owner suspects in its epoch (a bit per member id).
pub const COL_SUSPECTED: Column = Column::u64("suspected", 12);
/// 1 once the owner wedged in its epoch: it sends and receives nothing
/// more in it, so its received counts are final.
pub const COL_WEDGED: Column = Column::u64("wedged", 13);
/// The epoch the trim below ends: equal to the row's epoch, a proposal
/// (the owner's own as leader, or its echo of the leader's); below it,
/// the trim that ended that epoch (decided).
pub const COL_TRIM_EPOCH: Column = Column::u64("trim_epoch", 14);
/// The proposing leader's rank + 1 (0: no trim).
pub const COL_TRIM_BALLOT: Column = Column::u64("trim_ballot", 15);
/// The next view's members (a bit per member id).
pub const COL_TRIM_MEMBERS: Column = Column::u64("trim_members", 16);
/// Per sender, the messages the ending epoch delivers (the ragged trim).
pub const COL_TRIM_COUNTS: Column = Column::new("trim_counts", 17, MAX_MEMBERS as u16, Kind::U64);
/// The member the trim's next view adds (its id + 1; 0: none), and the
/// incarnation it joins with.
pub const COL_TRIM_JOIN: Column = Column::u64("trim_join", 25);
/// See [`COL_TRIM_JOIN`].
pub const COL_TRIM_JOIN_INCARNATION: Column = Column::u64("trim_join_incarnation", 26);
/// 1 while the owner asks to join the running group (a process that
/// started after the group formed, or whose predecessor was removed).
pub const COL_JOINING: Column = Column::u64("joining", 27);
/// Non-zero while the owner restarts from its persistent log (a total
/// restart): the members of its log's last view (a bit per member id; the
/// owner is one). Its row then shows that view's epoch (`epoch`), the
/// messages of it on its disk per sender (`received`) and those it
/// delivered (`delivered`).
pub const COL_RESTART_VIEW: Column = Column::u64("restart_view", 28);
const COLUMNS: [Column; 15] = [
    COL_RECEIVED,
    COL_DELIVERED,
    COL_INCARNATION,
    COL_VIEW_DIGEST,
    COL_EPOCH,
    COL_SUSPECTED,
    COL_WEDGED,
    COL_TRIM_EPOCH,
    COL_TRIM_BALLOT,
    COL_TRIM_MEMBERS,
    COL_TRIM_COUNTS,
    COL_TRIM_JOIN,
    COL_TRIM_JOIN_INCARNATION,
    COL_JOINING,
    COL_RESTART_VIEW,
];
const SCHEMA: Schema = Schema::new("multicast", DOMAIN_ROW, &[29], &COLUMNS);
const _: () = assert!(SCHEMA.row_words() * 8 <= MCAST_ROW_BYTES as usize);

/// The multicast SST's row schema (Derecho's received and delivered
/// counters, and the incarnations that bound them to one group).
pub static MCAST_ROW: Schema = SCHEMA;

const fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

/// Where the multicast engine's memory lies, from the configuration.
///
/// ```text
/// | row 0 .. row n-1 | staging row per peer (n) | ring of sender 0 (window slots) | ... | ring of sender n-1 |
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McastLayout {
    /// The region: [`MCAST_REGION`] for the top-level group, a subgroup's
    /// own ([`crate::subgroup`]).
    pub region: RegionId,
    /// Members of the group (senders and receivers): ranks `0 .. members`.
    pub members: u8,
    /// Slots per sender ring.
    pub window: u64,
    /// Largest payload, rounded up to 8 bytes.
    pub payload_bytes_max: u64,
    /// Bytes of one slot (header, payload, trailer, to 64).
    pub slot_bytes: u64,
    /// Where the staging rows start.
    pub staging_offset: u64,
    /// Where the rings start.
    pub rings_offset: u64,
    /// Bytes of the region.
    pub region_bytes: u64,
}

impl McastLayout {
    /// The layout of a configuration, `None` with multicast off
    /// (`mcast_window = 0`). The configuration is validated by the caller.
    pub fn new(config: &Config) -> Option<McastLayout> {
        if config.mcast_window == 0 {
            return None;
        }
        Some(McastLayout::of_group(
            config,
            config.initial_members,
            MCAST_REGION,
        ))
    }

    /// The layout of a group of `members` (ranks) in `region`, with the
    /// window and slot size of `config` (which has multicast on).
    pub fn of_group(config: &Config, members: u8, region: RegionId) -> McastLayout {
        let n = u64::from(members);
        let window = u64::from(config.mcast_window);
        let payload_bytes_max = round_up(u64::from(config.mcast_payload_bytes_max), 8);
        let slot_bytes = round_up(
            SLOT_HEADER_BYTES + payload_bytes_max + SLOT_TRAILER_BYTES,
            64,
        );
        let staging_offset = n * MCAST_ROW_BYTES;
        let rings_offset = staging_offset + n * MCAST_ROW_BYTES;
        McastLayout {
            region,
            members,
            window,
            payload_bytes_max,
            slot_bytes,
            staging_offset,
            rings_offset,
            region_bytes: rings_offset + n * window * slot_bytes,
        }
    }

    /// The region as the fabric registers it.
    pub fn region(&self) -> RegionSpec {
        RegionSpec {
            id: self.region,
            bytes: self.region_bytes,
            remote: RemoteAccess::Members,
        }
    }

    /// Words that identify the layout (for the layout hash).
    pub fn hash_words(&self) -> [u64; 4] {
        [
            u64::from(self.members),
            self.window,
            self.payload_bytes_max,
            self.slot_bytes,
        ]
    }

    /// `member`'s row.
    pub fn row(&self, member: MemberId) -> Addr {
        Addr::new(self.region, u64::from(member.0) * MCAST_ROW_BYTES)
    }

    /// The staging copy of our row pushed to `peer` (local use only).
    pub fn staging(&self, peer: MemberId) -> Addr {
        Addr::new(
            self.region,
            self.staging_offset + u64::from(peer.0) * MCAST_ROW_BYTES,
        )
    }

    /// The slot of `sender`'s message `index`.
    pub fn slot(&self, sender: MemberId, index: u64) -> Addr {
        Addr::new(
            self.region,
            self.rings_offset
                + (u64::from(sender.0) * self.window + index % self.window) * self.slot_bytes,
        )
    }
}

/// Bytes a slot holding a payload of `len` bytes uses.
const fn slot_used_bytes(len: u64) -> u64 {
    SLOT_HEADER_BYTES + round_up(len, 8) + SLOT_TRAILER_BYTES
}

const fn meta(len: u64, kind: u64, sender: MemberId) -> u64 {
    len | (kind << 32) | ((sender.0 as u64) << 40)
}

/// A large message's reference: (RDMC index, length).
fn large_ref(payload: &[u8]) -> (u64, u64) {
    let word = |i: usize| {
        let mut w = [0u8; 8];
        if let Some(b) = payload.get(8 * i..8 * i + 8) {
            w.copy_from_slice(b);
        }
        u64::from_le_bytes(w)
    };
    (word(0), word(1))
}

fn slot_checksum(head: u64, meta: u64, incarnation: u64, epoch: u64, payload: &[u8]) -> u64 {
    let mut c = Checksum::new(DOMAIN_SLOT);
    c.word(head);
    c.word(meta);
    c.word(incarnation);
    c.word(epoch);
    c.bytes(payload);
    c.finish()
}

/// One delivered message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McastDelivery {
    /// Its sender.
    pub sender: MemberId,
    /// Its index in the sender's stream (nulls count).
    pub index: u64,
    /// Its global sequence number in its epoch (`index · members +` the
    /// sender's position among the view's members).
    pub seq: u64,
    /// The epoch (view) it was sent and delivered in: `(epoch, index)`
    /// names a message of a sender.
    pub epoch: u64,
    /// Delivered while its epoch ended: inside the decided ragged trim
    /// (every member of the next view received it), not because it was
    /// stable in the view.
    pub in_trim: bool,
    /// The sender's incarnation (the one this member pinned).
    pub sender_incarnation: u64,
    /// Payload bytes (copied into the caller's buffer).
    pub len: usize,
    /// A large message: its index among the sender's RDMC messages of
    /// this epoch and its length. Its payload is RDMC's, whole at every
    /// member that delivers it (its reference was stable, or inside the
    /// trim, only once those members' RDMC had it); the caller's buffer
    /// holds the reference.
    pub large: Option<(u64, u64)>,
}

/// A received message to put on disk (persistent mode): the host writes
/// it, syncs, then reports the [`PersistMark`] taken after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McastPersist {
    /// The epoch it was sent in.
    pub epoch: u64,
    /// That epoch's members (a bit per member id).
    pub view: u64,
    /// Its sender.
    pub sender: MemberId,
    /// Its index in the sender's stream of the epoch (nulls count).
    pub index: u64,
    /// A null message (no payload; it still takes its place).
    pub null: bool,
    /// Payload bytes (copied into the caller's buffer).
    pub len: usize,
}

/// How much of each sender's stream of an epoch was handed to the host
/// to persist ([`McastEngine::persist_mark`]); once the host's sync
/// covering them completed, it hands the mark back
/// ([`McastEngine::mark_persisted`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PersistMark {
    /// The epoch.
    pub epoch: u64,
    /// Per sender (member id), messages handed out.
    pub counts: [u64; MAX_MEMBERS],
}

/// Where a member's persistent log left off, for a total restart
/// ([`McastEngine::restart`]): the last view it installed and what of it
/// is on its disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestartPoint {
    /// The last view's epoch.
    pub epoch: u64,
    /// Its members (a bit per member id; this member is one).
    pub view: u64,
    /// Per sender (member id), its messages of that epoch on disk: indices
    /// `0 .. persisted[s]`.
    pub persisted: [u64; MAX_MEMBERS],
    /// Sequence numbers of that epoch the log shows delivered
    /// (`0 .. delivered`).
    pub delivered: u64,
}

impl RestartPoint {
    /// The sequence number of `sender`'s message `index` in the point's
    /// view (saturating; a sender outside the view counts as position 0).
    pub fn seq_of(&self, sender: MemberId, index: u64) -> u64 {
        let n = u64::from(self.view.count_ones()).max(1);
        let below = self.view & ((1u64 << (sender.0 % 64)) - 1);
        index
            .saturating_mul(n)
            .saturating_add(u64::from(below.count_ones()))
    }

    /// The view's members, in rank order.
    fn members(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_MEMBERS).filter(|&m| self.view & (1 << m) != 0)
    }

    /// The first sequence number outside per-sender `counts` (messages
    /// `0 .. counts[s]` of each member `s` of the view).
    fn end_of(&self, counts: &[u64; MAX_MEMBERS]) -> u64 {
        self.members()
            .map(|s| self.seq_of(MemberId(s as u8), counts[s]))
            .min()
            .unwrap_or(0)
    }

    /// Per sender, its messages below sequence number `end`.
    fn counts_below(&self, end: u64) -> [u64; MAX_MEMBERS] {
        let n = u64::from(self.view.count_ones()).max(1);
        let mut counts = [0u64; MAX_MEMBERS];
        for s in self.members() {
            counts[s] = end
                .saturating_sub(self.seq_of(MemberId(s as u8), 0))
                .div_ceil(n);
        }
        counts
    }
}

/// Reads a persistent log's records in order and finds its restart point
/// (hosts keep their own record format; the rule is one): the last view
/// record starts the last view, each sender's messages of it count from
/// index 0 without a gap, and delivered records say how far it was
/// delivered.
#[derive(Clone, Copy, Debug, Default)]
pub struct RestartScan {
    point: Option<RestartPoint>,
}

impl RestartScan {
    /// A view record: a new last view (what came before is forgotten).
    pub fn view(&mut self, epoch: u64, members: u64) {
        self.point = Some(RestartPoint {
            epoch,
            view: members,
            ..RestartPoint::default()
        });
    }

    /// A message record: whether it is the next of its sender in the last
    /// view (the host keeps it for the tail).
    pub fn message(&mut self, epoch: u64, sender: MemberId, index: u64) -> bool {
        match self.point.as_mut() {
            Some(p) if p.epoch == epoch && sender.index() < MAX_MEMBERS => {
                let next = &mut p.persisted[sender.index()];
                let counted = *next == index;
                if counted {
                    *next += 1;
                }
                counted
            }
            _ => false,
        }
    }

    /// A delivered record.
    pub fn delivered(&mut self, epoch: u64, seq: u64) {
        if let Some(p) = self.point.as_mut().filter(|p| p.epoch == epoch) {
            p.delivered = p.delivered.max(seq.saturating_add(1));
        }
    }

    /// The restart point, if the log held a view.
    pub fn point(&self) -> Option<RestartPoint> {
        self.point
    }
}

/// What a restarted member delivers from its own log before the group
/// goes on ([`McastEngine::restart_tail`]): the sequence numbers
/// `from .. to` of epoch `epoch`, whose members were `view` (sequence
/// number `g` is message `g / n` of the view's member at position
/// `g mod n`; nulls are skipped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartTail {
    /// The epoch (the last view of the logs).
    pub epoch: u64,
    /// Its members (a bit per member id).
    pub view: u64,
    /// First sequence number to deliver (what this member's log shows
    /// delivered).
    pub from: u64,
    /// Where the restart cut ends it: every member of the restarted group
    /// delivered exactly `0 .. to` of the epoch.
    pub to: u64,
}

impl RestartTail {
    /// The sender and index of sequence number `seq` of the tail's epoch.
    pub fn at_seq(&self, seq: u64) -> (MemberId, u64) {
        let n = u64::from(self.view.count_ones()).max(1);
        let pos = (seq % n) as u32;
        let mut rest = self.view;
        for _ in 0..pos {
            rest &= rest - 1;
        }
        (MemberId(rest.trailing_zeros() as u8), seq / n)
    }
}

/// The ballot of a restart cut (above every leader's rank + 1): the trim
/// that ends the logs' last view when the whole group restarts.
pub const RESTART_BALLOT: u64 = 0x100;

/// Why a restart point was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartError {
    /// The view is empty, lists members outside the layout, or leaves
    /// this member out (or its epoch is the last one there is).
    View,
    /// The engine already started (restart before the first poll).
    Started,
}

/// Why a message was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// Larger than `mcast_payload_bytes_max`.
    TooLarge,
    /// Not started yet: some member's row was never seen.
    NotStarted,
    /// Every slot of our ring still holds a message some member has not
    /// delivered: try again once deliveries move.
    WindowFull,
    /// The engine wedged (a member is gone, or a sender overwrote a
    /// message before everyone delivered it): nothing more is sent in
    /// this epoch; try again once the next view is installed.
    Wedged,
    /// The engine stopped for good (see [`HaltCause`]).
    Halted,
}

/// Why the engine wedged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WedgeCause {
    /// A member's process is gone.
    PeerDown(MemberId),
    /// A message no longer validated when it was delivered: its sender
    /// overwrote it early.
    SlotOverwritten(MemberId),
    /// Another member's row suspects this member.
    Suspicion(MemberId),
    /// A process asks to join as this member: the epoch ends so that the
    /// next view adds it.
    Join(MemberId),
    /// Another member of the view wedged (a view change it started).
    Wedged(MemberId),
}

/// Why the engine stopped for good (it sends, receives and delivers
/// nothing more; a new process has to join as a new member).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HaltCause {
    /// A member of our view suspects us, or the next view leaves us out.
    Excluded,
    /// A message inside the decided trim is not whole in our ring.
    TrimUnreadable(MemberId),
    /// The decided trim ends before what we already delivered, or holds
    /// more of a sender than we received (only a leader that computed it
    /// from counts that were not final gets there).
    TrimBehind,
    /// The host asked it to leave ([`McastEngine::leave`]): e.g. its
    /// persistent log can no longer be written.
    Left,
}

/// A proposal to end an epoch: Derecho's ragged trim, with the next
/// view's members.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trim {
    /// The epoch it ends.
    pub epoch: u64,
    /// The proposing leader's rank + 1: later leaders rank higher (the
    /// leader is the lowest-ranked unsuspected member, and suspicions only
    /// grow in an epoch), so it orders proposals as Paxos ballots do.
    pub ballot: u64,
    /// The next view's members (a bit per member id).
    pub members: u64,
    /// Per sender (member id), the messages the ending epoch delivers.
    pub counts: [u64; MAX_MEMBERS],
    /// The member the next view adds (`None`: none), and the incarnation
    /// it joins with (its process's).
    pub join: Option<(MemberId, u64)>,
}

impl Trim {
    /// The same decision (members and counts), whoever proposed it.
    fn same_value(&self, other: &Trim) -> bool {
        self.epoch == other.epoch
            && self.members == other.members
            && self.counts == other.counts
            && self.join == other.join
    }
}

/// Counters and state for status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct McastStatus {
    /// The group formed: every member's row shows the incarnations we
    /// pinned.
    pub started: bool,
    /// Why the engine wedged in this epoch, if it did.
    pub wedged: Option<WedgeCause>,
    /// Why the engine stopped for good, if it did.
    pub halted: Option<HaltCause>,
    /// We suspect a majority of our view (we may be the minority side of
    /// a partition): we propose and echo nothing, and only go on if the
    /// others decided a trim that keeps us (Derecho's split-brain guard).
    pub minority: bool,
    /// We ask to join the running group (a process that started after the
    /// group formed): the next view change adds us.
    pub joining: bool,
    /// We restart from our persistent log and wait for every member of
    /// its last view to do so too (or for the cut to be delivered).
    pub restarting: bool,
    /// The current epoch (view number).
    pub epoch: u64,
    /// The view's members (a bit per member id).
    pub view: u64,
    /// Members suspected in this epoch (a bit per member id).
    pub suspected: u64,
    /// The trim that ended the previous epoch, if any.
    pub last_trim: Option<Trim>,
    /// Views installed after the first (epochs ended).
    pub view_changes: u64,
    /// Our own messages the last trims left out (dropped; their sender
    /// sends them again in the next view if it wants them delivered).
    pub trimmed_own: u64,
    /// Our messages, data and null.
    pub sent: u64,
    /// Of which nulls.
    pub sent_nulls: u64,
    /// Messages received per sender.
    pub received: [u64; MAX_MEMBERS],
    /// Global sequence numbers delivered (nulls included).
    pub delivered: u64,
    /// Data messages delivered to the application.
    pub delivered_messages: u64,
    /// Sends refused because the window was full.
    pub window_full: u64,
    /// WRITEs that failed (re-posted after `reconnect_backoff_ns`).
    pub write_errors: u64,
    /// Peer rows refused (other incarnations or another pinned set).
    pub rows_foreign: u64,
}

/// What a member's row last reported, from its pinned incarnation.
#[derive(Clone, Copy, Debug, Default)]
struct PeerRow {
    /// Its incarnation (before we pinned: the latest seen).
    incarnation: u64,
    received: [u64; MAX_MEMBERS],
    delivered: u64,
    digest: u64,
    epoch: u64,
    suspected: u64,
    wedged: bool,
    trim: Option<Trim>,
    joining: bool,
    /// Non-zero while it restarts from its log: its log's last view.
    restart_view: u64,
    /// Gone: its counts stay as they are (Derecho's frozen row).
    frozen: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct PeerPost {
    /// Our messages whose WRITE to this peer was posted (a prefix; moved
    /// back to the first that failed, and up to what the peer reports
    /// received).
    posted: u64,
    /// Work requests in flight to it.
    inflight: u32,
    /// No post before this time (after an error).
    retry_at_ns: u64,
    /// A row push to it is in flight.
    row_inflight: bool,
    /// Version of the last row push it acknowledged.
    row_acked_version: u64,
    /// Its process is gone.
    down: bool,
    /// A WRITE to it failed: re-establish the channel before posting.
    reconnect: bool,
}

/// The multicast engine of one member.
pub struct McastEngine<M: Memory> {
    mem: M,
    lay: McastLayout,
    me: MemberId,
    n: usize,
    incarnation: u64,
    backoff_ns: u64,
    #[cfg(feature = "mutation-testing")]
    mutation: crate::config::Mutation,
    row: OwnRow,
    table: Table,
    /// Pinned incarnations and their digest, once started.
    pinned: Option<([u64; MAX_MEMBERS], u64)>,
    sent: u64,
    received: [u64; MAX_MEMBERS],
    /// Persistent mode: per sender, messages handed to the host to
    /// persist, and those it reported on disk (locally stable).
    persistent: bool,
    handed: [u64; MAX_MEMBERS],
    persisted: [u64; MAX_MEMBERS],
    delivered: u64,
    peers: [PeerPost; MAX_MEMBERS],
    /// Next peer `poll_action` looks at first (fair posting).
    next_peer: usize,
    /// Each member's row as its pinned incarnation last reported it.
    rows: [PeerRow; MAX_MEMBERS],
    /// More deliveries may be due than the last call took.
    deliver_due: bool,
    /// A ring had more messages than one call takes.
    receive_due: bool,
    wedged: Option<WedgeCause>,
    halted: Option<HaltCause>,
    /// We suspect a majority of the view: we wait to learn a trim.
    minority: bool,
    /// We ask to join the running group (not pinned; waiting for a
    /// decided trim that adds us).
    joining: bool,
    /// Per member, the incarnation of a process known gone (its row may
    /// still sit in our memory, with higher versions than its successor's
    /// first rows: it is forgotten whenever read).
    gone_incarnation: [u64; MAX_MEMBERS],
    /// The group formed with us in it at least once (a process that never
    /// got in asks to join instead of stopping).
    ever_formed: bool,
    /// A total restart: where our log left off, while we wait for every
    /// member of its last view.
    restarting: Option<RestartPoint>,
    /// Per member, the restart row its process showed (its incarnation
    /// and restart point), kept once seen: its row moves on to the
    /// restarted view as soon as it delivered its tail.
    restart_rows: [Option<(u64, RestartPoint)>; MAX_MEMBERS],
    /// The restart cut decided, and our tail of it, until the host
    /// delivered the tail from its log.
    restart_cut: Option<(Trim, RestartTail)>,
    /// The host delivered our tail of the restart cut.
    restart_tail_done: bool,
    /// Persistent mode: the view we installed is not on our disk yet, so
    /// our row (which would show it) is not pushed: every view any member
    /// shows is on the disk of the member that showed it first (a total
    /// restart then never cuts an epoch some log shows ended).
    view_unsynced: bool,
    /// The host's RDMC session: its epoch and, per sender, the large
    /// messages whole here.
    large_received: (u64, [u64; MAX_MEMBERS]),
    /// Members of the view a group above this one (a subgroup's top-level
    /// group, [`crate::subgroup`]) removed by a decided view change: gone
    /// for good, they neither echo nor act here any more, so they count
    /// with us toward the majorities a view change needs.
    parent_removed: u64,
    /// The current epoch, its members, and those suspected in it.
    epoch: u64,
    view: u64,
    suspected: u64,
    /// Our row's trim for this epoch: our proposal as leader, or our echo
    /// of the leader's.
    trim: Option<Trim>,
    /// The decided trim this epoch ends with: we deliver up to it, then
    /// install the next view.
    ending: Option<Trim>,
    last_trim: Option<Trim>,
    status: McastStatus,
    now: u64,
}

impl<M: Memory> McastEngine<M> {
    /// The engine of `config.self_id`, or `None` with multicast off or
    /// for a member outside the group (`self_id >= initial_members`).
    pub fn new(config: &Config, memory: M, now_ns: u64) -> Option<Self> {
        let lay = McastLayout::new(config)?;
        McastEngine::with_layout(config, lay, memory, now_ns)
    }

    /// The engine of rank `config.self_id` in the group `lay` describes
    /// (a subgroup's, [`crate::subgroup`]), or `None` for a rank outside
    /// it.
    pub fn with_layout(config: &Config, lay: McastLayout, memory: M, now_ns: u64) -> Option<Self> {
        if config.self_id.0 >= lay.members {
            return None;
        }
        // Zero would read as "no incarnation" in a row.
        let incarnation = config.incarnation.max(1);
        let mut row = OwnRow::new(&MCAST_ROW);
        row.set(&COL_INCARNATION, incarnation);
        let n = usize::from(lay.members);
        let mut e = McastEngine {
            mem: memory,
            lay,
            me: config.self_id,
            n,
            incarnation,
            backoff_ns: config.reconnect_backoff_ns,
            #[cfg(feature = "mutation-testing")]
            mutation: config.mutation,
            row,
            table: Table::new(&MCAST_ROW, n),
            pinned: None,
            sent: 0,
            received: [0; MAX_MEMBERS],
            persistent: config.mcast_persistent,
            handed: [0; MAX_MEMBERS],
            persisted: [0; MAX_MEMBERS],
            delivered: 0,
            peers: [PeerPost::default(); MAX_MEMBERS],
            next_peer: 0,
            rows: [PeerRow::default(); MAX_MEMBERS],
            deliver_due: false,
            receive_due: false,
            wedged: None,
            halted: None,
            minority: false,
            joining: false,
            gone_incarnation: [0; MAX_MEMBERS],
            ever_formed: false,
            restarting: None,
            restart_rows: [None; MAX_MEMBERS],
            restart_cut: None,
            restart_tail_done: false,
            view_unsynced: false,
            large_received: (0, [0; MAX_MEMBERS]),
            parent_removed: 0,
            epoch: 0,
            view: (1u64 << n) - 1,
            suspected: 0,
            trim: None,
            ending: None,
            last_trim: None,
            status: McastStatus::default(),
            now: now_ns,
        };
        e.seal_row();
        Some(e)
    }

    /// The layout.
    pub fn layout(&self) -> &McastLayout {
        &self.lay
    }

    /// Counters and state.
    pub fn status(&self) -> McastStatus {
        McastStatus {
            started: self.formed(),
            wedged: self.wedged,
            halted: self.halted,
            minority: self.minority,
            joining: self.joining,
            restarting: self.restarting.is_some(),
            epoch: self.epoch,
            view: self.view,
            suspected: self.suspected,
            last_trim: self.last_trim,
            sent: self.sent,
            received: self.received,
            delivered: self.delivered,
            ..self.status
        }
    }

    /// Messages received from `sender` (in its order).
    pub fn received(&self, sender: MemberId) -> u64 {
        self.received[sender.index()]
    }

    /// Messages of sender `s` that are locally stable: received
    /// (volatile mode) or on disk (persistent mode). Our row reports it,
    /// and a message is delivered once every member's row shows it.
    fn locally_stable(&self, s: usize) -> u64 {
        #[cfg(feature = "mutation-testing")]
        if self.mutation == crate::config::Mutation::DeliverBeforePersisted {
            return self.received[s];
        }
        if self.persistent {
            self.persisted[s]
        } else {
            self.received[s]
        }
    }

    /// Leaves the group for good: the engine stops, and its row says so
    /// (it suspects itself), so the others end the epoch without it
    /// instead of waiting for counts it will never raise (a persistent
    /// member whose disk failed).
    pub fn leave(&mut self) {
        self.halt(HaltCause::Left);
        self.seal_row();
        self.invariants();
    }

    /// Members (a bit per rank) that the group above this one removed by
    /// a decided view change (a subgroup's top-level group; Derecho ends
    /// its subgroups' epochs from the top-level view). They are suspected
    /// here at once, and count toward the majorities of this group's view
    /// change: a removed member can no longer echo or act on a trim of
    /// ours (it would need the echo of a member the same decided view
    /// kept, which its row would show), so a subgroup of two ends its
    /// epoch without a member the top-level majority removed. Only
    /// removals the group above decided may be passed here, never mere
    /// suspicions.
    pub fn set_parent_removed(&mut self, members: u64) {
        self.parent_removed = members;
    }

    /// Restarts from this member's persistent log after the whole group
    /// failed (Derecho §3.4, "Total failures"): call once, before the
    /// first poll, with where the log left off.
    ///
    /// Our row shows the restart point, and we wait until every member of
    /// the log's last view `L` shows its own (or asks to join: it has no
    /// log). Among those whose last view is `L` too, the *restart cut* is
    /// the larger of (a) the round-robin prefix of `L` that every one of
    /// them has on disk, which holds every message that was stable (on
    /// the disk of every member of `L`) and (b) the most any of them
    /// delivered, which holds every message delivered inside a ragged
    /// trim (the host syncs those deliveries before the application sees
    /// them). So nothing any member delivered is rolled back. The members
    /// whose disks hold the whole cut each deliver their tail of it from
    /// their own logs ([`McastEngine::restart_tail`],
    /// [`McastEngine::restart_delivered`]), then form the view `L + 1`;
    /// the others (and members whose logs end before `L`) join it as new
    /// members. The cut is a function of the logs alone, which the
    /// restart only adds deliveries inside it to: a restart that fails
    /// and runs again cuts at the same place. Members that installed the
    /// restarted view show the cut as their last trim, so a member that
    /// reads their rows before every restart row adopts it.
    pub fn restart(&mut self, point: RestartPoint) -> Result<(), RestartError> {
        let layout_members = (1u64 << self.n) - 1;
        if point.view == 0
            || point.view & !layout_members != 0
            || point.view & (1 << self.me.0) == 0
            || point.epoch == u64::MAX
        {
            return Err(RestartError::View);
        }
        if self.pinned.is_some() || self.joining || self.restarting.is_some() {
            return Err(RestartError::Started);
        }
        self.restarting = Some(point);
        self.epoch = point.epoch;
        // Only us until the restarted view: a process that comes up or
        // goes down meanwhile is no member of a view of ours (its rows
        // are read from their first).
        self.view = 1u64 << self.me.0;
        for s in 0..self.n {
            self.row.set_at(&COL_RECEIVED, s, point.persisted[s]);
        }
        self.row.set(&COL_DELIVERED, point.delivered);
        self.row.set(&COL_EPOCH, point.epoch);
        self.row.set(&COL_RESTART_VIEW, point.view);
        self.seal_row();
        self.invariants();
        Ok(())
    }

    /// The tail of the logs' last view this member delivers from its own
    /// log, once the restart cut is decided: the host delivers it (nulls
    /// skipped, each delivery on disk before the application sees it),
    /// then calls [`McastEngine::restart_delivered`].
    pub fn restart_tail(&self) -> Option<RestartTail> {
        self.restart_cut
            .filter(|_| !self.restart_tail_done && self.halted.is_none())
            .map(|(_, tail)| tail)
    }

    /// The host delivered [`McastEngine::restart_tail`]: the restarted
    /// view is installed once every member's incarnation is known.
    pub fn restart_delivered(&mut self) {
        if self.restart_cut.is_some() {
            self.restart_tail_done = true;
            self.deliver_due = true;
        }
    }

    /// Persistent mode: the view just installed (epoch, members), which
    /// the host puts on disk (synced) before the others learn that we
    /// installed it; then it calls [`McastEngine::view_persisted`].
    pub fn view_to_persist(&self) -> Option<(u64, u64)> {
        (self.view_unsynced && self.halted.is_none()).then_some((self.epoch, self.view))
    }

    /// Our row waits for the host to sync the view it shows (a member
    /// that stopped shows that at once: the others go on without it).
    fn view_unshown(&self) -> bool {
        self.view_unsynced && self.halted.is_none() && !self.joining
    }

    /// The host synced the record of the view of `epoch`: our row may
    /// show it.
    pub fn view_persisted(&mut self, epoch: u64) {
        if epoch == self.epoch && self.pinned.is_some() {
            self.view_unsynced = false;
        }
    }

    /// Derecho's persistent mode ([`Config::mcast_persistent`]).
    pub fn persistent(&self) -> bool {
        self.persistent
    }

    /// Persistent mode: the next received message to put on disk (ours
    /// included, every sender's in its order), its payload copied into
    /// `out` (at least `mcast_payload_bytes_max` bytes). `None`: nothing
    /// new, or volatile mode. It stays in our ring until every member
    /// delivered it, which needs it on disk everywhere, so it is whole
    /// here.
    pub fn poll_persist(&mut self, out: &mut [u8]) -> Option<McastPersist> {
        if !self.persistent || self.halted.is_some() {
            return None;
        }
        assert!(out.len() as u64 >= self.lay.payload_bytes_max);
        let (incarnations, _) = self.pinned?;
        for (s, &incarnation) in incarnations.iter().enumerate().take(self.n) {
            let index = self.handed[s];
            if index >= self.received[s] {
                continue;
            }
            let sender = MemberId(s as u8);
            let Some((kind, len)) = self.read_slot(sender, index, incarnation, out) else {
                // Received (validated) and not delivered: only a sender
                // that broke the window rule changes it.
                self.wedge(WedgeCause::SlotOverwritten(sender));
                self.suspect(sender);
                self.seal_row();
                return None;
            };
            self.handed[s] = index + 1;
            return Some(McastPersist {
                epoch: self.epoch,
                view: self.view,
                sender,
                index,
                null: kind == KIND_NULL,
                len,
            });
        }
        None
    }

    /// What [`McastEngine::poll_persist`] handed out so far in this
    /// epoch: the host hands it back once its sync covering them
    /// completed.
    pub fn persist_mark(&self) -> PersistMark {
        PersistMark {
            epoch: self.epoch,
            counts: self.handed,
        }
    }

    /// The host's sync covering `mark` completed: those messages are
    /// locally stable. A mark of another epoch (the view changed during
    /// the sync) is ignored; so is anything past what was handed out.
    /// While wedged our row's counts stay put (the ragged trim is
    /// computed from them).
    pub fn mark_persisted(&mut self, mark: PersistMark) {
        if !self.persistent || mark.epoch != self.epoch || self.halted.is_some() {
            return;
        }
        if self.wedged.is_some() {
            return;
        }
        for s in 0..self.n {
            let upto = mark.counts[s].min(self.handed[s]);
            if upto > self.persisted[s] {
                self.persisted[s] = upto;
                self.row.set_at(&COL_RECEIVED, s, self.locally_stable(s));
                self.deliver_due = true;
            }
        }
        self.invariants();
    }

    /// The incarnation of `member` this engine pinned (`None` before it
    /// started).
    pub fn pinned_incarnation(&self, member: MemberId) -> Option<u64> {
        self.pinned
            .filter(|_| member.index() < self.n)
            .map(|(incarnations, _)| incarnations[member.index()])
    }

    /// The digest of the incarnations pinned: members with the same one
    /// form one multicast group (`None` before it started).
    pub fn view_digest(&self) -> Option<u64> {
        self.pinned.map(|(_, digest)| digest)
    }

    /// The view this member installed and is running in (a bit per
    /// member id): `None` before the group formed with it, while it joins
    /// or restarts, and once it stopped for good. Every view it reports
    /// was decided (the first one, or a trim a majority echoed).
    pub fn installed_view(&self) -> Option<u64> {
        let running = self.pinned.is_some()
            && !self.joining
            && self.restarting.is_none()
            && self.halted.is_none();
        running.then_some(self.view)
    }

    /// Our own incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Members the group was laid out for (ranks `0 .. members()`); the
    /// current view is [`McastEngine::view`].
    pub fn members(&self) -> usize {
        self.n
    }

    /// The current epoch (view number, from 0).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The current view's members (a bit per member id).
    pub fn view(&self) -> u64 {
        self.view
    }

    /// Whether the epoch is ending: the decided trim is being delivered
    /// (every member of the next view delivers the same messages up to
    /// it; what it leaves out is never delivered).
    pub fn ending(&self) -> Option<Trim> {
        self.ending
    }

    /// Why the engine stopped for good, if it did.
    pub fn halted(&self) -> Option<HaltCause> {
        self.halted
    }

    /// Our row's trim for this epoch (proposal or echo), for tests.
    #[cfg(test)]
    fn trim_for_test(&self) -> Option<Trim> {
        self.trim
    }

    /// The view's members in rank order.
    fn view_members(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.n).filter(move |&m| self.view & (1 << m) != 0)
    }

    fn view_len(&self) -> u64 {
        u64::from(self.view.count_ones())
    }

    /// The sender and index of the epoch's sequence number `seq`.
    fn at_seq(&self, seq: u64) -> (MemberId, u64) {
        let v = self.view_len();
        let pos = (seq % v) as usize;
        let sender = self
            .view_members()
            .nth(pos)
            .expect("pos below the view's size");
        (MemberId(sender as u8), seq / v)
    }

    /// The epoch's sequence number of `sender`'s message `index`
    /// (saturating: an index comes from a peer's trim).
    fn seq_of(&self, sender: MemberId, index: u64) -> u64 {
        let pos = (self.view & ((1u64 << sender.0) - 1)).count_ones();
        index
            .saturating_mul(self.view_len())
            .saturating_add(u64::from(pos))
    }

    /// The first sequence number outside trim `t`: where its delivery
    /// stops.
    fn trim_end(&self, t: &Trim) -> u64 {
        self.view_members()
            .map(|s| self.seq_of(MemberId(s as u8), t.counts[s]))
            .min()
            .unwrap_or(0)
    }

    /// Grows whenever the engine sends, receives or delivers anything
    /// (messages received from every sender, ours included, plus
    /// deliveries): how a driver tells that a call did work.
    pub fn progress(&self) -> u64 {
        self.received.iter().sum::<u64>() + self.delivered + (self.epoch << 40)
    }

    /// Global sequence numbers delivered so far (nulls included).
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Why the engine wedged, if it did.
    pub fn wedged(&self) -> Option<WedgeCause> {
        self.wedged
    }

    /// Whether every member of the view shows our view in its row: the
    /// group is formed (in this epoch) and we may send.
    fn formed(&self) -> bool {
        let Some((_, digest)) = self.pinned else {
            return false;
        };
        self.view_members()
            .all(|m| m == self.me.index() || self.rows[m].digest == digest)
    }

    /// Multicasts `payload`: writes it into our ring (the WRITEs to peers
    /// come out of [`Engine::poll_action`]). Returns its index in our
    /// stream of this epoch ([`McastEngine::epoch`]).
    pub fn send(&mut self, payload: &[u8]) -> Result<u64, SendError> {
        if payload.len() as u64 > self.lay.payload_bytes_max {
            return Err(SendError::TooLarge);
        }
        self.ready_to_send()?;
        let index = self.sent;
        self.write_own_slot(index, KIND_DATA, payload);
        self.invariants();
        Ok(index)
    }

    /// Why a message sent now would not go out, if it would not (a full
    /// window is counted in the status).
    pub fn ready_to_send(&mut self) -> Result<(), SendError> {
        if self.halted.is_some() {
            return Err(SendError::Halted);
        }
        if self.wedged.is_some() || self.ending.is_some() {
            return Err(SendError::Wedged);
        }
        if !self.formed() {
            return Err(SendError::NotStarted);
        }
        if !self.window_room(self.sent) {
            self.status.window_full += 1;
            return Err(SendError::WindowFull);
        }
        Ok(())
    }

    /// Delivers the next message if it is stable (or, while the epoch
    /// ends, inside the decided trim), copying its payload into `out` (at
    /// least `mcast_payload_bytes_max` bytes). Nulls are skipped. `None`:
    /// nothing deliverable now.
    pub fn poll_delivery(&mut self, out: &mut [u8]) -> Option<McastDelivery> {
        assert!(out.len() as u64 >= self.lay.payload_bytes_max);
        let Some(pinned) = self.pinned else {
            self.deliver_due = false;
            return None;
        };
        if self.halted.is_some() {
            self.deliver_due = false;
            return None;
        }
        for _ in 0..DELIVER_SCAN_MAX {
            let seq = self.delivered;
            let (sender, index) = self.at_seq(seq);
            let deliverable = match self.ending {
                Some(t) => index < t.counts[sender.index()],
                None => self.stable(sender, index),
            };
            if !deliverable {
                self.deliver_due = false;
                if let Some(t) = self.ending {
                    // Everything inside the trim is delivered: the next
                    // view starts (its first deliveries may be due).
                    self.install(t);
                    self.deliver_due = self.halted.is_none();
                }
                self.invariants();
                return None;
            }
            let incarnation = pinned.0[sender.index()];
            let Some((kind, len)) = self.read_slot(sender, index, incarnation, out) else {
                self.deliver_due = false;
                if self.ending.is_some() {
                    // Inside the trim we must have it whole: every member
                    // of the next view reported it received.
                    self.halt(HaltCause::TrimUnreadable(sender));
                } else {
                    // Received (validated) and not yet freed by us: only a
                    // sender that broke the window rule changes it.
                    self.wedge(WedgeCause::SlotOverwritten(sender));
                    self.suspect(sender);
                }
                self.seal_row();
                return None;
            };
            self.delivered += 1;
            self.row.set(&COL_DELIVERED, self.delivered);
            if kind == KIND_DATA || kind == KIND_LARGE {
                self.status.delivered_messages += 1;
                self.invariants();
                self.deliver_due = true;
                return Some(McastDelivery {
                    sender,
                    index,
                    seq,
                    epoch: self.epoch,
                    in_trim: self.ending.is_some(),
                    sender_incarnation: incarnation,
                    len,
                    large: (kind == KIND_LARGE).then(|| large_ref(&out[..len])),
                });
            }
        }
        self.deliver_due = true;
        None
    }

    /// Whether message `index` of `sender` is received by every member of
    /// the view (that shows our view in its row).
    fn stable(&self, sender: MemberId, index: u64) -> bool {
        #[cfg(feature = "mutation-testing")]
        if self.mutation == crate::config::Mutation::DeliverBeforeStable {
            return self.received[sender.index()] > index;
        }
        self.view_members()
            .all(|m| self.received_by(MemberId(m as u8), sender) > index)
    }

    /// What `member` reports received of `sender` (ours exactly; a peer's
    /// from its last good row, 0 unless it shows our view).
    fn received_by(&self, member: MemberId, sender: MemberId) -> u64 {
        if member == self.me {
            return self.locally_stable(sender.index());
        }
        self.peer_row_value(member, |row| row.received[sender.index()])
    }

    /// What `member` reports delivered.
    fn delivered_by(&self, member: MemberId) -> u64 {
        if member == self.me {
            return self.delivered;
        }
        self.peer_row_value(member, |row| row.delivered)
    }

    fn peer_row_value(&self, member: MemberId, f: impl Fn(&PeerRow) -> u64) -> u64 {
        let Some((_, digest)) = self.pinned else {
            return 0;
        };
        let row = &self.rows[member.index()];
        if row.digest != digest {
            return 0;
        }
        f(row)
    }

    /// Whether `member`'s row is of our epoch and view.
    fn row_current(&self, member: usize) -> bool {
        self.pinned
            .is_some_and(|(_, digest)| self.rows[member].digest == digest)
    }

    /// Takes what `member`'s row copy now says, if it comes from the
    /// incarnation we pinned (or, before we pinned, its incarnation).
    fn take_row(&mut self, member: MemberId) {
        let m = member.index();
        if self.rows[m].frozen {
            return;
        }
        let row = self.table.row(member);
        let Some(incarnation) = row.get(&COL_INCARNATION) else {
            return;
        };
        if incarnation == self.gone_incarnation[m] {
            // A row its gone predecessor left in our memory: forget it, so
            // that the new process's rows are taken from their first.
            self.table.clear(member);
            return;
        }
        if let Some((pinned, _)) = self.pinned {
            if self.view & (1 << m) != 0 && incarnation != pinned[m] {
                // Another process in a member's place: what it says is not
                // about this view (it may ask to join once that member is
                // removed).
                self.status.rows_foreign += 1;
                return;
            }
        }
        let r = &mut self.rows[m];
        r.incarnation = incarnation;
        for (s, v) in r.received.iter_mut().enumerate().take(self.n) {
            *v = row.get_at(&COL_RECEIVED, s).unwrap_or(0);
        }
        r.delivered = row.get(&COL_DELIVERED).unwrap_or(0);
        r.digest = row.get(&COL_VIEW_DIGEST).unwrap_or(0);
        r.epoch = row.get(&COL_EPOCH).unwrap_or(0);
        let members_mask = (1u64 << self.n) - 1;
        r.suspected = row.get(&COL_SUSPECTED).unwrap_or(0) & members_mask;
        r.wedged = row.get(&COL_WEDGED).unwrap_or(0) != 0;
        let ballot = row.get(&COL_TRIM_BALLOT).unwrap_or(0);
        r.trim = (ballot != 0).then(|| {
            let mut counts = [0u64; MAX_MEMBERS];
            for (s, c) in counts.iter_mut().enumerate().take(self.n) {
                *c = row.get_at(&COL_TRIM_COUNTS, s).unwrap_or(0);
            }
            let join = row.get(&COL_TRIM_JOIN).unwrap_or(0);
            Trim {
                epoch: row.get(&COL_TRIM_EPOCH).unwrap_or(0),
                ballot,
                members: row.get(&COL_TRIM_MEMBERS).unwrap_or(0) & members_mask,
                counts,
                // Only a member of the layout, listed in the trim's view,
                // with an incarnation (a peer's row is not trusted).
                join: (1..=self.n as u64)
                    .contains(&join)
                    .then(|| {
                        (
                            MemberId((join - 1) as u8),
                            row.get(&COL_TRIM_JOIN_INCARNATION).unwrap_or(0),
                        )
                    })
                    .filter(|&(j, inc)| {
                        inc != 0 && row.get(&COL_TRIM_MEMBERS).unwrap_or(0) & (1 << j.0) != 0
                    }),
            }
        });
        r.joining = row.get(&COL_JOINING).unwrap_or(0) != 0;
        r.restart_view = row.get(&COL_RESTART_VIEW).unwrap_or(0) & members_mask;
    }

    /// Whether our message `index` may take its slot: the message it
    /// replaces is delivered by every member of the view.
    fn window_room(&self, index: u64) -> bool {
        if index < self.lay.window {
            return true;
        }
        let replaced = self.seq_of(self.me, index - self.lay.window);
        self.view_members()
            .all(|m| self.delivered_by(MemberId(m as u8)) > replaced)
    }

    fn write_own_slot(&mut self, index: u64, kind: u64, payload: &[u8]) {
        assert!(index == self.sent && self.window_room(index));
        let at = self.lay.slot(self.me, index);
        let len = payload.len() as u64;
        let head = index + 1;
        let meta_word = meta(len, kind, self.me);
        let checksum = slot_checksum(head, meta_word, self.incarnation, self.epoch, payload);
        self.mem.store_u64(at.add(8), meta_word);
        self.mem.store_u64(at.add(16), self.incarnation);
        self.mem.store_u64(at.add(24), self.epoch);
        self.mem.write(at.add(SLOT_HEADER_BYTES), payload);
        let trailer = at.add(SLOT_HEADER_BYTES + round_up(len, 8));
        self.mem.store_u64(trailer, checksum);
        self.mem.store_u64(trailer.add(8), head);
        self.mem.store_u64(at, head);
        self.sent += 1;
        if kind == KIND_NULL {
            self.status.sent_nulls += 1;
        }
        self.received[self.me.index()] = self.sent;
        self.row.set_at(
            &COL_RECEIVED,
            self.me.index(),
            self.locally_stable(self.me.index()),
        );
        self.deliver_due = true;
    }

    /// Whether `sender`'s message `index` is in our ring copy, whole and of
    /// the incarnation we pinned, and, for a large message's reference,
    /// whether its RDMC payload is whole here too (Derecho: a message
    /// counts as received once its data is, so stability means every
    /// member has the payload).
    fn slot_valid(&self, sender: MemberId, index: u64, incarnation: u64) -> bool {
        // Most calls find no new message: the head word says so before a
        // slot-sized buffer is zeroed (every poll looks at every sender).
        if self.mem.load_u64(self.lay.slot(sender, index)) != index + 1 {
            return false;
        }
        let mut buf = [0u8; MCAST_PAYLOAD_BYTES_CAP as usize];
        match self.read_slot(sender, index, incarnation, &mut buf) {
            Some((KIND_LARGE, len)) => {
                #[cfg(feature = "mutation-testing")]
                if self.mutation == crate::config::Mutation::LargeRefBeforePayload {
                    return true;
                }
                let (large_index, _) = large_ref(&buf[..len]);
                self.large_received.0 == self.epoch
                    && large_index < self.large_received.1[sender.index()]
            }
            Some(_) => true,
            None => false,
        }
    }

    /// Multicasts a reference to a large message the host sent on RDMC
    /// in this epoch (its index there and its length): delivered in the
    /// total order like any message, once every member's RDMC has it
    /// ([`McastEngine::set_large_received`]). The host sends the payload
    /// first, and only when [`McastEngine::ready_to_send`] says the
    /// reference will go out (an RDMC message nobody references would hold its
    /// sender's later ones back).
    pub fn send_large_ref(&mut self, rdmc_index: u64, len: u64) -> Result<u64, SendError> {
        let mut r = [0u8; LARGE_REF_BYTES];
        r[..8].copy_from_slice(&rdmc_index.to_le_bytes());
        r[8..].copy_from_slice(&len.to_le_bytes());
        if (LARGE_REF_BYTES as u64) > self.lay.payload_bytes_max {
            return Err(SendError::TooLarge);
        }
        self.ready_to_send()?;
        let index = self.sent;
        self.write_own_slot(index, KIND_LARGE, &r);
        self.invariants();
        Ok(index)
    }

    /// The host's RDMC session of `epoch` has `count` messages of
    /// `sender` whole in our memory. References to large messages count
    /// as received only up to it; counts of another epoch than ours are
    /// ignored (a session belongs to one view).
    pub fn set_large_received(&mut self, epoch: u64, sender: MemberId, count: u64) {
        if sender.index() >= MAX_MEMBERS {
            return;
        }
        if self.large_received.0 != epoch {
            self.large_received = (epoch, [0; MAX_MEMBERS]);
        }
        let c = &mut self.large_received.1[sender.index()];
        if count > *c {
            *c = count;
            // References waiting on it may be received now.
            self.receive_due = true;
        }
    }

    /// Copies `sender`'s message `index` of this epoch out into `out` if
    /// its slot holds it whole, from `incarnation`: head and tail, meta,
    /// incarnation, epoch and the checksum over the copy agree, and the
    /// head still does after the copy. Returns its kind and payload
    /// length.
    fn read_slot(
        &self,
        sender: MemberId,
        index: u64,
        incarnation: u64,
        out: &mut [u8],
    ) -> Option<(u64, usize)> {
        let at = self.lay.slot(sender, index);
        let head = self.mem.load_u64(at);
        if head != index + 1 {
            return None;
        }
        let meta_word = self.mem.load_u64(at.add(8));
        let len = meta_word & 0xFFFF_FFFF;
        let kind = (meta_word >> 32) & 0xFF;
        if len > self.lay.payload_bytes_max
            || (kind != KIND_DATA && kind != KIND_NULL && kind != KIND_LARGE)
            || (kind == KIND_LARGE && len != LARGE_REF_BYTES as u64)
            || (meta_word >> 40) & 0xFF != u64::from(sender.0)
            || meta_word >> 48 != 0
            || self.mem.load_u64(at.add(16)) != incarnation
            || self.mem.load_u64(at.add(24)) != self.epoch
        {
            return None;
        }
        let payload = &mut out[..len as usize];
        self.mem.read(at.add(SLOT_HEADER_BYTES), payload);
        let trailer = at.add(SLOT_HEADER_BYTES + round_up(len, 8));
        let whole = self.mem.load_u64(trailer.add(8)) == head
            && self.mem.load_u64(trailer)
                == slot_checksum(head, meta_word, incarnation, self.epoch, payload)
            && self.mem.load_u64(at) == head;
        whole.then_some((kind, len as usize))
    }

    fn wedge(&mut self, cause: WedgeCause) {
        if self.wedged.is_none() {
            self.wedged = Some(cause);
            self.row.set(&COL_WEDGED, 1);
        }
    }

    fn halt(&mut self, cause: HaltCause) {
        if self.halted.is_none() {
            self.halted = Some(cause);
            if self.wedged.is_none() {
                self.wedged = Some(WedgeCause::Suspicion(self.me));
            }
            self.row.set(&COL_WEDGED, 1);
            // Said in our row: we suspect ourselves, so the others (in this
            // epoch or a later one) suspect us and go on without us.
            self.suspected |= 1 << self.me.0;
            self.row.set(&COL_SUSPECTED, self.suspected);
        }
    }

    /// Suspects `member` in this epoch (if it is in the view).
    fn suspect(&mut self, member: MemberId) {
        if self.view & (1 << member.0) != 0 && self.suspected & (1 << member.0) == 0 {
            self.suspected |= 1 << member.0;
            self.row.set(&COL_SUSPECTED, self.suspected);
        }
    }

    /// Our row's trim columns: our proposal or echo for this epoch, else
    /// the trim that ended the previous one.
    fn set_row_trim(&mut self) {
        let t = self.trim.or(self.last_trim).unwrap_or_default();
        self.row.set(&COL_TRIM_EPOCH, t.epoch);
        self.row.set(&COL_TRIM_BALLOT, t.ballot);
        self.row.set(&COL_TRIM_MEMBERS, t.members);
        let (join, join_incarnation) = t.join.map_or((0, 0), |(m, i)| (u64::from(m.0) + 1, i));
        self.row.set(&COL_TRIM_JOIN, join);
        self.row.set(&COL_TRIM_JOIN_INCARNATION, join_incarnation);
        for s in 0..self.n {
            self.row.set_at(&COL_TRIM_COUNTS, s, t.counts[s]);
        }
    }

    /// Seals the row if it changed, so that pushes carry it.
    fn seal_row(&mut self) {
        if self.row.dirty_span().is_some() {
            self.row.seal(MCAST_ROW.whole_row());
            // Our own row, as a peer's copy of it would read (status, and
            // the table's view of every member alike).
            crate::sst::store_span(
                &self.mem,
                self.lay.row(self.me),
                self.row.words(),
                MCAST_ROW.whole_row(),
            );
        }
    }

    /// The digest of a view: its epoch, members and their incarnations.
    fn view_digest_of(epoch: u64, view: u64, incarnations: &[u64; MAX_MEMBERS]) -> u64 {
        let mut c = Checksum::new(DOMAIN_VIEW);
        c.word(epoch);
        c.word(view);
        for (m, &i) in incarnations.iter().enumerate() {
            if view & (1 << m) != 0 {
                c.word(i);
            }
        }
        c.finish()
    }

    /// Pins every member's incarnation once each row was seen.
    fn try_start(&mut self) {
        if self.pinned.is_some() || self.joining || self.restarting.is_some() {
            return;
        }
        if (0..self.n).any(|m| {
            m != self.me.index() && (self.rows[m].epoch > 0 || self.rows[m].restart_view != 0)
        }) {
            // The group runs past its first view (or restarts from its
            // logs, which we have none of): we can only join it.
            self.become_joining();
            return;
        }
        let mut incarnations = [0u64; MAX_MEMBERS];
        for (m, inc) in incarnations.iter_mut().enumerate().take(self.n) {
            *inc = if m == self.me.index() {
                self.incarnation
            } else {
                match self.rows[m].incarnation {
                    0 => return,
                    i => i,
                }
            };
        }
        let digest = Self::view_digest_of(self.epoch, self.view, &incarnations);
        self.pinned = Some((incarnations, digest));
        self.row.set(&COL_VIEW_DIGEST, digest);
        // What a peer told us before we pinned was about whoever it was
        // then; its next row tells it again.
    }

    /// Derecho's epoch termination (§3.4), run after the rows were read:
    /// suspicions spread (each member copies those it reads in rows of its
    /// view into its own), a suspicion wedges, the lowest-ranked
    /// unsuspected member leads: once every unsuspected member's row shows
    /// it wedged and suspecting every member ranked below the leader (so
    /// it will echo no earlier leader's proposal), the leader proposes the
    /// highest-ballot trim those rows echo, or else a fresh one (per
    /// sender, the least any of them received; the next view is the
    /// unsuspected members). Members echo their leader's proposal into
    /// their rows; a trim echoed by a majority of the view is decided (a
    /// member that sees a row of a later epoch learns the trim that ended
    /// ours from it), and only then acted on.
    fn advance_epoch(&mut self) {
        if let Some(point) = self.restarting {
            self.try_restart(point);
            return;
        }
        if self.joining {
            self.try_join();
            return;
        }
        if self.halted.is_some() || self.ending.is_some() {
            return;
        }
        let Some((_, digest)) = self.pinned else {
            return;
        };
        if self.formed() {
            self.ever_formed = true;
        }
        let me = self.me.index();
        let removed = self.parent_removed & self.view & !self.suspected & !(1 << me);
        if removed != 0 {
            for m in 0..self.n {
                if removed & (1 << m) != 0 {
                    self.suspect(MemberId(m as u8));
                }
            }
            self.wedge(WedgeCause::Suspicion(MemberId(
                removed.trailing_zeros() as u8
            )));
        }
        let mut decided = None;
        let mut left_behind = false;
        for m in 0..self.n {
            if m == me || self.view & (1 << m) == 0 {
                continue;
            }
            let r = self.rows[m];
            if r.digest == digest {
                // Suspicions spread (a member that stopped suspects itself).
                let new = r.suspected & self.view & !self.suspected;
                if new != 0 {
                    self.suspected |= new;
                    self.row.set(&COL_SUSPECTED, self.suspected);
                    self.wedge(WedgeCause::Suspicion(MemberId(new.trailing_zeros() as u8)));
                }
                // So does a wedge (a view change started for a join).
                if r.wedged {
                    self.wedge(WedgeCause::Wedged(MemberId(m as u8)));
                }
            } else if r.epoch > self.epoch {
                // A member of our view moved on: it acted on a decided
                // trim for our epoch, which its row still shows (until it
                // proposes in its new epoch; then it left us behind and
                // we would have been suspected in that epoch).
                match r.trim {
                    Some(t) if t.epoch == self.epoch && r.epoch == self.epoch + 1 => {
                        decided = Some(t)
                    }
                    _ => left_behind = true,
                }
            } else if r.epoch < self.epoch && r.suspected & (1 << m) != 0 {
                // It stopped for good in an earlier epoch (its row says
                // so: it suspects itself) and will never join this one.
                self.suspect(MemberId(m as u8));
                self.wedge(WedgeCause::Suspicion(MemberId(m as u8)));
            }
        }
        if decided.is_none() {
            // A trim a majority of the view echoed (ours, or one we read:
            // a member the next view leaves out learns it so) is decided.
            // (Ours first, then the rows' in member order; no array of
            // candidates: this runs on every call.)
            let is_decided =
                |t: &Trim| t.epoch == self.epoch && self.echoes(t) * 2 > self.view_len();
            decided = self.trim.filter(is_decided).or_else(|| {
                self.view_members()
                    .filter(|&m| m != me && self.row_current(m))
                    .filter_map(|m| self.rows[m].trim)
                    .find(is_decided)
            });
        }
        if let Some(t) = decided {
            // Acting on a decided trim is safe whatever we suspect.
            self.act_on(t);
            return;
        }
        if left_behind || self.suspected & (1 << me) != 0 {
            self.excluded();
            return;
        }
        if let Some((j, _)) = self.pending_joiner() {
            // A process asks to join: end the epoch so that the next view
            // adds it.
            self.wedge(WedgeCause::Join(j));
        }
        if self.wedged.is_none() {
            return;
        }
        let live = self.view & !self.suspected;
        // (Members the group above removed count with us: they cannot
        // act on another trim.)
        let ours = live | (self.view & self.parent_removed);
        self.minority = ours.count_ones() * 2 <= self.view.count_ones();
        if self.minority {
            // The split-brain guard: we may be the minority side of a
            // partition; we neither lead nor echo, and only learn a trim
            // the others decided.
            return;
        }
        let leader = live.trailing_zeros() as usize;
        if leader == me {
            self.lead();
        } else if self.row_current(leader) {
            // Echo our leader's proposal.
            if let Some(t) = self.rows[leader].trim {
                if t.epoch == self.epoch && t.ballot == leader as u64 + 1 && self.trim != Some(t) {
                    self.trim = Some(t);
                    self.set_row_trim();
                }
            }
        }
    }

    /// Members of the view whose row (ours included) shows `t` in this
    /// epoch, or who already moved on with it, and those the group above
    /// removed (they can echo nothing else any more).
    fn echoes(&self, t: &Trim) -> u64 {
        #[cfg(feature = "mutation-testing")]
        if self.mutation == crate::config::Mutation::TrimBeforeEcho {
            return self.view_len();
        }
        self.view_members()
            .filter(|&m| {
                if self.parent_removed & (1 << m) != 0 && m != self.me.index() {
                    return true;
                }
                if m == self.me.index() {
                    return self
                        .trim
                        .is_some_and(|o| o.ballot == t.ballot && o.same_value(t));
                }
                let r = &self.rows[m];
                (self.row_current(m) || r.epoch == self.epoch + 1)
                    && r.trim
                        .is_some_and(|o| o.ballot == t.ballot && o.same_value(t))
            })
            .count() as u64
    }

    /// As the leader: propose, once every unsuspected member is wedged and
    /// follows us.
    fn lead(&mut self) {
        let me = self.me.index();
        let ballot = me as u64 + 1;
        if self.trim.is_some_and(|t| t.ballot == ballot) {
            return;
        }
        let live = self.view & !self.suspected;
        let below = self.view & ((1u64 << me) - 1);
        let mut best = self.trim;
        let mut counts = [0u64; MAX_MEMBERS];
        for (s, c) in counts.iter_mut().enumerate().take(self.n) {
            *c = self.locally_stable(s);
        }
        for m in self.view_members() {
            if m == me || live & (1 << m) == 0 {
                continue;
            }
            let r = self.rows[m];
            let prepared = r.wedged && r.suspected & below == below;
            #[cfg(feature = "mutation-testing")]
            let prepared = prepared || self.mutation == crate::config::Mutation::IgnoreSuspicions;
            if !self.row_current(m) || !prepared {
                return;
            }
            if let Some(t) = r.trim.filter(|t| t.epoch == self.epoch) {
                if best.is_none_or(|b| t.ballot > b.ballot) {
                    best = Some(t);
                }
            }
            for s in self.view_members() {
                counts[s] = counts[s].min(r.received[s]);
            }
        }
        let join = self.pending_joiner();
        let mut t = best.unwrap_or(Trim {
            epoch: self.epoch,
            ballot,
            members: live | join.map_or(0, |(j, _)| 1 << j.0),
            counts: [0; MAX_MEMBERS],
            join,
        });
        if best.is_none() {
            for s in self.view_members() {
                t.counts[s] = counts[s];
            }
        }
        t.ballot = ballot;
        self.trim = Some(t);
        self.set_row_trim();
    }

    /// The view goes on without us. A process that was in the group
    /// stops for good; one that never got in (it started, or restarted,
    /// while the group ran) asks to join instead.
    fn excluded(&mut self) {
        if self.ever_formed {
            self.halt(HaltCause::Excluded);
        } else {
            self.become_joining();
        }
    }

    /// Forgets any view and asks to join the running group: our row says
    /// `joining`, the members add us in their next view change.
    fn become_joining(&mut self) {
        self.joining = true;
        self.view_unsynced = false;
        self.pinned = None;
        self.epoch = 0;
        // Only us until a view adds us (a death heard meanwhile is not
        // about our view).
        self.view = 1u64 << self.me.0;
        self.suspected = 0;
        self.minority = false;
        self.wedged = None;
        self.trim = None;
        self.ending = None;
        self.last_trim = None;
        self.sent = 0;
        self.received = [0; MAX_MEMBERS];
        self.handed = [0; MAX_MEMBERS];
        self.persisted = [0; MAX_MEMBERS];
        self.delivered = 0;
        for s in 0..self.n {
            self.row.set_at(&COL_RECEIVED, s, 0);
        }
        self.row.set(&COL_DELIVERED, 0);
        self.row.set(&COL_EPOCH, 0);
        self.row.set(&COL_VIEW_DIGEST, 0);
        self.row.set(&COL_SUSPECTED, 0);
        self.row.set(&COL_WEDGED, 0);
        self.row.set(&COL_JOINING, 1);
        self.set_row_trim();
        for p in self.peers.iter_mut() {
            p.posted = 0;
        }
    }

    /// As a joiner: installs the view a decided trim adds us to, once a
    /// member shows it installed (its row is in the trim's next epoch) and
    /// we know every member's incarnation.
    fn try_join(&mut self) {
        let me = self.me.index();
        let found = (0..self.n).filter(|&m| m != me).find_map(|m| {
            let r = &self.rows[m];
            r.trim
                .filter(|t| {
                    t.join == Some((self.me, self.incarnation))
                        && r.epoch == t.epoch + 1
                        && t.members & (1 << m) != 0
                })
                .map(|t| (t, r.digest))
        });
        let Some((t, members_digest)) = found else {
            return;
        };
        let mut incarnations = [0u64; MAX_MEMBERS];
        for (m, inc) in incarnations.iter_mut().enumerate().take(self.n) {
            if t.members & (1 << m) == 0 {
                continue;
            }
            *inc = if m == me {
                self.incarnation
            } else {
                match self.rows[m].incarnation {
                    0 => return,
                    i => i,
                }
            };
        }
        self.joining = false;
        self.ever_formed = true;
        self.epoch = t.epoch + 1;
        self.view = t.members;
        self.last_trim = Some(t);
        self.wedged = None;
        // Members known gone are suspected at once in the new view.
        self.suspected = (0..self.n)
            .filter(|&m| self.view & (1 << m) != 0 && self.peers[m].down)
            .fold(0u64, |acc, m| acc | 1 << m);
        self.row.set(&COL_SUSPECTED, self.suspected);
        self.row.set(&COL_WEDGED, 0);
        if self.suspected != 0 {
            self.wedge(WedgeCause::Suspicion(MemberId(
                self.suspected.trailing_zeros() as u8,
            )));
        }
        self.status.view_changes += 1;
        // The members' digest, as the row we install from shows it (our
        // copies of other rows may already be of a successor process).
        let digest = members_digest;
        self.pinned = Some((incarnations, digest));
        for (m, p) in self.peers.iter_mut().enumerate().take(self.n) {
            if t.members & (1 << m) != 0 {
                p.posted = 0;
            }
        }
        self.row.set(&COL_EPOCH, self.epoch);
        self.row.set(&COL_VIEW_DIGEST, digest);
        self.row.set(&COL_JOINING, 0);
        self.set_row_trim();
        self.view_unsynced = self.persistent;
        self.deliver_due = true;
    }

    /// A total restart ([`McastEngine::restart`]): gathers the members'
    /// restart rows, decides the restart cut (or adopts it from a member
    /// that installed the restarted view), and installs that view once
    /// the host delivered our tail.
    fn try_restart(&mut self, point: RestartPoint) {
        if self.halted.is_some() {
            // (Left: e.g. the log could not give the tail.)
            return;
        }
        let me = self.me.index();
        let mut adopted = None;
        for m in 0..self.n {
            let r = self.rows[m];
            if m == me || r.incarnation == 0 || r.frozen {
                continue;
            }
            if r.restart_view != 0 {
                self.restart_rows[m] = Some((
                    r.incarnation,
                    RestartPoint {
                        epoch: r.epoch,
                        view: r.restart_view,
                        persisted: r.received,
                        delivered: r.delivered,
                    },
                ));
            } else if !r.joining && r.digest != 0 {
                match r.trim {
                    Some(t)
                        if t.ballot == RESTART_BALLOT
                            && t.epoch == point.epoch
                            && r.epoch == point.epoch + 1 =>
                    {
                        adopted = Some(t)
                    }
                    // The group runs past our log's last view: whether it
                    // restarted without us or never stopped, we join it.
                    _ if r.epoch > point.epoch => return self.restart_behind(),
                    _ => {}
                }
            }
        }
        if let Some((t, _)) = self.restart_cut {
            if self.restart_tail_done {
                self.install_restarted(t);
            }
            return;
        }
        let newest = (0..self.n)
            .filter_map(|m| self.restart_rows[m].map(|(_, p)| p.epoch))
            .fold(point.epoch, u64::max);
        if newest > point.epoch {
            // Another member's log holds a later view.
            return self.restart_behind();
        }
        let Some(t) = adopted.or_else(|| self.restart_cut_of(point)) else {
            return;
        };
        if adopted.is_none() && t.members & (1 << me) == 0 {
            // Our disk lacks part of the cut: we join the restarted group
            // as a new member, once it runs. Until then our row keeps
            // showing our restart point, so that every member computes
            // the cut from the same rows.
            return;
        }
        let view = point.view;
        let end = point.end_of(&t.counts);
        let covered = point.members().all(|s| point.persisted[s] >= t.counts[s]);
        if t.members & (1 << me) == 0 || t.members & !view != 0 || !covered {
            // Our disk lacks part of the cut: we join the restarted
            // group as a new member.
            return self.restart_behind();
        }
        self.restart_cut = Some((
            t,
            RestartTail {
                epoch: point.epoch,
                view,
                from: point.delivered.min(end),
                to: end,
            },
        ));
        self.deliver_due = true;
    }

    /// The restart cut, once every member of our log's last view shows its
    /// restart point (or asks to join: it has no log): see
    /// [`McastEngine::restart`].
    fn restart_cut_of(&self, point: RestartPoint) -> Option<Trim> {
        let me = self.me.index();
        let view = point.view;
        let members = || point.members();
        let summary = |m: usize| {
            if m == me {
                return Some(point);
            }
            self.restart_rows[m]
                .map(|(_, p)| p)
                .filter(|p| p.epoch == point.epoch && p.view == view)
        };
        let mut least = [u64::MAX; MAX_MEMBERS];
        let mut most_delivered = 0u64;
        for m in members() {
            match summary(m) {
                Some(p) => {
                    for s in members() {
                        least[s] = least[s].min(p.persisted[s]);
                    }
                    most_delivered = most_delivered.max(p.delivered);
                }
                None if self.restart_rows[m].is_some()
                    || (self.rows[m].joining && self.rows[m].incarnation != 0) => {}
                // Not restarted yet: its log may hold deliveries nobody
                // else's shows.
                None => return None,
            }
        }
        let on_every_disk = point.end_of(&least);
        #[cfg(feature = "mutation-testing")]
        let most_delivered = if self.mutation == crate::config::Mutation::RestartAtCommonPrefix {
            0
        } else {
            most_delivered
        };
        let counts = point.counts_below(on_every_disk.max(most_delivered));
        let whole = members()
            .filter(|&m| summary(m).is_some_and(|p| members().all(|s| p.persisted[s] >= counts[s])))
            .fold(0u64, |acc, m| acc | 1 << m);
        Some(Trim {
            epoch: point.epoch,
            ballot: RESTART_BALLOT,
            members: whole,
            counts,
            join: None,
        })
    }

    /// Our log ends before the restarted group's cut or view: we join it
    /// as a new member (our log's history stops where it stops).
    fn restart_behind(&mut self) {
        self.restarting = None;
        self.restart_cut = None;
        self.restart_tail_done = false;
        self.row.set(&COL_RESTART_VIEW, 0);
        self.become_joining();
    }

    /// Installs the restarted view after cut `t` (the epoch after the
    /// logs' last), once every member's incarnation is known.
    fn install_restarted(&mut self, t: Trim) {
        let me = self.me.index();
        let mut incarnations = [0u64; MAX_MEMBERS];
        for (m, inc) in incarnations.iter_mut().enumerate().take(self.n) {
            if t.members & (1 << m) == 0 {
                continue;
            }
            let r = &self.rows[m];
            *inc = if m == me {
                self.incarnation
            } else if r.restart_view == 0 && r.epoch == t.epoch + 1 && r.digest != 0 {
                r.incarnation
            } else {
                match self.restart_rows[m] {
                    Some((i, _)) if i != 0 => i,
                    _ => return,
                }
            };
        }
        self.restarting = None;
        self.restart_cut = None;
        self.restart_tail_done = false;
        self.epoch = t.epoch + 1;
        self.view = t.members;
        self.last_trim = Some(t);
        self.trim = None;
        self.ending = None;
        self.wedged = None;
        self.minority = false;
        self.status.view_changes += 1;
        let digest = Self::view_digest_of(self.epoch, self.view, &incarnations);
        self.pinned = Some((incarnations, digest));
        // Members known gone are suspected at once in the new view.
        self.suspected = (0..self.n)
            .filter(|&m| self.view & (1 << m) != 0 && self.peers[m].down)
            .fold(0u64, |acc, m| acc | 1 << m);
        self.row.set(&COL_RESTART_VIEW, 0);
        self.show_new_view(digest);
        self.view_unsynced = self.persistent;
        self.deliver_due = true;
    }

    /// Our row for the view just installed (epoch, digest, counters from
    /// zero, the trim that ended the last), and a wedge at once if members
    /// of it are known gone already: the next view change starts.
    fn show_new_view(&mut self, digest: u64) {
        for s in 0..self.n {
            self.row.set_at(&COL_RECEIVED, s, 0);
        }
        self.row.set(&COL_DELIVERED, 0);
        self.row.set(&COL_EPOCH, self.epoch);
        self.row.set(&COL_VIEW_DIGEST, digest);
        self.row.set(&COL_SUSPECTED, self.suspected);
        self.row.set(&COL_WEDGED, 0);
        self.set_row_trim();
        if self.suspected != 0 {
            self.wedge(WedgeCause::Suspicion(MemberId(
                self.suspected.trailing_zeros() as u8,
            )));
        }
    }

    /// The lowest member outside the view whose process asks to join (one
    /// per view change), with its incarnation.
    fn pending_joiner(&self) -> Option<(MemberId, u64)> {
        (0..self.n)
            .filter(|&m| self.view & (1 << m) == 0)
            .find(|&m| {
                let r = &self.rows[m];
                r.joining && r.incarnation != 0 && !self.peers[m].down
            })
            .map(|m| (MemberId(m as u8), self.rows[m].incarnation))
    }

    /// Acts on the decided trim `t`: delivers up to it (then installs the
    /// next view), or stops if the next view leaves us out.
    fn act_on(&mut self, t: Trim) {
        if t.members & (1 << self.me.0) == 0 {
            self.excluded();
            return;
        }
        // Wedge for good in this epoch, echo what we act on (a laggard of
        // the next view learns it from our row), and check that we can.
        self.wedge(WedgeCause::Suspicion(self.me));
        self.trim = Some(t);
        self.set_row_trim();
        // We hold every message inside the trim (we reported them
        // received, or the trim would be lower), and delivered nothing
        // past its end (what we delivered was stable: every member,
        // those the trim was computed from included, had received it).
        let reachable = self.view_members().all(|s| self.received[s] >= t.counts[s]);
        if !reachable || self.delivered > self.trim_end(&t) {
            self.halt(HaltCause::TrimBehind);
            return;
        }
        self.ending = Some(t);
        self.deliver_due = true;
    }

    /// Installs the view after `t`: the next epoch, its members, counters
    /// from zero.
    fn install(&mut self, t: Trim) {
        let Some((mut incarnations, _)) = self.pinned else {
            return;
        };
        if let Some((j, incarnation)) = t.join {
            // The member the view adds: its new process, from scratch. Its
            // predecessor's row (higher versions) must not hide its own.
            let m = j.index();
            let held = self.rows[m].incarnation;
            if held == incarnation && self.peers[m].down {
                // The joiner itself died meanwhile: it stays down, and
                // the new view suspects it at once.
            } else {
                if held != incarnation {
                    if held != 0 {
                        self.gone_incarnation[m] = held;
                    }
                    self.table.clear(j);
                    self.rows[m] = PeerRow::default();
                }
                self.rows[m].frozen = false;
                let p = &mut self.peers[m];
                p.down = false;
                p.row_acked_version = 0;
            }
            incarnations[m] = incarnation;
        }
        let me = self.me.index();
        // Our messages the trim left out are dropped: those from our
        // count in it, and those inside it past the delivery cut.
        let v = self.view_len();
        let pos = (self.view & ((1u64 << me) - 1)).count_ones() as u64;
        let below_cut = self.trim_end(&t).saturating_sub(pos).div_ceil(v);
        let kept = t.counts[me].min(below_cut).min(self.sent);
        self.status.trimmed_own += self.sent - kept;
        self.status.view_changes += 1;
        self.ever_formed = true;
        self.last_trim = Some(t);
        self.ending = None;
        self.trim = None;
        self.epoch += 1;
        self.view = t.members;
        self.sent = 0;
        self.received = [0; MAX_MEMBERS];
        self.handed = [0; MAX_MEMBERS];
        self.persisted = [0; MAX_MEMBERS];
        self.delivered = 0;
        self.wedged = None;
        self.minority = false;
        for m in 0..self.n {
            if self.view & (1 << m) == 0 && self.rows[m].frozen && !self.peers[m].down {
                // Out of the view, and a new process runs there (it may
                // ask to join): read its rows from their first.
                self.rows[m].frozen = false;
                self.table.clear(MemberId(m as u8));
            }
        }
        let mut carried = self.suspected & self.view;
        for (m, p) in self.peers.iter_mut().enumerate().take(self.n) {
            // Posts restart from the new epoch's first message.
            p.posted = 0;
            if p.down && self.view & (1 << m) != 0 {
                carried |= 1 << m;
            }
        }
        self.suspected = carried;
        let digest = Self::view_digest_of(self.epoch, self.view, &incarnations);
        self.pinned = Some((incarnations, digest));
        self.show_new_view(digest);
        self.view_unsynced = self.persistent;
        self.seal_row();
    }

    fn receive(&mut self) {
        let Some((incarnations, _)) = self.pinned else {
            return;
        };
        if self.wedged.is_some() || self.halted.is_some() {
            // Derecho: a wedged member reports no newly received message,
            // so the counts a ragged trim is computed from stay put.
            return;
        }
        for (s, &incarnation) in incarnations.iter().enumerate().take(self.n) {
            if s == self.me.index() || self.view & (1 << s) == 0 {
                continue;
            }
            let sender = MemberId(s as u8);
            for taken in 0..=RECEIVE_BATCH_MAX {
                let next = self.received[s];
                if taken == RECEIVE_BATCH_MAX {
                    // More may wait: the next call goes on at once.
                    self.receive_due = true;
                    break;
                }
                if !self.slot_valid(sender, next, incarnation) {
                    break;
                }
                self.received[s] = next + 1;
                self.row.set_at(&COL_RECEIVED, s, self.locally_stable(s));
                self.deliver_due = true;
            }
        }
    }

    /// Fills our turns with nulls up to the round the busiest sender
    /// reached, as far as the window lets us.
    fn send_nulls(&mut self) {
        if !self.formed() || self.wedged.is_some() || self.halted.is_some() {
            return;
        }
        let target = self
            .view_members()
            .map(|s| self.received[s])
            .max()
            .unwrap_or(0);
        while self.sent < target && self.window_room(self.sent) {
            self.write_own_slot(self.sent, KIND_NULL, &[]);
        }
    }

    /// The next row push due to a peer, if any.
    fn next_row_push(&mut self, p: usize) -> Option<Action> {
        let peer = &self.peers[p];
        let version = self.row.version();
        // Rows go to every running member, in our view or not: a process
        // that asks to join learns the trim that adds it from our row, and
        // one the view left out learns that.
        if self.view_unshown()
            || peer.down
            || peer.reconnect
            || peer.row_inflight
            || peer.row_acked_version >= version
            || peer.retry_at_ns > self.now
            || peer.inflight >= MCAST_INFLIGHT_MAX
        {
            return None;
        }
        let member = MemberId(p as u8);
        let span = MCAST_ROW.whole_row();
        crate::sst::store_span(&self.mem, self.lay.staging(member), self.row.words(), span);
        let peer = &mut self.peers[p];
        peer.row_inflight = true;
        peer.inflight += 1;
        Some(Action::Post(WorkRequest {
            wr_id: WrId((WR_ROW << WR_KIND_SHIFT) | (version & WR_VALUE_MASK)),
            peer: member,
            op: Op::Write {
                local: self.lay.staging(member).add(span.offset_bytes),
                remote: self.lay.row(self.me).add(span.offset_bytes),
                len: span.len_bytes as u32,
            },
            notify: true,
        }))
    }

    /// The next slot WRITE due to a peer, if any.
    fn next_slot_write(&mut self, p: usize) -> Option<Action> {
        let member = MemberId(p as u8);
        // A message the peer reports received needs no WRITE (after an
        // error the posts restart from the last acknowledged one).
        let reported = self.received_by(member, self.me);
        let outside = self.view & (1 << p) == 0 || self.halted.is_some();
        let peer = &mut self.peers[p];
        if outside
            || peer.down
            || peer.reconnect
            || peer.retry_at_ns > self.now
            || peer.inflight >= MCAST_INFLIGHT_MAX
        {
            return None;
        }
        if peer.posted < reported {
            // A peer's count, bounded by what we sent.
            peer.posted = reported.min(self.sent);
        }
        if peer.posted >= self.sent {
            return None;
        }
        let index = peer.posted;
        let at = self.lay.slot(self.me, index);
        let len = self.mem.load_u64(at.add(8)) & 0xFFFF_FFFF;
        peer.posted += 1;
        peer.inflight += 1;
        Some(Action::Post(WorkRequest {
            wr_id: WrId(
                (WR_SLOT << WR_KIND_SHIFT)
                    | ((self.epoch & WR_EPOCH_MASK) << WR_EPOCH_SHIFT)
                    | (index & WR_INDEX_MASK),
            ),
            peer: member,
            op: Op::Write {
                local: at,
                remote: at,
                len: slot_used_bytes(len) as u32,
            },
            notify: true,
        }))
    }

    /// Invariants, checked at the end of every entry point.
    fn invariants(&self) {
        if let Some(point) = self.restarting {
            // Our row shows where our log left off, and nothing runs yet.
            assert!(self.row.get(&COL_RESTART_VIEW) == point.view);
            assert!(self.row.get(&COL_EPOCH) == point.epoch);
            assert!(self.pinned.is_none() && self.sent == 0 && self.delivered == 0);
            if let Some((t, tail)) = self.restart_cut {
                assert!(t.members & (1 << self.me.0) != 0 && t.members & !point.view == 0);
                assert!(tail.from <= tail.to && tail.epoch == point.epoch);
            }
            return;
        }
        assert!(self.row.get(&COL_RESTART_VIEW) == 0);
        assert!(self.received[self.me.index()] == self.sent);
        for s in 0..self.n {
            // What our row reports is what is locally stable: received
            // (volatile), or on disk and never more than received
            // (persistent).
            assert!(self.row.get_at(&COL_RECEIVED, s) == self.locally_stable(s));
            assert!(self.persisted[s] <= self.handed[s] && self.handed[s] <= self.received[s]);
        }
        assert!(self.row.get(&COL_DELIVERED) == self.delivered);
        assert!(self.row.get(&COL_EPOCH) == self.epoch);
        assert!(self.view & (1 << self.me.0) != 0 && self.suspected & !self.view == 0);
        assert!(self.ending.is_none() || self.wedged.is_some());
        // Nothing is delivered past what we received ourselves.
        if self.delivered > 0 {
            let (sender, index) = self.at_seq(self.delivered - 1);
            assert!(self.received[sender.index()] > index);
        }
        for p in &self.peers[..self.n] {
            assert!(p.posted <= self.sent);
            assert!(p.inflight <= MCAST_INFLIGHT_MAX);
        }
        // Our ring holds at most a window of messages not yet delivered
        // everywhere. (Once wedged, members that moved on to the next
        // view no longer report deliveries of this one.)
        assert!(
            self.wedged.is_some()
                || self.sent <= self.lay.window
                || self.window_room(self.sent - 1)
        );
    }
}

impl<M: Memory> Engine for McastEngine<M> {
    fn name(&self) -> &'static str {
        "multicast"
    }

    fn handle_completion(&mut self, now_ns: u64, completion: Completion) {
        self.now = now_ns;
        let p = completion.peer.index();
        if p >= self.n || p == self.me.index() {
            return;
        }
        let kind = completion.wr_id.0 >> WR_KIND_SHIFT;
        let value = completion.wr_id.0 & WR_VALUE_MASK;
        let this_epoch = (value >> WR_EPOCH_SHIFT) == self.epoch & WR_EPOCH_MASK;
        let peer = &mut self.peers[p];
        peer.inflight = peer.inflight.saturating_sub(1);
        let ok = completion.status.is_ok();
        match kind {
            WR_SLOT => {
                if !ok && this_epoch {
                    // The channel broke: this WRITE and those behind it
                    // may not have landed (even if a later one did: the
                    // peer takes messages in order). Post them again
                    // after a pause; what the peer reports received is
                    // skipped then. (One of an ended epoch is not.)
                    peer.posted = peer.posted.min(value & WR_INDEX_MASK);
                }
            }
            WR_ROW => {
                peer.row_inflight = false;
                if ok {
                    peer.row_acked_version = peer.row_acked_version.max(value);
                }
            }
            _ => return,
        }
        if !ok {
            self.status.write_errors += 1;
            peer.retry_at_ns = now_ns.saturating_add(self.backoff_ns);
            peer.reconnect = true;
        }
        self.invariants();
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.now = now_ns;
        for m in 0..self.n {
            if m != self.me.index() {
                let member = MemberId(m as u8);
                let seen = self.table.observe(&self.mem, member, self.lay.row(member));
                if seen.changed() {
                    self.take_row(member);
                    self.deliver_due = self.pinned.is_some();
                }
            }
        }
        self.try_start();
        self.advance_epoch();
        self.receive_due = false;
        self.receive();
        self.send_nulls();
        self.seal_row();
        self.invariants();
    }

    fn handle_peer_down(&mut self, now_ns: u64, peer: MemberId) {
        self.now = now_ns;
        if peer.index() < self.n && peer != self.me {
            self.peers[peer.index()].down = true;
            self.rows[peer.index()].frozen = true;
            if self.view & (1 << peer.0) != 0 && self.halted.is_none() {
                self.suspect(peer);
                self.wedge(WedgeCause::PeerDown(peer));
                // The view change goes on at the next timeout call.
                self.deliver_due = true;
            }
            self.seal_row();
        }
        self.invariants();
    }

    fn handle_peer_up(&mut self, now_ns: u64, peer: MemberId) {
        // A new process in that member's place: its row starts over (its
        // versions too), the channel to it must be re-established, and it
        // may ask to join.
        self.now = now_ns;
        let m = peer.index();
        if m < self.n && peer != self.me && !self.peers[m].down && self.view & (1 << m) != 0 {
            // A late notice about the process our view already has (it
            // joined before the notice came; its predecessor's death came
            // first): only the channel is re-established.
            self.peers[m].reconnect = true;
            self.peers[m].retry_at_ns = now_ns;
        } else if m < self.n && peer != self.me {
            let known = match self.rows[m].incarnation {
                0 => self
                    .pinned_incarnation(peer)
                    .filter(|_| self.view & (1 << m) != 0)
                    .unwrap_or(0),
                held => held,
            };
            if known != 0 {
                self.gone_incarnation[m] = known;
            }
            if let Some((_, point)) = self.restart_rows[m] {
                // A total restart: its summary stands (its log only grew
                // inside the cut), its process is a new one (pinned once
                // its row shows it).
                self.restart_rows[m] = Some((0, point));
            }
            self.table.clear(peer);
            self.rows[m] = PeerRow::default();
            let p = &mut self.peers[m];
            p.down = false;
            p.reconnect = true;
            p.retry_at_ns = now_ns;
            p.row_inflight = false;
            p.row_acked_version = 0;
            p.posted = 0;
            if self.view & (1 << m) != 0 {
                // Still in our view as its predecessor: that one is gone.
                self.rows[m].frozen = true;
            }
        }
        self.invariants();
    }

    fn poll_action(&mut self) -> Option<Action> {
        // A broken channel first, then rows (they free windows and make
        // messages stable), then messages, one peer after another so that
        // none starves.
        self.seal_row();
        for p in 0..self.n {
            let peer = &mut self.peers[p];
            if p != self.me.index() && peer.reconnect && !peer.down && peer.retry_at_ns <= self.now
            {
                peer.reconnect = false;
                return Some(Action::Reconnect {
                    peer: MemberId(p as u8),
                    channel: crate::fabric::Channel::for_region(self.lay.region),
                });
            }
        }
        for i in 0..self.n {
            let p = (self.next_peer + i) % self.n;
            if p == self.me.index() {
                continue;
            }
            if let Some(a) = self.next_row_push(p) {
                return Some(a);
            }
        }
        for i in 0..self.n {
            let p = (self.next_peer + i) % self.n;
            if p == self.me.index() {
                continue;
            }
            if let Some(a) = self.next_slot_write(p) {
                self.next_peer = (p + 1) % self.n;
                return Some(a);
            }
        }
        None
    }

    fn handle_action_failed(&mut self, now_ns: u64, action: &Action, error: FabricError) {
        // Posts fail through their completions; a reconnect that failed
        // (the peer is not back yet) is tried again after the backoff.
        let _ = error;
        self.now = now_ns;
        if let Action::Reconnect { peer, .. } = *action {
            if let Some(p) = self.peers.get_mut(peer.index()) {
                p.reconnect = true;
                p.retry_at_ns = now_ns.saturating_add(self.backoff_ns);
            }
        }
    }

    fn next_deadline(&self) -> u64 {
        if self.deliver_due || self.receive_due {
            return self.now;
        }
        // A WRITE that lands wakes a parked member (`notify`); what a
        // failed one left to do is due at its retry time.
        self.peers[..self.n]
            .iter()
            .enumerate()
            .filter(|&(m, p)| {
                // Only what `poll_action` would post: to running members,
                // and no messages once halted.
                m != self.me.index()
                    && !p.down
                    && (p.reconnect
                        || (self.halted.is_none()
                            && p.posted < self.sent
                            && p.inflight < MCAST_INFLIGHT_MAX)
                        || (p.row_acked_version < self.row.version()
                            && !p.row_inflight
                            && !self.view_unshown()))
            })
            .map(|(_, p)| p.retry_at_ns.max(self.now))
            .min()
            .unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests;
