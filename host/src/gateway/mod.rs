//! Where client requests enter a replica: the RESP server over TCP and the
//! queue its threads hand requests to the poll loop through. Shared-memory
//! clients use the slots of `verbatim_client::slots`; both paths end in
//! the driver's submission.

pub mod queue;
pub mod resp_server;
