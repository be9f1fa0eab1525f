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
    now: u64,
    scratch: Vec<u8>,
    replies: Vec<(u64, u64, KvReply)>,
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
            now: 1,
            scratch: vec![0u8; 1024],
            replies: Vec::new(),
        }
    }

    fn view(&mut self, epoch: u64, primary: u8, term: u64, members: u64) {
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

    fn step(&mut self) {
        self.now += 1000;
        for m in 0..N as usize {
            if self.stopped[m] {
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
    c.view(1, 0, 1, 0b111);
    c.engines[0].set_serving(c.now, true);
    c.run_until("take-over", |c| c.engines[0].role() == BackupRole::Primary);
    let mut model = Model::default();
    random_writes(&mut c, 0, &mut model, 1, 400);
    // Every copy is the primary's, byte for byte.
    assert_eq!(c.store_bytes(1), c.store_bytes(0));
    assert_eq!(c.store_bytes(2), c.store_bytes(0));
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
    c.view(2, 1, 2, 0b110);
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
    assert_eq!(c.store_bytes(2), c.store_bytes(1));
}

#[test]
fn a_member_that_comes_back_is_copied_before_it_counts() {
    let mut c = Cluster::new();
    // Member 2 is not running yet.
    c.stopped[2] = true;
    c.view(1, 0, 1, 0b011);
    c.engines[0].set_serving(c.now, true);
    c.run_until("take-over", |c| c.engines[0].role() == BackupRole::Primary);
    let mut model = Model::default();
    random_writes(&mut c, 0, &mut model, 3, 200);
    // Member 2 could not be copied: not synced, its copy empty.
    assert_eq!(c.engines[0].synced_members(), 0b011);
    assert_ne!(c.store_bytes(2), c.store_bytes(0));
    // It starts, grants the primary (it follows the view), the primary
    // learns it is up and copies it.
    c.stopped[2] = false;
    c.engines[2].follow_view(c.now, 1, MemberId(0), 1, 0b011);
    c.engines[2].follow_grant(c.now, Some(MemberId(0)));
    c.engines[0].handle_peer_up(c.now, MemberId(2));
    c.run_until("the copy", |c| c.engines[0].synced_members() & 0b100 != 0);
    assert_eq!(c.store_bytes(2), c.store_bytes(0));
    random_writes(&mut c, 0, &mut model, 4, 100);
    assert_eq!(c.store_bytes(2), c.store_bytes(0));
    // A write waits for a member of the view that is not synced: the
    // view adds 2, which stops (its WRITEs fail), and the reply comes only
    // once the next view drops it.
    c.view(2, 0, 1, 0b111);
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
    c.engines[0].handle_peer_down(c.now, MemberId(2));
    c.view(3, 0, 1, 0b011);
    c.run_until("the reply", |c| c.replies.iter().any(|r| r.1 == 10_000_000));
}

#[test]
fn a_member_not_named_primary_refuses_writes() {
    let mut c = Cluster::new();
    c.view(1, 0, 1, 0b111);
    let mut scratch = vec![0u8; 1024];
    assert_eq!(
        c.engines[1].start_write(c.now, 1, 1, &KvOp::Del { key: b"a" }, &mut scratch),
        Err(StartError::NotPrimary(Some(MemberId(0))))
    );
    // Serving is refused to a member the view does not name.
    c.engines[1].set_serving(c.now, true);
    assert_eq!(c.engines[1].role(), BackupRole::Backup);
}
