//! Serves [`verbatim_status::Snapshot`]s on a Unix socket (protocol in
//! [`crate::status`]). The poll loop only ever `try_lock`s the slot it
//! publishes into, so a slow or hostile status client can never slow a
//! replica down; JSON is produced here, on the server's threads.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use verbatim_status::{ErrorReply, MemberChange, MemberReply, Snapshot};

/// Status connections served at once; more are refused.
pub const STATUS_CONNECTIONS_MAX: usize = 32;
/// Longest request line.
pub const STATUS_LINE_MAX: usize = 1024;
/// Member changes waiting for the poll loop at most; more are refused
/// (the leader runs one reconfiguration at a time anyway).
pub const MEMBER_CHANGES_QUEUED_MAX: usize = 4;
/// How long a member change waits for its CONFIG entries to commit
/// before the server answers that it is still under way.
pub const MEMBER_CHANGE_WAIT: Duration = Duration::from_secs(60);

/// An operator's change of the group, on its way to the poll loop, and
/// where its answer goes.
pub struct MemberRequest {
    /// What to change.
    pub change: MemberChange,
    /// Where the answer goes (the server thread waits on it).
    pub reply: std::sync::mpsc::Sender<MemberReply>,
}

/// Where the poll loop publishes and the server reads, and where the
/// server leaves operators' requests for the poll loop.
#[derive(Default)]
pub struct StatusSlot {
    latest: spin::Mutex<Option<Arc<Snapshot>>>,
    requests: spin::Mutex<Vec<MemberRequest>>,
    /// Set while `requests` is not empty: the poll loop reads one atomic
    /// per step.
    requested: AtomicBool,
}

impl StatusSlot {
    /// Publishes without ever waiting: if a reader holds the lock, this
    /// snapshot is skipped (the next one will do).
    pub fn publish(&self, s: Snapshot) -> bool {
        match self.latest.try_lock() {
            Some(mut g) => {
                *g = Some(Arc::new(s));
                true
            }
            None => false,
        }
    }

    /// The latest snapshot.
    pub fn get(&self) -> Option<Arc<Snapshot>> {
        self.latest.lock().clone()
    }

    /// Leaves a request for the poll loop; false if too many wait.
    pub fn request(&self, r: MemberRequest) -> Result<(), MemberRequest> {
        let mut q = self.requests.lock();
        if q.len() >= MEMBER_CHANGES_QUEUED_MAX {
            return Err(r);
        }
        q.push(r);
        self.requested.store(true, Ordering::Release);
        Ok(())
    }

    /// The requests waiting (poll loop): one atomic load when none do.
    pub fn take_requests(&self) -> Vec<MemberRequest> {
        if !self.requested.load(Ordering::Acquire) {
            return Vec::new();
        }
        // The server holds the lock only to push: never long.
        let mut q = self.requests.lock();
        self.requested.store(false, Ordering::Release);
        std::mem::take(&mut *q)
    }
}

/// A running status server; removes its socket when dropped.
pub struct StatusServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StatusServer {
    /// Listens on `path` (replacing a stale socket file).
    pub fn start(path: &Path, slot: Arc<StatusSlot>) -> std::io::Result<StatusServer> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let active = Arc::new(AtomicUsize::new(0));
        let thread = std::thread::Builder::new()
            .name("verbatim-status".into())
            .spawn(move || {
                crate::topology::lower_thread_priority();
                while !stop2.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            if active.load(Ordering::Acquire) >= STATUS_CONNECTIONS_MAX {
                                let mut s = stream;
                                let _ =
                                    writeln!(s, "{}", error_line("too many status connections"));
                                continue;
                            }
                            active.fetch_add(1, Ordering::AcqRel);
                            let (slot, stop, active) =
                                (slot.clone(), stop2.clone(), active.clone());
                            let _ = std::thread::Builder::new()
                                .name("verbatim-status-conn".into())
                                .spawn(move || {
                                    crate::topology::lower_thread_priority();
                                    serve(stream, &slot, &stop);
                                    active.fetch_sub(1, Ordering::AcqRel);
                                });
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })?;
        Ok(StatusServer {
            path: path.to_owned(),
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn error_line(msg: &str) -> String {
    serde_json::to_string(&ErrorReply {
        error: msg.to_string(),
    })
    .expect("serialisable")
}

fn snapshot_line(slot: &StatusSlot) -> String {
    match slot.get() {
        Some(s) => serde_json::to_string(&*s).expect("snapshots serialise"),
        None => error_line("no snapshot yet: the replica is starting"),
    }
}

fn serve(stream: UnixStream, slot: &StatusSlot, stop: &AtomicBool) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    while !stop.load(Ordering::Acquire) {
        line.clear();
        match read_line_bounded(&mut reader, &mut line) {
            Ok(None) => return, // closed
            Ok(Some(())) => {}
            Err(LineError::Timeout) => continue,
            Err(LineError::TooLong) => {
                let _ = writeln!(out, "{}", error_line("request line too long"));
                return;
            }
            Err(LineError::Io) => return,
        }
        let Ok(text) = std::str::from_utf8(&line) else {
            let _ = writeln!(out, "{}", error_line("request is not UTF-8"));
            return;
        };
        let mut words = text.split_whitespace();
        let reply = match (words.next(), words.next(), words.next()) {
            (None | Some("status"), None, None) => snapshot_line(slot),
            (Some("member"), Some(verb), Some(arg)) if words.next().is_none() => {
                member_change(slot, verb, arg)
            }
            (Some("watch"), interval, None) => {
                let interval_ms = match interval.map(str::parse::<u64>) {
                    None => Ok(200),
                    Some(Ok(v)) => Ok(v.max(20)),
                    Some(Err(_)) => Err(()),
                };
                match interval_ms {
                    Ok(ms) => {
                        watch(&mut out, slot, stop, ms);
                        return;
                    }
                    Err(()) => error_line("usage: watch <interval_ms>"),
                }
            }
            _ => error_line(
                "unknown request: send `status`, `watch <interval_ms>` or `member add|remove|resize <n>`",
            ),
        };
        if writeln!(out, "{reply}").is_err() {
            return;
        }
    }
}

/// Hands a member change to the poll loop and waits for its answer.
fn member_change(slot: &StatusSlot, verb: &str, arg: &str) -> String {
    let change = match MemberChange::parse(verb, arg) {
        Ok(c) => c,
        Err(e) => return error_line(&e),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    if slot.request(MemberRequest { change, reply: tx }).is_err() {
        return serde_json::to_string(&MemberReply {
            error: Some("too many member changes waiting; try again".into()),
            retry: true,
            ..MemberReply::default()
        })
        .expect("serialisable");
    }
    let reply = match rx.recv_timeout(MEMBER_CHANGE_WAIT) {
        Ok(r) => r,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => MemberReply {
            error: Some(format!(
                "not committed within {} s; it is still under way (see `verbatim status`)",
                MEMBER_CHANGE_WAIT.as_secs()
            )),
            interrupted: true,
            ..MemberReply::default()
        },
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => MemberReply {
            error: Some("the replica stopped before it answered".into()),
            interrupted: true,
            ..MemberReply::default()
        },
    };
    serde_json::to_string(&reply).expect("serialisable")
}

fn watch(out: &mut UnixStream, slot: &StatusSlot, stop: &AtomicBool, interval_ms: u64) {
    while !stop.load(Ordering::Acquire) {
        if writeln!(out, "{}", snapshot_line(slot)).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(interval_ms));
    }
}

enum LineError {
    Timeout,
    TooLong,
    Io,
}

fn read_line_bounded(
    r: &mut BufReader<UnixStream>,
    line: &mut Vec<u8>,
) -> Result<Option<()>, LineError> {
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(LineError::Timeout)
            }
            Err(_) => return Err(LineError::Io),
        };
        if buf.is_empty() {
            return Ok(None);
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if line.len() + chunk.len() > STATUS_LINE_MAX {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(chunk);
        let used = done.unwrap_or(buf.len());
        r.consume(used);
        if done.is_some() {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Some(()));
        }
    }
}

pub use verbatim_status::query;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn status_watch_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let slot = Arc::new(StatusSlot::default());
        let server = StatusServer::start(&path, slot.clone()).unwrap();
        assert!(query(&path, Duration::from_secs(2))
            .unwrap_err()
            .contains("starting"));
        assert!(slot.publish(Snapshot {
            id: 4,
            term: 9,
            ..Snapshot::default()
        }));
        let s = query(&path, Duration::from_secs(2)).unwrap();
        assert_eq!((s.id, s.term), (4, 9));
        // Garbage gets an error line; the connection and server survive.
        let mut c = UnixStream::connect(&path).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        c.write_all(b"\xff\xfe hello\n").unwrap();
        let mut buf = String::new();
        BufReader::new(c.try_clone().unwrap())
            .read_line(&mut buf)
            .unwrap();
        assert!(buf.contains("not UTF-8"), "{buf}");
        let mut c = UnixStream::connect(&path).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        c.write_all(b"frobnicate\nstatus\n").unwrap();
        let mut r = BufReader::new(c.try_clone().unwrap());
        let mut l1 = String::new();
        r.read_line(&mut l1).unwrap();
        assert!(l1.contains("unknown request"));
        let mut l2 = String::new();
        r.read_line(&mut l2).unwrap();
        assert!(l2.contains("\"term\":9"));
        // An endless line is cut off.
        let mut c = UnixStream::connect(&path).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        c.write_all(&vec![b'a'; 5000]).unwrap();
        let mut rest = String::new();
        let _ = c.read_to_string(&mut rest);
        assert!(rest.contains("too long"));
        // watch streams snapshots.
        let mut c = UnixStream::connect(&path).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        c.write_all(b"watch 20\n").unwrap();
        let mut r = BufReader::new(c);
        for _ in 0..3 {
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            assert!(l.contains("\"id\":4"));
        }
        drop(server);
        assert!(!path.exists(), "socket removed on shutdown");
    }

    /// A member change reaches the poll loop and its answer the operator;
    /// a malformed one is refused by the server without reaching it.
    #[test]
    fn member_changes_go_to_the_loop_and_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let slot = Arc::new(StatusSlot::default());
        let _server = StatusServer::start(&path, slot.clone()).unwrap();
        assert!(slot.take_requests().is_empty());
        for (line, why) in [
            ("member frob 3", "unknown member change"),
            ("member add x", "not a member id"),
            ("member add 300", "not a member id"),
            ("member add", "unknown request"),
        ] {
            let mut c = UnixStream::connect(&path).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            writeln!(c, "{line}").unwrap();
            let mut reply = String::new();
            BufReader::new(c).read_line(&mut reply).unwrap();
            assert!(reply.contains(why), "{line}: {reply}");
        }
        assert!(slot.take_requests().is_empty());
        // The "loop": answers the request it takes.
        let loop_slot = slot.clone();
        let lp = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                let reqs = loop_slot.take_requests();
                if let Some(r) = reqs.into_iter().next() {
                    assert_eq!(r.change, MemberChange::Remove(2));
                    let _ = r.reply.send(MemberReply {
                        configuration: Some(verbatim_status::GroupConfiguration {
                            state: "stable".into(),
                            size: 3,
                            new_size: 3,
                            members: vec![0, 1],
                            ..Default::default()
                        }),
                        ..MemberReply::default()
                    });
                    return;
                }
                assert!(std::time::Instant::now() < deadline, "no request came");
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let r =
            verbatim_status::member_change(&path, MemberChange::Remove(2), Duration::from_secs(5))
                .unwrap();
        lp.join().unwrap();
        assert_eq!(r.configuration.unwrap().members, vec![0, 1]);
    }
}
