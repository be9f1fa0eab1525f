//! `verbatim`: the replica process and the tools around it.

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use verbatim_client::client::{Client, ClientOptions, Transport};
use verbatim_client::local::{LocalCluster, LocalOptions};
use verbatim_client::manifest::{Manifest, PollMode};
use verbatim_status::MemberChange;

#[derive(Parser)]
#[command(
    name = "verbatim",
    version,
    about = "Microsecond replicated key-value store over one-sided writes"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
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

#[derive(Subcommand)]
enum Cmd {
    /// Run one replica of a cluster.
    Replica {
        /// The cluster manifest (TOML).
        #[arg(long)]
        config: PathBuf,
        /// This replica's member id.
        #[arg(long)]
        id: u8,
        /// Poll mode (overrides the manifest).
        #[arg(long, value_enum)]
        poll: Option<Poll>,
        /// Core to pin the poll loop to (overrides the manifest).
        #[arg(long)]
        core: Option<usize>,
        /// Manifest overrides, `section.key=value` (repeatable).
        #[arg(long = "set")]
        overrides: Vec<String>,
        /// Wait this long for every peer before starting anyway.
        #[arg(long, default_value_t = 30_000)]
        connect_timeout_ms: u64,
        /// Skip the host tuning checks at start.
        #[arg(long)]
        no_kernel_checks: bool,
    },
    /// Start a local cluster as child processes; Ctrl-C stops it.
    Up {
        /// Number of replicas.
        #[arg(long, default_value_t = 3)]
        replicas: u8,
        /// Cluster name.
        #[arg(long, default_value = verbatim_status::paths::LOCAL_CLUSTER_NAME)]
        name: String,
        /// RESP port of replica 0 (the others follow).
        #[arg(long, default_value_t = 7000)]
        base_port: u16,
        /// Poll mode of the replicas.
        #[arg(long, value_enum, default_value = "adaptive")]
        poll: Poll,
        /// Cores to pin replicas to, round-robin (e.g. 0,1).
        #[arg(long, value_delimiter = ',')]
        cores: Vec<usize>,
        /// Manifest overrides (repeatable).
        #[arg(long = "set")]
        overrides: Vec<String>,
        /// Do not restart a replica that exits (by default `up` restarts
        /// it: a new process with empty memory that rejoins the group).
        #[arg(long)]
        no_heal: bool,
        /// Spare replicas started outside the group (ids after the
        /// members), ready for `verbatim member add <id>`.
        #[arg(long, default_value_t = 0)]
        spares: u8,
    },
    /// Change the group's members (DARE §3.4) through its leader; returns
    /// once the new configuration has committed.
    Member {
        /// The cluster manifest (default: the one `verbatim up` wrote).
        #[arg(long)]
        config: Option<PathBuf>,
        /// How long to wait for the change to commit.
        #[arg(long, default_value_t = 60_000)]
        timeout_ms: u64,
        #[command(subcommand)]
        op: MemberCmd,
    },
    /// Key-value commands against a cluster.
    Kv {
        /// The cluster manifest (default: the one `verbatim up` wrote).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Use RESP over TCP instead of shared memory.
        #[arg(long)]
        tcp: bool,
        #[command(subcommand)]
        op: KvCmd,
    },
    /// The group's atomic multicast (Derecho): publish, or print what is
    /// delivered, through a replica's RESP listener (needs `[multicast]
    /// window > 0`, e.g. `verbatim up --set multicast.window=64`); or
    /// `join` an embedded group of processes without replicas.
    Mcast {
        /// The cluster manifest (default: the one `verbatim up` wrote).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The replica to talk to.
        #[arg(long, default_value_t = 0)]
        member: u8,
        #[command(subcommand)]
        op: McastCmd,
    },
    /// Status of every replica.
    Status {
        /// The cluster manifest (default: the one `verbatim up` wrote).
        #[arg(long)]
        config: Option<PathBuf>,
        /// One JSON array of snapshots.
        #[arg(long)]
        json: bool,
    },
    /// Start 3 replicas, run a workload, kill the leader, report.
    Demo {
        /// Print the summary as one JSON object.
        #[arg(long)]
        json: bool,
        /// Replicas.
        #[arg(long, default_value_t = 3)]
        replicas: u8,
        /// Workload duration (ms).
        #[arg(long, default_value_t = 3000)]
        duration_ms: u64,
        /// Value size (bytes).
        #[arg(long, default_value_t = 64)]
        value_bytes: usize,
    },
}

#[derive(Subcommand)]
enum MemberCmd {
    /// Add member <id> (a spare, or one removed before): into a free slot
    /// below the group's size, or into the next slot (the group grows by
    /// one, through the extended and transitional configurations).
    Add { id: u8 },
    /// Remove member <id> (the leader too: it steps down once done).
    Remove { id: u8 },
    /// Shrink the group to <size> slots (members above it leave).
    Resize { size: u8 },
}

#[derive(Subcommand)]
enum McastCmd {
    /// Multicast `message` on `channel`; prints how many of the replica's
    /// subscribers it reached once the replica delivered it.
    Send { channel: String, message: String },
    /// Print `channel message` for every message delivered on the
    /// channels, in the group's total order (the same on every replica).
    Tail {
        #[arg(required = true)]
        channels: Vec<String>,
        /// Stop after this many messages.
        #[arg(long)]
        count: Option<u64>,
    },
    /// Print a replica's multicast log (`[multicast] persistent`): the
    /// views, messages received and messages delivered on its disk.
    Log {
        /// The log file (`<log_dir>/mcast-<cluster>-<id>.log`).
        path: PathBuf,
    },
    /// Become a member of an embedded group (no replica; the others run
    /// the same command with their own --me): multicast each stdin line,
    /// print `<view> <seq> <sender> <message>` per delivered message and
    /// `# view <epoch>: members <ids>` per view.
    Join {
        /// The group's name (its members' segments are
        /// `<dir>/verbatim-group-<group>-<member>`).
        group: String,
        /// Members of the group (2 to 8).
        #[arg(long)]
        members: u8,
        /// This member's id (0 to members - 1).
        #[arg(long)]
        me: u8,
        /// Slots per sender ring.
        #[arg(long, default_value_t = 64)]
        window: u32,
        /// Longest line, bytes.
        #[arg(long, default_value_t = 256)]
        payload_bytes_max: u32,
        /// Where the segments are.
        #[arg(long, default_value = "/dev/shm")]
        dir: PathBuf,
        /// How long to wait for the other members' segments at start (ms).
        #[arg(long, default_value_t = 10_000)]
        connect_timeout_ms: u64,
        /// Keep running after stdin ends (a listener: `< /dev/null`);
        /// only a signal ends it.
        #[arg(long)]
        stay: bool,
    },
}

#[derive(Subcommand)]
enum KvCmd {
    /// Read a key.
    Get { key: String },
    /// Write a key.
    Set { key: String, value: String },
    /// Delete a key.
    Del { key: String },
    /// Add to an integer value.
    Incr {
        key: String,
        #[arg(default_value_t = 1, allow_hyphen_values = true)]
        delta: i64,
    },
    /// Set `new` if the value is `expected` (`--absent`: if the key is absent).
    Cas {
        key: String,
        new: String,
        expected: Option<String>,
        #[arg(long)]
        absent: bool,
    },
}

fn default_manifest(config: Option<PathBuf>) -> Result<Manifest> {
    let path = match config {
        Some(p) => p,
        None => verbatim_status::paths::local_manifest(),
    };
    Manifest::load(&path, &[])
        .map_err(|e| anyhow!("{e} (start a cluster with `verbatim up`, or pass --config)"))
}

fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn shutdown_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, flag.clone()).context("installing signal handlers")?;
    }
    Ok(flag)
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Replica {
            config,
            id,
            poll,
            core,
            mut overrides,
            connect_timeout_ms,
            no_kernel_checks,
        } => {
            init_tracing("info");
            if let Some(p) = poll {
                overrides.push(format!("cluster.poll={}", PollMode::from(p)));
            }
            if let Some(c) = core {
                overrides.push(format!("members.{id}.core={c}"));
            }
            let manifest = Manifest::load(&config, &overrides)
                .map_err(|e| anyhow!("{}: {e}", config.display()))?;
            let shutdown = shutdown_flag()?;
            verbatim_host::replica::run(
                verbatim_host::replica::ReplicaOptions {
                    manifest,
                    id,
                    connect_timeout: Duration::from_millis(connect_timeout_ms),
                    keys_max: verbatim_host::replica::KEYS_MAX_DEFAULT,
                    kernel_checks: !no_kernel_checks,
                },
                shutdown,
            )?;
            Ok(())
        }
        Cmd::Up {
            replicas,
            name,
            base_port,
            poll,
            cores,
            mut overrides,
            no_heal,
            spares,
        } => {
            init_tracing("warn");
            if spares > 0 {
                overrides.push(format!("cluster.initial_members={replicas}"));
            }
            let replicas = replicas
                .checked_add(spares)
                .ok_or_else(|| anyhow!("--replicas plus --spares is too many"))?;
            let binary = std::env::current_exe().context("locating the verbatim binary")?;
            let shutdown = shutdown_flag()?;
            let mut cluster = LocalCluster::start(
                &LocalOptions {
                    name,
                    replicas,
                    base_port,
                    poll: poll.into(),
                    cores,
                    overrides,
                    binary,
                },
                Duration::from_secs(30),
            )
            .map_err(|e| anyhow!(e))?;
            println!("manifest: {}", cluster.manifest_path.display());
            println!("logs:     {}", cluster.log_dir().display());
            for m in &cluster.manifest.members {
                println!(
                    "member {}: status {}{}",
                    m.id,
                    cluster.manifest.status_socket(m.id).display(),
                    m.resp_addr.as_ref().map_or(String::new(), |a| format!(
                        ", redis-cli -p {}",
                        a.rsplit(':').next().unwrap_or(a)
                    ))
                );
            }
            println!(
                "console:  verbatim-console --connect {}",
                cluster.manifest_path.display()
            );
            println!(
                "Ctrl-C stops every replica.{}",
                if no_heal {
                    ""
                } else {
                    " A replica that exits is restarted (--no-heal: not)."
                }
            );
            let mut restarts = vec![0u32; usize::from(replicas)];
            while !shutdown.load(Ordering::Acquire) {
                for (id, status) in cluster.reap_exited() {
                    if no_heal {
                        eprintln!("\nmember {id} exited ({status}); not restarted (--no-heal)");
                        continue;
                    }
                    match cluster.restart(id) {
                        Ok(()) => {
                            restarts[usize::from(id)] += 1;
                            eprintln!("\nmember {id} exited ({status}); restarted, rejoining");
                        }
                        Err(e) => eprintln!("\nmember {id} exited ({status}); restart failed: {e}"),
                    }
                }
                let line: Vec<String> = cluster
                    .status()
                    .into_iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let restarted = match restarts.get(i).copied().unwrap_or(0) {
                            0 => String::new(),
                            n => format!(" ↻{n}"),
                        };
                        match s {
                            Some(s) => {
                                // A restarted member copying a snapshot
                                // shows how far it is instead of its log.
                                let progress = match (s.recovery.active, s.recovery.bytes_total) {
                                    (true, 0) => "recovering (asking a donor)".to_string(),
                                    (true, total) if s.recovery.bytes_restored > 0 => format!(
                                        "recovering: restored {}%",
                                        s.recovery.bytes_restored.saturating_mul(100) / total
                                    ),
                                    (true, total) => format!(
                                        "recovering {}%",
                                        s.recovery.bytes_copied.saturating_mul(100) / total
                                    ),
                                    (false, _) => format!(
                                        "c{} a{} {:.0}op/s",
                                        s.log.commit_index,
                                        s.log.apply_index,
                                        s.latency.ops_per_sec
                                    ),
                                };
                                if !s.group.is_member && !s.recovery.active {
                                    format!("r{}:spare{restarted}", s.id)
                                } else {
                                    format!(
                                        "r{}:{} t{} {progress}{restarted}",
                                        s.id,
                                        &s.role[..1].to_uppercase(),
                                        s.term
                                    )
                                }
                            }
                            None => format!("r{i}:down{restarted}"),
                        }
                    })
                    .collect();
                eprint!("\r{}    ", line.join(" | "));
                std::thread::sleep(Duration::from_millis(250));
            }
            eprintln!("\nstopping...");
            drop(cluster);
            Ok(())
        }
        Cmd::Kv { config, tcp, op } => {
            init_tracing("warn");
            let manifest = default_manifest(config)?;
            let transport = if tcp { Transport::Tcp } else { Transport::Shm };
            let mut client = Client::new(
                &manifest,
                ClientOptions {
                    transport,
                    ..ClientOptions::default()
                },
            );
            match op {
                KvCmd::Get { key } => match client.get(key.as_bytes())? {
                    Some(v) => println!("{}", String::from_utf8_lossy(&v)),
                    None => println!("(nil)"),
                },
                KvCmd::Set { key, value } => {
                    client.set(key.as_bytes(), value.as_bytes())?;
                    println!("OK");
                }
                KvCmd::Del { key } => println!("{}", i32::from(client.del(key.as_bytes())?)),
                KvCmd::Incr { key, delta } => println!("{}", client.incr(key.as_bytes(), delta)?),
                KvCmd::Cas {
                    key,
                    new,
                    expected,
                    absent,
                } => {
                    if expected.is_some() == absent {
                        bail!("give either the expected value or --absent");
                    }
                    let ok = client.cas(
                        key.as_bytes(),
                        expected.as_deref().map(str::as_bytes),
                        new.as_bytes(),
                    )?;
                    println!("{}", i32::from(ok));
                }
            }
            Ok(())
        }
        Cmd::Mcast {
            op:
                McastCmd::Join {
                    group,
                    members,
                    me,
                    window,
                    payload_bytes_max,
                    dir,
                    connect_timeout_ms,
                    stay,
                },
            ..
        } => {
            init_tracing("warn");
            let mut o = verbatim_host::group::GroupOptions::new(&group, members, me);
            o.window = window;
            o.payload_bytes_max = payload_bytes_max;
            o.dir = dir;
            o.connect_timeout = Duration::from_millis(connect_timeout_ms);
            verbatim_host::cli::mcast::join(&o, stay)
        }
        Cmd::Mcast {
            op: McastCmd::Log { path },
            ..
        } => verbatim_host::cli::mcast::print_log(&path),
        Cmd::Mcast { config, member, op } => {
            init_tracing("warn");
            let manifest = default_manifest(config)?;
            match op {
                McastCmd::Send { channel, message } => {
                    verbatim_host::cli::mcast::send(&manifest, member, &channel, &message)
                }
                McastCmd::Tail { channels, count } => {
                    verbatim_host::cli::mcast::tail(&manifest, member, &channels, count)
                }
                McastCmd::Join { .. } | McastCmd::Log { .. } => unreachable!("handled above"),
            }
        }
        Cmd::Member {
            config,
            timeout_ms,
            op,
        } => {
            init_tracing("warn");
            let manifest = default_manifest(config)?;
            let sockets: Vec<PathBuf> = (0..manifest.member_count())
                .map(|id| manifest.status_socket(id))
                .collect();
            let change = match op {
                MemberCmd::Add { id } => MemberChange::Add(id),
                MemberCmd::Remove { id } => MemberChange::Remove(id),
                MemberCmd::Resize { size } => MemberChange::Resize(size),
            };
            let g =
                verbatim_status::change_group(&sockets, change, Duration::from_millis(timeout_ms))
                    .map_err(|e| anyhow!("{}: {e}", change.request_line()))?;
            println!(
                "{}: committed (entry {}); the group is {}",
                change.request_line(),
                g.index,
                g.describe()
            );
            Ok(())
        }
        Cmd::Status { config, json } => {
            init_tracing("warn");
            let manifest = default_manifest(config)?;
            let snaps: Vec<_> = (0..manifest.member_count())
                .map(|id| {
                    verbatim_status::query(&manifest.status_socket(id), Duration::from_secs(1))
                })
                .collect();
            if json {
                let v: Vec<serde_json::Value> = snaps
                    .iter()
                    .enumerate()
                    .map(|(i, s)| match s {
                        Ok(s) => serde_json::to_value(s).expect("serialisable"),
                        Err(e) => serde_json::json!({"id": i, "error": e}),
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(());
            }
            // The configuration of the leader of the highest term (every
            // member's own is in --json).
            let answered: Vec<Option<verbatim_status::Snapshot>> =
                snaps.iter().map(|s| s.as_ref().ok().cloned()).collect();
            if let Some(l) = verbatim_status::leader_of(&answered) {
                println!(
                    "group: {} (entry {}{})",
                    l.group.describe(),
                    l.group.index,
                    if l.group.in_progress {
                        ", changing"
                    } else if l.group.committed {
                        ", committed"
                    } else {
                        ", not committed yet"
                    }
                );
                // With views on, the leader's lease (`--json` has every
                // member's view and counters).
                if let Some(lease) = &l.lease {
                    println!("views: {lease}");
                }
            }
            println!(
                "{:<3} {:<10} {:>5} {:>6} {:>10} {:>10} {:>10} {:>9}  peers",
                "id", "role", "term", "leader", "apply", "commit", "tail", "ops/s"
            );
            for (i, s) in snaps.iter().enumerate() {
                match s {
                    Ok(s) => println!(
                        "{:<3} {:<10} {:>5} {:>6} {:>10} {:>10} {:>10} {:>9.0}  {}",
                        s.id,
                        if s.group.is_member {
                            s.role.as_str()
                        } else {
                            "spare"
                        },
                        s.term,
                        s.leader.map_or("-".into(), |l| l.to_string()),
                        s.log.apply_index,
                        s.log.commit_index,
                        s.log.tail_index,
                        s.latency.ops_per_sec,
                        s.peers
                            .iter()
                            .map(|p| format!(
                                "{}:{}",
                                p.id,
                                if p.dead {
                                    "dead"
                                } else if p.reachable {
                                    &p.replication
                                } else {
                                    "unreachable"
                                }
                            ))
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                    Err(e) => println!("{i:<3} unreachable: {e}"),
                }
            }
            // With multicast on: a line per replica.
            for s in snaps.iter().flatten() {
                if let Some(m) = &s.multicast {
                    println!(
                        "multicast {}: epoch {} view {:?} {} · sent {} ({} nulls) · received {:?} · delivered {} ({} messages){}",
                        s.id,
                        m.epoch,
                        m.view,
                        mcast_state_word(m, "GROUP"),
                        m.sent,
                        m.sent_nulls,
                        m.received,
                        m.delivered,
                        m.delivered_messages,
                        if m.window_full > 0 {
                            format!(" · window full {}×", m.window_full)
                        } else {
                            String::new()
                        }
                    );
                    for g in &m.subgroups {
                        let st = &g.state;
                        println!(
                            "multicast {} subgroup {} {:?}: epoch {} view {:?} {} · sent {} · delivered {} messages",
                            s.id,
                            g.name,
                            g.members,
                            st.epoch,
                            st.view,
                            mcast_state_word(st, "SUBGROUP"),
                            st.sent,
                            st.delivered_messages
                        );
                    }
                    if let Some(l) = &m.large {
                        match l.epoch {
                            Some(epoch) => println!(
                                "multicast {} large (RDMC) epoch {epoch}: received {:?} · delivered {:?} · relayed {} chunks{}",
                                s.id,
                                l.received,
                                l.delivered,
                                l.chunks_written,
                                l.wedged
                                    .as_ref()
                                    .map_or(String::new(), |w| format!(" · WEDGED ({w})"))
                            ),
                            None => println!(
                                "multicast {} large (RDMC): no session until the group forms",
                                s.id
                            ),
                        }
                    }
                }
            }
            // In mode backup-memory: a line per replica, and one per copy
            // the primary keeps.
            for s in snaps.iter().flatten() {
                if let Some(b) = &s.backup {
                    println!(
                        "backup {}: {} · epoch {} primary {} members {:?} · {} keys, {} bytes in use · zero-copy {} forwarded {} · replayed {} (failed {}) · take-overs {} · copies {} ({} bytes)",
                        s.id,
                        b.role,
                        b.epoch,
                        b.primary.map_or("none".to_string(), |p| p.to_string()),
                        b.members,
                        b.keys,
                        b.used_bytes,
                        b.writes_zero_copy,
                        b.writes_forwarded,
                        b.replays,
                        b.replay_failures,
                        b.takeovers,
                        b.copies_done,
                        b.copy_bytes
                    );
                    for c in &b.copies {
                        if c.state == "copying" {
                            println!(
                                "backup {} copy of {}: copying {} of {} bytes",
                                s.id, c.member, c.done_bytes, c.total_bytes
                            );
                        } else {
                            println!("backup {} copy of {}: {}", s.id, c.member, c.state);
                        }
                    }
                }
            }
            Ok(())
        }
        Cmd::Demo {
            json,
            replicas,
            duration_ms,
            value_bytes,
        } => {
            init_tracing("warn");
            let binary = std::env::current_exe().context("locating the verbatim binary")?;
            let opts = verbatim_host::cli::demo::DemoOptions {
                replicas,
                duration: Duration::from_millis(duration_ms),
                kill_after: Duration::from_millis(duration_ms / 2),
                value_bytes,
                keys: 1000,
                binary,
                poll: PollMode::Adaptive,
            };
            let report = verbatim_host::cli::demo::run(&opts, |line| {
                if !json {
                    eprintln!("demo: {line}");
                }
            })
            .map_err(|e| anyhow!(e))?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", verbatim_host::cli::demo::render(&report));
            }
            if report.lost_writes > 0 {
                bail!("{} acknowledged writes were lost", report.lost_writes);
            }
            Ok(())
        }
    }
}

/// A multicast group's (or subgroup's, `what`) state for `verbatim status`.
fn mcast_state_word(m: &verbatim_status::MulticastState, what: &str) -> String {
    match (&m.halted, &m.wedged, m.started) {
        (Some(why), _, _) => format!("LEFT THE {what} ({why})"),
        (None, Some(why), _) => format!("WEDGED for a view change ({why})"),
        (None, None, true) => "running".to_string(),
        (None, None, false) if m.joining => "joining".to_string(),
        (None, None, false) => "forming".to_string(),
    }
}
