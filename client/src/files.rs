//! Files only the cluster's user may touch: run directories created 0700
//! and checked (ours, a real directory, never followed through a symlink),
//! shared files created 0600 without following a planted link.
//!
//! The threat is another local user: a run directory under `/tmp` that
//! someone else created first could hold their sockets and manifest, and a
//! symlink planted where a segment is built could make us truncate a file
//! of theirs (or ours) by name.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The segment file of member `id` of cluster `cluster` under `dir`.
pub fn segment_path(dir: &Path, cluster: &str, id: u8) -> PathBuf {
    dir.join(format!("verbatim-{cluster}-{id}"))
}

/// Why a directory cannot hold a cluster's private files.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    /// Creating or inspecting it failed.
    #[error("{path}: {source}")]
    Io {
        /// The directory.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// It is a symbolic link (not followed).
    #[error("{0}: is a symbolic link; refusing to follow it (remove it, or set cluster.run_dir to a directory of yours)")]
    Symlink(String),
    /// It is not a directory.
    #[error("{0}: exists and is not a directory (remove it or set cluster.run_dir)")]
    NotADirectory(String),
    /// Someone else owns it.
    #[error("{path}: owned by uid {owner}, not by us (uid {us}); refusing to use it (remove it, or set cluster.run_dir to a directory of yours)")]
    NotOurs {
        /// The directory.
        path: String,
        /// Its owner.
        owner: u32,
        /// Our effective uid.
        us: u32,
    },
}

/// Makes `dir` a private directory: creates it (and missing parents) with
/// mode 0700, or checks an existing one is a directory (not a symlink) we
/// own, and takes away group and other access if it had any.
pub fn ensure_private_dir(dir: &Path) -> Result<(), PrivateDirError> {
    let name = || dir.display().to_string();
    let io_err = |source| PrivateDirError::Io {
        path: name(),
        source,
    };
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() && !parent.exists() {
            std::fs::create_dir_all(parent).map_err(io_err)?;
        }
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(io_err)?;
    if meta.file_type().is_symlink() {
        return Err(PrivateDirError::Symlink(name()));
    }
    if !meta.is_dir() {
        return Err(PrivateDirError::NotADirectory(name()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let us = unsafe { libc::geteuid() };
    if meta.uid() != us {
        return Err(PrivateDirError::NotOurs {
            path: name(),
            owner: meta.uid(),
            us,
        });
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io_err)?;
    }
    Ok(())
}

/// Creates a new file at `path`, mode 0600, read-write. A stale file at
/// that path (ours, from a crashed run) is removed first; the open itself
/// never follows a symlink and fails if something appeared in between
/// (`O_CREAT | O_EXCL`), so a planted link cannot redirect it.
pub fn create_private_file(path: &Path) -> io::Result<File> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_is_0700_and_an_open_one_is_closed() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("a/b/run");
        ensure_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        ensure_private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn links_files_and_foreign_directories_are_refused() {
        let base = tempfile::tempdir().unwrap();
        let target = base.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(
            ensure_private_dir(&link),
            Err(PrivateDirError::Symlink(_))
        ));
        let file = base.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(
            ensure_private_dir(&file),
            Err(PrivateDirError::NotADirectory(_))
        ));
        // A directory someone else owns (needs root to make one).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let foreign = base.path().join("foreign");
            std::fs::create_dir(&foreign).unwrap();
            std::os::unix::fs::chown(&foreign, Some(12345), None).unwrap();
            let e = ensure_private_dir(&foreign).unwrap_err();
            assert!(
                matches!(e, PrivateDirError::NotOurs { owner: 12345, .. }),
                "{e}"
            );
            assert!(e.to_string().contains("cluster.run_dir"), "{e}");
        }
    }

    #[test]
    fn private_files_are_0600_and_never_follow_a_planted_link() {
        let base = tempfile::tempdir().unwrap();
        let victim = base.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let path = base.path().join("segment.tmp");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let f = create_private_file(&path).unwrap();
        drop(f);
        assert_eq!(
            std::fs::read(&victim).unwrap(),
            b"precious",
            "the link was not followed"
        );
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.mode() & 0o777, 0o600);
    }
}
