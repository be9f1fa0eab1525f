//! `verbatim-bench multicast`: Derecho's small-message multicast (SMC) and
//! its atomic (totally ordered) delivery, measured through the embeddable
//! member applications use ([`Group`]: the engine the replicas run over
//! the shared-memory fabric they use, `/dev/shm` segments, the
//! initiator's CPU copying into the peer's mapping). Each member is a
//! thread of this process with its own segment, memory and fabric
//! endpoint, so the only thing left out of the replica's loop is the
//! other engines (the log, heartbeats, views) and the gateways; one
//! process keeps one clock for the timestamps, which is what per-message
//! latency needs.
//!
//! Three measurements per group size:
//!
//! * **latency**: member 0 multicasts one message at a time (the next
//!   once every member delivered it); per receiver, the time from the
//!   send to its *receipt* (SMC: the slot is whole in the receiver's
//!   ring) and to its *ordered delivery* (stable: every member's SST row
//!   shows it received, Derecho's round-robin order);
//! * **throughput**: every member multicasts 100-byte messages as fast as
//!   its window lets it; messages received and delivered per second at
//!   each member (every sender's messages count);
//! * **view change**: the same full-rate sending, then the last member
//!   stops dead (its thread ends, its peers' fabric sees it gone and their
//!   engines get the death notice at once); the time from the kill to the
//!   next view installed at every survivor, and whether every survivor
//!   delivered the same sequence in the ended epoch (count and a hash of
//!   every (sender, index) delivered).
//!
//! Threads poll without sleeping and yield the core when a pass did
//! nothing, so a group larger than the machine's cores shares them; the
//! report says how many cores there were.

use crate::stats::{histogram, record, Summary};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use verbatim_core::fabric::MemberId;
use verbatim_host::group::{Group, GroupOptions};

/// What to run.
#[derive(Clone, Debug)]
pub struct McastOptions {
    /// Group sizes (members, the sender included) for latency.
    pub latency_members: Vec<u8>,
    /// Group sizes for throughput and the view change.
    pub throughput_members: Vec<u8>,
    /// Messages timed per latency run.
    pub messages: u64,
    /// Seconds of full-rate sending measured per throughput run.
    pub seconds: f64,
    /// View changes (each on a fresh group) per group size.
    pub kills: u32,
    /// Slots per sender ring.
    pub window: u32,
    /// Payload of the throughput messages.
    pub payload_bytes: usize,
    /// Cores to pin member `i` to (`cores[i % len]`); empty: not pinned.
    pub cores: Vec<usize>,
    /// Rounds of the SIGKILL view change on replica processes, and the
    /// publications per publisher in each.
    pub sigkill_rounds: u32,
    /// See `sigkill_rounds`.
    pub sigkill_messages: u64,
    /// Large messages (RDMC bandwidth against memcpy); `None`: skipped.
    pub rdmc: Option<crate::rdmc::RdmcOptions>,
}

/// One latency run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McastLatency {
    /// Members (the sender and `members − 1` receivers).
    pub members: u8,
    /// Send to receipt at a receiver (every receiver's samples).
    pub receipt: Summary,
    /// Send to ordered delivery at a receiver.
    pub delivery: Summary,
    /// Send to ordered delivery at the last receiver (per message).
    pub delivery_all: Summary,
}

/// One throughput run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McastThroughput {
    /// Members, every one sending.
    pub members: u8,
    /// Payload bytes.
    pub payload_bytes: usize,
    /// Seconds measured.
    pub seconds: f64,
    /// Messages each member sent per second (data only).
    pub sent_per_sec: Vec<f64>,
    /// Messages each member received per second from the others' rings
    /// (nulls included: the raw SMC rate).
    pub received_per_sec: Vec<f64>,
    /// Data messages each member delivered per second, in the total order.
    pub delivered_per_sec: Vec<f64>,
    /// The engine's refusals of a send because the window was full, all
    /// members (each retry of a waiting message counts).
    pub window_full: u64,
}

/// One view change.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McastViewChange {
    /// Members before the kill.
    pub members: u8,
    /// From the kill to the next view installed, per survivor (µs).
    pub install_us: Vec<f64>,
    /// Data messages delivered in the ended epoch, per survivor.
    pub delivered_in_epoch: Vec<u64>,
    /// Every survivor delivered the same sequence in the ended epoch.
    pub same_sequence: bool,
    /// Messages the trim left out, over the survivors (their senders send
    /// them again in the next view).
    pub trimmed: u64,
}

/// Results of `verbatim-bench multicast`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McastReport {
    /// Cores of the machine.
    pub cores: usize,
    /// Slots per sender ring.
    pub window: u32,
    /// Latency runs.
    pub latency: Vec<McastLatency>,
    /// Throughput runs.
    pub throughput: Vec<McastThroughput>,
    /// View changes.
    pub view_changes: Vec<McastViewChange>,
    /// View changes after a SIGKILL of a replica process.
    #[serde(default)]
    pub sigkill: Vec<McastKill>,
    /// Large messages: RDMC bandwidth per group size and message size,
    /// with memcpy's beside it.
    #[serde(default)]
    pub rdmc: Vec<crate::rdmc::RdmcRun>,
}

impl McastReport {
    /// The latency run with `members` members.
    pub fn latency_of(&self, members: u8) -> Option<&McastLatency> {
        self.latency.iter().find(|l| l.members == members)
    }

    /// The throughput run with `members` members.
    pub fn throughput_of(&self, members: u8) -> Option<&McastThroughput> {
        self.throughput.iter().find(|t| t.members == members)
    }
}

/// What a member's thread does.
const PHASE_IDLE: u8 = 0;
const PHASE_LATENCY: u8 = 1;
const PHASE_FLOOD: u8 = 2;
const PHASE_STOP: u8 = 3;

/// Send times of the latency run, by message index (one in flight).
const SENT_AT_RING: usize = 64;

/// State the member threads and the conductor share.
struct Shared {
    phase: AtomicU8,
    origin: Instant,
    /// Per member: data messages of member 0 delivered (latency run).
    delivered_of_0: Vec<AtomicU64>,
    /// Send times of member 0's messages (ns since `origin`).
    sent_at: Vec<AtomicU64>,
    /// Per member, totals: data sent, received (all senders), data
    /// delivered, window full.
    sent: Vec<AtomicU64>,
    received: Vec<AtomicU64>,
    delivered: Vec<AtomicU64>,
    window_full: Vec<AtomicU64>,
    /// The member to stop dead, and when it was stopped (ns).
    victim: AtomicU64,
    killed_at_ns: AtomicU64,
    /// Per member: when it installed epoch 1 (ns, 0: not yet), data
    /// messages delivered in epoch 0 and their hash, messages of its own
    /// the trim left out.
    installed_at_ns: Vec<AtomicU64>,
    epoch0_count: Vec<AtomicU64>,
    epoch0_hash: Vec<AtomicU64>,
    trimmed: Vec<AtomicU64>,
    /// Latency samples, per receiver.
    samples: Vec<std::sync::Mutex<Samples>>,
    failed: AtomicBool,
}

#[derive(Default)]
struct Samples {
    receipt: Vec<u64>,
    delivery: Vec<(u64, u64)>,
}

impl Shared {
    fn new(n: usize) -> Shared {
        let counters = || (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Shared {
            phase: AtomicU8::new(PHASE_IDLE),
            origin: Instant::now(),
            delivered_of_0: counters(),
            sent_at: (0..SENT_AT_RING).map(|_| AtomicU64::new(0)).collect(),
            sent: counters(),
            received: counters(),
            delivered: counters(),
            window_full: counters(),
            victim: AtomicU64::new(u64::MAX),
            killed_at_ns: AtomicU64::new(0),
            installed_at_ns: counters(),
            epoch0_count: counters(),
            epoch0_hash: counters(),
            trimmed: counters(),
            samples: (0..n).map(|_| Default::default()).collect(),
            failed: AtomicBool::new(false),
        }
    }

    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn sum(v: &[AtomicU64]) -> u64 {
        v.iter().map(|a| a.load(Ordering::Acquire)).sum()
    }
}

/// A group of member threads, each a [`Group`] member.
struct Members {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<Result<()>>>,
}

impl Members {
    fn start(n: u8, o: &McastOptions, tag: &str) -> Result<Members> {
        let shared = Arc::new(Shared::new(usize::from(n)));
        let ready = Arc::new(Barrier::new(usize::from(n) + 1));
        let name = format!("bench-{}-{tag}", std::process::id());
        let mut threads = Vec::new();
        for i in 0..n {
            let mut g = GroupOptions::new(&name, n, i);
            g.window = o.window;
            // Room for what the flood keeps waiting behind the window.
            g.outbox_messages = 4 * o.window as usize;
            g.payload_bytes_max = 128.max(o.payload_bytes as u32);
            let (shared, ready) = (shared.clone(), ready.clone());
            let core = (!o.cores.is_empty()).then(|| o.cores[usize::from(i) % o.cores.len()]);
            let payload_bytes = o.payload_bytes;
            threads.push(std::thread::spawn(move || {
                let r = member(&g, &shared, &ready, core, payload_bytes);
                if r.is_err() {
                    shared.failed.store(true, Ordering::Release);
                }
                r
            }));
        }
        ready.wait();
        Ok(Members { shared, threads })
    }

    fn stop(self) -> Result<()> {
        self.shared.phase.store(PHASE_STOP, Ordering::Release);
        let mut result = Ok(());
        for t in self.threads {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(_) => result = Err(anyhow::anyhow!("a member thread panicked")),
            }
        }
        result
    }

    /// Waits until `done` or `timeout`; fails if a member failed.
    fn wait(&self, timeout: Duration, what: &str, done: impl Fn(&Shared) -> bool) -> Result<()> {
        let began = Instant::now();
        while !done(&self.shared) {
            if self.shared.failed.load(Ordering::Acquire) {
                bail!("a member failed while {what}");
            }
            if began.elapsed() > timeout {
                bail!("{what}: not done within {timeout:?}");
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }
}

/// One member's loop: a [`Group`] member, polled without sleeping.
fn member(
    options: &GroupOptions,
    shared: &Shared,
    ready: &Barrier,
    core: Option<usize>,
    payload_bytes: usize,
) -> Result<()> {
    if let Some(c) = core {
        core_affinity::set_for_current(core_affinity::CoreId { id: c });
    }
    let i = usize::from(options.me);
    let mut g = match Group::join(options) {
        Ok(g) => g,
        Err(e) => {
            ready.wait();
            return Err(e).with_context(|| format!("member {i} joining"));
        }
    };
    ready.wait();
    let n = usize::from(options.members);
    let window = options.window as usize;
    let mut payload = vec![0u8; payload_bytes.max(16)];
    let mut latency_next = 0u64;
    let mut receipts_of_0 = 0u64;
    let mut hash = 0u64;
    let mut count = 0u64;
    let mut victim_seen = false;
    let victim = |s: &Shared| s.victim.load(Ordering::Acquire);
    // Messages taken from the other members' rings.
    let others = |g: &Group| -> u64 {
        (0..n)
            .filter(|&s| s != i)
            .map(|s| g.received(MemberId(s as u8)))
            .sum()
    };
    loop {
        let phase = shared.phase.load(Ordering::Acquire);
        if phase == PHASE_STOP {
            shared.window_full[i].store(g.status().window_full, Ordering::Release);
            return Ok(());
        }
        if victim(shared) == i as u64 {
            // Stopped dead: no more steps (the peers are told below).
            while shared.phase.load(Ordering::Acquire) != PHASE_STOP {
                std::thread::sleep(Duration::from_millis(1));
            }
            return Ok(());
        }
        if !victim_seen && victim(shared) < n as u64 {
            // The death notice, at once (the replica's is a pidfd or the
            // notice file; here the conductor's flag).
            victim_seen = true;
            g.report_dead(MemberId(victim(shared) as u8));
        }
        let epoch_before = g.epoch();
        let received_before = others(&g);
        // Receipt is timed from before the step that took the message.
        let step_began = shared.now_ns();
        let mut worked = g.poll();
        let received_after = others(&g);
        if g.epoch() == epoch_before && received_after > received_before {
            shared.received[i].fetch_add(received_after - received_before, Ordering::Relaxed);
        }
        if phase == PHASE_LATENCY && i != 0 {
            let now = step_began;
            let got = g.received(MemberId(0));
            while receipts_of_0 < got {
                let sent =
                    shared.sent_at[receipts_of_0 as usize % SENT_AT_RING].load(Ordering::Acquire);
                let mut s = shared.samples[i].lock().expect("samples");
                s.receipt.push(now.saturating_sub(sent));
                receipts_of_0 += 1;
            }
        }
        while let Some(d) = g.next_delivery() {
            worked = true;
            let now = shared.now_ns();
            if d.epoch == 0 {
                count += 1;
                hash = hash
                    .rotate_left(5)
                    .wrapping_add((d.index << 8) | u64::from(d.sender.0))
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15);
            }
            shared.delivered[i].fetch_add(1, Ordering::Relaxed);
            if phase == PHASE_LATENCY && d.sender == MemberId(0) && d.payload.len() >= 16 {
                let sent = u64::from_le_bytes(d.payload[..8].try_into().expect("8 bytes"));
                let k = u64::from_le_bytes(d.payload[8..16].try_into().expect("8 bytes"));
                if i != 0 {
                    let mut s = shared.samples[i].lock().expect("samples");
                    s.delivery.push((k, now.saturating_sub(sent)));
                }
                shared.delivered_of_0[i].store(k + 1, Ordering::Release);
            }
        }
        if g.epoch() > epoch_before && epoch_before == 0 {
            shared.installed_at_ns[i].store(shared.now_ns().max(1), Ordering::Release);
            shared.epoch0_count[i].store(count, Ordering::Relaxed);
            shared.epoch0_hash[i].store(hash, Ordering::Relaxed);
            shared.trimmed[i].store(g.status().trimmed_own, Ordering::Release);
        }
        match phase {
            PHASE_LATENCY if i == 0 => {
                // The next message once every member delivered the last.
                let all = shared
                    .delivered_of_0
                    .iter()
                    .all(|d| d.load(Ordering::Acquire) >= latency_next);
                if all && g.formed() {
                    let at = shared.now_ns();
                    payload[..8].copy_from_slice(&at.to_le_bytes());
                    payload[8..16].copy_from_slice(&latency_next.to_le_bytes());
                    shared.sent_at[latency_next as usize % SENT_AT_RING]
                        .store(at, Ordering::Release);
                    g.send(&payload[..16])
                        .with_context(|| "member 0 could not send".to_string())?;
                    latency_next += 1;
                    worked = true;
                }
            }
            // Keep the window full, with a window's worth waiting behind
            // it (the group holds what it has not delivered).
            PHASE_FLOOD if g.pending() < 2 * window => {
                g.send(&payload[..payload_bytes])
                    .with_context(|| format!("member {i} stopped sending"))?;
                shared.sent[i].fetch_add(1, Ordering::Relaxed);
                worked = true;
            }
            _ => {}
        }
        if !worked {
            std::thread::yield_now();
        }
    }
}

fn summary(samples: &[u64]) -> Summary {
    let mut h = histogram();
    for &s in samples {
        record(&mut h, s);
    }
    Summary::of(&h)
}

fn latency(n: u8, o: &McastOptions) -> Result<McastLatency> {
    let g = Members::start(n, o, &format!("lat{n}"))?;
    let warmup = (o.messages / 10).max(10);
    let total = o.messages + warmup;
    g.shared.phase.store(PHASE_LATENCY, Ordering::Release);
    let timeout = Duration::from_secs(30) + Duration::from_micros(200 * total);
    let result = g.wait(timeout, "timing single messages", |s| {
        s.delivered_of_0
            .iter()
            .all(|d| d.load(Ordering::Acquire) >= total)
    });
    let mut receipt = Vec::new();
    let mut delivery = Vec::new();
    let mut last: Vec<u64> = vec![0; total as usize];
    for m in 1..usize::from(n) {
        let s = g.shared.samples[m].lock().expect("samples");
        receipt.extend(s.receipt.iter().take(total as usize).skip(warmup as usize));
        for &(k, ns) in &s.delivery {
            if (warmup..total).contains(&k) {
                delivery.push(ns);
                last[k as usize] = last[k as usize].max(ns);
            }
        }
    }
    g.stop()?;
    result?;
    let all: Vec<u64> = last.into_iter().skip(warmup as usize).collect();
    Ok(McastLatency {
        members: n,
        receipt: summary(&receipt),
        delivery: summary(&delivery),
        delivery_all: summary(&all),
    })
}

/// Messages sent, received and delivered per member over a measured
/// window, and its length in seconds.
type Rates = (Vec<u64>, Vec<u64>, Vec<u64>, f64);

fn flood(g: &Members, seconds: f64) -> Result<Rates> {
    let snap = |v: &[AtomicU64]| {
        v.iter()
            .map(|a| a.load(Ordering::Acquire))
            .collect::<Vec<_>>()
    };
    let s = &g.shared;
    s.phase.store(PHASE_FLOOD, Ordering::Release);
    std::thread::sleep(Duration::from_millis(200));
    let (s0, r0, d0) = (snap(&s.sent), snap(&s.received), snap(&s.delivered));
    let began = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let (s1, r1, d1) = (snap(&s.sent), snap(&s.received), snap(&s.delivered));
    let took = began.elapsed().as_secs_f64();
    if s.failed.load(Ordering::Acquire) {
        bail!("a member failed while flooding");
    }
    let diff = |a: Vec<u64>, b: Vec<u64>| a.iter().zip(b).map(|(x, y)| y - x).collect();
    Ok((diff(s0, s1), diff(r0, r1), diff(d0, d1), took))
}

fn throughput(n: u8, o: &McastOptions) -> Result<McastThroughput> {
    let g = Members::start(n, o, &format!("tp{n}"))?;
    let r = flood(&g, o.seconds);
    let shared = g.shared.clone();
    g.stop()?;
    let window_full = Shared::sum(&shared.window_full);
    let (sent, received, delivered, took) = r?;
    let rate = |v: Vec<u64>| v.into_iter().map(|x| x as f64 / took).collect();
    Ok(McastThroughput {
        members: n,
        payload_bytes: o.payload_bytes,
        seconds: took,
        sent_per_sec: rate(sent),
        received_per_sec: rate(received),
        delivered_per_sec: rate(delivered),
        window_full,
    })
}

fn view_change(n: u8, o: &McastOptions, round: u32) -> Result<McastViewChange> {
    let g = Members::start(n, o, &format!("vc{n}-{round}"))?;
    let s = g.shared.clone();
    s.phase.store(PHASE_FLOOD, Ordering::Release);
    std::thread::sleep(Duration::from_millis(100));
    let victim = u64::from(n) - 1;
    s.killed_at_ns.store(s.now_ns(), Ordering::Release);
    s.victim.store(victim, Ordering::Release);
    let survivors: Vec<usize> = (0..usize::from(n) - 1).collect();
    let r = g.wait(Duration::from_secs(10), "changing the view", |s| {
        survivors
            .iter()
            .all(|&m| s.installed_at_ns[m].load(Ordering::Acquire) != 0)
    });
    let killed = s.killed_at_ns.load(Ordering::Acquire);
    let out = McastViewChange {
        members: n,
        install_us: survivors
            .iter()
            .map(|&m| {
                s.installed_at_ns[m]
                    .load(Ordering::Acquire)
                    .saturating_sub(killed) as f64
                    / 1000.0
            })
            .collect(),
        delivered_in_epoch: survivors
            .iter()
            .map(|&m| s.epoch0_count[m].load(Ordering::Acquire))
            .collect(),
        same_sequence: survivors.windows(2).all(|w| {
            s.epoch0_count[w[0]].load(Ordering::Acquire)
                == s.epoch0_count[w[1]].load(Ordering::Acquire)
                && s.epoch0_hash[w[0]].load(Ordering::Acquire)
                    == s.epoch0_hash[w[1]].load(Ordering::Acquire)
        }),
        trimmed: survivors
            .iter()
            .map(|&m| s.trimmed[m].load(Ordering::Acquire))
            .sum(),
    };
    g.stop()?;
    r?;
    Ok(out)
}

/// Runs every measurement (the SIGKILL rounds on clusters of `spec`).
pub fn run(
    o: &McastOptions,
    spec: Option<&crate::cluster::ClusterSpec>,
    mut progress: impl FnMut(&str),
) -> Result<McastReport> {
    let mut report = McastReport {
        cores: std::thread::available_parallelism().map_or(1, |c| c.get()),
        window: o.window,
        ..McastReport::default()
    };
    for &n in &o.latency_members {
        progress(&format!("latency, {n} members"));
        report.latency.push(latency(n, o)?);
    }
    for &n in &o.throughput_members {
        progress(&format!("throughput, {n} members all sending"));
        report.throughput.push(throughput(n, o)?);
    }
    for &n in &o.throughput_members {
        for round in 0..o.kills {
            progress(&format!(
                "view change {}/{}, {n} members",
                round + 1,
                o.kills
            ));
            report.view_changes.push(view_change(n, o, round)?);
        }
    }
    if let Some(r) = &o.rdmc {
        report.rdmc = crate::rdmc::run(r, &mut progress)?;
    }
    if let Some(spec) = spec {
        for round in 0..o.sigkill_rounds {
            progress(&format!(
                "SIGKILL of a replica while publishing {}/{}",
                round + 1,
                o.sigkill_rounds
            ));
            report
                .sigkill
                .push(sigkill_round(spec, o.window, o.sigkill_messages)?);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small run of every measurement: the counts add up, every member
    /// delivers, and the survivors of the view change agree.
    #[test]
    fn a_small_run_measures_every_part() {
        let o = McastOptions {
            latency_members: vec![3],
            throughput_members: vec![3],
            messages: 200,
            seconds: 0.2,
            kills: 1,
            window: 32,
            payload_bytes: 100,
            cores: Vec::new(),
            sigkill_rounds: 0,
            sigkill_messages: 0,
            rdmc: None,
        };
        let r = run(&o, None, |_| {}).expect("the run");
        let l = r.latency_of(3).expect("latency with 3 members");
        // Two receivers, 200 timed messages each.
        assert_eq!(l.receipt.count, 400);
        assert_eq!(l.delivery.count, 400);
        assert_eq!(l.delivery_all.count, 200);
        assert!(l.receipt.p50_ns > 0 && l.receipt.p50_ns <= l.delivery.p99_ns);
        let t = r.throughput_of(3).expect("throughput with 3 members");
        assert_eq!(t.delivered_per_sec.len(), 3);
        assert!(t.delivered_per_sec.iter().all(|&d| d > 0.0), "{t:?}");
        assert!(t.sent_per_sec.iter().all(|&d| d > 0.0), "{t:?}");
        let v = &r.view_changes[0];
        assert!(v.same_sequence, "{v:?}");
        assert_eq!(v.install_us.len(), 2);
        assert!(v.install_us.iter().all(|&us| us > 0.0));
        assert!(v.delivered_in_epoch[0] > 0);
    }
}

/// A view change after a SIGKILL of a replica process, with publishers
/// on every replica (`--sigkill` rounds).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McastKill {
    /// Replicas before the kill.
    pub replicas: u8,
    /// From the SIGKILL to each survivor seen in the next view (µs, one
    /// CLOCK_MONOTONIC: the replica's record against the bench's kill).
    pub install_us: Vec<f64>,
    /// Publications each survivor's publisher had answered when the kill
    /// came, and in all.
    pub published_before_kill: u64,
    /// See `published_before_kill`.
    pub published: u64,
    /// PUBLISHes to survivors answered with an error (must be 0: a
    /// publication a trim left out is sent again in the new view).
    pub publish_errors: u64,
    /// Messages each survivor's subscriber received.
    pub received: Vec<u64>,
    /// Both subscribers received one and the same sequence, every
    /// survivor's publication exactly once, in its publisher's order.
    pub same_sequence: bool,
}

/// Reads `message` pushes of a subscribed connection until `done` says
/// so or `timeout`.
fn read_pushes(
    s: &mut std::net::TcpStream,
    timeout: Duration,
    done: impl Fn(&[Vec<u8>]) -> bool,
) -> Result<Vec<Vec<u8>>> {
    use crate::resp::{parse_reply, Reply};
    use std::io::Read;
    let mut inbuf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let began = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    while !done(&out) {
        if began.elapsed() > timeout {
            let of = |p: &[u8]| out.iter().filter(|m| m.starts_with(p)).count();
            bail!(
                "a subscriber got {} messages ({} p0, {} p1, {} p2), not all, within {timeout:?}",
                out.len(),
                of(b"p0-"),
                of(b"p1-"),
                of(b"p2-")
            );
        }
        while let Some((r, used)) =
            parse_reply(&inbuf).map_err(|e| anyhow::anyhow!("subscriber: {e}"))?
        {
            inbuf.drain(..used);
            if let Reply::Array(items) = r {
                if let [Reply::Bulk(Some(kind)), _, Reply::Bulk(Some(m))] = items.as_slice() {
                    if kind == b"message" {
                        out.push(m.clone());
                    }
                }
            }
        }
        match s.read(&mut chunk) {
            Ok(0) => bail!("a subscriber's connection closed"),
            Ok(n) => inbuf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// Reads a subscribed connection until its `subscribe` confirmation.
fn wait_subscribed(s: &mut std::net::TcpStream) -> Result<()> {
    use crate::resp::{parse_reply, Reply};
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut inbuf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some((r, used)) =
            parse_reply(&inbuf).map_err(|e| anyhow::anyhow!("subscriber: {e}"))?
        {
            inbuf.drain(..used);
            match r {
                Reply::Array(items) if matches!(items.first(), Some(Reply::Bulk(Some(k))) if k == b"subscribe") =>
                {
                    anyhow::ensure!(inbuf.is_empty(), "a push before the confirmation");
                    return Ok(());
                }
                other => bail!("SUBSCRIBE answered {other:?}"),
            }
        }
        let n = s.read(&mut chunk).context("waiting for the subscription")?;
        if n == 0 {
            bail!("the subscriber's connection closed");
        }
        inbuf.extend_from_slice(&chunk[..n]);
    }
}

/// One round: 3 replicas with multicast, a subscriber on replicas 0 and
/// 1, a pipelined publisher on every replica; replica 2 is SIGKILLed once
/// the survivors' publishers are a third of the way through.
pub fn sigkill_round(
    spec: &crate::cluster::ClusterSpec,
    window: u32,
    per_publisher: u64,
) -> Result<McastKill> {
    use crate::cluster::{BenchCluster, LEADER_TIMEOUT};
    use crate::resp::{Reply, RespConn};
    use std::io::Write;
    let mut spec = spec.clone();
    spec.overrides.push(format!("multicast.window={window}"));
    let mut cluster = BenchCluster::start(&spec, 3, true)?;
    cluster.wait_leader(0, LEADER_TIMEOUT)?;
    let addr = |m: u8| cluster.resp_addr(m).context("a RESP address");
    let mut subs = Vec::new();
    for m in [0u8, 1] {
        let mut s = std::net::TcpStream::connect(addr(m)?)?;
        s.write_all(b"SUBSCRIBE vc\r\n")?;
        subs.push(s);
    }
    // The subscription confirmations: only then is a publication sure to
    // reach the subscriber.
    for s in &mut subs {
        wait_subscribed(s)?;
    }
    // Subscribers read while the publishers publish (a replica closes a
    // subscriber that falls 65,536 messages behind).
    let readers: Vec<_> = subs
        .into_iter()
        .map(|mut s| {
            std::thread::spawn(move || {
                let survivors_done = |got: &[Vec<u8>]| {
                    got.iter().filter(|g| !g.starts_with(b"p2-")).count() as u64
                        >= 2 * per_publisher
                };
                read_pushes(&mut s, Duration::from_secs(120), survivors_done)
            })
        })
        .collect();
    let answered: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
    let errors = Arc::new(AtomicU64::new(0));
    let mut publishers = Vec::new();
    for m in [0u8, 1, 2] {
        let mut conn = RespConn::connect(&addr(m)?, false)?;
        let (answered, errors) = (answered.clone(), errors.clone());
        publishers.push(std::thread::spawn(move || {
            const DEPTH: u64 = 16;
            let mut k = 0;
            while k < per_publisher {
                let batch: Vec<Vec<u8>> = (k..(k + DEPTH).min(per_publisher))
                    .map(|i| format!("p{m}-{i:09}").into_bytes())
                    .collect();
                let cmds: Vec<[&[u8]; 3]> = batch
                    .iter()
                    .map(|b| [b"PUBLISH".as_slice(), b"vc".as_slice(), b.as_slice()])
                    .collect();
                let refs: Vec<&[&[u8]]> = cmds.iter().map(|c| c.as_slice()).collect();
                match conn.pipeline(&refs) {
                    Ok(replies) => {
                        let bad = replies
                            .iter()
                            .filter(|r| !matches!(r, Reply::Int(_)))
                            .count() as u64;
                        if m != 2 {
                            errors.fetch_add(bad, Ordering::Relaxed);
                        }
                    }
                    // The victim's connection dies with it.
                    Err(_) if m == 2 => return,
                    Err(_) => {
                        errors.fetch_add(batch.len() as u64, Ordering::Relaxed);
                        return;
                    }
                }
                k += batch.len() as u64;
                answered[usize::from(m)].store(k, Ordering::Release);
            }
        }));
    }
    let began = Instant::now();
    let third = per_publisher / 3;
    while answered[0].load(Ordering::Acquire) < third || answered[1].load(Ordering::Acquire) < third
    {
        if began.elapsed() > Duration::from_secs(60) {
            bail!("publishing stalled before the kill");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let published_before_kill = answered[0].load(Ordering::Acquire);
    let killed_ns = verbatim_client::process::monotonic_now_ns();
    cluster
        .local_mut()
        .kill(2)
        .map_err(|e| anyhow::anyhow!("kill: {e}"))?;
    let mut install_us = vec![0.0; 2];
    for (m, slot) in install_us.iter_mut().enumerate() {
        let began = Instant::now();
        loop {
            let seen = cluster
                .status_of(m as u8, Duration::from_millis(500))
                .and_then(|s| s.multicast)
                .filter(|mc| mc.epoch >= 1)
                .and_then(|mc| mc.view_installed_mono_ns);
            if let Some(at) = seen {
                *slot = at.saturating_sub(killed_ns) as f64 / 1000.0;
                break;
            }
            if began.elapsed() > Duration::from_secs(10) {
                bail!("replica {m} installed no view without replica 2 within 10 s");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    for p in publishers {
        p.join()
            .map_err(|_| anyhow::anyhow!("a publisher panicked"))?;
    }
    let expected: Vec<Vec<u8>> = [0u8, 1]
        .iter()
        .flat_map(|&m| (0..per_publisher).map(move |i| format!("p{m}-{i:09}").into_bytes()))
        .collect();
    let mut seen = Vec::new();
    for r in readers {
        seen.push(
            r.join()
                .map_err(|_| anyhow::anyhow!("a subscriber thread panicked"))??,
        );
    }
    let in_order = |got: &[Vec<u8>], m: u8| {
        let mine: Vec<&Vec<u8>> = got
            .iter()
            .filter(|g| g.starts_with(format!("p{m}-").as_bytes()))
            .collect();
        mine.len() as u64 == per_publisher
            && mine
                .iter()
                .zip(
                    expected
                        .iter()
                        .skip(usize::from(m) * per_publisher as usize),
                )
                .all(|(a, b)| *a == b)
    };
    let same_sequence = seen[0] == seen[1] && in_order(&seen[0], 0) && in_order(&seen[0], 1);
    Ok(McastKill {
        replicas: 3,
        install_us,
        published_before_kill,
        published: 2 * per_publisher,
        publish_errors: errors.load(Ordering::Acquire),
        received: seen.iter().map(|s| s.len() as u64).collect(),
        same_sequence,
    })
}
