//! Three `verbatim replica` processes on the ibverbs fabric: they elect a
//! leader, replicate client writes through RDMA WRITEs into each other's
//! logs, and fail over when the leader is SIGKILLed. Prints the client's
//! write and read latency and the failover timeline. Run twice: with
//! DARE's own election, and in primary-backup mode, where the coordinators
//! decide views by CAS over the same device (their own slot words through
//! the loopback connection).
//!
//! Needs an RDMA device and the release binary built with `--features
//! rdma` (`VERBATIM_BIN`, or next to this test binary): `scripts/softroce-vm`
//! runs it inside a VM on Soft-RoCE. Ignored otherwise; run with
//! `--ignored` it fails loudly when the device is missing.
#![cfg(feature = "rdma")]

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use verbatim_client::client::{Client, ClientOptions, Transport, Wait};
use verbatim_client::local::{find_binary, LocalCluster, LocalOptions};
use verbatim_client::manifest::PollMode;
use verbatim_host::fabric::verbs::{device_names, roce_v2_ipv4_gid_index};

fn pct(h: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

#[test]
#[ignore = "needs an RDMA device and the rdma release binary: run scripts/softroce-vm"]
fn three_replicas_over_verbs_elect_replicate_and_fail_over() {
    let end = run("cluster", 0, &[]);
    assert_eq!(end.decided_by, "election", "views are off");
}

/// Primary-backup mode over verbs: the coordinators (all three members)
/// decide every view with one-sided CAS, each also CASing its own slot
/// words through the fabric's loopback connection. After the primary is
/// killed only two coordinators are left, so the view that names the new
/// primary needs the claimant's own acceptor: without loopback requests
/// no view would be decided and the group would stop.
#[test]
#[ignore = "needs an RDMA device and the rdma release binary: run scripts/softroce-vm"]
fn primary_backup_over_verbs_fails_over_through_the_coordinators() {
    let end = run(
        "pb",
        3,
        &[
            "cluster.mode=\"primary-backup\"",
            // Patient for software RDMA in an emulated VM.
            "views.lease_us=20000",
        ],
    );
    assert_eq!(end.decided_by, "view", "the new primary's failover record");
    for s in &end.statuses {
        let v = s.views.as_ref().expect("views on");
        assert!(
            !v.own_acceptor_no_loopback,
            "member {}: its own requests were refused (no loopback connection)",
            s.id
        );
        assert!(
            v.epoch >= 2,
            "member {} knows view {} only: no view decided after the kill",
            s.id,
            v.epoch
        );
    }
}

/// What a run ended with.
struct End {
    /// How the new leader after the kill was decided ("election" or
    /// "view").
    decided_by: String,
    /// The survivors' status after the workload.
    statuses: Vec<verbatim_status::Snapshot>,
}

/// Starts three replicas over the RDMA device with `extra` settings, runs
/// the workload, kills the leader, checks that no acknowledged write was
/// lost, and says how the failover was decided.
fn run(label: &str, port_offset: u16, extra: &[&str]) -> End {
    let (device, gid_index, binary, overrides) = verbs_setup(port_offset, extra);
    run_with(label, &device, gid_index, binary, overrides)
}

/// The RDMA device, its RoCE v2 GID index, the replica binary, and the
/// manifest overrides that put three replicas on it (exchange ports from
/// `port_offset`, patient timings, then `extra`).
fn verbs_setup(port_offset: u16, extra: &[&str]) -> (String, u8, PathBuf, Vec<String>) {
    let device = std::env::var("VERBATIM_RDMA_DEVICE").unwrap_or_else(|_| {
        device_names()
            .ok()
            .and_then(|n| n.first().cloned())
            .unwrap_or_else(|| panic!("no RDMA device here; run scripts/softroce-vm"))
    });
    let names = device_names().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        names.contains(&device),
        "device {device} missing; devices: {names:?}"
    );
    let gid_index = roce_v2_ipv4_gid_index(&device, 1).unwrap_or(0);
    let binary = std::env::var_os("VERBATIM_BIN")
        .map(PathBuf::from)
        .or_else(find_binary)
        .expect("the verbatim binary (set VERBATIM_BIN)");
    // Exchange ports: each run of this process its own three.
    let base_port = 17_900 + (std::process::id() % 300) as u16 * 6 + port_offset;
    // Authenticated exchange, as on a network (loopback would allow none).
    let mut overrides = vec![
        "cluster.fabric=\"verbs\"".to_string(),
        "cluster.exchange_secret=\"verbs-cluster-test-secret\"".to_string(),
    ];
    for i in 0..3u16 {
        overrides.push(format!(
            "members.{i}.verbs={{device=\"{device}\", port=1, gid_index={gid_index}, exchange_addr=\"127.0.0.1:{}\"}}",
            base_port + i
        ));
    }
    // Software RDMA in an emulated VM is ~20x slower than hardware and its
    // processes share two virtual CPUs: timings a little more patient than
    // the defaults (all overridable with VERBATIM_CLUSTER_SET="k=v k=v").
    overrides.extend(
        [
            "timing.heartbeat_period_us=2000",
            "timing.fd_check_period_us=20000",
            "timing.fd_check_period_max_us=200000",
            // Longer than a parked follower's longest sleep (20 ms): the
            // verbs fabric does not ring doorbells yet, so a vote request
            // waits until the voter wakes up by itself.
            "timing.election_timeout_min_us=25000",
            "timing.election_timeout_max_us=50000",
            "timing.leader_quorum_timeout_us=200000",
            // Followers wake for these; fewer wake-ups leave the two
            // virtual CPUs to the leader, the client and rxe.
            "timing.apply_publish_period_us=5000",
            "timing.prune_period_us=10000",
            // Each grant registers the log for the new leader: a smaller
            // ring registers faster under emulation.
            "cluster.log_ring_bytes=1048576",
        ]
        .map(String::from),
    );
    overrides.extend(extra.iter().map(|s| s.to_string()));
    if let Ok(extra) = std::env::var("VERBATIM_CLUSTER_SET") {
        overrides.extend(extra.split_whitespace().map(String::from));
    }
    (device, gid_index, binary, overrides)
}

fn run_with(
    label: &str,
    device: &str,
    gid_index: u8,
    binary: PathBuf,
    overrides: Vec<String>,
) -> End {
    // On any failure, show what the replicas said (their logs live in the
    // VM's /tmp, which is gone once it powers off).
    let log_dir = std::env::temp_dir().join(format!("verbatim-vc{}", std::process::id()));
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        for i in 0..3 {
            let f = log_dir.join(format!("replica-{i}.log"));
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            eprintln!("---- {} (last {} lines)", f.display(), tail.len());
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
        }
        default_hook(info);
    }));
    // leader-busy by default: the leader spins, followers sleep (their
    // CPUs are not on the replication path). VERBATIM_CLUSTER_POLL=busy
    // spins everywhere.
    let poll = match std::env::var("VERBATIM_CLUSTER_POLL").as_deref() {
        Ok("busy") => PollMode::Busy,
        Ok("adaptive") => PollMode::Adaptive,
        _ => PollMode::LeaderBusy,
    };
    println!("{label}: poll mode {poll}");
    let t0 = Instant::now();
    let mut cluster = LocalCluster::start(
        &LocalOptions {
            name: format!("vc{label}{}", std::process::id()),
            replicas: 3,
            base_port: 0,
            poll,
            cores: Vec::new(),
            overrides,
            binary,
        },
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("starting the cluster: {e}"));
    println!(
        "{label}: 3 replicas over {device} (gid index {gid_index}) connected in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let (leader, term) = cluster
        .wait_leader(0, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("no leader: {e}; logs in {}", cluster.log_dir().display()));
    println!(
        "{label}: member {leader} leads term {term} ({:.1} s after start)",
        t0.elapsed().as_secs_f64()
    );
    for s in cluster.status().into_iter().flatten() {
        assert_eq!(
            s.config.fabric, "verbs",
            "member {} runs {}",
            s.id, s.config.fabric
        );
    }

    let mut client = Client::new(
        &cluster.manifest,
        ClientOptions {
            transport: Transport::Shm,
            wait: Wait::Yield,
            attempt_timeout: Duration::from_millis(500),
            total_timeout: Duration::from_secs(20),
            client_id: None,
        },
    );
    let n: u64 = std::env::var("VERBATIM_CLUSTER_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let mut writes = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    let mut reads = writes.clone();
    let mut acked: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    for k in 0..n {
        let key = format!("key:{}", k % 200).into_bytes();
        let value = format!("v{k}:{}", "x".repeat(48)).into_bytes();
        let t = Instant::now();
        client
            .set(&key, &value)
            .unwrap_or_else(|e| panic!("write {k}: {e}"));
        if k >= 50 {
            writes.record(t.elapsed().as_nanos() as u64).unwrap();
        }
        acked.insert(key.clone(), value.clone());
        let t = Instant::now();
        let got = client.get(&key).unwrap_or_else(|e| panic!("read {k}: {e}"));
        if k >= 50 {
            reads.record(t.elapsed().as_nanos() as u64).unwrap();
        }
        assert_eq!(
            got.as_deref(),
            Some(value.as_slice()),
            "read-your-write of {k}"
        );
    }
    println!(
        "{label}: writes (replicated over rxe):   p50 {:.1} us  p99 {:.1} us  max {:.1} us  ({} ops)",
        pct(&writes, 0.5),
        pct(&writes, 0.99),
        writes.max() as f64 / 1000.0,
        writes.len()
    );
    println!(
        "{label}: reads  (at the leader):         p50 {:.1} us  p99 {:.1} us  max {:.1} us  ({} ops)",
        pct(&reads, 0.5),
        pct(&reads, 0.99),
        reads.max() as f64 / 1000.0,
        reads.len()
    );
    let leader_status = cluster
        .status()
        .into_iter()
        .flatten()
        .find(|s| s.role == "leader")
        .expect("a leader");
    for p in &leader_status.peers {
        println!(
            "{label}: leader's view of member {}: {} acked_pos {} reachable {}",
            p.id, p.replication, p.acked_pos, p.reachable
        );
    }

    // SIGKILL the leader; the others notice through RDMA (heartbeats read
    // over their QPs and retry-exceeded completions), elect, and serve.
    let victim = client.leader();
    let victim_term = cluster
        .status()
        .into_iter()
        .flatten()
        .find(|s| s.id == victim)
        .map_or(term, |s| s.term);
    let kill_at = Instant::now();
    cluster.kill(victim).expect("kill");
    println!("{label}: SIGKILLed the leader, member {victim} (term {victim_term})");
    let key = b"after-failover".to_vec();
    client
        .set(&key, b"1")
        .unwrap_or_else(|e| panic!("first write after the kill: {e}"));
    let gap = kill_at.elapsed();
    acked.insert(key, b"1".to_vec());
    let (new_leader, new_term) = cluster
        .wait_leader(victim_term, Duration::from_secs(20))
        .unwrap_or_else(|e| {
            panic!(
                "no new leader: {e}; logs in {}",
                cluster.log_dir().display()
            )
        });
    println!(
        "{label}: member {new_leader} leads term {new_term}; first client write completed {:.1} ms after the kill",
        gap.as_secs_f64() * 1e3
    );
    // The record is complete at the new leader's first commit, and the
    // status a replica publishes is up to a status period old: the one
    // `wait_leader` saw may predate that commit. Wait for it (bounded).
    let record_deadline = Instant::now() + Duration::from_secs(5);
    let failover = loop {
        let found = cluster
            .status()
            .into_iter()
            .flatten()
            .find(|s| s.id == new_leader)
            .and_then(|s| s.failovers.into_iter().find(|f| f.term > victim_term));
        if found.is_some() || Instant::now() > record_deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if let Some(f) = &failover {
        println!(
            "{label}: failover timeline (new leader's clock, decided by {}): detection {:.1} ms, election {:.1} ms, first commit {}",
            f.decided_by,
            f.detection_us as f64 / 1000.0,
            f.election_us as f64 / 1000.0,
            f.first_commit_us
                .map_or("-".to_string(), |v| format!("{:.1} ms", v as f64 / 1000.0))
        );
    }
    let mut after = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    for k in 0..n.min(500) {
        let key = format!("post:{k}").into_bytes();
        let t = Instant::now();
        client
            .set(&key, b"y")
            .unwrap_or_else(|e| panic!("write after failover {k}: {e}"));
        after.record(t.elapsed().as_nanos() as u64).unwrap();
        acked.insert(key, b"y".to_vec());
    }
    println!(
        "{label}: writes with 2 of 3 replicas: p50 {:.1} us  p99 {:.1} us",
        pct(&after, 0.5),
        pct(&after, 0.99)
    );
    let mut lost = 0;
    for (k, v) in &acked {
        if client.get(k).ok().flatten().as_deref() != Some(v.as_slice()) {
            lost += 1;
        }
    }
    println!(
        "{label}: {} acknowledged keys checked after the failover, {lost} lost",
        acked.len()
    );
    assert_eq!(lost, 0, "acknowledged writes lost");
    let stats = client.stats();
    println!(
        "{label}: client retries {}, redirects {}",
        stats.retries, stats.redirects
    );
    let statuses: Vec<_> = cluster.status().into_iter().flatten().collect();
    assert_eq!(statuses.len(), 2, "the two survivors report their status");
    if let Some(v) = statuses.iter().find_map(|s| s.views.as_ref()) {
        println!(
            "{label}: views: epoch {}, leader {:?}, lease {} us, coordinators {:?} (out {:?})",
            v.epoch, v.leader, v.lease_us, v.coordinators, v.coordinators_out
        );
    }
    cluster.stop();
    End {
        decided_by: failover.map_or_else(|| "none".into(), |f| f.decided_by),
        statuses,
    }
}

/// Derecho's multicast on verbs: the multicast region and a subgroup's
/// travel in the exchange (each only to the members that may access it),
/// and the slots and rows move by RDMA WRITEs. Two replicas publish on
/// the group's channel and on a subgroup's; subscribers on two replicas
/// receive every message, in one order.
#[test]
#[ignore = "needs an RDMA device and the rdma release binary: run scripts/softroce-vm"]
fn multicast_and_a_subgroup_over_verbs_deliver_one_order() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let (_, _, binary, overrides) = verbs_setup(
        6,
        &[
            "multicast.window=16",
            r#"multicast.subgroups=[{name="pair", members=[1, 2]}]"#,
        ],
    );
    let resp_base = 19_400 + (std::process::id() % 150) as u16 * 3;
    let cluster = LocalCluster::start(
        &LocalOptions {
            name: format!("vcmcast{}", std::process::id()),
            replicas: 3,
            base_port: resp_base,
            poll: PollMode::LeaderBusy,
            cores: Vec::new(),
            overrides,
            binary,
        },
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("starting the cluster: {e}"));
    let connect = |m: u16| {
        let s = TcpStream::connect(("127.0.0.1", resp_base + m)).expect("RESP listener");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    };
    // Reads until `lines` CRLF-terminated lines came (or the timeout).
    let read_lines = |s: &mut TcpStream, lines: usize| -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.windows(2).filter(|w| w == b"\r\n").count() < lines && Instant::now() < deadline {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    let mut subs: Vec<(TcpStream, &str)> = [(1u16, "news"), (2, "news"), (1, "pair"), (2, "pair")]
        .into_iter()
        .map(|(m, channel)| {
            let mut s = connect(m);
            s.write_all(format!("SUBSCRIBE {channel}\r\n").as_bytes())
                .unwrap();
            let confirmed = read_lines(&mut s, 6);
            assert!(confirmed.contains("subscribe"), "{confirmed}");
            (s, channel)
        })
        .collect();
    const EACH: usize = 10;
    for i in 0..EACH {
        for (m, channel) in [(0u16, "news"), (1, "news"), (1, "pair"), (2, "pair")] {
            let mut p = connect(m);
            p.write_all(format!("PUBLISH {channel} m{m}-{i}\r\n").as_bytes())
                .unwrap();
            let reply = read_lines(&mut p, 1);
            assert!(
                reply.starts_with(':'),
                "PUBLISH {channel} on {m}: {reply:?}"
            );
        }
    }
    // Each message is 7 lines (`*3`, `$7`, `message`, channel, payload).
    let seen: Vec<Vec<String>> = subs
        .iter_mut()
        .map(|(s, channel)| {
            let text = read_lines(s, 7 * 2 * EACH);
            text.split("\r\n")
                .collect::<Vec<_>>()
                .chunks(7)
                .filter(|c| c.len() == 7 && c[4] == *channel)
                .map(|c| c[6].to_string())
                .collect()
        })
        .collect();
    for (k, (_, channel)) in subs.iter().enumerate() {
        assert_eq!(
            seen[k].len(),
            2 * EACH,
            "{channel} subscriber {k}: {:?}",
            seen[k]
        );
    }
    assert_eq!(seen[0], seen[1], "one order on the group's channel");
    assert_eq!(seen[2], seen[3], "one order in the subgroup");
    println!(
        "multicast over verbs: {} and {} messages in one order",
        seen[0].len(),
        seen[2].len()
    );
    drop(cluster);
}
