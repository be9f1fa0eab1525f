//! # verbatim-client
//!
//! Everything that talks to a verbatim group from outside a replica's poll
//! loop, without linking the replica process (`verbatim-host`):
//!
//! * [`manifest`]: the cluster manifest (TOML), validated, with the file
//!   and socket names it implies;
//! * [`client`] and [`pipeline`]: the client library (leader discovery,
//!   retries, exactly-once request ids) over shared-memory slots or RESP;
//! * [`slots`]: the client-slot segment, the only replica memory a client
//!   maps (never the log, the shared state table or the access words);
//! * [`resp`] and [`resp_stream`]: the Redis protocol (frames, the command
//!   layer of the key-value and stream services), shared by the client and
//!   the replica's RESP gateway;
//! * [`notice`] and [`process`]: death notices and process identities, how
//!   a client (and a replica) learns that a process is gone;
//! * [`files`] and [`shared`]: private run directories, 0600 files, and
//!   memory mapped by several processes;
//! * [`local`]: a local cluster of `verbatim replica` processes (tests,
//!   benchmarks, `verbatim up`).

#![deny(missing_docs)]

pub mod client;
pub mod error;
pub mod files;
pub mod local;
pub mod manifest;
pub mod notice;
pub mod pipeline;
pub mod process;
pub mod pubsub;
pub mod resp;
pub mod resp_stream;
pub mod shared;
pub mod slots;

pub use client::{Client, ClientError, ClientOptions, Transport, Wait};
pub use error::ShmError;
pub use manifest::Manifest;
pub use pipeline::Pipeline;
