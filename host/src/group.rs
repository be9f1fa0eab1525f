//! An embeddable member of a multicast group (Derecho's `Group`): the
//! process that holds a [`Group`] *is* the member. It multicasts with
//! [`Group::send`] and takes every member's messages, in the same total
//! order at every member, from [`Group::next_delivery`]; [`Group::view`]
//! says which members the current view has.
//!
//! Underneath is the engine the replicas run ([`McastEngine`]: SMC rings
//! written with one-sided WRITEs, round-robin delivery on the SST, view
//! changes with wedge and ragged trim) over the shared-memory fabric the
//! replicas use ([`ShmFabric`]). Members of one group are processes (or
//! threads) of one host that agree on the group's name, size and
//! geometry; each one maps the others' segments under `dir`.
//!
//! ```no_run
//! use verbatim_host::group::{Group, GroupOptions};
//! # fn main() -> Result<(), verbatim_host::group::GroupError> {
//! let mut g = Group::join(&GroupOptions::new("prices", 3, 0))?;
//! g.wait_formed(std::time::Duration::from_secs(10))?;
//! g.send(b"EURUSD 1.0842")?;
//! loop {
//!     let worked = g.poll();
//!     while let Some(d) = g.next_delivery() {
//!         println!("view {} seq {} from {}: {:?}", d.epoch, d.seq, d.sender.0, d.payload);
//!     }
//!     if !worked {
//!         std::thread::yield_now();
//!     }
//! }
//! # }
//! ```
//!
//! # Failures
//!
//! A member learns that another one's process is gone from its death
//! notice (a robust futex held by a thread of the member's process, so
//! SIGKILL is seen within a millisecond) or its pidfd, or when the
//! application says so ([`Group::report_dead`], for a failure detector of
//! its own). The group then ends the epoch: every surviving member
//! delivers the same messages of it (virtual synchrony) and installs the
//! next view without the dead member. A process that starts while the
//! group runs asks to join, and the next view adds it.
//!
//! # Large messages (RDMC)
//!
//! With `large_slots > 0`, [`Group::send`] takes messages up to
//! `large_message_bytes_max`: one longer than `payload_bytes_max` travels
//! on Derecho's RDMC ([`RdmcEngine`]: chunked and relayed on a binomial
//! pipeline, so the sender writes each chunk once and the members
//! forward it), and a reference to it goes into the small messages'
//! ring. The reference counts as received at a member only once the
//! payload is whole there, so it is delivered, in the same total order as
//! every other message, only when every member has the payload, and
//! [`Group::next_delivery`] hands out the payload itself. An RDMC session
//! lives for one view: a view change wedges it, the ending view's trim
//! delivers what it holds, and the next view starts a new session among
//! its members (a large message the trim left out is sent again, like a
//! small one).
//!
//! Sending is reliable while the sender lives: [`Group::send`] keeps a
//! copy of each message until the group delivers it, and a message a
//! view change left out of the ended epoch (the ragged trim: delivered
//! nowhere) is sent again, first, in the next view. So every message of a
//! member that stays in the group is delivered exactly once, in its send
//! order.

use crate::fabric::liveness::{spawn_watcher, PeerLiveness};
use crate::fabric::shm::{Segment, ShmFabric, ShmMemory};
use crate::fabric::HostFabric;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use verbatim_client::notice::{notice_path, DeathNotices};
use verbatim_client::ShmError;
use verbatim_core::config::Config;
use verbatim_core::engine::Engine;
use verbatim_core::engine::EngineTag;
use verbatim_core::fabric::{Action, Fabric, MemberId, MAX_MEMBERS};
use verbatim_core::layout::Layout;
use verbatim_core::multicast::{
    HaltCause, McastEngine, McastStatus, SendError, MCAST_PAYLOAD_BYTES_CAP, MCAST_WINDOW_CAP,
};
use verbatim_core::rdmc::{RdmcEngine, RdmcStatus};
use verbatim_driver::large;

/// How often a member looks for peers whose segment it has not mapped
/// (not started yet, or restarted after a death).
const RECONNECT_EVERY: Duration = Duration::from_millis(50);

/// How a member joins its group.
#[derive(Clone, Debug)]
pub struct GroupOptions {
    /// The group's name: its members' segments are
    /// `dir/verbatim-group-<name>-<member>`.
    pub name: String,
    /// Where the segments are (`/dev/shm`: memory, never written back).
    pub dir: PathBuf,
    /// Members of the group (2..=8); the first view has all of them.
    pub members: u8,
    /// This member's id (`0..members`).
    pub me: u8,
    /// Slots per sender ring: messages a sender may have in flight.
    pub window: u32,
    /// Largest message, bytes (SMC is for small messages).
    pub payload_bytes_max: u32,
    /// Messages [`Group::send`] holds (waiting for the window, or sent and
    /// not yet delivered) before it refuses more.
    pub outbox_messages: usize,
    /// How long [`Group::join`] waits for every other member's segment
    /// before it starts without (they are looked for again while the
    /// member runs).
    pub connect_timeout: Duration,
    /// Large messages (RDMC): message slots per sender; 0 (the default)
    /// turns them off.
    pub large_slots: u32,
    /// Large messages: bytes of a chunk (a multiple of 64).
    pub large_chunk_bytes: u32,
    /// Large messages: the largest one, in bytes. Every member's segment
    /// holds `members × large_slots` of them.
    pub large_message_bytes_max: u64,
}

impl GroupOptions {
    /// Member `me` of a group of `members` called `name`, with the
    /// defaults: segments in `/dev/shm`, 64 slots of up to 256 bytes.
    pub fn new(name: &str, members: u8, me: u8) -> GroupOptions {
        GroupOptions {
            name: name.to_owned(),
            dir: PathBuf::from("/dev/shm"),
            members,
            me,
            window: 64,
            payload_bytes_max: 256,
            outbox_messages: 4096,
            connect_timeout: Duration::from_secs(10),
            large_slots: 0,
            large_chunk_bytes: 1 << 20,
            large_message_bytes_max: 16 << 20,
        }
    }

    /// The segment of `member`.
    pub fn segment_path(&self, member: u8) -> PathBuf {
        self.dir
            .join(format!("verbatim-group-{}-{member}", self.name))
    }

    fn validate(&self) -> Result<(), GroupError> {
        let bad = |what: String| Err(GroupError::Options(what));
        if self.name.is_empty()
            || !self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return bad(format!(
                "name {:?}: use letters, digits, '-' and '_' (it names files)",
                self.name
            ));
        }
        if !(2..=MAX_MEMBERS as u8).contains(&self.members) {
            return bad(format!(
                "members = {}: a group has 2 to {MAX_MEMBERS} members",
                self.members
            ));
        }
        if self.me >= self.members {
            return bad(format!(
                "me = {}: member ids of a group of {} run from 0 to {}",
                self.me,
                self.members,
                self.members - 1
            ));
        }
        if !(2..=MCAST_WINDOW_CAP).contains(&self.window) {
            return bad(format!(
                "window = {}: use 2 to {MCAST_WINDOW_CAP} slots",
                self.window
            ));
        }
        if !(1..=MCAST_PAYLOAD_BYTES_CAP).contains(&self.payload_bytes_max) {
            return bad(format!(
                "payload_bytes_max = {}: use 1 to {MCAST_PAYLOAD_BYTES_CAP} bytes",
                self.payload_bytes_max
            ));
        }
        if self.outbox_messages == 0 {
            return bad("outbox_messages = 0: a member must hold at least one message".into());
        }
        if self.large_slots != 0 {
            if let Err(e) = self.config().validate() {
                // The core names its `rdmc_*` fields; ours are `large_*`.
                let message = e
                    .to_string()
                    .replace("rdmc_message_bytes_max", "large_message_bytes_max")
                    .replace("rdmc_chunk_bytes", "large_chunk_bytes")
                    .replace("rdmc_slots", "large_slots")
                    .replace("mcast_payload_bytes_max", "payload_bytes_max");
                return bad(format!("large messages: {message}"));
            }
        }
        Ok(())
    }

    fn config(&self) -> Config {
        let mut c = Config::new(self.members, MemberId(self.me));
        // The segment carries every engine's regions; a group member runs
        // only the multicast engine, so the log ring stays small.
        c.log_ring_bytes = 64 * 1024;
        c.mcast_window = self.window;
        c.mcast_payload_bytes_max = self.payload_bytes_max;
        c.rdmc_slots = self.large_slots;
        c.rdmc_chunk_bytes = self.large_chunk_bytes;
        c.rdmc_message_bytes_max = self.large_message_bytes_max;
        c.incarnation = crate::replica::draw_incarnation();
        c
    }
}

/// Why a group operation failed.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The options are not usable.
    #[error("group options: {0}")]
    Options(String),
    /// A segment could not be created or mapped.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// Another member's segment does not fit ours.
    #[error("member {member}: {message}")]
    Peer {
        /// The member.
        member: u8,
        /// What is wrong.
        message: String,
    },
    /// A thread the member needs could not start.
    #[error("starting {what}: {source}")]
    Io {
        /// Which thread.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The message is larger than the group's `payload_bytes_max`.
    #[error("a message of {len} bytes is larger than the group's payload_bytes_max = {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// `outbox_messages` messages wait already: poll (the group delivers)
    /// and send again.
    #[error(
        "{0} messages of this member are not delivered yet (outbox_messages): poll and send again"
    )]
    Backlog(usize),
    /// This member left the group for good: a new process has to join.
    #[error("this member left the group for good ({0:?}): join again as a new process")]
    Halted(HaltCause),
    /// The message is longer than `large_message_bytes_max` (large
    /// messages on).
    #[error("a message of {len} bytes is longer than large_message_bytes_max = {max}")]
    LargeTooLarge {
        /// Its length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The group did not form in time (a member missing, or not agreeing
    /// on the geometry).
    #[error("the group did not form within {0:?}: is every member running with the same options?")]
    NotFormed(Duration),
}

/// A view of the group: its epoch and members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The view's number (0 for the first; one more per view change).
    pub epoch: u64,
    /// Its members, by id.
    pub members: Vec<MemberId>,
}

/// A delivered message: the same at every member, in the same order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery<'a> {
    /// Who sent it.
    pub sender: MemberId,
    /// The view it was delivered in.
    pub epoch: u64,
    /// Its place in the view's total order (round robin over the view's
    /// members; nulls take places, so numbers may skip).
    pub seq: u64,
    /// Its place in its sender's stream of this view.
    pub index: u64,
    /// The message.
    pub payload: &'a [u8],
}

/// A member's own messages between [`Group::send`] and their delivery:
/// waiting for the window, or sent in `(epoch, index)` and not delivered.
/// A view change that ended an epoch without delivering some of them (the
/// ragged trim) sends them again, first, in order.
#[derive(Debug)]
pub struct Outbox<T> {
    waiting: VecDeque<T>,
    sent: VecDeque<((u64, u64), T)>,
}

impl<T> Default for Outbox<T> {
    fn default() -> Self {
        Outbox {
            waiting: VecDeque::new(),
            sent: VecDeque::new(),
        }
    }
}

/// What [`Outbox::flush`] did with a message the engine refused.
pub enum Refused<T, E> {
    /// Try again later (the window is full, the group is forming or
    /// changing views): the message stays first.
    Later,
    /// Never: the message is given back with the reason.
    Never(T, E),
}

impl<T> Outbox<T> {
    /// Messages held, waiting or sent.
    pub fn len(&self) -> usize {
        self.waiting.len() + self.sent.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues a message behind the others.
    pub fn push(&mut self, item: T) {
        self.waiting.push_back(item);
    }

    /// The group is in `epoch`: messages sent in earlier epochs and not
    /// delivered were left out by the trim (delivered nowhere, since the
    /// trim is the same everywhere) and go out again, first, in send
    /// order. Returns how many.
    pub fn requeue_trimmed(&mut self, epoch: u64) -> usize {
        let mut n = 0;
        while self.sent.back().is_some_and(|((e, _), _)| *e < epoch) {
            let (_, item) = self.sent.pop_back().expect("back checked");
            self.waiting.push_front(item);
            n += 1;
        }
        n
    }

    /// Hands waiting messages, in order, to `send` (which returns the
    /// message's index in `epoch`) until it refuses one. Returns how many
    /// went out and the first refused for good, if any (the ones behind
    /// it stay waiting).
    pub fn flush<E>(
        &mut self,
        epoch: u64,
        mut send: impl FnMut(&T) -> Result<u64, Refused<(), E>>,
    ) -> (usize, Option<(T, E)>) {
        let mut n = 0;
        while let Some(item) = self.waiting.front() {
            match send(item) {
                Ok(index) => {
                    let item = self.waiting.pop_front().expect("front checked");
                    self.sent.push_back(((epoch, index), item));
                    n += 1;
                }
                Err(Refused::Later) => break,
                Err(Refused::Never((), e)) => {
                    let item = self.waiting.pop_front().expect("front checked");
                    return (n, Some((item, e)));
                }
            }
        }
        (n, None)
    }

    /// Our message `(epoch, index)` was delivered: returns it. Our
    /// messages are delivered in send order, so it is the oldest sent.
    pub fn delivered(&mut self, id: (u64, u64)) -> Option<T> {
        let mut found = None;
        while self.sent.front().is_some_and(|(i, _)| *i <= id) {
            let (i, item) = self.sent.pop_front().expect("front checked");
            if i == id {
                found = Some(item);
            }
        }
        found
    }

    /// The oldest message waiting to be sent.
    pub fn oldest_waiting(&self) -> Option<&T> {
        self.waiting.front()
    }

    /// Drops the oldest message waiting to be sent (given up on).
    pub fn pop_oldest_waiting(&mut self) -> Option<T> {
        self.waiting.pop_front()
    }

    /// The oldest message sent and not delivered.
    pub fn oldest_sent(&self) -> Option<&T> {
        self.sent.front().map(|(_, t)| t)
    }

    /// Drops the oldest message sent and not delivered (given up on).
    pub fn pop_oldest_sent(&mut self) -> Option<T> {
        self.sent.pop_front().map(|(_, t)| t)
    }
}

/// The thread that holds this member's death notices: peers learn that
/// the member is gone when it ends (the process died, or the group was
/// dropped).
struct NoticeHolder {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NoticeHolder {
    fn start(path: PathBuf) -> Result<NoticeHolder, GroupError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("verbatim-group-notices".into())
            .spawn(move || {
                // The notices are robust mutexes locked by this thread: its
                // exit is what they announce.
                match DeathNotices::hold(&path) {
                    Ok(notices) => {
                        let _ = tx.send(Ok(()));
                        while !s.load(Ordering::Acquire) {
                            std::thread::park_timeout(Duration::from_millis(100));
                        }
                        drop(notices);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|source| GroupError::Io {
                what: "the death-notice thread",
                source,
            })?;
        let holder = NoticeHolder {
            stop,
            thread: Some(thread),
        };
        match rx.recv() {
            Ok(Ok(())) => Ok(holder),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(GroupError::Io {
                what: "the death-notice thread",
                source: std::io::Error::other("it ended before holding the notices"),
            }),
        }
    }
}

impl Drop for NoticeHolder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// One member of a multicast group (see the module documentation).
pub struct Group {
    opts: GroupOptions,
    engine: McastEngine<ShmMemory>,
    fabric: ShmFabric,
    liveness: Arc<PeerLiveness>,
    segment: Arc<Segment>,
    _notices: NoticeHolder,
    clock: Instant,
    buf: Vec<u8>,
    outbox: Outbox<Vec<u8>>,
    /// Payload buffers of delivered messages, for the next sends.
    spare: Vec<Vec<u8>>,
    epoch_seen: u64,
    /// Some peer is not mapped or is dead: look for its segment again.
    peers_missing: bool,
    next_reconnect: Instant,
    requeued: u64,
    /// Large messages: the view's RDMC session (none with them off,
    /// before the group formed, or in a view RDMC cannot number), and the
    /// buffer deliveries land in.
    rdmc: Option<RdmcEngine<ShmMemory>>,
    large_buf: Vec<u8>,
    /// Our segment's memory, which each view's RDMC session is built over
    /// (one handle, not one per poll).
    memory: ShmMemory,
    /// A large message the order delivered was not here: delivery stops
    /// (never skipped).
    large_broken: bool,
    config: Config,
}

impl Group {
    /// Joins the group: creates this member's segment and death notices,
    /// maps the others' segments (waiting up to `connect_timeout` for
    /// those not there yet) and starts the engine. The group forms once
    /// every member runs ([`Group::wait_formed`]); a member that starts
    /// while the group runs without it asks to join, and the next view
    /// adds it.
    pub fn join(opts: &GroupOptions) -> Result<Group, GroupError> {
        opts.validate()?;
        let config = opts.config();
        let me = config.self_id;
        let layout = Layout::new(&config)
            .map_err(|e| GroupError::Options(format!("these options give no layout: {e:?}")))?;
        let path = opts.segment_path(opts.me);
        // The notices first: a peer that maps our segment finds them.
        let notices = NoticeHolder::start(notice_path(&path))?;
        let segment = Arc::new(Segment::create(&path, &layout, me)?);
        let liveness = Arc::new(PeerLiveness::default());
        let clock = Instant::now();
        let started = (|| {
            spawn_watcher(liveness.clone(), segment.waker(), clock).map_err(|source| {
                GroupError::Io {
                    what: "the pidfd watcher",
                    source,
                }
            })?;
            let paths = (0..opts.members).map(|m| opts.segment_path(m)).collect();
            let mut fabric = ShmFabric::new(me, layout, segment.clone(), paths, liveness.clone());
            let began = Instant::now();
            let missing = loop {
                let missing = HostFabric::connect_peers(&mut fabric);
                if let Some((m, p)) = missing.iter().find(|(_, p)| !p.retry) {
                    return Err(GroupError::Peer {
                        member: m.0,
                        message: p.message.clone(),
                    });
                }
                if missing.is_empty() || began.elapsed() > opts.connect_timeout {
                    break missing;
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            let memory = ShmMemory::new(segment.clone());
            let engine = McastEngine::new(&config, memory, 0).ok_or_else(|| {
                GroupError::Options("the multicast engine refused these options".into())
            })?;
            Ok((fabric, missing, engine))
        })();
        let (fabric, missing, engine) = match started {
            Ok(s) => s,
            Err(e) => {
                // Nothing of a member that never ran stays behind (the
                // notices go with their holder).
                liveness.stop();
                segment.unlink();
                return Err(e);
            }
        };
        // The engine rounds the payload limit up to whole words: delivery
        // takes a buffer of its size.
        let buf = vec![0u8; engine.layout().payload_bytes_max as usize];
        // The first session starts once the group formed (a member that
        // joins a running group must not write into slots of a view it
        // is not in yet).
        let large_buf = if config.rdmc_slots != 0 {
            vec![0u8; opts.large_message_bytes_max as usize]
        } else {
            Vec::new()
        };
        if !missing.is_empty() {
            tracing::warn!(group = %opts.name, missing = ?missing.iter().map(|(m, _)| m.0).collect::<Vec<_>>(), "joined without every member's segment; looking for them while running");
        }
        Ok(Group {
            opts: opts.clone(),
            engine,
            fabric,
            liveness,
            memory: ShmMemory::new(segment.clone()),
            segment,
            _notices: notices,
            clock,
            buf,
            outbox: Outbox::default(),
            spare: Vec::new(),
            epoch_seen: 0,
            peers_missing: true,
            next_reconnect: Instant::now(),
            requeued: 0,
            rdmc: None,
            large_buf,
            large_broken: false,
            config,
        })
    }

    /// This member's id.
    pub fn me(&self) -> MemberId {
        MemberId(self.opts.me)
    }

    /// The current view.
    pub fn view(&self) -> View {
        let bits = self.engine.view();
        View {
            epoch: self.engine.epoch(),
            members: (0..self.opts.members)
                .filter(|m| bits & (1 << m) != 0)
                .map(MemberId)
                .collect(),
        }
    }

    /// The current view's number (cheaper than [`Group::view`]).
    pub fn epoch(&self) -> u64 {
        self.engine.epoch()
    }

    /// The engine's counters and state (wedged, halted, trims, ...).
    pub fn status(&self) -> McastStatus {
        self.engine.status()
    }

    /// Messages of `sender` this member received in the current view (a
    /// message is received when its slot is whole in our ring; it is
    /// delivered once every member received it).
    pub fn received(&self, sender: MemberId) -> u64 {
        self.engine.received(sender)
    }

    /// Own messages sent again in a later view because a trim left them
    /// out.
    pub fn resent(&self) -> u64 {
        self.requeued
    }

    /// Own messages not delivered yet.
    pub fn pending(&self) -> usize {
        self.outbox.len()
    }

    /// Whether the group formed in the current view: every member shows
    /// it, and messages go out.
    pub fn formed(&self) -> bool {
        let s = self.engine.status();
        s.started && s.wedged.is_none() && s.halted.is_none() && !s.joining
    }

    /// Multicasts `payload` to the group. It goes out as soon as the
    /// window lets it (on this call or a later [`Group::poll`]); every
    /// member, this one included, delivers it once.
    pub fn send(&mut self, payload: &[u8]) -> Result<(), GroupError> {
        if payload.len() > self.opts.payload_bytes_max as usize {
            if self.config.rdmc_slots == 0 {
                return Err(GroupError::TooLarge {
                    len: payload.len(),
                    max: self.opts.payload_bytes_max,
                });
            }
            if payload.len() as u64 > self.opts.large_message_bytes_max {
                return Err(GroupError::LargeTooLarge {
                    len: payload.len() as u64,
                    max: self.opts.large_message_bytes_max,
                });
            }
        }
        if let Some(cause) = self.engine.halted() {
            return Err(GroupError::Halted(cause));
        }
        if self.outbox.len() >= self.opts.outbox_messages {
            return Err(GroupError::Backlog(self.outbox.len()));
        }
        let mut copy = self.spare.pop().unwrap_or_default();
        copy.clear();
        copy.extend_from_slice(payload);
        self.outbox.push(copy);
        self.flush();
        // Its WRITEs go out now, not at the next poll: a sender that
        // yields the core in between would delay them.
        let now = self.now_ns();
        self.post(now);
        Ok(())
    }

    /// Posts every WRITE the engine has due.
    fn post(&mut self, now: u64) -> bool {
        let mut posted = false;
        while let Some(a) = self.engine.poll_action() {
            if let Err(e) = self.fabric.execute(&a) {
                self.engine.handle_action_failed(now, &a, e);
            }
            posted = true;
        }
        if let Some(r) = self.rdmc.as_mut() {
            // The small messages' engine uses untagged ids; RDMC's carry
            // its tag so that completions find their way back.
            while let Some(mut a) = r.poll_action() {
                if let Action::Post(w) = &mut a {
                    w.wr_id = EngineTag::RDMC.tag(w.wr_id);
                }
                if let Err(e) = self.fabric.execute(&a) {
                    r.handle_action_failed(now, &a, e);
                }
                posted = true;
            }
        }
        posted
    }

    /// Tells the member that `member`'s process is gone (an application's
    /// own failure detector; process deaths on this host are seen
    /// without it). The view changes without it.
    pub fn report_dead(&mut self, member: MemberId) {
        if member.index() < usize::from(self.opts.members) && member != self.me() {
            self.liveness.mark_dead(member);
        }
    }

    fn now_ns(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    /// Hands waiting messages to the engine while its window has room,
    /// after the ones a view change left out.
    fn flush(&mut self) {
        // The view may have changed in `next_delivery` (the end of a
        // trim): what the trim left out goes first, before anything is
        // sent in the new view.
        let epoch = self.engine.epoch();
        if epoch != self.epoch_seen {
            self.epoch_seen = epoch;
            self.requeued += self.outbox.requeue_trimmed(epoch) as u64;
        }
        if self.engine.halted().is_some() {
            // Kept: `send` says why nothing goes out any more.
            return;
        }
        let engine = &mut self.engine;
        let rdmc = &mut self.rdmc;
        let config = &self.config;
        let (_, refused) =
            self.outbox
                .flush(epoch, |p| match large::send(engine, rdmc, config, p) {
                    Ok(index) => Ok(index),
                    Err(SendError::WindowFull | SendError::NotStarted | SendError::Wedged) => {
                        Err(Refused::Later)
                    }
                    Err(e) => Err(Refused::Never((), e)),
                });
        if let Some((_, e)) = refused {
            // Only a size the options exclude gets here (`send` checks).
            tracing::warn!(group = %self.opts.name, error = ?e, "a message could not be multicast");
        }
    }

    /// One step of the member: death and restart notices, the fabric's
    /// completions, the engine's rings and rows, waiting messages, and
    /// the WRITEs due. Returns whether anything happened (a caller that
    /// has nothing else to do may yield the core when it did not).
    pub fn poll(&mut self) -> bool {
        let now = self.now_ns();
        let before = self.engine.progress();
        let mut work = false;
        if self.peers_missing && Instant::now() >= self.next_reconnect {
            self.next_reconnect = Instant::now() + RECONNECT_EVERY;
            let missing = HostFabric::connect_peers(&mut self.fabric);
            let dead = (0..self.opts.members).any(|m| self.liveness.is_dead(MemberId(m)));
            self.peers_missing = !missing.is_empty() || dead;
        }
        if self.liveness.any_newly_dead() {
            for m in self.liveness.take_newly_dead() {
                tracing::info!(group = %self.opts.name, member = m.0, "member gone");
                self.engine.handle_peer_down(now, m);
                if let Some(r) = self.rdmc.as_mut() {
                    r.handle_peer_down(now, m);
                }
                self.peers_missing = true;
                // Its successor is looked for later, not in the middle of
                // the view change (mapping a segment takes tens of µs).
                self.next_reconnect = Instant::now() + RECONNECT_EVERY;
                work = true;
            }
        }
        while let Some(m) = self.liveness.take_newly_up() {
            tracing::info!(group = %self.opts.name, member = m.0, "member runs again");
            self.engine.handle_peer_up(now, m);
            work = true;
        }
        while let Some(mut c) = self.fabric.poll_completion() {
            let (tag, local) = EngineTag::split(c.wr_id);
            match (tag, self.rdmc.as_mut()) {
                (EngineTag::RDMC, Some(r)) => {
                    c.wr_id = local;
                    r.handle_completion(now, c);
                }
                // A completion of a session replaced since.
                (EngineTag::RDMC, None) => {}
                _ => self.engine.handle_completion(now, c),
            }
            work = true;
        }
        self.engine.handle_timeout(now);
        work |= self.follow_view_with_rdmc(now);
        self.flush();
        work |= self.post(now);
        work || self.engine.progress() != before
    }

    /// Keeps the RDMC session in step with the view (see
    /// [`verbatim_driver::large`]).
    fn follow_view_with_rdmc(&mut self, now: u64) -> bool {
        if self.config.rdmc_slots == 0 {
            return false;
        }
        large::follow_view(
            &mut self.engine,
            &mut self.rdmc,
            &self.config,
            &self.memory,
            now,
        )
    }

    /// The RDMC session's counters, with large messages on.
    pub fn large_status(&self) -> Option<RdmcStatus> {
        self.rdmc.as_ref().map(|r| r.status())
    }

    /// The next message delivered to this member, if one is deliverable
    /// now (call [`Group::poll`] to make progress). Every member delivers
    /// the same messages in the same order in a view, and a member that
    /// installs the next view delivered exactly the ones the others did.
    pub fn next_delivery(&mut self) -> Option<Delivery<'_>> {
        if self.large_broken {
            return None;
        }
        let d = self.engine.poll_delivery(&mut self.buf)?;
        if d.sender == self.me() {
            if let Some(copy) = self.outbox.delivered((d.epoch, d.index)) {
                self.spare.push(copy);
            }
        }
        let payload = match large::take(&mut self.rdmc, &d, &mut self.large_buf) {
            None => &self.buf[..d.len],
            Some(Ok(len)) => &self.large_buf[..len],
            Some(Err(e)) => {
                // Only a member that broke the protocol gets here: nothing
                // is delivered in its place, and nothing after it.
                tracing::error!(group = %self.opts.name, sender = d.sender.0, error = ?e, "a large message in the order is not here; this member leaves the group");
                self.large_broken = true;
                // Out of the view, so that the others go on without it.
                self.engine.leave();
                return None;
            }
        };
        Some(Delivery {
            sender: d.sender,
            epoch: d.epoch,
            seq: d.seq,
            index: d.index,
            payload,
        })
    }

    /// Polls until the group formed in a view with this member, or
    /// `timeout`. Returns that view.
    pub fn wait_formed(&mut self, timeout: Duration) -> Result<View, GroupError> {
        let began = Instant::now();
        loop {
            if let Some(cause) = self.engine.halted() {
                return Err(GroupError::Halted(cause));
            }
            if self.formed() {
                return Ok(self.view());
            }
            if began.elapsed() > timeout {
                return Err(GroupError::NotFormed(timeout));
            }
            if !self.poll() {
                std::thread::yield_now();
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Peers learn we left from the notices (their holder thread ends
        // right after) or, failing that, from the pidfd of our process.
        self.liveness.stop();
        self.segment.unlink();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_all(o: &mut Outbox<u32>, epoch: u64, room: usize, next_index: &mut u64) -> usize {
        let mut left = room;
        o.flush(epoch, |_| {
            if left == 0 {
                return Err(Refused::<(), ()>::Later);
            }
            left -= 1;
            *next_index += 1;
            Ok(*next_index - 1)
        })
        .0
    }

    #[test]
    fn messages_a_trim_left_out_go_out_again_first_and_in_order() {
        let mut o = Outbox::default();
        for k in 0..5u32 {
            o.push(k);
        }
        let mut index = 0;
        // Epoch 0: messages 0..3 go out, 3 and 4 wait for the window.
        assert_eq!(send_all(&mut o, 0, 3, &mut index), 3);
        assert_eq!(o.delivered((0, 0)), Some(0));
        assert_eq!(o.len(), 4);
        // The view changes: the trim delivered 0 only; 1 and 2 go out
        // again before 3 and 4, with the new epoch's indices.
        assert_eq!(o.requeue_trimmed(1), 2);
        assert_eq!(o.requeue_trimmed(1), 0, "once");
        let mut index = 0;
        assert_eq!(send_all(&mut o, 1, 10, &mut index), 4);
        assert_eq!(o.oldest_sent(), Some(&1));
        assert_eq!(o.delivered((1, 0)), Some(1));
        assert_eq!(o.delivered((1, 1)), Some(2));
        assert_eq!(o.delivered((1, 2)), Some(3));
        assert_eq!(o.delivered((1, 3)), Some(4));
        assert!(o.is_empty());
        // A delivery of another id than held gives nothing back.
        o.push(9);
        send_all(&mut o, 1, 1, &mut index);
        assert_eq!(o.delivered((1, 3)), None);
        assert_eq!(o.len(), 1);
    }

    #[test]
    fn a_message_refused_for_good_is_given_back_and_the_rest_wait() {
        let mut o = Outbox::default();
        o.push(1u32);
        o.push(2);
        let (n, refused) = o.flush(0, |&m| {
            if m == 1 {
                Err(Refused::Never((), "halted"))
            } else {
                Ok(0)
            }
        });
        assert_eq!((n, refused), (0, Some((1, "halted"))));
        assert_eq!(o.len(), 1);
    }
}
