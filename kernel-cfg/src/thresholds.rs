//! Every number the checks and the plan compare against, in one place.
//!
//! The anchor is uKharon §4.2: a replica's heartbeat counter was incremented
//! every 5 µs under load and never more than 15 µs apart, on a NO_HZ_FULL
//! kernel booted with `isolcpus`. Anything that can stall the polling core
//! for a sizeable fraction of 15 µs is flagged.

/// The largest gap, in nanoseconds, a busy-polling replica core may suffer.
/// uKharon §4.2 measured "never more than 15 µs" between heartbeat
/// increments and sized its failure detector (30 µs between RDMA READs) on
/// that bound; `jitter` counts the gaps above it.
pub const GAP_NS_BOUND: u64 = 15_000;

/// The largest C-state exit latency, in microseconds, allowed on a chosen
/// core. C1 (halt) exits in 1–2 µs; C1E needs ~10 µs and C6 ~100 µs, which
/// would eat most or all of the 15 µs bound if the core ever idled (e.g.
/// between replica restarts, or when the replica blocks). The plan's
/// `processor.max_cstate=1 intel_idle.max_cstate=0` leaves only POLL and C1.
pub const CSTATE_EXIT_LATENCY_US_MAX: u64 = 2;

/// Huge pages, in bytes, that should be reserved for registered memory.
/// A replica registers its log ring, SST rows and consensus slots with the
/// NIC; 1 GiB covers a log of a few hundred thousand small entries with room
/// to spare and is 512 pages of 2 MiB. Huge pages keep the NIC's
/// translation table (MTT) small and avoid TLB misses on the polling path.
pub const HUGEPAGES_BYTES_MIN: u64 = 1 << 30;

/// The default huge page size, in bytes, used when the plan reserves pages
/// (`hugepages=N` on the command line reserves pages of this size on x86).
pub const HUGEPAGE_BYTES_DEFAULT: u64 = 2 << 20;

/// Locked memory, in bytes, below which registration is certain to fail.
/// `ibv_reg_mr` pins every registered page against RLIMIT_MEMLOCK; below
/// 64 MiB not even the queue pairs and a small log fit. Below this: Fail.
pub const MEMLOCK_BYTES_FAIL_BELOW: u64 = 64 << 20;

/// Locked memory, in bytes, that is enough: all of the reserved huge pages
/// ([`HUGEPAGES_BYTES_MIN`]) can be registered. Between the two thresholds:
/// Warn; at or above (or unlimited): Ok. The plan asks for unlimited.
pub const MEMLOCK_BYTES_OK: u64 = HUGEPAGES_BYTES_MIN;

/// The planned `kernel.timer_migration`: 0 keeps timers on the cpu that
/// armed them instead of migrating them (possibly onto an isolated core).
pub const SYSCTL_TIMER_MIGRATION: u64 = 0;

/// The planned `vm.stat_interval`, in seconds: the vmstat worker wakes every
/// cpu this often (default 1 s); 120 s makes that interruption rare. Any
/// value at or above this passes.
pub const SYSCTL_STAT_INTERVAL_S_MIN: u64 = 120;

/// Largest number of bytes read from one procfs/sysfs/config file. The
/// files we read are a few KiB; a bound keeps a recorded tree with a huge
/// file from exhausting memory.
pub const FILE_BYTES_MAX: u64 = 16 << 20;

/// Largest number of directory entries looked at in one directory (IRQs,
/// RDMA devices, cpuidle states, huge page sizes). Real hosts have a few
/// thousand IRQs at most.
pub const DIR_ENTRIES_MAX: usize = 65_536;

/// Largest number of offending entries spelled out in one item's `found`
/// text; the rest are counted ("... and 12 more").
pub const FOUND_LIST_MAX: usize = 12;

/// Longest `jitter` run, in seconds. Long enough to catch rare periodic
/// stalls (vmstat, watchdog), short enough that a typo cannot pin a core for
/// hours.
pub const JITTER_SECONDS_MAX: f64 = 3600.0;

/// Number of worst gaps `jitter` reports.
pub const JITTER_WORST_GAP_COUNT: usize = 10;
