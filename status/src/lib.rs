//! # verbatim-status
//!
//! What a tool needs to watch a verbatim group without linking the replica
//! process: the status schema ([`Snapshot`] and its parts), the query of a
//! status socket ([`query`]), and where a cluster keeps its files
//! ([`paths`], [`ClusterFile`]: the part of a manifest that names the
//! members' status sockets). The replica (`verbatim-host`) serves these
//! types; the console and the bench read them.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod cluster_file;
mod member;
pub mod paths;
pub mod prometheus;
mod snapshot;

pub use cluster_file::{ClusterFile, ClusterFileError, ClusterMember};
pub use member::{change_group, leader_of, member_change, GroupChangeError};
pub use snapshot::*;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Asks a status socket for one snapshot (`verbatim status`, the bench).
pub fn query(path: &Path, timeout: Duration) -> Result<Snapshot, String> {
    let mut s = UnixStream::connect(path).map_err(|e| format!("{}: {e}", path.display()))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    writeln!(s, "status").map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if let Ok(e) = serde_json::from_str::<ErrorReply>(&line) {
        return Err(e.error);
    }
    serde_json::from_str(&line).map_err(|e| format!("{}: bad reply: {e}", path.display()))
}
