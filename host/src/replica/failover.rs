//! Failover timing, measured by the replica that becomes leader: from the
//! old leader's death (its pidfd) or its last heartbeat, to our suspicion
//! (detection), to our leadership (election), to the first commit of our
//! term (the no-op, DARE §3.3).

use std::collections::VecDeque;
use verbatim_status::{Failover, FailoverTimeline};

/// Failovers kept for the status endpoint.
pub const FAILOVERS_KEPT: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Suspicion {
    at_ns: u64,
    /// When the old leader was last known alive (death or last heartbeat).
    lost_at_ns: u64,
    by: &'static str,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    term: u64,
    old_leader: Option<u8>,
    detection_us: u64,
    election_us: u64,
    elected_at_ns: u64,
    commit_index_at_election: u64,
    at_unix_ms: u64,
    by: &'static str,
    /// `(lost, suspected)` times of the suspicion, `now_ns` units.
    lost_at_ns: u64,
    suspected_at_ns: u64,
    /// With views on: when our view was active (commits allowed).
    view_active_at_ns: Option<u64>,
    /// "election" or "view".
    decided_by: &'static str,
}

/// Turns role changes into [`Failover`] records.
#[derive(Debug, Default)]
pub struct FailoverTracker {
    me: u8,
    /// CLOCK_MONOTONIC (ns) at `now_ns` 0.
    clock_mono_ns: u64,
    leader: Option<u8>,
    suspicion: Option<Suspicion>,
    pending: Option<Pending>,
    records: VecDeque<Failover>,
}

impl FailoverTracker {
    /// A tracker for member `me`, whose `now_ns` 0 is `clock_mono_ns` on
    /// CLOCK_MONOTONIC.
    pub fn new(me: u8, clock_mono_ns: u64) -> FailoverTracker {
        FailoverTracker {
            me,
            clock_mono_ns,
            ..FailoverTracker::default()
        }
    }

    /// The leader we follow is gone: `lost_at_ns` is its death time (pidfd)
    /// or its last heartbeat; `by` says which.
    pub fn suspected(&mut self, now_ns: u64, lost_at_ns: u64, by: &'static str) {
        if self.suspicion.is_none() {
            self.suspicion = Some(Suspicion {
                at_ns: now_ns,
                lost_at_ns: lost_at_ns.min(now_ns),
                by,
            });
        }
    }

    /// The node's role or leader changed; `leading` says what made it
    /// leader ("election" or "view"), `None` when it does not lead.
    pub fn role_changed(
        &mut self,
        now_ns: u64,
        unix_ms: u64,
        leading: Option<&'static str>,
        term: u64,
        leader: Option<u8>,
        commit_index: u64,
    ) {
        if let Some(decided_by) = leading {
            let s = self.suspicion.take().unwrap_or(Suspicion {
                at_ns: now_ns,
                lost_at_ns: now_ns,
                by: "startup",
            });
            self.pending = Some(Pending {
                term,
                old_leader: self.leader.filter(|&l| l != self.me),
                detection_us: (s.at_ns - s.lost_at_ns) / 1000,
                election_us: now_ns.saturating_sub(s.at_ns) / 1000,
                elected_at_ns: now_ns,
                commit_index_at_election: commit_index,
                at_unix_ms: unix_ms,
                by: s.by,
                lost_at_ns: s.lost_at_ns,
                suspected_at_ns: s.at_ns,
                view_active_at_ns: None,
                decided_by,
            });
            self.leader = Some(self.me);
        } else if leader.is_some() {
            // Someone else leads: whatever we suspected is settled.
            self.suspicion = None;
            self.flush_pending(None);
            self.leader = leader;
        }
    }

    /// Called on every loop iteration while leading: the first commit of
    /// our term completes the record. `view_active` is whether our view
    /// lets us commit (`None` with views off).
    pub fn commit_advanced(&mut self, now_ns: u64, commit_index: u64, view_active: Option<bool>) {
        if let Some(p) = &mut self.pending {
            if view_active == Some(true) && p.view_active_at_ns.is_none() {
                p.view_active_at_ns = Some(now_ns);
            }
            if commit_index > p.commit_index_at_election {
                self.flush_pending(Some(now_ns));
            }
        }
    }

    /// Completes the pending record; `first_commit_ns` is when its term's
    /// first commit came (`now_ns` units), if it did.
    fn flush_pending(&mut self, first_commit_ns: Option<u64>) {
        if let Some(p) = self.pending.take() {
            let mono = |ns: u64| self.clock_mono_ns + ns;
            if self.records.len() == FAILOVERS_KEPT {
                self.records.pop_front();
            }
            self.records.push_back(Failover {
                term: p.term,
                old_leader: p.old_leader,
                new_leader: self.me,
                at_unix_ms: p.at_unix_ms,
                detection_us: p.detection_us,
                election_us: p.election_us,
                first_commit_us: first_commit_ns.map(|c| c.saturating_sub(p.elected_at_ns) / 1000),
                detected_by: p.by.to_string(),
                decided_by: p.decided_by.to_string(),
                view_wait_us: p
                    .view_active_at_ns
                    .map(|v| v.saturating_sub(p.elected_at_ns) / 1000),
                timeline: Some(FailoverTimeline {
                    lost_ns: mono(p.lost_at_ns),
                    suspected_ns: mono(p.suspected_at_ns),
                    elected_ns: mono(p.elected_at_ns),
                    first_commit_ns: first_commit_ns.map(mono),
                    view_active_ns: p.view_active_at_ns.map(mono),
                }),
            });
        }
    }

    /// Completed records, oldest first.
    pub fn records(&self) -> Vec<Failover> {
        self.records.iter().cloned().collect()
    }

    /// True while a leader is suspected and none elected yet.
    pub fn suspecting(&self) -> bool {
        self.suspicion.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failover_is_timed_from_death_to_first_commit() {
        let mut t = FailoverTracker::new(1, 1_000_000);
        t.role_changed(0, 0, None, 1, Some(0), 5);
        t.suspected(10_000, 4_000, "pidfd");
        t.suspected(11_000, 0, "heartbeat"); // the first suspicion counts
        t.role_changed(50_000, 7, Some("election"), 2, Some(1), 9);
        assert!(
            t.records().is_empty(),
            "not complete before the first commit"
        );
        t.commit_advanced(60_000, 9, None);
        t.commit_advanced(90_000, 10, None);
        let r = t.records();
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[0],
            Failover {
                term: 2,
                old_leader: Some(0),
                new_leader: 1,
                at_unix_ms: 7,
                detection_us: 6,
                election_us: 40,
                first_commit_us: Some(40),
                detected_by: "pidfd".into(),
                decided_by: "election".into(),
                view_wait_us: None,
                timeline: Some(FailoverTimeline {
                    lost_ns: 1_004_000,
                    suspected_ns: 1_010_000,
                    elected_ns: 1_050_000,
                    first_commit_ns: Some(1_090_000),
                    view_active_ns: None,
                }),
            }
        );
    }

    #[test]
    fn with_views_the_wait_for_the_view_is_timed() {
        let mut t = FailoverTracker::new(1, 0);
        t.role_changed(0, 0, None, 1, Some(0), 5);
        t.suspected(10_000, 4_000, "notice");
        t.role_changed(50_000, 7, Some("election"), 2, Some(1), 9);
        t.commit_advanced(60_000, 9, Some(false));
        t.commit_advanced(75_000, 9, Some(true));
        t.commit_advanced(80_000, 9, Some(true));
        t.commit_advanced(90_000, 10, Some(true));
        let r = t.records();
        assert_eq!(r[0].view_wait_us, Some(25));
        assert_eq!(r[0].first_commit_us, Some(40));
        assert_eq!(r[0].timeline.unwrap().view_active_ns, Some(75_000));
    }

    #[test]
    fn losing_leadership_before_committing_still_records() {
        let mut t = FailoverTracker::new(0, 0);
        t.role_changed(0, 0, Some("view"), 1, Some(0), 0);
        t.role_changed(5_000, 0, None, 2, Some(2), 0);
        let r = t.records();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].first_commit_us, None);
        assert_eq!(r[0].detected_by, "startup");
        assert_eq!(r[0].decided_by, "view");
    }
}
