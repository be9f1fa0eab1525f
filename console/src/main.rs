//! `verbatim-console`: watch a running verbatim group.
//!
//! ```text
//! verbatim-console                      # the cluster `verbatim up` started
//! verbatim-console --connect /run/user/1000/verbatim-demo/cluster.toml
//! verbatim-console --connect replica-0.sock --once --width 80 --height 24
//! ```

use anyhow::Context as _;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use verbatim_console::link::WatchConfig;
use verbatim_console::once::{run_once, OnceOptions};
use verbatim_console::tui::{run_tui, TuiOptions};
use verbatim_console::{target, ConsoleError, Panel};

/// A live view of a running verbatim group: replicas, failovers,
/// throughput, latency and events.
#[derive(Parser, Debug)]
#[command(name = "verbatim-console", version)]
struct Args {
    /// A replica's status socket, or the cluster manifest (`verbatim up`
    /// prints its path) to attach to every replica. Default: the local
    /// cluster's manifest, found as `verbatim status` finds it
    /// (`$XDG_RUNTIME_DIR/verbatim-local/cluster.toml`, or under the temp
    /// directory).
    #[arg(long, short = 'c', value_name = "SOCKET|MANIFEST")]
    connect: Option<PathBuf>,
    /// Print one rendered frame as plain text and exit (scripts, tests).
    #[arg(long)]
    once: bool,
    /// --once: longest wait for the first snapshot of every replica.
    #[arg(long, default_value_t = 2_000, value_name = "MS")]
    timeout_ms: u64,
    /// --once: frame width in columns.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=1000))]
    width: u16,
    /// --once: frame height in rows.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u16).range(1..=1000))]
    height: u16,
    /// --once: panel to print (overview, failovers, events, replica).
    #[arg(long, default_value = "overview", value_parser = parse_panel)]
    panel: Panel,
    /// --once: replica id shown by the replica panel.
    #[arg(long, value_name = "ID")]
    select: Option<u8>,
    /// Snapshot period requested from each replica.
    #[arg(long, default_value_t = 200, value_name = "MS", value_parser = clap::value_parser!(u64).range(20..=60_000))]
    interval_ms: u64,
    /// Write logs to this file (nothing is logged otherwise; never to the
    /// terminal, which belongs to the view).
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
}

fn parse_panel(name: &str) -> Result<Panel, String> {
    Panel::parse(name)
        .ok_or_else(|| format!("`{name}`: choose overview, failovers, events or replica"))
}

fn init_logging(path: &PathBuf) -> anyhow::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening the log file {}", path.display()))?;
    tracing_subscriber::fmt()
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .init();
    Ok(())
}

fn run(args: &Args) -> anyhow::Result<()> {
    if let Some(path) = &args.log_file {
        init_logging(path)?;
    }
    let connect = args
        .connect
        .clone()
        .unwrap_or_else(verbatim_status::paths::local_manifest);
    let target = target::resolve(&connect).with_context(|| {
        if args.connect.is_none() {
            "no --connect given and no local cluster found: start one with `verbatim up`, or pass --connect".to_string()
        } else {
            format!("--connect {}", connect.display())
        }
    })?;
    tracing::info!(endpoints = target.endpoints.len(), "attaching");
    let watch = WatchConfig {
        interval_ms: args.interval_ms,
        ..WatchConfig::default()
    };
    if args.once {
        let options = OnceOptions {
            timeout_ms: args.timeout_ms,
            width: args.width,
            height: args.height,
            panel: args.panel,
            select_id: args.select,
            watch,
        };
        let lines = run_once(&target, &options)?;
        let mut out = lines.join("\n");
        out.push('\n');
        std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes())
            .context("writing the frame")?;
        return Ok(());
    }
    run_tui(
        &target,
        &TuiOptions {
            watch,
            ..TuiOptions::default()
        },
    )
    .map_err(|e| match e {
        ConsoleError::Terminal(io) => anyhow::Error::new(io)
            .context("cannot drive this terminal (use --once for a text frame)"),
        other => other.into(),
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("verbatim-console: {e:#}");
            ExitCode::FAILURE
        }
    }
}
