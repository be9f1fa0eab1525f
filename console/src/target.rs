//! What `--connect` names: one status socket, or a manifest listing every
//! replica's socket. We decide by looking at the file, not by its name.

use crate::error::ConsoleError;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use verbatim_status::ClusterFile;

/// One status endpoint to watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Replica id, when the manifest or the socket's name tells it; else
    /// learned from the first snapshot.
    pub id: Option<u8>,
    /// The Unix socket of its status endpoint.
    pub socket: PathBuf,
}

/// Every endpoint the console attaches to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The endpoints, in member order for a manifest.
    pub endpoints: Vec<Endpoint>,
    /// Cluster name, when a manifest gave it.
    pub cluster: Option<String>,
}

impl Target {
    /// A target of explicit sockets (tests, scripts).
    pub fn sockets(endpoints: Vec<Endpoint>) -> Target {
        Target {
            endpoints,
            cluster: None,
        }
    }
}

/// Resolves `--connect`: a Unix socket is one endpoint; a readable file
/// is read as a manifest (all members). A missing `*.sock` path is taken
/// as the socket of a replica that is not up yet, so the console can be
/// started first and shows it as unreachable until it appears.
pub fn resolve(path: &Path) -> Result<Target, ConsoleError> {
    let target_err = |reason: String| ConsoleError::Target {
        path: path.to_path_buf(),
        reason,
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => Ok(single_socket(path)),
        Ok(meta) if meta.is_file() => {
            let manifest = ClusterFile::load(path).map_err(|source| ConsoleError::Manifest {
                path: path.to_path_buf(),
                source,
            })?;
            let endpoints = manifest
                .members
                .iter()
                .map(|m| Endpoint {
                    id: Some(m.id),
                    socket: m.status_socket.clone(),
                })
                .collect();
            Ok(Target {
                endpoints,
                cluster: Some(manifest.name),
            })
        }
        Ok(_) => Err(target_err(
            "is neither a status socket nor a manifest file; pass a replica's status socket \
             or the manifest that `verbatim up` printed"
                .into(),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if path.extension().is_some_and(|x| x == "sock") {
                Ok(single_socket(path))
            } else {
                Err(target_err(
                    "does not exist; pass a replica's status socket or the manifest that \
                     `verbatim up` printed"
                        .into(),
                ))
            }
        }
        Err(e) => Err(target_err(format!("cannot be read: {e}"))),
    }
}

fn single_socket(path: &Path) -> Target {
    Target::sockets(vec![Endpoint {
        id: id_from_socket_name(path),
        socket: path.to_path_buf(),
    }])
}

/// `replica-3.sock` → 3, the host's default socket name.
pub fn id_from_socket_name(path: &Path) -> Option<u8> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix("replica-")?
        .strip_suffix(".sock")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_socket_is_one_endpoint_and_its_name_gives_the_id() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("replica-2.sock");
        let _listener = UnixListener::bind(&sock).unwrap();
        let t = resolve(&sock).unwrap();
        assert_eq!(
            t.endpoints,
            vec![Endpoint {
                id: Some(2),
                socket: sock
            }]
        );
        let other = dir.path().join("status.sock");
        let _l2 = UnixListener::bind(&other).unwrap();
        assert_eq!(resolve(&other).unwrap().endpoints[0].id, None);
    }

    #[test]
    fn a_manifest_lists_every_member_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("demo.toml");
        let text = format!(
            "[cluster]\nname = \"demo\"\nrun_dir = \"{}\"\n[[members]]\nid = 0\n[[members]]\nid = 1\n\
             status_socket = \"/tmp/elsewhere.sock\"\n[[members]]\nid = 2\n",
            dir.path().display()
        );
        std::fs::write(&path, text).unwrap();
        let t = resolve(&path).unwrap();
        assert_eq!(t.cluster.as_deref(), Some("demo"));
        let sockets: Vec<_> = t
            .endpoints
            .iter()
            .map(|e| (e.id, e.socket.clone()))
            .collect();
        assert_eq!(
            sockets,
            vec![
                (Some(0), dir.path().join("replica-0.sock")),
                (Some(1), PathBuf::from("/tmp/elsewhere.sock")),
                (Some(2), dir.path().join("replica-2.sock")),
            ]
        );
    }

    #[test]
    fn bad_targets_say_what_to_pass() {
        let dir = tempfile::tempdir().unwrap();
        let e = resolve(&dir.path().join("nothing.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not exist"), "{e}");
        let e = resolve(dir.path()).unwrap_err().to_string();
        assert!(e.contains("neither a status socket nor a manifest"), "{e}");
        let junk = dir.path().join("junk.toml");
        std::fs::write(&junk, "this is [ not toml").unwrap();
        let e = resolve(&junk).unwrap_err().to_string();
        assert!(e.contains("not a valid manifest"), "{e}");
        // A socket that is not there yet is still watched.
        let later = dir.path().join("replica-1.sock");
        assert_eq!(resolve(&later).unwrap().endpoints[0].id, Some(1));
    }
}
