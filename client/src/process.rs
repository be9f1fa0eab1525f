//! Who owns a segment or a slot, and whether that process still runs.
//!
//! A pid alone is not an identity: pids are reused, so "`kill(pid, 0)`
//! succeeds" may be true of a stranger. A [`ProcessId`] is the pid plus the
//! process's start time (field 22 of `/proc/<pid>/stat`, in clock ticks
//! since boot), which a reused pid does not repeat. [`ProcessWatch`] goes
//! further for the processes a client waits on: a pidfd, which can never
//! name another process, and the replica's death notices, which turn a few
//! hundred microseconds before the pidfd does.

use crate::notice::{notice_path, NoticeWatch};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

/// CLOCK_MONOTONIC now (ns since boot): one clock that every process on
/// the machine shares, so a replica's failover record and a benchmark's
/// kill can be put on one timeline.
pub fn monotonic_now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The CLOCK_MONOTONIC time (ns) at which `epoch` was taken. `Instant` is
/// CLOCK_MONOTONIC on Linux but does not show its value; the two reads
/// here are a few tens of ns apart, well below the microseconds measured.
pub fn monotonic_ns_of(epoch: std::time::Instant) -> u64 {
    let elapsed = epoch.elapsed().as_nanos() as u64;
    monotonic_now_ns().saturating_sub(elapsed)
}

/// A process: its pid and its start time (clock ticks since boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessId {
    /// The pid.
    pub pid: i32,
    /// When it started (`/proc/<pid>/stat` field 22).
    pub start_ticks: u64,
}

impl ProcessId {
    /// This process.
    pub fn current() -> ProcessId {
        let pid = std::process::id() as i32;
        ProcessId {
            pid,
            // Our own stat file exists; 0 only if /proc is not mounted, and
            // then `alive` falls back to the pid alone.
            start_ticks: start_ticks(pid).unwrap_or(0),
        }
    }

    /// True if this very process (not another one that reuses its pid)
    /// still runs. A zombie counts as gone.
    pub fn alive(&self) -> bool {
        if self.pid <= 0 {
            return false;
        }
        match stat_fields(self.pid) {
            Some((state, start)) => {
                state != 'Z' && state != 'X' && (self.start_ticks == 0 || start == self.start_ticks)
            }
            // No /proc entry: gone, unless /proc itself is missing.
            None => !Path::new("/proc/self/stat").exists() && kill_probe(self.pid),
        }
    }
}

/// The start time of `pid`, if it exists.
pub fn start_ticks(pid: i32) -> Option<u64> {
    stat_fields(pid).map(|(_, start)| start)
}

/// (state, start time) from `/proc/<pid>/stat`. The command name (field
/// 2) may hold spaces and parentheses, so fields are counted from the last
/// ')'.
fn stat_fields(pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // Field 3 is the state; field 22 the start time (19 fields later).
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

fn kill_probe(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Watches one process through a pidfd: exited (or a zombie not reaped
/// yet) shows at once, and a recycled pid can never be mistaken for it.
/// When the process is a replica with death notices, their one-load check
/// comes first: it turns within ~0.2 ms of a kill, the pidfd only after the
/// kernel has torn the whole process down.
pub struct ProcessWatch {
    fd: OwnedFd,
    notice: Option<NoticeWatch>,
}

impl ProcessWatch {
    /// Starts watching `pid`; `None` if it does not exist.
    pub fn open(pid: i32) -> Option<ProcessWatch> {
        if pid <= 0 {
            return None;
        }
        pidfd_open(pid).map(|fd| ProcessWatch { fd, notice: None })
    }

    /// Watches the replica whose segment is at `segment_path` (process
    /// `pid`), through its death notices too when it has them.
    pub fn replica(segment_path: &Path, pid: i32) -> Option<ProcessWatch> {
        let mut w = ProcessWatch::open(pid)?;
        w.notice = match NoticeWatch::open(&notice_path(segment_path)) {
            Ok(n) if n.owner_pid() == pid => Some(n),
            Ok(n) => {
                tracing::debug!(
                    pid,
                    owner = n.owner_pid(),
                    "stale death notice; the pidfd remains"
                );
                None
            }
            Err(e) => {
                tracing::debug!(pid, error = %e, "no death notice; the pidfd remains");
                None
            }
        };
        Some(w)
    }

    /// Waits (at most `timeout`) for the process to exit; true if it did.
    pub fn wait_exit(&self, timeout: Duration) -> bool {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        self.poll_fd(ms)
    }

    /// True once a replica's death notice shows its poll thread gone (one
    /// load; false when it has none).
    pub fn notice_gone(&self) -> bool {
        self.notice.as_ref().is_some_and(|n| !n.owner_alive())
    }

    /// True once the process has exited or (for a replica) its poll
    /// thread has: one load, then one non-blocking poll(2).
    pub fn exited(&self) -> bool {
        self.notice_gone() || self.poll_fd(0)
    }

    fn poll_fd(&self, timeout_ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        n > 0 && p.revents != 0
    }
}

/// A pidfd for `pid`, if it exists.
pub fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags, returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just gave us this fd; nobody else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

impl ProcessId {
    /// True while the process is stopped (SIGSTOP, a debugger): state `T`
    /// or `t` in `/proc/<pid>/stat`, and still the same process.
    pub fn stopped(&self) -> bool {
        match stat_fields(self.pid) {
            Some((state, start)) => {
                (state == 'T' || state == 't')
                    && (self.start_ticks == 0 || start == self.start_ticks)
            }
            None => false,
        }
    }

    /// SIGKILLs this process through a pidfd, so a pid reused after the
    /// check can never receive the signal; false if it is not there (or
    /// is another process now) or the kill was refused.
    pub fn kill_through_pidfd(&self) -> bool {
        let Some(fd) = pidfd_open(self.pid) else {
            return false;
        };
        // The pidfd pins the process: if the start time still matches now,
        // the signal reaches exactly the process we mean.
        if self.start_ticks != 0 && start_ticks(self.pid) != Some(self.start_ticks) {
            return false;
        }
        // SAFETY: pidfd_send_signal takes a pidfd, a signal, a null info
        // pointer and flags 0.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        r == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let line = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(line), Some(('S', 987654)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) R 1 2"), None);
    }

    #[test]
    fn a_reused_pid_is_not_the_same_process() {
        let me = ProcessId::current();
        assert!(me.alive());
        assert!(me.start_ticks > 0, "this machine has /proc");
        let impostor = ProcessId {
            pid: me.pid,
            start_ticks: me.start_ticks + 1,
        };
        assert!(!impostor.alive());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let id = ProcessId {
            pid: child.id() as i32,
            start_ticks: start_ticks(child.id() as i32).unwrap_or(1),
        };
        child.wait().unwrap();
        assert!(!id.alive(), "an exited (reaped) child is gone");
    }
}
