//! `jitter`: how long is a busy-polling core interrupted?
//!
//! A thread pinned to one core reads the monotonic clock in a tight loop.
//! Each gap between two consecutive reads is time the loop did not run: the
//! read itself (tens of ns) plus any interruption (tick, IRQ, another task,
//! SMI, hypervisor). A replica's heartbeat loop would stall for the same
//! gaps, so the largest ones are compared with uKharon's 15 µs bound.
//!
//! Clock: `std::time::Instant` (CLOCK_MONOTONIC through the vDSO, TSC-backed
//! on most x86 hosts, ~20-30 ns a read). rdtsc would be cheaper but needs a
//! calibration and an invariant TSC; the vDSO read is what the replica uses.
//!
//! Statistics are pure ([`GapRecorder`]) so they are tested on synthetic
//! gaps; only [`measure`] reads the clock.

use std::fmt::Write as _;
use std::time::Instant;

use serde::Serialize;

use crate::thresholds::{GAP_NS_BOUND, JITTER_SECONDS_MAX, JITTER_WORST_GAP_COUNT};
use crate::tree::HostTree;

/// Why a jitter run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum JitterError {
    /// `--seconds` is not a positive number up to the maximum.
    #[error("--seconds must be > 0 and <= {JITTER_SECONDS_MAX}, got {0}")]
    BadSeconds(f64),
    /// The core is not one this process may run on.
    #[error("core {core} is not available to this process (available: {available})")]
    CoreNotAvailable {
        /// The requested core.
        core: usize,
        /// The cores this process may run on.
        available: String,
    },
    /// The kernel refused to pin the thread.
    #[error("could not pin the measuring thread to core {0}")]
    PinFailed(usize),
    /// The measuring thread died.
    #[error("the measuring thread panicked")]
    ThreadPanicked,
}

/// Inputs of [`measure`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JitterOptions {
    /// The core to pin the measuring thread to.
    pub core: usize,
    /// How long to measure, in seconds (fractions allowed).
    pub seconds: f64,
    /// Gaps above this are counted, in ns (default: [`GAP_NS_BOUND`]).
    pub threshold_ns: u64,
}

impl Default for JitterOptions {
    fn default() -> Self {
        Self {
            core: 0,
            seconds: 1.0,
            threshold_ns: GAP_NS_BOUND,
        }
    }
}

/// Upper bounds (exclusive, ns) of the display histogram's buckets; a last
/// bucket holds everything at or above 10 ms. Chosen around the numbers
/// that matter: a clock read (<100 ns), uKharon's 5 µs increment and 15 µs
/// bound, a scheduler tick's few µs, and a time slice (ms).
pub const DISPLAY_BUCKET_UPPER_NS: [u64; 13] = [
    100, 250, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 20_000, 50_000, 100_000, 1_000_000,
    10_000_000,
];

const DISPLAY_BUCKET_COUNT: usize = DISPLAY_BUCKET_UPPER_NS.len() + 1;

/// Sub-buckets per power of two in the percentile histogram: 16 gives
/// percentiles within 1/16 (6%) of the true value.
const SUB_BUCKET_BITS: u32 = 4;
const SUB_BUCKET_COUNT: usize = 1 << SUB_BUCKET_BITS;
/// Values below 16 get one bucket each; each power of two from 2^4 to 2^63
/// gets 16.
const FINE_BUCKET_COUNT: usize =
    SUB_BUCKET_COUNT + (64 - SUB_BUCKET_BITS as usize) * SUB_BUCKET_COUNT;

/// Index of `value` in the log-linear (HDR-style) percentile histogram.
fn fine_index(value: u64) -> usize {
    if value < SUB_BUCKET_COUNT as u64 {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros(); // >= SUB_BUCKET_BITS
    let shift = exponent - SUB_BUCKET_BITS;
    let sub = ((value >> shift) as usize) & (SUB_BUCKET_COUNT - 1);
    SUB_BUCKET_COUNT + (shift as usize) * SUB_BUCKET_COUNT + sub
}

/// Largest value that falls into fine bucket `index`.
fn fine_upper(index: usize) -> u64 {
    if index < SUB_BUCKET_COUNT {
        return index as u64;
    }
    let shift = ((index - SUB_BUCKET_COUNT) / SUB_BUCKET_COUNT) as u32;
    let sub = ((index - SUB_BUCKET_COUNT) % SUB_BUCKET_COUNT) as u64;
    let lower = (SUB_BUCKET_COUNT as u64 + sub) << shift;
    lower.saturating_add((1u64 << shift) - 1)
}

fn display_index(gap_ns: u64) -> usize {
    DISPLAY_BUCKET_UPPER_NS
        .iter()
        .position(|&upper| gap_ns < upper)
        .unwrap_or(DISPLAY_BUCKET_UPPER_NS.len())
}

/// One of the largest gaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Gap {
    /// Length of the gap.
    pub gap_ns: u64,
    /// Time from the start of the run to the start of the gap.
    pub offset_ns: u64,
}

/// Collects gaps into fixed-size histograms. All memory is allocated in
/// [`GapRecorder::new`]; [`GapRecorder::record`] does bounded work.
#[derive(Debug, Clone)]
pub struct GapRecorder {
    fine_counts: Box<[u64; FINE_BUCKET_COUNT]>,
    display_counts: [u64; DISPLAY_BUCKET_COUNT],
    worst: [Gap; JITTER_WORST_GAP_COUNT],
    /// Index into `worst` of its smallest entry, the one to replace next.
    worst_min_index: usize,
    samples: u64,
    gap_ns_min: u64,
    gap_ns_max: u64,
    gap_ns_sum: u128,
    threshold_ns: u64,
    gaps_above_threshold: u64,
    gaps_above_threshold_ns_total: u64,
}

impl GapRecorder {
    /// An empty recorder counting gaps above `threshold_ns`.
    pub fn new(threshold_ns: u64) -> Self {
        Self {
            fine_counts: Box::new([0; FINE_BUCKET_COUNT]),
            display_counts: [0; DISPLAY_BUCKET_COUNT],
            worst: [Gap {
                gap_ns: 0,
                offset_ns: 0,
            }; JITTER_WORST_GAP_COUNT],
            worst_min_index: 0,
            samples: 0,
            gap_ns_min: u64::MAX,
            gap_ns_max: 0,
            gap_ns_sum: 0,
            threshold_ns,
            gaps_above_threshold: 0,
            gaps_above_threshold_ns_total: 0,
        }
    }

    /// Records one gap that started `offset_ns` after the run began.
    #[inline]
    pub fn record(&mut self, gap_ns: u64, offset_ns: u64) {
        self.samples += 1;
        self.gap_ns_sum += u128::from(gap_ns);
        self.fine_counts[fine_index(gap_ns)] += 1;
        self.display_counts[display_index(gap_ns)] += 1;
        self.gap_ns_min = self.gap_ns_min.min(gap_ns);
        self.gap_ns_max = self.gap_ns_max.max(gap_ns);
        if gap_ns > self.threshold_ns {
            self.gaps_above_threshold += 1;
            self.gaps_above_threshold_ns_total =
                self.gaps_above_threshold_ns_total.saturating_add(gap_ns);
        }
        // Almost every gap is below the smallest of the worst ten, so this
        // comparison is the only cost on the common path.
        if gap_ns > self.worst[self.worst_min_index].gap_ns {
            self.worst[self.worst_min_index] = Gap { gap_ns, offset_ns };
            self.worst_min_index = self
                .worst
                .iter()
                .enumerate()
                .min_by_key(|(_, gap)| gap.gap_ns)
                .map(|(index, _)| index)
                .unwrap_or(0);
        }
    }

    /// Number of gaps recorded.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The gap at quantile `q` (0..=1): the upper edge of its histogram
    /// bucket, so within 6% above the true value, and never above the
    /// largest gap seen. 0 when nothing was recorded.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.samples == 0 {
            return 0;
        }
        let q = q.clamp(0.0, 1.0);
        let rank = ((q * self.samples as f64).ceil() as u64).clamp(1, self.samples);
        let mut seen = 0u64;
        for (index, &count) in self.fine_counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return fine_upper(index).clamp(self.gap_ns_min, self.gap_ns_max);
            }
        }
        self.gap_ns_max
    }

    /// Builds the report of a run on `core` that lasted `duration_ns`.
    pub fn report(&self, core: usize, seconds: f64, duration_ns: u64) -> JitterReport {
        let mut worst_gaps: Vec<Gap> = self
            .worst
            .iter()
            .copied()
            .filter(|gap| gap.gap_ns > 0)
            .collect();
        worst_gaps.sort_by(|a, b| b.gap_ns.cmp(&a.gap_ns).then(a.offset_ns.cmp(&b.offset_ns)));
        let histogram = self
            .display_counts
            .iter()
            .enumerate()
            .map(|(index, &count)| HistogramBucket {
                lower_ns: if index == 0 {
                    0
                } else {
                    DISPLAY_BUCKET_UPPER_NS[index - 1]
                },
                upper_ns: DISPLAY_BUCKET_UPPER_NS.get(index).copied(),
                count,
            })
            .collect();
        JitterReport {
            core,
            seconds,
            duration_ns,
            samples: self.samples,
            gap_ns_min: if self.samples == 0 {
                0
            } else {
                self.gap_ns_min
            },
            gap_ns_mean: if self.samples == 0 {
                0
            } else {
                (self.gap_ns_sum / u128::from(self.samples)) as u64
            },
            gap_ns_p50: self.quantile_ns(0.50),
            gap_ns_p99: self.quantile_ns(0.99),
            gap_ns_p9999: self.quantile_ns(0.9999),
            gap_ns_max: self.gap_ns_max,
            threshold_ns: self.threshold_ns,
            gaps_above_threshold: self.gaps_above_threshold,
            gaps_above_threshold_ns_total: self.gaps_above_threshold_ns_total,
            worst_gaps,
            histogram,
            core_isolated: None,
            core_nohz_full: None,
        }
    }
}

/// One bucket of the display histogram: gaps in `lower_ns..upper_ns`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistogramBucket {
    /// Inclusive lower bound.
    pub lower_ns: u64,
    /// Exclusive upper bound; `None` for the last, open bucket.
    pub upper_ns: Option<u64>,
    /// Gaps in the bucket.
    pub count: u64,
}

impl HistogramBucket {
    /// "<15µs", ">=10ms".
    pub fn label(&self) -> String {
        match self.upper_ns {
            Some(upper) => format!("<{}", format_ns(upper)),
            None => format!(">={}", format_ns(self.lower_ns)),
        }
    }
}

/// The outcome of a jitter run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JitterReport {
    /// The core measured.
    pub core: usize,
    /// The requested duration in seconds.
    pub seconds: f64,
    /// The measured duration.
    pub duration_ns: u64,
    /// Number of gaps (clock reads).
    pub samples: u64,
    /// Smallest gap: the cost of one clock read and loop iteration.
    pub gap_ns_min: u64,
    /// Mean gap.
    pub gap_ns_mean: u64,
    /// Median gap (histogram bucket upper edge, ≤ 6% high).
    pub gap_ns_p50: u64,
    /// 99th percentile gap.
    pub gap_ns_p99: u64,
    /// 99.99th percentile gap.
    pub gap_ns_p9999: u64,
    /// Largest gap (exact).
    pub gap_ns_max: u64,
    /// The threshold gaps are counted against.
    pub threshold_ns: u64,
    /// Gaps longer than `threshold_ns`.
    pub gaps_above_threshold: u64,
    /// Time spent in those gaps: what a polling replica would have lost.
    pub gaps_above_threshold_ns_total: u64,
    /// The largest gaps, largest first, with their offset from the start.
    pub worst_gaps: Vec<Gap>,
    /// Display histogram; counts sum to `samples`.
    pub histogram: Vec<HistogramBucket>,
    /// Whether the core is in `/sys/devices/system/cpu/isolated` (`None`:
    /// unreadable).
    pub core_isolated: Option<bool>,
    /// Whether the core is in `/sys/devices/system/cpu/nohz_full` (`None`:
    /// the file is absent, i.e. a kernel without NO_HZ_FULL).
    pub core_nohz_full: Option<bool>,
}

/// "850ns", "12.5µs", "3ms".
pub fn format_ns(ns: u64) -> String {
    fn trim(value: f64, unit: &str) -> String {
        let text = format!("{value:.1}");
        let text = text.strip_suffix(".0").unwrap_or(&text);
        format!("{text}{unit}")
    }
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        trim(ns as f64 / 1e3, "µs")
    } else if ns < 1_000_000_000 {
        trim(ns as f64 / 1e6, "ms")
    } else {
        trim(ns as f64 / 1e9, "s")
    }
}

impl JitterReport {
    /// Human-readable table.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let isolated = match self.core_isolated {
            Some(true) => "isolated",
            Some(false) => "not isolated",
            None => "isolation unknown",
        };
        let nohz_full = match self.core_nohz_full {
            Some(true) => "nohz_full",
            Some(false) => "not nohz_full",
            // The sysfs file exists only on NO_HZ_FULL kernels.
            None => "kernel without NO_HZ_FULL",
        };
        let _ = writeln!(
            out,
            "jitter on core {} for {:.3} s ({isolated}, {nohz_full})",
            self.core,
            self.duration_ns as f64 / 1e9,
        );
        let _ = writeln!(out, "samples        {}", self.samples);
        let _ = writeln!(out, "gap_ns_min     {}", self.gap_ns_min);
        let _ = writeln!(out, "gap_ns_mean    {}", self.gap_ns_mean);
        let _ = writeln!(out, "gap_ns_p50     {}", self.gap_ns_p50);
        let _ = writeln!(out, "gap_ns_p99     {}", self.gap_ns_p99);
        let _ = writeln!(out, "gap_ns_p99.99  {}", self.gap_ns_p9999);
        let _ = writeln!(
            out,
            "gap_ns_max     {} ({})",
            self.gap_ns_max,
            format_ns(self.gap_ns_max)
        );
        let _ = writeln!(
            out,
            "gaps above {}: {} (together {}, {:.2}% of the run)",
            format_ns(self.threshold_ns),
            self.gaps_above_threshold,
            format_ns(self.gaps_above_threshold_ns_total),
            if self.duration_ns == 0 {
                0.0
            } else {
                self.gaps_above_threshold_ns_total as f64 * 100.0 / self.duration_ns as f64
            }
        );
        let _ = writeln!(out, "\nhistogram of gaps");
        let count_max = self.histogram.iter().map(|b| b.count).max().unwrap_or(0);
        for bucket in &self.histogram {
            // Log scale bar: a bucket with 10 gaps and one with 10 million
            // both stay visible.
            let bar_len = if bucket.count == 0 || count_max == 0 {
                0
            } else {
                let scale = ((count_max as f64).log10() + 1.0).max(1.0);
                (((bucket.count as f64).log10() + 1.0) / scale * 40.0).ceil() as usize
            };
            let _ = writeln!(
                out,
                "  {:>8} {:>12}  {}",
                bucket.label(),
                bucket.count,
                "#".repeat(bar_len)
            );
        }
        let _ = writeln!(out, "\nworst gaps      gap_ns   offset_ns");
        for (rank, gap) in self.worst_gaps.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {:>2}  {:>14}  {:>10}  ({} at {})",
                rank + 1,
                gap.gap_ns,
                gap.offset_ns,
                format_ns(gap.gap_ns),
                format_ns(gap.offset_ns)
            );
        }
        out
    }
}

/// Pins a thread to `opts.core` and records every gap between consecutive
/// clock reads for `opts.seconds`. The loop ends by itself at the deadline.
/// A core that is not isolated is measured all the same; the report says so.
pub fn measure(opts: &JitterOptions) -> Result<JitterReport, JitterError> {
    if !(opts.seconds > 0.0 && opts.seconds <= JITTER_SECONDS_MAX) {
        return Err(JitterError::BadSeconds(opts.seconds));
    }
    let available = core_affinity::get_core_ids().unwrap_or_default();
    let Some(core_id) = available.iter().copied().find(|c| c.id == opts.core) else {
        return Err(JitterError::CoreNotAvailable {
            core: opts.core,
            available: available
                .iter()
                .map(|c| c.id)
                .collect::<crate::cpulist::CpuSet>()
                .to_string(),
        });
    };
    let deadline_ns = (opts.seconds * 1e9) as u64;
    let threshold_ns = opts.threshold_ns;
    // A fresh thread, so the caller's affinity is left alone.
    let handle = std::thread::Builder::new()
        .name(format!("jitter-core{}", opts.core))
        .spawn(move || -> Result<(GapRecorder, u64), JitterError> {
            if !core_affinity::set_for_current(core_id) {
                return Err(JitterError::PinFailed(core_id.id));
            }
            let mut recorder = GapRecorder::new(threshold_ns);
            let duration_ns = poll_loop(&mut recorder, deadline_ns);
            Ok((recorder, duration_ns))
        })
        .map_err(|_| JitterError::ThreadPanicked)?;
    let (recorder, duration_ns) = handle.join().map_err(|_| JitterError::ThreadPanicked)??;
    let mut report = recorder.report(opts.core, opts.seconds, duration_ns);
    let live = HostTree::new("/");
    report.core_isolated = live
        .read_cpus("sys/devices/system/cpu/isolated")
        .ok()
        .map(|set| set.contains(opts.core));
    report.core_nohz_full = live
        .read_cpus("sys/devices/system/cpu/nohz_full")
        .ok()
        .map(|set| set.contains(opts.core));
    Ok(report)
}

/// The measuring loop: read the clock, record the gap since the previous
/// read, stop at `deadline_ns`. Returns the measured duration.
fn poll_loop(recorder: &mut GapRecorder, deadline_ns: u64) -> u64 {
    let start = Instant::now();
    let mut previous_ns = 0u64;
    loop {
        // u64 ns covers 584 years; JITTER_SECONDS_MAX is far below.
        let now_ns = start.elapsed().as_nanos() as u64;
        recorder.record(now_ns - previous_ns, previous_ns);
        previous_ns = now_ns;
        if now_ns >= deadline_ns {
            return now_ns;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fine_buckets_cover_every_value_in_order() {
        for value in [
            0u64,
            1,
            15,
            16,
            17,
            31,
            32,
            100,
            1_000,
            123_456,
            u64::MAX / 3,
            u64::MAX,
        ] {
            let index = fine_index(value);
            assert!(index < FINE_BUCKET_COUNT);
            assert!(fine_upper(index) >= value, "{value}");
            if index > 0 {
                assert!(fine_upper(index - 1) < value, "{value}");
            }
        }
        // Relative error bound: bucket width / lower edge <= 1/16.
        let index = fine_index(1_000);
        assert!(fine_upper(index) - 1_000 <= 1_000 / 16);
    }

    #[test]
    fn display_buckets() {
        assert_eq!(display_index(0), 0);
        assert_eq!(display_index(99), 0);
        assert_eq!(display_index(100), 1);
        assert_eq!(display_index(14_999), 7);
        assert_eq!(display_index(15_000), 8);
        assert_eq!(display_index(10_000_000), 13);
        assert_eq!(display_index(u64::MAX), 13);
    }

    #[test]
    fn synthetic_gaps_give_exact_summary() {
        let mut recorder = GapRecorder::new(15_000);
        let mut offset = 0;
        for index in 0..10_000u64 {
            let gap = if index % 1_000 == 999 {
                20_000 + index
            } else {
                30
            };
            recorder.record(gap, offset);
            offset += gap;
        }
        let report = recorder.report(0, 1.0, offset);
        assert_eq!(report.samples, 10_000);
        assert_eq!(
            report.histogram.iter().map(|b| b.count).sum::<u64>(),
            10_000
        );
        assert_eq!(report.gap_ns_min, 30);
        assert_eq!(report.gap_ns_p50, 30);
        assert_eq!(report.gap_ns_p99, 30);
        assert_eq!(report.gap_ns_max, 29_999);
        assert_eq!(report.gaps_above_threshold, 10);
        assert_eq!(
            report.gaps_above_threshold_ns_total,
            (0..10).map(|k| 20_999 + 1_000 * k).sum::<u64>()
        );
        assert!(report.gap_ns_p9999 >= 20_000 && report.gap_ns_p9999 <= report.gap_ns_max);
        assert_eq!(report.worst_gaps.len(), 10);
        assert_eq!(report.worst_gaps[0].gap_ns, 29_999);
        assert_eq!(report.worst_gaps[9].gap_ns, 20_999);
        assert!(report
            .worst_gaps
            .windows(2)
            .all(|w| w[0].gap_ns >= w[1].gap_ns));
        // The largest gap started after 9,999 gaps, 9,990 of them 30 ns.
        let expected_offset = 9_990 * 30 + (0..9).map(|k| 20_000 + 999 + 1_000 * k).sum::<u64>();
        assert_eq!(report.worst_gaps[0].offset_ns, expected_offset);
    }

    #[test]
    fn empty_recorder_reports_zeros() {
        let report = GapRecorder::new(15_000).report(0, 0.1, 0);
        assert_eq!(report.samples, 0);
        assert_eq!(report.gap_ns_p50, 0);
        assert_eq!(report.gap_ns_max, 0);
        assert!(report.worst_gaps.is_empty());
    }

    #[test]
    fn rejects_bad_durations_and_cores() {
        for seconds in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e9] {
            let opts = JitterOptions {
                seconds,
                ..JitterOptions::default()
            };
            assert!(matches!(measure(&opts), Err(JitterError::BadSeconds(_))));
        }
        let opts = JitterOptions {
            core: 100_000,
            seconds: 0.01,
            ..JitterOptions::default()
        };
        assert!(matches!(
            measure(&opts),
            Err(JitterError::CoreNotAvailable { .. })
        ));
    }

    #[test]
    fn formats_durations() {
        assert_eq!(format_ns(850), "850ns");
        assert_eq!(format_ns(15_000), "15µs");
        assert_eq!(format_ns(12_500), "12.5µs");
        assert_eq!(format_ns(3_000_000), "3ms");
        assert_eq!(format_ns(2_500_000_000), "2.5s");
    }
}
