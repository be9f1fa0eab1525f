//! The engine among three in-process members: a fabric that executes
//! each work request at once (refusing one into a region its owner did
//! not grant), a driver loop, writes against the map model, a take-over
//! after the primary stops, a member copied back in.

extern crate std;
use super::*;
use crate::fabric::WcStatus;
use crate::kv::{apply_write, KvBackend};
use crate::rng::SplitMix64;
use core::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::vec;
use std::vec::Vec;

#[derive(Clone)]
struct Mem(Rc<RefCell<HashMap<u8, Vec<u8>>>>);

impl Mem {
    fn new(lay: &BackupLayout) -> Mem {
        let mut m = HashMap::new();
        m.insert(STORE_REGION.0, vec![0u8; lay.region_bytes as usize]);
        m.insert(STORE_LOCAL_REGION.0, vec![0u8; lay.local_bytes as usize]);
        Mem(Rc::new(RefCell::new(m)))
    }
    fn bytes(&self, region: RegionId, at: u64, len: u64) -> Vec<u8> {
        self.0.borrow()[&region.0][at as usize..(at + len) as usize].to_vec()
    }
}

impl Memory for Mem {
    fn load_u64(&self, at: Addr) -> u64 {
        let m = self.0.borrow();
        let o = at.offset as usize;
        u64::from_le_bytes(m[&at.region.0][o..o + 8].try_into().unwrap())
    }
    fn store_u64(&self, at: Addr, value: u64) {
        let o = at.offset as usize;
        self.0.borrow_mut().get_mut(&at.region.0).unwrap()[o..o + 8]
            .copy_from_slice(&value.to_le_bytes());
    }
    fn read(&self, at: Addr, dst: &mut [u8]) {
        let o = at.offset as usize;
        dst.copy_from_slice(&self.0.borrow()[&at.region.0][o..o + dst.len()]);
    }
    fn write(&self, at: Addr, src: &[u8]) {
        let o = at.offset as usize;
        self.0.borrow_mut().get_mut(&at.region.0).unwrap()[o..o + src.len()].copy_from_slice(src);
    }
}

const N: u8 = 3;

fn params() -> StoreParams {
    StoreParams {
        entry_count: 64,
        slab_bytes: 4096,
        slab_count: 16,
        key_bytes_max: 24,
        value_bytes_max: 600,
        session_count: 32,
    }
}

struct Cluster {
    engines: Vec<BackupEngine<Mem>>,
    mems: Vec<Mem>,
    /// granted[owner][peer]
    granted: [[bool; N as usize]; N as usize],
    completions: Vec<Vec<Completion>>,
    stopped: [bool; N as usize],
    /// A zombie: its memory answers, its CPU runs nothing.
    cpu_stopped: [bool; N as usize],
    now: u64,
    scratch: Vec<u8>,
    replies: Vec<(u64, u64, KvReply)>,
    /// The view: epoch, primary, term, members.
    current: (u64, u8, u64, u64),
    /// Whether the primary's view follows what its engine asks (the log
    /// engine's part: members it wants dropped leave, synced ones come
    /// back), one decided view per step.
    manage_views: bool,
}

impl Cluster {
    fn new() -> Cluster {
        let geo = params().geometry().unwrap();
        let lay = BackupLayout::new(geo);
        let mut engines = Vec::new();
        let mut mems = Vec::new();
        for m in 0..N {
            let mem = Mem::new(&lay);
            let cfg = BackupConfig {
                me: MemberId(m),
                member_count: N,
                params: params(),
                forward_threshold: 2,
                sync_chunk_bytes: 4096,
                reconnect_backoff_ns: 1000,
                hold_back_timeout_ns: 1_000_000,
                #[cfg(feature = "mutation-testing")]
                mutation: crate::config::Mutation::None,
            };
            engines.push(BackupEngine::new(cfg, lay, mem.clone()));
            mems.push(mem);
        }
        Cluster {
            engines,
            mems,
            granted: [[false; N as usize]; N as usize],
            completions: vec![Vec::new(); N as usize],
            stopped: [false; N as usize],
            cpu_stopped: [false; N as usize],
            now: 1,
            scratch: vec![0u8; 1024],
            replies: Vec::new(),
            current: (0, 0, 0, 0),
            manage_views: true,
        }
    }

    /// The next view, decided and learnt by every running member.
    fn view(&mut self, primary: u8, term: u64, members: u64) {
        let epoch = self.current.0 + 1;
        self.current = (epoch, primary, term, members);
        for m in 0..N as usize {
            if !self.stopped[m] {
                self.engines[m].follow_view(self.now, epoch, MemberId(primary), term, members);
                // Its log engine grants the view's primary its log.
                self.engines[m].follow_grant(self.now, Some(MemberId(primary)));
            }
        }
    }

    fn execute(&mut self, src: usize, a: Action) {
        match a {
            Action::Post(wr) => {
                let dst = wr.peer.index();
                let status = if self.stopped[dst] {
                    WcStatus::Unreachable
                } else if !self.granted[dst][src] {
                    WcStatus::AccessDenied
                } else {
                    match wr.op {
                        Op::Write { local, remote, len } => {
                            let b = self.mems[src].bytes(local.region, local.offset, len.into());
                            self.mems[dst].write(remote, &b);
                        }
                        Op::Read { remote, local, len } => {
                            let b = self.mems[dst].bytes(remote.region, remote.offset, len.into());
                            self.mems[src].write(local, &b);
                        }
                        _ => panic!("unexpected op {wr:?}"),
                    }
                    WcStatus::Ok
                };
                self.completions[src].push(Completion {
                    wr_id: wr.wr_id,
                    peer: wr.peer,
                    status,
                });
            }
            Action::SetAccess {
                peer,
                region,
                access,
            } => {
                assert_eq!(region, STORE_REGION);
                self.granted[src][peer.index()] = access == Access::Granted;
            }
            Action::Reconnect { .. } => {}
        }
    }

    /// The log engine's part at the primary: a view without the members
    /// its backup engine must copy anew, with those synced again.
    fn manage_view(&mut self) {
        let (_, primary, term, members) = self.current;
        let e = &mut self.engines[primary as usize];
        // The driver reports the synced members to the log engine every
        // step.
        let synced = e.report_synced_members();
        if !self.manage_views || e.role() == BackupRole::Backup {
            return;
        }
        let drop = e.members_to_drop();
        let stopped: u64 = (0..N as usize)
            .filter(|&m| self.stopped[m])
            .map(|m| 1u64 << m)
            .sum();
        let next = (members & !drop) | (synced & !stopped) | 1 << primary;
        if next != members {
            self.view(primary, term, next);
        }
    }

    fn step(&mut self) {
        self.manage_view();
        self.now += 1000;
        for m in 0..N as usize {
            if self.stopped[m] || self.cpu_stopped[m] {
                continue;
            }
            for c in std::mem::take(&mut self.completions[m]) {
                self.engines[m].handle_completion(self.now, c);
            }
            self.engines[m].handle_timeout(self.now);
            self.engines[m].step(self.now, &mut self.scratch);
            while let Some(a) = self.engines[m].poll_action() {
                self.execute(m, a);
            }
            while let Some(r) = self.engines[m].poll_reply() {
                self.replies.push(r);
            }
        }
    }

    fn run_until(&mut self, what: &str, mut done: impl FnMut(&Cluster) -> bool) {
        for _ in 0..10_000 {
            if done(self) {
                return;
            }
            self.step();
        }
        panic!("never: {what}");
    }

    /// One write through the primary; its reply.
    fn write(&mut self, primary: usize, id: u64, op: &KvOp<'_>) -> KvReply {
        self.run_until("ready", |c| c.engines[primary].ready());
        let mut scratch = vec![0u8; 1024];
        match self.engines[primary].start_write(self.now, 1, id, op, &mut scratch) {
            Ok(Started::Applied) => {}
            Ok(Started::Duplicate(r)) => return r,
            other => panic!("{other:?}"),
        }
        while let Some(a) = self.engines[primary].poll_action() {
            self.execute(primary, a);
        }
        while let Some(r) = self.engines[primary].poll_reply() {
            self.replies.push(r);
        }
        self.run_until("the reply", |c| c.replies.iter().any(|r| r.1 == id));
        let r = self.replies.iter().find(|r| r.1 == id).unwrap().2;
        self.replies.clear();
        r
    }

    /// Three members, member 0 the primary of the first view, taken over,
    /// every backup copied and back in the view.
    fn with_primary_settled() -> Cluster {
        let mut c = Cluster::new();
        c.view(0, 1, 0b111);
        c.engines[0].set_serving(c.now, true);
        c.run_until("take-over", |c| c.engines[0].role() == BackupRole::Primary);
        c.settle();
        c
    }

    /// Steps until every running member is in the view with a synced
    /// copy (the view manager's work is done).
    fn settle(&mut self) {
        self.run_until("every running member synced and in the view", |c| {
            let running: u64 = (0..N as usize)
                .filter(|&m| !c.stopped[m])
                .map(|m| 1u64 << m)
                .sum();
            let p = c.current.1 as usize;
            c.engines[p].synced_members() == running && c.current.3 == running
        });
    }

    /// Member `b`'s store is member `a`'s, byte for byte.
    fn assert_same_store(&self, a: usize, b: usize) {
        let (x, y) = (self.store_bytes(a), self.store_bytes(b));
        let first = x.iter().zip(&y).position(|(p, q)| p != q);
        assert!(
            first.is_none() && x.len() == y.len(),
            "member {b}'s store differs from member {a}'s: first at byte {first:?} of {} and {}; copies at {a}: {:?}",
            x.len(),
            y.len(),
            self.engines[a].status().copies
        );
    }

    fn store_bytes(&self, m: usize) -> Vec<u8> {
        let lay = BackupLayout::new(params().geometry().unwrap());
        let used = lay.geo.used_bytes(self.engines[m].store().slabs_carved());
        self.mems[m].bytes(STORE_REGION, lay.mailbox_bytes, used)
    }

    fn contents(&self, m: usize) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut out = BTreeMap::new();
        self.engines[m]
            .store()
            .for_each(&mut vec![0u8; 1024], &mut |k, v| {
                out.insert(k.to_vec(), v.to_vec());
                true
            });
        out
    }
}

#[derive(Default)]
struct Model(HashMap<Vec<u8>, Vec<u8>>);

impl KvBackend for Model {
    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.0.get(key).map(|v| v.as_slice())
    }
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), ()> {
        self.0.insert(key.to_vec(), value.to_vec());
        Ok(())
    }
    fn del(&mut self, key: &[u8]) -> bool {
        self.0.remove(key).is_some()
    }
    fn for_each(&self, _visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) {}
    fn clear(&mut self) {
        self.0.clear();
    }
}

fn random_writes(c: &mut Cluster, primary: usize, model: &mut Model, seed: u64, count: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in 0..count {
        let key = std::format!("k{}", rng.range_inclusive(0, 30)).into_bytes();
        let value = vec![i as u8; rng.range_inclusive(0, 500) as usize];
        let op = if rng.chance(1, 4) {
            KvOp::Del { key: &key }
        } else {
            KvOp::Set {
                key: &key,
                value: &value,
            }
        };
        let got = c.write(primary, seed * 100_000 + i, &op);
        assert_eq!(got, apply_write(model, &op), "write {i}");
    }
}

fn model_contents(m: &Model) -> BTreeMap<Vec<u8>, Vec<u8>> {
    m.0.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[test]
fn a_primary_replicates_into_dormant_backups_and_a_backup_takes_over() {
    let mut c = Cluster::new();
    c.view(0, 1, 0b111);
    c.engines[0].set_serving(c.now, true);
    c.run_until("take-over", |c| c.engines[0].role() == BackupRole::Primary);
    // The backups leave the view one at a time to be copied (a copy tears
    // a store while it runs), and come back synced.
    c.settle();
    let mut model = Model::default();
    random_writes(&mut c, 0, &mut model, 1, 400);
    c.settle();
    // Every copy is the primary's, byte for byte.
    c.assert_same_store(0, 1);
    c.assert_same_store(0, 2);
    let k = c.engines[0].status().counters;
    assert!(k.writes_forwarded > 3 && k.writes_zero_copy > 200, "{k:?}");
    // The backups' CPUs replayed only the forwarded writes.
    for b in 1..3 {
        let kb = c.engines[b].status().counters;
        assert_eq!(kb.replays, k.writes_forwarded, "{kb:?}");
        assert_eq!(kb.replay_failures, 0);
    }
    // A read at the primary.
    let mut out = vec![0u8; 600];
    for (key, value) in &model.0 {
        let n = c.engines[0].read(key, &mut out).unwrap().unwrap();
        assert_eq!(&out[..n], value.as_slice());
    }
    // The primary stops; member 1 takes over in the next view.
    c.stopped[0] = true;
    c.engines[1].handle_peer_down(c.now, MemberId(0));
    c.engines[2].handle_peer_down(c.now, MemberId(0));
    c.view(1, 2, 0b110);
    c.engines[1].set_serving(c.now, true);
    c.run_until("the second take-over", |c| c.engines[1].ready());
    let report = c.engines[1].status().recovery.unwrap();
    assert_eq!(report.keys, model.0.len() as u64);
    let audit = c.engines[1].status().audit.unwrap();
    assert_eq!(
        (audit.phantoms, audit.dangling_entries, audit.conflicts),
        (0, 0, 0)
    );
    assert_eq!(audit.live_chunks, model.0.len() as u64);
    assert_eq!(c.contents(1), model_contents(&model));
    // Member 0's old grant is revoked at member 2.
    assert!(!c.granted[2][0] && c.granted[2][1]);
    random_writes(&mut c, 1, &mut model, 2, 200);
    assert_eq!(c.contents(1), model_contents(&model));
    c.settle();
    c.assert_same_store(1, 2);
}

#[test]
fn a_member_that_comes_back_is_copied_before_it_counts() {
    let mut c = Cluster::new();
    // Member 2 is not running yet.
    c.stopped[2] = true;
    c.view(0, 1, 0b011);
    c.engines[0].set_serving(c.now, true);
    c.run_until("take-over", |c| c.engines[0].role() == BackupRole::Primary);
    let mut model = Model::default();
    random_writes(&mut c, 0, &mut model, 3, 200);
    c.settle();
    // Member 2 could not be copied: not synced, its copy empty.
    assert_eq!(c.engines[0].synced_members(), 0b011);
    assert_ne!(c.store_bytes(2), c.store_bytes(0));
    // It starts, grants the primary (it follows the view), the primary
    // learns it is up and copies it.
    c.stopped[2] = false;
    c.engines[2].follow_view(c.now, c.current.0, MemberId(0), 1, 0b011);
    c.engines[2].follow_grant(c.now, Some(MemberId(0)));
    c.engines[0].handle_peer_up(c.now, MemberId(2));
    c.run_until("the copy", |c| c.engines[0].synced_members() & 0b100 != 0);
    c.assert_same_store(0, 2);
    random_writes(&mut c, 0, &mut model, 4, 100);
    c.settle();
    c.assert_same_store(0, 2);
    // The view took member 2 back once synced.
    assert_eq!(c.current.3, 0b111);
    // A write waits for a member of the view that is not synced: 2 stops
    // (its WRITEs fail), and the reply comes only once a view drops it,
    // which the engine asks for.
    c.manage_views = false;
    c.stopped[2] = true;
    c.run_until("ready", |c| c.engines[0].ready());
    let mut scratch = vec![0u8; 1024];
    c.engines[0]
        .start_write(
            c.now,
            1,
            10_000_000,
            &KvOp::Set {
                key: b"x",
                value: b"y",
            },
            &mut scratch,
        )
        .unwrap();
    for _ in 0..50 {
        c.step();
        while let Some(a) = c.engines[0].poll_action() {
            c.execute(0, a);
        }
        while let Some(r) = c.engines[0].poll_reply() {
            c.replies.push(r);
        }
    }
    assert!(c.replies.is_empty(), "answered without member 2's copy");
    assert_eq!(c.engines[0].members_to_drop(), 0b100);
    c.engines[0].handle_peer_down(c.now, MemberId(2));
    c.view(0, 1, 0b011);
    c.run_until("the reply", |c| c.replies.iter().any(|r| r.1 == 10_000_000));
}

#[test]
fn a_member_not_named_primary_refuses_writes() {
    let mut c = Cluster::new();
    c.view(0, 1, 0b111);
    let mut scratch = vec![0u8; 1024];
    assert_eq!(
        c.engines[1].start_write(c.now, 1, 1, &KvOp::Del { key: b"a" }, &mut scratch),
        Err(StartError::NotPrimary(Some(MemberId(0))))
    );
    // Serving is refused to a member the view does not name.
    c.engines[1].set_serving(c.now, true);
    assert_eq!(c.engines[1].role(), BackupRole::Backup);
}

/// Starts a write at `primary` and executes its first actions, without
/// waiting for its reply.
fn start(c: &mut Cluster, primary: usize, id: u64, op: &KvOp<'_>) {
    c.run_until("ready", |c| c.engines[primary].ready());
    let mut scratch = vec![0u8; 1024];
    assert_eq!(
        c.engines[primary].start_write(c.now, 1, id, op, &mut scratch),
        Ok(Started::Applied)
    );
    while let Some(a) = c.engines[primary].poll_action() {
        c.execute(primary, a);
    }
}

/// A value (with a one-byte key) whose item is of size class 3 or 4
/// (the first item of a class carves a slab: three allocator structures,
/// so its write is forwarded).
fn value_of_class(class: u32) -> Vec<u8> {
    match class {
        3 => vec![b'v'; 400],
        4 => vec![b'v'; 550],
        _ => unreachable!(),
    }
}

#[test]
fn a_member_is_copied_only_once_no_view_counts_it() {
    let mut c = Cluster::new();
    c.manage_views = false;
    c.view(0, 1, 0b111);
    c.engines[0].set_serving(c.now, true);
    c.run_until("take-over", |c| c.engines[0].role() == BackupRole::Primary);
    // Both backups need a copy and both are in the view: one leaves to be
    // copied, the lowest stays (its store holds every acknowledged write).
    assert_eq!(c.engines[0].members_to_drop(), 0b100);
    for _ in 0..20 {
        c.step();
    }
    let copies = c.engines[0].status().copies;
    assert_eq!(copies[1], Some(CopyState::Needed));
    assert_eq!(
        copies[2],
        Some(CopyState::Needed),
        "copied while a view counts it"
    );
    // Nothing is answered while a member counted is not synced.
    assert!(!c.engines[0].ready() && !c.engines[0].readable());
    // The view drops 2: its copy runs, and 1 stays while it does.
    c.view(0, 1, 0b011);
    c.step();
    assert!(matches!(
        c.engines[0].status().copies[2],
        Some(CopyState::Copying { .. })
    ));
    assert_eq!(c.engines[0].members_to_drop(), 0);
    c.run_until("2 synced", |c| c.engines[0].synced_members() & 0b100 != 0);
    // 2 back in the view, synced: now 1 leaves to be copied.
    c.view(0, 1, 0b111);
    assert_eq!(c.engines[0].members_to_drop(), 0b010);
    c.view(0, 1, 0b101);
    // Writes go on meanwhile (every member counted is synced).
    assert_eq!(
        c.write(
            0,
            1,
            &KvOp::Set {
                key: b"k",
                value: b"v"
            }
        ),
        KvReply::Ok
    );
    c.run_until("1 synced", |c| c.engines[0].synced_members() == 0b111);
    c.view(0, 1, 0b111);
    c.assert_same_store(0, 1);
    c.assert_same_store(0, 2);
    // Only one member left in the view, none copying: it leaves (a view of
    // the primary alone, as when a member fails).
    c.stopped[2] = true;
    c.engines[0].handle_peer_down(c.now, MemberId(2));
    c.engines[1].handle_peer_down(c.now, MemberId(2));
    c.view(0, 1, 0b011);
    c.engines[0].set_serving(c.now, false);
    c.view(1, 2, 0b011);
    c.engines[1].set_serving(c.now, true);
    c.run_until("take-over by 1", |c| {
        c.engines[1].role() == BackupRole::Primary
    });
    assert_eq!(c.engines[1].members_to_drop(), 0b001);
}

#[test]
fn a_primary_whose_lease_lapses_keeps_its_write_until_it_is_replicated() {
    let mut c = Cluster::with_primary_settled();
    start(
        &mut c,
        0,
        7,
        &KvOp::Set {
            key: b"k",
            value: b"v",
        },
    );
    // The lease lapses before the WRITEs complete.
    c.engines[0].set_serving(c.now, false);
    for _ in 0..20 {
        c.step();
    }
    assert!(c.replies.is_empty(), "answered without a lease");
    // Its retry is not answered from the primary's own session record.
    let mut scratch = vec![0u8; 1024];
    assert_eq!(
        c.engines[0].start_write(
            c.now,
            1,
            7,
            &KvOp::Set {
                key: b"k",
                value: b"v"
            },
            &mut scratch
        ),
        Err(StartError::NotPrimary(None))
    );
    assert!(!c.engines[0].readable());
    // The lease comes back in the same reign: the write is answered.
    c.engines[0].set_serving(c.now, true);
    c.run_until("the reply", |c| c.replies.iter().any(|r| r.1 == 7));
    c.assert_same_store(0, 1);
    c.assert_same_store(0, 2);
}

#[test]
fn a_backup_replays_only_what_its_grantee_forwarded() {
    let mut c = Cluster::with_primary_settled();
    c.write(
        0,
        1,
        &KvOp::Set {
            key: b"a",
            value: &value_of_class(3),
        },
    );
    let k = c.engines[0].status().counters;
    assert_eq!(k.writes_forwarded, 1, "{k:?}");
    assert_eq!(c.engines[1].status().counters.replays, 1);
    // Member 0 steps down (its own last forward is still staged in its
    // mailbox) and 1 takes over: 0 replays nothing of its own.
    c.engines[0].set_serving(c.now, false);
    c.view(1, 2, 0b111);
    c.engines[1].set_serving(c.now, true);
    c.run_until("take-over by 1", |c| {
        c.engines[1].role() == BackupRole::Primary
    });
    c.settle();
    let k0 = c.engines[0].status().counters;
    assert_eq!((k0.replays, k0.replay_failures), (0, 0), "{k0:?}");
    // The new primary's forwards are replayed by both.
    c.write(
        1,
        2,
        &KvOp::Set {
            key: b"b",
            value: &value_of_class(4),
        },
    );
    assert_eq!(c.engines[1].status().counters.writes_forwarded, 1);
    for m in [0, 2] {
        let k = c.engines[m].status().counters;
        assert_eq!(k.replay_failures, 0, "{k:?}");
    }
    assert_eq!(c.engines[0].status().counters.replays, 1);
    c.assert_same_store(1, 0);
    c.assert_same_store(1, 2);
}

#[test]
fn a_zombie_backup_holds_a_forwarded_write_back_only_until_the_view_drops_it() {
    let mut c = Cluster::with_primary_settled();
    // (Its slab carved while every CPU runs.)
    c.write(
        0,
        1,
        &KvOp::Set {
            key: b"a",
            value: b"zero-copy",
        },
    );
    // Member 2's CPU stops; its memory still takes our WRITEs.
    c.cpu_stopped[2] = true;
    c.write(
        0,
        3,
        &KvOp::Set {
            key: b"a",
            value: b"zero-copy again",
        },
    );
    assert_eq!(c.engines[0].status().counters.writes_zero_copy, 1);
    assert_eq!(c.current.3, 0b111, "a zero-copy write needs no backup CPU");
    // A forwarded write needs its replay: after the hold-back timeout the
    // engine asks for a view without 2, and the write is answered.
    let before = c.now;
    c.write(
        0,
        4,
        &KvOp::Set {
            key: b"b",
            value: &value_of_class(3),
        },
    );
    assert!(c.now - before >= 1_000_000, "answered before the timeout");
    assert_eq!(c.current.3, 0b011);
    // 2 is copied again only after a back-off (its CPU may still be stopped).
    assert_eq!(c.engines[0].status().copies[2], Some(CopyState::Needed));
}

#[test]
fn a_write_that_changes_nothing_answers_its_retry_from_its_record() {
    let mut c = Cluster::with_primary_settled();
    c.write(
        0,
        1,
        &KvOp::Set {
            key: b"k",
            value: b"old",
        },
    );
    // Client 1's CAS fails (the key is there): its reply is recorded and
    // replicated all the same.
    let cas = KvOp::Cas {
        key: b"k",
        expected: None,
        new: b"new",
    };
    assert_eq!(c.write(0, 2, &cas), KvReply::Int(0));
    // Another client deletes the key; then client 1's CAS arrives again (a
    // copy delivered late): it is answered from the record, not run anew
    // (run now, it would succeed).
    let mut scratch = vec![0u8; 1024];
    c.run_until("ready", |c| c.engines[0].ready());
    assert_eq!(
        c.engines[0].start_write(c.now, 9, 1, &KvOp::Del { key: b"k" }, &mut scratch),
        Ok(Started::Applied)
    );
    c.run_until("the delete", |c| c.engines[0].ready());
    assert_eq!(
        c.engines[0].start_write(c.now, 1, 2, &cas, &mut scratch),
        Ok(Started::Duplicate(KvReply::Int(0)))
    );
    c.settle();
    c.assert_same_store(0, 1);
    // The record survives a take-over.
    c.engines[0].set_serving(c.now, false);
    c.view(1, 2, 0b111);
    c.engines[1].set_serving(c.now, true);
    c.run_until("take-over by 1", |c| {
        c.engines[1].role() == BackupRole::Primary
    });
    c.settle();
    assert_eq!(
        c.engines[1].start_write(c.now, 1, 2, &cas, &mut scratch),
        Ok(Started::Duplicate(KvReply::Int(0)))
    );
}

#[test]
fn a_backup_grants_its_next_primary_only_once_the_old_ones_revoke_is_confirmed() {
    let mut c = Cluster::new();
    let e = &mut c.engines[2];
    let mut scratch = vec![0u8; 1024];
    let actions = |e: &mut BackupEngine<Mem>, now: u64, scratch: &mut Vec<u8>| {
        e.step(now, scratch);
        let mut out = Vec::new();
        while let Some(a) = e.poll_action() {
            out.push(a);
        }
        out
    };
    let access = |peer: u8, access: Access| Action::SetAccess {
        peer: MemberId(peer),
        region: STORE_REGION,
        access,
    };
    e.follow_view(10, 1, MemberId(0), 1, 0b111);
    e.follow_grant(10, Some(MemberId(0)));
    assert_eq!(
        actions(e, 10, &mut scratch),
        vec![access(0, Access::Granted)]
    );
    // Member 1 becomes primary; member 0 is stopped in the middle of a copy
    // WRITE into our store: its revoke is not confirmed.
    e.follow_view(20, 2, MemberId(1), 2, 0b110);
    e.follow_grant(20, Some(MemberId(1)));
    let first = e.poll_action().expect("the revoke");
    assert_eq!(first, access(0, Access::Revoked));
    e.handle_action_failed(20, &first, FabricError::RevokeUnconfirmed);
    assert!(e.next_deadline() <= 20, "the retry is due at once");
    // Tried again, and member 1 is not granted meanwhile.
    for now in [30, 40] {
        let got = actions(e, now, &mut scratch);
        assert_eq!(got, vec![access(0, Access::Revoked)]);
        e.handle_action_failed(now, &got[0], FabricError::RevokeUnconfirmed);
    }
    // The stopped writer left: the revoke is confirmed, then the grant.
    assert_eq!(
        actions(e, 50, &mut scratch),
        vec![access(0, Access::Revoked)]
    );
    assert_eq!(
        actions(e, 60, &mut scratch),
        vec![access(1, Access::Granted)]
    );
    assert!(actions(e, 70, &mut scratch).is_empty());
}
