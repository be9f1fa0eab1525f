//! RDMC (Derecho's large-message multicast, `verbatim_core::rdmc`) in the
//! simulator: one seed draws 2 to 6 members, the chunk size, the message
//! size limit, the slots per sender, a workload of messages per member and
//! faults of the simulated network (torn and reordered placement, delay
//! spikes, cut links), sometimes a member crash that the others are told
//! about after a detection delay, and sometimes the layer above asking a
//! member to wedge its session. Every member runs an
//! [`RdmcEngine`] over its [`SimMemory`]; the run records what each member
//! delivered and when it wedged, and [`crate::check::rdmc`] judges it.
//!
//! Members are driven like a host drives an engine: a member is woken by
//! a completion, by a WRITE that asked to notify it (RDMA
//! write-with-immediate: the wake-up comes once the WRITE's data is
//! visible, so a WRITE whose data shows up late wakes it again then), by
//! its engine's `next_deadline` and by its workload's next send; with
//! `busy_polling` any write into its memory wakes it (a polling CPU).
//! A step reaps completions, passes death notices, calls `handle_timeout`,
//! takes every delivery (with `short_buffers`, offering half a buffer
//! first: a refused delivery must stay next), offers the workload's
//! messages (a `SlotsBusy`
//! refusal is retried at a later step) and posts every action, each
//! costing the CPU its posting overhead.
//!
//! Every run ends by itself: members go idle once everything is delivered
//! (or everything left waits on a wedged member), the simulated time is
//! capped, and so is the number of events (a member that asks to be
//! woken at the same instant for ever is reported).

use crate::check::rdmc::{
    self as checks, payload, RdmcDelivered, RdmcHistory, RdmcMemberHistory, RdmcWedged,
};
use crate::check::Violation;
use crate::loggp::NetParams;
use crate::memory::SimMemory;
use crate::net::{Cuts, DelaySpike, LinkWindow, Net, NetEvent, Reordering, Schedule, Tearing};
use std::collections::BinaryHeap;
use verbatim_core::config::Mutation;
use verbatim_core::fabric::{Action, MemberId, Op};
use verbatim_core::layout::Layout;
use verbatim_core::rdmc::{RdmcDeliverError, RdmcEngine, RdmcSendError};
use verbatim_core::rng::SplitMix64;
use verbatim_core::{Config, Engine};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// The session's epoch (one session per run).
const EPOCH: u64 = 1;
/// One read in this many by a member's CPU lets a piece of a torn WRITE
/// land in the middle of it (with interleaving on), as in `cluster`.
const INTERLEAVE_ONE_IN: u64 = 8;
/// Actions (and deliveries) one step may take before it is reported as
/// unbounded work: far above what an engine of 6 members with 8 chunks
/// in flight per session and a few messages queued ever has.
const STEP_WORK_MAX: usize = 100_000;

/// True for the mutations that break RDMC: the cluster swarm never runs
/// RDMC, so these are exercised by [`run_seed`] instead.
pub fn is_rdmc_mutation(m: Mutation) -> bool {
    matches!(m, Mutation::RdmcFlagWithChunk)
}

/// One message of a member's workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedMessage {
    /// Its length.
    pub len_bytes: usize,
    /// Not offered before this time (simulated ns).
    pub release_ns: u64,
}

/// A member's crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmcCrash {
    /// Who.
    pub member: u8,
    /// When (simulated ns).
    pub at_ns: u64,
    /// Per member id: how long after the crash it is told
    /// (`handle_peer_down`); the crashed member's own entry is unused.
    pub detect_ns: Vec<u64>,
}

/// What one run is made of.
#[derive(Clone, Debug)]
pub struct RdmcOptions {
    /// The seed (the network's choices too).
    pub seed: u64,
    /// Members of the session (ids `0 .. members`).
    pub members: u8,
    /// `rdmc_slots`.
    pub slots: u32,
    /// `rdmc_chunk_bytes`.
    pub chunk_bytes: u32,
    /// `rdmc_message_bytes_max`.
    pub message_bytes_max: u64,
    /// Per member id: the messages it sends, in order.
    pub workload: Vec<Vec<PlannedMessage>>,
    /// Timing.
    pub net: NetParams,
    /// Large WRITEs land word by word ([`Tearing`]).
    pub tearing: bool,
    /// Torn pieces may land in the middle of a member's reads.
    pub interleaving: bool,
    /// WRITE data may become visible after a later WRITE's ([`Reordering`]).
    pub reordering: bool,
    /// Any write into a member's memory wakes it, not only notifying ones.
    pub busy_polling: bool,
    /// Members first offer a buffer of half the largest message to each
    /// delivery, and a whole one when told it is too short (a refused
    /// delivery must stay next).
    pub short_buffers: bool,
    /// Delay spikes.
    pub delays: Vec<DelaySpike>,
    /// Cut links (`end_ns == u64::MAX`: never heals).
    pub cuts: Vec<LinkWindow>,
    /// A member's crash.
    pub crash: Option<RdmcCrash>,
    /// The layer above asks one member to wedge its session (a view
    /// change), at a time: (member, ns).
    pub wedge: Option<(u8, u64)>,
    /// A deliberately broken rule.
    pub mutation: Mutation,
    /// Record a trace.
    pub trace: bool,
    /// The run stops at this simulated time at the latest.
    pub time_limit_ns: u64,
    /// The run stops after this many events at the latest (reported: a
    /// run that gets there did not go idle).
    pub events_max: u64,
}

impl RdmcOptions {
    /// A fault-free run of `members` members with a few slots and a small
    /// workload set by the caller (scenario tests fill `workload`).
    pub fn new(seed: u64, members: u8) -> RdmcOptions {
        RdmcOptions {
            seed,
            members,
            slots: 2,
            chunk_bytes: 64,
            message_bytes_max: 2048,
            workload: vec![Vec::new(); usize::from(members)],
            net: NetParams::DARE,
            tearing: false,
            interleaving: false,
            reordering: false,
            busy_polling: false,
            short_buffers: false,
            delays: Vec::new(),
            cuts: Vec::new(),
            crash: None,
            wedge: None,
            mutation: Mutation::None,
            trace: false,
            time_limit_ns: 200 * MS,
            events_max: 5_000_000,
        }
    }

    /// With a mutation.
    pub fn with_mutation(mut self, m: Mutation) -> Self {
        self.mutation = m;
        self
    }

    /// Neither a crash, a cut nor an asked wedge: every member must
    /// deliver everything.
    pub fn fault_free(&self) -> bool {
        self.crash.is_none() && self.cuts.is_empty() && self.wedge.is_none()
    }
}

/// The options a seed stands for (2 to 6 members).
pub fn options_for_seed(seed: u64) -> RdmcOptions {
    options_for_seed_with_members(seed, None)
}

/// The options a seed stands for, with the member count given or drawn.
pub fn options_for_seed_with_members(seed: u64, members: Option<u8>) -> RdmcOptions {
    let mut r = SplitMix64::new(seed ^ 0x5244_4D43_5255_4E21); // "RDMCRUN!"
    let drawn = r.range_inclusive(2, 6) as u8;
    let n = members.unwrap_or(drawn).clamp(2, 6);
    let mut o = RdmcOptions::new(seed, n);
    o.chunk_bytes = 64 * r.range_inclusive(1, 8) as u32;
    let chunk = u64::from(o.chunk_bytes);
    o.message_bytes_max = r.range_inclusive(2 * chunk, 6 * 1024);
    o.slots = r.range_inclusive(1, 3) as u32;
    o.net.latency_scale = 1.0 + r.range_inclusive(0, 200) as f64 / 100.0;
    // Sends spread over up to 2 ms, or all at once (a burst that fills
    // every slot and waits on the rows).
    let window_ns = if r.chance(1, 4) {
        0
    } else {
        r.range_inclusive(10 * US, 2 * MS)
    };
    let max = o.message_bytes_max as usize;
    let c = chunk as usize;
    // The lengths at the edges: empty, one byte, around one and two
    // chunks, around a word (the smallest WRITE that may tear or show up
    // late) and around the largest message.
    let edges = [0, 1, 8, 9, c - 1, c, c + 1, 2 * c, max - 1, max];
    o.workload = (0..n)
        .map(|_| {
            let count = r.range_inclusive(3, 12) as usize;
            let mut releases: Vec<u64> = (0..count)
                .map(|_| r.range_inclusive(0, window_ns))
                .collect();
            releases.sort_unstable();
            releases
                .into_iter()
                .map(|release_ns| PlannedMessage {
                    len_bytes: if r.chance(1, 2) {
                        edges[r.range_inclusive(0, edges.len() as u64 - 1) as usize].min(max)
                    } else {
                        r.range_inclusive(0, max as u64) as usize
                    },
                    release_ns,
                })
                .collect()
        })
        .collect();
    // Faults: Reordering is what exposes a flag that runs ahead of its
    // chunk, so half of the seeds have it (a third without tearing, whose
    // word-by-word placement takes precedence in the network).
    o.reordering = r.chance(1, 2);
    o.tearing = r.chance(1, 3);
    o.interleaving = o.tearing && r.chance(2, 3);
    o.busy_polling = r.chance(1, 4);
    o.short_buffers = r.chance(1, 4);
    let horizon_ns = window_ns.max(MS) + MS;
    let link = |r: &mut SplitMix64| {
        let from = r.range_inclusive(0, u64::from(n) - 1) as u8;
        let to = (from + r.range_inclusive(1, u64::from(n) - 1) as u8) % n;
        (from, to)
    };
    for _ in 0..r.range_inclusive(0, 3) {
        let (from, to) = link(&mut r);
        let start_ns = r.range_inclusive(0, horizon_ns);
        o.delays.push(DelaySpike {
            window: LinkWindow {
                from,
                to,
                start_ns,
                end_ns: start_ns + r.range_inclusive(10 * US, MS),
            },
            extra_ns: r.range_inclusive(5 * US, 200 * US),
        });
    }
    if r.chance(1, 5) {
        for _ in 0..r.range_inclusive(1, 2) {
            let (from, to) = link(&mut r);
            let start_ns = r.range_inclusive(0, horizon_ns);
            let end_ns = if r.chance(1, 4) {
                u64::MAX
            } else {
                start_ns + r.range_inclusive(10 * US, 2 * MS)
            };
            let w = LinkWindow {
                from,
                to,
                start_ns,
                end_ns,
            };
            o.cuts.push(w);
            if r.chance(1, 2) {
                o.cuts.push(LinkWindow {
                    from: to,
                    to: from,
                    ..w
                });
            }
        }
    }
    if r.chance(1, 4) {
        o.crash = Some(RdmcCrash {
            member: r.range_inclusive(0, u64::from(n) - 1) as u8,
            at_ns: r.range_inclusive(0, horizon_ns),
            detect_ns: (0..n)
                .map(|_| r.range_inclusive(5 * US, 300 * US))
                .collect(),
        });
    }
    if r.chance(1, 8) {
        let member = r.range_inclusive(0, u64::from(n) - 1) as u8;
        o.wedge = Some((member, r.range_inclusive(0, horizon_ns)));
    }
    o
}

/// A one-line summary of a run's options.
pub fn describe(o: &RdmcOptions) -> String {
    let messages: Vec<usize> = o.workload.iter().map(Vec::len).collect();
    let window_us = o
        .workload
        .iter()
        .flatten()
        .map(|m| m.release_ns)
        .max()
        .unwrap_or(0)
        / US;
    format!(
        "rdmc members={} slots={} chunk={}B max={}B messages={:?} sends_within={}µs latency×{:.2} \
         reordering={} tearing={} interleaving={} busy_polling={} short_buffers={} delays={} cuts={:?} crash={:?} \
         wedge={:?}{}",
        o.members,
        o.slots,
        o.chunk_bytes,
        o.message_bytes_max,
        messages,
        window_us,
        o.net.latency_scale,
        o.reordering,
        o.tearing,
        o.interleaving,
        o.busy_polling,
        o.short_buffers,
        o.delays.len(),
        o.cuts,
        o.crash.as_ref().map(|c| (c.member, c.at_ns)),
        o.wedge,
        if o.mutation == Mutation::None {
            String::new()
        } else {
            format!(" mutation={:?}", o.mutation)
        }
    )
}

/// What a run produced.
#[derive(Debug, Default)]
pub struct RdmcReport {
    /// What the members delivered and when they wedged.
    pub history: RdmcHistory,
    /// Broken invariants (the checkers', and the runner's own: a panic, a
    /// refused configuration, unbounded work).
    pub violations: Vec<Violation>,
    /// The trace, if asked.
    pub trace: Vec<String>,
    /// When the run ended (simulated ns).
    pub end_ns: u64,
    /// Events handled.
    pub events: u64,
    /// Messages sent (all senders).
    pub sent: u64,
    /// Deliveries (all members).
    pub delivered: u64,
    /// Members whose session wedged.
    pub wedged: u64,
    /// Chunk WRITEs whose flag landed (all members).
    pub chunks_written: u64,
    /// Data of WRITEs that became visible late (reordering) or word by
    /// word (tearing), as events.
    pub late_placements: u64,
}

/// The result of one seed.
pub struct RdmcSeedResult {
    /// The seed.
    pub seed: u64,
    /// Its options.
    pub options: RdmcOptions,
    /// What happened.
    pub report: RdmcReport,
}

/// Runs one seed (members drawn), optionally with a mutation and a trace.
pub fn run_seed(seed: u64, mutation: Mutation, trace: bool) -> RdmcSeedResult {
    run_seed_with_members(seed, None, mutation, trace)
}

/// Runs one seed with the member count given or drawn.
pub fn run_seed_with_members(
    seed: u64,
    members: Option<u8>,
    mutation: Mutation,
    trace: bool,
) -> RdmcSeedResult {
    let mut options = options_for_seed_with_members(seed, members).with_mutation(mutation);
    options.trace = trace;
    let report = run(options.clone());
    RdmcSeedResult {
        seed,
        options,
        report,
    }
}

/// Runs one simulation; a panic inside the core is reported as a
/// violation (its assertions are invariants too).
pub fn run(opts: RdmcOptions) -> RdmcReport {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match Run::new(opts) {
        Ok(r) => r.run(),
        Err(v) => RdmcReport {
            violations: vec![v],
            ..RdmcReport::default()
        },
    }));
    match result {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            RdmcReport {
                violations: vec![Violation {
                    invariant: "no panic (core assertion)",
                    time_ns: 0,
                    detail: msg,
                }],
                ..RdmcReport::default()
            }
        }
    }
}

enum Ev {
    Net(NetEvent),
    Wake { member: usize, generation: u64 },
    Crash,
    Wedge,
    PeerDown { member: usize, peer: u8 },
}

struct Item {
    time_ns: u64,
    seq: u64,
    /// Scheduled while the network handled a WRITE that asked to notify
    /// its target: when this placement makes data visible, the target
    /// wakes.
    notify: bool,
    ev: Ev,
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        (self.time_ns, self.seq) == (other.time_ns, other.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Item {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // A max-heap: the earliest event (then the first scheduled) on top.
        (other.time_ns, other.seq).cmp(&(self.time_ns, self.seq))
    }
}

/// The event queue, ordered by time then by scheduling order.
#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Item>,
    seq: u64,
    /// Tags the network's events scheduled now (see [`Item::notify`]).
    inherit_notify: bool,
}

impl Queue {
    fn push(&mut self, time_ns: u64, ev: Ev, notify: bool) {
        self.seq += 1;
        self.heap.push(Item {
            time_ns,
            seq: self.seq,
            notify,
            ev,
        });
    }
}

impl Schedule for Queue {
    fn at(&mut self, at_ns: u64, ev: NetEvent) {
        let notify = self.inherit_notify;
        self.push(at_ns, Ev::Net(ev), notify);
    }
}

struct Member {
    engine: RdmcEngine<SimMemory>,
    alive: bool,
    busy_until_ns: u64,
    next_wake_ns: u64,
    generation: u64,
    /// The workload's next message to offer.
    next_to_send: usize,
    /// Death notices not yet passed to the engine.
    peer_down: Vec<MemberId>,
}

struct Run {
    opts: RdmcOptions,
    net: Net,
    queue: Queue,
    members: Vec<Member>,
    now: u64,
    history: RdmcHistory,
    violations: Vec<Violation>,
    trace: Vec<String>,
    buf: Vec<u8>,
    events: u64,
    late_placements: u64,
}

impl Run {
    fn new(opts: RdmcOptions) -> Result<Run, Violation> {
        let n = opts.members;
        let refused = |detail: String| Violation {
            invariant: "rdmc engine starts on a valid configuration",
            time_ns: 0,
            detail,
        };
        let config = |id: u8| {
            let mut c = Config::new(n, MemberId(id));
            c.rdmc_slots = opts.slots;
            c.rdmc_chunk_bytes = opts.chunk_bytes;
            c.rdmc_message_bytes_max = opts.message_bytes_max;
            // The log is not used here: its smallest ring keeps every
            // member's simulated memory small.
            c.log_ring_bytes = 64 * 1024;
            c.mutation = opts.mutation;
            c
        };
        let layout = Layout::new(&config(0)).map_err(|e| refused(format!("{e:?}")))?;
        let all_members = (1u64 << n) - 1;
        let mut memories = Vec::new();
        let mut members = Vec::new();
        for id in 0..n {
            let mem = SimMemory::new(&layout);
            memories.push(mem.clone());
            // The member's CPU reads through its own view (interleaving).
            let view = if opts.interleaving {
                mem.node_view(
                    opts.seed ^ (0x5244_4D43 << 8) ^ u64::from(id),
                    INTERLEAVE_ONE_IN,
                )
            } else {
                mem
            };
            let engine = RdmcEngine::new(&config(id), view, EPOCH, all_members)
                .ok_or_else(|| refused(format!("member {id} of {n}: RdmcEngine::new is None")))?;
            members.push(Member {
                engine,
                alive: true,
                busy_until_ns: 0,
                next_wake_ns: u64::MAX,
                generation: 0,
                next_to_send: 0,
                peer_down: Vec::new(),
            });
        }
        let mut net = Net::new(opts.net, &layout, memories, opts.seed);
        net.interleave_reads = opts.interleaving;
        if opts.tearing {
            net.faults.push(Box::new(Tearing));
        }
        if opts.reordering {
            net.faults.push(Box::new(Reordering));
        }
        for d in &opts.delays {
            net.faults.push(Box::new(*d));
        }
        if !opts.cuts.is_empty() {
            net.faults.push(Box::new(Cuts(opts.cuts.clone())));
        }
        let history = RdmcHistory {
            sent_bytes: vec![Vec::new(); usize::from(n)],
            planned: opts.workload.iter().map(|w| w.len() as u64).collect(),
            members: vec![RdmcMemberHistory::default(); usize::from(n)],
            fault_free: opts.fault_free(),
            end_ns: 0,
        };
        let mut run = Run {
            buf: vec![0u8; opts.message_bytes_max as usize],
            opts,
            net,
            queue: Queue::default(),
            members,
            now: 0,
            history,
            violations: Vec::new(),
            trace: Vec::new(),
            events: 0,
            late_placements: 0,
        };
        for i in 0..usize::from(n) {
            run.wake(i, 0);
        }
        if let Some(c) = &run.opts.crash {
            run.queue.push(c.at_ns, Ev::Crash, false);
        }
        if let Some((_, at_ns)) = run.opts.wedge {
            run.queue.push(at_ns, Ev::Wedge, false);
        }
        Ok(run)
    }

    fn log(&mut self, f: impl FnOnce() -> String) {
        if self.opts.trace {
            let line = format!("[{:>10.3} µs] {}", self.now as f64 / 1e3, f());
            self.trace.push(line);
        }
    }

    fn violation(&mut self, invariant: &'static str, detail: String) {
        self.log(|| format!("VIOLATION {invariant}: {detail}"));
        self.violations.push(Violation {
            invariant,
            time_ns: self.now,
            detail,
        });
    }

    /// Wakes member `i` at `at_ns` (or now), unless it is woken earlier.
    fn wake(&mut self, i: usize, at_ns: u64) {
        if at_ns == u64::MAX {
            return;
        }
        let at_ns = at_ns.max(self.now);
        let m = &mut self.members[i];
        if at_ns < m.next_wake_ns {
            m.next_wake_ns = at_ns;
            m.generation += 1;
            let generation = m.generation;
            self.queue.push(
                at_ns,
                Ev::Wake {
                    member: i,
                    generation,
                },
                false,
            );
        }
    }

    fn run(mut self) -> RdmcReport {
        let mut capped = false;
        while let Some(item) = self.queue.heap.pop() {
            if item.time_ns > self.opts.time_limit_ns {
                break;
            }
            self.events += 1;
            if self.events > self.opts.events_max {
                capped = true;
                break;
            }
            self.now = self.now.max(item.time_ns);
            self.handle(item);
        }
        if capped {
            let detail = format!(
                "still busy after {} events (at {} ns): a member keeps asking to be woken",
                self.opts.events_max, self.now
            );
            self.violation("rdmc run ends by itself", detail);
        }
        self.finish()
    }

    fn handle(&mut self, item: Item) {
        match item.ev {
            Ev::Net(ne) => {
                let (wakes, late) = match &ne {
                    NetEvent::Land { wr, .. } => (wr.notify, false),
                    NetEvent::Place { .. } | NetEvent::LandWord { .. } => (item.notify, true),
                    NetEvent::Complete { .. } => (true, false),
                };
                // A torn word may have landed earlier, in the middle of a
                // read (interleaving): its event then writes nothing, but
                // the notification of a WRITE comes once all of it is
                // placed, which is no earlier than this word's time.
                let torn_target = match &ne {
                    NetEvent::LandWord { dst, .. } if item.notify => Some(*dst),
                    _ => None,
                };
                self.late_placements += u64::from(late);
                // What a notifying WRITE schedules (its late placement,
                // its torn words) wakes the target when it lands.
                self.queue.inherit_notify =
                    item.notify || matches!(&ne, NetEvent::Land { wr, .. } if wr.notify);
                let woken = self.net.handle(&mut self.queue, self.now, ne);
                self.queue.inherit_notify = false;
                if let Some(m) = woken.filter(|_| wakes || self.opts.busy_polling) {
                    self.wake(m, self.now);
                } else if let Some(m) = torn_target {
                    self.wake(m, self.now);
                }
            }
            Ev::Wake { member, generation } => {
                let m = &mut self.members[member];
                if generation != m.generation || !m.alive {
                    return;
                }
                m.next_wake_ns = u64::MAX;
                if self.now < m.busy_until_ns {
                    let at = m.busy_until_ns;
                    self.wake(member, at);
                    return;
                }
                self.step(member);
            }
            Ev::Crash => {
                let Some(c) = self.opts.crash.clone() else {
                    return;
                };
                let i = usize::from(c.member);
                self.log(|| format!("fault: member {i} crashes"));
                self.net.crash(i);
                self.members[i].alive = false;
                self.history.members[i].crashed_at_ns = Some(self.now);
                for j in 0..self.members.len() {
                    if j != i {
                        let at = self.now + c.detect_ns.get(j).copied().unwrap_or(0);
                        self.queue.push(
                            at,
                            Ev::PeerDown {
                                member: j,
                                peer: c.member,
                            },
                            false,
                        );
                    }
                }
            }
            Ev::Wedge => {
                let Some((member, _)) = self.opts.wedge else {
                    return;
                };
                let i = usize::from(member);
                if self.members[i].alive {
                    self.log(|| format!("member {i} is asked to wedge"));
                    self.members[i].engine.wedge();
                    self.note_wedge(i);
                    self.wake(i, self.now);
                }
            }
            Ev::PeerDown { member, peer } => {
                if self.members[member].alive {
                    self.log(|| format!("member {member} is told member {peer} is down"));
                    self.members[member].peer_down.push(MemberId(peer));
                    self.wake(member, self.now);
                }
            }
        }
    }

    /// Records the moment member `i`'s session wedged, the first time its
    /// engine says so.
    fn note_wedge(&mut self, i: usize) {
        if self.history.members[i].wedged.is_some() {
            return;
        }
        if let Some(cause) = self.members[i].engine.wedged() {
            let after_deliveries = self.history.members[i].deliveries.len();
            self.log(|| format!("member {i} wedges: {cause:?}"));
            self.history.members[i].wedged = Some(RdmcWedged {
                time_ns: self.now,
                after_deliveries,
                cause: format!("{cause:?}"),
            });
        }
    }

    /// One poll of member `i` at the current time.
    fn step(&mut self, i: usize) {
        let t = self.now;
        while let Some(c) = self.net.nic_mut(i).cq.pop_front() {
            self.members[i].engine.handle_completion(t, c);
            if !c.status.is_ok() {
                self.log(|| format!("member {i}: {:?} to {:?}", c.status, c.peer));
            }
            self.note_wedge(i);
        }
        for peer in std::mem::take(&mut self.members[i].peer_down) {
            self.members[i].engine.handle_peer_down(t, peer);
            self.note_wedge(i);
        }
        self.members[i].engine.handle_timeout(t);
        self.note_wedge(i);
        self.deliver(i);
        self.offer(i);
        // Actions, each costing the CPU its posting overhead.
        let mut depart = t + self.opts.net.poll_ns as u64;
        let mut work = 0usize;
        while let Some(a) = self.members[i].engine.poll_action() {
            work += 1;
            if work > STEP_WORK_MAX {
                let detail =
                    format!("member {i} posted more than {STEP_WORK_MAX} actions in one step");
                self.violation("rdmc bounded work", detail);
                break;
            }
            match a {
                Action::Post(wr) => {
                    depart += self.net.post_overhead_ns(&wr.op);
                    if self.opts.trace {
                        let what = match wr.op {
                            Op::Write { remote, len, .. } => {
                                format!("WRITE {len} B at {}", remote.offset)
                            }
                            Op::WriteInline { remote, len, .. } => {
                                format!("WRITE inline {len} B at {}", remote.offset)
                            }
                            other => format!("{other:?}"),
                        };
                        self.log(|| {
                            format!(
                                "member {i} posts {:#x} to {} ({what}{})",
                                wr.wr_id.0,
                                wr.peer.0,
                                if wr.notify { ", notify" } else { "" }
                            )
                        });
                    }
                    self.net.post(&mut self.queue, depart, i, wr);
                }
                Action::SetAccess {
                    peer,
                    region,
                    access,
                } => self.net.set_access(i, peer, region, access),
                Action::Reconnect { peer, channel } => self.net.reconnect(i, peer, channel),
            }
        }
        self.note_wedge(i);
        self.members[i].busy_until_ns = depart;
        // Posting may have let a session take in what landed: deliver at
        // the next step, when the engine says it is due.
        let deadline = self.members[i].engine.next_deadline();
        if deadline != u64::MAX {
            self.wake(i, deadline.max(depart));
        }
        let next_release_ns = self.opts.workload[i]
            .get(self.members[i].next_to_send)
            .map(|m| m.release_ns);
        if let Some(at) = next_release_ns.filter(|&at| at > t) {
            self.wake(i, at);
        }
    }

    /// Takes every delivery member `i` has.
    fn deliver(&mut self, i: usize) {
        for _ in 0..STEP_WORK_MAX {
            let engine = &mut self.members[i].engine;
            let (got, offered_bytes) = if self.opts.short_buffers {
                let half = self.buf.len() / 2;
                match engine.poll_delivery(&mut self.buf[..half]) {
                    Err(RdmcDeliverError::BufferTooSmall { len }) if len as usize > half => {
                        (engine.poll_delivery(&mut self.buf), self.buf.len())
                    }
                    got => (got, half),
                }
            } else {
                (engine.poll_delivery(&mut self.buf), self.buf.len())
            };
            self.note_wedge(i);
            let d = match got {
                Ok(Some(d)) => d,
                Ok(None) => return,
                Err(RdmcDeliverError::BufferTooSmall { len }) => {
                    let detail = format!(
                        "member {i} was refused a delivery of {len} bytes into a buffer of \
                         {offered_bytes} bytes (rdmc_message_bytes_max = {})",
                        self.buf.len()
                    );
                    self.violation("rdmc refuses only buffers too short", detail);
                    return;
                }
            };
            let Some(bytes) = self.buf.get(..d.len as usize) else {
                let detail = format!("member {i} was told of a delivery of {} bytes", d.len);
                self.violation("rdmc delivers within the message size limit", detail);
                return;
            };
            let delivered = RdmcDelivered {
                time_ns: self.now,
                sender: d.sender.0,
                index: d.index,
                len_bytes: d.len,
                digest: checks::digest(bytes),
            };
            // Where the bytes differ from what was sent (for the trace).
            let diff = if self.opts.trace {
                let sent = self.history.sent_bytes.get(usize::from(d.sender.0));
                let want = sent
                    .and_then(|s| s.get(d.index as usize))
                    .map(|&len| payload(d.sender.0, d.index, len as usize));
                match &want {
                    Some(w) if w[..] == bytes[..] => String::new(),
                    Some(w) => format!(
                        " (differs from what was sent from byte {})",
                        w.iter()
                            .zip(bytes)
                            .position(|(a, b)| a != b)
                            .unwrap_or(w.len().min(bytes.len()))
                    ),
                    None => " (never sent)".into(),
                }
            } else {
                String::new()
            };
            if d.epoch != EPOCH {
                let detail = format!("member {i} delivered in epoch {}", d.epoch);
                self.violation("rdmc delivers in its session's epoch", detail);
            }
            self.log(|| {
                format!(
                    "member {i} delivers message {} of {} ({} B){diff}",
                    d.index, d.sender.0, d.len
                )
            });
            self.history.members[i].deliveries.push(delivered);
        }
        let detail = format!("member {i} had more than {STEP_WORK_MAX} deliveries in one step");
        self.violation("rdmc bounded work", detail);
    }

    /// Offers member `i`'s released messages, in order, until one is
    /// refused.
    fn offer(&mut self, i: usize) {
        let t = self.now;
        while let Some(&next) = self.opts.workload[i].get(self.members[i].next_to_send) {
            if next.release_ns > t {
                return;
            }
            let index = self.members[i].next_to_send as u64;
            let bytes = payload(i as u8, index, next.len_bytes);
            match self.members[i].engine.send(&bytes) {
                Ok(got) => {
                    if got != index {
                        let detail = format!(
                            "member {i}'s message {index} was sent as index {got} (a sender's \
                             indices count its messages)"
                        );
                        self.violation("rdmc send index", detail);
                    }
                    self.log(|| format!("member {i} sends message {index} ({} B)", next.len_bytes));
                    self.history.sent_bytes[i].push(next.len_bytes as u64);
                    self.members[i].next_to_send += 1;
                }
                // Retried at a later step: a row landing (it notifies)
                // frees the slot.
                Err(RdmcSendError::SlotsBusy) => return,
                Err(RdmcSendError::Wedged) => {
                    // Nothing more goes out in this session.
                    self.members[i].next_to_send = usize::MAX;
                    return;
                }
                Err(RdmcSendError::TooLarge { len, max }) => {
                    let detail =
                        format!("member {i}'s message of {len} bytes refused as above {max}");
                    self.violation("rdmc sends within the message size limit", detail);
                    self.members[i].next_to_send += 1;
                }
            }
            self.note_wedge(i);
        }
    }

    fn finish(mut self) -> RdmcReport {
        self.history.end_ns = self.now;
        let mut violations = checks::check_all(&self.history);
        violations.append(&mut self.violations);
        // In time order (stable: a checker's own order within an instant).
        violations.sort_by_key(|v| v.time_ns);
        let mut chunks_written = 0;
        for m in &self.members {
            chunks_written += m.engine.status().chunks_written;
        }
        RdmcReport {
            sent: self.history.sent_bytes.iter().map(|s| s.len() as u64).sum(),
            delivered: self
                .history
                .members
                .iter()
                .map(|m| m.deliveries.len() as u64)
                .sum(),
            wedged: self
                .history
                .members
                .iter()
                .filter(|m| m.wedged.is_some())
                .count() as u64,
            chunks_written,
            late_placements: self.late_placements,
            end_ns: self.now,
            events: self.events,
            history: self.history,
            violations,
            trace: self.trace,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_stands_for_one_run() {
        let a = run(options_for_seed(11));
        let b = run(options_for_seed(11));
        assert_eq!(a.history, b.history);
        assert_eq!(a.events, b.events);
    }

    #[test]
    fn seeds_draw_the_sizes_and_faults_asked_for() {
        let mut reordering = 0;
        let mut crashes = 0;
        for seed in 0..200 {
            let o = options_for_seed(seed);
            assert!((2..=6).contains(&o.members));
            assert!((64..=512).contains(&o.chunk_bytes) && o.chunk_bytes.is_multiple_of(64));
            assert!((1..=3).contains(&o.slots));
            assert!(o.message_bytes_max <= 6 * 1024);
            for w in &o.workload {
                assert!((3..=12).contains(&w.len()));
                assert!(w.iter().all(|m| m.len_bytes as u64 <= o.message_bytes_max));
            }
            reordering += u64::from(o.reordering);
            crashes += u64::from(o.crash.is_some());
        }
        assert!(reordering > 60, "reordering in {reordering} of 200 seeds");
        assert!(crashes > 20, "a crash in {crashes} of 200 seeds");
        assert_eq!(options_for_seed_with_members(5, Some(4)).members, 4);
    }

    #[test]
    fn a_fault_free_run_delivers_everything_everywhere() {
        let mut o = RdmcOptions::new(3, 3);
        o.workload = (0..3)
            .map(|_| {
                [0, 1, 64, 65, 2048]
                    .iter()
                    .map(|&len_bytes| PlannedMessage {
                        len_bytes,
                        release_ns: 0,
                    })
                    .collect()
            })
            .collect();
        let r = run(o);
        assert_eq!(r.violations, vec![]);
        assert_eq!(r.sent, 15);
        assert_eq!(r.delivered, 45, "three members deliver 15 messages each");
        assert!(r.chunks_written > 0);
    }
}
