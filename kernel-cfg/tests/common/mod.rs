//! Helpers shared by the integration tests: fixture paths, tree copies and
//! small file edits.

#![allow(dead_code)] // each test binary uses a different subset

use std::fs;
use std::path::{Path, PathBuf};

use verbatim_kernel_cfg::{check, CheckOptions, Item, Report, Status};

/// Path of a recorded fixture tree.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A fresh, writable copy of a fixture tree.
pub fn copy_fixture(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_dir(&fixture(name), dir.path());
    dir
}

fn copy_dir(source: &Path, target: &Path) {
    fs::create_dir_all(target).expect("create dir");
    for entry in fs::read_dir(source).expect("read fixture dir") {
        let entry = entry.expect("dir entry");
        let to = target.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &to);
        } else {
            fs::copy(entry.path(), &to).expect("copy file");
        }
    }
}

/// Writes `text` to `root/relative`, creating directories.
pub fn write(root: &Path, relative: &str, text: &str) {
    let path = root.join(relative);
    fs::create_dir_all(path.parent().expect("parent")).expect("create dir");
    fs::write(path, text).expect("write file");
}

/// Reads `root/relative`.
pub fn read(root: &Path, relative: &str) -> String {
    fs::read_to_string(root.join(relative)).expect("read file")
}

/// Removes a file or a directory tree under the root.
pub fn remove(root: &Path, relative: &str) {
    let path = root.join(relative);
    if path.is_dir() {
        fs::remove_dir_all(path).expect("remove dir");
    } else {
        fs::remove_file(path).expect("remove file");
    }
}

/// Replaces `from` by `to` in `root/relative`; panics when `from` is absent
/// so a test cannot silently edit nothing.
pub fn edit(root: &Path, relative: &str, from: &str, to: &str) {
    let text = read(root, relative);
    assert!(text.contains(from), "{relative} does not contain {from:?}");
    write(root, relative, &text.replacen(from, to, 1));
}

/// Runs `check` on `root` with the default cores.
pub fn check_root(root: &Path) -> Report {
    check(&CheckOptions {
        root: root.to_owned(),
        cores: None,
    })
}

/// Runs `check` on `root` for `cores`.
pub fn check_cores(root: &Path, cores: &[usize]) -> Report {
    check(&CheckOptions {
        root: root.to_owned(),
        cores: Some(cores.to_vec()),
    })
}

/// The item `id` of a report.
pub fn item<'a>(report: &'a Report, id: &str) -> &'a Item {
    report
        .item(id)
        .unwrap_or_else(|| panic!("report has no item {id}"))
}

/// Asserts the status of item `id`, printing the item on failure.
pub fn assert_status(report: &Report, id: &str, status: Status) {
    let item = item(report, id);
    assert_eq!(item.status, status, "{id}: {item:#?}");
}
