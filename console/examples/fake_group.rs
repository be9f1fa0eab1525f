//! A fake group to try the console without a cluster: three scripted
//! status endpoints behind a manifest, with a leader that dies and is
//! replaced every few seconds.
//!
//! ```text
//! cargo run -p verbatim-console --example fake_group -- /tmp/fake-group 120
//! verbatim-console --connect /tmp/fake-group/demo.toml   # second terminal
//! ```
//!
//! Arguments: a directory for the sockets and the manifest (created), and
//! how many seconds to run (default 120; the program always stops).

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use verbatim_console::fake::{snapshot, FakeReplica, FAKE_MEMBERS};
use verbatim_status::{EventRecord, Failover};

/// Seconds between leader deaths.
const LEADER_LIFETIME_S: u64 = 6;
/// Seconds a dead leader stays down before it restarts as a follower.
const DOWNTIME_S: u64 = 3;
/// How often the snapshots change.
const STEP: Duration = Duration::from_millis(200);

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "/tmp/verbatim-fake-group".into()),
    );
    let run_s: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(120);
    std::fs::create_dir_all(&dir)?;
    let mut manifest = format!(
        "[cluster]\nname = \"demo\"\nrun_dir = \"{}\"\n",
        dir.display()
    );
    for id in 0..FAKE_MEMBERS {
        manifest.push_str(&format!("[[members]]\nid = {id}\n"));
    }
    let manifest_path = dir.join("demo.toml");
    std::fs::write(&manifest_path, manifest)?;
    println!("{}", manifest_path.display());

    let mut term = 1;
    let mut leader: u8 = 0;
    let mut fakes: Vec<FakeReplica> = (0..FAKE_MEMBERS)
        .map(|id| {
            let _ = std::fs::remove_file(dir.join(format!("replica-{id}.sock")));
            let role = if id == leader { "leader" } else { "follower" };
            FakeReplica::start(
                &dir.join(format!("replica-{id}.sock")),
                snapshot(id, role, term, Some(leader)),
            )
        })
        .collect::<Result<_, _>>()?;
    let mut down: Option<(u8, Instant)> = None;
    let mut failovers: Vec<Failover> = Vec::new();
    let mut events: Vec<EventRecord> = Vec::new();
    let start = Instant::now();
    let mut last_change = Instant::now();
    let mut step: u64 = 0;
    while start.elapsed() < Duration::from_secs(run_s) {
        step += 1;
        if last_change.elapsed() >= Duration::from_secs(LEADER_LIFETIME_S) && down.is_none() {
            let old = leader;
            fakes[usize::from(old)].kill();
            leader = (old + 1) % FAKE_MEMBERS;
            term += 1;
            let at = unix_ms();
            failovers.push(Failover {
                term,
                old_leader: Some(old),
                new_leader: leader,
                at_unix_ms: at,
                detection_us: 30 + step % 40,
                election_us: 15 + step % 20,
                first_commit_us: Some(20 + step % 30),
                detected_by: "pidfd".into(),
                decided_by: "election".into(),
                view_wait_us: None,
                timeline: None,
            });
            events.push(EventRecord {
                at_unix_ms: at,
                kind: "replica-lost".into(),
                detail: format!("r{old} exited"),
            });
            events.push(EventRecord {
                at_unix_ms: at,
                kind: "leader-change".into(),
                detail: format!("r{leader} leads term {term}"),
            });
            down = Some((old, Instant::now()));
            last_change = Instant::now();
        }
        if let Some((id, since)) = down {
            if since.elapsed() >= Duration::from_secs(DOWNTIME_S) {
                fakes[usize::from(id)].revive()?;
                events.push(EventRecord {
                    at_unix_ms: unix_ms(),
                    kind: "replica-back".into(),
                    detail: format!("r{id}"),
                });
                down = None;
            }
        }
        events.retain(|e| e.at_unix_ms + 30_000 > unix_ms());
        for (id, fake) in fakes.iter().enumerate() {
            let id = id as u8;
            let role = if id == leader { "leader" } else { "follower" };
            let mut s = snapshot(id, role, term, Some(leader));
            s.at_unix_ms = unix_ms();
            s.uptime_ms = start.elapsed().as_millis() as u64;
            let tail = 1_000 + step * 37;
            s.log.tail_index = tail;
            s.log.tail_pos = tail * 64;
            s.log.commit_index = tail;
            s.log.commit_pos = tail * 64;
            s.log.apply_index = tail - (u64::from(id) * 3 + step % 5) * u64::from(id != leader);
            s.log.apply_pos = s.log.apply_index * 64;
            s.log.head_pos = (tail * 64).saturating_sub(1 << 20);
            if id == leader {
                s.latency.ops_per_sec = 20_000.0 + ((step * 7919) % 9_000) as f64;
                s.latency.writes.p50_ns = 2_800 + (step * 131) % 900;
                s.latency.writes.p99_ns = 9_000 + (step * 977) % 6_000;
                s.failovers = failovers
                    .iter()
                    .filter(|f| f.new_leader == id)
                    .cloned()
                    .collect();
            }
            if let Some((d, _)) = down {
                if let Some(p) = s.peers.iter_mut().find(|p| p.id == d) {
                    p.reachable = false;
                    p.dead = true;
                    p.replication = "broken".into();
                }
            }
            s.events = events.clone();
            fake.set_snapshot(s);
        }
        std::thread::sleep(STEP);
    }
    Ok(())
}
