//! `GET /metrics`: the replica's status snapshot in the Prometheus text
//! format (`verbatim_status::prometheus`), on `members[].metrics_addr`.
//!
//! One thread at a lowered priority serves one connection at a time, with
//! short read and write timeouts and a bounded request head: a scraper asks
//! every few seconds, so there is nothing to gain from concurrency, and a
//! replica must not grow threads or buffers for whoever connects. That is
//! also why this is a few lines over `TcpListener` rather than an HTTP
//! server crate (the ones that fit spawn a thread per connection or pull in
//! an async runtime). HTTP/1.1 is answered with `Connection: close`.

use crate::replica::status_server::StatusSlot;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of a request head we read at most.
const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;
/// How long one connection may take to send its request or read the reply.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// The running endpoint; dropping it stops the thread.
pub struct MetricsServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: SocketAddr,
}

impl MetricsServer {
    /// Listens on `addr` and serves `status`'s latest snapshot.
    pub fn start(addr: &str, status: Arc<StatusSlot>) -> std::io::Result<MetricsServer> {
        let listener = crate::gateway::bind_listener(addr)?;
        let local = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("verbatim-metrics".into())
            .spawn(move || {
                crate::topology::lower_thread_priority();
                while !stop2.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((stream, _)) => serve(stream, &status),
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })?;
        Ok(MetricsServer {
            stop,
            thread: Some(thread),
            addr: local,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one connection (errors just close it).
fn serve(mut stream: TcpStream, status: &StatusSlot) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
        if head.len() > REQUEST_HEAD_BYTES_MAX {
            // Take what the client already sent (bounded), so that the
            // close after the answer is not a reset that loses it.
            let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
            let mut drained = 0usize;
            while drained < 16 * REQUEST_HEAD_BYTES_MAX {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => drained += n,
                }
            }
            let _ = respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"",
            );
            return;
        }
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let mut words = line
        .split(|&b| b == b' ' || b == b'\r')
        .filter(|w| !w.is_empty());
    let (method, path) = (words.next().unwrap_or(&[]), words.next().unwrap_or(&[]));
    let path = path.split(|&b| b == b'?').next().unwrap_or(&[]);
    match (method, path) {
        (b"GET" | b"HEAD", b"/metrics") => match status.get() {
            Some(snapshot) => {
                let body = verbatim_status::prometheus::render(&snapshot);
                let body = if method == b"HEAD" { "" } else { body.as_str() };
                let _ = respond(
                    &mut stream,
                    "200 OK",
                    verbatim_status::prometheus::CONTENT_TYPE,
                    body.as_bytes(),
                );
            }
            None => {
                let _ = respond(
                    &mut stream,
                    "503 Service Unavailable",
                    "text/plain",
                    b"no snapshot yet\n",
                );
            }
        },
        (b"GET" | b"HEAD", _) => {
            let _ = respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                b"try /metrics\n",
            );
        }
        _ => {
            let _ = respond(&mut stream, "405 Method Not Allowed", "text/plain", b"");
        }
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_status::Snapshot;

    fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn metrics_are_served_and_other_paths_are_not() {
        let slot = Arc::new(StatusSlot::default());
        let server = MetricsServer::start("127.0.0.1:0", slot.clone()).unwrap();
        let addr = server.local_addr();
        let r = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 503"), "{r}");
        slot.publish(Snapshot {
            id: 1,
            term: 4,
            role: "leader".into(),
            ..Snapshot::default()
        });
        let r = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
        assert!(
            r.contains("verbatim_term{member=\"1\",cluster=\"\"} 4"),
            "{r}"
        );
        let r = get(addr, b"GET / HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
        let r = get(addr, b"POST /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 405"), "{r}");
        // A head that never ends is cut off, and the server keeps serving.
        let r = get(addr, &vec![b'x'; REQUEST_HEAD_BYTES_MAX + 2048]);
        assert!(r.starts_with("HTTP/1.1 431"), "{r}");
        let r = get(addr, b"GET /metrics HTTP/1.0\n\n");
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
    }
}
