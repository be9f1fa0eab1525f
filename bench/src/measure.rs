//! The measuring loops shared by the benchmarks.
//!
//! * [`sequential`]: one client, one request at a time. Closed loop: each
//!   latency is one request's own time, and the next request starts when
//!   it returns. Open loop (`rate`): request *i* is due at `start + i/rate`;
//!   its latency counts from that intended time (Gil Tene's correction for
//!   coordinated omission), so a stall delays every request queued behind
//!   it and shows in the percentiles; the service time (from the actual
//!   send) is kept separately.
//! * [`run_clients`]: N client threads in a closed loop for a fixed time,
//!   each with its own client and histograms, merged at the end.

use crate::progress::Progress;
use crate::stats::{histogram, record, record_open_loop};
use crate::Result;
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Check for Ctrl-C every this many requests.
const INTERRUPT_CHECK_OPS: u64 = 256;

/// Latencies of one sequential run.
pub struct Sequential {
    /// Closed loop: per request. Open loop: from the intended start.
    pub latency: Histogram<u64>,
    /// Open loop only: from the actual send.
    pub service: Option<Histogram<u64>>,
    /// Wall time of the measured requests.
    pub elapsed: Duration,
}

/// Runs `warmup` unmeasured requests, then `ops` measured ones; `op(i)`
/// performs request `i` (warm-up requests get `i` from `u64::MAX / 2`).
pub fn sequential(
    ops: u64,
    warmup: u64,
    rate_per_s: Option<f64>,
    progress: &Progress,
    mut op: impl FnMut(u64) -> Result<()>,
) -> Result<Sequential> {
    for i in 0..warmup {
        if i % INTERRUPT_CHECK_OPS == 0 {
            crate::signals::check()?;
        }
        op(u64::MAX / 2 + i)?;
    }
    let mut latency = histogram();
    let mut service = rate_per_s.map(|_| histogram());
    let interval_ns = rate_per_s.map(|r| 1e9 / r);
    let began = Instant::now();
    for i in 0..ops {
        if i % INTERRUPT_CHECK_OPS == 0 {
            crate::signals::check()?;
            progress.inc(INTERRUPT_CHECK_OPS.min(ops - i));
        }
        match interval_ns {
            None => {
                let t0 = Instant::now();
                op(i)?;
                record(&mut latency, t0.elapsed().as_nanos() as u64);
            }
            Some(interval) => {
                let intended_ns = (i as f64 * interval) as u64;
                // Wait for the request's slot (spinning: the intervals are
                // microseconds); a late request goes at once.
                while (began.elapsed().as_nanos() as u64) < intended_ns {
                    std::hint::spin_loop();
                }
                let sent_ns = began.elapsed().as_nanos() as u64;
                op(i)?;
                let done_ns = began.elapsed().as_nanos() as u64;
                record_open_loop(&mut latency, intended_ns, done_ns);
                if let Some(s) = service.as_mut() {
                    record(s, done_ns - sent_ns);
                }
            }
        }
    }
    Ok(Sequential {
        latency,
        service,
        elapsed: began.elapsed(),
    })
}

/// What one request of a multi-client run was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// A write (SET).
    Write = 0,
    /// A read (GET).
    Read = 1,
}

/// The merged outcome of [`run_clients`].
pub struct ClientsRun {
    /// Write latencies (measured window only).
    pub writes: Histogram<u64>,
    /// Read latencies (measured window only).
    pub reads: Histogram<u64>,
    /// Length of the measured window.
    pub window: Duration,
}

impl ClientsRun {
    /// Requests completed in the window.
    pub fn ops(&self) -> u64 {
        self.writes.len() + self.reads.len()
    }
}

const PHASE_WARMUP: u8 = 0;
const PHASE_MEASURE: u8 = 1;
const PHASE_STOP: u8 = 2;

/// Runs `threads` client threads (thread `t` pinned to
/// `cores[t % cores.len()]`, unpinned when `cores` is empty) in a closed
/// loop: `warmup`, then a measured window of `duration`. `make(t)` builds
/// thread `t`'s request function (it owns its client); `at_window(start)`
/// is called on this thread at the start (`true`) and end (`false`) of the
/// window (to read server counters). Requests that complete inside the
/// window are counted.
pub fn run_clients<F>(
    threads: usize,
    cores: &[usize],
    warmup: Duration,
    duration: Duration,
    progress: &Progress,
    make: impl Fn(usize) -> F,
    at_window: impl FnMut(bool),
) -> Result<ClientsRun>
where
    F: FnMut() -> Result<OpKind> + Send + 'static,
{
    run_clients_recording(
        threads,
        cores,
        warmup,
        duration,
        progress,
        |t| {
            let mut f = make(t);
            move |record: &mut dyn FnMut(OpKind, u64)| {
                let t0 = Instant::now();
                let kind = f()?;
                record(kind, t0.elapsed().as_nanos() as u64);
                Ok(())
            }
        },
        at_window,
    )
}

/// [`run_clients`] for request functions that time their own requests:
/// each call of thread `t`'s function reports every request it completed
/// through `record(kind, latency_ns)` (a pipelined client completes
/// several per call, each with its own latency from its submission).
pub fn run_clients_recording<F>(
    threads: usize,
    cores: &[usize],
    warmup: Duration,
    duration: Duration,
    progress: &Progress,
    make: impl Fn(usize) -> F,
    mut at_window: impl FnMut(bool),
) -> Result<ClientsRun>
where
    F: FnMut(&mut dyn FnMut(OpKind, u64)) -> Result<()> + Send + 'static,
{
    assert!(threads > 0, "run_clients needs a thread");
    let phase = Arc::new(AtomicU8::new(PHASE_WARMUP));
    let ready = Arc::new(Barrier::new(threads + 1));
    let failed = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let mut f = make(t);
        let core = (!cores.is_empty()).then(|| cores[t % cores.len()]);
        let (phase, ready, failed) = (phase.clone(), ready.clone(), failed.clone());
        handles.push(std::thread::spawn(
            move || -> Result<[Histogram<u64>; 2]> {
                crate::cluster::pin_current(core);
                let mut h = [histogram(), histogram()];
                ready.wait();
                loop {
                    let p = phase.load(Ordering::Relaxed);
                    if p == PHASE_STOP || crate::signals::interrupted() {
                        break;
                    }
                    let mut completed = |kind: OpKind, ns: u64| {
                        // Only requests that began and ended in the window.
                        if p == PHASE_MEASURE && phase.load(Ordering::Relaxed) == PHASE_MEASURE {
                            record(&mut h[kind as usize], ns);
                        }
                    };
                    if let Err(e) = f(&mut completed) {
                        failed.fetch_add(1, Ordering::Relaxed);
                        return Err(e);
                    }
                }
                Ok(h)
            },
        ));
    }
    ready.wait();
    let sleep_checked = |d: Duration| {
        let end = Instant::now() + d;
        let total = d.as_secs_f64().max(1e-9);
        while Instant::now() < end && failed.load(Ordering::Relaxed) == 0 {
            if crate::signals::interrupted() {
                break;
            }
            let left = end.saturating_duration_since(Instant::now());
            std::thread::sleep(left.min(Duration::from_millis(20)));
            progress.set_fraction(1.0 - left.as_secs_f64() / total);
        }
    };
    sleep_checked(warmup);
    at_window(true);
    let began = Instant::now();
    phase.store(PHASE_MEASURE, Ordering::Relaxed);
    sleep_checked(duration);
    phase.store(PHASE_STOP, Ordering::Relaxed);
    let window = began.elapsed();
    at_window(false);
    let mut writes = histogram();
    let mut reads = histogram();
    let mut first_error = None;
    for h in handles {
        match h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)) {
            Ok([w, r]) => {
                writes.add(&w).expect("same bounds");
                reads.add(&r).expect("same bounds");
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    crate::signals::check()?;
    Ok(ClientsRun {
        writes,
        reads,
        window,
    })
}
