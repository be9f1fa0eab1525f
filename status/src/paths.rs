//! Where a cluster keeps its files. One rule for the replica, the `verbatim`
//! CLI, the console and the bench.

use std::path::{Path, PathBuf};

/// Name of the cluster `verbatim up` starts (and `verbatim status`, `kv`
/// and the console look for when given no manifest).
pub const LOCAL_CLUSTER_NAME: &str = "local";

/// File name of the manifest in a cluster's run directory.
pub const MANIFEST_FILE: &str = "cluster.toml";

/// The run directory (sockets, manifest) of cluster `name`: `explicit` when
/// the manifest sets `cluster.run_dir`, else `$XDG_RUNTIME_DIR/verbatim-<name>`,
/// else `<temp dir>/verbatim-<name>`.
pub fn run_dir(name: &str, explicit: Option<&Path>) -> PathBuf {
    if let Some(d) = explicit {
        return d.to_path_buf();
    }
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    base.join(format!("verbatim-{name}"))
}

/// The status socket of member `id` when the manifest does not name one.
pub fn default_status_socket(run_dir: &Path, id: u8) -> PathBuf {
    run_dir.join(format!("replica-{id}.sock"))
}

/// The manifest `verbatim up` writes for the local cluster.
pub fn local_manifest() -> PathBuf {
    run_dir(LOCAL_CLUSTER_NAME, None).join(MANIFEST_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_uses_the_explicit_directory_first() {
        assert_eq!(
            run_dir("x", Some(Path::new("/srv/v"))),
            PathBuf::from("/srv/v")
        );
        let d = run_dir("prod", None);
        assert!(d.ends_with("verbatim-prod"), "{}", d.display());
        assert_eq!(default_status_socket(&d, 2), d.join("replica-2.sock"));
        assert!(local_manifest().ends_with("verbatim-local/cluster.toml"));
    }
}
