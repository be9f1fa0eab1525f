//! The Redis-protocol (RESP2) front end over TCP, so that `redis-cli` and
//! `redis-benchmark` work unchanged.
//!
//! One thread per connection (bounded): it parses frames ([`crate::resp`]),
//! answers local commands itself, and hands key-value operations to the
//! poll loop through a [`ServiceHandle`]. On a follower, operations are
//! *forwarded* to the leader's RESP port (redis-cli does not follow
//! redirects) and the leader's reply is relayed.
//!
//! Exactly-once: every operation carries a (client id, request id). A plain
//! Redis client gets a fresh client id per connection and sequential
//! request ids; a verbatim client sends `RID <client_id> <request_id>`
//! before a command to name it, so that a retry (on another connection or
//! replica) is recognised. Forwarding preserves the ids and counts hops
//! (`RID <client_id> <request_id> <hops>`), so a request is forwarded at
//! most once.
//!
//! Security (Redis's model): with `cluster.resp_password` set, a connection
//! must `AUTH <password>` (or `AUTH default <password>`) before anything
//! else (`-NOAUTH` otherwise); the manifest refuses a non-loopback address
//! without a password (protected mode); a connection idle for
//! `cluster.resp_idle_timeout_s` or with more than
//! `cluster.resp_output_bytes_max` unsent reply bytes is closed.

use crate::gateway::pubsub::Subscription;
use crate::gateway::queue::{PublishRequest, ServiceHandle, ServiceReply, ServiceRequest};
use crate::replica::status_server::StatusSlot;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use verbatim_client::manifest::Manifest;
use verbatim_client::resp::{self, Command, Frame, Local, RespLimits};
use verbatim_client::resp_stream;
use verbatim_core::fabric::MemberId;
use verbatim_core::kv::{KvLimits, KvOp, KvReply};

/// Connections served at once; more are refused with an error.
pub const RESP_CONNECTIONS_MAX: usize = 1024;
pub use verbatim_client::client::REQUEST_TIMEOUT;
/// How long a reply may wait for a client that does not read.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// A forwarded request is never forwarded again: a member that is not the
/// leader any more answers TRYAGAIN instead of starting a loop.
pub const FORWARD_HOPS_MAX: u8 = 1;
/// How a forwarded request's reply starts when the member it was forwarded
/// to is not the leader any more; the forwarding member retries.
const NOT_LEADER_FORWARDED: &[u8] = b"-TRYAGAIN not the leader";

/// A running RESP listener.
pub struct RespServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: SocketAddr,
}

impl RespServer {
    /// Listens on `addr` for member `me` of `manifest`.
    pub fn start(
        addr: &str,
        handle: ServiceHandle,
        manifest: Manifest,
        me: u8,
        status: Arc<StatusSlot>,
        shutdown: Arc<AtomicBool>,
    ) -> std::io::Result<RespServer> {
        let listener = crate::gateway::bind_listener(addr)?;
        let local = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let active = Arc::new(AtomicUsize::new(0));
        let next_client = Arc::new(AtomicU64::new(client_id_base()));
        let ctx = Arc::new(Ctx {
            handle,
            subgroups: manifest.subgroups().unwrap_or_default(),
            manifest,
            me,
            status,
            owners: ClientIdOwners::default(),
        });
        let thread = std::thread::Builder::new()
            .name("verbatim-resp".into())
            .spawn(move || {
                crate::topology::lower_thread_priority();
                while !stop2.load(Ordering::Acquire) && !shutdown.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((mut stream, _)) => {
                            if active.load(Ordering::Acquire) >= RESP_CONNECTIONS_MAX {
                                let _ = stream.write_all(b"-ERR max number of clients reached\r\n");
                                continue;
                            }
                            active.fetch_add(1, Ordering::AcqRel);
                            let (ctx, stop, active) = (ctx.clone(), stop2.clone(), active.clone());
                            let client_id = next_client.fetch_add(1, Ordering::AcqRel);
                            let _ = std::thread::Builder::new()
                                .name("verbatim-resp-conn".into())
                                .spawn(move || {
                                    crate::topology::lower_thread_priority();
                                    let _ = stream.set_nodelay(true);
                                    if let Err(e) = enable_keepalive(&stream) {
                                        tracing::debug!(error = %e, "TCP keepalive not enabled");
                                    }
                                    Conn::new(&ctx, stream, client_id).serve(&stop);
                                    active.fetch_sub(1, Ordering::AcqRel);
                                });
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })?;
        Ok(RespServer {
            stop,
            thread: Some(thread),
            addr: local,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for RespServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Client ids of plain connections: random high bits (the OS's source),
/// then a counter, so that two replicas (or restarts) never hand out the
/// same id.
fn client_id_base() -> u64 {
    (verbatim_client::client::random_id() & !0xFFFF_FFFF) | 1 << 63
}

struct Ctx {
    handle: ServiceHandle,
    manifest: Manifest,
    /// The multicast subgroups (a channel each), from the manifest.
    subgroups: Vec<verbatim_client::manifest::Subgroup>,
    me: u8,
    status: Arc<StatusSlot>,
    owners: ClientIdOwners,
}

/// TCP keepalive of RESP connections: idle this long before the first
/// probe, then a probe every [`KEEPALIVE_INTERVAL`], closed after
/// [`KEEPALIVE_PROBES`] unanswered ones. A client whose FIN was lost (its
/// host cut off when it gave up on us, a crashed machine) otherwise leaves
/// a connection open for ever here, and with it the ownership of its
/// client id: every later connection of that client, and every request a
/// follower forwards for it, would be answered TRYAGAIN. The first probe
/// after a partition heals draws a reset and closes it at once. (Redis's
/// `tcp-keepalive` is 300 s; ours is short because a stale owner blocks
/// the client's writes.)
const KEEPALIVE_IDLE: Duration = Duration::from_secs(2);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_PROBES: u32 = 3;
/// How long data we sent may stay unacknowledged before the kernel closes
/// the connection (`TCP_USER_TIMEOUT`). Keepalive probes only an idle
/// connection: one whose reply was in flight when its peer was cut off is
/// retransmitting instead, for up to 15 minutes (`tcp_retries2`). That is
/// the usual case for a follower's forwarding connection (each of its
/// clients has one to the leader, with a reply in flight most of the time):
/// the leader kept every such client's id owned for the whole partition and
/// answered those clients TRYAGAIN, directly and through the other
/// follower, while a majority was healthy (seen in the Soft-RoCE hosts
/// suite: nothing committed for 90 s with one member cut off).
const UNACKED_TIMEOUT: Duration = Duration::from_secs(5);

/// Makes the kernel close a connection whose peer went silent: probes while
/// it is idle, [`UNACKED_TIMEOUT`] while our data waits for an ACK.
fn enable_keepalive(stream: &TcpStream) -> std::io::Result<()> {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    let sock = socket2::SockRef::from(stream);
    sock.set_tcp_keepalive(&keepalive)?;
    sock.set_tcp_user_timeout(Some(UNACKED_TIMEOUT))
}

/// Client ids a connection may name with `RID` at most.
const RID_IDS_PER_CONNECTION_MAX: usize = 64;

/// Which open connection owns which client id on this replica. A client id
/// is a session in the replicated session table: a second connection that
/// ran a request under the same id while the first one runs one could make
/// the first one's look stale (or answer it with its reply). An id is
/// owned by the connection that named it first (or was given it, for a
/// plain connection) until that connection closes, or until another one
/// claims it while the owner runs nothing under it: the client gave up on
/// the owner and retries elsewhere. That is what a client does when the
/// follower that forwarded its requests stops (SIGSTOP, a hung host): the
/// follower's connection here stays open, idle, for as long as it is
/// stopped, and refusing the client's retries (TRYAGAIN) made the client
/// fail although the group was healthy. The exactly-once guarantee is the
/// session table's, not the connection's.
#[derive(Default)]
struct ClientIdOwners {
    owners: std::sync::Mutex<std::collections::HashMap<u64, Owner>>,
}

#[derive(Clone, Copy, Debug)]
struct Owner {
    conn: u64,
    /// Since when the owner runs a request under the id (None: idle).
    busy_since: Option<Instant>,
}

/// An owner that runs a request for longer than this (it waits for a
/// reply that will not come, or its thread is starved) may be taken over
/// too: its request has timed out by then, also one forwarded to the
/// leader near the end of its own wait (each wait is `REQUEST_TIMEOUT`).
const OWNER_BUSY_MAX: Duration = Duration::from_secs(2 * REQUEST_TIMEOUT.as_secs() + 1);

impl ClientIdOwners {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, Owner>> {
        self.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives `client` to connection `conn` unless another connection owns
    /// it and runs a request under it. Taking it from an idle owner is
    /// logged.
    fn claim(&self, client: u64, conn: u64) -> bool {
        self.claim_at(client, conn, Instant::now())
    }

    /// [`ClientIdOwners::claim`] at `now`.
    fn claim_at(&self, client: u64, conn: u64, now: Instant) -> bool {
        let mut owners = self.lock();
        let owner = owners.entry(client).or_insert(Owner {
            conn,
            busy_since: None,
        });
        if owner.conn == conn {
            return true;
        }
        // A plain connection's own id (its serial) stays its own while it
        // is open: its requests run without marking it busy.
        if owner.conn == client
            || owner
                .busy_since
                .is_some_and(|since| now.saturating_duration_since(since) < OWNER_BUSY_MAX)
        {
            return false;
        }
        tracing::info!(
            client,
            from = owner.conn,
            to = conn,
            "client id taken over from a connection that runs nothing under it"
        );
        *owner = Owner {
            conn,
            busy_since: None,
        };
        true
    }

    /// `conn` starts (true) or ends (false) a request under `client`;
    /// false when it no longer owns it (another connection took it over).
    fn set_busy(&self, client: u64, conn: u64, busy: bool) -> bool {
        self.set_busy_at(client, conn, busy.then(Instant::now))
    }

    /// [`ClientIdOwners::set_busy`]: busy since `since` (None: idle).
    fn set_busy_at(&self, client: u64, conn: u64, since: Option<Instant>) -> bool {
        let mut owners = self.lock();
        match owners.get_mut(&client) {
            Some(o) if o.conn == conn => {
                o.busy_since = since;
                true
            }
            _ => false,
        }
    }

    /// The connection that owns `client`, if any.
    fn owner(&self, client: u64) -> Option<u64> {
        self.lock().get(&client).map(|o| o.conn)
    }

    /// Releases what `conn` owns.
    fn release(&self, ids: &[u64], conn: u64) {
        let mut owners = self.lock();
        for id in ids {
            if owners.get(id).is_some_and(|o| o.conn == conn) {
                owners.remove(id);
            }
        }
    }
}

struct Upstream {
    leader: MemberId,
    stream: TcpStream,
    buf: Vec<u8>,
    /// `AUTH` was sent on this connection.
    authenticated: bool,
}

struct Conn<'c> {
    ctx: &'c Ctx,
    stream: TcpStream,
    client_id: u64,
    next_request: u64,
    named: Option<(u64, u64)>,
    reply_tx: mpsc::Sender<(u64, ServiceReply)>,
    reply_rx: mpsc::Receiver<(u64, ServiceReply)>,
    /// Key-value operations submitted and not answered yet, in the order
    /// the client sent them (its pipeline), all writes or all reads.
    inflight: std::collections::VecDeque<Pipelined>,
    /// Tag of the next submission.
    next_tag: u64,
    /// Answers of pipelined operations that arrived before the ones ahead
    /// of them were written.
    early: std::collections::HashMap<u64, ServiceReply>,
    upstream: Option<Upstream>,
    resp_limits: RespLimits,
    kv_limits: KvLimits,
    /// Hops the named request (`RID`) has made.
    named_hops: u8,
    /// False until `AUTH` succeeds, when a password is set.
    authenticated: bool,
    /// Client ids this connection owns (its own, and those it named).
    owned: Vec<u64>,
    /// The last `RID` was refused: the command it named is refused too,
    /// never run under the connection's own id (that would apply a retried
    /// write a second time, under another session).
    rid_refused: bool,
    /// Subscribe mode: the queue of delivered messages, and the channels.
    subscription: Option<(Subscription, std::collections::BTreeSet<Vec<u8>>)>,
}

/// How long a `PUBLISH` waits for its message to be delivered here (in
/// the group's order) before it answers an error.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a subscribed connection looks for delivered messages while
/// its client sends nothing.
const SUBSCRIBER_POLL: Duration = Duration::from_millis(1);

/// A key-value operation of a client's pipeline, submitted to the poll
/// loop and waiting for its answer.
struct Pipelined {
    tag: u64,
    client_id: u64,
    request_id: u64,
    write: bool,
    payload: Vec<u8>,
    /// The command as the client sent it (forwarded to the leader if this
    /// replica cannot serve it).
    raw: Vec<u8>,
    deadline: Instant,
}

/// Operations of one pipeline in flight at most: the leader batches what
/// arrives together into one log append, and a client that sends more
/// waits for the first ones.
const PIPELINE_DEPTH_MAX: usize = 64;

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        self.ctx.owners.release(&self.owned, self.client_id);
        if self.subscription.is_some() {
            self.ctx.handle.subscribers().remove(self.client_id);
        }
    }
}

impl<'c> Conn<'c> {
    fn new(ctx: &'c Ctx, stream: TcpStream, client_id: u64) -> Conn<'c> {
        let (reply_tx, reply_rx) = mpsc::channel();
        let kv_limits = ctx.manifest.kv_limits();
        Conn {
            ctx,
            stream,
            client_id,
            next_request: 1,
            named: None,
            reply_tx,
            reply_rx,
            inflight: std::collections::VecDeque::new(),
            next_tag: 1,
            early: std::collections::HashMap::new(),
            upstream: None,
            resp_limits: RespLimits::for_kv(&kv_limits)
                .with_publications(ctx.manifest.multicast.publish_bytes_max()),
            kv_limits,
            named_hops: 0,
            authenticated: ctx.manifest.cluster.resp_password.is_none(),
            // The connection's own id (unique: the serial of this
            // connection) identifies it as an owner too.
            owned: if ctx.owners.claim(client_id, client_id) {
                vec![client_id]
            } else {
                Vec::new()
            },
            rid_refused: false,
            subscription: None,
        }
    }

    /// Takes ownership of `client` for this connection, if nobody else
    /// holds it; false when another open connection does, or this one
    /// named too many ids.
    fn own(&mut self, client: u64) -> bool {
        // Owned before, it may have been taken over since: claim again.
        let known = self.owned.contains(&client);
        if (!known && self.owned.len() >= RID_IDS_PER_CONNECTION_MAX)
            || !self.ctx.owners.claim(client, self.client_id)
        {
            return false;
        }
        if !known {
            self.owned.push(client);
        }
        true
    }

    fn serve(&mut self, stop: &AtomicBool) {
        let _ = self
            .stream
            .set_read_timeout(Some(Duration::from_millis(200)));
        let _ = self.stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let idle_timeout = match self.ctx.manifest.cluster.resp_idle_timeout_s {
            0 => None,
            s => Some(Duration::from_secs(s)),
        };
        let output_max =
            usize::try_from(self.ctx.manifest.cluster.resp_output_bytes_max).unwrap_or(usize::MAX);
        let mut last_activity = Instant::now();
        let mut inbuf: Vec<u8> = Vec::with_capacity(16 * 1024);
        let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
        let mut chunk = vec![0u8; 64 * 1024];
        while !stop.load(Ordering::Acquire) {
            let n = match self.stream.read(&mut chunk) {
                Ok(0) => return,
                Ok(n) => n,
                // The read timeout is EAGAIN (WouldBlock) on Linux;
                // ETIMEDOUT (TimedOut) is the keepalive giving up on a
                // client that vanished, which must close the connection
                // (and release its client ids), not wait on.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if self.subscription.is_some() {
                        // Pub/sub clients are not idle: they wait for
                        // messages (Redis exempts them from its timeout).
                        if !self.forward_messages(&mut out) || self.stream.write_all(&out).is_err()
                        {
                            return;
                        }
                        out.clear();
                        continue;
                    }
                    if idle_timeout.is_some_and(|t| last_activity.elapsed() >= t) {
                        tracing::debug!(client = self.client_id, "idle RESP connection closed");
                        return;
                    }
                    continue;
                }
                Err(_) => return,
            };
            last_activity = Instant::now();
            inbuf.extend_from_slice(&chunk[..n]);
            let mut at = 0;
            let mut close = false;
            loop {
                match resp::parse_frame(&inbuf[at..], &self.resp_limits) {
                    Ok(Some((frame, used))) => {
                        let raw = &inbuf[at..at + used];
                        if self.handle_frame(&frame, raw, &mut out) {
                            close = true;
                        }
                        at += used;
                        if out.len() > output_max {
                            // Redis's hard output-buffer limit: the client
                            // asks faster than it reads.
                            tracing::warn!(
                                client = self.client_id,
                                bytes = out.len(),
                                "RESP connection closed: output buffer limit"
                            );
                            return;
                        }
                        if close {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        e.encode(&mut out);
                        close = true;
                        break;
                    }
                }
            }
            // Answers of what this read pipelined, in order, before the
            // replies go out (Redis answers a pipeline in one write too).
            self.drain(&mut out);
            if self.subscription.is_some() && !self.forward_messages(&mut out) {
                close = true;
            }
            inbuf.drain(..at);
            if !out.is_empty() {
                if self.stream.write_all(&out).is_err() {
                    return;
                }
                out.clear();
            }
            if close {
                return;
            }
        }
    }

    /// Handles one request frame; true means close after replying.
    fn handle_frame(&mut self, frame: &Frame<'_>, raw: &[u8], out: &mut Vec<u8>) -> bool {
        // Pipelining: a key-value command of a plain (unnamed) request is
        // submitted without waiting for the ones before it; the answers
        // are written in the client's order by `drain`.
        if self.authenticated
            && self.named.is_none()
            && !self.rid_refused
            && self.subscription.is_none()
        {
            if let Ok(Command::Kv(op)) = resp::parse_command(frame, &self.kv_limits) {
                self.pipeline(&op, raw, out);
                return false;
            }
        }
        // Anything else answers in order after what is in flight.
        self.drain(out);
        if let Some(auth) = auth_command(frame) {
            self.auth(auth, out);
            return false;
        }
        if !self.authenticated {
            // QUIT is allowed before AUTH (Redis allows AUTH, HELLO, QUIT).
            if let Ok(Command::Quit) = resp::parse_command(frame, &self.kv_limits) {
                resp::encode_simple(b"OK", out);
                return true;
            }
            resp::encode_error(b"NOAUTH Authentication required.", out);
            return false;
        }
        if let Some(ids) = rid_command(frame) {
            match ids {
                Some((client, request, hops)) if self.own(client) => {
                    self.rid_refused = false;
                    self.named = Some((client, request));
                    self.named_hops = hops;
                    resp::encode_simple(b"OK", out);
                }
                Some((client, _, _)) => {
                    // The client retries: the owner may be a connection
                    // of its own that is closing.
                    if !self.rid_refused {
                        tracing::info!(
                            client,
                            conn = self.client_id,
                            owner = ?self.ctx.owners.owner(client),
                            "RID refused: the client id belongs to another open connection"
                        );
                    }
                    self.rid_refused = true;
                    self.named = None;
                    resp::encode_error(b"TRYAGAIN client id in use by another connection", out);
                }
                None => resp::encode_error(
                    b"ERR usage: RID <client_id> <request_id> [hops] (positive integers)",
                    out,
                ),
            }
            return false;
        }
        let cmd = match resp::parse_command(frame, &self.kv_limits) {
            Ok(c) => c,
            Err(e) => {
                e.encode(out);
                return e.closes_connection();
            }
        };
        if std::mem::take(&mut self.rid_refused) {
            resp::encode_error(b"TRYAGAIN client id in use by another connection", out);
            return false;
        }
        if self.subscription.is_some() {
            match cmd {
                Command::Subscribe(_) | Command::Unsubscribe(_) | Command::Quit => {}
                Command::Ping(message) => {
                    // Redis's answer in subscribe mode.
                    resp::encode_array_header(2, out);
                    resp::encode_bulk(b"pong", out);
                    resp::encode_bulk(message.unwrap_or(b""), out);
                    return false;
                }
                _ => {
                    resp::encode_error(
                        b"ERR Can't execute this command: only SUBSCRIBE / UNSUBSCRIBE / PING / QUIT are allowed in this context",
                        out,
                    );
                    return false;
                }
            }
        }
        match resp::reply_local(&cmd, out) {
            Local::Replied => false,
            Local::Close => true,
            Local::Host => {
                match cmd {
                    Command::Kv(op) => {
                        let mut payload = vec![0u8; self.kv_limits.encoded_bytes_max() as usize];
                        match op.encode(&mut payload) {
                            Ok(n) => {
                                payload.truncate(n);
                                if let Some(bytes) = self.execute(payload, !op.is_read(), raw, out)
                                {
                                    encode_result(&op, &bytes, out);
                                }
                            }
                            Err(_) => resp::encode_error(b"ERR request too large", out),
                        }
                    }
                    Command::Stream(cmd) => {
                        let now_ms = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_millis() as u64);
                        let mut payload = Vec::new();
                        match cmd.encode(now_ms, &mut payload) {
                            Ok(Some(())) => {
                                if let Some(bytes) = self.execute(payload, !cmd.is_read(), raw, out)
                                {
                                    resp_stream::reply(&cmd, Some(&bytes), out);
                                }
                            }
                            Ok(None) => resp_stream::reply(&cmd, None, out),
                            Err(_) => resp::encode_error(b"ERR request too large", out),
                        }
                    }
                    Command::Info(section) => self.info(section, out),
                    Command::Publish { channel, message } => self.publish(channel, message, out),
                    Command::Subscribe(channels) => self.subscribe(channels, out),
                    Command::Unsubscribe(channels) => self.unsubscribe(channels, out),
                    Command::Hello { .. } => {
                        let role = self
                            .ctx
                            .status
                            .get()
                            .map_or("unknown".to_string(), |s| redis_role(&s.role));
                        resp::reply_hello(self.client_id as i64 & i64::MAX, role.as_bytes(), out);
                    }
                    _ => resp::encode_error(b"ERR internal: unexpected command", out),
                }
                false
            }
        }
    }

    /// `PUBLISH`: multicast to the group; answers once this replica
    /// delivered the message (in the group's order) with the number of its
    /// subscribers it reached, as Redis answers with the receivers.
    fn publish(&mut self, channel: &[u8], message: &[u8], out: &mut Vec<u8>) {
        let mc = &self.ctx.manifest.multicast;
        if mc.window == 0 {
            resp::encode_error(
                b"ERR multicast is off in this group: PUBLISH needs [multicast] window > 0",
                out,
            );
            return;
        }
        let mut payload = Vec::new();
        let subgroup = match self.subgroup_here(channel) {
            Ok(g) => g,
            Err(why) => {
                resp::encode_error(why.as_bytes(), out);
                return;
            }
        };
        // Longer than a slot: a large message (RDMC), when they are on
        // (in the top-level group only).
        let limit = match subgroup {
            Some(_) => mc.payload_bytes_max as usize,
            None => usize::try_from(mc.publish_bytes_max()).unwrap_or(usize::MAX),
        };
        if let Err(e) = verbatim_client::pubsub::encode(channel, message, limit, &mut payload) {
            resp::encode_error(format!("ERR {e}").as_bytes(), out);
            return;
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        let submitted = self.ctx.handle.publish(PublishRequest {
            payload,
            subgroup,
            tag,
            reply: self.reply_tx.clone(),
            deadline: Instant::now() + PUBLISH_TIMEOUT,
        });
        if !submitted {
            resp::encode_error(b"ERR replica shutting down", out);
            return;
        }
        // The poll loop answers every publication by its deadline; the
        // margin covers a loop that is slow to get there.
        let give_up = Instant::now() + PUBLISH_TIMEOUT + Duration::from_secs(1);
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            match self.reply_rx.recv_timeout(left) {
                Ok((t, reply)) if t == tag => {
                    match reply {
                        ServiceReply::Ok(bytes) => {
                            let reached = bytes
                                .get(..8)
                                .and_then(|b| b.try_into().ok())
                                .map_or(0, u64::from_le_bytes);
                            resp::encode_integer(reached as i64, out);
                        }
                        ServiceReply::Error(why) => {
                            resp::encode_error(format!("ERR {why}").as_bytes(), out)
                        }
                        ServiceReply::NotLeader(_) | ServiceReply::Busy => {
                            resp::encode_error(b"TRYAGAIN multicast busy", out)
                        }
                    }
                    return;
                }
                // A late answer to an earlier request that timed out.
                Ok(_) => continue,
                Err(_) => {
                    resp::encode_error(b"ERR multicast: no answer from the poll loop", out);
                    return;
                }
            }
        }
    }

    /// The subgroup whose channel `channel` is (`None`: the top-level
    /// group's channel), or why this replica cannot serve it (it is not
    /// one of the subgroup's members).
    fn subgroup_here(&self, channel: &[u8]) -> Result<Option<usize>, String> {
        let Some(g) = verbatim_client::manifest::Subgroup::of_channel(&self.ctx.subgroups, channel)
        else {
            return Ok(None);
        };
        if g.has(MemberId(self.ctx.me)) {
            return Ok(Some(g.index));
        }
        let members: Vec<String> = g.member_ids().iter().map(|m| m.to_string()).collect();
        Err(format!(
            "ERR channel '{}' is a multicast subgroup of members {}; this replica (member {}) is not one of them: connect to one of its members",
            g.name,
            members.join(", "),
            self.ctx.me
        ))
    }

    /// `SUBSCRIBE`: enters subscribe mode (or adds channels).
    fn subscribe(&mut self, channels: resp::Channels<'_>, out: &mut Vec<u8>) {
        if self.ctx.manifest.multicast.window == 0 {
            resp::encode_error(
                b"ERR multicast is off in this group: SUBSCRIBE needs [multicast] window > 0",
                out,
            );
            return;
        }
        let subscribers = self.ctx.handle.subscribers().clone();
        if let Some(why) = channels.iter().find_map(|c| self.subgroup_here(c).err()) {
            // A subgroup's messages reach its members only: a subscriber
            // elsewhere would wait for nothing.
            resp::encode_error(why.as_bytes(), out);
            return;
        }
        let (_, set) = self.subscription.get_or_insert_with(|| {
            (
                subscribers.register(self.client_id),
                std::collections::BTreeSet::new(),
            )
        });
        for channel in channels.iter() {
            set.insert(channel.to_vec());
            verbatim_client::pubsub::encode_confirmation(
                b"subscribe",
                Some(channel),
                set.len(),
                out,
            );
        }
        subscribers.set_channels(self.client_id, set);
        let _ = self.stream.set_read_timeout(Some(SUBSCRIBER_POLL));
    }

    /// `UNSUBSCRIBE`: drops the channels named (all without a name);
    /// leaves subscribe mode once none is left.
    fn unsubscribe(&mut self, channels: resp::Channels<'_>, out: &mut Vec<u8>) {
        let subscribers = self.ctx.handle.subscribers().clone();
        let Some((_, set)) = self.subscription.as_mut() else {
            verbatim_client::pubsub::encode_confirmation(b"unsubscribe", None, 0, out);
            return;
        };
        let named: Vec<Vec<u8>> = if channels.is_empty() {
            set.iter().cloned().collect()
        } else {
            channels.iter().map(<[u8]>::to_vec).collect()
        };
        for channel in &named {
            set.remove(channel);
            verbatim_client::pubsub::encode_confirmation(
                b"unsubscribe",
                Some(channel),
                set.len(),
                out,
            );
        }
        if set.is_empty() {
            subscribers.remove(self.client_id);
            self.subscription = None;
            let _ = self
                .stream
                .set_read_timeout(Some(Duration::from_millis(200)));
        } else {
            subscribers.set_channels(self.client_id, set);
        }
    }

    /// Moves the messages delivered for this subscriber into `out`; false
    /// when it fell too far behind and must be closed.
    fn forward_messages(&mut self, out: &mut Vec<u8>) -> bool {
        let Some((sub, _)) = &self.subscription else {
            return true;
        };
        if sub.overflowed.load(Ordering::Acquire) {
            tracing::warn!(
                client = self.client_id,
                "subscriber closed: it read slower than the group delivers (its queue of {} messages filled)",
                crate::gateway::pubsub::SUBSCRIBER_QUEUE_MAX
            );
            return false;
        }
        while let Ok(push) = sub.rx.try_recv() {
            out.extend_from_slice(&push);
        }
        true
    }

    fn info(&self, section: Option<&[u8]>, out: &mut Vec<u8>) {
        let mut text = String::new();
        if let Some(s) = self.ctx.status.get() {
            if resp::info_section_selected(section, "server") {
                text.push_str(&format!(
                    "# Server\r\nverbatim_version:{}\r\nprocess_id:{}\r\nuptime_in_seconds:{}\r\n\r\n",
                    env!("CARGO_PKG_VERSION"),
                    s.pid,
                    s.uptime_ms / 1000
                ));
            }
            if resp::info_section_selected(section, "replication") {
                text.push_str(&format!(
                    "# Replication\r\nrole:{}\r\nconnected_slaves:{}\r\n\r\n",
                    redis_role(&s.role),
                    s.peers.iter().filter(|p| p.reachable).count()
                ));
            }
            if resp::info_section_selected(section, "verbatim") {
                text.push_str(&format!(
                    "# Verbatim\r\nmember:{}\r\nterm:{}\r\nleader:{}\r\ncommit_index:{}\r\napply_index:{}\r\nfabric:{}\r\n",
                    s.id,
                    s.term,
                    s.leader.map_or("none".to_string(), |l| l.to_string()),
                    s.log.commit_index,
                    s.log.apply_index,
                    s.config.fabric
                ));
            }
        }
        resp::encode_bulk(text.as_bytes(), out);
    }

    /// `AUTH [default] <password>`, with Redis's replies.
    fn auth(&mut self, auth: Option<&[u8]>, out: &mut Vec<u8>) {
        let Some(given) = auth else {
            resp::encode_error(b"ERR wrong number of arguments for 'auth' command", out);
            return;
        };
        match self.ctx.manifest.cluster.resp_password.as_deref() {
            None => resp::encode_error(
                b"ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
                out,
            ),
            Some(expected) if constant_time_eq(expected.as_bytes(), given) => {
                self.authenticated = true;
                resp::encode_simple(b"OK", out);
            }
            Some(_) => {
                self.authenticated = false;
                resp::encode_error(
                    b"WRONGPASS invalid username-password pair or user is disabled.",
                    out,
                );
            }
        }
    }

    /// Submits one key-value operation of a pipeline. Writes follow writes
    /// and reads follow reads without waiting: a read after a write (or
    /// the reverse) first waits for what is in flight, so the client sees
    /// its commands take effect in the order it sent them, as with Redis.
    fn pipeline(&mut self, op: &KvOp<'_>, raw: &[u8], out: &mut Vec<u8>) {
        let write = !op.is_read();
        if self.inflight.back().is_some_and(|p| p.write != write)
            || self.inflight.len() >= PIPELINE_DEPTH_MAX
        {
            self.drain(out);
        }
        let mut payload = vec![0u8; self.kv_limits.encoded_bytes_max() as usize];
        let Ok(n) = op.encode(&mut payload) else {
            self.drain(out);
            resp::encode_error(b"ERR request too large", out);
            return;
        };
        payload.truncate(n);
        let request_id = self.next_request;
        self.next_request += 1;
        let tag = self.next_tag;
        self.next_tag += 1;
        let submitted = self.ctx.handle.submit(ServiceRequest {
            client_id: self.client_id,
            request_id,
            write,
            payload: payload.clone(),
            tag,
            reply: self.reply_tx.clone(),
            arrived: Instant::now(),
        });
        if !submitted {
            self.drain(out);
            resp::encode_error(b"ERR replica shutting down", out);
            return;
        }
        self.inflight.push_back(Pipelined {
            tag,
            client_id: self.client_id,
            request_id,
            write,
            payload,
            raw: raw.to_vec(),
            deadline: Instant::now() + REQUEST_TIMEOUT,
        });
    }

    /// Waits for every pipelined operation's answer and writes them in
    /// order. One that this replica could not serve (not the leader, no
    /// leader yet, log full) goes through [`Conn::execute_as`] with the
    /// same ids: retried or forwarded, and applied at most once.
    fn drain(&mut self, out: &mut Vec<u8>) {
        while let Some(p) = self.inflight.pop_front() {
            let reply = self.wait_reply(p.tag, p.deadline);
            if let Some(ServiceReply::NotLeader(Some(leader))) = reply {
                if leader.0 != self.ctx.me {
                    // A follower: the whole run of operations that this
                    // replica cannot serve goes to the leader as one
                    // pipeline, not one round trip each.
                    let mut batch = vec![p];
                    while let Some((tag, deadline)) =
                        self.inflight.front().map(|q| (q.tag, q.deadline))
                    {
                        match self.wait_reply(tag, deadline) {
                            Some(ServiceReply::NotLeader(Some(l))) if l == leader => {
                                batch.extend(self.inflight.pop_front());
                            }
                            Some(other) => {
                                self.early.insert(tag, other);
                                break;
                            }
                            None => break,
                        }
                    }
                    let relayed = self.forward_batch(leader, &batch, 1, out);
                    for q in batch.into_iter().skip(relayed) {
                        self.fall_back(q, out);
                    }
                    continue;
                }
            }
            match reply {
                Some(ServiceReply::Ok(bytes)) => encode_kv_result(!p.write, &bytes, out),
                Some(ServiceReply::Error(msg)) => {
                    resp::encode_error(format!("ERR {msg}").as_bytes(), out)
                }
                None => resp::encode_error(
                    b"TRYAGAIN request timed out; it may or may not have been applied",
                    out,
                ),
                Some(ServiceReply::NotLeader(_) | ServiceReply::Busy) => self.fall_back(p, out),
            }
        }
    }

    /// The answer to a pipelined operation, waiting until its deadline.
    fn wait_reply(&mut self, tag: u64, deadline: Instant) -> Option<ServiceReply> {
        if let Some(r) = self.early.remove(&tag) {
            return Some(r);
        }
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match self.reply_rx.recv_timeout(remaining) {
                Ok((t, r)) if t == tag => return Some(r),
                Ok((t, r)) => self.keep_early(t, r),
                Err(_) => return None,
            }
        }
    }

    /// One pipelined operation the fast path could not finish, through
    /// the one-at-a-time path (retries, forwarding) with the same ids.
    fn fall_back(&mut self, p: Pipelined, out: &mut Vec<u8>) {
        let read = !p.write;
        if let Some(bytes) = self.execute_as(
            p.client_id,
            p.request_id,
            0,
            p.payload,
            p.write,
            &p.raw,
            out,
        ) {
            encode_kv_result(read, &bytes, out);
        }
    }

    /// Keeps the answer of a pipelined operation that is still waiting;
    /// drops a stale one (of an attempt that timed out).
    fn keep_early(&mut self, tag: u64, reply: ServiceReply) {
        if self.inflight.iter().any(|q| q.tag == tag) {
            self.early.insert(tag, reply);
        }
    }

    /// Runs a service operation (encoded): through our poll loop, or
    /// forwarded to the leader, retrying while no leader is known. Returns
    /// the service's result bytes, or `None` when the reply (an error, or
    /// the leader's relayed reply) was written to `out` already.
    fn execute(
        &mut self,
        payload: Vec<u8>,
        write: bool,
        raw: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<Vec<u8>> {
        let hops = std::mem::take(&mut self.named_hops);
        let Some((client_id, request_id)) = self.named.take() else {
            let r = self.next_request;
            self.next_request += 1;
            return self.execute_as(self.client_id, r, hops, payload, write, raw, out);
        };
        // A named request runs while this connection holds the id, and
        // says so: nobody takes the id over in the middle of it.
        if !self.ctx.owners.set_busy(client_id, self.client_id, true) {
            resp::encode_error(b"TRYAGAIN client id in use by another connection", out);
            return None;
        }
        let r = self.execute_as(client_id, request_id, hops, payload, write, raw, out);
        self.ctx.owners.set_busy(client_id, self.client_id, false);
        r
    }

    /// [`Conn::execute`] with the request's ids and hops given.
    #[allow(clippy::too_many_arguments)]
    fn execute_as(
        &mut self,
        client_id: u64,
        request_id: u64,
        hops: u8,
        payload: Vec<u8>,
        write: bool,
        raw: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<Vec<u8>> {
        if payload.len() > self.kv_limits.encoded_bytes_max() as usize {
            resp::encode_error(b"ERR request too large", out);
            return None;
        }
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        loop {
            let tag = self.next_tag;
            self.next_tag += 1;
            let request = ServiceRequest {
                client_id,
                request_id,
                write,
                payload: payload.clone(),
                tag,
                reply: self.reply_tx.clone(),
                arrived: Instant::now(),
            };
            if !self.ctx.handle.submit(request) {
                resp::encode_error(b"ERR replica shutting down", out);
                return None;
            }
            let reply = loop {
                let remaining = deadline.saturating_duration_since(Instant::now());
                match self.reply_rx.recv_timeout(remaining) {
                    Ok((t, r)) if t == tag => break r,
                    Ok((t, r)) => self.keep_early(t, r),
                    Err(_) => {
                        resp::encode_error(
                            b"TRYAGAIN request timed out; it may or may not have been applied",
                            out,
                        );
                        return None;
                    }
                }
            };
            match reply {
                ServiceReply::Ok(bytes) => return Some(bytes),
                ServiceReply::Error(msg) => {
                    resp::encode_error(format!("ERR {msg}").as_bytes(), out);
                    return None;
                }
                ServiceReply::NotLeader(_) if hops >= FORWARD_HOPS_MAX => {
                    out.extend_from_slice(NOT_LEADER_FORWARDED);
                    out.extend_from_slice(b" (a forwarded request is not forwarded again)\r\n");
                    return None;
                }
                ServiceReply::NotLeader(Some(leader)) if leader.0 != self.ctx.me => {
                    if self.forward(leader, client_id, request_id, hops + 1, raw, out) {
                        return None;
                    }
                }
                ServiceReply::NotLeader(_) | ServiceReply::Busy => {}
            }
            if Instant::now() >= deadline {
                resp::encode_error(b"TRYAGAIN no leader available, retry", out);
                return None;
            }
            // No leader yet (an election is running) or the log is full:
            // wait a little, then ask again with the same ids.
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// Forwards a request (named with its ids) to the leader and relays
    /// the reply; false if the leader could not be reached.
    fn forward(
        &mut self,
        leader: MemberId,
        client_id: u64,
        request_id: u64,
        hops: u8,
        raw: &[u8],
        out: &mut Vec<u8>,
    ) -> bool {
        let one = Pipelined {
            tag: 0,
            client_id,
            request_id,
            write: true,
            payload: Vec::new(),
            raw: raw.to_vec(),
            deadline: Instant::now(),
        };
        self.forward_batch(leader, std::slice::from_ref(&one), hops, out) == 1
    }

    /// Forwards requests (each named with its ids and `hops`) to the
    /// leader in one write and relays their replies in order. Returns how
    /// many were relayed: a prefix; the rest (the leader could not be
    /// reached, or lost the leadership meanwhile) are the caller's.
    fn forward_batch(
        &mut self,
        leader: MemberId,
        batch: &[Pipelined],
        hops: u8,
        out: &mut Vec<u8>,
    ) -> usize {
        let Some(addr) = self
            .ctx
            .manifest
            .members
            .get(leader.index())
            .and_then(|m| m.resp_addr.clone())
        else {
            return 0;
        };
        if self.upstream.as_ref().is_none_or(|u| u.leader != leader) {
            let Ok(addr) = addr.parse::<SocketAddr>() else {
                return 0;
            };
            let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
                return 0;
            };
            let _ = stream.set_nodelay(true);
            // The leader's side of this connection is bounded the same way;
            // ours too, so that a write to a cut-off leader fails in seconds.
            if let Err(e) = enable_keepalive(&stream) {
                tracing::debug!(error = %e, "TCP keepalive not enabled on a forwarding connection");
            }
            let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
            let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
            self.upstream = Some(Upstream {
                leader,
                stream,
                buf: Vec::new(),
                authenticated: false,
            });
        }
        let password = self.ctx.manifest.cluster.resp_password.clone();
        let up = self.upstream.as_mut().expect("just set");
        let mut req = Vec::with_capacity(batch.iter().map(|p| p.raw.len() + 64).sum());
        // The leader asks members for the password like any client.
        let mut skip = 0;
        if let (Some(p), false) = (&password, up.authenticated) {
            resp::encode_array_header(2, &mut req);
            resp::encode_bulk(b"AUTH", &mut req);
            resp::encode_bulk(p.as_bytes(), &mut req);
            skip += 1;
            up.authenticated = true;
        }
        for p in batch {
            resp::encode_array_header(4, &mut req);
            resp::encode_bulk(b"RID", &mut req);
            resp::encode_bulk(p.client_id.to_string().as_bytes(), &mut req);
            resp::encode_bulk(p.request_id.to_string().as_bytes(), &mut req);
            resp::encode_bulk(hops.to_string().as_bytes(), &mut req);
            req.extend_from_slice(&p.raw);
        }
        if up.stream.write_all(&req).is_err() {
            self.upstream = None;
            return 0;
        }
        // Replies: +OK for AUTH (once per connection), then per request +OK
        // for RID and the command's, which is relayed.
        let limits = RespLimits::for_kv(&self.kv_limits);
        let mut chunk = [0u8; 16 * 1024];
        let mut relayed = 0;
        // Frames of the reply stream consumed so far (AUTH, RID, command).
        let mut seen = 0;
        loop {
            let mut at = 0;
            while relayed < batch.len() {
                let Ok(Some((_, used))) = resp::parse_frame(&up.buf[at..], &limits) else {
                    break;
                };
                let frame = &up.buf[at..at + used];
                at += used;
                seen += 1;
                let is_command_reply = seen > skip && (seen - skip) % 2 == 0;
                if !is_command_reply {
                    continue;
                }
                // The member we forwarded to lost the leadership: not the
                // client's business. This one and the rest are retried
                // from here (we may be the new leader, or know who is).
                if frame.starts_with(NOT_LEADER_FORWARDED) {
                    // Its replies to the rest are read and dropped with
                    // the connection.
                    self.upstream = None;
                    return relayed;
                }
                out.extend_from_slice(frame);
                relayed += 1;
            }
            up.buf.drain(..at);
            if relayed == batch.len() {
                return relayed;
            }
            match up.stream.read(&mut chunk) {
                Ok(0) | Err(_) => {
                    self.upstream = None;
                    return relayed;
                }
                Ok(n) => up.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

fn redis_role(role: &str) -> String {
    if role == "leader" { "master" } else { "slave" }.to_string()
}

/// `AUTH <password>` or `AUTH <user> <password>` (only the `default`
/// user exists): `None` when the frame is not AUTH; `Some(None)` for a
/// wrong number of arguments or another user (then no password matches).
fn auth_command<'a>(frame: &Frame<'a>) -> Option<Option<&'a [u8]>> {
    let Frame::Array(a) = frame else { return None };
    let mut it = a.iter();
    if !it
        .next()?
        .as_bytes()
        .is_some_and(|b| b.eq_ignore_ascii_case(b"AUTH"))
    {
        return None;
    }
    let args: Vec<&[u8]> = it.map(|f| f.as_bytes().unwrap_or(&[])).collect();
    Some(match args.as_slice() {
        [password] => Some(password),
        [user, password] if user.eq_ignore_ascii_case(b"default") => Some(password),
        // Another user: a password that can never match.
        [_, _] => Some(&[0xFF, 0x00, 0xFF][..]),
        _ => None,
    })
}

/// Compares without an early exit on the first differing byte (the time
/// does not tell how much of a guess was right).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// `RID <client_id> <request_id> [hops]`: `None` when the frame is not
/// RID, `Some(None)` when it is malformed.
fn rid_command(frame: &Frame<'_>) -> Option<Option<(u64, u64, u8)>> {
    let Frame::Array(a) = frame else { return None };
    let mut it = a.iter();
    let first = it.next()?;
    if !first
        .as_bytes()
        .is_some_and(|b| b.eq_ignore_ascii_case(b"RID"))
    {
        return None;
    }
    let num = |f: Option<Frame<'_>>| -> Option<u64> {
        let b = f?.as_bytes()?;
        let v = std::str::from_utf8(b).ok()?.parse::<u64>().ok()?;
        (v > 0).then_some(v)
    };
    let (c, r) = (num(it.next()), num(it.next()));
    let hops = match it.next() {
        None => 0,
        Some(f) => match f
            .as_bytes()
            .and_then(|b| std::str::from_utf8(b).ok()?.parse::<u8>().ok())
        {
            Some(h) => h,
            None => return Some(None),
        },
    };
    if it.next().is_some() {
        return Some(None);
    }
    Some(c.zip(r).map(|(c, r)| (c, r, hops)))
}

fn encode_result(op: &KvOp<'_>, bytes: &[u8], out: &mut Vec<u8>) {
    encode_kv_result(op.is_read(), bytes, out)
}

/// The RESP reply of a key-value result (`read`: a GET's value, else a
/// write's `KvReply`).
fn encode_kv_result(read: bool, bytes: &[u8], out: &mut Vec<u8>) {
    if read {
        match bytes.split_first() {
            Some((1, value)) => resp::reply_get(Some(value), out),
            _ => resp::reply_get(None, out),
        }
        return;
    }
    match KvReply::from_bytes(bytes) {
        Some(r) => resp::reply_for(&r, out),
        None => resp::encode_error(b"ERR internal: undecodable reply", out),
    }
}

#[cfg(test)]
mod tests {
    use super::{ClientIdOwners, OWNER_BUSY_MAX};
    use std::time::{Duration, Instant};

    /// An id goes to the first connection that claims it; another one
    /// takes it while the owner runs nothing under it, not while it runs a
    /// request (unless that has run longer than any request may), and the
    /// one that lost it can no longer mark it busy; a release by a
    /// connection that no longer owns it changes nothing.
    #[test]
    fn a_client_id_is_taken_over_only_from_an_idle_owner() {
        let o = ClientIdOwners::default();
        let t0 = Instant::now();
        assert!(o.claim_at(7, 1, t0));
        assert!(o.set_busy_at(7, 1, Some(t0)));
        assert!(!o.claim_at(7, 2, t0 + Duration::from_millis(10)), "busy");
        assert_eq!(o.owner(7), Some(1));
        assert!(
            o.claim_at(7, 2, t0 + OWNER_BUSY_MAX),
            "a request stuck past the longest one does not hold it"
        );
        assert!(!o.set_busy_at(7, 1, Some(t0)), "conn 1 lost it");
        assert!(o.claim_at(7, 1, t0 + OWNER_BUSY_MAX), "conn 2 is idle");
        assert!(o.set_busy_at(7, 1, None));
        o.release(&[7], 2);
        assert_eq!(o.owner(7), Some(1), "conn 2 released what it lost");
        o.release(&[7], 1);
        assert_eq!(o.owner(7), None);
        assert!(o.claim_at(7, 3, t0));
        // A connection's own id is never taken over while it is open.
        assert!(o.claim_at(9, 9, t0));
        assert!(!o.claim_at(9, 4, t0 + OWNER_BUSY_MAX));
    }

    use super::*;

    /// An accepted connection probes its client and gives up on a silent
    /// one within seconds (a client whose FIN was lost in a partition
    /// must not own its client id for ever).
    #[test]
    fn accepted_connections_probe_a_silent_client() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, _) = listener.accept().unwrap();
        let sock = socket2::SockRef::from(&server_side);
        assert!(!sock.keepalive().unwrap(), "off by default");
        enable_keepalive(&server_side).unwrap();
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
        assert_eq!(sock.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        // With a reply unacknowledged, keepalive does not probe: the user
        // timeout bounds that case.
        assert_eq!(sock.tcp_user_timeout().unwrap(), Some(UNACKED_TIMEOUT));
        let gives_up_after = KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_PROBES;
        assert!(gives_up_after <= Duration::from_secs(10));
    }

    fn frame(parts: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        resp::encode_array_header(parts.len(), &mut out);
        for p in parts {
            resp::encode_bulk(p, &mut out);
        }
        out
    }

    fn parsed<T>(bytes: &[u8], f: impl Fn(&Frame<'_>) -> T) -> T {
        let limits = RespLimits::for_kv(&KvLimits {
            key_bytes_max: 64,
            value_bytes_max: 64,
        });
        let (fr, _) = resp::parse_frame(bytes, &limits).unwrap().unwrap();
        f(&fr)
    }

    #[test]
    fn rid_carries_hops_and_refuses_junk() {
        let rid = |parts: &[&[u8]]| parsed(&frame(parts), rid_command);
        assert_eq!(rid(&[b"RID", b"7", b"9"]), Some(Some((7, 9, 0))));
        assert_eq!(rid(&[b"rid", b"7", b"9", b"1"]), Some(Some((7, 9, 1))));
        assert_eq!(rid(&[b"RID", b"7", b"9", b"x"]), Some(None));
        assert_eq!(rid(&[b"RID", b"0", b"9"]), Some(None));
        assert_eq!(rid(&[b"RID", b"7", b"9", b"1", b"2"]), Some(None));
        assert_eq!(rid(&[b"GET", b"k"]), None);
    }

    #[test]
    fn auth_forms_are_those_redis_accepts() {
        let auth = |parts: &[&[u8]]| {
            parsed(&frame(parts), |f| {
                auth_command(f).map(|a| a.map(<[u8]>::to_vec))
            })
        };
        assert_eq!(auth(&[b"AUTH", b"pw"]), Some(Some(b"pw".to_vec())));
        assert_eq!(
            auth(&[b"auth", b"default", b"pw"]),
            Some(Some(b"pw".to_vec()))
        );
        let other = auth(&[b"AUTH", b"alice", b"pw"]).unwrap().unwrap();
        assert!(
            !constant_time_eq(&other, b"pw"),
            "another user never matches"
        );
        assert_eq!(auth(&[b"AUTH"]), Some(None));
        assert_eq!(auth(&[b"PING"]), None);
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
