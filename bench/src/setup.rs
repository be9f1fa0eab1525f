//! The setup every result carries, so that a figure is never quoted
//! without it: fabric, poll mode, core pins, group size, the machine (cores,
//! CPU model, kernel), whether the vCPUs were idle before the run, the
//! date, and the build.

use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Online CPUs.
    pub cores: usize,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// `uname -sr`.
    pub kernel: String,
    /// Host name.
    pub hostname: String,
    /// Hypervisor, if /proc/cpuinfo says the CPUs are virtual.
    pub virtualized: bool,
}

impl Machine {
    /// Reads /proc and uname(2).
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let virtualized = cpuinfo
            .lines()
            .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"));
        let (kernel, hostname) = uname();
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            kernel,
            hostname,
            virtualized,
        }
    }
}

fn uname() -> (String, String) {
    // SAFETY: uname(2) fills a zeroed struct we own.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to that struct.
    if unsafe { libc::uname(&mut u) } != 0 {
        return ("unknown".into(), "unknown".into());
    }
    let s = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (
        format!("{} {}", s(&u.sysname), s(&u.release)),
        s(&u.nodename),
    )
}

/// How busy the CPUs were just before the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuState {
    /// /proc/loadavg (1, 5, 15 minutes).
    pub load_average: [f64; 3],
    /// Busy fraction of each CPU over a short sample (from /proc/stat).
    pub busy_fraction: Vec<f64>,
    /// Length of that sample (ms).
    pub sample_ms: u64,
    /// "idle" when every CPU was under 10 % busy, else "busy".
    pub vcpus_before: String,
    /// What kept CPUs busy during the measurement (our own spinners).
    pub during: String,
}

/// (busy, total) jiffies per CPU.
fn cpu_times() -> Vec<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    stat.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            let total: u64 = v.iter().take(8).sum();
            // idle + iowait
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            (total.saturating_sub(idle), total)
        })
        .collect()
}

impl CpuState {
    /// Samples /proc/stat over `sample` and reads the load average.
    pub fn sample(sample: Duration) -> CpuState {
        let a = cpu_times();
        std::thread::sleep(sample);
        let b = cpu_times();
        let busy_fraction: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(&(ba, ta), &(bb, tb))| {
                let dt = tb.saturating_sub(ta);
                if dt == 0 {
                    0.0
                } else {
                    bb.saturating_sub(ba) as f64 / dt as f64
                }
            })
            .collect();
        let load: Vec<f64> = std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .filter_map(|x| x.parse().ok())
            .collect();
        let mut load_average = [0.0; 3];
        for (d, s) in load_average.iter_mut().zip(load) {
            *d = s;
        }
        let idle = busy_fraction.iter().all(|&f| f < 0.10);
        CpuState {
            load_average,
            busy_fraction,
            sample_ms: sample.as_millis() as u64,
            vcpus_before: if idle { "idle" } else { "busy" }.into(),
            during: String::new(),
        }
    }
}

/// The civil date and time (UTC) of a Unix time, `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_string(unix_s: u64) -> String {
    // Howard Hinnant's days-from-civil inverse.
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Now, as [`utc_string`].
pub fn now_utc() -> String {
    utc_string(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
}

/// Protocol timing the replicas ran with (from their manifest).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimingUs {
    /// Leader heartbeat period.
    pub heartbeat_period_us: u64,
    /// Initial failure-detector period Δ.
    pub fd_check_period_us: u64,
    /// Upper bound of Δ.
    pub fd_check_period_max_us: u64,
    /// Election timeout range.
    pub election_timeout_min_us: u64,
    /// Election timeout range.
    pub election_timeout_max_us: u64,
}

/// Everything a figure needs next to it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// "shm" (shared-memory fabric between replica processes).
    pub fabric: String,
    /// Replica poll mode ("leader-busy": the leader spins, followers park).
    pub poll: String,
    /// Cores the replicas are pinned to (empty: unpinned).
    pub replica_cores: Vec<usize>,
    /// Core the measuring client is pinned to (none: unpinned).
    pub client_core: Option<usize>,
    /// "spin" or "yield": how the shm client waits for its reply.
    pub client_wait: String,
    /// Group sizes measured.
    pub group_sizes: Vec<u8>,
    /// The machine.
    pub machine: Machine,
    /// CPU state before the run.
    pub cpu: CpuState,
    /// Start of the run (UTC).
    pub date_utc: String,
    /// The replica binary.
    pub replica_binary: String,
    /// "release" or "debug" (of the replica binary, from its path).
    pub replica_build: String,
    /// "release" or "debug" (of this benchmark).
    pub bench_build: String,
    /// Manifest overrides given with --set.
    pub overrides: Vec<String>,
    /// Protocol timing.
    pub timing: TimingUs,
    /// How latency is measured.
    pub method: String,
    /// `git rev-parse --short HEAD` of the working directory, with
    /// "-dirty" when it has uncommitted changes ("unknown" outside git).
    #[serde(default)]
    pub source_revision: String,
}

/// The source revision of the current directory's git work tree.
pub fn source_revision() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(rev) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{rev}-dirty")
            } else {
                rev
            }
        }
        None => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(utc_string(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_string(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_string(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn the_machine_is_described() {
        let m = Machine::probe();
        assert!(m.cores >= 1);
        assert!(!m.kernel.is_empty());
        let c = CpuState::sample(Duration::from_millis(20));
        assert!(c.busy_fraction.iter().all(|f| (0.0..=1.0).contains(f)));
        assert!(c.vcpus_before == "idle" || c.vcpus_before == "busy");
    }
}
