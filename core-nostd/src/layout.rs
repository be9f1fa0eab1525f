//! The registered memory layout: one typed description of every region,
//! with explicit offsets and integer widths, derived from the
//! configuration. Peers compare [`Layout::hash`] when they connect, so two
//! members with different layouts never write into each other's memory.
//!
//! All multi-byte integers in registered memory are little-endian `u64`
//! at 8-aligned offsets. Fields written by different parties are kept on
//! different 64-byte cache lines.
//!
//! ```text
//! Control  | row 0 | row 1 | ... | row P-1 |          each ROW_BYTES (192)
//! Log      | log control (64) | adjust header (64) | adjust list (cap×16) | ring |
//! Scratch  | staging rows (8×192) | row landing (P×192) | adjust landing (P×…) | atomics (P×64) |
//! Sessions | slot × session_slot_count (32 + reply_bytes_max, to 64) | reply stage × (apply_batch_max + 1) |
//! Heartbeat| own counter (64) | landing word per member (P×64) |
//! Snapshot | header (128) | session table image | state machine bytes |   (snapshot_bytes_max > 0)
//! Multicast| row × P (128) | staging row × P | ring × P (mcast_window slots) |   (mcast_window > 0)
//! RDMC     | rows | staging rows | per sender: message slots |          (rdmc_slots > 0)
//! Subgroup i (region 10 + i) | the multicast layout over its k members |   (mcast_subgroups[i] ≠ 0)
//! ```
//!
//! The set of regions is open: each engine declares what it needs as a
//! [`RegionSpec`] (id, size from the configuration, who may access it) and
//! [`Layout::regions`] lists them all, so a fabric registers and maps every
//! region without knowing which engine owns it.

use crate::checksum::Checksum;
use crate::config::{Config, ConfigError};
use crate::fabric::{Addr, MemberId, RegionId, REGIONS_MAX};

/// Bumped whenever the meaning of any byte of the layout changes.
pub const LAYOUT_VERSION: u64 = 9;

/// Who may access a region remotely.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RemoteAccess {
    /// Nobody: local memory (staging, landing zones, session table).
    Local,
    /// Every member, from the start (rows of the SST, heartbeat counters).
    Members,
    /// Only the peer the owner grants it to ([`crate::fabric::Action::SetAccess`]).
    Granted,
    /// The members in the set (a bit per member id), from the start: a
    /// multicast subgroup's region ([`crate::subgroup`]).
    Only(u64),
}

impl RemoteAccess {
    /// Whether `member` may access the region from the start.
    pub fn granted_from_start(self, member: MemberId) -> bool {
        match self {
            RemoteAccess::Members => true,
            RemoteAccess::Only(set) => member.index() < 64 && set & (1 << member.0) != 0,
            RemoteAccess::Local | RemoteAccess::Granted => false,
        }
    }
}

/// One registered region as an engine declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegionSpec {
    /// The region.
    pub id: RegionId,
    /// Its size in bytes (a multiple of 64, possibly 0).
    pub bytes: u64,
    /// Who may access it remotely.
    pub remote: RemoteAccess,
}

/// Bytes of the heartbeat engine's own counter line.
pub const HEARTBEAT_COUNTER_BYTES: u64 = 64;
/// Bytes of one landing line for a peer's counter.
pub const HEARTBEAT_LANDING_BYTES: u64 = 64;

/// 64-bit words in one SST row.
pub const ROW_WORDS: usize = 24;
/// Bytes of one SST row (three cache lines).
pub const ROW_BYTES: u64 = (ROW_WORDS * 8) as u64;
/// Bytes of a log entry header.
pub const ENTRY_HEADER_BYTES: u64 = 48;
/// Bytes of the log control block (commit and tail pointers).
pub const LOG_CONTROL_BYTES: u64 = 64;
/// Offset of the commit pointer in the log region (written by the leader).
pub const LOG_COMMIT_POS_OFFSET: u64 = 0;
/// Offset of the tail pointer in the log region (written by the leader).
pub const LOG_TAIL_POS_OFFSET: u64 = 8;
/// Bytes of the adjustment-list header.
pub const ADJUST_HEADER_BYTES: u64 = 64;
/// Bytes of one (index, term) item of the adjustment list.
pub const ADJUST_ITEM_BYTES: u64 = 16;
/// Staging copies of our own row for pushes in flight.
pub const STAGING_SLOTS: usize = 8;
/// Bytes of a session slot's header (client, request, index, reply length);
/// the reply follows.
pub const SESSION_HEADER_BYTES: u64 = 32;
/// Bytes of a reply stage slot's header (the reply's length).
pub const REPLY_STAGE_HEADER_BYTES: u64 = 8;
/// Bytes reserved per member for atomic results.
pub const ATOMIC_SLOT_BYTES: u64 = 64;

const fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// Offsets inside the log region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogLayout {
    /// Start of the adjustment header.
    pub adjust_header_offset: u64,
    /// Start of the adjustment list.
    pub adjust_list_offset: u64,
    /// Items the adjustment list can hold (one per entry the ring can hold).
    pub adjust_capacity: u64,
    /// Start of the ring.
    pub ring_offset: u64,
    /// Bytes of the ring.
    pub ring_bytes: u64,
    /// Bytes of the largest entry (header and padded payload).
    pub entry_bytes_max: u64,
    /// Bytes of the region.
    pub region_bytes: u64,
}

/// Offsets inside the scratch region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScratchLayout {
    /// Staging rows (immutable sources of pushes in flight).
    pub staging_offset: u64,
    /// One row-sized landing zone per member (term reads).
    pub row_landing_offset: u64,
    /// One adjustment landing zone per member (header and full list).
    pub adjust_landing_offset: u64,
    /// Bytes between two adjustment landing zones.
    pub adjust_landing_stride: u64,
    /// One atomic-result slot per member.
    pub atomic_offset: u64,
    /// Bytes of the region.
    pub region_bytes: u64,
}

/// The full layout of one member's registered memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Group size.
    pub member_count: u8,
    /// Bytes of the control region.
    pub control_bytes: u64,
    /// The log region.
    pub log: LogLayout,
    /// The scratch region.
    pub scratch: ScratchLayout,
    /// Session slots.
    pub session_slot_count: u64,
    /// Bytes of one session slot (header and the largest reply).
    pub session_slot_bytes: u64,
    /// Where the reply stage starts in the sessions region: replies of
    /// applied writes wait there until the host has taken them.
    pub reply_stage_offset: u64,
    /// Reply stage slots: one per write applied in one call, and one for
    /// the duplicate answered at submission.
    pub reply_stage_slots: u64,
    /// Bytes of one reply stage slot.
    pub reply_stage_slot_bytes: u64,
    /// Largest reply to a write.
    pub reply_bytes_max: u64,
    /// Bytes of the sessions region.
    pub sessions_bytes: u64,
    /// Bytes of the heartbeat engine's region.
    pub heartbeat_bytes: u64,
    /// Bytes of the snapshot region (0: recovery by state transfer off).
    pub snapshot_bytes: u64,
    /// The view engine's consensus regions ([`crate::views`]), when views
    /// are on (`lease_ns > 0`).
    pub consensus: Option<crate::consensus::ConsensusLayout>,
    /// The multicast engine's region ([`crate::multicast`]), when
    /// multicast is on (`mcast_window > 0`).
    pub multicast: Option<crate::multicast::McastLayout>,
    /// The RDMC engine's region ([`crate::rdmc`]), when RDMC is on
    /// (`rdmc_slots > 0`).
    pub rdmc: Option<crate::rdmc::RdmcLayout>,
    /// The multicast subgroups' regions ([`crate::subgroup`]), in the
    /// configuration's places.
    pub subgroups: [Option<crate::subgroup::SubgroupLayout>; crate::subgroup::SUBGROUPS_MAX],
    /// The backup-memory store's regions ([`crate::backup`]; `None`
    /// outside backup-memory mode).
    pub backup: Option<crate::backup::engine::BackupLayout>,
    /// Lease timing every member must share (a lease held by one is timed
    /// against another's wait): `lease_ns`, `lease_drift_ppm`,
    /// `coordinator_count` of the configuration (0s with views off).
    pub lease_terms: [u64; 3],
    /// The replication mode (0: log, 1: primary-backup): members of one
    /// group must agree on it.
    pub mode_code: u64,
    /// Version and shape hash, compared by peers at connect time.
    pub hash: u64,
}

impl Layout {
    /// Derives the layout from a configuration (validating it).
    pub fn new(config: &Config) -> Result<Layout, ConfigError> {
        config.validate()?;
        let members = u64::from(config.member_count);
        let entry_bytes_max = crate::log::entry_bytes(config.entry_payload_bytes_max);
        let ring_bytes = config.log_ring_bytes;
        let adjust_capacity = ring_bytes / ENTRY_HEADER_BYTES;
        let adjust_header_offset = LOG_CONTROL_BYTES;
        let adjust_list_offset = adjust_header_offset + ADJUST_HEADER_BYTES;
        let ring_offset = round_up(adjust_list_offset + adjust_capacity * ADJUST_ITEM_BYTES, 64);
        let log = LogLayout {
            adjust_header_offset,
            adjust_list_offset,
            adjust_capacity,
            ring_offset,
            ring_bytes,
            entry_bytes_max,
            region_bytes: ring_offset + ring_bytes,
        };

        let staging_offset = 0;
        let row_landing_offset = staging_offset + STAGING_SLOTS as u64 * ROW_BYTES;
        let adjust_landing_offset = row_landing_offset + members * ROW_BYTES;
        let adjust_landing_stride = round_up(
            ADJUST_HEADER_BYTES + adjust_capacity * ADJUST_ITEM_BYTES,
            64,
        );
        // The read-back landing (one row) shares an adjustment landing zone.
        assert!(adjust_landing_stride >= ROW_BYTES);
        let atomic_offset = adjust_landing_offset + members * adjust_landing_stride;
        let scratch = ScratchLayout {
            staging_offset,
            row_landing_offset,
            adjust_landing_offset,
            adjust_landing_stride,
            atomic_offset,
            region_bytes: atomic_offset + members * ATOMIC_SLOT_BYTES,
        };

        let session_slot_count = u64::from(config.session_slot_count);
        let reply_bytes_max = u64::from(config.reply_bytes_max);
        let session_slot_bytes = round_up(SESSION_HEADER_BYTES + reply_bytes_max, 64);
        let reply_stage_offset = session_slot_count * session_slot_bytes;
        let reply_stage_slots = u64::from(config.apply_batch_max) + 1;
        let reply_stage_slot_bytes = round_up(REPLY_STAGE_HEADER_BYTES + reply_bytes_max, 8);
        let mut layout = Layout {
            member_count: config.member_count,
            control_bytes: members * ROW_BYTES,
            log,
            scratch,
            session_slot_count,
            session_slot_bytes,
            reply_stage_offset,
            reply_stage_slots,
            reply_stage_slot_bytes,
            reply_bytes_max,
            sessions_bytes: round_up(
                reply_stage_offset + reply_stage_slots * reply_stage_slot_bytes,
                64,
            ),
            heartbeat_bytes: HEARTBEAT_COUNTER_BYTES + members * HEARTBEAT_LANDING_BYTES,
            snapshot_bytes: if config.snapshot_bytes_max == 0 {
                0
            } else {
                crate::snapshot::SnapshotHeader::PAYLOAD_OFFSET + config.snapshot_bytes_max
            },
            consensus: match crate::views::consensus_config(config) {
                Some(c) => Some(crate::consensus::ConsensusLayout::new(&c).map_err(|_| {
                    ConfigError::Inconsistent {
                        field: "coordinator_count",
                        reason: "gives no valid consensus configuration for views",
                    }
                })?),
                None => None,
            },
            multicast: crate::multicast::McastLayout::new(config),
            rdmc: crate::rdmc::RdmcLayout::new(config),
            subgroups: crate::subgroup::SubgroupLayout::all(config),
            backup: crate::backup::engine::BackupLayout::for_config(config),
            lease_terms: if config.lease_ns == 0 {
                [0; 3]
            } else {
                [
                    config.lease_ns,
                    u64::from(config.lease_drift_ppm),
                    u64::from(config.coordinator_count),
                ]
            },
            mode_code: match config.mode {
                crate::config::Mode::Log => 0,
                crate::config::Mode::PrimaryBackup => 1,
                crate::config::Mode::BackupMemory => 2,
            },
            hash: 0,
        };
        layout.hash = layout.compute_hash();
        Ok(layout)
    }

    fn compute_hash(&self) -> u64 {
        let mut c = Checksum::new(0x4C41_594F_5554); // "LAYOUT"
        for w in [
            LAYOUT_VERSION,
            u64::from(self.member_count),
            ROW_BYTES,
            ENTRY_HEADER_BYTES,
            LOG_CONTROL_BYTES,
            LOG_COMMIT_POS_OFFSET,
            LOG_TAIL_POS_OFFSET,
            ADJUST_HEADER_BYTES,
            ADJUST_ITEM_BYTES,
            self.control_bytes,
            self.log.adjust_header_offset,
            self.log.adjust_list_offset,
            self.log.adjust_capacity,
            self.log.ring_offset,
            self.log.ring_bytes,
            self.log.entry_bytes_max,
            self.log.region_bytes,
            self.sessions_bytes,
            self.session_slot_bytes,
            self.reply_stage_offset,
            self.reply_stage_slots,
            self.reply_stage_slot_bytes,
            self.reply_bytes_max,
            self.heartbeat_bytes,
            self.snapshot_bytes,
            self.consensus.map_or(0, |c| c.hash),
            self.lease_terms[0],
            self.lease_terms[1],
            self.lease_terms[2],
            self.mode_code,
        ] {
            c.word(w);
        }
        if let Some(m) = self.multicast {
            for w in m.hash_words() {
                c.word(w);
            }
        }
        if let Some(r) = self.rdmc {
            for w in r.hash_words() {
                c.word(w);
            }
        }
        for g in self.subgroups.iter().flatten() {
            for w in g.hash_words() {
                c.word(w);
            }
        }
        if let Some(b) = self.backup {
            for w in b.hash_words() {
                c.word(w);
            }
        }
        c.finish()
    }

    /// Bytes of a region.
    pub fn region_bytes(&self, region: RegionId) -> u64 {
        match region {
            RegionId::Control => self.control_bytes,
            RegionId::Log => self.log.region_bytes,
            RegionId::Scratch => self.scratch.region_bytes,
            RegionId::Sessions => self.sessions_bytes,
            RegionId::Heartbeat => self.heartbeat_bytes,
            RegionId::Snapshot => self.snapshot_bytes,
            r if self
                .consensus
                .is_some_and(|c| c.shared_region == r || c.local_region == r) =>
            {
                self.consensus.map_or(0, |c| c.region_bytes(r))
            }
            r if r == crate::multicast::MCAST_REGION => {
                self.multicast.map_or(0, |m| m.region_bytes)
            }
            r if r == crate::rdmc::RDMC_REGION => self.rdmc.map_or(0, |m| m.region_bytes),
            r if self.subgroup_of_region(r).is_some() => self
                .subgroup_of_region(r)
                .map_or(0, |g| g.group.region_bytes),
            r if r == crate::backup::engine::STORE_REGION => {
                self.backup.map_or(0, |b| b.region_bytes)
            }
            r if r == crate::backup::engine::STORE_LOCAL_REGION => {
                self.backup.map_or(0, |b| b.local_bytes)
            }
            // Not a region of this layout: nothing is inside it.
            _ => 0,
        }
    }

    /// Every registered region of every engine, in id order: the log
    /// engine's (control, log, scratch, sessions, snapshot), the
    /// heartbeat engine's, the view engine's consensus regions and the
    /// multicast engine's region.
    pub fn regions(&self) -> impl Iterator<Item = RegionSpec> {
        let specs = [
            RegionSpec {
                id: RegionId::Control,
                bytes: self.control_bytes,
                remote: RemoteAccess::Members,
            },
            RegionSpec {
                id: RegionId::Log,
                bytes: self.log.region_bytes,
                remote: RemoteAccess::Granted,
            },
            RegionSpec {
                id: RegionId::Scratch,
                bytes: self.scratch.region_bytes,
                remote: RemoteAccess::Local,
            },
            RegionSpec {
                id: RegionId::Sessions,
                bytes: self.sessions_bytes,
                remote: RemoteAccess::Local,
            },
            RegionSpec {
                id: RegionId::Heartbeat,
                bytes: self.heartbeat_bytes,
                remote: RemoteAccess::Members,
            },
            // Peers READ it (a recovering member fetches its snapshot).
            RegionSpec {
                id: RegionId::Snapshot,
                bytes: self.snapshot_bytes,
                remote: RemoteAccess::Members,
            },
        ];
        const { assert!(8 <= REGIONS_MAX) };
        let [shared, local] = match self.consensus {
            Some(c) => c.regions(),
            None => {
                [RegionSpec {
                    id: RegionId(6),
                    bytes: 0,
                    remote: RemoteAccess::Local,
                }; 2]
            }
        };
        // A region of no bytes (recovery or views disabled) is not
        // registered.
        let multicast = self.multicast.map(|m| m.region());
        let rdmc = self.rdmc.map(|m| m.region());
        let subgroups = self.subgroups.map(|g| g.map(|g| g.region()));
        let backup = self.backup.map(|b| b.regions());
        specs
            .into_iter()
            .chain([shared, local])
            .chain(multicast)
            .chain(rdmc)
            .chain(subgroups.into_iter().flatten())
            .chain(backup.into_iter().flatten())
            .filter(|r| r.bytes > 0)
    }

    /// The subgroup whose region `region` is, if any.
    pub fn subgroup_of_region(&self, region: RegionId) -> Option<crate::subgroup::SubgroupLayout> {
        self.subgroups
            .iter()
            .flatten()
            .find(|g| g.group.region == region)
            .copied()
    }

    /// Words registered memory must hold before any peer can access it
    /// (zero elsewhere): the view engine's slot words, which a new process
    /// leaves untrusted until it knows whether it restarted
    /// ([`crate::views::UNTRUSTED_SLOT_WORD`]). A fabric writes them
    /// before it publishes the memory; the engine writes them again.
    pub fn initial_words(&self) -> impl Iterator<Item = (Addr, u64)> + '_ {
        let (slots, c) = match self.consensus {
            Some(c) => (c.slot_count, Some(c)),
            None => (0, None),
        };
        (0..slots).filter_map(move |slot| {
            c.map(|c| (c.slot_word(slot), crate::views::UNTRUSTED_SLOT_WORD))
        })
    }

    /// The snapshot region's header.
    pub fn snapshot_header(&self) -> Addr {
        Addr::new(RegionId::Snapshot, 0)
    }

    /// Offset `offset` of the snapshot region's payload.
    pub fn snapshot_payload(&self, offset: u64) -> Addr {
        Addr::new(
            RegionId::Snapshot,
            crate::snapshot::SnapshotHeader::PAYLOAD_OFFSET + offset,
        )
    }

    /// The heartbeat engine's own counter (peers READ it).
    pub fn heartbeat_counter(&self) -> Addr {
        Addr::new(RegionId::Heartbeat, 0)
    }

    /// Where a READ of `member`'s heartbeat counter lands.
    pub fn heartbeat_landing(&self, member: MemberId) -> Addr {
        assert!(member.0 < self.member_count);
        Addr::new(
            RegionId::Heartbeat,
            HEARTBEAT_COUNTER_BYTES + u64::from(member.0) * HEARTBEAT_LANDING_BYTES,
        )
    }

    /// True when `[at, at+len)` lies inside its region.
    pub fn contains(&self, at: Addr, len: u64) -> bool {
        at.offset
            .checked_add(len)
            .is_some_and(|end| end <= self.region_bytes(at.region))
    }

    /// The row of `member` in a control region.
    pub fn row(&self, member: MemberId) -> Addr {
        assert!(member.0 < self.member_count, "row of a non-member");
        Addr::new(RegionId::Control, u64::from(member.0) * ROW_BYTES)
    }

    /// The leader-written commit pointer.
    pub fn log_commit(&self) -> Addr {
        Addr::new(RegionId::Log, LOG_COMMIT_POS_OFFSET)
    }

    /// The leader-written tail pointer.
    pub fn log_tail(&self) -> Addr {
        Addr::new(RegionId::Log, LOG_TAIL_POS_OFFSET)
    }

    /// The adjustment header.
    pub fn adjust_header(&self) -> Addr {
        Addr::new(RegionId::Log, self.log.adjust_header_offset)
    }

    /// Staging slot `slot` for row pushes.
    pub fn staging(&self, slot: usize) -> Addr {
        assert!(slot < STAGING_SLOTS);
        Addr::new(
            RegionId::Scratch,
            self.scratch.staging_offset + slot as u64 * ROW_BYTES,
        )
    }

    /// Landing zone for a READ of `member`'s row.
    pub fn row_landing(&self, member: MemberId) -> Addr {
        assert!(member.0 < self.member_count);
        Addr::new(
            RegionId::Scratch,
            self.scratch.row_landing_offset + u64::from(member.0) * ROW_BYTES,
        )
    }

    /// Landing zone for the startup READ of our own row's copy at
    /// `member` (DARE §3.2.3, read back after a restart). It shares the
    /// first row of `member`'s adjustment landing zone: that one is used
    /// only by a leader, and a member reads its row back before it may
    /// stand for election.
    pub fn read_back_landing(&self, member: MemberId) -> Addr {
        self.adjust_landing(member)
    }

    /// Landing zone for a READ of `member`'s adjustment header and list.
    pub fn adjust_landing(&self, member: MemberId) -> Addr {
        assert!(member.0 < self.member_count);
        Addr::new(
            RegionId::Scratch,
            self.scratch.adjust_landing_offset
                + u64::from(member.0) * self.scratch.adjust_landing_stride,
        )
    }

    /// Landing word for the result of an atomic on `member`.
    pub fn atomic_landing(&self, member: MemberId) -> Addr {
        assert!(member.0 < self.member_count);
        Addr::new(
            RegionId::Scratch,
            self.scratch.atomic_offset + u64::from(member.0) * ATOMIC_SLOT_BYTES,
        )
    }

    /// Session slot `slot`.
    pub fn session(&self, slot: u64) -> Addr {
        assert!(slot < self.session_slot_count);
        Addr::new(RegionId::Sessions, slot * self.session_slot_bytes)
    }

    /// Reply stage slot `slot`.
    pub fn reply_stage(&self, slot: u64) -> Addr {
        assert!(slot < self.reply_stage_slots);
        Addr::new(
            RegionId::Sessions,
            self.reply_stage_offset + slot * self.reply_stage_slot_bytes,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_do_not_overlap_and_are_aligned() {
        let cfg = Config::new(5, MemberId(2));
        let l = Layout::new(&cfg).unwrap();
        assert_eq!(l.control_bytes, 5 * ROW_BYTES);
        assert!(l.log.adjust_list_offset >= l.log.adjust_header_offset + ADJUST_HEADER_BYTES);
        assert!(l.log.ring_offset >= l.log.adjust_list_offset + l.log.adjust_capacity * 16);
        assert_eq!(l.log.ring_offset % 64, 0);
        assert_eq!(l.log.region_bytes, l.log.ring_offset + l.log.ring_bytes);
        let s = l.scratch;
        assert!(s.row_landing_offset >= STAGING_SLOTS as u64 * ROW_BYTES);
        assert!(s.adjust_landing_offset >= s.row_landing_offset + 5 * ROW_BYTES);
        assert!(s.atomic_offset >= s.adjust_landing_offset + 5 * s.adjust_landing_stride);
        assert_eq!(
            l.adjust_landing(MemberId(4)).offset + s.adjust_landing_stride,
            s.atomic_offset
        );
        for r in l.regions() {
            assert_eq!(r.bytes % 8, 0, "{}", r.id.name());
            assert_eq!(l.region_bytes(r.id), r.bytes);
        }
        let ids: heapless::Vec<u8, 8> = l.regions().map(|r| r.id.0).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids unique and ordered"
        );
        assert_eq!(
            l.heartbeat_landing(MemberId(4)).offset + HEARTBEAT_LANDING_BYTES,
            l.heartbeat_bytes
        );
        assert!(l.contains(Addr::new(RegionId::Log, 0), l.log.region_bytes));
        assert!(!l.contains(Addr::new(RegionId::Log, 1), l.log.region_bytes));
        assert!(!l.contains(Addr::new(RegionId::Log, u64::MAX), 2));
    }

    #[test]
    fn hash_changes_with_every_size() {
        let base = Config::new(3, MemberId(0));
        let h = Layout::new(&base).unwrap().hash;
        // The member's own id is not part of the layout: peers must agree.
        let mut other = base.clone();
        other.self_id = MemberId(2);
        assert_eq!(Layout::new(&other).unwrap().hash, h);
        let mut c = base.clone();
        c.log_ring_bytes *= 2;
        assert_ne!(Layout::new(&c).unwrap().hash, h);
        let mut c = base.clone();
        c.member_count = 5;
        assert_ne!(Layout::new(&c).unwrap().hash, h);
        let mut c = base.clone();
        c.entry_payload_bytes_max += 64;
        assert_ne!(Layout::new(&c).unwrap().hash, h);
        let mut c = base;
        c.reply_bytes_max += 64;
        assert_ne!(Layout::new(&c).unwrap().hash, h);
    }
}
