//! `plan`: what to change so that `check` passes for a set of cores.
//!
//! The plan is data ([`Plan`]) plus a pure renderer ([`Plan::render`]); it
//! never changes the system. Each value the plan asks for is the value the
//! matching `check` rule accepts (the tests apply a plan to a tree and run
//! `check` on it).

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use crate::check::format_cpu_mask;
use crate::cpulist::CpuSet;
use crate::thresholds::{
    CSTATE_EXIT_LATENCY_US_MAX, HUGEPAGES_BYTES_MIN, HUGEPAGE_BYTES_DEFAULT,
    SYSCTL_STAT_INTERVAL_S_MIN, SYSCTL_TIMER_MIGRATION,
};
use crate::tree::{HostTree, ReadError};

/// Why a plan cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// `--cores` was empty.
    #[error("no cores given: pass --cores LIST, e.g. --cores 2-3")]
    NoCores,
    /// The online cpus of the tree cannot be read.
    #[error("cannot read the online cpus: {0}")]
    Online(#[source] ReadError),
    /// Some cores are not online in the tree.
    #[error("cores {missing} are not online (online: {online})")]
    CoresNotOnline {
        /// The requested cores that are not online.
        missing: CpuSet,
        /// The online cpus.
        online: CpuSet,
    },
    /// The cores are every online cpu.
    #[error(
        "cores {cores} are every online cpu: leave at least one for housekeeping \
         (IRQs, timers, kernel threads, the shell)"
    )]
    NoHousekeeping {
        /// The requested cores.
        cores: CpuSet,
    },
}

/// One line of the plan and the reason for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// A kernel parameter, config option or shell command.
    pub text: String,
    /// Why, in one sentence.
    pub why: String,
}

fn step(text: impl Into<String>, why: impl Into<String>) -> Step {
    Step {
        text: text.into(),
        why: why.into(),
    }
}

/// A sysctl the plan sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sysctl {
    /// Dotted key, e.g. `vm.stat_interval`.
    pub key: String,
    /// Value to write.
    pub value: u64,
}

/// Everything to change on a host so that the replicas on `cores` run
/// uninterrupted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Cores for the replicas (isolated, tickless).
    pub cores: CpuSet,
    /// The other online cpus: IRQs, timers and kernel threads go there.
    pub housekeeping: CpuSet,
    /// Parameters to append to the kernel command line.
    pub kernel_params: Vec<Step>,
    /// The kernel command line additions as one line.
    pub kernel_cmdline: String,
    /// Kernel build options the parameters need.
    pub kernel_config: Vec<Step>,
    /// Sysctls to set (also in `runtime_commands`).
    pub sysctls: Vec<Sysctl>,
    /// Huge pages of the default size (2 MiB) to reserve.
    pub hugepages_count: u64,
    /// Shell commands for the running system (as root), after the reboot.
    pub runtime_commands: Vec<Step>,
    /// Lines for the cluster manifest pinning one replica per core.
    pub replica_pins_toml: String,
    /// Things the plan cannot fix (SMT siblings, ...).
    pub notes: Vec<String>,
}

/// Inputs of [`plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOptions {
    /// Directory holding `proc/` and `sys/` (for the online cpus and SMT
    /// siblings); `/` for the live host.
    pub root: PathBuf,
    /// The cores the replicas will be pinned to.
    pub cores: CpuSet,
}

/// Makes the plan for `opts.cores`. Refuses cores that are not online in
/// the tree and a set of cores that leaves no housekeeping cpu.
pub fn plan(opts: &PlanOptions) -> Result<Plan, PlanError> {
    let tree = HostTree::new(&opts.root);
    let cores = opts.cores.clone();
    if cores.is_empty() {
        return Err(PlanError::NoCores);
    }
    let online = tree
        .read_cpus("sys/devices/system/cpu/online")
        .map_err(PlanError::Online)?;
    let missing = cores.difference(&online);
    if !missing.is_empty() {
        return Err(PlanError::CoresNotOnline { missing, online });
    }
    let housekeeping = online.difference(&cores);
    if housekeeping.is_empty() {
        return Err(PlanError::NoHousekeeping { cores });
    }
    let hugepages_count = HUGEPAGES_BYTES_MIN.div_ceil(HUGEPAGE_BYTES_DEFAULT);

    let kernel_params = vec![
        step(
            format!("isolcpus=nohz,domain,managed_irq,{cores}"),
            "keeps other tasks (domain: no load balancing onto the cores) and managed IRQs off \
             the replica cores; a preempting task costs milliseconds",
        ),
        step(
            format!("nohz_full={cores}"),
            "stops the periodic scheduler tick on a core running one task (uKharon §4.2: \
             NO_HZ_FULL and isolcpus gave increments every 5 µs, never 15 µs apart)",
        ),
        step(
            format!("rcu_nocbs={cores}"),
            "runs RCU callbacks on housekeeping cpus (nohz_full implies it; explicit for clarity)",
        ),
        step(
            format!("irqaffinity={housekeeping}"),
            "new IRQs start on the housekeeping cpus",
        ),
        step(
            "processor.max_cstate=1",
            format!(
                "acpi_idle stops at C1 (exit ≤ {CSTATE_EXIT_LATENCY_US_MAX} µs); deeper states \
                 take 10-100+ µs to wake"
            ),
        ),
        step(
            "intel_idle.max_cstate=0",
            "disables intel_idle, which ignores processor.max_cstate (no effect on AMD)",
        ),
        step(
            "transparent_hugepage=never",
            "no khugepaged scans or compaction stalls; the replica uses explicit huge pages",
        ),
        step(
            format!("hugepages={hugepages_count}"),
            format!(
                "reserves {} MiB of 2 MiB pages at boot, before memory fragments, for \
                 registered memory (small NIC translation tables, no TLB misses)",
                HUGEPAGES_BYTES_MIN >> 20
            ),
        ),
    ];
    let kernel_cmdline = kernel_params
        .iter()
        .map(|step| step.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let kernel_config = vec![
        step(
            "CONFIG_NO_HZ_FULL=y",
            "without it nohz_full= is ignored and the tick keeps firing (uKharon §7 built a \
             custom kernel for this)",
        ),
        step("CONFIG_RCU_NOCB_CPU=y", "without it rcu_nocbs= is ignored"),
        step("CONFIG_CPU_ISOLATION=y", "without it isolcpus= is ignored"),
    ];
    let sysctls = vec![
        Sysctl {
            key: "kernel.timer_migration".into(),
            value: SYSCTL_TIMER_MIGRATION,
        },
        Sysctl {
            key: "vm.stat_interval".into(),
            value: SYSCTL_STAT_INTERVAL_S_MIN,
        },
    ];
    let core_words = cores
        .cpus()
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    let housekeeping_mask = format_cpu_mask(&housekeeping);
    let mut runtime_commands = vec![
        step(
            "systemctl disable --now irqbalance",
            "irqbalance would move IRQs back onto the replica cores",
        ),
        step(
            format!(
                "for f in /proc/irq/[0-9]*/smp_affinity_list; do echo {housekeeping} > $f 2>/dev/null; done"
            ),
            "moves existing IRQs to the housekeeping cpus (managed IRQs refuse; isolcpus=managed_irq covers them)",
        ),
        step(
            format!("echo {housekeeping_mask} > /proc/irq/default_smp_affinity"),
            "IRQs registered later start on the housekeeping cpus",
        ),
        step(
            format!("echo {housekeeping_mask} > /sys/devices/virtual/workqueue/cpumask"),
            "unbound kernel work queues run on the housekeeping cpus",
        ),
        step(
            format!(
                "for c in {core_words}; do echo performance > /sys/devices/system/cpu/cpu$c/cpufreq/scaling_governor; done"
            ),
            "full frequency on the replica cores (absent in VMs, where the hypervisor decides)",
        ),
    ];
    for sysctl in &sysctls {
        let why = if sysctl.key == "kernel.timer_migration" {
            "timers stay on the cpu that armed them instead of migrating onto a replica core"
        } else {
            "the vmstat worker wakes every cpu every stat_interval seconds (default 1)"
        };
        runtime_commands.push(step(
            format!("sysctl -w {}={}", sysctl.key, sysctl.value),
            format!(
                "{why}; persist with `{} = {}` in /etc/sysctl.d/90-verbatim.conf",
                sysctl.key, sysctl.value
            ),
        ));
    }
    runtime_commands.extend([
        step(
            "echo never > /sys/kernel/mm/transparent_hugepage/enabled",
            "same as transparent_hugepage=never without a reboot",
        ),
        step(
            format!("sysctl -w vm.nr_hugepages={hugepages_count}"),
            "same as hugepages= without a reboot (may reserve fewer once memory is fragmented)",
        ),
        step(
            "ulimit -l unlimited",
            "RDMA registration pins memory against RLIMIT_MEMLOCK; run in the replica's shell",
        ),
        step(
            "echo '*  -  memlock  unlimited' > /etc/security/limits.d/90-verbatim.conf",
            "the same for login sessions; for systemd units use LimitMEMLOCK=infinity",
        ),
    ]);

    let mut notes = Vec::new();
    for &core in cores.cpus() {
        let Ok(siblings) = tree.read_cpus(&format!(
            "sys/devices/system/cpu/cpu{core}/topology/thread_siblings_list"
        )) else {
            continue;
        };
        let others: CpuSet = siblings.cpus().iter().filter(|&&s| s != core).collect();
        if !others.is_empty() {
            notes.push(format!(
                "core {core} has SMT siblings {others}: check warns unless they are replica-free \
                 and isolated; boot with `nosmt` or add them to isolcpus and leave them idle"
            ));
        }
    }

    Ok(Plan {
        replica_pins_toml: replica_pins_toml(&cores),
        cores,
        housekeeping,
        kernel_params,
        kernel_cmdline,
        kernel_config,
        sysctls,
        hugepages_count,
        runtime_commands,
        notes,
    })
}

/// The cluster manifest lines pinning one replica per core, one
/// `[[members]]` table each with `core = N`. Kept in one function so the
/// manifest keys can be aligned in one place.
pub fn replica_pins_toml(cores: &CpuSet) -> String {
    let mut text = String::new();
    for (index, core) in cores.cpus().iter().enumerate() {
        if index > 0 {
            text.push('\n');
        }
        let _ = writeln!(
            text,
            "[[members]]\n# replica {index}: isolated core\ncore = {core}"
        );
    }
    text
}

impl Plan {
    /// The human-readable plan: kernel command line, kernel config,
    /// runtime commands and replica pins, each with its reason.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "plan for replica cores {} (housekeeping cpus {}); nothing is changed by this command\n",
            self.cores, self.housekeeping
        );
        let _ = writeln!(out, "# 1. kernel command line: append, then reboot");
        let _ = writeln!(out, "{}\n", self.kernel_cmdline);
        for step in &self.kernel_params {
            let _ = writeln!(out, "#   {:<40} {}", step.text, step.why);
        }
        let _ = writeln!(out, "\n# kernel build options these need");
        for step in &self.kernel_config {
            let _ = writeln!(out, "#   {:<40} {}", step.text, step.why);
        }
        let _ = writeln!(out, "\n# 2. runtime commands (as root, after the reboot)");
        for step in &self.runtime_commands {
            let _ = writeln!(out, "# {}\n{}", step.why, step.text);
        }
        let _ = writeln!(out, "\n# 3. replica pins for the cluster manifest (TOML)");
        out.push_str(&self.replica_pins_toml);
        if !self.notes.is_empty() {
            let _ = writeln!(out, "\n# notes");
            for note in &self.notes {
                let _ = writeln!(out, "# {note}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_one_member_per_core() {
        let toml = replica_pins_toml(&CpuSet::parse("2-3").unwrap());
        assert_eq!(
            toml,
            "[[members]]\n# replica 0: isolated core\ncore = 2\n\n\
             [[members]]\n# replica 1: isolated core\ncore = 3\n"
        );
        assert_eq!(replica_pins_toml(&CpuSet::new()), "");
    }
}
