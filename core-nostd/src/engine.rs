//! The seam between the driver and the protocol engines.
//!
//! An engine is a sans-IO state machine over one-sided operations: time
//! comes in, work requests and access changes come out, completions come
//! back. Several engines share one fabric and one poll loop: the log
//! engine ([`crate::node::Node`], DARE) and the heartbeat engine
//! ([`crate::heartbeat::HeartbeatEngine`], uKharon's second detector level)
//! today; membership, multicast and backup-memory engines later.
//!
//! Each engine owns the regions it declares ([`crate::layout::RegionSpec`])
//! and a range of work-request ids: the driver tags every work request an
//! engine posts with the engine's [`EngineTag`] in the top byte of its
//! [`WrId`] and routes each completion back to the engine whose tag it
//! carries, with the tag removed. An engine therefore only ever sees its
//! own ids, which must stay below [`ENGINE_WR_ID_LIMIT`]. Engines talk to
//! each other only through events the driver passes, never directly.

use crate::fabric::{Action, Completion, FabricError, MemberId, WrId};

/// Bits of a [`WrId`] an engine may use; the byte above carries its tag.
pub const ENGINE_WR_ID_BITS: u32 = 56;
/// Every engine-local work-request id is below this.
pub const ENGINE_WR_ID_LIMIT: u64 = 1 << ENGINE_WR_ID_BITS;

/// Identifies an engine inside one driver (the top byte of its ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EngineTag(pub u8);

impl EngineTag {
    /// The log engine (DARE).
    pub const LOG: EngineTag = EngineTag(0);
    /// The heartbeat-counter engine (uKharon §4.2).
    pub const HEARTBEAT: EngineTag = EngineTag(1);
    /// The view engine (uKharon's views and leases).
    pub const VIEWS: EngineTag = EngineTag(2);
    /// The multicast engine (Derecho's SMC and atomic multicast).
    pub const MULTICAST: EngineTag = EngineTag(3);
    /// The large-message multicast engine (Derecho's RDMC).
    pub const RDMC: EngineTag = EngineTag(4);
    /// The backup-memory engine (MacR).
    pub const BACKUP: EngineTag = EngineTag(5);

    /// The fabric-wide id of an engine-local id. Panics when the engine
    /// used bits that belong to the tag: that is a bug of the engine.
    #[inline]
    pub fn tag(self, local: WrId) -> WrId {
        assert!(
            local.0 < ENGINE_WR_ID_LIMIT,
            "an engine's work-request id overflows its range"
        );
        WrId((u64::from(self.0) << ENGINE_WR_ID_BITS) | local.0)
    }

    /// Splits a fabric-wide id into the engine's tag and its local id.
    #[inline]
    pub fn split(wr_id: WrId) -> (EngineTag, WrId) {
        (
            EngineTag((wr_id.0 >> ENGINE_WR_ID_BITS) as u8),
            WrId(wr_id.0 & (ENGINE_WR_ID_LIMIT - 1)),
        )
    }
}

/// What the driver needs from every engine. The engine's own richer API
/// (client submissions, events, status) stays on its type.
pub trait Engine {
    /// A short name for logs and status.
    fn name(&self) -> &'static str;

    /// A completion of one of this engine's work requests (tag removed).
    fn handle_completion(&mut self, now_ns: u64, completion: Completion);

    /// Observes memory, fires due timers, posts what is due.
    fn handle_timeout(&mut self, now_ns: u64);

    /// The host learned that a peer's process is gone.
    fn handle_peer_down(&mut self, now_ns: u64, peer: MemberId);

    /// The host learned that a peer that was gone runs again: a new
    /// process (a restart, with empty memory) has taken its place. An
    /// engine that wrote the peer off may trust it again from now on.
    fn handle_peer_up(&mut self, now_ns: u64, peer: MemberId) {
        let _ = (now_ns, peer);
    }

    /// The next action, in order; drained after every call.
    fn poll_action(&mut self) -> Option<Action>;

    /// One of this engine's actions failed on the fabric (a reconnect to a
    /// peer that is gone, a revoke that could not be confirmed). Work
    /// requests never fail here: they fail through their completion.
    fn handle_action_failed(&mut self, now_ns: u64, action: &Action, error: FabricError);

    /// When [`Engine::handle_timeout`] must be called at the latest.
    fn next_deadline(&self) -> u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_and_stay_apart() {
        for tag in [EngineTag::LOG, EngineTag::HEARTBEAT, EngineTag(255)] {
            for local in [0, 1, 0xFFFF_FFFF, ENGINE_WR_ID_LIMIT - 1] {
                let id = tag.tag(WrId(local));
                assert_eq!(EngineTag::split(id), (tag, WrId(local)));
            }
        }
        assert_ne!(
            EngineTag::LOG.tag(WrId(7)),
            EngineTag::HEARTBEAT.tag(WrId(7))
        );
    }

    #[test]
    #[should_panic(expected = "overflows its range")]
    fn an_id_past_the_range_is_a_bug() {
        EngineTag::LOG.tag(WrId(ENGINE_WR_ID_LIMIT));
    }
}
