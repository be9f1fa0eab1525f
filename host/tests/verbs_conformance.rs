//! The fabric conformance suite (from `verbatim-sim`) on the ibverbs
//! fabric, plus the fabric's own device tests. They need an RDMA device:
//! `scripts/softroce-vm` runs them inside a VM on Soft-RoCE (rxe0) with
//! `VERBATIM_RDMA_DEVICE=rxe0 ... --ignored`.
//!
//! Without a device they are `#[ignore]`d (libtest prints the reason). Run
//! with `--ignored`, they use `VERBATIM_RDMA_DEVICE` or the first device,
//! and fail loudly when there is none: they never pass vacuously.
//!
//! The three members A, B and C are three endpoints of this process on one
//! device (loopback RC connections through rxe, real QPs, real
//! `ibv_post_send`). "Killing" C destroys its whole verbs context: its
//! QPs, regions, PD and device context are destroyed and its exchange
//! sockets closed, without a word to A and B. That is what the kernel does
//! when a replica process dies, and all A and B can observe of it: their
//! requests to C's QP numbers go unanswered and complete with
//! retry-exceeded. (The SIGKILL of a whole replica process is exercised by
//! `verbs_cluster.rs`.)
#![cfg(feature = "rdma")]

use std::sync::Arc;
use std::time::{Duration, Instant};
use verbatim_client::manifest::{FabricKind, Manifest, VerbsMember};
use verbatim_core::fabric::{
    Addr, Completion, Fabric, MemberId, Op, RegionId, WcStatus, WorkRequest, WrId,
};
use verbatim_core::layout::Layout;
use verbatim_core::mem::Memory;
use verbatim_core::Config;
use verbatim_host::fabric::liveness::PeerLiveness;
use verbatim_host::fabric::shm::{segment_path, Segment, ShmMemory};
use verbatim_host::fabric::verbs::wire::{self, Msg, ReadLimits};
use verbatim_host::fabric::verbs::{
    device_names, roce_v2_ipv4_gid_index, ExchangeOptions, VerbsFabric, HANDSHAKES_MAX,
    HANDSHAKE_TIMEOUT,
};
use verbatim_host::fabric::HostFabric;
use verbatim_sim::conformance::{checks, suite_config, FabricHarness};

const NEEDS_DEVICE: &str =
    "needs an RDMA device: run scripts/softroce-vm, or set VERBATIM_RDMA_DEVICE and pass --ignored";

/// The device to test on: `VERBATIM_RDMA_DEVICE`, else the first one.
/// Panics (loudly) when there is none: these tests run only when asked.
fn device() -> (String, u8) {
    let names = device_names();
    let name = match std::env::var("VERBATIM_RDMA_DEVICE") {
        Ok(d) => {
            let names = names
                .unwrap_or_else(|e| panic!("VERBATIM_RDMA_DEVICE={d} was requested, but: {e}"));
            assert!(
                names.contains(&d),
                "VERBATIM_RDMA_DEVICE={d} was requested, but the devices here are {names:?}"
            );
            d
        }
        Err(_) => match names {
            Ok(n) if !n.is_empty() => n[0].clone(),
            Ok(_) => panic!("no RDMA device here (the device list is empty); {NEEDS_DEVICE}"),
            Err(e) => panic!("{e}; {NEEDS_DEVICE}"),
        },
    };
    let gid_index = std::env::var("VERBATIM_RDMA_GID_INDEX")
        .ok()
        .and_then(|g| g.parse().ok())
        .or_else(|| roce_v2_ipv4_gid_index(&name, 1))
        .unwrap_or(0);
    (name, gid_index)
}

fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

fn manifest(n: u8, device: &str, gid_index: u8) -> Manifest {
    let mut m = Manifest::local("vconf", n, 0);
    m.cluster.fabric = FabricKind::Verbs;
    for (mem, port) in m.members.iter_mut().zip(free_ports(usize::from(n))) {
        mem.resp_addr = None;
        mem.verbs = Some(VerbsMember {
            device: device.to_string(),
            port: 1,
            gid_index,
            exchange_addr: format!("127.0.0.1:{port}"),
            qp_timeout: 10,
            qp_retry_count: 3,
        });
    }
    m
}

/// What the verbs fabric takes from a manifest: each member's verbs options.
fn verbs_of(m: &Manifest) -> Vec<Option<VerbsMember>> {
    m.members.iter().map(|x| x.verbs.clone()).collect()
}

const SECRET: &str = "conformance-suite-exchange-secret";

/// The exchange options the suite runs with: authenticated, as a
/// deployment on a network must be.
fn exchange() -> ExchangeOptions {
    ExchangeOptions::from_secret(Some(SECRET))
}

fn shm_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("verbatim-verbs-")
        .tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        })
        .expect("temp dir")
}

/// Connects every endpoint to every other (bounded).
fn connect_all(fabrics: &mut [Option<VerbsFabric>]) {
    let began = Instant::now();
    loop {
        let mut missing = Vec::new();
        for (i, f) in fabrics.iter_mut().enumerate() {
            if let Some(f) = f {
                for (m, p) in f.connect_peers() {
                    assert!(
                        p.retry,
                        "member {i} cannot connect to {}: {}",
                        m.0, p.message
                    );
                    missing.push((i, m.0, p.message));
                }
            }
        }
        if missing.is_empty() {
            return;
        }
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "not connected after 20 s: {missing:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

struct VerbsHarness {
    layout: Layout,
    // Drop order: fabrics (and their registrations) before the segments.
    fabrics: Vec<Option<VerbsFabric>>,
    memories: Vec<ShmMemory>,
    _dir: tempfile::TempDir,
}

impl VerbsHarness {
    fn new() -> VerbsHarness {
        let (device, gid_index) = device();
        let dir = shm_dir();
        let m = manifest(3, &device, gid_index);
        let layout = Layout::new(&suite_config(MemberId(0))).unwrap();
        let segs: Vec<Arc<Segment>> = (0..3u8)
            .map(|i| {
                Arc::new(
                    Segment::create(&segment_path(dir.path(), "vconf", i), &layout, MemberId(i))
                        .expect("segment"),
                )
            })
            .collect();
        let mut fabrics: Vec<Option<VerbsFabric>> = (0..3u8)
            .map(|i| {
                Some(
                    VerbsFabric::start(
                        &verbs_of(&m),
                        &exchange(),
                        MemberId(i),
                        &layout,
                        segs[usize::from(i)].clone(),
                        Arc::new(PeerLiveness::default()),
                    )
                    .unwrap_or_else(|e| panic!("starting member {i} on {device}: {e}")),
                )
            })
            .collect();
        connect_all(&mut fabrics);
        VerbsHarness {
            layout,
            fabrics,
            memories: segs.into_iter().map(ShmMemory::new).collect(),
            _dir: dir,
        }
    }
}

impl FabricHarness for VerbsHarness {
    type F = VerbsFabric;
    fn layout(&self) -> Layout {
        self.layout
    }
    fn fabric(&mut self, m: MemberId) -> &mut VerbsFabric {
        self.fabrics[m.index()]
            .as_mut()
            .expect("the suite never uses a killed member's endpoint")
    }
    fn memory(&self, m: MemberId) -> &dyn Memory {
        &self.memories[m.index()]
    }
    fn next_completion(&mut self, m: MemberId) -> Option<Completion> {
        let f = self.fabrics[m.index()].as_mut()?;
        let began = Instant::now();
        loop {
            if let Some(c) = f.poll_completion() {
                return Some(c);
            }
            if began.elapsed() > Duration::from_secs(5) {
                return None;
            }
            std::hint::spin_loop();
        }
    }
    fn kill(&mut self, m: MemberId) {
        // Destroys C's QPs, regions, PD and device context and closes its
        // sockets (Drop joins its exchange threads, so all of it is gone
        // when this returns).
        self.fabrics[m.index()] = None;
    }
    fn name(&self) -> &'static str {
        "ibverbs"
    }
}

#[test]
#[ignore = "needs an RDMA device: run scripts/softroce-vm, or set VERBATIM_RDMA_DEVICE and pass --ignored"]
fn verbs_fabric_passes_the_conformance_suite() {
    let mut failures = Vec::new();
    for (name, check) in checks::<VerbsHarness>() {
        let began = Instant::now();
        let mut h = VerbsHarness::new();
        let setup = began.elapsed();
        let r = check(&mut h);
        println!(
            "conformance: {:<45} {} (setup {:.0} ms, check {:.1} ms)",
            name,
            if r.is_ok() { "ok" } else { "FAILED" },
            setup.as_secs_f64() * 1e3,
            (began.elapsed() - setup).as_secs_f64() * 1e3
        );
        if let Err(e) = r {
            failures.push(format!("ibverbs fabric: {name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

fn wait(f: &mut VerbsFabric) -> Completion {
    let began = Instant::now();
    loop {
        if let Some(c) = f.poll_completion() {
            return c;
        }
        assert!(began.elapsed() < Duration::from_secs(5), "no completion");
    }
}

fn pct(v: &mut [u64], q: f64) -> f64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q) as usize] as f64 / 1000.0
}

/// One-sided operation latency through the fabric (post to reaped
/// completion, one at a time), comparable with perftest's ib_*_lat.
#[test]
#[ignore = "needs an RDMA device: run scripts/softroce-vm, or set VERBATIM_RDMA_DEVICE and pass --ignored"]
fn verbs_fabric_one_sided_latency() {
    let mut h = VerbsHarness::new();
    let l = h.layout;
    let scratch = Addr::new(RegionId::Scratch, l.scratch.row_landing_offset);
    let remote = Addr::new(RegionId::Control, 0);
    let iters: usize = std::env::var("VERBATIM_LAT_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let ops: [(&str, Op); 4] = [
        ("write 8 B inline", Op::write_u64(remote, 7)),
        (
            "write 64 B",
            Op::Write {
                local: scratch,
                remote,
                len: 64,
            },
        ),
        (
            "read 8 B",
            Op::Read {
                remote,
                local: scratch,
                len: 8,
            },
        ),
        (
            "compare-and-swap",
            Op::CompareSwap {
                remote: Addr::new(RegionId::Control, 128),
                local: scratch,
                expect: 0,
                swap: 0,
            },
        ),
    ];
    for (name, op) in ops {
        let f = h.fabrics[0].as_mut().unwrap();
        let mut ns = Vec::with_capacity(iters);
        for k in 0..iters + 100 {
            let t0 = Instant::now();
            f.post(&WorkRequest {
                wr_id: WrId(k as u64),
                peer: MemberId(1),
                op,
                notify: false,
            });
            let c = wait(f);
            let dt = t0.elapsed().as_nanos() as u64;
            assert_eq!(c.status, WcStatus::Ok, "{name}: {c:?}");
            if k >= 100 {
                ns.push(dt); // the first 100 warm up
            }
        }
        println!(
            "latency: {:<18} p50 {:>7.2} us  p99 {:>7.2} us  ({iters} iterations, fabric post to completion)",
            name,
            pct(&mut ns, 0.5),
            pct(&mut ns, 0.99)
        );
    }
}

/// Two members, member 1 with another layout (a larger log ring), each
/// with its exchange options; returns member 0's problems with member 1.
fn refusal_between(
    name: &str,
    a_opts: &ExchangeOptions,
    b_opts: &ExchangeOptions,
    other_layout: bool,
) -> verbatim_host::fabric::PeerProblem {
    let (device, gid_index) = device();
    let dir = shm_dir();
    let m = manifest(2, &device, gid_index);
    let layout = Layout::new(&Config::new(2, MemberId(0))).unwrap();
    let mut other = Config::new(2, MemberId(1));
    if other_layout {
        other.log_ring_bytes *= 2;
    }
    let other_layout = Layout::new(&other).unwrap();
    let seg = |i: u8, l: &Layout| {
        Arc::new(Segment::create(&segment_path(dir.path(), name, i), l, MemberId(i)).unwrap())
    };
    let a = VerbsFabric::start(
        &verbs_of(&m),
        a_opts,
        MemberId(0),
        &layout,
        seg(0, &layout),
        Arc::default(),
    );
    let b = VerbsFabric::start(
        &verbs_of(&m),
        b_opts,
        MemberId(1),
        &other_layout,
        seg(1, &other_layout),
        Arc::default(),
    );
    let (mut a, _b) = (a.expect("member 0"), b.expect("member 1"));
    // The dialler works in the background: connect_peers reports
    // "connecting" until it has the peer's answer.
    let began = Instant::now();
    loop {
        let problems = a.connect_peers();
        assert_eq!(problems.len(), 1, "{problems:?}");
        let p = problems.into_iter().next().unwrap().1;
        if !p.retry || began.elapsed() > Duration::from_secs(10) {
            return p;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
#[ignore = "needs an RDMA device: run scripts/softroce-vm, or set VERBATIM_RDMA_DEVICE and pass --ignored"]
fn a_peer_with_another_layout_is_refused_with_the_reason() {
    // Authenticated: the reason, never the layout hashes.
    let p = refusal_between("vmis", &exchange(), &exchange(), true);
    assert!(
        !p.retry,
        "a layout mismatch is not worth waiting for: {p:?}"
    );
    assert!(p.message.contains("layout mismatch"), "{}", p.message);
    assert!(!p.message.contains("0x"), "{}", p.message);
    println!("refused as expected: {}", p.message);
    // Unauthenticated (no secret, loopback): only that it was refused.
    let none = ExchangeOptions::default();
    let p = refusal_between("vmis2", &none, &none, true);
    assert!(!p.retry, "{p:?}");
    assert!(p.message.contains("refused"), "{}", p.message);
    assert!(
        !p.message.contains("layout mismatch") && !p.message.contains("0x"),
        "an unauthenticated peer learns only that it was refused: {}",
        p.message
    );
    println!("refused without a reason, as expected: {}", p.message);
}

/// Members with different secrets (or one without) never connect, and
/// the error says which setting to fix.
#[test]
#[ignore = "needs an RDMA device: run scripts/softroce-vm, or set VERBATIM_RDMA_DEVICE and pass --ignored"]
fn a_peer_with_another_secret_is_refused() {
    let other = ExchangeOptions::from_secret(Some("another-secret-of-enough-bytes"));
    for (i, (a, b)) in [
        (exchange(), other),
        (exchange(), ExchangeOptions::default()),
        (ExchangeOptions::default(), exchange()),
    ]
    .iter()
    .enumerate()
    {
        let p = refusal_between(&format!("vsec{i}"), a, b, false);
        assert!(!p.retry, "{p:?}");
        assert!(p.message.contains("exchange_secret"), "{}", p.message);
        println!("refused as expected: {}", p.message);
    }
}

/// Two connected members (0 and 1) with their liveness views.
struct Pair {
    a: VerbsFabric,
    b: Option<VerbsFabric>,
    a_liveness: Arc<PeerLiveness>,
    m: Manifest,
    layout: Layout,
    _dir: tempfile::TempDir,
}

fn pair(name: &str) -> Pair {
    let (device, gid_index) = device();
    let dir = shm_dir();
    let m = manifest(2, &device, gid_index);
    let layout = Layout::new(&Config::new(2, MemberId(0))).unwrap();
    let a_liveness = Arc::new(PeerLiveness::default());
    let mut fabrics: Vec<Option<VerbsFabric>> = (0..2u8)
        .map(|i| {
            let seg = Arc::new(
                Segment::create(&segment_path(dir.path(), name, i), &layout, MemberId(i)).unwrap(),
            );
            let liveness = if i == 0 {
                a_liveness.clone()
            } else {
                Arc::default()
            };
            Some(
                VerbsFabric::start(
                    &verbs_of(&m),
                    &exchange(),
                    MemberId(i),
                    &layout,
                    seg,
                    liveness,
                )
                .unwrap_or_else(|e| panic!("member {i}: {e}")),
            )
        })
        .collect();
    connect_all(&mut fabrics);
    let b = fabrics.pop().unwrap();
    let a = fabrics.pop().unwrap().unwrap();
    Pair {
        a,
        b,
        a_liveness,
        m,
        layout,
        _dir: dir,
    }
}

fn exchange_addr(m: &Manifest, i: usize) -> std::net::SocketAddr {
    m.members[i]
        .verbs
        .as_ref()
        .unwrap()
        .exchange_addr
        .parse()
        .unwrap()
}

fn eventually(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let began = Instant::now();
    while !f() {
        assert!(began.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Issue 17: a closed exchange connection is a suspicion, not a death. A
/// connection of member 1's that closes while member 1 runs leaves it
/// suspected (its exchange address still answers), never reported down;
/// when member 1 connects again the suspicion is lifted.
#[test]
#[ignore = "needs an RDMA device: run scripts/softroce-vm, or set VERBATIM_RDMA_DEVICE and pass --ignored"]
fn a_closed_exchange_connection_is_a_suspicion_not_a_death() {
    let mut p = pair("vsusp");
    let one = MemberId(1);
    assert!(!p.a.suspected(one));
    // A connection that says hello as member 1 (it holds the secret)
    // replaces member 1's own, then closes.
    {
        let mut c = std::net::TcpStream::connect(exchange_addr(&p.m, 0)).unwrap();
        wire::prepare(&c, Duration::from_secs(3)).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let lim = ReadLimits::within(Duration::from_secs(3));
        let secret = exchange().secret;
        let mut s = wire::dial(&mut c, secret.as_ref(), lim, &stop).unwrap();
        s.send(
            &mut c,
            &Msg::Hello {
                from: 1,
                to: 0,
                members: 2,
                layout_hash: p.layout.hash,
                incarnation: 99,
            },
        )
        .unwrap();
        assert!(matches!(
            s.recv(&mut c, lim, &stop).unwrap(),
            Msg::HelloOk { .. }
        ));
    }
    eventually("member 1 suspected", Duration::from_secs(5), || {
        p.a.suspected(one)
    });
    // Member 1's exchange address still answers: no death is reported.
    std::thread::sleep(PROBE_SETTLE);
    assert!(
        !p.a_liveness.is_dead(one),
        "a close alone reported member 1 dead"
    );
    let c = p.a.exchange_counters();
    assert_eq!((c.suspicions, c.exits_confirmed), (1, 0), "{c:?}");
    // Member 1 connects again (its old connection was replaced): its next
    // exchange request redials.
    p.b.as_mut()
        .unwrap()
        .set_access(
            MemberId(0),
            RegionId::Log,
            verbatim_core::fabric::Access::Granted,
        )
        .unwrap();
    eventually("suspicion lifted", Duration::from_secs(5), || {
        !p.a.suspected(one)
    });
    assert!(!p.a_liveness.is_dead(one));
    // And the channels still work both ways.
    let remote = Addr::new(RegionId::Control, 0);
    p.a.post(&WorkRequest {
        wr_id: WrId(1),
        peer: one,
        op: Op::write_u64(remote, 5),
        notify: false,
    });
    assert_eq!(wait(&mut p.a).status, WcStatus::Ok);
}

/// How long the probe after a close may take (its attempts and timeouts).
const PROBE_SETTLE: Duration = Duration::from_millis(1500);

/// A member whose process is gone: its connection closes and its exchange
/// address refuses connections, so the exit is confirmed and reported
/// through the liveness view (the driver's `take_peer_down`).
#[test]
#[ignore = "needs an RDMA device: run scripts/softroce-vm, or set VERBATIM_RDMA_DEVICE and pass --ignored"]
fn an_exited_peer_is_confirmed_and_reported_down() {
    let mut p = pair("vexit");
    // Destroys member 1's device context and closes its sockets, its
    // listener first (what the kernel does at exit).
    p.b = None;
    eventually("member 1 reported down", Duration::from_secs(5), || {
        p.a_liveness.is_dead(MemberId(1))
    });
    assert_eq!(p.a_liveness.take_newly_dead(), vec![MemberId(1)]);
    let c = p.a.exchange_counters();
    assert_eq!((c.suspicions, c.exits_confirmed), (1, 1), "{c:?}");
}

/// Issue 12: connections that say nothing hold a handshake slot only until
/// the handshake timeout, their number in progress is bounded, and a real
/// member still gets through.
#[test]
#[ignore = "needs an RDMA device: run scripts/softroce-vm, or set VERBATIM_RDMA_DEVICE and pass --ignored"]
fn silent_connections_are_bounded_and_dropped() {
    let (device, gid_index) = device();
    let dir = shm_dir();
    let m = manifest(2, &device, gid_index);
    let layout = Layout::new(&Config::new(2, MemberId(0))).unwrap();
    let seg = |i: u8| {
        Arc::new(
            Segment::create(
                &segment_path(dir.path(), "vsilent", i),
                &layout,
                MemberId(i),
            )
            .unwrap(),
        )
    };
    let a = VerbsFabric::start(
        &verbs_of(&m),
        &exchange(),
        MemberId(0),
        &layout,
        seg(0),
        Arc::default(),
    )
    .unwrap();
    let silent: Vec<std::net::TcpStream> = (0..HANDSHAKES_MAX + 4)
        .map(|_| std::net::TcpStream::connect(exchange_addr(&m, 0)).unwrap())
        .collect();
    let b = VerbsFabric::start(
        &verbs_of(&m),
        &exchange(),
        MemberId(1),
        &layout,
        seg(1),
        Arc::default(),
    )
    .unwrap();
    let began = Instant::now();
    let mut fabrics = vec![Some(a), Some(b)];
    connect_all(&mut fabrics);
    println!(
        "connected past {} silent connections in {:.1} s",
        silent.len(),
        began.elapsed().as_secs_f64()
    );
    // Every silent connection is closed by member 0 once its time is up.
    for mut s in silent {
        s.set_read_timeout(Some(HANDSHAKE_TIMEOUT * 4)).unwrap();
        let mut buf = [0u8; 8];
        let r = std::io::Read::read(&mut s, &mut buf);
        assert!(
            matches!(r, Ok(0)) || r.is_err(),
            "a silent connection was answered: {r:?}"
        );
    }
    let c = fabrics[0].as_ref().unwrap().exchange_counters();
    assert!(c.handshake_timeouts >= HANDSHAKES_MAX as u64, "{c:?}");
    assert_eq!(c.suspicions, 0, "{c:?}");
}

#[test]
#[ignore = "needs an RDMA device: run scripts/softroce-vm, or set VERBATIM_RDMA_DEVICE and pass --ignored"]
fn a_wrong_port_or_device_is_explained() {
    let (device, gid_index) = device();
    let dir = shm_dir();
    let layout = Layout::new(&Config::new(2, MemberId(0))).unwrap();
    let seg = Arc::new(
        Segment::create(&segment_path(dir.path(), "vport", 0), &layout, MemberId(0)).unwrap(),
    );
    let mut m = manifest(2, &device, gid_index);
    m.members[0].verbs.as_mut().unwrap().port = 7;
    let e = VerbsFabric::start(
        &verbs_of(&m),
        &exchange(),
        MemberId(0),
        &layout,
        seg.clone(),
        Arc::default(),
    )
    .err()
    .expect("port 7 does not exist");
    assert!(e.to_string().contains("port 7"), "{e}");
    println!("explained: {e}");
    let mut m = manifest(2, "nosuchdev9", gid_index);
    m.members[0].verbs.as_mut().unwrap().port = 1;
    let e = VerbsFabric::start(
        &verbs_of(&m),
        &exchange(),
        MemberId(0),
        &layout,
        seg,
        Arc::default(),
    )
    .err()
    .expect("no such device");
    assert!(e.to_string().contains("devices here"), "{e}");
    println!("explained: {e}");
}

/// Runs everywhere the feature is built: on a host without a device the
/// error must say so plainly; with a device, a wrong name lists the real
/// ones. Fails if VERBATIM_RDMA_DEVICE names a device that is missing.
#[test]
fn a_missing_device_is_explained() {
    if let Ok(d) = std::env::var("VERBATIM_RDMA_DEVICE") {
        let names = device_names().unwrap_or_else(|e| panic!("VERBATIM_RDMA_DEVICE={d}: {e}"));
        assert!(
            names.contains(&d),
            "VERBATIM_RDMA_DEVICE={d}: devices here are {names:?}"
        );
    }
    let dir = shm_dir();
    let layout = Layout::new(&Config::new(2, MemberId(0))).unwrap();
    let seg = Arc::new(
        Segment::create(&segment_path(dir.path(), "vnodev", 0), &layout, MemberId(0)).unwrap(),
    );
    let m = manifest(2, "nosuchdev9", 0);
    let e = VerbsFabric::start(
        &verbs_of(&m),
        &exchange(),
        MemberId(0),
        &layout,
        seg,
        Arc::default(),
    )
    .err()
    .expect("there is no device called nosuchdev9");
    let text = e.to_string();
    match device_names() {
        Ok(names) if !names.is_empty() => {
            assert!(text.contains("devices here"), "{text}");
        }
        _ => assert!(
            text.contains(
                "no RDMA device (is rdma-core installed and an rxe/mlx device configured?)"
            ),
            "{text}"
        ),
    }
    println!("explained: {text}");
}

/// A recovering member READs a donor's snapshot region (state transfer,
/// DARE §3.4): the fabric hands the region's address and key over with
/// every connect, like the control and heartbeat regions. Before, only
/// those two and the log were reachable and a READ of a snapshot completed
/// AccessDenied: no member could recover over verbs.
#[test]
#[ignore = "needs an RDMA device: run scripts/softroce-vm, or set VERBATIM_RDMA_DEVICE and pass --ignored"]
fn a_peers_snapshot_region_is_readable() {
    let (device, gid_index) = device();
    let dir = shm_dir();
    let m = manifest(2, &device, gid_index);
    let mut config = Config::new(2, MemberId(0));
    config.snapshot_bytes_max = 4096;
    let layout = Layout::new(&config).unwrap();
    let segs: Vec<Arc<Segment>> = (0..2u8)
        .map(|i| {
            Arc::new(
                Segment::create(&segment_path(dir.path(), "vsnap", i), &layout, MemberId(i))
                    .unwrap(),
            )
        })
        .collect();
    let mut fabrics: Vec<Option<VerbsFabric>> = (0..2u8)
        .map(|i| {
            Some(
                VerbsFabric::start(
                    &verbs_of(&m),
                    &exchange(),
                    MemberId(i),
                    &layout,
                    segs[usize::from(i)].clone(),
                    Arc::default(),
                )
                .unwrap_or_else(|e| panic!("member {i}: {e}")),
            )
        })
        .collect();
    connect_all(&mut fabrics);
    let b_mem = ShmMemory::new(segs[1].clone());
    let a_mem = ShmMemory::new(segs[0].clone());
    let at = Addr::new(RegionId::Snapshot, 4096 - 64);
    b_mem.store_u64(at, 0x5A5A_0017_C0FF_EE01);
    let local = Addr::new(RegionId::Scratch, 0);
    a_mem.store_u64(local, 0);
    let a = fabrics[0].as_mut().unwrap();
    a.post(&WorkRequest {
        wr_id: WrId(7),
        peer: MemberId(1),
        op: Op::Read {
            remote: at,
            local,
            len: 8,
        },
        notify: false,
    });
    let c = wait(a);
    assert_eq!(c.status, WcStatus::Ok, "{c:?}");
    assert_eq!(a_mem.load_u64(local), 0x5A5A_0017_C0FF_EE01);
    println!("snapshot region of member 1 read over verbs");
}
