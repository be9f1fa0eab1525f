//! Three replicas on three "hosts" over real verbs, and the faults of a
//! network: every replica runs in a network namespace of its own, with its
//! own veth link to a bridge, its own address and its own Soft-RoCE device
//! bound to that link (`scripts/softroce-hosts`); the replicas exchange
//! over those addresses (authenticated, `exchange_secret`) and write into
//! each other's memory over RoCE v2 across the bridge. Clients speak RESP
//! over TCP from the bridge's own address, like clients on another host.
//!
//! The scenarios partition the leader and heal the partition, cut one
//! direction only, pull a link, delay, reorder and drop packets (tc
//! netem), stop and kill replicas and remove a host's rxe device, while
//! clients run a mixed key-value workload; the recorded history must be
//! linearizable and no acknowledged write may be lost. A partitioned
//! member must come back once the partition heals.
//!
//! Needs the hosts (`scripts/softroce-hosts up`, as root, in the VM that
//! `scripts/softroce-vm` boots; the guest script does it) and the rdma
//! release binary in `VERBATIM_BIN`. Ignored otherwise.
//!
//! Knobs: `VERBATIM_HOSTS_QP="timeout,retries"` (the manifest's
//! `qp_timeout`, `qp_retry_count`; default 14,3),
//! `VERBATIM_HOSTS_DETECT_RUNS` (partitions timed, default 5).
#![cfg(feature = "rdma")]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use verbatim_client::client::{Client, ClientError, ClientOptions, Transport, Wait};
use verbatim_client::local::{LocalCluster, LocalOptions};
use verbatim_client::manifest::PollMode;
use verbatim_core::rng::SplitMix64;
use verbatim_sim::check::linearizability::{check_history, Verdict};
use verbatim_sim::history::{KvInput, KvOutput, Operation};
use verbatim_status::Snapshot;

const SECRET: &str = "verbs-hosts-test-exchange-secret";

/// Timings for software RDMA on two emulated CPUs (TCG) that the machine
/// shares with other work: a vCPU is regularly descheduled for tens of
/// milliseconds and more, so the failure detector waits 200 ms (up to 2 s)
/// for a heartbeat before it suspects the leader. With the single-device
/// test's 20 ms (verbs_cluster.rs) the group here re-elected every few
/// hundred milliseconds on its own, with 100 ms every few seconds, which
/// hides what the faults do. Overridable with
/// `VERBATIM_CLUSTER_SET="k=v k=v"`.
const TIMINGS: &[&str] = &[
    "timing.heartbeat_period_us=5000",
    "timing.fd_check_period_us=200000",
    "timing.fd_check_period_max_us=2000000",
    "timing.fd_check_period_step_us=20000",
    "timing.election_timeout_min_us=100000",
    "timing.election_timeout_max_us=300000",
    "timing.leader_quorum_timeout_us=1000000",
    "timing.apply_publish_period_us=5000",
    "timing.prune_period_us=10000",
    "cluster.log_ring_bytes=1048576",
];

/// One "host" of `scripts/softroce-hosts hosts`.
#[derive(Clone, Debug)]
struct Host {
    id: u8,
    device: String,
    gid_index: u8,
    addr: String,
}

fn script() -> PathBuf {
    std::env::var_os("VERBATIM_HOSTS_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/softroce-hosts")
        })
}

/// Runs `scripts/softroce-hosts ARGS`; its stdout.
fn hostctl(args: &[&str]) -> Result<String, String> {
    let out = Command::new(script())
        .args(args)
        .output()
        .map_err(|e| format!("{}: {e}", script().display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "softroce-hosts {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn hosts() -> Vec<Host> {
    let text = hostctl(&["hosts"]).unwrap_or_else(|e| {
        panic!("no hosts ({e}); run `scripts/softroce-hosts up` as root in the Soft-RoCE VM (scripts/softroce-vm)")
    });
    let hosts: Vec<Host> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "hosts line `{l}`");
            Host {
                id: f[0].parse().expect("host id"),
                device: f[2].to_string(),
                gid_index: f[3].parse().expect("gid index"),
                addr: f[4].to_string(),
            }
        })
        .collect();
    assert!(
        hosts.len() >= 3,
        "three hosts needed, found {}",
        hosts.len()
    );
    hosts
}

/// `qp_timeout` and `qp_retry_count` of the wire-faults scenario: 67 ms
/// per try, 6 retries (7 would be "forever" on rxe; the fabric uses 6).
const WIRE_QP: (u8, u8) = (14, 6);

/// The manifest's `qp_timeout` and `qp_retry_count` for this run: by
/// default 14 and 3 (67 ms per try, retry-exceeded after about 270 ms).
/// The manifest's default, 10 (4.2 ms per try), is for hardware: under
/// emulation a responder (rxe's kernel worker on a vCPU the host took
/// away) is often late by more than 17 ms, requests completed
/// retry-exceeded between healthy members, and the broken channels cost
/// the group its leader every few seconds.
fn qp_settings() -> (u8, u8) {
    std::env::var("VERBATIM_HOSTS_QP")
        .ok()
        .and_then(|s| {
            let (t, r) = s.split_once(',')?;
            Some((t.trim().parse().ok()?, r.trim().parse().ok()?))
        })
        .unwrap_or((14, 3))
}

/// One RC try lasts 4.096 µs × 2^timeout; a peer that stopped answering
/// completes retry-exceeded after 1 + retries tries.
fn qp_bound_ms((timeout, retries): (u8, u8)) -> f64 {
    4.096e-3 * f64::from(1u32 << timeout) * f64::from(1 + retries)
}

/// Faults on the hosts' links, healed when dropped (a failing scenario
/// leaves no partition behind for the next one).
struct Wire {
    hosts: u8,
}

impl Wire {
    /// Applies a fault; returns when it took effect: after the first and
    /// before the second time (Unix ms, the clock the replicas' failover
    /// records use: one VM).
    fn fault(&self, kind: &str, host: u8, arg: Option<&str>) -> (u64, u64) {
        let h = host.to_string();
        let mut args = vec!["fault", kind, h.as_str()];
        let before = unix_ms();
        args.extend(arg);
        let out = hostctl(&args).unwrap_or_else(|e| panic!("{e}"));
        let after = unix_ms();
        out.lines()
            .find_map(|l| {
                let mut f = l.strip_prefix("at ")?.split_whitespace();
                let a: u64 = f.next()?.parse().ok()?;
                let b: u64 = f.next()?.parse().ok()?;
                Some((a / 1_000_000, b / 1_000_000))
            })
            .unwrap_or((before, after))
    }

    fn heal(&self, host: u8) {
        self.fault("heal", host, None);
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        for h in 0..self.hosts {
            let _ = hostctl(&["fault", "heal", &h.to_string()]);
        }
    }
}

/// Prints the replicas' logs if the test fails (they live in the VM's
/// /tmp, gone once it powers off).
struct LogsOnPanic(PathBuf);

impl Drop for LogsOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log_tails(&self.0, 120);
        }
    }
}

/// The last `lines` lines of each replica's log, on stderr, without the
/// heartbeat-counter stall reports (informational, and in the emulated VM
/// frequent enough to push everything else out of the tail).
fn print_log_tails(dir: &std::path::Path, lines: usize) {
    for i in 0..3 {
        let f = dir.join(format!("replica-{i}.log"));
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let noise = |l: &&str| l.contains("counter-stalled") || l.contains("counter-resumed");
        let left_out = text.lines().filter(noise).count();
        let tail: Vec<&str> = text
            .lines()
            .filter(|l| !noise(l))
            .rev()
            .take(lines)
            .collect();
        eprintln!(
            "---- {} (last {} lines; {left_out} counter stall reports left out)",
            f.display(),
            tail.len()
        );
        for l in tail.into_iter().rev() {
            eprintln!("{l}");
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Starts three replicas, replica i on host i, exchanging over the hosts'
/// addresses (ports from `port`) with RESP on each host's address.
fn start(tag: &str, port: u16, hosts: &[Host], qp: (u8, u8)) -> LocalCluster {
    assert!(
        std::env::var_os("VERBATIM_BIN").is_some(),
        "set VERBATIM_BIN to the verbatim binary built with --features rdma (softroce-hosts starts it on each host)"
    );
    let (qp_timeout, qp_retries) = qp;
    let mut overrides = vec![
        "cluster.fabric=\"verbs\"".to_string(),
        format!("cluster.exchange_secret=\"{SECRET}\""),
        // RESP listens on the hosts' addresses: clients AUTH.
        "cluster.resp_password=\"verbs-hosts-test-password\"".to_string(),
    ];
    for h in &hosts[..3] {
        let i = h.id;
        overrides.push(format!(
            "members.{i}.verbs={{device=\"{}\", port=1, gid_index={}, exchange_addr=\"{}:{}\", qp_timeout={qp_timeout}, qp_retry_count={qp_retries}}}",
            h.device, h.gid_index, h.addr, port
        ));
        overrides.push(format!("members.{i}.resp_addr=\"{}:{}\"", h.addr, port + 1));
    }
    overrides.extend(TIMINGS.iter().map(|t| t.to_string()));
    if let Ok(extra) = std::env::var("VERBATIM_CLUSTER_SET") {
        overrides.extend(extra.split_whitespace().map(String::from));
    }
    let t0 = Instant::now();
    let cluster = LocalCluster::start(
        &LocalOptions {
            name: format!("{tag}{}", std::process::id()),
            replicas: 3,
            base_port: 0,
            // Adaptive by default: a leader spinning on one of the two
            // emulated CPUs starves the rest (VERBATIM_CLUSTER_POLL=
            // leader-busy or busy to compare).
            poll: match std::env::var("VERBATIM_CLUSTER_POLL").as_deref() {
                Ok("busy") => PollMode::Busy,
                Ok("leader-busy") => PollMode::LeaderBusy,
                _ => PollMode::Adaptive,
            },
            cores: Vec::new(),
            overrides,
            // Starts `verbatim replica ... --id N` on host N (ip netns exec).
            binary: script(),
        },
        Duration::from_secs(90),
    )
    .unwrap_or_else(|e| panic!("starting the cluster: {e}"));
    println!(
        "hosts: 3 replicas on hosts {} connected in {:.1} s (qp_timeout {qp_timeout}, qp_retry_count {qp_retries}: retry-exceeded after ~{:.0} ms)",
        hosts[..3]
            .iter()
            .map(|h| format!("{}={}/{}", h.id, h.addr, h.device))
            .collect::<Vec<_>>()
            .join(" "),
        t0.elapsed().as_secs_f64(),
        qp_bound_ms(qp)
    );
    for s in cluster.status().into_iter().flatten() {
        assert_eq!(s.config.fabric, "verbs", "member {}", s.id);
    }
    cluster
}

fn statuses(cluster: &LocalCluster) -> Vec<Option<Snapshot>> {
    cluster.status()
}

/// The leader with the highest term that reports itself as one.
fn current_leader(cluster: &LocalCluster) -> Option<(u8, u64)> {
    statuses(cluster)
        .into_iter()
        .flatten()
        .filter(|s| s.role == "leader")
        .max_by_key(|s| s.term)
        .map(|s| (s.id, s.term))
}

/// Polls `f` every 10 ms until it returns `Some` or `timeout` passes.
fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<(T, Duration)> {
    let began = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some((v, began.elapsed()));
        }
        if began.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A leader change, timed against the fault (same clock: one VM), from
/// the moment the fault command began: upper bounds, `window_ms` more than
/// the truth at worst.
#[derive(Clone, Debug)]
struct Failover {
    new_leader: u8,
    term: u64,
    /// Fault → the new leader elected.
    elected_ms: f64,
    /// Fault → first commit of the new term.
    first_commit_ms: Option<f64>,
    /// How long the fault command took (the fault took effect within it).
    window_ms: f64,
    /// The new leader's own record: from the old leader's last heartbeat
    /// (or the suspicion) to its suspicion, and from suspicion to
    /// leadership, with what raised the suspicion.
    record: Option<(f64, f64, String)>,
}

/// Waits until a member other than `old` leads a term above `old_term` and
/// its election is settled at a majority (a follower names it); reads the
/// new leader's failover record. `None` when that leader was elected before
/// the fault (leadership had moved on its own: the fault missed the leader).
fn expect_failover(
    cluster: &LocalCluster,
    old: u8,
    old_term: u64,
    (fault_ms, fault_done_ms): (u64, u64),
    timeout: Duration,
) -> Option<Failover> {
    let found = poll(timeout, || {
        let all = statuses(cluster);
        let leader = all
            .iter()
            .flatten()
            .filter(|s| s.id != old && s.role == "leader" && s.term > old_term)
            .max_by_key(|s| s.term)?;
        let followed = all
            .iter()
            .flatten()
            .any(|s| s.id != leader.id && s.term == leader.term && s.leader == Some(leader.id));
        followed.then(|| leader.clone())
    });
    let Some((leader, _)) = found else {
        panic!(
            "no failover from member {old} (term {old_term}) within {timeout:?}: {}",
            describe(cluster)
        )
    };
    // The record is complete once the new term's first entry committed.
    let record = poll(Duration::from_secs(20), || {
        let s = statuses(cluster)
            .into_iter()
            .flatten()
            .find(|s| s.id == leader.id)?;
        s.failovers
            .into_iter()
            .find(|f| f.term == leader.term && f.first_commit_us.is_some())
    })
    .map(|(f, _)| f);
    if record.as_ref().is_some_and(|f| f.at_unix_ms < fault_ms) {
        return None;
    }
    let elected_ms = record
        .as_ref()
        .map_or(unix_ms(), |f| f.at_unix_ms)
        .saturating_sub(fault_ms) as f64;
    Some(Failover {
        new_leader: leader.id,
        term: leader.term,
        elected_ms,
        first_commit_ms: record
            .as_ref()
            .and_then(|f| f.first_commit_us)
            .map(|c| elected_ms + c as f64 / 1000.0),
        window_ms: fault_done_ms.saturating_sub(fault_ms) as f64,
        record: record.map(|f| {
            (
                f.detection_us as f64 / 1000.0,
                f.election_us as f64 / 1000.0,
                f.detected_by,
            )
        }),
    })
}

/// Waits for a leader that kept its term for a second (the faults are
/// aimed at a leader, not at an election under way).
fn wait_leader_settled(cluster: &LocalCluster) -> (u8, u64) {
    let mut seen: Option<((u8, u64), Instant)> = None;
    let found = poll(Duration::from_secs(60), || {
        let now = current_leader(cluster);
        match (now, &seen) {
            (Some(l), Some((s, since))) if *s == l => {
                (since.elapsed() >= Duration::from_secs(1)).then_some(l)
            }
            (Some(l), _) => {
                seen = Some((l, Instant::now()));
                None
            }
            (None, _) => {
                seen = None;
                None
            }
        }
    });
    match found {
        Some((l, _)) => l,
        None => panic!("no settled leader within 60 s: {}", describe(cluster)),
    }
}

/// Waits until the group (the members other than `cut`) committed `n` more
/// entries; returns how many it committed.
fn commit_progress(
    cluster: &LocalCluster,
    w: &Workload,
    cut: u8,
    n: u64,
    timeout: Duration,
) -> u64 {
    let commit = || {
        statuses(cluster)
            .into_iter()
            .flatten()
            .filter(|s| s.id != cut)
            .map(|s| s.log.commit_index)
            .max()
            .unwrap_or(0)
    };
    let base = commit();
    match poll(timeout, || {
        let c = commit();
        (c >= base + n).then_some(c - base)
    }) {
        Some((c, _)) => c,
        None => panic!(
            "fewer than {n} entries committed in {timeout:?} with member {cut} cut off: {}; clients: {}",
            describe(cluster),
            w.clients_line()
        ),
    }
}

/// Applies `fault` (a `softroce-hosts fault` kind, or "sigstop") to the
/// current leader and waits for the failover. If leadership had moved on
/// its own just before (the fault hit a follower), the fault is undone, the
/// member rejoins, and the current leader is hit again (three tries).
/// Returns the member hit, its term, the failover and when the fault took
/// effect (`Instant`).
fn fault_leader(
    cluster: &LocalCluster,
    wire: &Wire,
    fault: &str,
    timeout: Duration,
) -> (u8, u64, Failover, Instant) {
    for attempt in 0..3 {
        let (leader, term) = wait_leader_settled(cluster);
        let at = Instant::now();
        let fault_ms = if fault == "sigstop" {
            let before = unix_ms();
            cluster.pause(leader, true).expect("SIGSTOP");
            (before, unix_ms())
        } else {
            wire.fault(fault, leader, None)
        };
        if let Some(f) = expect_failover(cluster, leader, term, fault_ms, timeout) {
            return (leader, term, f, at);
        }
        println!(
            "hosts: {fault}: leadership had left member {leader} before the fault took effect (attempt {}); undoing and trying again",
            attempt + 1
        );
        if fault == "sigstop" {
            cluster.pause(leader, false).expect("SIGCONT");
        } else {
            wire.heal(leader);
        }
        expect_rejoin(cluster, leader, Duration::from_secs(60));
    }
    panic!(
        "{fault}: leadership kept moving before the fault took effect: {}",
        describe(cluster)
    );
}

/// Waits until member `id` follows the current leader in its term, the
/// leader replicates to it again, and it applied everything committed
/// when the wait began.
fn expect_rejoin(cluster: &LocalCluster, id: u8, timeout: Duration) -> Duration {
    let mut target = None;
    let found = poll(timeout, || {
        let all = statuses(cluster);
        let leader = all
            .iter()
            .flatten()
            .filter(|s| s.role == "leader")
            .max_by_key(|s| s.term)?;
        let t = *target.get_or_insert(leader.log.commit_index);
        let me = all.iter().flatten().find(|s| s.id == id)?;
        let replicating = leader
            .peers
            .iter()
            .any(|p| p.id == id && p.replication == "replicating");
        (leader.id != id
            && me.role == "follower"
            && me.term == leader.term
            && me.leader == Some(leader.id)
            && me.log.apply_index >= t
            && replicating)
            .then_some(())
    });
    match found {
        Some(((), took)) => took,
        None => panic!(
            "member {id} did not rejoin within {timeout:?}: {}",
            describe(cluster)
        ),
    }
}

fn describe(cluster: &LocalCluster) -> String {
    statuses(cluster)
        .into_iter()
        .enumerate()
        .map(|(i, s)| match s {
            None => format!(
                "[{i}: no status; {}]",
                cluster
                    .pid(i as u8)
                    .map_or("not running".to_string(), process_state)
            ),
            Some(s) => format!(
                "[{}: {} term {} leader {:?} commit {} apply {} ({}) peers {}]",
                s.id,
                s.role,
                s.term,
                s.leader,
                s.log.commit_index,
                s.log.apply_index,
                [
                    "elections_started",
                    "elections_won",
                    "votes_granted",
                    "rows_rejected",
                    "completion_errors",
                    "revokes_unconfirmed",
                ]
                .iter()
                .filter_map(|k| s.counters.get(*k).map(|v| format!("{k} {v}")))
                .collect::<Vec<_>>()
                .join(", "),
                s.peers
                    .iter()
                    .map(|p| format!(
                        "{}:{}{}{}",
                        p.id,
                        p.replication,
                        if p.reachable { "" } else { ",unreachable" },
                        if p.dead { ",dead" } else { "" }
                    ))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a replica that does not answer is doing: its state, and the
/// kernel functions its threads wait in.
fn process_state(pid: u32) -> String {
    let read = |p: String| std::fs::read_to_string(p).unwrap_or_default();
    let state = read(format!("/proc/{pid}/stat"))
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    let mut waits: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .map(|t| {
                    let dir = t.path();
                    let name = read(format!("{}/comm", dir.display())).trim().to_string();
                    let wchan = read(format!("{}/wchan", dir.display()));
                    let stack = read(format!("{}/stack", dir.display()));
                    let top: Vec<&str> = stack
                        .lines()
                        .take(3)
                        .filter_map(|l| l.split_whitespace().nth(1))
                        .collect();
                    format!(
                        "{name}:{wchan}{}",
                        if top.is_empty() {
                            String::new()
                        } else {
                            format!("<{}>", top.join("<"))
                        }
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    waits.sort();
    waits.dedup();
    format!("pid {pid} state {state}, threads {}", waits.join(" "))
}

fn run_op(client: &mut Client, input: &KvInput) -> Option<KvOutput> {
    let r: Result<KvOutput, ClientError> = match input {
        KvInput::Get { key } => client.get(key).map(KvOutput::Value),
        KvInput::Set { key, value } => client.set(key, value).map(|()| KvOutput::Ok),
        KvInput::Del { key } => client.del(key).map(|b| KvOutput::Int(i64::from(b))),
        KvInput::Incr { key, delta } => client.incr(key, *delta).map(KvOutput::Int),
        KvInput::Cas { key, expected, new } => client
            .cas(key, expected.as_deref(), new)
            .map(|b| KvOutput::Int(i64::from(b))),
    };
    // Failed: may or may not have taken effect; recorded as unanswered.
    r.ok()
}

fn tcp_client(cluster: &LocalCluster) -> Client {
    Client::new(
        &cluster.manifest,
        ClientOptions {
            transport: Transport::Tcp,
            wait: Wait::Yield,
            attempt_timeout: Duration::from_millis(500),
            total_timeout: Duration::from_secs(45),
            client_id: None,
        },
    )
}

const KEYS: u64 = 6;

/// An acknowledged write: key, value, when the acknowledgement came.
type Acked = (Vec<u8>, Vec<u8>, Instant);

/// Clients running while faults come and go: `mixed` threads of a mixed
/// workload on a few keys (a history for the linearizability check) and
/// one writer of unique keys (each acknowledged one must stay readable).
struct Workload {
    stop: Arc<AtomicBool>,
    epoch: Instant,
    threads: Vec<std::thread::JoinHandle<Vec<Operation>>>,
    writer: Option<std::thread::JoinHandle<()>>,
    /// The unique-key writer's acknowledged writes.
    acked: Arc<Mutex<Vec<Acked>>>,
    unanswered: Arc<Mutex<u64>>,
    writes_ns: Arc<Mutex<hdrhistogram::Histogram<u64>>>,
    /// Each client's counters and last outcome, shown when writes stall.
    clients: Arc<Mutex<Vec<String>>>,
}

/// What a stalled client has been doing (for the stall reports).
fn client_line(name: &str, client: &Client, last: &str) -> String {
    let s = client.stats();
    format!(
        "{name}: ops {} retries {} redirects {} busy {} last {last} (last busy: {})",
        s.operations,
        s.retries,
        s.redirects,
        s.busy,
        client.last_busy()
    )
}

impl Workload {
    fn start(cluster: &LocalCluster, mixed: usize) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        let clients = Arc::new(Mutex::new(vec![String::new(); mixed + 1]));
        let threads = (0..mixed)
            .map(|c| {
                let manifest = cluster.manifest.clone();
                let stop = stop.clone();
                let clients = clients.clone();
                std::thread::spawn(move || {
                    let mut client = Client::new(
                        &manifest,
                        ClientOptions {
                            transport: Transport::Tcp,
                            wait: Wait::Yield,
                            attempt_timeout: Duration::from_millis(500),
                            total_timeout: Duration::from_secs(45),
                            client_id: None,
                        },
                    );
                    let mut rng = SplitMix64::new(0x5EED + c as u64);
                    let mut history = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Acquire) {
                        n += 1;
                        let key = format!("k{}", rng.range_inclusive(0, KEYS - 1)).into_bytes();
                        let value = format!("c{c}n{n}").into_bytes();
                        let input = match rng.range_inclusive(0, 9) {
                            0..=3 => KvInput::Get { key },
                            4..=6 => KvInput::Set { key, value },
                            7 => KvInput::Incr {
                                key: b"counter".to_vec(),
                                delta: 1,
                            },
                            8 => KvInput::Cas {
                                key,
                                expected: None,
                                new: value,
                            },
                            _ => KvInput::Del { key },
                        };
                        let call_ns = epoch.elapsed().as_nanos() as u64;
                        let output = run_op(&mut client, &input);
                        clients.lock().unwrap()[c] = client_line(
                            &format!("c{c}"),
                            &client,
                            if output.is_some() { "ok" } else { "unanswered" },
                        );
                        let return_ns = if output.is_some() {
                            epoch.elapsed().as_nanos() as u64
                        } else {
                            u64::MAX
                        };
                        history.push(Operation {
                            client: c as u64,
                            input,
                            call_ns,
                            return_ns,
                            output,
                        });
                    }
                    history
                })
            })
            .collect();
        let acked = Arc::new(Mutex::new(Vec::new()));
        let unanswered = Arc::new(Mutex::new(0));
        let writes_ns = Arc::new(Mutex::new(
            hdrhistogram::Histogram::<u64>::new(3).expect("histogram"),
        ));
        let writer = {
            let manifest = cluster.manifest.clone();
            let (stop, acked, unanswered, writes_ns, clients) = (
                stop.clone(),
                acked.clone(),
                unanswered.clone(),
                writes_ns.clone(),
                clients.clone(),
            );
            std::thread::spawn(move || {
                let mut client = Client::new(
                    &manifest,
                    ClientOptions {
                        transport: Transport::Tcp,
                        wait: Wait::Yield,
                        attempt_timeout: Duration::from_millis(500),
                        total_timeout: Duration::from_secs(45),
                        client_id: None,
                    },
                );
                let mut n = 0u64;
                while !stop.load(Ordering::Acquire) {
                    n += 1;
                    let key = format!("w{n}").into_bytes();
                    let value = format!("v{n}").into_bytes();
                    let t = Instant::now();
                    let result = client.set(&key, &value);
                    let last = match &result {
                        Ok(()) => "ok".to_string(),
                        Err(e) => format!("error: {e}"),
                    };
                    clients.lock().unwrap()[mixed] = client_line("writer", &client, &last);
                    match result {
                        Ok(()) => {
                            let _ = writes_ns
                                .lock()
                                .unwrap()
                                .record(t.elapsed().as_nanos() as u64);
                            acked.lock().unwrap().push((key, value, Instant::now()));
                        }
                        Err(_) => *unanswered.lock().unwrap() += 1,
                    }
                }
            })
        };
        Workload {
            stop,
            epoch,
            threads,
            writer: Some(writer),
            acked,
            unanswered,
            writes_ns,
            clients,
        }
    }

    /// Every client's counters and last outcome.
    fn clients_line(&self) -> String {
        self.clients.lock().unwrap().join("; ")
    }

    fn acked_count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Writes acknowledged in `[from, to)`.
    fn acked_between(&self, from: Instant, to: Instant) -> usize {
        self.acked
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, _, at)| *at >= from && *at < to)
            .count()
    }

    /// The longest stretch without an acknowledged write since `from`.
    fn longest_gap_since(&self, from: Instant) -> Duration {
        let acked = self.acked.lock().unwrap();
        let mut last = from;
        let mut gap = Duration::ZERO;
        for (_, _, at) in acked.iter().filter(|(_, _, at)| *at >= from) {
            gap = gap.max(at.saturating_duration_since(last));
            last = *at;
        }
        gap
    }

    /// Write latency percentiles since the last call (ms), and resets.
    fn take_write_latency(&self) -> (f64, f64, u64) {
        let mut h = self.writes_ns.lock().unwrap();
        let r = (
            h.value_at_quantile(0.5) as f64 / 1e6,
            h.value_at_quantile(0.99) as f64 / 1e6,
            h.len(),
        );
        h.reset();
        r
    }

    /// Stops the clients; checks the history (with final reads appended)
    /// for linearizability and every acknowledged unique write; prints
    /// and returns (operations, acknowledged writes, lost).
    fn finish(mut self, cluster: &LocalCluster) -> (usize, usize, usize) {
        self.stop.store(true, Ordering::Release);
        let mut history: Vec<Operation> = Vec::new();
        for t in self.threads.drain(..) {
            history.extend(t.join().expect("a client thread panicked"));
        }
        if let Some(w) = self.writer.take() {
            w.join().expect("the writer panicked");
        }
        let mut client = tcp_client(cluster);
        let mut keys: Vec<Vec<u8>> = (0..KEYS).map(|k| format!("k{k}").into_bytes()).collect();
        keys.push(b"counter".to_vec());
        for key in keys {
            let began = Instant::now();
            let (call_ns, v) = loop {
                let call_ns = self.epoch.elapsed().as_nanos() as u64;
                match client.get(&key) {
                    Ok(v) => break (call_ns, v),
                    Err(e) if began.elapsed() < Duration::from_secs(180) => {
                        eprintln!(
                            "hosts: final read of {}: {e}; again",
                            String::from_utf8_lossy(&key)
                        );
                    }
                    Err(e) => panic!("the group does not serve reads: {e}: {}", describe(cluster)),
                }
            };
            history.push(Operation {
                client: 999,
                input: KvInput::Get { key },
                call_ns,
                return_ns: self.epoch.elapsed().as_nanos() as u64,
                output: Some(KvOutput::Value(v)),
            });
        }
        let answered = history.iter().filter(|o| o.output.is_some()).count();
        match check_history(&history) {
            Verdict::Linearizable => {}
            Verdict::Violation { key, operations } => {
                let ops: Vec<String> = operations
                    .iter()
                    .take(40)
                    .map(|&i| format!("{:?}", history[i]))
                    .collect();
                panic!(
                    "history not linearizable on key {:?}:\n{}",
                    String::from_utf8_lossy(&key),
                    ops.join("\n")
                );
            }
            Verdict::Unknown { key } => {
                panic!("linearizability undecided on key {key:?} (search budget)")
            }
        }
        let acked = self.acked.lock().unwrap();
        let mut lost = 0;
        for (k, v, _) in acked.iter() {
            // A read that fails (no leader for a while) proves nothing
            // either way: asked again, for up to three minutes.
            let began = Instant::now();
            let read = loop {
                match client.get(k) {
                    Err(e) if began.elapsed() < Duration::from_secs(180) => {
                        eprintln!(
                            "hosts: reading back {}: {e}; again",
                            String::from_utf8_lossy(k)
                        );
                    }
                    r => break r,
                }
            };
            match read {
                Ok(Some(got)) if got == *v => {}
                Err(e) => panic!(
                    "acknowledged write {} cannot be read back (the group does not serve): {e}: {}",
                    String::from_utf8_lossy(k),
                    describe(cluster)
                ),
                other => {
                    lost += 1;
                    if lost <= 5 {
                        eprintln!(
                            "hosts: acknowledged write {} = {} reads back {other:?}",
                            String::from_utf8_lossy(k),
                            String::from_utf8_lossy(v)
                        );
                    }
                }
            }
        }
        println!(
            "hosts: history of {} operations ({answered} answered) is linearizable; {} acknowledged unique writes checked, {lost} lost ({} writes unanswered)",
            history.len(),
            acked.len(),
            *self.unanswered.lock().unwrap()
        );
        (history.len(), acked.len(), lost)
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Lets the workload run until `n` more writes are acknowledged.
fn progress(w: &Workload, n: usize, timeout: Duration, what: &str, cluster: &LocalCluster) {
    let base = w.acked_count();
    let mut last = (base, Instant::now());
    let done = poll(timeout, || {
        let now = w.acked_count();
        if now >= base + n {
            return Some(());
        }
        // A stall is shown as it happens (the group's view then).
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(5) {
            println!(
                "hosts: {what}: no write acknowledged for 5 s: {}; clients: {}",
                describe(cluster),
                w.clients_line()
            );
            last.1 = Instant::now();
        }
        None
    });
    if done.is_none() {
        panic!(
            "{what}: fewer than {n} writes acknowledged in {timeout:?} ({} did): {}; clients: {}",
            w.acked_count() - base,
            describe(cluster),
            w.clients_line()
        );
    }
}

fn print_failover(what: &str, old: u8, f: &Failover) {
    println!(
        "hosts: {what}: member {} leads term {} (was member {old}) {:.0} ms after the fault, first commit after {}; the fault took effect within {:.0} ms; new leader's record: {}",
        f.new_leader,
        f.term,
        f.elected_ms,
        f.first_commit_ms
            .map_or("-".to_string(), |c| format!("{c:.0} ms")),
        f.window_ms,
        f.record.as_ref().map_or("-".to_string(), |(d, e, by)| format!(
            "detection {d:.0} ms ({by}), election {e:.0} ms"
        ))
    );
}

/// The scenario of the issue: the leader's host is cut off (both
/// directions dropped at its switch port) while clients run; the other two
/// elect and serve, the cut-off leader steps down, and once the partition
/// heals it comes back as a follower that the group depends on again.
#[test]
#[ignore = "needs the Soft-RoCE hosts: run scripts/softroce-vm"]
fn partitioned_leader_fails_over_and_rejoins_after_heal() {
    let hosts = hosts();
    let cluster = start("vhpart", 7900, &hosts, qp_settings());
    let _logs = LogsOnPanic(cluster.log_dir().to_path_buf());
    let wire = Wire { hosts: 3 };
    let (leader, term) = cluster
        .wait_leader(0, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("no leader: {e}"));
    println!("hosts: member {leader} leads term {term}");
    let w = Workload::start(&cluster, 2);
    progress(
        &w,
        200,
        Duration::from_secs(120),
        "before the partition",
        &cluster,
    );
    let (p50, p99, n) = w.take_write_latency();
    println!("hosts: writes across hosts (RESP/TCP client, replicated over RoCE): p50 {p50:.2} ms p99 {p99:.2} ms ({n} writes)");

    let (leader, term, f, fault_at) =
        fault_leader(&cluster, &wire, "partition", Duration::from_secs(30));
    print_failover("leader's host partitioned", leader, &f);
    // The cut-off leader cannot reach a majority: it steps down.
    let stepped = poll(Duration::from_secs(20), || {
        let s = statuses(&cluster)
            .into_iter()
            .flatten()
            .find(|s| s.id == leader)?;
        (s.role != "leader" || s.term > term).then(|| s.role.clone())
    });
    let Some((role, took)) = stepped else {
        panic!(
            "the partitioned leader {leader} still leads term {term}: {}",
            describe(&cluster)
        )
    };
    let _ = took;
    println!(
        "hosts: the partitioned old leader is {role} {:.0} ms after the fault (or earlier: seen then)",
        fault_at.elapsed().as_secs_f64() * 1e3
    );
    // The majority serves while the partition lasts.
    progress(
        &w,
        50,
        Duration::from_secs(60),
        "during the partition",
        &cluster,
    );
    let healed_at = Instant::now();
    let during = w.acked_between(fault_at, healed_at);
    let gap = w.longest_gap_since(fault_at);
    wire.heal(leader);
    let rejoin = expect_rejoin(&cluster, leader, Duration::from_secs(60));
    println!(
        "hosts: partition held {:.1} s, {during} writes acknowledged meanwhile (longest client-visible gap {:.0} ms); healed: member {leader} follows term {} again after {:.0} ms",
        (healed_at - fault_at).as_secs_f64(),
        gap.as_secs_f64() * 1e3,
        f.term,
        rejoin.as_secs_f64() * 1e3
    );
    // The group depends on it again: with the third member cut off, the
    // leader commits only through the rejoined one. (Cut off, not stopped:
    // a stopped member's memory still takes the leader's writes.)
    let (now_leader, _) = wait_leader_settled(&cluster);
    let third = (0..3u8)
        .find(|&m| m != leader && m != now_leader)
        .unwrap_or_else(|| (0..3u8).find(|&m| m != leader).expect("a member"));
    let with = (0..3u8).find(|&m| m != third).expect("a member");
    let other = (0..3u8)
        .find(|&m| m != third && m != with)
        .expect("a member");
    wire.fault("partition", third, None);
    let t = Instant::now();
    let committed = commit_progress(&cluster, &w, third, 100, Duration::from_secs(90));
    println!(
        "hosts: member {third} cut off: {committed} entries committed in {:.1} s by members {with} and {other} (member {leader} is the one that rejoined)",
        t.elapsed().as_secs_f64()
    );
    wire.heal(third);
    expect_rejoin(&cluster, third, Duration::from_secs(60));
    let (_, acked, lost) = w.finish(&cluster);
    assert!(acked > 350, "only {acked} writes acknowledged");
    assert_eq!(lost, 0, "acknowledged writes lost");
    println!("hosts: partition scenario: failover, step-down, rejoin after heal: ok; acknowledged writes lost: {lost}");
}

/// The other faults of a network and of hosts, one after the other on one
/// group with clients running: delay, jitter, loss and reordering on the
/// leader's link; the leader's sends dropped, then its receives; a
/// follower's link pulled; the leader stopped; a follower's rxe device
/// removed. After each the group serves; at the end the history is
/// linearizable and no acknowledged write is lost.
#[test]
#[ignore = "needs the Soft-RoCE hosts: run scripts/softroce-vm"]
fn faults_on_the_wire() {
    let hosts = hosts();
    // Delay, jitter and reordering on a link need an ACK timeout above
    // the path's round trip, and every retry RC allows: with the default
    // 4.2 ms × 4 tries (qp_timeout 10, 3 retries) netem's 2 ms ± 1 ms each
    // way made requests complete retry-exceeded and the group re-elect
    // over and over.
    let mut cluster = start("vhwire", 7920, &hosts, WIRE_QP);
    let _logs = LogsOnPanic(cluster.log_dir().to_path_buf());
    let wire = Wire { hosts: 3 };
    cluster
        .wait_leader(0, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("no leader: {e}"));
    let w = Workload::start(&cluster, 2);
    progress(&w, 50, Duration::from_secs(120), "warm-up", &cluster);
    let (p50, p99, _) = w.take_write_latency();
    println!("hosts: writes before the faults: p50 {p50:.2} ms p99 {p99:.2} ms");

    // 1. netem on the leader's link, both directions.
    let (leader, term) = wait_leader_settled(&cluster);
    let spec = "delay 2ms 1ms loss 1% reorder 25% 50%";
    wire.fault("netem", leader, Some(spec));
    let t = Instant::now();
    progress(
        &w,
        60,
        Duration::from_secs(90),
        "netem on the leader's link",
        &cluster,
    );
    let (p50, p99, n) = w.take_write_latency();
    wire.heal(leader);
    let after = current_leader(&cluster);
    println!(
        "hosts: netem '{spec}' on leader {leader}'s link: {n} writes in {:.1} s, p50 {p50:.2} ms p99 {p99:.2} ms; leader after: {after:?} (was {leader}, term {term})",
        t.elapsed().as_secs_f64()
    );
    if let Some((l, _)) = after {
        for m in (0..3u8).filter(|&m| m != l) {
            expect_rejoin(&cluster, m, Duration::from_secs(60));
        }
    }

    // 2. and 3. One direction only.
    for (kind, what) in [
        ("partition-out", "leader's sends dropped"),
        ("partition-in", "leader's receives dropped"),
    ] {
        let (leader, _, f, _) = fault_leader(&cluster, &wire, kind, Duration::from_secs(40));
        print_failover(what, leader, &f);
        progress(&w, 20, Duration::from_secs(60), what, &cluster);
        wire.heal(leader);
        let r = expect_rejoin(&cluster, leader, Duration::from_secs(60));
        println!(
            "hosts: {what}: healed, member {leader} follows again after {:.0} ms",
            r.as_secs_f64() * 1e3
        );
    }

    // 4. A follower's link goes down (carrier lost, its rxe port DOWN).
    let (leader, _) = wait_leader_settled(&cluster);
    let follower = (0..3u8).find(|&m| m != leader).expect("a follower");
    wire.fault("link-down", follower, None);
    let t = Instant::now();
    progress(
        &w,
        50,
        Duration::from_secs(60),
        "a follower's link down",
        &cluster,
    );
    std::thread::sleep(Duration::from_millis(
        2000u64.saturating_sub(t.elapsed().as_millis() as u64),
    ));
    wire.fault("link-up", follower, None);
    let r = expect_rejoin(&cluster, follower, Duration::from_secs(60));
    println!(
        "hosts: follower {follower}'s link down for {:.1} s: the group served; link up: it follows again after {:.0} ms",
        t.elapsed().as_secs_f64() - r.as_secs_f64(),
        r.as_secs_f64() * 1e3
    );

    // 5. The leader stopped (SIGSTOP): a zombie until SIGCONT.
    let (leader, _, f, _) = fault_leader(&cluster, &wire, "sigstop", Duration::from_secs(40));
    print_failover("leader SIGSTOPped", leader, &f);
    progress(&w, 20, Duration::from_secs(60), "leader stopped", &cluster);
    cluster.pause(leader, false).expect("SIGCONT");
    let r = expect_rejoin(&cluster, leader, Duration::from_secs(60));
    println!(
        "hosts: SIGCONT: member {leader} follows again after {:.0} ms",
        r.as_secs_f64() * 1e3
    );

    // 6. A follower's host loses its rxe device (`rdma link del`): the
    // replica's device context dies with it (no new device brings it back;
    // its exchange over TCP still answers), so to its peers it is a member
    // whose RDMA requests time out. The other two serve.
    let (leader, _) = wait_leader_settled(&cluster);
    let victim = (0..3u8).find(|&m| m != leader).expect("a follower");
    wire.fault("rxe-del", victim, None);
    progress(
        &w,
        50,
        Duration::from_secs(60),
        "a follower's rxe device removed",
        &cluster,
    );
    wire.fault("rxe-add", victim, None);
    let back = poll(Duration::from_secs(5), || {
        let all = statuses(&cluster);
        let s = all.iter().flatten().find(|s| s.id == victim)?;
        let leader = all.iter().flatten().find(|s| s.role == "leader")?;
        leader
            .peers
            .iter()
            .any(|p| p.id == victim && p.replication == "replicating")
            .then(|| s.role.clone())
    });
    println!(
        "hosts: follower {victim}'s rxe device removed: the group served; device re-added: the running replica {}",
        match &back {
            Some((role, t)) => format!("is replicated to again ({role}) after {:.0} ms", t.as_secs_f64() * 1e3),
            None => "is not replicated to (its device context died with the device)".to_string(),
        }
    );
    progress(
        &w,
        30,
        Duration::from_secs(60),
        "after the device fault",
        &cluster,
    );
    let (_, acked, lost) = w.finish(&cluster);
    assert_eq!(lost, 0, "acknowledged writes lost");
    println!("hosts: wire faults: {acked} acknowledged writes, lost: {lost}");

    // The member without a device is replaced by a new process (SIGKILL,
    // restart on its host). Reported, not asserted, until it rejoins in
    // every run (issue 17).
    if back.is_none() {
        cluster.kill(victim).expect("SIGKILL");
        cluster.restart(victim).expect("restart");
        match poll(Duration::from_secs(30), || {
            let all = statuses(&cluster);
            let leader = all.iter().flatten().find(|s| s.role == "leader")?;
            leader
                .peers
                .iter()
                .any(|p| p.id == victim && p.replication == "replicating")
                .then_some(())
        }) {
            Some((_, t)) => println!(
                "hosts: restarted member {victim} is replicated to again after {:.0} ms",
                t.as_secs_f64() * 1e3
            ),
            None => {
                println!(
                    "hosts: restarted member {victim} is not replicated to within 30 s (issue 17): {}",
                    describe(&cluster)
                );
                // Reported, not failed: the logs say where the rejoin stopped.
                print_log_tails(cluster.log_dir(), 60);
            }
        }
    }
}

/// How long a group over verbs takes to replace a leader whose host is cut
/// off, over several partitions (each healed and rejoined before the
/// next), with the QP settings that produced it.
#[test]
#[ignore = "needs the Soft-RoCE hosts: run scripts/softroce-vm"]
fn partitioned_leader_detection_time() {
    let hosts = hosts();
    let runs: usize = std::env::var("VERBATIM_HOSTS_DETECT_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let qp = qp_settings();
    let cluster = start("vhdet", 7940, &hosts, qp);
    let _logs = LogsOnPanic(cluster.log_dir().to_path_buf());
    let wire = Wire { hosts: 3 };
    cluster
        .wait_leader(0, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("no leader: {e}"));
    let w = Workload::start(&cluster, 1);
    progress(&w, 50, Duration::from_secs(120), "warm-up", &cluster);
    // Per run, from the new leader's own record: the old leader's last
    // heartbeat it saw to its suspicion (detection), and to its leadership
    // (detection + election); and, on the wall clock, from the moment the
    // fault command began to the first commit of the new term (an upper
    // bound: the fault takes effect somewhere within the command).
    let (mut detect, mut replaced, mut commit, mut window) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        // Let heartbeats settle after the previous rejoin.
        progress(
            &w,
            20,
            Duration::from_secs(60),
            "between partitions",
            &cluster,
        );
        let (leader, _, f, _) = fault_leader(&cluster, &wire, "partition", Duration::from_secs(30));
        print_failover(&format!("run {}/{runs}", run + 1), leader, &f);
        if let Some((d, e, by)) = &f.record {
            if by == "heartbeat" {
                detect.push(*d);
                replaced.push(d + e);
            }
        }
        if let Some(c) = f.first_commit_ms {
            commit.push(c);
        }
        window.push(f.window_ms);
        wire.heal(leader);
        expect_rejoin(&cluster, leader, Duration::from_secs(60));
    }
    let (_, _, lost) = w.finish(&cluster);
    assert_eq!(lost, 0, "acknowledged writes lost");
    let q = |v: &[f64]| -> String {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
        if v.is_empty() {
            "-".to_string()
        } else {
            format!(
                "min {:.0} ms p50 {:.0} ms p99 {:.0} ms (n={})",
                at(0.0),
                at(0.5),
                at(0.99),
                v.len()
            )
        }
    };
    let (t, r) = qp;
    println!(
        "hosts: partitioned-leader detection over verbs: detection {}; to the new leader {}; fault to first commit {} (the fault command took p50 {:.0} ms); qp_timeout {t} qp_retry_count {r} (retry-exceeded after ~{:.0} ms), {}",
        q(&detect),
        q(&replaced),
        q(&commit),
        {
            let mut w = window.clone();
            w.sort_by(|a, b| a.total_cmp(b));
            w.get(w.len() / 2).copied().unwrap_or(f64::NAN)
        },
        qp_bound_ms((t, r)),
        TIMINGS[..7].join(" "),
    );
    assert!(!detect.is_empty(), "no failover was detected by heartbeat");
}
