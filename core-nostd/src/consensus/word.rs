//! The acceptor's state in one 8-byte word (uKharon §5.3.1), proposal
//! numbers, and Paxos's acceptor rules as pure functions over words.
//!
//! ```text
//!  63          48 47          32 31          16 15      8 7      0
//! | min_proposal | accepted_prop | lap          | owner   | digest |
//!                                                \ accepted_value /
//! ```
//!
//! * `min_proposal` and `accepted_proposal` are 16 bits each, as in the
//!   paper, so its overflow analysis (A.6: the fallback once
//!   `min_proposal` reaches `2^16 - |Π|`) applies unchanged.
//! * `lap` says which slot of the ring the word is about: slot `s` lives
//!   in word `s mod slot_count` in lap `s / slot_count` (mod 2^16). Slots
//!   are recycled (see the [module docs](super)): a word of an older lap
//!   holds nothing of the slot asked about (nobody touched it there yet),
//!   one of a newer lap says the slot is over.
//! * `accepted_value` (16 bits) is an indirection: it names the proposal
//!   record that holds the value, i.e. the buffer of proposer `owner`
//!   (its index among the proposers) for this slot, written under
//!   `accepted_proposal`, plus an 8-bit `digest` of the value bytes. Every
//!   accept writes its own record first (a value adopted from another
//!   proposer is copied into the adopter's buffer), so in a well-formed
//!   word `owner == accepted_proposal % |Π|`; a foreign word fails
//!   [`decode`], and the digest ties the fetched record's bytes to the
//!   word.
//! * Proposal numbers are `round × |Π| + owner` with `round ≥ 1`, unique
//!   per proposer; 0 means "none", so the all-zero word is the empty slot
//!   of lap 0.
//!
//! [`decode`]: SlotWord::decode

use core::fmt;

/// The all-zero word: nothing promised, nothing accepted, lap 0.
pub const EMPTY_WORD: u64 = 0;

/// Where a word's lap stands against the lap of the slot asked about.
/// Laps wrap at 2^16, so a word 2^15 laps or more behind reads as ahead:
/// a coordinator's word that no CAS touched for 2^15 laps of the ring
/// (134 million views with the default 4096 slots, 131,072 with the
/// smallest ring of 4) would send a proposer to a slot not yet decided.
/// The same holds for a member that starts over from slot 0 (a restart)
/// in a group that has gone round the ring that often; see the limits
/// in the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LapOrder {
    /// The word is about this slot.
    Same,
    /// An earlier slot of the same word: nothing of this slot is there.
    Older,
    /// A later slot of the same word: this slot is over.
    Newer,
}

/// Compares `word_lap` with `slot_lap` (wrapping).
#[inline]
pub const fn lap_order(word_lap: u16, slot_lap: u16) -> LapOrder {
    let d = word_lap.wrapping_sub(slot_lap) as i16;
    if d == 0 {
        LapOrder::Same
    } else if d < 0 {
        LapOrder::Older
    } else {
        LapOrder::Newer
    }
}

/// An indirection to the proposal record holding an accepted value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ValueRef {
    /// Index (among the proposers) of the proposer whose proposal area
    /// holds the record.
    pub owner: u8,
    /// The proposal number the record was written under.
    pub proposal: u16,
    /// Low 8 bits of [`crate::consensus::record::value_digest`] of the value.
    pub digest: u8,
}

impl ValueRef {
    /// The 16-bit field of the slot word (the proposal is the word's
    /// `accepted_proposal`).
    #[inline]
    pub const fn bits(self) -> u16 {
        ((self.owner as u16) << 8) | self.digest as u16
    }
}

/// A decoded, validated acceptor word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SlotWord {
    /// Highest proposal promised (0: none).
    pub min_proposal: u16,
    /// Proposal of the accepted value (0: none).
    pub accepted_proposal: u16,
    /// The accepted value (present exactly when `accepted_proposal != 0`).
    pub value: Option<ValueRef>,
    /// The lap of the ring the word is about (see the module docs).
    pub lap: u16,
}

/// Why a word read from an acceptor is not a valid acceptor state. Words
/// come from peers' memory and are never trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WordError {
    /// `accepted_proposal > min_proposal`: an acceptor always promises
    /// what it accepts.
    AcceptedAboveMin,
    /// A value field without an accepted proposal.
    ValueWithoutProposal,
    /// The value's owner is not the proposer of the accepted proposal.
    OwnerMismatch,
    /// A nonzero proposal number below `|Π|` (round 0 is never used).
    ProposalBelowFirstRound,
}

impl fmt::Display for WordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            WordError::AcceptedAboveMin => "accepted proposal above the promised one",
            WordError::ValueWithoutProposal => "a value without an accepted proposal",
            WordError::OwnerMismatch => "the value's owner did not make the proposal",
            WordError::ProposalBelowFirstRound => "a proposal number below the first round",
        };
        f.write_str(s)
    }
}

impl SlotWord {
    /// The empty slot of lap 0.
    pub const EMPTY: SlotWord = SlotWord::empty(0);

    /// The empty slot of `lap`.
    #[inline]
    pub const fn empty(lap: u16) -> SlotWord {
        SlotWord {
            min_proposal: 0,
            accepted_proposal: 0,
            value: None,
            lap,
        }
    }

    /// The raw 64-bit word (what a CAS compares and swaps).
    #[inline]
    pub const fn encode(self) -> u64 {
        let value = match self.value {
            Some(v) => v.bits(),
            None => 0,
        };
        ((self.min_proposal as u64) << 48)
            | ((self.accepted_proposal as u64) << 32)
            | ((self.lap as u64) << 16)
            | value as u64
    }

    /// Decodes and validates a raw word for a group of `proposer_count`
    /// proposers (1 to 255).
    pub fn decode(raw: u64, proposer_count: u8) -> Result<SlotWord, WordError> {
        assert!(proposer_count > 0, "a group without proposers");
        let min_proposal = (raw >> 48) as u16;
        let accepted_proposal = (raw >> 32) as u16;
        let lap = (raw >> 16) as u16;
        let value_bits = raw as u16;
        let n = u16::from(proposer_count);
        for p in [min_proposal, accepted_proposal] {
            if p != 0 && p < n {
                return Err(WordError::ProposalBelowFirstRound);
            }
        }
        if accepted_proposal > min_proposal {
            return Err(WordError::AcceptedAboveMin);
        }
        let value = match (accepted_proposal, value_bits) {
            (0, 0) => None,
            (0, _) => return Err(WordError::ValueWithoutProposal),
            (a, bits) => {
                let v = ValueRef {
                    owner: (bits >> 8) as u8,
                    proposal: a,
                    digest: bits as u8,
                };
                if u16::from(v.owner) != a % n {
                    return Err(WordError::OwnerMismatch);
                }
                Some(v)
            }
        };
        Ok(SlotWord {
            min_proposal,
            accepted_proposal,
            value,
            lap,
        })
    }

    /// The word a restarted acceptor puts where it may have promised or
    /// accepted before it lost its memory: nothing accepted, every
    /// proposal refused, in `lap`. Proposers, learners and lease checks
    /// take it as no answer for that lap's slot (a nack would make
    /// proposers give the slot up, since no proposal is above it); a
    /// proposer of a later lap recycles it like any older word. See the
    /// module docs, "Coordinators back".
    #[inline]
    pub const fn fenced(lap: u16) -> SlotWord {
        SlotWord {
            min_proposal: u16::MAX,
            accepted_proposal: 0,
            value: None,
            lap,
        }
    }

    /// True for a [`SlotWord::fenced`] word (a proposal number that
    /// reached `u16::MAX` with nothing accepted reads the same: that slot's
    /// proposals are exhausted there anyway).
    #[inline]
    pub const fn is_fenced(self) -> bool {
        self.min_proposal == u16::MAX && self.accepted_proposal == 0
    }

    /// True when nothing is promised or accepted (in the word's lap).
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.min_proposal == 0 && self.accepted_proposal == 0
    }
}

/// The next proposal number would not fit the 16 bits of the word (A.6).
/// The caller must give up on this slot with one-sided consensus: the
/// paper falls back to two-sided RPC Paxos for such an acceptor, which
/// this crate does not implement; the engine reports it as
/// [`crate::consensus::ConsensusEvent::ProposalSpaceExhausted`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProposalSpaceExhausted;

/// Proposer `owner`'s first proposal number (round 1) among `n` proposers.
#[inline]
pub const fn first_proposal(owner: u8, n: u8) -> u16 {
    n as u16 + owner as u16
}

/// The proposer that owns a nonzero proposal number.
#[inline]
pub const fn owner_of(proposal: u16, n: u8) -> u8 {
    (proposal % n as u16) as u8
}

/// Proposer `owner`'s smallest proposal number above `floor`, or
/// [`ProposalSpaceExhausted`] when it would exceed 16 bits.
pub fn proposal_above(floor: u16, owner: u8, n: u8) -> Result<u16, ProposalSpaceExhausted> {
    assert!(n > 0 && owner < n, "proposer index out of range");
    let n = u32::from(n);
    let owner = u32::from(owner);
    let floor = u32::from(floor);
    // round = floor / n, then at most one more round: bounded.
    let mut round = (floor / n).max(1);
    if round * n + owner <= floor {
        round += 1;
    }
    let p = round * n + owner;
    assert!(p > floor && p % n == owner);
    u16::try_from(p).map_err(|_| ProposalSpaceExhausted)
}

/// Paxos's Prepare at one acceptor (Algorithm 4, `cas_prepare`), as the
/// proposer computes it locally from the acceptor's state `expected`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrepareStep {
    /// CAS `expected` to this word; if it lands, the acceptor promised and
    /// reported `expected`'s accepted value.
    Cas(SlotWord),
    /// The acceptor promised a higher (or the same, someone else's)
    /// proposal: abort.
    Nack {
        /// Its `min_proposal`.
        min_proposal: u16,
    },
}

/// `proposal > expected.min_proposal` ⇒ raise `min_proposal`, keep the
/// accepted value; otherwise a nack.
pub fn prepare_step(expected: SlotWord, proposal: u16) -> PrepareStep {
    if proposal > expected.min_proposal {
        PrepareStep::Cas(SlotWord {
            min_proposal: proposal,
            ..expected
        })
    } else {
        PrepareStep::Nack {
            min_proposal: expected.min_proposal,
        }
    }
}

/// Paxos's Accept at one acceptor (Algorithm 4, `cas_accept`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcceptStep {
    /// CAS `expected` to this word.
    Cas(SlotWord),
    /// The acceptor promised a higher proposal: abort.
    Nack {
        /// Its `min_proposal`.
        min_proposal: u16,
    },
}

/// `proposal ≥ expected.min_proposal` ⇒ the acceptor accepts `value`
/// under `proposal` (and promises it); otherwise a nack.
pub fn accept_step(expected: SlotWord, proposal: u16, value: ValueRef) -> AcceptStep {
    assert_eq!(value.proposal, proposal, "a value names its own proposal");
    if proposal >= expected.min_proposal {
        AcceptStep::Cas(SlotWord {
            min_proposal: proposal,
            accepted_proposal: proposal,
            value: Some(value),
            lap: expected.lap,
        })
    } else {
        AcceptStep::Nack {
            min_proposal: expected.min_proposal,
        }
    }
}

/// Among the states a majority promised from, the accepted value with the
/// highest accepted proposal (Algorithm 3 line 15, "adopt av with highest
/// ap"), or `None` if none of them accepted anything.
pub fn highest_accepted<I: IntoIterator<Item = SlotWord>>(promised_from: I) -> Option<ValueRef> {
    let mut best: Option<ValueRef> = None;
    for w in promised_from {
        if let Some(v) = w.value {
            if best.is_none_or(|b| v.proposal > b.proposal) {
                best = Some(v);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn accepted(min: u16, acc: u16, n: u8, digest: u8) -> SlotWord {
        SlotWord {
            min_proposal: min,
            accepted_proposal: acc,
            value: Some(ValueRef {
                owner: owner_of(acc, n),
                proposal: acc,
                digest,
            }),
            lap: 0,
        }
    }

    #[test]
    fn words_round_trip_and_the_fields_sit_where_documented() {
        let w = SlotWord {
            lap: 0x7E57,
            ..accepted(0x1234, 0x0F03, 3, 0xAB)
        };
        let raw = w.encode();
        assert_eq!(raw >> 48, 0x1234);
        assert_eq!((raw >> 32) & 0xFFFF, 0x0F03);
        assert_eq!((raw >> 16) & 0xFFFF, 0x7E57);
        assert_eq!((raw >> 8) & 0xFF, u64::from(owner_of(0x0F03, 3)));
        assert_eq!(raw & 0xFF, 0xAB);
        assert_eq!(SlotWord::decode(raw, 3), Ok(w));
        assert_eq!(SlotWord::decode(EMPTY_WORD, 3), Ok(SlotWord::EMPTY));
        assert_eq!(SlotWord::decode(5 << 16, 3), Ok(SlotWord::empty(5)));
        assert!(SlotWord::empty(5).is_empty());
        let promised = SlotWord {
            min_proposal: 7,
            ..SlotWord::EMPTY
        };
        assert_eq!(SlotWord::decode(promised.encode(), 3), Ok(promised));
        assert!(SlotWord::EMPTY.is_empty() && !promised.is_empty());
    }

    #[test]
    fn malformed_words_are_errors_not_panics() {
        let n = 3;
        let ok = accepted(9, 6, n, 1).encode();
        // accepted above min
        assert_eq!(
            SlotWord::decode(accepted(6, 9, n, 1).encode(), n),
            Err(WordError::AcceptedAboveMin)
        );
        // value without proposal
        assert_eq!(
            SlotWord::decode(ok & !(0xFFFF << 32), n),
            Err(WordError::ValueWithoutProposal)
        );
        // owner 1 claims proposal 6 (owned by 0)
        let wrong_owner = (ok & !0xFF00) | (1 << 8);
        assert_eq!(
            SlotWord::decode(wrong_owner, n),
            Err(WordError::OwnerMismatch)
        );
        // proposal 2 < n is round 0
        assert_eq!(
            SlotWord::decode(2u64 << 48, n),
            Err(WordError::ProposalBelowFirstRound)
        );
        // Any 64-bit pattern decodes to a value or an error, never a panic,
        // and a word that decodes re-encodes to itself.
        let mut rng = SplitMix64::new(1);
        for _ in 0..100_000 {
            let raw = rng.next_u64();
            for n in [1u8, 2, 3, 5, 8] {
                if let Ok(w) = SlotWord::decode(raw, n) {
                    assert_eq!(w.encode(), raw);
                }
            }
        }
    }

    #[test]
    fn laps_compare_across_the_wrap() {
        assert_eq!(lap_order(3, 3), LapOrder::Same);
        assert_eq!(lap_order(2, 3), LapOrder::Older);
        assert_eq!(lap_order(4, 3), LapOrder::Newer);
        assert_eq!(lap_order(u16::MAX, 0), LapOrder::Older);
        assert_eq!(lap_order(0, u16::MAX), LapOrder::Newer);
        assert_eq!(lap_order(1 << 15, 0), LapOrder::Older);
    }

    #[test]
    fn proposal_numbers_are_unique_per_proposer_and_overflow_is_reported() {
        let n = 3;
        for owner in 0..n {
            assert_eq!(
                first_proposal(owner, n),
                proposal_above(0, owner, n).unwrap()
            );
            let mut p = 0;
            for _ in 0..100 {
                let q = proposal_above(p, owner, n).unwrap();
                assert!(q > p);
                assert_eq!(owner_of(q, n), owner);
                assert!(q >= n as u16, "round 0 is never used");
                p = q;
            }
        }
        // The smallest proposal above another proposer's.
        assert_eq!(proposal_above(first_proposal(0, n), 1, n), Ok(4));
        assert_eq!(proposal_above(first_proposal(1, n), 0, n), Ok(6));
        assert_eq!(proposal_above(5, 2, n), Ok(8));
        // The last one that fits, then exhaustion (A.6).
        let last = proposal_above(u16::MAX - 3, 0, n).unwrap();
        assert!(last > u16::MAX - 3);
        assert_eq!(proposal_above(last, 0, n), Err(ProposalSpaceExhausted));
        assert_eq!(proposal_above(u16::MAX, 2, n), Err(ProposalSpaceExhausted));
    }

    #[test]
    fn prepare_promises_only_above_min_and_keeps_the_accepted_value() {
        let w = accepted(9, 6, 3, 5);
        assert_eq!(prepare_step(w, 9), PrepareStep::Nack { min_proposal: 9 });
        assert_eq!(prepare_step(w, 4), PrepareStep::Nack { min_proposal: 9 });
        assert_eq!(
            prepare_step(w, 10),
            PrepareStep::Cas(SlotWord {
                min_proposal: 10,
                ..w
            })
        );
        assert_eq!(
            prepare_step(SlotWord::EMPTY, 3),
            PrepareStep::Cas(SlotWord {
                min_proposal: 3,
                ..SlotWord::EMPTY
            })
        );
    }

    #[test]
    fn accept_needs_at_least_the_promised_proposal() {
        let v = ValueRef {
            owner: 1,
            proposal: 10,
            digest: 3,
        };
        let promised = SlotWord {
            min_proposal: 10,
            ..SlotWord::EMPTY
        };
        let target = SlotWord {
            min_proposal: 10,
            accepted_proposal: 10,
            value: Some(v),
            lap: 0,
        };
        assert_eq!(accept_step(promised, 10, v), AcceptStep::Cas(target));
        // The word stays in the lap it is about.
        assert_eq!(
            accept_step(SlotWord::empty(4), 10, v),
            AcceptStep::Cas(SlotWord { lap: 4, ..target })
        );
        // An acceptor that never heard our prepare may accept too.
        assert_eq!(accept_step(SlotWord::EMPTY, 10, v), AcceptStep::Cas(target));
        let higher = SlotWord {
            min_proposal: 11,
            ..SlotWord::EMPTY
        };
        assert_eq!(
            accept_step(higher, 10, v),
            AcceptStep::Nack { min_proposal: 11 }
        );
    }

    #[test]
    fn adopt_the_value_with_the_highest_accepted_proposal() {
        assert_eq!(highest_accepted([SlotWord::EMPTY; 3]), None);
        let a = accepted(20, 6, 3, 1);
        let b = accepted(20, 13, 3, 2);
        let c = SlotWord {
            min_proposal: 20,
            ..SlotWord::EMPTY
        };
        assert_eq!(highest_accepted([a, b, c]), b.value);
        assert_eq!(highest_accepted([c, a]), a.value);
        assert_eq!(highest_accepted([b, a]), b.value);
    }
}
