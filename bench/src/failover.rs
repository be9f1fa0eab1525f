//! `failover`: kill the leader K times while a client writes
//! continuously, and time each phase (uKharon §7 table 2; DARE §6).
//!
//! * **SIGKILL** (a crash): a fresh 3-replica cluster per kill (a killed
//!   replica cannot rejoin: state transfer is not implemented). Phases:
//!   *process exit* (kill → the victim's pidfd fires, timed by our own
//!   watcher thread: the kernel's teardown of a process), then, from the
//!   new leader's `failovers` record for the first term after the victim's,
//!   *detection* (pidfd → suspicion), *election* (suspicion → leadership)
//!   and *first commit* (leadership → first commit of the new term); and
//!   the *client gap*: kill → the first request completed by a replica
//!   other than the victim (and exit → that request). The same moments
//!   also on one timeline from the kill (uKharon Table 2): the victim's
//!   *death notice* (our own waiter on its robust futex), and from the new
//!   leader's record, stamped on CLOCK_MONOTONIC, when it saw the death,
//!   suspected, was elected and committed first.
//! * **SIGSTOP** (DARE §5's zombie: the process is alive, its memory still
//!   written by others, but it does not run): one cluster, K rounds of
//!   stop the leader → a new leader commits and the client completes →
//!   SIGCONT → the old leader rejoins as a follower. Detection here comes
//!   from heartbeat timeouts (the failure detector's period Δ), not from
//!   a pidfd, and the client leaves the silent leader only after its
//!   attempt timeout.

use crate::cluster::{BenchCluster, ClusterSpec};
use crate::progress::Progress;
use crate::setup::TimingUs;
use crate::stats::Dist;
use crate::{BenchError, Result};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use verbatim_client::client::{Client, ClientOptions, Transport, Wait};
use verbatim_client::process::ProcessWatch;
use verbatim_status::{Failover, Snapshot};

/// How long one failover may take before the run gives up.
pub const FAILOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// What to measure.
#[derive(Clone, Debug)]
pub struct FailoverOptions {
    /// Kills per signal.
    pub kills: usize,
    /// Measure SIGKILL.
    pub sigkill: bool,
    /// Measure SIGSTOP.
    pub sigstop: bool,
    /// Group size.
    pub replicas: u8,
    /// Client writes before each kill.
    pub warmup: Duration,
    /// Value size.
    pub value_bytes: usize,
    /// Core of the client thread.
    pub client_core: Option<usize>,
    /// How it waits.
    pub wait: Wait,
    /// Client attempt timeout (how long it waits on a silent leader).
    pub attempt_timeout: Duration,
    /// SIGKILL rounds also kill the coordinator leader (member 0, the
    /// lowest-id proposer of views) at the same instant, when it is not the
    /// leader already (uKharon Table 2's second row).
    pub with_coordinator_leader: bool,
}

/// One kill.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KillRecord {
    /// 0-based.
    pub index: usize,
    /// "SIGKILL" or "SIGSTOP".
    pub signal: String,
    /// The victim.
    pub old_leader: u8,
    /// A second member killed at the same instant, with
    /// `--with-coordinator-leader`: the coordinator leader (member 0), or
    /// member 1 when the leader is member 0.
    #[serde(default)]
    pub also_killed: Option<u8>,
    /// Views on, and the coordinator leader (member 0, the lowest-id
    /// proposer of views) died in this round: it was the leader, or was
    /// killed beside it.
    #[serde(default)]
    pub coordinator_leader_killed: bool,
    /// Its term.
    pub old_term: u64,
    /// The next leader.
    pub new_leader: Option<u8>,
    /// Its term.
    pub new_term: Option<u64>,
    /// SIGKILL: kill → pidfd (kernel teardown), our watcher.
    pub process_exit_us: Option<u64>,
    /// SIGKILL: kill → the victim's death notice (its robust futex,
    /// released early in the kernel's exit path), our own waiter on a
    /// notice no replica uses.
    #[serde(default)]
    pub notice_us: Option<u64>,
    /// New leader's record: death or last heartbeat → suspicion.
    pub detection_us: Option<u64>,
    /// Suspicion → leadership.
    pub election_us: Option<u64>,
    /// Leadership → first commit of the new term.
    pub first_commit_us: Option<u64>,
    /// With views on: leadership → its view active (part of the first
    /// commit's time).
    #[serde(default)]
    pub view_wait_us: Option<u64>,
    /// "pidfd", "heartbeat", "counter" or "vote"; "+view" when a view
    /// decided the new leader (primary-backup mode) or who campaigned
    /// (log mode with views).
    pub detected_by: Option<String>,
    /// Signal → first request completed by another replica.
    pub client_gap_us: Option<u64>,
    /// SIGKILL: process exit → that request.
    pub exit_to_client_us: Option<u64>,
    /// SIGKILL, on one timeline from the kill (CLOCK_MONOTONIC, the new
    /// leader's record): its detector saw the old leader gone.
    #[serde(default)]
    pub from_kill_seen_us: Option<u64>,
    /// … it suspected the old leader (acted on it).
    #[serde(default)]
    pub from_kill_suspected_us: Option<u64>,
    /// … it was leader.
    #[serde(default)]
    pub from_kill_elected_us: Option<u64>,
    /// … it committed the first entry of its term.
    #[serde(default)]
    pub from_kill_first_commit_us: Option<u64>,
    /// SIGKILL: death notice → that request (uKharon Table 2 measures
    /// failover from the detector's signal).
    #[serde(default)]
    pub notice_to_client_us: Option<u64>,
    /// The longest request of the run (the one the kill stalled).
    pub longest_op_us: u64,
    /// SIGSTOP: SIGCONT → the old leader is a follower of the new term.
    pub rejoin_us: Option<u64>,
    /// The failure detector's period Δ just before the signal (µs).
    pub fd_period_us: Option<u64>,
}

/// Distributions of each phase over the kills (µs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseDists {
    /// Kill → pidfd.
    pub process_exit: Dist,
    /// Kill → death notice.
    #[serde(default)]
    pub notice: Dist,
    /// Detection.
    pub detection: Dist,
    /// Election.
    pub election: Dist,
    /// First commit.
    pub first_commit: Dist,
    /// With views on: the wait for the view (inside the first commit).
    #[serde(default)]
    pub view_wait: Dist,
    /// Client gap from the signal.
    pub client_gap: Dist,
    /// Client gap from the process exit.
    pub exit_to_client: Dist,
    /// Client gap from the death notice.
    #[serde(default)]
    pub notice_to_client: Dist,
    /// Kill → the new leader's detector saw the death.
    #[serde(default)]
    pub from_kill_seen: Dist,
    /// Kill → the new leader suspected.
    #[serde(default)]
    pub from_kill_suspected: Dist,
    /// Kill → the new leader elected.
    #[serde(default)]
    pub from_kill_elected: Dist,
    /// Kill → the new leader's first commit.
    #[serde(default)]
    pub from_kill_first_commit: Dist,
    /// Rejoin after SIGCONT.
    pub rejoin: Dist,
}

impl PhaseDists {
    /// Over `kills`.
    pub fn of(kills: &[KillRecord]) -> PhaseDists {
        let d = |f: fn(&KillRecord) -> Option<u64>| {
            Dist::of(&kills.iter().filter_map(f).collect::<Vec<_>>())
        };
        PhaseDists {
            process_exit: d(|k| k.process_exit_us),
            detection: d(|k| k.detection_us),
            election: d(|k| k.election_us),
            first_commit: d(|k| k.first_commit_us),
            view_wait: d(|k| k.view_wait_us),
            client_gap: d(|k| k.client_gap_us),
            exit_to_client: d(|k| k.exit_to_client_us),
            notice: d(|k| k.notice_us),
            notice_to_client: d(|k| k.notice_to_client_us),
            from_kill_seen: d(|k| k.from_kill_seen_us),
            from_kill_suspected: d(|k| k.from_kill_suspected_us),
            from_kill_elected: d(|k| k.from_kill_elected_us),
            from_kill_first_commit: d(|k| k.from_kill_first_commit_us),
            rejoin: d(|k| k.rejoin_us),
        }
    }
}

/// The `failover` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FailoverReport {
    /// Group size.
    pub replicas: u8,
    /// Kills per signal.
    pub kills: usize,
    /// SIGKILL rounds killed the coordinator leader beside the leader.
    #[serde(default)]
    pub with_coordinator_leader: bool,
    /// Protocol timing.
    pub timing: TimingUs,
    /// Client attempt timeout (µs).
    pub client_attempt_timeout_us: u64,
    /// SIGKILL rounds.
    pub sigkill: Vec<KillRecord>,
    /// Their distributions.
    pub sigkill_dist: PhaseDists,
    /// SIGSTOP rounds.
    pub sigstop: Vec<KillRecord>,
    /// Their distributions.
    pub sigstop_dist: PhaseDists,
}

/// State shared with the writing client thread. Times are ns since
/// `epoch`; 0 means "not yet".
struct Shared {
    epoch: Instant,
    /// `epoch` on CLOCK_MONOTONIC, to place the replicas' failover
    /// timelines on ours.
    epoch_mono_ns: u64,
    stop: AtomicBool,
    victim: AtomicU8,
    signal_ns: AtomicU64,
    first_after_ns: AtomicU64,
    longest_ns: AtomicU64,
    ops: AtomicU64,
    error: std::sync::Mutex<Option<String>>,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Arms the measurement of the next signal to `victim`.
    fn arm(&self, victim: u8) -> u64 {
        self.first_after_ns.store(0, Ordering::SeqCst);
        self.longest_ns.store(0, Ordering::SeqCst);
        self.victim.store(victim, Ordering::SeqCst);
        let t = self.now_ns().max(1);
        self.signal_ns.store(t, Ordering::SeqCst);
        t
    }

    fn disarm(&self) {
        self.signal_ns.store(0, Ordering::SeqCst);
    }
}

/// Starts the client: writes until told to stop, noting the first
/// request another replica completes after the signal.
fn spawn_writer(
    manifest: verbatim_client::manifest::Manifest,
    o: &FailoverOptions,
    shared: Arc<Shared>,
) -> std::thread::JoinHandle<()> {
    let (core, wait, attempt_timeout, size) =
        (o.client_core, o.wait, o.attempt_timeout, o.value_bytes);
    std::thread::spawn(move || {
        crate::cluster::pin_current(core);
        let mut client = Client::new(
            &manifest,
            ClientOptions {
                transport: Transport::Shm,
                wait,
                attempt_timeout,
                total_timeout: FAILOVER_TIMEOUT,
                client_id: None,
            },
        );
        let value = vec![b'f'; size];
        let mut i = 0u64;
        while !shared.stop.load(Ordering::Relaxed) && !crate::signals::interrupted() {
            let key = format!("fo:{:04}", i % 1000);
            i += 1;
            let t0 = shared.now_ns();
            if let Err(e) = client.set(key.as_bytes(), &value) {
                *shared.error.lock().expect("not poisoned") = Some(e.to_string());
                return;
            }
            let t1 = shared.now_ns();
            shared.ops.fetch_add(1, Ordering::Relaxed);
            let signal = shared.signal_ns.load(Ordering::SeqCst);
            if signal != 0 && t1 > signal {
                shared.longest_ns.fetch_max(t1 - t0, Ordering::Relaxed);
                if client.leader() != shared.victim.load(Ordering::SeqCst) {
                    let _ = shared.first_after_ns.compare_exchange(
                        0,
                        t1,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                }
            }
        }
    })
}

fn writer_error(shared: &Shared) -> Result<()> {
    match shared.error.lock().expect("not poisoned").take() {
        Some(e) => Err(BenchError::Cluster(format!(
            "the writing client failed: {e}"
        ))),
        None => Ok(()),
    }
}

/// Sleeps `d`, failing early on Ctrl-C or a client error.
fn sleep_checked(d: Duration, shared: &Shared) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        crate::signals::check()?;
        writer_error(shared)?;
        std::thread::sleep(Duration::from_millis(5).min(end - Instant::now().min(end)));
    }
    Ok(())
}

/// Polls until the client completed a request elsewhere (deadline).
fn wait_client(shared: &Shared, deadline: Instant) -> Result<u64> {
    loop {
        let t = shared.first_after_ns.load(Ordering::SeqCst);
        if t != 0 {
            return Ok(t);
        }
        crate::signals::check()?;
        writer_error(shared)?;
        if Instant::now() > deadline {
            return Err(BenchError::Cluster(
                "the client completed no request within the failover timeout".into(),
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Polls the replicas in `ids` until one leads a term above `min_term`
/// and has its failover record for that term, with the first commit.
fn wait_record(
    cluster: &BenchCluster,
    ids: &[u8],
    min_term: u64,
    deadline: Instant,
) -> Result<(Snapshot, Option<Failover>)> {
    let mut leader: Option<Snapshot> = None;
    loop {
        crate::signals::check()?;
        for &id in ids {
            if let Some(s) = cluster.status_of(id, Duration::from_millis(200)) {
                if s.role == "leader" && s.term > min_term {
                    let rec = s.failovers.iter().find(|f| f.term > min_term).cloned();
                    if rec.as_ref().is_some_and(|f| f.first_commit_us.is_some()) {
                        return Ok((s, rec));
                    }
                    leader = Some(s);
                }
            }
        }
        if Instant::now() > deadline {
            return match leader {
                Some(s) => Ok((s, None)),
                None => Err(BenchError::Cluster(format!(
                    "no leader above term {min_term} within {FAILOVER_TIMEOUT:?}"
                ))),
            };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn fill_from_record(k: &mut KillRecord, s: &Snapshot, rec: Option<&Failover>) {
    k.new_leader = Some(s.id);
    k.new_term = Some(s.term);
    if let Some(f) = rec {
        k.new_term = Some(f.term);
        k.detection_us = Some(f.detection_us);
        k.election_us = Some(f.election_us);
        k.first_commit_us = f.first_commit_us;
        k.view_wait_us = f.view_wait_us;
        // Primary-backup mode: the new primary was decided by a view.
        k.detected_by = Some(if f.decided_by == "view" {
            format!("{}+view", f.detected_by)
        } else {
            f.detected_by.clone()
        });
    }
}

/// Waits for the death notice of `victim` in a thread of its own, on the
/// notice mutex of a member id no replica of this group has (each
/// replica's watchers wait on their own id's, clients look at the last).
/// `None` when the group is too large to leave one free, or the victim
/// has no notice file.
fn spawn_notice_waiter(
    cluster: &BenchCluster,
    victim: u8,
    shared: &Arc<Shared>,
    stop: &Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<Option<u64>>> {
    use verbatim_client::notice::{notice_path, NoticeWait, NoticeWatch};
    use verbatim_core::fabric::{MemberId, MAX_MEMBERS};
    let spare = MAX_MEMBERS - 2;
    if cluster.local().manifest.members.len() > spare {
        return None;
    }
    let path = notice_path(&cluster.local().manifest.segment_path(victim));
    let watch = NoticeWatch::open(&path).ok()?;
    let (sh, stop) = (shared.clone(), stop.clone());
    Some(std::thread::spawn(move || {
        let how = watch.wait_owner_gone(MemberId(spare as u8), &stop, Duration::from_millis(1));
        (how == NoticeWait::OwnerGone).then(|| sh.now_ns())
    }))
}

/// The coordinator leader of a group whose members all run: the
/// lowest-id proposer of views (every member proposes, member 0 first).
pub const COORDINATOR_LEADER: u8 = 0;

/// Why `--with-coordinator-leader` cannot run on this group, if it cannot:
/// two members die at once, so a majority of the members and of the
/// coordinators must survive any two deaths, and views must be on.
pub fn coordinator_leader_kill_refused(
    manifest: &verbatim_client::manifest::Manifest,
) -> Option<String> {
    let members = manifest.members.len();
    let coordinators = usize::from(manifest.views.coordinators).min(members);
    if manifest.views.lease_us == 0 {
        return Some(
            "--with-coordinator-leader needs views (coordinators): add --set views.lease_us=50"
                .into(),
        );
    }
    // Two deaths among n leave a majority when n - 2 > n / 2.
    let survives = |n: usize| n >= 2 && (n - 2) * 2 > n;
    if !survives(members) || !survives(coordinators) {
        return Some(format!(
            "--with-coordinator-leader kills two members at once, which {members} members with \
             {coordinators} coordinators do not survive (a majority of each must live): use \
             --replicas 5 --set views.coordinators=5"
        ));
    }
    None
}

/// One SIGKILL round on a fresh cluster.
fn sigkill_once(spec: &ClusterSpec, o: &FailoverOptions, index: usize) -> Result<KillRecord> {
    let mut cluster = BenchCluster::start(spec, o.replicas, false)?;
    if o.with_coordinator_leader {
        if let Some(why) = coordinator_leader_kill_refused(&cluster.local().manifest) {
            return Err(BenchError::Cluster(why));
        }
    }
    cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
    let epoch = Instant::now();
    let shared = Arc::new(Shared {
        epoch,
        epoch_mono_ns: verbatim_client::process::monotonic_ns_of(epoch),
        stop: AtomicBool::new(false),
        victim: AtomicU8::new(u8::MAX),
        signal_ns: AtomicU64::new(0),
        first_after_ns: AtomicU64::new(0),
        longest_ns: AtomicU64::new(0),
        ops: AtomicU64::new(0),
        error: std::sync::Mutex::new(None),
    });
    let writer = spawn_writer(cluster.local().manifest.clone(), o, shared.clone());
    let result = (|| -> Result<KillRecord> {
        sleep_checked(o.warmup, &shared)?;
        // The leader now (it may have changed during the warm-up).
        let (leader, term) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
        let fd_period = cluster
            .status_of((leader + 1) % o.replicas, Duration::from_millis(500))
            .map(|s| s.config.fd_check_period_us);
        let pid = cluster
            .local()
            .pid(leader)
            .ok_or_else(|| BenchError::Cluster("the leader has no pid".into()))?;
        let watch = ProcessWatch::open(pid as i32)
            .ok_or_else(|| BenchError::Cluster("cannot watch the leader's process".into()))?;
        let sh = shared.clone();
        let exit_thread =
            std::thread::spawn(move || watch.wait_exit(FAILOVER_TIMEOUT).then(|| sh.now_ns()));
        let notice_stop = Arc::new(AtomicBool::new(false));
        let notice_thread = spawn_notice_waiter(&cluster, leader, &shared, &notice_stop);
        // The coordinator leader dies beside the leader, both signals sent
        // before anything else. A leader that is the coordinator leader
        // itself dies with member 1, the next in line: every round of this
        // series is two deaths, the coordinator leader among them.
        let also = o
            .with_coordinator_leader
            .then_some(if leader == COORDINATOR_LEADER {
                COORDINATOR_LEADER + 1
            } else {
                COORDINATOR_LEADER
            });
        let kill_ns = shared.arm(leader);
        let victims: Vec<u8> = std::iter::once(leader).chain(also).collect();
        cluster
            .local_mut()
            .kill_all(&victims)
            .map_err(BenchError::Cluster)?;
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        let first_ns = wait_client(&shared, deadline)?;
        let exit_ns = exit_thread.join().ok().flatten();
        notice_stop.store(true, Ordering::Release);
        let notice_ns = notice_thread.and_then(|t| t.join().ok().flatten());
        let others: Vec<u8> = (0..o.replicas)
            .filter(|&i| i != leader && Some(i) != also)
            .collect();
        let (s, rec) = wait_record(&cluster, &others, term, deadline)?;
        let mut k = KillRecord {
            index,
            signal: "SIGKILL".into(),
            old_leader: leader,
            also_killed: also,
            coordinator_leader_killed: cluster.local().manifest.views.lease_us > 0
                && victims.contains(&COORDINATOR_LEADER),
            old_term: term,
            process_exit_us: exit_ns.map(|e| (e - kill_ns) / 1000),
            client_gap_us: Some((first_ns - kill_ns) / 1000),
            exit_to_client_us: exit_ns.map(|e| first_ns.saturating_sub(e) / 1000),
            notice_us: notice_ns.map(|e| e.saturating_sub(kill_ns) / 1000),
            notice_to_client_us: notice_ns.map(|e| first_ns.saturating_sub(e) / 1000),
            longest_op_us: shared.longest_ns.load(Ordering::SeqCst) / 1000,
            fd_period_us: fd_period,
            ..KillRecord::default()
        };
        fill_from_record(&mut k, &s, rec.as_ref());
        if let Some(t) = rec.as_ref().and_then(|r| r.timeline) {
            let kill_mono = shared.epoch_mono_ns + kill_ns;
            let since = |at: u64| Some(at.saturating_sub(kill_mono) / 1000);
            k.from_kill_seen_us = since(t.lost_ns);
            k.from_kill_suspected_us = since(t.suspected_ns);
            k.from_kill_elected_us = since(t.elected_ns);
            k.from_kill_first_commit_us = t.first_commit_ns.and_then(since);
        }
        Ok(k)
    })();
    shared.stop.store(true, Ordering::Relaxed);
    let _ = writer.join();
    result
}

/// K SIGSTOP rounds on one cluster.
fn sigstop_rounds(
    spec: &ClusterSpec,
    o: &FailoverOptions,
    progress: &Progress,
) -> Result<Vec<KillRecord>> {
    let cluster = BenchCluster::start(spec, o.replicas, false)?;
    cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
    let epoch = Instant::now();
    let shared = Arc::new(Shared {
        epoch,
        epoch_mono_ns: verbatim_client::process::monotonic_ns_of(epoch),
        stop: AtomicBool::new(false),
        victim: AtomicU8::new(u8::MAX),
        signal_ns: AtomicU64::new(0),
        first_after_ns: AtomicU64::new(0),
        longest_ns: AtomicU64::new(0),
        ops: AtomicU64::new(0),
        error: std::sync::Mutex::new(None),
    });
    let writer = spawn_writer(cluster.local().manifest.clone(), o, shared.clone());
    let mut out = Vec::new();
    let mut stopped: Option<u8> = None;
    let result = (|| -> Result<()> {
        for index in 0..o.kills {
            progress.stage(
                o.kills as u64,
                format!("failover SIGSTOP {}/{}", index + 1, o.kills),
            );
            progress.set_fraction(index as f64 / o.kills as f64);
            sleep_checked(o.warmup, &shared)?;
            // The leader now (every replica runs: the last one continued).
            let (leader, term) = cluster.wait_leader(0, crate::cluster::LEADER_TIMEOUT)?;
            let others: Vec<u8> = (0..o.replicas).filter(|&i| i != leader).collect();
            let fd_period = cluster
                .status_of(others[0], Duration::from_millis(500))
                .map(|s| s.config.fd_check_period_us);
            let stop_ns = shared.arm(leader);
            cluster
                .local()
                .pause(leader, true)
                .map_err(BenchError::Cluster)?;
            stopped = Some(leader);
            let deadline = Instant::now() + FAILOVER_TIMEOUT;
            let first_ns = wait_client(&shared, deadline)?;
            let (s, rec) = wait_record(&cluster, &others, term, deadline)?;
            shared.disarm();
            let cont_at = Instant::now();
            cluster
                .local()
                .pause(leader, false)
                .map_err(BenchError::Cluster)?;
            stopped = None;
            // The old leader must come back as a follower of the new term.
            let rejoin = loop {
                crate::signals::check()?;
                if let Some(v) = cluster.status_of(leader, Duration::from_millis(200)) {
                    if v.role == "follower" && v.term >= s.term {
                        break Some(cont_at.elapsed().as_micros() as u64);
                    }
                }
                if Instant::now() > deadline + FAILOVER_TIMEOUT {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            let mut k = KillRecord {
                index,
                signal: "SIGSTOP".into(),
                old_leader: leader,
                old_term: term,
                client_gap_us: Some((first_ns - stop_ns) / 1000),
                longest_op_us: shared.longest_ns.load(Ordering::SeqCst) / 1000,
                rejoin_us: rejoin,
                fd_period_us: fd_period,
                ..KillRecord::default()
            };
            fill_from_record(&mut k, &s, rec.as_ref());
            progress.println(format!(
                "SIGSTOP {}: member {} → {} (term {}), detection {} µs, client gap {} µs, rejoined {}",
                index + 1,
                leader,
                s.id,
                s.term,
                k.detection_us.map_or("?".into(), |v| v.to_string()),
                k.client_gap_us.unwrap_or(0),
                rejoin.map_or("never".into(), |r| format!("after {r} µs"))
            ));
            if rejoin.is_none() {
                out.push(k);
                return Err(BenchError::Cluster(format!(
                    "member {leader} did not rejoin as a follower after SIGCONT"
                )));
            }
            out.push(k);
        }
        Ok(())
    })();
    if let Some(l) = stopped {
        let _ = cluster.local().pause(l, false);
    }
    shared.stop.store(true, Ordering::Relaxed);
    let _ = writer.join();
    result.map(|()| out)
}

/// Runs the SIGKILL and SIGSTOP series.
pub fn run(spec: &ClusterSpec, o: &FailoverOptions, progress: &Progress) -> Result<FailoverReport> {
    let mut sigkill = Vec::new();
    if o.sigkill {
        for index in 0..o.kills {
            progress.stage(
                o.kills as u64,
                format!("failover SIGKILL {}/{}", index + 1, o.kills),
            );
            progress.set_fraction(index as f64 / o.kills as f64);
            let k = sigkill_once(spec, o, index)?;
            progress.println(format!(
                "SIGKILL {}: member {}{} → {} (term {}), exit {} µs, detection {} µs, election {} µs, \
                 first commit {} µs, client gap {} µs",
                index + 1,
                k.old_leader,
                k.also_killed
                    .map_or(String::new(), |c| format!(" (and member {c})")),
                k.new_leader.map_or("?".into(), |l| l.to_string()),
                k.new_term.unwrap_or(0),
                k.process_exit_us.map_or("?".into(), |v| v.to_string()),
                k.detection_us.map_or("?".into(), |v| v.to_string()),
                k.election_us.map_or("?".into(), |v| v.to_string()),
                k.first_commit_us.map_or("?".into(), |v| v.to_string()),
                k.client_gap_us.unwrap_or(0),
            ));
            sigkill.push(k);
        }
    }
    let sigstop = if o.sigstop {
        sigstop_rounds(spec, o, progress)?
    } else {
        Vec::new()
    };
    Ok(FailoverReport {
        replicas: o.replicas,
        kills: o.kills,
        with_coordinator_leader: o.with_coordinator_leader,
        timing: crate::cluster::timing_with(&spec.overrides),
        client_attempt_timeout_us: o.attempt_timeout.as_micros() as u64,
        sigkill_dist: PhaseDists::of(&sigkill),
        sigkill,
        sigstop_dist: PhaseDists::of(&sigstop),
        sigstop,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_client::manifest::Manifest;

    fn manifest(replicas: u8, coordinators: u8, lease_us: u64) -> Manifest {
        let mut m = Manifest::local("t", replicas, 0);
        m.views.coordinators = coordinators;
        m.views.lease_us = lease_us;
        m
    }

    /// Two simultaneous deaths must leave a majority of the members and of
    /// the coordinators, and there must be coordinators at all.
    #[test]
    fn killing_the_coordinator_leader_too_needs_a_group_that_survives_two_deaths() {
        assert!(coordinator_leader_kill_refused(&manifest(5, 5, 50)).is_none());
        assert!(coordinator_leader_kill_refused(&manifest(7, 5, 50)).is_none());
        let three = coordinator_leader_kill_refused(&manifest(3, 3, 50)).expect("refused");
        assert!(three.contains("--replicas 5"), "{three}");
        // Five members, but the default three coordinators.
        assert!(coordinator_leader_kill_refused(&manifest(5, 3, 50)).is_some());
        let off = coordinator_leader_kill_refused(&manifest(5, 5, 0)).expect("refused");
        assert!(off.contains("views.lease_us"), "{off}");
    }
}
