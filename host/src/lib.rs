//! The verbatim replica process (`verbatim`).
//!
//! * [`fabric`]: the one-sided fabrics the replica owns: shared memory
//!   (default) and ibverbs (feature `rdma`), with the host's view of which
//!   peers are alive;
//! * [`gateway`]: where client requests come in: the RESP server (TCP) and
//!   the queue that hands its requests to the poll loop (shared-memory
//!   slots are `verbatim_client::slots`);
//! * [`replica`]: the replica process: setup, the poll loop that runs the
//!   driver, storage for the services, failover records, status endpoint;
//! * [`topology`]: cores, NUMA placement and scheduling of the process's
//!   threads;
//! * [`group`]: an embeddable multicast group member (`Group::send`,
//!   `Group::next_delivery`, `Group::view`) for Rust applications;
//! * [`cli`]: what the binary's commands need beyond the library (`demo`,
//!   `mcast`).
//!
//! Everything a client or a tool needs (manifest, client library, RESP
//! codec, death notices, local clusters) is in `verbatim-client`, the
//! status schema in `verbatim-status`.

pub mod cli;
pub mod fabric;
pub mod gateway;
pub mod group;
pub mod replica;
pub mod topology;
