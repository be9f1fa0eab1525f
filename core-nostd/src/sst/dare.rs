//! DARE's control row as one schema on the framework.
//!
//! DARE's per-server arrays are columns of the row each member owns: term,
//! vote request, private data (the vote made reliable), vote, heartbeat,
//! log-access grant, apply pointer, and informational progress and role.
//!
//! The row is a single segment: the election reads term, vote request,
//! role and heartbeat together (a vote request is live only while its
//! row's term equals it; a heartbeat counts only from a row whose role is
//! leader in that term), so they must come from one push. The progress
//! columns could be a segment of their own, but a 192-byte row is one
//! WRITE either way. The byte layout is the one DARE's row had before the
//! framework (same words, same checksum domain).
//!
//! [`Row`] is the typed view the log engine works with; encoding, decoding
//! and the guard are the framework's ([`Schema::seal`], [`Schema::check`]).

use super::schema::{RowError, RowWords, Schema, ROW_WORDS_MAX};
use crate::fabric::{Addr, MemberId};
use crate::layout::ROW_WORDS;
use crate::mem::{read_words, Memory};

const DOMAIN_ROW: u64 = 0x5353_5452_4F57; // "SSTROW"

/// The columns of DARE's row (data words; the framework adds the guard).
pub mod col {
    use super::super::schema::Column;

    /// The member's current term.
    pub const TERM: Column = Column::u64("term", 0);
    /// Its vote request: the term it wants to lead.
    pub const VOTE_REQ_TERM: Column = Column::u64("vote_request.term", 1);
    /// Its vote request: index of its last entry.
    pub const VOTE_REQ_LAST_INDEX: Column = Column::u64("vote_request.last_index", 2);
    /// Its vote request: term of its last entry.
    pub const VOTE_REQ_LAST_TERM: Column = Column::u64("vote_request.last_term", 3);
    /// Its private vote (DARE §3.2.3): term.
    pub const PRIVATE_TERM: Column = Column::u64("private_vote.term", 4);
    /// Its private vote: the member.
    pub const PRIVATE_MEMBER: Column = Column::member("private_vote.member", 5);
    /// Its answered vote: term.
    pub const VOTE_TERM: Column = Column::u64("vote.term", 6);
    /// Its answered vote: the member.
    pub const VOTE_MEMBER: Column = Column::member("vote.member", 7);
    /// Its heartbeat (leaders): term.
    pub const HEARTBEAT_TERM: Column = Column::u64("heartbeat.term", 8);
    /// Its heartbeat: counter.
    pub const HEARTBEAT_COUNTER: Column = Column::u64("heartbeat.counter", 9);
    /// The log-access grant: term.
    pub const GRANT_TERM: Column = Column::u64("grant.term", 10);
    /// The log-access grant: the leader.
    pub const GRANT_MEMBER: Column = Column::member("grant.member", 11);
    /// Position of its apply pointer (pruning, DARE §3.3.2).
    pub const APPLY_POS: Column = Column::u64("apply_pos", 12);
    /// First index it has not applied.
    pub const APPLY_INDEX: Column = Column::u64("apply_index", 13);
    /// First index it does not know to be committed.
    pub const COMMIT_INDEX: Column = Column::u64("commit_index", 14);
    /// Index of its last entry.
    pub const LAST_INDEX: Column = Column::u64("last_index", 15);
    /// Its role ([`super::RoleCode`]).
    pub const ROLE: Column = Column::code("role", 16, 3);
    /// The leader it follows.
    pub const LEADER: Column = Column::member("leader", 17);
    /// A leader's bitmask of members whose log it cannot bring up to date
    /// (the entries they need were pruned): they need state transfer
    /// (DARE §3.4 recovery).
    pub const RECOVER_MASK: Column = Column::u64("recover_mask", 18);
    /// A recovering member's request for a snapshot: the donor.
    pub const SNAPSHOT_FROM: Column = Column::member("snapshot_request.from", 19);
    /// Generation of that request (a donor answers each one once).
    pub const SNAPSHOT_GEN: Column = Column::u64("snapshot_request.generation", 20);
}

const COLUMNS: [super::schema::Column; 21] = [
    col::TERM,
    col::VOTE_REQ_TERM,
    col::VOTE_REQ_LAST_INDEX,
    col::VOTE_REQ_LAST_TERM,
    col::PRIVATE_TERM,
    col::PRIVATE_MEMBER,
    col::VOTE_TERM,
    col::VOTE_MEMBER,
    col::HEARTBEAT_TERM,
    col::HEARTBEAT_COUNTER,
    col::GRANT_TERM,
    col::GRANT_MEMBER,
    col::APPLY_POS,
    col::APPLY_INDEX,
    col::COMMIT_INDEX,
    col::LAST_INDEX,
    col::ROLE,
    col::LEADER,
    col::RECOVER_MASK,
    col::SNAPSHOT_FROM,
    col::SNAPSHOT_GEN,
];

/// One segment of 21 data words (21 columns): with its guard, exactly the
/// Control region's row.
const SCHEMA: Schema = Schema::new("dare", DOMAIN_ROW, &[21], &COLUMNS);
const _: () = assert!(SCHEMA.row_words() == ROW_WORDS);

/// DARE's control row.
pub static DARE_ROW: Schema = SCHEMA;

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

impl RoleCode {
    const fn code(self) -> u64 {
        match self {
            RoleCode::Follower => 0,
            RoleCode::Candidate => 1,
            RoleCode::Leader => 2,
        }
    }
    /// From a validated code (the schema admits 0..3).
    fn from_code(code: u64) -> RoleCode {
        match code {
            0 => RoleCode::Follower,
            1 => RoleCode::Candidate,
            2 => RoleCode::Leader,
            _ => panic!("role code not validated"),
        }
    }
}

/// One member's row of the shared state table, typed.
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
    /// Leaders: members that need state transfer (the low 32 bits, a bit
    /// per member: [`Row::recover_bit`]), and members whose restored
    /// snapshot came too late, its entries pruned meanwhile (the high 32
    /// bits: [`Row::outrun_bit`]): they recover again at once rather than
    /// wait to be sure the leader saw their grant.
    pub recover_mask: u64,
    /// Recovering members: the snapshot asked for.
    pub snapshot_request: SnapshotRequest,
}

impl Row {
    /// `recover_mask`: `m` needs state transfer.
    pub const fn recover_bit(m: MemberId) -> u64 {
        1u64 << m.0
    }

    /// `recover_mask`: the leader saw `m`'s restore answered but its log
    /// starts before the leader's head (the hold on the log was released
    /// during its transfer, `recovery_log_hold_percent`).
    pub const fn outrun_bit(m: MemberId) -> u64 {
        1u64 << (32 + m.0)
    }
}

/// A recovering member's request for a snapshot of a donor's state
/// machine (DARE §3.4 recovery).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotRequest {
    /// The donor asked (never the leader), if any.
    pub from: Option<MemberId>,
    /// Generation: a new request gets a new one.
    pub generation: u64,
}

impl Row {
    /// The row of a member that has published nothing yet.
    pub const EMPTY: Row = Row {
        term: 0,
        vote_request: VoteRequest {
            term: 0,
            last_index: 0,
            last_term: 0,
        },
        private_vote: Ballot {
            term: 0,
            member: None,
        },
        vote: Ballot {
            term: 0,
            member: None,
        },
        heartbeat: Heartbeat {
            term: 0,
            counter: 0,
        },
        grant: Ballot {
            term: 0,
            member: None,
        },
        apply_pos: 0,
        apply_index: 0,
        commit_index: 0,
        last_index: 0,
        role: RoleCode::Follower,
        leader: None,
        recover_mask: 0,
        snapshot_request: SnapshotRequest {
            from: None,
            generation: 0,
        },
    };

    /// Encodes the row as version `version` (must be non-zero), guarded by
    /// the framework.
    pub fn encode(&self, version: u64) -> [u64; ROW_WORDS] {
        let s = &DARE_ROW;
        let mut w: RowWords = [0; ROW_WORDS_MAX];
        s.set(&mut w, &col::TERM, self.term);
        s.set(&mut w, &col::VOTE_REQ_TERM, self.vote_request.term);
        s.set(
            &mut w,
            &col::VOTE_REQ_LAST_INDEX,
            self.vote_request.last_index,
        );
        s.set(
            &mut w,
            &col::VOTE_REQ_LAST_TERM,
            self.vote_request.last_term,
        );
        s.set(&mut w, &col::PRIVATE_TERM, self.private_vote.term);
        s.set_member(&mut w, &col::PRIVATE_MEMBER, self.private_vote.member);
        s.set(&mut w, &col::VOTE_TERM, self.vote.term);
        s.set_member(&mut w, &col::VOTE_MEMBER, self.vote.member);
        s.set(&mut w, &col::HEARTBEAT_TERM, self.heartbeat.term);
        s.set(&mut w, &col::HEARTBEAT_COUNTER, self.heartbeat.counter);
        s.set(&mut w, &col::GRANT_TERM, self.grant.term);
        s.set_member(&mut w, &col::GRANT_MEMBER, self.grant.member);
        s.set(&mut w, &col::APPLY_POS, self.apply_pos);
        s.set(&mut w, &col::APPLY_INDEX, self.apply_index);
        s.set(&mut w, &col::COMMIT_INDEX, self.commit_index);
        s.set(&mut w, &col::LAST_INDEX, self.last_index);
        s.set(&mut w, &col::ROLE, self.role.code());
        s.set_member(&mut w, &col::LEADER, self.leader);
        s.set(&mut w, &col::RECOVER_MASK, self.recover_mask);
        s.set_member(&mut w, &col::SNAPSHOT_FROM, self.snapshot_request.from);
        s.set(&mut w, &col::SNAPSHOT_GEN, self.snapshot_request.generation);
        s.seal(&mut w, s.all_segments(), version);
        let mut out = [0u64; ROW_WORDS];
        out.copy_from_slice(&w[..ROW_WORDS]);
        out
    }

    /// Decodes and validates a copy; returns the row and its version.
    pub fn decode(words: &[u64; ROW_WORDS]) -> Result<(Row, u64), RowError> {
        let words = widen(words);
        let version = DARE_ROW.check(&words)?;
        Ok((Row::from_checked(&words), version))
    }

    /// The typed view of words the framework validated (a table's last
    /// good copy, or a copy [`Schema::check`] accepted).
    pub fn from_checked(w: &RowWords) -> Row {
        let s = &DARE_ROW;
        Row {
            term: s.get(w, &col::TERM),
            vote_request: VoteRequest {
                term: s.get(w, &col::VOTE_REQ_TERM),
                last_index: s.get(w, &col::VOTE_REQ_LAST_INDEX),
                last_term: s.get(w, &col::VOTE_REQ_LAST_TERM),
            },
            private_vote: Ballot {
                term: s.get(w, &col::PRIVATE_TERM),
                member: s.get_member(w, &col::PRIVATE_MEMBER),
            },
            vote: Ballot {
                term: s.get(w, &col::VOTE_TERM),
                member: s.get_member(w, &col::VOTE_MEMBER),
            },
            heartbeat: Heartbeat {
                term: s.get(w, &col::HEARTBEAT_TERM),
                counter: s.get(w, &col::HEARTBEAT_COUNTER),
            },
            grant: Ballot {
                term: s.get(w, &col::GRANT_TERM),
                member: s.get_member(w, &col::GRANT_MEMBER),
            },
            apply_pos: s.get(w, &col::APPLY_POS),
            apply_index: s.get(w, &col::APPLY_INDEX),
            commit_index: s.get(w, &col::COMMIT_INDEX),
            last_index: s.get(w, &col::LAST_INDEX),
            role: RoleCode::from_code(s.get(w, &col::ROLE)),
            leader: s.get_member(w, &col::LEADER),
            recover_mask: s.get(w, &col::RECOVER_MASK),
            snapshot_request: SnapshotRequest {
                from: s.get_member(w, &col::SNAPSHOT_FROM),
                generation: s.get(w, &col::SNAPSHOT_GEN),
            },
        }
    }

    /// Reads and validates the row at `at` of local memory.
    pub fn read<M: Memory + ?Sized>(mem: &M, at: Addr) -> Result<(Row, u64), RowError> {
        let words: [u64; ROW_WORDS] = read_words(mem, at);
        Row::decode(&words)
    }

    /// Reads and validates the row at `at` of local memory and returns
    /// only its term (a read round needs nothing else, and runs for every
    /// batch of client reads).
    pub fn read_term<M: Memory + ?Sized>(mem: &M, at: Addr) -> Result<u64, RowError> {
        let words = widen(&read_words(mem, at));
        DARE_ROW.check(&words)?;
        Ok(DARE_ROW.get(&words, &col::TERM))
    }
}

/// A DARE row's words in the framework's row buffer (the rest zero).
pub(crate) fn widen(words: &[u64; ROW_WORDS]) -> RowWords {
    let mut w = [0u64; ROW_WORDS_MAX];
    w[..ROW_WORDS].copy_from_slice(words);
    w
}
