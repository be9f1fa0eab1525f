//! The plan is self-consistent: a tree with the plan applied passes `check`.

mod common;

use std::path::Path;

use common::*;
use verbatim_kernel_cfg::check::{format_cpu_mask, HARDWARE_ITEM_IDS, ITEM_IDS};
use verbatim_kernel_cfg::thresholds::CSTATE_EXIT_LATENCY_US_MAX;
use verbatim_kernel_cfg::{plan, CpuSet, Plan, PlanError, PlanOptions, Status};

fn plan_for(root: &Path, cores: &str) -> Result<Plan, PlanError> {
    plan(&PlanOptions {
        root: root.to_owned(),
        cores: CpuSet::parse(cores).unwrap(),
    })
}

/// Writes into `root` what the host shows once the plan is carried out: the
/// kernel booted with the planned command line and config, and the runtime
/// commands run. This mirrors the kernel, not our checker: e.g. the
/// isolated list comes from isolcpus=, effective IRQ affinity is the first
/// allowed cpu, and processor.max_cstate=1 leaves only shallow states.
fn apply_plan(plan: &Plan, root: &Path) {
    let cmdline = read(root, "proc/cmdline");
    write(
        root,
        "proc/cmdline",
        &format!("{} {}\n", cmdline.trim(), plan.kernel_cmdline),
    );
    let release = read(root, "proc/sys/kernel/osrelease");
    let config: String = plan
        .kernel_config
        .iter()
        .map(|step| format!("{}\n", step.text))
        .collect();
    write(root, &format!("boot/config-{}", release.trim()), &config);
    let cores = plan.cores.to_string();
    write(
        root,
        "sys/devices/system/cpu/isolated",
        &format!("{cores}\n"),
    );
    write(
        root,
        "sys/devices/system/cpu/nohz_full",
        &format!("{cores}\n"),
    );

    let housekeeping = plan.housekeeping.to_string();
    let first_housekeeping = plan.housekeeping.cpus()[0];
    for entry in std::fs::read_dir(root.join("proc/irq")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            let irq = entry.path();
            std::fs::write(irq.join("smp_affinity_list"), format!("{housekeeping}\n")).unwrap();
            std::fs::write(
                irq.join("effective_affinity_list"),
                format!("{first_housekeeping}\n"),
            )
            .unwrap();
        }
    }
    write(
        root,
        "proc/irq/default_smp_affinity",
        &format!("{}\n", format_cpu_mask(&plan.housekeeping)),
    );
    for &cpu in plan.cores.cpus() {
        let cpufreq = format!("sys/devices/system/cpu/cpu{cpu}/cpufreq");
        if root.join(&cpufreq).is_dir() {
            write(
                root,
                &format!("{cpufreq}/scaling_governor"),
                "performance\n",
            );
        }
        let cpuidle = root.join(format!("sys/devices/system/cpu/cpu{cpu}/cpuidle"));
        if let Ok(states) = std::fs::read_dir(&cpuidle) {
            for state in states {
                let state = state.unwrap().path();
                let latency: u64 = std::fs::read_to_string(state.join("latency"))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                if latency > CSTATE_EXIT_LATENCY_US_MAX {
                    std::fs::write(state.join("disable"), "1\n").unwrap();
                }
            }
        }
    }
    for sysctl in &plan.sysctls {
        let path = format!("proc/sys/{}", sysctl.key.replace('.', "/"));
        write(root, &path, &format!("{}\n", sysctl.value));
    }
    write(
        root,
        "sys/kernel/mm/transparent_hugepage/enabled",
        "always madvise [never]\n",
    );
    write(
        root,
        "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
        &format!("{}\n", plan.hugepages_count),
    );
    let limits = read(root, "proc/self/limits");
    let limits: String = limits
        .lines()
        .map(|line| {
            if line.starts_with("Max locked memory") {
                "Max locked memory         unlimited            unlimited            bytes     \n"
                    .to_owned()
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    write(root, "proc/self/limits", &limits);
}

#[test]
fn untuned_tree_with_the_plan_applied_passes_check() {
    let dir = copy_fixture("untuned-2core");
    let plan = plan_for(dir.path(), "1").unwrap();
    assert_eq!(plan.housekeeping.to_string(), "0");
    apply_plan(&plan, dir.path());
    let report = check_cores(dir.path(), &[1]);
    for id in ITEM_IDS {
        let item = item(&report, id);
        if HARDWARE_ITEM_IDS.contains(id) {
            continue;
        }
        assert!(
            matches!(item.status, Status::Ok | Status::Skip),
            "{id} after the plan: {item:#?}"
        );
    }
    // Only the VM's lack of cpufreq remains unseen.
    assert_eq!(
        report
            .items
            .iter()
            .filter(|item| item.status == Status::Skip && !HARDWARE_ITEM_IDS.contains(&item.id))
            .map(|item| item.id)
            .collect::<Vec<_>>(),
        vec!["cpu.governor"]
    );
    // Default cores now come from the isolated list the plan produced.
    assert_eq!(check_root(dir.path()).cores.to_string(), "1");
}

#[test]
fn tuned_fixture_is_the_plan_for_its_cores() {
    let root = fixture("tuned-8core");
    let plan = plan_for(&root, "2-3").unwrap();
    assert_eq!(plan.housekeeping.to_string(), "0-1,4-7");
    let cmdline = read(&root, "proc/cmdline");
    for step in &plan.kernel_params {
        assert!(
            cmdline.split_whitespace().any(|param| param == step.text),
            "tuned cmdline lacks {}",
            step.text
        );
    }
    assert!(cmdline.contains(&plan.kernel_cmdline));
    for sysctl in &plan.sysctls {
        let path = format!("proc/sys/{}", sysctl.key.replace('.', "/"));
        assert_eq!(read(&root, &path).trim(), sysctl.value.to_string());
    }
    assert_eq!(
        read(&root, "proc/irq/default_smp_affinity").trim(),
        format_cpu_mask(&plan.housekeeping)
    );
    // Applying the plan again to the tuned tree keeps it passing.
    let dir = copy_fixture("tuned-8core");
    apply_plan(&plan, dir.path());
    assert_eq!(check_root(dir.path()).worst(), Status::Ok);
}

#[test]
fn plan_lists_every_part() {
    let plan = plan_for(&fixture("tuned-8core"), "2-3").unwrap();
    assert_eq!(
        plan.kernel_cmdline,
        "isolcpus=nohz,domain,managed_irq,2-3 nohz_full=2-3 rcu_nocbs=2-3 \
         irqaffinity=0-1,4-7 processor.max_cstate=1 intel_idle.max_cstate=0 \
         transparent_hugepage=never hugepages=512"
    );
    let commands: Vec<&str> = plan
        .runtime_commands
        .iter()
        .map(|s| s.text.as_str())
        .collect();
    assert!(commands.contains(&"sysctl -w kernel.timer_migration=0"));
    assert!(commands.contains(&"sysctl -w vm.stat_interval=120"));
    assert!(commands.contains(&"ulimit -l unlimited"));
    assert!(commands.contains(&"echo f3 > /proc/irq/default_smp_affinity"));
    assert!(plan.replica_pins_toml.contains("core = 2"));
    assert!(plan.replica_pins_toml.contains("core = 3"));
    assert!(plan.kernel_params.iter().all(|step| !step.why.is_empty()));
    let text = plan.render();
    assert!(text.contains("# 1. kernel command line"));
    assert!(text.contains("# 3. replica pins"));
    assert!(text.contains("[[members]]"));
    assert!(plan.notes.is_empty());
}

#[test]
fn plan_notes_smt_siblings() {
    let dir = copy_fixture("tuned-8core");
    write(
        dir.path(),
        "sys/devices/system/cpu/cpu2/topology/thread_siblings_list",
        "2,6\n",
    );
    let plan = plan_for(dir.path(), "2-3").unwrap();
    assert_eq!(plan.notes.len(), 1);
    assert!(plan.notes[0].contains("core 2 has SMT siblings 6"));
}

#[test]
fn plan_refuses_bad_core_sets() {
    let root = fixture("untuned-2core");
    assert!(matches!(
        plan_for(&root, "0-1"),
        Err(PlanError::NoHousekeeping { .. })
    ));
    match plan_for(&root, "1-2") {
        Err(PlanError::CoresNotOnline { missing, online }) => {
            assert_eq!(missing.to_string(), "2");
            assert_eq!(online.to_string(), "0-1");
        }
        other => panic!("expected CoresNotOnline, got {other:?}"),
    }
    assert!(matches!(plan_for(&root, ""), Err(PlanError::NoCores)));
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        plan_for(empty.path(), "1"),
        Err(PlanError::Online(_))
    ));
}
