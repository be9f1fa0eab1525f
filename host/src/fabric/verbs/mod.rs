//! The ibverbs fabric (feature `rdma`): the core's one-sided operations as
//! real RDMA WRITE, READ, compare-and-swap and fetch-and-add on reliable
//! connections (RoCE v2 or InfiniBand; tested on Soft-RoCE, see
//! `scripts/softroce-vm`).
//!
//! # Resources
//! One device context, one protection domain, and the replica's segment
//! registered region by region: `Control` with remote read, write and
//! atomics for every member; `Scratch`, `Sessions` and `Clients` local
//! only; `Log` once locally, plus **one registration per granted peer**
//! (its own rkey), so that revoking a peer deregisters exactly its key.
//!
//! # Queue pairs
//! For every peer and each [`Channel`] (DARE §3.1.2: control and log) there
//! are two RC queue pairs per member, one per direction: an *outbound* QP
//! on which we post (it accepts no incoming operation at all) and an
//! *inbound* QP that answers the peer's requests. Directional pairs keep
//! the consequences of a revoke on the revoked direction: when we refuse a
//! peer's log write, rxe moves our responder QP to ERROR, and with a
//! shared bidirectional QP that would also flush our own requests to that
//! peer. Per-channel ordering is the RC ordering of the outbound QP.
//!
//! One more QP is connected to itself (the *loopback connection*, our own
//! entry's control channel): requests a member posts to its own memory go
//! through it. A coordinator CASes its own slot words so, because a CPU
//! atomic on a word is not atomic with the NIC's atomics on it. Without
//! it (a device that cannot connect it) our own requests are refused and
//! the view engine stops asking its own coordinator memory.
//!
//! Every connect hands over the peer's control, heartbeat, snapshot and
//! view slot regions (the last two empty when it has none).
//! # Revocation (DARE §3.2.1)
//! `set_access(peer, Log, Revoked)` first clears the inbound log QP's
//! access flags (RTS → RTS; later requests are answered with a NAK, which
//! the peer sees as `REM_INV_REQ_ERR` → [`WcStatus::AccessDenied`], and
//! memory stays untouched: observed on rxe), then deregisters the peer's
//! log region. `ibv_dereg_mr` returns only once the device no longer uses
//! the key: rxe drops the key from its pool and waits for the requests
//! that hold a reference to the region (a write being executed when the
//! flags changed), a hardware device destroys the key in firmware. So when
//! `set_access` returns, no write from that peer lands. A grant registers
//! a fresh region and pushes its rkey to the peer over the exchange
//! connection before returning; a reconnect also carries the current rkey.
//!
//! # Completions
//! Every work request is signalled and its completion comes back exactly
//! once: from the device (mapped from `ibv_wc_status`), or, for requests
//! the fabric refuses itself (out of bounds, unknown peer, channel already
//! broken), synthesised and queued *behind* the requests still in flight on
//! that channel, so per-channel order holds for errors too.
//!
//! # The exchange
//! QP numbers, GIDs/LIDs, rkeys and the layout hash travel over TCP (see
//! [`wire`] for the messages and their authentication): every message
//! after the opening carries an HMAC-SHA256 under `[cluster]
//! exchange_secret` and both sides' per-connection nonces, so only
//! members holding the secret learn an rkey or connect a QP, and a
//! recorded message is refused on any other connection. A peer that fails
//! authentication gets a bare "refused"; reasons (another layout, another
//! group) go only to authenticated peers, and the layout hashes appear only
//! in the refusing member's log. The listener serves at most
//! [`HANDSHAKES_MAX`] unauthenticated connections at once (later ones wait
//! in the kernel's backlog), each must open and say an authenticated hello
//! within [`HANDSHAKE_TIMEOUT`], and a member keeps one connection (a new
//! one replaces the old): threads are bounded, and a peer that connects
//! and sends nothing is dropped.
//!
//! Our side of the exchange never runs on the poll loop: each peer has a
//! *dialler* thread that owns our connection to it and performs the
//! connects and grants the loop queues. [`Fabric::reconnect`] creates the
//! new QP, hands the connect to the dialler and returns `PeerGone` while
//! it is under way (the channel stays broken, the core retries after its
//! backoff and then finds the channel connected); it waits for the answer
//! (at most `RECONNECT_WAIT`, 1 s) only when the peer itself broke the
//! channel by refusing a request (a revoke: it answers). A grant waits at
//! most 100 ms for the peer's acknowledgement of its new key, and not at
//! all for a peer seen unreachable. So a
//! partitioned peer, whose dial or answer never comes, costs the poll loop
//! nothing: before, each reconnect to it blocked the loop for up to 3.2 s
//! (the answer's timeout, then a dial), long enough for a leader to miss
//! its heartbeats and lose its followers.
//!
//! # Peer death
//! A dead peer's QPs are gone: our requests time out (`timeout` and
//! `retry_cnt` below: about 30 ms under rxe) and complete
//! `RETRY_EXC_ERR` → [`WcStatus::Unreachable`], which the core treats as
//! a suspicion, and its heartbeats stop (the core's failure detector).
//! A closed exchange connection is only a suspicion too
//! ([`VerbsFabric::suspected`]): the connection may have been dropped for
//! another reason (a timeout, a redial). The fabric then probes the peer's
//! exchange address: if the peer's kernel refuses the connection, no
//! process listens there any more and the process has exited, which is
//! reported through [`HostFabric::liveness`] (the driver's
//! `take_peer_down`). If something answers, or nothing does in time, the
//! peer stays suspected and the core's own detectors decide; a peer that
//! connects again (new exchange connection, new QPs) is no longer
//! suspected. A partition closes no connection (nothing answers, nothing
//! resets): its members are left to the detectors, and their exchange
//! connections carry on once it heals.

mod device;
pub mod wire;

pub use device::{device_names, AccessFlags, Context, PortInfo, VerbsError};

use crate::fabric::liveness::PeerLiveness;
use crate::fabric::shm::Segment;
use crate::fabric::{HostFabric, PeerProblem};
use device::{Cq, Mr, Pd, Qp, QpEndpoint, RcParams, SendOp, Wc};
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use verbatim_client::manifest::VerbsMember;
use verbatim_core::fabric::{
    Access, Channel, Completion, Fabric, FabricError, MemberId, Op, RegionId, WcStatus,
    WorkRequest, INLINE_BYTES_MAX, MAX_MEMBERS, REGIONS_MAX,
};
use verbatim_core::layout::{Layout, RemoteAccess};
use verbatim_core::node::INFLIGHT_CAP;
use wire::{Msg, Probe, ReadLimits, RefuseCode, Secret, Session, WireError, WireQp, WireRegion};

// The ACK timeout and retry count come from `[members.verbs]`
// (`qp_timeout`, `qp_retry_count`; defaults 10 and 3: a dead peer shows
// after about 17–30 ms, 30 ms measured under rxe).
/// RNR retries: 7 means "forever"; we post no receives, so none happen.
pub const QP_RNR_RETRY: u8 = 7;
/// The largest transport retry count used. rxe (Soft-RoCE) treats 7 like
/// the RNR count, as "retry forever": a request to a peer that stopped
/// answering (a partition, a dead host) would then never complete, its
/// channel never break, and every buffer it holds stay taken (the core's
/// row pushes: elections stopped for good, seen with one direction of a
/// link cut). `qp_retry_count = 7` is used as 6.
pub const QP_RETRY_COUNT_MAX: u8 = 6;
/// Depth of each outbound send queue: the core never has more than
/// `INFLIGHT_CAP` requests in flight in total.
const SEND_QUEUE_DEPTH: u32 = INFLIGHT_CAP as u32 + 16;
/// Entries of the outbound completion queue, and the bound on requests in
/// flight through this fabric: one entry per signalled request, so the
/// queue cannot overflow.
const CQ_ENTRIES: usize = 2 * INFLIGHT_CAP;
/// How long a request on the exchange connection may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long dialling a peer's exchange address may take.
const DIAL_TIMEOUT: Duration = Duration::from_millis(200);
/// Wait between dial attempts to a peer that did not answer.
const DIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Poll period of the exchange threads for the stop flag.
const EXCHANGE_TICK: Duration = Duration::from_millis(50);
/// How long a connecting peer has to open the exchange and say an
/// authenticated hello; then its connection is closed.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// Connections served at once before their hello (each has a thread);
/// further ones wait in the kernel's backlog. Twice the largest group:
/// every peer redialling at once still fits.
pub const HANDSHAKES_MAX: usize = 2 * MAX_MEMBERS;
/// How often the listener looks for a new connection.
const ACCEPT_POLL: Duration = Duration::from_millis(2);
/// Probing a peer whose exchange connection closed: attempts, the wait
/// between them, and the bound on each.
const PROBE_ATTEMPTS: u32 = 3;
const PROBE_GAP: Duration = Duration::from_millis(50);
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Bound on draining a channel's requests before a reconnect.
const DRAIN_WAIT: Duration = Duration::from_secs(2);
/// How long a reconnect of a channel the peer refused (a revoke) waits for
/// the peer to connect its side (well under a millisecond on hardware, a
/// few under software emulation). Other reconnects do not wait.
const RECONNECT_WAIT: Duration = Duration::from_secs(1);
/// How long a grant waits for the peer to acknowledge its new key, unless
/// the peer was seen unreachable (then not at all): its next connect
/// carries the key anyway.
const GRANT_WAIT: Duration = Duration::from_millis(100);

/// Why the fabric could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The manifest lacks what the fabric needs.
    #[error("configuration: {0}")]
    Config(String),
    /// A verb failed.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// The exchange address could not be bound.
    #[error("cannot listen on exchange_addr {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// How the connection exchange authenticates members (`[cluster]
/// exchange_secret`).
#[derive(Clone, Debug, Default)]
pub struct ExchangeOptions {
    /// The shared secret (at least [`wire::SECRET_BYTES_MIN`] bytes).
    /// `None` only where every exchange address is a loopback address:
    /// without it anybody who can connect can compute the tags.
    pub secret: Option<Secret>,
}

impl ExchangeOptions {
    /// From the manifest's `cluster.exchange_secret`.
    pub fn from_secret(secret: Option<&str>) -> ExchangeOptions {
        ExchangeOptions {
            secret: secret.map(|s| Secret::new(s.as_bytes())),
        }
    }
}

/// What the exchange has seen, since the fabric started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExchangeCounters {
    /// Peers' exchange connections (after their hello) that closed:
    /// suspicions.
    pub suspicions: u64,
    /// Of those, peers whose process was then confirmed gone (their
    /// exchange address refused connections) and reported down.
    pub exits_confirmed: u64,
    /// Connections refused for a missing or wrong tag.
    pub auth_failures: u64,
    /// Connections closed for saying nothing (or no hello) in time.
    pub handshake_timeouts: u64,
}

/// A region of ours, registered.
struct LocalRegion {
    base: u64,
    len: u64,
    mr: Mr,
}

/// What a peer's listening side knows about it (inbound QPs, its log
/// registration), shared between the poll thread and the exchange threads.
#[derive(Default)]
struct Inbound {
    /// Our responder QPs for the peer's channels.
    qp: [Option<Qp>; 2],
    /// The peer's own registration of our log, while granted.
    log_mr: Option<Mr>,
    /// Bumped by every grant and revoke.
    epoch: u64,
    /// Set once the peer said hello.
    hello: bool,
}

/// What we know of a peer's log region (from its grants and connects).
#[derive(Clone, Copy, Default)]
struct RemoteLog {
    region: WireRegion,
    /// The peer process that registered it: grant epochs count per
    /// process, so a restarted peer's first epochs are below its
    /// predecessor's.
    incarnation: u64,
}

/// State shared with the exchange threads.
struct Shared {
    me: MemberId,
    members: u8,
    layout_hash: u64,
    incarnation: u64,
    pd: Arc<Pd>,
    in_cq: Arc<Cq>,
    rc: RcParams,
    local_qp: LocalQpInfo,
    control: WireRegion,
    heartbeat: WireRegion,
    /// Our snapshot region (a recovering member READs it), or an empty one
    /// when the layout has none.
    snapshot: WireRegion,
    /// The view engine's slot words (coordinators CAS and READ them), and
    /// their region id; empty and `None` when the layout has no views.
    consensus: WireRegion,
    consensus_region: Option<RegionId>,
    /// The other engines' remotely accessible regions (multicast, RDMC,
    /// subgroups), with who may access each: a peer is told only of those
    /// it may access.
    others: Vec<(RegionId, WireRegion, RemoteAccess)>,
    log_base: u64,
    log_len: u64,
    inbound: Vec<Mutex<Inbound>>,
    remote_log: Vec<Mutex<RemoteLog>>,
    stop: AtomicBool,
    /// The exchange's shared secret.
    secret: Option<Secret>,
    /// Every member's exchange address (to probe a peer after a close).
    addrs: Vec<String>,
    /// Accepted connections (a clone to shut down) and their threads.
    served: Mutex<Vec<(TcpStream, std::thread::JoinHandle<()>)>>,
    /// Accepted connections that have not said an authenticated hello yet.
    handshakes: AtomicUsize,
    /// Numbers accepted connections.
    next_conn: AtomicU64,
    /// Per peer: the accepted connection its authenticated hello came on
    /// (its number, and a clone to shut it down when a newer one comes).
    current: Vec<Mutex<Option<CurrentConn>>>,
    /// Per peer: its exchange connection closed and it has not connected
    /// again since.
    suspected: Vec<AtomicBool>,
    suspicions: AtomicU64,
    exits_confirmed: AtomicU64,
    auth_failures: AtomicU64,
    handshake_timeouts: AtomicU64,
    /// A dialler queued answers for the poll loop.
    answers: AtomicBool,
    /// Keeps the registered memory mapped; dropped after every region.
    _segment: Arc<Segment>,
    /// Where a peer's process is reported gone once a closed exchange
    /// connection is confirmed by a refused probe (the cross-host
    /// counterpart of the pidfd).
    liveness: Arc<PeerLiveness>,
}

/// A peer's current accepted exchange connection.
struct CurrentConn {
    /// Its number (`Shared::next_conn`).
    conn: u64,
    /// A clone, to shut it down when the peer connects again.
    stream: Option<TcpStream>,
}

/// Our port's addressing, sent with every QP.
#[derive(Clone, Copy)]
struct LocalQpInfo {
    lid: u16,
    gid: [u8; 16],
    mtu: u8,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking exchange thread must not take the fabric down with it:
    // the data behind these locks stays consistent at every await point.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn fresh_psn(salt: u32) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (t ^ salt.wrapping_mul(0x9E37_79B9)) & 0x00FF_FFFF
}

impl Shared {
    fn wire_qp(&self, qp: &Qp, psn: u32) -> WireQp {
        WireQp {
            qpn: qp.qpn(),
            psn,
            lid: self.local_qp.lid,
            gid: self.local_qp.gid,
            mtu: self.local_qp.mtu,
        }
    }

    fn rc_towards(&self, remote: &WireQp) -> RcParams {
        let mut p = self.rc;
        p.mtu = p.mtu.min(u32::from(remote.mtu));
        p
    }

    /// Our log as the peer `m` may see it now.
    fn log_for(&self, inbound: &Inbound) -> WireRegion {
        WireRegion {
            addr: self.log_base,
            len: self.log_len,
            rkey: inbound.log_mr.as_ref().map_or(0, Mr::rkey),
            granted: inbound.log_mr.is_some(),
            epoch: inbound.epoch,
        }
    }

    /// Builds our responder QP for `peer`'s channel, connected to `remote`.
    fn accept_channel(
        &self,
        peer: MemberId,
        channel: Channel,
        remote: &WireQp,
    ) -> Result<Msg, VerbsError> {
        let mut inbound = lock(&self.inbound[peer.index()]);
        // The old responder QP (if any) is destroyed: the peer reconnects
        // only once its side of the channel has drained.
        inbound.qp[channel.index()] = None;
        let qp = Qp::new(&self.pd, &self.in_cq, &self.in_cq, 1, 0)?;
        let access = match channel {
            Channel::Control => AccessFlags::QP_REMOTE_ALL,
            Channel::Log if inbound.log_mr.is_some() => AccessFlags::QP_REMOTE_ALL,
            Channel::Log => AccessFlags::QP_NONE,
        };
        let psn = fresh_psn(qp.qpn());
        let rc = self.rc_towards(remote);
        qp.to_init(rc.port, access)?;
        qp.to_rtr(
            &rc,
            &QpEndpoint {
                qpn: remote.qpn,
                psn: remote.psn,
                lid: remote.lid,
                gid: remote.gid,
            },
        )?;
        qp.to_rts(&rc, psn)?;
        let reply = Msg::Connected {
            qp: self.wire_qp(&qp, psn),
            control: self.control,
            log: self.log_for(&inbound),
            heartbeat: self.heartbeat,
            snapshot: self.snapshot,
            consensus: self.consensus,
            others: self
                .others
                .iter()
                .filter(|(_, _, access)| access.granted_from_start(peer))
                .map(|(id, r, _)| (id.0, *r))
                .collect(),
        };
        inbound.qp[channel.index()] = Some(qp);
        Ok(reply)
    }

    /// Keeps the newest registration of `peer`'s log: of another process
    /// (incarnation) than the one we knew, which is its successor (only a
    /// live process says hello and answers; incarnations come from the
    /// wall clock, so they are compared for equality only), else of the
    /// same process's latest grant or revoke (epoch). (Comparing epochs
    /// alone kept a restarted peer's predecessor's key, whose epoch was
    /// higher, and every access to the new process's log failed
    /// REM_ACCESS_ERR: the leader reconnected and retried for ever;
    /// Soft-RoCE hosts suite, issue 17.)
    fn note_remote_log(&self, peer: MemberId, incarnation: u64, log: WireRegion) {
        let mut r = lock(&self.remote_log[peer.index()]);
        if incarnation != r.incarnation || log.epoch >= r.region.epoch {
            r.region = log;
            r.incarnation = incarnation;
        }
    }
}

/// Holds one of the listener's [`HANDSHAKES_MAX`] slots until the peer is
/// authenticated or the connection ends.
struct HandshakeSlot<'a>(Option<&'a AtomicUsize>);

impl HandshakeSlot<'_> {
    fn release(&mut self) {
        if let Some(c) = self.0.take() {
            c.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for HandshakeSlot<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

impl Shared {
    /// Logs why an accepted connection ended before its hello was
    /// accepted. Never the layout hash, never the secret.
    fn note_failed_handshake(&self, remote: SocketAddr, e: &WireError) {
        match e {
            WireError::BadMac => {
                self.auth_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    %remote,
                    "exchange: a message failed authentication (is cluster.exchange_secret the same on every member?); refused and closed"
                );
            }
            WireError::TimedOut(_) => {
                self.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    %remote,
                    timeout_s = HANDSHAKE_TIMEOUT.as_secs(),
                    "exchange: no authenticated hello in time; closed"
                );
            }
            WireError::Stopped => {}
            e if e.is_disconnect() => {
                // Probes after a close do this, and diallers that gave up.
                tracing::debug!(%remote, "exchange: closed before its hello");
            }
            e => tracing::warn!(%remote, error = %e, "exchange: refused a connection"),
        }
    }

    /// Checks a hello; a refusal's details are logged here only.
    /// Checks a hello; returns the peer and its incarnation (which process
    /// of it this is: its log keys are its own).
    fn check_hello(&self, hello: &Msg, remote: SocketAddr) -> Result<(MemberId, u64), RefuseCode> {
        let Msg::Hello {
            from,
            to,
            members,
            layout_hash,
            incarnation,
        } = *hello
        else {
            tracing::warn!(%remote, message = hello.kind(), "exchange: a request before hello; refused");
            return Err(RefuseCode::Refused);
        };
        let me = self.me.0;
        if to != me {
            tracing::warn!(
                %remote,
                from,
                "exchange: refused a peer that dialled member {to}: this exchange address belongs to member {me} (check exchange_addr in the manifest)"
            );
            Err(RefuseCode::WrongMember)
        } else if members != self.members || from >= members || from == me {
            tracing::warn!(
                %remote,
                "exchange: refused member {from} of a group of {members}; this member is {me} of {}",
                self.members
            );
            Err(RefuseCode::Group)
        } else if layout_hash != self.layout_hash {
            tracing::warn!(
                %remote,
                "exchange: refused member {from}: layout mismatch (its layout hash {layout_hash:#018x}, ours {:#018x}); every member must run with the same [cluster] settings (log_ring_bytes, value_bytes_max, session_slot_count, client_slot_count)",
                self.layout_hash
            );
            Err(RefuseCode::Layout)
        } else {
            Ok((MemberId(from), incarnation))
        }
    }

    /// Makes `conn` the peer's current exchange connection (closing an
    /// older one: the peer redialled) and lifts a suspicion.
    fn adopt(&self, p: MemberId, conn: u64, stream: &TcpStream) {
        let old = lock(&self.current[p.index()]).replace(CurrentConn {
            conn,
            stream: stream.try_clone().ok(),
        });
        if let Some(CurrentConn {
            stream: Some(old), ..
        }) = old
        {
            tracing::debug!(
                peer = p.0,
                "exchange: the peer redialled; closing its older connection"
            );
            let _ = old.shutdown(std::net::Shutdown::Both);
        }
        lock(&self.inbound[p.index()]).hello = true;
        if self.suspected[p.index()].swap(false, Ordering::AcqRel) {
            tracing::info!(
                peer = p.0,
                "exchange: member connected again; no longer suspected"
            );
        }
        // A member confirmed exited that authenticated again is a new
        // process in its place: the poll loop trusts it again (its pid is
        // not known across hosts: 0, any later death report counts).
        if self.liveness.is_dead(p) {
            tracing::info!(peer = p.0, "exchange: a restarted member connected");
            self.liveness.revive(p, 0);
        }
    }

    /// Answers an authenticated peer's requests until the connection ends;
    /// returns why it ended.
    fn serve_requests(
        &self,
        p: MemberId,
        incarnation: u64,
        session: &mut Session,
        stream: &mut TcpStream,
    ) -> WireError {
        loop {
            // A member's connection may stay idle (requests come with
            // reconnects and grants), but a begun message must complete.
            let msg = match session.recv(stream, ReadLimits::idle(EXCHANGE_TIMEOUT), &self.stop) {
                Ok(m) => m,
                Err(e) => return e,
            };
            let reply = match msg {
                Msg::Connect { channel, qp } => {
                    let ch = if channel == 0 {
                        Channel::Control
                    } else {
                        Channel::Log
                    };
                    match self.accept_channel(p, ch, &qp) {
                        Ok(reply) => {
                            tracing::debug!(peer = p.0, channel, "exchange: channel connected");
                            reply
                        }
                        Err(e) => {
                            tracing::error!(peer = p.0, error = %e, "exchange: cannot connect a channel");
                            Msg::Refuse {
                                code: if session.authenticated() {
                                    RefuseCode::Channel
                                } else {
                                    RefuseCode::Refused
                                },
                            }
                        }
                    }
                }
                Msg::Grant { log } => {
                    self.note_remote_log(p, incarnation, log);
                    Msg::Ack
                }
                other => {
                    tracing::warn!(
                        peer = p.0,
                        message = other.kind(),
                        "exchange: unexpected message; dropping the connection"
                    );
                    return WireError::Invalid("unexpected message");
                }
            };
            if let Err(e) = session.send(stream, &reply) {
                return e;
            }
        }
    }

    /// An authenticated peer's connection ended: unless a newer one
    /// replaced it or we are stopping, the peer is suspected, and its
    /// exchange address is probed to tell an exited process from a
    /// dropped connection.
    fn connection_ended(&self, p: MemberId, conn: u64, why: &WireError) {
        let was_current = {
            let mut cur = lock(&self.current[p.index()]);
            if cur.as_ref().is_some_and(|c| c.conn == conn) {
                *cur = None;
                true
            } else {
                false
            }
        };
        if !was_current || self.stop.load(Ordering::Acquire) {
            tracing::debug!(peer = p.0, "exchange: a replaced connection ended");
            return;
        }
        self.suspected[p.index()].store(true, Ordering::Release);
        self.suspicions.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            peer = p.0,
            reason = %why,
            "exchange connection closed: member suspected; probing its exchange address"
        );
        let Ok(addr) = parse_addr(&self.addrs[p.index()]) else {
            return;
        };
        let verdict = wire::probe(
            addr,
            self.secret.as_ref(),
            PROBE_ATTEMPTS,
            PROBE_GAP,
            PROBE_TIMEOUT,
            &self.stop,
        );
        match verdict {
            Probe::Exited => {
                // A peer that connected again meanwhile (a restarted
                // process) is not reported: that would be for good.
                if self.suspected[p.index()].load(Ordering::Acquire)
                    && !self.stop.load(Ordering::Acquire)
                {
                    self.exits_confirmed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        peer = p.0,
                        "member's process exited (its exchange address refuses connections); reported down"
                    );
                    self.liveness.mark_dead(p);
                }
            }
            Probe::Alive => tracing::info!(
                peer = p.0,
                "member still answers on its exchange address: suspected until it connects again; heartbeats and QP errors decide whether it is down"
            ),
            Probe::Unknown => tracing::info!(
                peer = p.0,
                "member does not answer on its exchange address: heartbeats and QP errors decide whether it is down"
            ),
        }
    }
}

/// Serves one accepted connection: the opening and an authenticated hello
/// within [`HANDSHAKE_TIMEOUT`], then the peer's requests until it hangs
/// up.
fn serve(shared: Arc<Shared>, mut stream: TcpStream, conn: u64, remote: SocketAddr) {
    let mut slot = HandshakeSlot(Some(&shared.handshakes));
    if let Err(e) = wire::prepare(&stream, EXCHANGE_TIMEOUT) {
        tracing::debug!(%remote, error = %e, "exchange: cannot set up an accepted connection");
        return;
    }
    let stop = &shared.stop;
    // One deadline for the whole handshake: a peer that connects and says
    // nothing holds its slot at most that long.
    let handshake = ReadLimits::within(HANDSHAKE_TIMEOUT);
    let mut session = match wire::accept(&mut stream, shared.secret.as_ref(), handshake, stop) {
        Ok(s) => s,
        Err(e) => {
            shared.note_failed_handshake(remote, &e);
            return;
        }
    };
    let hello = match session.recv(&mut stream, handshake, stop) {
        Ok(m) => m,
        Err(e) => {
            if matches!(e, WireError::BadMac) {
                wire::refuse_plain(&mut stream);
            }
            shared.note_failed_handshake(remote, &e);
            return;
        }
    };
    let (p, incarnation) = match shared.check_hello(&hello, remote) {
        Ok(checked) => checked,
        Err(code) => {
            // Reasons go only to a peer that proved it holds the secret.
            let code = if session.authenticated() {
                code
            } else {
                RefuseCode::Refused
            };
            let _ = session.send(&mut stream, &Msg::Refuse { code });
            return;
        }
    };
    slot.release();
    shared.adopt(p, conn, &stream);
    let ended = match session.send(
        &mut stream,
        &Msg::HelloOk {
            incarnation: shared.incarnation,
        },
    ) {
        Ok(()) => shared.serve_requests(p, incarnation, &mut session, &mut stream),
        Err(e) => e,
    };
    shared.connection_ended(p, conn, &ended);
}

/// Accepts dialling peers until the fabric stops, at most
/// [`HANDSHAKES_MAX`] of them before their hello.
fn listen(shared: Arc<Shared>, listener: TcpListener) {
    let _ = listener.set_nonblocking(true);
    let mut saturated = false;
    while !shared.stop.load(Ordering::Acquire) {
        // While every slot is taken, new connections wait in the kernel's
        // (bounded) backlog instead of each getting a thread.
        if shared.handshakes.load(Ordering::Acquire) >= HANDSHAKES_MAX {
            if !saturated {
                tracing::warn!(
                    slots = HANDSHAKES_MAX,
                    "exchange: every handshake slot is taken (connections that say nothing?); new connections wait"
                );
                saturated = true;
            }
            std::thread::sleep(ACCEPT_POLL);
            continue;
        }
        saturated = false;
        match listener.accept() {
            Ok((stream, remote)) => {
                if stream.set_nonblocking(false).is_err() {
                    continue;
                }
                let Ok(handle) = stream.try_clone() else {
                    continue;
                };
                shared.handshakes.fetch_add(1, Ordering::AcqRel);
                let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
                let s = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("verbatim-xchg".into())
                    .spawn(move || serve(s, stream, conn, remote));
                match spawned {
                    Ok(t) => {
                        let mut served = lock(&shared.served);
                        // Forget connections whose thread ended: what is
                        // left is bounded by the handshake slots plus one
                        // connection per peer.
                        served.retain(|(_, t)| !t.is_finished());
                        served.push((handle, t));
                    }
                    Err(e) => {
                        shared.handshakes.fetch_sub(1, Ordering::AcqRel);
                        tracing::error!(error = %e, "exchange: cannot start a connection thread")
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(ACCEPT_POLL);
            }
            Err(e) => {
                tracing::warn!(error = %e, "exchange: accept failed");
                std::thread::sleep(EXCHANGE_TICK);
            }
        }
    }
}

/// One of our outbound channels.
struct OutChannel {
    qp: Qp,
    /// Device requests posted and not yet reaped.
    inflight: u32,
    /// An error completed on it: later requests complete `Flushed`.
    broken: bool,
    /// The peer refused one of its requests (a revoke's NAK): the peer
    /// answers, so a reconnect may wait for it.
    refused: bool,
    /// Completions synthesised while requests were in flight, released in
    /// order once they have all completed.
    deferred: VecDeque<Completion>,
}

/// Our dialled exchange connection to a peer, after its hello.
struct Link {
    stream: TcpStream,
    session: Session,
}

/// What the poll loop asks a peer's dialler.
enum DialRequest {
    /// Connect the peer's side of a channel to our QP.
    Connect { channel: Channel, qp: WireQp },
    /// Tell the peer the key of its (new) registration of our log.
    Grant { log: WireRegion },
}

/// What a dialler answers.
// (A connect's answer is the large one; there are a few per connection,
// queued briefly: not worth a box.)
#[allow(clippy::large_enum_variant)]
enum DialAnswer {
    /// The peer's answer to a connect (or why there is none).
    Connected {
        channel: Channel,
        result: Result<Msg, PeerProblem>,
        /// The peer's incarnation when it answered.
        incarnation: u64,
    },
    /// The peer acknowledged the grant of this epoch.
    Granted { epoch: u64 },
    /// The peer said hello with a new incarnation: it restarted.
    Restarted,
    /// The peer could not be reached for a grant.
    Unreachable,
}

#[derive(Default)]
struct DialQueue {
    requests: VecDeque<DialRequest>,
    answers: VecDeque<DialAnswer>,
}

/// The dialling side towards one peer, run by a thread of its own: the
/// exchange connection (dial, opening, hello), connects and grants. The
/// poll loop queues requests and collects answers; it never waits for the
/// network, so an unreachable peer (a partition: a dial or an answer that
/// never comes) costs it nothing.
struct Dialer {
    queue: Mutex<DialQueue>,
    wake: std::sync::Condvar,
}

impl Dialer {
    fn lock(&self) -> MutexGuard<'_, DialQueue> {
        lock(&self.queue)
    }

    fn request(&self, r: DialRequest) {
        self.lock().requests.push_back(r);
        self.wake.notify_one();
    }
}

/// A dialler thread's own state.
struct Outbound {
    p: usize,
    addr: String,
    link: Option<Link>,
    /// The peer's incarnation at the last hello.
    incarnation: u64,
    /// When to dial again after a dial that failed.
    next_dial: Instant,
    /// A configuration problem that waiting will not fix.
    fatal: Option<String>,
}

/// A dialler: serves the poll loop's requests to peer `p` in order until
/// the fabric stops.
fn dial_loop(shared: Arc<Shared>, dialer: Arc<Dialer>, p: usize) {
    let mut out = Outbound {
        p,
        addr: shared.addrs[p].clone(),
        link: None,
        incarnation: 0,
        next_dial: Instant::now(),
        fatal: None,
    };
    loop {
        let req = {
            let mut q = dialer.lock();
            loop {
                if shared.stop.load(Ordering::Acquire) {
                    return;
                }
                if let Some(r) = q.requests.pop_front() {
                    break r;
                }
                q = dialer
                    .wake
                    .wait_timeout(q, EXCHANGE_TICK)
                    .map_or_else(|e| e.into_inner().0, |(g, _)| g);
            }
        };
        let mut answers = Vec::with_capacity(2);
        match req {
            DialRequest::Connect { channel, qp } => {
                let result = out.rpc(
                    &shared,
                    &Msg::Connect {
                        channel: channel as u8,
                        qp,
                    },
                    &mut answers,
                );
                answers.push(DialAnswer::Connected {
                    channel,
                    result,
                    incarnation: out.incarnation,
                });
            }
            DialRequest::Grant { log } => match out.rpc(&shared, &Msg::Grant { log }, &mut answers)
            {
                Ok(Msg::Ack) => answers.push(DialAnswer::Granted { epoch: log.epoch }),
                Ok(other) => {
                    tracing::debug!(peer = p, message = other.kind(), "grant: unexpected answer")
                }
                // Its next connect carries the key.
                Err(e) => {
                    tracing::debug!(peer = p, message = %e.message, "grant: key not delivered");
                    if e.retry {
                        answers.push(DialAnswer::Unreachable);
                    }
                }
            },
        }
        dialer.lock().answers.extend(answers);
        shared.answers.store(true, Ordering::Release);
    }
}

impl Outbound {
    /// One request/answer on our exchange connection, dialling (and saying
    /// hello) first if needed; one redial if the connection broke.
    fn rpc(
        &mut self,
        shared: &Shared,
        req: &Msg,
        answers: &mut Vec<DialAnswer>,
    ) -> Result<Msg, PeerProblem> {
        let mut attempt = 0;
        loop {
            self.ensure_hello(shared, answers)?;
            let stop = &shared.stop;
            let res = match self.link.as_mut() {
                Some(Link { stream, session }) => session.send(stream, req).and_then(|()| {
                    session.recv(stream, ReadLimits::within(EXCHANGE_TIMEOUT), stop)
                }),
                None => Err(WireError::Invalid("no exchange connection")),
            };
            match res {
                Ok(m) => return Ok(m),
                Err(e) => {
                    tracing::debug!(peer = self.p, attempt, error = %e, "exchange request failed");
                    self.link = None;
                    attempt += 1;
                    if attempt == 2 {
                        return Err(PeerProblem {
                            retry: true,
                            message: format!("exchange with {}: {e}", self.addr),
                        });
                    }
                }
            }
        }
    }

    fn fatal(&mut self, message: String) -> PeerProblem {
        self.fatal = Some(message.clone());
        PeerProblem {
            retry: false,
            message,
        }
    }

    fn ensure_hello(
        &mut self,
        shared: &Shared,
        answers: &mut Vec<DialAnswer>,
    ) -> Result<(), PeerProblem> {
        if self.link.is_some() {
            return Ok(());
        }
        if let Some(f) = &self.fatal {
            return Err(PeerProblem {
                retry: false,
                message: f.clone(),
            });
        }
        let p = self.p;
        let addr = parse_addr(&self.addr).map_err(|message| PeerProblem {
            retry: false,
            message,
        })?;
        let peer_addr = self.addr.clone();
        // A peer that did not answer is not dialled again at once (the
        // poll loop asks again after its own backoff).
        let wait = self.next_dial.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait.min(DIAL_BACKOFF));
        }
        let mut stream = TcpStream::connect_timeout(&addr, DIAL_TIMEOUT).map_err(|e| {
            self.next_dial = Instant::now() + DIAL_BACKOFF;
            PeerProblem {
                retry: true,
                message: format!(
                    "exchange address {peer_addr} does not answer ({e}); not started yet?"
                ),
            }
        })?;
        wire::prepare(&stream, EXCHANGE_TIMEOUT).map_err(|e| PeerProblem {
            retry: true,
            message: format!("exchange with {peer_addr}: {e}"),
        })?;
        let stop = &shared.stop;
        let secret = shared.secret.as_ref();
        let limits = ReadLimits::within(EXCHANGE_TIMEOUT);
        let mut session = match wire::dial(&mut stream, secret, limits, stop) {
            Ok(s) => s,
            Err(WireError::BadMac) => {
                return Err(self.fatal(format!(
                    "member {p} at {peer_addr} failed authentication: cluster.exchange_secret must be the same on every member (or another program listens there)"
                )))
            }
            Err(WireError::Refused) => {
                return Err(self.fatal(format!(
                    "refused by member {p} at {peer_addr} without a reason (another exchange protocol version? its log says why)"
                )))
            }
            Err(e) => {
                return Err(PeerProblem {
                    retry: true,
                    message: format!("opening the exchange with {peer_addr}: {e}"),
                })
            }
        };
        let hello = Msg::Hello {
            from: shared.me.0,
            to: p as u8,
            members: shared.members,
            layout_hash: shared.layout_hash,
            incarnation: shared.incarnation,
        };
        let answer = session
            .send(&mut stream, &hello)
            .and_then(|()| session.recv(&mut stream, limits, stop));
        match answer {
            Ok(Msg::HelloOk { incarnation }) => {
                if self.incarnation != 0 && self.incarnation != incarnation {
                    answers.push(DialAnswer::Restarted);
                }
                self.incarnation = incarnation;
                self.link = Some(Link { stream, session });
                Ok(())
            }
            Ok(Msg::Refuse { code }) => {
                Err(self.fatal(format!("refused by member {p}: {}", code.explain())))
            }
            Err(WireError::Refused) => Err(self.fatal(format!(
                "refused by member {p}: our hello failed its authentication (cluster.exchange_secret must be the same on every member)"
            ))),
            Ok(other) => Err(self.fatal(format!(
                "member {p} answered hello with a {} message",
                other.kind()
            ))),
            Err(e) => Err(PeerProblem {
                retry: true,
                message: format!("hello to {peer_addr}: {e}"),
            }),
        }
    }
}

/// Our new QP for a channel while the peer connects its side.
struct PendingQp {
    qp: Qp,
    psn: u32,
}

/// Our side towards one peer.
struct PeerOut {
    channels: [Option<OutChannel>; 2],
    /// Connects handed to the dialler, by channel.
    pending: [Option<PendingQp>; 2],
    /// The peer's control region (from the last connect).
    control: Option<WireRegion>,
    /// The peer's heartbeat region (from the last connect).
    heartbeat: Option<WireRegion>,
    /// The peer's snapshot region (from the last connect; empty when it has
    /// none).
    snapshot: Option<WireRegion>,
    /// The peer's view slot words (from the last connect; empty when it
    /// runs without views).
    consensus: Option<WireRegion>,
    /// The peer's other regions we may access, by region id (from the last
    /// connect).
    others: [Option<WireRegion>; REGIONS_MAX],
    /// What went wrong last connecting to it (cleared by a connect).
    problem: Option<PeerProblem>,
    /// The highest grant epoch it acknowledged.
    granted_epoch: u64,
    /// A request to it completed retry-exceeded, or its dialler could not
    /// reach it, since the last connect: its reconnects and grants are not
    /// waited for.
    unreachable: bool,
    /// Its dialler (none for ourselves: our own entry's control channel is
    /// the loopback connection, see [`VerbsFabric::connect_loopback`]).
    dialer: Option<Arc<Dialer>>,
}

/// What one posted device request was.
#[derive(Clone, Copy)]
struct Slot {
    wr_id: verbatim_core::fabric::WrId,
    peer: MemberId,
    channel: Channel,
}

/// One member's endpoint on the ibverbs fabric.
pub struct VerbsFabric {
    // Field order is drop order: QPs, then regions, then the shared state
    // (which keeps the segment mapped), then the device.
    peers: Vec<PeerOut>,
    /// Our regions by `RegionId` index (the log's local registration).
    /// Indexed by region id; `None` for ids no engine uses.
    local: Vec<Option<LocalRegion>>,
    out_cq: Arc<Cq>,
    listener: Option<std::thread::JoinHandle<()>>,
    /// The diallers' threads (one per peer).
    diallers: Vec<std::thread::JoinHandle<()>>,
    shared: Arc<Shared>,
    ctx: Arc<Context>,
    slots: Vec<Option<Slot>>,
    free_slots: Vec<u32>,
    ready: VecDeque<Completion>,
    liveness: Arc<PeerLiveness>,
    wc_buf: [Wc; 32],
}

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.to_socket_addrs()
        .map_err(|e| format!("`{s}`: {e}"))?
        .next()
        .ok_or_else(|| format!("`{s}` resolves to no address"))
}

fn madvise_hugepages(base: *mut u8, len: u64) {
    // Huge pages when the system offers them for shared memory
    // (/sys/kernel/mm/transparent_hugepage/shmem_enabled); a no-op otherwise.
    // SAFETY: advisory only, on a range of our own live mapping.
    let r = unsafe { libc::madvise(base.cast(), len as usize, libc::MADV_HUGEPAGE) };
    if r != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "madvise(MADV_HUGEPAGE) refused; using base pages");
    }
}

impl VerbsFabric {
    /// Opens the configured device and port, registers the segment's
    /// regions, starts the exchange listener. Peers are connected by
    /// [`HostFabric::connect_peers`].
    pub fn start(
        members: &[Option<VerbsMember>],
        exchange: &ExchangeOptions,
        id: MemberId,
        layout: &Layout,
        segment: Arc<Segment>,
        liveness: Arc<PeerLiveness>,
    ) -> Result<VerbsFabric, StartError> {
        let n = members.len();
        if n > MAX_MEMBERS || id.index() >= n {
            return Err(StartError::Config(format!(
                "member {} of a group of {n}",
                id.0
            )));
        }
        if let Some(secret) = &exchange.secret {
            if secret.len() < wire::SECRET_BYTES_MIN {
                return Err(StartError::Config(format!(
                    "cluster.exchange_secret is {} bytes; use at least {}",
                    secret.len(),
                    wire::SECRET_BYTES_MIN
                )));
            }
        }
        let mut addrs = Vec::with_capacity(n);
        for (i, mem) in members.iter().enumerate() {
            let v = mem.as_ref().ok_or_else(|| {
                StartError::Config(format!(
                    "members[{i}].verbs is missing (device, exchange_addr)"
                ))
            })?;
            let addr = parse_addr(&v.exchange_addr)
                .map_err(|e| StartError::Config(format!("members[{i}].verbs.exchange_addr {e}")))?;
            // The manifest's rule, kept here for callers that build the
            // options themselves: the exchange hands out rkeys.
            if exchange.secret.is_none() && !addr.ip().is_loopback() {
                return Err(StartError::Config(format!(
                    "members[{i}].verbs.exchange_addr `{}` is reachable from other hosts but cluster.exchange_secret is not set",
                    v.exchange_addr
                )));
            }
            addrs.push(v.exchange_addr.clone());
        }
        let me = members[id.index()].clone().expect("checked above");
        let ctx = Context::open(&me.device)?;
        let port = ctx.port(me.port)?;
        let gid = ctx.gid(me.port, me.gid_index)?;
        if port.ethernet && gid == [0u8; 16] {
            return Err(VerbsError::EmptyGid {
                device: me.device.clone(),
                port: me.port,
                index: me.gid_index,
            }
            .into());
        }
        tracing::info!(
            device = %me.device,
            port = me.port,
            lid = port.lid,
            roce = port.ethernet,
            gid_index = me.gid_index,
            mtu = port.active_mtu,
            "RDMA port"
        );
        if me.qp_retry_count > QP_RETRY_COUNT_MAX {
            tracing::warn!(
                qp_retry_count = me.qp_retry_count,
                used = QP_RETRY_COUNT_MAX,
                "qp_retry_count 7 means \"retry forever\" on Soft-RoCE (rxe): a request to a peer that stopped answering would never complete; using 6"
            );
        }
        let pd = Pd::new(&ctx)?;
        let out_cq = Cq::new(&ctx, CQ_ENTRIES as i32)?;
        let in_cq = Cq::new(&ctx, 64)?;
        let mut local: Vec<Option<LocalRegion>> = (0..REGIONS_MAX).map(|_| None).collect();
        for spec in layout.regions() {
            let r = spec.id;
            let (base, len) = segment.region_base(r);
            if len < spec.bytes {
                return Err(StartError::Config(format!(
                    "the segment's {} region has {len} bytes, the layout needs {}",
                    r.name(),
                    spec.bytes
                )));
            }
            madvise_hugepages(base, len);
            // The log is registered for remote access per grant (its own
            // registration per peer, deregistered on revoke).
            let access = match spec.remote {
                // A subgroup's region: the memory region admits remote
                // access; only the subgroup's members are ever given its
                // key (multicast does not run on verbs yet).
                RemoteAccess::Members | RemoteAccess::Only(_) => AccessFlags::REMOTE_ALL,
                RemoteAccess::Local | RemoteAccess::Granted => AccessFlags::LOCAL,
            };
            // SAFETY: the region lies inside the segment mapping, which the
            // fabric keeps alive (`_segment` below) as long as the MR; the
            // memory is only ever accessed through atomics by the host.
            let mr = unsafe { Mr::register(&pd, base, len.max(1), access, r.name())? };
            local[r.index()] = Some(LocalRegion {
                base: base as u64,
                len,
                mr,
            });
        }
        let wire_region = |r: RegionId| -> Result<WireRegion, StartError> {
            let l = local[r.index()].as_ref().ok_or_else(|| {
                StartError::Config(format!("the layout has no {} region", r.name()))
            })?;
            Ok(WireRegion {
                addr: l.base,
                len: l.len,
                rkey: l.mr.rkey(),
                granted: true,
                epoch: 0,
            })
        };
        let control = wire_region(RegionId::Control)?;
        let heartbeat = wire_region(RegionId::Heartbeat)?;
        // Registered only when recovery by state transfer is on.
        let snapshot = wire_region(RegionId::Snapshot).unwrap_or_default();
        // Registered only when views are on.
        let consensus_region = layout.consensus.map(|c| c.shared_region);
        let consensus = consensus_region
            .and_then(|r| wire_region(r).ok())
            .unwrap_or_default();
        let log_region = wire_region(RegionId::Log)?;
        // The multicast's, RDMC's and the subgroups' regions: exchanged by
        // id, each only with the members that may access it.
        let fixed = [
            RegionId::Control,
            RegionId::Log,
            RegionId::Heartbeat,
            RegionId::Snapshot,
        ];
        let others: Vec<(RegionId, WireRegion, RemoteAccess)> = layout
            .regions()
            .filter(|spec| {
                !fixed.contains(&spec.id)
                    && Some(spec.id) != consensus_region
                    && matches!(spec.remote, RemoteAccess::Members | RemoteAccess::Only(_))
            })
            .map(|spec| Ok((spec.id, wire_region(spec.id)?, spec.remote)))
            .collect::<Result<_, StartError>>()?;
        let rc = RcParams {
            port: me.port,
            gid_index: me.gid_index,
            ethernet: port.ethernet,
            mtu: port.active_mtu,
            timeout: me.qp_timeout,
            retry_cnt: me.qp_retry_count.min(QP_RETRY_COUNT_MAX),
            rnr_retry: QP_RNR_RETRY,
            max_rd_atomic: ctx.max_qp_init_rd_atom().min(16),
            max_dest_rd_atomic: ctx.max_qp_rd_atom().min(16),
        };
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id());
        let shared = Arc::new(Shared {
            me: id,
            members: n as u8,
            layout_hash: layout.hash,
            incarnation,
            pd,
            in_cq,
            rc,
            local_qp: LocalQpInfo {
                lid: port.lid,
                gid,
                mtu: port.active_mtu.clamp(1, 5) as u8,
            },
            control,
            heartbeat,
            snapshot,
            consensus,
            consensus_region,
            others,
            log_base: log_region.addr,
            log_len: log_region.len,
            inbound: (0..n).map(|_| Mutex::new(Inbound::default())).collect(),
            remote_log: (0..n).map(|_| Mutex::new(RemoteLog::default())).collect(),
            stop: AtomicBool::new(false),
            secret: exchange.secret.clone(),
            addrs: addrs.clone(),
            served: Mutex::new(Vec::new()),
            handshakes: AtomicUsize::new(0),
            next_conn: AtomicU64::new(0),
            current: (0..n).map(|_| Mutex::new(None)).collect(),
            suspected: (0..n).map(|_| AtomicBool::new(false)).collect(),
            suspicions: AtomicU64::new(0),
            exits_confirmed: AtomicU64::new(0),
            auth_failures: AtomicU64::new(0),
            handshake_timeouts: AtomicU64::new(0),
            answers: AtomicBool::new(false),
            _segment: segment,
            liveness: liveness.clone(),
        });
        let listener = TcpListener::bind(
            parse_addr(&me.exchange_addr).map_err(StartError::Config)?,
        )
        .map_err(|source| StartError::Listen {
            addr: me.exchange_addr.clone(),
            source,
        })?;
        let listener = {
            let s = shared.clone();
            std::thread::Builder::new()
                .name("verbatim-xchg-listen".into())
                .spawn(move || listen(s, listener))
                .map_err(|source| StartError::Listen {
                    addr: me.exchange_addr.clone(),
                    source,
                })?
        };
        let mut diallers = Vec::new();
        let mut peers = Vec::with_capacity(n);
        for p in 0..n {
            let dialer = if p == id.index() {
                None
            } else {
                let d = Arc::new(Dialer {
                    queue: Mutex::new(DialQueue::default()),
                    wake: std::sync::Condvar::new(),
                });
                let (s, d2) = (shared.clone(), d.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("verbatim-xdial-{p}"))
                    .spawn(move || dial_loop(s, d2, p));
                match spawned {
                    Ok(t) => diallers.push(t),
                    Err(source) => {
                        shared.stop.store(true, Ordering::Release);
                        return Err(StartError::Listen {
                            addr: me.exchange_addr.clone(),
                            source,
                        });
                    }
                }
                Some(d)
            };
            peers.push(PeerOut {
                channels: [None, None],
                pending: [None, None],
                control: None,
                heartbeat: None,
                snapshot: None,
                consensus: None,
                others: [None; REGIONS_MAX],
                problem: None,
                granted_epoch: 0,
                unreachable: false,
                dialer,
            });
        }
        let mut fabric = VerbsFabric {
            peers,
            local,
            out_cq,
            listener: Some(listener),
            diallers,
            shared,
            ctx,
            slots: vec![None; CQ_ENTRIES],
            free_slots: (0..CQ_ENTRIES as u32).rev().collect(),
            ready: VecDeque::new(),
            liveness,
            wc_buf: [Wc {
                wr_id: 0,
                qp_num: 0,
                status: 0,
                vendor_err: 0,
            }; 32],
        };
        // Without it the member's own requests are refused: the view
        // engine then stops asking its own coordinator memory (safe; that
        // acceptor just does not help a majority), so a device that cannot
        // connect a QP to itself is not a reason not to start.
        if let Err(e) = fabric.connect_loopback() {
            tracing::warn!(
                error = %e,
                "no loopback connection: this member's own coordinator memory will not count"
            );
        }
        Ok(fabric)
    }

    /// A fresh QP we post on (completions on the outbound queue), with the
    /// first PSN of its send queue.
    fn new_requester_qp(&self) -> Result<(Qp, u32), VerbsError> {
        let qp = Qp::new(
            &self.shared.pd,
            &self.out_cq,
            &self.out_cq,
            SEND_QUEUE_DEPTH,
            INLINE_BYTES_MAX as u32,
        )?;
        let psn = fresh_psn(qp.qpn());
        Ok((qp, psn))
    }

    /// Connects (or connects again) our own control channel: one RC QP
    /// connected to itself, through which we post requests to our own
    /// memory. A coordinator CASes its own slot words this way because a
    /// CPU atomic is not atomic with the NIC's atomics on the same word
    /// (IB spec, atomicity guarantees: `IBV_ATOMIC_HCA` covers operations
    /// through the HCA only); a WRITE or READ of our own memory through
    /// it is ordered like any other request of the channel.
    fn connect_loopback(&mut self) -> Result<(), VerbsError> {
        let me = self.shared.me.index();
        if !self.drain_channel(me, Channel::Control) {
            return Err(VerbsError::Busy(
                "requests still in flight on the loopback connection",
            ));
        }
        self.peers[me].channels[Channel::Control.index()] = None;
        let (qp, psn) = self.new_requester_qp()?;
        let rc = self.shared.rc;
        // Requester and responder are the same QP: it accepts what we
        // send ourselves, within the regions registered for members.
        qp.to_init(rc.port, AccessFlags::QP_REMOTE_ALL)?;
        qp.to_rtr(
            &rc,
            &QpEndpoint {
                qpn: qp.qpn(),
                psn,
                lid: self.shared.local_qp.lid,
                gid: self.shared.local_qp.gid,
            },
        )?;
        qp.to_rts(&rc, psn)?;
        let own = &mut self.peers[me];
        own.control = Some(self.shared.control);
        own.heartbeat = Some(self.shared.heartbeat);
        own.snapshot = Some(self.shared.snapshot);
        own.consensus = Some(self.shared.consensus);
        own.channels[Channel::Control.index()] = Some(OutChannel {
            qp,
            inflight: 0,
            broken: false,
            refused: false,
            deferred: VecDeque::new(),
        });
        tracing::debug!("loopback connection up");
        Ok(())
    }

    /// The device name.
    pub fn device(&self) -> &str {
        self.ctx.name()
    }

    /// True while `peer`'s exchange connection to us is closed and it has
    /// not connected again: a suspicion, which the core's failure
    /// detector (heartbeats, QP errors) confirms or not. A peer whose
    /// process is confirmed gone is reported through
    /// [`HostFabric::liveness`] instead.
    pub fn suspected(&self, peer: MemberId) -> bool {
        self.shared
            .suspected
            .get(peer.index())
            .is_some_and(|s| s.load(Ordering::Acquire))
    }

    /// The exchange's counters.
    pub fn exchange_counters(&self) -> ExchangeCounters {
        let s = &self.shared;
        ExchangeCounters {
            suspicions: s.suspicions.load(Ordering::Relaxed),
            exits_confirmed: s.exits_confirmed.load(Ordering::Relaxed),
            auth_failures: s.auth_failures.load(Ordering::Relaxed),
            handshake_timeouts: s.handshake_timeouts.load(Ordering::Relaxed),
        }
    }

    /// Collects what the diallers answered: connected channels are
    /// installed, failures remembered (and their old channel broken), a
    /// restarted peer's channels broken. Cheap when nothing is new.
    fn take_answers(&mut self) {
        if !self.shared.answers.swap(false, Ordering::AcqRel) {
            return;
        }
        for p in 0..self.peers.len() {
            let answers: Vec<DialAnswer> = match &self.peers[p].dialer {
                Some(d) => d.lock().answers.drain(..).collect(),
                None => continue,
            };
            for a in answers {
                match a {
                    DialAnswer::Connected {
                        channel,
                        result,
                        incarnation,
                    } => self.finish_connect(p, channel, result, incarnation),
                    DialAnswer::Granted { epoch } => {
                        let g = &mut self.peers[p].granted_epoch;
                        *g = (*g).max(epoch);
                    }
                    DialAnswer::Unreachable => self.peers[p].unreachable = true,
                    DialAnswer::Restarted => {
                        // Its QPs are new, ours point at the old ones:
                        // requests on them fail (Flushed) and the core
                        // reconnects.
                        tracing::info!(peer = p, "peer restarted (new incarnation)");
                        for ch in self.peers[p].channels.iter_mut().flatten() {
                            ch.broken = true;
                        }
                    }
                }
            }
        }
    }

    /// Creates our outbound QP for `(p, channel)` and hands the connect to
    /// the peer's dialler; [`VerbsFabric::finish_connect`] completes it
    /// once the peer answered. Never waits for the network.
    fn start_connect(&mut self, p: usize, channel: Channel) -> Result<(), PeerProblem> {
        let device = |e: VerbsError| PeerProblem {
            retry: false,
            message: e.to_string(),
        };
        if self.peers[p].pending[channel.index()].is_some() {
            return Ok(());
        }
        let Some(dialer) = self.peers[p].dialer.clone() else {
            return Err(PeerProblem {
                retry: false,
                message: "no dialler for this member".into(),
            });
        };
        let (qp, psn) = self.new_requester_qp().map_err(device)?;
        // Outbound QPs accept no incoming operation at all.
        qp.to_init(self.shared.rc.port, AccessFlags::QP_NONE)
            .map_err(device)?;
        dialer.request(DialRequest::Connect {
            channel,
            qp: self.shared.wire_qp(&qp, psn),
        });
        self.peers[p].pending[channel.index()] = Some(PendingQp { qp, psn });
        Ok(())
    }

    /// The peer answered a connect: our pending QP goes to RTS and replaces
    /// the channel (its old QP drained first), or the problem is kept.
    fn finish_connect(
        &mut self,
        p: usize,
        channel: Channel,
        answer: Result<Msg, PeerProblem>,
        incarnation: u64,
    ) {
        let Some(PendingQp { qp, psn }) = self.peers[p].pending[channel.index()].take() else {
            return;
        };
        let problem = match answer {
            Ok(Msg::Connected {
                qp: remote,
                control,
                log,
                heartbeat,
                snapshot,
                consensus,
                others,
            }) => {
                let rc = self.shared.rc_towards(&remote);
                let ready = qp
                    .to_rtr(
                        &rc,
                        &QpEndpoint {
                            qpn: remote.qpn,
                            psn: remote.psn,
                            lid: remote.lid,
                            gid: remote.gid,
                        },
                    )
                    .and_then(|()| qp.to_rts(&rc, psn));
                match ready {
                    Ok(()) => {
                        if !self.drain_channel(p, channel) {
                            // Still in flight after the bound: keep the old
                            // QP (its requests must complete); retried.
                            self.peers[p].problem = Some(PeerProblem {
                                retry: true,
                                message: "requests still in flight on the old channel".into(),
                            });
                            return;
                        }
                        self.peers[p].control = Some(control);
                        self.peers[p].heartbeat = Some(heartbeat);
                        self.peers[p].snapshot = Some(snapshot);
                        self.peers[p].consensus = Some(consensus);
                        let mut regions = [None; REGIONS_MAX];
                        for (id, r) in others {
                            if let Some(slot) = regions.get_mut(usize::from(id)) {
                                *slot = Some(r);
                            }
                        }
                        self.peers[p].others = regions;
                        self.shared
                            .note_remote_log(MemberId(p as u8), incarnation, log);
                        self.peers[p].channels[channel.index()] = Some(OutChannel {
                            qp,
                            inflight: 0,
                            broken: false,
                            refused: false,
                            deferred: VecDeque::new(),
                        });
                        self.peers[p].problem = None;
                        self.peers[p].unreachable = false;
                        tracing::debug!(peer = p, ?channel, "channel connected");
                        return;
                    }
                    Err(e) => PeerProblem {
                        retry: false,
                        message: e.to_string(),
                    },
                }
            }
            Ok(Msg::Refuse { code }) => PeerProblem {
                retry: true,
                message: format!("member {p} could not connect its side: {}", code.explain()),
            },
            Ok(other) => PeerProblem {
                retry: false,
                message: format!(
                    "member {p} answered connect with a {} message",
                    other.kind()
                ),
            },
            Err(problem) => problem,
        };
        tracing::debug!(peer = p, ?channel, message = %problem.message, "connect failed");
        // Keep the old (broken) channel: requests complete Flushed until a
        // later connect succeeds.
        if let Some(ch) = self.peers[p].channels[channel.index()].as_mut() {
            ch.broken = true;
        }
        self.peers[p].unreachable |= problem.retry;
        self.peers[p].problem = Some(problem);
    }

    /// Makes sure no request of ours is in flight on `(p, channel)` before
    /// its QP is replaced: the core reconnects only drained channels; if
    /// requests are in flight anyway they are flushed (ERROR) and reaped,
    /// so none is lost. False if they did not complete within the bound.
    fn drain_channel(&mut self, p: usize, channel: Channel) -> bool {
        let Some(ch) = self.peers[p].channels[channel.index()].as_ref() else {
            return true;
        };
        if ch.inflight == 0 {
            return true;
        }
        if let Err(e) = ch.qp.to_error() {
            tracing::warn!(peer = p, error = %e, "reconnect: cannot flush the channel");
        }
        let began = Instant::now();
        while self.peers[p].channels[channel.index()]
            .as_ref()
            .is_some_and(|c| c.inflight > 0)
        {
            if began.elapsed() > DRAIN_WAIT {
                tracing::error!(peer = p, "reconnect: requests still in flight");
                return false;
            }
            self.reap();
        }
        true
    }

    /// Queues a completion the fabric decided itself, behind the requests
    /// still in flight on its channel; breaks the channel if it is an error.
    fn synthesize(&mut self, wr: &WorkRequest, status: WcStatus) {
        let c = Completion {
            wr_id: wr.wr_id,
            peer: wr.peer,
            status,
        };
        let ch = self
            .peers
            .get_mut(wr.peer.index())
            .and_then(|p| p.channels[wr.op.channel().index()].as_mut());
        match ch {
            Some(ch) => {
                if !status.is_ok() {
                    ch.broken = true;
                }
                if ch.inflight > 0 {
                    ch.deferred.push_back(c);
                } else {
                    self.ready.push_back(c);
                }
            }
            None => self.ready.push_back(c),
        }
    }

    /// Translates a core request into a device request; `Err` is the
    /// status to complete it with.
    fn translate(&self, p: usize, op: &Op) -> Result<(SendOp, u64, u32), WcStatus> {
        let remote = op.remote();
        let len = op.remote_len();
        let region = match remote.region {
            RegionId::Control => self.peers[p].control.ok_or(WcStatus::Unreachable)?,
            RegionId::Heartbeat => self.peers[p].heartbeat.ok_or(WcStatus::Unreachable)?,
            // A recovering member READs a donor's snapshot. A peer without
            // one (recovery off) refuses, like a hardware NAK would.
            RegionId::Snapshot => match self.peers[p].snapshot {
                None => return Err(WcStatus::Unreachable),
                Some(r) if r.len == 0 => return Err(WcStatus::AccessDenied),
                Some(r) => r,
            },
            // Our own log is registered for local access only.
            RegionId::Log if p == self.shared.me.index() => return Err(WcStatus::AccessDenied),
            RegionId::Log => lock(&self.shared.remote_log[p]).region,
            r if Some(r) == self.shared.consensus_region => match self.peers[p].consensus {
                None => return Err(WcStatus::Unreachable),
                // A peer without views (another layout is refused at the
                // hello, so only a bug gets here): refused like a NAK.
                Some(c) if c.len == 0 => return Err(WcStatus::AccessDenied),
                Some(c) => c,
            },
            // The other engines' regions: those the peer told us of (it
            // lists only the ones we may access); any other is refused,
            // like a NAK.
            r => match self.peers[p].others.get(r.index()).copied().flatten() {
                Some(w) if w.len > 0 => w,
                _ => return Err(WcStatus::AccessDenied),
            },
        };
        let end = remote
            .offset
            .checked_add(len)
            .ok_or(WcStatus::InvalidRequest)?;
        if region.len != 0 && end > region.len {
            return Err(WcStatus::InvalidRequest);
        }
        let remote_addr = region.addr + remote.offset;
        let local = |at: verbatim_core::fabric::Addr, n: u64| -> Result<(u64, u32), WcStatus> {
            let r = self
                .local
                .get(at.region.index())
                .and_then(Option::as_ref)
                .ok_or(WcStatus::InvalidRequest)?;
            let e = at.offset.checked_add(n).ok_or(WcStatus::InvalidRequest)?;
            if e > r.len {
                return Err(WcStatus::InvalidRequest);
            }
            Ok((r.base + at.offset, r.mr.lkey()))
        };
        let atomic_ok = |l: verbatim_core::fabric::Addr| {
            remote.offset.is_multiple_of(8) && l.offset.is_multiple_of(8)
        };
        let send = match *op {
            Op::Write { local: l, len, .. } => {
                let (a, k) = local(l, u64::from(len))?;
                SendOp::Write {
                    local_addr: a,
                    len,
                    lkey: k,
                }
            }
            Op::WriteInline { len, data, .. } => {
                if usize::from(len) > INLINE_BYTES_MAX {
                    return Err(WcStatus::InvalidRequest);
                }
                SendOp::WriteInline {
                    data,
                    len: u32::from(len),
                }
            }
            Op::Read { local: l, len, .. } => {
                let (a, k) = local(l, u64::from(len))?;
                SendOp::Read {
                    local_addr: a,
                    len,
                    lkey: k,
                }
            }
            Op::CompareSwap {
                local: l,
                expect,
                swap,
                ..
            } => {
                if !atomic_ok(l) {
                    return Err(WcStatus::InvalidRequest);
                }
                let (a, k) = local(l, 8)?;
                SendOp::CompareSwap {
                    local_addr: a,
                    lkey: k,
                    expect,
                    swap,
                }
            }
            Op::FetchAdd { local: l, add, .. } => {
                if !atomic_ok(l) {
                    return Err(WcStatus::InvalidRequest);
                }
                let (a, k) = local(l, 8)?;
                SendOp::FetchAdd {
                    local_addr: a,
                    lkey: k,
                    add,
                }
            }
        };
        Ok((send, remote_addr, region.rkey))
    }

    /// Reaps device completions into `ready` (bounded: one batch).
    fn reap(&mut self) {
        let mut buf = self.wc_buf;
        let n = match self.out_cq.poll(&mut buf) {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(error = %e, "polling the completion queue");
                return;
            }
        };
        for wc in &buf[..n] {
            let idx = wc.wr_id as usize;
            let Some(slot) = self.slots.get_mut(idx).and_then(Option::take) else {
                tracing::error!(wr_id = wc.wr_id, "completion for no posted request");
                continue;
            };
            self.free_slots.push(idx as u32);
            let status = map_status(wc.status);
            if status == WcStatus::Unreachable {
                self.peers[slot.peer.index()].unreachable = true;
            }
            if !status.is_ok() {
                tracing::debug!(
                    peer = slot.peer.0,
                    channel = ?slot.channel,
                    qp = wc.qp_num,
                    status = device::wc_status_name(wc.status),
                    vendor_err = wc.vendor_err,
                    "error completion"
                );
            }
            self.ready.push_back(Completion {
                wr_id: slot.wr_id,
                peer: slot.peer,
                status,
            });
            if let Some(ch) = self.peers[slot.peer.index()].channels[slot.channel.index()].as_mut()
            {
                ch.inflight = ch.inflight.saturating_sub(1);
                if !status.is_ok() {
                    ch.broken = true;
                }
                if status == WcStatus::AccessDenied {
                    ch.refused = true;
                }
                if ch.inflight == 0 {
                    self.ready.extend(ch.deferred.drain(..));
                }
            }
        }
        self.wc_buf = buf;
    }

    fn channels_ready(&self, p: usize) -> bool {
        self.peers[p].channels.iter().all(Option::is_some)
    }
}

/// The GID index of `device`'s `port` that holds an IPv4-mapped RoCE v2
/// address (`::ffff:a.b.c.d`), read from sysfs: the usual choice for
/// `members.verbs.gid_index` on Soft-RoCE and RoCE NICs. `None` when there
/// is none (InfiniBand, or no IPv4 address on the netdev).
pub fn roce_v2_ipv4_gid_index(device: &str, port: u8) -> Option<u8> {
    let base = std::path::PathBuf::from(format!("/sys/class/infiniband/{device}/ports/{port}"));
    (0u8..=254).find(|i| {
        let gid = std::fs::read_to_string(base.join(format!("gids/{i}"))).unwrap_or_default();
        let kind =
            std::fs::read_to_string(base.join(format!("gid_attrs/types/{i}"))).unwrap_or_default();
        gid.trim().starts_with("0000:0000:0000:0000:0000:ffff:") && kind.trim() == "RoCE v2"
    })
}

/// `ibv_wc_status` → [`WcStatus`].
fn map_status(status: u32) -> WcStatus {
    use ibverbs_sys::ibv_wc_status as S;
    match status {
        S::IBV_WC_SUCCESS => WcStatus::Ok,
        // A revoked (deregistered) key, or a QP whose access flags were
        // cleared: the target refused (DARE §3.2.1). Bounds are checked
        // before posting, so a remote refusal is an access decision.
        S::IBV_WC_REM_ACCESS_ERR | S::IBV_WC_REM_INV_REQ_ERR => WcStatus::AccessDenied,
        S::IBV_WC_RETRY_EXC_ERR | S::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::Unreachable,
        S::IBV_WC_WR_FLUSH_ERR => WcStatus::Flushed,
        S::IBV_WC_LOC_LEN_ERR
        | S::IBV_WC_LOC_QP_OP_ERR
        | S::IBV_WC_LOC_PROT_ERR
        | S::IBV_WC_REM_OP_ERR
        | S::IBV_WC_MW_BIND_ERR => WcStatus::InvalidRequest,
        // Fatal device errors and anything unknown: treat the peer as
        // unreachable (a suspicion), never as success.
        _ => WcStatus::Unreachable,
    }
}

impl Drop for VerbsFabric {
    fn drop(&mut self) {
        // Stop the exchange threads and wait for them, so that every device
        // resource is released when the fabric is gone (nothing is said to
        // the peers: they learn from their requests, as after a crash).
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.listener.take() {
            let _ = t.join();
        }
        for p in &self.peers {
            if let Some(d) = &p.dialer {
                d.wake.notify_all();
            }
        }
        for t in self.diallers.drain(..) {
            let _ = t.join();
        }
        let served = std::mem::take(&mut *lock(&self.shared.served));
        for (stream, _) in &served {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        for (_, t) in served {
            let _ = t.join();
        }
    }
}

impl Fabric for VerbsFabric {
    fn post(&mut self, wr: &WorkRequest) {
        let p = wr.peer.index();
        let ch_idx = wr.op.channel().index();
        // Our own requests go through the loopback connection (control
        // channel only); without one they are refused, which the view
        // engine takes as "no loopback here".
        if p >= self.peers.len()
            || (wr.peer == self.shared.me
                && (ch_idx != Channel::Control.index() || self.peers[p].channels[ch_idx].is_none()))
        {
            self.synthesize(wr, WcStatus::InvalidRequest);
            return;
        }
        let broken = match &self.peers[p].channels[ch_idx] {
            None => {
                self.ready.push_back(Completion {
                    wr_id: wr.wr_id,
                    peer: wr.peer,
                    status: WcStatus::Unreachable,
                });
                return;
            }
            Some(ch) => ch.broken,
        };
        if broken {
            self.synthesize(wr, WcStatus::Flushed);
            return;
        }
        let (send, remote_addr, rkey) = match self.translate(p, &wr.op) {
            Ok(t) => t,
            Err(status) => {
                self.synthesize(wr, status);
                return;
            }
        };
        let Some(slot) = self.free_slots.pop() else {
            tracing::error!(
                cap = CQ_ENTRIES,
                "more requests in flight than the completion queue holds"
            );
            self.synthesize(wr, WcStatus::InvalidRequest);
            return;
        };
        let ch = self.peers[p].channels[ch_idx]
            .as_mut()
            .expect("checked above");
        // SAFETY: local addresses were bounds-checked against our
        // registered regions, which live as long as the fabric; the core
        // reuses a local buffer only after reaping this request's
        // completion (its driving contract), and every request posted here
        // is reaped through `reap` before the QP is destroyed (reconnect
        // drains first).
        let posted = unsafe { ch.qp.post_send(u64::from(slot), &send, remote_addr, rkey) };
        match posted {
            Ok(()) => {
                ch.inflight += 1;
                self.slots[slot as usize] = Some(Slot {
                    wr_id: wr.wr_id,
                    peer: wr.peer,
                    channel: wr.op.channel(),
                });
            }
            Err(e) => {
                self.free_slots.push(slot);
                tracing::warn!(peer = wr.peer.0, error = %e, "post failed");
                self.synthesize(wr, WcStatus::Unreachable);
            }
        }
    }

    fn poll_completion(&mut self) -> Option<Completion> {
        self.take_answers();
        if self.ready.is_empty() {
            self.reap();
        }
        self.ready.pop_front()
    }

    fn set_access(
        &mut self,
        peer: MemberId,
        region: RegionId,
        access: Access,
    ) -> Result<(), FabricError> {
        let p = peer.index();
        if p >= self.peers.len() || peer == self.shared.me {
            return Err(FabricError::UnknownPeer);
        }
        match (region, access) {
            (RegionId::Log, Access::Revoked) => {
                let mut inbound = lock(&self.shared.inbound[p]);
                if let Some(qp) = inbound.qp[Channel::Log.index()].as_ref() {
                    if let Err(e) = qp.set_access(AccessFlags::QP_NONE) {
                        // A QP in ERROR (after a refused request) accepts
                        // nothing: already as revoked as it can be.
                        tracing::debug!(peer = peer.0, error = %e, "revoke: access flags unchanged");
                    }
                }
                inbound.epoch += 1;
                // The deregistration is the fence (the peer's own
                // registration of our log): until it succeeds the revoke is
                // not done, and the registration is kept to retry it.
                if let Some(mr) = inbound.log_mr.take() {
                    if let Err((mr, e)) = mr.deregister() {
                        tracing::error!(peer = peer.0, error = %e, "revoke unconfirmed: the peer's log key is still valid");
                        inbound.log_mr = Some(mr);
                        return Err(FabricError::RevokeUnconfirmed);
                    }
                }
                Ok(())
            }
            (RegionId::Log, Access::Granted) => {
                let log = {
                    let mut inbound = lock(&self.shared.inbound[p]);
                    if inbound.log_mr.is_none() {
                        let (base, len) = (self.shared.log_base, self.shared.log_len);
                        // SAFETY: the log region of the segment, which stays
                        // mapped as long as the fabric (see `start`).
                        let mr = unsafe {
                            Mr::register(
                                &self.shared.pd,
                                base as *mut u8,
                                len,
                                AccessFlags::REMOTE_ALL,
                                "log (granted to a peer)",
                            )
                        }
                        .map_err(|e| {
                            tracing::error!(peer = peer.0, error = %e, "grant failed");
                            FabricError::Device
                        })?;
                        inbound.log_mr = Some(mr);
                        inbound.epoch += 1;
                        if let Some(qp) = inbound.qp[Channel::Log.index()].as_ref() {
                            if let Err(e) = qp.set_access(AccessFlags::QP_REMOTE_ALL) {
                                tracing::debug!(peer = peer.0, error = %e, "grant: the log QP is rebuilt at the peer's reconnect");
                            }
                        }
                    }
                    self.shared.log_for(&inbound)
                };
                // Tell the peer its key before the core goes on (it learns
                // of the grant only through our later writes), but never
                // wait long: if the peer is unreachable, its next connect
                // carries the key.
                if let Some(d) = self.peers[p].dialer.clone() {
                    d.request(DialRequest::Grant { log });
                    let began = Instant::now();
                    loop {
                        self.take_answers();
                        if self.peers[p].granted_epoch >= log.epoch {
                            break;
                        }
                        if self.peers[p].unreachable || began.elapsed() > GRANT_WAIT {
                            tracing::debug!(
                                peer = peer.0,
                                "grant: not acknowledged yet; the key goes with the next connect"
                            );
                            break;
                        }
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                Ok(())
            }
            (RegionId::Control, Access::Granted) => Ok(()),
            (RegionId::Control, Access::Revoked) => {
                tracing::error!(
                    peer = peer.0,
                    "the control region stays writable by every member on the verbs fabric"
                );
                Err(FabricError::Device)
            }
            // Private regions are never accessible remotely.
            (_, Access::Revoked) => Ok(()),
            (_, Access::Granted) => Err(FabricError::Device),
        }
    }

    fn reconnect(&mut self, peer: MemberId, channel: Channel) -> Result<(), FabricError> {
        let p = peer.index();
        if p >= self.peers.len() {
            return Err(FabricError::UnknownPeer);
        }
        if peer == self.shared.me {
            // Only the loopback connection; rebuilt here at once (nothing
            // crosses the network).
            return match &self.peers[p].channels[channel.index()] {
                None => Err(FabricError::UnknownPeer),
                Some(c) if !c.broken => Ok(()),
                Some(_) => self.connect_loopback().map_err(|e| {
                    tracing::warn!(error = %e, "loopback connection not rebuilt");
                    FabricError::Device
                }),
            };
        }
        // Never waits for the network: the connect runs in the peer's
        // dialler, and a later reconnect (after the core's backoff) finds
        // it done. Until then the channel stays broken (requests complete
        // Flushed).
        self.take_answers();
        if self.peers[p].pending[channel.index()].is_some() {
            return Err(FabricError::PeerGone);
        }
        let refused = match &self.peers[p].channels[channel.index()] {
            // A connect completed since the channel broke: it is new.
            Some(c) if !c.broken => return Ok(()),
            Some(c) => c.refused,
            None => false,
        };
        match self.start_connect(p, channel) {
            // A channel the peer broke itself by refusing a request (a
            // revoke) is connected again at once: the peer answers. Only
            // then is the connect waited for (bounded); otherwise the poll
            // loop goes on and a later reconnect finds it done.
            Ok(()) if refused && !self.peers[p].unreachable => {
                let began = Instant::now();
                while self.peers[p].pending[channel.index()].is_some()
                    && began.elapsed() < RECONNECT_WAIT
                {
                    std::thread::sleep(Duration::from_micros(50));
                    self.take_answers();
                }
                match &self.peers[p].channels[channel.index()] {
                    Some(c) if !c.broken => Ok(()),
                    _ => Err(FabricError::PeerGone),
                }
            }
            Ok(()) => Err(FabricError::PeerGone),
            Err(problem) => {
                tracing::debug!(peer = peer.0, ?channel, message = %problem.message, "reconnect failed");
                Err(if problem.retry {
                    FabricError::PeerGone
                } else {
                    FabricError::Device
                })
            }
        }
    }
}

impl HostFabric for VerbsFabric {
    fn connect_peers(&mut self) -> Vec<(MemberId, PeerProblem)> {
        self.take_answers();
        let mut missing = Vec::new();
        for p in 0..self.peers.len() {
            let m = MemberId(p as u8);
            if m == self.shared.me {
                continue;
            }
            if !self.channels_ready(p) {
                // A configuration problem is final; anything else is
                // retried (the diallers dial in the background).
                if let Some(problem) = self.peers[p].problem.as_ref().filter(|x| !x.retry) {
                    missing.push((m, problem.clone()));
                    continue;
                }
                let mut started = Ok(());
                for ch in Channel::ALL {
                    if self.peers[p].channels[ch.index()].is_none() {
                        started = self.start_connect(p, ch);
                        if started.is_err() {
                            break;
                        }
                    }
                }
                let problem = match started {
                    Err(problem) => problem,
                    Ok(()) => self.peers[p]
                        .problem
                        .clone()
                        .unwrap_or_else(|| PeerProblem {
                            retry: true,
                            message: format!("connecting to member {p}"),
                        }),
                };
                missing.push((m, problem));
                continue;
            }
            // Readiness barrier: the peer must also have connected its
            // control channel to us (its rows reach us), so that both
            // directions work when we start. Not its log channel: only a
            // leader uses one, and a running follower reconnects its
            // broken log channel to a restarted member only when it leads.
            // Waiting for it held a member restarted into a running group
            // at the barrier for the whole connect timeout (30 s), and the
            // group without it (issue 17, Soft-RoCE hosts suite).
            let inbound = lock(&self.shared.inbound[p]);
            if !inbound.hello || inbound.qp[Channel::Control.index()].is_none() {
                missing.push((
                    m,
                    PeerProblem {
                        retry: true,
                        message: format!(
                            "waiting for member {p} to connect its control channel to us"
                        ),
                    },
                ));
            }
        }
        missing
    }

    fn liveness(&self) -> &PeerLiveness {
        &self.liveness
    }

    fn name(&self) -> &'static str {
        "verbs"
    }
}
