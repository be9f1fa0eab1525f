//! The shared state table (Derecho §3.2) holding DARE's control arrays.
//!
//! Each member owns one row and is the only one to write it: it updates its
//! local copy and pushes the row to every peer with one-sided WRITEs. DARE's
//! per-server arrays become columns: term, vote request, private data (the
//! vote made reliable), vote, heartbeat, log-access grant and apply pointer.
//!
//! A pushed row may be observed half-written (a WRITE in progress, or a
//! NIC that does not place bytes in address order). A row therefore
//! carries its version at both ends and a checksum of everything; a reader
//! only acts on a row whose two versions agree and whose checksum matches,
//! and otherwise keeps the last good copy. Versions only grow, so the
//! predicates evaluated over rows are monotonic.

use crate::checksum::checksum_words;
use crate::fabric::{Addr, MemberId, MAX_MEMBERS};
use crate::layout::ROW_WORDS;
use crate::mem::{read_words, Memory};

const DOMAIN_ROW: u64 = 0x5353_5452_4F57; // "SSTROW"
const NONE: u64 = u64::MAX;

/// Word positions inside a row.
mod w {
    pub const VERSION_HEAD: usize = 0;
    pub const TERM: usize = 1;
    pub const VOTE_REQ_TERM: usize = 2;
    pub const VOTE_REQ_LAST_INDEX: usize = 3;
    pub const VOTE_REQ_LAST_TERM: usize = 4;
    pub const PRIVATE_TERM: usize = 5;
    pub const PRIVATE_MEMBER: usize = 6;
    pub const VOTE_TERM: usize = 7;
    pub const VOTE_MEMBER: usize = 8;
    pub const HEARTBEAT_TERM: usize = 9;
    pub const HEARTBEAT_COUNTER: usize = 10;
    pub const GRANT_TERM: usize = 11;
    pub const GRANT_MEMBER: usize = 12;
    pub const APPLY_POS: usize = 13;
    pub const APPLY_INDEX: usize = 14;
    pub const COMMIT_INDEX: usize = 15;
    pub const LAST_INDEX: usize = 16;
    pub const ROLE: usize = 17;
    pub const LEADER: usize = 18;
    pub const CHECKSUM: usize = 22;
    pub const VERSION_TAIL: usize = 23;
}

/// A candidate's request for votes (DARE's vote request array).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VoteRequest {
    /// The term the candidate wants to lead.
    pub term: u64,
    /// Index of the candidate's last log entry.
    pub last_index: u64,
    /// Term of the candidate's last log entry.
    pub last_term: u64,
}

/// "In `term`, `member`": used for the private vote record, the vote and
/// the log-access grant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ballot {
    /// The term.
    pub term: u64,
    /// The member, if any.
    pub member: Option<MemberId>,
}

impl Ballot {
    /// `Ballot { term, member: Some(member) }`.
    pub const fn new(term: u64, member: MemberId) -> Ballot {
        Ballot {
            term,
            member: Some(member),
        }
    }
}

/// The leader's heartbeat (DARE §4.2.2): its term and a counter that
/// advances with every heartbeat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heartbeat {
    /// Term of the leader that wrote it (0: never a leader).
    pub term: u64,
    /// Advances on every heartbeat.
    pub counter: u64,
}

/// Role published in a row (informational: consoles and status).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RoleCode {
    /// Follows a leader (or waits for one).
    #[default]
    Follower,
    /// Asks for votes.
    Candidate,
    /// Leads its term.
    Leader,
}

/// One member's row of the shared state table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Row {
    /// The member's current term.
    pub term: u64,
    /// Its latest vote request (when it was a candidate).
    pub vote_request: VoteRequest,
    /// Its vote, replicated to a majority before it is answered (DARE
    /// §3.2.3, "private data").
    pub private_vote: Ballot,
    /// Its answered vote: read by the candidate.
    pub vote: Ballot,
    /// Its heartbeat (leaders only).
    pub heartbeat: Heartbeat,
    /// The leader it granted log access to, and in which term; also says
    /// that its adjustment list is ready for that leader.
    pub grant: Ballot,
    /// Position of its apply pointer (for pruning, DARE §3.3.2).
    pub apply_pos: u64,
    /// Index of the first entry it has not applied.
    pub apply_index: u64,
    /// Index of the first entry it does not know to be committed.
    pub commit_index: u64,
    /// Index of its last log entry (informational).
    pub last_index: u64,
    /// Its role.
    pub role: RoleCode,
    /// The leader it follows, if any (informational).
    pub leader: Option<MemberId>,
}

/// Why a row copy was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowError {
    /// Never written (version 0).
    Empty,
    /// The two versions differ: a write was in progress.
    Torn,
    /// The checksum does not match: torn or corrupt.
    Checksum,
    /// A field holds an impossible value (a member id out of range).
    Malformed,
}

fn member_word(m: Option<MemberId>) -> u64 {
    m.map_or(NONE, |m| u64::from(m.0))
}

fn word_member(w: u64) -> Result<Option<MemberId>, RowError> {
    if w == NONE {
        Ok(None)
    } else if (w as usize) < MAX_MEMBERS {
        Ok(Some(MemberId(w as u8)))
    } else {
        Err(RowError::Malformed)
    }
}

impl Row {
    /// Encodes the row as version `version` (must be non-zero).
    pub fn encode(&self, version: u64) -> [u64; ROW_WORDS] {
        assert!(version != 0, "row version 0 means never written");
        let mut words = [0u64; ROW_WORDS];
        words[w::VERSION_HEAD] = version;
        words[w::TERM] = self.term;
        words[w::VOTE_REQ_TERM] = self.vote_request.term;
        words[w::VOTE_REQ_LAST_INDEX] = self.vote_request.last_index;
        words[w::VOTE_REQ_LAST_TERM] = self.vote_request.last_term;
        words[w::PRIVATE_TERM] = self.private_vote.term;
        words[w::PRIVATE_MEMBER] = member_word(self.private_vote.member);
        words[w::VOTE_TERM] = self.vote.term;
        words[w::VOTE_MEMBER] = member_word(self.vote.member);
        words[w::HEARTBEAT_TERM] = self.heartbeat.term;
        words[w::HEARTBEAT_COUNTER] = self.heartbeat.counter;
        words[w::GRANT_TERM] = self.grant.term;
        words[w::GRANT_MEMBER] = member_word(self.grant.member);
        words[w::APPLY_POS] = self.apply_pos;
        words[w::APPLY_INDEX] = self.apply_index;
        words[w::COMMIT_INDEX] = self.commit_index;
        words[w::LAST_INDEX] = self.last_index;
        words[w::ROLE] = match self.role {
            RoleCode::Follower => 0,
            RoleCode::Candidate => 1,
            RoleCode::Leader => 2,
        };
        words[w::LEADER] = member_word(self.leader);
        words[w::VERSION_TAIL] = version;
        words[w::CHECKSUM] = checksum_words(DOMAIN_ROW, &words[..w::CHECKSUM]);
        words
    }

    /// Decodes and validates a copy; returns the row and its version.
    pub fn decode(words: &[u64; ROW_WORDS]) -> Result<(Row, u64), RowError> {
        let version = words[w::VERSION_HEAD];
        if version == 0 && words[w::VERSION_TAIL] == 0 {
            return Err(RowError::Empty);
        }
        if version != words[w::VERSION_TAIL] {
            return Err(RowError::Torn);
        }
        // The tail version is covered by the head version (equal) and the
        // checksum covers everything before it.
        if checksum_words(DOMAIN_ROW, &words[..w::CHECKSUM]) != words[w::CHECKSUM] {
            return Err(RowError::Checksum);
        }
        let role = match words[w::ROLE] {
            0 => RoleCode::Follower,
            1 => RoleCode::Candidate,
            2 => RoleCode::Leader,
            _ => return Err(RowError::Malformed),
        };
        let row = Row {
            term: words[w::TERM],
            vote_request: VoteRequest {
                term: words[w::VOTE_REQ_TERM],
                last_index: words[w::VOTE_REQ_LAST_INDEX],
                last_term: words[w::VOTE_REQ_LAST_TERM],
            },
            private_vote: Ballot {
                term: words[w::PRIVATE_TERM],
                member: word_member(words[w::PRIVATE_MEMBER])?,
            },
            vote: Ballot {
                term: words[w::VOTE_TERM],
                member: word_member(words[w::VOTE_MEMBER])?,
            },
            heartbeat: Heartbeat {
                term: words[w::HEARTBEAT_TERM],
                counter: words[w::HEARTBEAT_COUNTER],
            },
            grant: Ballot {
                term: words[w::GRANT_TERM],
                member: word_member(words[w::GRANT_MEMBER])?,
            },
            apply_pos: words[w::APPLY_POS],
            apply_index: words[w::APPLY_INDEX],
            commit_index: words[w::COMMIT_INDEX],
            last_index: words[w::LAST_INDEX],
            role,
            leader: word_member(words[w::LEADER])?,
        };
        Ok((row, version))
    }

    /// Reads and validates the row at `at` of local memory.
    pub fn read<M: Memory + ?Sized>(mem: &M, at: Addr) -> Result<(Row, u64), RowError> {
        let words: [u64; ROW_WORDS] = read_words(mem, at);
        Row::decode(&words)
    }
}

/// Writes an encoded row into local memory in the order a reader relies on
/// for a cheap first check: head version first, tail version last.
pub fn write_row_words<M: Memory + ?Sized>(mem: &M, at: Addr, words: &[u64; ROW_WORDS]) {
    for (i, &word) in words.iter().enumerate() {
        mem.store_u64(at.add(8 * i as u64), word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Row {
        Row {
            term: 7,
            vote_request: VoteRequest {
                term: 7,
                last_index: 40,
                last_term: 6,
            },
            private_vote: Ballot::new(7, MemberId(2)),
            vote: Ballot::new(7, MemberId(2)),
            heartbeat: Heartbeat {
                term: 6,
                counter: 99,
            },
            grant: Ballot::new(7, MemberId(2)),
            apply_pos: 4096,
            apply_index: 39,
            commit_index: 40,
            last_index: 41,
            role: RoleCode::Follower,
            leader: Some(MemberId(2)),
        }
    }

    #[test]
    fn round_trip() {
        let r = sample();
        assert_eq!(Row::decode(&r.encode(5)), Ok((r, 5)));
        assert_eq!(Row::decode(&[0; ROW_WORDS]), Err(RowError::Empty));
    }

    /// A reader must never act on a torn row: every mixture of an old and a
    /// new version, word by word, is rejected (or is exactly one of them).
    #[test]
    fn every_torn_mixture_is_rejected() {
        let old = sample().encode(5);
        let mut newer = sample();
        newer.term = 8;
        newer.vote = Ballot::new(8, MemberId(1));
        newer.apply_index = 45;
        let new = newer.encode(6);
        // Words land in an arbitrary order: try every subset of the words
        // that differ (there are few), plus random masks over all words.
        let differing: heapless::Vec<usize, ROW_WORDS> =
            (0..ROW_WORDS).filter(|&i| old[i] != new[i]).collect();
        assert!(differing.len() <= 10);
        for mask in 0u32..(1 << differing.len()) {
            let mut mix = old;
            for (bit, &i) in differing.iter().enumerate() {
                if mask & (1 << bit) != 0 {
                    mix[i] = new[i];
                }
            }
            match Row::decode(&mix) {
                Ok((row, 5)) => assert_eq!(mix, old, "accepted a mixture as old: {row:?}"),
                Ok((row, 6)) => assert_eq!(mix, new, "accepted a mixture as new: {row:?}"),
                Ok(other) => panic!("impossible version {other:?}"),
                Err(RowError::Torn | RowError::Checksum) => {}
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
    }

    #[test]
    fn malformed_member_is_rejected() {
        let mut words = sample().encode(3);
        words[w::VOTE_MEMBER] = 200;
        words[w::CHECKSUM] = checksum_words(DOMAIN_ROW, &words[..w::CHECKSUM]);
        assert_eq!(Row::decode(&words), Err(RowError::Malformed));
    }
}
