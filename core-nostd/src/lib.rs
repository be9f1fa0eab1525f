//! # verbatim-core
//!
//! The allocation-free, sans-IO heart of Verbatim: DARE's replicated log
//! (Poke & Hoefler, HPDC 2015) driven over one-sided verbs, with its
//! control arrays kept as a Derecho-style shared state table.
//!
//! * `#![no_std]`, no `alloc`: every buffer is either sized from the
//!   [`Config`] and lives in the registered memory the host provides
//!   (log ring, adjustment list, SST rows, session table), or has a small
//!   compile-time capacity that the configuration is checked against
//!   (per-member arrays of [`fabric::MAX_MEMBERS`], queues of
//!   [`node::ACTION_QUEUE_CAP`] and friends).
//! * No clock, no RNG: time comes in as `now` (nanoseconds, monotonic) and
//!   randomness from a PRNG seeded by [`Config::seed`].
//! * Every entry point does bounded work; invariants are `assert!`s that
//!   stay on in release builds.
//! * Memory that peers write (rows, the log) is never behind a Rust
//!   reference: it is read through [`mem::Memory`] (atomic words, copied
//!   bytes) and re-validated (versions, checksums) before it is acted on.
//!
//! ## Driving contract
//!
//! A host owns one [`Node`], its registered memory (`M: Memory`, laid out
//! by [`layout::Layout`]), a [`fabric::Fabric`] endpoint and a clock. The
//! node never calls the host; the host calls the node:
//!
//! | kind | methods |
//! |---|---|
//! | getters | [`Node::role`], [`Node::term`], [`Node::leader`], [`Node::status`], [`Node::state_machine`] |
//! | inputs | [`Node::handle_completion`], [`Node::handle_timeout`], [`Node::handle_peer_down`] |
//! | client commands | [`Node::submit_write`], [`Node::submit_read`] |
//! | outputs | [`Node::poll_action`] (work requests, access changes, reconnects, in order), [`Node::poll_event`] (replies, reads ready, role changes), [`Node::next_deadline`] |
//!
//! The loop, in this order:
//!
//! ```ignore
//! loop {
//!     let now = clock.now_ns();
//!     while let Some(c) = fabric.poll_completion() {
//!         node.handle_completion(now, c);
//!     }
//!     for request in clients.drain() {           // writes and reads
//!         let _ = node.submit_write(now, request.client, request.id, &request.op);
//!     }
//!     node.handle_timeout(now);                  // observe memory, timers,
//!                                                // replicate the batch
//!     while let Some(action) = node.poll_action() {
//!         fabric.execute(&action)?;              // in order: a revoke is in
//!     }                                          // effect before the next one
//!     while let Some(event) = node.poll_event() {
//!         clients.deliver(event);                // Reply, ReadReady, ...
//!     }
//!     idle_until(node.next_deadline());          // busy-poll: return at once
//! }
//! ```
//!
//! Rules:
//! 1. Drain every action and event after each call, before the next one
//!    (the queues are bounded for that pattern; overflowing one is a host
//!    bug and panics).
//! 2. Execute actions in order. [`fabric::Action::SetAccess`] must be in
//!    effect when the next action runs: the node relies on it to get
//!    exclusive access to its log before it votes (DARE §3.2.1).
//! 3. Every posted work request yields exactly one completion.
//! 4. Peers' writes are noticed only when the node is called: a host that
//!    parks between deadlines must wake when its memory is written.
//!
//! ## Modules
//! * [`fabric`]: the one-sided vocabulary (work requests, completions,
//!   access, the [`fabric::Fabric`] trait).
//! * [`layout`]: the registered memory layout and its hash.
//! * [`sst`]: the shared state table framework (schemas of typed columns,
//!   own-row pushes of the whole row or a column range, guarded reads,
//!   reducers, predicates and triggers); DARE's control row is one schema.
//! * [`log`]: the ring, entries, the adjustment list.
//! * [`engine`]: the seam between the driver and the engines (work-request
//!   id ranges, the [`Engine`] trait).
//! * [`node`]: the log engine (election, replication, commit, pruning,
//!   reads).
//! * [`heartbeat`]: the heartbeat-counter engine (uKharon §4.2).
//! * [`sessions`]: exactly-once bookkeeping.
//! * [`sm`], [`kv`]: the state-machine trait and the key-value store.
//! * [`snapshot`]: state-machine snapshots for recovery (DARE §3.4).

#![no_std]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod backup;
pub mod checksum;
pub mod config;
pub mod consensus;
pub mod engine;
pub mod fabric;
pub mod heartbeat;
pub mod kv;
pub mod layout;
pub mod lease;
pub mod log;
pub mod mem;
pub mod membership;
pub mod multicast;
pub mod node;
pub mod rdmc;
pub mod rng;
pub mod service;
pub mod sessions;
pub mod sm;
pub mod snapshot;
pub mod sst;
pub mod stream;
pub mod subgroup;
#[cfg(test)]
mod test_backends;
#[cfg(test)]
mod test_memory;
pub mod views;

pub use config::{Config, ConfigError, Mode};
pub use engine::{Engine, EngineTag};
pub use fabric::{
    Access, Action, Addr, Channel, Completion, Fabric, MemberId, Op, RegionId, WcStatus,
    WorkRequest, WrId,
};
pub use heartbeat::{CounterEvent, HeartbeatEngine};
pub use layout::Layout;
pub use mem::Memory;
pub use node::{Event, Node, NodeStatus, Role, SubmitError, Submitted};
pub use sm::{RequestError, StateMachine};
