//! Derecho's large-message multicast (RDMC, Derecho §3 "Large messages"
//! and "Binomial pipeline"; §3.1 "RDMC").
//!
//! # What moves where
//!
//! Every member of the session (the group's members in one epoch) may
//! send. A member's RDMC region holds, per sender, `slots` message slots;
//! a message of `len` bytes is cut into `chunks = ⌈len / chunk_bytes⌉`
//! chunks, and chunk `c` of the sender's message `m` lies at the same
//! place in every member's region (slot `m mod slots`, offset
//! `c · chunk_bytes`): a receiver knows where each chunk lands before it
//! comes, and a forwarder WRITEs a chunk from where it landed in its own
//! memory to the same place in the next member's.
//!
//! ```text
//! | row of member 0 .. row of span-1 (64 bytes each) | staging row per peer (span × 64) |
//! | per sender, per slot: header (64) | chunk flags (8 per chunk) | payload (chunks) |
//! ```
//!
//! * **Header**: `[tag, len, payload sum, check]`, written by the sender
//!   into every member's slot (one WRITE each) when it starts a message;
//!   `tag` is `epoch << 40 | (m + 1)`. It tells a receiver how long the
//!   message is, hence its chunk count and its schedule, and what the
//!   payload sums to.
//! * **Chunk flags**: a chunk's word holds the message's tag once the
//!   chunk is whole in this memory. A forwarder WRITEs the flag only
//!   after the chunk's WRITE *completed* (RC: the data is placed at the
//!   target by then), so a flag never runs ahead of its data, whatever
//!   order the target's CPU sees two WRITEs' data in.
//! * **Rows**: per sender, how many of its messages the row's owner
//!   delivered (`epoch << 40 | count`), pushed to every member on change
//!   (from a staging copy per peer, which stays put until the WRITE
//!   completed).
//!   A sender reuses a slot (message `m + slots`) only once every member's
//!   row shows message `m` delivered, so a message stays in place from
//!   its first chunk to its last delivery.
//!
//! # The binomial pipeline
//!
//! [`BinomialSchedule`] says, per round, which chunk each member sends to
//! whom and which it receives. The members are placed on a hypercube of
//! `2^l ≤ n` vertices (the sender at vertex 0); in round `r` every vertex
//! exchanges with its neighbour across dimension `r mod l`. The sender
//! hands out chunk `r` in round `r`; chunk `c` then spreads down a
//! binomial tree: the number of members holding it doubles each round
//! until, `l` rounds later, every vertex has it. In each round every
//! vertex sends one chunk and receives one, so the sender's link and
//! every other link carry one chunk per round: `chunks + l` rounds in
//! all, against `chunks · (n − 1)` for sending to everyone in turn. With
//! `n` not a power of two, each of the `n − 2^l` extra members is the
//! twin of a vertex, which forwards every chunk it receives to it one
//! round later.
//!
//! Rounds are not synchronized: each member posts its sends in round
//! order, each as soon as its chunk is whole in its memory (a chunk it
//! sends in round `r` reached it in an earlier round, so nobody waits on
//! itself), and counts a message received once every chunk its schedule
//! brings is flagged.
//!
//! # Delivery and failures
//!
//! A member delivers each sender's messages in the sender's order, each
//! once, copied out of the slot and validated again after the copy: the
//! header and every chunk's flag still carry the message's tag, and the
//! copy sums to the header's payload sum (a WRITE of an ended session
//! that landed late, or a faulty peer, cannot pass off other bytes). A
//! session belongs to one epoch: a peer's death, a failed WRITE or an
//! explicit [`RdmcEngine::wedge`] wedges it (Derecho: "once wedged, RDMC
//! ceases to report newly received messages, and new multicasts cannot
//! be initiated"); [`RdmcEngine::wedge_sender`] wedges one sender's
//! session. Which of the messages some members received the next epoch
//! keeps is the atomic multicast's decision, not RDMC's.

use crate::checksum::mix64;
use crate::config::Config;
use crate::engine::Engine;
use crate::fabric::{
    Action, Addr, Completion, FabricError, MemberId, Op, RegionId, WorkRequest, WrId, MAX_MEMBERS,
};
use crate::layout::{RegionSpec, RemoteAccess};
use crate::mem::Memory;
use heapless::Deque;

/// The RDMC engine's region: rows, headers, chunk flags and payloads.
pub const RDMC_REGION: RegionId = RegionId(9);
/// Most slots per sender.
pub const RDMC_SLOTS_CAP: u32 = 64;
/// Smallest chunk (one cache line) and the chunks' alignment.
pub const RDMC_CHUNK_BYTES_MIN: u32 = 64;
/// Largest chunk (one WRITE).
pub const RDMC_CHUNK_BYTES_MAX: u32 = 1 << 30;
/// Most chunks in one message.
pub const RDMC_CHUNKS_CAP: u64 = 1 << 20;
/// Largest message.
pub const RDMC_MESSAGE_BYTES_CAP: u64 = 1 << 32;
/// Largest region (every sender's slots).
pub const RDMC_REGION_BYTES_CAP: u64 = 1 << 34;
/// Largest epoch a tag carries.
pub const RDMC_EPOCH_MAX: u64 = (1 << 24) - 1;
/// Chunk WRITEs one member has in flight per sender's session at most
/// (each until its flag's WRITE completed).
pub const RDMC_INFLIGHT_PER_SESSION: u32 = 8;

const ROW_BYTES: u64 = 64;
const HEADER_BYTES: u64 = 64;
const HEADER_WRITE_BYTES: u32 = 32;
const DOMAIN_HEADER: u64 = 0x5244_4D43_4844; // "RDMCHD"
const TAG_EPOCH_SHIFT: u32 = 40;
const TAG_COUNT_MASK: u64 = (1 << TAG_EPOCH_SHIFT) - 1;

const WR_KIND_SHIFT: u32 = 48;
const WR_SENDER_SHIFT: u32 = 40;
/// A work request carries its session's epoch (low bits) above the
/// chunk: a completion of an earlier session, reaped after the host
/// replaced it, is told apart.
const WR_EPOCH_SHIFT: u32 = 24;
const WR_EPOCH_MASK: u64 = (1 << (WR_SENDER_SHIFT - WR_EPOCH_SHIFT)) - 1;
const WR_CHUNK_MASK: u64 = (1 << WR_EPOCH_SHIFT) - 1;
const _: () = assert!(RDMC_CHUNKS_CAP <= WR_CHUNK_MASK + 1);
const WR_CHUNK: u64 = 1;
const WR_FLAG: u64 = 2;
const WR_HEADER: u64 = 3;
const WR_ROW: u64 = 4;

const FLAG_QUEUE_CAP: usize = MAX_MEMBERS * RDMC_INFLIGHT_PER_SESSION as usize;

/// One chunk between two members in one round of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The other member's rank: the target of a send, the source of a
    /// receipt.
    pub peer: u8,
    /// The chunk.
    pub chunk: u64,
}

/// The binomial pipeline of one message (see the module documentation).
/// Ranks are positions among the session's members, `0 .. members`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinomialSchedule {
    members: u8,
    sender: u8,
    chunks: u64,
    /// `l`: the hypercube has `2^l` vertices, the largest power of two
    /// not above `members`.
    log2: u32,
    cube: u8,
}

impl BinomialSchedule {
    /// The schedule of a message of `chunks` chunks (at least 1) sent by
    /// rank `sender` to `members` members (1 to [`MAX_MEMBERS`]).
    pub fn new(members: u8, sender: u8, chunks: u64) -> Option<BinomialSchedule> {
        if members == 0 || usize::from(members) > MAX_MEMBERS || sender >= members || chunks == 0 {
            return None;
        }
        let log2 = 7 - members.leading_zeros();
        Some(BinomialSchedule {
            members,
            sender,
            chunks,
            log2,
            cube: 1 << log2,
        })
    }

    /// Chunks of the message.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// Rounds until every member holds every chunk: `chunks + l` on a
    /// hypercube, one more when extra members hang off twins.
    pub fn rounds(&self) -> u64 {
        if self.members == 1 {
            return 0;
        }
        self.chunks + u64::from(self.log2) + u64::from(self.members > self.cube)
    }

    /// The vertex of a rank: the sender at vertex 0.
    fn vertex(&self, rank: u8) -> u8 {
        (rank + self.members - self.sender) % self.members
    }

    fn rank(&self, vertex: u8) -> u8 {
        (vertex + self.sender) % self.members
    }

    /// What hypercube vertex `v` sends in round `r`: (vertex, chunk).
    fn cube_send(&self, v: u8, round: u64) -> Option<(u8, u64)> {
        let l = u64::from(self.log2);
        if l == 0 || v >= self.cube {
            return None;
        }
        let d = (round % l) as u32;
        let partner = v ^ (1 << d);
        let chunk = if v == 0 {
            // The sender hands out the next chunk.
            Some(round)
        } else if v & (1 << d) != 0 {
            // After its l − 1 rounds of spreading, chunk r − l is held by
            // every vertex with bit d set: they give it to the other half.
            round.checked_sub(l)
        } else {
            // Chunk r − j (0 < j < l) is held by the vertices whose
            // lowest set bit, counting dimensions from r − l + 1 on, is
            // r − j: a partition of the other half, so each vertex sends
            // exactly one chunk.
            let j = (1..l)
                .rev()
                .find(|&j| v & (1 << ((round + l - j) % l)) != 0)?;
            round.checked_sub(j)
        }?;
        if chunk >= self.chunks || partner == 0 {
            return None;
        }
        Some((partner, chunk))
    }

    /// What hypercube vertex `v` receives in round `r`: (vertex, chunk).
    fn cube_receive(&self, v: u8, round: u64) -> Option<(u8, u64)> {
        let l = u64::from(self.log2);
        if l == 0 || v >= self.cube {
            return None;
        }
        let partner = v ^ (1 << (round % l) as u32);
        match self.cube_send(partner, round) {
            Some((to, chunk)) if to == v => Some((partner, chunk)),
            _ => None,
        }
    }

    /// The extra vertex twinned with vertex `v`, if any.
    fn extra_of(&self, v: u8) -> Option<u8> {
        if v == 0 || v >= self.cube {
            return None;
        }
        let x = v + self.cube - 1;
        (x < self.members).then_some(x)
    }

    /// What rank `rank` sends in round `round`: at most one chunk on the
    /// hypercube and, for a twin, the chunk it received the round before.
    pub fn sends(&self, rank: u8, round: u64) -> [Option<Transfer>; 2] {
        let mut out = [None; 2];
        if rank >= self.members || round >= self.rounds() {
            return out;
        }
        let v = self.vertex(rank);
        if let Some((to, chunk)) = self.cube_send(v, round) {
            out[0] = Some(Transfer {
                peer: self.rank(to),
                chunk,
            });
        }
        if let (Some(x), Some(before)) = (self.extra_of(v), round.checked_sub(1)) {
            if let Some((_, chunk)) = self.cube_receive(v, before) {
                out[1] = Some(Transfer {
                    peer: self.rank(x),
                    chunk,
                });
            }
        }
        out
    }

    /// What rank `rank` receives in round `round`, and from whom.
    pub fn receive(&self, rank: u8, round: u64) -> Option<Transfer> {
        if rank >= self.members || round >= self.rounds() {
            return None;
        }
        let v = self.vertex(rank);
        if v >= self.cube {
            let twin = v - self.cube + 1;
            let (_, chunk) = self.cube_receive(twin, round.checked_sub(1)?)?;
            return Some(Transfer {
                peer: self.rank(twin),
                chunk,
            });
        }
        let (from, chunk) = self.cube_receive(v, round)?;
        Some(Transfer {
            peer: self.rank(from),
            chunk,
        })
    }
}

/// Where the RDMC engine's memory lies, from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmcLayout {
    /// Member ids `0 .. span` have rows and slots.
    pub span: u8,
    /// Slots per sender.
    pub slots: u64,
    /// Bytes of a chunk (the last one of a message may be shorter).
    pub chunk_bytes: u64,
    /// Largest message.
    pub message_bytes_max: u64,
    /// Chunks of the largest message.
    pub chunks_max: u64,
    flags_bytes: u64,
    payload_bytes: u64,
    slot_bytes: u64,
    slots_offset: u64,
    /// Bytes of the region.
    pub region_bytes: u64,
}

const fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

impl RdmcLayout {
    /// The layout of a configuration, `None` with RDMC off
    /// (`rdmc_slots = 0`). The configuration is validated by the caller.
    pub fn new(config: &Config) -> Option<RdmcLayout> {
        if config.rdmc_slots == 0 {
            return None;
        }
        let span = config.member_count;
        let chunk_bytes = u64::from(config.rdmc_chunk_bytes.max(RDMC_CHUNK_BYTES_MIN));
        let message_bytes_max = config.rdmc_message_bytes_max.max(1);
        let chunks_max = message_bytes_max.div_ceil(chunk_bytes);
        let flags_bytes = round_up(chunks_max * 8, 64);
        let payload_bytes = round_up(message_bytes_max, 64);
        let slot_bytes = HEADER_BYTES + flags_bytes + payload_bytes;
        let slots = u64::from(config.rdmc_slots);
        // Rows, then a staging copy of ours per peer.
        let slots_offset = 2 * u64::from(span) * ROW_BYTES;
        Some(RdmcLayout {
            span,
            slots,
            chunk_bytes,
            message_bytes_max,
            chunks_max,
            flags_bytes,
            payload_bytes,
            slot_bytes,
            slots_offset,
            region_bytes: slots_offset + u64::from(span) * slots * slot_bytes,
        })
    }

    /// Bytes of the region these parameters would need, `None` past
    /// `u64` (validation, before [`RdmcLayout::new`] may compute it).
    pub fn region_bytes_for(config: &Config) -> Option<u64> {
        let chunk = u64::from(config.rdmc_chunk_bytes.max(RDMC_CHUNK_BYTES_MIN));
        let message = config.rdmc_message_bytes_max.max(1);
        let flags = message.div_ceil(chunk).checked_mul(8)?;
        let per_slot = HEADER_BYTES
            .checked_add(flags.checked_next_multiple_of(64)?)?
            .checked_add(message.checked_next_multiple_of(64)?)?;
        let span = u64::from(config.member_count);
        per_slot
            .checked_mul(u64::from(config.rdmc_slots))?
            .checked_mul(span)?
            .checked_add(2 * span * ROW_BYTES)
    }

    /// The region as the fabric registers it.
    pub fn region(&self) -> RegionSpec {
        RegionSpec {
            id: RDMC_REGION,
            bytes: self.region_bytes,
            remote: RemoteAccess::Members,
        }
    }

    /// Words that identify the layout (for the layout hash).
    pub fn hash_words(&self) -> [u64; 4] {
        [
            u64::from(self.span),
            self.slots,
            self.chunk_bytes,
            self.message_bytes_max,
        ]
    }

    /// `member`'s row.
    pub fn row(&self, member: MemberId) -> Addr {
        Addr::new(RDMC_REGION, u64::from(member.0) * ROW_BYTES)
    }

    /// The staging copy of our row pushed to `peer` (local use only).
    pub fn staging(&self, peer: MemberId) -> Addr {
        Addr::new(
            RDMC_REGION,
            (u64::from(self.span) + u64::from(peer.0)) * ROW_BYTES,
        )
    }

    fn slot(&self, sender: MemberId, index: u64) -> u64 {
        self.slots_offset
            + (u64::from(sender.0) * self.slots + index % self.slots) * self.slot_bytes
    }

    /// The header of `sender`'s message `index`.
    pub fn header(&self, sender: MemberId, index: u64) -> Addr {
        Addr::new(RDMC_REGION, self.slot(sender, index))
    }

    /// The flag word of one chunk of `sender`'s message `index`.
    pub fn flag(&self, sender: MemberId, index: u64, chunk: u64) -> Addr {
        Addr::new(
            RDMC_REGION,
            self.slot(sender, index) + HEADER_BYTES + 8 * chunk,
        )
    }

    /// Where one chunk of `sender`'s message `index` lies.
    pub fn chunk(&self, sender: MemberId, index: u64, chunk: u64) -> Addr {
        Addr::new(
            RDMC_REGION,
            self.slot(sender, index) + HEADER_BYTES + self.flags_bytes + chunk * self.chunk_bytes,
        )
    }

    /// Chunks of a message of `len` bytes (an empty one has one, empty).
    pub fn chunks_of(&self, len: u64) -> u64 {
        len.div_ceil(self.chunk_bytes).max(1)
    }

    /// Bytes of chunk `chunk` of a message of `len` bytes.
    pub fn chunk_len(&self, len: u64, chunk: u64) -> u64 {
        len.saturating_sub(chunk * self.chunk_bytes)
            .min(self.chunk_bytes)
    }
}

/// Why a session is wedged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmcWedge {
    /// The host reported the member's process gone.
    PeerDown(MemberId),
    /// A WRITE to the member failed.
    WriteFailed(MemberId),
    /// A message of this sender did not validate after its copy (only a
    /// faulty member overwrites a slot early).
    Corrupt(MemberId),
    /// The application (or the view change above) asked.
    Asked,
}

/// Why a message was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmcSendError {
    /// Longer than `rdmc_message_bytes_max`.
    TooLarge {
        /// Its length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// Every slot still holds a message some member has not delivered:
    /// try again after polling.
    SlotsBusy,
    /// The session (or our sender's session) is wedged.
    Wedged,
}

/// Why a delivery was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmcDeliverError {
    /// The buffer is shorter than the next message (`len` bytes); it
    /// stays next.
    BufferTooSmall {
        /// The message's length.
        len: u64,
    },
}

/// Why an ordered delivery ([`RdmcEngine::deliver_ordered`]) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmcOrderError {
    /// The sender is not a member of the session.
    NotMember,
    /// Not the sender's next message (`next` is).
    OutOfOrder {
        /// The sender's next message.
        next: u64,
    },
    /// Not whole here yet.
    NotReceived,
    /// The slot no longer holds it (the session wedged).
    Corrupt,
    /// The buffer is shorter than the message (`len` bytes).
    BufferTooSmall {
        /// The message's length.
        len: u64,
    },
}

/// One delivered message (its bytes are in the caller's buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmcDelivery {
    /// Its sender.
    pub sender: MemberId,
    /// The session's epoch.
    pub epoch: u64,
    /// Its index among the sender's messages of the epoch (from 0).
    pub index: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// Per sender, what this member has of its messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RdmcSenderStatus {
    /// Messages whole in our memory.
    pub received: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// The sender's session is wedged here.
    pub wedged: bool,
}

/// The engine's counters and state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RdmcStatus {
    /// The session's epoch.
    pub epoch: u64,
    /// Its members (a bit per member id).
    pub members: u64,
    /// Our messages sent.
    pub sent: u64,
    /// Per member id.
    pub senders: [RdmcSenderStatus; MAX_MEMBERS],
    /// Chunks we forwarded or sent (WRITEs whose flag landed).
    pub chunks_written: u64,
    /// Their bytes.
    pub bytes_written: u64,
    /// Why the session is wedged, if it is.
    pub wedged: Option<RdmcWedge>,
}

/// One sender's session at this member.
#[derive(Clone, Copy, Debug, Default)]
struct Session {
    /// The message being received and forwarded.
    index: u64,
    /// Its length and schedule, once its header is here.
    plan: Option<(u64, BinomialSchedule)>,
    /// The next round whose receipt we wait for.
    recv_round: u64,
    /// The next round whose sends we post, and which of its two.
    send_round: u64,
    send_step: u8,
    /// Chunk WRITEs posted whose flag's WRITE has not completed.
    inflight: u32,
    /// Messages whole here.
    received: u64,
    /// Messages delivered.
    delivered: u64,
    wedged: bool,
}

/// The RDMC engine of one member (see the module documentation).
pub struct RdmcEngine<M: Memory> {
    mem: M,
    lay: RdmcLayout,
    me: MemberId,
    my_rank: u8,
    epoch: u64,
    /// Members by rank, and each member id's rank.
    ranks: [MemberId; MAX_MEMBERS],
    rank_of: [Option<u8>; MAX_MEMBERS],
    n: u8,
    #[cfg(feature = "mutation-testing")]
    mutation: crate::config::Mutation,
    /// Per rank, its sender's session.
    sessions: [Session; MAX_MEMBERS],
    sent: u64,
    /// Per member id, headers of our messages posted to it.
    headers_posted: [u64; MAX_MEMBERS],
    /// Per member id: our row changed since the last push / a push is in
    /// flight.
    row_dirty: [bool; MAX_MEMBERS],
    row_inflight: [bool; MAX_MEMBERS],
    /// Flags to WRITE (chunk WRITEs that completed): (peer, sender rank,
    /// chunk).
    flags: Deque<(MemberId, u8, u64), FLAG_QUEUE_CAP>,
    next_session: usize,
    next_delivery: usize,
    wedged: Option<RdmcWedge>,
    /// Deliveries are taken in an order decided above
    /// ([`RdmcEngine::deliver_ordered`]), never by `poll_delivery`.
    ordered: bool,
    chunks_written: u64,
    bytes_written: u64,
    now: u64,
}

fn tag(epoch: u64, index: u64) -> u64 {
    (epoch << TAG_EPOCH_SHIFT) | ((index + 1) & TAG_COUNT_MASK)
}

/// A row word: `count` messages delivered in `epoch`.
fn row_word(epoch: u64, count: u64) -> u64 {
    (epoch << TAG_EPOCH_SHIFT) | (count & TAG_COUNT_MASK)
}

fn header_check(tag: u64, len: u64, sum: u64) -> u64 {
    mix64(DOMAIN_HEADER ^ tag ^ len.rotate_left(17) ^ mix64(sum))
}

/// A message's payload sum: four independent multiply-rotate lanes (so
/// that the multiplies overlap: a pass costs a fraction of the copy it
/// validates), mixed with the length.
pub fn payload_sum(bytes: &[u8]) -> u64 {
    const K1: u64 = 0x9E37_79B9_7F4A_7C15;
    const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    let mut lanes = [K1, K2, K1 ^ K2, K1.rotate_left(32)];
    let mut blocks = bytes.chunks_exact(32);
    for b in &mut blocks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[8 * i..8 * i + 8]);
            *lane = (*lane ^ u64::from_le_bytes(w).wrapping_mul(K2))
                .rotate_left(29)
                .wrapping_mul(K1);
        }
    }
    let mut tail = crate::checksum::Checksum::new(DOMAIN_HEADER);
    tail.bytes(blocks.remainder());
    let mut h = tail.finish() ^ (bytes.len() as u64).wrapping_mul(K2);
    for lane in lanes {
        h = mix64(h ^ lane);
    }
    h
}

fn wr(kind: u64, sender_rank: u8, epoch: u64, chunk: u64) -> WrId {
    WrId(
        (kind << WR_KIND_SHIFT)
            | (u64::from(sender_rank) << WR_SENDER_SHIFT)
            | ((epoch & WR_EPOCH_MASK) << WR_EPOCH_SHIFT)
            | chunk,
    )
}

impl<M: Memory> RdmcEngine<M> {
    /// The engine of `config.self_id` for one epoch's session among
    /// `members` (a bit per member id; `self_id` among them), or `None`
    /// with RDMC off, `self_id` outside `members`, a member outside the
    /// layout or an epoch above [`RDMC_EPOCH_MAX`]. The region must be
    /// zero, or hold only an earlier epoch's session.
    pub fn new(config: &Config, memory: M, epoch: u64, members: u64) -> Option<Self> {
        let lay = RdmcLayout::new(config)?;
        let me = config.self_id;
        if epoch > RDMC_EPOCH_MAX
            || members & (1 << me.0) == 0
            || members >> lay.span != 0
            || members == 0
        {
            return None;
        }
        let mut ranks = [MemberId(0); MAX_MEMBERS];
        let mut rank_of = [None; MAX_MEMBERS];
        let mut n = 0u8;
        for id in 0..lay.span {
            if members & (1 << id) != 0 {
                ranks[usize::from(n)] = MemberId(id);
                rank_of[usize::from(id)] = Some(n);
                n += 1;
            }
        }
        let my_rank = rank_of[me.index()]?;
        let e = RdmcEngine {
            mem: memory,
            lay,
            me,
            my_rank,
            epoch,
            ranks,
            rank_of,
            n,
            #[cfg(feature = "mutation-testing")]
            mutation: config.mutation,
            sessions: [Session::default(); MAX_MEMBERS],
            sent: 0,
            headers_posted: [0; MAX_MEMBERS],
            row_dirty: [false; MAX_MEMBERS],
            row_inflight: [false; MAX_MEMBERS],
            flags: Deque::new(),
            next_session: 0,
            next_delivery: 0,
            wedged: None,
            ordered: false,
            chunks_written: 0,
            bytes_written: 0,
            now: 0,
        };
        // Our row starts at zero deliveries of this epoch.
        for id in 0..u64::from(e.lay.span) {
            e.mem
                .store_u64(e.lay.row(me).add(8 * id), row_word(epoch, 0));
        }
        Some(e)
    }

    /// This session's messages are delivered in an order decided above
    /// it (the atomic multicast's), only through
    /// [`RdmcEngine::deliver_ordered`]: [`RdmcEngine::poll_delivery`]
    /// delivers nothing, and nothing is due by itself.
    pub fn ordered(mut self) -> Self {
        self.ordered = true;
        self
    }

    /// The layout.
    pub fn layout(&self) -> &RdmcLayout {
        &self.lay
    }

    /// The session's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The counters and state.
    pub fn status(&self) -> RdmcStatus {
        let mut senders = [RdmcSenderStatus::default(); MAX_MEMBERS];
        for rank in 0..usize::from(self.n) {
            let s = &self.sessions[rank];
            senders[self.ranks[rank].index()] = RdmcSenderStatus {
                received: s.received,
                delivered: s.delivered,
                wedged: s.wedged,
            };
        }
        let mut members = 0;
        for rank in 0..usize::from(self.n) {
            members |= 1 << self.ranks[rank].0;
        }
        RdmcStatus {
            epoch: self.epoch,
            members,
            sent: self.sent,
            senders,
            chunks_written: self.chunks_written,
            bytes_written: self.bytes_written,
            wedged: self.wedged,
        }
    }

    /// Why the session is wedged, if it is.
    pub fn wedged(&self) -> Option<RdmcWedge> {
        self.wedged
    }

    /// Wedges the whole session: nothing more is sent, forwarded or
    /// delivered in it.
    pub fn wedge(&mut self) {
        self.wedge_because(RdmcWedge::Asked);
    }

    /// Wedges `sender`'s session only: none of its messages beyond those
    /// delivered is delivered, and we forward none of them.
    pub fn wedge_sender(&mut self, sender: MemberId) {
        if let Some(Some(rank)) = self.rank_of.get(sender.index()) {
            self.sessions[usize::from(*rank)].wedged = true;
        }
    }

    fn wedge_because(&mut self, cause: RdmcWedge) {
        if self.wedged.is_none() {
            self.wedged = Some(cause);
        }
    }

    /// Messages of `member` (a member id) delivered, as its row shows it.
    fn delivered_by(&self, member: MemberId, sender: MemberId) -> u64 {
        if member == self.me {
            return self
                .rank_of
                .get(sender.index())
                .copied()
                .flatten()
                .map_or(0, |r| self.sessions[usize::from(r)].delivered);
        }
        let word = self
            .mem
            .load_u64(self.lay.row(member).add(8 * u64::from(sender.0)));
        if word >> TAG_EPOCH_SHIFT == self.epoch {
            word & TAG_COUNT_MASK
        } else {
            0
        }
    }

    /// Whether every slot of ours is busy (some member has not delivered
    /// the message in it).
    pub fn slots_busy(&self) -> bool {
        let Some(oldest) = (self.sent + 1).checked_sub(self.lay.slots) else {
            return false;
        };
        if oldest == 0 {
            return false;
        }
        (0..usize::from(self.n)).any(|r| self.delivered_by(self.ranks[r], self.me) < oldest)
    }

    /// Multicasts `payload` to the session's members (ourselves
    /// included). Returns its index among our messages.
    pub fn send(&mut self, payload: &[u8]) -> Result<u64, RdmcSendError> {
        let len = payload.len() as u64;
        if len > self.lay.message_bytes_max {
            return Err(RdmcSendError::TooLarge {
                len,
                max: self.lay.message_bytes_max,
            });
        }
        if self.wedged.is_some() || self.sessions[usize::from(self.my_rank)].wedged {
            return Err(RdmcSendError::Wedged);
        }
        if self.slots_busy() {
            return Err(RdmcSendError::SlotsBusy);
        }
        let index = self.sent;
        let t = tag(self.epoch, index);
        // The payload, then its chunks flagged, then the header: our own
        // copy is the source of every first-hand chunk WRITE.
        self.mem.write(self.lay.chunk(self.me, index, 0), payload);
        for c in 0..self.lay.chunks_of(len) {
            self.mem.store_u64(self.lay.flag(self.me, index, c), t);
        }
        let h = self.lay.header(self.me, index);
        let sum = payload_sum(payload);
        self.mem.store_u64(h.add(8), len);
        self.mem.store_u64(h.add(16), sum);
        self.mem.store_u64(h.add(24), header_check(t, len, sum));
        self.mem.store_u64(h, t);
        self.sent += 1;
        Ok(index)
    }

    /// The next message in its sender's order, copied into `out`
    /// (senders taken in turn). `Ok(None)`: nothing deliverable now.
    pub fn poll_delivery(
        &mut self,
        out: &mut [u8],
    ) -> Result<Option<RdmcDelivery>, RdmcDeliverError> {
        if self.wedged.is_some() || self.ordered {
            return Ok(None);
        }
        for k in 0..usize::from(self.n) {
            let rank = (self.next_delivery + k) % usize::from(self.n);
            let s = self.sessions[rank];
            if s.wedged || s.delivered >= s.received {
                continue;
            }
            let sender = self.ranks[rank];
            let index = s.delivered;
            let Some(len) = self.read_header(sender, index) else {
                self.wedge_because(RdmcWedge::Corrupt(sender));
                return Ok(None);
            };
            if out.len() < len as usize {
                return Err(RdmcDeliverError::BufferTooSmall { len });
            }
            if !self.copy_out(sender, index, len, out) {
                self.wedge_because(RdmcWedge::Corrupt(sender));
                return Ok(None);
            }
            self.delivered_one(rank);
            self.next_delivery = (rank + 1) % usize::from(self.n);
            return Ok(Some(RdmcDelivery {
                sender,
                epoch: self.epoch,
                index,
                len,
            }));
        }
        Ok(None)
    }

    /// Messages of `sender` whole in our memory (0 for a non-member).
    pub fn received(&self, sender: MemberId) -> u64 {
        self.rank_of
            .get(sender.index())
            .copied()
            .flatten()
            .map_or(0, |r| self.sessions[usize::from(r)].received)
    }

    /// Delivers `sender`'s message `index`, which must be its next one
    /// and whole here, into `out`, for an order decided above RDMC (the
    /// atomic multicast delivers references to large messages in its
    /// total order). Unlike [`RdmcEngine::poll_delivery`] it works in a
    /// wedged session too: a message received before the wedge may lie
    /// inside the ending view's trim. Returns its length.
    pub fn deliver_ordered(
        &mut self,
        sender: MemberId,
        index: u64,
        out: &mut [u8],
    ) -> Result<u64, RdmcOrderError> {
        let Some(rank) = self.rank_of.get(sender.index()).copied().flatten() else {
            return Err(RdmcOrderError::NotMember);
        };
        let rank = usize::from(rank);
        if self.wedged.is_none() {
            // Our own message may not have been observed yet.
            self.observe(rank);
        }
        let s = self.sessions[rank];
        if index != s.delivered {
            return Err(RdmcOrderError::OutOfOrder { next: s.delivered });
        }
        // Our own message is whole in our slot from its send on, whatever
        // our session got to (a wedge may have come before it looked).
        let here = if rank == usize::from(self.my_rank) {
            index < self.sent
        } else {
            index < s.received
        };
        if !here {
            return Err(RdmcOrderError::NotReceived);
        }
        let len = self
            .read_header(sender, index)
            .ok_or(RdmcOrderError::Corrupt)?;
        if out.len() < len as usize {
            return Err(RdmcOrderError::BufferTooSmall { len });
        }
        if !self.copy_out(sender, index, len, out) {
            self.wedge_because(RdmcWedge::Corrupt(sender));
            return Err(RdmcOrderError::Corrupt);
        }
        self.delivered_one(rank);
        Ok(len)
    }

    /// Copies `sender`'s message `index` of `len` bytes into `out` and
    /// validates it again after the copy: the slot still holds this
    /// message (nobody reuses it before our row shows it delivered,
    /// unless faulty).
    fn copy_out(&self, sender: MemberId, index: u64, len: u64, out: &mut [u8]) -> bool {
        let t = tag(self.epoch, index);
        let copy = &mut out[..len as usize];
        self.mem.read(self.lay.chunk(sender, index, 0), copy);
        let Some((len_now, sum)) = self.read_header_sum(sender, index) else {
            return false;
        };
        len_now == len
            && (0..self.lay.chunks_of(len))
                .all(|c| self.mem.load_u64(self.lay.flag(sender, index, c)) == t)
            && payload_sum(copy) == sum
    }

    /// Counts the next message of the sender at `rank` delivered and
    /// tells every member.
    fn delivered_one(&mut self, rank: usize) {
        let sender = self.ranks[rank];
        self.sessions[rank].delivered += 1;
        self.mem.store_u64(
            self.lay.row(self.me).add(8 * u64::from(sender.0)),
            row_word(self.epoch, self.sessions[rank].delivered),
        );
        for r in 0..usize::from(self.n) {
            self.row_dirty[self.ranks[r].index()] = true;
        }
    }

    /// The length in a valid header of `sender`'s message `index`.
    fn read_header(&self, sender: MemberId, index: u64) -> Option<u64> {
        self.read_header_sum(sender, index).map(|(len, _)| len)
    }

    /// The length and payload sum in a valid header of `sender`'s
    /// message `index`.
    fn read_header_sum(&self, sender: MemberId, index: u64) -> Option<(u64, u64)> {
        let h = self.lay.header(sender, index);
        let t = self.mem.load_u64(h);
        if t != tag(self.epoch, index) {
            return None;
        }
        let len = self.mem.load_u64(h.add(8));
        let sum = self.mem.load_u64(h.add(16));
        let check = self.mem.load_u64(h.add(24));
        let valid = check == header_check(t, len, sum) && len <= self.lay.message_bytes_max;
        valid.then_some((len, sum))
    }

    fn flagged(&self, sender: MemberId, index: u64, chunk: u64) -> bool {
        self.mem.load_u64(self.lay.flag(sender, index, chunk)) == tag(self.epoch, index)
    }

    /// Takes in what landed for one sender's session: its header, its
    /// chunks, and moves on to its next message once this one is whole
    /// here and forwarded.
    fn observe(&mut self, rank: usize) {
        let sender = self.ranks[rank];
        // Bounded: a session moves at most `slots` messages ahead of our
        // deliveries.
        for _ in 0..=self.lay.slots {
            let mut s = self.sessions[rank];
            if s.wedged {
                return;
            }
            if s.plan.is_none() {
                if s.index >= s.delivered + self.lay.slots {
                    return;
                }
                let Some(len) = self.read_header(sender, s.index) else {
                    return;
                };
                let chunks = self.lay.chunks_of(len);
                let Some(sched) = BinomialSchedule::new(self.n, rank as u8, chunks) else {
                    // A header we validated has a length within bounds.
                    self.wedge_because(RdmcWedge::Corrupt(sender));
                    return;
                };
                s.plan = Some((len, sched));
            }
            let Some((_, sched)) = s.plan else {
                return;
            };
            while s.recv_round < sched.rounds() {
                match sched.receive(self.my_rank, s.recv_round) {
                    Some(t) if !self.flagged(sender, s.index, t.chunk) => break,
                    _ => s.recv_round += 1,
                }
            }
            if s.recv_round == sched.rounds() && s.received == s.index {
                s.received = s.index + 1;
            }
            let done =
                s.received == s.index + 1 && s.send_round >= sched.rounds() && s.inflight == 0;
            if done {
                s = Session {
                    index: s.index + 1,
                    received: s.received,
                    delivered: s.delivered,
                    ..Session::default()
                };
            }
            self.sessions[rank] = s;
            if !done {
                return;
            }
        }
    }

    /// The next chunk WRITE of one sender's session, if its chunk is here.
    fn next_send(&mut self, rank: usize) -> Option<WorkRequest> {
        let sender = self.ranks[rank];
        let mut s = self.sessions[rank];
        let (len, sched) = s.plan?;
        if s.wedged {
            return None;
        }
        let mut found = None;
        while s.send_round < sched.rounds() {
            if s.send_step >= 2 {
                s.send_round += 1;
                s.send_step = 0;
                continue;
            }
            let Some(t) = sched.sends(self.my_rank, s.send_round)[usize::from(s.send_step)] else {
                s.send_step += 1;
                continue;
            };
            if s.inflight >= RDMC_INFLIGHT_PER_SESSION || !self.flagged(sender, s.index, t.chunk) {
                break;
            }
            let at = self.lay.chunk(sender, s.index, t.chunk);
            if self.lay.chunk_len(len, t.chunk) == 0 {
                // An empty message's one chunk has no bytes: only its flag
                // goes (no zero-length WRITE).
                let flag = (self.ranks[usize::from(t.peer)], rank as u8, t.chunk);
                if self.flags.push_back(flag).is_err() {
                    break;
                }
                s.inflight += 1;
                s.send_step += 1;
                continue;
            }
            found = Some(WorkRequest {
                wr_id: wr(WR_CHUNK, rank as u8, self.epoch, t.chunk),
                peer: self.ranks[usize::from(t.peer)],
                op: Op::Write {
                    local: at,
                    remote: at,
                    len: self.lay.chunk_len(len, t.chunk) as u32,
                },
                notify: false,
            });
            s.inflight += 1;
            s.send_step += 1;
            break;
        }
        self.sessions[rank] = s;
        #[cfg(feature = "mutation-testing")]
        if let Some(w) = found {
            if self.mutation == crate::config::Mutation::RdmcFlagWithChunk {
                // Broken: the flag goes out right behind its chunk, not
                // once the chunk's WRITE completed.
                let _ = self
                    .flags
                    .push_back((w.peer, rank as u8, w.wr_id.0 & WR_CHUNK_MASK));
            }
        }
        found
    }

    /// The next flag WRITE due (a chunk whose WRITE completed).
    fn next_flag(&mut self) -> Option<Action> {
        let (peer, rank, chunk) = self.flags.pop_front()?;
        let sender = self.ranks[usize::from(rank)];
        let index = self.sessions[usize::from(rank)].index;
        Some(Action::Post(WorkRequest {
            wr_id: wr(WR_FLAG, rank, self.epoch, chunk),
            peer,
            op: Op::write_u64(self.lay.flag(sender, index, chunk), tag(self.epoch, index)),
            notify: true,
        }))
    }

    fn invariants(&self) {
        for (rank, s) in self.sessions[..usize::from(self.n)].iter().enumerate() {
            let whole_here = if rank == usize::from(self.my_rank) {
                self.sent
            } else {
                s.received
            };
            assert!(
                s.delivered <= whole_here && s.received <= s.index + 1,
                "an RDMC session delivers only what it received"
            );
            assert!(
                s.inflight <= RDMC_INFLIGHT_PER_SESSION,
                "an RDMC session keeps its WRITEs in flight bounded"
            );
        }
    }
}

impl<M: Memory> Engine for RdmcEngine<M> {
    fn name(&self) -> &'static str {
        "rdmc"
    }

    fn handle_completion(&mut self, now_ns: u64, completion: Completion) {
        self.now = now_ns;
        let id = completion.wr_id.0;
        let kind = id >> WR_KIND_SHIFT;
        let rank = ((id >> WR_SENDER_SHIFT) & 0xFF) as usize;
        let chunk = id & WR_CHUNK_MASK;
        if (id >> WR_EPOCH_SHIFT) & WR_EPOCH_MASK != self.epoch & WR_EPOCH_MASK {
            // An earlier session's.
            return;
        }
        if !completion.status.is_ok() {
            self.wedge_because(RdmcWedge::WriteFailed(completion.peer));
            return;
        }
        match kind {
            WR_CHUNK if rank < usize::from(self.n) => {
                #[cfg(feature = "mutation-testing")]
                if self.mutation == crate::config::Mutation::RdmcFlagWithChunk {
                    return;
                }
                // The chunk is placed at the peer: its flag may follow.
                // (The queue holds one entry per chunk in flight.)
                let _ = self.flags.push_back((completion.peer, rank as u8, chunk));
            }
            WR_FLAG if rank < usize::from(self.n) => {
                let s = &mut self.sessions[rank];
                s.inflight = s.inflight.saturating_sub(1);
                self.chunks_written += 1;
                if let Some((len, _)) = s.plan {
                    self.bytes_written += self.lay.chunk_len(len, chunk);
                }
            }
            WR_ROW => {
                if let Some(r) = self.row_inflight.get_mut(completion.peer.index()) {
                    *r = false;
                }
            }
            _ => {}
        }
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.now = now_ns;
        if self.wedged.is_none() {
            for rank in 0..usize::from(self.n) {
                self.observe(rank);
            }
        }
        self.invariants();
    }

    fn handle_peer_down(&mut self, now_ns: u64, peer: MemberId) {
        self.now = now_ns;
        if self.rank_of.get(peer.index()).copied().flatten().is_some() && peer != self.me {
            self.wedge_because(RdmcWedge::PeerDown(peer));
        }
    }

    fn poll_action(&mut self) -> Option<Action> {
        if self.wedged.is_some() {
            return None;
        }
        // Flags first: they unblock the peers.
        if let Some(flag) = self.next_flag() {
            return Some(flag);
        }
        for r in 0..usize::from(self.n) {
            let peer = self.ranks[r];
            if peer == self.me {
                continue;
            }
            let p = peer.index();
            if self.headers_posted[p] < self.sent {
                let index = self.headers_posted[p];
                self.headers_posted[p] += 1;
                let at = self.lay.header(self.me, index);
                return Some(Action::Post(WorkRequest {
                    wr_id: wr(WR_HEADER, self.my_rank, self.epoch, 0),
                    peer,
                    op: Op::Write {
                        local: at,
                        remote: at,
                        len: HEADER_WRITE_BYTES,
                    },
                    notify: true,
                }));
            }
            if self.row_dirty[p] && !self.row_inflight[p] {
                self.row_dirty[p] = false;
                self.row_inflight[p] = true;
                // From a copy that stays put until the WRITE completed
                // (our row changes with every delivery).
                let words = u64::from(self.lay.span);
                let (row, staging) = (self.lay.row(self.me), self.lay.staging(peer));
                for w in 0..words {
                    let v = self.mem.load_u64(row.add(8 * w));
                    self.mem.store_u64(staging.add(8 * w), v);
                }
                return Some(Action::Post(WorkRequest {
                    wr_id: wr(WR_ROW, self.my_rank, self.epoch, 0),
                    peer,
                    op: Op::Write {
                        local: staging,
                        remote: row,
                        len: 8 * u32::from(self.lay.span),
                    },
                    notify: true,
                }));
            }
        }
        for k in 0..usize::from(self.n) {
            let rank = (self.next_session + k) % usize::from(self.n);
            // A session that just finished may start its next message.
            self.observe(rank);
            if let Some(w) = self.next_send(rank) {
                self.next_session = (rank + 1) % usize::from(self.n);
                return Some(Action::Post(w));
            }
        }
        // An empty chunk's flag queued by the sends just looked at.
        self.next_flag()
    }

    fn handle_action_failed(&mut self, now_ns: u64, action: &Action, _error: FabricError) {
        self.now = now_ns;
        if let Action::Post(w) = action {
            self.wedge_because(RdmcWedge::WriteFailed(w.peer));
        }
    }

    fn next_deadline(&self) -> u64 {
        // Landing flags and headers wake a parked member (`notify`); what
        // is whole here but not delivered is due now, unless an order
        // above decides when (a message waits there for other members,
        // and a host that polled it "due" would spin on it).
        let due = !self.ordered
            && self.wedged.is_none()
            && self.sessions[..usize::from(self.n)]
                .iter()
                .any(|s| !s.wedged && s.delivered < s.received);
        if due {
            self.now
        } else {
            u64::MAX
        }
    }
}

#[cfg(test)]
mod tests;
