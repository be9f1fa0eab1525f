//! Where requests enter a replica: the RESP server over TCP, the queue its
//! threads hand requests to the poll loop through, and the Prometheus
//! endpoint (`/metrics`). Shared-memory
//! clients use the slots of `verbatim_client::slots`; both paths end in
//! the driver's submission.

pub mod metrics;
pub mod pubsub;
pub mod queue;
pub mod resp_server;

/// Binds a listener, waiting a little while the address is still held:
/// a replica restarted at once (as `verbatim up` heals) can find the
/// sockets of its killed predecessor not yet closed by the kernel's
/// teardown of that process.
pub fn bind_listener(addr: &str) -> std::io::Result<std::net::TcpListener> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match std::net::TcpListener::bind(addr) {
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}
