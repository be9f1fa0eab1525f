//! Every `check` rule: Ok on the tuned tree, Warn/Fail on the untuned tree
//! or on a copy of the tuned tree with one thing changed.

mod common;

use std::io::Write as _;

use common::*;
use verbatim_kernel_cfg::check::*;
use verbatim_kernel_cfg::{Report, Status};

const CMDLINE: &str = "proc/cmdline";

#[test]
fn tuned_tree_passes_every_rule() {
    let report = check_root(&fixture("tuned-8core"));
    assert_eq!(report.cores.to_string(), "2-3");
    for id in ITEM_IDS {
        assert_status(&report, id, Status::Ok);
    }
    assert_eq!(report.items.len(), ITEM_IDS.len());
    assert_eq!(report.worst(), Status::Ok);
    assert_eq!(report.exit_code(), 0);
}

/// The untuned tree is this (2-cpu VM) machine as recorded: every tuning
/// the replica needs is missing.
#[test]
fn untuned_tree_says_what_is_not_tuned() {
    let report = check_root(&fixture("untuned-2core"));
    assert_eq!(report.cores.to_string(), "1");
    let expected = [
        (ID_CORES, Status::Ok),
        (ID_CMDLINE_ISOLCPUS, Status::Fail),
        (ID_CMDLINE_NOHZ_FULL, Status::Fail),
        (ID_CMDLINE_RCU_NOCBS, Status::Warn),
        (ID_CMDLINE_IRQAFFINITY, Status::Warn),
        (ID_CMDLINE_IDLE, Status::Warn),
        (ID_KERNEL_NO_HZ_FULL, Status::Fail),
        (ID_SYSFS_ISOLATED, Status::Fail),
        (ID_SYSFS_NOHZ_FULL, Status::Fail),
        (ID_IRQ_AFFINITY, Status::Warn),
        (ID_IRQ_DEFAULT_AFFINITY, Status::Warn),
        // A VM has no cpufreq: nothing to check.
        (ID_CPU_GOVERNOR, Status::Skip),
        // haltpoll exits in 1 µs: fine.
        (ID_CPU_CSTATES, Status::Ok),
        (ID_CPU_SMT, Status::Ok),
        (ID_MM_THP, Status::Ok),
        (ID_MM_HUGEPAGES, Status::Warn),
        (ID_LIMITS_MEMLOCK, Status::Fail),
        (ID_SYSCTL_TIMER_MIGRATION, Status::Warn),
        (ID_SYSCTL_STAT_INTERVAL, Status::Warn),
        (ID_RDMA_DEVICES, Status::Warn),
        (ID_RDMA_NUMA, Status::Skip),
    ];
    assert_eq!(expected.len(), ITEM_IDS.len());
    for (id, status) in expected {
        assert_status(&report, id, status);
    }
    assert_eq!(report.worst(), Status::Fail);
    assert_eq!(report.exit_code(), 1);
    // Every item that is not Ok says what to do.
    for item in &report.items {
        if matches!(item.status, Status::Warn | Status::Fail) {
            assert!(item.fix.is_some(), "{} has no fix", item.id);
        }
    }
}

fn tuned() -> tempfile::TempDir {
    copy_fixture("tuned-8core")
}

fn with_cmdline(from: &str, to: &str) -> Report {
    let dir = tuned();
    edit(dir.path(), CMDLINE, from, to);
    check_root(dir.path())
}

#[test]
fn cores_not_online_or_leaving_no_housekeeping() {
    let root = fixture("tuned-8core");
    let report = check_cores(&root, &[2, 9]);
    assert_status(&report, ID_CORES, Status::Fail);
    assert!(item(&report, ID_CORES)
        .summary
        .contains("core 9 is not online"));
    assert_status(
        &check_cores(&root, &[0, 1, 2, 3, 4, 5, 6, 7]),
        ID_CORES,
        Status::Warn,
    );
    let empty = check_cores(&root, &[]);
    assert_status(&empty, ID_CORES, Status::Fail);
    assert_status(&empty, ID_CMDLINE_NOHZ_FULL, Status::Skip);
}

#[test]
fn default_cores_come_from_isolcpus_when_sysfs_is_empty() {
    let dir = tuned();
    write(dir.path(), "sys/devices/system/cpu/isolated", "\n");
    let report = check_root(dir.path());
    assert_eq!(report.cores.to_string(), "2-3");
    assert!(report.cores_source.contains("isolcpus"));
    assert_status(&report, ID_SYSFS_ISOLATED, Status::Fail);
}

#[test]
fn isolcpus_missing_partial_flagless_or_garbage() {
    let missing = with_cmdline("isolcpus=nohz,domain,managed_irq,2-3 ", "");
    assert_status(&missing, ID_CMDLINE_ISOLCPUS, Status::Fail);
    let partial = with_cmdline("managed_irq,2-3", "managed_irq,2");
    assert_status(&partial, ID_CMDLINE_ISOLCPUS, Status::Fail);
    let no_domain = with_cmdline("nohz,domain,managed_irq,2-3", "nohz,2-3");
    assert_status(&no_domain, ID_CMDLINE_ISOLCPUS, Status::Warn);
    let plain = with_cmdline("nohz,domain,managed_irq,2-3", "2-3");
    assert_status(&plain, ID_CMDLINE_ISOLCPUS, Status::Ok);
    let garbage = with_cmdline("managed_irq,2-3", "managed_irq,two");
    assert_status(&garbage, ID_CMDLINE_ISOLCPUS, Status::Fail);
    assert!(item(&garbage, ID_CMDLINE_ISOLCPUS)
        .found
        .contains("`two` is not a cpu number"));
}

#[test]
fn nohz_full_must_cover_the_cores() {
    let partial = with_cmdline("nohz_full=2-3", "nohz_full=3");
    assert_status(&partial, ID_CMDLINE_NOHZ_FULL, Status::Fail);
    assert!(item(&partial, ID_CMDLINE_NOHZ_FULL)
        .summary
        .contains("leaves core 2 out"));
}

#[test]
fn rcu_nocbs_is_implied_by_nohz_full() {
    let implied = with_cmdline("rcu_nocbs=2-3 ", "");
    assert_status(&implied, ID_CMDLINE_RCU_NOCBS, Status::Ok);
    assert!(item(&implied, ID_CMDLINE_RCU_NOCBS)
        .summary
        .contains("implied"));
    let dir = tuned();
    edit(dir.path(), CMDLINE, "rcu_nocbs=2-3 ", "");
    edit(dir.path(), CMDLINE, "nohz_full=2-3 ", "");
    assert_status(&check_root(dir.path()), ID_CMDLINE_RCU_NOCBS, Status::Warn);
}

#[test]
fn irqaffinity_must_avoid_the_cores() {
    let hits = with_cmdline("irqaffinity=0-1,4-7", "irqaffinity=0-7");
    assert_status(&hits, ID_CMDLINE_IRQAFFINITY, Status::Warn);
    let missing = with_cmdline("irqaffinity=0-1,4-7 ", "");
    assert_status(&missing, ID_CMDLINE_IRQAFFINITY, Status::Warn);
}

#[test]
fn idle_limits() {
    let acpi_only = with_cmdline("intel_idle.max_cstate=0 ", "");
    assert_status(&acpi_only, ID_CMDLINE_IDLE, Status::Warn);
    assert!(item(&acpi_only, ID_CMDLINE_IDLE)
        .summary
        .contains("does not limit intel_idle"));
    let deep = with_cmdline("processor.max_cstate=1", "processor.max_cstate=9");
    assert_status(&deep, ID_CMDLINE_IDLE, Status::Warn);
    let poll = with_cmdline("processor.max_cstate=1", "idle=poll");
    assert_status(&poll, ID_CMDLINE_IDLE, Status::Ok);
}

#[test]
fn unreadable_cmdline_skips_not_panics() {
    let dir = tuned();
    remove(dir.path(), CMDLINE);
    let report = check_root(dir.path());
    assert_status(&report, ID_CMDLINE_ISOLCPUS, Status::Skip);
    assert_status(&report, ID_CMDLINE_IDLE, Status::Skip);
    // Not UTF-8: also a Skip, not a panic.
    std::fs::write(dir.path().join(CMDLINE), [0xff, 0xfe, 0x00]).unwrap();
    assert_status(&check_root(dir.path()), ID_CMDLINE_NOHZ_FULL, Status::Skip);
}

#[test]
fn kernel_config_without_no_hz_full_fails() {
    let dir = tuned();
    let config = "boot/config-5.15.0-verbatim-nohz";
    edit(
        dir.path(),
        config,
        "CONFIG_NO_HZ_FULL=y",
        "# CONFIG_NO_HZ_FULL is not set",
    );
    let report = check_root(dir.path());
    assert_status(&report, ID_KERNEL_NO_HZ_FULL, Status::Fail);
    assert!(item(&report, ID_KERNEL_NO_HZ_FULL)
        .found
        .contains("# CONFIG_NO_HZ_FULL is not set"));
}

#[test]
fn kernel_config_from_proc_config_gz() {
    let dir = tuned();
    remove(dir.path(), "boot");
    for (line, status) in [
        ("CONFIG_NO_HZ_FULL=y", Status::Ok),
        ("# CONFIG_NO_HZ_FULL is not set", Status::Fail),
    ] {
        let file = std::fs::File::create(dir.path().join("proc/config.gz")).unwrap();
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        writeln!(gz, "CONFIG_NO_HZ_COMMON=y\n{line}\nCONFIG_HZ=1000").unwrap();
        gz.finish().unwrap();
        let report = check_root(dir.path());
        assert_status(&report, ID_KERNEL_NO_HZ_FULL, status);
        assert!(item(&report, ID_KERNEL_NO_HZ_FULL)
            .found
            .contains("proc/config.gz"));
    }
    // A corrupt config.gz is unreadable, and sysfs still answers.
    write(dir.path(), "proc/config.gz", "not gzip");
    let report = check_root(dir.path());
    assert_status(&report, ID_KERNEL_NO_HZ_FULL, Status::Ok);
    assert!(item(&report, ID_KERNEL_NO_HZ_FULL)
        .found
        .contains("nohz_full exists"));
}

#[test]
fn kernel_config_unreadable_falls_back_to_sysfs_or_cannot_tell() {
    let dir = tuned();
    remove(dir.path(), "boot");
    assert_status(&check_root(dir.path()), ID_KERNEL_NO_HZ_FULL, Status::Ok);
    remove(dir.path(), "sys/devices/system/cpu/nohz_full");
    let report = check_root(dir.path());
    assert_status(&report, ID_KERNEL_NO_HZ_FULL, Status::Warn);
    assert!(item(&report, ID_KERNEL_NO_HZ_FULL)
        .summary
        .contains("cannot tell"));
}

#[test]
fn sysfs_isolated_and_nohz_full() {
    let dir = tuned();
    write(dir.path(), "sys/devices/system/cpu/isolated", "2\n");
    write(dir.path(), "sys/devices/system/cpu/nohz_full", "(null)\n");
    let report = check_cores(dir.path(), &[2, 3]);
    assert_status(&report, ID_SYSFS_ISOLATED, Status::Fail);
    assert_status(&report, ID_SYSFS_NOHZ_FULL, Status::Fail);
    write(dir.path(), "sys/devices/system/cpu/isolated", "2-x\n");
    remove(dir.path(), "sys/devices/system/cpu/nohz_full");
    let report = check_cores(dir.path(), &[2, 3]);
    assert_status(&report, ID_SYSFS_ISOLATED, Status::Warn);
    assert_status(&report, ID_SYSFS_NOHZ_FULL, Status::Fail);
}

#[test]
fn irq_whose_affinity_hits_a_core() {
    let dir = tuned();
    // Writing 0-3 to a (non-managed) IRQ lets the kernel pick any of those
    // cpus; here it picked core 2.
    write(dir.path(), "proc/irq/61/smp_affinity_list", "0-3\n");
    write(dir.path(), "proc/irq/61/effective_affinity_list", "2\n");
    let report = check_root(dir.path());
    assert_status(&report, ID_IRQ_AFFINITY, Status::Warn);
    let found = &item(&report, ID_IRQ_AFFINITY).found;
    assert!(found.contains("IRQ 61 -> 0-3"), "{found}");
    assert!(found.contains("mlx5_comp0"), "{found}");
    assert!(item(&report, ID_IRQ_AFFINITY)
        .fix
        .as_deref()
        .unwrap()
        .contains("echo 0-1,4-7 >"));
}

#[test]
fn managed_irqs_count_only_without_managed_irq_isolation() {
    // IRQs 41 (1-2) and 42 (3-4) are managed NVMe queues whose effective
    // affinity is a housekeeping cpu: fine with isolcpus=managed_irq.
    assert_status(
        &check_root(&fixture("tuned-8core")),
        ID_IRQ_AFFINITY,
        Status::Ok,
    );
    let report = with_cmdline("managed_irq,2-3", "2-3");
    assert_status(&report, ID_IRQ_AFFINITY, Status::Warn);
    assert!(item(&report, ID_IRQ_AFFINITY).summary.starts_with("2 IRQs"));
}

#[test]
fn default_irq_affinity_mask() {
    let dir = tuned();
    write(dir.path(), "proc/irq/default_smp_affinity", "ff\n");
    let report = check_root(dir.path());
    assert_status(&report, ID_IRQ_DEFAULT_AFFINITY, Status::Warn);
    assert!(item(&report, ID_IRQ_DEFAULT_AFFINITY)
        .fix
        .as_deref()
        .unwrap()
        .contains("echo f3 >"));
    write(dir.path(), "proc/irq/default_smp_affinity", "zz\n");
    assert_status(
        &check_root(dir.path()),
        ID_IRQ_DEFAULT_AFFINITY,
        Status::Warn,
    );
}

#[test]
fn powersave_governor_warns() {
    let dir = tuned();
    write(
        dir.path(),
        "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor",
        "powersave\n",
    );
    let report = check_root(dir.path());
    assert_status(&report, ID_CPU_GOVERNOR, Status::Warn);
    assert_eq!(item(&report, ID_CPU_GOVERNOR).found, "cpu3: powersave");
    // A governor on a housekeeping cpu does not matter.
    let dir = tuned();
    write(
        dir.path(),
        "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
        "powersave\n",
    );
    assert_status(&check_root(dir.path()), ID_CPU_GOVERNOR, Status::Ok);
}

#[test]
fn deep_enabled_cstate_warns() {
    let dir = tuned();
    let state = "sys/devices/system/cpu/cpu2/cpuidle/state2";
    write(dir.path(), &format!("{state}/name"), "C6\n");
    write(dir.path(), &format!("{state}/latency"), "133\n");
    write(dir.path(), &format!("{state}/disable"), "0\n");
    let report = check_root(dir.path());
    assert_status(&report, ID_CPU_CSTATES, Status::Warn);
    assert!(item(&report, ID_CPU_CSTATES)
        .found
        .contains("cpu2 C6 (133 µs)"));
    write(dir.path(), &format!("{state}/disable"), "1\n");
    assert_status(&check_root(dir.path()), ID_CPU_CSTATES, Status::Ok);
    // No cpuidle at all: Skip, unless idle=poll explains it.
    for cpu in 2..=3 {
        remove(
            dir.path(),
            &format!("sys/devices/system/cpu/cpu{cpu}/cpuidle"),
        );
    }
    assert_status(&check_root(dir.path()), ID_CPU_CSTATES, Status::Skip);
    edit(dir.path(), CMDLINE, "processor.max_cstate=1", "idle=poll");
    assert_status(&check_root(dir.path()), ID_CPU_CSTATES, Status::Ok);
}

#[test]
fn smt_sibling_running_other_work_or_shared() {
    let dir = tuned();
    let siblings =
        |cpu: usize| format!("sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list");
    // cpu6 (not isolated) is a hyperthread of core 2.
    write(dir.path(), &siblings(2), "2,6\n");
    write(dir.path(), &siblings(6), "2,6\n");
    let report = check_root(dir.path());
    assert_status(&report, ID_CPU_SMT, Status::Warn);
    assert!(item(&report, ID_CPU_SMT)
        .found
        .contains("sibling 6 of core 2 is not isolated"));

    // Two replica cores on one physical core.
    let dir = tuned();
    write(dir.path(), &siblings(2), "2-3\n");
    write(dir.path(), &siblings(3), "2-3\n");
    let report = check_root(dir.path());
    assert_status(&report, ID_CPU_SMT, Status::Warn);
    assert!(item(&report, ID_CPU_SMT)
        .found
        .contains("cores 2 and 3 share a physical core"));
    // One replica on core 2 with its isolated sibling 3 left idle: fine.
    assert_status(&check_cores(dir.path(), &[2]), ID_CPU_SMT, Status::Ok);
}

#[test]
fn thp_always_warns() {
    let dir = tuned();
    write(
        dir.path(),
        "sys/kernel/mm/transparent_hugepage/enabled",
        "[always] madvise never\n",
    );
    let report = check_root(dir.path());
    assert_status(&report, ID_MM_THP, Status::Warn);
    assert!(item(&report, ID_MM_THP).summary.contains("always"));
}

#[test]
fn hugepages_reserved() {
    let dir = tuned();
    write(
        dir.path(),
        "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
        "100\n",
    );
    assert_status(&check_root(dir.path()), ID_MM_HUGEPAGES, Status::Warn);
    // One 1 GiB page is enough too.
    write(
        dir.path(),
        "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages",
        "1\n",
    );
    assert_status(&check_root(dir.path()), ID_MM_HUGEPAGES, Status::Ok);
    // Without the sysfs directory, /proc/meminfo answers.
    remove(dir.path(), "sys/kernel/mm/hugepages");
    let report = check_root(dir.path());
    assert_status(&report, ID_MM_HUGEPAGES, Status::Ok);
    assert!(item(&report, ID_MM_HUGEPAGES).found.contains("meminfo"));
    remove(dir.path(), "proc/meminfo");
    assert_status(&check_root(dir.path()), ID_MM_HUGEPAGES, Status::Skip);
}

#[test]
fn memlock_limits() {
    let dir = tuned();
    let limits = "proc/self/limits";
    let unlimited = "Max locked memory         unlimited            unlimited";
    edit(
        dir.path(),
        limits,
        unlimited,
        "Max locked memory         65536                65536",
    );
    let report = check_root(dir.path());
    assert_status(&report, ID_LIMITS_MEMLOCK, Status::Fail);
    assert!(item(&report, ID_LIMITS_MEMLOCK).found.contains("64 KiB"));
    let dir = tuned();
    edit(
        dir.path(),
        limits,
        unlimited,
        "Max locked memory         268435456            268435456",
    );
    assert_status(&check_root(dir.path()), ID_LIMITS_MEMLOCK, Status::Warn);
    let dir = tuned();
    edit(
        dir.path(),
        limits,
        unlimited,
        "Max locked memory         lots                 lots",
    );
    assert_status(&check_root(dir.path()), ID_LIMITS_MEMLOCK, Status::Warn);
    remove(dir.path(), limits);
    assert_status(&check_root(dir.path()), ID_LIMITS_MEMLOCK, Status::Skip);
}

#[test]
fn sysctls() {
    let dir = tuned();
    write(dir.path(), "proc/sys/kernel/timer_migration", "1\n");
    write(dir.path(), "proc/sys/vm/stat_interval", "1\n");
    let report = check_root(dir.path());
    assert_status(&report, ID_SYSCTL_TIMER_MIGRATION, Status::Warn);
    assert_status(&report, ID_SYSCTL_STAT_INTERVAL, Status::Warn);
    write(dir.path(), "proc/sys/vm/stat_interval", "600\n");
    write(dir.path(), "proc/sys/kernel/timer_migration", "zero\n");
    let report = check_root(dir.path());
    assert_status(&report, ID_SYSCTL_STAT_INTERVAL, Status::Ok);
    assert_status(&report, ID_SYSCTL_TIMER_MIGRATION, Status::Warn);
}

#[test]
fn rdma_device_missing() {
    let dir = tuned();
    remove(dir.path(), "sys/class/infiniband/mlx5_0");
    let report = check_root(dir.path());
    assert_status(&report, ID_RDMA_DEVICES, Status::Warn);
    assert_status(&report, ID_RDMA_NUMA, Status::Skip);
}

#[test]
fn rdma_device_on_another_numa_node() {
    let dir = tuned();
    write(dir.path(), "sys/devices/system/node/node0/cpulist", "0-3\n");
    write(dir.path(), "sys/devices/system/node/node1/cpulist", "4-7\n");
    write(
        dir.path(),
        "sys/class/infiniband/mlx5_0/device/numa_node",
        "1\n",
    );
    let report = check_root(dir.path());
    assert_status(&report, ID_RDMA_NUMA, Status::Warn);
    let numa = item(&report, ID_RDMA_NUMA);
    assert!(numa.found.contains("mlx5_0 on node 1"), "{}", numa.found);
    assert!(numa.fix.as_deref().unwrap().contains("(4-7)"));
    // Cores on the NIC's node are fine.
    assert_status(&check_cores(dir.path(), &[4, 5]), ID_RDMA_NUMA, Status::Ok);
    // numa_node -1: the device does not know; nothing to warn about.
    write(
        dir.path(),
        "sys/class/infiniband/mlx5_0/device/numa_node",
        "-1\n",
    );
    assert_status(&check_root(dir.path()), ID_RDMA_NUMA, Status::Ok);
}

#[test]
fn empty_and_garbage_trees_never_panic() {
    let empty = tempfile::tempdir().unwrap();
    let report = check_root(empty.path());
    assert_eq!(report.items.len(), ITEM_IDS.len());
    assert_status(&report, ID_CORES, Status::Fail);

    // Every file of the tuned tree replaced by garbage.
    let dir = tuned();
    let mut stack = vec![dir.path().to_owned()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                std::fs::write(entry.path(), "garbage -1 [ ] ,,, 99999999999999999999\n").unwrap();
            }
        }
    }
    let report = check_root(dir.path());
    assert_eq!(report.items.len(), ITEM_IDS.len());
    let rendered = report.render();
    assert!(rendered.contains("result:"));
    let report = check_cores(dir.path(), &[2]);
    assert_eq!(report.items.len(), ITEM_IDS.len());
}

#[test]
fn human_rendering_lists_fixes_for_problems_only() {
    let text = check_root(&fixture("untuned-2core")).render();
    assert!(text.contains("FAIL  cmdline.nohz_full"));
    assert!(text.contains("fix:"));
    assert!(
        text.contains("result: FAIL (6 fail, 9 warn, 4 ok, 2 skip)"),
        "{text}"
    );
    let tuned = check_root(&fixture("tuned-8core")).render();
    assert!(!tuned.contains("fix:"));
    assert!(tuned.contains("result: OK (0 fail, 0 warn, 21 ok, 0 skip)"));
}
