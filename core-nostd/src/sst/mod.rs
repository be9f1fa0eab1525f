//! The shared state table (Derecho §3.2) as a framework: a schema of typed
//! columns per member row, own-row pushes (the whole row or a column
//! range), guarded reads, and reducers and predicates evaluated in the
//! poll. DARE's control row is one schema on it ([`dare`]); a Derecho row
//! (received counters per sender, delivered, wedged, ...) is another.
//!
//! Each member owns one row and is the only one to write it: it updates its
//! local copy and pushes the row, or a range of its columns, to every peer
//! with one-sided WRITEs ([`OwnRow`], [`Schema::push_span`]). A pushed copy
//! may be observed half-written (a WRITE in progress, or a NIC that does
//! not place bytes in address order), so every segment of a row carries its
//! version at both ends and a checksum; a reader ([`Table::observe`]) only
//! takes a segment whose two versions agree, whose checksum matches and
//! whose columns hold values of their kinds, and otherwise keeps the last
//! good copy. Versions only grow, so predicates over columns that only
//! grow are monotonic: once true they stay true, and a trigger fires once
//! ([`Predicates`]). Why the guard is per segment, not per row: see
//! [`schema`].
//!
//! No allocation: rows are arrays of [`ROW_WORDS_MAX`] words, tables hold
//! [`crate::fabric::MAX_MEMBERS`] rows, at most [`SEGMENTS_MAX`] segments
//! per row and [`PREDICATES_MAX`] predicates; every loop is bounded by
//! those.

pub mod dare;
pub mod predicates;
pub mod schema;
pub mod table;
#[cfg(test)]
mod tests;

pub use dare::{Ballot, Heartbeat, RoleCode, Row, SnapshotRequest, VoteRequest, DARE_ROW};
pub use predicates::{
    Fired, Firing, Predicate, PredicateError, PredicateId, Predicates, PREDICATES_MAX,
};
pub use schema::{
    member_word, store_span, word_member, Column, Kind, OwnRow, PushSpan, RowError, RowWords,
    Schema, SchemaError, SegmentSet, GUARD_WORDS, NO_MEMBER, ROW_WORDS_MAX, SEGMENTS_MAX,
};
pub use table::{MemberMask, Observed, RowRef, Table};

use crate::fabric::Addr;
use crate::layout::ROW_WORDS;
use crate::mem::Memory;

/// Writes a whole encoded row into local memory in the order a reader
/// relies on for a cheap first check: head version first, tail version
/// last.
pub fn write_row_words<M: Memory + ?Sized>(mem: &M, at: Addr, words: &[u64; ROW_WORDS]) {
    for (i, &word) in words.iter().enumerate() {
        mem.store_u64(at.add(8 * i as u64), word);
    }
}
