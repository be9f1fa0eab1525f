//! Reading `/proc`, `/sys` and `/boot` relative to a root directory.
//!
//! Every path the checks touch goes through [`HostTree`], so the same rules
//! run on the live system (root `/`) and on recorded trees in the tests.
//! Reads are bounded ([`FILE_BYTES_MAX`], [`DIR_ENTRIES_MAX`]) and never
//! panic: a missing or unreadable file is a [`ReadError`] the caller turns
//! into a Skip or Warn item.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::cpulist::{CpuListError, CpuSet};
use crate::thresholds::{DIR_ENTRIES_MAX, FILE_BYTES_MAX};

/// Why a file of the tree could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file does not exist (often meaningful: e.g. no `nohz_full`).
    #[error("{} does not exist", path.display())]
    Missing {
        /// Full path that was tried.
        path: PathBuf,
    },
    /// The file exists but reading it failed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// Full path that was tried.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file is larger than [`FILE_BYTES_MAX`].
    #[error("{} is larger than {FILE_BYTES_MAX} bytes", path.display())]
    TooLarge {
        /// Full path that was tried.
        path: PathBuf,
    },
    /// The file is not UTF-8 text.
    #[error("{} is not UTF-8 text", path.display())]
    NotText {
        /// Full path that was tried.
        path: PathBuf,
    },
    /// The file holds a cpu list that does not parse.
    #[error("{}: {source}", path.display())]
    CpuList {
        /// Full path that was tried.
        path: PathBuf,
        /// The parse error.
        source: CpuListError,
    },
}

impl ReadError {
    /// True when the file simply does not exist.
    pub fn is_missing(&self) -> bool {
        matches!(self, ReadError::Missing { .. })
    }
}

/// A root directory holding `proc/`, `sys/` and `boot/` (the live `/` or a
/// recorded copy).
#[derive(Debug, Clone)]
pub struct HostTree {
    root: PathBuf,
}

impl HostTree {
    /// A tree rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The full path of `relative` (written without a leading '/').
    pub fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative.trim_start_matches('/'))
    }

    /// True when `relative` exists (file, directory or symlink target).
    pub fn exists(&self, relative: &str) -> bool {
        self.path(relative).exists()
    }

    /// Reads the raw bytes of `relative`, at most [`FILE_BYTES_MAX`].
    pub fn read_bytes(&self, relative: &str) -> Result<Vec<u8>, ReadError> {
        let path = self.path(relative);
        let file = fs::File::open(&path).map_err(|source| io_error(&path, source))?;
        let mut bytes = Vec::new();
        // Read one byte past the bound to tell "exactly at the bound" from
        // "larger than the bound". procfs files report size 0, so the
        // metadata length cannot be used.
        file.take(FILE_BYTES_MAX + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| io_error(&path, source))?;
        if bytes.len() as u64 > FILE_BYTES_MAX {
            return Err(ReadError::TooLarge { path });
        }
        Ok(bytes)
    }

    /// Reads `relative` as text.
    pub fn read(&self, relative: &str) -> Result<String, ReadError> {
        let bytes = self.read_bytes(relative)?;
        String::from_utf8(bytes).map_err(|_| ReadError::NotText {
            path: self.path(relative),
        })
    }

    /// Reads `relative` as text with surrounding whitespace removed.
    pub fn read_trimmed(&self, relative: &str) -> Result<String, ReadError> {
        Ok(self.read(relative)?.trim().to_owned())
    }

    /// Reads `relative` as a cpu list.
    pub fn read_cpus(&self, relative: &str) -> Result<CpuSet, ReadError> {
        let text = self.read(relative)?;
        CpuSet::parse(&text).map_err(|source| ReadError::CpuList {
            path: self.path(relative),
            source,
        })
    }

    /// Names of the entries of directory `relative`, sorted (numerically
    /// when the names are numbers, so IRQ 9 comes before IRQ 10), at most
    /// [`DIR_ENTRIES_MAX`]. Names that are not UTF-8 are skipped: nothing
    /// we look for has such a name.
    pub fn list_dir(&self, relative: &str) -> Result<Vec<String>, ReadError> {
        let path = self.path(relative);
        let entries = fs::read_dir(&path).map_err(|source| io_error(&path, source))?;
        let mut names = Vec::new();
        for entry in entries.take(DIR_ENTRIES_MAX) {
            let entry = entry.map_err(|source| io_error(&path, source))?;
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort_by_cached_key(|name| natural_key(name));
        Ok(names)
    }
}

fn io_error(path: &Path, source: io::Error) -> ReadError {
    if source.kind() == io::ErrorKind::NotFound {
        ReadError::Missing {
            path: path.to_owned(),
        }
    } else {
        ReadError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// Sort key that orders "state2" before "state10" and "9" before "10".
fn natural_key(name: &str) -> (String, u64, String) {
    let digits_at = name
        .find(|c: char| c.is_ascii_digit())
        .unwrap_or(name.len());
    let (prefix, rest) = name.split_at(digits_at);
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let number = rest[..digits_end].parse().unwrap_or(u64::MAX);
    (prefix.to_owned(), number, rest[digits_end..].to_owned())
}

/// The soft "Max locked memory" limit from a `/proc/<pid>/limits` text:
/// `Ok(None)` for unlimited, `Ok(Some(bytes))` otherwise.
pub fn parse_memlock_limit(limits: &str) -> Option<Option<u64>> {
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max locked memory"))?;
    let soft = line
        .trim_start_matches("Max locked memory")
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(None)
    } else {
        soft.parse().ok().map(Some)
    }
}

/// A numeric field of `/proc/meminfo` ("HugePages_Total:  512"), without
/// its unit.
pub fn parse_meminfo_field(meminfo: &str, field: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if name.trim() != field {
            return None;
        }
        value.split_whitespace().next()?.parse().ok()
    })
}

/// One line of `/proc/interrupts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptLine {
    /// The IRQ number or mnemonic ("24", "LOC").
    pub irq: String,
    /// Interrupt counts, one per cpu column of the header.
    pub counts: Vec<u64>,
    /// The rest of the line: chip, hardware irq and device name.
    pub description: String,
}

/// Parses `/proc/interrupts`. Returns the cpu ids of the columns (from the
/// header, "CPU0 CPU1 ...") and the lines. Malformed lines are skipped.
pub fn parse_interrupts(text: &str) -> (Vec<usize>, Vec<InterruptLine>) {
    let mut lines = text.lines();
    let columns: Vec<usize> = lines
        .next()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|column| column.strip_prefix("CPU")?.parse().ok())
        .collect();
    let mut parsed = Vec::new();
    for line in lines {
        let Some((irq, rest)) = line.split_once(':') else {
            continue;
        };
        let mut fields = rest.split_whitespace().peekable();
        let mut counts = Vec::with_capacity(columns.len());
        while counts.len() < columns.len() {
            match fields.peek().and_then(|field| field.parse::<u64>().ok()) {
                Some(count) => {
                    counts.push(count);
                    fields.next();
                }
                // ERR:/MIS: lines carry a single total, not one per cpu.
                None => break,
            }
        }
        parsed.push(InterruptLine {
            irq: irq.trim().to_owned(),
            counts,
            description: fields.collect::<Vec<_>>().join(" "),
        });
    }
    (columns, parsed)
}

/// Parses a hex cpu mask as in `/proc/irq/default_smp_affinity`
/// ("ff", "00000000,00000003"): comma-separated 32-bit groups, most
/// significant first.
pub fn parse_cpu_mask(text: &str) -> Option<CpuSet> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let groups: Vec<&str> = text.split(',').collect();
    let mut cpus = Vec::new();
    for (group_index, group) in groups.iter().rev().enumerate() {
        let bits = u32::from_str_radix(group, 16).ok()?;
        for bit in 0..32 {
            if bits & (1 << bit) != 0 {
                let cpu = group_index * 32 + bit;
                if cpu > crate::cpulist::CPU_ID_MAX {
                    return None;
                }
                cpus.push(cpu);
            }
        }
    }
    Some(cpus.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_soft_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max locked memory         8388608              8388608              bytes\n";
        assert_eq!(parse_memlock_limit(limits), Some(Some(8 << 20)));
        let unlimited =
            "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(parse_memlock_limit(unlimited), Some(None));
        assert_eq!(parse_memlock_limit("garbage"), None);
        assert_eq!(parse_memlock_limit("Max locked memory   lots"), None);
        assert_eq!(parse_memlock_limit("Max locked memory"), None);
    }

    #[test]
    fn meminfo_fields() {
        let meminfo =
            "MemTotal:       24683656 kB\nHugePages_Total:     512\nHugepagesize:       2048 kB\n";
        assert_eq!(parse_meminfo_field(meminfo, "HugePages_Total"), Some(512));
        assert_eq!(parse_meminfo_field(meminfo, "Hugepagesize"), Some(2048));
        assert_eq!(parse_meminfo_field(meminfo, "Nope"), None);
        assert_eq!(
            parse_meminfo_field("HugePages_Total: x", "HugePages_Total"),
            None
        );
    }

    #[test]
    fn interrupts_table() {
        let text = "           CPU0       CPU1       \n \
                    24:          1          0  IO-APIC   5-edge      ACPI:Ged\n \
                    NMI:          0          0   Non-maskable interrupts\n \
                    ERR:          0\n\
                    garbage line\n";
        let (columns, lines) = parse_interrupts(text);
        assert_eq!(columns, vec![0, 1]);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].irq, "24");
        assert_eq!(lines[0].counts, vec![1, 0]);
        assert_eq!(lines[0].description, "IO-APIC 5-edge ACPI:Ged");
        assert_eq!(lines[2].counts, vec![0]);
        assert_eq!(parse_interrupts(""), (vec![], vec![]));
    }

    #[test]
    fn hex_masks() {
        assert_eq!(parse_cpu_mask("3\n").unwrap().to_string(), "0-1");
        assert_eq!(parse_cpu_mask("ff").unwrap().to_string(), "0-7");
        assert_eq!(
            parse_cpu_mask("00000001,00000003").unwrap().to_string(),
            "0-1,32"
        );
        assert_eq!(parse_cpu_mask(""), None);
        assert_eq!(parse_cpu_mask("xyz"), None);
    }

    #[test]
    fn natural_order() {
        let mut names = vec!["state10", "state2", "10", "9", "a"];
        names.sort_by_cached_key(|name| natural_key(name));
        assert_eq!(names, vec!["9", "10", "a", "state2", "state10"]);
    }

    #[test]
    fn missing_files_are_typed() {
        let tree = HostTree::new("/nonexistent-verbatim-root");
        assert!(tree.read("proc/cmdline").unwrap_err().is_missing());
        assert!(tree.list_dir("proc/irq").unwrap_err().is_missing());
    }
}
