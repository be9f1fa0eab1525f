//! The store over in-process memories: the key-value semantics against
//! the map model, byte-identical backups (WRITEs and forwarded replays),
//! a crash after every prefix of every plan (the last WRITE torn word by
//! word), and recovery of corrupted regions.

extern crate std;
use super::*;
use crate::fabric::RegionId;
use crate::kv::{KvBackend, KvError, KvLimits, KvStateMachine};
use crate::rng::SplitMix64;
use core::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::vec;
use std::vec::Vec;

const REGION: Addr = Addr::new(RegionId(0), 0);
const LOCAL: Addr = Addr::new(RegionId(1), 0);

/// Two byte vectors (the replicated region, local memory); clones share.
#[derive(Clone)]
struct Mem(Rc<[RefCell<Vec<u8>>; 2]>);

impl Mem {
    fn new(geo: &Geometry) -> Mem {
        Mem(Rc::new([
            RefCell::new(vec![0; geo.region_bytes as usize]),
            RefCell::new(vec![0; geo.local_bytes as usize]),
        ]))
    }
    fn region(&self) -> Vec<u8> {
        self.0[0].borrow().clone()
    }
    fn set_region(&self, bytes: &[u8]) {
        self.0[0].borrow_mut().copy_from_slice(bytes);
    }
    /// A WRITE of `range` from `from`'s region into this one.
    fn copy_range(&self, from: &Mem, r: Range) {
        let (o, n) = (r.offset as usize, r.len as usize);
        let src = from.0[0].borrow()[o..o + n].to_vec();
        self.0[0].borrow_mut()[o..o + n].copy_from_slice(&src);
    }
}

impl Memory for Mem {
    fn load_u64(&self, at: Addr) -> u64 {
        assert_eq!(at.offset % 8, 0);
        let r = self.0[at.region.index()].borrow();
        let o = at.offset as usize;
        u64::from_le_bytes(r[o..o + 8].try_into().unwrap())
    }
    fn store_u64(&self, at: Addr, value: u64) {
        assert_eq!(at.offset % 8, 0);
        let o = at.offset as usize;
        self.0[at.region.index()].borrow_mut()[o..o + 8].copy_from_slice(&value.to_le_bytes());
    }
    fn read(&self, at: Addr, dst: &mut [u8]) {
        let o = at.offset as usize;
        dst.copy_from_slice(&self.0[at.region.index()].borrow()[o..o + dst.len()]);
    }
    fn write(&self, at: Addr, src: &[u8]) {
        let o = at.offset as usize;
        self.0[at.region.index()].borrow_mut()[o..o + src.len()].copy_from_slice(src);
    }
}

fn params() -> StoreParams {
    StoreParams {
        entry_count: 48,
        slab_bytes: 4096,
        slab_count: 12,
        key_bytes_max: 24,
        value_bytes_max: 600,
        session_count: 16,
    }
}

fn limits() -> KvLimits {
    KvLimits {
        key_bytes_max: params().key_bytes_max,
        value_bytes_max: params().value_bytes_max,
    }
}

fn store(geo: Geometry) -> (Store<Mem>, Mem) {
    let mem = Mem::new(&geo);
    (Store::format(mem.clone(), geo, REGION, LOCAL), mem)
}

/// A host map, the model.
#[derive(Default, Clone)]
struct MapBackend(HashMap<Vec<u8>, Vec<u8>>);

impl KvBackend for MapBackend {
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
    fn for_each(&self, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        for (k, v) in &self.0 {
            if !visit(k, v) {
                return;
            }
        }
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// A random write: SET (sizes across classes), DEL, INCR, CAS, over a
/// few keys so that updates and deletes are common.
struct OpGen {
    rng: SplitMix64,
    keys: u64,
}

impl OpGen {
    fn next(&mut self, model: &MapBackend) -> (Vec<u8>, Vec<u8>, u8, i64, Option<Vec<u8>>) {
        let k = self.rng.range_inclusive(0, self.keys - 1);
        let key = std::format!("key-{k}").into_bytes();
        let len = match self.rng.range_inclusive(0, 9) {
            0..=5 => self.rng.range_inclusive(0, 30),
            6..=8 => self.rng.range_inclusive(31, 200),
            _ => self.rng.range_inclusive(201, 600),
        } as usize;
        let byte = self.rng.next_u64() as u8;
        let value = vec![byte; len];
        let kind = self.rng.range_inclusive(0, 9) as u8;
        let delta = self.rng.range_inclusive(0, 20) as i64 - 10;
        let expected = if self.rng.chance(1, 2) {
            model.0.get(&key).cloned()
        } else {
            Some(b"nope".to_vec())
        };
        (key, value, kind, delta, expected)
    }
}

fn op_of<'a>(
    key: &'a [u8],
    value: &'a [u8],
    kind: u8,
    delta: i64,
    expected: &'a Option<Vec<u8>>,
) -> KvOp<'a> {
    match kind {
        0..=4 => KvOp::Set { key, value },
        5 | 6 => KvOp::Del { key },
        7 => KvOp::Incr { key, delta },
        _ => KvOp::Cas {
            key,
            expected: expected.as_deref(),
            new: value,
        },
    }
}

fn contents(s: &Store<Mem>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut scratch = vec![0u8; 1024];
    s.for_each(&mut scratch, &mut |k, v| {
        out.insert(k.to_vec(), v.to_vec());
        true
    });
    out
}

fn model_contents(m: &MapBackend) -> BTreeMap<Vec<u8>, Vec<u8>> {
    m.0.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn assert_clean(s: &Store<Mem>) {
    let a = s.audit(&mut vec![0u8; 1024]);
    assert_eq!(
        (a.phantoms, a.dangling_entries, a.conflicts),
        (0, 0, 0),
        "{a:?}"
    );
}

#[test]
fn parameters_are_checked() {
    let ok = params();
    assert!(ok.geometry().is_ok());
    let mut p = ok;
    p.entry_count = 0;
    assert_eq!(p.geometry(), Err(StoreParamsError::EntryCount));
    let mut p = ok;
    p.slab_bytes = 5000;
    assert_eq!(p.geometry(), Err(StoreParamsError::SlabBytes));
    let mut p = ok;
    p.slab_count = 0;
    assert_eq!(p.geometry(), Err(StoreParamsError::SlabCount));
    let mut p = ok;
    p.value_bytes_max = 4096;
    assert_eq!(p.geometry(), Err(StoreParamsError::ItemLargerThanSlab));
    let mut p = ok;
    p.key_bytes_max = 70_000;
    assert_eq!(p.geometry(), Err(StoreParamsError::KeyOrValueLimit));
    let g = ok.geometry().unwrap();
    assert_eq!(g.heap_offset % LINE_BYTES, 0);
    assert!(g.entries_offset >= g.slab_map_offset + u64::from(ok.slab_count));
    assert_eq!(class_of(1), 0);
    assert_eq!(class_of(64), 0);
    assert_eq!(class_of(65), 1);
    assert_eq!(class_of(4096), 6);
}

#[test]
fn the_store_answers_as_the_map_model_does() {
    let geo = params().geometry().unwrap();
    let (mut s, _) = store(geo);
    let mut model = KvStateMachine::new(MapBackend::default(), limits());
    let mut gen = OpGen {
        rng: SplitMix64::new(7),
        keys: 40,
    };
    let mut scratch = vec![0u8; 1024];
    let mut full = 0;
    for version in 1..=3000u64 {
        let mut m = model.backend().clone();
        let (key, value, kind, delta, expected) = gen.next(&m);
        let op = op_of(&key, &value, kind, delta, &expected);
        let got = s.apply(&op, version, Some((version % 5, version)), &mut scratch);
        let want = model.apply_op(&op);
        if got.reply == KvReply::Err(KvError::StoreFull) {
            // The model's map never fills: undo its step and check that
            // the store changed nothing.
            full += 1;
            assert!(got.plan.is_empty());
            assert_eq!(got.effect, Effect::None);
            m.0.clone_from(&model.backend().0);
            model = KvStateMachine::new(m, limits());
            continue;
        }
        assert_eq!(got.reply, want, "op {version}: {op:?}");
        assert_eq!(
            contents(&s),
            model_contents(model.backend()),
            "op {version}"
        );
        let mut out = vec![0u8; 600];
        let probe = std::format!("key-{}", version % 40).into_bytes();
        let len = s.get(&probe, &mut out).unwrap();
        assert_eq!(
            len.map(|l| out[..l].to_vec()),
            model.backend().0.get(&probe).cloned()
        );
    }
    assert_clean(&s);
    assert!(full < 100, "the store filled up too often: {full}");
}

/// Replicates one applied write to `backup` as the engine does: the
/// plan's ranges as WRITEs, or, above the threshold, the effect replayed
/// by the backup's CPU.
fn replicate(
    primary: &Store<Mem>,
    pmem: &Mem,
    backup: &mut Store<Mem>,
    bmem: &Mem,
    a: &Applied,
    client: u64,
    threshold: u8,
) -> bool {
    if a.plan.alloc_ranges > threshold {
        let session = match a.effect {
            Effect::None => None,
            _ => primary.session(client),
        };
        if let Effect::Put { chunk, .. } = a.effect {
            let mut buf = vec![0u8; 1024];
            let (k, v) = primary.item_bytes(chunk, &mut buf).unwrap();
            backup
                .replay(&a.effect, &buf[..k], &buf[k..k + v], session.as_ref())
                .unwrap();
        } else {
            backup
                .replay(&a.effect, &[], &[], session.as_ref())
                .unwrap();
        }
        return true;
    }
    for r in a.plan.ranges() {
        bmem.copy_range(pmem, *r);
    }
    false
}

#[test]
fn a_backup_fed_plans_and_replays_stays_byte_identical() {
    let geo = params().geometry().unwrap();
    let (mut p, pmem) = store(geo);
    let (mut b, bmem) = store(geo);
    let mut gen = OpGen {
        rng: SplitMix64::new(11),
        keys: 40,
    };
    let mut model = MapBackend::default();
    let mut scratch = vec![0u8; 1024];
    let (mut forwarded, mut zero_copy) = (0, 0);
    for version in 1..=3000u64 {
        let (key, value, kind, delta, expected) = gen.next(&model);
        let op = op_of(&key, &value, kind, delta, &expected);
        let a = p.apply(&op, version, Some((version % 5, version)), &mut scratch);
        crate::kv::apply_write(&mut model, &op);
        if a.plan.is_empty() {
            continue;
        }
        if replicate(&p, &pmem, &mut b, &bmem, &a, version % 5, 2) {
            forwarded += 1;
        } else {
            zero_copy += 1;
        }
        assert!(
            pmem.region() == bmem.region(),
            "copies differ after op {version} ({op:?}, {a:?})"
        );
    }
    assert!(
        forwarded > 5 && zero_copy > 1000,
        "{forwarded} forwarded, {zero_copy} zero-copy"
    );
    // The backup, promoted, serves what the primary held.
    let report = b.recover(&mut scratch).unwrap();
    assert_eq!(
        (
            report.entries_reclaimed,
            report.chunks_reclaimed,
            report.free_lists_cut
        ),
        (0, 0, 0)
    );
    assert_eq!(contents(&b), contents(&p));
    assert_clean(&b);
}

#[test]
fn a_replay_on_a_copy_that_differs_is_refused() {
    let geo = params().geometry().unwrap();
    let (mut p, _) = store(geo);
    let (mut b, _) = store(geo);
    let mut scratch = vec![0u8; 1024];
    let a = p.apply(
        &KvOp::Set {
            key: b"a",
            value: b"1",
        },
        1,
        None,
        &mut scratch,
    );
    let Effect::Put {
        entry,
        chunk,
        version,
    } = a.effect
    else {
        panic!("{a:?}")
    };
    // The backup missed a write: its allocator hands out another chunk.
    b.apply(
        &KvOp::Set {
            key: b"zz",
            value: b"9",
        },
        1,
        None,
        &mut scratch,
    );
    assert_eq!(
        b.replay(
            &Effect::Put {
                entry: entry + 1,
                chunk,
                version
            },
            b"a",
            b"1",
            None
        ),
        Err(ReplayError::Diverged)
    );
    assert_eq!(
        b.replay(
            &Effect::Put {
                entry: 10_000,
                chunk,
                version
            },
            b"a",
            b"1",
            None
        ),
        Err(ReplayError::EntryOutOfRange)
    );
    assert_eq!(
        b.replay(
            &Effect::Put {
                entry,
                chunk,
                version
            },
            b"",
            b"1",
            None
        ),
        Err(ReplayError::TooLarge)
    );
    assert_eq!(
        b.replay(&Effect::Delete { entry: 40 }, &[], &[], None),
        Err(ReplayError::EntryFree)
    );
}

/// The words of `r` that a torn WRITE placed: bit i of `mask` for word i.
fn place_torn(dst: &Mem, src: &[u8], r: Range, mask: u64) {
    let mut words = 0;
    let mut at = r.offset;
    while at < r.offset + r.len {
        let word_start = at & !7;
        let word_end = (word_start + 8).min(r.offset + r.len);
        if mask >> (words % 64) & 1 == 1 {
            let (o, n) = (at as usize, (word_end - at) as usize);
            dst.0[0].borrow_mut()[o..o + n].copy_from_slice(&src[o..o + n]);
        }
        at = word_end;
        words += 1;
    }
}

#[test]
fn a_crash_after_any_prefix_of_a_plan_keeps_every_acknowledged_write_and_no_phantom() {
    let geo = params().geometry().unwrap();
    let (mut p, pmem) = store(geo);
    let bmem = Mem::new(&geo);
    let mut gen = OpGen {
        rng: SplitMix64::new(23),
        keys: 30,
    };
    let mut tear = SplitMix64::new(5);
    let mut model = MapBackend::default();
    let mut scratch = vec![0u8; 1024];
    let mut cases = 0;
    let mut outcomes = [0u64; 2];
    for version in 1..=500u64 {
        let before_region = pmem.region();
        let (key, value, kind, delta, expected) = gen.next(&model);
        let op = op_of(&key, &value, kind, delta, &expected);
        let a = p.apply(&op, version, Some((version % 5, version)), &mut scratch);
        let before = model_contents(&model);
        crate::kv::apply_write(&mut model, &op);
        let after = model_contents(&model);
        let after_region = pmem.region();
        let ranges = a.plan.ranges();
        // Every prefix, the next WRITE not placed, whole, or torn (a few
        // random subsets of its words).
        for k in 0..ranges.len() {
            for variant in 0..4 {
                bmem.set_region(&before_region);
                for r in &ranges[..k] {
                    place_torn(&bmem, &after_region, *r, u64::MAX);
                }
                let mask = match variant {
                    0 => 0,
                    1 => u64::MAX,
                    _ => tear.next_u64(),
                };
                place_torn(&bmem, &after_region, ranges[k], mask);
                let mut b = Store::attach(bmem.clone(), geo, REGION, LOCAL);
                let report = b.recover(&mut scratch).unwrap();
                let got = contents(&b);
                let outcome = if got == before {
                    0
                } else if got == after {
                    1
                } else {
                    panic!(
                        "op {version} {op:?}, crash after {k} of {} WRITEs (variant {variant}): \
                         neither before nor after; {report:?}",
                        ranges.len()
                    )
                };
                outcomes[outcome] += 1;
                // The client's record says the write happened exactly
                // when it did (a retry is answered from it, or runs it).
                let recorded = b
                    .session(version % 5)
                    .is_some_and(|r| r.request_id == version && r.reply == a.reply);
                if a.effect != Effect::None && before != after {
                    assert_eq!(
                        recorded,
                        outcome == 1,
                        "op {version}, crash after {k} WRITEs (variant {variant}): {report:?}"
                    );
                }
                assert_clean(&b);
                // The promoted copy goes on serving: a write on top.
                let more = b.apply(
                    &KvOp::Set {
                        key: b"after-crash",
                        value: &[7; 100],
                    },
                    1 << 40,
                    None,
                    &mut scratch,
                );
                assert!(matches!(
                    more.reply,
                    KvReply::Ok | KvReply::Err(KvError::StoreFull)
                ));
                assert_clean(&b);
                cases += 1;
            }
        }
    }
    assert!(cases > 1000, "{cases}");
    // Both outcomes happen: the entry is the commit point.
    assert!(outcomes[0] > 100 && outcomes[1] > 100, "{outcomes:?}");
}

#[test]
fn recovery_of_a_corrupted_region_never_panics_and_leaves_a_consistent_store() {
    let geo = params().geometry().unwrap();
    let (mut p, pmem) = store(geo);
    let mut gen = OpGen {
        rng: SplitMix64::new(31),
        keys: 40,
    };
    let mut model = MapBackend::default();
    let mut scratch = vec![0u8; 1024];
    for version in 1..=400u64 {
        let (key, value, kind, delta, expected) = gen.next(&model);
        let op = op_of(&key, &value, kind, delta, &expected);
        p.apply(&op, version, Some((version % 5, version)), &mut scratch);
        crate::kv::apply_write(&mut model, &op);
    }
    let good = pmem.region();
    let mut rng = SplitMix64::new(99);
    let mut recovered = 0;
    for _ in 0..300 {
        let mem = Mem::new(&geo);
        mem.set_region(&good);
        // Garbage words in the metadata (past the header) and the heap.
        for _ in 0..rng.range_inclusive(1, 40) {
            let word = if rng.chance(2, 3) {
                rng.range_inclusive(3, geo.heap_offset / 8 - 1)
            } else {
                rng.range_inclusive(geo.heap_offset / 8, geo.region_bytes / 8 - 1)
            };
            let value = match rng.range_inclusive(0, 3) {
                0 => 0,
                1 => rng.range_inclusive(0, 200),
                2 => rng.next_u64() & 0xFFFF_FFFF_0000_00FF,
                _ => rng.next_u64(),
            };
            mem.store_u64(REGION.add(8 * word), value);
        }
        let mut s = Store::attach(mem.clone(), geo, REGION, LOCAL);
        match s.recover(&mut scratch) {
            // The count of slabs carved is beyond the heap: nothing says
            // which are, the copy is refused (a bulk copy replaces it).
            Err(RecoverError::ControlCorrupt) => {
                assert!(s.slabs_carved() > params().slab_count);
                continue;
            }
            Err(e) => panic!("{e:?}"),
            Ok(_) => recovered += 1,
        }
        assert_clean(&s);
        for version in 1..=60u64 {
            let (key, value, kind, delta, expected) = gen.next(&model);
            let op = op_of(&key, &value, kind, delta, &expected);
            s.apply(&op, 1000 + version, None, &mut scratch);
        }
        assert_clean(&s);
    }
    assert!(recovered > 250, "{recovered}");
    // A region without the header is refused.
    let mem = Mem::new(&geo);
    let mut s = Store::attach(mem, geo, REGION, LOCAL);
    assert_eq!(s.recover(&mut scratch), Err(RecoverError::NotFormatted));
}

#[test]
fn typical_writes_need_few_allocator_writes_and_a_carved_slab_is_forwarded() {
    let geo = params().geometry().unwrap();
    let (mut s, _) = store(geo);
    let mut scratch = vec![0u8; 1024];
    // The first write carves a slab: control, slab map, descriptor.
    let a = s.apply(
        &KvOp::Set {
            key: b"a",
            value: b"1",
        },
        1,
        None,
        &mut scratch,
    );
    assert_eq!(a.plan.alloc_ranges, 3);
    assert_eq!(a.plan.ranges().len(), 5, "{:?}", a.plan);
    // A new key of that class: the descriptor, the item, the entry.
    let a = s.apply(
        &KvOp::Set {
            key: b"b",
            value: b"2",
        },
        2,
        None,
        &mut scratch,
    );
    assert_eq!(
        (a.plan.alloc_ranges, a.plan.ranges().len()),
        (1, 3),
        "{:?}",
        a.plan
    );
    // An update of the same class: descriptor, item, entry, link, and
    // the descriptor again (counted once).
    let a = s.apply(
        &KvOp::Set {
            key: b"b",
            value: b"3",
        },
        3,
        None,
        &mut scratch,
    );
    assert_eq!(
        (a.plan.alloc_ranges, a.plan.ranges().len()),
        (2, 5),
        "{:?}",
        a.plan
    );
    // A delete: entry, link, descriptor.
    let a = s.apply(&KvOp::Del { key: b"a" }, 4, None, &mut scratch);
    assert_eq!(
        (a.plan.alloc_ranges, a.plan.ranges().len()),
        (2, 3),
        "{:?}",
        a.plan
    );
    assert_eq!(a.effect, Effect::Delete { entry: 0 });
    // The plan's order: the entry before the free, the item before the
    // entry.
    let a = s.apply(
        &KvOp::Set {
            key: b"b",
            value: b"4",
        },
        5,
        None,
        &mut scratch,
    );
    let r = a.plan.ranges();
    assert!(
        r[1].offset >= geo.heap_offset && r[2].offset == geo.entry_offset(1),
        "{r:?}"
    );
}
