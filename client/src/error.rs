//! Error types of the host library (`thiserror`; `anyhow` only in the
//! binary).

use std::path::PathBuf;

/// Problems with a shared-memory segment.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A system call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What we were doing.
        op: &'static str,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// Another live process owns the segment.
    #[error(
        "{path} belongs to running process {pid}: is this replica already running? Stop it first"
    )]
    InUse {
        /// The file.
        path: PathBuf,
        /// Its owner.
        pid: i32,
    },
    /// Not a valid segment.
    #[error("{path} is not a verbatim segment ({what})")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: &'static str,
    },
    /// The owner has not finished creating it.
    #[error("{path} is not ready yet")]
    NotReady {
        /// The file.
        path: PathBuf,
    },
    /// Made by another version of verbatim.
    #[error("{path} has segment version {found}, this build speaks {expected}: run the same build everywhere")]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u64,
        /// Ours.
        expected: u64,
    },
    /// Made with a different memory layout (configuration).
    #[error(
        "{path} has layout hash {found:#018x}, ours is {expected:#018x}: every replica must use the same \
         members, log_ring_bytes, value_bytes_max, session_slot_count and reply_bytes_max"
    )]
    LayoutMismatch {
        /// The file.
        path: PathBuf,
        /// Its hash.
        found: u64,
        /// Ours.
        expected: u64,
    },
}

impl ShmError {
    /// A failed system call on `path`.
    pub fn io(path: &std::path::Path, op: &'static str, source: std::io::Error) -> ShmError {
        ShmError::Io {
            path: path.to_owned(),
            op,
            source,
        }
    }

    /// True when the segment simply does not exist (yet).
    pub fn is_missing(&self) -> bool {
        matches!(self, ShmError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
            || matches!(self, ShmError::NotReady { .. })
    }
}
