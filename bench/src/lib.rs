//! Latency and throughput microbenchmarks, failover timing, and a
//! side-by-side comparison with Redis, for Verbatim (issue #5).
//!
//! Modelled on the evaluations of DARE (§6, figures 8 and 9), uKharon (§7,
//! table 2) and MacR (§IV), with perftest's output conventions: every
//! result carries its [`setup::Setup`] (fabric, poll mode, core pins, group
//! size, machine, CPU state, date), latencies are HDR histograms recorded
//! after a warm-up, and the closed-loop measurements say so (open loop is
//! `latency --rate`, with latency counted from the intended send time).
//!
//! Layout: one module per benchmark ([`latency`], [`throughput`],
//! [`workload`], [`failover`], [`compare`], [`floor`], [`reconfig`],
//! [`recovery`], [`bulk_sync`], [`lease`], [`multicast`] and its large
//! messages [`rdmc`]), the loops they share
//! ([`measure`]), statistics ([`stats`]), key choice ([`zipf`]), local
//! clusters, cores and replication modes ([`cluster`]), the
//! replicas' CPU time ([`cpu`]), Redis ([`redis`], [`resp`]), the
//! result document and its tables ([`report`]), SVG plots ([`plot`]), and
//! Ctrl-C handling ([`signals`]).

pub mod bulk_sync;
pub mod cluster;
pub mod compare;
pub mod cpu;
pub mod error;
pub mod failover;
pub mod floor;
pub mod latency;
pub mod lease;
pub mod measure;
pub mod multicast;
pub mod plot;
pub mod progress;
pub mod rdmc;
pub mod reconfig;
pub mod recovery;
pub mod redis;
pub mod report;
pub mod resp;
pub mod setup;
pub mod signals;
pub mod stats;
pub mod throughput;
pub mod workload;
pub mod zipf;

pub use error::{BenchError, Result};
