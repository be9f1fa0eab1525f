//! `verbatim-bench multicast`, large messages: Derecho's RDMC (binomial
//! pipeline) bandwidth for 1 KiB to 64 MiB messages against this
//! machine's memcpy bandwidth, measured the same way the small messages
//! are ([`Group`] members on threads of this process, each with its own
//! `/dev/shm` segment and fabric endpoint; one clock).
//!
//! Per group size and message size: member 0 multicasts one message at a
//! time with [`Group::send`] (a message above the small messages' size
//! goes on RDMC, its reference in the total order); the time of a message
//! is from the send to its delivery (ordered, copied out of the slot,
//! validated) at the last member, and the bandwidth is the message's
//! bytes over the median time.
//! The comparison beside it is one memcpy of the same size between two
//! private buffers on this machine ([`crate::floor::copy_time`]), in the
//! same run: the copy every member's CPU makes at least once (into the
//! application's buffer), so the pipeline's cost shows as a fraction of
//! it.

use crate::stats::Dist;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use verbatim_host::group::{Group, GroupOptions};

/// What to run.
#[derive(Clone, Debug)]
pub struct RdmcOptions {
    /// Group sizes (the sender and `n − 1` receivers).
    pub members: Vec<u8>,
    /// Message sizes, bytes.
    pub sizes: Vec<u64>,
    /// Messages timed per size (0: from the size, 5 to 200).
    pub messages: u64,
    /// Cores to pin member `i` to (`cores[i % len]`); empty: not pinned.
    pub cores: Vec<usize>,
}

/// One group size and message size.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RdmcRun {
    /// Members (the sender included).
    pub members: u8,
    /// Bytes of each message.
    pub message_bytes: u64,
    /// Bytes of a chunk.
    pub chunk_bytes: u64,
    /// Messages timed.
    pub messages: u64,
    /// Send to delivery at the last member (µs): median and extremes.
    pub p50_us: f64,
    /// See `p50_us`.
    pub min_us: f64,
    /// See `p50_us`.
    pub max_us: f64,
    /// `message_bytes` over the median time (GB/s, 10^9 bytes).
    pub gb_per_s: f64,
    /// One memcpy of `message_bytes` on this machine, same run (GB/s).
    pub memcpy_gb_per_s: f64,
}

/// The chunk size for a message size: a sixteenth of the message (so the
/// pipeline has stages to overlap), between 4 KiB and 1 MiB.
pub fn chunk_for(message_bytes: u64) -> u64 {
    (message_bytes / 16)
        .clamp(4096, 1 << 20)
        .next_multiple_of(64)
}

/// Timed messages for a size: about 256 MiB in all, 5 to 200.
fn messages_for(message_bytes: u64, asked: u64) -> u64 {
    if asked > 0 {
        return asked;
    }
    ((256u64 << 20) / message_bytes.max(1)).clamp(5, 200)
}

struct Shared {
    origin: Instant,
    /// Per member: large messages delivered, and when the last was (ns).
    delivered: Vec<AtomicU64>,
    delivered_at_ns: Vec<AtomicU64>,
    /// Per member: a message arrived that was not the one sent.
    wrong: AtomicBool,
    stop: AtomicBool,
    failed: AtomicBool,
    /// Samples member 0 took (ns).
    samples: std::sync::Mutex<Vec<u64>>,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// The bytes of message `k`: its index in its first and last words, so a
/// receiver checks it is whole without a second pass over it.
fn fill(buf: &mut [u8], k: u64) {
    let stamp = k.to_le_bytes();
    let n = buf.len().min(8);
    buf[..n].copy_from_slice(&stamp[..n]);
    let len = buf.len();
    if len >= 16 {
        buf[len - 8..].copy_from_slice(&stamp);
    }
}

fn whole(payload: &[u8], k: u64, len: u64) -> bool {
    let mut want = vec![0u8; payload.len().min(16)];
    if payload.len() as u64 != len {
        return false;
    }
    if payload.len() >= 16 {
        let stamp = k.to_le_bytes();
        return payload[..8] == stamp && payload[payload.len() - 8..] == stamp;
    }
    fill(&mut want, k);
    payload[..want.len()] == want[..]
}

fn member(
    options: &GroupOptions,
    shared: &Shared,
    ready: &Barrier,
    core: Option<usize>,
    message_bytes: u64,
    timed: u64,
) -> Result<()> {
    if let Some(c) = core {
        core_affinity::set_for_current(core_affinity::CoreId { id: c });
    }
    let i = usize::from(options.me);
    let joined = Group::join(options).and_then(|mut g| {
        g.wait_formed(Duration::from_secs(20))?;
        Ok(g)
    });
    ready.wait();
    let mut g = joined?;
    let n = shared.delivered.len();
    // One unmeasured message first: the pages of every slot mapped.
    let total = timed + 1;
    let mut message = vec![0u8; message_bytes as usize];
    let mut next = 0u64;
    let mut sent_at = 0u64;
    while !shared.stop.load(Ordering::Acquire) {
        if i == 0 && next < total && sent_at == 0 {
            // One message in flight: the next once every member has it.
            fill(&mut message, next);
            let t = shared.now_ns();
            match g.send(&message) {
                Ok(()) => sent_at = t,
                Err(e) => bail!("send: {e}"),
            }
        }
        let worked = g.poll();
        while let Some(d) = g.next_delivery() {
            let at = shared.now_ns();
            let k = shared.delivered[i].load(Ordering::Acquire);
            if !whole(d.payload, k, message_bytes) {
                shared.wrong.store(true, Ordering::Release);
            }
            shared.delivered_at_ns[i].store(at, Ordering::Release);
            shared.delivered[i].fetch_add(1, Ordering::AcqRel);
        }
        if i == 0 && sent_at != 0 {
            let all = (0..n).all(|m| shared.delivered[m].load(Ordering::Acquire) > next);
            if all {
                let last = (0..n)
                    .map(|m| shared.delivered_at_ns[m].load(Ordering::Acquire))
                    .max()
                    .unwrap_or(sent_at);
                if next > 0 {
                    shared
                        .samples
                        .lock()
                        .expect("samples")
                        .push(last.saturating_sub(sent_at));
                }
                next += 1;
                sent_at = 0;
            }
        }
        if let Some(w) = g.large_status().and_then(|s| s.wedged) {
            bail!("member {i}'s large-message session wedged: {w:?}");
        }
        if !worked {
            std::thread::yield_now();
        }
    }
    Ok(())
}

fn one(n: u8, message_bytes: u64, o: &RdmcOptions, memcpy_gb_per_s: f64) -> Result<RdmcRun> {
    let timed = messages_for(message_bytes, o.messages);
    let chunk = chunk_for(message_bytes);
    let shared = Arc::new(Shared {
        origin: Instant::now(),
        delivered: (0..n).map(|_| AtomicU64::new(0)).collect(),
        delivered_at_ns: (0..n).map(|_| AtomicU64::new(0)).collect(),
        wrong: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        samples: std::sync::Mutex::new(Vec::new()),
    });
    let ready = Arc::new(Barrier::new(usize::from(n) + 1));
    let name = format!("bench-{}-rdmc{n}-{message_bytes}", std::process::id());
    let mut threads = Vec::new();
    for i in 0..n {
        let mut g = GroupOptions::new(&name, n, i);
        g.window = 16;
        g.payload_bytes_max = 64;
        g.large_slots = 2;
        g.large_chunk_bytes = chunk as u32;
        g.large_message_bytes_max = message_bytes;
        let (shared, ready) = (shared.clone(), ready.clone());
        let core = (!o.cores.is_empty()).then(|| o.cores[usize::from(i) % o.cores.len()]);
        threads.push(std::thread::spawn(move || {
            let r = member(&g, &shared, &ready, core, message_bytes, timed);
            if r.is_err() {
                shared.failed.store(true, Ordering::Release);
            }
            r
        }));
    }
    ready.wait();
    let began = Instant::now();
    let limit = Duration::from_secs(60);
    let mut outcome = Ok(());
    loop {
        let done = shared.samples.lock().expect("samples").len() as u64 >= timed;
        if done {
            break;
        }
        if shared.failed.load(Ordering::Acquire) {
            outcome = Err(anyhow::anyhow!("a member failed"));
            break;
        }
        if began.elapsed() > limit {
            outcome = Err(anyhow::anyhow!(
                "{n} members, {message_bytes} bytes: not done within {limit:?}"
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    shared.stop.store(true, Ordering::Release);
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => outcome = outcome.and(Err(e)),
            Err(_) => outcome = outcome.and(Err(anyhow::anyhow!("a member thread panicked"))),
        }
    }
    outcome?;
    if shared.wrong.load(Ordering::Acquire) {
        bail!("{n} members, {message_bytes} bytes: a member delivered a message that was not the one sent");
    }
    let samples = shared.samples.lock().expect("samples").clone();
    let d = Dist::of(&samples);
    let p50_ns = d.p50 as f64;
    Ok(RdmcRun {
        members: n,
        message_bytes,
        chunk_bytes: chunk,
        messages: samples.len() as u64,
        p50_us: p50_ns / 1000.0,
        min_us: d.min as f64 / 1000.0,
        max_us: d.max as f64 / 1000.0,
        gb_per_s: if p50_ns > 0.0 {
            message_bytes as f64 / p50_ns
        } else {
            0.0
        },
        memcpy_gb_per_s,
    })
}

/// Every group size and message size.
pub fn run(o: &RdmcOptions, mut progress: impl FnMut(&str)) -> Result<Vec<RdmcRun>> {
    let mut out = Vec::new();
    for &size in &o.sizes {
        progress(&format!("memcpy of {size} bytes"));
        let memcpy = crate::floor::copy_time(size as usize).gb_per_s;
        for &n in &o.members {
            progress(&format!("RDMC, {n} members, {size}-byte messages"));
            out.push(one(n, size, o, memcpy)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_sweep_delivers_every_message_and_compares_with_memcpy() {
        let o = RdmcOptions {
            members: vec![3],
            sizes: vec![1024, 300_000],
            messages: 6,
            cores: Vec::new(),
        };
        let r = run(&o, |_| {}).expect("the sweep");
        assert_eq!(r.len(), 2);
        for run in &r {
            assert_eq!(run.messages, 6);
            assert!(run.p50_us > 0.0 && run.min_us <= run.p50_us && run.p50_us <= run.max_us);
            assert!(run.gb_per_s > 0.0 && run.memcpy_gb_per_s > 0.0, "{run:?}");
        }
        assert_eq!(r[1].chunk_bytes, chunk_for(300_000));
    }

    #[test]
    fn chunks_are_a_sixteenth_within_bounds_and_aligned() {
        assert_eq!(chunk_for(1024), 4096);
        assert_eq!(chunk_for(64 << 20), 1 << 20);
        assert_eq!(chunk_for(1 << 20), 64 << 10);
        assert_eq!(chunk_for(300_000) % 64, 0);
    }

    #[test]
    fn a_receiver_tells_a_whole_message_from_another() {
        for len in [1usize, 8, 15, 16, 4096] {
            let mut m = vec![0u8; len];
            fill(&mut m, 7);
            assert!(whole(&m, 7, len as u64));
            assert!(!whole(&m, 8, len as u64) || len == 0);
            assert!(!whole(&m, 7, len as u64 + 1));
        }
    }
}
