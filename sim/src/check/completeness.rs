//! Leader completeness: a new leader holds every committed entry it has
//! not applied yet (DARE §4.1; entries it applied are checked by state
//! machine safety, which accounts for pruning).

use super::committed::CommittedLog;
use super::{EntryId, Violation};
use verbatim_core::membership::Configuration;
use verbatim_core::sst::MemberMask;
use verbatim_core::MemberId;

/// Checks a member that just became leader: `log` is its log from its
/// apply pointer (`apply_index`) to its tail.
pub fn check_leader_completeness(
    time_ns: u64,
    node: usize,
    term: u64,
    apply_index: u64,
    log: &[EntryId],
    committed: &CommittedLog,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for c in committed.from(apply_index) {
        let held = log
            .first()
            .and_then(|first| c.index.checked_sub(first.index))
            .and_then(|k| log.get(k as usize));
        if held != Some(c) {
            out.push(Violation {
                invariant: "leader completeness",
                time_ns,
                detail: format!(
                    "node {node}, leader of term {term}, lacks committed {c:?} (holds {held:?})"
                ),
            });
            break; // one report per election is enough
        }
    }
    out
}

/// A member's log as an election compares it (DARE §3.2.3): what it
/// applied and what it holds beyond.
#[derive(Clone, Debug)]
pub struct MemberLog {
    /// The member.
    pub node: usize,
    /// First index it has not applied.
    pub apply_index: u64,
    /// Term of its last applied entry (0: none).
    pub applied_term: u64,
    /// Its valid entries from `apply_index` to its tail.
    pub log: Vec<EntryId>,
    /// It can vote and stand, now or after a pause: not crashed, not a
    /// zombie, not waiting to catch up after a restart.
    pub voter: bool,
    /// The configuration it would count votes in as a candidate: the
    /// latest in its log, committed or not (DARE §3.4).
    pub configuration: Configuration,
}

impl MemberLog {
    /// The first committed entry (from its apply pointer on) that its log
    /// does not hold, with what it holds at that index.
    pub fn first_missing<'a>(
        &'a self,
        committed: &'a CommittedLog,
    ) -> Option<(&'a EntryId, Option<&'a EntryId>)> {
        committed.from(self.apply_index).find_map(|c| {
            let held = self
                .log
                .first()
                .and_then(|first| c.index.checked_sub(first.index))
                .and_then(|k| self.log.get(k as usize));
            (held != Some(c)).then_some((c, held))
        })
    }

    /// (term, index) of its last entry: what a voter compares.
    pub fn last(&self) -> (u64, u64) {
        match self.log.last() {
            Some(e) => (e.term, e.index),
            None => (self.applied_term, self.apply_index - 1),
        }
    }
}

/// Electable completeness: a member that a majority would vote for (its
/// last entry at least as recent as theirs, DARE §3.2.3) holds every
/// committed entry. This is what leader completeness rests on (DARE §4.1:
/// a committed entry is on a majority, and a leader's log holds the most
/// recent entry of a majority), checked on the state instead of at the
/// next election: an entry committed too early (counted before the
/// leader's own no-op, Raft's Figure 8) is caught as soon as a member
/// without it could win, whether or not the schedule then elects it.
pub fn check_electable_completeness(
    time_ns: u64,
    members: &[MemberLog],
    committed: &CommittedLog,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for x in members.iter().filter(|m| m.voter) {
        // It stands only as a voter of its configuration, and wins with a
        // majority of every group of it.
        if !x.configuration.voters().contains(MemberId(x.node as u8)) {
            continue;
        }
        let mask = members
            .iter()
            .filter(|y| y.voter && y.last() <= x.last())
            .fold(MemberMask::NONE, |m, y| m.with(MemberId(y.node as u8)));
        if !x.configuration.is_quorum(mask) {
            continue;
        }
        let votes = mask.count();
        if let Some((c, held)) = x.first_missing(committed) {
            out.push(Violation {
                invariant: "electable completeness",
                time_ns,
                detail: format!(
                    "node {} lacks committed {c:?} (holds {held:?}) and {votes} members would vote for it (last entry {:?})",
                    x.node,
                    x.last()
                ),
            });
        }
    }
    out
}

/// View completeness (primary-backup mode, issue 14): every member of the
/// newest decided view that may take over (`voter`: running or paused,
/// its memory trusted) holds every committed entry. A member of the view
/// takes over without comparing logs, so this is what leader completeness
/// rests on there: an entry committed before every member of the view held
/// it (a majority, say) is caught as soon as a member without it could
/// take over.
pub fn check_view_completeness(
    time_ns: u64,
    members: &[MemberLog],
    view_members: MemberMask,
    committed: &CommittedLog,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for x in members.iter().filter(|m| m.voter) {
        if !view_members.contains(MemberId(x.node as u8)) {
            continue;
        }
        if let Some((c, held)) = x.first_missing(committed) {
            out.push(Violation {
                invariant: "view completeness",
                time_ns,
                detail: format!(
                    "node {} lacks committed {c:?} (holds {held:?}) and may take over as a member of the newest view ({:#b})",
                    x.node, view_members.0
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u64, term: u64, digest: u64) -> EntryId {
        EntryId {
            index,
            term,
            digest,
        }
    }

    #[test]
    fn a_leader_missing_a_committed_entry_is_caught() {
        let mut c = CommittedLog::default();
        for x in [e(1, 1, 1), e(2, 1, 2), e(3, 2, 3)] {
            c.observe_committed(0, 0, x);
        }
        // Applied up to 2, holds 2..: fine.
        assert!(
            check_leader_completeness(0, 1, 3, 2, &[e(2, 1, 2), e(3, 2, 3), e(4, 3, 9)], &c)
                .is_empty()
        );
        // Applied everything: nothing to hold.
        assert!(check_leader_completeness(0, 1, 3, 4, &[], &c).is_empty());
        // Lacks index 3.
        assert_eq!(
            check_leader_completeness(0, 1, 3, 2, &[e(2, 1, 2)], &c).len(),
            1
        );
        // Holds a different entry at 3.
        assert_eq!(
            check_leader_completeness(0, 1, 3, 3, &[e(3, 3, 7)], &c).len(),
            1
        );
    }

    fn member(node: usize, log: Vec<EntryId>, voter: bool) -> MemberLog {
        MemberLog {
            node,
            apply_index: 1,
            applied_term: 0,
            log,
            voter,
            configuration: Configuration::initial(5),
        }
    }

    /// Primary-backup: a member of the newest view that lacks a committed
    /// entry (committed on a majority only) is caught; outside the view,
    /// or unable to take over (its memory lost), it is not.
    #[test]
    fn a_view_member_without_a_committed_entry_is_caught() {
        let mut c = CommittedLog::default();
        for x in [e(1, 1, 1), e(2, 1, 2)] {
            c.observe_committed(0, 0, x);
        }
        let full = vec![e(1, 1, 1), e(2, 1, 2)];
        let logs = vec![
            member(0, full.clone(), true),
            member(1, full, true),
            member(2, vec![e(1, 1, 1)], true),
        ];
        let all = MemberMask::first(3);
        let v = check_view_completeness(0, &logs, all, &c);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].detail.contains("node 2"));
        let without_2 = all.without(MemberId(2));
        assert!(check_view_completeness(0, &logs, without_2, &c).is_empty());
        let mut l = logs.clone();
        l[2].voter = false;
        assert!(check_view_completeness(0, &l, all, &c).is_empty());
        // A different entry at an index is not the committed one.
        let mut l = logs;
        l[2].log = vec![e(1, 1, 1), e(2, 2, 7)];
        assert_eq!(check_view_completeness(0, &l, all, &c).len(), 1);
    }

    /// Raft's Figure 8 (d): index 2 of term 2 was counted committed on
    /// three of five members before the leader's term-4 entry reached a
    /// majority; member 4, with index 2 of term 3, would win the votes of
    /// the members that lack term 4 and itself.
    #[test]
    fn a_member_that_could_win_without_a_committed_entry_is_caught() {
        let mut c = CommittedLog::default();
        for x in [e(1, 1, 1), e(2, 2, 2)] {
            c.observe_committed(0, 0, x);
        }
        let logs = |noop_on_majority: bool| {
            let mut s = vec![e(1, 1, 1), e(2, 2, 2)];
            if noop_on_majority {
                s.push(e(3, 4, 4));
            }
            vec![
                member(0, vec![e(1, 1, 1), e(2, 2, 2), e(3, 4, 4)], true),
                member(1, vec![e(1, 1, 1), e(2, 2, 2), e(3, 4, 4)], true),
                member(2, s, true),
                member(3, vec![e(1, 1, 1)], true),
                member(4, vec![e(1, 1, 1), e(2, 3, 9)], true),
            ]
        };
        let v = check_electable_completeness(0, &logs(false), &c);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].detail.contains("node 4"));
        // With the term-4 entry on a majority, member 4 cannot win.
        assert!(check_electable_completeness(0, &logs(true), &c).is_empty());
        // Members that cannot vote (crashed, catching up) do not count.
        let mut l = logs(false);
        l[2].voter = false;
        l[3].voter = false;
        assert!(check_electable_completeness(0, &l, &c).is_empty());
        // A member goes by the configuration in its own log: in a group
        // shrinking from five to three, member 4 (outside the new three)
        // does not stand; in one shrinking to two, the votes of 2, 3, 4
        // are a majority of five but not of the new two.
        let shrinking = |new_size: u8| Configuration {
            state: verbatim_core::membership::ConfigState::Transitional,
            size: 5,
            new_size,
            active: MemberMask::first(5),
            away: MemberMask::NONE,
        };
        let mut l = logs(false);
        l[4].configuration = shrinking(3);
        assert!(check_electable_completeness(0, &l, &c).is_empty());
        let mut l = logs(false);
        l[4].log = vec![e(1, 1, 1)];
        l[3].log = vec![e(1, 1, 1)];
        l[2].log = vec![e(1, 1, 1)];
        for m in l.iter_mut() {
            m.configuration = shrinking(2);
        }
        l[0].log = vec![e(1, 1, 1), e(2, 2, 2)];
        l[1].log = vec![e(1, 1, 1), e(2, 2, 2)];
        // Members 2, 3, 4 lack index 2; they would vote for each other
        // (three of five) but only 0 and 1 are the new group.
        assert!(check_electable_completeness(0, &l, &c).is_empty());
        for m in l.iter_mut() {
            m.configuration = Configuration::initial(5);
        }
        assert_eq!(
            check_electable_completeness(0, &l, &c).len(),
            3,
            "in a stable group of five, 2, 3 and 4 could each win"
        );
    }
}
