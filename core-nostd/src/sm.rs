//! The replicated state machine interface (DARE §3.1.1, "the client SM").

use crate::log::EntryHeader;
use crate::snapshot::{RestoreError, RestoreProgress, SnapshotFull, SnapshotSink, SnapshotSource};

/// Why a read query was not answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The query could not be decoded.
    Malformed,
    /// The answer does not fit the output buffer.
    OutputTooSmall,
}

/// Why a client request is refused before it reaches the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// The payload is not an operation of this service.
    Malformed,
    /// A read was sent as a write, or a write as a read.
    WrongKind,
}

/// A deterministic state machine replicated through the log.
///
/// `apply` is called on every member, once per committed operation, in
/// index order; it must be deterministic (same state, same operation, same
/// result) and must not fail on a malformed payload: it replies with an
/// error instead, because the entry is committed and every replica must
/// agree on its outcome.
pub trait StateMachine {
    /// Applies a committed operation and writes the reply for its client
    /// into `reply` (its length is the configured `reply_bytes_max`);
    /// returns the reply's length. A reply that would not fit must be
    /// replaced by a short error reply: the outcome of a committed entry
    /// must be the same on every member, and `reply_bytes_max` is.
    fn apply(&mut self, entry: &EntryHeader, payload: &[u8], reply: &mut [u8]) -> usize;

    /// Answers a read-only query against the current state; the host calls
    /// it once the node reports the read as ready (linearizable).
    fn read(&self, query: &[u8], out: &mut [u8]) -> Result<usize, ReadError>;

    /// Validates a client request before it is submitted: a malformed
    /// operation must never become a committed entry. `write` says which
    /// path the client asked for.
    fn check_request(&self, payload: &[u8], write: bool) -> Result<(), RequestError>;

    /// Writes the whole state into `sink` in the service's own
    /// self-delimiting format (DARE §3.4: a follower's snapshot that a
    /// recovering member reads). The state is not changed.
    fn snapshot(&self, sink: &mut dyn SnapshotSink) -> Result<(), SnapshotFull>;

    /// Starts replacing the whole state with the one a
    /// [`StateMachine::snapshot`] wrote: clears the state and forgets any
    /// restore under way. [`StateMachine::restore_some`] then reads the
    /// snapshot's bytes in order, in as many calls as it takes.
    fn restore_begin(&mut self);

    /// Restores the next records of the snapshot from `source` (which
    /// continues where the last call's stopped), until about
    /// `budget_bytes` were read (a record is never split, so a call may
    /// read one record past the budget) or the end mark. A recovering
    /// member restores a large state a bounded piece per step, so that it
    /// keeps its row alive and its core's other tenants run in between.
    /// `scratch` stages one record at a time; it is as large as the
    /// largest log entry, which bounds every record a service holds.
    /// Every field is checked against the service's limits: a malformed
    /// snapshot is an error, never a panic, and leaves a state that must
    /// be begun again before use.
    fn restore_some(
        &mut self,
        source: &mut dyn SnapshotSource,
        scratch: &mut [u8],
        budget_bytes: u64,
    ) -> Result<RestoreProgress, RestoreError>;

    /// Replaces the whole state in one call (tests, fuzzing, and services
    /// nested in another's snapshot).
    fn restore(
        &mut self,
        source: &mut dyn SnapshotSource,
        scratch: &mut [u8],
    ) -> Result<(), RestoreError> {
        restore_in_pieces(self, source, scratch, u64::MAX).map(|_| ())
    }
}

/// Replaces `sm`'s state with the snapshot in `source`, in pieces of
/// `budget_bytes` as a recovering member restores (one per step); returns
/// how many pieces it took.
pub fn restore_in_pieces<S: StateMachine + ?Sized>(
    sm: &mut S,
    source: &mut dyn SnapshotSource,
    scratch: &mut [u8],
    budget_bytes: u64,
) -> Result<u64, RestoreError> {
    sm.restore_begin();
    let mut pieces = 1;
    // Each call reads at least one record or fails, and the source is
    // finite: this ends.
    while sm.restore_some(source, scratch, budget_bytes)? == RestoreProgress::More {
        pieces += 1;
    }
    Ok(pieces)
}
