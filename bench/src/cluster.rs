//! Local clusters for the benchmarks: [`LocalCluster`] with the bench's
//! pins and poll mode, registered with the Ctrl-C handler, plus the core
//! and port choices shared by every benchmark.

use crate::setup::TimingUs;
use crate::{BenchError, Result};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use verbatim_client::client::{Client, ClientOptions, Transport, Wait};
use verbatim_client::local::{LocalCluster, LocalOptions};
use verbatim_client::manifest::PollMode;
use verbatim_client::pipeline::Pipeline;
use verbatim_status::Snapshot;

/// How long a cluster may take to start (every replica answering).
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a first leader may take.
pub const LEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How replicas are run.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// The `verbatim` binary (a release build for real numbers).
    pub binary: PathBuf,
    /// Poll mode of every replica.
    pub poll: PollMode,
    /// Cores the replicas are pinned to, round-robin (empty: unpinned).
    pub replica_cores: Vec<usize>,
    /// Extra `--set` overrides.
    pub overrides: Vec<String>,
    /// Keep the replicas' logs when the cluster stops (their directory is
    /// printed), to see what the members did during a run.
    pub keep_logs: bool,
}

static CLUSTER_SEQ: AtomicU32 = AtomicU32::new(0);

/// The view lease a primary-backup group runs with unless `--set
/// views.lease_us=…` says otherwise: the value README.md gives for the
/// mode (`--set cluster.mode=primary-backup --set views.lease_us=50`).
pub const PRIMARY_BACKUP_LEASE_US: u64 = 50;

/// How a benchmark's group replicates (`workload --modes`). The bench's
/// own list rather than the manifest's `ReplicationMode`: a replica binary
/// older than this bench may not implement a mode (`backup-memory`
/// before issue 16), and a run skips it, saying why, instead of failing
/// to parse its own options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationMode {
    /// DARE's log (`cluster.mode = "log"`, the manifest's default).
    Log,
    /// uKharon-KV's primary-backup (`cluster.mode = "primary-backup"`,
    /// with views on).
    PrimaryBackup,
    /// MacR's backup-memory replication (issue 16, `cluster.mode =
    /// "backup-memory"`, with views on): the store in registered memory,
    /// WRITEn into the backups' copies.
    BackupMemory,
}

impl ReplicationMode {
    /// Every mode, in report order.
    pub const ALL: [ReplicationMode; 3] = [
        ReplicationMode::Log,
        ReplicationMode::PrimaryBackup,
        ReplicationMode::BackupMemory,
    ];

    /// Its name: the value of `cluster.mode` and of `--modes`.
    pub fn name(self) -> &'static str {
        match self {
            ReplicationMode::Log => "log",
            ReplicationMode::PrimaryBackup => "primary-backup",
            ReplicationMode::BackupMemory => "backup-memory",
        }
    }

    /// Parses a [`ReplicationMode::name`] (any case, surrounding spaces
    /// ignored).
    pub fn parse(s: &str) -> Option<ReplicationMode> {
        let s = s.trim();
        ReplicationMode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
    }

    /// The manifest overrides that select the mode, as `(before, after)`
    /// the user's `--set` list: views (which primary-backup needs) go
    /// before, so that the user's own `views.lease_us` wins; `cluster.mode`
    /// goes after, so that a row labelled with a mode ran in that mode.
    fn overrides(self) -> (Vec<String>, Vec<String>) {
        let mode = vec![format!("cluster.mode={}", self.name())];
        match self {
            ReplicationMode::Log => (Vec::new(), mode),
            // A backup-memory group is decided by views like a
            // primary-backup one, and starts with the same lease.
            ReplicationMode::PrimaryBackup | ReplicationMode::BackupMemory => (
                vec![format!("views.lease_us={PRIMARY_BACKUP_LEASE_US}")],
                mode,
            ),
        }
    }
}

impl ClusterSpec {
    /// This spec with the replicas running in `mode` (the way every
    /// benchmark selects a mode: manifest overrides).
    pub fn with_mode(&self, mode: ReplicationMode) -> ClusterSpec {
        let (before, after) = mode.overrides();
        let mut spec = self.clone();
        spec.overrides.splice(0..0, before);
        spec.overrides.extend(after);
        spec
    }

    /// Why the replicas would refuse to run in `mode`, if they would: the
    /// error of the manifest check every replica runs at start
    /// (`Manifest::load` with its `--set` list), when the manifest passes
    /// it without the mode's overrides and fails it with them. `None` when
    /// the mode is accepted, or when the manifest fails anyway (starting
    /// the cluster then reports that error as it always did).
    pub fn mode_refusal(&self, mode: ReplicationMode, replicas: u8) -> Option<String> {
        use verbatim_client::manifest::Manifest;
        let probe = Manifest::local("probe", replicas, 0).to_toml();
        Manifest::parse(&probe, &self.overrides).ok()?;
        Manifest::parse(&probe, &self.with_mode(mode).overrides)
            .err()
            .map(|e| e.to_string())
    }
}

/// A running local cluster; dropping it stops its replicas and removes
/// their segments, sockets and logs.
pub struct BenchCluster {
    inner: LocalCluster,
    owner: u64,
    /// Registrations of replicas restarted since the start.
    restarted_owners: Vec<u64>,
    keep_logs: bool,
}

impl BenchCluster {
    /// Starts `replicas` replicas; with `resp`, each listens for RESP on a
    /// free loopback port (the leader's is [`BenchCluster::resp_addr`]).
    pub fn start(spec: &ClusterSpec, replicas: u8, resp: bool) -> Result<BenchCluster> {
        crate::signals::check()?;
        let seq = CLUSTER_SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("vb{}x{seq}", std::process::id());
        let base_port = if resp { free_port_range(replicas)? } else { 0 };
        let inner = LocalCluster::start(
            &LocalOptions {
                name: name.clone(),
                replicas,
                base_port,
                poll: spec.poll,
                cores: spec.replica_cores.clone(),
                overrides: spec.overrides.clone(),
                binary: spec.binary.clone(),
            },
            START_TIMEOUT,
        )
        .map_err(|e| {
            BenchError::Cluster(with_replica_errors(e, &name, replicas, base_port, spec))
        })?;
        let pids = (0..replicas).filter_map(|id| inner.pid(id)).collect();
        let mut paths: Vec<PathBuf> = (0..replicas)
            .flat_map(|id| {
                [
                    verbatim_client::notice::notice_path(&inner.manifest.segment_path(id)),
                    inner.manifest.segment_path(id),
                    inner.manifest.status_socket(id),
                ]
            })
            .collect();
        paths.push(inner.log_dir().to_path_buf());
        let owner = crate::signals::register(pids, paths);
        tracing::debug!(cluster = %inner.manifest.cluster.name, replicas, "cluster started");
        Ok(BenchCluster {
            inner,
            owner,
            restarted_owners: Vec::new(),
            keep_logs: spec.keep_logs,
        })
    }

    /// The cluster.
    pub fn local(&self) -> &LocalCluster {
        &self.inner
    }

    /// The cluster, mutably (to kill replicas).
    pub fn local_mut(&mut self) -> &mut LocalCluster {
        &mut self.inner
    }

    /// Starts replica `id` again (a new process with empty memory, which
    /// rejoins the group, by recovery if the log was pruned past it) and
    /// registers it with the Ctrl-C handler like the first ones.
    pub fn restart(&mut self, id: u8) -> Result<()> {
        crate::signals::check()?;
        self.inner.restart(id).map_err(BenchError::Cluster)?;
        if let Some(pid) = self.inner.pid(id) {
            self.restarted_owners
                .push(crate::signals::register(vec![pid], Vec::new()));
        }
        Ok(())
    }

    /// Waits for a leader above `min_term` that has committed in its term;
    /// of several replicas that believe they lead (a deposed one may not
    /// know yet), the one with the highest term.
    pub fn wait_leader(&self, min_term: u64, timeout: Duration) -> Result<(u8, u64)> {
        let began = Instant::now();
        loop {
            crate::signals::check()?;
            let best = self
                .inner
                .status()
                .into_iter()
                .flatten()
                .filter(|s| s.role == "leader" && s.term > min_term && s.log.commit_index > 1)
                .max_by_key(|s| s.term);
            if let Some(s) = best {
                return Ok((s.id, s.term));
            }
            if began.elapsed() > timeout {
                return Err(BenchError::Cluster(format!(
                    "no leader above term {min_term} within {timeout:?}; replica logs in {}",
                    self.inner.log_dir().display()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The leader of the highest term among the replicas that answer now
    /// (a deposed one may not know yet; `None` during an election).
    pub fn leader_now(&self) -> Option<Snapshot> {
        verbatim_status::leader_of(&self.inner.status()).cloned()
    }

    /// The status of one replica (`None` if it does not answer within
    /// `timeout`; a stopped replica never does).
    pub fn status_of(&self, id: u8, timeout: Duration) -> Option<Snapshot> {
        verbatim_status::query(&self.inner.manifest.status_socket(id), timeout).ok()
    }

    /// The RESP address of a replica.
    pub fn resp_addr(&self, id: u8) -> Option<String> {
        self.inner.manifest.members[usize::from(id)]
            .resp_addr
            .clone()
    }

    /// The protocol timing the replicas run with.
    pub fn timing(&self) -> TimingUs {
        timing_of(&self.inner.manifest)
    }

    /// A pipelined shared-memory client of this cluster: `depth` requests
    /// in flight from one thread.
    pub fn shm_pipeline(
        &self,
        wait: Wait,
        attempt_timeout: Duration,
        depth: usize,
    ) -> crate::Result<Pipeline> {
        Pipeline::new(
            &self.inner.manifest,
            shm_options(wait, attempt_timeout),
            depth,
        )
        .map_err(Into::into)
    }

    /// A shared-memory client of this cluster.
    pub fn shm_client(&self, wait: Wait, attempt_timeout: Duration) -> Client {
        Client::new(&self.inner.manifest, shm_options(wait, attempt_timeout))
    }
}

/// The options of a measuring shared-memory client: it gives up on a
/// request after 10 s over every replica.
pub fn shm_options(wait: Wait, attempt_timeout: Duration) -> ClientOptions {
    ClientOptions {
        transport: Transport::Shm,
        wait,
        attempt_timeout,
        total_timeout: Duration::from_secs(10),
        client_id: None,
    }
}

/// A start failure's message with what the replicas said: one that
/// refuses its manifest (a binary older or newer than this bench, say)
/// prints `Error: …` to its log and exits, and the start only sees that it
/// never answered.
fn with_replica_errors(
    message: String,
    name: &str,
    replicas: u8,
    base_port: u16,
    spec: &ClusterSpec,
) -> String {
    use verbatim_client::manifest::Manifest;
    // The run directory the cluster's start used (the same manifest).
    let probe = Manifest::local(name, replicas, base_port).to_toml();
    let Ok(manifest) = Manifest::parse(&probe, &spec.overrides) else {
        return message;
    };
    // Replicas refusing one manifest say the same thing: say it once.
    let mut said: Vec<(Vec<u8>, String)> = Vec::new();
    for id in 0..replicas {
        let log = manifest.run_dir().join(format!("replica-{id}.log"));
        let Ok(text) = std::fs::read_to_string(log) else {
            continue;
        };
        let Some(line) = text.lines().find(|l| l.starts_with("Error:")) else {
            continue;
        };
        let line = line.trim_start_matches("Error:").trim().to_string();
        match said.iter_mut().find(|(_, l)| *l == line) {
            Some((ids, _)) => ids.push(id),
            None => said.push((vec![id], line)),
        }
    }
    if said.is_empty() {
        return message;
    }
    let said: Vec<String> = said
        .into_iter()
        .map(|(ids, line)| {
            let ids: Vec<String> = ids.iter().map(u8::to_string).collect();
            format!("replica {} said: {line}", ids.join(", "))
        })
        .collect();
    format!("{message}; {}", said.join("; "))
}

impl Drop for BenchCluster {
    fn drop(&mut self) {
        self.inner.stop();
        // A replica that served a snapshot forked a writer (host/src/
        // replica/snapshot.rs); one still writing outlives its replica,
        // reparented to init, and keeps a core busy until it is done. Its
        // command line names this cluster's manifest, which no process
        // outside this run has.
        let leftover = kill_processes_naming(&self.inner.manifest_path);
        if leftover > 0 {
            tracing::warn!(
                leftover,
                cluster = %self.inner.manifest.cluster.name,
                "killed snapshot writers left running by stopped replicas"
            );
        }
        if self.keep_logs {
            eprintln!("replica logs kept in {}", self.inner.log_dir().display());
        } else {
            let _ = std::fs::remove_dir_all(self.inner.log_dir());
        }
        crate::signals::unregister(self.owner);
        for &owner in &self.restarted_owners {
            crate::signals::unregister(owner);
        }
    }
}

/// SIGKILLs every process whose command line has `path` as one of its
/// arguments (a replica of this run, or a child it forked); returns how
/// many there were.
pub fn kill_processes_naming(path: &Path) -> usize {
    let want = path.as_os_str().as_encoded_bytes();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut killed = 0;
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.split(|&b| b == 0).any(|arg| arg == want) {
            // SAFETY: kill(2) on a process of this run (its command line
            // names this run's own manifest); a pid that exited meanwhile
            // gives ESRCH.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            killed += 1;
        }
    }
    killed
}

/// The timing section of a manifest, in the report's terms.
pub fn timing_of(m: &verbatim_client::manifest::Manifest) -> TimingUs {
    TimingUs {
        heartbeat_period_us: m.timing.heartbeat_period_us,
        fd_check_period_us: m.timing.fd_check_period_us,
        fd_check_period_max_us: m.timing.fd_check_period_max_us,
        election_timeout_min_us: m.timing.election_timeout_min_us,
        election_timeout_max_us: m.timing.election_timeout_max_us,
    }
}

/// The timing a local manifest with these overrides would have (for the
/// setup record, before any cluster starts).
pub fn timing_with(overrides: &[String]) -> TimingUs {
    let m = verbatim_client::manifest::Manifest::local("probe", 3, 0);
    let text = m.to_toml();
    match verbatim_client::manifest::Manifest::parse(&text, overrides) {
        Ok(m) => timing_of(&m),
        Err(_) => timing_of(&m),
    }
}

/// `n` consecutive free TCP ports on 127.0.0.1 (checked by binding).
pub fn free_port_range(n: u8) -> Result<u16> {
    let start = 20_000 + (std::process::id() % 2_000) as u16 * 16;
    let mut base = start;
    for _ in 0..2_000 {
        let all_free =
            (0..u16::from(n)).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if all_free {
            return Ok(base);
        }
        base = if base > 60_000 { 20_000 } else { base + 16 };
    }
    Err(BenchError::Cluster(format!(
        "no {n} consecutive free ports on 127.0.0.1"
    )))
}

/// One free TCP port on 127.0.0.1.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| BenchError::Io {
        path: "127.0.0.1:0".into(),
        source: e,
    })?;
    Ok(l.local_addr().map(|a| a.port()).unwrap_or(0))
}

/// Online CPU ids.
pub fn core_ids() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

/// The default placement: replicas on the last core, the client on the
/// first (a client sharing the leader's core pays two context switches
/// per request). On one core, nothing is pinned.
pub fn default_cores() -> (Vec<usize>, Option<usize>) {
    let ids = core_ids();
    match ids.len() {
        0 | 1 => (Vec::new(), None),
        n => (vec![ids[n - 1]], Some(ids[0])),
    }
}

/// Cores not used by replicas, for client threads.
pub fn client_cores(replica_cores: &[usize]) -> Vec<usize> {
    core_ids()
        .into_iter()
        .filter(|c| !replica_cores.contains(c))
        .collect()
}

/// Pins the calling thread to `core` (no-op for `None`); false if the
/// kernel refused.
pub fn pin_current(core: Option<usize>) -> bool {
    match core {
        Some(id) => core_affinity::set_for_current(core_affinity::CoreId { id }),
        None => true,
    }
}

/// Runs `f` on a new thread pinned to `core`, and returns its result.
pub fn run_pinned<T: Send + 'static>(
    core: Option<usize>,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        if !pin_current(core) {
            tracing::warn!(?core, "could not pin the client thread");
        }
        f()
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// The replica binary: `--binary`, else `$VERBATIM_BIN`, else the
/// `verbatim` next to this executable.
pub fn resolve_binary(given: Option<&Path>) -> Result<PathBuf> {
    let path = given
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("VERBATIM_BIN").map(PathBuf::from))
        .or_else(verbatim_client::local::find_binary);
    match path {
        Some(p) if p.is_file() => Ok(p),
        other => Err(BenchError::NoBinary(other)),
    }
}

/// "release" or "debug", from the binary's path under `target/`.
pub fn build_of(binary: &Path) -> String {
    let s = binary.to_string_lossy();
    if s.contains("/release/") {
        "release".into()
    } else if s.contains("/debug/") {
        "debug".into()
    } else {
        "unknown".into()
    }
}

/// Name of a wait mode.
pub fn wait_name(w: Wait) -> &'static str {
    match w {
        Wait::Spin => "spin",
        Wait::Yield => "yield",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(overrides: &[&str]) -> ClusterSpec {
        ClusterSpec {
            binary: PathBuf::from("/nonexistent/verbatim"),
            poll: PollMode::Adaptive,
            replica_cores: Vec::new(),
            overrides: overrides.iter().map(|o| o.to_string()).collect(),
            keep_logs: false,
        }
    }

    #[test]
    fn modes_parse_by_their_manifest_names() {
        for m in ReplicationMode::ALL {
            assert_eq!(ReplicationMode::parse(m.name()), Some(m));
        }
        assert_eq!(
            ReplicationMode::parse(" Primary-Backup "),
            Some(ReplicationMode::PrimaryBackup)
        );
        assert_eq!(ReplicationMode::parse("chain"), None);
    }

    #[test]
    fn the_mode_wins_and_the_users_lease_wins() {
        let s = spec(&["views.lease_us=200"]).with_mode(ReplicationMode::PrimaryBackup);
        assert_eq!(
            s.overrides,
            [
                format!("views.lease_us={PRIMARY_BACKUP_LEASE_US}"),
                "views.lease_us=200".into(),
                "cluster.mode=primary-backup".into(),
            ]
        );
        let s = spec(&[]).with_mode(ReplicationMode::Log);
        assert_eq!(s.overrides, ["cluster.mode=log"]);
    }

    #[test]
    fn only_a_mode_the_manifest_check_refuses_is_refused() {
        let s = spec(&[]);
        for m in ReplicationMode::ALL {
            assert_eq!(s.mode_refusal(m, 3), None, "{}", m.name());
        }
        // The user's lease wins over the mode's: without views, the modes
        // that need them are refused, and the refusal says why.
        let no_views = spec(&["views.lease_us=0"]);
        assert_eq!(no_views.mode_refusal(ReplicationMode::Log, 3), None);
        for m in [
            ReplicationMode::PrimaryBackup,
            ReplicationMode::BackupMemory,
        ] {
            let why = no_views
                .mode_refusal(m, 3)
                .unwrap_or_else(|| panic!("{} without views is refused", m.name()));
            assert!(why.contains("views"), "{why}");
        }
        // A manifest wrong without the mode is not the mode's fault.
        let broken = spec(&["cluster.bogus=1"]);
        assert_eq!(broken.mode_refusal(ReplicationMode::BackupMemory, 3), None);
    }
}
