//! `verbatim-kernel-cfg`: check and plan a host for microsecond replication.
//!
//! Exit codes: 0 = done (for `check`: no item failed), 1 = `check` found a
//! failing item, 2 = usage or I/O error.

#![deny(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use serde::Serialize;
use verbatim_kernel_cfg::thresholds::GAP_NS_BOUND;
use verbatim_kernel_cfg::{check, jitter, plan, CheckOptions, CpuSet, PlanOptions};

/// Check and plan a Linux host for microsecond replication (NO_HZ_FULL,
/// isolcpus, IRQs, power states).
///
/// Exit codes: 0 ok (check: no item failed), 1 check found a failing item,
/// 2 usage or I/O error.
#[derive(Debug, Parser)]
#[command(name = "verbatim-kernel-cfg", version, about, long_about = None)]
struct Cli {
    /// Read /proc, /sys and /boot under DIR instead of / (a recorded tree).
    /// Not used by `jitter`, which measures the live machine.
    #[arg(long, global = true, value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// Print one JSON object instead of the human-readable text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Report each tuning item as ok / warn / fail / skip, with the fix.
    Check {
        /// Replica cores (cpu list, e.g. 2-3). Default: the isolated cpus,
        /// else every online cpu but cpu 0.
        #[arg(long, value_name = "LIST", value_parser = parse_cpu_list)]
        cores: Option<CpuSet>,
    },
    /// Print the kernel command line, runtime commands and replica pins that
    /// `check` accepts for these cores. Changes nothing.
    Plan {
        /// Replica cores (cpu list, e.g. 2-3).
        #[arg(long, value_name = "LIST", value_parser = parse_cpu_list)]
        cores: CpuSet,
    },
    /// Pin a thread to a core and measure the gaps between consecutive clock
    /// reads (the interruptions a busy-polling replica would suffer).
    Jitter {
        /// Core to measure.
        #[arg(long)]
        core: usize,
        /// Duration in seconds (fractions allowed, e.g. 0.5).
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Count gaps longer than this (ns); default uKharon's 15 µs bound.
        #[arg(long, default_value_t = GAP_NS_BOUND)]
        threshold_ns: u64,
    },
}

fn parse_cpu_list(text: &str) -> Result<CpuSet, String> {
    CpuSet::parse(text).map_err(|error| error.to_string())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // clap exits 2 on usage errors and 0 for --help/--version.
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() { 2 } else { 0 });
        }
    };
    match run(&cli) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn print_output<T: Serialize>(
    json: bool,
    value: &T,
    human: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    let text = if json {
        let mut text = serde_json::to_string_pretty(value)?;
        text.push('\n');
        text
    } else {
        human()
    };
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth exit code 2.
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(error).context("writing to stdout"),
    }
}

fn run(cli: &Cli) -> anyhow::Result<u8> {
    match &cli.command {
        Command::Check { cores } => {
            if !cli.root.is_dir() {
                bail!("--root {} is not a directory", cli.root.display());
            }
            let report = check(&CheckOptions {
                root: cli.root.clone(),
                cores: cores.as_ref().map(|set| set.cpus().to_vec()),
            });
            print_output(cli.json, &report, || report.render())?;
            Ok(u8::try_from(report.exit_code()).unwrap_or(2))
        }
        Command::Plan { cores } => {
            if !cli.root.is_dir() {
                bail!("--root {} is not a directory", cli.root.display());
            }
            let plan = plan(&PlanOptions {
                root: cli.root.clone(),
                cores: cores.clone(),
            })
            .context("cannot make a plan")?;
            print_output(cli.json, &plan, || plan.render())?;
            Ok(0)
        }
        Command::Jitter {
            core,
            seconds,
            threshold_ns,
        } => {
            if cli.root != std::path::Path::new("/") {
                bail!("jitter measures the live machine; --root does not apply");
            }
            let report = jitter::measure(&jitter::JitterOptions {
                core: *core,
                seconds: *seconds,
                threshold_ns: *threshold_ns,
            })
            .context("jitter measurement failed")?;
            print_output(cli.json, &report, || report.render())?;
            Ok(0)
        }
    }
}
