//! Deterministic simulator for verbatim-core.

pub mod check;
pub mod cluster;
pub mod conformance;
pub mod history;
pub mod kvsm;
pub mod loggp;
pub mod mcast_disk;
pub mod memory;
pub mod model;
pub mod net;
pub mod rdmc_run;
pub mod swarm;
