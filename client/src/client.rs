//! The Rust client library: leader discovery, retries and request ids.
//!
//! Two transports:
//! * **shared memory** (the fast path, same host): the client claims a slot
//!   in the leader's `Clients` region, writes its request there and polls
//!   for the reply (HERD-style); a replica that is not the leader answers
//!   with a hint and the client moves its slot.
//! * **TCP**: the Redis protocol, with `RID` naming each request so that a
//!   retry is applied once; any replica forwards to the leader.
//!
//! Every operation gets one request id for all its attempts, so a write
//! retried after a timeout or a failover is applied exactly once (the
//! replicas keep a session table). A failed attempt moves to the hinted
//! leader, or to the next replica; a replica whose process has exited is
//! skipped at once.

use crate::manifest::Manifest;
use crate::process::ProcessWatch;
use crate::slots::SlotSegment;
use crate::slots::{SlotClient, SlotKind, SlotStatus};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use verbatim_core::fabric::MemberId;
use verbatim_core::kv::{KvError, KvLimits, KvOp, KvReply};

/// How long a replica's RESP gateway may take for one operation,
/// retries and forwarding included (a TCP client waits a little longer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// A shared-memory attempt unanswered this long starts looking at the
/// other replicas' leader hints (a stopped leader answers nothing, and its
/// process has not exited, so only a newer leader elsewhere gives it away
/// before the attempt timeout).
const LEADER_HINT_AFTER: Duration = Duration::from_micros(200);
/// And looks again this often.
const LEADER_HINT_PERIOD: Duration = Duration::from_micros(100);

/// How a client reaches the replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Shared-memory slots (same host).
    Shm,
    /// RESP over TCP.
    Tcp,
}

/// How a client waits for a shared-memory reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Spin (lowest latency; owns a core).
    Spin,
    /// Spin briefly, then yield the CPU between looks.
    Yield,
}

/// Client settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Transport.
    pub transport: Transport,
    /// How to wait.
    pub wait: Wait,
    /// One attempt on one replica gives up after this.
    pub attempt_timeout: Duration,
    /// An operation gives up after this (all attempts).
    pub total_timeout: Duration,
    /// Client id (default: random).
    pub client_id: Option<u64>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            transport: Transport::Shm,
            wait: Wait::Yield,
            attempt_timeout: Duration::from_millis(50),
            total_timeout: Duration::from_secs(5),
            client_id: None,
        }
    }
}

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No replica answered as leader in time.
    #[error("no leader answered within {0:?}; the operation may or may not have been applied")]
    Unavailable(Duration),
    /// The store refused the operation (applied as a no-op everywhere).
    #[error("{0}")]
    Kv(String),
    /// A replica rejected the request.
    #[error("rejected: {0}")]
    Rejected(String),
    /// The operation is too large for the configured limits.
    #[error("key or value too large (key ≤ {key} bytes, value ≤ {value} bytes)")]
    TooLarge {
        /// Key limit.
        key: u32,
        /// Value limit.
        value: u32,
    },
    /// A shared-memory segment could not be used.
    #[error("shared memory: {0}")]
    Shm(#[from] crate::error::ShmError),
}

/// What an operation returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A write's reply.
    Write(KvReply),
    /// A read's value.
    Read(Option<Vec<u8>>),
}

enum Attempt {
    Ok(Vec<u8>),
    NotLeader(Option<MemberId>),
    Busy,
    Error(String),
    Failed,
}

/// Counters of a client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Operations completed.
    pub operations: u64,
    /// Attempts that timed out or failed on a replica.
    pub retries: u64,
    /// Redirects followed.
    pub redirects: u64,
    /// Attempts answered "busy": no leader known there yet, or TRYAGAIN
    /// (client id owned by another connection, request timed out).
    pub busy: u64,
}

/// A client of one cluster.
pub struct Client {
    manifest: Manifest,
    limits: KvLimits,
    opts: ClientOptions,
    client_id: u64,
    next_request: u64,
    target: usize,
    segments: Vec<Option<(Arc<SlotSegment>, Option<ProcessWatch>)>>,
    slot: Option<(usize, SlotClient)>,
    tcp: Vec<Option<(TcpStream, Vec<u8>)>>,
    stats: ClientStats,
    buf: Vec<u8>,
    encode_buf: Vec<u8>,
    /// The last busy answer over TCP: which member, and its text.
    last_busy: String,
}

/// A client id from the OS's random source: two clients (of any process,
/// on any host) must not share a session, and a guessable id would let one
/// client make another's retries look stale.
pub fn random_id() -> u64 {
    let id = getrandom::u64().unwrap_or_else(|e| {
        // Only without /dev/urandom or getrandom(2); a unique-enough id
        // still beats failing the client.
        tracing::warn!(error = %e, "no OS randomness for a client id; deriving one from the clock");
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        verbatim_core::checksum::mix64(t ^ u64::from(std::process::id()).rotate_left(32))
    });
    // Never 0: client id 0 means "no session" to the replicas.
    id | 1
}

impl Client {
    /// A client of the cluster described by `manifest`.
    pub fn new(manifest: &Manifest, opts: ClientOptions) -> Client {
        let n = manifest.members.len();
        Client {
            limits: manifest.kv_limits(),
            manifest: manifest.clone(),
            client_id: opts.client_id.unwrap_or_else(random_id),
            opts,
            next_request: 1,
            target: 0,
            segments: (0..n).map(|_| None).collect(),
            slot: None,
            tcp: (0..n).map(|_| None).collect(),
            stats: ClientStats::default(),
            last_busy: String::new(),
            buf: Vec::new(),
            encode_buf: Vec::new(),
        }
    }

    /// This client's id.
    pub fn id(&self) -> u64 {
        self.client_id
    }

    /// The replica believed to lead.
    pub fn leader(&self) -> u8 {
        self.target as u8
    }

    /// Counters.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// The replica the next operation goes to first (the leader, once one
    /// answered).
    pub fn target(&self) -> usize {
        self.target
    }

    /// Sends the next operation to `member` first (a client placed next to
    /// a replica, whose gateway forwards to the leader); a member the
    /// manifest does not list is ignored.
    pub fn prefer(&mut self, member: u8) {
        if usize::from(member) < self.manifest.members.len() {
            self.target = usize::from(member);
        }
    }

    /// The last busy answer a replica gave over TCP (which member, and
    /// its TRYAGAIN text); empty if none (for diagnostics).
    pub fn last_busy(&self) -> &str {
        &self.last_busy
    }

    /// `GET`.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, ClientError> {
        match self.execute(&KvOp::Get { key })? {
            Outcome::Read(v) => Ok(v),
            Outcome::Write(_) => Err(ClientError::Rejected("a read answered as a write".into())),
        }
    }

    /// `SET`.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), ClientError> {
        self.write(&KvOp::Set { key, value }).map(|_| ())
    }

    /// `DEL`: true if the key existed.
    pub fn del(&mut self, key: &[u8]) -> Result<bool, ClientError> {
        Ok(self.write(&KvOp::Del { key })? == 1)
    }

    /// `INCRBY`: the new value.
    pub fn incr(&mut self, key: &[u8], delta: i64) -> Result<i64, ClientError> {
        self.write(&KvOp::Incr { key, delta })
    }

    /// Compare-and-set: true if swapped.
    pub fn cas(
        &mut self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> Result<bool, ClientError> {
        Ok(self.write(&KvOp::Cas { key, expected, new })? == 1)
    }

    fn write(&mut self, op: &KvOp<'_>) -> Result<i64, ClientError> {
        match self.execute(op)? {
            Outcome::Write(KvReply::Ok) => Ok(0),
            Outcome::Write(KvReply::Int(v)) => Ok(v),
            Outcome::Write(KvReply::Err(e)) => Err(ClientError::Kv(kv_error_text(e).into())),
            Outcome::Read(_) => Err(ClientError::Rejected("a write answered as a read".into())),
        }
    }

    /// Runs one operation to completion: same request id on every attempt.
    pub fn execute(&mut self, op: &KvOp<'_>) -> Result<Outcome, ClientError> {
        // The encoding buffer is kept between operations: zeroing the
        // largest encoding (values up to value_bytes_max, twice for CAS)
        // on every call costs more than a small operation's round trip.
        let mut payload = std::mem::take(&mut self.encode_buf);
        payload.resize(self.limits.encoded_bytes_max() as usize, 0);
        let r = self.execute_encoded(op, &mut payload);
        self.encode_buf = payload;
        r
    }

    fn execute_encoded(&mut self, op: &KvOp<'_>, buf: &mut [u8]) -> Result<Outcome, ClientError> {
        let too_large = || ClientError::TooLarge {
            key: self.limits.key_bytes_max,
            value: self.limits.value_bytes_max,
        };
        let n = op.encode(buf).map_err(|_| too_large())?;
        let payload = &buf[..n];
        if KvOp::decode(payload, &self.limits).is_err() {
            return Err(too_large());
        }
        let request_id = self.next_request;
        self.next_request += 1;
        // Clock reads are a visible share of a microsecond operation: one
        // per attempt, reused for the deadline and the attempt timeout.
        let started = Instant::now();
        let deadline = started + self.opts.total_timeout;
        let mut busy = 0u32;
        let n = self.manifest.members.len();
        let mut began_attempt = started;
        loop {
            let attempt = match self.opts.transport {
                Transport::Shm => {
                    self.attempt_shm(op.is_read(), request_id, payload, began_attempt)?
                }
                Transport::Tcp => self.attempt_tcp(op, request_id, began_attempt),
            };
            if tracing::enabled!(tracing::Level::DEBUG) {
                let attempt_us = began_attempt.elapsed().as_micros();
                if attempt_us > 10_000 {
                    tracing::debug!(
                        target_member = self.target,
                        attempt_us,
                        attempt = attempt_name(&attempt),
                        "slow attempt"
                    );
                }
            }
            if !matches!(attempt, Attempt::Ok(_)) {
                tracing::debug!(
                    target_member = self.target,
                    attempt = attempt_name(&attempt),
                    "attempt did not complete"
                );
            }
            match attempt {
                Attempt::Ok(bytes) => {
                    self.stats.operations += 1;
                    let outcome = decode_outcome(op.is_read(), &bytes);
                    // The shared-memory reply buffer (taken for this
                    // answer) comes back for the next request.
                    self.buf = bytes;
                    return outcome;
                }
                Attempt::Error(msg) => return Err(ClientError::Rejected(msg)),
                Attempt::NotLeader(Some(l)) if l.index() < n && l.index() != self.target => {
                    self.stats.redirects += 1;
                    self.target = l.index();
                    continue;
                }
                Attempt::NotLeader(_) | Attempt::Busy => {
                    // No leader known here yet: give the election a moment,
                    // a little longer each time (20 µs up to 160 µs: an
                    // election over shared memory takes a few hundred µs,
                    // and a longer pause would add to the failover gap).
                    std::thread::sleep(Duration::from_micros(20 << busy.min(3)));
                    busy += 1;
                    self.stats.busy += 1;
                    self.target = (self.target + 1) % n;
                }
                Attempt::Failed => {
                    self.stats.retries += 1;
                    self.target = (self.target + 1) % n;
                }
            }
            began_attempt = Instant::now();
            if began_attempt >= deadline {
                return Err(ClientError::Unavailable(self.opts.total_timeout));
            }
        }
    }

    /// The replica's segment, if its process is alive.
    fn segment(&mut self, m: usize) -> Option<Arc<SlotSegment>> {
        if self.segments[m].is_none() {
            let seg = SlotSegment::open(&self.manifest.slots_path(m as u8)).ok()?;
            let watch =
                ProcessWatch::replica(&self.manifest.segment_path(m as u8), seg.owner().pid);
            watch.as_ref()?;
            self.segments[m] = Some((Arc::new(seg), watch));
        }
        if self.replica_exited(m) {
            self.segments[m] = None;
            return None;
        }
        self.segments[m].as_ref().map(|(s, _)| s.clone())
    }

    fn replica_exited(&self, m: usize) -> bool {
        exited(&self.segments[m], true)
    }

    fn attempt_shm(
        &mut self,
        read: bool,
        request_id: u64,
        payload: &[u8],
        began: Instant,
    ) -> Result<Attempt, ClientError> {
        let m = self.target;
        if self.slot.as_ref().is_none_or(|(at, _)| *at != m) {
            self.slot = None;
            let Some(seg) = self.segment(m) else {
                return Ok(Attempt::Failed);
            };
            match SlotClient::claim(seg) {
                Some(s) => self.slot = Some((m, s)),
                None => return Ok(Attempt::Busy),
            }
        }
        let (_, slot) = self.slot.as_mut().expect("claimed above");
        let kind = if read {
            SlotKind::Read
        } else {
            SlotKind::Write
        };
        let seq = slot.send(self.client_id, request_id, kind, payload);
        let mut spins = 0u32;
        let mut next_hint_check = Duration::ZERO;
        loop {
            if let Some(status) = slot.poll(seq, &mut self.buf) {
                return Ok(match status {
                    SlotStatus::Ok => Attempt::Ok(std::mem::take(&mut self.buf)),
                    SlotStatus::NotLeader(h) => Attempt::NotLeader(h),
                    SlotStatus::Busy => Attempt::Busy,
                    SlotStatus::Error => {
                        Attempt::Error(String::from_utf8_lossy(&self.buf).into_owned())
                    }
                });
            }
            spins += 1;
            // Yielding can take a scheduler tick per look on a busy host,
            // so time and the death notice are checked on every yield, the
            // pidfd every 64 looks.
            let check = match self.opts.wait {
                Wait::Spin => spins.is_multiple_of(1024),
                Wait::Yield => spins >= 64,
            };
            if check {
                let waited = began.elapsed();
                if waited > self.opts.attempt_timeout {
                    tracing::debug!(member = m, ?seq, "attempt timed out");
                    return Ok(Attempt::Failed);
                }
                if waited > LEADER_HINT_AFTER && waited >= next_hint_check {
                    // Segments not mapped yet are opened on the first look
                    // of an attempt only (files, a syscall each).
                    let open_missing = next_hint_check.is_zero();
                    next_hint_check = waited + LEADER_HINT_PERIOD;
                    if let Some(q) =
                        newer_leader_than(&mut self.segments, &self.manifest, m, open_missing)
                    {
                        // Our replica stopped answering while another
                        // leads a newer term (it is stopped, or stuck:
                        // its process has not exited, or the death notice
                        // would say so). The same request id goes there:
                        // exactly-once whether or not it was applied here.
                        tracing::debug!(member = m, leader = q, "a newer leader elsewhere");
                        return Ok(Attempt::NotLeader(Some(MemberId(q as u8))));
                    }
                }
                if exited(&self.segments[m], spins.is_multiple_of(64)) {
                    tracing::debug!(
                        member = m,
                        waited_us = began.elapsed().as_micros() as u64,
                        "replica process gone"
                    );
                    // The replica died (its pidfd would say so too): move on.
                    self.slot = None;
                    self.segments[m] = None;
                    return Ok(Attempt::Failed);
                }
            }
            match self.opts.wait {
                Wait::Spin => std::hint::spin_loop(),
                Wait::Yield if spins < 64 => std::hint::spin_loop(),
                Wait::Yield => std::thread::yield_now(),
            }
        }
    }

    /// One attempt over RESP, within the attempt timeout like a
    /// shared-memory one: a replica that stopped (SIGSTOP, a hung host)
    /// keeps its connection open and answers nothing, and the client moves
    /// on to the next replica instead of waiting out the gateway's own
    /// request timeout (it waited 6 s). The connection is dropped then, so a
    /// late reply is never taken for the next request's; a retry elsewhere
    /// carries the same request id, so the operation applies once.
    fn attempt_tcp(&mut self, op: &KvOp<'_>, request_id: u64, began: Instant) -> Attempt {
        let m = self.target;
        let deadline = began + self.opts.attempt_timeout;
        // What is left of the attempt, never zero (a zero timeout means
        // "block forever" to the socket calls).
        let left = || {
            deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
        };
        if self.tcp[m].is_none() {
            let Some(addr) = self.manifest.members[m]
                .resp_addr
                .as_deref()
                .and_then(|a| a.parse::<SocketAddr>().ok())
            else {
                return Attempt::Failed;
            };
            let Some(connect_within) = left() else {
                return Attempt::Failed;
            };
            let Ok(s) = TcpStream::connect_timeout(&addr, connect_within) else {
                return Attempt::Failed;
            };
            let _ = s.set_nodelay(true);
            // The connect may have used the whole attempt; a timeout of
            // None would let the AUTH exchange block for ever (a stopped
            // replica's kernel still completes the handshake).
            let Some(io_within) = left() else {
                return Attempt::Failed;
            };
            let _ = s.set_read_timeout(Some(io_within));
            let _ = s.set_write_timeout(Some(io_within));
            let mut buf = Vec::new();
            if let Some(password) = self.manifest.cluster.resp_password.clone() {
                let mut s = s;
                match tcp_auth(&mut s, &mut buf, password.as_bytes(), &self.limits) {
                    Ok(()) => self.tcp[m] = Some((s, buf)),
                    Err(AuthFailure::Refused(why)) => return Attempt::Error(why),
                    Err(AuthFailure::Io) => return Attempt::Failed,
                }
            } else {
                self.tcp[m] = Some((s, buf));
            }
        }
        let (stream, buf) = self.tcp[m].as_mut().expect("connected above");
        let mut req = Vec::new();
        encode_request(self.client_id, request_id, op, &mut req);
        let Some(write_within) = left() else {
            self.tcp[m] = None;
            return Attempt::Failed;
        };
        let _ = stream.set_write_timeout(Some(write_within));
        if stream.write_all(&req).is_err() {
            self.tcp[m] = None;
            return Attempt::Failed;
        }
        let limits = crate::resp::RespLimits::for_kv(&self.limits);
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Ok(Some((_, first))) = crate::resp::parse_frame(buf, &limits) {
                if let Ok(Some((frame, second))) = crate::resp::parse_frame(&buf[first..], &limits)
                {
                    let r = tcp_reply(op.is_read(), &frame);
                    if let (Attempt::Busy, crate::resp::Frame::Error(e)) = (&r, &frame) {
                        self.last_busy = format!("member {m}: {}", String::from_utf8_lossy(e));
                    }
                    buf.drain(..first + second);
                    return r;
                }
            }
            let Some(read_within) = left() else {
                tracing::debug!(member = m, "attempt timed out (RESP)");
                self.tcp[m] = None;
                return Attempt::Failed;
            };
            let _ = stream.set_read_timeout(Some(read_within));
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => {
                    self.tcp[m] = None;
                    return Attempt::Failed;
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

enum AuthFailure {
    /// The replica answered with an error (wrong password).
    Refused(String),
    /// The connection failed.
    Io,
}

/// Sends `AUTH <password>` and waits for its `+OK`.
fn tcp_auth(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    password: &[u8],
    limits: &KvLimits,
) -> Result<(), AuthFailure> {
    let mut req = Vec::new();
    crate::resp::encode_array_header(2, &mut req);
    crate::resp::encode_bulk(b"AUTH", &mut req);
    crate::resp::encode_bulk(password, &mut req);
    stream.write_all(&req).map_err(|_| AuthFailure::Io)?;
    let resp_limits = crate::resp::RespLimits::for_kv(limits);
    let mut chunk = [0u8; 1024];
    loop {
        if let Ok(Some((frame, used))) = crate::resp::parse_frame(buf, &resp_limits) {
            let result = match frame {
                crate::resp::Frame::Simple(_) => Ok(()),
                crate::resp::Frame::Error(e) => Err(AuthFailure::Refused(
                    String::from_utf8_lossy(e).into_owned(),
                )),
                _ => Err(AuthFailure::Refused("unexpected reply to AUTH".into())),
            };
            buf.drain(..used);
            return result;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(AuthFailure::Io),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A live member other than `m` whose slot segment says it leads a term
/// newer than the one `m` last published, or the same term when `m` says
/// it does not lead itself (a stopped follower); the newest such. Opens
/// segments not mapped yet when `open_missing`. Two loads per member (the
/// hint, the death notice); no syscall otherwise.
fn newer_leader_than(
    segments: &mut [Option<(Arc<SlotSegment>, Option<ProcessWatch>)>],
    manifest: &Manifest,
    m: usize,
    open_missing: bool,
) -> Option<usize> {
    let theirs = |s: &Option<(Arc<SlotSegment>, Option<ProcessWatch>)>| {
        s.as_ref().and_then(|(seg, _)| seg.leader_hint())
    };
    let mine = theirs(&segments[m]);
    let known = mine.map_or(0, |(term, _)| term);
    let m_leads = mine.is_some_and(|(_, l)| l.index() == m);
    let mut best: Option<(u64, usize)> = None;
    for q in (0..segments.len()).filter(|&q| q != m) {
        if segments[q].is_none() {
            if !open_missing {
                continue;
            }
            let Ok(seg) = SlotSegment::open(&manifest.slots_path(q as u8)) else {
                continue;
            };
            let watch = ProcessWatch::replica(&manifest.segment_path(q as u8), seg.owner().pid);
            if watch.is_none() {
                continue;
            }
            segments[q] = Some((Arc::new(seg), watch));
        }
        // A dead member's hint is its last word, never news.
        if exited(&segments[q], false) {
            continue;
        }
        if let Some((term, leader)) = theirs(&segments[q]) {
            let newer = term > known || (term == known && !m_leads);
            if leader.index() == q && newer && best.is_none_or(|(t, _)| term > t) {
                best = Some((term, q));
            }
        }
    }
    best.map(|(_, q)| q)
}

/// Whether the replica behind `segment` is gone: its death notice (one
/// load) always, its pidfd (a syscall) only when `poll_pidfd`.
pub(crate) fn exited(
    segment: &Option<(Arc<SlotSegment>, Option<ProcessWatch>)>,
    poll_pidfd: bool,
) -> bool {
    match segment {
        Some((_, Some(w))) => w.notice_gone() || (poll_pidfd && w.exited()),
        Some((_, None)) => true,
        None => false,
    }
}

fn attempt_name(a: &Attempt) -> &'static str {
    match a {
        Attempt::Ok(_) => "ok",
        Attempt::NotLeader(_) => "not-leader",
        Attempt::Busy => "busy",
        Attempt::Error(_) => "error",
        Attempt::Failed => "failed",
    }
}

/// `RID` plus the Redis command of an operation.
fn encode_request(client_id: u64, request_id: u64, op: &KvOp<'_>, out: &mut Vec<u8>) {
    use crate::resp::{encode_array_header, encode_bulk};
    encode_array_header(3, out);
    encode_bulk(b"RID", out);
    encode_bulk(client_id.to_string().as_bytes(), out);
    encode_bulk(request_id.to_string().as_bytes(), out);
    let args: Vec<Vec<u8>> = match *op {
        KvOp::Get { key } => vec![b"GET".to_vec(), key.to_vec()],
        KvOp::Set { key, value } => vec![b"SET".to_vec(), key.to_vec(), value.to_vec()],
        KvOp::Del { key } => vec![b"DEL".to_vec(), key.to_vec()],
        KvOp::Incr { key, delta } => vec![
            b"INCRBY".to_vec(),
            key.to_vec(),
            delta.to_string().into_bytes(),
        ],
        KvOp::Cas {
            key,
            expected: Some(e),
            new,
        } => {
            vec![
                b"CAS".to_vec(),
                key.to_vec(),
                new.to_vec(),
                b"IFEQ".to_vec(),
                e.to_vec(),
            ]
        }
        KvOp::Cas {
            key,
            expected: None,
            new,
        } => vec![b"CAS".to_vec(), key.to_vec(), new.to_vec(), b"NX".to_vec()],
    };
    encode_array_header(args.len(), out);
    for a in &args {
        encode_bulk(a, out);
    }
}

fn tcp_reply(read: bool, frame: &crate::resp::Frame<'_>) -> Attempt {
    use crate::resp::Frame;
    match *frame {
        Frame::Bulk(v) if read => Attempt::Ok([&[1u8][..], v].concat()),
        Frame::NullBulk if read => Attempt::Ok(vec![0]),
        Frame::Simple(_) if !read => Attempt::Ok(KvReply::Ok.to_bytes().to_vec()),
        Frame::Integer(v) if !read => Attempt::Ok(KvReply::Int(v).to_bytes().to_vec()),
        Frame::Error(e) => {
            let text = String::from_utf8_lossy(e).into_owned();
            if text.starts_with("TRYAGAIN") {
                Attempt::Busy
            } else if let Some(err) = kv_error_from_text(&text) {
                Attempt::Ok(KvReply::Err(err).to_bytes().to_vec())
            } else {
                Attempt::Error(text)
            }
        }
        _ => Attempt::Error("unexpected reply".into()),
    }
}

fn kv_error_text(e: KvError) -> &'static str {
    crate::resp::kv_error_message(e)
}

fn kv_error_from_text(text: &str) -> Option<KvError> {
    [KvError::NotInteger, KvError::Overflow, KvError::StoreFull]
        .into_iter()
        .find(|e| text == kv_error_text(*e).trim_start_matches('-'))
}

pub(crate) fn decode_outcome(read: bool, bytes: &[u8]) -> Result<Outcome, ClientError> {
    if read {
        return Ok(Outcome::Read(match bytes.split_first() {
            Some((1, v)) => Some(v.to_vec()),
            _ => None,
        }));
    }
    KvReply::from_bytes(bytes)
        .map(Outcome::Write)
        .ok_or_else(|| ClientError::Rejected("undecodable reply".into()))
}

#[cfg(test)]
mod id_tests {
    use super::random_id;

    #[test]
    fn client_ids_are_random_odd_and_distinct() {
        let ids: std::collections::HashSet<u64> = (0..1000).map(|_| random_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| id & 1 == 1), "never 0");
        // Random bits everywhere, not a counter or a clock: the high
        // halves differ too.
        let highs: std::collections::HashSet<u64> = ids.iter().map(|id| id >> 32).collect();
        assert!(highs.len() > 990);
    }
}

#[cfg(test)]
mod hint_tests {
    use super::*;
    use crate::slots::SlotGeometry;

    type Mapped = Option<(Arc<SlotSegment>, Option<ProcessWatch>)>;

    /// Three replicas' slot segments, "running" as this test process.
    fn segments(dir: &std::path::Path) -> Vec<Mapped> {
        (0..3)
            .map(|i| {
                let seg = SlotSegment::create(
                    &dir.join(format!("r{i}.clients")),
                    SlotGeometry::new(4, 1024).unwrap(),
                )
                .unwrap();
                let watch = ProcessWatch::open(std::process::id() as i32);
                assert!(watch.is_some());
                Some((Arc::new(seg), watch))
            })
            .collect()
    }

    fn hint(s: &[Mapped], i: usize, term: u64, leader: u8) {
        s[i].as_ref()
            .unwrap()
            .0
            .set_leader_hint(term, Some(MemberId(leader)));
    }

    /// A client waiting on a replica goes to a live member that leads a
    /// newer term, or the same term when the one it waits on follows;
    /// never to a dead member, never to a stale claim.
    #[test]
    fn a_waiting_client_goes_to_the_newer_leader_only() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = Manifest::local("hint-test", 3, 0);
        let mut s = segments(dir.path());
        let newer = |s: &mut Vec<Mapped>, m| newer_leader_than(s, &manifest, m, false);
        // Member 0 leads term 5; the others follow it.
        for i in 0..3 {
            hint(&s, i, 5, 0);
        }
        assert_eq!(newer(&mut s, 0), None, "nobody leads anything newer");
        // Waiting on a follower (stopped): its leader takes the request.
        assert_eq!(newer(&mut s, 1), Some(0));
        // Member 2 won term 6 while 0 was stopped.
        hint(&s, 2, 6, 2);
        hint(&s, 1, 6, 2);
        assert_eq!(newer(&mut s, 0), Some(2));
        // A claim older than what the waited-on member knows is stale.
        hint(&s, 0, 7, 0);
        assert_eq!(newer(&mut s, 0), None);
        // A dead member's last word is not news (no watch: gone).
        hint(&s, 2, 9, 2);
        s[2].as_mut().unwrap().1 = None;
        assert_eq!(newer(&mut s, 0), None);
    }
}
