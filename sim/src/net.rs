//! The simulated one-sided network: reliable connections with per-channel
//! FIFO, LogGP timing, completions, access control, and faults (dead
//! NICs, cut links, delay spikes, torn placement of large writes).
//!
//! Semantics follow RDMA's RC service (see `verbatim_core::fabric`):
//! * requests on one (source, target, channel) connection land in post
//!   order, and complete in post order;
//! * a request that fails (target dead, link cut, access revoked, bad
//!   address) completes with an error and breaks the connection: every
//!   later request on it completes `Flushed` until `reconnect`;
//! * a cut of the *reverse* link loses the acknowledgement: the write
//!   lands, but the initiator sees `Unreachable` (the ambiguity real
//!   networks have);
//! * with tearing on, a write larger than a word lands word by word, in a
//!   random order, over a short window, and each word checks the target's
//!   access at its own landing time.

use crate::loggp::NetParams;
use crate::memory::{InFlight, SimMemory};
use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;
use verbatim_core::fabric::{
    Access, Addr, Channel, Completion, MemberId, Op, RegionId, WcStatus, WorkRequest, MAX_MEMBERS,
    REGIONS_MAX,
};
use verbatim_core::layout::Layout;
use verbatim_core::mem::Memory;
use verbatim_core::rng::SplitMix64;

/// A fault layer of the network (middleware in the spirit of smoltcp's
/// `FaultInjector`): the network consults every layer for each request,
/// so layers compose: a partition, a delay spike and tearing can all be
/// active at once, and a new kind of fault is a new layer. Faults of the
/// members themselves (crash, zombie, pause, clock drift) are applied by
/// the scheduler in `cluster`.
pub trait NetFault: std::fmt::Debug {
    /// True when the directed link `from → to` drops packets at `t`.
    fn cut(&self, _from: usize, _to: usize, _t: u64) -> bool {
        false
    }
    /// Extra latency on `from → to` for a request leaving at `t`.
    fn extra_delay_ns(&self, _from: usize, _to: usize, _t: u64) -> u64 {
        0
    }
    /// True when large writes land word by word (torn placement).
    fn tears(&self) -> bool {
        false
    }
    /// True when the data of a WRITE may become visible to the target's
    /// CPU after that of a WRITE posted later on the same connection (RC
    /// executes requests and completes them in order, but placement seen
    /// by the CPU is not ordered on every platform, e.g. PCIe relaxed
    /// ordering). Data is visible by the time its completion is delivered.
    fn reorders(&self) -> bool {
        false
    }
}

/// Visibility of WRITE data out of posting order on a connection (see
/// [`NetFault::reorders`]).
#[derive(Clone, Copy, Debug)]
pub struct Reordering;

impl NetFault for Reordering {
    fn reorders(&self) -> bool {
        true
    }
}

/// A directed link and a time window `[start_ns, end_ns)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkWindow {
    /// Source member.
    pub from: u8,
    /// Target member.
    pub to: u8,
    /// Start (global time).
    pub start_ns: u64,
    /// End (global time).
    pub end_ns: u64,
}

impl LinkWindow {
    fn covers(&self, from: usize, to: usize, t: u64) -> bool {
        usize::from(self.from) == from
            && usize::from(self.to) == to
            && self.start_ns <= t
            && t < self.end_ns
    }
}

/// Partitions: the listed directed links drop everything in their window
/// (a symmetric partition lists both directions; an asymmetric one only
/// cuts a side's outgoing links, so its writes may land while their
/// acknowledgements are lost).
#[derive(Clone, Debug, Default)]
pub struct Cuts(pub Vec<LinkWindow>);

impl NetFault for Cuts {
    fn cut(&self, from: usize, to: usize, t: u64) -> bool {
        self.0.iter().any(|w| w.covers(from, to, t))
    }
}

/// A delay spike on one directed link.
#[derive(Clone, Copy, Debug)]
pub struct DelaySpike {
    /// The link and window.
    pub window: LinkWindow,
    /// Added latency.
    pub extra_ns: u64,
}

impl NetFault for DelaySpike {
    fn extra_delay_ns(&self, from: usize, to: usize, t: u64) -> u64 {
        if self.window.covers(from, to, t) {
            self.extra_ns
        } else {
            0
        }
    }
}

/// Torn placement of large writes.
#[derive(Clone, Copy, Debug)]
pub struct Tearing;

impl NetFault for Tearing {
    fn tears(&self) -> bool {
        true
    }
}

/// Something the network needs to happen later.
#[derive(Clone, Debug)]
pub enum NetEvent {
    /// A request reaches its target.
    Land {
        /// Initiator.
        src: usize,
        /// The request.
        wr: WorkRequest,
        /// Write payload, read from the source at post time.
        data: Option<Rc<[u8]>>,
        /// When it left the initiator.
        depart_ns: u64,
        /// Torn placement: spread of word landings.
        spread_ns: u64,
        /// The writer stops in the middle of placing it (only half lands
        /// now; see [`Net::release_stuck`]).
        stuck: bool,
        /// The target's grant epoch for (initiator, region) at post time.
        epoch: u64,
    },
    /// The data of a WRITE executed earlier becomes visible to the
    /// target's CPU (out-of-order visibility, [`NetFault::reorders`]).
    Place {
        /// Which pending placement (it may have been made visible earlier
        /// by a revoke, which fences it).
        id: u64,
    },
    /// One word of a torn write.
    LandWord {
        /// Initiator.
        src: usize,
        /// Target.
        dst: usize,
        /// Where.
        at: Addr,
        /// Bytes of this piece (≤ 8).
        bytes: [u8; 8],
        /// Valid bytes.
        len: u8,
        /// Set when this piece was refused (access revoked meanwhile).
        denied: Rc<Cell<bool>>,
        /// The grant epoch the write was posted under.
        epoch: u64,
        /// Set once placed: it may land earlier, in the middle of a read
        /// of the target's memory (interleaving).
        landed: Rc<Cell<bool>>,
    },
    /// A completion reaches the initiator.
    Complete {
        /// Initiator.
        src: usize,
        /// The completion (its status may be overridden by `denied`).
        completion: Completion,
        /// Data landing in the initiator's memory (READ, atomics).
        landing: Option<(Addr, Vec<u8>)>,
        /// For torn writes: whether a piece was refused.
        denied: Option<Rc<Cell<bool>>>,
        /// The channel it travelled on.
        channel: Channel,
        /// The initiator's incarnation when the request was posted: a
        /// member that restarted never sees its former self's completions.
        incarnation: u64,
    },
}

/// Where the network puts its future events.
pub trait Schedule {
    /// Runs `ev` at global time `at_ns`.
    fn at(&mut self, at_ns: u64, ev: NetEvent);
}

/// One member's NIC.
pub struct Nic {
    /// Its registered memory.
    pub mem: SimMemory,
    /// False once crashed: it neither answers nor completes.
    pub alive: bool,
    access: [[Access; REGIONS_MAX]; MAX_MEMBERS],
    /// Bumped by every revoke of (peer, region): the incarnation of the
    /// connection a request travels on. A request posted under an older
    /// one never lands, even if access was granted again meanwhile (RDMA:
    /// the revoked QP's packets are flushed, a re-grant is a new QP or
    /// rkey), so a stale WRITE cannot overwrite what a new leader wrote.
    grant_epoch: [[Rc<Cell<u64>>; REGIONS_MAX]; MAX_MEMBERS],
    /// Reaped by the node.
    pub cq: VecDeque<Completion>,
    /// Bumped by every restart (a new process with new registrations).
    pub incarnation: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Conn {
    failed: bool,
    last_land: u64,
    last_complete: u64,
}

/// The simulated network.
pub struct Net {
    /// Timing.
    pub params: NetParams,
    nics: Vec<Nic>,
    conns: Vec<Conn>,
    /// Fault layers, consulted in order for every request.
    pub faults: Vec<Box<dyn NetFault>>,
    /// READs are not instant snapshots: WRITEs in flight into the target
    /// (torn placement) may land between the words a READ copies.
    pub interleave_reads: bool,
    /// Partitions decided while the run goes on (faults triggered by what
    /// the members do, e.g. cutting off a leader right after it wins).
    pub late_cuts: Cuts,
    rng: SplitMix64,
    /// Copies in progress from a stopped writer: the target cannot confirm
    /// a revoke of the writer's access, and the rest of the copy lands
    /// when the writer resumes.
    stuck_copies: Vec<StuckCopy>,
    /// Per writer: stuck WRITEs posted that have not landed yet. A writer
    /// that resumes before its stuck WRITE reaches the target was not
    /// stopped in the middle of placing it after all: that WRITE then
    /// lands whole, and completes in order.
    stuck_pending: Vec<u32>,
    /// Data of executed WRITEs not yet visible to the target's CPU
    /// (`reordering`).
    pending_places: Vec<PendingPlace>,
    next_place_id: u64,
}

/// The data of an executed WRITE not yet visible to the target's CPU.
#[derive(Clone, Debug)]
struct PendingPlace {
    id: u64,
    src: usize,
    dst: usize,
    at: Addr,
    bytes: Rc<[u8]>,
}

/// Bytes a checker made visible for a moment (see
/// [`Net::place_pending_for_check`]), with what they replaced.
#[derive(Debug)]
pub struct PlacedForCheck {
    dst: usize,
    at: Addr,
    old: Vec<u8>,
    placed: Rc<[u8]>,
}

/// A WRITE whose writer stopped in the middle of placing it (SIGSTOP
/// during a CPU copy on the shared-memory fabric).
#[derive(Clone, Debug)]
struct StuckCopy {
    src: usize,
    dst: usize,
    channel: Channel,
    /// Where the part not placed yet goes.
    at: Addr,
    rest: Vec<u8>,
    completion: Completion,
    /// The target's incarnation when the copy began: a target that
    /// crashed or came back as a new process meanwhile never sees the
    /// rest.
    dst_incarnation: u64,
}

impl Net {
    /// A network joining these memories (index = member id).
    pub fn new(params: NetParams, layout: &Layout, memories: Vec<SimMemory>, seed: u64) -> Net {
        let n = memories.len();
        let mut nics: Vec<Nic> = memories
            .into_iter()
            .map(|mem| Nic {
                mem,
                alive: true,
                access: [[Access::Revoked; REGIONS_MAX]; MAX_MEMBERS],
                grant_epoch: core::array::from_fn(|_| {
                    core::array::from_fn(|_| Rc::new(Cell::new(0)))
                }),
                cq: VecDeque::new(),
                incarnation: 0,
            })
            .collect();
        // Regions every member may access from the start (the SST's rows,
        // heartbeat counters); the log is granted by the protocol; the rest
        // is local.
        for nic in &mut nics {
            for (p, peer) in nic.access.iter_mut().enumerate() {
                for r in layout.regions() {
                    if r.remote.granted_from_start(MemberId(p as u8)) {
                        peer[r.id.index()] = Access::Granted;
                    }
                }
            }
        }
        Net {
            params,
            nics,
            conns: vec![Conn::default(); n * n * 2],
            faults: Vec::new(),
            interleave_reads: false,
            late_cuts: Cuts::default(),
            rng: SplitMix64::new(seed ^ 0x4E45_5457),
            stuck_copies: Vec::new(),
            stuck_pending: vec![0; n],
            pending_places: Vec::new(),
            next_place_id: 0,
        }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.nics.len()
    }

    /// True with no members.
    pub fn is_empty(&self) -> bool {
        self.nics.is_empty()
    }

    /// A member's NIC.
    pub fn nic(&self, m: usize) -> &Nic {
        &self.nics[m]
    }

    /// A member's NIC, mutably.
    pub fn nic_mut(&mut self, m: usize) -> &mut Nic {
        &mut self.nics[m]
    }

    fn conn(&mut self, src: usize, dst: usize, ch: Channel) -> &mut Conn {
        let n = self.nics.len();
        &mut self.conns[(src * n + dst) * 2 + ch.index()]
    }

    fn cut(&self, from: usize, to: usize, t: u64) -> bool {
        self.late_cuts.cut(from, to, t) || self.faults.iter().any(|f| f.cut(from, to, t))
    }

    fn extra_delay(&self, from: usize, to: usize, t: u64) -> u64 {
        self.faults
            .iter()
            .map(|f| f.extra_delay_ns(from, to, t))
            .sum()
    }

    fn tearing(&self) -> bool {
        self.faults.iter().any(|f| f.tears())
    }

    /// Crashes a member's NIC: memory gone, requests to it time out.
    pub fn crash(&mut self, m: usize) {
        self.nics[m].alive = false;
        self.nics[m].cq.clear();
    }

    /// A crashed member comes back as a new process: `mem` (zeroed, the
    /// same layout) is registered anew, so requests posted to its former
    /// self are refused (new grant epochs for every peer and region), its
    /// peers' connections to it are broken until they reconnect, copies
    /// into its former memory never land, and its former self's own
    /// requests never complete at it.
    pub fn restart(&mut self, m: usize, mem: SimMemory, layout: &Layout) {
        let nic = &mut self.nics[m];
        nic.mem = mem;
        nic.alive = true;
        nic.cq.clear();
        nic.incarnation += 1;
        for (peer, access) in nic.access.iter_mut().enumerate() {
            *access = [Access::Revoked; REGIONS_MAX];
            for r in layout.regions() {
                if r.remote.granted_from_start(MemberId(peer as u8)) {
                    access[r.id.index()] = Access::Granted;
                }
            }
            for e in nic.grant_epoch[peer].iter() {
                e.set(e.get() + 1);
            }
        }
        for p in 0..self.nics.len() {
            for ch in Channel::ALL {
                self.conn(p, m, ch).failed = p != m;
                self.conn(m, p, ch).failed = false;
            }
        }
        // Copies into its former memory stay: they never land there, but
        // their writers' requests still complete, with an error, when the
        // writers resume (`release_stuck`). (Dropping them lost those
        // completions: a leader waited for ever on its log channel to the
        // restarted member, held its log for it and filled it; swarm seed
        // 641772312.)
        self.stuck_copies.retain(|c| c.src != m);
        self.pending_places.retain(|p| p.dst != m);
    }

    /// The process behind one region of member `m` died and a new one
    /// registered it afresh (a simulator restarting the multicast members
    /// without the log): requests posted into the old registration never
    /// land (new grant epochs for every peer), the new memory is zeroed,
    /// pending placements into it are dropped, and `stale` completions in
    /// its queue are forgotten (its former self's).
    pub fn restart_region(
        &mut self,
        m: usize,
        region: verbatim_core::layout::RegionSpec,
        stale: impl Fn(&Completion) -> bool,
    ) {
        let nic = &mut self.nics[m];
        for peer in nic.grant_epoch.iter() {
            let e = &peer[region.id.index()];
            e.set(e.get() + 1);
        }
        nic.mem.write(
            verbatim_core::fabric::Addr::new(region.id, 0),
            &vec![0u8; region.bytes as usize],
        );
        nic.cq.retain(|c| !stale(c));
        self.pending_places
            .retain(|p| !(p.dst == m && p.at.region == region.id));
    }

    /// Makes the data of every executed WRITE not yet visible to its
    /// target's CPU (`reordering`) visible, until [`Net::undo_placed`]
    /// puts the bytes back. For checkers that judge the state those WRITEs
    /// will reach within a few wire times whatever happens (the NIC has
    /// executed them; a revoke only makes them visible sooner), not the
    /// instant in between: a follower whose tail and newest entry are
    /// visible while the older entries of the same batch are not yet holds
    /// a log no member ever acts on.
    pub fn place_pending_for_check(&self) -> Vec<PlacedForCheck> {
        let mut undo = Vec::new();
        for p in &self.pending_places {
            if !self.nics[p.dst].alive {
                continue;
            }
            let mem = &self.nics[p.dst].mem;
            let mut old = vec![0u8; p.bytes.len()];
            mem.read(p.at, &mut old);
            mem.write(p.at, &p.bytes);
            undo.push(PlacedForCheck {
                dst: p.dst,
                at: p.at,
                old,
                placed: p.bytes.clone(),
            });
        }
        undo
    }

    /// Undoes [`Net::place_pending_for_check`], newest placement first.
    /// The checker in between reads through the NICs' mappings, where no
    /// piece in flight lands (`SimMemory::node_view`), so the bytes are
    /// still the placed ones: an exact restore.
    pub fn undo_placed(&self, undo: Vec<PlacedForCheck>) {
        for u in undo.into_iter().rev() {
            let mem = &self.nics[u.dst].mem;
            let mut now = vec![0u8; u.old.len()];
            mem.read(u.at, &mut now);
            assert!(
                now[..] == u.placed[..],
                "memory changed under a checker's temporary placement"
            );
            mem.write(u.at, &u.old);
        }
    }

    /// Changes a peer's access to one of `owner`'s regions, effective now.
    pub fn set_access(&mut self, owner: usize, peer: MemberId, region: RegionId, access: Access) {
        if peer.index() < MAX_MEMBERS {
            self.nics[owner].access[peer.index()][region.index()] = access;
        }
        if access == Access::Revoked && peer.index() < MAX_MEMBERS {
            let e = &self.nics[owner].grant_epoch[peer.index()][region.index()];
            e.set(e.get() + 1);
        }
        if access == Access::Revoked {
            // A revoke is a fence (deregistration waits for the DMA in
            // flight): whatever that peer's executed WRITEs still had to
            // place becomes visible now, in order.
            let (fenced, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_places)
                .into_iter()
                .partition(|p| p.src == peer.index() && p.dst == owner && p.at.region == region);
            self.pending_places = rest;
            for p in fenced {
                self.nics[p.dst].mem.write(p.at, &p.bytes);
            }
        }
    }

    /// `writer` resumes: the rest of every copy it was stopped in lands,
    /// whatever the target's access says now (the copy entered before any
    /// revoke), and then completes. Returns the targets written.
    pub fn release_stuck(&mut self, s: &mut impl Schedule, now: u64, writer: usize) -> Vec<usize> {
        if let Some(p) = self.stuck_pending.get_mut(writer) {
            *p = 0;
        }
        let mut written = Vec::new();
        for c in std::mem::take(&mut self.stuck_copies) {
            if c.src != writer {
                self.stuck_copies.push(c);
                continue;
            }
            if !self.nics[c.src].alive {
                continue; // a dead writer's copy never goes on
            }
            let (at, completion) =
                if self.nics[c.dst].alive && self.nics[c.dst].incarnation == c.dst_incarnation {
                    self.nics[c.dst].mem.write(c.at, &c.rest);
                    written.push(c.dst);
                    (now + 1, c.completion)
                } else {
                    // The target died (or restarted) while the copy was
                    // stopped: the rest goes unanswered, the request
                    // exhausts its retries and the connection breaks.
                    self.conn(c.src, c.dst, c.channel).failed = true;
                    let failed = Completion {
                        status: WcStatus::Unreachable,
                        ..c.completion
                    };
                    (now + self.params.retry_timeout_ns, failed)
                };
            self.complete_at(s, c.src, c.dst, c.channel, at, completion, None, None);
        }
        written
    }

    /// True while `writer` is stopped in the middle of a copy into
    /// `owner`'s `region`: a revoke of its access cannot be confirmed.
    pub fn revoke_blocked(&self, owner: usize, writer: usize, region: RegionId) -> bool {
        self.nics[writer].alive
            && self
                .stuck_copies
                .iter()
                .any(|c| c.src == writer && c.dst == owner && c.at.region == region)
    }

    /// Re-establishes a connection (both directions' state is the
    /// initiator's view here; the target keeps no per-connection state).
    pub fn reconnect(&mut self, src: usize, peer: MemberId, channel: Channel) {
        if peer.index() < self.nics.len() {
            self.conn(src, peer.index(), channel).failed = false;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn complete_at(
        &mut self,
        s: &mut impl Schedule,
        src: usize,
        dst: usize,
        ch: Channel,
        at: u64,
        c: Completion,
        landing: Option<(Addr, Vec<u8>)>,
        denied: Option<Rc<Cell<bool>>>,
    ) {
        let incarnation = self.nics[src].incarnation;
        let conn = self.conn(src, dst, ch);
        let t = at.max(conn.last_complete + 1);
        conn.last_complete = t;
        s.at(
            t,
            NetEvent::Complete {
                src,
                completion: c,
                landing,
                denied,
                channel: ch,
                incarnation,
            },
        );
    }

    fn wire_ns(&self, op: &Op) -> u64 {
        let p = &self.params;
        let ns = match *op {
            Op::Write { len, .. } if u64::from(len) <= p.inline_bytes_max => {
                p.rdma_wire_ns(&p.rdma_write_inline, u64::from(len))
            }
            Op::Write { len, .. } => p.rdma_wire_ns(&p.rdma_write, u64::from(len)),
            Op::WriteInline { len, .. } => p.rdma_wire_ns(&p.rdma_write_inline, u64::from(len)),
            Op::Read { len, .. } => p.rdma_wire_ns(&p.rdma_read, u64::from(len)),
            Op::CompareSwap { .. } | Op::FetchAdd { .. } => p.rdma_wire_ns(&p.rdma_read, 8),
        };
        ns.max(1.0) as u64
    }

    /// CPU overhead of posting `op` (o, or o for inline writes).
    pub fn post_overhead_ns(&self, op: &Op) -> u64 {
        let p = &self.params;
        let o = match *op {
            Op::Write { len, .. } if u64::from(len) <= p.inline_bytes_max => {
                p.rdma_write_inline.o_ns
            }
            Op::Write { .. } => p.rdma_write.o_ns,
            Op::WriteInline { .. } => p.rdma_write_inline.o_ns,
            _ => p.rdma_read.o_ns,
        };
        o as u64
    }

    /// Posts a work request that leaves `src` at `depart_ns`.
    pub fn post(&mut self, s: &mut impl Schedule, depart_ns: u64, src: usize, wr: WorkRequest) {
        self.post_maybe_stuck(s, depart_ns, src, wr, false);
    }

    /// Posts a WRITE whose writer will stop in the middle of placing it.
    pub fn post_stuck(
        &mut self,
        s: &mut impl Schedule,
        depart_ns: u64,
        src: usize,
        wr: WorkRequest,
    ) {
        self.post_maybe_stuck(s, depart_ns, src, wr, true);
    }

    fn post_maybe_stuck(
        &mut self,
        s: &mut impl Schedule,
        depart_ns: u64,
        src: usize,
        wr: WorkRequest,
        stuck: bool,
    ) {
        if stuck {
            self.stuck_pending[src] += 1;
        }
        let dst = wr.peer.index();
        let ch = wr.op.channel();
        let c = |status| Completion {
            wr_id: wr.wr_id,
            peer: wr.peer,
            status,
        };
        // A request to oneself is a loopback request (a coordinator CASes
        // its own acceptor word through its NIC, as the others do): it
        // travels the same simulated connection as any other.
        if dst >= self.nics.len() {
            // No such connection: refuse at once (never lose a request).
            let t = depart_ns + 1;
            s.at(
                t,
                NetEvent::Complete {
                    src,
                    completion: c(WcStatus::InvalidRequest),
                    landing: None,
                    denied: None,
                    channel: ch,
                    incarnation: self.nics[src].incarnation,
                },
            );
            return;
        }
        // Local side checks: the source or destination of the data must
        // be our own registered memory.
        let local_ok = match wr.op {
            Op::Write { local, len, .. } | Op::Read { local, len, .. } => {
                self.nics[src].mem.contains(local, u64::from(len))
            }
            Op::CompareSwap { local, remote, .. } | Op::FetchAdd { local, remote, .. } => {
                self.nics[src].mem.contains(local, 8)
                    && local.offset % 8 == 0
                    && remote.offset % 8 == 0
            }
            Op::WriteInline { len, .. } => {
                usize::from(len) <= verbatim_core::fabric::INLINE_BYTES_MAX
            }
        };
        if !local_ok || self.conn(src, dst, ch).failed {
            let status = if local_ok {
                WcStatus::Flushed
            } else {
                WcStatus::InvalidRequest
            };
            if !local_ok {
                self.conn(src, dst, ch).failed = true;
            }
            self.complete_at(s, src, dst, ch, depart_ns + 1, c(status), None, None);
            return;
        }
        let data: Option<Rc<[u8]>> = match wr.op {
            Op::Write { local, len, .. } => {
                let mut buf = vec![0u8; len as usize];
                self.nics[src].mem.read(local, &mut buf);
                Some(buf.into())
            }
            Op::WriteInline { len, data, .. } => Some(data[..usize::from(len)].to_vec().into()),
            _ => None,
        };
        let half_wire = self.wire_ns(&wr.op) / 2;
        let extra = self.extra_delay(src, dst, depart_ns);
        let spread = if !stuck && self.tearing() && data.as_ref().is_some_and(|d| d.len() > 8) {
            self.rng.range_inclusive(1, 2 * half_wire.max(1))
        } else {
            0
        };
        let epoch = self.grant_epoch(dst, src, wr.op.remote().region);
        let conn = self.conn(src, dst, ch);
        let land = (depart_ns + half_wire + extra).max(conn.last_land + 1);
        conn.last_land = land + spread;
        s.at(
            land,
            NetEvent::Land {
                src,
                wr,
                data,
                depart_ns,
                spread_ns: spread,
                stuck,
                epoch,
            },
        );
    }

    fn access_ok(&self, dst: usize, src: usize, region: RegionId) -> bool {
        self.nics[dst].access[src][region.index()] == Access::Granted
    }

    /// The target's grant epoch for (initiator, region).
    fn grant_epoch(&self, dst: usize, src: usize, region: RegionId) -> u64 {
        if src < MAX_MEMBERS && region.index() < REGIONS_MAX {
            self.nics[dst].grant_epoch[src][region.index()].get()
        } else {
            0
        }
    }

    /// Access granted, under the epoch the request was posted with.
    fn access_ok_at(&self, dst: usize, src: usize, region: RegionId, epoch: u64) -> bool {
        self.access_ok(dst, src, region) && self.grant_epoch(dst, src, region) == epoch
    }

    /// Places, in order, the pending data of WRITEs from `src` to `dst`
    /// posted before `before` that overlap `[at, at + len)`. RC executes
    /// the WRITEs of a connection in order: what may become visible late
    /// is the data of one address relative to another (entries relative to
    /// the tail pointer), never an older copy of the same bytes over a
    /// newer one (a row pushed twice ends with the later push).
    fn place_earlier_overlapping(
        &mut self,
        src: usize,
        dst: usize,
        at: Addr,
        len: usize,
        before: u64,
    ) {
        let overlaps = |p: &PendingPlace| {
            p.src == src
                && p.dst == dst
                && p.id < before
                && p.at.region == at.region
                && p.at.offset < at.offset + len as u64
                && at.offset < p.at.offset + p.bytes.len() as u64
        };
        if !self.pending_places.iter().any(overlaps) {
            return;
        }
        let (earlier, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_places)
            .into_iter()
            .partition(overlaps);
        self.pending_places = rest;
        for p in earlier {
            if self.nics[p.dst].alive {
                self.nics[p.dst].mem.write(p.at, &p.bytes);
            }
        }
    }

    /// Handles a network event; returns the member to wake, if any.
    pub fn handle(&mut self, s: &mut impl Schedule, now: u64, ev: NetEvent) -> Option<usize> {
        match ev {
            NetEvent::Land {
                src,
                wr,
                data,
                depart_ns,
                spread_ns,
                stuck,
                epoch,
            } => {
                let wrote = self.land(s, now, src, wr, data, depart_ns, spread_ns, stuck, epoch);
                // A busy-polling target notices writes into its memory.
                wrote.then_some(wr.peer.index())
            }
            NetEvent::Place { id } => {
                let k = self.pending_places.iter().position(|p| p.id == id)?;
                let p = self.pending_places.remove(k);
                self.place_earlier_overlapping(p.src, p.dst, p.at, p.bytes.len(), p.id);
                if self.nics[p.dst].alive {
                    self.nics[p.dst].mem.write(p.at, &p.bytes);
                    Some(p.dst)
                } else {
                    None
                }
            }
            NetEvent::LandWord {
                src,
                dst,
                at,
                bytes,
                len,
                denied,
                epoch,
                landed,
            } => {
                if landed.replace(true) {
                    return None; // it landed early, during a read
                }
                if self.nics[dst].alive && self.access_ok_at(dst, src, at.region, epoch) {
                    self.nics[dst].mem.write(at, &bytes[..usize::from(len)]);
                    Some(dst)
                } else {
                    denied.set(true);
                    None
                }
            }
            NetEvent::Complete {
                src,
                mut completion,
                landing,
                denied,
                channel,
                incarnation,
            } => {
                if !self.nics[src].alive || self.nics[src].incarnation != incarnation {
                    return None;
                }
                if denied.is_some_and(|d| d.get()) && completion.status.is_ok() {
                    completion.status = WcStatus::AccessDenied;
                    self.conn(src, completion.peer.index(), channel).failed = true;
                }
                if let (Some((at, bytes)), true) = (landing, completion.status.is_ok()) {
                    self.nics[src].mem.write(at, &bytes);
                }
                self.nics[src].cq.push_back(completion);
                Some(src)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn land(
        &mut self,
        s: &mut impl Schedule,
        now: u64,
        src: usize,
        wr: WorkRequest,
        data: Option<Rc<[u8]>>,
        depart_ns: u64,
        spread_ns: u64,
        stuck: bool,
        epoch: u64,
    ) -> bool {
        let dst = wr.peer.index();
        let ch = wr.op.channel();
        let c = |status| Completion {
            wr_id: wr.wr_id,
            peer: wr.peer,
            status,
        };
        let timeout_at = depart_ns + self.params.retry_timeout_ns;
        if self.conn(src, dst, ch).failed {
            self.complete_at(s, src, dst, ch, now, c(WcStatus::Flushed), None, None);
            return false;
        }
        if !self.nics[dst].alive || self.cut(src, dst, now) {
            self.conn(src, dst, ch).failed = true;
            self.complete_at(
                s,
                src,
                dst,
                ch,
                timeout_at,
                c(WcStatus::Unreachable),
                None,
                None,
            );
            return false;
        }
        let remote = wr.op.remote();
        if !self.nics[dst].mem.contains(remote, wr.op.remote_len()) {
            self.conn(src, dst, ch).failed = true;
            self.complete_at(
                s,
                src,
                dst,
                ch,
                now + 1,
                c(WcStatus::InvalidRequest),
                None,
                None,
            );
            return false;
        }
        let ack_ns = self.wire_ns(&wr.op) / 2 + spread_ns;
        if !self.access_ok_at(dst, src, remote.region, epoch) {
            self.conn(src, dst, ch).failed = true;
            self.complete_at(
                s,
                src,
                dst,
                ch,
                now + ack_ns,
                c(WcStatus::AccessDenied),
                None,
                None,
            );
            return false;
        }
        let mut landing = None;
        let mut denied = None;
        // Out-of-order visibility: the payload of a multi-word WRITE shows
        // up within a few wire times (before the completion), possibly
        // after the one-word pointer WRITEs posted behind it.
        let visible_after = if self.faults.iter().any(|f| f.reorders())
            && matches!(wr.op, Op::Write { len, .. } if len > 8)
        {
            self.rng.range_inclusive(0, 4 * ack_ns.max(1))
        } else {
            0
        };
        let mem = &self.nics[dst].mem;
        match wr.op {
            Op::Write { .. } | Op::WriteInline { .. } if stuck && self.stuck_pending[src] > 0 => {
                self.stuck_pending[src] -= 1;
                // The first half of the words lands; the writer stops; the
                // rest and the completion wait for it to resume.
                let bytes = data.expect("writes carry data");
                let half = (bytes.len() / 16) * 8;
                mem.write(remote, &bytes[..half]);
                self.stuck_copies.push(StuckCopy {
                    src,
                    dst,
                    channel: ch,
                    at: remote.add(half as u64),
                    rest: bytes[half..].to_vec(),
                    completion: c(WcStatus::Ok),
                    dst_incarnation: self.nics[dst].incarnation,
                });
                return true;
            }
            Op::Write { .. } | Op::WriteInline { .. } => {
                let bytes = data.expect("writes carry data");
                if spread_ns > 0 {
                    let next = self.next_place_id;
                    self.place_earlier_overlapping(src, dst, remote, bytes.len(), next);
                    // Torn placement: each word lands at its own time.
                    let flag = Rc::new(Cell::new(false));
                    let mut pieces = Vec::new();
                    for (k, chunk) in bytes.chunks(8).enumerate() {
                        let mut b = [0u8; 8];
                        b[..chunk.len()].copy_from_slice(chunk);
                        let t = now + self.rng.range_inclusive(0, spread_ns);
                        let landed = Rc::new(Cell::new(false));
                        let at = remote.add(8 * k as u64);
                        pieces.push((t, at, b, chunk.len() as u8, landed.clone()));
                        s.at(
                            t,
                            NetEvent::LandWord {
                                src,
                                dst,
                                at,
                                bytes: b,
                                len: chunk.len() as u8,
                                denied: flag.clone(),
                                epoch,
                                landed,
                            },
                        );
                    }
                    // The same pieces may land earlier, in the middle of a
                    // read of this memory (its CPU's, or another NIC's):
                    // oldest scheduled first.
                    pieces.sort_by_key(|p| p.0);
                    let cell = self.nics[dst].grant_epoch[src][remote.region.index()].clone();
                    for (_, at, bytes, len, landed) in pieces {
                        self.nics[dst].mem.in_flight(InFlight {
                            at,
                            bytes,
                            len,
                            landed,
                            denied: flag.clone(),
                            epoch: (cell.clone(), epoch),
                        });
                    }
                    denied = Some(flag);
                } else if visible_after > 0 {
                    let id = self.next_place_id;
                    self.next_place_id += 1;
                    // (Earlier pending data of the same bytes is placed
                    // before this one: see place_earlier_overlapping.)
                    self.pending_places.push(PendingPlace {
                        id,
                        src,
                        dst,
                        at: remote,
                        bytes,
                    });
                    s.at(now + visible_after, NetEvent::Place { id });
                } else {
                    let next = self.next_place_id;
                    self.place_earlier_overlapping(src, dst, remote, bytes.len(), next);
                    self.nics[dst].mem.write(remote, &bytes);
                }
            }
            Op::Read { local, len, .. } => {
                let mut buf = vec![0u8; len as usize];
                if self.interleave_reads {
                    // Not an instant snapshot: a WRITE in flight into the
                    // target may land between two of the words read.
                    let mem = &self.nics[dst].mem;
                    let mut done = 0usize;
                    while done < buf.len() {
                        let n = (buf.len() - done).min(8 * self.rng.range_inclusive(1, 8) as usize);
                        mem.read(remote.add(done as u64), &mut buf[done..done + n]);
                        done += n;
                        if done < buf.len() && self.rng.chance(1, 2) {
                            mem.land_one();
                        }
                    }
                } else {
                    mem.read(remote, &mut buf);
                }
                landing = Some((local, buf));
            }
            Op::CompareSwap {
                local,
                expect,
                swap,
                ..
            } => {
                let old = mem.load_u64(remote);
                if old == expect {
                    mem.store_u64(remote, swap);
                }
                landing = Some((local, old.to_le_bytes().to_vec()));
            }
            Op::FetchAdd { local, add, .. } => {
                let old = mem.load_u64(remote);
                mem.store_u64(remote, old.wrapping_add(add));
                landing = Some((local, old.to_le_bytes().to_vec()));
            }
        }
        if self.cut(dst, src, now) {
            // The effect happened, the acknowledgement is lost.
            self.conn(src, dst, ch).failed = true;
            self.complete_at(
                s,
                src,
                dst,
                ch,
                timeout_at,
                c(WcStatus::Unreachable),
                None,
                denied,
            );
            return wr.op.writes_remote();
        }
        self.complete_at(
            s,
            src,
            dst,
            ch,
            (now + ack_ns).max(now + visible_after + 1),
            c(WcStatus::Ok),
            landing,
            denied,
        );
        wr.op.writes_remote()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_core::fabric::WrId;
    use verbatim_core::{Config, MemberId};

    /// Collects scheduled events in time order.
    #[derive(Default)]
    struct Events(Vec<(u64, NetEvent)>);

    impl Schedule for Events {
        fn at(&mut self, at_ns: u64, ev: NetEvent) {
            self.0.push((at_ns, ev));
        }
    }

    impl Events {
        fn next(&mut self) -> Option<(u64, NetEvent)> {
            let k = (0..self.0.len()).min_by_key(|&k| self.0[k].0)?;
            Some(self.0.remove(k))
        }
    }

    fn read(net: &Net, m: usize, at: Addr, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        net.nic(m).mem.read(at, &mut out);
        out
    }

    /// A checker sees a WRITE whose data is not yet visible to the target's
    /// CPU as it will land, and the run goes on as if it had not looked.
    #[test]
    fn a_checker_sees_executed_writes_placed_and_the_run_does_not() {
        let layout = Layout::new(&Config::new(2, MemberId(0))).unwrap();
        let memories = vec![SimMemory::new(&layout), SimMemory::new(&layout)];
        let mut net = Net::new(NetParams::DARE, &layout, memories, 7);
        net.faults.push(Box::new(Reordering));
        net.set_access(1, MemberId(0), RegionId::Log, Access::Granted);
        let at = Addr::new(RegionId::Log, 64);
        let old: Vec<u8> = vec![0xAA; 64];
        let new: Vec<u8> = (0..64).collect();
        net.nic(1).mem.write(at, &old);
        net.nic(0).mem.write(at, &new);
        let mut s = Events::default();
        // Until one write's data is held back (its visibility delay is
        // drawn from the seeded generator, and may be zero).
        let mut held = false;
        for k in 0..32u64 {
            net.post(
                &mut s,
                k * 10_000,
                0,
                WorkRequest {
                    wr_id: WrId(k),
                    peer: MemberId(1),
                    op: Op::Write {
                        local: at,
                        remote: at,
                        len: 64,
                    },
                    notify: false,
                },
            );
            while let Some((t, ev)) = s.next() {
                let place = matches!(ev, NetEvent::Place { .. });
                if place && read(&net, 1, at, 64) == old {
                    held = true;
                    let undo = net.place_pending_for_check();
                    assert_eq!(read(&net, 1, at, 64), new, "the checker sees it placed");
                    net.undo_placed(undo);
                    assert_eq!(read(&net, 1, at, 64), old, "the run does not");
                }
                net.handle(&mut s, t, ev);
            }
            assert_eq!(read(&net, 1, at, 64), new, "placed in the end");
            if held {
                break;
            }
            net.nic(1).mem.write(at, &old);
        }
        assert!(held, "no write was held back in 32 tries");
    }
}
