//! Statistics: HDR histograms in nanoseconds, the percentiles the papers
//! report (DARE's p2/p98 next to the usual p50/p99/p99.9), CDF points for
//! plots, and small-sample distributions (failover phases over K kills).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest value a latency histogram holds (60 s): anything slower is
/// clamped to it (and would be a failure rather than a latency anyway).
pub const HISTOGRAM_NS_MAX: u64 = 60_000_000_000;
/// Significant decimal digits of the histograms (0.1 % resolution).
pub const HISTOGRAM_SIGFIG: u8 = 3;

/// An empty latency histogram (1 ns to [`HISTOGRAM_NS_MAX`], 3 digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HISTOGRAM_NS_MAX, HISTOGRAM_SIGFIG)
        .expect("constant bounds are valid")
}

/// Records one latency (clamped into the histogram's range).
pub fn record(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.clamp(1, HISTOGRAM_NS_MAX));
}

/// Records one latency measured from its *intended* start in an open-loop
/// run; the value already includes any wait behind earlier requests, so no
/// synthetic samples are added (unlike `record_correct`, which is for
/// closed-loop runs that know only their expected interval).
pub fn record_open_loop(h: &mut Histogram<u64>, intended_ns: u64, done_ns: u64) {
    record(h, done_ns.saturating_sub(intended_ns));
}

/// Percentiles of one latency series, in nanoseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Samples.
    pub count: u64,
    /// Smallest.
    pub min_ns: u64,
    /// 2nd percentile (DARE §6 reports p2–p98 as its error bars).
    pub p2_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 98th percentile.
    pub p98_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest.
    pub max_ns: u64,
    /// Mean.
    pub mean_ns: f64,
}

impl Summary {
    /// The percentiles of a histogram (all zero when it is empty). Each
    /// is the highest value equivalent to the quantile's bucket, so it is
    /// within 0.1 % of the exact order statistic.
    pub fn of(h: &Histogram<u64>) -> Summary {
        if h.is_empty() {
            return Summary::default();
        }
        Summary {
            count: h.len(),
            min_ns: h.min(),
            p2_ns: h.value_at_quantile(0.02),
            p50_ns: h.value_at_quantile(0.5),
            p98_ns: h.value_at_quantile(0.98),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
            mean_ns: h.mean(),
        }
    }

    /// True when the percentiles are ordered (a sanity check on results).
    pub fn is_ordered(&self) -> bool {
        self.min_ns <= self.p2_ns
            && self.p2_ns <= self.p50_ns
            && self.p50_ns <= self.p98_ns
            && self.p98_ns <= self.p99_ns
            && self.p99_ns <= self.p999_ns
            && self.p999_ns <= self.max_ns
    }
}

/// One point of a cumulative distribution: `quantile` of the samples are
/// at most `ns`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CdfPoint {
    /// Latency (ns).
    pub ns: u64,
    /// Fraction of samples at or below it, in `[0, 1]`.
    pub quantile: f64,
}

/// Quantiles at which [`cdf`] samples: every percent, then the tail.
fn cdf_quantiles() -> impl Iterator<Item = f64> {
    (0..100)
        .map(|i| f64::from(i) / 100.0)
        .chain([0.995, 0.999, 0.9995, 0.9999, 1.0])
}

/// CDF points of a histogram (about a hundred, denser in the tail);
/// empty for an empty histogram. Values never decrease.
pub fn cdf(h: &Histogram<u64>) -> Vec<CdfPoint> {
    if h.is_empty() {
        return Vec::new();
    }
    cdf_quantiles()
        .map(|q| CdfPoint {
            ns: if q == 0.0 {
                h.min()
            } else {
                h.value_at_quantile(q)
            },
            quantile: q,
        })
        .collect()
}

/// A small-sample distribution (e.g. a failover phase over K kills), in
/// microseconds, by nearest rank.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    /// Samples.
    pub count: usize,
    /// Smallest.
    pub min: u64,
    /// Median (nearest rank).
    pub p50: u64,
    /// 90th percentile (nearest rank).
    pub p90: u64,
    /// Largest.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

impl Dist {
    /// The distribution of `values` (all zero when empty).
    pub fn of(values: &[u64]) -> Dist {
        if values.is_empty() {
            return Dist::default();
        }
        let mut v = values.to_vec();
        v.sort_unstable();
        Dist {
            count: v.len(),
            min: v[0],
            p50: nearest_rank(&v, 0.5),
            p90: nearest_rank(&v, 0.9),
            max: v[v.len() - 1],
            mean: v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64,
        }
    }
}

/// The nearest-rank percentile of sorted, non-empty `v`: the smallest
/// value with at least `q` of the samples at or below it.
pub fn nearest_rank(v: &[u64], q: f64) -> u64 {
    assert!(!v.is_empty(), "nearest_rank of no samples");
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Nanoseconds as microseconds with one decimal, for tables.
pub fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_uniform_series_match_order_statistics() {
        let mut h = histogram();
        // 1..=10_000 µs in ns: the q-quantile is about q * 10 ms.
        for v in 1..=10_000u64 {
            record(&mut h, v * 1000);
        }
        let s = Summary::of(&h);
        assert_eq!(s.count, 10_000);
        let close = |got: u64, want: u64| {
            let err = (got as f64 - want as f64).abs() / want as f64;
            assert!(err < 0.002, "got {got}, want {want}");
        };
        close(s.p2_ns, 200_000);
        close(s.p50_ns, 5_000_000);
        close(s.p98_ns, 9_800_000);
        close(s.p99_ns, 9_900_000);
        close(s.p999_ns, 9_990_000);
        close(s.max_ns, 10_000_000);
        close(s.min_ns, 1_000);
        close(s.mean_ns as u64, 5_000_500);
        assert!(s.is_ordered());
    }

    #[test]
    fn p2_and_p98_cut_two_percent_from_each_end() {
        let mut h = histogram();
        // 2 % fast outliers, 96 % at 1 µs, 2 % slow outliers.
        for _ in 0..20 {
            record(&mut h, 100);
        }
        for _ in 0..960 {
            record(&mut h, 1_000);
        }
        for _ in 0..20 {
            record(&mut h, 1_000_000);
        }
        let s = Summary::of(&h);
        assert!(s.p2_ns <= 100, "{s:?}");
        assert!((1_000..1_001).contains(&s.p50_ns), "{s:?}");
        assert!((1_000..1_001).contains(&s.p98_ns), "{s:?}");
        assert!(s.p99_ns >= 999_000, "{s:?}");
    }

    #[test]
    fn empty_and_clamped_values() {
        let h = histogram();
        assert_eq!(Summary::of(&h), Summary::default());
        assert!(cdf(&h).is_empty());
        let mut h = histogram();
        record(&mut h, 0);
        record(&mut h, u64::MAX);
        assert_eq!(h.len(), 2);
        assert_eq!(h.min(), 1);
        assert!(h.max() >= HISTOGRAM_NS_MAX);
    }

    #[test]
    fn cdf_points_are_monotone_and_end_at_the_maximum() {
        let mut h = histogram();
        for v in 1..=1000u64 {
            record(&mut h, v * 10);
        }
        let pts = cdf(&h);
        assert!(pts.len() > 100);
        assert_eq!(pts[0].quantile, 0.0);
        assert_eq!(pts[0].ns, h.min());
        assert_eq!(pts.last().unwrap().quantile, 1.0);
        assert_eq!(pts.last().unwrap().ns, h.max());
        for w in pts.windows(2) {
            assert!(w[0].ns <= w[1].ns && w[0].quantile < w[1].quantile, "{w:?}");
        }
        // The median point is near the median sample.
        let mid = pts.iter().find(|p| p.quantile == 0.5).unwrap();
        assert!((4_990..=5_010).contains(&mid.ns), "{mid:?}");
    }

    #[test]
    fn open_loop_latency_counts_from_the_intended_start() {
        let mut h = histogram();
        // Intended at 1 ms, sent late at 3 ms, done at 3.002 ms: 2.002 ms.
        record_open_loop(&mut h, 1_000_000, 3_002_000);
        assert!((2_000_000..=2_004_000).contains(&h.max()));
    }

    #[test]
    fn small_sample_distributions_use_nearest_rank() {
        let d = Dist::of(&[50, 10, 40, 20, 30, 60, 70, 80, 90, 100]);
        assert_eq!((d.count, d.min, d.p50, d.p90, d.max), (10, 10, 50, 90, 100));
        assert_eq!(d.mean, 55.0);
        assert_eq!(Dist::of(&[7]).p90, 7);
        assert_eq!(Dist::of(&[]), Dist::default());
        assert_eq!(nearest_rank(&[1, 2, 3], 0.0), 1);
        assert_eq!(nearest_rank(&[1, 2, 3], 1.0), 3);
    }
}
