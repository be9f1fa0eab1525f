//! The fabric conformance suite: one set of checks that every
//! implementation of [`verbatim_core::fabric::Fabric`] must pass (the
//! simulator's, the shared-memory fabric and the ibverbs fabric), so that
//! the protocol sees the same one-sided semantics on all of them:
//! per-channel order, completions with ids and statuses, CAS and
//! fetch-and-add, revocation, errors when the peer is gone.
//!
//! A fabric is tested through a [`FabricHarness`] that owns three or more
//! members. Each check returns `Err(description)` on the first deviation.

use crate::loggp::NetParams;
use crate::memory::SimMemory;
use crate::net::{Net, NetEvent, Schedule};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use verbatim_core::fabric::{
    Access, Addr, Channel, Completion, Fabric, FabricError, MemberId, Op, RegionId, WcStatus,
    WorkRequest, WrId,
};
use verbatim_core::layout::Layout;
use verbatim_core::mem::Memory;
use verbatim_core::Config;

/// Three or more members of one fabric, for the suite.
pub trait FabricHarness {
    /// The fabric endpoint type.
    type F: Fabric;
    /// Their layout.
    fn layout(&self) -> Layout;
    /// A member's endpoint.
    fn fabric(&mut self, m: MemberId) -> &mut Self::F;
    /// A member's registered memory (for set-up and inspection).
    fn memory(&self, m: MemberId) -> &dyn Memory;
    /// The next completion of `m`, waiting (in real or virtual time) at most
    /// a few seconds; `None` if nothing completes.
    fn next_completion(&mut self, m: MemberId) -> Option<Completion>;
    /// Kills `m` (its process and memory are gone).
    fn kill(&mut self, m: MemberId);
    /// A short name, for messages.
    fn name(&self) -> &'static str;
}

/// One check of the suite.
pub type Check<H> = fn(&mut H) -> Result<(), String>;

/// Every check of the suite, by name.
pub fn checks<H: FabricHarness>() -> Vec<(&'static str, Check<H>)> {
    vec![
        ("write then read back", write_then_read_back::<H>),
        (
            "order and completions per channel",
            order_and_completions::<H>,
        ),
        ("compare-and-swap and fetch-and-add", atomics::<H>),
        ("revoked access stops writes", revoke::<H>),
        ("private regions are not accessible", private_regions::<H>),
        ("malformed requests complete with an error", malformed::<H>),
        ("a dead peer yields error completions", dead_peer::<H>),
        (
            "a write in flight never lands after a revoke",
            write_in_flight_during_revoke::<H>,
        ),
        (
            "a stale write never lands after a re-grant",
            stale_write_after_regrant::<H>,
        ),
        (
            "a peer dying mid-operation completes everything",
            peer_dies_mid_operation::<H>,
        ),
        (
            "slot words take CAS from every member, their owner's own included",
            slot_words_and_loopback::<H>,
        ),
    ]
}

/// The configuration every harness builds its members' layout from: three
/// members with views on, so that the layout has the coordinators' slot
/// words (which a member CASes in its own memory through the fabric).
pub fn suite_config(me: MemberId) -> Config {
    let mut c = Config::new(3, me);
    c.lease_ns = 50_000;
    c
}

/// Runs every check on fresh harnesses made by `make`; returns the failures.
pub fn run_all<H: FabricHarness>(mut make: impl FnMut() -> H) -> Vec<String> {
    let mut failures = Vec::new();
    for (name, check) in checks::<H>() {
        let mut h = make();
        if let Err(e) = check(&mut h) {
            failures.push(format!("{} fabric: {name}: {e}", h.name()));
        }
    }
    failures
}

const A: MemberId = MemberId(0);
const B: MemberId = MemberId(1);
const C: MemberId = MemberId(2);

fn post<H: FabricHarness>(h: &mut H, from: MemberId, id: u64, peer: MemberId, op: Op) {
    h.fabric(from).post(&WorkRequest {
        wr_id: WrId(id),
        peer,
        op,
        notify: false,
    });
}

fn expect<H: FabricHarness>(
    h: &mut H,
    m: MemberId,
    id: u64,
    status: WcStatus,
) -> Result<(), String> {
    match h.next_completion(m) {
        Some(c) if c.wr_id == WrId(id) && c.status == status => Ok(()),
        Some(c) => Err(format!("expected completion {id} {status:?}, got {c:?}")),
        None => Err(format!("expected completion {id} {status:?}, got nothing")),
    }
}

fn expect_error<H: FabricHarness>(
    h: &mut H,
    m: MemberId,
    id: u64,
    allowed: &[WcStatus],
) -> Result<WcStatus, String> {
    match h.next_completion(m) {
        Some(c) if c.wr_id == WrId(id) && allowed.contains(&c.status) => Ok(c.status),
        Some(c) => Err(format!(
            "expected completion {id} with one of {allowed:?}, got {c:?}"
        )),
        None => Err(format!("expected completion {id}, got nothing")),
    }
}

fn scratch(l: &Layout, offset: u64) -> Addr {
    // Past the staging rows: free scratch space for the suite's buffers.
    Addr::new(RegionId::Scratch, l.scratch.row_landing_offset + offset)
}

fn write_then_read_back<H: FabricHarness>(h: &mut H) -> Result<(), String> {
    let l = h.layout();
    let data: Vec<u8> = (0..=190u8).collect();
    h.memory(A).write(scratch(&l, 0), &data);
    let remote = Addr::new(RegionId::Control, 0);
    post(
        h,
        A,
        1,
        B,
        Op::Write {
            local: scratch(&l, 0),
            remote,
            len: data.len() as u32,
        },
    );
    expect(h, A, 1, WcStatus::Ok)?;
    let mut landed = vec![0u8; data.len()];
    h.memory(B).read(remote, &mut landed);
    if landed != data {
        return Err("written bytes differ at the target".into());
    }
    post(
        h,
        A,
        2,
        B,
        Op::Read {
            remote,
            local: scratch(&l, 256),
            len: data.len() as u32,
        },
    );
    expect(h, A, 2, WcStatus::Ok)?;
    let mut back = vec![0u8; data.len()];
    h.memory(A).read(scratch(&l, 256), &mut back);
    if back != data {
        return Err("read bytes differ".into());
    }
    let mut d = [0u8; 16];
    d[..5].copy_from_slice(b"hello");
    post(
        h,
        A,
        3,
        C,
        Op::WriteInline {
            remote: Addr::new(RegionId::Control, 8),
            len: 5,
            data: d,
        },
    );
    expect(h, A, 3, WcStatus::Ok)?;
    let mut got = [0u8; 5];
    h.memory(C).read(Addr::new(RegionId::Control, 8), &mut got);
    if &got != b"hello" {
        return Err("inline write did not land".into());
    }
    Ok(())
}

fn order_and_completions<H: FabricHarness>(h: &mut H) -> Result<(), String> {
    let l = h.layout();
    let word = Addr::new(RegionId::Control, 64);
    // Writes of increasing values to one word, each followed by a read of
    // it: on one channel every read sees the write posted just before it.
    const N: u64 = 32;
    for k in 0..N {
        post(h, A, 100 + 2 * k, B, Op::write_u64(word, k + 1));
        post(
            h,
            A,
            101 + 2 * k,
            B,
            Op::Read {
                remote: word,
                local: scratch(&l, 8 * k),
                len: 8,
            },
        );
    }
    for k in 0..2 * N {
        expect(h, A, 100 + k, WcStatus::Ok)
            .map_err(|e| format!("completions out of order: {e}"))?;
    }
    for k in 0..N {
        let seen = h.memory(A).load_u64(scratch(&l, 8 * k));
        if seen != k + 1 {
            return Err(format!("read {k} saw {seen}, expected {}", k + 1));
        }
    }
    if h.memory(B).load_u64(word) != N {
        return Err("last write did not win".into());
    }
    Ok(())
}

fn atomics<H: FabricHarness>(h: &mut H) -> Result<(), String> {
    let l = h.layout();
    let word = Addr::new(RegionId::Control, 128);
    h.memory(B).store_u64(word, 7);
    post(
        h,
        A,
        1,
        B,
        Op::CompareSwap {
            remote: word,
            local: scratch(&l, 0),
            expect: 7,
            swap: 9,
        },
    );
    expect(h, A, 1, WcStatus::Ok)?;
    if h.memory(A).load_u64(scratch(&l, 0)) != 7 || h.memory(B).load_u64(word) != 9 {
        return Err("successful CAS: old value or swap wrong".into());
    }
    post(
        h,
        A,
        2,
        B,
        Op::CompareSwap {
            remote: word,
            local: scratch(&l, 8),
            expect: 7,
            swap: 11,
        },
    );
    expect(h, A, 2, WcStatus::Ok)?;
    if h.memory(A).load_u64(scratch(&l, 8)) != 9 || h.memory(B).load_u64(word) != 9 {
        return Err("failed CAS must not swap and must return the current value".into());
    }
    post(
        h,
        C,
        3,
        B,
        Op::FetchAdd {
            remote: word,
            local: scratch(&l, 16),
            add: 5,
        },
    );
    expect(h, C, 3, WcStatus::Ok)?;
    if h.memory(C).load_u64(scratch(&l, 16)) != 9 || h.memory(B).load_u64(word) != 14 {
        return Err("fetch-and-add wrong".into());
    }
    Ok(())
}

/// The coordinators' slot words are remote memory for every member, and a
/// member posts requests to its own memory too (a loopback request: a
/// coordinator CASes its own word through the fabric, because a CPU atomic
/// is not atomic with a NIC's). Its CAS, READ and a failed CAS behave as a
/// peer's do, interleaved with a peer's on the same word.
fn slot_words_and_loopback<H: FabricHarness>(h: &mut H) -> Result<(), String> {
    let l = h.layout();
    let c = l
        .consensus
        .ok_or("the suite's layout has no slot words (views off)")?;
    let word = c.slot_word(1);
    let before = h.memory(A).load_u64(word);
    let (x, y) = (before ^ 0x5A5A, before ^ 0xA5A5_0000);
    // A peer swaps it.
    let cas = |expect, swap, at| Op::CompareSwap {
        remote: word,
        local: scratch(&l, at),
        expect,
        swap,
    };
    post(h, B, 1, A, cas(before, x, 0));
    expect(h, B, 1, WcStatus::Ok)?;
    if h.memory(B).load_u64(scratch(&l, 0)) != before || h.memory(A).load_u64(word) != x {
        return Err("a peer's CAS on a slot word: old value or swap wrong".into());
    }
    // Its owner swaps it through the fabric.
    post(h, A, 2, A, cas(x, y, 8));
    expect(h, A, 2, WcStatus::Ok)?;
    if h.memory(A).load_u64(scratch(&l, 8)) != x || h.memory(A).load_u64(word) != y {
        return Err(format!(
            "the owner's own CAS: returned {:#x} (want {x:#x}), word {:#x} (want {y:#x})",
            h.memory(A).load_u64(scratch(&l, 8)),
            h.memory(A).load_u64(word)
        ));
    }
    // A failed own CAS returns the current value and swaps nothing.
    post(h, A, 3, A, cas(x, before, 16));
    expect(h, A, 3, WcStatus::Ok)?;
    if h.memory(A).load_u64(scratch(&l, 16)) != y || h.memory(A).load_u64(word) != y {
        return Err("a failed own CAS must not swap and must return the current value".into());
    }
    // The owner READs its own word, another peer READs it: both see y.
    let read = |at| Op::Read {
        remote: word,
        local: scratch(&l, at),
        len: 8,
    };
    post(h, A, 4, A, read(24));
    post(h, C, 5, A, read(32));
    expect(h, A, 4, WcStatus::Ok)?;
    expect(h, C, 5, WcStatus::Ok)?;
    if h.memory(A).load_u64(scratch(&l, 24)) != y || h.memory(C).load_u64(scratch(&l, 32)) != y {
        return Err("READs of a slot word after an own CAS do not see it".into());
    }
    // And the peer's next CAS sees the owner's swap.
    post(h, C, 6, A, cas(y, before, 40));
    expect(h, C, 6, WcStatus::Ok)?;
    if h.memory(A).load_u64(word) != before {
        return Err("a peer's CAS after the owner's own did not swap".into());
    }
    Ok(())
}

fn revoke<H: FabricHarness>(h: &mut H) -> Result<(), String> {
    let tail = Addr::new(RegionId::Log, 8);
    h.fabric(B)
        .set_access(A, RegionId::Log, Access::Granted)
        .map_err(|e| format!("grant: {e:?}"))?;
    post(h, A, 1, B, Op::write_u64(tail, 42));
    expect(h, A, 1, WcStatus::Ok)?;
    h.fabric(B)
        .set_access(A, RegionId::Log, Access::Revoked)
        .map_err(|e| format!("revoke: {e:?}"))?;
    // Once the revoke returned, no write from A lands.
    post(h, A, 2, B, Op::write_u64(tail, 43));
    expect_error(h, A, 2, &[WcStatus::AccessDenied])?;
    post(h, A, 3, B, Op::write_u64(tail, 44));
    expect_error(h, A, 3, &[WcStatus::Flushed, WcStatus::AccessDenied])?;
    if h.memory(B).load_u64(tail) != 42 {
        return Err("a write landed after the revoke".into());
    }
    // The control channel is unaffected (DARE: separate QPs).
    post(
        h,
        A,
        4,
        B,
        Op::write_u64(Addr::new(RegionId::Control, 0), 5),
    );
    expect(h, A, 4, WcStatus::Ok)
        .map_err(|e| format!("control channel hurt by a log revoke: {e}"))?;
    // Other peers keep their own access.
    h.fabric(B)
        .set_access(C, RegionId::Log, Access::Granted)
        .map_err(|e| format!("{e:?}"))?;
    post(h, C, 5, B, Op::write_u64(tail, 50));
    expect(h, C, 5, WcStatus::Ok)?;
    // Granted again and reconnected, A writes again.
    h.fabric(B)
        .set_access(A, RegionId::Log, Access::Granted)
        .map_err(|e| format!("{e:?}"))?;
    h.fabric(A)
        .reconnect(B, Channel::Log)
        .map_err(|e| format!("reconnect: {e:?}"))?;
    post(h, A, 6, B, Op::write_u64(tail, 45));
    expect(h, A, 6, WcStatus::Ok)?;
    if h.memory(B).load_u64(tail) != 45 {
        return Err("write after re-grant did not land".into());
    }
    Ok(())
}

fn private_regions<H: FabricHarness>(h: &mut H) -> Result<(), String> {
    let before = h.memory(B).load_u64(Addr::new(RegionId::Scratch, 0));
    post(
        h,
        A,
        1,
        B,
        Op::write_u64(Addr::new(RegionId::Scratch, 0), 0xBAD),
    );
    expect_error(h, A, 1, &[WcStatus::AccessDenied, WcStatus::InvalidRequest])?;
    if h.memory(B).load_u64(Addr::new(RegionId::Scratch, 0)) != before {
        return Err("a peer wrote into a private region".into());
    }
    post(h, A, 2, B, Op::write_u64(Addr::new(RegionId::Log, 0), 1));
    expect_error(h, A, 2, &[WcStatus::AccessDenied])?;
    Ok(())
}

fn malformed<H: FabricHarness>(h: &mut H) -> Result<(), String> {
    let l = h.layout();
    let beyond = Addr::new(RegionId::Control, l.control_bytes);
    post(h, A, 1, B, Op::write_u64(beyond, 1));
    expect_error(h, A, 1, &[WcStatus::InvalidRequest, WcStatus::AccessDenied])?;
    // A request to a member that does not exist is refused, not lost.
    post(
        h,
        A,
        2,
        MemberId(200),
        Op::write_u64(Addr::new(RegionId::Control, 0), 1),
    );
    let c = h
        .next_completion(A)
        .ok_or("no completion for a request to an unknown member")?;
    if c.wr_id != WrId(2) || c.status.is_ok() {
        return Err(format!("request to an unknown member: {c:?}"));
    }
    Ok(())
}

fn dead_peer<H: FabricHarness>(h: &mut H) -> Result<(), String> {
    post(
        h,
        A,
        1,
        C,
        Op::write_u64(Addr::new(RegionId::Control, 0), 1),
    );
    expect(h, A, 1, WcStatus::Ok)?;
    h.kill(C);
    post(
        h,
        A,
        2,
        C,
        Op::write_u64(Addr::new(RegionId::Control, 0), 2),
    );
    post(
        h,
        A,
        3,
        C,
        Op::write_u64(Addr::new(RegionId::Control, 0), 3),
    );
    expect_error(h, A, 2, &[WcStatus::Unreachable])?;
    expect_error(h, A, 3, &[WcStatus::Flushed, WcStatus::Unreachable])?;
    // Other peers are unaffected.
    post(
        h,
        A,
        4,
        B,
        Op::write_u64(Addr::new(RegionId::Control, 0), 4),
    );
    expect(h, A, 4, WcStatus::Ok)?;
    Ok(())
}

/// Drains `m`'s completions for ids `ids` (any order), returning their
/// statuses; an id that never completes is an error.
fn drain<H: FabricHarness>(
    h: &mut H,
    m: MemberId,
    ids: &[u64],
) -> Result<Vec<(u64, WcStatus)>, String> {
    let mut got = Vec::new();
    while got.len() < ids.len() {
        match h.next_completion(m) {
            Some(c) if ids.contains(&c.wr_id.0) => got.push((c.wr_id.0, c.status)),
            Some(c) => return Err(format!("unexpected completion {c:?}")),
            None => {
                return Err(format!(
                    "completions of {ids:?} missing (got {got:?}): a request was lost"
                ))
            }
        }
    }
    Ok(got)
}

fn write_in_flight_during_revoke<H: FabricHarness>(h: &mut H) -> Result<(), String> {
    let tail = Addr::new(RegionId::Log, 8);
    h.fabric(B)
        .set_access(A, RegionId::Log, Access::Granted)
        .map_err(|e| format!("grant: {e:?}"))?;
    post(h, A, 1, B, Op::write_u64(tail, 7));
    expect(h, A, 1, WcStatus::Ok)?;
    // Posted, then revoked before it may have arrived.
    post(h, A, 2, B, Op::write_u64(tail, 8));
    h.fabric(B)
        .set_access(A, RegionId::Log, Access::Revoked)
        .map_err(|e| format!("revoke: {e:?}"))?;
    let at_revoke = h.memory(B).load_u64(tail);
    let done = drain(h, A, &[2])?;
    let now = h.memory(B).load_u64(tail);
    if now != at_revoke {
        return Err(format!(
            "the write landed after the revoke returned ({at_revoke} then {now}; {done:?})"
        ));
    }
    if now == 8 && done[0].1 != WcStatus::Ok {
        return Err(format!(
            "the write landed but completed with {:?}",
            done[0].1
        ));
    }
    Ok(())
}

fn stale_write_after_regrant<H: FabricHarness>(h: &mut H) -> Result<(), String> {
    let tail = Addr::new(RegionId::Log, 8);
    h.fabric(B)
        .set_access(A, RegionId::Log, Access::Granted)
        .map_err(|e| format!("grant: {e:?}"))?;
    post(h, A, 1, B, Op::write_u64(tail, 1));
    expect(h, A, 1, WcStatus::Ok)?;
    // A stale write in flight across a revoke and a re-grant (DARE: a
    // voter revokes the old leader and grants again): it belongs to the
    // old grant and must not land under the new one.
    post(h, A, 2, B, Op::write_u64(tail, 2));
    h.fabric(B)
        .set_access(A, RegionId::Log, Access::Revoked)
        .map_err(|e| format!("revoke: {e:?}"))?;
    h.fabric(B)
        .set_access(A, RegionId::Log, Access::Granted)
        .map_err(|e| format!("re-grant: {e:?}"))?;
    let at_regrant = h.memory(B).load_u64(tail);
    drain(h, A, &[2])?;
    let now = h.memory(B).load_u64(tail);
    if now != at_regrant {
        return Err(format!(
            "a write posted under the old grant landed under the new one ({at_regrant} then {now})"
        ));
    }
    // Under the new grant, after reconnecting, writes land.
    h.fabric(A)
        .reconnect(B, Channel::Log)
        .map_err(|e| format!("reconnect: {e:?}"))?;
    post(h, A, 3, B, Op::write_u64(tail, 3));
    expect(h, A, 3, WcStatus::Ok)?;
    if h.memory(B).load_u64(tail) != 3 {
        return Err("a write under the new grant did not land".into());
    }
    Ok(())
}

fn peer_dies_mid_operation<H: FabricHarness>(h: &mut H) -> Result<(), String> {
    let l = h.layout();
    let row = Addr::new(RegionId::Control, 0);
    // A mix in flight towards C when it dies: writes, a read, an atomic.
    post(h, A, 1, C, Op::write_u64(row, 1));
    post(
        h,
        A,
        2,
        C,
        Op::Read {
            local: scratch(&l, 0),
            remote: row,
            len: 64,
        },
    );
    h.kill(C);
    post(h, A, 3, C, Op::write_u64(row, 3));
    post(
        h,
        A,
        4,
        C,
        Op::FetchAdd {
            local: scratch(&l, 64),
            remote: row,
            add: 1,
        },
    );
    let done = drain(h, A, &[1, 2, 3, 4])?;
    for (id, status) in &done {
        let allowed = if *id <= 2 {
            // Posted before the death: may have completed.
            matches!(
                status,
                WcStatus::Ok | WcStatus::Unreachable | WcStatus::Flushed
            )
        } else {
            matches!(status, WcStatus::Unreachable | WcStatus::Flushed)
        };
        if !allowed {
            return Err(format!(
                "request {id} completed {status:?} around the death"
            ));
        }
    }
    // The others are unaffected.
    post(h, A, 5, B, Op::write_u64(row, 5));
    expect(h, A, 5, WcStatus::Ok)?;
    Ok(())
}

// ----- the simulator's harness ---------------------------------------------

struct SimQueue {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    events: Vec<Option<NetEvent>>,
}

impl Schedule for SimQueue {
    fn at(&mut self, at_ns: u64, ev: NetEvent) {
        self.events.push(Some(ev));
        self.heap
            .push(Reverse((at_ns, self.events.len() as u64 - 1)));
    }
}

/// The simulated network as a harness (virtual time).
pub struct SimHarness {
    net: Net,
    queue: SimQueue,
    now: u64,
    layout: Layout,
    endpoints: Vec<SimEndpoint>,
}

/// One member's endpoint on the simulated network, for the suite: posts
/// are queued and executed by the harness in virtual time.
pub struct SimEndpoint {
    me: usize,
    posted: Vec<WorkRequest>,
    access: Vec<(MemberId, RegionId, Access)>,
    reconnects: Vec<(MemberId, Channel)>,
}

impl Fabric for SimEndpoint {
    fn post(&mut self, wr: &WorkRequest) {
        self.posted.push(*wr);
    }
    fn poll_completion(&mut self) -> Option<Completion> {
        None // completions are read through the harness
    }
    fn set_access(
        &mut self,
        peer: MemberId,
        region: RegionId,
        access: Access,
    ) -> Result<(), FabricError> {
        self.access.push((peer, region, access));
        Ok(())
    }
    fn reconnect(&mut self, peer: MemberId, channel: Channel) -> Result<(), FabricError> {
        self.reconnects.push((peer, channel));
        Ok(())
    }
}

impl SimHarness {
    /// Three members on DARE's network.
    pub fn new() -> SimHarness {
        let cfg = suite_config(MemberId(0));
        let layout = Layout::new(&cfg).expect("valid");
        let mems = (0..3).map(|_| SimMemory::new(&layout)).collect();
        SimHarness {
            net: Net::new(NetParams::DARE, &layout, mems, 1),
            queue: SimQueue {
                heap: BinaryHeap::new(),
                events: Vec::new(),
            },
            now: 0,
            layout,
            endpoints: (0..3)
                .map(|me| SimEndpoint {
                    me,
                    posted: Vec::new(),
                    access: Vec::new(),
                    reconnects: Vec::new(),
                })
                .collect(),
        }
    }

    fn flush_endpoints(&mut self) {
        for e in 0..self.endpoints.len() {
            let ep = &mut self.endpoints[e];
            let me = ep.me;
            for (peer, region, access) in ep.access.drain(..) {
                self.net.set_access(me, peer, region, access);
            }
            for (peer, channel) in ep.reconnects.drain(..) {
                self.net.reconnect(me, peer, channel);
            }
            let posted: Vec<WorkRequest> = ep.posted.drain(..).collect();
            for wr in posted {
                self.now += 300; // o per post
                self.net.post(&mut self.queue, self.now, me, wr);
            }
        }
    }
}

impl Default for SimHarness {
    fn default() -> Self {
        Self::new()
    }
}

impl FabricHarness for SimHarness {
    type F = SimEndpoint;
    fn layout(&self) -> Layout {
        self.layout
    }
    fn fabric(&mut self, m: MemberId) -> &mut SimEndpoint {
        // Access changes take effect before the caller's next request.
        self.flush_endpoints();
        &mut self.endpoints[m.index()]
    }
    fn memory(&self, m: MemberId) -> &dyn Memory {
        &self.net.nic(m.index()).mem
    }
    fn next_completion(&mut self, m: MemberId) -> Option<Completion> {
        self.flush_endpoints();
        loop {
            if let Some(c) = self.net.nic_mut(m.index()).cq.pop_front() {
                return Some(c);
            }
            let Reverse((t, k)) = self.queue.heap.pop()?;
            self.now = self.now.max(t);
            let ev = self.queue.events[k as usize]
                .take()
                .expect("each event runs once");
            self.net.handle(&mut self.queue, self.now, ev);
        }
    }
    fn kill(&mut self, m: MemberId) {
        self.flush_endpoints();
        self.net.crash(m.index());
    }
    fn name(&self) -> &'static str {
        "simulated"
    }
}
