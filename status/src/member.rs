//! An operator's change of the group (`verbatim member`, the bench's
//! reconfiguration run): find the leader through the status sockets, ask
//! it, and wait until the change has committed.

use crate::{query, GroupConfiguration, MemberChange, MemberReply, Snapshot};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Asks one replica for a change of the group and waits up to `timeout`
/// for its one reply line.
pub fn member_change(
    path: &Path,
    change: MemberChange,
    timeout: Duration,
) -> Result<MemberReply, String> {
    let mut s = UnixStream::connect(path).map_err(|e| format!("{}: {e}", path.display()))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    writeln!(s, "{}", change.request_line()).map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| format!("{}: no answer: {e}", path.display()))?;
    serde_json::from_str(&line).map_err(|e| format!("{}: bad reply: {e}", path.display()))
}

/// Why [`change_group`] did not confirm a change.
#[derive(Debug, thiserror::Error)]
pub enum GroupChangeError {
    /// The leader refused it; the text says why (and what to do).
    #[error("refused by the leader (member {leader}): {reason}")]
    Refused {
        /// The leader that refused.
        leader: u8,
        /// Its reason.
        reason: String,
    },
    /// No leader answered within the time given.
    #[error("no leader answered within {0:?}: {1}")]
    NoLeader(Duration, String),
    /// The change started but was not seen committed within the time.
    #[error("the change started but was not seen committed within {0:?}: {1}")]
    Unconfirmed(Duration, String),
}

/// What the group must look like once `change` is done.
fn done(change: MemberChange, g: &GroupConfiguration) -> bool {
    g.state == "stable"
        && g.committed
        && match change {
            MemberChange::Add(n) => g.members.contains(&n),
            MemberChange::Remove(n) => !g.members.contains(&n),
            MemberChange::Resize(n) => g.size == n,
        }
}

/// The leader of the highest term among the snapshots (a deposed leader
/// may still report itself as leader of an older term).
pub fn leader_of(snaps: &[Option<Snapshot>]) -> Option<&Snapshot> {
    snaps
        .iter()
        .flatten()
        .filter(|s| s.role == "leader")
        .max_by_key(|s| s.term)
}

/// Asks the leader of the group (whose status sockets are `sockets`, by
/// member id) for `change`, follows a leader change, and waits until the
/// group has committed it. Returns the committed configuration.
pub fn change_group(
    sockets: &[PathBuf],
    change: MemberChange,
    timeout: Duration,
) -> Result<GroupConfiguration, GroupChangeError> {
    let began = Instant::now();
    let left = || timeout.saturating_sub(began.elapsed());
    let statuses = || -> Vec<Option<Snapshot>> {
        sockets
            .iter()
            .map(|p| query(p, Duration::from_millis(500)).ok())
            .collect()
    };
    let mut last_problem = String::from("no replica leads");
    let mut started = false;
    while !left().is_zero() {
        let snaps = statuses();
        let Some(leader) = leader_of(&snaps) else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        if started {
            // Asked before; the leader that took it lost leadership. The
            // next one finishes it: wait until it has committed.
            if done(change, &leader.group) && !leader.group.in_progress {
                return Ok(leader.group.clone());
            }
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let id = leader.id;
        let Some(path) = sockets.get(usize::from(id)) else {
            return Err(GroupChangeError::NoLeader(
                timeout,
                format!("member {id} leads but has no status socket in the manifest"),
            ));
        };
        match member_change(path, change, left()) {
            Ok(MemberReply {
                configuration: Some(g),
                ..
            }) => return Ok(g),
            Ok(r) if r.not_leader => {
                last_problem = format!("member {id} no longer leads");
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(r) if r.interrupted => {
                last_problem = r.error.unwrap_or_default();
                started = true;
            }
            Ok(r) => {
                let reason = r.error.unwrap_or_else(|| "no reason given".into());
                // One change at a time: a change the group is still
                // committing (another's, or a phase a previous leader left)
                // is waited for, as is room in a full log.
                if r.retry {
                    last_problem = reason;
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                return Err(GroupChangeError::Refused { leader: id, reason });
            }
            Err(e) => {
                last_problem = e;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    if started {
        Err(GroupChangeError::Unconfirmed(timeout, last_problem))
    } else {
        Err(GroupChangeError::NoLeader(timeout, last_problem))
    }
}
