//! The kernel command line (`/proc/cmdline`).

use crate::cpulist::{CpuListError, CpuSet};

/// The kernel's parameters, in order. Everything after a bare `--` belongs
/// to init and is dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelCmdline {
    params: Vec<(String, Option<String>)>,
}

impl KernelCmdline {
    /// Parses the text of `/proc/cmdline`. Double quotes group a value with
    /// spaces (`foo="a b"`), as the kernel's `next_arg` does.
    pub fn parse(text: &str) -> Self {
        let mut params = Vec::new();
        for token in split_quoted(text) {
            if token == "--" {
                break;
            }
            match token.split_once('=') {
                Some((key, value)) => params.push((key.to_owned(), Some(value.to_owned()))),
                None => params.push((token, None)),
            }
        }
        Self { params }
    }

    /// The value of the last occurrence of `key` (the kernel's early
    /// parameters take the last one). `Some(None)` for a bare flag.
    pub fn get(&self, key: &str) -> Option<Option<&str>> {
        self.params
            .iter()
            .rev()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_deref())
    }

    /// The value of `key`, when present with a value.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.get(key).flatten()
    }

    /// True when any parameter is `key`.
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

fn split_quoted(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut in_quotes = false;
    let mut started = false;
    for c in text.chars() {
        match c {
            '"' => {
                in_quotes = !in_quotes;
                started = true;
            }
            c if c.is_whitespace() && !in_quotes => {
                if started {
                    tokens.push(std::mem::take(&mut current));
                    started = false;
                }
            }
            c => {
                current.push(c);
                started = true;
            }
        }
    }
    if started {
        tokens.push(current);
    }
    tokens
}

/// The `isolcpus=` value: optional flags then a cpu list, e.g.
/// `nohz,domain,managed_irq,2-3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolcpus {
    /// Flags before the list (`nohz`, `domain`, `managed_irq`). Without
    /// flags the kernel applies `domain` only.
    pub flags: Vec<String>,
    /// The isolated cpus.
    pub cpus: CpuSet,
}

impl Isolcpus {
    /// Parses an `isolcpus=` value. Leading comma-separated words that start
    /// with a letter are flags and must be ones the kernel knows (it rejects
    /// the whole parameter otherwise); the rest is the cpu list.
    pub fn parse(value: &str) -> Result<Self, CpuListError> {
        const KNOWN_FLAGS: [&str; 3] = ["nohz", "domain", "managed_irq"];
        let mut flags = Vec::new();
        let mut rest = value;
        while let Some(first) = rest.chars().next() {
            if !first.is_ascii_alphabetic() {
                break;
            }
            let (flag, tail) = rest.split_once(',').unwrap_or((rest, ""));
            if !KNOWN_FLAGS.contains(&flag) {
                return Err(CpuListError::BadToken {
                    token: flag.to_owned(),
                });
            }
            flags.push(flag.to_owned());
            rest = tail;
        }
        Ok(Self {
            flags,
            cpus: CpuSet::parse(rest)?,
        })
    }

    /// True when `flag` is given.
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_params_and_stops_at_init_args() {
        let line = "BOOT_IMAGE=/vmlinuz ro quiet isolcpus=2-3 -- --firecracker-init isolcpus=9";
        let cmdline = KernelCmdline::parse(line);
        assert_eq!(cmdline.value("isolcpus"), Some("2-3"));
        assert_eq!(cmdline.get("quiet"), Some(None));
        assert!(cmdline.has("ro"));
        assert!(!cmdline.has("--firecracker-init"));
        assert_eq!(cmdline.value("nohz_full"), None);
    }

    #[test]
    fn last_occurrence_wins_and_quotes_group() {
        let cmdline = KernelCmdline::parse("a=1 b=\"x y\" a=2\n");
        assert_eq!(cmdline.value("a"), Some("2"));
        assert_eq!(cmdline.value("b"), Some("x y"));
        assert_eq!(KernelCmdline::parse(""), KernelCmdline::default());
    }

    #[test]
    fn isolcpus_flags_and_list() {
        let iso = Isolcpus::parse("nohz,domain,managed_irq,2-3,5").unwrap();
        assert_eq!(iso.flags, vec!["nohz", "domain", "managed_irq"]);
        assert_eq!(iso.cpus.to_string(), "2-3,5");
        assert!(iso.has_flag("managed_irq"));
        let plain = Isolcpus::parse("1").unwrap();
        assert!(plain.flags.is_empty());
        assert_eq!(plain.cpus.to_string(), "1");
        assert!(Isolcpus::parse("domain,x-y").is_err());
        assert!(Isolcpus::parse("bogus,2-3").is_err());
        assert!(Isolcpus::parse("domain").unwrap().cpus.is_empty());
    }
}
