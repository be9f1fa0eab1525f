//! Where requests enter a replica: the RESP server over TCP, the queue its
//! threads hand requests to the poll loop through, and the Prometheus
//! endpoint (`/metrics`). Shared-memory
//! clients use the slots of `verbatim_client::slots`; both paths end in
//! the driver's submission.

pub mod metrics;
pub mod queue;
pub mod resp_server;
