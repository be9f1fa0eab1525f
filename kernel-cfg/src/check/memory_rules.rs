//! Rules on memory and background kernel work: transparent and reserved
//! huge pages, the memlock limit and sysctls.

use super::*;

pub(super) fn rule_mm_thp(ctx: &Context) -> Item {
    let id = ID_MM_THP;
    let text = match ctx.tree.read_trimmed(PATH_THP) {
        Ok(text) => text,
        Err(error) => return skip(id, "cannot read the transparent huge page mode", &error),
    };
    let mode = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix('[')?.strip_suffix(']'))
        .unwrap_or(text.as_str())
        .to_owned();
    let found = format!("{}: {text}", ctx.shown(PATH_THP));
    match mode.as_str() {
        "never" | "madvise" => Item::new(
            id,
            Status::Ok,
            format!("transparent huge pages: {mode} (no khugepaged scans or compaction stalls for the replica)"),
            found,
        ),
        _ => Item::new(
            id,
            Status::Warn,
            format!("transparent huge pages: {mode} (page faults may stall in compaction; khugepaged scans)"),
            found,
        )
        .with_fix(
            "echo never > /sys/kernel/mm/transparent_hugepage/enabled \
             (and `transparent_hugepage=never` on the kernel command line)",
        ),
    }
}

pub(super) fn rule_mm_hugepages(ctx: &Context) -> Item {
    let id = ID_MM_HUGEPAGES;
    let mut bytes_total: u64 = 0;
    let mut readings = Vec::new();
    if let Ok(sizes) = ctx.tree.list_dir(PATH_HUGEPAGES) {
        for size in sizes {
            let Some(kib) = size
                .strip_prefix("hugepages-")
                .and_then(|s| s.strip_suffix("kB"))
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            let Ok(count) = ctx
                .tree
                .read_trimmed(&format!("{PATH_HUGEPAGES}/{size}/nr_hugepages"))
                .map(|text| text.parse::<u64>())
            else {
                continue;
            };
            let Ok(count) = count else { continue };
            bytes_total =
                bytes_total.saturating_add(count.saturating_mul(kib.saturating_mul(1024)));
            readings.push(format!("{count} x {kib} kB"));
        }
    }
    if readings.is_empty() {
        // Older trees (or no sysfs): the default size only, from meminfo.
        let meminfo = ctx.tree.read(PATH_MEMINFO).unwrap_or_default();
        match (
            parse_meminfo_field(&meminfo, "HugePages_Total"),
            parse_meminfo_field(&meminfo, "Hugepagesize"),
        ) {
            (Some(count), Some(kib)) => {
                bytes_total = count.saturating_mul(kib.saturating_mul(1024));
                readings.push(format!("{count} x {kib} kB (meminfo)"));
            }
            _ => {
                return Item::new(
                    id,
                    Status::Skip,
                    "cannot read the huge page reservation".into(),
                    format!(
                        "neither {} nor HugePages_Total in {}",
                        ctx.shown(PATH_HUGEPAGES),
                        ctx.shown(PATH_MEMINFO)
                    ),
                )
            }
        }
    }
    let found = format!(
        "{} = {} MiB reserved",
        readings.join(" + "),
        bytes_total >> 20
    );
    if bytes_total >= HUGEPAGES_BYTES_MIN {
        Item::new(
            id,
            Status::Ok,
            format!(
                "at least {} MiB of huge pages reserved",
                HUGEPAGES_BYTES_MIN >> 20
            ),
            found,
        )
    } else {
        let pages = HUGEPAGES_BYTES_MIN / crate::thresholds::HUGEPAGE_BYTES_DEFAULT;
        Item::new(
            id,
            Status::Warn,
            format!(
                "fewer than {} MiB of huge pages reserved for registered memory",
                HUGEPAGES_BYTES_MIN >> 20
            ),
            found,
        )
        .with_fix(format!(
            "add `hugepages={pages}` to the kernel command line, or now: sysctl -w vm.nr_hugepages={pages}"
        ))
    }
}

pub(super) fn rule_limits_memlock(ctx: &Context) -> Item {
    let id = ID_LIMITS_MEMLOCK;
    let text = match ctx.tree.read(PATH_LIMITS) {
        Ok(text) => text,
        Err(error) => return skip(id, "cannot read the memlock limit", &error),
    };
    // The limit is per process (inherited from the shell or unit), so the
    // fix names each place it can come from.
    let fix = "`ulimit -l unlimited` in the replica's shell, `LimitMEMLOCK=infinity` in its \
               systemd unit, or `*  -  memlock  unlimited` in /etc/security/limits.conf \
               (the limit is per process: check from the shell or unit that starts the replica)";
    let Some(limit) = parse_memlock_limit(&text) else {
        return Item::new(
            id,
            Status::Warn,
            "cannot parse \"Max locked memory\"".into(),
            format!(
                "{} has no readable \"Max locked memory\" line",
                ctx.shown(PATH_LIMITS)
            ),
        )
        .with_fix(fix);
    };
    let Some(bytes) = limit else {
        return Item::new(
            id,
            Status::Ok,
            "locked memory is unlimited".into(),
            format!("{}: Max locked memory unlimited", ctx.shown(PATH_LIMITS)),
        );
    };
    let found = format!(
        "{}: Max locked memory {bytes} bytes ({} KiB)",
        ctx.shown(PATH_LIMITS),
        bytes >> 10
    );
    if bytes < MEMLOCK_BYTES_FAIL_BELOW {
        Item::new(
            id,
            Status::Fail,
            format!(
                "locked memory limit is below {} MiB; RDMA memory registration will fail",
                MEMLOCK_BYTES_FAIL_BELOW >> 20
            ),
            found,
        )
        .with_fix(fix)
    } else if bytes < MEMLOCK_BYTES_OK {
        Item::new(
            id,
            Status::Warn,
            format!(
                "locked memory limit is below {} MiB; the reserved huge pages cannot all be registered",
                MEMLOCK_BYTES_OK >> 20
            ),
            found,
        )
        .with_fix(fix)
    } else {
        Item::new(
            id,
            Status::Ok,
            format!(
                "locked memory limit is at least {} MiB",
                MEMLOCK_BYTES_OK >> 20
            ),
            found,
        )
    }
}

pub(super) fn rule_sysctl(
    ctx: &Context,
    id: &'static str,
    path: &str,
    key: &str,
    ok: impl Fn(u64) -> bool,
    planned: u64,
    why: &str,
) -> Item {
    let text = match ctx.tree.read_trimmed(path) {
        Ok(text) => text,
        Err(error) => return skip(id, &format!("cannot read {key}"), &error),
    };
    let found = format!("{key} = {text}");
    let fix = format!("sysctl -w {key}={planned} (and `{key} = {planned}` in /etc/sysctl.d/)");
    match text.parse::<u64>() {
        Ok(value) if ok(value) => Item::new(id, Status::Ok, format!("{key} = {value}"), found),
        Ok(value) => {
            Item::new(id, Status::Warn, format!("{key} = {value}: {why}"), found).with_fix(fix)
        }
        Err(_) => Item::new(id, Status::Warn, format!("{key} does not parse"), found).with_fix(fix),
    }
}

pub(super) fn rule_sysctl_timer_migration(ctx: &Context) -> Item {
    rule_sysctl(
        ctx,
        ID_SYSCTL_TIMER_MIGRATION,
        PATH_TIMER_MIGRATION,
        "kernel.timer_migration",
        |value| value == SYSCTL_TIMER_MIGRATION,
        SYSCTL_TIMER_MIGRATION,
        "timers may migrate onto the replica cores",
    )
}

pub(super) fn rule_sysctl_stat_interval(ctx: &Context) -> Item {
    rule_sysctl(
        ctx,
        ID_SYSCTL_STAT_INTERVAL,
        PATH_STAT_INTERVAL,
        "vm.stat_interval",
        |value| value >= SYSCTL_STAT_INTERVAL_S_MIN,
        SYSCTL_STAT_INTERVAL_S_MIN,
        "the vmstat worker wakes every cpu once per interval (seconds)",
    )
}
