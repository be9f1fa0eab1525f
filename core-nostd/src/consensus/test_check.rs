//! The safety checker of the consensus harness: **one decided value per
//! slot** (uniform agreement and validity, A.3), checked twice over:
//!
//! * on what members report: every [`super::ConsensusEvent::Decided`] of
//!   every proposer and learner (every incarnation) for a slot carries
//!   the same value, and that value was proposed for the slot;
//! * on the acceptors' memory: whenever a majority of acceptors hold the
//!   same accepted proposal (the value is *chosen*, whether or not anyone
//!   noticed), its value (the record that proposal's WRITE landed) is the
//!   slot's one value, and a proposal number is never written with two
//!   different values.
//!
//! It also checks each acceptor word's transitions: words stay valid,
//! `min_proposal` and `accepted_proposal` never go down within a lap, and
//! the lap never goes back (a word recycled for a later slot of the ring
//! is never taken back by an older one). Slots are full slot numbers:
//! word `index` of lap `lap` in a ring of `ring` words holds slot
//! `lap × ring + index` (laps do not wrap in the harness's short runs).

extern crate std;

use super::word::{lap_order, LapOrder, SlotWord};
use std::collections::{BTreeMap, BTreeSet};
use std::string::String;
use std::vec::Vec;

/// A broken rule, with what shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Two different values decided (or chosen) in one slot.
    TwoValues {
        /// The slot.
        slot: u32,
        /// Who reported the first value, and the value.
        first: (String, Vec<u8>),
        /// Who reported the other value, and the value.
        second: (String, Vec<u8>),
    },
    /// A decided value nobody proposed for the slot.
    NeverProposed {
        /// The slot.
        slot: u32,
        /// Who decided it.
        by: String,
        /// The value.
        value: Vec<u8>,
    },
    /// One proposal number's record landed with two different values.
    ProposalReused {
        /// The slot.
        slot: u32,
        /// The proposal.
        proposal: u16,
    },
    /// A majority accepted a proposal whose record never landed.
    ChosenWithoutRecord {
        /// The slot.
        slot: u32,
        /// The proposal.
        proposal: u16,
    },
    /// An acceptor word that does not decode, or went backwards.
    BadWord {
        /// The slot.
        slot: u32,
        /// The word before.
        old: u64,
        /// The word after.
        new: u64,
    },
}

/// The checker's state over one run.
#[derive(Default)]
pub struct OneValuePerSlot {
    proposed: BTreeSet<(u32, Vec<u8>)>,
    /// The slot's value and who established it first.
    value_of: BTreeMap<u32, (String, Vec<u8>)>,
    /// Landed records: (slot, owner, proposal) → value.
    records: BTreeMap<(u32, u8, u16), Vec<u8>>,
    /// Decisions reported, for the summary.
    pub decisions: usize,
    /// Chosen proposals seen in memory, for the summary.
    pub chosen: BTreeSet<(u32, u16)>,
}

impl OneValuePerSlot {
    /// A fresh checker.
    pub fn new() -> Self {
        Self::default()
    }

    /// The highest slot with a value decided or chosen.
    pub fn highest_slot(&self) -> Option<u32> {
        self.value_of.keys().next_back().copied()
    }

    /// Someone proposed `value` for `slot`.
    pub fn proposed(&mut self, slot: u32, value: &[u8]) {
        self.proposed.insert((slot, value.to_vec()));
    }

    fn settle(&mut self, slot: u32, by: String, value: &[u8]) -> Result<(), Violation> {
        match self.value_of.get(&slot) {
            Some((first_by, first)) if first != value => Err(Violation::TwoValues {
                slot,
                first: (first_by.clone(), first.clone()),
                second: (by, value.to_vec()),
            }),
            Some(_) => Ok(()),
            None => {
                self.value_of.insert(slot, (by, value.to_vec()));
                Ok(())
            }
        }
    }

    /// `by` reported `value` decided in `slot`.
    pub fn decided(&mut self, by: &str, slot: u32, value: &[u8]) -> Result<(), Violation> {
        self.decisions += 1;
        if !self.proposed.contains(&(slot, value.to_vec())) {
            return Err(Violation::NeverProposed {
                slot,
                by: by.into(),
                value: value.to_vec(),
            });
        }
        self.settle(slot, by.into(), value)
    }

    /// A record WRITE of proposer `owner` for `(slot, proposal)` landed at
    /// an acceptor with `value`.
    pub fn record_landed(
        &mut self,
        slot: u32,
        owner: u8,
        proposal: u16,
        value: &[u8],
    ) -> Result<(), Violation> {
        match self.records.get(&(slot, owner, proposal)) {
            Some(v) if v != value => Err(Violation::ProposalReused { slot, proposal }),
            Some(_) => Ok(()),
            None => {
                self.records.insert((slot, owner, proposal), value.to_vec());
                Ok(())
            }
        }
    }

    /// An acceptor's word `index` of a ring of `ring` words changed from
    /// `old` to `new`.
    pub fn word_changed(
        &mut self,
        index: u32,
        ring: u32,
        old: u64,
        new: u64,
        proposer_count: u8,
    ) -> Result<(), Violation> {
        let slot = |lap: u16| u32::from(lap) * ring + index;
        let (Ok(o), Ok(n)) = (
            SlotWord::decode(old, proposer_count),
            SlotWord::decode(new, proposer_count),
        ) else {
            return Err(Violation::BadWord {
                slot: index,
                old,
                new,
            });
        };
        let bad = Err(Violation::BadWord {
            slot: slot(o.lap),
            old,
            new,
        });
        match lap_order(n.lap, o.lap) {
            // Recycled for a later slot: anything it held is behind it.
            LapOrder::Newer => Ok(()),
            LapOrder::Older => bad,
            LapOrder::Same
                if n.min_proposal < o.min_proposal || n.accepted_proposal < o.accepted_proposal =>
            {
                bad
            }
            LapOrder::Same => Ok(()),
        }
    }

    /// The words `index` (of a ring of `ring`) at every acceptor (dead
    /// ones too: chosen is a property of memory): a value accepted by
    /// `quorum` of them under one proposal, in one lap, is chosen in that
    /// lap's slot.
    pub fn acceptor_words(
        &mut self,
        index: u32,
        ring: u32,
        words: &[u64],
        proposer_count: u8,
        quorum: usize,
    ) -> Result<(), Violation> {
        let decoded: Vec<SlotWord> = words
            .iter()
            .filter_map(|&w| SlotWord::decode(w, proposer_count).ok())
            .collect();
        for w in &decoded {
            let Some(v) = w.value else { continue };
            let slot = u32::from(w.lap) * ring + index;
            let count = decoded
                .iter()
                .filter(|x| x.lap == w.lap && x.value == Some(v))
                .count();
            if count < quorum || self.chosen.contains(&(slot, v.proposal)) {
                continue;
            }
            self.chosen.insert((slot, v.proposal));
            let Some(value) = self.records.get(&(slot, v.owner, v.proposal)).cloned() else {
                return Err(Violation::ChosenWithoutRecord {
                    slot,
                    proposal: v.proposal,
                });
            };
            self.settle(
                slot,
                std::format!("memory (chosen under {})", v.proposal),
                &value,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::word::{owner_of, ValueRef};

    fn accepted(min: u16, acc: u16, n: u8) -> u64 {
        SlotWord {
            min_proposal: min,
            accepted_proposal: acc,
            value: Some(ValueRef {
                owner: owner_of(acc, n),
                proposal: acc,
                digest: 0,
            }),
            lap: 0,
        }
        .encode()
    }

    fn in_lap(raw: u64, lap: u16) -> u64 {
        let w = SlotWord::decode(raw, 3).unwrap();
        SlotWord { lap, ..w }.encode()
    }

    #[test]
    fn recycled_words_move_forward_and_count_in_their_own_lap() {
        let mut c = OneValuePerSlot::new();
        // Word 2 of a ring of 4: lap 0 is slot 2, lap 1 slot 6.
        let (a, b) = (accepted(3, 3, 3), accepted(4, 4, 3));
        assert_eq!(c.word_changed(2, 4, a, in_lap(0, 1), 3), Ok(()));
        assert_eq!(c.word_changed(2, 4, in_lap(0, 1), in_lap(a, 1), 3), Ok(()));
        // Taken back to an older lap: a stale proposer undid the recycle.
        assert_eq!(
            c.word_changed(2, 4, in_lap(b, 1), a, 3),
            Err(Violation::BadWord {
                slot: 6,
                old: in_lap(b, 1),
                new: a
            })
        );
        // The same value reference in two laps is no majority.
        c.record_landed(2, 0, 3, b"x").unwrap();
        c.record_landed(6, 0, 3, b"y").unwrap();
        c.acceptor_words(2, 4, &[a, in_lap(a, 1), 0], 3, 2).unwrap();
        assert!(c.chosen.is_empty());
        c.acceptor_words(2, 4, &[a, in_lap(a, 1), in_lap(a, 1)], 3, 2)
            .unwrap();
        assert!(c.chosen.contains(&(6, 3)) && !c.chosen.contains(&(2, 3)));
        // Slot 6's value is the record of slot 6, not slot 2's.
        c.proposed(6, b"y");
        assert_eq!(c.decided("p0", 6, b"y"), Ok(()));
    }

    #[test]
    fn an_agreeing_history_passes() {
        let mut c = OneValuePerSlot::new();
        c.proposed(0, b"a");
        c.proposed(0, b"b");
        c.proposed(1, b"b");
        assert_eq!(c.decided("p0", 0, b"a"), Ok(()));
        assert_eq!(c.decided("p1", 0, b"a"), Ok(()));
        assert_eq!(c.decided("learner", 1, b"b"), Ok(()));
        assert_eq!(c.record_landed(0, 0, 3, b"a"), Ok(()));
        assert_eq!(
            c.record_landed(0, 0, 3, b"a"),
            Ok(()),
            "the same record twice"
        );
        let w = accepted(3, 3, 3);
        assert_eq!(c.acceptor_words(0, 16, &[w, w, 0], 3, 2), Ok(()));
        assert!(c.chosen.contains(&(0, 3)));
        assert_eq!(c.word_changed(0, 16, 0, w, 3), Ok(()));
    }

    #[test]
    fn two_decided_values_in_a_slot_fail() {
        let mut c = OneValuePerSlot::new();
        c.proposed(4, b"a");
        c.proposed(4, b"b");
        c.decided("p0", 4, b"a").unwrap();
        assert!(matches!(
            c.decided("p1.2", 4, b"b"),
            Err(Violation::TwoValues { slot: 4, .. })
        ));
    }

    #[test]
    fn a_decided_value_nobody_proposed_fails() {
        let mut c = OneValuePerSlot::new();
        c.proposed(0, b"a");
        assert!(matches!(
            c.decided("p0", 0, b"z"),
            Err(Violation::NeverProposed { slot: 0, .. })
        ));
        // Proposed for another slot is not proposed for this one.
        assert!(matches!(
            c.decided("p0", 1, b"a"),
            Err(Violation::NeverProposed { slot: 1, .. })
        ));
    }

    #[test]
    fn a_chosen_value_that_differs_from_a_decided_one_fails() {
        let mut c = OneValuePerSlot::new();
        c.proposed(0, b"a");
        c.proposed(0, b"b");
        c.decided("p0", 0, b"a").unwrap();
        c.record_landed(0, 1, 4, b"b").unwrap();
        let w = accepted(4, 4, 3);
        assert!(matches!(
            c.acceptor_words(0, 16, &[w, 0, w], 3, 2),
            Err(Violation::TwoValues { slot: 0, .. })
        ));
    }

    #[test]
    fn two_chosen_proposals_with_different_values_fail() {
        let mut c = OneValuePerSlot::new();
        c.record_landed(2, 0, 3, b"x").unwrap();
        c.record_landed(2, 1, 4, b"y").unwrap();
        let (a, b) = (accepted(3, 3, 3), accepted(4, 4, 3));
        c.acceptor_words(2, 16, &[a, a, b], 3, 2).unwrap();
        assert!(matches!(
            c.acceptor_words(2, 16, &[a, b, b], 3, 2),
            Err(Violation::TwoValues { slot: 2, .. })
        ));
    }

    #[test]
    fn reused_proposals_missing_records_and_bad_words_fail() {
        let mut c = OneValuePerSlot::new();
        c.record_landed(0, 0, 3, b"x").unwrap();
        assert_eq!(
            c.record_landed(0, 0, 3, b"y"),
            Err(Violation::ProposalReused {
                slot: 0,
                proposal: 3
            })
        );
        let w = accepted(6, 6, 3);
        assert_eq!(
            c.acceptor_words(1, 16, &[w, w, w], 3, 2),
            Err(Violation::ChosenWithoutRecord {
                slot: 1,
                proposal: 6
            })
        );
        // min_proposal going down, and a malformed word.
        assert!(c
            .word_changed(0, 16, accepted(9, 6, 3), accepted(7, 6, 3), 3)
            .is_err());
        assert!(c
            .word_changed(0, 16, accepted(9, 6, 3), accepted(9, 3, 3), 3)
            .is_err());
        assert!(c.word_changed(0, 16, 0, 1, 3).is_err());
    }
}
