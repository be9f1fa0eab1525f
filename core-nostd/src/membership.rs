//! The group configuration (DARE §3.1.1, §3.4): the group size P, the
//! members that are part of the group (a bitmask: a removed member's bit
//! is clear), the new size P' while the group is being resized, and the
//! state that says which majorities decide.
//!
//! Every rule that needs "a majority" asks [`Configuration::is_quorum`] or
//! [`Configuration::quorum_position`] with the set of members that agree;
//! none counts against a fixed number. In the stable and extended states
//! one majority of the P slots decides; in the transitional state a
//! majority of the old P slots *and* one of the new P' slots (DARE: "the
//! servers form two groups ... majorities from both groups are required
//! for both electing a leader and committing a log entry"). A removed
//! member still counts in P (only a resize changes P), so removing a
//! member never lowers what a majority is.

use crate::fabric::{MemberId, MAX_MEMBERS};
use crate::sst::MemberMask;

/// Which majorities decide (DARE §3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigState {
    /// One group of `size` slots.
    Stable,
    /// A full group plus one member (slot `size`) that recovers and is
    /// replicated to, but neither votes nor counts toward commits.
    Extended,
    /// Two groups, of `size` and of `new_size` slots: both must agree.
    Transitional,
}

/// A group configuration. Slots are member ids `0 .. P`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Configuration {
    /// Which majorities decide.
    pub state: ConfigState,
    /// P: slots of the (old) group.
    pub size: u8,
    /// P': slots of the new group (equal to `size` when stable).
    pub new_size: u8,
    /// Members that are part of the group: bit `m` for member `m`.
    pub active: MemberMask,
    /// Members the leader removed because they fell silent (zombies, DARE
    /// §3.3.2), to be added back when they return. Never in `active`.
    /// Carried in the configuration so that any later leader adds them
    /// back, and never a member an operator removed.
    pub away: MemberMask,
}

/// Why an encoded configuration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigurationError {
    /// Not a known state code.
    State,
    /// A size of 0 or above the maximum, or a stable configuration with
    /// two sizes.
    Size,
    /// An active member outside every group's slots.
    Active,
    /// A member both in the group and away from it, or away from no slot.
    Away,
}

/// Bytes of an encoded configuration (in CONFIG entries and snapshots).
pub const CONFIGURATION_BYTES: usize = 8;

impl Configuration {
    /// The configuration a group starts in: every one of `size` members,
    /// stable.
    pub const fn initial(size: u8) -> Configuration {
        Configuration {
            state: ConfigState::Stable,
            size,
            new_size: size,
            active: MemberMask::first(size as usize),
            away: MemberMask::NONE,
        }
    }

    /// The slots of every group of this configuration.
    pub fn slots(&self) -> MemberMask {
        MemberMask::first(usize::from(self.size.max(self.new_size)))
    }

    /// The members that take part in elections, commits and read rounds.
    /// An extended configuration's added member is not one of them yet.
    pub fn voters(&self) -> MemberMask {
        let slots = match self.state {
            ConfigState::Stable | ConfigState::Extended => MemberMask::first(self.size.into()),
            ConfigState::Transitional => self.slots(),
        };
        self.active.and(slots)
    }

    /// The members the leader replicates its log to (and that may recover
    /// from it): the voters, and an extended configuration's added member.
    pub fn replicas(&self) -> MemberMask {
        self.active.and(self.slots())
    }

    /// True when `agree` (the members that agree, the asking one included
    /// if it does) holds a majority of every group.
    pub fn is_quorum(&self, agree: MemberMask) -> bool {
        self.groups().iter().flatten().all(|&slots| {
            agree
                .and(self.active)
                .and(MemberMask::first(slots.into()))
                .count()
                > usize::from(slots) / 2
        })
    }

    /// The highest position that a majority of every group holds, given
    /// each member's position (`None`: not counted). `minority_of` lowers
    /// each group's majority by that many members (only for mutation
    /// testing: a correct caller passes 0).
    pub fn quorum_position(
        &self,
        position: impl Fn(MemberId) -> Option<u64>,
        minority_of: usize,
    ) -> Option<u64> {
        let mut result: Option<u64> = None;
        for &slots in self.groups().iter().flatten() {
            let members = self.active.and(MemberMask::first(slots.into()));
            let mut held: heapless::Vec<u64, MAX_MEMBERS> = heapless::Vec::new();
            for m in members.iter() {
                if let Some(p) = position(m) {
                    // Fits: at most MAX_MEMBERS members.
                    let _ = held.push(p);
                }
            }
            let needed = (usize::from(slots) / 2 + 1)
                .saturating_sub(minority_of)
                .max(1);
            if held.len() < needed {
                return None;
            }
            held.sort_unstable_by(|a, b| b.cmp(a));
            let p = held[needed - 1];
            result = Some(result.map_or(p, |r| r.min(p)));
        }
        result
    }

    /// The sizes of the groups whose majorities decide: one, or two in
    /// the transitional state.
    fn groups(&self) -> [Option<u8>; 2] {
        match self.state {
            ConfigState::Stable | ConfigState::Extended => [Some(self.size), None],
            ConfigState::Transitional => [Some(self.size), Some(self.new_size)],
        }
    }

    /// Checks the fields against `members_max` (the most members the
    /// memory was laid out for).
    pub fn validate(&self, members_max: u8) -> Result<(), ConfigurationError> {
        let ok = |s: u8| s >= 1 && s <= members_max && usize::from(s) <= MAX_MEMBERS;
        if !ok(self.size) || !ok(self.new_size) {
            return Err(ConfigurationError::Size);
        }
        match self.state {
            ConfigState::Stable if self.new_size != self.size => {
                return Err(ConfigurationError::Size)
            }
            ConfigState::Extended if self.new_size != self.size + 1 => {
                return Err(ConfigurationError::Size)
            }
            _ => {}
        }
        if self.active.0 & !self.slots().0 != 0 {
            return Err(ConfigurationError::Active);
        }
        if self.away.0 & self.active.0 != 0 || self.away.0 & !self.slots().0 != 0 {
            return Err(ConfigurationError::Away);
        }
        Ok(())
    }

    /// The encoding in CONFIG entries and snapshot headers: state, P, P',
    /// the away mask (8 bits: `MAX_MEMBERS` is 8), then the active mask
    /// (little-endian).
    pub fn encode(&self) -> [u8; CONFIGURATION_BYTES] {
        let mut b = [0u8; CONFIGURATION_BYTES];
        b[0] = match self.state {
            ConfigState::Stable => 1,
            ConfigState::Extended => 2,
            ConfigState::Transitional => 3,
        };
        b[1] = self.size;
        b[2] = self.new_size;
        const _: () = assert!(MAX_MEMBERS <= 8, "the away mask is one byte");
        b[3] = self.away.0 as u8;
        b[4..8].copy_from_slice(&self.active.0.to_le_bytes());
        b
    }

    /// Decodes and validates (peers wrote it: never trusted).
    pub fn decode(b: &[u8], members_max: u8) -> Result<Configuration, ConfigurationError> {
        if b.len() != CONFIGURATION_BYTES {
            return Err(ConfigurationError::Size);
        }
        let state = match b[0] {
            1 => ConfigState::Stable,
            2 => ConfigState::Extended,
            3 => ConfigState::Transitional,
            _ => return Err(ConfigurationError::State),
        };
        let c = Configuration {
            state,
            size: b[1],
            new_size: b[2],
            active: MemberMask(u32::from_le_bytes([b[4], b[5], b[6], b[7]])),
            away: MemberMask(u32::from(b[3])),
        };
        c.validate(members_max)?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask(ids: &[u8]) -> MemberMask {
        ids.iter()
            .fold(MemberMask::NONE, |m, &i| m.with(MemberId(i)))
    }

    #[test]
    fn a_stable_group_needs_a_majority_of_its_size() {
        let c = Configuration::initial(3);
        assert!(!c.is_quorum(mask(&[0])));
        assert!(c.is_quorum(mask(&[0, 2])));
        // Members outside the group do not count.
        assert!(!c.is_quorum(mask(&[0, 3, 4])));
        let five = Configuration::initial(5);
        assert!(!five.is_quorum(mask(&[0, 1])));
        assert!(five.is_quorum(mask(&[0, 1, 4])));
    }

    #[test]
    fn a_removed_member_still_counts_in_the_size() {
        let mut c = Configuration::initial(3);
        c.active = c.active.without(MemberId(1));
        // Two of three slots, although only two members are left.
        assert!(
            !c.is_quorum(mask(&[0, 1])),
            "a removed member's agreement does not count"
        );
        assert!(c.is_quorum(mask(&[0, 2])));
        assert_eq!(c.voters(), mask(&[0, 2]));
    }

    #[test]
    fn a_transitional_group_needs_both_majorities() {
        // Growing from 3 to 5.
        let grow = Configuration {
            state: ConfigState::Transitional,
            size: 3,
            new_size: 5,
            active: MemberMask::first(5),
            away: MemberMask::NONE,
        };
        assert!(grow.is_quorum(mask(&[0, 1, 2])), "3 of 5 and 3 of 3");
        assert!(!grow.is_quorum(mask(&[0, 3, 4])), "3 of 5 but 1 of 3");
        assert!(grow.is_quorum(mask(&[0, 1, 3])));
        // Shrinking from 5 to 3.
        let shrink = Configuration {
            state: ConfigState::Transitional,
            size: 5,
            new_size: 3,
            active: MemberMask::first(5),
            away: MemberMask::NONE,
        };
        assert!(!shrink.is_quorum(mask(&[2, 3, 4])), "3 of 5 but 1 of 3");
        assert!(shrink.is_quorum(mask(&[0, 1, 4])));
        assert_eq!(shrink.voters(), MemberMask::first(5));
    }

    #[test]
    fn an_extended_members_agreement_does_not_count() {
        let c = Configuration {
            state: ConfigState::Extended,
            size: 3,
            new_size: 4,
            active: MemberMask::first(4),
            away: MemberMask::NONE,
        };
        assert!(!c.is_quorum(mask(&[0, 3])));
        assert!(c.is_quorum(mask(&[0, 1])));
        assert_eq!(c.voters(), MemberMask::first(3));
        assert_eq!(c.replicas(), MemberMask::first(4));
    }

    #[test]
    fn quorum_positions_take_the_lower_of_both_groups() {
        let c = Configuration::initial(3);
        let pos = [10u64, 7, 3];
        assert_eq!(c.quorum_position(|m| Some(pos[m.index()]), 0), Some(7));
        assert_eq!(c.quorum_position(|m| (m.0 == 0).then_some(10), 0), None);
        assert_eq!(c.quorum_position(|m| (m.0 == 0).then_some(10), 1), Some(10));
        let t = Configuration {
            state: ConfigState::Transitional,
            size: 3,
            new_size: 5,
            active: MemberMask::first(5),
            away: MemberMask::NONE,
        };
        let pos = [10u64, 9, 8, 2, 1];
        // Old group: 9; new group (3 of 5): 8.
        assert_eq!(t.quorum_position(|m| Some(pos[m.index()]), 0), Some(8));
        let pos = [10u64, 2, 1, 9, 8];
        // Old group: 2; new group: 8.
        assert_eq!(t.quorum_position(|m| Some(pos[m.index()]), 0), Some(2));
    }

    #[test]
    fn encoding_round_trips_and_refuses_what_is_malformed() {
        let c = Configuration {
            state: ConfigState::Transitional,
            size: 3,
            new_size: 5,
            active: mask(&[0, 1, 3, 4]),
            away: MemberMask::NONE,
        };
        assert_eq!(Configuration::decode(&c.encode(), 5), Ok(c));
        // Members away (zombies) travel with it; one both away and in the
        // group, or away from no slot, is refused.
        let z = Configuration {
            away: mask(&[2]),
            active: mask(&[0, 1, 3, 4]),
            ..c
        };
        assert_eq!(Configuration::decode(&z.encode(), 5), Ok(z));
        let mut b = z.encode();
        b[3] = 0b1;
        assert_eq!(Configuration::decode(&b, 5), Err(ConfigurationError::Away));
        let mut b = Configuration::initial(3).encode();
        b[3] = 0b1000;
        assert_eq!(Configuration::decode(&b, 5), Err(ConfigurationError::Away));
        assert_eq!(
            Configuration::decode(&c.encode(), 4),
            Err(ConfigurationError::Size),
            "beyond the members the memory holds"
        );
        let mut b = c.encode();
        b[0] = 9;
        assert_eq!(Configuration::decode(&b, 5), Err(ConfigurationError::State));
        let mut b = Configuration::initial(3).encode();
        b[2] = 4;
        assert_eq!(Configuration::decode(&b, 5), Err(ConfigurationError::Size));
        let mut b = Configuration::initial(3).encode();
        b[4] = 0b1000;
        assert_eq!(
            Configuration::decode(&b, 5),
            Err(ConfigurationError::Active)
        );
        assert_eq!(
            Configuration::decode(&b[..7], 5),
            Err(ConfigurationError::Size)
        );
    }
}
