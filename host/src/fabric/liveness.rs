//! Which peers are alive, as the host learns it: a peer's death notice
//! (a robust futex its poll thread holds, released early in the kernel's
//! exit path, ~0.05–0.4 ms after a SIGKILL here), one waiter thread per
//! peer; and as a fallback its pidfd (Linux ≥ 5.3), readable only once the
//! whole process is torn down (1–3 ms). A stopped (SIGSTOP) peer is not
//! dead. The fabrics report operations to a dead peer as `Unreachable` and
//! the driver tells the engines (`handle_peer_down`).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use verbatim_client::notice::{NoticeWait, NoticeWatch};
use verbatim_client::process::pidfd_open;
use verbatim_core::fabric::{MemberId, MAX_MEMBERS};

/// How a peer's death was learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DeathSeen {
    /// Its death notice (robust futex, early in the kernel's exit path).
    Notice = 1,
    /// Its pidfd (after the kernel tore the process down).
    Pidfd = 2,
}

impl DeathSeen {
    /// The label used in status and failover records.
    pub fn label(self) -> &'static str {
        match self {
            DeathSeen::Notice => "notice",
            DeathSeen::Pidfd => "pidfd",
        }
    }
}

/// Which peers are known dead; written by the watcher threads.
#[derive(Default)]
pub struct PeerLiveness {
    dead: [AtomicBool; MAX_MEMBERS],
    /// Peers that died since the poll loop last looked (bitmask).
    newly_dead: AtomicU64,
    /// Peers that run again (a new process) since the poll loop last
    /// looked (bitmask).
    newly_up: AtomicU64,
    /// When each peer was seen to die (ns since `epoch`).
    died_at: [AtomicU64; MAX_MEMBERS],
    /// `DeathSeen` of the detector that saw it first (0: none).
    seen_by: [AtomicU8; MAX_MEMBERS],
    /// The process each peer runs as (0: not known yet). A death report
    /// about another pid is about a previous incarnation (a pidfd fires
    /// only after the whole teardown, possibly after the peer restarted)
    /// and is ignored.
    pid: [std::sync::atomic::AtomicI32; MAX_MEMBERS],
    /// The replica's clock, set by `spawn_watcher`.
    epoch: OnceLock<Instant>,
    watch: Mutex<Vec<(MemberId, i32)>>,
    stop: AtomicBool,
}

impl PeerLiveness {
    /// True once the peer's process exited.
    pub fn is_dead(&self, m: MemberId) -> bool {
        m.index() < MAX_MEMBERS && self.dead[m.index()].load(Ordering::Acquire)
    }

    /// True when a peer died since [`PeerLiveness::take_newly_dead`] was
    /// last called (one load: the poll loop asks every step).
    #[inline]
    pub fn any_newly_dead(&self) -> bool {
        self.newly_dead.load(Ordering::Acquire) != 0
    }

    /// Peers that died since the last call.
    pub fn take_newly_dead(&self) -> Vec<MemberId> {
        // Polled on every iteration: read before the read-modify-write.
        if self.newly_dead.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let bits = self.newly_dead.swap(0, Ordering::AcqRel);
        (0..MAX_MEMBERS as u8)
            .filter(|m| bits & (1 << m) != 0)
            .map(MemberId)
            .collect()
    }

    /// One peer that runs again since it was last taken, if any.
    pub fn take_newly_up(&self) -> Option<MemberId> {
        let mut bits = self.newly_up.load(Ordering::Acquire);
        while bits != 0 {
            let low = bits & bits.wrapping_neg();
            match self.newly_up.compare_exchange(
                bits,
                bits & !low,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(MemberId(low.trailing_zeros() as u8)),
                Err(now) => bits = now,
            }
        }
        None
    }

    /// A dead peer's place was taken by a new process `pid` (a restart):
    /// it is alive again, and the poll loop is told once.
    pub fn revive(&self, m: MemberId, pid: i32) {
        if m.index() >= MAX_MEMBERS {
            return;
        }
        // First: from now on, reports about the old process are stale.
        self.pid[m.index()].store(pid, Ordering::Release);
        self.died_at[m.index()].store(0, Ordering::Release);
        self.seen_by[m.index()].store(0, Ordering::Release);
        if self.dead[m.index()].swap(false, Ordering::AcqRel) {
            self.newly_dead.fetch_and(!(1 << m.0), Ordering::AcqRel);
            self.newly_up.fetch_or(1 << m.0, Ordering::AcqRel);
        }
    }

    /// Starts watching a peer's process.
    pub fn watch(&self, m: MemberId, pid: i32) {
        if m.index() < MAX_MEMBERS {
            self.pid[m.index()].store(pid, Ordering::Release);
        }
        self.watch.lock().expect("watch list").push((m, pid));
    }

    /// Reports a peer's process gone (a fabric that learns it another way
    /// than a pidfd, e.g. its connection closed by the peer's kernel).
    pub fn mark_dead(&self, m: MemberId) {
        if m.index() >= MAX_MEMBERS {
            return;
        }
        if !self.dead[m.index()].swap(true, Ordering::AcqRel) {
            self.newly_dead.fetch_or(1 << m.0, Ordering::AcqRel);
        }
    }

    /// Records the death of process `pid` of peer `m`, seen by `how` now,
    /// unless another detector saw it first, and reports it to the poll
    /// loop. Ignored when `m` runs as another process by now.
    pub fn record_death(&self, m: MemberId, pid: i32, how: DeathSeen) {
        if m.index() >= MAX_MEMBERS {
            return;
        }
        let current = self.pid[m.index()].load(Ordering::Acquire);
        if current != 0 && pid != current {
            tracing::debug!(
                peer = m.0,
                pid,
                current,
                "death of a previous incarnation ignored"
            );
            return;
        }
        let now = self
            .epoch
            .get()
            .map_or(0, |e| e.elapsed().as_nanos() as u64)
            .max(1);
        if self.died_at[m.index()]
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.seen_by[m.index()].store(how as u8, Ordering::Release);
        }
        self.mark_dead(m);
    }

    /// Monotonic time of death (ns on the replica's clock), 0 when
    /// unknown.
    pub fn died_at_ns(&self, m: MemberId) -> u64 {
        self.died_at[m.index()].load(Ordering::Acquire)
    }

    /// Which detector saw the peer's death first, if one did.
    pub fn death_seen_by(&self, m: MemberId) -> Option<DeathSeen> {
        match self.seen_by.get(m.index())?.load(Ordering::Acquire) {
            1 => Some(DeathSeen::Notice),
            2 => Some(DeathSeen::Pidfd),
            _ => None,
        }
    }

    /// True once the watchers were asked to stop.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Stops the watcher thread.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Rings the poll loop's doorbell, so a parked loop notices a death at
/// once.
pub type Wake = Arc<dyn Fn() + Send + Sync>;

/// Spawns the thread that turns peer process exits into `dead` flags and
/// rings `wake` (our own doorbell) so a parked poll loop notices at once.
pub fn spawn_watcher(
    liveness: Arc<PeerLiveness>,
    wake: Wake,
    clock: Instant,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let _ = liveness.epoch.set(clock);
    std::thread::Builder::new()
        .name("verbatim-pidfd".into())
        .spawn(move || {
            let mut watched: Vec<(MemberId, i32, OwnedFd)> = Vec::new();
            while !liveness.stop.load(Ordering::Acquire) {
                for (m, pid) in liveness.watch.lock().expect("watch list").drain(..) {
                    // A new watch of a member replaces its old one.
                    watched.retain(|(w, _, _)| *w != m);
                    match pidfd_open(pid) {
                        Some(fd) => watched.push((m, pid, fd)),
                        None => {
                            liveness.record_death(m, pid, DeathSeen::Pidfd);
                            wake();
                        }
                    }
                }
                let mut fds: Vec<libc::pollfd> = watched
                    .iter()
                    .map(|(_, _, fd)| libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
                // 50 ms: how soon a newly registered pid is picked up; exits
                // themselves wake the poll at once.
                // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs.
                let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
                if n > 0 {
                    let mut i = 0;
                    while i < fds.len() {
                        if fds[i].revents != 0 {
                            let (m, pid, _) = watched.remove(i);
                            fds.remove(i);
                            liveness.record_death(m, pid, DeathSeen::Pidfd);
                            wake();
                        } else {
                            i += 1;
                        }
                    }
                }
            }
        })
}

/// Spawns a thread that waits on `peer`'s death notice for us (`me`) and
/// reports the death the moment the kernel marks it, well before the
/// pidfd fires (see `verbatim_client::notice`). Ends when the liveness watchers stop.
pub fn spawn_notice_waiter(
    liveness: Arc<PeerLiveness>,
    wake: Wake,
    me: MemberId,
    peer: MemberId,
    watch: NoticeWatch,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("verbatim-notice-{}", peer.0))
        .spawn(move || {
            // A short slice lets the wake-up preempt at once. Not a
            // real-time policy: when our own process is killed this thread
            // may be the last one out, and the kernel's teardown of the
            // whole address space would then run at real-time priority,
            // starving the survivors and clients on its core.
            crate::topology::request_short_slice(100_000);
            let owner_pid = watch.owner_pid();
            let stop = &liveness.stop;
            match watch.wait_owner_gone(me, stop, Duration::from_millis(50)) {
                NoticeWait::OwnerGone => {
                    liveness.record_death(peer, owner_pid, DeathSeen::Notice);
                    wake();
                }
                NoticeWait::Stopped => {}
                NoticeWait::Unusable => {
                    tracing::debug!(peer = peer.0, "death notice unusable; the pidfd remains");
                }
            }
        })
        .map(drop)
}
