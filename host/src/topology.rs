//! CPU topology and NUMA placement through hwloc 2 (`hwlocality`).

use hwlocality::object::types::ObjectType;
use hwlocality::Topology;

/// Where a core sits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Cores the OS reports.
    pub cores_online: usize,
    /// NUMA node of the core, if hwloc knows.
    pub numa_node: Option<usize>,
    /// Other processing units sharing the core (SMT siblings).
    pub smt_siblings: Vec<usize>,
}

/// Looks up `core` (an OS processor index) in the machine's topology.
/// Errors are reported as `None` fields: placement is informative.
pub fn placement(core: Option<usize>) -> Placement {
    let Ok(topology) = Topology::new() else {
        return Placement::default();
    };
    let cores_online = topology.objects_with_type(ObjectType::PU).count();
    let Some(core) = core else {
        return Placement {
            cores_online,
            ..Placement::default()
        };
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
    Placement {
        cores_online,
        numa_node,
        smt_siblings,
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
        let none = placement(None);
        assert_eq!(none.numa_node, None);
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
