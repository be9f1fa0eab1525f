//! `check`: is this host ready for a busy-polling replica?
//!
//! Each rule reads a few files of a [`HostTree`] and returns one [`Item`].
//! Rules never panic and never fail as a whole: a file that is missing or
//! malformed becomes a Skip or Warn item that says so.
//!
//! Severity: **Fail** marks what uKharon §4.2 relies on for its 15 µs bound
//! (core isolation, a tickless core, a NO_HZ_FULL kernel) and what makes RDMA
//! registration fail (memlock); **Warn** marks what adds microseconds of
//! jitter or costs performance but does not break the bound by itself;
//! **Skip** means the fact cannot be seen (e.g. no cpufreq in a VM).

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::io::Read;
use std::path::PathBuf;

use serde::Serialize;

use crate::cmdline::{Isolcpus, KernelCmdline};
use crate::cpulist::CpuSet;
use crate::thresholds::{
    CSTATE_EXIT_LATENCY_US_MAX, FILE_BYTES_MAX, FOUND_LIST_MAX, HUGEPAGES_BYTES_MIN,
    MEMLOCK_BYTES_FAIL_BELOW, MEMLOCK_BYTES_OK, SYSCTL_STAT_INTERVAL_S_MIN, SYSCTL_TIMER_MIGRATION,
};
use crate::tree::{
    parse_cpu_mask, parse_interrupts, parse_meminfo_field, parse_memlock_limit, HostTree, ReadError,
};

mod cpu_rules;
mod kernel_rules;
mod memory_rules;
mod rdma_rules;

use cpu_rules::*;
use kernel_rules::*;
use memory_rules::*;
use rdma_rules::*;

/// Outcome of one item. Ordered by severity, so `max` is the worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Tuned as planned.
    Ok,
    /// Could not be checked (file absent, feature not applicable).
    Skip,
    /// Adds jitter or costs performance; the replica still runs.
    Warn,
    /// Breaks the 15 µs bound or RDMA registration.
    Fail,
}

impl Status {
    /// Upper-case label for the human table.
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Skip => "SKIP",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One checked fact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    /// Stable identifier, e.g. `cmdline.nohz_full`. See [`ITEM_IDS`].
    pub id: &'static str,
    /// The outcome.
    pub status: Status,
    /// One line saying what is (or is not) tuned.
    pub summary: String,
    /// What was read, and from where.
    pub found: String,
    /// What to change, when something should change.
    pub fix: Option<String>,
}

impl Item {
    fn new(id: &'static str, status: Status, summary: String, found: String) -> Self {
        Self {
            id,
            status,
            summary,
            found,
            fix: None,
        }
    }

    fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// The result of [`check`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The root the files were read from.
    pub root: String,
    /// The cores the replicas will be pinned to, as checked.
    pub cores: CpuSet,
    /// Where the cores came from ("--cores", "isolated cpus", ...).
    pub cores_source: String,
    /// One item per rule, in [`ITEM_IDS`] order.
    pub items: Vec<Item>,
}

impl Report {
    /// The worst status of any item (`Ok` for an empty report).
    pub fn worst(&self) -> Status {
        self.items
            .iter()
            .map(|item| item.status)
            .max()
            .unwrap_or(Status::Ok)
    }

    /// The item with `id`, if the report has it.
    pub fn item(&self, id: &str) -> Option<&Item> {
        self.items.iter().find(|item| item.id == id)
    }

    /// How many items have `status`.
    pub fn count(&self, status: Status) -> usize {
        self.items
            .iter()
            .filter(|item| item.status == status)
            .count()
    }

    /// Process exit code of the `check` command: 1 when any item fails,
    /// else 0. (2 is reserved for usage and I/O errors.)
    pub fn exit_code(&self) -> i32 {
        if self.worst() == Status::Fail {
            1
        } else {
            0
        }
    }

    /// Logs every item through `tracing`: Fail as error, Warn as warn,
    /// the rest at debug. For `verbatim replica` at start: it logs and goes
    /// on, never refusing to start because of a warning.
    pub fn log(&self) {
        for item in &self.items {
            let fix = item.fix.as_deref().unwrap_or("");
            match item.status {
                Status::Fail => tracing::error!(
                    id = item.id, found = %item.found, fix, "host check: {}", item.summary
                ),
                Status::Warn => tracing::warn!(
                    id = item.id, found = %item.found, fix, "host check: {}", item.summary
                ),
                Status::Ok | Status::Skip => tracing::debug!(
                    id = item.id, status = %item.status, "host check: {}", item.summary
                ),
            }
        }
    }

    /// The human-readable report: a line per item, with what was found and
    /// the fix under each item that is not Ok.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "host check of {} for replica cores {} ({})",
            self.root,
            display_set(&self.cores),
            self.cores_source
        );
        let id_width = self.items.iter().map(|i| i.id.len()).max().unwrap_or(0);
        for item in &self.items {
            let _ = writeln!(
                out,
                "{:<4}  {:<id_width$}  {}",
                item.status.label(),
                item.id,
                item.summary
            );
            if item.status != Status::Ok {
                let indent = " ".repeat(id_width + 8);
                let _ = writeln!(out, "{indent}found: {}", item.found);
                if let Some(fix) = &item.fix {
                    for (index, line) in fix.lines().enumerate() {
                        let label = if index == 0 { "fix:  " } else { "      " };
                        let _ = writeln!(out, "{indent}{label} {line}");
                    }
                }
            }
        }
        let _ = writeln!(
            out,
            "result: {} ({} fail, {} warn, {} ok, {} skip)",
            self.worst(),
            self.count(Status::Fail),
            self.count(Status::Warn),
            self.count(Status::Ok),
            self.count(Status::Skip)
        );
        out
    }
}

/// What [`check`] reads and for which cores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOptions {
    /// Directory holding `proc/`, `sys/` and `boot/`; `/` for the live host.
    pub root: PathBuf,
    /// The cores the replicas will be pinned to. `None`: the isolated cpus
    /// (sysfs, else `isolcpus=`), else every online cpu but cpu 0.
    pub cores: Option<Vec<usize>>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            root: PathBuf::from("/"),
            cores: None,
        }
    }
}

/// Identifiers of every item, in report order.
pub const ITEM_IDS: &[&str] = &[
    ID_CORES,
    ID_CMDLINE_ISOLCPUS,
    ID_CMDLINE_NOHZ_FULL,
    ID_CMDLINE_RCU_NOCBS,
    ID_CMDLINE_IRQAFFINITY,
    ID_CMDLINE_IDLE,
    ID_KERNEL_NO_HZ_FULL,
    ID_SYSFS_ISOLATED,
    ID_SYSFS_NOHZ_FULL,
    ID_IRQ_AFFINITY,
    ID_IRQ_DEFAULT_AFFINITY,
    ID_CPU_GOVERNOR,
    ID_CPU_CSTATES,
    ID_CPU_SMT,
    ID_MM_THP,
    ID_MM_HUGEPAGES,
    ID_LIMITS_MEMLOCK,
    ID_SYSCTL_TIMER_MIGRATION,
    ID_SYSCTL_STAT_INTERVAL,
    ID_RDMA_DEVICES,
    ID_RDMA_NUMA,
];

/// Items that depend on the hardware rather than on configuration, so the
/// plan cannot make them pass: the chosen cores, SMT siblings and RDMA
/// devices and their NUMA node.
pub const HARDWARE_ITEM_IDS: &[&str] = &[ID_CORES, ID_CPU_SMT, ID_RDMA_DEVICES, ID_RDMA_NUMA];

/// The chosen cores exist, are online and leave a housekeeping cpu.
pub const ID_CORES: &str = "cores.selected";
/// `isolcpus=` covers the cores.
pub const ID_CMDLINE_ISOLCPUS: &str = "cmdline.isolcpus";
/// `nohz_full=` covers the cores.
pub const ID_CMDLINE_NOHZ_FULL: &str = "cmdline.nohz_full";
/// `rcu_nocbs=` (or `nohz_full=`, which implies it) covers the cores.
pub const ID_CMDLINE_RCU_NOCBS: &str = "cmdline.rcu_nocbs";
/// `irqaffinity=` keeps default IRQ affinity off the cores.
pub const ID_CMDLINE_IRQAFFINITY: &str = "cmdline.irqaffinity";
/// `idle=` / `processor.max_cstate=` / `intel_idle.max_cstate=` limit C-states.
pub const ID_CMDLINE_IDLE: &str = "cmdline.idle";
/// The kernel is built with `CONFIG_NO_HZ_FULL=y`.
pub const ID_KERNEL_NO_HZ_FULL: &str = "kernel.no_hz_full";
/// `/sys/devices/system/cpu/isolated` covers the cores.
pub const ID_SYSFS_ISOLATED: &str = "sysfs.isolated";
/// `/sys/devices/system/cpu/nohz_full` covers the cores.
pub const ID_SYSFS_NOHZ_FULL: &str = "sysfs.nohz_full";
/// No IRQ may be delivered to a core.
pub const ID_IRQ_AFFINITY: &str = "irq.affinity";
/// `/proc/irq/default_smp_affinity` excludes the cores.
pub const ID_IRQ_DEFAULT_AFFINITY: &str = "irq.default_affinity";
/// The cores run the `performance` governor.
pub const ID_CPU_GOVERNOR: &str = "cpu.governor";
/// No enabled C-state on the cores exits slower than the threshold.
pub const ID_CPU_CSTATES: &str = "cpu.cstates";
/// No SMT sibling of a core runs other work.
pub const ID_CPU_SMT: &str = "cpu.smt";
/// Transparent huge pages are not `always`.
pub const ID_MM_THP: &str = "mm.thp";
/// Enough huge pages are reserved.
pub const ID_MM_HUGEPAGES: &str = "mm.hugepages";
/// RLIMIT_MEMLOCK allows registering the memory.
pub const ID_LIMITS_MEMLOCK: &str = "limits.memlock";
/// `kernel.timer_migration` is 0.
pub const ID_SYSCTL_TIMER_MIGRATION: &str = "sysctl.timer_migration";
/// `vm.stat_interval` is long.
pub const ID_SYSCTL_STAT_INTERVAL: &str = "sysctl.stat_interval";
/// An RDMA device is present.
pub const ID_RDMA_DEVICES: &str = "rdma.devices";
/// Each core has an RDMA device on its NUMA node.
pub const ID_RDMA_NUMA: &str = "rdma.numa";

const PATH_CMDLINE: &str = "proc/cmdline";
const PATH_ONLINE: &str = "sys/devices/system/cpu/online";
const PATH_ISOLATED: &str = "sys/devices/system/cpu/isolated";
const PATH_NOHZ_FULL: &str = "sys/devices/system/cpu/nohz_full";
const PATH_IRQ: &str = "proc/irq";
const PATH_INTERRUPTS: &str = "proc/interrupts";
const PATH_DEFAULT_AFFINITY: &str = "proc/irq/default_smp_affinity";
const PATH_THP: &str = "sys/kernel/mm/transparent_hugepage/enabled";
const PATH_HUGEPAGES: &str = "sys/kernel/mm/hugepages";
const PATH_MEMINFO: &str = "proc/meminfo";
const PATH_LIMITS: &str = "proc/self/limits";
const PATH_OSRELEASE: &str = "proc/sys/kernel/osrelease";
const PATH_CONFIG_GZ: &str = "proc/config.gz";
const PATH_TIMER_MIGRATION: &str = "proc/sys/kernel/timer_migration";
const PATH_STAT_INTERVAL: &str = "proc/sys/vm/stat_interval";
const PATH_INFINIBAND: &str = "sys/class/infiniband";
const PATH_NODES: &str = "sys/devices/system/node";

fn cpu_path(cpu: usize, rest: &str) -> String {
    format!("sys/devices/system/cpu/cpu{cpu}/{rest}")
}

/// Everything the rules share, read once.
struct Context {
    tree: HostTree,
    cmdline: Result<KernelCmdline, ReadError>,
    online: Result<CpuSet, ReadError>,
    cores: CpuSet,
    cores_source: String,
    /// Cpus not chosen for replicas (online minus cores); where IRQs,
    /// timers and kernel threads should go.
    housekeeping: CpuSet,
}

impl Context {
    /// The full path of `relative` under the root, for `found` texts.
    fn shown(&self, relative: &str) -> String {
        self.tree.path(relative).display().to_string()
    }

    fn isolcpus(&self) -> Option<Isolcpus> {
        let value = self.cmdline.as_ref().ok()?.value("isolcpus")?;
        Isolcpus::parse(value).ok()
    }

    /// Cpus isolated by any means we can see (sysfs, else the command
    /// line): used to tell whether an SMT sibling is kept free of work.
    fn isolated_any(&self) -> CpuSet {
        match self.tree.read_cpus(PATH_ISOLATED) {
            Ok(set) if !set.is_empty() => set,
            _ => self.isolcpus().map(|iso| iso.cpus).unwrap_or_default(),
        }
    }
}

/// Runs every rule against `opts.root` for `opts.cores` (or the default
/// cores) and returns one item per rule. Never panics and never fails:
/// unreadable facts become Skip or Warn items.
pub fn check(opts: &CheckOptions) -> Report {
    let tree = HostTree::new(&opts.root);
    let cmdline = tree
        .read(PATH_CMDLINE)
        .map(|text| KernelCmdline::parse(&text));
    let online = tree.read_cpus(PATH_ONLINE);
    let (cores, cores_source) = select_cores(&tree, &cmdline, &online, opts.cores.as_deref());
    let housekeeping = match &online {
        Ok(online) => online.difference(&cores),
        Err(_) => CpuSet::new(),
    };
    let ctx = Context {
        tree,
        cmdline,
        online,
        cores,
        cores_source,
        housekeeping,
    };
    let rules: [fn(&Context) -> Item; 21] = [
        rule_cores,
        rule_cmdline_isolcpus,
        rule_cmdline_nohz_full,
        rule_cmdline_rcu_nocbs,
        rule_cmdline_irqaffinity,
        rule_cmdline_idle,
        rule_kernel_no_hz_full,
        rule_sysfs_isolated,
        rule_sysfs_nohz_full,
        rule_irq_affinity,
        rule_irq_default_affinity,
        rule_cpu_governor,
        rule_cpu_cstates,
        rule_cpu_smt,
        rule_mm_thp,
        rule_mm_hugepages,
        rule_limits_memlock,
        rule_sysctl_timer_migration,
        rule_sysctl_stat_interval,
        rule_rdma_devices,
        rule_rdma_numa,
    ];
    let items: Vec<Item> = rules.iter().map(|rule| rule(&ctx)).collect();
    Report {
        root: opts.root.display().to_string(),
        cores: ctx.cores,
        cores_source: ctx.cores_source,
        items,
    }
}

fn select_cores(
    tree: &HostTree,
    cmdline: &Result<KernelCmdline, ReadError>,
    online: &Result<CpuSet, ReadError>,
    requested: Option<&[usize]>,
) -> (CpuSet, String) {
    if let Some(cores) = requested {
        return (cores.iter().copied().collect(), "given with --cores".into());
    }
    if let Ok(isolated) = tree.read_cpus(PATH_ISOLATED) {
        if !isolated.is_empty() {
            return (isolated, "the isolated cpus in sysfs".into());
        }
    }
    let isolcpus = cmdline
        .as_ref()
        .ok()
        .and_then(|cmdline| cmdline.value("isolcpus"))
        .and_then(|value| Isolcpus::parse(value).ok());
    if let Some(iso) = isolcpus {
        if !iso.cpus.is_empty() {
            return (iso.cpus, "isolcpus= on the kernel command line".into());
        }
    }
    match online {
        Ok(online) => {
            let rest = online.difference(&CpuSet::from_iter([0]));
            if rest.is_empty() {
                (
                    online.clone(),
                    "every online cpu (there is only one)".into(),
                )
            } else {
                (rest, "default: every online cpu but cpu 0".into())
            }
        }
        Err(_) => (CpuSet::new(), "none: online cpus unreadable".into()),
    }
}

/// "2-3", or "none" for the empty set, for prose.
fn display_set(set: &CpuSet) -> String {
    if set.is_empty() {
        "none".into()
    } else {
        set.to_string()
    }
}

/// "core 1 is" / "cores 2-3 are" (verb optional), for summaries.
fn cores_text(set: &CpuSet, verb_one: &str, verb_many: &str) -> String {
    let (noun, verb) = if set.len() == 1 {
        ("core", verb_one)
    } else {
        ("cores", verb_many)
    };
    let text = format!("{noun} {}", display_set(set));
    if verb.is_empty() {
        text
    } else {
        format!("{text} {verb}")
    }
}

/// Spells out at most [`FOUND_LIST_MAX`] entries and counts the rest.
fn bounded_list(entries: &[String]) -> String {
    let mut text = entries
        .iter()
        .take(FOUND_LIST_MAX)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if entries.len() > FOUND_LIST_MAX {
        let _ = write!(text, "; ... and {} more", entries.len() - FOUND_LIST_MAX);
    }
    text
}

fn skip(id: &'static str, summary: &str, error: &ReadError) -> Item {
    Item::new(id, Status::Skip, summary.into(), error.to_string())
}

/// Skip item for a rule that needs cores when none could be chosen.
fn no_cores(id: &'static str) -> Item {
    Item::new(
        id,
        Status::Skip,
        "no cores to check".into(),
        "no replica cores were chosen (see cores.selected)".into(),
    )
}

/// Formats a cpu set as the kernel's hex mask: 32-bit groups, most
/// significant first, separated by commas ("3", "1,00000003").
pub fn format_cpu_mask(set: &CpuSet) -> String {
    let Some(&highest) = set.cpus().last() else {
        return "0".into();
    };
    let group_count = highest / 32 + 1;
    let mut groups = vec![0u32; group_count];
    for &cpu in set.cpus() {
        groups[cpu / 32] |= 1 << (cpu % 32);
    }
    let mut text = format!("{:x}", groups[group_count - 1]);
    for group in groups.iter().rev().skip(1) {
        let _ = write!(text, ",{group:08x}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_orders_by_severity() {
        let item = |status| Item::new("x", status, String::new(), String::new());
        let report = |statuses: &[Status]| Report {
            root: "/".into(),
            cores: CpuSet::new(),
            cores_source: String::new(),
            items: statuses.iter().map(|s| item(*s)).collect(),
        };
        assert_eq!(report(&[]).worst(), Status::Ok);
        assert_eq!(report(&[Status::Ok, Status::Skip]).worst(), Status::Skip);
        assert_eq!(report(&[Status::Warn, Status::Ok]).worst(), Status::Warn);
        assert_eq!(report(&[Status::Warn, Status::Fail]).worst(), Status::Fail);
        assert_eq!(report(&[Status::Warn]).exit_code(), 0);
        assert_eq!(report(&[Status::Fail]).exit_code(), 1);
    }

    #[test]
    fn cpu_masks_format_like_the_kernel() {
        assert_eq!(format_cpu_mask(&CpuSet::parse("0-1").unwrap()), "3");
        assert_eq!(format_cpu_mask(&CpuSet::parse("0-1,4-7").unwrap()), "f3");
        assert_eq!(
            format_cpu_mask(&CpuSet::parse("0,32").unwrap()),
            "1,00000001"
        );
        assert_eq!(format_cpu_mask(&CpuSet::new()), "0");
        for list in ["0-1", "0-1,4-7", "0,32", "5,40-70"] {
            let set = CpuSet::parse(list).unwrap();
            assert_eq!(parse_cpu_mask(&format_cpu_mask(&set)).unwrap(), set);
        }
    }

    #[test]
    fn nonexistent_root_gives_skips_not_panics() {
        let report = check(&CheckOptions {
            root: "/nonexistent-verbatim-root".into(),
            cores: None,
        });
        assert_eq!(report.items.len(), ITEM_IDS.len());
        assert_eq!(report.item(ID_CORES).unwrap().status, Status::Fail);
        assert_eq!(
            report.item(ID_CMDLINE_NOHZ_FULL).unwrap().status,
            Status::Skip
        );
        let ids: Vec<&str> = report.items.iter().map(|item| item.id).collect();
        assert_eq!(ids, ITEM_IDS, "rules run in ITEM_IDS order");
    }
}
