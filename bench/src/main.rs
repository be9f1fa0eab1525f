//! `verbatim-bench`: latency, throughput, workload, failover and
//! comparison benchmarks for Verbatim. See bench/README.md.

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;
use verbatim_bench::bulk_sync::BulkSyncOptions;
use verbatim_bench::cluster::{self, ClusterSpec, ReplicationMode};
use verbatim_bench::compare::CompareOptions;
use verbatim_bench::failover::FailoverOptions;
use verbatim_bench::latency::{LatencyOptions, SIZES_DEFAULT};
use verbatim_bench::progress::Progress;
use verbatim_bench::reconfig::{ReconfigOptions, RemoveTarget, SCHEDULE_DEFAULT};
use verbatim_bench::recovery::{RecoveryOptions, FILL_VALUE_BYTES_DEFAULT};
use verbatim_bench::report::{self, Report};
use verbatim_bench::setup::{CpuState, Machine, Setup};
use verbatim_bench::throughput::ThroughputOptions;
use verbatim_bench::workload::{Mix, WorkloadOptions};
use verbatim_bench::zipf::Zipf;
use verbatim_client::client::Wait;
use verbatim_client::manifest::PollMode;

#[derive(Parser, Debug)]
#[command(
    name = "verbatim-bench",
    version,
    about = "Latency, throughput, workload, failover and Redis-comparison benchmarks for Verbatim",
    long_about = "Starts local Verbatim clusters (the release `verbatim` binary next to this one, \
                  or --binary) on the shared-memory fabric and measures them. Every result \
                  records its setup: fabric, poll mode, core pins, group size, machine, CPU state \
                  before the run, and the date."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug, Clone)]
struct Common {
    /// Print one JSON document (results and setup) on stdout instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Also write the JSON document to this file.
    #[arg(long, global = true, value_name = "FILE")]
    json_out: Option<PathBuf>,
    /// Write SVG plots into this directory.
    #[arg(long, global = true, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// The `verbatim` replica binary (default: next to this executable).
    #[arg(long, global = true, value_name = "PATH")]
    binary: Option<PathBuf>,
    /// Replica poll mode.
    #[arg(long, global = true, value_enum, default_value_t = Poll::LeaderBusy)]
    poll: Poll,
    /// Cores the replicas are pinned to, comma-separated, or "none"
    /// (default: the last core).
    #[arg(long, global = true, value_name = "LIST")]
    replica_cores: Option<String>,
    /// Core of the measuring client, or "none" (default: the first core).
    #[arg(long, global = true, value_name = "CORE")]
    client_core: Option<String>,
    /// How the shared-memory client waits for a reply (default spin;
    /// throughput and workload yield when clients outnumber free cores).
    #[arg(long, global = true, value_enum)]
    client_wait: Option<ClientWait>,
    /// Client attempt timeout in µs (default 50000; failover: 10000).
    #[arg(long, global = true, value_name = "US")]
    attempt_timeout_us: Option<u64>,
    /// Manifest override for the replicas (repeatable), e.g.
    /// timing.heartbeat_period_us=200.
    #[arg(long = "set", global = true, value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Before measuring, wait up to this many seconds for every CPU to be
    /// under 10 % busy (sampled every 0.5 s); the setup records the result.
    #[arg(long, global = true, value_name = "SECS", default_value_t = 0)]
    wait_idle: u64,
    /// No progress bar.
    #[arg(long, short, global = true)]
    quiet: bool,
    /// Keep the replicas' logs of every cluster the run starts (each
    /// directory is printed when its cluster stops) instead of removing
    /// them.
    #[arg(long, global = true)]
    keep_logs: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Poll {
    Busy,
    Adaptive,
    LeaderBusy,
}

impl From<Poll> for PollMode {
    fn from(p: Poll) -> PollMode {
        match p {
            Poll::Busy => PollMode::Busy,
            Poll::Adaptive => PollMode::Adaptive,
            Poll::LeaderBusy => PollMode::LeaderBusy,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ClientWait {
    Spin,
    Yield,
}

impl From<ClientWait> for Wait {
    fn from(w: ClientWait) -> Wait {
        match w {
            ClientWait::Spin => Wait::Spin,
            ClientWait::Yield => Wait::Yield,
        }
    }
}

#[derive(Args, Debug, Clone)]
struct LatencyArgs {
    /// Group sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![3u8, 5])]
    replicas: Vec<u8>,
    /// Value sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = SIZES_DEFAULT.to_vec())]
    sizes: Vec<usize>,
    /// Measured requests per point (per op, size and group size).
    #[arg(long, default_value_t = 20_000)]
    ops: u64,
    /// Warm-up requests per point.
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
    /// Open loop: schedule requests at this rate (per second) and measure
    /// from the intended send time (coordinated-omission correction).
    #[arg(long, value_name = "PER_S")]
    rate: Option<f64>,
}

#[derive(Args, Debug, Clone)]
struct ThroughputArgs {
    /// Group size.
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Largest number of client threads (points 1..=N).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Measured window per point (ms).
    #[arg(long, default_value_t = 2_000)]
    duration_ms: u64,
    /// Warm-up per point (ms).
    #[arg(long, default_value_t = 500)]
    warmup_ms: u64,
    /// Cores for the client threads, round-robin, or "none" (default:
    /// every core without a replica).
    #[arg(long, value_name = "LIST")]
    client_cores: Option<String>,
    /// Value size (bytes).
    #[arg(long, default_value_t = 64)]
    value_bytes: usize,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
    /// Pipeline depths measured with one client thread after the
    /// synchronous points (requests in flight per thread), or "none".
    #[arg(long, value_name = "LIST", default_value = "4,16,32")]
    pipeline: String,
}

#[derive(Args, Debug, Clone)]
struct WorkloadArgs {
    /// Group size.
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Replication modes, comma-separated, each on a cluster of its own
    /// with the same mixes and seeds: log, primary-backup, backup-memory
    /// (a mode the replicas refuse is skipped, and the report says why).
    #[arg(long, value_delimiter = ',', default_values_t = vec!["log".to_string(), "primary-backup".into()])]
    modes: Vec<String>,
    /// Mixes: a (50/50), b (95/5), c (read-only), w (write-only).
    #[arg(long, value_delimiter = ',', default_values_t = vec!["a".to_string(), "b".into(), "c".into(), "w".into()])]
    mixes: Vec<String>,
    /// Keys preloaded and chosen from.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Cores for the client threads, round-robin, or "none" (default:
    /// every core without a replica).
    #[arg(long, value_name = "LIST")]
    client_cores: Option<String>,
    /// Value size (bytes).
    #[arg(long, default_value_t = 64)]
    value_bytes: usize,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Measured window per mix and distribution (ms).
    #[arg(long, default_value_t = 2_000)]
    duration_ms: u64,
    /// Warm-up per point (ms).
    #[arg(long, default_value_t = 300)]
    warmup_ms: u64,
    /// Zipf skew θ (0 < θ < 1).
    #[arg(long, default_value_t = Zipf::THETA_YCSB)]
    theta: f64,
    /// Seed of the key choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum SignalKind {
    Kill,
    Stop,
    Both,
}

#[derive(Args, Debug, Clone)]
struct FailoverArgs {
    /// Kills per signal.
    #[arg(long, default_value_t = 10)]
    kills: usize,
    /// SIGKILL, SIGSTOP, or both.
    #[arg(long, value_enum, default_value_t = SignalKind::Both)]
    signal: SignalKind,
    /// Group size.
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Client writes before each kill (ms).
    #[arg(long, default_value_t = 300)]
    warmup_ms: u64,
    /// Value size (bytes).
    #[arg(long, default_value_t = 64)]
    value_bytes: usize,
    /// SIGKILL rounds also kill the coordinator leader (member 0, the
    /// first proposer of views) at the same instant (uKharon Table 2's
    /// second row; needs --replicas 5 --set views.coordinators=5 and views)
    #[arg(long)]
    with_coordinator_leader: bool,
}

#[derive(Args, Debug, Clone)]
struct CompareArgs {
    /// Value sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = vec![64usize])]
    sizes: Vec<usize>,
    /// Measured requests per series.
    #[arg(long, default_value_t = 20_000)]
    ops: u64,
    /// Warm-up requests per series.
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
    /// Verbatim group size.
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Replicas of the Redis primary (WAIT waits for all of them).
    #[arg(long, default_value_t = 2)]
    redis_replicas: usize,
    /// RESP client polls a non-blocking socket instead of sleeping in read.
    #[arg(long)]
    tcp_spin: bool,
    /// Keep every vCPU busy with SCHED_IDLE spinners (no idle wake-ups).
    #[arg(long)]
    keep_busy: bool,
    /// Skip Redis even if it is installed.
    #[arg(long)]
    no_redis: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Remove {
    Leader,
    Follower,
}

#[derive(Args, Debug, Clone)]
struct ReconfigArgs {
    /// Replica processes (slots of the manifest).
    #[arg(long, default_value_t = 5)]
    replicas: u8,
    /// Members of the first configuration (ids 0 to N-1); the others run
    /// as spares outside the group until added.
    #[arg(long, default_value_t = 3)]
    initial_members: u8,
    /// The changes: comma-separated MS:add:ID, MS:remove[:ID|leader|follower]
    /// or MS:resize:SIZE, MS from the start of the run, in time order.
    #[arg(long, default_value = SCHEDULE_DEFAULT)]
    schedule: String,
    /// Whom a bare `remove` in the schedule takes out: the leader of the
    /// moment (DARE: "the leader removes itself") or the lowest-numbered
    /// member that does not lead.
    #[arg(long, value_enum, default_value_t = Remove::Leader)]
    remove: Remove,
    /// Length of the run (ms); it goes on for at least --window-ms after
    /// the last change is confirmed.
    #[arg(long, default_value_t = 5_000)]
    duration_ms: u64,
    /// Length of one throughput sample (ms; DARE samples every 10 ms).
    #[arg(long, default_value_t = 10)]
    bucket_ms: u64,
    /// Window averaged before and after each change (ms).
    #[arg(long, default_value_t = 200)]
    window_ms: u64,
    /// Writing client threads.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Cores for the client threads, round-robin, or "none" (default:
    /// every core without a replica).
    #[arg(long, value_name = "LIST")]
    client_cores: Option<String>,
    /// Value size (bytes, at least 16: a value carries its write's number).
    #[arg(long, default_value_t = 64)]
    value_bytes: usize,
    /// Distinct keys per client thread.
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
    /// How long one change may take to be confirmed (ms).
    #[arg(long, default_value_t = 30_000)]
    change_timeout_ms: u64,
}

#[derive(Args, Debug, Clone)]
struct RecoveryArgs {
    /// Group size.
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// State to fill the store with before the transfer (MiB of values).
    #[arg(long, default_value_t = 1024)]
    state_mib: u64,
    /// Value size of the fill (bytes; at most about 32 KB: an entry holds
    /// a key and two values of the largest size).
    #[arg(long, default_value_t = FILL_VALUE_BYTES_DEFAULT)]
    fill_value_bytes: usize,
    /// Value size of the measured SETs (bytes).
    #[arg(long, default_value_t = 64)]
    value_bytes: usize,
    /// Measured window before the kill (ms).
    #[arg(long, default_value_t = 3_000)]
    baseline_ms: u64,
    /// How long the follower stays down before its restart (ms).
    #[arg(long, default_value_t = 200)]
    down_ms: u64,
    /// Log ring of each replica (bytes; default: the state's size, 1 MiB
    /// to 1 GiB, so that the fill wraps it and the ring holds the writes
    /// of one transfer).
    #[arg(long)]
    log_ring_bytes: Option<u64>,
    /// How long restart → caught up may take (s).
    #[arg(long, default_value_t = 300)]
    recovery_timeout_s: u64,
}

#[derive(Args, Debug, Clone)]
struct BulkSyncArgs {
    /// Group size.
    #[arg(long, default_value_t = 3)]
    replicas: u8,
    /// Store to fill and copy (MiB of the primary's `used_bytes`:
    /// metadata and carved slabs, what a bulk copy moves). Each replica
    /// maps a region a little larger in /dev/shm.
    #[arg(long, default_value_t = 1024)]
    store_mib: u64,
    /// Value size of the fill (bytes).
    #[arg(long, default_value_t = 4096)]
    value_bytes: usize,
    /// `backup.slab_bytes` (a power of two, at least 4096).
    #[arg(long, default_value_t = 1 << 20)]
    slab_bytes: u32,
    /// `backup.sync_chunk_bytes`: bytes of one copy WRITE (default: the
    /// manifest's, 1 MiB).
    #[arg(long)]
    sync_chunk_bytes: Option<u32>,
    /// Kill / restart / copy rounds to count (a round whose primary
    /// changed meanwhile is run again).
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Kill the backups in turn (default: the same backup every round).
    #[arg(long)]
    alternate_backups: bool,
    /// Do not hold the killed member's old segment open during the copy:
    /// the replica that unmaps it last then frees its pages in its poll
    /// loop (see bench/README.md).
    #[arg(long)]
    no_hold_old_segment: bool,
    /// Run the replicas with the manifest's failure detector (Δ 5 ms)
    /// instead of the bench's 50 ms (see bench/README.md: with 5 ms the
    /// primary is deposed during most copies here).
    #[arg(long)]
    manifest_timing: bool,
    /// Do not read every key back after the fill.
    #[arg(long)]
    no_check: bool,
    /// Period of the primary's status polls during a copy (ms).
    #[arg(long, default_value_t = 5)]
    poll_ms: u64,
    /// How long restart → synced may take (s).
    #[arg(long, default_value_t = 120)]
    sync_timeout_s: u64,
    /// Buffer of the memcpy measurement (MiB; default: the store's size;
    /// smaller buffers are copied again up to the store's size).
    #[arg(long)]
    memcpy_buffer_mib: Option<u64>,
}

#[derive(Args, Debug)]
struct FloorArgs {
    /// memcpy sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "64,256,1024,4096,65536")]
    sizes: Vec<usize>,
}

#[derive(Args, Debug)]
struct LeaseArgs {
    /// Timed calls of Active.
    #[arg(long, default_value_t = 2_000_000)]
    calls: u64,
}

#[derive(Args, Debug)]
struct MulticastArgs {
    /// Group sizes for latency (the sender and its receivers: 3,4,5 is 2,
    /// 3 and 4 receivers).
    #[arg(long, value_delimiter = ',', default_value = "3,4,5")]
    latency_members: Vec<u8>,
    /// Group sizes for throughput (every member sending) and the view
    /// change.
    #[arg(long, value_delimiter = ',', default_value = "3,4")]
    throughput_members: Vec<u8>,
    /// Messages timed per latency run (after a 10 % warm-up).
    #[arg(long, default_value_t = 20_000)]
    messages: u64,
    /// Seconds measured per throughput run.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// View changes per group size (a member stopped dead while every
    /// member sends).
    #[arg(long, default_value_t = 5)]
    kills: u32,
    /// Slots per sender ring.
    #[arg(long, default_value_t = 256)]
    window: u32,
    /// Payload of the throughput messages (bytes).
    #[arg(long, default_value_t = 100)]
    payload: usize,
    /// Cores for the member threads (member i on the i-th, round robin);
    /// default: not pinned (a group larger than the machine shares it).
    #[arg(long)]
    member_cores: Option<String>,
    /// Rounds of a SIGKILL of a replica process while every replica
    /// publishes (3 replicas, subscribers on the survivors); 0: none.
    #[arg(long, default_value_t = 3)]
    sigkill: u32,
    /// Publications per publisher in each SIGKILL round.
    #[arg(long, default_value_t = 20_000)]
    sigkill_messages: u64,
    /// Group sizes for large messages (RDMC bandwidth); `none` skips them.
    #[arg(long, default_value = "3,4")]
    rdmc_members: String,
    /// Large message sizes in bytes (K, M suffixes: 1024, 1048576).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1K,4K,16K,64K,256K,1M,4M,16M,64M"
    )]
    rdmc_sizes: Vec<String>,
    /// Large messages timed per size; 0: about 256 MiB per size, 5 to 200.
    #[arg(long, default_value_t = 0)]
    rdmc_messages: u64,
}

/// `64K`, `1M`, `4096`: bytes.
fn parse_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let n: u64 = digits
        .parse()
        .with_context(|| format!("`{s}` is not a size (use 4096, 64K or 1M)"))?;
    let shift = match unit {
        "" => 0,
        "K" | "k" | "KiB" => 10,
        "M" | "m" | "MiB" => 20,
        _ => bail!("`{s}`: the unit is K or M (1024 or 1048576 bytes)"),
    };
    n.checked_shl(shift)
        .filter(|&b| b >> shift == n)
        .with_context(|| format!("`{s}` is too large"))
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// One client, sequential SET and GET latency per value size and group size.
    Latency(LatencyArgs),
    /// Requests per second for 1..=N client threads, with the leader's batching.
    Throughput(ThroughputArgs),
    /// YCSB-style mixes (A, B, C, write-only), uniform and zipfian keys.
    Workload(WorkloadArgs),
    /// Kill (SIGKILL) or stop (SIGSTOP) the leader K times; time each phase.
    Failover(FailoverArgs),
    /// Single-client latency against Redis (SET, SET+WAIT, GET) and Verbatim (RESP, shm).
    Compare(CompareArgs),
    /// Write throughput over time while the group is reconfigured (DARE
    /// §6, figure 9a): spares join, a member (the leader) leaves, the
    /// group shrinks; every acknowledged write is checked at the end.
    Reconfig(ReconfigArgs),
    /// The leader's write latency while a follower restarts and copies a
    /// large snapshot (state transfer), against a baseline.
    Recovery(RecoveryArgs),
    /// Backup-memory mode (issue 16): a backup SIGKILLed and restarted
    /// empty is refilled by the primary's bulk copy; time and GiB/s from
    /// the restart to synced, against this machine's memcpy and the write
    /// path's rate.
    BulkSync(BulkSyncArgs),
    /// The machine's floor: the cross-core round trip of one cache line
    /// and memcpy of entry sizes (latency and compare measure it too and
    /// show their latencies as multiples of it).
    Floor(FloorArgs),
    /// The cost of Active(view) under a lease (uKharon §6): a timestamp
    /// and a local check on the client core, no cluster.
    Lease(LeaseArgs),
    /// Derecho's multicast (issue 15): SMC receipt and ordered delivery
    /// latency to 2-4 receivers, ordered messages per second with every
    /// member sending, the time to the next view after a member dies, and
    /// large messages' (RDMC) bandwidth against memcpy; member threads
    /// over the shared-memory fabric, no cluster.
    Multicast(MulticastArgs),
    /// Print (and with --plot, plot) saved JSON documents; measures nothing.
    /// Several files are merged: each section comes from the first file
    /// that has it, the setup from the first file.
    Report {
        /// Files written by --json-out (or --json's output).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// The cores of the client threads: `--client-cores`, else every core
/// without a replica.
fn client_cores(list: Option<&str>, replica_cores: &[usize]) -> anyhow::Result<Vec<usize>> {
    match list {
        Some(l) => parse_cores(l),
        None => Ok(cluster::client_cores(replica_cores)),
    }
}

fn parse_cores(s: &str) -> anyhow::Result<Vec<usize>> {
    if s.eq_ignore_ascii_case("none") || s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|c| {
            c.trim()
                .parse::<usize>()
                .with_context(|| format!("`{c}` is not a core number"))
        })
        .collect()
}

/// `--modes`: known names, each once.
fn parse_modes(list: &[String]) -> anyhow::Result<Vec<ReplicationMode>> {
    let mut modes = Vec::new();
    for m in list {
        let mode = ReplicationMode::parse(m).with_context(|| {
            format!(
                "--modes: unknown replication mode `{m}` ({})",
                ReplicationMode::ALL.map(ReplicationMode::name).join(", ")
            )
        })?;
        if modes.contains(&mode) {
            bail!("--modes lists {} twice", mode.name());
        }
        modes.push(mode);
    }
    if modes.is_empty() {
        bail!("--modes needs at least one mode");
    }
    Ok(modes)
}

fn parse_depths(s: &str) -> anyhow::Result<Vec<usize>> {
    if s.eq_ignore_ascii_case("none") || s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|d| match d.trim().parse::<usize>() {
            Ok(v) if (1..=verbatim_client::pipeline::PIPELINE_DEPTH_MAX).contains(&v) => Ok(v),
            _ => bail!(
                "--pipeline: `{d}` is not a depth from 1 to {} (a list such as 4,16,32, or none)",
                verbatim_client::pipeline::PIPELINE_DEPTH_MAX
            ),
        })
        .collect()
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            if matches!(
                e.downcast_ref::<verbatim_bench::BenchError>(),
                Some(verbatim_bench::BenchError::Interrupted)
            ) {
                eprintln!("interrupted; every replica and Redis server was stopped");
                return std::process::ExitCode::from(130);
            }
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    verbatim_bench::signals::install().context("installing the Ctrl-C handler")?;
    let c = &cli.common;
    if let Cmd::Report { files } = &cli.cmd {
        let mut merged: Option<Report> = None;
        for file in files {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            let r: Report = serde_json::from_str(&text).with_context(|| {
                format!("{} is not a verbatim-bench JSON document", file.display())
            })?;
            match merged.as_mut() {
                None => merged = Some(r),
                Some(m) => m.merge(r),
            }
        }
        let mut report = merged.expect("clap requires a file");
        report.evaluate_goals();
        return output(&report, c);
    }

    let (default_replica_cores, default_client_core) = cluster::default_cores();
    let replica_cores = match &c.replica_cores {
        Some(s) => parse_cores(s)?,
        None => default_replica_cores,
    };
    let client_core = match &c.client_core {
        Some(s) => parse_cores(s)?.first().copied(),
        None => default_client_core,
    };
    let all_cores = cluster::core_ids();
    for core in replica_cores.iter().chain(client_core.iter()) {
        if !all_cores.contains(core) {
            bail!("core {core} does not exist here (cores {all_cores:?})");
        }
    }
    let binary = cluster::resolve_binary(c.binary.as_deref())?;
    let replica_build = cluster::build_of(&binary);
    let bench_build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    if replica_build != "release" || bench_build != "release" {
        eprintln!(
            "warning: replicas {replica_build}, bench {bench_build}: real numbers need release \
             builds (cargo build --release -p verbatim-host -p verbatim-bench)"
        );
    }
    let poll: PollMode = c.poll.into();
    let wait: Wait = c.client_wait.map_or(Wait::Spin, Into::into);
    let spec = ClusterSpec {
        binary: binary.clone(),
        poll,
        replica_cores: replica_cores.clone(),
        overrides: c.overrides.clone(),
        keep_logs: c.keep_logs,
    };
    let show_progress = !c.quiet;
    let attempt =
        |default_us: u64| Duration::from_micros(c.attempt_timeout_us.unwrap_or(default_us));

    if !c.json {
        eprintln!("sampling CPU load before the run…");
    }
    let mut cpu = CpuState::sample(Duration::from_millis(500));
    let idle_deadline = std::time::Instant::now() + Duration::from_secs(c.wait_idle);
    while cpu.vcpus_before != "idle" && std::time::Instant::now() < idle_deadline {
        verbatim_bench::signals::check()?;
        cpu = CpuState::sample(Duration::from_millis(500));
    }
    if cpu.vcpus_before != "idle" && !c.json {
        eprintln!(
            "warning: the CPUs were busy before the run ({:?} busy, load average {:.2}): \
             numbers will be noisier",
            cpu.busy_fraction
                .iter()
                .map(|f| format!("{:.0}%", f * 100.0))
                .collect::<Vec<_>>(),
            cpu.load_average[0]
        );
    }
    let pins = format!(
        "replicas {} ({poll}: {}), client {} ({})",
        if replica_cores.is_empty() {
            "unpinned".to_string()
        } else {
            format!("on core(s) {replica_cores:?}")
        },
        match poll {
            PollMode::LeaderBusy => "the leader spins, followers park",
            PollMode::Busy => "every replica spins",
            PollMode::Adaptive => "replicas spin briefly, then park",
        },
        client_core.map_or("unpinned".to_string(), |c| format!("on core {c}")),
        if wait == Wait::Spin {
            "spinning"
        } else {
            "spinning briefly, then yielding"
        },
    );
    cpu.during = pins;
    let group_sizes = match &cli.cmd {
        Cmd::Latency(a) => a.replicas.clone(),
        Cmd::Throughput(a) => vec![a.replicas],
        Cmd::Workload(a) => vec![a.replicas],
        Cmd::Failover(a) => vec![a.replicas],
        Cmd::Compare(a) => vec![a.replicas],
        Cmd::Reconfig(a) => vec![a.initial_members, a.replicas],
        Cmd::Recovery(a) => vec![a.replicas],
        Cmd::BulkSync(a) => vec![a.replicas],
        Cmd::Floor(_) | Cmd::Lease(_) => Vec::new(),
        Cmd::Multicast(a) => a.latency_members.clone(),
        Cmd::Report { .. } => unreachable!("handled above"),
    };
    let mut setup = Setup {
        fabric: "shm".into(),
        poll: poll.to_string(),
        replica_cores: replica_cores.clone(),
        client_core,
        client_wait: cluster::wait_name(wait).into(),
        group_sizes,
        machine: Machine::probe(),
        cpu,
        date_utc: verbatim_bench::setup::now_utc(),
        replica_binary: binary.display().to_string(),
        replica_build,
        bench_build: bench_build.into(),
        overrides: c.overrides.clone(),
        timing: cluster::timing_with(&c.overrides),
        method: "closed loop (each request's own latency; the next starts when it returns), \
                 HDR histograms (3 significant digits) after a warm-up, timed with the monotonic \
                 clock around each client call"
            .into(),
        source_revision: verbatim_bench::setup::source_revision(),
    };
    let progress = Progress::new(show_progress && !c.json, 1, "starting");
    let mut report = Report::new(setup.clone());
    // The floor on the benchmark's own pair of cores (client, replicas),
    // so every latency can be read as a multiple of it.
    let floor_pair = {
        let client = client_core.unwrap_or(0);
        let replica = replica_cores.first().copied().unwrap_or_else(|| {
            all_cores
                .iter()
                .copied()
                .find(|&c| c != client)
                .unwrap_or(client)
        });
        (client, replica)
    };
    if matches!(
        cli.cmd,
        Cmd::Latency(_) | Cmd::Compare(_) | Cmd::Multicast(_)
    ) {
        progress.stage(1, "measuring the floor");
        report.floor = Some(verbatim_bench::floor::measure(
            floor_pair.0,
            floor_pair.1,
            &[],
            &[64, 1024, 4096],
        ));
    }
    match &cli.cmd {
        Cmd::Lease(a) => {
            if a.calls == 0 {
                bail!("--calls must be at least 1");
            }
            report.lease = Some(verbatim_bench::lease::measure(client_core, a.calls));
        }
        Cmd::Multicast(a) => {
            let sizes = a.latency_members.iter().chain(&a.throughput_members);
            if let Some(bad) = sizes.clone().find(|&&n| !(2..=8).contains(&n)) {
                bail!("a multicast group has 2 to 8 members, not {bad}");
            }
            if a.messages == 0 || a.seconds <= 0.0 || !a.seconds.is_finite() {
                bail!("--messages and --seconds must be positive");
            }
            if !(1..=4096).contains(&a.window) {
                bail!("--window takes 1 to 4096 slots");
            }
            if !(16..=1024).contains(&a.payload) {
                bail!("--payload takes 16 to 1024 bytes");
            }
            let cores = match &a.member_cores {
                Some(l) => parse_cores(l)?,
                None => Vec::new(),
            };
            let rdmc = if a.rdmc_members.eq_ignore_ascii_case("none") || a.rdmc_members.is_empty() {
                None
            } else {
                let members = a
                    .rdmc_members
                    .split(',')
                    .map(|m| {
                        m.trim()
                            .parse::<u8>()
                            .ok()
                            .filter(|n| (2..=8).contains(n))
                            .with_context(|| {
                                format!("--rdmc-members: `{m}` is not a group size of 2 to 8")
                            })
                    })
                    .collect::<anyhow::Result<Vec<u8>>>()?;
                let sizes = a
                    .rdmc_sizes
                    .iter()
                    .map(|s| parse_size(s))
                    .collect::<anyhow::Result<Vec<u64>>>()?;
                if let Some(bad) = sizes.iter().find(|&&b| !(1..=(1u64 << 30)).contains(&b)) {
                    bail!("--rdmc-sizes: {bad} bytes; use 1 byte to 1 GiB");
                }
                Some(verbatim_bench::rdmc::RdmcOptions {
                    members,
                    sizes,
                    messages: a.rdmc_messages,
                    cores: cores.clone(),
                })
            };
            setup.method = "member threads of one process, each with its own /dev/shm segment and \
                            shared-memory fabric endpoint, running the replicas' multicast engine \
                            (no other engine); timestamps from one monotonic clock; HDR histograms \
                            after a 10 % warm-up; a thread yields the core when a pass did nothing"
                .into();
            report.multicast = Some(verbatim_bench::multicast::run(
                &verbatim_bench::multicast::McastOptions {
                    latency_members: a.latency_members.clone(),
                    throughput_members: a.throughput_members.clone(),
                    messages: a.messages,
                    seconds: a.seconds,
                    kills: a.kills,
                    window: a.window,
                    payload_bytes: a.payload,
                    cores,
                    sigkill_rounds: a.sigkill,
                    sigkill_messages: a.sigkill_messages.max(3),
                    rdmc,
                },
                Some(&spec),
                |what| progress.stage(1, what),
            )?);
        }
        Cmd::Floor(a) => {
            report.floor = Some(verbatim_bench::floor::measure(
                floor_pair.0,
                floor_pair.1,
                &all_cores,
                &a.sizes,
            ));
        }
        Cmd::Latency(a) => {
            if a.rate.is_some_and(|r| r <= 0.0 || !r.is_finite()) {
                bail!("--rate must be a positive number of requests per second");
            }
            if a.rate.is_some() {
                setup.method = "open loop: request i is due at start + i/rate; its latency counts \
                                from that intended time (coordinated omission corrected, Gil \
                                Tene), service time from the actual send kept separately; HDR \
                                histograms after a warm-up"
                    .into();
            }
            report.latency = Some(verbatim_bench::latency::run(
                &spec,
                &LatencyOptions {
                    group_sizes: a.replicas.clone(),
                    value_sizes: a.sizes.clone(),
                    ops: a.ops,
                    warmup: a.warmup,
                    keys: a.keys,
                    rate_per_s: a.rate,
                    client_core,
                    wait,
                    attempt_timeout: attempt(50_000),
                },
                &progress,
            )?);
        }
        Cmd::Throughput(a) => {
            if a.clients == 0 {
                bail!("--clients must be at least 1");
            }
            let cores = client_cores(a.client_cores.as_deref(), &replica_cores)?;
            report.throughput = Some(verbatim_bench::throughput::run(
                &spec,
                &ThroughputOptions {
                    replicas: a.replicas,
                    clients_max: a.clients,
                    duration: Duration::from_millis(a.duration_ms),
                    warmup: Duration::from_millis(a.warmup_ms),
                    value_bytes: a.value_bytes,
                    keys: a.keys,
                    wait: c.client_wait.is_some().then_some(wait),
                    attempt_timeout: attempt(50_000),
                    client_cores: cores,
                    pipeline_depths: parse_depths(&a.pipeline)?,
                },
                &progress,
            )?);
        }
        Cmd::Workload(a) => {
            let mixes = a
                .mixes
                .iter()
                .map(|m| Mix::parse(m).with_context(|| format!("unknown mix `{m}` (a, b, c, w)")))
                .collect::<anyhow::Result<Vec<_>>>()?;
            if !(a.theta > 0.0 && a.theta < 1.0) {
                bail!("--theta must be between 0 and 1 (exclusive)");
            }
            if a.clients == 0 {
                bail!("--clients must be at least 1");
            }
            let modes = parse_modes(&a.modes)?;
            // The rows are labelled with --modes' names: a --set of the
            // mode would make them lie (the mode's override comes last).
            if let Some(o) = c.overrides.iter().find(|o| {
                o.split_once('=')
                    .is_some_and(|(k, _)| k.trim() == "cluster.mode")
            }) {
                bail!("workload: `--set {o}`: choose replication modes with --modes instead");
            }
            let cores = client_cores(a.client_cores.as_deref(), &replica_cores)?;
            setup.method = format!(
                "{}; CPU per request: utime + stime of every replica process from \
                 /proc/<pid>/stat read just before and just after each window, over the \
                 requests completed in it",
                setup.method
            );
            report.workload = Some(verbatim_bench::workload::run(
                &spec,
                &WorkloadOptions {
                    replicas: a.replicas,
                    modes,
                    mixes,
                    keys: a.keys,
                    value_bytes: a.value_bytes,
                    clients: a.clients,
                    wait: if c.client_wait.is_some() {
                        wait
                    } else {
                        verbatim_bench::throughput::auto_wait(a.clients, &cores)
                    },
                    client_cores: cores,
                    duration: Duration::from_millis(a.duration_ms),
                    warmup: Duration::from_millis(a.warmup_ms),
                    theta: a.theta,
                    seed: a.seed,
                    attempt_timeout: attempt(50_000),
                },
                &progress,
            )?);
        }
        Cmd::Failover(a) => {
            if a.kills == 0 {
                bail!("--kills must be at least 1");
            }
            if a.with_coordinator_leader && a.signal != SignalKind::Kill {
                bail!(
                    "--with-coordinator-leader applies to SIGKILL rounds only: add --signal kill"
                );
            }
            report.failover = Some(verbatim_bench::failover::run(
                &spec,
                &FailoverOptions {
                    kills: a.kills,
                    sigkill: a.signal != SignalKind::Stop,
                    sigstop: a.signal != SignalKind::Kill,
                    replicas: a.replicas,
                    warmup: Duration::from_millis(a.warmup_ms),
                    value_bytes: a.value_bytes,
                    client_core,
                    wait,
                    attempt_timeout: attempt(10_000),
                    with_coordinator_leader: a.with_coordinator_leader,
                },
                &progress,
            )?);
        }
        Cmd::Reconfig(a) => {
            let remove = match a.remove {
                Remove::Leader => RemoveTarget::Leader,
                Remove::Follower => RemoveTarget::Follower,
            };
            let cores = client_cores(a.client_cores.as_deref(), &replica_cores)?;
            setup.method = "closed loop; every acknowledged write counted in the bucket of its \
                            completion time (monotonic clock); group changes asked of the leader \
                            through its status socket (verbatim_status::change_group) and \
                            confirmed once their last CONFIG entry committed"
                .into();
            report.reconfig = Some(verbatim_bench::reconfig::run(
                &spec,
                &ReconfigOptions {
                    replicas: a.replicas,
                    initial_members: a.initial_members,
                    clients: a.clients,
                    wait: if c.client_wait.is_some() {
                        wait
                    } else {
                        verbatim_bench::throughput::auto_wait(a.clients, &cores)
                    },
                    client_cores: cores,
                    attempt_timeout: attempt(10_000),
                    value_bytes: a.value_bytes,
                    keys: a.keys,
                    bucket: Duration::from_millis(a.bucket_ms),
                    duration: Duration::from_millis(a.duration_ms),
                    window: Duration::from_millis(a.window_ms),
                    schedule: verbatim_bench::reconfig::parse_schedule(&a.schedule, remove)?,
                    change_timeout: Duration::from_millis(a.change_timeout_ms),
                },
                &progress,
            )?);
        }
        Cmd::Recovery(a) => {
            report.recovery = Some(verbatim_bench::recovery::run(
                &spec,
                &RecoveryOptions {
                    replicas: a.replicas,
                    state_mib: a.state_mib,
                    fill_value_bytes: a.fill_value_bytes,
                    probe_value_bytes: a.value_bytes,
                    baseline: Duration::from_millis(a.baseline_ms),
                    down: Duration::from_millis(a.down_ms),
                    recovery_timeout: Duration::from_secs(a.recovery_timeout_s),
                    log_ring_bytes: a.log_ring_bytes,
                    client_core,
                    wait,
                    attempt_timeout: attempt(50_000),
                },
                &progress,
            )?);
        }
        Cmd::BulkSync(a) => {
            setup.method = "one pipelined client fills the store (16 requests in flight); a \
                            backup is SIGKILLed, its exit awaited through a pidfd, and restarted \
                            once the primary marks its copy needed; the primary's status \
                            (verbatim_status, over its socket) is polled every --poll-ms from the \
                            restart until the member's copy is synced and back in the view; \
                            times from the monotonic clock at each status reply; memcpy timed \
                            before the cluster starts, on the client core"
                .into();
            let b = verbatim_bench::bulk_sync::run(
                &spec,
                &BulkSyncOptions {
                    replicas: a.replicas,
                    store_mib: a.store_mib,
                    value_bytes: a.value_bytes,
                    slab_bytes: a.slab_bytes,
                    sync_chunk_bytes: a.sync_chunk_bytes,
                    rounds: a.rounds,
                    alternate_backups: a.alternate_backups,
                    hold_old_segment: !a.no_hold_old_segment,
                    manifest_timing: a.manifest_timing,
                    check_fill: !a.no_check,
                    poll: Duration::from_millis(a.poll_ms),
                    sync_timeout: Duration::from_secs(a.sync_timeout_s),
                    memcpy_buffer_bytes: a.memcpy_buffer_mib.map(|m| m.max(1) << 20),
                    client_core,
                    attempt_timeout: attempt(50_000),
                },
                &progress,
            )?;
            // The timing the replicas ran with (the bench's own overrides
            // included), not only the user's.
            setup.timing = cluster::timing_with(&b.replica_overrides);
            report.bulk_sync = Some(b);
        }
        Cmd::Report { .. } => unreachable!("handled above"),
        Cmd::Compare(a) => {
            report.compare = Some(verbatim_bench::compare::run(
                &spec,
                &CompareOptions {
                    value_sizes: a.sizes.clone(),
                    ops: a.ops,
                    warmup: a.warmup,
                    keys: a.keys,
                    replicas: a.replicas,
                    redis_replicas: a.redis_replicas,
                    client_core,
                    server_cores: replica_cores.clone(),
                    wait,
                    attempt_timeout: attempt(50_000),
                    tcp_spin: a.tcp_spin,
                    keep_busy: a.keep_busy,
                    skip_redis: a.no_redis,
                },
                &progress,
            )?);
        }
    }
    progress.finish();
    report.setup = setup;
    report.evaluate_goals();
    output(&report, c)?;
    // After the output, so that a failed run still shows what happened.
    if let Some(f) = report
        .recovery
        .as_ref()
        .and_then(|r| r.transfer.failure.as_ref())
    {
        bail!("{f}");
    }
    if let Some(f) = report.bulk_sync.as_ref().and_then(|b| b.failure()) {
        bail!("{f}");
    }
    if let Some(m) = &report.multicast {
        if let Some(k) = m
            .sigkill
            .iter()
            .find(|k| !k.same_sequence || k.publish_errors > 0)
        {
            bail!(
                "after a SIGKILL the survivors' subscribers disagree or lost publications \
                 (received {:?}, {} PUBLISH errors)",
                k.received,
                k.publish_errors
            );
        }
        if let Some(v) = m.view_changes.iter().find(|v| !v.same_sequence) {
            bail!(
                "after a view change of {} members the survivors delivered different sequences: {:?}",
                v.members,
                v.delivered_in_epoch
            );
        }
    }
    if let Some(r) = &report.reconfig {
        if r.writes.lost > 0 {
            bail!(
                "{} acknowledged writes were lost (first: {})",
                r.writes.lost,
                r.writes.lost_examples.first().map_or("?", String::as_str)
            );
        }
        if let Some(failed) = r.changes.iter().find(|c| c.error.is_some()) {
            bail!(
                "{} was not confirmed: {}",
                failed.request,
                failed.error.as_deref().unwrap_or("?")
            );
        }
    }
    Ok(())
}

/// Prints the report (table or JSON), writes --json-out and the plots.
fn output(report: &Report, c: &Common) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report).context("serialising the report")?;
    if let Some(path) = &c.json_out {
        std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
    }
    if c.json {
        println!("{json}");
    } else {
        print!("{}", report::render(report));
    }
    if let Some(dir) = &c.plot {
        let files = verbatim_bench::plot::write_all(report, dir)?;
        if !c.json {
            for f in files {
                println!("plot: {}", f.display());
            }
        }
    }
    Ok(())
}
