//! The one-sided fabrics a replica owns, and what the replica loop needs
//! from a fabric beyond the core's [`Fabric`] trait: connecting to peers,
//! and the host's view of which peer processes are gone.
//!
//! * [`shm`]: shared memory between processes on one host (the default);
//! * [`verbs`] (feature `rdma`): ibverbs, RoCE or InfiniBand;
//! * [`liveness`]: death notices and pidfds of peer processes.

pub mod liveness;
pub mod shm;
#[cfg(feature = "rdma")]
pub mod verbs;

use liveness::PeerLiveness;
use verbatim_core::fabric::{Fabric, MemberId};

/// Why a peer is not connected (yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerProblem {
    /// True when waiting may help (the peer has not started yet); false
    /// for configuration errors (another layout, another version).
    pub retry: bool,
    /// What is wrong.
    pub message: String,
}

/// A fabric as the replica process drives it.
pub trait HostFabric: Fabric {
    /// Connects every peer not connected yet (cheap when all are);
    /// returns the ones still missing.
    fn connect_peers(&mut self) -> Vec<(MemberId, PeerProblem)>;

    /// Process-exit notifications of peers (pidfd on one host); a fabric
    /// without them returns a view in which nobody ever dies, and the
    /// protocol relies on its heartbeats and on error completions.
    fn liveness(&self) -> &PeerLiveness;

    /// "shm" or "verbs", for status and logs.
    fn name(&self) -> &'static str;
}
