//! CPU time of the replica processes, from `/proc/<pid>/stat`: `utime`
//! and `stime` (fields 14 and 15, in clock ticks), which for a process
//! sum every thread of it. `workload` samples them just before and just
//! after each measured window and divides by the requests completed.
//!
//! The kernel counts in ticks (`sysconf(_SC_CLK_TCK)`, 100 per second on
//! Linux: 10 ms each), so a window must be long enough for a backup's few
//! milliseconds of work to register.

use crate::{BenchError, Result};
use std::path::PathBuf;

/// The field number (1-based, as proc(5) counts) of `utime`.
const UTIME_FIELD: usize = 14;
/// Of `stime`, right after it.
const STIME_FIELD: usize = 15;
/// The first field after `comm`: `state` (field 3).
const FIRST_FIELD_AFTER_COMM: usize = 3;

/// `utime + stime` of a `/proc/<pid>/stat` line, in clock ticks.
///
/// The second field, `comm`, is the executable's name in parentheses,
/// and may itself hold spaces and parentheses (`(a) b)`): the fields are
/// counted from after the last `)` of the line, which the kernel writes
/// right after `comm` (no later field has one).
pub fn parse_stat_cpu_ticks(line: &str) -> Result<u64> {
    let bad = |why: &str| BenchError::ProcStat(format!("{why} in {:?}", truncate(line)));
    let open = line.find('(').ok_or_else(|| bad("no `(` before comm"))?;
    let close = line.rfind(')').ok_or_else(|| bad("no `)` after comm"))?;
    if close < open {
        return Err(bad("`)` before `(`"));
    }
    let fields: Vec<&str> = line[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> Result<u64> {
        let text = fields
            .get(n - FIRST_FIELD_AFTER_COMM)
            .ok_or_else(|| bad(&format!("no field {n}")))?;
        text.parse::<u64>()
            .map_err(|_| bad(&format!("field {n} is {text:?}, not a tick count")))
    };
    field(UTIME_FIELD)?
        .checked_add(field(STIME_FIELD)?)
        .ok_or_else(|| bad("utime + stime overflows"))
}

/// `utime + stime` of process `pid` now, in clock ticks.
pub fn process_cpu_ticks(pid: u32) -> Result<u64> {
    let path = PathBuf::from(format!("/proc/{pid}/stat"));
    let line = std::fs::read_to_string(&path).map_err(|source| BenchError::Io {
        path: path.clone(),
        source,
    })?;
    parse_stat_cpu_ticks(&line)
        .map_err(|e| BenchError::ProcStat(format!("{}: {e}", path.display())))
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times.
pub fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf reads a constant of the C library; no pointers.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // -1 only when the name is unknown; Linux has always used 100 (USER_HZ).
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// `ticks` of CPU time spread over `ops` requests, in µs per request;
/// `None` without requests.
pub fn cpu_us_per_op(ticks: u64, ticks_per_s: u64, ops: u64) -> Option<f64> {
    (ops > 0 && ticks_per_s > 0).then(|| ticks as f64 * 1e6 / ticks_per_s as f64 / ops as f64)
}

/// The start of a line, for error messages (a stat line is short, but a
/// malformed input may not be).
fn truncate(line: &str) -> &str {
    let end = line.char_indices().nth(120).map_or(line.len(), |(i, _)| i);
    line[..end].trim_end()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real line of `cat /proc/self/stat` (Linux 6), utime 7, stime 3.
    const CAT: &str = "4242 (cat) R 4100 4242 4100 34816 4242 4194304 97 0 0 0 7 3 0 0 20 0 1 0 \
                       123456 5754880 233 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 \
                       0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn utime_and_stime_are_fields_14_and_15() {
        assert_eq!(parse_stat_cpu_ticks(CAT).unwrap(), 10);
    }

    #[test]
    fn a_comm_with_spaces_and_parentheses_is_skipped_whole() {
        // A thread may name itself anything up to 15 bytes, `)` and
        // spaces included; counting fields from the first `)` or by
        // splitting the whole line on spaces would read the wrong ones.
        let line = CAT.replace("(cat)", "(my (odd) cmd) R)");
        assert_eq!(parse_stat_cpu_ticks(&line).unwrap(), 10);
        let line = CAT.replace("(cat)", "( )");
        assert_eq!(parse_stat_cpu_ticks(&line).unwrap(), 10);
    }

    #[test]
    fn large_tick_counts_parse() {
        let line = CAT.replace(" 7 3 ", " 4000000000 5000000000 ");
        assert_eq!(parse_stat_cpu_ticks(&line).unwrap(), 9_000_000_000);
    }

    #[test]
    fn a_malformed_line_is_an_error_not_a_panic() {
        for line in [
            "",
            "4242",
            "4242 cat R 1 2 3",
            "4242 (cat R 1 2 3",
            "4242 )cat( R 0 0 0 0 0 0 0 0 0 0 7 3",
            "4242 (cat) R 4100 4242",
            "4242 (cat) R 4100 4242 4100 34816 4242 4194304 97 0 0 0 seven 3 0",
            "4242 (cat) R 4100 4242 4100 34816 4242 4194304 97 0 0 0 7 -3 0",
            "4242 (cat) R 4100 4242 4100 34816 4242 4194304 97 0 0 0 7",
            "4242 (cat) R 1 1 1 1 1 1 1 1 1 1 18446744073709551615 1 0",
        ] {
            let e = parse_stat_cpu_ticks(line).expect_err(line);
            assert!(matches!(e, BenchError::ProcStat(_)), "{line}: {e}");
        }
    }

    #[test]
    fn this_process_has_cpu_time_and_a_tick_rate() {
        let pid = std::process::id();
        process_cpu_ticks(pid).unwrap();
        assert!(clock_ticks_per_s() > 0);
        let missing = process_cpu_ticks(u32::MAX).unwrap_err();
        assert!(matches!(missing, BenchError::Io { .. }), "{missing}");
    }

    #[test]
    fn ticks_become_microseconds_per_request() {
        assert_eq!(cpu_us_per_op(100, 100, 1_000_000), Some(1.0));
        assert_eq!(cpu_us_per_op(3, 100, 1_000), Some(30.0));
        assert_eq!(cpu_us_per_op(3, 100, 0), None);
    }
}
