//! The driver's own contract: completions reach the engine whose tag they
//! carry, requests are validated by the service before they reach the log,
//! and clients are answered from the engines' events.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use verbatim_core::engine::EngineTag;
use verbatim_core::fabric::{
    Access, Addr, Channel, Completion, Fabric, FabricError, MemberId, Op, RegionId, WcStatus,
    WorkRequest, WrId, REGIONS_MAX,
};
use verbatim_core::kv::{KvBackend, KvLimits, KvOp, KvReply, KvStateMachine};
use verbatim_core::{Config, Layout, Memory};
use verbatim_driver::{Answer, Driver, Host, Incoming, Refusal};

#[derive(Clone)]
struct VecMemory(Rc<[RefCell<Vec<u8>>; REGIONS_MAX]>);

impl VecMemory {
    fn new(layout: &Layout) -> VecMemory {
        VecMemory(Rc::new(std::array::from_fn(|i| {
            RefCell::new(vec![0; layout.region_bytes(RegionId(i as u8)) as usize])
        })))
    }
}

impl Memory for VecMemory {
    fn load_u64(&self, at: Addr) -> u64 {
        let r = self.0[at.region.index()].borrow();
        let o = at.offset as usize;
        u64::from_le_bytes(r[o..o + 8].try_into().unwrap())
    }
    fn store_u64(&self, at: Addr, value: u64) {
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

#[derive(Default)]
struct MapKv(BTreeMap<Vec<u8>, Vec<u8>>);
impl KvBackend for MapKv {
    fn get(&self, k: &[u8]) -> Option<&[u8]> {
        self.0.get(k).map(Vec::as_slice)
    }
    fn set(&mut self, k: &[u8], v: &[u8]) -> Result<(), ()> {
        self.0.insert(k.to_vec(), v.to_vec());
        Ok(())
    }
    fn del(&mut self, k: &[u8]) -> bool {
        self.0.remove(k).is_some()
    }
    fn for_each(&self, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        for (k, v) in &self.0 {
            if !visit(k, v) {
                break;
            }
        }
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

type Kv = KvStateMachine<MapKv>;
const LIMITS: KvLimits = KvLimits {
    key_bytes_max: 16,
    value_bytes_max: 64,
};

/// Records posts; completes nothing by itself.
#[derive(Default)]
struct RecordingFabric {
    posted: Vec<WorkRequest>,
    cq: VecDeque<Completion>,
}

impl Fabric for RecordingFabric {
    fn post(&mut self, wr: &WorkRequest) {
        self.posted.push(*wr);
    }
    fn poll_completion(&mut self) -> Option<Completion> {
        self.cq.pop_front()
    }
    fn set_access(&mut self, _: MemberId, _: RegionId, _: Access) -> Result<(), FabricError> {
        Ok(())
    }
    fn reconnect(&mut self, _: MemberId, _: Channel) -> Result<(), FabricError> {
        Ok(())
    }
}

#[derive(Default)]
struct TestHost {
    inbox: VecDeque<Incoming<u64>>,
    answers: Vec<(u64, String)>,
}

impl Host<VecMemory, Kv> for TestHost {
    type Route = u64;
    fn take_peer_down(&mut self) -> Option<MemberId> {
        None
    }
    fn next_request(&mut self) -> Option<Incoming<u64>> {
        self.inbox.pop_front()
    }
    fn answer(&mut self, route: u64, answer: Answer<'_>) {
        let text = match answer {
            Answer::Ok(b) => format!("ok {b:?}"),
            Answer::NotLeader(h) => format!("not-leader {h:?}"),
            Answer::Busy => "busy".into(),
            Answer::Refused(r) => format!("refused {}", r.message()),
        };
        self.answers.push((route, text));
    }
}

fn driver(members: u8) -> (Driver<VecMemory, Kv, u64>, Config) {
    let mut cfg = Config::new(members, MemberId(0));
    cfg.log_ring_bytes = 16 * 1024;
    cfg.entry_payload_bytes_max = 256;
    cfg.session_slot_count = 16;
    let layout = Layout::new(&cfg).unwrap();
    let mem = VecMemory::new(&layout);
    let d = Driver::new(cfg.clone(), mem, Kv::new(MapKv::default(), LIMITS), 0, 65).unwrap();
    (d, cfg)
}

fn encode(op: KvOp<'_>) -> Vec<u8> {
    let mut buf = [0u8; 128];
    let n = op.encode(&mut buf).unwrap();
    buf[..n].to_vec()
}

#[test]
fn completions_reach_the_engine_whose_tag_they_carry() {
    let (mut d, _) = driver(3);
    let mut fabric = RecordingFabric::default();
    let mut host = TestHost::default();
    d.step(1, &mut fabric, &mut host);
    let tags: Vec<EngineTag> = fabric
        .posted
        .iter()
        .map(|wr| EngineTag::split(wr.wr_id).0)
        .collect();
    assert!(
        tags.contains(&EngineTag::LOG),
        "the log engine pushes its row"
    );
    assert!(
        tags.contains(&EngineTag::HEARTBEAT),
        "the heartbeat engine reads counters"
    );
    let reads: Vec<WorkRequest> = fabric
        .posted
        .iter()
        .copied()
        .filter(|wr| EngineTag::split(wr.wr_id).0 == EngineTag::HEARTBEAT)
        .collect();
    assert_eq!(reads.len(), 2, "one counter READ per peer");
    assert!(reads.iter().all(
        |wr| matches!(wr.op, Op::Read { remote, .. } if remote.region == RegionId::Heartbeat)
    ));
    for wr in &reads {
        fabric.cq.push_back(Completion {
            wr_id: wr.wr_id,
            peer: wr.peer,
            status: WcStatus::Ok,
        });
    }
    // A completion whose tag names no engine is counted, never delivered.
    fabric.cq.push_back(Completion {
        wr_id: EngineTag(7).tag(WrId(1)),
        peer: MemberId(1),
        status: WcStatus::Ok,
    });
    d.step(2, &mut fabric, &mut host);
    let hb = &d.engines().heartbeat;
    assert_eq!(hb.peer(MemberId(1)).reads_ok, 1);
    assert_eq!(hb.peer(MemberId(2)).reads_ok, 1);
    assert_eq!(d.counters().completions_unrouted, 1);
    assert_eq!(
        d.log().counters().completions_unknown,
        0,
        "the log engine never saw the heartbeat engine's completions"
    );
}

#[test]
fn requests_are_checked_by_the_service_and_answered_from_the_log() {
    // One member: it elects itself and commits alone.
    let (mut d, cfg) = driver(1);
    let mut fabric = RecordingFabric::default();
    let mut host = TestHost::default();
    let mut now = 0;
    while d.log().role() != verbatim_core::Role::Leader {
        now = d.next_deadline().max(now + 1);
        assert!(now < 10 * cfg.election_timeout_max_ns, "no leader");
        d.step(now, &mut fabric, &mut host);
    }
    let appended = d.log().counters().entries_appended;
    let set = encode(KvOp::Set {
        key: b"k",
        value: b"v1",
    });
    let get = encode(KvOp::Get { key: b"k" });
    host.inbox.push_back(Incoming {
        client_id: 9,
        request_id: 1,
        write: true,
        payload: vec![0xFF, 1, 2],
        route: 1,
    });
    host.inbox.push_back(Incoming {
        client_id: 9,
        request_id: 2,
        write: false,
        payload: set.clone(),
        route: 2,
    });
    host.inbox.push_back(Incoming {
        client_id: 9,
        request_id: 3,
        write: true,
        payload: set,
        route: 3,
    });
    for _ in 0..20 {
        now += 1_000;
        d.step(now, &mut fabric, &mut host);
    }
    host.inbox.push_back(Incoming {
        client_id: 9,
        request_id: 4,
        write: false,
        payload: get,
        route: 4,
    });
    for _ in 0..20 {
        now += 1_000;
        d.step(now, &mut fabric, &mut host);
    }
    let answers: BTreeMap<u64, String> = host.answers.into_iter().collect();
    assert_eq!(
        answers[&1],
        format!("refused {}", Refusal::Malformed.message())
    );
    assert_eq!(
        answers[&2],
        format!("refused {}", Refusal::WrongKind.message())
    );
    let ok = KvReply::Ok.to_bytes();
    assert_eq!(answers[&3], format!("ok {:?}", &ok[..]));
    assert_eq!(answers[&4], format!("ok {:?}", b"\x01v1"));
    assert_eq!(
        d.log().counters().entries_appended,
        appended + 1,
        "only the valid write reached the log"
    );
    assert_eq!(d.counters().requests_refused, 2);
    assert_eq!(d.pending(), (0, 0));
}

#[test]
fn a_request_that_comes_during_an_election_is_served_when_it_ends() {
    // One member, before its first election: no leader is known yet.
    let (mut d, cfg) = driver(1);
    let mut fabric = RecordingFabric::default();
    let mut host = TestHost::default();
    host.inbox.push_back(Incoming {
        client_id: 9,
        request_id: 1,
        write: true,
        payload: encode(KvOp::Set {
            key: b"k",
            value: b"v",
        }),
        route: 1,
    });
    d.step(1, &mut fabric, &mut host);
    assert!(
        host.answers.is_empty(),
        "held, not refused: {:?}",
        host.answers
    );
    assert_eq!(d.pending(), (1, 0));
    assert!(
        d.next_deadline() <= 1 + cfg.election_timeout_max_ns,
        "the loop wakes for the hold's end at the latest"
    );
    let mut now = 1;
    while host.answers.is_empty() {
        now = d.next_deadline().max(now + 1);
        assert!(now < 10 * cfg.election_timeout_max_ns, "never answered");
        d.step(now, &mut fabric, &mut host);
    }
    assert_eq!(d.log().role(), verbatim_core::Role::Leader);
    let ok = KvReply::Ok.to_bytes();
    assert_eq!(host.answers, vec![(1, format!("ok {:?}", &ok[..]))]);
    assert_eq!(d.pending(), (0, 0));
}

#[test]
fn a_request_held_while_no_leader_emerges_is_answered_no_leader_in_time() {
    // Three members whose peers never answer: no election can end.
    let (mut d, cfg) = driver(3);
    let mut fabric = RecordingFabric::default();
    let mut host = TestHost::default();
    host.inbox.push_back(Incoming {
        client_id: 9,
        request_id: 1,
        write: false,
        payload: encode(KvOp::Get { key: b"k" }),
        route: 7,
    });
    d.step(1, &mut fabric, &mut host);
    let until = 1 + cfg.election_timeout_max_ns;
    let mut now = 1;
    while now < until {
        assert!(host.answers.is_empty(), "answered before the hold ended");
        assert_eq!(d.pending(), (0, 1));
        now = (now + cfg.election_timeout_max_ns / 8).min(until);
        d.step(now, &mut fabric, &mut host);
    }
    assert_eq!(host.answers, vec![(7, "not-leader None".to_string())]);
    assert_eq!(d.pending(), (0, 0));
}
