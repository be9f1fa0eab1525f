//! Requests that reach the poll loop from threads (the RESP server) and
//! their answers. Shared-memory clients use slots instead
//! ([`crate::slots`]); both end up in the same submission path.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;
use verbatim_core::fabric::MemberId;

/// A request from a server thread.
pub struct ServiceRequest {
    /// Client id (for exactly-once writes).
    pub client_id: u64,
    /// Request id.
    pub request_id: u64,
    /// A write (through the log) or a read.
    pub write: bool,
    /// The encoded operation (`verbatim_core::kv` codec).
    pub payload: Vec<u8>,
    /// The submitter's tag, sent back with the answer (a connection has
    /// several requests in flight when its client pipelines).
    pub tag: u64,
    /// Where the answer goes, with the tag.
    pub reply: mpsc::Sender<(u64, ServiceReply)>,
    /// When it arrived (for latency).
    pub arrived: Instant,
}

/// A `PUBLISH` from a server thread: one multicast message (issue 15).
pub struct PublishRequest {
    /// The multicast payload ([`verbatim_client::pubsub::encode`]).
    pub payload: Vec<u8>,
    /// The subgroup whose channel it is published on (its place in the
    /// configuration); `None`: the top-level group.
    pub subgroup: Option<usize>,
    /// The submitter's tag, sent back with the answer.
    pub tag: u64,
    /// Where the answer goes: `Ok` with the number of this replica's
    /// subscribers it reached (8 bytes, little-endian) once this replica
    /// delivered it, in the group's order.
    pub reply: mpsc::Sender<(u64, ServiceReply)>,
    /// Answered with an error if not delivered by then (a full window
    /// that does not free, a wedged group).
    pub deadline: Instant,
}

/// An answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceReply {
    /// Done: for a write, a `KvReply` encoding; for a read, the state
    /// machine's read output (tag byte, then the value).
    Ok(Vec<u8>),
    /// Not the leader; the hint, if any.
    NotLeader(Option<MemberId>),
    /// Try again shortly (no leader yet, log full).
    Busy,
    /// The request cannot be served (malformed, superseded).
    Error(String),
}

/// The sending side given to server threads: a channel plus a counter the
/// poll loop checks before it goes to sleep, and its doorbell.
#[derive(Clone)]
pub struct ServiceHandle {
    tx: mpsc::Sender<ServiceRequest>,
    queued: Arc<AtomicUsize>,
    publish_tx: mpsc::Sender<PublishRequest>,
    subscribers: Arc<super::pubsub::Subscribers>,
    wake: Arc<crate::fabric::shm::Segment>,
}

impl ServiceHandle {
    /// A channel into the poll loop that rings `wake`.
    pub fn new(wake: Arc<crate::fabric::shm::Segment>) -> (ServiceHandle, ServiceQueue) {
        let (tx, rx) = mpsc::channel();
        let (publish_tx, publish_rx) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let subscribers = Arc::new(super::pubsub::Subscribers::default());
        (
            ServiceHandle {
                tx,
                queued: queued.clone(),
                publish_tx,
                subscribers: subscribers.clone(),
                wake,
            },
            ServiceQueue {
                rx,
                queued,
                publish_rx,
                subscribers,
            },
        )
    }

    /// This replica's subscribers (connections in subscribe mode).
    pub fn subscribers(&self) -> &Arc<super::pubsub::Subscribers> {
        &self.subscribers
    }

    /// Hands a publication to the poll loop and wakes it (counted with
    /// the requests: the loop does not park on it).
    pub fn publish(&self, r: PublishRequest) -> bool {
        self.queued.fetch_add(1, Ordering::AcqRel);
        if self.publish_tx.send(r).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        self.wake.ring();
        true
    }

    /// Hands a request to the poll loop and wakes it.
    pub fn submit(&self, r: ServiceRequest) -> bool {
        self.queued.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(r).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        self.wake.ring();
        true
    }
}

/// The poll loop's receiving side.
pub struct ServiceQueue {
    rx: mpsc::Receiver<ServiceRequest>,
    queued: Arc<AtomicUsize>,
    publish_rx: mpsc::Receiver<PublishRequest>,
    subscribers: Arc<super::pubsub::Subscribers>,
}

impl ServiceQueue {
    /// The next request, if any (never blocks).
    pub fn try_next(&self) -> Option<ServiceRequest> {
        // The counter is raised before the send: a plain load is cheaper
        // than the channel's try_recv on the busy loop's empty path.
        if self.is_empty() {
            return None;
        }
        let r = self.rx.try_recv().ok()?;
        self.queued.fetch_sub(1, Ordering::AcqRel);
        Some(r)
    }

    /// This replica's subscribers.
    pub fn subscribers(&self) -> &Arc<super::pubsub::Subscribers> {
        &self.subscribers
    }

    /// The next publication, if any (never blocks; one load when nothing
    /// at all is queued, as for requests).
    pub fn try_next_publish(&self) -> Option<PublishRequest> {
        if self.is_empty() {
            return None;
        }
        let r = self.publish_rx.try_recv().ok()?;
        self.queued.fetch_sub(1, Ordering::AcqRel);
        Some(r)
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queued.load(Ordering::Acquire) == 0
    }
}
