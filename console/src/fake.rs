//! A scripted status server: it speaks the replica's status protocol on a
//! Unix socket and serves whatever snapshot the test last set. Tests use
//! it to play leader changes, replicas that vanish and come back, silent
//! replicas and garbage lines, without a cluster.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use verbatim_status::{
    ConfigSnapshot, GroupConfiguration, LatencySummary, LogPointers, PeerSnapshot, Percentiles,
    Snapshot, STATUS_VERSION,
};

/// Group size of [`snapshot`].
pub const FAKE_MEMBERS: u8 = 3;

/// Unix ms at which fake snapshots are stamped by default.
pub const FAKE_UNIX_MS: u64 = 1_700_000_000_000;

/// How often the server loop looks for new clients and due snapshots.
const LOOP_STEP: Duration = Duration::from_millis(2);

/// Longest request line the fake accepts, as the real endpoint does.
const REQUEST_BYTES_MAX: usize = 1024;

/// A plausible snapshot of replica `id` in a group of [`FAKE_MEMBERS`].
pub fn snapshot(id: u8, role: &str, term: u64, leader: Option<u8>) -> Snapshot {
    let tail_index = 1_000 + 100 * term;
    let peers = (0..FAKE_MEMBERS)
        .filter(|&p| p != id)
        .map(|p| PeerSnapshot {
            id: p,
            reachable: true,
            term,
            role: if Some(p) == leader {
                "leader"
            } else {
                "follower"
            }
            .into(),
            apply_index: tail_index,
            replication: if role == "leader" {
                "replicating"
            } else {
                "idle"
            }
            .into(),
            acked_pos: tail_index * 64,
            row_age_us: 150,
            ..Default::default()
        })
        .collect();
    Snapshot {
        version: STATUS_VERSION,
        id,
        pid: 4000 + u32::from(id),
        at_unix_ms: FAKE_UNIX_MS,
        uptime_ms: 60_000,
        role: role.into(),
        term,
        leader,
        log_granted_to: leader,
        log: LogPointers {
            head_pos: 0,
            apply_pos: tail_index * 64,
            apply_index: tail_index,
            commit_pos: tail_index * 64,
            commit_index: tail_index,
            tail_pos: tail_index * 64,
            tail_index,
            ring_bytes: 4 << 20,
        },
        peers,
        config: ConfigSnapshot {
            cluster: "demo".into(),
            members: FAKE_MEMBERS,
            quorum: FAKE_MEMBERS / 2 + 1,
            fabric: "shm".into(),
            poll: "adaptive".into(),
            layout_hash: "9e3779b97f4a7c15".into(),
            log_ring_bytes: 4 << 20,
            value_bytes_max: 4096,
            heartbeat_period_us: 200,
            fd_check_period_us: 1_000,
            ..Default::default()
        },
        failovers: Vec::new(),
        counters: BTreeMap::from([
            ("writes_committed".to_string(), tail_index),
            ("heartbeats_sent".to_string(), 3_000),
        ]),
        latency: LatencySummary {
            window_ms: 1_000,
            writes: Percentiles {
                count: 5_000,
                p50_ns: 3_200,
                p99_ns: 12_500,
                max_ns: 40_000,
            },
            reads: Percentiles {
                count: 20_000,
                p50_ns: 900,
                p99_ns: 2_100,
                max_ns: 9_000,
            },
            ops_per_sec: if role == "leader" { 25_000.0 } else { 0.0 },
        },
        events: Vec::new(),
        lease: None,
        views: None,
        recovery: Default::default(),
        group: GroupConfiguration {
            state: "stable".into(),
            size: FAKE_MEMBERS,
            new_size: FAKE_MEMBERS,
            members: (0..FAKE_MEMBERS).collect(),
            away: Vec::new(),
            index: 0,
            committed: true,
            is_member: true,
            in_progress: false,
        },
        multicast: None,
        backup: None,
    }
}

struct Script {
    snapshot: Snapshot,
    /// Raw lines pushed so far; each client sends the ones pushed after it
    /// connected.
    raw_lines: Vec<String>,
    /// Accept and keep connections but send nothing (a stopped process).
    silent: bool,
    /// Raw lines sent at the start of every watch connection.
    greeting: Vec<String>,
}

struct Shared {
    script: Mutex<Script>,
    connections: AtomicU64,
}

impl Shared {
    fn script(&self) -> MutexGuard<'_, Script> {
        // A test thread that panicked while holding the lock must not
        // turn every later call into a second panic.
        self.script.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A fake replica status endpoint on a Unix socket.
pub struct FakeReplica {
    path: PathBuf,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeReplica {
    /// Binds `path` and serves `snapshot` until killed or dropped.
    pub fn start(path: &Path, snapshot: Snapshot) -> io::Result<FakeReplica> {
        let shared = Arc::new(Shared {
            script: Mutex::new(Script {
                snapshot,
                raw_lines: Vec::new(),
                silent: false,
                greeting: Vec::new(),
            }),
            connections: AtomicU64::new(0),
        });
        let mut fake = FakeReplica {
            path: path.to_path_buf(),
            shared,
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        fake.revive()?;
        Ok(fake)
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the snapshot served from now on.
    pub fn set_snapshot(&self, snapshot: Snapshot) {
        self.shared.script().snapshot = snapshot;
    }

    /// Edits the snapshot served from now on.
    pub fn update(&self, edit: impl FnOnce(&mut Snapshot)) {
        edit(&mut self.shared.script().snapshot);
    }

    /// Sends `line` (plus `\n`) once to every watching client, before its
    /// next snapshot.
    pub fn push_raw_line(&self, line: impl Into<String>) {
        self.shared.script().raw_lines.push(line.into());
    }

    /// Raw lines (garbage, error replies) sent to every new watcher before
    /// its first snapshot.
    pub fn set_greeting(&self, lines: Vec<String>) {
        self.shared.script().greeting = lines;
    }

    /// While silent, connections are accepted but get no lines.
    pub fn set_silent(&self, silent: bool) {
        self.shared.script().silent = silent;
    }

    /// Connections accepted so far (across revivals).
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Like a crashed replica: closes every connection and removes the
    /// socket file.
    pub fn kill(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }

    /// Binds the socket again after [`FakeReplica::kill`] (a restart).
    pub fn revive(&mut self) -> io::Result<()> {
        self.kill();
        let listener = UnixListener::bind(&self.path)?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        self.stop = Arc::clone(&stop);
        let shared = Arc::clone(&self.shared);
        self.thread = Some(
            std::thread::Builder::new()
                .name("fake-replica".into())
                .spawn(move || serve(&listener, &shared, &stop))?,
        );
        Ok(())
    }
}

impl Drop for FakeReplica {
    fn drop(&mut self) {
        self.kill();
    }
}

enum Mode {
    /// Waiting for the request line.
    Request(Vec<u8>),
    /// `watch`: next snapshot due at.
    Watch {
        interval: Duration,
        next_at: Instant,
        greeted: bool,
    },
}

struct Client {
    stream: UnixStream,
    mode: Mode,
    raw_sent: usize,
}

fn serve(listener: &UnixListener, shared: &Shared, stop: &AtomicBool) {
    let mut clients: Vec<Client> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        while let Ok((stream, _)) = listener.accept() {
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            shared.connections.fetch_add(1, Ordering::Relaxed);
            let raw_sent = shared.script().raw_lines.len();
            clients.push(Client {
                stream,
                mode: Mode::Request(Vec::new()),
                raw_sent,
            });
        }
        clients.retain_mut(|c| step_client(c, shared));
        std::thread::sleep(LOOP_STEP);
    }
}

/// Advances one client; false drops it.
fn step_client(client: &mut Client, shared: &Shared) -> bool {
    match &mut client.mode {
        Mode::Request(buf) => {
            let mut chunk = [0u8; 256];
            let n = match client.stream.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            };
            buf.extend_from_slice(&chunk[..n]);
            let Some(end) = buf.iter().position(|&b| b == b'\n') else {
                return buf.len() <= REQUEST_BYTES_MAX;
            };
            let request = String::from_utf8_lossy(&buf[..end]).trim().to_string();
            buf.drain(..=end);
            let mut words = request.split_whitespace();
            match (words.next(), words.next().map(str::parse::<u64>)) {
                (None | Some("status"), _) => {
                    let line = snapshot_line(shared);
                    let _ = client.stream.set_nonblocking(false);
                    let _ = client.stream.write_all(line.as_bytes());
                    false
                }
                (Some("watch"), Some(Ok(ms))) => {
                    let _ = client.stream.set_nonblocking(false);
                    let _ = client
                        .stream
                        .set_write_timeout(Some(Duration::from_secs(1)));
                    client.mode = Mode::Watch {
                        interval: Duration::from_millis(ms.max(20)),
                        next_at: Instant::now(),
                        greeted: false,
                    };
                    true
                }
                _ => {
                    let reply =
                        serde_json::json!({ "error": format!("unknown request `{request}`") });
                    let _ = client.stream.set_nonblocking(false);
                    let ok = client
                        .stream
                        .write_all(format!("{reply}\n").as_bytes())
                        .is_ok();
                    let _ = client.stream.set_nonblocking(true);
                    ok
                }
            }
        }
        Mode::Watch {
            interval,
            next_at,
            greeted,
        } => {
            let now = Instant::now();
            if now < *next_at {
                return true;
            }
            *next_at = now + *interval;
            let mut out = String::new();
            {
                let script = shared.script();
                if script.silent {
                    return true;
                }
                if !*greeted {
                    *greeted = true;
                    for line in &script.greeting {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
                for line in &script.raw_lines[client.raw_sent.min(script.raw_lines.len())..] {
                    out.push_str(line);
                    out.push('\n');
                }
                client.raw_sent = script.raw_lines.len();
            }
            out.push_str(&snapshot_line(shared));
            client.stream.write_all(out.as_bytes()).is_ok()
        }
    }
}

fn snapshot_line(shared: &Shared) -> String {
    let mut line = serde_json::to_string(&shared.script().snapshot).expect("a snapshot serialises");
    line.push('\n');
    line
}
