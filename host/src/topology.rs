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
}
