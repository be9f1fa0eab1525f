//! A real, short jitter run on core 0: checks consistency, not timing.

use verbatim_kernel_cfg::jitter::{measure, JitterOptions};

#[test]
fn short_run_on_core_0_is_consistent() {
    let report = measure(&JitterOptions {
        core: 0,
        seconds: 0.2,
        threshold_ns: 15_000,
    })
    .expect("core 0 is available");
    assert!(report.samples > 0);
    let histogram_total: u64 = report.histogram.iter().map(|b| b.count).sum();
    assert_eq!(histogram_total, report.samples);
    assert!(report.gap_ns_p50 > 0);
    assert!(report.gap_ns_p99 >= report.gap_ns_p50);
    assert!(report.gap_ns_p9999 >= report.gap_ns_p99);
    assert!(report.gap_ns_max >= report.gap_ns_p9999);
    assert!(report.gap_ns_min <= report.gap_ns_p50);
    // The loop ends by itself at the deadline (not before).
    assert!(report.duration_ns >= 200_000_000);
    assert!(!report.worst_gaps.is_empty());
    assert_eq!(report.worst_gaps[0].gap_ns, report.gap_ns_max);
    assert!(report.worst_gaps[0].offset_ns < report.duration_ns);
    assert!(report.gaps_above_threshold <= report.samples);
    let text = report.render();
    assert!(text.contains("gap_ns_p99.99"));
    assert!(text.contains("worst gaps"));
}
