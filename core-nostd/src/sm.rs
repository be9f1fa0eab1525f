//! The replicated state machine interface (DARE §3.1.1, "the client SM").

use crate::log::EntryHeader;

/// Largest reply to a write, carried inline in events and in the session
/// table (for exactly-once retries). Replies to reads are produced by the
/// host from [`StateMachine::read`] and can be larger.
pub const REPLY_BYTES_MAX: usize = 16;

/// The reply to a write operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reply {
    /// Valid bytes in `bytes`.
    pub len: u8,
    /// The reply.
    pub bytes: [u8; REPLY_BYTES_MAX],
}

impl Reply {
    /// A reply with the given bytes (truncated to [`REPLY_BYTES_MAX`]).
    pub fn from_bytes(b: &[u8]) -> Reply {
        let n = b.len().min(REPLY_BYTES_MAX);
        let mut bytes = [0u8; REPLY_BYTES_MAX];
        bytes[..n].copy_from_slice(&b[..n]);
        Reply {
            len: n as u8,
            bytes,
        }
    }

    /// The valid bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(REPLY_BYTES_MAX)]
    }
}

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
    /// Applies a committed operation and returns the reply for its client.
    fn apply(&mut self, entry: &EntryHeader, payload: &[u8]) -> Reply;

    /// Answers a read-only query against the current state; the host calls
    /// it once the node reports the read as ready (linearizable).
    fn read(&self, query: &[u8], out: &mut [u8]) -> Result<usize, ReadError>;

    /// Validates a client request before it is submitted: a malformed
    /// operation must never become a committed entry. `write` says which
    /// path the client asked for.
    fn check_request(&self, payload: &[u8], write: bool) -> Result<(), RequestError>;
}
