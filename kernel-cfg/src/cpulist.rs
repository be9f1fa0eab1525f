//! CPU lists in the kernel's `cpulist` syntax ("0-3,8,10-11").
//!
//! The same syntax appears in sysfs (`/sys/devices/system/cpu/online`),
//! procfs (`/proc/irq/*/smp_affinity_list`), on the kernel command line
//! (`isolcpus=`, `nohz_full=`) and on our own CLI (`--cores`). The parser
//! accepts everything the kernel prints plus the grouped form
//! `a-b:used/group` that the kernel accepts on its command line, and rejects
//! anything else with a typed error instead of guessing.

use std::fmt;

use serde::{Serialize, Serializer};

/// The largest CPU id accepted. Linux's `NR_CPUS` tops out at 8192 on x86-64
/// (MAXSMP); a bound keeps a hostile "0-4000000000" from allocating gigabytes.
pub const CPU_ID_MAX: usize = 8191;

/// Why a cpu list could not be parsed. Carries the offending token so the
/// operator sees exactly which part of the list is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// A token is not a number, a range or a grouped range.
    #[error("`{token}` is not a cpu number or range")]
    BadToken {
        /// The token as written.
        token: String,
    },
    /// A range whose end is below its start ("5-3").
    #[error("range `{token}` ends before it starts")]
    Reversed {
        /// The token as written.
        token: String,
    },
    /// A cpu id above [`CPU_ID_MAX`].
    #[error("cpu {cpu} is above the largest supported id {CPU_ID_MAX}")]
    TooLarge {
        /// The id that was too large.
        cpu: usize,
    },
    /// A grouped range `a-b:used/group` with `group == 0` or `used > group`.
    #[error("grouped range `{token}` needs 0 < used <= group")]
    BadGroup {
        /// The token as written.
        token: String,
    },
}

/// A set of CPU ids, sorted and without duplicates.
///
/// An empty set is valid (sysfs prints an empty `isolated` file on a host
/// without isolation).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    /// Sorted ascending, deduplicated.
    cpus: Vec<usize>,
}

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a cpu list. Surrounding whitespace (sysfs files end in a
    /// newline) is ignored; an empty or blank string is the empty set.
    pub fn parse(text: &str) -> Result<Self, CpuListError> {
        let mut cpus = Vec::new();
        let text = text.trim();
        if text.is_empty() {
            return Ok(Self::new());
        }
        for token in text.split(',') {
            let token = token.trim();
            parse_token(token, &mut cpus)?;
        }
        Ok(Self::from_iter(cpus))
    }

    /// The cpus in ascending order.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// True when the set holds no cpu.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }

    /// Number of cpus in the set.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// True when `cpu` is in the set.
    pub fn contains(&self, cpu: usize) -> bool {
        self.cpus.binary_search(&cpu).is_ok()
    }

    /// True when every cpu of `other` is in `self`.
    pub fn is_superset(&self, other: &CpuSet) -> bool {
        other.cpus.iter().all(|cpu| self.contains(*cpu))
    }

    /// The cpus in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        self.cpus
            .iter()
            .copied()
            .filter(|cpu| other.contains(*cpu))
            .collect()
    }

    /// The cpus of `self` that are not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        self.cpus
            .iter()
            .copied()
            .filter(|cpu| !other.contains(*cpu))
            .collect()
    }

    /// The cpus in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        self.cpus.iter().chain(other.cpus.iter()).copied().collect()
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut cpus: Vec<usize> = iter.into_iter().collect();
        cpus.sort_unstable();
        cpus.dedup();
        Self { cpus }
    }
}

impl<'a> FromIterator<&'a usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = &'a usize>>(iter: I) -> Self {
        iter.into_iter().copied().collect()
    }
}

/// Formats in the kernel's compressed form ("0-3,8,10-11"), so the output
/// can be pasted back onto a kernel command line or into sysfs.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut index = 0;
        while index < self.cpus.len() {
            let start = self.cpus[index];
            let mut end = start;
            while index + 1 < self.cpus.len() && self.cpus[index + 1] == end + 1 {
                index += 1;
                end = self.cpus[index];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            index += 1;
        }
        Ok(())
    }
}

/// Serialized as the cpu-list string, which is what operators paste.
impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

fn parse_cpu(text: &str, token: &str) -> Result<usize, CpuListError> {
    // `usize::from_str` accepts a leading '+', which no cpu list contains.
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuListError::BadToken {
            token: token.to_owned(),
        });
    }
    let cpu: usize = text
        .parse()
        .map_err(|_| CpuListError::TooLarge { cpu: usize::MAX })?;
    if cpu > CPU_ID_MAX {
        return Err(CpuListError::TooLarge { cpu });
    }
    Ok(cpu)
}

fn parse_token(token: &str, cpus: &mut Vec<usize>) -> Result<(), CpuListError> {
    let (range, group) = match token.split_once(':') {
        Some((range, group)) => (range, Some(group)),
        None => (token, None),
    };
    let (start, end) = match range.split_once('-') {
        Some((start, end)) => (parse_cpu(start, token)?, parse_cpu(end, token)?),
        None => {
            let cpu = parse_cpu(range, token)?;
            (cpu, cpu)
        }
    };
    if end < start {
        return Err(CpuListError::Reversed {
            token: token.to_owned(),
        });
    }
    let (used, group) = match group {
        None => (1, 1),
        Some(group) => {
            let (used, size) = group
                .split_once('/')
                .ok_or_else(|| CpuListError::BadToken {
                    token: token.to_owned(),
                })?;
            let used = parse_cpu(used, token)?;
            let size = parse_cpu(size, token)?;
            if used == 0 || size == 0 || used > size {
                return Err(CpuListError::BadGroup {
                    token: token.to_owned(),
                });
            }
            (used, size)
        }
    };
    // Both ends are <= CPU_ID_MAX, so this loop is bounded by 8192 steps.
    for cpu in start..=end {
        if (cpu - start) % group < used {
            cpus.push(cpu);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> Vec<usize> {
        CpuSet::parse(text).unwrap().cpus().to_vec()
    }

    #[test]
    fn parses_ranges_singles_and_mixtures() {
        assert_eq!(set("0-3,8,10-11"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(set("5"), vec![5]);
        assert_eq!(set("0-1\n"), vec![0, 1]);
        assert_eq!(set(" 2 , 3 "), vec![2, 3]);
        assert_eq!(set("3,1,2,2"), vec![1, 2, 3]);
        assert_eq!(set("4-4"), vec![4]);
    }

    #[test]
    fn empty_and_blank_are_the_empty_set() {
        assert!(CpuSet::parse("").unwrap().is_empty());
        assert!(CpuSet::parse("\n").unwrap().is_empty());
        assert!(CpuSet::parse("   ").unwrap().is_empty());
    }

    #[test]
    fn grouped_ranges_follow_the_kernel() {
        // Documented example from the kernel's bitmap_parselist: 0-9:2/5
        // takes the first two of every five.
        assert_eq!(set("0-9:2/5"), vec![0, 1, 5, 6]);
        assert!(matches!(
            CpuSet::parse("0-9:6/5"),
            Err(CpuListError::BadGroup { .. })
        ));
        assert!(matches!(
            CpuSet::parse("0-9:1/0"),
            Err(CpuListError::BadGroup { .. })
        ));
        assert!(matches!(
            CpuSet::parse("0-9:2"),
            Err(CpuListError::BadToken { .. })
        ));
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        for bad in [
            "garbage", "1-", "-1", "1--2", "1,,2", ",", "a-b", "0x3", "+1", "1.5", "1 2", "３",
            "N", "1-2-3",
        ] {
            assert!(CpuSet::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(
            CpuSet::parse("5-3"),
            Err(CpuListError::Reversed {
                token: "5-3".into()
            })
        );
    }

    #[test]
    fn huge_ids_are_rejected_without_allocating() {
        assert_eq!(
            CpuSet::parse("0-4000000000"),
            Err(CpuListError::TooLarge { cpu: 4000000000 })
        );
        assert!(matches!(
            CpuSet::parse("99999999999999999999999"),
            Err(CpuListError::TooLarge { .. })
        ));
        assert_eq!(set("0-8191").len(), 8192);
    }

    #[test]
    fn display_compresses_and_round_trips() {
        for text in ["0-3,8,10-11", "", "7", "0,2,4", "1-2,4-5"] {
            let parsed = CpuSet::parse(text).unwrap();
            assert_eq!(parsed.to_string(), text);
            assert_eq!(CpuSet::parse(&parsed.to_string()).unwrap(), parsed);
        }
        assert_eq!(CpuSet::parse("3,2,1,0,9").unwrap().to_string(), "0-3,9");
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse("0-3").unwrap();
        let b = CpuSet::parse("2-5").unwrap();
        assert_eq!(a.intersection(&b).to_string(), "2-3");
        assert_eq!(a.difference(&b).to_string(), "0-1");
        assert_eq!(a.union(&b).to_string(), "0-5");
        assert!(a.is_superset(&CpuSet::parse("1-2").unwrap()));
        assert!(!a.is_superset(&b));
        assert!(a.is_superset(&CpuSet::new()));
    }

    #[test]
    fn serializes_as_the_list_string() {
        let a = CpuSet::parse("0-3,8").unwrap();
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"0-3,8\"");
    }
}
