//! Links to the replicas' status endpoints: one background thread per
//! replica, bounded lines, garbage counted instead of trusted.
//!
//! A watcher connects, sends `watch <interval_ms>`, and turns each line
//! into a [`LinkMessage`]. When the connection fails, closes or goes
//! silent for `stale_after_ms`, it reports [`LinkMessage::Down`] and tries
//! again after a backoff that doubles up to `backoff_max_ms` (1 s), so a
//! replica that comes back is seen again within about a second.
//!
//! Nothing here can slow a replica down: we only read. Snapshots go to the
//! UI with `try_send` on a bounded channel, so a stalled UI drops
//! snapshots (each one is a full state, the next replaces it) rather than
//! queueing without limit or stopping the read loop.

use crate::error::ConsoleError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use verbatim_status::{ErrorReply, Snapshot};

/// Longest status line accepted (a snapshot with many counters and events
/// is a few KiB; this leaves room without letting a broken peer make us
/// allocate without limit).
pub const LINE_BYTES_MAX: usize = 4 << 20;

/// Messages queued from all watchers to the UI before snapshots are
/// dropped.
pub const CHANNEL_CAPACITY: usize = 1024;

/// Longest reason string kept from a failure or a garbage line.
const REASON_CHARS_MAX: usize = 200;

/// How a watcher talks to its replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchConfig {
    /// Snapshot period requested with `watch` (the replica enforces ≥ 20).
    pub interval_ms: u64,
    /// Longest line accepted.
    pub line_bytes_max: usize,
    /// A connection with no complete line for this long is dropped and
    /// re-established (a stopped process keeps its socket open).
    pub stale_after_ms: u64,
    /// First retry delay after a failure.
    pub backoff_min_ms: u64,
    /// Retry delay cap.
    pub backoff_max_ms: u64,
    /// Read timeout: how often a blocked watcher checks for stop/staleness.
    pub poll_step_ms: u64,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            interval_ms: 200,
            line_bytes_max: LINE_BYTES_MAX,
            stale_after_ms: 3_000,
            backoff_min_ms: 100,
            backoff_max_ms: 1_000,
            poll_step_ms: 100,
        }
    }
}

/// One parsed snapshot line, with fields the host may add later.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// `failovers[i].client_gap_us` by term, for hosts that send it. The
    /// replicas do not know the client-visible gap today; reading it from
    /// the JSON (instead of from `Failover`) keeps this working before and
    /// after the host adds the field.
    pub client_gaps_us: BTreeMap<u64, u64>,
}

/// What a watcher tells the UI. `endpoint` indexes [`crate::Target::endpoints`].
#[derive(Clone, Debug, PartialEq)]
pub enum LinkMessage {
    /// A snapshot arrived.
    Report {
        /// Endpoint index.
        endpoint: usize,
        /// The parsed line.
        report: Box<Report>,
    },
    /// A line was not a snapshot (too long, not UTF-8, not JSON, wrong
    /// shape, or an `{"error": ...}` reply). The link stays up.
    Garbage {
        /// Endpoint index.
        endpoint: usize,
        /// Why it was rejected.
        reason: String,
    },
    /// The link is down (connect failed, closed, silent); retrying.
    Down {
        /// Endpoint index.
        endpoint: usize,
        /// Why, e.g. `Connection refused (os error 111)`.
        reason: String,
    },
}

/// A line, or why there is none.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A complete line without its `\n`.
    Complete(Vec<u8>),
    /// A line longer than the limit was skipped up to its `\n`.
    TooLong {
        /// Its length in bytes.
        line_bytes: usize,
    },
    /// The peer closed the stream (a partial last line is dropped).
    Eof,
}

/// Reads `\n`-terminated lines of bounded length. Timeouts surface as
/// `io::Error`s and leave the partial line in place, so the caller can
/// check its stop flag and call again.
pub struct LineReader<R> {
    inner: R,
    chunk: Box<[u8]>,
    chunk_start: usize,
    chunk_end: usize,
    line: Vec<u8>,
    /// Bytes thrown away of the current over-long line, if we are in one.
    discarding: Option<usize>,
    line_bytes_max: usize,
}

impl<R: Read> LineReader<R> {
    /// Wraps `inner`; lines longer than `line_bytes_max` are skipped.
    pub fn new(inner: R, line_bytes_max: usize) -> LineReader<R> {
        LineReader {
            inner,
            chunk: vec![0; 64 * 1024].into_boxed_slice(),
            chunk_start: 0,
            chunk_end: 0,
            line: Vec::new(),
            discarding: None,
            line_bytes_max,
        }
    }

    /// The next line. Bounded memory: at most `line_bytes_max` plus one
    /// 64 KiB chunk.
    pub fn next_line(&mut self) -> io::Result<Line> {
        loop {
            if self.chunk_start == self.chunk_end {
                let n = self.inner.read(&mut self.chunk)?;
                if n == 0 {
                    self.line.clear();
                    self.discarding = None;
                    return Ok(Line::Eof);
                }
                self.chunk_start = 0;
                self.chunk_end = n;
            }
            let avail = &self.chunk[self.chunk_start..self.chunk_end];
            match avail.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.chunk_start += i + 1;
                    if let Some(skipped) = self.discarding.take() {
                        return Ok(Line::TooLong {
                            line_bytes: skipped + i,
                        });
                    }
                    if self.line.len() + i > self.line_bytes_max {
                        let line_bytes = self.line.len() + i;
                        self.line.clear();
                        return Ok(Line::TooLong { line_bytes });
                    }
                    self.line.extend_from_slice(&avail[..i]);
                    return Ok(Line::Complete(std::mem::take(&mut self.line)));
                }
                None => {
                    let n = avail.len();
                    self.chunk_start = self.chunk_end;
                    if let Some(skipped) = self.discarding.as_mut() {
                        *skipped += n;
                    } else if self.line.len() + n > self.line_bytes_max {
                        self.discarding = Some(self.line.len() + n);
                        self.line = Vec::new();
                    } else {
                        self.line.extend_from_slice(avail);
                    }
                }
            }
        }
    }
}

/// A status line, classified.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// A snapshot.
    Report(Box<Report>),
    /// `{"error": "..."}` from the replica.
    ErrorReply(String),
    /// Anything else, with the reason.
    Garbage(String),
}

#[derive(Deserialize)]
struct FailoverExtras {
    term: u64,
    #[serde(default)]
    client_gap_us: Option<u64>,
}

#[derive(Deserialize)]
struct SnapshotExtras {
    #[serde(default)]
    failovers: Vec<FailoverExtras>,
}

/// Classifies one line (without its `\n`). Never panics.
pub fn parse_line(line: &[u8]) -> Parsed {
    let Ok(text) = std::str::from_utf8(line) else {
        return Parsed::Garbage("line is not UTF-8".into());
    };
    let text = text.trim();
    if text.is_empty() {
        return Parsed::Garbage("empty line".into());
    }
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Parsed::Garbage(clip(&format!("not JSON: {e}"))),
    };
    if let Ok(reply) = ErrorReply::deserialize(&value) {
        return Parsed::ErrorReply(clip(&reply.error));
    }
    let snapshot = match Snapshot::deserialize(&value) {
        Ok(s) => s,
        Err(e) => return Parsed::Garbage(clip(&format!("not a snapshot: {e}"))),
    };
    let client_gaps_us = SnapshotExtras::deserialize(&value)
        .map(|x| {
            x.failovers
                .into_iter()
                .filter_map(|f| Some((f.term, f.client_gap_us?)))
                .collect()
        })
        .unwrap_or_default();
    Parsed::Report(Box::new(Report {
        snapshot,
        client_gaps_us,
    }))
}

fn clip(s: &str) -> String {
    crate::format::truncate(s, REASON_CHARS_MAX)
}

/// A background thread watching one endpoint. Dropping it stops the
/// thread (within one `poll_step_ms`).
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `socket`, sending messages tagged `endpoint`.
    pub fn spawn(
        endpoint: usize,
        socket: PathBuf,
        config: WatchConfig,
        tx: SyncSender<LinkMessage>,
    ) -> io::Result<Watcher> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("watch-{endpoint}"))
            .spawn(move || watch_loop(endpoint, &socket, &config, &tx, &flag))?;
        Ok(Watcher {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            // The thread checks the flag at least every poll_step_ms.
            let _ = t.join();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Starts one watcher per endpoint of `target`.
pub fn spawn_all(
    target: &crate::Target,
    config: &WatchConfig,
    tx: &SyncSender<LinkMessage>,
) -> Result<Vec<Watcher>, ConsoleError> {
    target
        .endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| {
            Watcher::spawn(i, e.socket.clone(), config.clone(), tx.clone())
                .map_err(ConsoleError::from)
        })
        .collect()
}

/// Why a session ended.
enum SessionEnd {
    /// Stop requested or the UI went away.
    Stopped,
    /// The link failed; `delivered` says whether it carried any snapshot
    /// (then the backoff starts over).
    Lost { reason: String, delivered: bool },
}

fn watch_loop(
    endpoint: usize,
    socket: &Path,
    config: &WatchConfig,
    tx: &SyncSender<LinkMessage>,
    stop: &AtomicBool,
) {
    let mut backoff_ms = config.backoff_min_ms;
    while !stop.load(Ordering::Relaxed) {
        match session(endpoint, socket, config, tx, stop) {
            SessionEnd::Stopped => return,
            SessionEnd::Lost { reason, delivered } => {
                tracing::debug!(endpoint, %reason, "status link down");
                if !send_reliably(
                    tx,
                    LinkMessage::Down {
                        endpoint,
                        reason: clip(&reason),
                    },
                    config,
                    stop,
                ) {
                    return;
                }
                if delivered {
                    backoff_ms = config.backoff_min_ms;
                }
                if !sleep_unless_stopped(Duration::from_millis(backoff_ms), config, stop) {
                    return;
                }
                backoff_ms = (backoff_ms * 2).min(config.backoff_max_ms);
            }
        }
    }
}

/// Sends a message that must not be dropped (a lost `Down` would leave
/// the replica shown as up): retries while the channel is full, but gives
/// up when stopped or when the UI is gone, so that joining a watcher never
/// waits on a receiver that stopped reading. False if it gave up.
fn send_reliably(
    tx: &SyncSender<LinkMessage>,
    message: LinkMessage,
    config: &WatchConfig,
    stop: &AtomicBool,
) -> bool {
    let mut message = message;
    loop {
        match tx.try_send(message) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(m)) => {
                message = m;
                if !sleep_unless_stopped(
                    Duration::from_millis(config.poll_step_ms.max(1)),
                    config,
                    stop,
                ) {
                    return false;
                }
            }
        }
    }
}

/// Sleeps in `poll_step_ms` steps; false if stopped meanwhile.
fn sleep_unless_stopped(total: Duration, config: &WatchConfig, stop: &AtomicBool) -> bool {
    let deadline = Instant::now() + total;
    let step = Duration::from_millis(config.poll_step_ms.max(1));
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep(step.min(deadline - now));
    }
}

fn session(
    endpoint: usize,
    socket: &Path,
    config: &WatchConfig,
    tx: &SyncSender<LinkMessage>,
    stop: &AtomicBool,
) -> SessionEnd {
    let lost = |reason: String, delivered: bool| SessionEnd::Lost { reason, delivered };
    let mut stream = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) => return lost(e.to_string(), false),
    };
    let step = Duration::from_millis(config.poll_step_ms.max(1));
    if let Err(e) = stream
        .set_read_timeout(Some(step))
        .and_then(|()| stream.set_write_timeout(Some(step * 10)))
    {
        return lost(e.to_string(), false);
    }
    if let Err(e) = stream.write_all(format!("watch {}\n", config.interval_ms).as_bytes()) {
        return lost(format!("sending watch: {e}"), false);
    }
    let mut reader = LineReader::new(stream, config.line_bytes_max);
    let stale_after = Duration::from_millis(config.stale_after_ms);
    let mut last_line = Instant::now();
    let mut delivered = false;
    loop {
        if stop.load(Ordering::Relaxed) {
            return SessionEnd::Stopped;
        }
        let message = match reader.next_line() {
            Ok(Line::Complete(bytes)) => {
                last_line = Instant::now();
                match parse_line(&bytes) {
                    Parsed::Report(report) => {
                        delivered = true;
                        LinkMessage::Report { endpoint, report }
                    }
                    Parsed::ErrorReply(e) => LinkMessage::Garbage {
                        endpoint,
                        reason: format!("replica error: {e}"),
                    },
                    Parsed::Garbage(reason) => LinkMessage::Garbage { endpoint, reason },
                }
            }
            Ok(Line::TooLong { line_bytes }) => {
                last_line = Instant::now();
                LinkMessage::Garbage {
                    endpoint,
                    reason: format!(
                        "line of {line_bytes} bytes exceeds {} bytes",
                        config.line_bytes_max
                    ),
                }
            }
            Ok(Line::Eof) => return lost("closed by the replica".into(), delivered),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if last_line.elapsed() >= stale_after {
                    return lost(
                        format!("no status line for {} ms", config.stale_after_ms),
                        delivered,
                    );
                }
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return lost(e.to_string(), delivered),
        };
        match tx.try_send(message) {
            Ok(()) => {}
            // A full channel means the UI is behind: drop this line, the
            // next snapshot carries the whole state again.
            Err(TrySendError::Full(_)) => {
                tracing::debug!(endpoint, "UI behind; status line dropped")
            }
            Err(TrySendError::Disconnected(_)) => return SessionEnd::Stopped,
        }
    }
}

/// One `status` request: the replica's current snapshot, or why not,
/// within `timeout`.
pub fn fetch_status(socket: &Path, timeout: Duration) -> Result<Report, ConsoleError> {
    let fail = |reason: String| ConsoleError::Status {
        socket: socket.to_path_buf(),
        reason,
    };
    let deadline = Instant::now() + timeout;
    let mut stream = UnixStream::connect(socket).map_err(|e| fail(e.to_string()))?;
    let step = Duration::from_millis(50);
    stream
        .set_read_timeout(Some(step))
        .map_err(|e| fail(e.to_string()))?;
    stream
        .set_write_timeout(Some(timeout.max(step)))
        .map_err(|e| fail(e.to_string()))?;
    stream
        .write_all(b"status\n")
        .map_err(|e| fail(e.to_string()))?;
    let mut reader = LineReader::new(stream, LINE_BYTES_MAX);
    loop {
        match reader.next_line() {
            Ok(Line::Complete(bytes)) => {
                return match parse_line(&bytes) {
                    Parsed::Report(r) => Ok(*r),
                    Parsed::ErrorReply(e) => Err(fail(format!("replica error: {e}"))),
                    Parsed::Garbage(reason) => Err(fail(reason)),
                }
            }
            Ok(Line::TooLong { line_bytes }) => {
                return Err(fail(format!("reply of {line_bytes} bytes is too long")))
            }
            Ok(Line::Eof) => return Err(fail("closed without a reply".into())),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if Instant::now() >= deadline {
                    return Err(fail(format!("no reply within {} ms", timeout.as_millis())));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(fail(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{snapshot, FakeReplica};
    use std::io::Cursor;
    use std::sync::mpsc::{sync_channel, Receiver};

    /// A reader that yields its pieces one per call, with a timeout error
    /// between them, as a socket with a read timeout does.
    struct Trickle {
        pieces: Vec<Vec<u8>>,
        timeout_next: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.pieces.is_empty() {
                return Ok(0);
            }
            self.timeout_next = !self.timeout_next;
            if !self.timeout_next {
                return Err(io::Error::from(io::ErrorKind::WouldBlock));
            }
            let p = self.pieces.remove(0);
            buf[..p.len()].copy_from_slice(&p);
            Ok(p.len())
        }
    }

    #[test]
    fn lines_are_split_and_over_long_lines_skipped_then_resynced() {
        let data = b"one\ntwo-is-too-long\nthree\npartial".to_vec();
        let mut r = LineReader::new(Cursor::new(data), 8);
        assert_eq!(r.next_line().unwrap(), Line::Complete(b"one".to_vec()));
        assert_eq!(r.next_line().unwrap(), Line::TooLong { line_bytes: 15 });
        assert_eq!(r.next_line().unwrap(), Line::Complete(b"three".to_vec()));
        assert_eq!(r.next_line().unwrap(), Line::Eof);
    }

    #[test]
    fn timeouts_keep_the_partial_line() {
        let pieces = vec![
            b"ab".to_vec(),
            b"cd\nxyz-too-".to_vec(),
            b"long-line\nok\n".to_vec(),
        ];
        let mut r = LineReader::new(
            Trickle {
                pieces,
                timeout_next: false,
            },
            6,
        );
        let mut got = Vec::new();
        for _ in 0..20 {
            match r.next_line() {
                Ok(Line::Eof) => break,
                Ok(l) => got.push(l),
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
            }
        }
        assert_eq!(
            got,
            vec![
                Line::Complete(b"abcd".to_vec()),
                Line::TooLong { line_bytes: 17 },
                Line::Complete(b"ok".to_vec())
            ]
        );
    }

    #[test]
    fn a_line_far_over_the_limit_is_counted_not_stored() {
        let mut data = vec![b'x'; 300_000];
        data.push(b'\n');
        data.extend_from_slice(b"{}\n");
        let mut r = LineReader::new(Cursor::new(data), 1024);
        assert_eq!(
            r.next_line().unwrap(),
            Line::TooLong {
                line_bytes: 300_000
            }
        );
        assert!(r.line.capacity() <= 1024 + 64 * 1024);
        assert_eq!(r.next_line().unwrap(), Line::Complete(b"{}".to_vec()));
    }

    #[test]
    fn lines_are_classified() {
        let s = snapshot(1, "leader", 4, Some(1));
        let json = serde_json::to_string(&s).unwrap();
        match parse_line(json.as_bytes()) {
            Parsed::Report(r) => {
                assert_eq!(r.snapshot, s);
                assert!(r.client_gaps_us.is_empty());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse_line(br#"{"error": "unknown request"}"#),
            Parsed::ErrorReply("unknown request".into())
        );
        for junk in [&b"\xff\xfe"[..], b"", b"hello", b"[1,2]", br#"{"id": 3}"#] {
            assert!(
                matches!(parse_line(junk), Parsed::Garbage(_)),
                "{:?}",
                String::from_utf8_lossy(junk)
            );
        }
    }

    #[test]
    fn a_client_gap_is_read_when_the_host_sends_it() {
        let mut s = snapshot(2, "leader", 5, Some(2));
        s.failovers.push(verbatim_status::Failover {
            term: 5,
            new_leader: 2,
            ..Default::default()
        });
        let mut v = serde_json::to_value(&s).unwrap();
        v["failovers"][0]["client_gap_us"] = serde_json::json!(2500);
        let Parsed::Report(r) = parse_line(v.to_string().as_bytes()) else {
            panic!()
        };
        assert_eq!(r.client_gaps_us, BTreeMap::from([(5, 2500)]));
        assert_eq!(r.snapshot.failovers.len(), 1);
    }

    fn recv_until(
        rx: &Receiver<LinkMessage>,
        what: &str,
        mut f: impl FnMut(&LinkMessage) -> bool,
    ) -> LinkMessage {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(m) if f(&m) => return m,
                Ok(_) => {}
                Err(e) => panic!("waiting for {what}: {e}"),
            }
        }
    }

    fn fast() -> WatchConfig {
        WatchConfig {
            interval_ms: 20,
            stale_after_ms: 1_000,
            backoff_min_ms: 20,
            backoff_max_ms: 200,
            poll_step_ms: 20,
            ..Default::default()
        }
    }

    #[test]
    fn a_watcher_reports_garbage_loss_and_return() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("replica-0.sock");
        let mut fake = FakeReplica::start(&sock, snapshot(0, "leader", 3, Some(0))).unwrap();
        let (tx, rx) = sync_channel(64);
        let watcher = Watcher::spawn(7, sock.clone(), fast(), tx).unwrap();
        let m = recv_until(&rx, "a report", |m| matches!(m, LinkMessage::Report { .. }));
        let LinkMessage::Report { endpoint, report } = m else {
            unreachable!()
        };
        assert_eq!((endpoint, report.snapshot.term), (7, 3));

        fake.push_raw_line("this is not json");
        let m = recv_until(&rx, "garbage", |m| matches!(m, LinkMessage::Garbage { .. }));
        assert!(
            matches!(&m, LinkMessage::Garbage { reason, .. } if reason.contains("not JSON")),
            "{m:?}"
        );

        fake.kill();
        recv_until(&rx, "down", |m| {
            matches!(m, LinkMessage::Down { endpoint: 7, .. })
        });
        fake.update(|s| s.term = 9);
        fake.revive().unwrap();
        recv_until(
            &rx,
            "a report after revival",
            |m| matches!(m, LinkMessage::Report { report, .. } if report.snapshot.term == 9),
        );
        assert!(fake.connections() >= 2);
        watcher.stop();
    }

    #[test]
    fn a_silent_replica_is_reported_down() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("replica-1.sock");
        let fake = FakeReplica::start(&sock, snapshot(1, "follower", 3, Some(0))).unwrap();
        fake.set_silent(true);
        let (tx, rx) = sync_channel(64);
        let _w = Watcher::spawn(
            1,
            sock,
            WatchConfig {
                stale_after_ms: 200,
                ..fast()
            },
            tx,
        )
        .unwrap();
        let m = recv_until(&rx, "down", |m| matches!(m, LinkMessage::Down { .. }));
        assert!(
            matches!(&m, LinkMessage::Down { reason, .. } if reason.contains("no status line")),
            "{m:?}"
        );
    }

    #[test]
    fn fetch_status_returns_one_snapshot_or_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("replica-2.sock");
        let e = fetch_status(&sock, Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(e.contains("replica-2.sock"), "{e}");
        let _fake = FakeReplica::start(&sock, snapshot(2, "follower", 6, Some(1))).unwrap();
        let r = fetch_status(&sock, Duration::from_secs(5)).unwrap();
        assert_eq!((r.snapshot.id, r.snapshot.term), (2, 6));
    }
}
