//! One checker per invariant (DARE §4.1; Raft's safety properties, which
//! DARE shows it satisfies). Each is fed observations by the simulator and
//! reports [`Violation`]s; each has tests that feed it a violating history.

pub mod acknowledged;
pub mod backup;
pub mod committed;
pub mod completeness;
pub mod configurations;
pub mod counters;
pub mod election;
pub mod large;
pub mod leases;
pub mod linearizability;
pub mod log_matching;
pub mod multicast;
pub mod rdmc;
pub mod state_machine;
pub mod streams;
pub mod subgroups;
pub mod suspicions;
pub mod view_agreement;
pub mod view_leaders;
pub mod votes;

use verbatim_core::checksum::Checksum;
use verbatim_core::log::EntryHeader;

/// A log entry as the checkers compare it: index, term and a digest of its
/// kind, client, request and payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId {
    /// Log index.
    pub index: u64,
    /// Term that created it.
    pub term: u64,
    /// Digest of the rest.
    pub digest: u64,
}

impl EntryId {
    /// The identity of an entry read from a log.
    pub fn of(header: &EntryHeader, payload: &[u8]) -> EntryId {
        let mut c = Checksum::new(0x4449_4745_5354); // "DIGEST"
        c.word(header.kind as u64);
        c.word(header.client_id);
        c.word(header.request_id);
        c.bytes(payload);
        EntryId {
            index: header.index,
            term: header.term,
            digest: c.finish(),
        }
    }
}

/// A log-mode view (no member set) naming `leader` in `term`, with 20 µs
/// leases, for the checkers' tests.
#[cfg(test)]
pub(crate) fn test_view(leader: u8, term: u64) -> verbatim_core::views::View {
    verbatim_core::views::View {
        leader: verbatim_core::MemberId(leader),
        log_term: term,
        lease_ns: 20_000,
        members: 0,
    }
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: &'static str,
    /// When it was detected (simulated ns).
    pub time_ns: u64,
    /// What was seen.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{:>9.3} ms] {}: {}",
            self.time_ns as f64 / 1e6,
            self.invariant,
            self.detail
        )
    }
}
