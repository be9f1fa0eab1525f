//! Redis for the comparison: a primary and replicas started from the
//! distribution's `redis-server` on free loopback ports, without
//! persistence, in a temporary directory, pinned like the replicas; all
//! stopped (and the directory removed) when the group is dropped.

use crate::resp::{Reply, RespConn};
use crate::{BenchError, Result};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the group may take to start and finish its first sync.
pub const REDIS_START_TIMEOUT: Duration = Duration::from_secs(15);

/// `redis-server` on `PATH` (or in /usr/bin, /usr/local/bin).
pub fn find_redis_server() -> Option<PathBuf> {
    let dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    dirs.into_iter()
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
}

/// What to say when Redis is missing.
pub const REDIS_MISSING: &str =
    "redis-server was not found: the Redis side of `compare` is skipped \
     (install the distribution's package: `apt-get install redis-server`)";

/// The command line of one Redis server: loopback only, no RDB or AOF
/// persistence, files in `dir`, in the foreground; a replica follows
/// `replica_of`.
pub fn redis_args(port: u16, dir: &Path, replica_of: Option<u16>) -> Vec<String> {
    let mut a: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &dir.to_string_lossy(),
        "--dbfilename",
        &format!("dump-{port}.rdb"),
        "--daemonize",
        "no",
        "--protected-mode",
        "no",
        "--logfile",
        &dir.join(format!("redis-{port}.log")).to_string_lossy(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(p) = replica_of {
        a.extend(["--replicaof".into(), "127.0.0.1".into(), p.to_string()]);
    }
    a
}

/// `redis-server --version`, first line.
pub fn redis_version(server: &Path) -> String {
    Command::new(server)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// A primary and its replicas.
pub struct RedisGroup {
    children: Vec<Child>,
    /// Ports: the primary's first.
    pub ports: Vec<u16>,
    dir: PathBuf,
    owner: u64,
}

impl RedisGroup {
    /// Starts a primary and `replicas` replicas, pinned to `cores` (empty:
    /// unpinned), and waits until every replica is in sync.
    pub fn start(server: &Path, replicas: usize, cores: &[usize]) -> Result<RedisGroup> {
        crate::signals::check()?;
        let dir = std::env::temp_dir().join(format!(
            "verbatim-bench-redis-{}-{}",
            std::process::id(),
            crate::cluster::free_port()?
        ));
        std::fs::create_dir_all(&dir).map_err(|e| BenchError::Io {
            path: dir.clone(),
            source: e,
        })?;
        let mut group = RedisGroup {
            children: Vec::new(),
            ports: Vec::new(),
            dir,
            owner: 0,
        };
        let primary = crate::cluster::free_port()?;
        group.spawn(server, primary, None, cores)?;
        group.wait_ping(primary)?;
        for _ in 0..replicas {
            let port = loop {
                let p = crate::cluster::free_port()?;
                if !group.ports.contains(&p) {
                    break p;
                }
            };
            group.spawn(server, port, Some(primary), cores)?;
        }
        group.wait_synced(replicas)?;
        Ok(group)
    }

    fn spawn(&mut self, server: &Path, port: u16, of: Option<u16>, cores: &[usize]) -> Result<()> {
        let mut cmd = Command::new(server);
        cmd.args(redis_args(port, &self.dir, of))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let cores = cores.to_vec();
        if !cores.is_empty() {
            // SAFETY: only async-signal-safe calls (sched_setaffinity on a
            // stack-allocated set) between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    for &c in &cores {
                        libc::CPU_SET(c, &mut set);
                    }
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                    Ok(())
                });
            }
        }
        let child = cmd
            .spawn()
            .map_err(|e| BenchError::Redis(format!("starting {}: {e}", server.display())))?;
        self.children.push(child);
        self.ports.push(port);
        crate::signals::unregister(self.owner);
        self.owner = crate::signals::register(
            self.children.iter().map(Child::id).collect(),
            vec![self.dir.clone()],
        );
        Ok(())
    }

    fn wait_ping(&self, port: u16) -> Result<()> {
        let began = Instant::now();
        loop {
            crate::signals::check()?;
            if let Ok(mut c) = RespConn::connect(&format!("127.0.0.1:{port}"), false) {
                if let Ok(Reply::Simple(s)) = c.command(&[b"PING"]) {
                    if s == "PONG" {
                        return Ok(());
                    }
                }
            }
            if began.elapsed() > REDIS_START_TIMEOUT {
                return Err(BenchError::Redis(format!(
                    "redis-server on port {port} did not answer PING; see {}",
                    self.dir.join(format!("redis-{port}.log")).display()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until the primary counts `replicas` online replicas and each
    /// replica's link is up.
    fn wait_synced(&self, replicas: usize) -> Result<()> {
        let began = Instant::now();
        let primary = self.primary_addr();
        loop {
            crate::signals::check()?;
            let info = |addr: &str| -> Option<String> {
                let mut c = RespConn::connect(addr, false).ok()?;
                match c.command(&[b"INFO", b"replication"]).ok()? {
                    Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
                    _ => None,
                }
            };
            let online = info(&primary)
                .map(|i| i.lines().filter(|l| l.contains("state=online")).count())
                .unwrap_or(0);
            let links_up = self.ports[1..].iter().all(|p| {
                info(&format!("127.0.0.1:{p}")).is_some_and(|i| i.contains("master_link_status:up"))
            });
            if online == replicas && links_up {
                return Ok(());
            }
            if began.elapsed() > REDIS_START_TIMEOUT {
                return Err(BenchError::Redis(format!(
                    "{online} of {replicas} Redis replicas in sync after {REDIS_START_TIMEOUT:?}; logs in {}",
                    self.dir.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The primary's address.
    pub fn primary_addr(&self) -> String {
        format!("127.0.0.1:{}", self.ports[0])
    }

    /// Stops every server (SIGTERM, then SIGKILL after 2 s) and removes
    /// the directory.
    pub fn stop(&mut self) {
        for c in &self.children {
            // SAFETY: kill(2) on a child we spawned and have not reaped.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
        }
        for mut c in self.children.drain(..) {
            let began = Instant::now();
            loop {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                if began.elapsed() > Duration::from_secs(2) {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        crate::signals::unregister(self.owner);
    }
}

impl Drop for RedisGroup {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_primary_has_no_persistence_and_listens_on_loopback() {
        let a = redis_args(6400, Path::new("/tmp/x"), None);
        let pair = |k: &str| {
            let i = a
                .iter()
                .position(|x| x == k)
                .unwrap_or_else(|| panic!("{k} missing"));
            a[i + 1].clone()
        };
        assert_eq!(pair("--port"), "6400");
        assert_eq!(pair("--bind"), "127.0.0.1");
        assert_eq!(pair("--save"), "");
        assert_eq!(pair("--appendonly"), "no");
        assert_eq!(pair("--dir"), "/tmp/x");
        assert_eq!(pair("--daemonize"), "no");
        assert!(!a.iter().any(|x| x == "--replicaof"));
        // Options come in pairs.
        assert_eq!(a.len() % 2, 0);
    }

    #[test]
    fn a_replica_follows_the_primary() {
        let a = redis_args(6401, Path::new("/tmp/x"), Some(6400));
        let i = a.iter().position(|x| x == "--replicaof").unwrap();
        assert_eq!(
            &a[i + 1..i + 3],
            &["127.0.0.1".to_string(), "6400".to_string()]
        );
        assert!(a.iter().any(|x| x == "dump-6401.rdb"));
    }
}
