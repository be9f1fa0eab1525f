//! One short `latency` run against a real local cluster: the result has
//! the right shape. Speed is not asserted (benchmarks measure speed; this
//! runs on a shared 2-core CI machine next to other tests).

mod common;

use common::verbatim_bin;
use std::time::Duration;
use verbatim_bench::cluster::ClusterSpec;
use verbatim_bench::latency::{run, LatencyOptions};
use verbatim_bench::progress::Progress;
use verbatim_client::client::Wait;
use verbatim_client::manifest::PollMode;

#[test]
fn a_short_latency_run_has_a_sane_shape() {
    let spec = ClusterSpec {
        binary: verbatim_bin(),
        // Nobody spins and nothing is pinned: CI shares its two cores.
        poll: PollMode::Adaptive,
        replica_cores: Vec::new(),
        overrides: Vec::new(),
        keep_logs: false,
    };
    let opts = LatencyOptions {
        group_sizes: vec![3],
        value_sizes: vec![64],
        ops: 200,
        warmup: 20,
        keys: 50,
        rate_per_s: None,
        client_core: None,
        wait: Wait::Yield,
        attempt_timeout: Duration::from_millis(200),
    };
    let r = run(&spec, &opts, &Progress::hidden()).expect("the latency run");
    assert_eq!(r.mode, "closed-loop");
    assert_eq!(r.points.len(), 2, "{r:?}");
    for (p, op) in r.points.iter().zip(["set", "get"]) {
        assert_eq!((p.replicas, p.value_bytes, p.op.as_str()), (3, 64, op));
        let s = &p.latency;
        assert_eq!(s.count, 200);
        assert!(s.min_ns > 0);
        assert!(s.is_ordered(), "{s:?}");
        assert!(s.p50_ns <= s.p99_ns && s.p99_ns <= s.max_ns, "{s:?}");
        assert!(p.ops_per_sec > 0.0);
        assert!(!p.cdf.is_empty());
        assert!(p.service.is_none());
    }
    // Open loop at a modest rate: latency from the intended start is never
    // below the service time.
    let open = run(
        &spec,
        &LatencyOptions {
            rate_per_s: Some(2_000.0),
            ops: 100,
            ..opts
        },
        &Progress::hidden(),
    )
    .expect("the open-loop run");
    assert_eq!(open.mode, "open-loop");
    for p in &open.points {
        let service = p
            .service
            .as_ref()
            .expect("open loop keeps the service time");
        assert_eq!(p.latency.count, 100);
        assert!(p.latency.max_ns >= service.max_ns, "{p:?}");
    }
}
