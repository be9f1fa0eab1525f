//! The replica process: the engines (through `verbatim-driver`, the one
//! driving loop the simulator runs too), its shared-memory segment and
//! fabric, the client paths (shared-memory slots, RESP over TCP), the
//! status endpoint, and the poll loop that calls the driver and parks or
//! spins between steps.

pub mod failover;
pub mod mcast_log;
pub mod snapshot;
pub mod status_server;
pub mod storage;

use crate::fabric::liveness::{spawn_watcher, DeathSeen, PeerLiveness};
use crate::fabric::shm::{Segment, ShmFabric, ShmMemory};
use crate::fabric::HostFabric;
use crate::gateway::queue::{
    PublishRequest, ServiceHandle, ServiceQueue, ServiceReply, ServiceRequest,
};
use crate::group::{Outbox, Refused};
use crate::replica::failover::FailoverTracker;
use crate::replica::status_server::{MemberRequest, StatusServer, StatusSlot};
use crate::replica::storage::{HashBackend, StreamMap};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use verbatim_client::manifest::{Manifest, PollMode};
use verbatim_client::notice::{notice_path, DeathNotices};
use verbatim_client::slots::{SlotKind, SlotRequest, SlotSegment, SlotServer, SlotStatus};
use verbatim_core::fabric::MemberId;
use verbatim_core::heartbeat::CounterEvent;
use verbatim_core::kv::KvStateMachine;
use verbatim_core::membership::{ConfigState, Configuration};
use verbatim_core::multicast::SendError as McastError;
use verbatim_core::node::{Event, ReplState, Role};
use verbatim_core::node::{ReconfigError, ReconfigOp};
use verbatim_core::service::KvAndStreams;
use verbatim_core::stream::StreamStateMachine;
use verbatim_core::Layout;
use verbatim_driver::{
    Answer, Driver, DriverEvent, Engines, Host, Incoming, McastDelivery, McastPersist,
    McastSendError, PersistMark, RestartTail,
};
use verbatim_status::{
    ConfigSnapshot, EventRecord, GroupConfiguration, LatencySummary, LogPointers, MemberChange,
    MemberReply, PeerSnapshot, Percentiles, Snapshot, STATUS_VERSION,
};

/// Keys a replica holds at most (the store answers "full" beyond).
pub const KEYS_MAX_DEFAULT: usize = 10_000_000;
/// Events kept for the status endpoint.
const EVENTS_KEPT: usize = 64;
/// How often the poll loop publishes a status snapshot.
const STATUS_PERIOD: Duration = Duration::from_millis(50);
/// Latency window of the status summary.
const LATENCY_WINDOW: Duration = Duration::from_secs(1);
/// Longest sleep of an adaptive poll loop (it also wakes on its doorbell).
const PARK_MAX: Duration = Duration::from_millis(20);
/// Scheduler slice asked for a poll loop that parks (the kernel's minimum
/// is 100 µs).
const POLL_SLICE_NS: u64 = 100_000;

/// Why a replica could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The configuration is wrong.
    #[error("configuration: {0}")]
    Config(String),
    /// The shared-memory segment could not be set up.
    #[error(transparent)]
    Shm(#[from] verbatim_client::error::ShmError),
    /// A socket or thread could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// What failed.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// How to run one replica.
#[derive(Clone, Debug)]
pub struct ReplicaOptions {
    /// The cluster manifest (overrides applied).
    pub manifest: Manifest,
    /// This member.
    pub id: u8,
    /// How long to wait for every peer's segment before starting anyway.
    pub connect_timeout: Duration,
    /// Store bound.
    pub keys_max: usize,
    /// Run the host checks of `verbatim-kernel-cfg` at start (warnings only).
    pub kernel_checks: bool,
}

/// The replica's services: the key-value store and the streams.
/// Smallest buffer for one read's result.
const READ_RESULT_BYTES_MIN: usize = 1 << 20;

type Kv = KvAndStreams<KvStateMachine<HashBackend>, StreamStateMachine<StreamMap>>;
/// Requests taken from the RESP threads' queue in one step at most (the
/// rest wait for the next step, so a flood cannot hold the loop).
const QUEUE_REQUESTS_PER_STEP: usize = 1024;
/// Publications taken from the RESP server per step at most.
const PUBLISH_PER_STEP_MAX: usize = 256;

enum Route {
    Slot {
        slot: u64,
        seq: u64,
    },
    Channel {
        tx: std::sync::mpsc::Sender<(u64, ServiceReply)>,
        tag: u64,
    },
}

/// Where an answer goes, and what the latency histogram needs.
struct HostRoute {
    to: Route,
    arrived: Instant,
    write: bool,
}

struct Latency {
    writes: hdrhistogram::Histogram<u64>,
    reads: hdrhistogram::Histogram<u64>,
    window_start: Instant,
    last: LatencySummary,
}

impl Latency {
    fn new() -> Latency {
        Latency {
            writes: hdrhistogram::Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("valid bounds"),
            reads: hdrhistogram::Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("valid bounds"),
            window_start: Instant::now(),
            last: LatencySummary::default(),
        }
    }

    fn record(&mut self, write: bool, ns: u64) {
        let h = if write {
            &mut self.writes
        } else {
            &mut self.reads
        };
        let _ = h.record(ns.max(1));
    }

    fn roll(&mut self, now: Instant) {
        let elapsed = now.duration_since(self.window_start);
        if elapsed < LATENCY_WINDOW {
            return;
        }
        let p = |h: &hdrhistogram::Histogram<u64>| Percentiles {
            count: h.len(),
            p50_ns: if h.is_empty() {
                0
            } else {
                h.value_at_quantile(0.5)
            },
            p99_ns: if h.is_empty() {
                0
            } else {
                h.value_at_quantile(0.99)
            },
            max_ns: if h.is_empty() { 0 } else { h.max() },
        };
        self.last = LatencySummary {
            window_ms: elapsed.as_millis() as u64,
            writes: p(&self.writes),
            reads: p(&self.reads),
            ops_per_sec: (self.writes.len() + self.reads.len()) as f64 / elapsed.as_secs_f64(),
        };
        self.writes.reset();
        self.reads.reset();
        self.window_start = now;
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Everything the poll loop owns.
struct Replica<F: HostFabric> {
    opts: ReplicaOptions,
    id: MemberId,
    layout: Layout,
    driver: Driver<ShmMemory, Kv, HostRoute>,
    fabric: F,
    gw: Gateway,
    segment: Arc<Segment>,
    clock: Instant,
    started: Instant,
    status: Arc<StatusSlot>,
    numa_node: Option<usize>,
    last_granted: Option<MemberId>,
    /// Iterations of the poll loop (status counter `loop_iterations`: its
    /// rate against the request rate shows the loop's own cost).
    loop_iterations: u64,
}

/// The replica process as the driver sees it ([`Host`]): the client
/// gateways (shared-memory slots, the RESP threads' queue), process-exit
/// notifications, and what becomes status (events, failovers, latency).
struct Gateway {
    id: MemberId,
    slots: SlotServer,
    queue: ServiceQueue,
    liveness: Arc<PeerLiveness>,
    /// Slot requests taken this step, answered in order.
    slot_buf: VecDeque<SlotRequest>,
    /// Reused buffer `take_pending` fills (no allocation per step).
    slot_taken: Vec<SlotRequest>,
    slots_taken: bool,
    queue_taken: usize,
    /// Peers reported dead, not yet handed to the driver.
    dead_buf: Vec<MemberId>,
    /// When this step's requests arrived (one clock read per step).
    step_started: Instant,
    failovers: FailoverTracker,
    events: VecDeque<EventRecord>,
    latency: Latency,
    host_counters: BTreeMap<&'static str, u64>,
    last_role: Role,
    /// The node's `counter_suspicions` at the last role change: a leader
    /// lost while it moved is recorded as detected by "counter".
    counter_suspicions_seen: u64,
    /// How a donor writes its state machine's snapshot.
    snapshot_writer: snapshot::SnapshotWriter,
    /// The operator's change of the group this leader carries out, and
    /// where its confirmation goes once the last CONFIG entry commits.
    member_waiting: Option<(ReconfigOp, std::sync::mpsc::Sender<MemberReply>)>,
    /// Publications not multicast yet (the window was full), in order,
    /// and those multicast, answered once this replica delivers them.
    publications: Outbox<PublishRequest>,
    /// The same per multicast subgroup this replica is in (by the
    /// subgroup's place in the configuration).
    subgroup_publications: BTreeMap<usize, Outbox<PublishRequest>>,
    /// The subgroups' names (their channels), by place.
    subgroup_names: Vec<String>,
    /// The multicast epoch last seen, and when (CLOCK_MONOTONIC ns) this
    /// replica was seen in it after a view change.
    mcast_epoch_seen: u64,
    mcast_installed_mono_ns: Option<u64>,
    /// The multicast log (`[multicast] persistent`).
    mcast_log: Option<mcast_log::McastLog>,
    /// A write or sync of it failed: nothing more counts as on disk, and
    /// the replica leaves the multicast group (the others go on without
    /// it rather than wait for counts it will never raise).
    mcast_log_failed: bool,
    /// What the multicast log held at start, until a total restart
    /// delivered its tail.
    mcast_recovered: Option<mcast_log::Recovered>,
}

impl Gateway {
    /// A multicast delivery goes to the channel's subscribers, and answers
    /// our own PUBLISH (`subgroup`: the subgroup it was delivered in).
    fn deliver_publication(&mut self, subgroup: Option<usize>, d: &McastDelivery, payload: &[u8]) {
        let reached = match verbatim_client::pubsub::decode(payload) {
            Some((channel, message)) => self.queue.subscribers().deliver(channel, message),
            None => {
                self.count("multicast_not_publications");
                0
            }
        };
        if d.sender == self.id {
            let outbox = match subgroup {
                None => Some(&mut self.publications),
                Some(i) => self.subgroup_publications.get_mut(&i),
            };
            if let Some(p) = outbox.and_then(|o| o.delivered((d.epoch, d.index))) {
                let _ = p
                    .reply
                    .send((p.tag, ServiceReply::Ok(reached.to_le_bytes().to_vec())));
            }
        }
    }

    /// A multicast log operation failed: said once, and the log is no
    /// longer trusted.
    fn mcast_log_error(&mut self, what: &str, e: std::io::Error) {
        if !self.mcast_log_failed {
            let path = self
                .mcast_log
                .as_ref()
                .map(|l| l.path().display().to_string())
                .unwrap_or_default();
            tracing::error!(path, error = %e, "multicast log {what} failed: this replica leaves the multicast group (the others go on without it); fix the disk and restart the replica");
            self.event(
                "multicast-log-failed",
                format!("multicast log {what} failed: {e}"),
            );
        }
        self.mcast_log_failed = true;
    }
    fn event(&mut self, kind: &str, detail: String) {
        tracing::info!(kind, %detail, "event");
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(EventRecord {
            at_unix_ms: unix_ms(),
            kind: kind.to_string(),
            detail,
        });
    }

    fn count(&mut self, name: &'static str) {
        *self.host_counters.entry(name).or_insert(0) += 1;
    }

    /// A new step: slot requests are taken once per step, and the queue
    /// is drained up to a bound.
    fn begin_step(&mut self, now: Instant) {
        self.step_started = now;
        self.slots_taken = false;
        self.queue_taken = 0;
    }

    fn on_log_event(&mut self, now: u64, engines: &Engines<ShmMemory, Kv>, e: Event) {
        match e {
            // Answered by the driver.
            Event::Reply { .. } | Event::ReadReady { .. } | Event::ReadAborted { .. } => {}
            Event::RoleChanged { role, term, leader } => {
                // For clients waiting on a replica that stopped: who leads
                // in which term, as this replica sees it.
                let hint = if role == Role::Leader {
                    Some(self.id)
                } else {
                    leader
                };
                self.slots.segment().set_leader_hint(term, hint);
                let st = engines.log.status();
                if self.last_role == Role::Follower && role != Role::Leader && leader.is_none() {
                    // We stopped trusting our leader: heartbeat silence, or
                    // its process exited (death notice or pidfd).
                    if let Some(old) = failovers_leader(&st, self.id) {
                        let died = self.liveness.died_at_ns(MemberId(old));
                        let liveness = &self.liveness;
                        // Suspected by its stalled counter only if the
                        // node says so (its count moved with this change),
                        // not because a stall was reported at some point.
                        let counted = engines.log.counters().counter_suspicions;
                        let by_counter = counted > self.counter_suspicions_seen;
                        // Since when, as the heartbeat engine saw it.
                        let counter = engines.heartbeat.peer(MemberId(old));
                        let stalled = counter.stalled.then_some(counter.counter_since_ns);
                        let (lost, by) = if liveness.is_dead(MemberId(old)) && died > 0 {
                            let how = liveness.death_seen_by(MemberId(old));
                            (died, how.map_or("pidfd", DeathSeen::label))
                        } else if by_counter {
                            (stalled.unwrap_or(now), "counter")
                        } else {
                            (st.peers[usize::from(old)].row_changed_ns, "heartbeat")
                        };
                        self.failovers.suspected(now, lost, by);
                    }
                }
                self.counter_suspicions_seen = engines.log.counters().counter_suspicions;
                if role == Role::Candidate {
                    self.failovers.suspected(now, now, "vote");
                }
                self.failovers.role_changed(
                    now,
                    unix_ms(),
                    (role == Role::Leader).then_some(if engines.log.leads_by_view() {
                        "view"
                    } else {
                        "election"
                    }),
                    term,
                    leader.map(|l| l.0),
                    st.commit_index,
                );
                {
                    let detail = match role {
                        Role::Leader => format!("member {} leads term {term}", self.id.0),
                        Role::Candidate => {
                            format!("member {} is a candidate for term {term}", self.id.0)
                        }
                        Role::Follower => match leader {
                            Some(l) => {
                                format!("member {} follows {} in term {term}", self.id.0, l.0)
                            }
                            None => format!("member {} has no leader in term {term}", self.id.0),
                        },
                    };
                    self.event("leader-change", detail);
                }
                self.last_role = role;
                if role != Role::Leader {
                    if let Some((op, reply)) = self.member_waiting.take() {
                        let _ = reply.send(MemberReply {
                            error: Some(format!(
                                "{op:?} started, but member {} lost leadership before it committed; \
                                 the next leader finishes it",
                                self.id.0
                            )),
                            leader: leader.map(|l| l.0),
                            interrupted: true,
                            ..MemberReply::default()
                        });
                    }
                }
            }
            Event::LogFull => self.event(
                "log-full",
                "the log is full; writes wait for pruning".into(),
            ),
            Event::PeerUnreachable { peer } => {
                self.event("replica-lost", format!("member {} unreachable", peer.0))
            }
            Event::PeerReachable { peer } => {
                self.event("replica-back", format!("member {} answers again", peer.0))
            }
            Event::PeerNeedsRecovery { peer } => self.event(
                "needs-recovery",
                format!(
                    "member {} is behind the pruned log and needs state transfer",
                    peer.0
                ),
            ),
            Event::RecoveryHoldReleased { peer, held_bytes } => {
                tracing::warn!(
                    member = peer.0,
                    held_bytes,
                    "pruned past a recovering member's snapshot: its transfer would have \
                     filled the log; it recovers again. If this repeats, raise \
                     cluster.log_ring_bytes to hold the writes of one transfer"
                );
                self.event(
                    "recovery-outrun",
                    format!(
                        "member {}'s transfer outran the log ({} MiB held, over \
                         cluster.recovery_log_hold_percent of the ring): it recovers again \
                         from a newer snapshot",
                        peer.0,
                        held_bytes >> 20
                    ),
                );
            }
            Event::LogCorrupt { pos } => {
                tracing::error!(
                    pos,
                    "a committed log entry failed validation; this replica stops applying"
                );
                self.event(
                    "log-corrupt",
                    format!("committed entry at position {pos} failed validation"),
                );
            }
            Event::SnapshotWanted { generation } => {
                let log = &engines.log;
                match snapshot::run(self.snapshot_writer, || {
                    let _ = log.write_snapshot();
                }) {
                    Ok(()) => self.event(
                        "snapshot-served",
                        format!("a snapshot for a recovering member (request {generation})"),
                    ),
                    Err(e) => {
                        // The recovering member times out and asks again.
                        tracing::warn!(error = %e, "could not start the snapshot writer");
                    }
                }
            }
            Event::Recovered { apply_index, bytes } => self.event(
                "recovered",
                format!(
                    "member {} restored a snapshot up to index {apply_index} ({bytes} bytes) and rejoins",
                    self.id.0
                ),
            ),
            Event::ConfigurationChanged {
                configuration,
                index,
            } => self.event(
                "configuration",
                format!(
                    "member {} goes by {} (entry {index})",
                    self.id.0,
                    group_configuration(&configuration, index, false, self.id, false).describe()
                ),
            ),
            Event::ConfigurationApplied {
                configuration,
                index,
            } => tracing::debug!(
                member = self.id.0,
                index,
                configuration = %group_configuration(&configuration, index, true, self.id, false).describe(),
                "configuration committed"
            ),
            Event::Reconfigured { op, configuration } => {
                let log = &engines.log;
                let group = group_configuration(
                    &configuration,
                    log.config_index(),
                    true,
                    self.id,
                    false,
                );
                self.event(
                    "reconfigured",
                    format!("{op:?} done: the group is {}", group.describe()),
                );
                if let Some((waiting, reply)) = self.member_waiting.take() {
                    if waiting == op {
                        let _ = reply.send(MemberReply {
                            configuration: Some(group),
                            ..MemberReply::default()
                        });
                    } else {
                        self.member_waiting = Some((waiting, reply));
                    }
                }
            }
        }
    }

    fn on_counter_event(&mut self, e: CounterEvent) {
        match e {
            CounterEvent::Stalled { peer, counter, .. } => {
                self.count("counter_stalls");
                self.event(
                    "counter-stalled",
                    format!(
                        "member {} has not incremented its heartbeat counter (stuck at {counter}): stopped, or stuck in the kernel",
                        peer.0
                    ),
                );
            }
            CounterEvent::Resumed { peer } => self.event(
                "counter-resumed",
                format!("member {} increments its heartbeat counter again", peer.0),
            ),
        }
    }
}

/// The leader we followed most recently (for failover timing): the row of
/// each peer says whether it led; the freshest leader row that is not us
/// is the one we lost.
fn failovers_leader(st: &verbatim_core::NodeStatus, me: MemberId) -> Option<u8> {
    (0..st.member_count)
        .filter(|&m| m != me.0)
        .filter(|&m| st.peers[usize::from(m)].row.role == verbatim_core::sst::RoleCode::Leader)
        .max_by_key(|&m| st.peers[usize::from(m)].row.term)
}

impl Host<ShmMemory, Kv> for Gateway {
    type Route = HostRoute;

    fn take_peer_up(&mut self) -> Option<MemberId> {
        let peer = self.liveness.take_newly_up()?;
        tracing::info!(peer = peer.0, "peer runs again (a new process)");
        self.event("replica-back", format!("member {} runs again", peer.0));
        Some(peer)
    }

    fn take_peer_down(&mut self) -> Option<MemberId> {
        if self.dead_buf.is_empty() {
            // Polled every step: one load when nobody died.
            if !self.liveness.any_newly_dead() {
                return None;
            }
            self.dead_buf = self.liveness.take_newly_dead();
            self.dead_buf.reverse();
        }
        let peer = self.dead_buf.pop()?;
        tracing::warn!(peer = peer.0, "peer process exited");
        let how = self
            .liveness
            .death_seen_by(peer)
            .map_or("connection", DeathSeen::label);
        self.event(
            "replica-lost",
            format!("member {} process exited ({how})", peer.0),
        );
        Some(peer)
    }

    fn next_request(&mut self) -> Option<Incoming<HostRoute>> {
        if !self.slots_taken {
            self.slots_taken = true;
            self.slots.take_pending(&mut self.slot_taken);
            if !self.slot_taken.is_empty() {
                self.slot_buf.extend(self.slot_taken.drain(..));
            }
        }
        if let Some(r) = self.slot_buf.pop_front() {
            return Some(Incoming {
                client_id: r.client_id,
                request_id: r.request_id,
                write: r.kind == SlotKind::Write,
                payload: r.payload,
                route: HostRoute {
                    to: Route::Slot {
                        slot: r.slot,
                        seq: r.seq,
                    },
                    arrived: self.step_started,
                    write: r.kind == SlotKind::Write,
                },
            });
        }
        if self.queue_taken >= QUEUE_REQUESTS_PER_STEP {
            return None;
        }
        let ServiceRequest {
            client_id,
            request_id,
            write,
            payload,
            tag,
            reply,
            arrived,
        } = self.queue.try_next()?;
        self.queue_taken += 1;
        Some(Incoming {
            client_id,
            request_id,
            write,
            payload,
            route: HostRoute {
                to: Route::Channel { tx: reply, tag },
                arrived,
                write,
            },
        })
    }

    fn answer(&mut self, route: HostRoute, answer: Answer<'_>) {
        if let Answer::Ok(_) = answer {
            self.latency
                .record(route.write, route.arrived.elapsed().as_nanos() as u64);
        }
        if let Answer::Refused(
            verbatim_driver::Refusal::Malformed | verbatim_driver::Refusal::WrongKind,
        ) = answer
        {
            self.count("requests_malformed");
        }
        match route.to {
            Route::Channel { tx, tag } => {
                let reply = match answer {
                    Answer::Ok(b) => ServiceReply::Ok(b.to_vec()),
                    Answer::NotLeader(h) => ServiceReply::NotLeader(h),
                    Answer::Busy => ServiceReply::Busy,
                    Answer::Refused(r) => ServiceReply::Error(r.message().to_string()),
                };
                let _ = tx.send((tag, reply));
            }
            Route::Slot { slot, seq } => {
                // Straight from the driver's buffer into the slot: no copy
                // on the fast path.
                let (status, bytes): (SlotStatus, &[u8]) = match answer {
                    Answer::Ok(b) => (SlotStatus::Ok, b),
                    Answer::NotLeader(h) => (SlotStatus::NotLeader(h), &[]),
                    Answer::Busy => (SlotStatus::Busy, &[]),
                    Answer::Refused(r) => (SlotStatus::Error, r.message().as_bytes()),
                };
                self.slots.reply(slot, seq, status, bytes);
            }
        }
    }

    fn recycle(&mut self, payload: Vec<u8>) {
        self.slots.recycle(payload);
    }

    fn multicast_persist(&mut self, _now_ns: u64, r: &McastPersist, payload: &[u8]) {
        if self.mcast_log_failed {
            return;
        }
        if let Some(log) = self.mcast_log.as_mut() {
            if let Err(e) = log.message(r, payload) {
                self.mcast_log_error("write", e);
            }
        }
    }

    fn multicast_sync(&mut self, _now_ns: u64, mark: PersistMark) -> Option<PersistMark> {
        if self.mcast_log_failed {
            return None;
        }
        let log = self.mcast_log.as_mut()?;
        if !log.dirty() {
            // Everything handed out is on disk already.
            return Some(mark);
        }
        match log.sync() {
            Ok(()) => Some(mark),
            Err(e) => {
                self.mcast_log_error("sync", e);
                None
            }
        }
    }

    fn multicast_failed(&self) -> bool {
        self.mcast_log_failed
    }

    fn multicast_delivered(&mut self, _now_ns: u64, d: &McastDelivery, payload: &[u8]) {
        if let (Some(log), false) = (self.mcast_log.as_mut(), self.mcast_log_failed) {
            // A delivery inside a ragged trim is on disk before anyone
            // sees it: a total restart finds it in this log (a stable
            // one is on every member's disk anyway).
            let logged = log
                .delivered(d.epoch, d.seq, d.sender.0, d.index)
                .and_then(|()| if d.in_trim { log.sync() } else { Ok(()) });
            if let Err(e) = logged {
                self.mcast_log_error("write", e);
            }
        }
        self.deliver_publication(None, d, payload);
    }

    fn subgroup_delivered(
        &mut self,
        _now_ns: u64,
        subgroup: usize,
        d: &McastDelivery,
        payload: &[u8],
    ) {
        self.deliver_publication(Some(subgroup), d, payload);
    }

    fn multicast_view(&mut self, _now_ns: u64, epoch: u64, members: u64) -> bool {
        if self.mcast_log_failed {
            return false;
        }
        let Some(log) = self.mcast_log.as_mut() else {
            return true;
        };
        match log.view(epoch, members).and_then(|()| log.sync()) {
            Ok(()) => true,
            Err(e) => {
                self.mcast_log_error("view write", e);
                false
            }
        }
    }

    fn multicast_restart(&mut self, _now_ns: u64, tail: &RestartTail) -> bool {
        let Some(recovered) = self.mcast_recovered.take() else {
            // Nothing to deliver from (the engine restarts only from a
            // log this replica read).
            return true;
        };
        let deliveries = match verbatim_driver::restart::tail_deliveries(tail, &recovered.tail) {
            Ok(d) => d,
            Err((sender, index)) => {
                self.mcast_log_error(
                    "read",
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "the restart cut needs message {index} of member {} in epoch {}, which the log lacks",
                            sender.0, tail.epoch
                        ),
                    ),
                );
                return false;
            }
        };
        // On disk first, all of it, then to the subscribers.
        if let (Some(log), false) = (self.mcast_log.as_mut(), self.mcast_log_failed) {
            let logged = deliveries
                .iter()
                .try_for_each(|(d, _)| log.delivered(d.epoch, d.seq, d.sender.0, d.index))
                .and_then(|()| log.sync());
            if let Err(e) = logged {
                self.mcast_log_error("write", e);
            }
        }
        if self.mcast_log_failed {
            // (The replica leaves the group; nobody saw any of it.)
            return false;
        }
        let delivered = deliveries.len();
        for (d, payload) in deliveries {
            self.deliver_publication(None, &d, payload);
        }
        tracing::info!(
            epoch = tail.epoch,
            from = tail.from,
            to = tail.to,
            delivered,
            "multicast restarted from the log: the last view's tail is delivered"
        );
        self.event(
            "multicast-restarted",
            format!(
                "restarted from the multicast log: epoch {} delivered up to sequence number {} ({delivered} messages from this log)",
                tail.epoch, tail.to
            ),
        );
        !self.mcast_log_failed
    }

    fn event(&mut self, now_ns: u64, engines: &Engines<ShmMemory, Kv>, event: DriverEvent) {
        match event {
            DriverEvent::Log(e) => self.on_log_event(now_ns, engines, e),
            DriverEvent::Counter(e) => self.on_counter_event(e),
            DriverEvent::View(e) => tracing::info!(event = ?e, "views"),
        }
    }
}

impl<F: HostFabric> Replica<F> {
    fn now_ns(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    fn snapshot(&self) -> Snapshot {
        let log = self.driver.log();
        let hb = &self.driver.engines().heartbeat;
        let st = log.status();
        let m = &self.opts.manifest;
        let now = self.now_ns();
        let views_status = self.driver.engines().views.as_ref().map(|v| v.status(now));
        let role = |r: Role| match r {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
        };
        let peers = (0..st.member_count)
            .filter(|&p| p != self.id.0)
            .map(|p| {
                let ps = &st.peers[usize::from(p)];
                let dead = self.gw.liveness.is_dead(MemberId(p));
                PeerSnapshot {
                    id: p,
                    reachable: ps.reachable && !dead,
                    dead,
                    control_broken: ps.channel_broken[0],
                    log_broken: ps.channel_broken[1],
                    term: ps.row.term,
                    role: match ps.row.role {
                        verbatim_core::sst::RoleCode::Leader => "leader",
                        verbatim_core::sst::RoleCode::Candidate => "candidate",
                        verbatim_core::sst::RoleCode::Follower => "follower",
                    }
                    .to_string(),
                    apply_index: ps.row.apply_index,
                    replication: match ps.repl {
                        ReplState::Idle => "idle",
                        ReplState::AwaitGrant => "await-grant",
                        ReplState::ReadHeader | ReplState::ReadList | ReplState::Adjusting => {
                            "adjusting"
                        }
                        ReplState::Replicating => "replicating",
                        ReplState::NeedsRecovery => "needs-recovery",
                        ReplState::Broken => "broken",
                    }
                    .to_string(),
                    acked_pos: ps.acked_pos,
                    lag_bytes: if st.role == Role::Leader {
                        st.tail_pos.saturating_sub(ps.acked_pos)
                    } else {
                        0
                    },
                    lag_entries: st.apply_index.saturating_sub(ps.row.apply_index),
                    row_age_us: if ps.row_version == 0 {
                        0
                    } else {
                        now.saturating_sub(ps.row_changed_ns) / 1000
                    },
                    counter: hb.peer(MemberId(p)).counter,
                    counter_stalled: hb.peer(MemberId(p)).stalled,
                }
            })
            .collect();
        let c = &st.counters;
        let mut counters: BTreeMap<String, u64> = [
            ("entries_appended", c.entries_appended),
            ("entries_applied", c.entries_applied),
            ("operations_applied", c.operations_applied),
            ("duplicates", c.duplicates),
            ("reads_served", c.reads_served),
            ("read_rounds", c.read_rounds),
            ("lease_reads", c.lease_reads),
            ("commits_awaiting_view", c.commits_awaiting_view),
            ("elections_started", c.elections_started),
            ("elections_won", c.elections_won),
            ("view_takeovers", c.view_takeovers),
            ("view_claims", c.view_claims),
            ("operations_speculated", c.operations_speculated),
            ("speculation_rollbacks", c.speculation_rollbacks),
            ("view_campaigns", c.view_campaigns),
            ("counter_suspicions", c.counter_suspicions),
            ("votes_granted", c.votes_granted),
            ("step_downs", c.step_downs),
            ("rows_rejected", c.rows_rejected),
            ("entries_rejected", c.entries_rejected),
            ("completion_errors", c.completion_errors),
            ("completions_unknown", c.completions_unknown),
            ("log_full", c.log_full),
            ("row_pushes", c.row_pushes),
            ("adjustments", c.adjustments),
            ("prunes", c.prunes),
            ("log_batches", c.log_batches),
            ("false_suspicions", c.false_suspicions),
            ("fd_period_shrinks", c.fd_period_shrinks),
            ("late_timeouts_forgiven", c.late_timeouts_forgiven),
            ("campaigns_forgone", c.campaigns_forgone),
            ("claims_forgone", c.claims_forgone),
            ("restarts_read_back", c.restarts_read_back),
            ("reconfigurations", c.reconfigurations),
            ("zombies_removed", c.zombies_removed),
            ("zombies_readded", c.zombies_readded),
            ("recovery_holds_released", c.recovery_holds_released),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (k, v) in &self.gw.host_counters {
            counters.insert((*k).to_string(), *v);
        }
        let dc = self.driver.counters();
        counters.insert("loop_iterations".into(), self.loop_iterations);
        counters.insert("access_changes".into(), dc.access_changes);
        counters.insert("fabric_actions_failed".into(), dc.actions_failed);
        counters.insert("completions_unrouted".into(), dc.completions_unrouted);
        counters.insert("counter_own".into(), hb.counter());
        counters.insert("counter_stalls".into(), hb.stalls_reported());
        let services = log.state_machine();
        counters.insert("keys".into(), services.kv.backend().len() as u64);
        counters.insert(
            "streams".into(),
            services.streams.backend().stream_count() as u64,
        );
        counters.insert(
            "stream_entries".into(),
            services.streams.backend().entry_count() as u64,
        );
        let member = &m.members[usize::from(self.id.0)];
        Snapshot {
            version: STATUS_VERSION,
            id: self.id.0,
            pid: std::process::id(),
            at_unix_ms: unix_ms(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            role: role(st.role).to_string(),
            term: st.term,
            leader: st.leader.map(|l| l.0),
            log_granted_to: st.log_granted_to.map(|l| l.0),
            log: LogPointers {
                head_pos: st.head_pos,
                apply_pos: st.apply_pos,
                apply_index: st.apply_index,
                commit_pos: st.commit_pos,
                commit_index: st.commit_index,
                tail_pos: st.tail_pos,
                tail_index: st.tail_index,
                ring_bytes: self.layout.log.ring_bytes,
            },
            peers,
            config: ConfigSnapshot {
                cluster: m.cluster.name.clone(),
                members: st.member_count,
                quorum: log.configuration().size / 2 + 1,
                fabric: self.fabric.name().to_string(),
                poll: m.cluster.poll.to_string(),
                core: member.core,
                numa_node: self.numa_node,
                resp_addr: member.resp_addr.clone(),
                layout_hash: format!("{:#018x}", self.layout.hash),
                log_ring_bytes: self.layout.log.ring_bytes,
                value_bytes_max: m.cluster.value_bytes_max,
                heartbeat_period_us: m.timing.heartbeat_period_us,
                fd_check_period_us: st.fd_check_period_ns / 1000,
            },
            failovers: self.gw.failovers.records(),
            counters,
            latency: self.gw.latency.last.clone(),
            events: self.gw.events.iter().cloned().collect(),
            lease: views_status.as_ref().map(lease_line),
            views: views_status
                .as_ref()
                .map(|v| views_state(v, log.config().mode)),
            recovery: {
                let r = log.recovery_status();
                verbatim_status::RecoveryProgress {
                    active: r.active,
                    donor: r.donor.map(|d| d.0),
                    bytes_copied: r.bytes_copied,
                    bytes_total: r.bytes_total,
                    bytes_restored: r.bytes_restored,
                    completed: r.completed,
                    abandoned: r.abandoned,
                    served: st.counters.snapshots_served,
                }
            },
            group: group_configuration(
                &log.configuration(),
                log.config_index(),
                log.config_index() < st.apply_index || log.config_index() == 0,
                self.id,
                log.reconfiguring(),
            ),
            multicast: self.driver.engines().multicast.as_ref().map(|e| {
                let s = e.status();
                verbatim_status::MulticastState {
                    view_installed_mono_ns: self.gw.mcast_installed_mono_ns,
                    large: large_state(&self.driver, e.members()),
                    subgroups: self
                        .driver
                        .engines()
                        .subgroups
                        .iter()
                        .map(|g| {
                            let name = self
                                .gw
                                .subgroup_names
                                .get(g.index())
                                .cloned()
                                .unwrap_or_default();
                            verbatim_status::SubgroupState {
                                index: g.index() as u8,
                                name,
                                members: mask_members(u64::from(g.layout().members)),
                                state: multicast_state(
                                    &g.status(),
                                    g.engine().layout().window,
                                    usize::from(self.driver.log().config().member_count),
                                    |ballot| g.member(MemberId((ballot.saturating_sub(1)) as u8)).0,
                                ),
                            }
                        })
                        .collect(),
                    ..multicast_state(&s, e.layout().window, e.members(), |ballot| {
                        ballot.saturating_sub(1) as u8
                    })
                }
            }),
            backup: self.driver.engines().backup.as_ref().map(backup_state),
        }
    }

    /// Starts an operator's change of the group (leader only); the answer
    /// goes out now if it is refused, else once it has committed.
    fn member_change(&mut self, now: u64, req: MemberRequest) {
        let refuse = |reply: &std::sync::mpsc::Sender<MemberReply>, r: MemberReply| {
            let _ = reply.send(r);
        };
        if self.gw.member_waiting.is_some() {
            refuse(
                &req.reply,
                MemberReply {
                    error: Some(
                        "another change of the group is under way; try again once it has committed"
                            .into(),
                    ),
                    retry: true,
                    ..MemberReply::default()
                },
            );
            return;
        }
        let op = match req.change {
            MemberChange::Add(n) => ReconfigOp::Add(MemberId(n)),
            MemberChange::Remove(n) => ReconfigOp::Remove(MemberId(n)),
            MemberChange::Resize(n) => ReconfigOp::Resize(n),
        };
        match self.driver.log_mut().reconfigure(now, op) {
            Ok(first) => {
                let first = group_configuration(
                    &first,
                    self.driver.log().config_index(),
                    false,
                    self.id,
                    true,
                );
                self.gw.event(
                    "reconfiguring",
                    format!("operator asked {op:?}: first phase {}", first.describe()),
                );
                self.gw.member_waiting = Some((op, req.reply));
            }
            Err(e) => {
                let reply = match e {
                    ReconfigError::NotLeader { leader } => MemberReply {
                        error: Some(format!("member {} does not lead", self.id.0)),
                        leader: leader.map(|l| l.0),
                        not_leader: true,
                        ..MemberReply::default()
                    },
                    ReconfigError::InProgress => MemberReply {
                        error: Some("a change of the group is under way (its CONFIG entry has not committed); try again once it has".into()),
                        retry: true,
                        ..MemberReply::default()
                    },
                    ReconfigError::Invalid(why) => MemberReply {
                        error: Some(why.to_string()),
                        ..MemberReply::default()
                    },
                    ReconfigError::LogFull => MemberReply {
                        error: Some("the log is full; try again once it has been pruned".into()),
                        retry: true,
                        ..MemberReply::default()
                    },
                };
                refuse(&req.reply, reply);
            }
        }
    }

    /// Multicasts the publications the RESP server handed over, in order,
    /// as far as the windows let (the top-level group's and each
    /// subgroup's); answers those that cannot be (multicast off, too
    /// large, a wedged group) or were not delivered in time. Returns
    /// whether it did any work.
    fn publish(&mut self, now_i: Instant) -> bool {
        let gw = &mut self.gw;
        let mut work = false;
        for _ in 0..PUBLISH_PER_STEP_MAX {
            let Some(p) = gw.queue.try_next_publish() else {
                break;
            };
            match p.subgroup {
                None => gw.publications.push(p),
                Some(i) if self.driver.engines().subgroup(i).is_some() => {
                    gw.subgroup_publications.entry(i).or_default().push(p)
                }
                Some(_) => {
                    // (The RESP server checks membership first.)
                    let why = McastSendError::NotInSubgroup.to_string();
                    let _ = p.reply.send((p.tag, ServiceReply::Error(why)));
                    work = true;
                }
            }
        }
        let (epoch, in_view) = self
            .driver
            .engines()
            .multicast
            .as_ref()
            .map_or((0, false), |m| {
                let st = m.status();
                (m.epoch(), !st.joining && !st.restarting)
            });
        // (A restarting or joining member has no view yet.)
        if epoch != gw.mcast_epoch_seen && in_view {
            // A view installed in the last step (a benchmark times it from
            // its kill of a member, on the same clock; the log has its
            // record, `multicast_view`).
            gw.mcast_epoch_seen = epoch;
            gw.mcast_installed_mono_ns = Some(verbatim_client::process::monotonic_now_ns());
        }
        let driver = &mut self.driver;
        let (mut any, mut republished) =
            flush_publications(&mut gw.publications, epoch, now_i, |p| {
                driver.multicast_send(p)
            });
        for (&i, outbox) in &mut gw.subgroup_publications {
            let epoch = driver
                .engines()
                .subgroup(i)
                .map_or(0, |g| g.engine().epoch());
            let (a, r) = flush_publications(outbox, epoch, now_i, |p| driver.subgroup_send(i, p));
            any |= a;
            republished += r;
        }
        for _ in 0..republished {
            gw.count("multicast_republished");
        }
        work || any
    }

    /// One step of the driver (the loop the simulator runs too), then the
    /// replica's own bookkeeping. Returns true if it did any work.
    fn iterate(&mut self, now_i: Instant) -> bool {
        // One clock read per iteration (the caller's): a clock_gettime
        // is a measurable share of a busy leader's loop.
        let now = now_i.saturating_duration_since(self.clock).as_nanos() as u64;
        self.gw.begin_step(now_i);
        let published = self.publish(now_i);
        let work = self.driver.step(now, &mut self.fabric, &mut self.gw) || published;
        for req in self.status.take_requests() {
            self.member_change(now, req);
        }
        let log = self.driver.log();
        if log.role() == Role::Leader {
            let view_active = self
                .driver
                .engines()
                .views
                .is_some()
                .then(|| log.commit_cleared(log.term()));
            self.gw
                .failovers
                .commit_advanced(now, log.commit_index(), view_active);
        }
        let granted = log.log_granted_to();
        if granted != self.last_granted {
            if let Some(g) = granted {
                self.gw.event(
                    "revoke",
                    format!("log access now granted to member {} only", g.0),
                );
            } else if self.last_granted.is_some() {
                self.gw
                    .event("revoke", "log access revoked from every peer".into());
            }
            self.last_granted = granted;
        }
        work
    }
}

/// Runs a replica until `shutdown` is set (SIGTERM/SIGINT in the binary).
/// Retries `create` while the file still belongs to a running process, for
/// up to 5 s: a replica restarted at once (as `verbatim up` heals) can find
/// its SIGKILLed predecessor not yet gone (the kernel is still tearing it
/// down). A replica that really runs keeps its files, and the error stands.
fn while_predecessor_exits<T>(
    mut create: impl FnMut() -> Result<T, verbatim_client::ShmError>,
) -> Result<T, verbatim_client::ShmError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match create() {
            Err(verbatim_client::ShmError::InUse { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

pub fn run(opts: ReplicaOptions, shutdown: Arc<AtomicBool>) -> Result<(), ReplicaError> {
    let m = opts.manifest.clone();
    let n = m.member_count();
    if opts.id >= n {
        return Err(ReplicaError::Config(format!(
            "--id {} is not a member: the manifest lists ids 0 to {}",
            opts.id,
            n - 1
        )));
    }
    let id = MemberId(opts.id);
    let member = m.members[usize::from(opts.id)].clone();
    let cfg = m.core_config(opts.id);
    let layout = Layout::new(&cfg).map_err(|e| ReplicaError::Config(e.to_string()))?;
    if opts.kernel_checks {
        let report = verbatim_kernel_cfg::check(&verbatim_kernel_cfg::CheckOptions {
            root: "/".into(),
            cores: member.core.map(|c| vec![c]),
        });
        report.log();
    }
    let placement = crate::topology::placement(member.core);
    tracing::info!(
        member = opts.id,
        core = ?member.core,
        numa_node = ?placement.numa_node,
        smt_siblings = ?placement.smt_siblings,
        cores_online = placement.cores_online,
        topology_source = placement.source,
        "placement (topology source: {})",
        placement.source
    );
    if let Some(core) = member.core {
        // Before any helper thread exists: they inherit this mask; the
        // poll loop pins itself to `core` once the servers are up.
        let helper_cpus = crate::topology::keep_helpers_off(core);
        tracing::debug!(?helper_cpus, "helper threads kept off the poll core");
    }
    let io = |what: String| move |source| ReplicaError::Io { what, source };
    std::fs::create_dir_all(m.shm_dir())
        .map_err(io(format!("creating {}", m.shm_dir().display())))?;
    verbatim_client::files::ensure_private_dir(&m.run_dir())
        .map_err(|e| ReplicaError::Config(e.to_string()))?;
    // Death notices first, on this (the poll) thread, before the segment
    // that makes peers look for them; dropped (unlinked) on every return.
    let _notices = match DeathNotices::hold(&notice_path(&m.segment_path(opts.id))) {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::warn!(error = %e, "no death notices: peers learn of this replica's exit from its pidfd only");
            None
        }
    };
    let segment = Arc::new(while_predecessor_exits(|| {
        Segment::create(&m.segment_path(opts.id), &layout, id)
    })?);
    // The client slots live in a file of their own (the only one clients
    // map), so no client process can write the log, the SST or the access
    // words.
    let slot_segment = match while_predecessor_exits(|| {
        SlotSegment::create(&m.slots_path(opts.id), m.slot_geometry())
    }) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            segment.unlink();
            return Err(e.into());
        }
    };
    let memory = ShmMemory::new(segment.clone());
    let clock = Instant::now();
    let liveness = Arc::new(PeerLiveness::default());
    let _watcher = spawn_watcher(liveness.clone(), segment.waker(), clock)
        .map_err(io("starting the pidfd watcher".into()))?;
    let setup = Setup {
        segment: segment.clone(),
        slot_segment: slot_segment.clone(),
        liveness: liveness.clone(),
        memory,
        clock,
        layout,
        placement,
    };
    match m.cluster.fabric {
        verbatim_client::manifest::FabricKind::Shm => {
            let peer_paths = (0..n).map(|i| m.segment_path(i)).collect();
            let mut fabric = ShmFabric::new(id, layout, segment, peer_paths, liveness);
            let fence_ms = m.cluster.fence_stopped_writer_ms;
            fabric.set_fencing((fence_ms > 0).then(|| Duration::from_millis(fence_ms)));
            drive(opts, shutdown, setup, fabric)
        }
        verbatim_client::manifest::FabricKind::Verbs => {
            #[cfg(feature = "rdma")]
            {
                let verbs: Vec<_> = m.members.iter().map(|x| x.verbs.clone()).collect();
                let fabric = crate::fabric::verbs::VerbsFabric::start(
                    &verbs,
                    &crate::fabric::verbs::ExchangeOptions::from_secret(
                        m.cluster.exchange_secret.as_deref(),
                    ),
                    id,
                    &layout,
                    segment.clone(),
                    liveness,
                )
                .map_err(|e| {
                    segment.unlink();
                    slot_segment.unlink();
                    ReplicaError::Config(e.to_string())
                })?;
                drive(opts, shutdown, setup, fabric)
            }
            #[cfg(not(feature = "rdma"))]
            {
                drop(liveness);
                segment.unlink();
                slot_segment.unlink();
                let _ = setup;
                Err(ReplicaError::Config(
                    "fabric = \"verbs\" needs a build with RDMA support: \
                     `cargo build --release -p verbatim-host --features rdma` (it needs rdma-core: \
                     libibverbs-dev, and an RDMA device such as Soft-RoCE `rdma link add rxe0 type rxe netdev eth0`); \
                     this build runs the shared-memory fabric (fabric = \"shm\")"
                        .into(),
                ))
            }
        }
    }
}

/// What `run` prepared for the loop.
struct Setup {
    segment: Arc<Segment>,
    slot_segment: Arc<SlotSegment>,
    liveness: Arc<PeerLiveness>,
    memory: ShmMemory,
    clock: Instant,
    layout: Layout,
    placement: crate::topology::Placement,
}

/// Connects, builds the node and the servers, and runs the poll loop.
fn drive<F: HostFabric>(
    opts: ReplicaOptions,
    shutdown: Arc<AtomicBool>,
    setup: Setup,
    mut fabric: F,
) -> Result<(), ReplicaError> {
    let Setup {
        segment,
        slot_segment,
        liveness,
        memory,
        clock,
        layout,
        placement,
    } = setup;
    let m = opts.manifest.clone();
    let id = MemberId(opts.id);
    let member = m.members[usize::from(opts.id)].clone();
    let mut cfg = m.core_config(opts.id);
    let in_mcast_group = opts.id < cfg.initial_members;
    cfg.incarnation = draw_incarnation();
    let incarnation = cfg.incarnation;
    let io = |what: String| move |source| ReplicaError::Io { what, source };
    // Readiness barrier: start once every peer's segment is mapped, or
    // after the timeout (missing peers are retried and count as down).
    let began = Instant::now();
    loop {
        let missing = fabric.connect_peers();
        if missing.is_empty() {
            break;
        }
        if let Some((peer, problem)) = missing.iter().find(|(_, p)| !p.retry) {
            return Err(ReplicaError::Config(format!(
                "member {}: {}",
                peer.0, problem.message
            )));
        }
        if began.elapsed() > opts.connect_timeout || shutdown.load(Ordering::Acquire) {
            tracing::warn!(missing = ?missing.iter().map(|(p, _)| p.0).collect::<Vec<_>>(), "starting without every peer");
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }

    let sm = KvAndStreams::new(
        KvStateMachine::new(HashBackend::new(opts.keys_max), m.kv_limits()),
        StreamStateMachine::new(StreamMap::new(opts.keys_max), m.kv_limits()),
    );
    // The engines' clock starts now, after the readiness barrier: the first
    // election timeout must not already have expired while we waited.
    let mut driver = Driver::new(
        cfg,
        memory.clone(),
        sm,
        clock.elapsed().as_nanos() as u64,
        // A GET's value, or an XRANGE of up to a MiB (a longer range is
        // refused with a hint to use COUNT, never cut short).
        (m.cluster.value_bytes_max as usize + 1).max(READ_RESULT_BYTES_MIN),
    )
    .map_err(|e| ReplicaError::Config(e.to_string()))?;
    let status = Arc::new(StatusSlot::default());
    let _status_server =
        StatusServer::start(&m.status_socket(opts.id), status.clone()).map_err(io(format!(
            "status socket {}",
            m.status_socket(opts.id).display()
        )))?;
    let _metrics = match &member.metrics_addr {
        Some(addr) => Some(
            crate::gateway::metrics::MetricsServer::start(addr, status.clone())
                .map_err(io(format!("metrics listener {addr}")))?,
        ),
        None => None,
    };
    let (mcast_log, mcast_recovered) = match (&m.multicast.log_dir, m.multicast.persistent) {
        // Only members of the multicast group receive anything.
        (Some(dir), true) if in_mcast_group => {
            let (log, recovered) =
                mcast_log::McastLog::open(dir, &m.cluster.name, opts.id, incarnation)
                    .map_err(io(format!("multicast log in {}", dir.display())))?;
            (Some(log), recovered)
        }
        _ => (None, None),
    };
    if let (Some(recovered), Some(engine)) = (&mcast_recovered, driver.multicast_mut()) {
        // Derecho's total restart: the group goes on from the logs, once
        // every member of the last view restarted (or, if it still runs,
        // this replica joins it).
        match engine.restart(recovered.point) {
            Ok(()) => tracing::info!(
                epoch = recovered.point.epoch,
                view = recovered.point.view,
                delivered = recovered.point.delivered,
                "multicast restarts from its log"
            ),
            Err(e) => tracing::warn!(
                error = ?e,
                "the multicast log's last view does not fit this group's layout: starting without it"
            ),
        }
    }
    let (handle, queue) = ServiceHandle::new(segment.clone());
    let _resp = match &member.resp_addr {
        Some(addr) => Some(
            crate::gateway::resp_server::RespServer::start(
                addr,
                handle.clone(),
                m.clone(),
                opts.id,
                status.clone(),
                shutdown.clone(),
            )
            .map_err(io(format!("RESP listener {addr}")))?,
        ),
        None => None,
    };
    if let Some(core) = member.core {
        if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
            tracing::warn!(core, "could not pin the poll loop to its core");
        }
    }
    if m.cluster.poll != PollMode::Busy {
        // A parked loop must run as soon as it is rung (see the function).
        let short = crate::topology::request_short_slice(POLL_SLICE_NS);
        tracing::debug!(short, "short scheduler slice for the poll loop");
    }
    let mut r = Replica {
        gw: Gateway {
            id,
            slots: SlotServer::new(slot_segment.clone()),
            queue,
            liveness,
            slot_buf: VecDeque::new(),
            slot_taken: Vec::new(),
            slots_taken: false,
            queue_taken: 0,
            dead_buf: Vec::new(),
            step_started: Instant::now(),
            failovers: FailoverTracker::new(
                opts.id,
                verbatim_client::process::monotonic_ns_of(clock),
            ),
            events: VecDeque::new(),
            latency: Latency::new(),
            host_counters: BTreeMap::new(),
            last_role: Role::Follower,
            counter_suspicions_seen: 0,
            snapshot_writer: match m.cluster.fabric {
                verbatim_client::manifest::FabricKind::Shm => snapshot::SnapshotWriter::Fork,
                verbatim_client::manifest::FabricKind::Verbs => snapshot::SnapshotWriter::Inline,
            },
            member_waiting: None,
            publications: Outbox::default(),
            subgroup_publications: BTreeMap::new(),
            subgroup_names: m
                .subgroups()
                .map(|gs| gs.into_iter().map(|g| g.name).collect())
                .unwrap_or_default(),
            mcast_log,
            mcast_log_failed: false,
            mcast_recovered,
            mcast_epoch_seen: 0,
            mcast_installed_mono_ns: None,
        },
        layout,
        id,
        driver,
        fabric,
        segment: segment.clone(),
        clock,
        started: Instant::now(),
        status,
        numa_node: placement.numa_node,
        last_granted: None,
        loop_iterations: 0,
        opts,
    };
    tracing::info!(member = id.0, cluster = %m.cluster.name, poll = %m.cluster.poll, "replica running");
    r.gw.event(
        "started",
        format!("member {} started (pid {})", id.0, std::process::id()),
    );

    let spin_ns = m.cluster.spin_us * 1000;
    let mut last_work = r.now_ns();
    let mut next_status = Instant::now();
    let mut next_connect = Instant::now() + Duration::from_millis(100);
    while !shutdown.load(Ordering::Acquire) {
        let now_i = Instant::now();
        // Before the step looks at memory, by a loop that may park after
        // it: a ring during the step then ends the park at once (see
        // `Segment::doorbells`). Not by one that never parks: clients ring
        // on every request, and a spinning leader would load their line.
        let bells = may_park(m.cluster.poll, r.driver.log().role())
            .then(|| r.segment.doorbells(Some(r.gw.slots.segment())));
        let work = r.iterate(now_i);
        r.loop_iterations += 1;
        if now_i >= next_status {
            r.gw.latency.roll(now_i);
            let snap = r.snapshot();
            r.status.publish(snap);
            next_status = now_i + STATUS_PERIOD;
        }
        if now_i >= next_connect {
            r.fabric.connect_peers();
            next_connect = now_i + Duration::from_millis(100);
        }
        let now = now_i.saturating_duration_since(r.clock).as_nanos() as u64;
        if work {
            // Spin on after log or client work only: a follower woken by
            // its heartbeat-counter period parks again at once. So does a
            // follower in leader-busy mode once nothing of its own is in
            // flight (it woke to apply and publish its pointer): the core
            // is the leader's, and 50 µs of spinning after each of its
            // 2,000 wakes a second was the leader's write p99 (a parked
            // member is rung for votes, client requests and peer deaths).
            let settled = m.cluster.poll == PollMode::LeaderBusy
                && r.driver.log().role() == Role::Follower
                && r.driver.log().inflight() == 0;
            if r.driver.last_step_log_work() {
                last_work = if settled {
                    now.saturating_sub(spin_ns)
                } else {
                    now
                };
            }
            continue;
        }
        if may_park(m.cluster.poll, r.driver.log().role())
            && now.saturating_sub(last_work) >= spin_ns
        {
            let deadline = r.driver.next_deadline();
            let until_ns = deadline.saturating_sub(now);
            let status_ns = next_status.saturating_duration_since(now_i).as_nanos() as u64;
            let wait = Duration::from_nanos(until_ns.min(status_ns)).min(PARK_MAX);
            // (No values when the step made this member a non-leader: it
            // parks on the next turn.)
            if let (false, Some(bells)) = (wait.is_zero(), bells) {
                let (queue, slots) = (&r.gw.queue, &r.gw.slots);
                r.segment.park(Some(slots.segment()), bells, wait, || {
                    queue.is_empty() && !slots.any_pending()
                });
            }
        } else if r.driver.log().pb_waits_for_grants() {
            // A new primary waits for a backup's CPU to grant it its log:
            // give the core to it (on a shared core, a spinning primary
            // kept a parked backup off it for a scheduler slice).
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    tracing::info!(member = id.0, "shutting down");
    // Answer whoever waits, so clients fail over instead of timing out.
    r.driver.abandon_pending(&mut r.gw);
    r.gw.liveness.stop();
    segment.unlink();
    r.gw.slots.segment().unlink();
    Ok(())
}

/// Whether a poll loop in `poll` mode may park while this member has
/// `role`.
fn may_park(poll: PollMode, role: Role) -> bool {
    match poll {
        PollMode::Busy => false,
        PollMode::Adaptive => true,
        PollMode::LeaderBusy => role != Role::Leader,
    }
}

/// The one-line lease summary of status (`verbatim status`, the console
/// header): `view 4 (leader 1, term 3) · held, 31 µs left`.
fn lease_line(vs: &verbatim_core::views::ViewStatus) -> String {
    let view = match vs.view {
        Some(view) => format!(
            "view {} (leader {}, term {})",
            vs.epoch, view.leader.0, view.log_term
        ),
        None => "no view yet".to_string(),
    };
    let held = if vs.lease_active {
        format!("held, {} µs left", vs.lease_remaining_ns / 1000)
    } else {
        "not held".to_string()
    };
    let lost = if vs.fallback {
        " · DARE fallback"
    } else if vs.coordinators_lost {
        " · coordinators lost"
    } else {
        ""
    };
    format!("{view} · {held}{lost}")
}

/// Views and leases as the status schema shows them.
fn views_state(
    vs: &verbatim_core::views::ViewStatus,
    mode: verbatim_core::Mode,
) -> verbatim_status::ViewsState {
    let members = |mask: u8| {
        (0..verbatim_core::fabric::MAX_MEMBERS as u8)
            .filter(|m| mask & (1 << m) != 0)
            .collect::<Vec<u8>>()
    };
    let coordinators = members(vs.coordinator_members);
    // `coordinators_out` counts the a-th coordinator (bit a).
    let coordinators_out = coordinators
        .iter()
        .enumerate()
        .filter(|(a, _)| vs.coordinators_out & (1 << a) != 0)
        .map(|(_, &m)| m)
        .collect();
    verbatim_status::ViewsState {
        epoch: vs.epoch,
        leader: vs.view.map(|v| v.leader.0),
        mode: mode.name().to_string(),
        members: members(vs.view.map_or(0, |v| v.members)),
        log_term: vs.view.map_or(0, |v| v.log_term),
        lease_us: vs.view.map_or(0, |v| v.lease_ns / 1000),
        lease_active: vs.lease_active,
        lease_remaining_us: vs.lease_remaining_ns / 1000,
        coordinators,
        coordinators_out,
        fallback: vs.fallback,
        slot_count: u64::from(vs.slot_count),
        slots_skipped: vs.slots_skipped,
        own_acceptor_rejoins: vs.own_acceptor_rejoins,
        own_acceptor_no_loopback: vs.own_acceptor_no_loopback,
        proposed: vs.proposed,
        won: vs.won,
        renewals: vs.renewals,
        renewals_superseded: vs.renewals_superseded,
        renewals_abandoned: vs.renewals_abandoned,
    }
}

/// A configuration as the status schema shows it.
pub fn group_configuration(
    c: &Configuration,
    index: u64,
    committed: bool,
    me: MemberId,
    in_progress: bool,
) -> GroupConfiguration {
    GroupConfiguration {
        state: match c.state {
            ConfigState::Stable => "stable",
            ConfigState::Extended => "extended",
            ConfigState::Transitional => "transitional",
        }
        .to_string(),
        size: c.size,
        new_size: c.new_size,
        members: c.active.iter().map(|m| m.0).collect(),
        away: c.away.iter().map(|m| m.0).collect(),
        index,
        committed,
        is_member: c.active.contains(me),
        in_progress,
    }
}

/// The RDMC session's part of the multicast status (large messages on).
/// Flushes one group's publications (the top-level group's or a
/// subgroup's, whose view is `epoch`): those a view change trimmed go out
/// again first (never delivered anywhere: the trim is the same
/// everywhere), then the waiting ones as far as `send` takes them;
/// refused and expired ones are answered. Returns whether it did any
/// work, and how many went out again.
fn flush_publications(
    outbox: &mut Outbox<PublishRequest>,
    epoch: u64,
    now_i: Instant,
    mut send: impl FnMut(&[u8]) -> Result<u64, McastSendError>,
) -> (bool, usize) {
    let mut work = false;
    let republished = outbox.requeue_trimmed(epoch);
    loop {
        let (sent, refused) = outbox.flush(epoch, |p| match send(&p.payload) {
            Ok(index) => Ok(index),
            // Not started: the group's rows are not all seen yet (start
            // up, or a new view forming); a full window frees as the group
            // delivers; a wedged group installs its next view.
            Err(McastSendError::Engine(
                McastError::WindowFull | McastError::NotStarted | McastError::Wedged,
            )) => Err(Refused::Later),
            Err(e) => Err(Refused::Never((), e)),
        });
        work |= sent > 0;
        let Some((p, e)) = refused else {
            break;
        };
        let _ = p.reply.send((p.tag, ServiceReply::Error(e.to_string())));
        work = true;
    }
    let expired = |p: &PublishRequest| p.deadline <= now_i;
    while outbox.oldest_waiting().is_some_and(expired) {
        let p = outbox.pop_oldest_waiting().expect("oldest checked");
        let why = "multicast not started or its window still full: the group delivers slower than it is published to, or a member is missing";
        let _ = p.reply.send((p.tag, ServiceReply::Error(why.into())));
        work = true;
    }
    while outbox.oldest_sent().is_some_and(expired) {
        let p = outbox.pop_oldest_sent().expect("oldest checked");
        let why = "multicast sent but not delivered in time (a member stopped, or the group could not install a view without the one that is gone)";
        let _ = p.reply.send((p.tag, ServiceReply::Error(why.into())));
        work = true;
    }
    (work, republished)
}

fn large_state(
    driver: &Driver<ShmMemory, Kv, HostRoute>,
    members: usize,
) -> Option<verbatim_status::LargeState> {
    let config = driver.log().config();
    if config.rdmc_slots == 0 {
        return None;
    }
    let mut l = verbatim_status::LargeState {
        slots: u64::from(config.rdmc_slots),
        chunk_bytes: u64::from(config.rdmc_chunk_bytes),
        ..Default::default()
    };
    if let Some(r) = &driver.engines().rdmc {
        let st = r.status();
        l.epoch = Some(st.epoch);
        l.wedged = st.wedged.map(|w| match w {
            verbatim_core::rdmc::RdmcWedge::PeerDown(p) => format!("member {} is gone", p.0),
            verbatim_core::rdmc::RdmcWedge::WriteFailed(p) => {
                format!("a WRITE to member {} failed", p.0)
            }
            verbatim_core::rdmc::RdmcWedge::Corrupt(p) => {
                format!(
                    "a message of member {} was overwritten before delivery",
                    p.0
                )
            }
            verbatim_core::rdmc::RdmcWedge::Asked => "the view changes".to_string(),
        });
        l.received = st.senders[..members].iter().map(|s| s.received).collect();
        l.delivered = st.senders[..members].iter().map(|s| s.delivered).collect();
        l.chunks_written = st.chunks_written;
        l.bytes_written = st.bytes_written;
    }
    Some(l)
}

/// The member ids of a bit mask.
/// A multicast engine's status as the status schema has it (the
/// top-level group's or a subgroup's, in member ids); `leader_of` names
/// the member a trim's ballot stands for.
/// The backup engine's status in the schema's terms.
fn backup_state<M: verbatim_core::Memory>(
    e: &verbatim_core::backup::engine::BackupEngine<M>,
) -> verbatim_status::BackupState {
    use verbatim_core::backup::engine::{BackupRole, CopyState};
    let s = e.status();
    let k = s.counters;
    verbatim_status::BackupState {
        role: match s.role {
            BackupRole::Backup => "backup",
            BackupRole::TakingOver => "taking-over",
            BackupRole::Primary => "primary",
        }
        .to_string(),
        epoch: s.view.map_or(0, |(e, _, _)| e),
        primary: s.view.map(|(_, p, _)| p.0),
        members: s.view.map_or_else(Vec::new, |(_, _, m)| mask_members(m)),
        keys: s.keys,
        used_bytes: s.used_bytes,
        copies: s
            .copies
            .iter()
            .enumerate()
            .filter_map(|(m, c)| {
                let c = (*c)?;
                let (state, done_bytes, total_bytes) = match c {
                    CopyState::Synced => ("synced", 0, 0),
                    CopyState::Needed => ("needed", 0, 0),
                    CopyState::Copying { next, end } => ("copying", next, end),
                };
                Some(verbatim_status::BackupCopy {
                    member: m as u8,
                    state: state.to_string(),
                    done_bytes,
                    total_bytes,
                })
            })
            .collect(),
        recovery: s.recovery.map(|r| verbatim_status::BackupRecovery {
            keys: r.keys,
            entries_reclaimed: r.entries_reclaimed,
            chunks_reclaimed: r.chunks_reclaimed,
            free_lists_cut: r.free_lists_cut,
            sessions_cleared: r.sessions_cleared,
            audit_phantoms: s.audit.map_or(0, |a| a.phantoms),
            audit_dangling_entries: s.audit.map_or(0, |a| a.dangling_entries),
            audit_conflicts: s.audit.map_or(0, |a| a.conflicts),
        }),
        writes_zero_copy: k.writes_zero_copy,
        writes_forwarded: k.writes_forwarded,
        writes_unchanged: k.writes_unchanged,
        replays: k.replays,
        replay_failures: k.replay_failures,
        copies_done: k.copies_done,
        copy_bytes: k.copy_bytes,
        takeovers: k.takeovers,
    }
}

fn multicast_state(
    s: &verbatim_core::multicast::McastStatus,
    window: u64,
    members: usize,
    leader_of: impl Fn(u64) -> u8,
) -> verbatim_status::MulticastState {
    verbatim_status::MulticastState {
        started: s.started,
        wedged: s.wedged.map(|w| match w {
            verbatim_core::multicast::WedgeCause::PeerDown(p) => {
                format!("member {} is gone", p.0)
            }
            verbatim_core::multicast::WedgeCause::SlotOverwritten(p) => {
                format!("member {} overwrote a message not yet delivered", p.0)
            }
            verbatim_core::multicast::WedgeCause::Suspicion(p) => {
                format!("member {} is suspected (view change)", p.0)
            }
            verbatim_core::multicast::WedgeCause::Join(p) => {
                format!("a new process asks to join as member {}", p.0)
            }
            verbatim_core::multicast::WedgeCause::Wedged(p) => {
                format!("member {} started a view change", p.0)
            }
        }),
        window,
        sent: s.sent,
        sent_nulls: s.sent_nulls,
        received: s.received[..members].to_vec(),
        delivered: s.delivered,
        delivered_messages: s.delivered_messages,
        window_full: s.window_full,
        write_errors: s.write_errors,
        epoch: s.epoch,
        view: mask_members(s.view),
        suspected: mask_members(s.suspected),
        halted: s.halted.map(|h| match h {
            verbatim_core::multicast::HaltCause::Excluded => {
                "excluded: the others suspect this member".to_string()
            }
            verbatim_core::multicast::HaltCause::TrimBehind => {
                "the decided trim is behind what this member delivered or received".to_string()
            }
            verbatim_core::multicast::HaltCause::TrimUnreadable(p) => {
                format!(
                    "a message of member {} inside the trim is not whole here",
                    p.0
                )
            }
            verbatim_core::multicast::HaltCause::Left => {
                "left: its multicast log could not be written (see the events)".to_string()
            }
        }),
        minority: s.minority,
        joining: s.joining,
        restarting: s.restarting,
        view_installed_mono_ns: None,
        view_changes: s.view_changes,
        last_trim: s.last_trim.map(|t| verbatim_status::McastTrim {
            epoch: t.epoch,
            leader: leader_of(t.ballot),
            restart: t.ballot == verbatim_core::multicast::RESTART_BALLOT,
            members: mask_members(t.members),
            counts: t.counts[..members].to_vec(),
        }),
        trimmed_own: s.trimmed_own,
        large: None,
        subgroups: Vec::new(),
    }
}

fn mask_members(mask: u64) -> Vec<u8> {
    (0..64u8).filter(|&m| mask & (1 << m) != 0).collect()
}

/// A number this process's successors will not repeat: the multicast
/// engine ties this member's messages and row to it, so that a restarted
/// replica never passes for the one it replaces. Random where the kernel
/// gives randomness; otherwise the clock, which a restart moves anyway.
pub(crate) fn draw_incarnation() -> u64 {
    let mut bytes = [0u8; 8];
    let drawn = match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                ^ u64::from(std::process::id()).rotate_left(40)
        }
    };
    drawn.max(1)
}
