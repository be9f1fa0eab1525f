//! Client histories of the key-value service, as recorded by the
//! simulator's clients and by the host's integration tests, and checked by
//! [`crate::check::linearizability`].

/// An operation a client invoked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KvInput {
    /// Read a key.
    Get {
        /// The key.
        key: Vec<u8>,
    },
    /// Set a key.
    Set {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Delete a key.
    Del {
        /// The key.
        key: Vec<u8>,
    },
    /// Add to an integer value (missing counts as 0).
    Incr {
        /// The key.
        key: Vec<u8>,
        /// The addend.
        delta: i64,
    },
    /// Compare-and-set (`expected: None`: the key must be absent).
    Cas {
        /// The key.
        key: Vec<u8>,
        /// Expected current value.
        expected: Option<Vec<u8>>,
        /// New value.
        new: Vec<u8>,
    },
}

impl KvInput {
    /// The key the operation touches.
    pub fn key(&self) -> &[u8] {
        match self {
            KvInput::Get { key }
            | KvInput::Set { key, .. }
            | KvInput::Del { key }
            | KvInput::Incr { key, .. }
            | KvInput::Cas { key, .. } => key,
        }
    }
}

/// What the service answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KvOutput {
    /// GET: the value, or `None` for a missing key.
    Value(Option<Vec<u8>>),
    /// SET done.
    Ok,
    /// DEL: keys removed; INCR: new value; CAS: 1 if swapped, else 0.
    Int(i64),
    /// INCR on a value that is not a decimal integer.
    NotInteger,
    /// INCR overflow.
    Overflow,
}

/// One operation of a history: invoked at `call_ns`, answered at
/// `return_ns` with `output`, or never answered (`output: None`): then it
/// may or may not have taken effect, at any time after `call_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The client (a client has at most one operation outstanding).
    pub client: u64,
    /// What it asked.
    pub input: KvInput,
    /// Invocation time.
    pub call_ns: u64,
    /// Response time (`u64::MAX` when unanswered).
    pub return_ns: u64,
    /// The answer, if any.
    pub output: Option<KvOutput>,
}
