//! The multicast engine: Derecho's small-message multicast (SMC) with its
//! atomic (totally ordered) delivery on a shared state table (Derecho §3,
//! "Small messages", §3.2 and §3.4 "Multiple senders").
//!
//! # What moves where
//!
//! Every member of the multicast group (members `0 .. initial_members`) is
//! a sender and a receiver. Each member's multicast region holds, per
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
//! Message `k` of the sender at rank `s` has the global sequence number
//! `k·n + s` (`n` members). Message `g` is *stable* once every member's row
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
//! | head = k+1 | meta | incarnation | payload (padded to 8) | checksum | tail = k+1 |
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
//! # Failures (this step)
//!
//! A member that learns a peer is gone *wedges*: it sends and receives
//! nothing more (its own counts stay put, as a ragged trim needs), freezes
//! the dead member's counts as last seen (Derecho freezes the row), and
//! delivers only what still becomes stable. Derecho's view
//! change (ragged trim, a new epoch without the dead member) is the next
//! step; until then a group that lost a member stops delivering new
//! messages. A WRITE that fails (a broken channel) is posted again after
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
/// Bytes of one multicast row (the schema's words, to a cache line).
pub const MCAST_ROW_BYTES: u64 = 128;
/// Work requests in flight to one peer at most (a queue pair's send queue
/// is bounded; more wait in the sender's ring and go out as these
/// complete).
pub const MCAST_INFLIGHT_MAX: u32 = 64;
/// Messages taken from one sender's ring in one call at most.
const RECEIVE_BATCH_MAX: u64 = 256;
/// Global sequence numbers one delivery call looks at at most (nulls are
/// skipped without returning).
const DELIVER_SCAN_MAX: u32 = 1024;

const SLOT_HEADER_BYTES: u64 = 24;
const SLOT_TRAILER_BYTES: u64 = 16;
const KIND_DATA: u64 = 1;
const KIND_NULL: u64 = 2;

const DOMAIN_ROW: u64 = 0x4D43_524F_5701; // "MCROW"
const DOMAIN_SLOT: u64 = 0x4D43_534C_4F54; // "MCSLOT"
const DOMAIN_VIEW: u64 = 0x4D43_5649_4557; // "MCVIEW"

const WR_KIND_SHIFT: u32 = 52;
const WR_SLOT: u64 = 1;
const WR_ROW: u64 = 2;
const WR_VALUE_MASK: u64 = (1 << WR_KIND_SHIFT) - 1;

/// Received messages per sender (element `s`: messages of the member at
/// rank `s` taken from its ring, in its order).
pub const COL_RECEIVED: Column = Column::new("received", 0, MAX_MEMBERS as u16, Kind::U64);
/// Messages delivered (global sequence numbers, nulls included).
pub const COL_DELIVERED: Column = Column::u64("delivered", 8);
/// The row owner's incarnation (non-zero).
pub const COL_INCARNATION: Column = Column::u64("incarnation", 9);
/// Digest of the incarnations the owner pinned (0: not started).
pub const COL_VIEW_DIGEST: Column = Column::u64("view_digest", 10);
const COLUMNS: [Column; 4] = [
    COL_RECEIVED,
    COL_DELIVERED,
    COL_INCARNATION,
    COL_VIEW_DIGEST,
];
const SCHEMA: Schema = Schema::new("multicast", DOMAIN_ROW, &[11], &COLUMNS);
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
        let members = config.initial_members;
        let n = u64::from(members);
        let window = u64::from(config.mcast_window);
        let payload_bytes_max = round_up(u64::from(config.mcast_payload_bytes_max), 8);
        let slot_bytes = round_up(
            SLOT_HEADER_BYTES + payload_bytes_max + SLOT_TRAILER_BYTES,
            64,
        );
        let staging_offset = n * MCAST_ROW_BYTES;
        let rings_offset = staging_offset + n * MCAST_ROW_BYTES;
        Some(McastLayout {
            members,
            window,
            payload_bytes_max,
            slot_bytes,
            staging_offset,
            rings_offset,
            region_bytes: rings_offset + n * window * slot_bytes,
        })
    }

    /// The region as the fabric registers it.
    pub fn region(&self) -> RegionSpec {
        RegionSpec {
            id: MCAST_REGION,
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
        Addr::new(MCAST_REGION, u64::from(member.0) * MCAST_ROW_BYTES)
    }

    /// The staging copy of our row pushed to `peer` (local use only).
    pub fn staging(&self, peer: MemberId) -> Addr {
        Addr::new(
            MCAST_REGION,
            self.staging_offset + u64::from(peer.0) * MCAST_ROW_BYTES,
        )
    }

    /// The slot of `sender`'s message `index`.
    pub fn slot(&self, sender: MemberId, index: u64) -> Addr {
        Addr::new(
            MCAST_REGION,
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

fn slot_checksum(head: u64, meta: u64, incarnation: u64, payload: &[u8]) -> u64 {
    let mut c = Checksum::new(DOMAIN_SLOT);
    c.word(head);
    c.word(meta);
    c.word(incarnation);
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
    /// Its global sequence number (`index · members + sender`).
    pub seq: u64,
    /// The sender's incarnation (the one this member pinned).
    pub sender_incarnation: u64,
    /// Payload bytes (copied into the caller's buffer).
    pub len: usize,
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
    /// this group.
    Wedged,
}

/// Why the engine wedged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WedgeCause {
    /// A member's process is gone.
    PeerDown(MemberId),
    /// A message no longer validated when it was delivered: its sender
    /// overwrote it early.
    SlotOverwritten(MemberId),
}

/// Counters and state for status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct McastStatus {
    /// The group formed: every member's row shows the incarnations we
    /// pinned.
    pub started: bool,
    /// Why the engine wedged, if it did.
    pub wedged: Option<WedgeCause>,
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
    status: McastStatus,
    now: u64,
}

impl<M: Memory> McastEngine<M> {
    /// The engine of `config.self_id`, or `None` with multicast off or
    /// for a member outside the group (`self_id >= initial_members`).
    pub fn new(config: &Config, memory: M, now_ns: u64) -> Option<Self> {
        let lay = McastLayout::new(config)?;
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
            delivered: 0,
            peers: [PeerPost::default(); MAX_MEMBERS],
            next_peer: 0,
            rows: [PeerRow::default(); MAX_MEMBERS],
            deliver_due: false,
            receive_due: false,
            wedged: None,
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

    /// Our own incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Members of the group.
    pub fn members(&self) -> usize {
        self.n
    }

    /// Grows whenever the engine sends, receives or delivers anything
    /// (messages received from every sender, ours included, plus
    /// deliveries): how a driver tells that a call did work.
    pub fn progress(&self) -> u64 {
        self.received.iter().sum::<u64>() + self.delivered
    }

    /// Global sequence numbers delivered so far (nulls included).
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Why the engine wedged, if it did.
    pub fn wedged(&self) -> Option<WedgeCause> {
        self.wedged
    }

    /// Whether every member's row shows the incarnations we pinned: the
    /// group is formed and we may send.
    fn formed(&self) -> bool {
        let Some((_, digest)) = self.pinned else {
            return false;
        };
        (0..self.n).all(|m| m == self.me.index() || self.rows[m].digest == digest)
    }

    /// Multicasts `payload`: writes it into our ring (the WRITEs to peers
    /// come out of [`Engine::poll_action`]). Returns its index in our
    /// stream.
    pub fn send(&mut self, payload: &[u8]) -> Result<u64, SendError> {
        if payload.len() as u64 > self.lay.payload_bytes_max {
            return Err(SendError::TooLarge);
        }
        if self.wedged.is_some() {
            return Err(SendError::Wedged);
        }
        if !self.formed() {
            return Err(SendError::NotStarted);
        }
        if !self.window_room(self.sent) {
            self.status.window_full += 1;
            return Err(SendError::WindowFull);
        }
        let index = self.sent;
        self.write_own_slot(index, KIND_DATA, payload);
        self.invariants();
        Ok(index)
    }

    /// Delivers the next message if it is stable, copying its payload into
    /// `out` (at least `mcast_payload_bytes_max` bytes). Nulls are skipped.
    /// `None`: nothing deliverable now.
    pub fn poll_delivery(&mut self, out: &mut [u8]) -> Option<McastDelivery> {
        assert!(out.len() as u64 >= self.lay.payload_bytes_max);
        let Some(pinned) = self.pinned else {
            self.deliver_due = false;
            return None;
        };
        for _ in 0..DELIVER_SCAN_MAX {
            let seq = self.delivered;
            let sender = MemberId((seq % self.n as u64) as u8);
            let index = seq / self.n as u64;
            if !self.stable(sender, index) {
                self.deliver_due = false;
                return None;
            }
            let incarnation = pinned.0[sender.index()];
            let Some((kind, len)) = self.read_slot(sender, index, incarnation, out) else {
                // Received (validated) and not yet freed by us: only a
                // sender that broke the window rule changes it.
                self.wedge(WedgeCause::SlotOverwritten(sender));
                self.deliver_due = false;
                return None;
            };
            self.delivered += 1;
            self.row.set(&COL_DELIVERED, self.delivered);
            if kind == KIND_DATA {
                self.status.delivered_messages += 1;
                self.invariants();
                self.deliver_due = true;
                return Some(McastDelivery {
                    sender,
                    index,
                    seq,
                    sender_incarnation: incarnation,
                    len,
                });
            }
        }
        self.deliver_due = true;
        None
    }

    /// Whether message `index` of `sender` is received by every member
    /// (that pinned the same incarnations).
    fn stable(&self, sender: MemberId, index: u64) -> bool {
        #[cfg(feature = "mutation-testing")]
        if self.mutation == crate::config::Mutation::DeliverBeforeStable {
            return self.received[sender.index()] > index;
        }
        (0..self.n).all(|m| self.received_by(MemberId(m as u8), sender) > index)
    }

    /// What `member` reports received of `sender` (ours exactly; a peer's
    /// from its last good row, 0 unless it pinned what we pinned).
    fn received_by(&self, member: MemberId, sender: MemberId) -> u64 {
        if member == self.me {
            return self.received[sender.index()];
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
        if let Some((pinned, _)) = self.pinned {
            if incarnation != pinned[m] {
                // Another process in that member's place: what it says is
                // not about this group.
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
    }

    /// Whether our message `index` may take its slot: the message it
    /// replaces is delivered by every member.
    fn window_room(&self, index: u64) -> bool {
        if index < self.lay.window {
            return true;
        }
        let replaced = (index - self.lay.window) * self.n as u64 + u64::from(self.me.0);
        (0..self.n).all(|m| self.delivered_by(MemberId(m as u8)) > replaced)
    }

    fn write_own_slot(&mut self, index: u64, kind: u64, payload: &[u8]) {
        assert!(index == self.sent && self.window_room(index));
        let at = self.lay.slot(self.me, index);
        let len = payload.len() as u64;
        let head = index + 1;
        let meta_word = meta(len, kind, self.me);
        let checksum = slot_checksum(head, meta_word, self.incarnation, payload);
        self.mem.store_u64(at.add(8), meta_word);
        self.mem.store_u64(at.add(16), self.incarnation);
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
        self.row.set_at(&COL_RECEIVED, self.me.index(), self.sent);
        self.deliver_due = true;
    }

    /// Whether `sender`'s message `index` is in our ring copy, whole and of
    /// the incarnation we pinned.
    fn slot_valid(&self, sender: MemberId, index: u64, incarnation: u64) -> bool {
        let mut buf = [0u8; MCAST_PAYLOAD_BYTES_CAP as usize];
        self.read_slot(sender, index, incarnation, &mut buf)
            .is_some()
    }

    /// Copies `sender`'s message `index` out into `out` if its slot holds
    /// it whole, from `incarnation`: head and tail, meta, incarnation and
    /// the checksum over the copy agree, and the head still does after the
    /// copy. Returns its kind and payload length.
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
            || (kind != KIND_DATA && kind != KIND_NULL)
            || (meta_word >> 40) & 0xFF != u64::from(sender.0)
            || meta_word >> 48 != 0
            || self.mem.load_u64(at.add(16)) != incarnation
        {
            return None;
        }
        let payload = &mut out[..len as usize];
        self.mem.read(at.add(SLOT_HEADER_BYTES), payload);
        let trailer = at.add(SLOT_HEADER_BYTES + round_up(len, 8));
        let whole = self.mem.load_u64(trailer.add(8)) == head
            && self.mem.load_u64(trailer) == slot_checksum(head, meta_word, incarnation, payload)
            && self.mem.load_u64(at) == head;
        whole.then_some((kind, len as usize))
    }

    fn wedge(&mut self, cause: WedgeCause) {
        if self.wedged.is_none() {
            self.wedged = Some(cause);
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

    /// Pins every member's incarnation once each row was seen.
    fn try_start(&mut self) {
        if self.pinned.is_some() {
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
        let mut c = Checksum::new(DOMAIN_VIEW);
        for &i in &incarnations[..self.n] {
            c.word(i);
        }
        let digest = c.finish();
        self.pinned = Some((incarnations, digest));
        self.row.set(&COL_VIEW_DIGEST, digest);
    }

    fn receive(&mut self) {
        let Some((incarnations, _)) = self.pinned else {
            return;
        };
        if self.wedged.is_some() {
            // Derecho: a wedged member reports no newly received message,
            // so the counts a ragged trim is computed from stay put.
            return;
        }
        for (s, &incarnation) in incarnations.iter().enumerate().take(self.n) {
            if s == self.me.index() {
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
                self.row.set_at(&COL_RECEIVED, s, next + 1);
                self.deliver_due = true;
            }
        }
    }

    /// Fills our turns with nulls up to the round the busiest sender
    /// reached, as far as the window lets us.
    fn send_nulls(&mut self) {
        if !self.formed() || self.wedged.is_some() {
            return;
        }
        let target = self.received[..self.n].iter().copied().max().unwrap_or(0);
        while self.sent < target && self.window_room(self.sent) {
            self.write_own_slot(self.sent, KIND_NULL, &[]);
        }
    }

    /// The next row push due to a peer, if any.
    fn next_row_push(&mut self, p: usize) -> Option<Action> {
        let peer = &self.peers[p];
        let version = self.row.version();
        if peer.down
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
        let peer = &mut self.peers[p];
        if peer.down
            || peer.reconnect
            || peer.retry_at_ns > self.now
            || peer.inflight >= MCAST_INFLIGHT_MAX
        {
            return None;
        }
        if peer.posted < reported {
            peer.posted = reported;
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
            wr_id: WrId((WR_SLOT << WR_KIND_SHIFT) | (index & WR_VALUE_MASK)),
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
        assert!(self.received[self.me.index()] == self.sent);
        assert!(self.row.get_at(&COL_RECEIVED, self.me.index()) == self.sent);
        assert!(self.row.get(&COL_DELIVERED) == self.delivered);
        // Nothing is delivered past what we received ourselves.
        let n = self.n as u64;
        if self.delivered > 0 {
            let last = self.delivered - 1;
            assert!(self.received[(last % n) as usize] > last / n);
        }
        for p in &self.peers[..self.n] {
            assert!(p.posted <= self.sent);
            assert!(p.inflight <= MCAST_INFLIGHT_MAX);
        }
        // Our ring holds at most a window of messages not yet delivered
        // everywhere.
        assert!(self.sent <= self.lay.window || self.window_room(self.sent - 1));
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
        let peer = &mut self.peers[p];
        peer.inflight = peer.inflight.saturating_sub(1);
        let ok = completion.status.is_ok();
        match kind {
            WR_SLOT => {
                if !ok {
                    // The channel broke: this WRITE and those behind it
                    // may not have landed (even if a later one did: the
                    // peer takes messages in order). Post them again
                    // after a pause; what the peer reports received is
                    // skipped then.
                    peer.posted = peer.posted.min(value);
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
            self.wedge(WedgeCause::PeerDown(peer));
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
                    channel: crate::fabric::Channel::for_region(MCAST_REGION),
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
                m != self.me.index()
                    && !p.down
                    && (p.reconnect
                        || (p.posted < self.sent && p.inflight < MCAST_INFLIGHT_MAX)
                        || (p.row_acked_version < self.row.version() && !p.row_inflight))
            })
            .map(|(_, p)| p.retry_at_ns.max(self.now))
            .min()
            .unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests;
