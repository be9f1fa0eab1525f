//! The model: everything the screen shows, folded from link messages.
//!
//! [`Model`] never reads a clock; every input carries a [`Now`]. All its
//! collections are bounded (`*_MAX` constants), so a console left open
//! for a week uses the memory it used after a minute.

use crate::link::{LinkMessage, Report};
use crate::target::{Endpoint, Target};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use verbatim_status::{ConfigSnapshot, Failover, GroupConfiguration, Snapshot};

/// Samples kept in each history: one per second, one minute.
pub const HISTORY_SAMPLES: usize = 60;
/// Events kept (oldest dropped first).
pub const EVENTS_MAX: usize = 256;
/// Failovers kept (lowest terms dropped first).
pub const FAILOVERS_MAX: usize = 32;
/// Terms kept in the timeline (lowest dropped first).
pub const TERMS_MAX: usize = 64;

/// A point in time, as both a monotonic instant (for ages) and Unix ms
/// (for stamping console events next to the replicas' own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time.
    pub mono: Instant,
    /// Wall-clock time (Unix ms).
    pub unix_ms: u64,
}

impl Now {
    /// The system clocks; only the shells call this.
    pub fn system() -> Now {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Now {
            mono: Instant::now(),
            unix_ms,
        }
    }

    /// `self` moved forward by `d` on both clocks (tests script time).
    pub fn after(self, d: Duration) -> Now {
        Now {
            mono: self.mono + d,
            unix_ms: self.unix_ms + d.as_millis() as u64,
        }
    }
}

/// State of the console's link to one replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// No snapshot and no failure yet.
    Connecting {
        /// Since when.
        since: Instant,
    },
    /// Snapshots arriving.
    Up {
        /// Since when.
        since: Instant,
    },
    /// Unreachable; the watcher keeps retrying.
    Down {
        /// First failure of this outage (retries do not move it).
        since: Instant,
        /// The latest failure's reason.
        reason: String,
    },
}

/// One replica as the console knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaState {
    /// Index into the target's endpoints.
    pub index: usize,
    /// Where it is.
    pub endpoint: Endpoint,
    /// The link.
    pub link: LinkState,
    /// Its latest snapshot (kept while it is down, shown as stale).
    pub snapshot: Option<Snapshot>,
    /// When that snapshot arrived.
    pub snapshot_at: Option<Instant>,
    /// Snapshots received.
    pub reports: u64,
    /// Lines that were not snapshots.
    pub garbage_lines: u64,
    /// Why the last one was rejected.
    pub last_garbage: Option<String>,
    /// Times the link came up (the first included).
    pub link_ups: u64,
    /// Failed connection attempts and lost connections.
    pub link_failures: u64,
}

impl ReplicaState {
    /// Replica id: what it says, else what the manifest said.
    pub fn id(&self) -> Option<u8> {
        self.snapshot.as_ref().map(|s| s.id).or(self.endpoint.id)
    }

    /// `r1`, or `#2` (endpoint index) when the id is not known yet.
    pub fn label(&self) -> String {
        match self.id() {
            Some(id) => format!("r{id}"),
            None => format!("#{}", self.index),
        }
    }

    /// Snapshots are arriving.
    pub fn is_up(&self) -> bool {
        matches!(self.link, LinkState::Up { .. })
    }

    /// The snapshot, only while the link is up.
    pub fn live_snapshot(&self) -> Option<&Snapshot> {
        if self.is_up() {
            self.snapshot.as_ref()
        } else {
            None
        }
    }
}

/// Who a snapshot says leads (itself, if it is the leader).
fn leader_claim(s: &Snapshot) -> Option<u8> {
    if s.role == "leader" {
        Some(s.id)
    } else {
        s.leader
    }
}

/// A failover merged from the replicas' reports.
#[derive(Clone, Debug, PartialEq)]
pub struct FailoverRow {
    /// As the new leader timed it.
    pub failover: Failover,
    /// Client-visible gap, when the host reports it.
    pub client_gap_us: Option<u64>,
    /// The replica whose snapshot carried it.
    pub reported_by: u8,
}

impl FailoverRow {
    /// Detection + election + first commit: the replicas' view of the
    /// outage (None until the first commit is known).
    pub fn total_us(&self) -> Option<u64> {
        let f = &self.failover;
        Some(f.detection_us + f.election_us + f.first_commit_us?)
    }
}

/// One term of the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TermEntry {
    /// The term.
    pub term: u64,
    /// Its leader, once anyone names one.
    pub leader: Option<u8>,
    /// Earliest evidence of the term (Unix ms, replica clocks).
    pub first_seen_unix_ms: u64,
}

/// Where an event came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventSource {
    /// A replica's snapshot.
    Replica(u8),
    /// The console itself (links, derived leader changes).
    Console,
}

/// One entry of the event list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventEntry {
    /// When (Unix ms).
    pub at_unix_ms: u64,
    /// `leader-change`, `replica-lost`, `revoke`, `log-full`, ...
    pub kind: String,
    /// Human-readable detail.
    pub detail: String,
    /// First reporter.
    pub source: EventSource,
}

/// One second of throughput and latency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Requests per second summed over the replicas that are up.
    pub ops_per_sec: Option<u64>,
    /// Leader's write median (ns).
    pub p50_ns: Option<u64>,
    /// Leader's write 99th percentile (ns).
    pub p99_ns: Option<u64>,
}

/// The last [`HISTORY_SAMPLES`] seconds, oldest first; a second with no
/// data is a `None` gap, not a zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// Samples, oldest first.
    pub samples: VecDeque<Sample>,
    last_second: Option<u64>,
}

impl History {
    /// Records `sample` for wall-clock second `second`; skipped seconds
    /// become gaps, a repeated second overwrites its sample.
    pub fn record(&mut self, second: u64, sample: Sample) {
        match self.last_second {
            Some(last) if second <= last => {
                if let Some(s) = self.samples.back_mut() {
                    *s = sample;
                }
                return;
            }
            Some(last) => {
                let gaps = (second - last - 1).min(HISTORY_SAMPLES as u64);
                for _ in 0..gaps {
                    self.push(Sample::default());
                }
            }
            None => {}
        }
        self.push(sample);
        self.last_second = Some(second);
    }

    fn push(&mut self, sample: Sample) {
        if self.samples.len() == HISTORY_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// One series, oldest first.
    pub fn series(&self, pick: impl Fn(&Sample) -> Option<u64>) -> Vec<Option<u64>> {
        self.samples.iter().map(pick).collect()
    }
}

/// Whether a replica's log accepts the current leader's writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Granted to the current leader.
    ToLeader,
    /// Granted to someone else (a stale or future leader).
    ToOther(u8),
    /// Granted to nobody.
    Nobody,
    /// The replica is the leader: nobody writes its log (DARE §3.2.1).
    IsLeader,
    /// No live snapshot, or no leader to compare with.
    Unknown,
}

/// Everything the console knows about the group.
#[derive(Clone, Debug)]
pub struct Model {
    /// Cluster name from the manifest, if any.
    pub cluster: Option<String>,
    /// One per endpoint, in target order.
    pub replicas: Vec<ReplicaState>,
    /// Throughput and latency, one sample per second.
    pub history: History,
    /// The time of the latest input.
    pub now: Now,
    /// Garbage lines from all replicas.
    pub garbage_total: u64,
    failovers: BTreeMap<u64, FailoverRow>,
    terms: BTreeMap<u64, TermEntry>,
    events: BTreeMap<(u64, String, String), EventSource>,
    /// (term, leader) last announced as a console event.
    announced_leader: Option<(u64, u8)>,
}

impl Model {
    /// A model with every endpoint connecting.
    pub fn new(target: &Target, now: Now) -> Model {
        let replicas = target
            .endpoints
            .iter()
            .enumerate()
            .map(|(index, endpoint)| ReplicaState {
                index,
                endpoint: endpoint.clone(),
                link: LinkState::Connecting { since: now.mono },
                snapshot: None,
                snapshot_at: None,
                reports: 0,
                garbage_lines: 0,
                last_garbage: None,
                link_ups: 0,
                link_failures: 0,
            })
            .collect();
        Model {
            cluster: target.cluster.clone(),
            replicas,
            history: History::default(),
            now,
            garbage_total: 0,
            failovers: BTreeMap::new(),
            terms: BTreeMap::new(),
            events: BTreeMap::new(),
            announced_leader: None,
        }
    }

    /// Folds one link message in.
    pub fn handle(&mut self, message: LinkMessage, now: Now) {
        self.now = now;
        match message {
            LinkMessage::Report { endpoint, report } => self.on_report(endpoint, *report, now),
            LinkMessage::Garbage { endpoint, reason } => {
                let r = self.replica_mut(endpoint);
                r.garbage_lines += 1;
                r.last_garbage = Some(reason);
                self.garbage_total += 1;
            }
            LinkMessage::Down { endpoint, reason } => self.on_down(endpoint, reason, now),
        }
        self.announce_leader(now);
    }

    /// Advances time: samples the histories once per wall-clock second.
    pub fn tick(&mut self, now: Now) {
        self.now = now;
        let sample = self.sample();
        self.history.record(now.unix_ms / 1000, sample);
    }

    /// `--once`: endpoints that never answered become unreachable with
    /// `reason`.
    pub fn mark_silent(&mut self, reason: &str, now: Now) {
        self.now = now;
        for i in 0..self.replicas.len() {
            if matches!(self.replicas[i].link, LinkState::Connecting { .. }) {
                self.on_down(i, reason.to_string(), now);
            }
        }
    }

    fn replica_mut(&mut self, endpoint: usize) -> &mut ReplicaState {
        // Endpoint indices come from our own watchers, one per endpoint.
        assert!(
            endpoint < self.replicas.len(),
            "message for unknown endpoint {endpoint}"
        );
        &mut self.replicas[endpoint]
    }

    fn on_report(&mut self, endpoint: usize, report: Report, now: Now) {
        let Report {
            snapshot,
            client_gaps_us,
        } = report;
        let r = self.replica_mut(endpoint);
        let came_back = match &r.link {
            LinkState::Up { .. } => None,
            LinkState::Connecting { .. } => Some(None),
            LinkState::Down { since, .. } => Some(Some(now.mono.saturating_duration_since(*since))),
        };
        if came_back.is_some() {
            r.link = LinkState::Up { since: now.mono };
            r.link_ups += 1;
        }
        r.reports += 1;
        r.snapshot_at = Some(now.mono);
        let label = format!("r{}", snapshot.id);
        let id = snapshot.id;
        if let Some(Some(outage)) = came_back {
            let detail = format!("{label} is back after {}", crate::format::age(outage));
            self.add_event(now.unix_ms, "replica-back", detail, EventSource::Console);
        }
        for f in &snapshot.failovers {
            let row = FailoverRow {
                failover: f.clone(),
                client_gap_us: client_gaps_us.get(&f.term).copied(),
                reported_by: id,
            };
            self.merge_failover(row);
        }
        for e in &snapshot.events {
            self.add_event(
                e.at_unix_ms,
                &e.kind,
                e.detail.clone(),
                EventSource::Replica(id),
            );
        }
        self.note_term(snapshot.term, leader_claim(&snapshot), snapshot.at_unix_ms);
        self.replicas[endpoint].snapshot = Some(snapshot);
    }

    fn on_down(&mut self, endpoint: usize, reason: String, now: Now) {
        let r = self.replica_mut(endpoint);
        r.link_failures += 1;
        match &mut r.link {
            LinkState::Down { reason: old, .. } => *old = reason,
            _ => {
                r.link = LinkState::Down {
                    since: now.mono,
                    reason: reason.clone(),
                };
                let detail = format!("{}: {reason}", r.label());
                self.add_event(now.unix_ms, "unreachable", detail, EventSource::Console);
            }
        }
    }

    /// Keeps one row per term. The winner reports its own failover and
    /// fills in `first_commit_us` later, so a newer report replaces an
    /// older one unless it carries less.
    fn merge_failover(&mut self, row: FailoverRow) {
        let term = row.failover.term;
        let at_unix_ms = row.failover.at_unix_ms;
        let leader = row.failover.new_leader;
        match self.failovers.get_mut(&term) {
            Some(old) => {
                let regress = old.failover.first_commit_us.is_some()
                    && row.failover.first_commit_us.is_none()
                    || old.client_gap_us.is_some() && row.client_gap_us.is_none();
                if !regress {
                    *old = row;
                }
            }
            None => {
                self.failovers.insert(term, row);
                while self.failovers.len() > FAILOVERS_MAX {
                    self.failovers.pop_first();
                }
            }
        }
        self.note_term(term, Some(leader), at_unix_ms);
    }

    fn note_term(&mut self, term: u64, leader: Option<u8>, seen_unix_ms: u64) {
        let entry = self.terms.entry(term).or_insert(TermEntry {
            term,
            leader: None,
            first_seen_unix_ms: seen_unix_ms,
        });
        entry.leader = entry.leader.or(leader);
        entry.first_seen_unix_ms = entry.first_seen_unix_ms.min(seen_unix_ms);
        while self.terms.len() > TERMS_MAX {
            self.terms.pop_first();
        }
    }

    /// Adds an event unless an identical one (time, kind, detail) is
    /// there: several replicas report the same leader change.
    fn add_event(&mut self, at_unix_ms: u64, kind: &str, detail: String, source: EventSource) {
        self.events
            .entry((at_unix_ms, kind.to_string(), detail))
            .or_insert(source);
        while self.events.len() > EVENTS_MAX {
            self.events.pop_first();
        }
    }

    fn announce_leader(&mut self, now: Now) {
        let (Some(term), Some(leader)) = (self.current_term(), self.leader()) else {
            return;
        };
        let newer = self
            .announced_leader
            .is_none_or(|(t, l)| term > t || (term == t && leader != l));
        if newer {
            let was = self
                .announced_leader
                .map(|(_, l)| format!(" (was r{l})"))
                .unwrap_or_default();
            self.add_event(
                now.unix_ms,
                "leader",
                format!("r{leader} leads term {term}{was}"),
                EventSource::Console,
            );
            self.announced_leader = Some((term, leader));
        }
    }

    fn sample(&self) -> Sample {
        let up: Vec<&Snapshot> = self
            .replicas
            .iter()
            .filter_map(ReplicaState::live_snapshot)
            .collect();
        let ops_per_sec = (!up.is_empty()).then(|| {
            up.iter()
                .map(|s| s.latency.ops_per_sec.max(0.0))
                .sum::<f64>()
                .round() as u64
        });
        let writes = self
            .leader_snapshot()
            .map(|s| &s.latency.writes)
            .filter(|w| w.count > 0);
        Sample {
            ops_per_sec,
            p50_ns: writes.map(|w| w.p50_ns),
            p99_ns: writes.map(|w| w.p99_ns),
        }
    }

    // ---- derived views -------------------------------------------------

    /// Highest term among replicas that are up.
    pub fn current_term(&self) -> Option<u64> {
        self.replicas
            .iter()
            .filter_map(ReplicaState::live_snapshot)
            .map(|s| s.term)
            .max()
    }

    /// The leader of the highest term seen among replicas that are up: the
    /// replica that says it leads that term, else whom its members name.
    /// A stale snapshot of a dead leader never counts.
    pub fn leader(&self) -> Option<u8> {
        let term = self.current_term()?;
        let live = || {
            self.replicas
                .iter()
                .filter_map(ReplicaState::live_snapshot)
                .filter(|s| s.term == term)
        };
        live()
            .filter(|s| s.role == "leader")
            .map(|s| s.id)
            .min()
            .or_else(|| live().find_map(|s| s.leader))
    }

    /// Replicas that claim leadership of the current term. More than one
    /// would be a safety violation, shown as such.
    pub fn leaders_in_current_term(&self) -> Vec<u8> {
        let Some(term) = self.current_term() else {
            return Vec::new();
        };
        let mut ids: Vec<u8> = self
            .replicas
            .iter()
            .filter_map(ReplicaState::live_snapshot)
            .filter(|s| s.term == term && s.role == "leader")
            .map(|s| s.id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The leader's live snapshot, if the console is attached to it.
    pub fn leader_snapshot(&self) -> Option<&Snapshot> {
        let leader = self.leader()?;
        self.replicas
            .iter()
            .filter_map(ReplicaState::live_snapshot)
            .find(|s| s.id == leader)
    }

    /// Entries replica `index` lags behind the leader: the leader's tail
    /// index minus its apply index (0 for the leader).
    pub fn lag_entries(&self, index: usize) -> Option<u64> {
        let leader = self.leader_snapshot()?;
        let s = self.replicas.get(index)?.live_snapshot()?;
        if s.id == leader.id {
            return Some(0);
        }
        Some(leader.log.tail_index.saturating_sub(s.log.apply_index))
    }

    /// Bytes replica `index` lags behind the leader's tail, as the leader
    /// sees it (0 for the leader). Known even while it is down.
    pub fn lag_bytes(&self, index: usize) -> Option<u64> {
        let leader = self.leader_snapshot()?;
        let id = self.replicas.get(index)?.id()?;
        if id == leader.id {
            return Some(0);
        }
        leader
            .peers
            .iter()
            .find(|p| p.id == id)
            .map(|p| p.lag_bytes)
    }

    /// Whether replica `index`'s log accepts the current leader.
    pub fn grant(&self, index: usize) -> Grant {
        let (Some(s), Some(leader)) = (
            self.replicas
                .get(index)
                .and_then(ReplicaState::live_snapshot),
            self.leader(),
        ) else {
            return Grant::Unknown;
        };
        if s.id == leader {
            return Grant::IsLeader;
        }
        match s.log_granted_to {
            Some(g) if g == leader => Grant::ToLeader,
            Some(g) => Grant::ToOther(g),
            None => Grant::Nobody,
        }
    }

    /// Configuration: the leader's, else any live replica's, else any.
    pub fn config(&self) -> Option<&ConfigSnapshot> {
        self.leader_snapshot()
            .or_else(|| self.replicas.iter().find_map(ReplicaState::live_snapshot))
            .or_else(|| self.replicas.iter().find_map(|r| r.snapshot.as_ref()))
            .map(|s| &s.config)
    }

    /// The group configuration (DARE §3.4), as the leader goes by it (or
    /// any live replica, if none leads). None from replicas that predate
    /// it (their snapshots have no size).
    pub fn group(&self) -> Option<&GroupConfiguration> {
        self.leader_snapshot()
            .or_else(|| self.replicas.iter().find_map(ReplicaState::live_snapshot))
            .map(|s| &s.group)
            .filter(|g| g.size > 0)
    }

    /// Lease state, when any replica reports one.
    pub fn lease(&self) -> Option<&str> {
        self.leader_snapshot()
            .and_then(|s| s.lease.as_deref())
            .or_else(|| {
                self.replicas
                    .iter()
                    .filter_map(ReplicaState::live_snapshot)
                    .find_map(|s| s.lease.as_deref())
            })
    }

    /// Replicas whose link is up.
    pub fn up_count(&self) -> usize {
        self.replicas.iter().filter(|r| r.is_up()).count()
    }

    /// Every endpoint has sent at least one snapshot.
    pub fn all_reported(&self) -> bool {
        self.replicas.iter().all(|r| r.snapshot.is_some())
    }

    /// Failovers, newest term first.
    pub fn failovers(&self) -> impl Iterator<Item = &FailoverRow> {
        self.failovers.values().rev()
    }

    /// The term timeline, newest first.
    pub fn terms(&self) -> impl Iterator<Item = &TermEntry> {
        self.terms.values().rev()
    }

    /// Events, newest first.
    pub fn events(&self) -> impl Iterator<Item = EventEntry> + '_ {
        self.events
            .iter()
            .rev()
            .map(|((at_unix_ms, kind, detail), source)| EventEntry {
                at_unix_ms: *at_unix_ms,
                kind: kind.clone(),
                detail: detail.clone(),
                source: *source,
            })
    }

    /// Number of events held.
    pub fn event_count(&self) -> usize {
        self.events.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::snapshot;
    use verbatim_status::EventRecord;

    fn target(n: u8) -> Target {
        Target::sockets(
            (0..n)
                .map(|i| Endpoint {
                    id: Some(i),
                    socket: format!("/tmp/r{i}.sock").into(),
                })
                .collect(),
        )
    }

    fn t0() -> Now {
        Now {
            mono: Instant::now(),
            unix_ms: 1_700_000_000_000,
        }
    }

    fn report(endpoint: usize, snapshot: Snapshot) -> LinkMessage {
        LinkMessage::Report {
            endpoint,
            report: Box::new(Report {
                snapshot,
                client_gaps_us: BTreeMap::new(),
            }),
        }
    }

    fn down(endpoint: usize, reason: &str) -> LinkMessage {
        LinkMessage::Down {
            endpoint,
            reason: reason.into(),
        }
    }

    /// r0 leads term 3, r1 and r2 follow.
    fn steady() -> (Model, Now) {
        let now = t0();
        let mut m = Model::new(&target(3), now);
        m.handle(report(0, snapshot(0, "leader", 3, Some(0))), now);
        m.handle(report(1, snapshot(1, "follower", 3, Some(0))), now);
        m.handle(report(2, snapshot(2, "follower", 3, Some(0))), now);
        (m, now)
    }

    #[test]
    fn the_leader_is_who_leads_the_highest_live_term() {
        let (mut m, now) = steady();
        assert_eq!((m.current_term(), m.leader()), (Some(3), Some(0)));
        // r1 wins term 4 while r0's last snapshot still claims term 3.
        m.handle(report(1, snapshot(1, "leader", 4, Some(1))), now);
        assert_eq!((m.current_term(), m.leader()), (Some(4), Some(1)));
        assert_eq!(m.leaders_in_current_term(), vec![1]);
        // A dead leader's stale claim never counts, even at the top term.
        m.handle(down(1, "closed by the replica"), now);
        assert_eq!(m.current_term(), Some(3));
        m.handle(report(2, snapshot(2, "candidate", 5, None)), now);
        assert_eq!((m.current_term(), m.leader()), (Some(5), None));
    }

    #[test]
    fn a_leader_the_console_cannot_reach_is_named_by_its_followers() {
        let now = t0();
        let mut m = Model::new(&target(3), now);
        m.handle(down(0, "refused"), now);
        m.handle(report(1, snapshot(1, "follower", 7, Some(0))), now);
        assert_eq!(m.leader(), Some(0));
        assert_eq!(m.leader_snapshot(), None);
        assert_eq!(m.lag_entries(1), None, "no lag without the leader's tail");
    }

    #[test]
    fn lag_is_the_leaders_tail_minus_the_followers_apply_index() {
        let (mut m, now) = steady();
        let mut leader = snapshot(0, "leader", 3, Some(0));
        leader.log.tail_index = 1_500;
        leader
            .peers
            .iter_mut()
            .find(|p| p.id == 2)
            .unwrap()
            .lag_bytes = 4_096;
        m.handle(report(0, leader), now);
        let mut slow = snapshot(2, "follower", 3, Some(0));
        slow.log.apply_index = 1_420;
        m.handle(report(2, slow), now);
        assert_eq!(m.lag_entries(0), Some(0));
        assert_eq!(m.lag_entries(2), Some(80));
        assert_eq!(m.lag_bytes(2), Some(4_096));
        m.handle(down(2, "gone"), now);
        assert_eq!(m.lag_entries(2), None);
        assert_eq!(
            m.lag_bytes(2),
            Some(4_096),
            "the leader's view outlives the link"
        );
    }

    #[test]
    fn grants_are_compared_with_the_current_leader() {
        let (mut m, now) = steady();
        let mut stale = snapshot(2, "follower", 3, Some(0));
        stale.log_granted_to = Some(1);
        m.handle(report(2, stale), now);
        let mut none = snapshot(1, "follower", 3, Some(0));
        none.log_granted_to = None;
        m.handle(report(1, none), now);
        assert_eq!(
            [m.grant(0), m.grant(1), m.grant(2)],
            [Grant::IsLeader, Grant::Nobody, Grant::ToOther(1)]
        );
        m.handle(down(2, "x"), now);
        assert_eq!(m.grant(2), Grant::Unknown);
    }

    fn failover(term: u64, new_leader: u8, first_commit_us: Option<u64>) -> Failover {
        Failover {
            term,
            old_leader: Some(0),
            new_leader,
            at_unix_ms: 1_700_000_000_500,
            detection_us: 40,
            election_us: 25,
            first_commit_us,
            detected_by: "pidfd".into(),
            decided_by: "election".into(),
            view_wait_us: None,
            timeline: None,
        }
    }

    #[test]
    fn failovers_merge_by_term_and_keep_the_fullest_report() {
        let (mut m, now) = steady();
        let mut s1 = snapshot(1, "leader", 4, Some(1));
        s1.failovers = vec![failover(4, 1, None)];
        m.handle(report(1, s1.clone()), now);
        assert_eq!(m.failovers().next().unwrap().total_us(), None);
        s1.failovers = vec![failover(4, 1, Some(30))];
        m.handle(
            LinkMessage::Report {
                endpoint: 1,
                report: Box::new(Report {
                    snapshot: s1.clone(),
                    client_gaps_us: BTreeMap::from([(4, 900)]),
                }),
            },
            now,
        );
        // An older copy without the first commit does not undo it.
        let mut s1_old = s1.clone();
        s1_old.failovers = vec![failover(4, 1, None)];
        m.handle(report(1, s1_old), now);
        let mut s2 = snapshot(2, "leader", 5, Some(2));
        s2.failovers = vec![failover(5, 2, Some(12))];
        m.handle(report(2, s2), now);
        let rows: Vec<_> = m
            .failovers()
            .map(|r| {
                (
                    r.failover.term,
                    r.total_us(),
                    r.client_gap_us,
                    r.reported_by,
                )
            })
            .collect();
        // Term 4 keeps its first commit and the client gap that came with
        // it; a later copy lacking them does not erase them.
        assert_eq!(
            rows,
            vec![(5, Some(77), None, 2), (4, Some(95), Some(900), 1)]
        );
    }

    #[test]
    fn failovers_and_terms_are_bounded() {
        let (mut m, now) = steady();
        for term in 4..(4 + 2 * TERMS_MAX as u64) {
            let mut s = snapshot(1, "leader", term, Some(1));
            s.failovers = vec![failover(term, 1, Some(1))];
            m.handle(report(1, s), now);
        }
        assert_eq!(m.failovers().count(), FAILOVERS_MAX);
        assert_eq!(m.terms().count(), TERMS_MAX);
        assert_eq!(m.terms().next().unwrap().term, 3 + 2 * TERMS_MAX as u64);
    }

    #[test]
    fn the_term_timeline_names_each_terms_leader_and_first_sighting() {
        let (mut m, now) = steady();
        let mut s = snapshot(2, "follower", 4, None);
        s.at_unix_ms = 1_700_000_001_000;
        m.handle(report(2, s), now);
        let mut s = snapshot(1, "leader", 4, Some(1));
        s.at_unix_ms = 1_700_000_001_200;
        m.handle(report(1, s), now);
        let terms: Vec<_> = m
            .terms()
            .map(|t| (t.term, t.leader, t.first_seen_unix_ms))
            .collect();
        assert_eq!(
            terms,
            vec![
                (4, Some(1), 1_700_000_001_000),
                (3, Some(0), 1_700_000_000_000)
            ]
        );
    }

    #[test]
    fn identical_events_from_several_replicas_are_shown_once() {
        let (mut m, now) = steady();
        let before = m.event_count();
        let ev = EventRecord {
            at_unix_ms: 1_700_000_000_100,
            kind: "leader-change".into(),
            detail: "r1 term 4".into(),
        };
        for id in [1u8, 2] {
            let mut s = snapshot(id, "follower", 3, Some(0));
            s.events = vec![ev.clone(), ev.clone()];
            m.handle(report(usize::from(id), s), now);
        }
        assert_eq!(m.event_count(), before + 1);
        let e = m.events().find(|e| e.kind == "leader-change").unwrap();
        assert_eq!(e.source, EventSource::Replica(1));
        for i in 0..(2 * EVENTS_MAX as u64) {
            let mut s = snapshot(1, "follower", 3, Some(0));
            s.events = vec![EventRecord {
                at_unix_ms: 1_800_000_000_000 + i,
                kind: "revoke".into(),
                detail: String::new(),
            }];
            m.handle(report(1, s), now);
        }
        assert_eq!(m.event_count(), EVENTS_MAX);
        assert_eq!(
            m.events().next().unwrap().at_unix_ms,
            1_800_000_000_000 + 2 * EVENTS_MAX as u64 - 1
        );
    }

    #[test]
    fn an_outage_is_dated_from_its_first_failure_and_reported_once() {
        let (mut m, now) = steady();
        let events = |m: &Model, kind: &str| m.events().filter(|e| e.kind == kind).count();
        m.handle(
            down(2, "closed by the replica"),
            now.after(Duration::from_secs(1)),
        );
        m.handle(
            down(2, "Connection refused (os error 111)"),
            now.after(Duration::from_secs(2)),
        );
        m.handle(
            down(2, "Connection refused (os error 111)"),
            now.after(Duration::from_secs(3)),
        );
        let r = &m.replicas[2];
        assert_eq!(
            r.link,
            LinkState::Down {
                since: now.mono + Duration::from_secs(1),
                reason: "Connection refused (os error 111)".into()
            }
        );
        assert_eq!((r.link_ups, r.link_failures), (1, 3));
        assert_eq!(events(&m, "unreachable"), 1);
        m.handle(
            report(2, snapshot(2, "follower", 3, Some(0))),
            now.after(Duration::from_secs(4)),
        );
        let r = &m.replicas[2];
        assert_eq!(
            r.link,
            LinkState::Up {
                since: now.mono + Duration::from_secs(4)
            }
        );
        assert_eq!(r.link_ups, 2);
        let back: Vec<_> = m
            .events()
            .filter(|e| e.kind == "replica-back")
            .map(|e| e.detail)
            .collect();
        assert_eq!(back, vec!["r2 is back after 3s".to_string()]);
    }

    #[test]
    fn endpoints_that_never_answer_are_marked_unreachable() {
        let now = t0();
        let mut m = Model::new(&target(2), now);
        m.handle(report(0, snapshot(0, "leader", 1, Some(0))), now);
        assert!(!m.all_reported());
        m.mark_silent("no snapshot within 2000 ms", now);
        assert!(m.replicas[0].is_up());
        assert!(
            matches!(&m.replicas[1].link, LinkState::Down { reason, .. } if reason.contains("2000 ms"))
        );
    }

    #[test]
    fn garbage_is_counted_per_replica_and_keeps_the_link() {
        let (mut m, now) = steady();
        m.handle(
            LinkMessage::Garbage {
                endpoint: 1,
                reason: "not JSON".into(),
            },
            now,
        );
        m.handle(
            LinkMessage::Garbage {
                endpoint: 1,
                reason: "empty line".into(),
            },
            now,
        );
        assert_eq!((m.replicas[1].garbage_lines, m.garbage_total), (2, 2));
        assert_eq!(m.replicas[1].last_garbage.as_deref(), Some("empty line"));
        assert!(m.replicas[1].is_up());
    }

    #[test]
    fn leader_changes_are_announced_once_each() {
        let (mut m, now) = steady();
        m.handle(report(1, snapshot(1, "leader", 4, Some(1))), now);
        m.handle(report(1, snapshot(1, "leader", 4, Some(1))), now);
        let got: Vec<_> = m
            .events()
            .filter(|e| e.kind == "leader")
            .map(|e| e.detail)
            .collect();
        assert_eq!(
            got,
            vec![
                "r1 leads term 4 (was r0)".to_string(),
                "r0 leads term 3".to_string()
            ]
        );
    }

    #[test]
    fn histories_hold_one_sample_per_second_with_gaps_for_missing_seconds() {
        let (mut m, now) = steady();
        m.tick(now);
        m.tick(now.after(Duration::from_millis(400)));
        assert_eq!(m.history.samples.len(), 1);
        let s = m.history.samples[0];
        assert_eq!(
            s,
            Sample {
                ops_per_sec: Some(25_000),
                p50_ns: Some(3_200),
                p99_ns: Some(12_500)
            }
        );
        // Three seconds without a tick (a stalled UI) become two gaps.
        m.tick(now.after(Duration::from_secs(3)));
        let ops = m.history.series(|s| s.ops_per_sec);
        assert_eq!(ops, vec![Some(25_000), None, None, Some(25_000)]);
        // No leader: latency is absent, throughput still summed.
        m.handle(down(0, "x"), now);
        m.tick(now.after(Duration::from_secs(4)));
        assert_eq!(
            m.history.samples.back().unwrap(),
            &Sample {
                ops_per_sec: Some(0),
                p50_ns: None,
                p99_ns: None
            }
        );
        for s in 5..200 {
            m.tick(now.after(Duration::from_secs(s)));
        }
        assert_eq!(m.history.samples.len(), HISTORY_SAMPLES);
        // A jump of hours does not loop for hours.
        m.tick(now.after(Duration::from_secs(10_000_000)));
        assert_eq!(m.history.samples.len(), HISTORY_SAMPLES);
    }
}
