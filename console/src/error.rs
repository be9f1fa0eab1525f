//! Operating errors of the console (bad `--connect` target, nobody
//! answering, terminal trouble). Programmer errors are assertions.

use std::path::PathBuf;

/// Everything that can stop the console from showing a group.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// `--connect` names nothing usable.
    #[error("{path}: {reason}")]
    Target {
        /// The path given to `--connect`.
        path: PathBuf,
        /// What is wrong and what to pass instead.
        reason: String,
    },
    /// `--connect` names a file that is not a valid manifest.
    #[error("{path}: not a status socket, and not a valid manifest ({source})")]
    Manifest {
        /// The path given to `--connect`.
        path: PathBuf,
        /// The manifest problem.
        source: verbatim_status::ClusterFileError,
    },
    /// `--once`: not one replica sent a snapshot in time.
    #[error("no replica answered within {timeout_ms} ms ({reasons})")]
    NoAnswer {
        /// How long we waited.
        timeout_ms: u64,
        /// Why each endpoint failed, `r0: connection refused; ...`.
        reasons: String,
    },
    /// A one-shot status request failed.
    #[error("{socket}: {reason}")]
    Status {
        /// The status socket.
        socket: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The terminal could not be set up or written.
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
}
