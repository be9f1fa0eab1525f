//! Rules on the chosen cores, the kernel command line, the kernel build
//! and the isolation the running kernel reports in sysfs.

use super::*;

pub(super) fn rule_cores(ctx: &Context) -> Item {
    let found = format!("cores {} ({})", display_set(&ctx.cores), ctx.cores_source);
    let online = match &ctx.online {
        Ok(online) => online,
        Err(error) => {
            return Item::new(
                ID_CORES,
                if ctx.cores.is_empty() {
                    Status::Fail
                } else {
                    Status::Warn
                },
                "cannot read the online cpus".into(),
                format!("{found}; {error}"),
            )
            .with_fix("pass --cores LIST, and check that --root points at a recorded tree")
        }
    };
    if ctx.cores.is_empty() {
        return Item::new(
            ID_CORES,
            Status::Fail,
            "no replica cores".into(),
            format!("{found}; online {online}"),
        )
        .with_fix("pass --cores LIST");
    }
    let offline = ctx.cores.difference(online);
    if !offline.is_empty() {
        return Item::new(
            ID_CORES,
            Status::Fail,
            format!("{} not online", cores_text(&offline, "is", "are")),
            format!("{found}; online {online}"),
        )
        .with_fix(format!("choose cores among the online cpus {online}"));
    }
    if ctx.housekeeping.is_empty() {
        return Item::new(
            ID_CORES,
            Status::Warn,
            "no cpu is left for housekeeping (IRQs, timers, kernel threads)".into(),
            format!("{found}; online {online}"),
        )
        .with_fix("leave at least one online cpu (usually cpu 0) out of the replica cores");
    }
    Item::new(
        ID_CORES,
        Status::Ok,
        format!(
            "replica cores {}, housekeeping cpus {}",
            ctx.cores, ctx.housekeeping
        ),
        format!("{found}; online {online}"),
    )
}

/// Shared logic of the three cmdline list parameters.
enum ListParam {
    Absent,
    Unparsable(String),
    Covers(CpuSet),
    Partial { list: CpuSet, missing: CpuSet },
}

fn cmdline_list(ctx: &Context, cmdline: &KernelCmdline, key: &str) -> ListParam {
    let Some(value) = cmdline.value(key) else {
        return ListParam::Absent;
    };
    let parsed = if key == "isolcpus" {
        Isolcpus::parse(value).map(|iso| iso.cpus)
    } else {
        CpuSet::parse(value)
    };
    match parsed {
        Err(error) => ListParam::Unparsable(format!("{key}={value}: {error}")),
        Ok(list) => {
            let missing = ctx.cores.difference(&list);
            if missing.is_empty() {
                ListParam::Covers(list)
            } else {
                ListParam::Partial { list, missing }
            }
        }
    }
}

pub(super) fn rule_cmdline_cover(
    ctx: &Context,
    id: &'static str,
    key: &str,
    why: &str,
    planned_value: String,
) -> Item {
    let cmdline = match &ctx.cmdline {
        Ok(cmdline) => cmdline,
        Err(error) => return skip(id, "cannot read the kernel command line", error),
    };
    if ctx.cores.is_empty() {
        return no_cores(id);
    }
    let fix = format!("add `{key}={planned_value}` to the kernel command line and reboot: {why}");
    match cmdline_list(ctx, cmdline, key) {
        ListParam::Absent => Item::new(
            id,
            Status::Fail,
            format!("{key}= is not on the kernel command line"),
            format!("no {key}= in {}", ctx.shown(PATH_CMDLINE)),
        )
        .with_fix(fix),
        ListParam::Unparsable(text) => Item::new(
            id,
            Status::Fail,
            format!("{key}= does not parse, so the kernel ignores it"),
            text,
        )
        .with_fix(fix),
        ListParam::Partial { list, missing } => Item::new(
            id,
            Status::Fail,
            format!("{key}= leaves {} out", cores_text(&missing, "", "")),
            format!("{key}={list}"),
        )
        .with_fix(fix),
        ListParam::Covers(list) => Item::new(
            id,
            Status::Ok,
            format!("{key}= covers {}", cores_text(&ctx.cores, "", "")),
            format!("{key}={}", cmdline.value(key).unwrap_or(&list.to_string())),
        ),
    }
}

pub(super) fn rule_cmdline_isolcpus(ctx: &Context) -> Item {
    let item = rule_cmdline_cover(
        ctx,
        ID_CMDLINE_ISOLCPUS,
        "isolcpus",
        "keeps other tasks off the replica cores; a preempting task costs milliseconds",
        format!("nohz,domain,managed_irq,{}", ctx.cores),
    );
    // Flags without `domain` leave the cores in the scheduler's load
    // balancing, so other tasks can still migrate onto them.
    if item.status == Status::Ok {
        if let Some(iso) = ctx.isolcpus() {
            if !iso.flags.is_empty() && !iso.has_flag("domain") {
                return Item {
                    status: Status::Warn,
                    summary: "isolcpus= lacks the `domain` flag, so the scheduler still balances tasks onto the cores".into(),
                    fix: Some(format!(
                        "use `isolcpus=nohz,domain,managed_irq,{}`",
                        ctx.cores
                    )),
                    ..item
                };
            }
        }
    }
    item
}

pub(super) fn rule_cmdline_nohz_full(ctx: &Context) -> Item {
    rule_cmdline_cover(
        ctx,
        ID_CMDLINE_NOHZ_FULL,
        "nohz_full",
        "stops the periodic tick on the replica cores (uKharon §4.2)",
        ctx.cores.to_string(),
    )
}

pub(super) fn rule_cmdline_rcu_nocbs(ctx: &Context) -> Item {
    let cmdline = match &ctx.cmdline {
        Ok(cmdline) => cmdline,
        Err(error) => {
            return skip(
                ID_CMDLINE_RCU_NOCBS,
                "cannot read the kernel command line",
                error,
            )
        }
    };
    if ctx.cores.is_empty() {
        return no_cores(ID_CMDLINE_RCU_NOCBS);
    }
    if let ListParam::Covers(list) = cmdline_list(ctx, cmdline, "rcu_nocbs") {
        return Item::new(
            ID_CMDLINE_RCU_NOCBS,
            Status::Ok,
            format!("rcu_nocbs= covers {}", cores_text(&ctx.cores, "", "")),
            format!("rcu_nocbs={list}"),
        );
    }
    // The kernel offloads RCU callbacks of every nohz_full cpu
    // (rcu_init_nohz), so nohz_full alone is enough.
    if let ListParam::Covers(list) = cmdline_list(ctx, cmdline, "nohz_full") {
        return Item::new(
            ID_CMDLINE_RCU_NOCBS,
            Status::Ok,
            format!(
                "RCU callbacks are offloaded from {} (implied by nohz_full=)",
                cores_text(&ctx.cores, "", "")
            ),
            format!(
                "rcu_nocbs={}; nohz_full={list}",
                cmdline.value("rcu_nocbs").unwrap_or("(absent)")
            ),
        );
    }
    Item::new(
        ID_CMDLINE_RCU_NOCBS,
        Status::Warn,
        "RCU callbacks still run on the replica cores".into(),
        format!(
            "rcu_nocbs={}; nohz_full={}",
            cmdline.value("rcu_nocbs").unwrap_or("(absent)"),
            cmdline.value("nohz_full").unwrap_or("(absent)")
        ),
    )
    .with_fix(format!(
        "add `rcu_nocbs={}` to the kernel command line (RCU callback batches can take tens of µs)",
        ctx.cores
    ))
}

pub(super) fn rule_cmdline_irqaffinity(ctx: &Context) -> Item {
    let id = ID_CMDLINE_IRQAFFINITY;
    let cmdline = match &ctx.cmdline {
        Ok(cmdline) => cmdline,
        Err(error) => return skip(id, "cannot read the kernel command line", error),
    };
    if ctx.cores.is_empty() {
        return no_cores(id);
    }
    let fix = format!(
        "add `irqaffinity={}` to the kernel command line (IRQs start on the housekeeping cpus)",
        display_set(&ctx.housekeeping)
    );
    let Some(value) = cmdline.value("irqaffinity") else {
        return Item::new(
            id,
            Status::Warn,
            "irqaffinity= is not set, so new IRQs may land on the replica cores".into(),
            format!("no irqaffinity= in {}", ctx.shown(PATH_CMDLINE)),
        )
        .with_fix(fix);
    };
    match CpuSet::parse(value) {
        Err(error) => Item::new(
            id,
            Status::Warn,
            "irqaffinity= does not parse".into(),
            format!("irqaffinity={value}: {error}"),
        )
        .with_fix(fix),
        Ok(list) if list.is_empty() => Item::new(
            id,
            Status::Warn,
            "irqaffinity= is empty".into(),
            format!("irqaffinity={value}"),
        )
        .with_fix(fix),
        Ok(list) => {
            let hit = list.intersection(&ctx.cores);
            if hit.is_empty() {
                Item::new(
                    id,
                    Status::Ok,
                    format!("default IRQ affinity {list} avoids the replica cores"),
                    format!("irqaffinity={value}"),
                )
            } else {
                Item::new(
                    id,
                    Status::Warn,
                    format!("irqaffinity= includes replica {}", cores_text(&hit, "", "")),
                    format!("irqaffinity={value}"),
                )
                .with_fix(fix)
            }
        }
    }
}

pub(super) fn rule_cmdline_idle(ctx: &Context) -> Item {
    let id = ID_CMDLINE_IDLE;
    let cmdline = match &ctx.cmdline {
        Ok(cmdline) => cmdline,
        Err(error) => return skip(id, "cannot read the kernel command line", error),
    };
    let idle = cmdline.value("idle");
    let acpi = cmdline
        .value("processor.max_cstate")
        .and_then(|v| v.parse::<u64>().ok());
    let intel = cmdline
        .value("intel_idle.max_cstate")
        .and_then(|v| v.parse::<u64>().ok());
    let found = format!(
        "idle={} processor.max_cstate={} intel_idle.max_cstate={}",
        idle.unwrap_or("(absent)"),
        cmdline.value("processor.max_cstate").unwrap_or("(absent)"),
        cmdline.value("intel_idle.max_cstate").unwrap_or("(absent)")
    );
    let fix = "add `processor.max_cstate=1 intel_idle.max_cstate=0` to the kernel command line \
               (or `idle=poll`, which also burns the housekeeping cpus)";
    if matches!(idle, Some("poll") | Some("halt")) {
        return Item::new(
            id,
            Status::Ok,
            format!(
                "idle={} keeps cpus out of deep C-states",
                idle.unwrap_or("")
            ),
            found,
        );
    }
    // intel_idle ignores processor.max_cstate; only its own limit (or
    // disabling it with 0, falling back to acpi_idle) bounds C-states.
    match (acpi, intel) {
        (Some(a), Some(i)) if a <= 1 && i <= 1 => Item::new(
            id,
            Status::Ok,
            "C-states are limited to C1 on the command line".into(),
            found,
        ),
        (Some(a), None) if a <= 1 => Item::new(
            id,
            Status::Warn,
            "processor.max_cstate= alone does not limit intel_idle".into(),
            found,
        )
        .with_fix(fix),
        _ => Item::new(
            id,
            Status::Warn,
            "deep C-states are not limited on the kernel command line".into(),
            found,
        )
        .with_fix(fix),
    }
}

/// What the kernel build config says about `CONFIG_NO_HZ_FULL`.
enum ConfigAnswer {
    Set(String),
    NotSet(String),
    Unreadable(String),
}

fn kernel_config_no_hz_full(tree: &HostTree) -> ConfigAnswer {
    let mut tried = Vec::new();
    let release = tree.read_trimmed(PATH_OSRELEASE);
    let mut texts: Vec<(String, String)> = Vec::new();
    match &release {
        Ok(release) => {
            let path = format!("boot/config-{release}");
            match tree.read(&path) {
                Ok(text) => texts.push((path, text)),
                Err(error) => tried.push(error.to_string()),
            }
        }
        Err(error) => tried.push(error.to_string()),
    }
    if texts.is_empty() {
        match tree
            .read_bytes(PATH_CONFIG_GZ)
            .and_then(|bytes| gunzip(tree, &bytes))
        {
            Ok(text) => texts.push((PATH_CONFIG_GZ.to_owned(), text)),
            Err(error) => tried.push(error.to_string()),
        }
    }
    let Some((path, text)) = texts.pop() else {
        return ConfigAnswer::Unreadable(tried.join("; "));
    };
    let set = text
        .lines()
        .any(|line| line.trim() == "CONFIG_NO_HZ_FULL=y");
    if set {
        ConfigAnswer::Set(format!(
            "CONFIG_NO_HZ_FULL=y in {}",
            tree.path(&path).display()
        ))
    } else {
        let line = text
            .lines()
            .find(|line| line.contains("CONFIG_NO_HZ_FULL"))
            .unwrap_or("no CONFIG_NO_HZ_FULL line");
        ConfigAnswer::NotSet(format!("{line} ({})", tree.path(&path).display()))
    }
}

fn gunzip(tree: &HostTree, bytes: &[u8]) -> Result<String, ReadError> {
    let path = tree.path(PATH_CONFIG_GZ);
    let mut text = String::new();
    flate2::read::GzDecoder::new(bytes)
        .take(FILE_BYTES_MAX)
        .read_to_string(&mut text)
        .map_err(|source| ReadError::Io { path, source })?;
    Ok(text)
}

pub(super) fn rule_kernel_no_hz_full(ctx: &Context) -> Item {
    let id = ID_KERNEL_NO_HZ_FULL;
    let fix = "boot a kernel built with CONFIG_NO_HZ_FULL=y (e.g. Ubuntu's -lowlatency/-realtime \
               flavours or a custom build; uKharon §7 used a custom 5.4 kernel)";
    match kernel_config_no_hz_full(&ctx.tree) {
        ConfigAnswer::Set(found) => Item::new(
            id,
            Status::Ok,
            "the kernel supports full dynticks (NO_HZ_FULL)".into(),
            found,
        ),
        ConfigAnswer::NotSet(found) => Item::new(
            id,
            Status::Fail,
            "the kernel is built without NO_HZ_FULL, so nohz_full= has no effect".into(),
            found,
        )
        .with_fix(fix),
        // The kernel creates /sys/devices/system/cpu/nohz_full only when
        // built with CONFIG_NO_HZ_FULL, so its presence answers the question.
        ConfigAnswer::Unreadable(tried) if ctx.tree.exists(PATH_NOHZ_FULL) => Item::new(
            id,
            Status::Ok,
            "the kernel supports full dynticks (NO_HZ_FULL)".into(),
            format!("no readable kernel config ({tried}), but {} exists, which only a NO_HZ_FULL kernel creates", ctx.shown(PATH_NOHZ_FULL)),
        ),
        ConfigAnswer::Unreadable(tried) => Item::new(
            id,
            Status::Warn,
            "cannot tell whether the kernel supports NO_HZ_FULL".into(),
            format!("{tried}; {} is absent too (it exists only on NO_HZ_FULL kernels)", ctx.shown(PATH_NOHZ_FULL)),
        )
        .with_fix(fix),
    }
}

pub(super) fn rule_sysfs_cover(
    ctx: &Context,
    id: &'static str,
    path: &str,
    what: &str,
    fix: &str,
) -> Item {
    if ctx.cores.is_empty() {
        return no_cores(id);
    }
    let text = match ctx.tree.read(path) {
        Ok(text) => text,
        // Without the sysfs cpu directory this is not a sysfs tree at all;
        // with it, the kernel would have created the file if it could.
        Err(error) if error.is_missing() && ctx.online.is_ok() => {
            return Item::new(
                id,
                Status::Fail,
                format!("the running kernel has no {what} (file absent)"),
                error.to_string(),
            )
            .with_fix(fix)
        }
        Err(error) => return skip(id, &format!("cannot read the {what} cpus"), &error),
    };
    // Some kernels print "(null)" when the mask was never allocated.
    let text = if text.trim() == "(null)" {
        ""
    } else {
        text.as_str()
    };
    match CpuSet::parse(text) {
        Err(error) => Item::new(
            id,
            Status::Warn,
            format!("the {what} cpu list does not parse"),
            format!("{}: {error}", ctx.tree.path(path).display()),
        ),
        Ok(set) => {
            let missing = ctx.cores.difference(&set);
            if missing.is_empty() {
                Item::new(
                    id,
                    Status::Ok,
                    format!(
                        "the running kernel has {} {what}",
                        cores_text(&ctx.cores, "", "")
                    ),
                    format!("{}: {set}", ctx.shown(path)),
                )
            } else {
                Item::new(
                    id,
                    Status::Fail,
                    format!(
                        "{} not {what} in the running kernel",
                        cores_text(&missing, "is", "are")
                    ),
                    format!("{}: {}", ctx.shown(path), display_set(&set)),
                )
                .with_fix(fix)
            }
        }
    }
}

pub(super) fn rule_sysfs_isolated(ctx: &Context) -> Item {
    rule_sysfs_cover(
        ctx,
        ID_SYSFS_ISOLATED,
        PATH_ISOLATED,
        "isolated",
        &format!("boot with `isolcpus=nohz,domain,managed_irq,{}`", ctx.cores),
    )
}

pub(super) fn rule_sysfs_nohz_full(ctx: &Context) -> Item {
    rule_sysfs_cover(
        ctx,
        ID_SYSFS_NOHZ_FULL,
        PATH_NOHZ_FULL,
        "nohz_full",
        &format!(
            "boot a CONFIG_NO_HZ_FULL=y kernel with `nohz_full={}`",
            ctx.cores
        ),
    )
}
