//! Backup-memory mode in the loop (MacR, issue 16): the key-value store
//! lives in registered memory and the backup engine serves every client
//! request; the log engine runs as in primary-backup mode for the views
//! alone (who is primary, who counts, the lease, take-overs), and its log
//! carries no operations.
//!
//! Between the engines the driver passes:
//! * to the backup engine, every newer decided view
//!   ([`BackupEngine::follow_view`]), the member the log engine grants
//!   its log to, which is granted the store too
//!   ([`BackupEngine::follow_grant`]), and whether this member may
//!   serve: the log engine leads in the view's term and the lease on
//!   that view is active ([`BackupEngine::set_serving`]), and the
//!   members the log engine counts in its commits (the view's and
//!   those of a view asked for: [`BackupEngine::set_counted_members`]);
//! * to the log engine, the members whose copy of the store is complete
//!   ([`Node::set_copies_synced`](verbatim_core::Node::set_copies_synced)):
//!   only those may come back into a view; and those of the view whose
//!   copy must be redone, which a copy may overwrite only once no view
//!   counts them ([`Node::set_copies_to_drop`](verbatim_core::Node::set_copies_to_drop)).
//!
//! Requests wait in arrival order: a write starts once the previous one
//! is replicated (one write in flight: a WRITE's source must not change
//! until it completed), a read is answered when no write is in flight (it
//! must not see what a successor may lack). A member that is not the
//! primary answers "not the leader" with the view's primary as the hint.
//!
//! Exactly-once: the store keeps each client's last write and its reply
//! (a session record, replicated with the write, [`verbatim_core::backup`]):
//! a retry is answered from it, at this primary or the next.

use super::{Answer, Driver, Host, Incoming, Refusal, HELD_REQUESTS_MAX};
use verbatim_core::backup::engine::{
    BackupConfig, BackupEngine, BackupLayout, BackupRole, StartError, Started, StoreCopy,
};
use verbatim_core::engine::{Engine, EngineTag};
use verbatim_core::fabric::Fabric;
use verbatim_core::kv::{KvDecodeError, KvLimits, KvOp};
use verbatim_core::node::Role;
use verbatim_core::sm::RequestError;
use verbatim_core::{Config, Memory, StateMachine};

/// The backup engine of `config`'s member over `memory`.
pub fn engine_for<M: Memory + Clone>(
    config: &Config,
    layout: BackupLayout,
    memory: M,
) -> BackupEngine<M> {
    BackupEngine::new(BackupConfig::from_config(config), layout, memory)
}

impl<M: Memory + Clone, S: StateMachine, R> Driver<M, S, R> {
    fn limits(&self) -> KvLimits {
        let c = self.engines.log.config();
        KvLimits {
            key_bytes_max: c.backup_key_bytes_max,
            value_bytes_max: c.backup_value_bytes_max,
        }
    }

    /// Validates a request and queues it for the backup engine.
    pub(super) fn submit_backup<H: Host<M, S, Route = R>>(&mut self, r: Incoming<R>, host: &mut H) {
        let why = match self
            .engines
            .log
            .state_machine()
            .check_request(&r.payload, r.write)
        {
            Err(RequestError::Malformed) => Some(Refusal::Malformed),
            Err(RequestError::WrongKind) => Some(Refusal::WrongKind),
            Ok(()) => match KvOp::decode(&r.payload, &self.limits()) {
                Ok(_) => None,
                // The service's limits may be wider than the store's.
                Err(KvDecodeError::KeyTooLong | KvDecodeError::ValueTooLong) => {
                    Some(Refusal::TooLarge)
                }
                // Another service's operation (a stream, a hash).
                Err(_) => Some(Refusal::NotInThisMode),
            },
        };
        if let Some(why) = why {
            self.counters.requests_refused += 1;
            host.answer(r.route, Answer::Refused(why));
            host.recycle(r.payload);
            return;
        }
        if self.backup_queue.len() >= HELD_REQUESTS_MAX {
            host.answer(r.route, Answer::Busy);
            host.recycle(r.payload);
            return;
        }
        self.backup_queue.push_back(r);
    }

    /// When the backup engine needs a step.
    pub(super) fn backup_deadline(&self) -> u64 {
        let Some(b) = &self.engines.backup else {
            return u64::MAX;
        };
        let startable =
            self.backup_queue
                .front()
                .is_some_and(|r| if r.write { b.ready() } else { b.readable() });
        if startable {
            0
        } else {
            b.next_deadline()
        }
    }

    /// Runs the backup engine: views and the lease in, copies and
    /// replays, requests served in order, WRITEs out, replies to their
    /// clients. Returns whether it did client work.
    pub(super) fn step_backup<F: Fabric, H: Host<M, S, Route = R>>(
        &mut self,
        now_ns: u64,
        fabric: &mut F,
        host: &mut H,
    ) -> bool {
        let log = &mut self.engines.log;
        let (me, term, role) = (log.id(), log.term(), log.role());
        let b = self.engines.backup.as_mut().expect("called in backup mode");
        if let Some(views) = &self.engines.views {
            if let Some((epoch, v)) = views.latest() {
                b.follow_view(now_ns, epoch, v.leader, v.log_term, u64::from(v.members));
            }
            let serving = role == Role::Leader
                && views
                    .leased(now_ns)
                    .is_some_and(|(_, v, _)| v.leader == me && v.log_term == term);
            b.set_serving(now_ns, serving);
        }
        b.follow_grant(now_ns, log.log_granted_to());
        b.set_counted_members(now_ns, u64::from(log.pb_commit_members().0));
        // A process that took a restarted member's place holds an empty
        // store until a copy filled it.
        let torn = match b.store_copy() {
            StoreCopy::Whole => false,
            StoreCopy::UnderWay => true,
            StoreCopy::Never => log.known_new_process() == Some(false),
        };
        log.set_store_torn(torn);
        log.set_copies_synced(b.report_synced_members());
        b.handle_timeout(now_ns);
        b.step(now_ns, &mut self.backup_scratch);
        // After the step: a copy it began keeps a whole member in the view.
        log.set_copies_to_drop(b.members_to_drop());
        // Replies go out once the lease was looked at in this step (not
        // before: see `BackupEngine::poll_reply`), and before the next
        // write changes the store.
        let mut work = self.answer_backup_replies(host);
        work |= self.serve_backup_queue(now_ns, host);
        let b = self.engines.backup.as_mut().expect("called in backup mode");
        work |= super::execute(
            now_ns,
            b,
            EngineTag::BACKUP,
            fabric,
            host,
            &mut self.counters,
        );
        work | self.answer_backup_replies(host)
    }

    fn answer_backup_replies<H: Host<M, S, Route = R>>(&mut self, host: &mut H) -> bool {
        let b = self.engines.backup.as_mut().expect("called in backup mode");
        let mut any = false;
        while let Some((client_id, request_id, reply)) = b.poll_reply() {
            any = true;
            if let Some(route) = self.pending_writes.remove(&(client_id, request_id)) {
                host.answer(route, Answer::Ok(&reply.to_bytes()));
            }
        }
        any
    }

    /// Serves queued requests in order while the engine can take them.
    fn serve_backup_queue<H: Host<M, S, Route = R>>(&mut self, now_ns: u64, host: &mut H) -> bool {
        let limits = self.limits();
        let mut any = false;
        while let Some(r) = self.backup_queue.front() {
            // The log engine follows the primary of the newest term it
            // knows, from heartbeats too: a better hint than a view this
            // member has not caught up with (a member that learns views
            // slowly would send clients to a primary long gone).
            let log = &self.engines.log;
            let log_leader = log.leader().filter(|&l| l != log.id());
            let b = self.engines.backup.as_mut().expect("called in backup mode");
            if b.role() == BackupRole::Backup {
                // Not the primary (a member named primary serves once its
                // lease is active and it took over: its requests wait).
                let hint = log_leader.or_else(|| b.primary_hint());
                if hint.is_none() && b.status().view.is_some() {
                    break;
                }
                let r = self.backup_queue.pop_front().expect("front checked");
                host.answer(r.route, Answer::NotLeader(hint));
                host.recycle(r.payload);
                any = true;
                continue;
            }
            let Ok(op) = KvOp::decode(&r.payload, &limits) else {
                // Checked when queued.
                let r = self.backup_queue.pop_front().expect("front checked");
                host.answer(r.route, Answer::Refused(Refusal::Malformed));
                host.recycle(r.payload);
                continue;
            };
            if r.write {
                if !b.ready() {
                    break;
                }
                match b.start_write(
                    now_ns,
                    r.client_id,
                    r.request_id,
                    &op,
                    &mut self.backup_scratch,
                ) {
                    Ok(Started::Applied) => {}
                    Ok(Started::Duplicate(reply)) => {
                        // A retry of a write applied already: its reply.
                        let r = self.backup_queue.pop_front().expect("front checked");
                        host.answer(r.route, Answer::Ok(&reply.to_bytes()));
                        host.recycle(r.payload);
                        any = true;
                        continue;
                    }
                    Ok(Started::Stale) => {
                        let r = self.backup_queue.pop_front().expect("front checked");
                        host.answer(r.route, Answer::Refused(Refusal::Superseded));
                        host.recycle(r.payload);
                        any = true;
                        continue;
                    }
                    Err(StartError::Busy) => break,
                    Err(StartError::NotPrimary(hint)) => {
                        let r = self.backup_queue.pop_front().expect("front checked");
                        host.answer(r.route, Answer::NotLeader(hint));
                        host.recycle(r.payload);
                        continue;
                    }
                }
                let r = self.backup_queue.pop_front().expect("front checked");
                self.pending_writes
                    .insert((r.client_id, r.request_id), r.route);
                host.recycle(r.payload);
                any = true;
                // One write at a time: the next waits for its reply.
                break;
            }
            if !b.readable() {
                break;
            }
            let KvOp::Get { key } = op else {
                break;
            };
            // GET's encoding: a tag byte (0 nil, 1 value), the value.
            let answer = match b.read(key, &mut self.read_buf[1..]) {
                Ok(None) => {
                    self.read_buf[0] = 0;
                    Ok(1)
                }
                Ok(Some(n)) => {
                    self.read_buf[0] = 1;
                    Ok(n + 1)
                }
                Err(_) => Err(Refusal::ResultTooLarge),
            };
            let r = self.backup_queue.pop_front().expect("front checked");
            match answer {
                Ok(n) => host.answer(r.route, Answer::Ok(&self.read_buf[..n])),
                Err(why) => host.answer(r.route, Answer::Refused(why)),
            }
            host.recycle(r.payload);
            any = true;
        }
        any
    }
}
