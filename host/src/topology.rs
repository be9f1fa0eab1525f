//! CPU topology and NUMA placement: from Linux's `/sys` by default, or
//! through hwloc 2 (`hwlocality`) with the `hwloc` feature (it needs
//! `libhwloc-dev`; the default build needs nothing but the Rust toolchain).
//! The replica logs which source it used.

use std::path::Path;

/// Where a core sits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Cores the OS reports.
    pub cores_online: usize,
    /// NUMA node of the core, if known.
    pub numa_node: Option<usize>,
    /// Other processing units sharing the core (SMT siblings).
    pub smt_siblings: Vec<usize>,
    /// Where this came from: "hwloc", "sysfs", or "unknown".
    pub source: &'static str,
}

/// Looks up `core` (an OS processor index) in the machine's topology.
/// Errors are reported as `None` fields: placement is informative.
pub fn placement(core: Option<usize>) -> Placement {
    #[cfg(feature = "hwloc")]
    if let Some(p) = hwloc::placement(core) {
        return p;
    }
    sysfs_placement(Path::new("/sys/devices/system"), core)
}

/// The placement read from a sysfs tree rooted at `system` (normally
/// `/sys/devices/system`): `cpu/online`, `cpu/cpuN/topology/
/// thread_siblings_list`, `node/nodeN/cpulist`.
pub fn sysfs_placement(system: &Path, core: Option<usize>) -> Placement {
    use verbatim_kernel_cfg::cpulist::CpuSet;
    let read_set = |p: &Path| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|t| CpuSet::parse(t.trim()).ok())
    };
    let Some(online) = read_set(&system.join("cpu/online")) else {
        return Placement {
            source: "unknown",
            ..Placement::default()
        };
    };
    let mut p = Placement {
        cores_online: online.len(),
        source: "sysfs",
        ..Placement::default()
    };
    let Some(core) = core else {
        return p;
    };
    p.smt_siblings = read_set(&system.join(format!("cpu/cpu{core}/topology/thread_siblings_list")))
        .map(|s| s.cpus().iter().copied().filter(|&c| c != core).collect())
        .unwrap_or_default();
    if let Ok(dir) = std::fs::read_dir(system.join("node")) {
        let mut nodes: Vec<usize> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
            .collect();
        nodes.sort_unstable();
        p.numa_node = nodes.into_iter().find(|n| {
            read_set(&system.join(format!("node/node{n}/cpulist")))
                .is_some_and(|s| s.contains(core))
        });
    }
    p
}

#[cfg(feature = "hwloc")]
mod hwloc {
    use super::Placement;
    use hwlocality::object::types::ObjectType;
    use hwlocality::Topology;

    pub fn placement(core: Option<usize>) -> Option<Placement> {
        let topology = Topology::new().ok()?;
        let cores_online = topology.objects_with_type(ObjectType::PU).count();
        let Some(core) = core else {
            return Some(Placement {
                cores_online,
                source: "hwloc",
                ..Placement::default()
            });
        };
        let numa_node = topology
            .objects_with_type(ObjectType::NUMANode)
            .find_map(|node| {
                let set = node.cpuset()?;
                set.is_set(core).then(|| node.os_index()).flatten()
            });
        let smt_siblings = topology
            .objects_with_type(ObjectType::Core)
            .find(|c| c.cpuset().is_some_and(|s| s.is_set(core)))
            .and_then(|c| {
                c.cpuset().map(|s| {
                    s.iter_set()
                        .map(usize::from)
                        .filter(|&p| p != core)
                        .collect()
                })
            })
            .unwrap_or_default();
        Some(Placement {
            cores_online,
            numa_node,
            smt_siblings,
            source: "hwloc",
        })
    }
}

/// Asks the scheduler for a short time slice for the calling thread
/// (`sched_setattr` with `sched_runtime`, honoured by EEVDF since Linux
/// 6.12; older kernels ignore or refuse it). A parked replica woken by its
/// doorbell then preempts whatever shares its core at once instead of
/// waiting out that task's slice (up to ~3 ms): that matters when replicas
/// share cores, and most at a failover, when a dying peer's teardown runs
/// on the same core. Returns whether the kernel accepted it.
pub fn request_short_slice(slice_ns: u64) -> bool {
    /// `struct sched_attr` (linux/sched/types.h), first version fields.
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        sched_policy: u32,
        sched_flags: u64,
        sched_nice: i32,
        sched_priority: u32,
        sched_runtime: u64,
        sched_deadline: u64,
        sched_period: u64,
    }
    let mut attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: 0,
        sched_runtime: slice_ns,
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: nice 0 unless the thread has another: keep it.
    attr.sched_nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    // SAFETY: sched_setattr(0 = this thread, valid attr of `size` bytes, 0).
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &mut attr as *mut SchedAttr, 0) };
    rc == 0
}

/// Nice value of gateway and status threads: the scheduler prefers the
/// poll loops when they compete for a core (issue 12 item 8: fifty busy
/// RESP connections must not delay a leader's heartbeats into an election).
pub const HELPER_NICE: i32 = 10;

/// Lowers the calling thread's scheduling priority to [`HELPER_NICE`]
/// (Linux: a thread's nice value is its own). Best effort: a failure is
/// logged once per thread at debug level.
pub fn lower_thread_priority() {
    // SAFETY: setpriority has no memory preconditions; PRIO_PROCESS with
    // who = 0 means the calling thread on Linux.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, HELPER_NICE) };
    if r != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "could not lower a helper thread's priority");
    }
}

/// Restricts the calling thread to every CPU it may use except
/// `poll_core`, so that the helper threads it spawns next (pidfd watcher,
/// status and RESP servers, verbs exchange) inherit a mask that keeps them
/// off the core the poll loop is about to own; otherwise the scheduler may
/// place them there and every wake-up preempts the busy-polling leader.
/// Returns the CPUs left to the helpers, or `None` when there is no other
/// CPU (then helpers share the poll core, which still works).
pub fn keep_helpers_off(poll_core: usize) -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a valid, writable cpu_set_t of `size` bytes; pid 0
    // means the calling thread.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return None;
    }
    let cpus_max = 8 * size;
    let mut helpers = Vec::new();
    for cpu in 0..cpus_max {
        // SAFETY: cpu < CPU_SETSIZE, the capacity of `set`.
        if cpu != poll_core && unsafe { libc::CPU_ISSET(cpu, &set) } {
            helpers.push(cpu);
        }
    }
    if helpers.is_empty() {
        return None;
    }
    if poll_core < cpus_max {
        // SAFETY: poll_core < CPU_SETSIZE, the capacity of `set`.
        unsafe { libc::CPU_CLR(poll_core, &mut set) };
    }
    // SAFETY: as above; the set is non-empty and a subset of the current one.
    if unsafe { libc::sched_setaffinity(0, size, &set) } != 0 {
        return None;
    }
    Some(helpers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_zero_is_found() {
        let p = placement(Some(0));
        assert!(p.cores_online >= 1);
        assert!(!p.smt_siblings.contains(&0));
        assert_ne!(p.source, "unknown");
        let none = placement(None);
        assert_eq!(none.numa_node, None);
    }

    #[test]
    fn a_sysfs_tree_gives_cores_siblings_and_node() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path();
        let write = |rel: &str, text: &str| {
            let p = sys.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write("cpu/online", "0-7\n");
        write("cpu/cpu5/topology/thread_siblings_list", "1,5\n");
        write("node/node0/cpulist", "0-3\n");
        write("node/node1/cpulist", "4-7\n");
        let p = sysfs_placement(sys, Some(5));
        assert_eq!(
            p,
            Placement {
                cores_online: 8,
                numa_node: Some(1),
                smt_siblings: vec![1],
                source: "sysfs",
            }
        );
        // No NUMA directory (a VM without it): no node, still the rest.
        std::fs::remove_dir_all(sys.join("node")).unwrap();
        assert_eq!(sysfs_placement(sys, Some(5)).numa_node, None);
        // No topology at all: says so.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(sysfs_placement(empty.path(), Some(0)).source, "unknown");
    }

    fn current_cpus() -> Vec<usize> {
        // SAFETY: as in keep_helpers_off.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: valid writable set of `size` bytes, calling thread.
        assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut set) }, 0);
        // SAFETY: cpu < CPU_SETSIZE.
        (0..8 * size)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    }

    #[test]
    fn helper_threads_inherit_a_mask_without_the_poll_core() {
        // On a thread of its own: the mask must not leak into other tests.
        std::thread::spawn(|| {
            let before = current_cpus();
            let poll_core = *before.last().expect("at least one CPU");
            match keep_helpers_off(poll_core) {
                None => assert_eq!(before.len(), 1, "refused although other CPUs exist"),
                Some(helpers) => {
                    assert!(!helpers.contains(&poll_core));
                    assert_eq!(helpers.len(), before.len() - 1);
                    let inherited = std::thread::spawn(current_cpus).join().unwrap();
                    assert_eq!(inherited, helpers, "a spawned helper inherits the mask");
                }
            }
        })
        .join()
        .unwrap();
    }
}
