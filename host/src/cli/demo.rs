//! `verbatim demo`: three replicas, a mixed workload over the
//! shared-memory fast path, the leader SIGKILLed mid-run, and a summary:
//! operations, latency percentiles, the failover timeline and a check
//! that every acknowledged write is still readable.

use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use verbatim_client::client::{Client, ClientOptions, Transport, Wait};
use verbatim_client::local::{LocalCluster, LocalOptions};
use verbatim_client::manifest::PollMode;
use verbatim_core::rng::SplitMix64;

/// Demo settings.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Replicas (3 by default).
    pub replicas: u8,
    /// Total run time.
    pub duration: Duration,
    /// When to kill the leader (from the start of the workload).
    pub kill_after: Duration,
    /// Value size.
    pub value_bytes: usize,
    /// Distinct keys.
    pub keys: u64,
    /// The `verbatim` binary.
    pub binary: PathBuf,
    /// Poll mode of the replicas.
    pub poll: PollMode,
}

/// Latency percentiles in nanoseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencyNs {
    /// Operations measured.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Maximum.
    pub max: u64,
}

/// The failover, in microseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FailoverUs {
    /// Killed leader.
    pub old_leader: u8,
    /// New leader.
    pub new_leader: Option<u8>,
    /// Term after the failover.
    pub new_term: Option<u64>,
    /// Death to suspicion (new leader's view).
    pub detection: Option<u64>,
    /// How the new leader learned of the death ("notice", "pidfd",
    /// "heartbeat").
    pub detected_by: Option<String>,
    /// Suspicion to leadership.
    pub election: Option<u64>,
    /// Leadership to the first commit of the new term.
    pub first_commit: Option<u64>,
    /// From the kill to the client's first completed operation afterwards.
    pub client_gap: u64,
    /// From the kill to the victim's death notice (robust futex released
    /// early in the kernel's exit path).
    pub death_notice: Option<u64>,
    /// From the kill to the process-exit notification (kernel teardown).
    pub process_exit: Option<u64>,
}

/// The demo's summary (`--json` prints it as one object).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DemoReport {
    /// Replicas.
    pub replicas: u8,
    /// Fabric and client path.
    pub fabric: String,
    /// Operations completed.
    pub ops: u64,
    /// Writes completed.
    pub writes: u64,
    /// Reads completed.
    pub reads: u64,
    /// Workload wall time (ms).
    pub duration_ms: u64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// All operations.
    pub latency_ns: LatencyNs,
    /// Writes.
    pub write_latency_ns: LatencyNs,
    /// Reads.
    pub read_latency_ns: LatencyNs,
    /// The failover.
    pub failover_us: FailoverUs,
    /// Keys whose last acknowledged write was checked.
    pub checked_writes: u64,
    /// Acknowledged writes not readable afterwards (must be 0).
    pub lost_writes: u64,
    /// Client retries and redirects.
    pub client_retries: u64,
    /// Redirects followed.
    pub client_redirects: u64,
}

fn percentiles(h: &hdrhistogram::Histogram<u64>) -> LatencyNs {
    if h.is_empty() {
        return LatencyNs::default();
    }
    LatencyNs {
        count: h.len(),
        p50: h.value_at_quantile(0.5),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        max: h.max(),
    }
}

/// Runs the demo; `progress` receives human-readable lines as it goes.
pub fn run(opts: &DemoOptions, mut progress: impl FnMut(&str)) -> Result<DemoReport, String> {
    let name = format!("demo{}", std::process::id());
    // Replicas on the last core, the client on the first: a client and a
    // leader sharing a core pay two context switches per request.
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let (replica_cores, client_core) = match cores.len() {
        0 | 1 => (Vec::new(), None),
        n => (vec![cores[n - 1].id], Some(cores[0])),
    };
    let mut cluster = LocalCluster::start(
        &LocalOptions {
            name,
            replicas: opts.replicas,
            base_port: 0,
            poll: opts.poll,
            cores: replica_cores,
            overrides: Vec::new(),
            binary: opts.binary.clone(),
        },
        Duration::from_secs(20),
    )?;
    progress(&format!(
        "started {} replicas ({})",
        opts.replicas,
        cluster.manifest_path.display()
    ));
    let (leader, term) = cluster.wait_leader(0, Duration::from_secs(10))?;
    progress(&format!("member {leader} leads term {term}"));

    if let Some(core) = client_core {
        core_affinity::set_for_current(core);
    }
    let mut client = Client::new(
        &cluster.manifest,
        ClientOptions {
            transport: Transport::Shm,
            wait: Wait::Yield,
            ..ClientOptions::default()
        },
    );
    let mut rng = SplitMix64::new(0xDE30);
    let mut all = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    let mut writes_h = all.clone();
    let mut reads_h = all.clone();
    let mut acked: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let (mut writes, mut reads) = (0u64, 0u64);
    let began = Instant::now();
    let mut killed: Option<(Instant, u8, u64)> = None;
    let mut exit_seen: Option<std::thread::JoinHandle<Instant>> = None;
    let mut notice_seen: Option<std::thread::JoinHandle<Instant>> = None;
    let mut first_after_kill: Option<Instant> = None;
    let mut version = 0u64;
    while began.elapsed() < opts.duration {
        if killed.is_none() && began.elapsed() >= opts.kill_after {
            // The leader is the replica that answered the client's last
            // write; its term is the one the failover must move past.
            let victim = client.leader();
            let victim_term = cluster
                .status()
                .into_iter()
                .flatten()
                .find(|s| s.id == victim)
                .map_or(term, |s| s.term);
            // Time the process exit itself (the kernel tears the process
            // down before its pidfd fires), from a thread of our own.
            let watch = cluster
                .pid(victim)
                .and_then(|p| verbatim_client::process::ProcessWatch::open(p as i32));
            // And the moment its death notice turns (see `notice`): we
            // wait on the mutex of the first id that is not a member.
            let observer = verbatim_core::fabric::MemberId(opts.replicas);
            let notice = verbatim_client::notice::NoticeWatch::open(
                &verbatim_client::notice::notice_path(&cluster.manifest.segment_path(victim)),
            )
            .ok()
            .filter(|_| observer.index() < verbatim_core::fabric::MAX_MEMBERS - 1);
            // Both watchers block before the kill (the kill time must not
            // include their thread starts).
            let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
            let ready = ready_tx.clone();
            notice_seen = notice.map(|w| {
                std::thread::spawn(move || {
                    let param = libc::sched_param { sched_priority: 1 };
                    // SAFETY: our own thread's policy; failure is harmless.
                    let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
                    let stop = std::sync::atomic::AtomicBool::new(false);
                    let _ = ready.send(());
                    w.wait_owner_gone(observer, &stop, Duration::from_millis(50));
                    Instant::now()
                })
            });
            let ready = ready_tx;
            exit_seen = watch.map(|w| {
                std::thread::spawn(move || {
                    let _ = ready.send(());
                    w.wait_exit(Duration::from_secs(5));
                    Instant::now()
                })
            });
            let watchers = usize::from(notice_seen.is_some()) + usize::from(exit_seen.is_some());
            for _ in 0..watchers {
                let _ = ready_rx.recv_timeout(Duration::from_secs(5));
            }
            let kill_at = Instant::now();
            cluster.kill(victim)?;
            progress(&format!(
                "SIGKILLed the leader, member {victim} (term {victim_term})"
            ));
            killed = Some((kill_at, victim, victim_term));
        }
        let key = format!("key:{}", rng.range_inclusive(0, opts.keys - 1)).into_bytes();
        let t0 = Instant::now();
        let is_write = rng.chance(1, 2);
        let ok = if is_write {
            version += 1;
            let mut value = format!("v{version}:").into_bytes();
            value.resize(opts.value_bytes.max(value.len()), b'x');
            match client.set(&key, &value) {
                Ok(()) => {
                    acked.insert(key, value);
                    writes += 1;
                    true
                }
                Err(e) => {
                    progress(&format!("write failed: {e}"));
                    false
                }
            }
        } else {
            match client.get(&key) {
                Ok(_) => {
                    reads += 1;
                    true
                }
                Err(e) => {
                    progress(&format!("read failed: {e}"));
                    false
                }
            }
        };
        let ns = t0.elapsed().as_nanos() as u64;
        if ok {
            let _ = all.record(ns.max(1));
            let _ = if is_write {
                writes_h.record(ns.max(1))
            } else {
                reads_h.record(ns.max(1))
            };
            if killed.is_some() && first_after_kill.is_none() {
                first_after_kill = Some(Instant::now());
            }
        }
    }
    let duration = began.elapsed();
    let (kill_at, victim, victim_term) = killed.ok_or("the run ended before the kill")?;
    let gap = first_after_kill.map_or(0, |t| t.duration_since(kill_at).as_micros() as u64);
    let exit_us = exit_seen
        .and_then(|h| h.join().ok())
        .map(|t| t.duration_since(kill_at).as_micros() as u64);
    progress(&format!(
        "first operation after the kill completed {gap} µs later"
    ));
    let notice_us = notice_seen
        .and_then(|h| h.join().ok())
        .map(|t| t.duration_since(kill_at).as_micros() as u64);

    // Every acknowledged write must still be readable (the last value).
    let mut lost = 0u64;
    for (key, value) in &acked {
        match client.get(key) {
            Ok(Some(v)) if &v == value => {}
            other => {
                lost += 1;
                progress(&format!(
                    "LOST {}: expected the acknowledged value, read {other:?}",
                    String::from_utf8_lossy(key)
                ));
            }
        }
    }
    let (new_leader, new_term) = cluster
        .wait_leader(victim_term, Duration::from_secs(5))
        .map_or((None, None), |(l, t)| (Some(l), Some(t)));
    // The new leader's record of the first leader change after the kill.
    let failover = new_leader
        .and_then(|l| cluster.status().into_iter().flatten().find(|s| s.id == l))
        .and_then(|s| s.failovers.iter().find(|f| f.term > victim_term).cloned());
    let stats = client.stats();
    let report = DemoReport {
        replicas: opts.replicas,
        fabric: "shared memory, shm client slots".into(),
        ops: writes + reads,
        writes,
        reads,
        duration_ms: duration.as_millis() as u64,
        ops_per_sec: (writes + reads) as f64 / duration.as_secs_f64(),
        latency_ns: percentiles(&all),
        write_latency_ns: percentiles(&writes_h),
        read_latency_ns: percentiles(&reads_h),
        failover_us: FailoverUs {
            old_leader: victim,
            new_leader,
            new_term,
            detection: failover.as_ref().map(|f| f.detection_us),
            detected_by: failover.as_ref().map(|f| f.detected_by.clone()),
            election: failover.as_ref().map(|f| f.election_us),
            first_commit: failover.as_ref().and_then(|f| f.first_commit_us),
            client_gap: gap,
            death_notice: notice_us,
            process_exit: exit_us,
        },
        checked_writes: acked.len() as u64,
        lost_writes: lost,
        client_retries: stats.retries,
        client_redirects: stats.redirects,
    };
    cluster.stop();
    let _ = std::fs::remove_dir_all(cluster.log_dir());
    Ok(report)
}

/// The human-readable summary.
pub fn render(r: &DemoReport) -> String {
    let us = |ns: u64| ns as f64 / 1000.0;
    let opt = |v: Option<u64>| v.map_or("—".to_string(), |v| format!("{v} µs"));
    let f = &r.failover_us;
    format!(
        "\n{} replicas, {}\n\
         operations   {} ({} writes, {} reads) in {:.2} s = {:.0} ops/s\n\
         latency      p50 {:.1} µs   p99 {:.1} µs   p99.9 {:.1} µs   max {:.1} µs\n\
         writes       p50 {:.1} µs   p99 {:.1} µs\n\
         reads        p50 {:.1} µs   p99 {:.1} µs\n\
         failover     member {} killed (SIGKILL); member {} leads term {}\n\
         \x20 detection    {}   (death seen through its {})\n\
         \x20 election     {}\n\
         \x20 first commit {}\n\
         \x20 client gap   {} µs (SIGKILL to the client's next completed operation;\n\
         \x20              its death notice turned after {}, its pidfd after {})\n\
         durability   {} keys checked, {} acknowledged writes lost\n\
         client       {} retries, {} redirects\n",
        r.replicas,
        r.fabric,
        r.ops,
        r.writes,
        r.reads,
        r.duration_ms as f64 / 1000.0,
        r.ops_per_sec,
        us(r.latency_ns.p50),
        us(r.latency_ns.p99),
        us(r.latency_ns.p999),
        us(r.latency_ns.max),
        us(r.write_latency_ns.p50),
        us(r.write_latency_ns.p99),
        us(r.read_latency_ns.p50),
        us(r.read_latency_ns.p99),
        f.old_leader,
        f.new_leader.map_or("?".to_string(), |l| l.to_string()),
        f.new_term.map_or("?".to_string(), |t| t.to_string()),
        opt(f.detection),
        f.detected_by.as_deref().unwrap_or("?"),
        opt(f.election),
        opt(f.first_commit),
        f.client_gap,
        opt(f.death_notice),
        opt(f.process_exit),
        r.checked_writes,
        r.lost_writes,
        r.client_retries,
        r.client_redirects,
    )
}
