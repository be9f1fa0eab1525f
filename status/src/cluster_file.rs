//! The part of a cluster manifest that a tool needs to find the members'
//! status sockets. The replica validates the whole manifest
//! (`verbatim-host`); this reads only `cluster.name`, `cluster.run_dir`
//! and `members[].id`/`status_socket`, and ignores the rest, so that tools
//! keep working as the manifest grows.

use crate::paths;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClusterFileError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not a manifest.
    #[error("{path}: not a verbatim manifest: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to change.
        reason: String,
    },
}

/// One member as a tool sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMember {
    /// Its id.
    pub id: u8,
    /// Its status socket.
    pub status_socket: PathBuf,
}

/// A cluster as a tool sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterFile {
    /// `cluster.name`.
    pub name: String,
    /// The run directory.
    pub run_dir: PathBuf,
    /// The members, in manifest order.
    pub members: Vec<ClusterMember>,
}

#[derive(Deserialize)]
struct Raw {
    cluster: RawCluster,
    #[serde(default)]
    members: Vec<RawMember>,
}

#[derive(Deserialize)]
struct RawCluster {
    name: String,
    #[serde(default)]
    run_dir: Option<PathBuf>,
}

#[derive(Deserialize)]
struct RawMember {
    id: u8,
    #[serde(default)]
    status_socket: Option<PathBuf>,
}

impl ClusterFile {
    /// Reads a manifest file.
    pub fn load(path: &Path) -> Result<ClusterFile, ClusterFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClusterFileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        ClusterFile::parse(&text).map_err(|reason| ClusterFileError::Invalid {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// Parses a manifest's text.
    pub fn parse(text: &str) -> Result<ClusterFile, String> {
        let raw: Raw = toml::from_str(text).map_err(|e| e.message().to_string())?;
        if raw.cluster.name.is_empty() {
            return Err("cluster.name is empty".into());
        }
        if raw.members.is_empty() {
            return Err("it lists no [[members]]".into());
        }
        for (i, m) in raw.members.iter().enumerate() {
            if raw.members[..i].iter().any(|o| o.id == m.id) {
                return Err(format!("member id {} appears twice", m.id));
            }
        }
        let run_dir = paths::run_dir(&raw.cluster.name, raw.cluster.run_dir.as_deref());
        let members = raw
            .members
            .into_iter()
            .map(|m| ClusterMember {
                id: m.id,
                status_socket: m
                    .status_socket
                    .unwrap_or_else(|| paths::default_status_socket(&run_dir, m.id)),
            })
            .collect();
        Ok(ClusterFile {
            name: raw.cluster.name,
            run_dir,
            members,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_follow_the_run_directory_unless_named() {
        let f = ClusterFile::parse(
            r#"
            [cluster]
            name = "prod"
            run_dir = "/srv/verbatim"
            value_bytes_max = 4096   # the replica's business: ignored here
            [timing]
            heartbeat_period_us = 200
            [[members]]
            id = 0
            [[members]]
            id = 1
            status_socket = "/tmp/one.sock"
            "#,
        )
        .unwrap();
        assert_eq!(f.name, "prod");
        assert_eq!(
            f.members,
            vec![
                ClusterMember {
                    id: 0,
                    status_socket: PathBuf::from("/srv/verbatim/replica-0.sock")
                },
                ClusterMember {
                    id: 1,
                    status_socket: PathBuf::from("/tmp/one.sock")
                },
            ]
        );
    }

    #[test]
    fn what_is_not_a_manifest_says_why() {
        assert!(ClusterFile::parse("not toml [").is_err());
        assert!(
            ClusterFile::parse("[cluster]\nname = \"\"\n[[members]]\nid = 0")
                .unwrap_err()
                .contains("empty")
        );
        assert!(ClusterFile::parse("[cluster]\nname = \"a\"")
            .unwrap_err()
            .contains("no [[members]]"));
        assert!(ClusterFile::parse(
            "[cluster]\nname = \"a\"\n[[members]]\nid = 1\n[[members]]\nid = 1"
        )
        .unwrap_err()
        .contains("twice"));
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            ClusterFile::load(&dir.path().join("missing.toml")),
            Err(ClusterFileError::Io { .. })
        ));
    }
}
