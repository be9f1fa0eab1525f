//! Rules on RDMA devices and their NUMA placement relative to the cores.

use super::*;

/// RDMA devices and their NUMA node (`None`: unknown or `-1`).
fn rdma_devices(tree: &HostTree) -> Result<Vec<(String, Option<usize>)>, ReadError> {
    let names = tree.list_dir(PATH_INFINIBAND)?;
    Ok(names
        .into_iter()
        .map(|name| {
            let node = tree
                .read_trimmed(&format!("{PATH_INFINIBAND}/{name}/device/numa_node"))
                .ok()
                .and_then(|text| text.parse::<usize>().ok());
            (name, node)
        })
        .collect())
}

pub(super) fn rule_rdma_devices(ctx: &Context) -> Item {
    let id = ID_RDMA_DEVICES;
    let fix = "install an RDMA NIC (e.g. ConnectX) and load its driver (mlx5_ib), or use \
               rdma_rxe (Soft-RoCE) for functional tests only";
    match rdma_devices(&ctx.tree) {
        Ok(devices) if !devices.is_empty() => {
            let list: Vec<String> = devices
                .iter()
                .map(|(name, node)| match node {
                    Some(node) => format!("{name} (node {node})"),
                    None => format!("{name} (node unknown)"),
                })
                .collect();
            Item::new(
                id,
                Status::Ok,
                match devices.len() {
                    1 => "1 RDMA device".to_owned(),
                    count => format!("{count} RDMA devices"),
                },
                bounded_list(&list),
            )
        }
        Ok(_) => Item::new(
            id,
            Status::Warn,
            "no RDMA device".into(),
            format!("{} is empty", ctx.shown(PATH_INFINIBAND)),
        )
        .with_fix(fix),
        Err(error) => {
            Item::new(id, Status::Warn, "no RDMA device".into(), error.to_string()).with_fix(fix)
        }
    }
}

/// NUMA node of each cpu, from `sys/devices/system/node/node*/cpulist`.
fn cpu_nodes(tree: &HostTree) -> BTreeMap<usize, usize> {
    let mut nodes = BTreeMap::new();
    for name in tree.list_dir(PATH_NODES).unwrap_or_default() {
        let Some(node) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        if let Ok(cpus) = tree.read_cpus(&format!("{PATH_NODES}/{name}/cpulist")) {
            for &cpu in cpus.cpus() {
                nodes.insert(cpu, node);
            }
        }
    }
    nodes
}

pub(super) fn rule_rdma_numa(ctx: &Context) -> Item {
    let id = ID_RDMA_NUMA;
    if ctx.cores.is_empty() {
        return no_cores(id);
    }
    let devices = match rdma_devices(&ctx.tree) {
        Ok(devices) if !devices.is_empty() => devices,
        _ => {
            return Item::new(
                id,
                Status::Skip,
                "no RDMA device to place".into(),
                "see rdma.devices".into(),
            )
        }
    };
    let device_nodes: Vec<usize> = devices.iter().filter_map(|(_, node)| *node).collect();
    if device_nodes.is_empty() {
        return Item::new(
            id,
            Status::Ok,
            "the RDMA devices report no NUMA node (single-node host)".into(),
            "numa_node = -1 for every device".into(),
        );
    }
    let nodes = cpu_nodes(&ctx.tree);
    let mut remote = Vec::new();
    let mut unknown = Vec::new();
    for &core in ctx.cores.cpus() {
        match nodes.get(&core) {
            Some(node) if device_nodes.contains(node) => {}
            Some(node) => remote.push(format!("core {core} is on node {node}")),
            None => unknown.push(core),
        }
    }
    let devices_text: Vec<String> = devices
        .iter()
        .filter_map(|(name, node)| node.map(|n| format!("{name} on node {n}")))
        .collect();
    if !remote.is_empty() {
        let local: CpuSet = nodes
            .iter()
            .filter(|(_, node)| device_nodes.contains(node))
            .map(|(cpu, _)| *cpu)
            .collect();
        return Item::new(
            id,
            Status::Warn,
            "some replica cores are on a different NUMA node than every RDMA device".into(),
            format!("{}; {}", bounded_list(&devices_text), bounded_list(&remote)),
        )
        .with_fix(format!(
            "pin replicas to cpus on the NIC's node ({}), and allocate their memory there \
             (uKharon §7 keeps every thread on the NIC's socket)",
            display_set(&local)
        ));
    }
    if !unknown.is_empty() {
        return Item::new(
            id,
            Status::Skip,
            "cannot tell the NUMA node of some replica cores".into(),
            format!(
                "{}; no {}/node*/cpulist lists cpus {}",
                bounded_list(&devices_text),
                ctx.shown(PATH_NODES),
                unknown.iter().collect::<CpuSet>()
            ),
        );
    }
    Item::new(
        id,
        Status::Ok,
        "every replica core shares a NUMA node with an RDMA device".into(),
        bounded_list(&devices_text),
    )
}
