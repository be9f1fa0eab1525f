//! A pipelined shared-memory client: up to `depth` operations in flight
//! from one thread, so that the leader finds several requests per poll and
//! replicates them as one batch (one WRITE of the entries and one of the
//! tail per follower, DARE §3.3.1) instead of one round per operation.
//!
//! Each of the `depth` lanes is a sequential client of its own (its own
//! client id, slot and request ids), so the replicas' session table keeps
//! exactly-once semantics unchanged: a lane has at most one operation in
//! flight and retries it with the same request id after a redirect, a
//! timeout or a failover. Operations on different lanes are concurrent:
//! their order is the order the leader appends them, as for separate
//! clients. Completions come back in any order, tagged with the ticket
//! `submit` returned.

use crate::client::{decode_outcome, exited, random_id, ClientError, ClientOptions, Outcome};
use crate::manifest::Manifest;
use crate::process::ProcessWatch;
use crate::slots::SlotSegment;
use crate::slots::{SlotClient, SlotKind, SlotStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};
use verbatim_core::kv::{KvLimits, KvOp};

/// Identifies a submitted operation in its completion.
pub type Ticket = u64;

/// Counters of a pipeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PipelineStats {
    /// Operations completed (successfully or with an error).
    pub operations: u64,
    /// Attempts that timed out or hit a replica that exited.
    pub retries: u64,
    /// Redirects followed.
    pub redirects: u64,
}

struct InFlight {
    ticket: Ticket,
    read: bool,
    request_id: u64,
    /// Bytes of the encoded operation at the start of the lane's buffer.
    payload_len: usize,
    /// Member and slot sequence of the current attempt; `None` while
    /// waiting to be (re)sent.
    sent: Option<(usize, u64, Instant)>,
    /// Do not resend before this (backoff while there is no leader).
    resend_at: Instant,
    busy_count: u32,
    deadline: Instant,
}

struct Lane {
    client_id: u64,
    /// Encoding buffer, sized once: zeroing the largest encoding on every
    /// submit would cost more than a small operation's round trip.
    payload: Vec<u8>,
    next_request: u64,
    slot: Option<(usize, SlotClient)>,
    op: Option<InFlight>,
}

/// Up to `depth` operations in flight over shared-memory slots.
pub struct Pipeline {
    manifest: Manifest,
    limits: KvLimits,
    opts: ClientOptions,
    /// The member believed to lead, shared by every lane.
    target: usize,
    segments: Vec<Option<(Arc<SlotSegment>, Option<ProcessWatch>)>>,
    lanes: Vec<Lane>,
    next_ticket: Ticket,
    in_flight: usize,
    stats: PipelineStats,
    buf: Vec<u8>,
}

/// Largest pipeline: every lane holds one of the leader's client slots.
pub const PIPELINE_DEPTH_MAX: usize = 64;

impl Pipeline {
    /// A pipeline of `depth` lanes (1 to [`PIPELINE_DEPTH_MAX`], and at
    /// most the cluster's `client_slot_count`). Only the shared-memory
    /// transport pipelines; `opts.transport` and `opts.client_id` are
    /// ignored (each lane draws its own id).
    pub fn new(
        manifest: &Manifest,
        opts: ClientOptions,
        depth: usize,
    ) -> Result<Pipeline, ClientError> {
        let slots = manifest.cluster.client_slot_count as usize;
        if depth == 0 || depth > PIPELINE_DEPTH_MAX.min(slots) {
            return Err(ClientError::Rejected(format!(
                "pipeline depth {depth}: use 1 to {} (each lane takes one of the \
                 leader's client slots; [cluster] client_slot_count = {slots})",
                PIPELINE_DEPTH_MAX.min(slots)
            )));
        }
        let n = manifest.members.len();
        Ok(Pipeline {
            limits: manifest.kv_limits(),
            manifest: manifest.clone(),
            opts,
            target: 0,
            segments: (0..n).map(|_| None).collect(),
            lanes: (0..depth)
                .map(|_| Lane {
                    client_id: random_id(),
                    payload: vec![0u8; manifest.kv_limits().encoded_bytes_max() as usize],
                    next_request: 1,
                    slot: None,
                    op: None,
                })
                .collect(),
            next_ticket: 1,
            in_flight: 0,
            stats: PipelineStats::default(),
            buf: Vec::new(),
        })
    }

    /// Number of lanes.
    pub fn depth(&self) -> usize {
        self.lanes.len()
    }

    /// Operations submitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Counters.
    pub fn stats(&self) -> PipelineStats {
        self.stats
    }

    /// The member believed to lead.
    pub fn leader(&self) -> u8 {
        self.target as u8
    }

    /// Sends `op` on a free lane and returns its ticket, or `Ok(None)` when
    /// every lane is busy (poll for completions first).
    pub fn submit(&mut self, op: &KvOp<'_>) -> Result<Option<Ticket>, ClientError> {
        let Some(lane) = self.lanes.iter().position(|l| l.op.is_none()) else {
            return Ok(None);
        };
        let too_large = || ClientError::TooLarge {
            key: self.limits.key_bytes_max,
            value: self.limits.value_bytes_max,
        };
        let l = &mut self.lanes[lane];
        let n = op.encode(&mut l.payload).map_err(|_| too_large())?;
        if KvOp::decode(&l.payload[..n], &self.limits).is_err() {
            return Err(too_large());
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let now = Instant::now();
        let request_id = l.next_request;
        l.next_request += 1;
        l.op = Some(InFlight {
            ticket,
            read: op.is_read(),
            request_id,
            payload_len: n,
            sent: None,
            resend_at: now,
            busy_count: 0,
            deadline: now + self.opts.total_timeout,
        });
        self.in_flight += 1;
        self.send(lane, now);
        Ok(Some(ticket))
    }

    /// Looks at every lane once: appends the operations that completed to
    /// `done`, resends those redirected, timed out or due for a retry.
    /// Never blocks. Returns how many completed.
    pub fn poll(&mut self, done: &mut Vec<(Ticket, Result<Outcome, ClientError>)>) -> usize {
        let before = done.len();
        if self.in_flight == 0 {
            return 0;
        }
        let now = Instant::now();
        for lane in 0..self.lanes.len() {
            let Some(op) = &self.lanes[lane].op else {
                continue;
            };
            let Some((member, seq, sent_at)) = op.sent else {
                if now >= op.deadline {
                    self.finish(
                        lane,
                        Err(ClientError::Unavailable(self.opts.total_timeout)),
                        done,
                    );
                } else if now >= op.resend_at {
                    self.send(lane, now);
                }
                continue;
            };
            let Some((_, slot)) = &self.lanes[lane].slot else {
                // Its slot went with a replica that exited: send again.
                self.retry_now(lane, now);
                continue;
            };
            match slot.poll(seq, &mut self.buf) {
                Some(SlotStatus::Ok) => {
                    let read = op.read;
                    let outcome = decode_outcome(read, &self.buf);
                    self.finish(lane, outcome, done);
                }
                Some(SlotStatus::Error) => {
                    let text = String::from_utf8_lossy(&self.buf).into_owned();
                    self.finish(lane, Err(ClientError::Rejected(text)), done);
                }
                Some(SlotStatus::NotLeader(Some(l)))
                    if l.index() < self.segments.len() && l.index() != member =>
                {
                    self.stats.redirects += 1;
                    self.target = l.index();
                    self.retry_now(lane, now);
                }
                Some(SlotStatus::NotLeader(_) | SlotStatus::Busy) => {
                    self.backoff(lane, member, now);
                }
                None => {
                    // The death notice is one load; the pidfd poll is a
                    // syscall: only once the reply is overdue enough.
                    let waited = now.duration_since(sent_at);
                    if waited > self.opts.attempt_timeout
                        || exited(&self.segments[member], waited > Duration::from_micros(100))
                    {
                        self.stats.retries += 1;
                        self.fail_member(member);
                        self.retry_now(lane, now);
                    }
                }
            }
        }
        done.len() - before
    }

    /// Polls until every submitted operation completed, appending them to
    /// `done`, spinning or yielding as `opts.wait` says.
    pub fn drain(&mut self, done: &mut Vec<(Ticket, Result<Outcome, ClientError>)>) {
        let mut idle = 0u32;
        while self.in_flight > 0 {
            if self.poll(done) > 0 {
                idle = 0;
                continue;
            }
            idle += 1;
            match self.opts.wait {
                crate::client::Wait::Yield if idle > 64 => std::thread::yield_now(),
                _ => std::hint::spin_loop(),
            }
        }
    }

    fn finish(
        &mut self,
        lane: usize,
        outcome: Result<Outcome, ClientError>,
        done: &mut Vec<(Ticket, Result<Outcome, ClientError>)>,
    ) {
        let op = self.lanes[lane]
            .op
            .take()
            .expect("finishing a lane with an operation");
        self.in_flight -= 1;
        self.stats.operations += 1;
        done.push((op.ticket, outcome));
    }

    fn retry_now(&mut self, lane: usize, now: Instant) {
        if let Some(op) = &mut self.lanes[lane].op {
            op.sent = None;
            op.resend_at = now;
        }
        self.send(lane, now);
    }

    /// No leader known where we asked: give the election a moment, a
    /// little longer each time (20 µs up to 1.3 ms), and try the next
    /// member meanwhile.
    fn backoff(&mut self, lane: usize, member: usize, now: Instant) {
        if member == self.target {
            self.target = (self.target + 1) % self.segments.len();
        }
        if let Some(op) = &mut self.lanes[lane].op {
            op.sent = None;
            // 20 µs up to 160 µs, as `Client` does.
            op.resend_at = now + Duration::from_micros(20 << op.busy_count.min(3));
            op.busy_count += 1;
        }
    }

    /// `member` failed an attempt: if every lane still believes in it,
    /// move on to the next member (lanes that were already redirected
    /// keep their newer target).
    fn fail_member(&mut self, member: usize) {
        if self.target == member {
            self.target = (member + 1) % self.segments.len();
        }
        if exited(&self.segments[member], true) {
            self.segments[member] = None;
            for l in &mut self.lanes {
                if l.slot.as_ref().is_some_and(|(m, _)| *m == member) {
                    l.slot = None;
                }
            }
        }
    }

    /// (Re)sends the lane's operation to the believed leader.
    fn send(&mut self, lane: usize, now: Instant) {
        let m = self.target;
        let needs_slot = self.lanes[lane]
            .slot
            .as_ref()
            .is_none_or(|(at, _)| *at != m);
        if needs_slot {
            self.lanes[lane].slot = None;
            let claimed = self.segment(m).and_then(SlotClient::claim);
            match claimed {
                Some(s) => self.lanes[lane].slot = Some((m, s)),
                None => {
                    // The member is gone, or all its slots are taken.
                    self.backoff(lane, m, now);
                    return;
                }
            }
        }
        let l = &mut self.lanes[lane];
        let (Some((_, slot)), Some(op)) = (&mut l.slot, &mut l.op) else {
            return;
        };
        let kind = if op.read {
            SlotKind::Read
        } else {
            SlotKind::Write
        };
        let seq = slot.send(
            l.client_id,
            op.request_id,
            kind,
            &l.payload[..op.payload_len],
        );
        op.sent = Some((m, seq, now));
    }

    /// The replica's segment, if its process is alive.
    fn segment(&mut self, m: usize) -> Option<Arc<SlotSegment>> {
        if self.segments[m].is_none() {
            let seg = SlotSegment::open(&self.manifest.slots_path(m as u8)).ok()?;
            let watch =
                ProcessWatch::replica(&self.manifest.segment_path(m as u8), seg.owner().pid);
            watch.as_ref()?;
            self.segments[m] = Some((Arc::new(seg), watch));
        }
        if exited(&self.segments[m], true) {
            self.segments[m] = None;
            return None;
        }
        self.segments[m].as_ref().map(|(s, _)| s.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_depth_must_fit_the_leaders_slots() {
        let mut m = Manifest::local("pipe-depth", 3, 0);
        m.cluster.client_slot_count = 8;
        let opts = ClientOptions::default;
        let err = |d| match Pipeline::new(&m, opts(), d) {
            Err(ClientError::Rejected(msg)) => msg,
            Err(e) => panic!("depth {d}: unexpected error {e}"),
            Ok(_) => panic!("depth {d} accepted"),
        };
        assert!(err(0).contains("use 1 to 8"), "{}", err(0));
        assert!(err(9).contains("client_slot_count = 8"), "{}", err(9));
        let p = Pipeline::new(&m, opts(), 8).expect("depth 8 fits 8 slots");
        assert_eq!((p.depth(), p.in_flight()), (8, 0));
        // Every lane is a client of its own.
        let mut ids: Vec<u64> = p.lanes.iter().map(|l| l.client_id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 8);
    }

    #[test]
    fn an_operation_too_large_is_refused_before_it_takes_a_lane() {
        let m = Manifest::local("pipe-large", 3, 0);
        let mut p = Pipeline::new(&m, ClientOptions::default(), 2).unwrap();
        let value = vec![b'v'; m.cluster.value_bytes_max as usize + 1];
        let r = p.submit(&KvOp::Set {
            key: b"k",
            value: &value,
        });
        assert!(matches!(r, Err(ClientError::TooLarge { .. })), "{r:?}");
        assert_eq!(p.in_flight(), 0);
    }
}
