//! The consensus engine's configuration and the registered memory it
//! declares: a shared region that every acceptor exposes to the
//! proposers, and a local one for landing zones, staging and decisions.
//!
//! ```text
//! shared | slot words (slot_count × 8, to 64) | proposal area of proposer 0 | … of proposer P-1 |
//!          proposal area = slot_count records of record_stride bytes
//! local  | landing words (OPS_MAX × 8) | record landings (LANES × stride) |
//!          staging records (STAGING_COUNT × stride) | decided records (slot_count × stride) |
//!          renewal landings (MAX_MEMBERS × 8) | scan landing (slot_count × 8, to 64) |
//! ```
//!
//! Every member lays the shared region out the same way (peers compare
//! [`ConsensusLayout::hash`]); slot words are 8-aligned for the CAS.
//! The slot words and the proposal areas are written by different parties
//! (CASes of every proposer, WRITEs of one), so they start on separate
//! cache lines, and each record starts on its own.

use super::record::{RECORD_HEADER_BYTES, VALUE_BYTES_CAP};
use crate::checksum::Checksum;
use crate::fabric::{Addr, MemberId, RegionId, MAX_MEMBERS, REGIONS_MAX};
use crate::layout::{RegionSpec, RemoteAccess};
use core::fmt;

/// Bumped whenever the meaning of a byte of either region changes.
pub const CONSENSUS_LAYOUT_VERSION: u64 = 2;
/// Slots being worked on at once by one proposer: the one in its Accept
/// phase and the next one, pre-prepared (uKharon §5.3.1).
pub const WINDOW: usize = 2;
/// Lanes of work: one per window entry and one for the learner.
pub const LANES: usize = WINDOW + 1;
/// Work requests in flight at most. Per lane and acceptor at most two
/// (a record WRITE and its CAS) plus one record READ per lane.
pub const OPS_MAX: usize = 64;
/// Staging records: two per window entry, so an accept retried while a
/// slow acceptor still reads the previous record does not tear it.
pub const STAGING_COUNT: usize = 2 * WINDOW;
/// Most slot words a configuration may have.
pub const SLOT_COUNT_MAX: u32 = 1 << 16;
/// Fewest slot words: a proposer works on two slots at once (the window)
/// and recycles a word only once its previous slot is decided, two slots
/// behind the newest it touches (see the module docs).
pub const SLOT_COUNT_MIN: u32 = 4;

const _: () = assert!(OPS_MAX >= LANES * MAX_MEMBERS * 2 + LANES);
const _: () = assert!(OPS_MAX <= 256, "the op index is one byte of the wr_id");

/// Deliberately broken rules of this engine are the crate's
/// [`crate::config::Mutation`]s.
#[cfg(feature = "mutation-testing")]
pub use crate::config::Mutation;

/// Configuration of one member's consensus engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsensusConfig {
    /// This member.
    pub self_id: MemberId,
    /// The acceptors, in an order every member agrees on. A member that is
    /// an acceptor of its own engine reads its own slots locally but
    /// CASes them through the fabric (a loopback request): see the module
    /// docs.
    pub acceptors: heapless::Vec<MemberId, MAX_MEMBERS>,
    /// The proposers, in an order every member agrees on; a proposer's
    /// index in this list is its `owner` in slot words and proposal
    /// numbers, and the lowest live one is the leader.
    pub proposers: heapless::Vec<MemberId, MAX_MEMBERS>,
    /// Slot words (and records per proposer): a ring that slots reuse,
    /// slot `s` in word `s mod slot_count` (see the module docs).
    pub slot_count: u32,
    /// Largest value, at most [`VALUE_BYTES_CAP`].
    pub value_bytes_max: u32,
    /// Shortest randomized backoff after an aborted attempt.
    pub backoff_min_ns: u64,
    /// Longest randomized backoff (the backoff doubles per abort up to it).
    pub backoff_max_ns: u64,
    /// Wait before re-establishing a channel that failed.
    pub reconnect_backoff_ns: u64,
    /// Seed of the PRNG that randomizes backoffs.
    pub seed: u64,
    /// Id of the region acceptors expose (slot words, proposal areas).
    pub shared_region: RegionId,
    /// Id of the local region (landings, staging, decided values).
    pub local_region: RegionId,
    /// A deliberately broken rule, for mutation tests.
    #[cfg(feature = "mutation-testing")]
    pub mutation: Mutation,
}

/// Why a [`ConsensusConfig`] is not usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsensusConfigError {
    /// No acceptors.
    NoAcceptors,
    /// No proposers.
    NoProposers,
    /// A member listed twice as acceptor or as proposer.
    Duplicate,
    /// A member id at or above [`MAX_MEMBERS`].
    MemberOutOfRange,
    /// `slot_count` is below [`SLOT_COUNT_MIN`] or above [`SLOT_COUNT_MAX`].
    SlotCount,
    /// `value_bytes_max` is 0 or above [`VALUE_BYTES_CAP`].
    ValueBytes,
    /// A backoff of 0, or `backoff_max_ns < backoff_min_ns`.
    Backoff,
    /// The two regions are the same, or an id is not below [`REGIONS_MAX`].
    Regions,
}

impl fmt::Display for ConsensusConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConsensusConfigError::NoAcceptors => "no acceptors",
            ConsensusConfigError::NoProposers => "no proposers",
            ConsensusConfigError::Duplicate => "a member is listed twice",
            ConsensusConfigError::MemberOutOfRange => "a member id is out of range",
            ConsensusConfigError::SlotCount => "slot_count out of range",
            ConsensusConfigError::ValueBytes => "value_bytes_max out of range",
            ConsensusConfigError::Backoff => "backoffs must be nonzero and min <= max",
            ConsensusConfigError::Regions => "the two regions must be distinct valid ids",
        })
    }
}

impl ConsensusConfig {
    /// The regions used unless the caller picks others: the first two ids
    /// after the ones the core's other engines use.
    pub const DEFAULT_SHARED_REGION: RegionId = RegionId(6);
    /// See [`ConsensusConfig::DEFAULT_SHARED_REGION`].
    pub const DEFAULT_LOCAL_REGION: RegionId = RegionId(7);

    /// Defaults for a shared-memory fabric: 64 slots of values up to 128
    /// bytes, backoffs of 5–500 µs. Panics when a list is longer than
    /// [`MAX_MEMBERS`] (a programming error).
    pub fn new(self_id: MemberId, acceptors: &[MemberId], proposers: &[MemberId]) -> Self {
        ConsensusConfig {
            self_id,
            acceptors: heapless::Vec::from_slice(acceptors).expect("at most MAX_MEMBERS acceptors"),
            proposers: heapless::Vec::from_slice(proposers).expect("at most MAX_MEMBERS proposers"),
            slot_count: 64,
            value_bytes_max: 128,
            backoff_min_ns: 5_000,
            backoff_max_ns: 500_000,
            reconnect_backoff_ns: 100_000,
            seed: 0xC0_5E05,
            shared_region: Self::DEFAULT_SHARED_REGION,
            local_region: Self::DEFAULT_LOCAL_REGION,
            #[cfg(feature = "mutation-testing")]
            mutation: Mutation::None,
        }
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConsensusConfigError> {
        use ConsensusConfigError::*;
        if self.acceptors.is_empty() {
            return Err(NoAcceptors);
        }
        if self.proposers.is_empty() {
            return Err(NoProposers);
        }
        for list in [&self.acceptors, &self.proposers] {
            for (i, m) in list.iter().enumerate() {
                if m.index() >= MAX_MEMBERS {
                    return Err(MemberOutOfRange);
                }
                if list[..i].contains(m) {
                    return Err(Duplicate);
                }
            }
        }
        if self.self_id.index() >= MAX_MEMBERS {
            return Err(MemberOutOfRange);
        }
        if self.slot_count < SLOT_COUNT_MIN || self.slot_count > SLOT_COUNT_MAX {
            return Err(SlotCount);
        }
        if self.value_bytes_max == 0 || self.value_bytes_max as usize > VALUE_BYTES_CAP {
            return Err(ValueBytes);
        }
        if self.backoff_min_ns == 0
            || self.backoff_max_ns < self.backoff_min_ns
            || self.reconnect_backoff_ns == 0
        {
            return Err(Backoff);
        }
        if self.shared_region == self.local_region
            || self.shared_region.index() >= REGIONS_MAX
            || self.local_region.index() >= REGIONS_MAX
        {
            return Err(Regions);
        }
        Ok(())
    }

    /// Acceptors whose answers make a majority.
    #[inline]
    pub fn quorum(&self) -> usize {
        self.acceptors.len() / 2 + 1
    }

    /// This member's index among the proposers, if it is one.
    pub fn proposer_index(&self) -> Option<u8> {
        self.proposers
            .iter()
            .position(|&m| m == self.self_id)
            .map(|i| i as u8)
    }

    /// `member`'s index among the acceptors, if it is one.
    pub fn acceptor_index(&self, member: MemberId) -> Option<usize> {
        self.acceptors.iter().position(|&m| m == member)
    }
}

const fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// Offsets of both regions, derived from a [`ConsensusConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsensusLayout {
    /// The shared region's id.
    pub shared_region: RegionId,
    /// The local region's id.
    pub local_region: RegionId,
    /// Slot words (a ring: slots reuse them lap after lap).
    pub slot_count: u32,
    /// Proposers (proposal areas).
    pub proposer_count: u8,
    /// Largest value.
    pub value_bytes_max: u32,
    /// Bytes between two records (header and largest value, to 64).
    pub record_stride: u64,
    /// Start of the first proposal area in the shared region.
    pub proposals_offset: u64,
    /// Bytes of the shared region.
    pub shared_bytes: u64,
    /// Start of the record landings in the local region.
    pub record_landing_offset: u64,
    /// Start of the staging records.
    pub staging_offset: u64,
    /// Start of the decided records.
    pub decided_offset: u64,
    /// Start of the lease renewals' landing words (one per acceptor).
    pub renewal_landing_offset: u64,
    /// Start of the landing of a whole acceptor's slot words (a restarted
    /// acceptor scans the others before it counts again).
    pub scan_offset: u64,
    /// Bytes of the local region.
    pub local_bytes: u64,
    /// Version and shape hash of the shared region, which peers compare.
    pub hash: u64,
}

impl ConsensusLayout {
    /// Derives the layout, validating the configuration.
    pub fn new(config: &ConsensusConfig) -> Result<ConsensusLayout, ConsensusConfigError> {
        config.validate()?;
        let slots = u64::from(config.slot_count);
        let record_stride = round_up(
            RECORD_HEADER_BYTES as u64 + u64::from(config.value_bytes_max),
            64,
        );
        let proposals_offset = round_up(slots * 8, 64);
        let proposer_count = config.proposers.len() as u8;
        let shared_bytes = proposals_offset + u64::from(proposer_count) * slots * record_stride;
        let record_landing_offset = OPS_MAX as u64 * 8;
        let staging_offset = record_landing_offset + LANES as u64 * record_stride;
        let decided_offset = staging_offset + STAGING_COUNT as u64 * record_stride;
        let renewal_landing_offset = decided_offset + slots * record_stride;
        let scan_offset = round_up(renewal_landing_offset + MAX_MEMBERS as u64 * 8, 64);
        let local_bytes = round_up(scan_offset + slots * 8, 64);
        let mut c = Checksum::new(0x434F_4E53_4C41_594F); // "CONSLAYO"
        for w in [
            CONSENSUS_LAYOUT_VERSION,
            slots,
            u64::from(proposer_count),
            config.acceptors.len() as u64,
            u64::from(config.value_bytes_max),
            record_stride,
            proposals_offset,
            shared_bytes,
            RECORD_HEADER_BYTES as u64,
        ] {
            c.word(w);
        }
        Ok(ConsensusLayout {
            shared_region: config.shared_region,
            local_region: config.local_region,
            slot_count: config.slot_count,
            proposer_count,
            value_bytes_max: config.value_bytes_max,
            record_stride,
            proposals_offset,
            shared_bytes,
            record_landing_offset,
            staging_offset,
            decided_offset,
            renewal_landing_offset,
            scan_offset,
            local_bytes,
            hash: c.finish(),
        })
    }

    /// The two regions this engine registers: the shared one every member
    /// may access (proposers CAS slots and WRITE their records, learners
    /// READ), and the local one.
    pub fn regions(&self) -> [RegionSpec; 2] {
        [
            RegionSpec {
                id: self.shared_region,
                bytes: self.shared_bytes,
                remote: RemoteAccess::Members,
            },
            RegionSpec {
                id: self.local_region,
                bytes: self.local_bytes,
                remote: RemoteAccess::Local,
            },
        ]
    }

    /// Bytes of one of this engine's regions (0 for any other region).
    pub fn region_bytes(&self, region: RegionId) -> u64 {
        if region == self.shared_region {
            self.shared_bytes
        } else if region == self.local_region {
            self.local_bytes
        } else {
            0
        }
    }

    /// Where slot `slot` lives in the ring of words and records.
    #[inline]
    pub fn index(&self, slot: u32) -> u32 {
        slot % self.slot_count
    }

    /// The lap of the ring slot `slot` belongs to (what its word carries).
    #[inline]
    pub fn lap(&self, slot: u32) -> u16 {
        (slot / self.slot_count) as u16
    }

    /// The slot a word at `index` of lap `lap` is about, if it is at or
    /// below `near + 2^15` laps' worth of slots (laps wrap at 2^16; the
    /// nearest slot to `near` with that index and lap is meant).
    pub fn slot_of(&self, index: u32, lap: u16, near: u32) -> u32 {
        let near_lap = self.lap(near);
        let d = i64::from(lap.wrapping_sub(near_lap) as i16);
        let lap_full = (i64::from(near / self.slot_count) + d).max(0);
        let slot = lap_full * i64::from(self.slot_count) + i64::from(index);
        slot.min(i64::from(u32::MAX)) as u32
    }

    /// The 8-byte word of slot `slot` at an acceptor.
    pub fn slot_word(&self, slot: u32) -> Addr {
        Addr::new(self.shared_region, u64::from(self.index(slot)) * 8)
    }

    /// The record of proposer `owner` for slot `slot` at an acceptor.
    pub fn proposal_record(&self, owner: u8, slot: u32) -> Addr {
        assert!(owner < self.proposer_count);
        let area = u64::from(owner) * u64::from(self.slot_count) * self.record_stride;
        Addr::new(
            self.shared_region,
            self.proposals_offset + area + u64::from(self.index(slot)) * self.record_stride,
        )
    }

    /// Landing word of work request `op` (a CAS's old value or a READ of a
    /// slot word).
    pub fn landing_word(&self, op: usize) -> Addr {
        assert!(op < OPS_MAX);
        Addr::new(self.local_region, op as u64 * 8)
    }

    /// Landing zone of a record READ of `lane`.
    pub fn record_landing(&self, lane: usize) -> Addr {
        assert!(lane < LANES);
        Addr::new(
            self.local_region,
            self.record_landing_offset + lane as u64 * self.record_stride,
        )
    }

    /// Staging record `index`: the immutable source of record WRITEs.
    pub fn staging(&self, index: usize) -> Addr {
        assert!(index < STAGING_COUNT);
        Addr::new(
            self.local_region,
            self.staging_offset + index as u64 * self.record_stride,
        )
    }

    /// Where the value decided in `slot` is kept (until a slot of a later
    /// lap is decided in the same place).
    pub fn decided(&self, slot: u32) -> Addr {
        Addr::new(
            self.local_region,
            self.decided_offset + u64::from(self.index(slot)) * self.record_stride,
        )
    }

    /// Where a READ of an acceptor's whole array of slot words lands.
    pub fn scan_landing(&self) -> Addr {
        Addr::new(self.local_region, self.scan_offset)
    }

    /// Bytes of an acceptor's whole array of slot words.
    pub fn slot_words_bytes(&self) -> u64 {
        u64::from(self.slot_count) * 8
    }

    /// Where a lease renewal's READ of acceptor `acceptor`'s slot word
    /// lands (the view engine's, [`crate::views`]).
    pub fn renewal_landing(&self, acceptor: usize) -> Addr {
        assert!(acceptor < MAX_MEMBERS);
        Addr::new(
            self.local_region,
            self.renewal_landing_offset + acceptor as u64 * 8,
        )
    }

    /// True when `[at, at + len)` lies inside one of the two regions.
    pub fn contains(&self, at: Addr, len: u64) -> bool {
        at.offset
            .checked_add(len)
            .is_some_and(|end| end <= self.region_bytes(at.region))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ConsensusConfig {
        ConsensusConfig::new(
            MemberId(3),
            &[MemberId(0), MemberId(1), MemberId(2)],
            &[MemberId(3), MemberId(4)],
        )
    }

    #[test]
    fn areas_do_not_overlap_and_are_aligned() {
        let cfg = config();
        let l = ConsensusLayout::new(&cfg).unwrap();
        assert_eq!(l.record_stride % 64, 0);
        assert!(l.record_stride >= RECORD_HEADER_BYTES as u64 + 128);
        let last_slot = l.slot_word(cfg.slot_count - 1);
        assert!(last_slot.offset + 8 <= l.proposals_offset);
        assert_eq!(l.proposals_offset % 64, 0);
        assert_eq!(
            l.proposal_record(0, cfg.slot_count - 1).offset + l.record_stride,
            l.proposal_record(1, 0).offset
        );
        assert_eq!(
            l.proposal_record(1, cfg.slot_count - 1).offset + l.record_stride,
            l.shared_bytes
        );
        assert!(l.landing_word(OPS_MAX - 1).offset + 8 <= l.record_landing_offset);
        assert_eq!(
            l.record_landing(LANES - 1).offset + l.record_stride,
            l.staging_offset
        );
        assert_eq!(
            l.staging(STAGING_COUNT - 1).offset + l.record_stride,
            l.decided_offset
        );
        assert_eq!(
            l.decided(cfg.slot_count - 1).offset + l.record_stride,
            l.renewal_landing_offset
        );
        assert!(l.renewal_landing(MAX_MEMBERS - 1).offset + 8 <= l.scan_landing().offset);
        assert_eq!(l.scan_landing().offset % 64, 0);
        assert!(l.scan_landing().offset + u64::from(cfg.slot_count) * 8 <= l.local_bytes);
        assert_eq!(l.local_bytes % 64, 0);
        for r in l.regions() {
            assert_eq!(r.bytes % 8, 0);
            assert_eq!(l.region_bytes(r.id), r.bytes);
        }
        assert!(l.contains(l.slot_word(0), 8));
        // A ring: the slot after the last word reuses the first, a lap on.
        let n = cfg.slot_count;
        assert_eq!(l.slot_word(n), l.slot_word(0));
        assert_eq!(l.slot_word(2 * n + 3), l.slot_word(3));
        assert_eq!(l.proposal_record(1, n + 1), l.proposal_record(1, 1));
        assert_eq!(l.decided(n + 2), l.decided(2));
        assert_eq!((l.lap(n - 1), l.lap(n), l.lap(3 * n + 1)), (0, 1, 3));
        assert_eq!(l.slot_of(3, 2, 2 * n), 2 * n + 3);
        assert_eq!(l.slot_of(3, 1, 2 * n), n + 3);
        assert_eq!(l.slot_of(3, 5, 0), 5 * n + 3);
        assert_eq!(l.slot_of(3, u16::MAX, 0), 3, "no slot below 0");
        assert!(!l.contains(Addr::new(l.shared_region, l.shared_bytes), 1));
        assert!(!l.contains(Addr::new(RegionId(0), 0), 1));
    }

    #[test]
    fn bad_configurations_are_errors() {
        let ok = config();
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(ok.quorum(), 2);
        assert_eq!(ok.proposer_index(), Some(0));
        assert_eq!(ok.acceptor_index(MemberId(2)), Some(2));
        let mut c = ok.clone();
        c.acceptors.clear();
        assert_eq!(c.validate(), Err(ConsensusConfigError::NoAcceptors));
        let mut c = ok.clone();
        c.proposers.clear();
        assert_eq!(c.validate(), Err(ConsensusConfigError::NoProposers));
        let mut c = ok.clone();
        c.acceptors[1] = MemberId(0);
        assert_eq!(c.validate(), Err(ConsensusConfigError::Duplicate));
        let mut c = ok.clone();
        c.proposers[1] = MemberId(8);
        assert_eq!(c.validate(), Err(ConsensusConfigError::MemberOutOfRange));
        let mut c = ok.clone();
        c.slot_count = 0;
        assert_eq!(c.validate(), Err(ConsensusConfigError::SlotCount));
        c.slot_count = SLOT_COUNT_MIN - 1;
        assert_eq!(c.validate(), Err(ConsensusConfigError::SlotCount));
        let mut c = ok.clone();
        c.value_bytes_max = VALUE_BYTES_CAP as u32 + 1;
        assert_eq!(c.validate(), Err(ConsensusConfigError::ValueBytes));
        let mut c = ok.clone();
        c.backoff_max_ns = c.backoff_min_ns - 1;
        assert_eq!(c.validate(), Err(ConsensusConfigError::Backoff));
        let mut c = ok.clone();
        c.local_region = c.shared_region;
        assert_eq!(c.validate(), Err(ConsensusConfigError::Regions));
    }

    #[test]
    fn the_hash_follows_the_shared_shape_not_the_member() {
        let a = ConsensusLayout::new(&config()).unwrap();
        let mut other = config();
        other.self_id = MemberId(4);
        assert_eq!(ConsensusLayout::new(&other).unwrap().hash, a.hash);
        let mut c = config();
        c.slot_count += 1;
        assert_ne!(ConsensusLayout::new(&c).unwrap().hash, a.hash);
        let mut c = config();
        c.value_bytes_max += 64;
        assert_ne!(ConsensusLayout::new(&c).unwrap().hash, a.hash);
        let mut c = config();
        c.proposers.pop();
        assert_ne!(ConsensusLayout::new(&c).unwrap().hash, a.hash);
    }
}
