//! Check and plan a Linux host for microsecond replication.
//!
//! uKharon's failure detector (§4.2) only works when a replica's polling
//! core is never interrupted for long: on a NO_HZ_FULL kernel booted with
//! `isolcpus`, heartbeat counters were incremented every 5 µs and never more
//! than 15 µs apart (§4.2, §7). This crate tells an operator whether a host
//! is set up that way and what to change:
//!
//! - [`check`] reads `/proc`, `/sys` and `/boot` (relative to a root, so the
//!   rules run on recorded trees in tests) and returns a [`Report`] with one
//!   [`Item`] per rule.
//! - [`plan`](plan::plan) prints the kernel command line, runtime commands
//!   and replica pins that make `check` pass for a set of cores.
//! - [`jitter::measure`] pins a thread and measures the gaps a busy-polling
//!   loop suffers.
//!
//! # At replica start
//!
//! ```no_run
//! use verbatim_kernel_cfg::{check, CheckOptions, Status};
//!
//! let report = check(&CheckOptions { cores: Some(vec![2]), ..CheckOptions::default() });
//! report.log(); // Fail → tracing::error!, Warn → tracing::warn!
//! if report.worst() == Status::Fail {
//!     // Log and go on: a replica never refuses to start on a host check.
//! }
//! ```
//!
//! Every threshold is in [`thresholds`], each with the reason for its value.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
pub mod cmdline;
pub mod cpulist;
pub mod jitter;
pub mod plan;
pub mod thresholds;
pub mod tree;

pub use check::{check, CheckOptions, Item, Report, Status};
pub use cpulist::{CpuListError, CpuSet};
pub use jitter::{JitterError, JitterOptions, JitterReport};
pub use plan::{plan, replica_pins_toml, Plan, PlanError, PlanOptions};
pub use tree::{HostTree, ReadError};
