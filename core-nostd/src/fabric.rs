//! The one-sided fabric vocabulary shared by the core, the simulator, the
//! shared-memory fabric and the ibverbs fabric.
//!
//! The model is RDMA's reliable connection (RC) service:
//!
//! * Every pair of members is joined by two **channels** (DARE §3.1.2: a
//!   control QP and a log QP). Work requests posted on one channel execute at
//!   the target in the order they were posted, and their completions come
//!   back in that order.
//! * A work request is a one-sided [`Op`]: WRITE, READ, 8-byte
//!   compare-and-swap or fetch-and-add on a registered region of the peer.
//!   The target's CPU is not involved.
//! * **Every posted work request completes exactly once**, with a
//!   [`WcStatus`]. A fabric that cannot even start a request (queue full,
//!   bad address, connection broken) still reports it as an error completion,
//!   never by losing it. After an error completion the channel is broken: the
//!   requests behind it complete with [`WcStatus::Flushed`] until the channel
//!   is re-established with [`Fabric::reconnect`].
//! * A member can **revoke** a peer's access to one of its regions (DARE
//!   §3.2.1). Once [`Fabric::set_access`] returns, no write from that peer
//!   lands in the region; the peer's requests complete with
//!   [`WcStatus::AccessDenied`].

/// Largest group the core supports. Majorities, per-peer state and the SST
/// are fixed-size arrays of this length; the configuration chooses the
/// actual group size (DARE evaluates 3 to 12; 3, 5 and 7 are simulated).
pub const MAX_MEMBERS: usize = 8;

/// Largest payload of an inline write (the data travels inside the work
/// request, like `IBV_SEND_INLINE`, so it needs no registered source).
pub const INLINE_BYTES_MAX: usize = 16;

/// Identifies a member of the group (its index in the configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(pub u8);

impl MemberId {
    /// The index of this member in per-member arrays.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Largest number of registered regions a member has (every engine's
/// regions together). Per-region arrays in the fabrics have this length:
/// ten engine regions, one per multicast subgroup
/// ([`crate::subgroup::SUBGROUPS_MAX`]) and the backup-memory store's two.
pub const REGIONS_MAX: usize = 18;

/// A registered memory region of a member. The set is open: each engine
/// declares the regions it needs ([`crate::layout::RegionSpec`]) and the
/// [`crate::layout::Layout`] gives each one its size. The constants below
/// are the regions of the engines the core ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u8);

#[allow(non_upper_case_globals)]
impl RegionId {
    /// Log engine: the shared state table, one row per member. Every
    /// member may write (its own row) into every other member's control
    /// region.
    pub const Control: RegionId = RegionId(0);
    /// Log engine: pointers written by the leader, the adjustment list,
    /// the ring. Writable only by the leader this member granted access to.
    pub const Log: RegionId = RegionId(1);
    /// Log engine, local only: staging copies of rows being pushed,
    /// landing zones for READs, results of atomics.
    pub const Scratch: RegionId = RegionId(2);
    /// Log engine, local only: the client-session (deduplication) table,
    /// part of the replicated state machine.
    pub const Sessions: RegionId = RegionId(3);
    /// Heartbeat engine (uKharon §4.2): the member's own counter, which
    /// peers READ, and landing words for the counters it reads.
    pub const Heartbeat: RegionId = RegionId(4);
    /// Log engine: the snapshot this member gives to a recovering one
    /// (DARE §3.4): a header, its session table, its state machine's
    /// bytes. Peers READ it.
    pub const Snapshot: RegionId = RegionId(5);

    /// The index of this region in per-region arrays (`< REGIONS_MAX`).
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// A short lowercase name, for logs and errors.
    pub const fn name(self) -> &'static str {
        match self.0 {
            0 => "control",
            1 => "log",
            2 => "scratch",
            3 => "sessions",
            4 => "heartbeat",
            5 => "snapshot",
            16 => "store",
            17 => "store-local",
            _ => "region",
        }
    }

    /// The region from its index, for decoding (`None` past
    /// [`REGIONS_MAX`]).
    pub const fn from_index(i: usize) -> Option<RegionId> {
        if i < REGIONS_MAX {
            Some(RegionId(i as u8))
        } else {
            None
        }
    }
}

/// A byte address inside a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Addr {
    /// The region.
    pub region: RegionId,
    /// Byte offset from the start of the region.
    pub offset: u64,
}

impl Addr {
    /// An address.
    #[inline]
    pub const fn new(region: RegionId, offset: u64) -> Self {
        Addr { region, offset }
    }

    /// This address moved `bytes` further.
    #[inline]
    pub const fn add(self, bytes: u64) -> Self {
        Addr {
            region: self.region,
            offset: self.offset + bytes,
        }
    }
}

/// The two reliable connections between a pair of members (DARE §3.1.2).
/// Ordering is guaranteed within a channel, not across channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Channel {
    /// Rows of the shared state table, term reads, atomics.
    Control = 0,
    /// The peer's log. Revoking log access breaks only this channel.
    Log = 1,
}

impl Channel {
    /// Both channels.
    pub const ALL: [Channel; 2] = [Channel::Control, Channel::Log];

    /// The channel that carries requests addressed to `region` of a peer.
    #[inline]
    pub const fn for_region(region: RegionId) -> Channel {
        // The backup-memory store (region 16) is fenced like the log: its
        // revoke breaks only the log channel.
        if region.0 == RegionId::Log.0 || region.0 == 16 {
            Channel::Log
        } else {
            Channel::Control
        }
    }

    /// Index in per-channel arrays.
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// A one-sided operation on a peer's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Copy `len` bytes from local registered memory to the peer. The local
    /// source must not change until the completion is reaped.
    Write {
        /// Source in local registered memory.
        local: Addr,
        /// Destination in the peer's memory.
        remote: Addr,
        /// Bytes to copy.
        len: u32,
    },
    /// Write up to [`INLINE_BYTES_MAX`] bytes carried in the request itself.
    WriteInline {
        /// Destination in the peer's memory.
        remote: Addr,
        /// Number of valid bytes in `data`.
        len: u8,
        /// The bytes.
        data: [u8; INLINE_BYTES_MAX],
    },
    /// Copy `len` bytes from the peer's memory into local memory.
    Read {
        /// Source in the peer's memory.
        remote: Addr,
        /// Destination in local registered memory.
        local: Addr,
        /// Bytes to copy.
        len: u32,
    },
    /// Atomically: `old = *remote; if old == expect { *remote = swap }`;
    /// `old` lands at `local` (8 bytes, little-endian). Both 8-aligned.
    CompareSwap {
        /// The 8-byte word at the peer.
        remote: Addr,
        /// Where the previous value lands.
        local: Addr,
        /// Value compared with.
        expect: u64,
        /// Value stored when equal.
        swap: u64,
    },
    /// Atomically: `old = *remote; *remote = old + add` (wrapping); `old`
    /// lands at `local`.
    FetchAdd {
        /// The 8-byte word at the peer.
        remote: Addr,
        /// Where the previous value lands.
        local: Addr,
        /// Addend.
        add: u64,
    },
}

impl Op {
    /// An inline write of one little-endian word.
    pub fn write_u64(remote: Addr, value: u64) -> Op {
        let mut data = [0u8; INLINE_BYTES_MAX];
        data[..8].copy_from_slice(&value.to_le_bytes());
        Op::WriteInline {
            remote,
            len: 8,
            data,
        }
    }

    /// The peer memory this operation touches.
    pub fn remote(&self) -> Addr {
        match *self {
            Op::Write { remote, .. }
            | Op::WriteInline { remote, .. }
            | Op::Read { remote, .. }
            | Op::CompareSwap { remote, .. }
            | Op::FetchAdd { remote, .. } => remote,
        }
    }

    /// Number of bytes touched at the peer.
    pub fn remote_len(&self) -> u64 {
        match *self {
            Op::Write { len, .. } | Op::Read { len, .. } => u64::from(len),
            Op::WriteInline { len, .. } => u64::from(len),
            Op::CompareSwap { .. } | Op::FetchAdd { .. } => 8,
        }
    }

    /// The channel the operation travels on.
    pub fn channel(&self) -> Channel {
        Channel::for_region(self.remote().region)
    }

    /// True for operations that modify the peer's memory.
    pub fn writes_remote(&self) -> bool {
        !matches!(self, Op::Read { .. })
    }
}

/// Identifies a posted work request; comes back in its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WrId(pub u64);

/// A one-sided operation addressed to a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkRequest {
    /// Returned in the completion.
    pub wr_id: WrId,
    /// The target member.
    pub peer: MemberId,
    /// What to do.
    pub op: Op,
    /// Ask the target to wake up if it is idle (RDMA write-with-immediate,
    /// or a doorbell on the shared-memory fabric). Set for election traffic
    /// only, never on the replication path: a follower's CPU stays asleep
    /// while the leader writes its log. A hint: fabrics may ignore it.
    pub notify: bool,
}

/// Outcome of a work request (a reduced `ibv_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// Executed at the target and acknowledged.
    Ok,
    /// The target revoked (or never granted) access to the region
    /// (`IBV_WC_REM_ACCESS_ERR` / remote invalid request under Soft-RoCE).
    AccessDenied,
    /// No acknowledgement within the retry budget: the peer is dead or
    /// unreachable (`IBV_WC_RETRY_EXC_ERR`). A write may or may not have
    /// landed.
    Unreachable,
    /// Not executed because an earlier request on the channel failed
    /// (`IBV_WC_WR_FLUSH_ERR`).
    Flushed,
    /// Malformed: out of the region's bounds, misaligned atomic, too long.
    InvalidRequest,
}

impl WcStatus {
    /// True for [`WcStatus::Ok`].
    #[inline]
    pub const fn is_ok(self) -> bool {
        matches!(self, WcStatus::Ok)
    }
}

/// A reaped completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: WrId,
    /// The peer it was addressed to.
    pub peer: MemberId,
    /// How it ended.
    pub status: WcStatus,
}

/// Whether a peer may access one of our regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// No remote access: the peer's requests complete with
    /// [`WcStatus::AccessDenied`].
    Revoked,
    /// Remote read and write.
    Granted,
}

/// What the core asks its host to do, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Post a work request.
    Post(WorkRequest),
    /// Change a peer's access to one of our regions. Takes effect before
    /// the next action is executed.
    SetAccess {
        /// The peer.
        peer: MemberId,
        /// Our region.
        region: RegionId,
        /// New access.
        access: Access,
    },
    /// Re-establish a broken channel to a peer (after an error completion
    /// and once every request on it has completed).
    Reconnect {
        /// The peer.
        peer: MemberId,
        /// The channel.
        channel: Channel,
    },
}

/// Host-side problems of a fabric operation that is not a work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricError {
    /// The peer is not part of this fabric.
    UnknownPeer,
    /// The peer is known to be gone (its process exited, its port is down).
    PeerGone,
    /// The device refused (a queue-pair state transition, a registration).
    Device,
    /// A revoke stopped new operations, but one that started before may
    /// still be placing data (a writer stopped in the middle of a copy):
    /// the region is not exclusive yet. The caller must not rely on the
    /// revoke and retries it later.
    RevokeUnconfirmed,
}

/// A one-sided fabric endpoint of one member: the host's side of the
/// driving contract. Implemented by the simulator, the shared-memory fabric
/// and the ibverbs fabric; `verbatim-sim` has a conformance suite that
/// every implementation passes.
pub trait Fabric {
    /// Posts a work request. Never loses it: any failure is reported as an
    /// error completion from [`Fabric::poll_completion`].
    fn post(&mut self, wr: &WorkRequest);

    /// Reaps one completion, if any.
    fn poll_completion(&mut self) -> Option<Completion>;

    /// Grants or revokes a peer's access to one of our regions. When it
    /// returns `Ok`, a revoke is complete: no later write from the peer
    /// lands.
    fn set_access(
        &mut self,
        peer: MemberId,
        region: RegionId,
        access: Access,
    ) -> Result<(), FabricError>;

    /// Re-establishes a broken channel.
    fn reconnect(&mut self, peer: MemberId, channel: Channel) -> Result<(), FabricError>;

    /// Executes one [`Action`] of the core.
    fn execute(&mut self, action: &Action) -> Result<(), FabricError> {
        match action {
            Action::Post(wr) => {
                self.post(wr);
                Ok(())
            }
            Action::SetAccess {
                peer,
                region,
                access,
            } => self.set_access(*peer, *region, *access),
            Action::Reconnect { peer, channel } => self.reconnect(*peer, *channel),
        }
    }
}
