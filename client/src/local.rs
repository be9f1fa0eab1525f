//! Local clusters: replicas as child processes of one host (used by
//! `verbatim up`, the demo, the benchmarks and the integration tests).

use crate::manifest::{Manifest, PollMode};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use verbatim_status::query;
use verbatim_status::Snapshot;

/// A running local cluster. Dropping it stops every replica.
pub struct LocalCluster {
    /// The manifest the replicas run with.
    pub manifest: Manifest,
    /// Where it was written.
    pub manifest_path: PathBuf,
    children: Vec<Option<Child>>,
    binary: PathBuf,
    log_dir: PathBuf,
}

/// Options of [`LocalCluster::start`].
#[derive(Clone, Debug)]
pub struct LocalOptions {
    /// Cluster name (segment and socket names).
    pub name: String,
    /// Number of replicas.
    pub replicas: u8,
    /// RESP port of replica 0 (the others follow); 0 disables RESP.
    pub base_port: u16,
    /// Poll mode of every replica.
    pub poll: PollMode,
    /// Cores to pin replicas to, round-robin (empty: no pinning).
    pub cores: Vec<usize>,
    /// Extra `--set` overrides for the manifest.
    pub overrides: Vec<String>,
    /// The `verbatim` binary to run.
    pub binary: PathBuf,
}

/// A replica of a cluster named like `manifest`'s that still runs (any
/// member id: an earlier cluster may have had more members), by its death
/// notice: held by a live replica's poll thread, released by the kernel
/// when it dies.
pub fn running_replica(manifest: &Manifest) -> Option<(u8, i32)> {
    (0..verbatim_core::fabric::MAX_MEMBERS as u8).find_map(|id| {
        let path = crate::notice::notice_path(&manifest.segment_path(id));
        let watch = crate::notice::NoticeWatch::open(&path).ok()?;
        watch.owner_alive().then(|| (id, watch.owner_pid()))
    })
}

impl LocalCluster {
    /// Writes a manifest and starts every replica; returns once each
    /// replica answers on its status socket (bounded by `timeout`).
    pub fn start(opts: &LocalOptions, timeout: Duration) -> Result<LocalCluster, String> {
        let mut manifest = Manifest::local(&opts.name, opts.replicas, opts.base_port);
        manifest.cluster.poll = opts.poll;
        if opts.base_port == 0 {
            for m in &mut manifest.members {
                m.resp_addr = None;
            }
        }
        for (i, m) in manifest.members.iter_mut().enumerate() {
            if !opts.cores.is_empty() {
                m.core = Some(opts.cores[i % opts.cores.len()]);
            }
        }
        let mut root: toml::Value = toml::Value::try_from(&manifest).map_err(|e| e.to_string())?;
        for o in &opts.overrides {
            crate::manifest::apply_override(&mut root, o).map_err(|e| e.to_string())?;
        }
        let manifest: Manifest = root
            .try_into()
            .map_err(|e: toml::de::Error| e.to_string())?;
        manifest.validate().map_err(|e| e.to_string())?;
        // Never start over a running cluster of the same name: its replicas
        // keep their segments (ours would exit at once), and the manifest
        // written below would replace the one its clients and console read.
        // The manifest already in the run directory names the files of
        // the cluster that wrote it (its own shm_dir, say).
        let previous = Manifest::load(
            &manifest
                .run_dir()
                .join(verbatim_status::paths::MANIFEST_FILE),
            &[],
        )
        .ok();
        let running =
            running_replica(&manifest).or_else(|| previous.as_ref().and_then(running_replica));
        if let Some((id, pid)) = running {
            return Err(format!(
                "a cluster named {:?} is already running (replica {id}, pid {pid}): stop it \
                 first, or choose another name",
                manifest.cluster.name
            ));
        }
        let run_dir = manifest.run_dir();
        crate::files::ensure_private_dir(&run_dir).map_err(|e| e.to_string())?;
        let manifest_path = run_dir.join(verbatim_status::paths::MANIFEST_FILE);
        // 0600: it may hold the RESP password.
        crate::files::create_private_file(&manifest_path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, manifest.to_toml().as_bytes()))
            .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
        let mut cluster = LocalCluster {
            manifest,
            manifest_path,
            children: Vec::new(),
            binary: opts.binary.clone(),
            log_dir: run_dir,
        };
        for id in 0..opts.replicas {
            let child = cluster.spawn(id)?;
            cluster.children.push(Some(child));
        }
        cluster.wait_ready(timeout)?;
        Ok(cluster)
    }

    fn spawn(&self, id: u8) -> Result<Child, String> {
        let log = self.log_dir.join(format!("replica-{id}.log"));
        // Appended to: a restarted replica's log follows its predecessor's.
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        Command::new(&self.binary)
            .arg("replica")
            .arg("--config")
            .arg(&self.manifest_path)
            .arg("--id")
            .arg(id.to_string())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.binary.display()))
    }

    /// Waits until every running replica answers on its status socket.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), String> {
        let began = Instant::now();
        for id in 0..self.children.len() as u8 {
            if self.children[usize::from(id)].is_none() {
                continue;
            }
            loop {
                if query(&self.manifest.status_socket(id), Duration::from_millis(500)).is_ok() {
                    break;
                }
                if began.elapsed() > timeout {
                    return Err(format!(
                        "replica {id} did not answer on {} within {timeout:?}; see {}",
                        self.manifest.status_socket(id).display(),
                        self.log_dir.join(format!("replica-{id}.log")).display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(())
    }

    /// Status of every replica (`None` where it does not answer).
    pub fn status(&self) -> Vec<Option<Snapshot>> {
        (0..self.children.len() as u8)
            .map(|id| query(&self.manifest.status_socket(id), Duration::from_millis(500)).ok())
            .collect()
    }

    /// Waits until a leader whose term is above `min_term` is known to the
    /// running replicas and has committed an entry of its term.
    pub fn wait_leader(&self, min_term: u64, timeout: Duration) -> Result<(u8, u64), String> {
        let began = Instant::now();
        loop {
            for s in self.status().into_iter().flatten() {
                if s.role == "leader" && s.term > min_term && s.log.commit_index > 1 {
                    return Ok((s.id, s.term));
                }
            }
            if began.elapsed() > timeout {
                return Err(format!(
                    "no leader above term {min_term} within {timeout:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The pid of a replica.
    pub fn pid(&self, id: u8) -> Option<u32> {
        self.children.get(usize::from(id))?.as_ref().map(Child::id)
    }

    /// Replicas that exited since the last call (killed from outside,
    /// crashed, stopped by a signal), with how they ended; their slots
    /// become empty, ready for [`LocalCluster::restart`].
    pub fn reap_exited(&mut self) -> Vec<(u8, std::process::ExitStatus)> {
        let mut ended = Vec::new();
        for (id, slot) in self.children.iter_mut().enumerate() {
            if let Some(c) = slot {
                if let Ok(Some(status)) = c.try_wait() {
                    ended.push((id as u8, status));
                    *slot = None;
                }
            }
        }
        ended
    }

    /// Starts replica `id` again (a new process with empty memory, which
    /// rejoins the group) if it is not running.
    pub fn restart(&mut self, id: u8) -> Result<(), String> {
        let slot = usize::from(id);
        if slot >= self.children.len() {
            return Err(format!("no replica {id}"));
        }
        if self.children[slot].is_some() {
            return Ok(());
        }
        let child = self.spawn(id)?;
        self.children[slot] = Some(child);
        Ok(())
    }

    /// SIGKILLs a replica (process gone, memory gone with it).
    pub fn kill(&mut self, id: u8) -> Result<(), String> {
        self.kill_all(&[id])
    }

    /// SIGKILLs several replicas at the same instant: every signal is sent
    /// before anything else (the reaping) starts.
    pub fn kill_all(&mut self, ids: &[u8]) -> Result<(), String> {
        if ids.iter().any(|&id| {
            self.children
                .get(usize::from(id))
                .is_none_or(Option::is_none)
        }) {
            return Err("no such replica".into());
        }
        let victims: Vec<Child> = ids
            .iter()
            .filter_map(|&id| self.children[usize::from(id)].take())
            .collect();
        for c in &victims {
            signal(c.id(), libc::SIGKILL);
        }
        // Reap in the background: the caller (a client thread in the demo
        // and the benchmarks) must not stall on the kill.
        for mut c in victims {
            std::thread::spawn(move || {
                let _ = c.wait();
            });
        }
        Ok(())
    }

    /// SIGSTOPs (`stop = true`) or SIGCONTs a replica: a stopped replica is
    /// DARE's zombie (its memory is still written by the leader).
    pub fn pause(&self, id: u8, stop: bool) -> Result<(), String> {
        let pid = self.pid(id).ok_or("no such replica")?;
        signal(pid, if stop { libc::SIGSTOP } else { libc::SIGCONT });
        Ok(())
    }

    /// Stops every replica with SIGTERM (clean shutdown), SIGKILL after 5 s,
    /// then removes what killed replicas could not (their segments, slot
    /// files, death notices and status sockets).
    pub fn stop(&mut self) {
        for c in self.children.iter().flatten() {
            signal(c.id(), libc::SIGCONT);
            signal(c.id(), libc::SIGTERM);
        }
        for c in self.children.iter_mut() {
            if let Some(c) = c.take() {
                reap(c, Duration::from_secs(5));
            }
        }
        for id in 0..self.manifest.member_count() {
            let segment = self.manifest.segment_path(id);
            let _ = std::fs::remove_file(crate::notice::notice_path(&segment));
            let _ = std::fs::remove_file(self.manifest.slots_path(id));
            let _ = std::fs::remove_file(segment);
            let _ = std::fs::remove_file(self.manifest.status_socket(id));
        }
    }

    /// The replica log directory.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid we spawned and a valid signal number.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Waits for a child to exit, killing it if it takes longer than `grace`.
fn reap(mut c: Child, grace: Duration) {
    let began = Instant::now();
    loop {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        if began.elapsed() > grace {
            let _ = c.kill();
            let _ = c.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The `verbatim` binary next to the current executable (tests and the
/// bench run from `target/*/deps` or `target/*`).
pub fn find_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?.to_path_buf();
    for _ in 0..3 {
        let cand = dir.join("verbatim");
        if cand.is_file() {
            return Some(cand);
        }
        dir = dir.parent()?.to_path_buf();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second cluster of the same name is refused before it writes
    /// anything or starts a replica, and names the running one.
    #[test]
    fn a_cluster_is_not_started_over_a_running_one_of_the_same_name() {
        let name = format!("dup-test-{}", std::process::id());
        let manifest = Manifest::local(&name, 3, 0);
        assert_eq!(running_replica(&manifest), None);
        // This thread plays replica 1 of a running cluster of that name:
        // it holds that replica's death notices.
        let path = crate::notice::notice_path(&manifest.segment_path(1));
        let notices = crate::notice::DeathNotices::hold(&path).expect("hold");
        assert_eq!(
            running_replica(&manifest),
            Some((1, std::process::id() as i32))
        );
        let refused = LocalCluster::start(
            &LocalOptions {
                name: name.clone(),
                replicas: 3,
                base_port: 0,
                poll: PollMode::Adaptive,
                cores: Vec::new(),
                overrides: Vec::new(),
                // Never run: the start is refused first.
                binary: PathBuf::from("/nonexistent/verbatim"),
            },
            Duration::from_secs(1),
        )
        .err()
        .expect("refused");
        assert!(refused.contains("already running"), "{refused}");
        assert!(refused.contains("replica 1"), "{refused}");
        assert!(
            !manifest
                .run_dir()
                .join(verbatim_status::paths::MANIFEST_FILE)
                .exists(),
            "nothing written"
        );
        notices.unlink();
    }
}
