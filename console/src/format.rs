//! Compact, unit-bearing number formatting for narrow table cells.

use std::time::Duration;

/// Placeholder for a value that is not known.
pub const UNKNOWN: &str = "—";

/// A count in at most 7 characters: exact below 100 000, then k/M/G/T.
pub fn count(n: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1_000_000_000_000, "T"),
        (1_000_000_000, "G"),
        (1_000_000, "M"),
        (1_000, "k"),
    ];
    if n < 100_000 {
        return n.to_string();
    }
    for (scale, unit) in UNITS {
        if n >= scale {
            let v = n as f64 / scale as f64;
            return if v < 100.0 {
                format!("{v:.1}{unit}")
            } else {
                format!("{v:.0}{unit}")
            };
        }
    }
    n.to_string()
}

/// Bytes with a binary unit: `512 B`, `4.0 KiB`, `12.3 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

/// Microseconds as a plain number up to 9 999 999, then seconds, so a
/// failover column stays 7 wide.
pub fn micros(us: u64) -> String {
    if us < 10_000_000 {
        us.to_string()
    } else {
        format!("{:.1}s", us as f64 / 1e6)
    }
}

/// An optional microsecond value, `—` when absent.
pub fn micros_opt(us: Option<u64>) -> String {
    us.map(micros).unwrap_or_else(|| UNKNOWN.to_string())
}

/// Nanoseconds shown in microseconds with one decimal (`3.2µs`); the
/// replicas measure in ns but operators think of this store in µs.
pub fn ns_as_micros(ns: u64) -> String {
    let us = ns as f64 / 1000.0;
    if us < 1000.0 {
        format!("{us:.1}µs")
    } else if us < 1_000_000.0 {
        format!("{:.1}ms", us / 1000.0)
    } else {
        format!("{:.1}s", us / 1e6)
    }
}

/// A rate in ops/s: `950`, `12.3k`, `1.2M`.
pub fn rate(per_sec: u64) -> String {
    if per_sec < 10_000 {
        per_sec.to_string()
    } else {
        count_short(per_sec)
    }
}

fn count_short(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.1}M", n as f64 / 1e6)
    } else {
        format!("{:.1}k", n as f64 / 1e3)
    }
}

/// An age such as `850ms`, `12s`, `3m04s`, `2h05m`.
pub fn age(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// Unix milliseconds as UTC wall-clock time `HH:MM:SS.mmm`; the replicas
/// stamp events in Unix ms and the console has no time-zone database.
pub fn clock_ms(unix_ms: u64) -> String {
    let ms = unix_ms % 1000;
    let s = (unix_ms / 1000) % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{ms:03}",
        s / 3600,
        (s % 3600) / 60,
        s % 60
    )
}

/// `r3`, or `—` for no replica.
pub fn replica(id: Option<u8>) -> String {
    id.map(|i| format!("r{i}"))
        .unwrap_or_else(|| UNKNOWN.to_string())
}

/// Cuts `s` to at most `chars_max` characters, marking the cut with `…`.
pub fn truncate(s: &str, chars_max: usize) -> String {
    if s.chars().count() <= chars_max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(chars_max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_fit_seven_characters() {
        assert_eq!(count(99_999), "99999");
        assert_eq!(count(123_456), "123k");
        assert_eq!(count(1_234_567), "1.2M");
        assert_eq!(count(12_345_678), "12.3M");
        assert_eq!(count(u64::MAX), "18446744T");
        for n in [0, 999_999, 99_999_999, 999_999_999_999] {
            assert!(count(n).chars().count() <= 7, "{}", count(n));
        }
    }

    #[test]
    fn units_are_readable() {
        assert_eq!(bytes(4 << 20), "4.0 MiB");
        assert_eq!(bytes(10), "10 B");
        assert_eq!(micros(1234), "1234");
        assert_eq!(micros(12_000_000), "12.0s");
        assert_eq!(micros_opt(None), "—");
        assert_eq!(ns_as_micros(3_250), "3.2µs");
        assert_eq!(ns_as_micros(2_500_000), "2.5ms");
        assert_eq!(rate(950), "950");
        assert_eq!(rate(12_345), "12.3k");
        assert_eq!(age(Duration::from_millis(850)), "850ms");
        assert_eq!(age(Duration::from_secs(184)), "3m04s");
        assert_eq!(clock_ms(1_700_000_003_120), "22:13:23.120");
        assert_eq!(replica(Some(2)), "r2");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
    }
}
