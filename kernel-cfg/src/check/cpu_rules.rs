//! Rules on what may interrupt or slow the replica cores: IRQs, frequency
//! governor, C-states and SMT siblings.

use super::*;

pub(super) fn rule_irq_affinity(ctx: &Context) -> Item {
    let id = ID_IRQ_AFFINITY;
    if ctx.cores.is_empty() {
        return no_cores(id);
    }
    let irqs = match ctx.tree.list_dir(PATH_IRQ) {
        Ok(names) => names
            .into_iter()
            .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
            .collect::<Vec<_>>(),
        Err(error) => return skip(id, "cannot list IRQs", &error),
    };
    // Managed IRQs (per-queue NVMe/NIC vectors) refuse affinity writes;
    // with isolcpus=managed_irq the kernel keeps their effective affinity
    // on housekeeping cpus, which is what counts.
    let managed_irq = ctx
        .isolcpus()
        .is_some_and(|iso| iso.has_flag("managed_irq"));
    let (columns, lines) = ctx
        .tree
        .read(PATH_INTERRUPTS)
        .map(|text| parse_interrupts(&text))
        .unwrap_or_default();
    let by_irq: BTreeMap<&str, _> = lines.iter().map(|line| (line.irq.as_str(), line)).collect();
    let mut hits = Vec::new();
    let mut unreadable = 0usize;
    let mut kept_off = 0usize;
    for irq in &irqs {
        let Ok(affinity) = ctx
            .tree
            .read_cpus(&format!("{PATH_IRQ}/{irq}/smp_affinity_list"))
        else {
            unreadable += 1;
            continue;
        };
        let hit = affinity.intersection(&ctx.cores);
        if hit.is_empty() {
            continue;
        }
        if managed_irq {
            let effective = ctx
                .tree
                .read_cpus(&format!("{PATH_IRQ}/{irq}/effective_affinity_list"));
            if matches!(effective, Ok(ref eff) if !eff.is_empty() && eff.intersection(&ctx.cores).is_empty())
            {
                kept_off += 1;
                continue;
            }
        }
        let mut entry = format!("IRQ {irq} -> {affinity}");
        let mut delivered = 0u64;
        if let Some(line) = by_irq.get(irq.as_str()) {
            delivered = columns
                .iter()
                .zip(&line.counts)
                .filter(|(cpu, _)| ctx.cores.contains(**cpu))
                .map(|(_, count)| count)
                .sum();
            let _ = write!(
                entry,
                " ({}, {delivered} so far on {})",
                line.description,
                cores_text(&ctx.cores, "", "")
            );
        }
        hits.push((delivered, entry));
    }
    // Busiest first: those are the ones that interrupt the replica now.
    hits.sort_by_key(|(delivered, _)| std::cmp::Reverse(*delivered));
    let hits: Vec<String> = hits.into_iter().map(|(_, entry)| entry).collect();
    let mut found = format!("{} IRQs in {}", irqs.len(), ctx.shown(PATH_IRQ));
    if unreadable > 0 {
        let _ = write!(
            found,
            " ({unreadable} without a readable smp_affinity_list)"
        );
    }
    if kept_off > 0 {
        let _ = write!(
            found,
            " ({kept_off} allowed on the cores but kept off them by isolcpus=managed_irq: \
             effective affinity on housekeeping cpus)"
        );
    }
    if hits.is_empty() {
        return Item::new(
            id,
            Status::Ok,
            format!(
                "no IRQ may be delivered to {}",
                cores_text(&ctx.cores, "", "")
            ),
            found,
        );
    }
    Item::new(
        id,
        Status::Warn,
        format!(
            "{} IRQs may be delivered to {}",
            hits.len(),
            cores_text(&ctx.cores, "", "")
        ),
        format!("{found}: {}", bounded_list(&hits)),
    )
    .with_fix(format!(
        "for f in /proc/irq/[0-9]*/smp_affinity_list; do echo {} > $f 2>/dev/null; done \
         (managed IRQs refuse with EIO: boot with isolcpus=managed_irq,... for those)",
        display_set(&ctx.housekeeping)
    ))
}

pub(super) fn rule_irq_default_affinity(ctx: &Context) -> Item {
    let id = ID_IRQ_DEFAULT_AFFINITY;
    if ctx.cores.is_empty() {
        return no_cores(id);
    }
    let text = match ctx.tree.read(PATH_DEFAULT_AFFINITY) {
        Ok(text) => text,
        Err(error) => return skip(id, "cannot read the default IRQ affinity", &error),
    };
    let Some(mask) = parse_cpu_mask(&text) else {
        return Item::new(
            id,
            Status::Warn,
            "the default IRQ affinity mask does not parse".into(),
            format!("{}: {}", ctx.shown(PATH_DEFAULT_AFFINITY), text.trim()),
        );
    };
    let hit = mask.intersection(&ctx.cores);
    let found = format!(
        "{}: {} (cpus {})",
        ctx.shown(PATH_DEFAULT_AFFINITY),
        text.trim(),
        display_set(&mask)
    );
    if hit.is_empty() {
        Item::new(
            id,
            Status::Ok,
            "new IRQs default to housekeeping cpus".into(),
            found,
        )
    } else {
        Item::new(
            id,
            Status::Warn,
            format!(
                "new IRQs may default to replica {}",
                cores_text(&hit, "", "")
            ),
            found,
        )
        .with_fix(format!(
            "echo {} > /proc/irq/default_smp_affinity (or boot with irqaffinity={})",
            format_cpu_mask(&ctx.housekeeping),
            display_set(&ctx.housekeeping)
        ))
    }
}

pub(super) fn rule_cpu_governor(ctx: &Context) -> Item {
    let id = ID_CPU_GOVERNOR;
    if ctx.cores.is_empty() {
        return no_cores(id);
    }
    let mut readings = Vec::new();
    let mut slow = Vec::new();
    for &core in ctx.cores.cpus() {
        if let Ok(governor) = ctx
            .tree
            .read_trimmed(&cpu_path(core, "cpufreq/scaling_governor"))
        {
            if governor != "performance" {
                slow.push(format!("cpu{core}: {governor}"));
            }
            readings.push(format!("cpu{core}: {governor}"));
        }
    }
    if readings.is_empty() {
        return Item::new(
            id,
            Status::Skip,
            "no cpufreq on the replica cores (virtual machine, or firmware controls the frequency)"
                .into(),
            format!(
                "no {}",
                ctx.shown(&cpu_path(ctx.cores.cpus()[0], "cpufreq/scaling_governor"))
            ),
        );
    }
    if slow.is_empty() {
        Item::new(
            id,
            Status::Ok,
            "the replica cores run the performance governor".into(),
            bounded_list(&readings),
        )
    } else {
        Item::new(
            id,
            Status::Warn,
            "some replica cores may run below full frequency".into(),
            bounded_list(&slow),
        )
        .with_fix(format!(
            "for c in {}; do echo performance > /sys/devices/system/cpu/cpu$c/cpufreq/scaling_governor; done",
            ctx.cores.cpus().iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" ")
        ))
    }
}

pub(super) fn rule_cpu_cstates(ctx: &Context) -> Item {
    let id = ID_CPU_CSTATES;
    if ctx.cores.is_empty() {
        return no_cores(id);
    }
    let idle_poll = ctx
        .cmdline
        .as_ref()
        .is_ok_and(|cmdline| cmdline.value("idle") == Some("poll"));
    let mut listed = 0usize;
    let mut deep = Vec::new();
    let mut shallow = Vec::new();
    for &core in ctx.cores.cpus() {
        let dir = cpu_path(core, "cpuidle");
        let Ok(states) = ctx.tree.list_dir(&dir) else {
            continue;
        };
        listed += 1;
        for state in states.iter().filter(|s| s.starts_with("state")) {
            let read = |file: &str| ctx.tree.read_trimmed(&format!("{dir}/{state}/{file}"));
            let name = read("name").unwrap_or_else(|_| state.clone());
            let disabled = read("disable").is_ok_and(|d| d != "0");
            let Some(latency_us) = read("latency").ok().and_then(|l| l.parse::<u64>().ok()) else {
                continue;
            };
            if disabled {
                continue;
            }
            let entry = format!("cpu{core} {name} ({latency_us} µs)");
            if latency_us > CSTATE_EXIT_LATENCY_US_MAX {
                deep.push(entry);
            } else {
                shallow.push(entry);
            }
        }
    }
    if listed == 0 {
        if idle_poll {
            return Item::new(
                id,
                Status::Ok,
                "idle=poll: no C-states are used".into(),
                "no cpuidle directory on the replica cores".into(),
            );
        }
        return Item::new(
            id,
            Status::Skip,
            "cannot see the C-states of the replica cores".into(),
            format!(
                "no {}",
                ctx.shown(&cpu_path(ctx.cores.cpus()[0], "cpuidle"))
            ),
        );
    }
    if deep.is_empty() {
        Item::new(
            id,
            Status::Ok,
            format!("no enabled C-state exits slower than {CSTATE_EXIT_LATENCY_US_MAX} µs"),
            format!("enabled: {}", bounded_list(&shallow)),
        )
    } else {
        Item::new(
            id,
            Status::Warn,
            format!(
                "{} enabled C-states exit slower than {CSTATE_EXIT_LATENCY_US_MAX} µs",
                deep.len()
            ),
            bounded_list(&deep),
        )
        .with_fix(format!(
            "boot with `processor.max_cstate=1 intel_idle.max_cstate=0`, or now: \
             for s in /sys/devices/system/cpu/cpu{{{}}}/cpuidle/state*; do \
             [ $(cat $s/latency) -gt {CSTATE_EXIT_LATENCY_US_MAX} ] && echo 1 > $s/disable; done",
            ctx.cores
                .cpus()
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ))
    }
}

pub(super) fn rule_cpu_smt(ctx: &Context) -> Item {
    let id = ID_CPU_SMT;
    if ctx.cores.is_empty() {
        return no_cores(id);
    }
    let isolated = ctx.isolated_any();
    let mut shared = Vec::new();
    let mut busy = Vec::new();
    let mut readings = Vec::new();
    let mut unreadable = None;
    for &core in ctx.cores.cpus() {
        let siblings = match ctx
            .tree
            .read_cpus(&cpu_path(core, "topology/thread_siblings_list"))
        {
            Ok(siblings) => siblings,
            Err(error) => {
                unreadable.get_or_insert(error);
                continue;
            }
        };
        readings.push(format!("cpu{core}: siblings {siblings}"));
        for &sibling in siblings.cpus().iter().filter(|&&s| s != core) {
            if ctx.cores.contains(sibling) {
                // Report each pair once.
                if sibling > core {
                    shared.push(format!("cores {core} and {sibling} share a physical core"));
                }
            } else if !isolated.contains(sibling) {
                busy.push(format!("sibling {sibling} of core {core} is not isolated"));
            }
        }
    }
    if readings.is_empty() {
        let error = unreadable.map(|e| e.to_string()).unwrap_or_default();
        return Item::new(
            id,
            Status::Skip,
            "cannot read the SMT siblings".into(),
            error,
        );
    }
    let problems: Vec<String> = shared.into_iter().chain(busy).collect();
    if problems.is_empty() {
        return Item::new(
            id,
            Status::Ok,
            "no SMT sibling of a replica core runs other work".into(),
            bounded_list(&readings),
        );
    }
    Item::new(
        id,
        Status::Warn,
        "SMT siblings share the replica cores' pipelines".into(),
        bounded_list(&problems),
    )
    .with_fix(
        "disable SMT (`nosmt` on the kernel command line, or \
         `echo off > /sys/devices/system/cpu/smt/control`), or pick one thread per physical \
         core and isolate its sibling too, leaving it idle",
    )
}
