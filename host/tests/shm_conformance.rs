//! The fabric conformance suite (from `verbatim-sim`) on the shared-memory
//! fabric. Members A and B live in this process; member C's segment is
//! owned by a child process, so that killing it exercises the real pidfd
//! path.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};
use verbatim_core::fabric::{Completion, MemberId};
use verbatim_core::layout::Layout;
use verbatim_core::mem::Memory;
use verbatim_core::Config;
use verbatim_host::fabric::liveness::{spawn_watcher, PeerLiveness};
use verbatim_host::fabric::shm::{segment_path, Segment, ShmFabric, ShmMemory};
use verbatim_sim::conformance::{run_all, suite_config, FabricHarness};

struct ShmHarness {
    _dir: tempfile::TempDir,
    layout: Layout,
    fabrics: Vec<ShmFabric>,
    memories: Vec<ShmMemory>,
    liveness: Vec<Arc<PeerLiveness>>,
    owner_of_c: Child,
}

fn shm_dir() -> tempfile::TempDir {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    tempfile::Builder::new()
        .prefix("verbatim-test-")
        .tempdir_in(base)
        .expect("temp dir")
}

impl ShmHarness {
    fn new() -> ShmHarness {
        let dir = shm_dir();
        let layout = Layout::new(&suite_config(MemberId(0))).unwrap();
        let paths: Vec<PathBuf> = (0..3)
            .map(|i| segment_path(dir.path(), "conf", i))
            .collect();
        let segs: Vec<Arc<Segment>> = (0..3)
            .map(|i| {
                Arc::new(Segment::create(&paths[i], &layout, MemberId(i as u8)).expect("segment"))
            })
            .collect();
        // A child process that ends by itself stands for C's owner.
        let owner_of_c = Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("spawn sleep");
        segs[2].set_owner_pid(owner_of_c.id() as i32);
        let clock = Instant::now();
        let mut fabrics = Vec::new();
        let mut liveness = Vec::new();
        for (i, seg) in segs.iter().enumerate() {
            let live = Arc::new(PeerLiveness::default());
            spawn_watcher(live.clone(), seg.waker(), clock).expect("watcher");
            let mut f = ShmFabric::new(
                MemberId(i as u8),
                layout,
                seg.clone(),
                paths.clone(),
                live.clone(),
            );
            assert!(f.connect_peers().is_empty());
            fabrics.push(f);
            liveness.push(live);
        }
        let memories = segs.iter().map(|s| ShmMemory::new(s.clone())).collect();
        ShmHarness {
            _dir: dir,
            layout,
            fabrics,
            memories,
            liveness,
            owner_of_c,
        }
    }
}

impl Drop for ShmHarness {
    fn drop(&mut self) {
        for l in &self.liveness {
            l.stop();
        }
        let _ = self.owner_of_c.kill();
        let _ = self.owner_of_c.wait();
    }
}

impl FabricHarness for ShmHarness {
    type F = ShmFabric;
    fn layout(&self) -> Layout {
        self.layout
    }
    fn fabric(&mut self, m: MemberId) -> &mut ShmFabric {
        &mut self.fabrics[m.index()]
    }
    fn memory(&self, m: MemberId) -> &dyn Memory {
        &self.memories[m.index()]
    }
    fn next_completion(&mut self, m: MemberId) -> Option<Completion> {
        use verbatim_core::fabric::Fabric;
        // Operations execute when posted: the completion is already there.
        self.fabrics[m.index()].poll_completion()
    }
    fn kill(&mut self, m: MemberId) {
        assert_eq!(m, MemberId(2), "only C has an owner process");
        self.owner_of_c.kill().expect("kill");
        self.owner_of_c.wait().expect("reap");
        // The readiness signal: wait (bounded) until every other member's
        // watcher has seen the exit.
        let began = Instant::now();
        while !(self.liveness[0].is_dead(m) && self.liveness[1].is_dead(m)) {
            assert!(
                began.elapsed() < Duration::from_secs(5),
                "pidfd exit not noticed within 5 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn name(&self) -> &'static str {
        "shared-memory"
    }
}

#[test]
fn shared_memory_fabric_passes_the_conformance_suite() {
    let failures = run_all(ShmHarness::new);
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn a_second_replica_with_the_same_id_is_refused() {
    let dir = shm_dir();
    let layout = Layout::new(&Config::new(3, MemberId(0))).unwrap();
    let path = segment_path(dir.path(), "dup", 0);
    let seg = Segment::create(&path, &layout, MemberId(0)).unwrap();
    let owner = Command::new("sleep").arg("30").spawn().unwrap();
    seg.set_owner_pid(owner.id() as i32);
    let err = Segment::create(&path, &layout, MemberId(0))
        .err()
        .expect("refused");
    assert!(err.to_string().contains("already running"), "{err}");
    let mut owner = owner;
    owner.kill().unwrap();
    owner.wait().unwrap();
    // Once the owner is gone, the stale segment is replaced.
    assert!(Segment::create(&path, &layout, MemberId(0)).is_ok());
}

#[test]
fn a_peer_with_another_layout_is_refused_with_the_reason() {
    let dir = shm_dir();
    let layout = Layout::new(&Config::new(3, MemberId(0))).unwrap();
    let mut other = Config::new(3, MemberId(1));
    other.log_ring_bytes *= 2;
    let other_layout = Layout::new(&other).unwrap();
    let path = segment_path(dir.path(), "mismatch", 1);
    let _seg = Segment::create(&path, &other_layout, MemberId(1)).unwrap();
    let err = Segment::open(&path, &layout).err().expect("refused");
    assert!(err.to_string().contains("log_ring_bytes"), "{err}");
    std::fs::write(dir.path().join("garbage"), b"not a segment at all").unwrap();
    let err = Segment::open(&dir.path().join("garbage"), &layout)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("not a verbatim segment"), "{err}");
}

/// A peer whose poll thread ends (as at its process's death) is reported
/// dead through its death notice, while its process (this one) lives on,
/// so the pidfd cannot be what saw it.
#[test]
fn a_peer_is_seen_dead_through_its_death_notice() {
    use verbatim_client::notice::{notice_path, DeathNotices};
    use verbatim_host::fabric::liveness::DeathSeen;
    let dir = shm_dir();
    let layout = Layout::new(&Config::new(2, MemberId(0))).unwrap();
    let paths: Vec<PathBuf> = (0..2)
        .map(|i| segment_path(dir.path(), "notice", i))
        .collect();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
    let p1 = paths[1].clone();
    let peer = std::thread::spawn(move || {
        let notices = DeathNotices::hold(&notice_path(&p1)).unwrap();
        let seg = Segment::create(&p1, &layout, MemberId(1)).unwrap();
        ready_tx.send(()).unwrap();
        end_rx.recv().unwrap();
        // The thread ends holding its notices; the kernel releases them.
        std::mem::forget(notices);
        seg
    });
    ready_rx.recv().unwrap();
    let seg0 = Arc::new(Segment::create(&paths[0], &layout, MemberId(0)).unwrap());
    let live = Arc::new(PeerLiveness::default());
    spawn_watcher(live.clone(), seg0.waker(), Instant::now()).unwrap();
    let mut f = ShmFabric::new(MemberId(0), layout, seg0, paths.clone(), live.clone());
    assert!(f.connect_peers().is_empty());
    assert!(!live.is_dead(MemberId(1)));
    end_tx.send(()).unwrap();
    let _seg1 = peer.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !live.is_dead(MemberId(1)) {
        assert!(Instant::now() < deadline, "the death notice was not seen");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(live.take_newly_dead(), vec![MemberId(1)]);
    assert_eq!(live.death_seen_by(MemberId(1)), Some(DeathSeen::Notice));
    assert!(live.died_at_ns(MemberId(1)) > 0);
    // Connecting again changes nothing while the dead peer's segment is
    // the old one.
    assert!(f.connect_peers().is_empty());
    assert!(live.is_dead(MemberId(1)));
    assert_eq!(live.take_newly_up(), None);
    // A restarted peer (a new segment in its place) is mapped and
    // reported alive again, once.
    let old_incarnation = f.peer(MemberId(1)).unwrap().incarnation();
    // A new process replaces its predecessor's death notices (its own
    // are held by a live owner). Left in place, the dead owner's notice
    // would be read as the new peer's (same pid here) and report the
    // restarted peer dead again at once.
    std::fs::remove_file(notice_path(&paths[1])).unwrap();
    let _seg1b = Segment::create(&paths[1], &layout, MemberId(1)).unwrap();
    assert!(f.connect_peers().is_empty());
    assert!(!live.is_dead(MemberId(1)));
    assert_eq!(live.take_newly_up(), Some(MemberId(1)));
    assert_eq!(live.take_newly_up(), None);
    assert_ne!(f.peer(MemberId(1)).unwrap().incarnation(), old_incarnation);
    assert_eq!(live.died_at_ns(MemberId(1)), 0);
    live.stop();
}
