//! The library's error type: one variant per thing that can go wrong while
//! benchmarking, each saying what to do about it.

use std::path::PathBuf;

/// Why a benchmark could not run or finish.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A local cluster could not be started, or lost its leader for good.
    #[error("cluster: {0}")]
    Cluster(String),
    /// An operation of the Verbatim client failed (after its retries).
    #[error("client: {0}")]
    Client(#[from] verbatim_client::client::ClientError),
    /// The `verbatim` replica binary is missing.
    #[error(
        "the replica binary was not found{}; build it with `cargo build --release -p verbatim-host` \
         or pass --binary PATH",
        .0.as_ref().map(|p| format!(" at {}", p.display())).unwrap_or_default()
    )]
    NoBinary(Option<PathBuf>),
    /// A Redis server could not be started or did not replicate in time.
    #[error("redis: {0}")]
    Redis(String),
    /// A RESP exchange failed (connection, protocol, or an error reply).
    #[error("RESP {addr}: {message}")]
    Resp {
        /// The server.
        addr: String,
        /// What happened.
        message: String,
    },
    /// A file could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A plot could not be drawn.
    #[error("plot {0}")]
    Plot(String),
    /// A process's CPU times could not be read from `/proc/<pid>/stat`.
    #[error("CPU time: {0}")]
    ProcStat(String),
    /// Ctrl-C (or SIGTERM) arrived; everything started was stopped.
    #[error("interrupted")]
    Interrupted,
    /// The options do not make sense together.
    #[error("invalid options: {0}")]
    Options(String),
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, BenchError>;
