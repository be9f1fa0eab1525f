//! # verbatim-driver
//!
//! The one driving loop of Verbatim. The replica process (`verbatim-host`)
//! and the simulator (`verbatim-sim`) both run [`Driver::step`]: what the
//! simulator checks is the loop that ships. They differ only in what they
//! pass in: the fabric (shared memory, ibverbs, or the simulated RC
//! network), the clock (a monotonic clock, or simulated time) and the
//! [`Host`] (where client requests come from and answers go, what happens
//! with events: status and failover records in the replica, checkers in
//! the simulator).
//!
//! One step, in this order (the core's driving contract):
//!
//! 1. reap completions and hand each to the engine whose [`EngineTag`] its
//!    `wr_id` carries (the tag is added when the engine's work request is
//!    posted and removed before the engine sees the completion);
//! 2. tell every engine about peers the host saw die, and about peers
//!    that run again (a new process in a dead one's place);
//! 3. validate client requests with the service
//!    ([`StateMachine::check_request`]) and submit them to the log engine;
//! 4. run every engine (`handle_timeout`), execute its actions in order
//!    (an access change is in effect before the next action runs), route
//!    its events: replies and reads to the clients that wait for them,
//!    everything to the host;
//! 5. once more if step 4's own work requests completed already (a fabric
//!    that executes a work request as it is posted, like shared memory,
//!    has those completions ready at once; handling them in the same step
//!    saves a whole iteration on a reply's path).
//!
//! Engines: the log engine ([`Node`], DARE), the heartbeat-counter
//! engine ([`HeartbeatEngine`], uKharon §4.2) and, with views on, the
//! view engine ([`ViewEngine`], uKharon §5–6) share the fabric and the
//! loop; they talk to each other only through the driver. Between the
//! view engine and the log engine the driver passes:
//!
//! * to the view engine, the view the log engine wants (one naming this
//!   member while it leads, in its term; or, in log mode, a claim naming
//!   it in the next term, `Node::log_claim`) and whether its own acceptor
//!   memory may be trusted (not after a restart);
//! * to the log engine, every newer decided view (`Node::follow_view`:
//!   in log mode the member it names campaigns), whether views can still
//!   be decided (`Node::set_views_usable`: if not, DARE elects alone),
//!   the lease (`set_read_lease`: reads without a round) and the
//!   clearance to commit in its term (`clear_commit`), once its view is
//!   active, or once no view can be decided or renewed any more for a
//!   lease wait (`ViewEngine::fallback_allowed`).
//!
//! In primary-backup mode (`Config::mode`, issue 14) the log engine says
//! which view it needs next (`Node::pb_want`: a takeover, a member dropped
//! or added back, with the epoch it was derived from), and follows every
//! newer view the view engine knows (`Node::follow_view`): the view, not
//! an election, makes its primary lead. There is no fallback to DARE
//! alone in that mode.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod backup;
pub mod large;
pub mod restart;

use std::collections::{HashMap, VecDeque};
use verbatim_core::engine::{Engine, EngineTag};
use verbatim_core::fabric::{Action, Fabric, FabricError, MemberId};
use verbatim_core::heartbeat::{CounterEvent, HeartbeatEngine};
pub use verbatim_core::multicast::{
    McastDelivery, McastEngine, McastPersist, PersistMark, RestartPoint, RestartTail,
};
use verbatim_core::node::{Event, Role, SubmitError, Submitted};
use verbatim_core::sm::{ReadError, RequestError};
pub use verbatim_core::subgroup::SubgroupEngine;
use verbatim_core::subgroup::{subgroup_of_tag, subgroup_tag};
use verbatim_core::views::{View, ViewEngine, ViewEvent};
use verbatim_core::{Config, ConfigError, Layout, Memory, Node, StateMachine};

/// The view the log engine wants, and the epoch it was derived from (only
/// for a claim or a primary-backup view: proposed only while that epoch is
/// the newest).
fn wanted_view<M: Memory, S: StateMachine>(log: &Node<M, S>) -> (Option<View>, Option<u64>) {
    if log.config().mode.view_primary() {
        // A takeover, a member dropped or added, derived from the newest
        // view it follows.
        let (want, base) = log.pb_want();
        return (want, Some(base));
    }
    if log.role() == Role::Leader {
        // The view naming it in its term, for its lease.
        let own = View {
            leader: log.id(),
            log_term: log.term(),
            lease_ns: log.config().lease_ns,
            members: 0,
        };
        return (Some(own), None);
    }
    match log.log_claim() {
        Some((claim, base)) => (Some(claim), Some(base)),
        None => (None, None),
    }
}

/// The engines of one member.
pub struct Engines<M: Memory, S: StateMachine> {
    /// DARE's replicated log (election, replication, reads, the service).
    pub log: Box<Node<M, S>>,
    /// uKharon's heartbeat counters (second failure-detector level).
    pub heartbeat: HeartbeatEngine<M>,
    /// uKharon's views and leases (`None` with views off).
    pub views: Option<ViewEngine<M>>,
    /// Derecho's atomic multicast (`None` with multicast off, or for a
    /// member outside the multicast group).
    pub multicast: Option<McastEngine<M>>,
    /// The view's RDMC session carrying the multicast's large messages
    /// (`None` with them off, or before the multicast group formed; see
    /// [`large`]).
    pub rdmc: Option<verbatim_core::rdmc::RdmcEngine<M>>,
    /// The multicast subgroups this member belongs to (Derecho's
    /// subgroups and shards, [`verbatim_core::subgroup`]), in the
    /// configuration's order.
    pub subgroups: Vec<SubgroupEngine<M>>,
    /// MacR's backup-memory replication (`None` outside mode
    /// backup-memory): the key-value store in registered memory, which
    /// serves every client request in that mode ([`backup`]).
    pub backup: Option<verbatim_core::backup::engine::BackupEngine<M>>,
}

impl<M: Memory, S: StateMachine> Engines<M, S> {
    /// This member's engine of subgroup `index` (its place in the
    /// configuration), if it is a member.
    pub fn subgroup(&self, index: usize) -> Option<&SubgroupEngine<M>> {
        self.subgroups.iter().find(|g| g.index() == index)
    }
}

/// A client request as a gateway hands it over.
#[derive(Debug)]
pub struct Incoming<R> {
    /// The client (exactly-once sessions are per client).
    pub client_id: u64,
    /// Its request number.
    pub request_id: u64,
    /// True for an operation that goes through the log.
    pub write: bool,
    /// The service's encoding of the operation.
    pub payload: Vec<u8>,
    /// Where the answer goes (the gateway's own handle).
    pub route: R,
}

/// Why a request was refused for good (retrying it does not help).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not an operation of the service.
    Malformed,
    /// A read sent as a write or the reverse.
    WrongKind,
    /// A newer request of the same client was applied first.
    Superseded,
    /// Larger than the log's entries allow.
    TooLarge,
    /// The service could not answer the read.
    ReadFailed,
    /// The read's result is larger than the driver's read buffer.
    ResultTooLarge,
    /// An operation of another service than the key-value store, in mode
    /// backup-memory (its store holds keys and values only).
    NotInThisMode,
}

impl Refusal {
    /// The message clients see.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed operation",
            Refusal::WrongKind => {
                "malformed operation: a read sent as a write or a write as a read"
            }
            Refusal::Superseded => "superseded by a newer request",
            Refusal::TooLarge => "request too large",
            Refusal::ReadFailed => "read failed",
            Refusal::ResultTooLarge => "result too large; ask for less (e.g. XRANGE ... COUNT n)",
            Refusal::NotInThisMode => {
                "not served in mode backup-memory: its store holds keys and values (GET, SET, DEL, INCR, CAS)"
            }
        }
    }
}

/// The answer to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    /// Done: the service's reply (writes) or result (reads).
    Ok(&'a [u8]),
    /// Not the leader (any more); try the hinted member.
    NotLeader(Option<MemberId>),
    /// Try again soon (log full, leader not ready, too many reads).
    Busy,
    /// Refused for good.
    Refused(Refusal),
}

/// An engine's event, passed to the host after the driver has answered
/// the clients it concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverEvent {
    /// From the log engine.
    Log(Event),
    /// From the heartbeat engine.
    Counter(CounterEvent),
    /// From the view engine.
    View(ViewEvent),
}

/// What a driver needs from the process (or simulated process) around it.
pub trait Host<M: Memory, S: StateMachine> {
    /// The gateway's handle for answering one request.
    type Route;

    /// A peer whose process the host saw exit since the last call
    /// (death notice, pidfd, closed exchange connection).
    fn take_peer_down(&mut self) -> Option<MemberId>;

    /// A peer that was reported down runs again (a new process in its
    /// place) since the last call.
    fn take_peer_up(&mut self) -> Option<MemberId> {
        None
    }

    /// The next client request waiting, if any.
    fn next_request(&mut self) -> Option<Incoming<Self::Route>>;

    /// Delivers an answer.
    fn answer(&mut self, route: Self::Route, answer: Answer<'_>);

    /// A request's payload the driver is done with (a write once the log
    /// holds its copy, a read once answered), for the gateway to reuse:
    /// an allocation and a free per request are a visible share of a
    /// microsecond request (the leader's loop spent 15 % of its time
    /// freeing read payloads under pipelined GETs). Dropped by default.
    fn recycle(&mut self, payload: Vec<u8>) {
        drop(payload);
    }

    /// An engine event (after the driver handled the client side of it).
    fn event(&mut self, now_ns: u64, engines: &Engines<M, S>, event: DriverEvent) {
        let _ = (now_ns, engines, event);
    }

    /// A multicast message delivered (in the group's total order; nulls
    /// are never delivered). Dropped by default.
    fn multicast_delivered(&mut self, now_ns: u64, delivery: &McastDelivery, payload: &[u8]) {
        let _ = (now_ns, delivery, payload);
    }

    /// A message of subgroup `subgroup` (its place in the configuration)
    /// delivered, in the subgroup's total order (its sender a member id).
    /// Dropped by default.
    fn subgroup_delivered(
        &mut self,
        now_ns: u64,
        subgroup: usize,
        delivery: &McastDelivery,
        payload: &[u8],
    ) {
        let _ = (now_ns, subgroup, delivery, payload);
    }

    /// Persistent multicast (`mcast_persistent`): a received message to
    /// put on disk (ours included, each sender's in its order). Dropped
    /// by default.
    fn multicast_persist(&mut self, now_ns: u64, record: &McastPersist, payload: &[u8]) {
        let _ = (now_ns, record, payload);
    }

    /// Persistent multicast: `mark` covers every message handed to
    /// [`Host::multicast_persist`] so far; returns the latest mark whose
    /// sync has completed (those messages are on disk), if any. Called
    /// every step. By default everything is on disk at once (a host
    /// without a disk).
    fn multicast_sync(&mut self, now_ns: u64, mark: PersistMark) -> Option<PersistMark> {
        let _ = now_ns;
        Some(mark)
    }

    /// Persistent multicast: the multicast engine installed the view of
    /// `epoch` (`members`, a bit per member id): put its record on disk,
    /// synced, and return true (false: ask again later). Its row shows the
    /// view only then. True by default (a host without a disk).
    fn multicast_view(&mut self, now_ns: u64, epoch: u64, members: u64) -> bool {
        let _ = (now_ns, epoch, members);
        true
    }

    /// A total restart ([`McastEngine::restart`]): deliver `tail` from
    /// the host's log (each delivery on disk before the application sees
    /// it). Returns true once done (the restarted view is installed
    /// then); false to be asked again, e.g. after calling
    /// [`McastEngine::leave`] when the log cannot give it. A host that
    /// never restarts an engine is never asked.
    fn multicast_restart(&mut self, now_ns: u64, tail: &RestartTail) -> bool {
        let _ = (now_ns, tail);
        true
    }

    /// Persistent multicast: the host can no longer put messages on disk
    /// (a write or sync failed): the member leaves the group, so the
    /// others go on without it. False by default.
    fn multicast_failed(&self) -> bool {
        false
    }

    /// An action was executed on the fabric, with its result.
    fn action_executed(&mut self, action: &Action, result: Result<(), FabricError>) {
        let _ = (action, result);
    }
}

/// Why a multicast was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum McastSendError {
    /// Multicast is off (`mcast_window = 0`) or this member is outside
    /// the multicast group.
    #[error("multicast is off here: set a window, and be one of the first initial_members")]
    Off,
    /// No such subgroup, or this member is not one of its members.
    #[error("this member is not in that multicast subgroup: send on one of its members")]
    NotInSubgroup,
    /// Larger than a subgroup's slot (large messages travel only in the
    /// top-level group).
    #[error(
        "message larger than the multicast payload limit (a subgroup carries no large messages)"
    )]
    SubgroupTooLarge,
    /// The engine refused it.
    #[error("{}", match .0 {
        verbatim_core::multicast::SendError::TooLarge => "message larger than the multicast payload limit",
        verbatim_core::multicast::SendError::NotStarted => "multicast group not formed yet: a member's row was not seen, or shows other incarnations",
        verbatim_core::multicast::SendError::WindowFull => "every slot of this sender's ring is in use: try again",
        verbatim_core::multicast::SendError::Wedged => "the multicast group is changing its view (a member is gone): try again once the next view is installed",
        verbatim_core::multicast::SendError::Halted => "this member left the multicast group for good (excluded by the others or by the next view, or unable to deliver a decided trim): restart it",
    })]
    Engine(verbatim_core::multicast::SendError),
}

/// The driver's own counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// Requests refused before reaching the log (malformed, wrong kind).
    pub requests_refused: u64,
    /// Completions whose tag names no engine (never trusted).
    pub completions_unrouted: u64,
    /// Access changes executed.
    pub access_changes: u64,
    /// Fabric actions that failed.
    pub actions_failed: u64,
    /// Large multicast messages the total order delivered whose payload
    /// was not here (only a member that broke the protocol gets one; the
    /// member then leaves the multicast group instead of skipping it).
    pub large_missing: u64,
}

/// Multiplicative hasher for the pending maps: their keys are our own
/// tokens and client-chosen ids that only need spreading (SipHash is a
/// measurable share of a microsecond request), and it has no random state,
/// so the simulator iterates them in the same order on every run. A client
/// that picks colliding ids only slows its own lookups.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type FastHash = std::hash::BuildHasherDefault<FastHasher>;

/// One member's engines and the clients waiting on them.
pub struct Driver<M: Memory + Clone, S: StateMachine, R> {
    engines: Engines<M, S>,
    pending_writes: HashMap<(u64, u64), R, FastHash>,
    pending_reads: HashMap<u64, (R, Vec<u8>), FastHash>,
    next_token: u64,
    read_buf: Vec<u8>,
    reply_buf: Vec<u8>,
    counters: DriverCounters,
    /// Whether the last step did log-engine or client work.
    log_work: bool,
    /// When the heartbeat-counter engine must run next (its
    /// `next_deadline`, refreshed after every call into it): the loop
    /// skips it until then, a few nanoseconds off every iteration.
    heartbeat_due_ns: u64,
    /// The same for the view engine.
    views_due_ns: u64,
    /// The log engine's restart read-back was reported to the view engine.
    own_acceptor_reported: bool,
    /// Landing buffer of one multicast delivery.
    mcast_buf: Vec<u8>,
    /// Landing buffer of one large multicast message (empty with them
    /// off), and the memory a new RDMC session is built over.
    large_buf: Vec<u8>,
    memory: M,
    /// Requests that came while no leader was known (an election runs),
    /// with the time after which they are answered "no leader" anyway. A
    /// client told "no leader" at once backs off and turns to another
    /// member, usually away from the one about to win; held here, it is
    /// served the moment this member leads, or sent straight to the
    /// member that won.
    held: VecDeque<(u64, Incoming<R>)>,
    /// Backup-memory mode: requests in arrival order, served one write at
    /// a time by the backup engine.
    backup_queue: VecDeque<Incoming<R>>,
    /// Backup-memory mode: a key and a value (the engine's scratch).
    backup_scratch: Vec<u8>,
}

/// Requests held at most while no leader is known (beyond it, the newest
/// are answered "no leader" at once): the client slots and RESP
/// connections of one member bound it in practice.
pub const HELD_REQUESTS_MAX: usize = 4096;

impl<M: Memory + Clone, S: StateMachine, R> Driver<M, S, R> {
    /// Builds the engines over zeroed registered memory laid out by
    /// [`Layout::new`]`(&config)`. `read_bytes_max` bounds the answer of
    /// one read.
    pub fn new(
        config: Config,
        memory: M,
        service: S,
        now_ns: u64,
        read_bytes_max: usize,
    ) -> Result<Self, ConfigError> {
        let layout = Layout::new(&config)?;
        let reply_bytes_max = config.reply_bytes_max as usize;
        let heartbeat = HeartbeatEngine::new(&config, layout, memory.clone(), now_ns);
        let views = ViewEngine::new(&config, &layout, memory.clone(), now_ns);
        let multicast = McastEngine::new(&config, memory.clone(), now_ns);
        let mcast_buf = vec![0u8; layout.multicast.map_or(0, |m| m.payload_bytes_max as usize)];
        let large_buf = match (layout.multicast, layout.rdmc) {
            (Some(_), Some(r)) => vec![0u8; r.message_bytes_max as usize],
            _ => Vec::new(),
        };
        let subgroups = layout
            .subgroups
            .iter()
            .flatten()
            .filter_map(|lay| SubgroupEngine::new(&config, *lay, memory.clone(), now_ns))
            .collect();
        let backup = layout
            .backup
            .map(|lay| backup::engine_for(&config, lay, memory.clone()));
        let backup_scratch = vec![
            0u8;
            layout.backup.map_or(0, |b| {
                (b.geo.params.key_bytes_max + b.geo.params.value_bytes_max) as usize
            })
        ];
        let log = Box::new(Node::new(config, memory.clone(), service, now_ns)?);
        Ok(Driver {
            engines: Engines {
                log,
                heartbeat,
                views,
                multicast,
                rdmc: None,
                subgroups,
                backup,
            },
            pending_writes: HashMap::default(),
            pending_reads: HashMap::default(),
            next_token: 1,
            read_buf: vec![0u8; read_bytes_max],
            reply_buf: vec![0u8; reply_bytes_max],
            counters: DriverCounters::default(),
            log_work: false,
            heartbeat_due_ns: 0,
            views_due_ns: 0,
            own_acceptor_reported: false,
            mcast_buf,
            large_buf,
            memory,
            held: VecDeque::new(),
            backup_queue: VecDeque::new(),
            backup_scratch,
        })
    }

    /// The engines (status, the state machine, memory).
    pub fn engines(&self) -> &Engines<M, S> {
        &self.engines
    }

    /// The multicast engine, to restart it from a persistent log before
    /// the first step ([`McastEngine::restart`]).
    pub fn multicast_mut(&mut self) -> Option<&mut McastEngine<M>> {
        self.engines.multicast.as_mut()
    }

    /// Puts `engine` in place of the multicast engine (a simulator
    /// restarting the multicast members' processes without the log's),
    /// returning the one it replaces.
    pub fn replace_multicast(&mut self, engine: Option<McastEngine<M>>) -> Option<McastEngine<M>> {
        core::mem::replace(&mut self.engines.multicast, engine)
    }

    /// The log engine.
    pub fn log(&self) -> &Node<M, S> {
        &self.engines.log
    }

    /// The log engine, for an operator's request outside the loop's own
    /// work (a reconfiguration, DARE §3.4).
    pub fn log_mut(&mut self) -> &mut Node<M, S> {
        &mut self.engines.log
    }

    /// Multicasts `payload` to the group (Derecho's atomic multicast):
    /// every member delivers it, in the same order, through
    /// [`Host::multicast_delivered`]. Returns its index in this member's
    /// stream.
    pub fn multicast_send(&mut self, payload: &[u8]) -> Result<u64, McastSendError> {
        match &mut self.engines.multicast {
            Some(m) => {
                let config = self.engines.log.config();
                large::send(m, &mut self.engines.rdmc, config, payload)
                    .map_err(McastSendError::Engine)
            }
            None => Err(McastSendError::Off),
        }
    }

    /// Multicasts `payload` to subgroup `index` (its place in the
    /// configuration): every member of the subgroup delivers it, in the
    /// subgroup's order, through [`Host::subgroup_delivered`]. Returns its
    /// index in this member's stream of that subgroup.
    pub fn subgroup_send(&mut self, index: usize, payload: &[u8]) -> Result<u64, McastSendError> {
        let g = self
            .engines
            .subgroups
            .iter_mut()
            .find(|g| g.index() == index)
            .ok_or(McastSendError::NotInSubgroup)?;
        g.send(payload).map_err(|e| match e {
            verbatim_core::multicast::SendError::TooLarge => McastSendError::SubgroupTooLarge,
            e => McastSendError::Engine(e),
        })
    }

    /// The driver's counters.
    pub fn counters(&self) -> DriverCounters {
        self.counters
    }

    /// Requests waiting for an answer (writes, reads), those held during
    /// an election included.
    pub fn pending(&self) -> (usize, usize) {
        let held_writes = self.held.iter().filter(|(_, r)| r.write).count()
            + self.backup_queue.iter().filter(|r| r.write).count();
        let held = self.held.len() + self.backup_queue.len();
        (
            self.pending_writes.len() + held_writes,
            self.pending_reads.len() + held - held_writes,
        )
    }

    /// When [`Driver::step`] must run at the latest (engine clock).
    pub fn next_deadline(&self) -> u64 {
        let held = self.held.front().map_or(u64::MAX, |(at, _)| *at);
        let views = self
            .engines
            .views
            .as_ref()
            .map_or(u64::MAX, |v| v.next_deadline());
        self.engines
            .log
            .next_deadline()
            .min(self.engines.heartbeat.next_deadline())
            .min(views)
            .min(held)
            .min(
                self.engines
                    .multicast
                    .as_ref()
                    .map_or(u64::MAX, |m| m.next_deadline()),
            )
            .min(
                self.engines
                    .rdmc
                    .as_ref()
                    .map_or(u64::MAX, |r| r.next_deadline()),
            )
            .min(
                self.engines
                    .subgroups
                    .iter()
                    .map(|g| g.next_deadline())
                    .min()
                    .unwrap_or(u64::MAX),
            )
            .min(self.backup_deadline())
    }

    /// One iteration of the loop (see the crate documentation). Returns
    /// true when it did any work.
    pub fn step<F: Fabric, H: Host<M, S, Route = R>>(
        &mut self,
        now_ns: u64,
        fabric: &mut F,
        host: &mut H,
    ) -> bool {
        let (mut work, mut log_work) = self.reap(now_ns, fabric);
        while let Some(peer) = host.take_peer_down() {
            self.engines.log.handle_peer_down(now_ns, peer);
            self.engines.heartbeat.handle_peer_down(now_ns, peer);
            if let Some(v) = &mut self.engines.views {
                v.handle_peer_down(now_ns, peer);
            }
            if let Some(m) = &mut self.engines.multicast {
                m.handle_peer_down(now_ns, peer);
            }
            if let Some(r) = &mut self.engines.rdmc {
                r.handle_peer_down(now_ns, peer);
            }
            for g in &mut self.engines.subgroups {
                g.handle_peer_down(now_ns, peer);
            }
            if let Some(b) = &mut self.engines.backup {
                b.handle_peer_down(now_ns, peer);
            }
            self.heartbeat_due_ns = 0;
            self.views_due_ns = 0;
            log_work = true;
        }
        while let Some(peer) = host.take_peer_up() {
            Engine::handle_peer_up(&mut *self.engines.log, now_ns, peer);
            self.engines.heartbeat.handle_peer_up(now_ns, peer);
            if let Some(v) = &mut self.engines.views {
                v.handle_peer_up(now_ns, peer);
            }
            if let Some(m) = &mut self.engines.multicast {
                m.handle_peer_up(now_ns, peer);
            }
            for g in &mut self.engines.subgroups {
                g.handle_peer_up(now_ns, peer);
            }
            if let Some(b) = &mut self.engines.backup {
                b.handle_peer_up(now_ns, peer);
            }
            self.heartbeat_due_ns = 0;
            self.views_due_ns = 0;
            log_work = true;
        }
        while let Some(request) = host.next_request() {
            self.submit(now_ns, request, host);
            log_work = true;
        }
        for pass in 0..2 {
            if pass == 1 {
                // A second pass only for completions the first one's
                // posts produced (the shared-memory fabric completes at
                // once): a write's tail goes out in the same step.
                let (any, log) = self.reap(now_ns, fabric);
                if !any {
                    break;
                }
                work = true;
                log_work |= log;
            }
            if self.engines.views.is_some() {
                work |= self.step_views(now_ns, fabric, host);
            }
            self.engines.log.handle_timeout(now_ns);
            log_work |= execute(
                now_ns,
                &mut *self.engines.log,
                EngineTag::LOG,
                fabric,
                host,
                &mut self.counters,
            );
            if pass == 0 && now_ns >= self.heartbeat_due_ns {
                // Its periods are a millisecond: at most once per step,
                // and only when something is due.
                self.engines.heartbeat.handle_timeout(now_ns);
                self.heartbeat_due_ns = self.engines.heartbeat.next_deadline();
            }
            if execute(
                now_ns,
                &mut self.engines.heartbeat,
                EngineTag::HEARTBEAT,
                fabric,
                host,
                &mut self.counters,
            ) {
                // A failed post changes its state: ask it again next step.
                self.heartbeat_due_ns = 0;
                work = true;
            }
            while let Some(e) = self.engines.log.poll_event() {
                self.on_log_event(now_ns, e, host);
                log_work = true;
            }
            work |= self.step_multicast(now_ns, fabric, host);
            work |= self.step_subgroups(now_ns, fabric, host);
            if self.engines.backup.is_some() {
                log_work |= self.step_backup(now_ns, fabric, host);
            }
            while let Some(e) = self.engines.heartbeat.poll_event() {
                if let CounterEvent::Stalled { peer, .. } = e {
                    // The second detector level acts: a stalled leader is
                    // suspected (its role change comes out next pass).
                    self.engines.log.handle_peer_stalled(now_ns, peer);
                }
                host.event(now_ns, &self.engines, DriverEvent::Counter(e));
                work = true;
            }
        }
        if self.view_want_changed() {
            // A claim made in this step goes out now, not after the loop
            // has parked (a failover waited for that).
            work |= self.step_views(now_ns, fabric, host);
        }
        if !self.held.is_empty() {
            log_work |= self.release_held(now_ns, host);
        }
        self.log_work = log_work;
        work || log_work
    }

    /// Whether a request that comes now waits for the election to end
    /// rather than being answered "no leader".
    fn should_hold(&self) -> bool {
        let log = &self.engines.log;
        log.role() != Role::Leader
            && log.leader().is_none()
            && log.config().election_timeout_max_ns > 0
    }

    /// Serves the held requests once this member leads, points them to
    /// the leader once another one does, and answers "no leader" those
    /// held for longer than an election may take. Returns whether it
    /// answered or submitted any.
    fn release_held<H: Host<M, S, Route = R>>(&mut self, now_ns: u64, host: &mut H) -> bool {
        let log = &self.engines.log;
        if log.role() == Role::Leader {
            for (_, r) in std::mem::take(&mut self.held) {
                self.submit(now_ns, r, host);
            }
            return true;
        }
        if let Some(l) = log.leader() {
            for (_, r) in std::mem::take(&mut self.held) {
                host.answer(r.route, Answer::NotLeader(Some(l)));
                host.recycle(r.payload);
            }
            return true;
        }
        let mut any = false;
        while self.held.front().is_some_and(|(at, _)| *at <= now_ns) {
            let (_, r) = self.held.pop_front().expect("front checked");
            host.answer(r.route, Answer::NotLeader(None));
            host.recycle(r.payload);
            any = true;
        }
        any
    }

    /// Runs the multicast engine: observes rings and rows, hands every
    /// deliverable message to the host, posts WRITEs. Returns whether it
    /// did any work.
    fn step_multicast<F: Fabric, H: Host<M, S, Route = R>>(
        &mut self,
        now_ns: u64,
        fabric: &mut F,
        host: &mut H,
    ) -> bool {
        let Some(m) = self.engines.multicast.as_mut() else {
            return false;
        };
        let before = m.progress();
        m.handle_timeout(now_ns);
        if m.persistent() {
            // Derecho's persistent mode: what arrived goes to disk; a
            // message is locally stable (and may become deliverable) once
            // the host's sync covering it completed.
            while let Some(r) = m.poll_persist(&mut self.mcast_buf) {
                host.multicast_persist(now_ns, &r, &self.mcast_buf[..r.len]);
            }
            if let Some(done) = host.multicast_sync(now_ns, m.persist_mark()) {
                m.mark_persisted(done);
            }
            if let Some((epoch, members)) = m.view_to_persist() {
                if host.multicast_view(now_ns, epoch, members) {
                    m.view_persisted(epoch);
                }
            }
            if host.multicast_failed() && m.halted().is_none() {
                m.leave();
            }
        }
        if let Some(tail) = m.restart_tail() {
            if host.multicast_restart(now_ns, &tail) {
                m.restart_delivered();
            }
        }
        let config = self.engines.log.config();
        let mut work = large::follow_view(m, &mut self.engines.rdmc, config, &self.memory, now_ns);
        while let Some(d) = m.poll_delivery(&mut self.mcast_buf) {
            match large::take(&mut self.engines.rdmc, &d, &mut self.large_buf) {
                None => host.multicast_delivered(now_ns, &d, &self.mcast_buf[..d.len]),
                Some(Ok(len)) => host.multicast_delivered(now_ns, &d, &self.large_buf[..len]),
                Some(Err(e)) => {
                    // Nothing is delivered in its place: this member
                    // leaves the group (the others remove it).
                    tracing::error!(sender = d.sender.0, epoch = d.epoch, error = ?e, "a large multicast message in the order is not here; leaving the multicast group");
                    self.counters.large_missing += 1;
                    m.leave();
                    break;
                }
            }
        }
        work |= execute(
            now_ns,
            m,
            EngineTag::MULTICAST,
            fabric,
            host,
            &mut self.counters,
        );
        if let Some(r) = self.engines.rdmc.as_mut() {
            work |= execute(now_ns, r, EngineTag::RDMC, fabric, host, &mut self.counters);
        }
        work || m.progress() != before
    }

    /// Runs every subgroup engine of this member: deliveries to the host,
    /// then WRITEs. Returns whether any did work.
    fn step_subgroups<F: Fabric, H: Host<M, S, Route = R>>(
        &mut self,
        now_ns: u64,
        fabric: &mut F,
        host: &mut H,
    ) -> bool {
        let mut work = false;
        // Subgroups follow the top-level group's decided views (Derecho:
        // the top-level view ends the subgroups' epochs); a member the
        // top-level group excluded leaves its subgroups too.
        let top = self.engines.multicast.as_ref();
        let top_view = top.and_then(|m| m.installed_view());
        let top_halted = top.is_some_and(|m| m.halted().is_some());
        for g in &mut self.engines.subgroups {
            let before = g.engine().progress();
            if let (Some(view), Some(m)) = (top_view, top) {
                g.follow_parent(view, |id| m.pinned_incarnation(id));
            } else if top_halted && g.engine().halted().is_none() {
                g.engine_mut().leave();
            }
            g.handle_timeout(now_ns);
            while let Some(d) = g.poll_delivery(&mut self.mcast_buf) {
                host.subgroup_delivered(now_ns, g.index(), &d, &self.mcast_buf[..d.len]);
            }
            let tag = subgroup_tag(g.index());
            work |= execute(now_ns, g, tag, fabric, host, &mut self.counters);
            work |= g.engine().progress() != before;
        }
        work
    }

    /// Whether the log engine now wants another view than the view engine
    /// was told (it claimed in its own step, after the view engine ran).
    fn view_want_changed(&self) -> bool {
        self.engines.views.as_ref().is_some_and(|views| {
            let (want, base) = wanted_view(&self.engines.log);
            views.wanted() != want || views.wanted_base() != base
        })
    }

    /// Runs the view engine when due and passes what it knows between it
    /// and the log engine (see the crate documentation). Returns whether
    /// it did any work.
    fn step_views<F: Fabric, H: Host<M, S, Route = R>>(
        &mut self,
        now_ns: u64,
        fabric: &mut F,
        host: &mut H,
    ) -> bool {
        let Some(views) = self.engines.views.as_mut() else {
            return false;
        };
        let log = &mut self.engines.log;
        if !self.own_acceptor_reported {
            if let Some(new_process) = log.known_new_process() {
                // A previous incarnation's row was found: our acceptor
                // memory lost its promises. Otherwise it is trusted once a
                // restart would find our row.
                self.own_acceptor_reported = true;
                views.trust_own_acceptor(now_ns, new_process);
                self.views_due_ns = 0;
            }
        }
        let primary_backup = log.config().mode.view_primary();
        if !primary_backup {
            // Log mode: while views can be decided, they decide who
            // campaigns (a claim).
            // (Not by a member whose engine proposes no more.)
            log.set_views_usable(!views.fallback_allowed(now_ns) && views.can_propose());
        }
        let (want, base) = wanted_view(log);
        if views.wanted() != want || views.wanted_base() != base {
            match base {
                Some(b) => views.want_view_based(now_ns, want, b),
                None => views.want_view(now_ns, want),
            }
            self.views_due_ns = 0;
        }
        if now_ns >= self.views_due_ns {
            views.handle_timeout(now_ns);
            self.views_due_ns = views.next_deadline();
        }
        let mut any = execute(
            now_ns,
            views,
            EngineTag::VIEWS,
            fabric,
            host,
            &mut self.counters,
        );
        if any {
            self.views_due_ns = 0;
        }
        while let Some(e) = self.engines.views.as_mut().and_then(|v| v.poll_event()) {
            any = true;
            host.event(now_ns, &self.engines, DriverEvent::View(e));
        }
        let views = self.engines.views.as_ref().expect("checked above");
        let log = &mut self.engines.log;
        if let Some((epoch, view)) = views.latest() {
            if log.followed_view().is_none_or(|(e, _)| e < epoch) {
                // Who leads, in which term (who campaigns, in log mode),
                // and whose copy counts (a member still reading its row
                // back follows it later).
                log.follow_view(now_ns, epoch, view);
                any |= log.followed_view().is_some_and(|(e, _)| e == epoch);
            }
        }
        let term = log.term();
        match views.leased(now_ns) {
            Some((_, v, end_ns)) if v.leader == log.id() && v.log_term == term => {
                log.set_read_lease(term, end_ns);
                log.clear_commit(term);
            }
            _ => {
                log.set_read_lease(0, 0);
                if !primary_backup && views.fallback_allowed(now_ns) {
                    // No view can be decided or lease renewed any more (a
                    // majority of coordinators gone): DARE's own rules
                    // alone, as without views.
                    log.clear_commit(term);
                }
            }
        }
        any
    }

    /// Whether the last [`Driver::step`] did log-engine or client work
    /// (requests, log completions, actions or events, a peer down or up).
    /// The heartbeat-counter engine's periodic reads alone do not count:
    /// a parked loop that wakes for them should park again at once rather
    /// than spin as after client work (on a core shared with a busy
    /// leader, every follower spin is time taken from it).
    pub fn last_step_log_work(&self) -> bool {
        self.log_work
    }

    /// Answers every waiting client "not the leader" (the process stops;
    /// clients fail over instead of timing out).
    pub fn abandon_pending<H: Host<M, S, Route = R>>(&mut self, host: &mut H) {
        for (_, r) in std::mem::take(&mut self.held) {
            host.answer(r.route, Answer::NotLeader(None));
            host.recycle(r.payload);
        }
        for (_, route) in std::mem::take(&mut self.pending_writes) {
            host.answer(route, Answer::NotLeader(None));
        }
        for (_, (route, query)) in std::mem::take(&mut self.pending_reads) {
            host.answer(route, Answer::NotLeader(None));
            host.recycle(query);
        }
        for r in std::mem::take(&mut self.backup_queue) {
            host.answer(r.route, Answer::NotLeader(None));
            host.recycle(r.payload);
        }
    }

    /// Reaps every completion and routes it by its engine tag. Returns
    /// whether there was any, and whether any was the log engine's.
    fn reap<F: Fabric>(&mut self, now_ns: u64, fabric: &mut F) -> (bool, bool) {
        let (mut any, mut log) = (false, false);
        while let Some(mut c) = fabric.poll_completion() {
            any = true;
            let (tag, local) = EngineTag::split(c.wr_id);
            c.wr_id = local;
            match tag {
                EngineTag::LOG => {
                    log = true;
                    self.engines.log.handle_completion(now_ns, c)
                }
                EngineTag::HEARTBEAT => {
                    self.engines.heartbeat.handle_completion(now_ns, c);
                    self.heartbeat_due_ns = 0;
                }
                EngineTag::VIEWS => match &mut self.engines.views {
                    Some(v) => {
                        v.handle_completion(now_ns, c);
                        self.views_due_ns = 0;
                    }
                    None => self.counters.completions_unrouted += 1,
                },
                EngineTag::MULTICAST => match &mut self.engines.multicast {
                    Some(m) => m.handle_completion(now_ns, c),
                    None => self.counters.completions_unrouted += 1,
                },
                // (A completion of a session replaced since is dropped
                // with it.)
                EngineTag::RDMC => match &mut self.engines.rdmc {
                    Some(r) => r.handle_completion(now_ns, c),
                    None => self.counters.completions_unrouted += 1,
                },
                EngineTag::BACKUP => match &mut self.engines.backup {
                    Some(b) => {
                        log = true;
                        b.handle_completion(now_ns, c)
                    }
                    None => self.counters.completions_unrouted += 1,
                },
                t => match subgroup_of_tag(t)
                    .and_then(|i| self.engines.subgroups.iter_mut().find(|g| g.index() == i))
                {
                    Some(g) => g.handle_completion(now_ns, c),
                    None => self.counters.completions_unrouted += 1,
                },
            }
        }
        (any, log)
    }

    /// Validates one request with the service and submits it (DARE §3.3).
    fn submit<H: Host<M, S, Route = R>>(&mut self, now_ns: u64, r: Incoming<R>, host: &mut H) {
        if self.engines.backup.is_some() {
            self.submit_backup(r, host);
            return;
        }
        if self.should_hold() && self.held.len() < HELD_REQUESTS_MAX {
            // Checked when the election ends (end of `step`), or answered
            // "no leader" after the longest election timeout.
            let until = now_ns.saturating_add(self.engines.log.config().election_timeout_max_ns);
            self.held.push_back((until, r));
            return;
        }
        let log = &mut self.engines.log;
        if let Err(e) = log.state_machine().check_request(&r.payload, r.write) {
            // Refused before it reaches the log: a malformed operation must
            // not become a committed entry.
            self.counters.requests_refused += 1;
            let why = match e {
                RequestError::Malformed => Refusal::Malformed,
                RequestError::WrongKind => Refusal::WrongKind,
            };
            host.answer(r.route, Answer::Refused(why));
            host.recycle(r.payload);
            return;
        }
        if r.write {
            match log.submit_write(now_ns, r.client_id, r.request_id, &r.payload) {
                Ok(Submitted::Appended { .. }) => {
                    // A retry replaces the route: the latest asker is
                    // answered. The earlier one gave up on this attempt,
                    // and may share the latest one's slot, so it is not
                    // answered at all.
                    self.pending_writes
                        .insert((r.client_id, r.request_id), r.route);
                }
                Ok(Submitted::Duplicate { stage }) => {
                    let n = log.copy_reply(stage, &mut self.reply_buf);
                    host.answer(r.route, Answer::Ok(&self.reply_buf[..n]))
                }
                Err(SubmitError::NotLeader { leader }) => {
                    host.answer(r.route, Answer::NotLeader(leader))
                }
                Err(SubmitError::Stale) => {
                    host.answer(r.route, Answer::Refused(Refusal::Superseded))
                }
                Err(SubmitError::TooLarge) => {
                    host.answer(r.route, Answer::Refused(Refusal::TooLarge))
                }
                Err(SubmitError::LogFull | SubmitError::NotReady | SubmitError::ReadQueueFull) => {
                    host.answer(r.route, Answer::Busy)
                }
            }
            // The log holds its own copy (or refused it).
            host.recycle(r.payload);
        } else {
            let token = self.next_token;
            self.next_token += 1;
            let refused = match log.submit_read(now_ns, token) {
                Ok(()) => {
                    self.pending_reads.insert(token, (r.route, r.payload));
                    return;
                }
                Err(SubmitError::NotLeader { leader }) => Answer::NotLeader(leader),
                Err(_) => Answer::Busy,
            };
            host.answer(r.route, refused);
            host.recycle(r.payload);
        }
    }

    fn on_log_event<H: Host<M, S, Route = R>>(&mut self, now_ns: u64, e: Event, host: &mut H) {
        match e {
            Event::Reply {
                client_id,
                request_id,
                stage,
                stale,
                ..
            } => {
                if let Some(route) = self.pending_writes.remove(&(client_id, request_id)) {
                    if stale {
                        host.answer(route, Answer::Refused(Refusal::Superseded));
                    } else {
                        let n = self.engines.log.copy_reply(stage, &mut self.reply_buf);
                        host.answer(route, Answer::Ok(&self.reply_buf[..n]));
                    }
                }
            }
            Event::ReadReady { token } => {
                if let Some((route, query)) = self.pending_reads.remove(&token) {
                    let sm = self.engines.log.state_machine();
                    match sm.read(&query, &mut self.read_buf) {
                        // Straight from the read buffer to the gateway.
                        Ok(n) => host.answer(route, Answer::Ok(&self.read_buf[..n])),
                        Err(ReadError::OutputTooSmall) => {
                            host.answer(route, Answer::Refused(Refusal::ResultTooLarge))
                        }
                        Err(e) => {
                            tracing::warn!(?e, "a read the service accepted could not be answered");
                            host.answer(route, Answer::Refused(Refusal::ReadFailed))
                        }
                    }
                    host.recycle(query);
                }
            }
            Event::ReadAborted { token } => {
                if let Some((route, query)) = self.pending_reads.remove(&token) {
                    host.answer(route, Answer::NotLeader(None));
                    host.recycle(query);
                }
            }
            // Our pending writes may still commit under the next leader;
            // clients retry there (exactly-once).
            Event::RoleChanged { role, leader, .. } if role != Role::Leader => {
                let me = self.engines.log.id();
                let hint = leader.filter(|&l| l != me);
                for (_, route) in std::mem::take(&mut self.pending_writes) {
                    host.answer(route, Answer::NotLeader(hint));
                }
            }
            _ => {}
        }
        host.event(now_ns, &self.engines, DriverEvent::Log(e));
    }
}

/// Drains one engine's actions into the fabric, in order, with the
/// engine's tag on every work request; a failed action goes back to its
/// engine at once (a revoke that did not take effect must be known before
/// the engine's next step relies on it).
fn execute<E: Engine, F: Fabric, M: Memory, S: StateMachine, H: Host<M, S>>(
    now_ns: u64,
    engine: &mut E,
    tag: EngineTag,
    fabric: &mut F,
    host: &mut H,
    counters: &mut DriverCounters,
) -> bool {
    let mut any = false;
    while let Some(action) = engine.poll_action() {
        any = true;
        let action = match action {
            Action::Post(mut wr) => {
                wr.wr_id = tag.tag(wr.wr_id);
                Action::Post(wr)
            }
            other => other,
        };
        let result = fabric.execute(&action);
        if let Action::SetAccess { .. } = action {
            counters.access_changes += 1;
        }
        if let Err(e) = result {
            // Reconnecting to a peer whose process is gone fails until it
            // is replaced (the engine backs off); a revoke that could not
            // be confirmed is retried by the engine.
            counters.actions_failed += 1;
            if e == FabricError::RevokeUnconfirmed {
                // The fabric warns once per episode; the engine retries
                // every iteration.
                tracing::debug!(engine = engine.name(), ?action, "revoke not confirmed yet");
            } else {
                tracing::debug!(engine = engine.name(), ?action, ?e, "fabric action failed");
            }
            engine.handle_action_failed(now_ns, &action, e);
        }
        host.action_executed(&action, result);
    }
    any
}
