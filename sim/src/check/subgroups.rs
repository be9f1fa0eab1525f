//! Derecho's multicast subgroups and shards (§2, §3.4), checked beside
//! what every subgroup's own [`super::multicast::McastOrder`] checks
//! (stability, integrity, total order, no gaps or duplicates per sender,
//! virtual synchrony, one instance per subgroup, in member ids):
//!
//! * [`SubgroupMembership`]: a subgroup's message is delivered only at a
//!   member of that subgroup, and only from a sender that is one;
//! * [`SubgroupBytes`]: bytes stay among a subgroup's members: every work
//!   request into a subgroup's region is posted by one of its members to
//!   one of its members (its region is registered everywhere, and its
//!   engine must address only its own members);
//! * [`SubgroupLiveness`]: once a subgroup's current view runs with every
//!   member of it alive, agreed and not ending (the end of a run, the
//!   faults healed and the sends stopped a while before), every message a
//!   member of the view sent in that view was delivered at every member
//!   of it.

use super::Violation;
use std::collections::{BTreeMap, BTreeSet};
use verbatim_core::fabric::{Action, RegionId};
use verbatim_core::subgroup::{SUBGROUPS_MAX, SUBGROUP_REGION_BASE};

fn v(invariant: &'static str, time_ns: u64, detail: String) -> Violation {
    Violation {
        invariant,
        time_ns,
        detail,
    }
}

/// The members of a mask, as a list (for messages).
fn list(mask: u8) -> Vec<u8> {
    (0..8).filter(|m| mask & (1 << m) != 0).collect()
}

/// The subgroup whose region `region` is (declared or not), if any.
pub fn subgroup_of_region(region: RegionId) -> Option<usize> {
    let r = region.0;
    (r >= SUBGROUP_REGION_BASE && usize::from(r - SUBGROUP_REGION_BASE) < SUBGROUPS_MAX)
        .then(|| usize::from(r - SUBGROUP_REGION_BASE))
}

/// A subgroup's deliveries happen only at its members, from its members.
#[derive(Debug, Default)]
pub struct SubgroupMembership {
    /// The declared subgroups' member masks, by place.
    masks: Vec<u8>,
}

impl SubgroupMembership {
    /// The checker for the subgroups `masks` (a bit per member id, by
    /// place; the unused places left out).
    pub fn new(masks: &[u8]) -> Self {
        SubgroupMembership {
            masks: masks.to_vec(),
        }
    }

    /// `member` delivered a message of `sender` in subgroup `subgroup`.
    pub fn delivered(
        &self,
        time_ns: u64,
        subgroup: usize,
        member: usize,
        sender: usize,
    ) -> Option<Violation> {
        let Some(&mask) = self.masks.get(subgroup) else {
            return Some(v(
                "subgroup delivers only among its members",
                time_ns,
                format!(
                    "node {member} delivered a message of node {sender} in subgroup {subgroup}, which is not declared"
                ),
            ));
        };
        let is = |m: usize| m < 8 && mask & (1 << m) != 0;
        let outside: Vec<String> = [(member, "at"), (sender, "from")]
            .iter()
            .filter(|(m, _)| !is(*m))
            .map(|(m, what)| format!("{what} node {m}"))
            .collect();
        (!outside.is_empty()).then(|| {
            v(
                "subgroup delivers only among its members",
                time_ns,
                format!(
                    "node {member} delivered a message of node {sender} in subgroup {subgroup} (members {:?}): {} outside it",
                    list(mask),
                    outside.join(", ")
                ),
            )
        })
    }
}

/// Bytes of a subgroup stay among its members: a work request into a
/// subgroup's region is posted by one of its members to one of its
/// members. Each (subgroup, poster, target) is reported once (an engine
/// that addresses a wrong member does so at every post).
#[derive(Debug, Default)]
pub struct SubgroupBytes {
    masks: Vec<u8>,
    reported: BTreeSet<(usize, usize, usize)>,
    /// Work requests into subgroup regions seen (for reports and tests).
    pub posts: u64,
}

impl SubgroupBytes {
    /// The checker for the subgroups `masks` (as
    /// [`SubgroupMembership::new`]).
    pub fn new(masks: &[u8]) -> Self {
        SubgroupBytes {
            masks: masks.to_vec(),
            reported: BTreeSet::new(),
            posts: 0,
        }
    }

    /// Member `poster` executed `action` on its fabric.
    pub fn executed(&mut self, time_ns: u64, poster: usize, action: &Action) -> Option<Violation> {
        let Action::Post(wr) = action else {
            return None;
        };
        let region = wr.op.remote().region;
        let subgroup = subgroup_of_region(region)?;
        self.posts += 1;
        let target = wr.peer.index();
        let mask = self.masks.get(subgroup).copied().unwrap_or(0);
        let is = |m: usize| m < 8 && mask & (1 << m) != 0;
        if (is(poster) && is(target)) || !self.reported.insert((subgroup, poster, target)) {
            return None;
        }
        Some(v(
            "subgroup bytes stay among its members",
            time_ns,
            format!(
                "node {poster} posted {:?} to node {target} into region {} of subgroup {subgroup} (members {:?})",
                wr.op,
                region.0,
                list(mask)
            ),
        ))
    }
}

/// (subgroup, sender, sender's incarnation, epoch, index).
type Sent = (usize, usize, u64, u64, u64);
/// (subgroup, member, incarnation): a delivering process of a subgroup.
type Proc = (usize, usize, u64);
/// (sender, sender's incarnation, epoch, index).
type MsgId = (usize, u64, u64, u64);

/// Every message sent in a subgroup's view that ended the run whole and
/// agreed is delivered at every member of that view.
#[derive(Debug, Default)]
pub struct SubgroupLiveness {
    /// (message, member of the final view) pairs judged so far (for
    /// reports: a judged view with nothing sent in it proves little).
    pub checked: u64,
    sent: BTreeSet<Sent>,
    /// Per delivering process (subgroup, member, incarnation): what it
    /// delivered.
    delivered: BTreeMap<Proc, BTreeSet<MsgId>>,
}

/// A member of a subgroup's view at the end of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalMember {
    /// Its id.
    pub member: usize,
    /// Its process's incarnation.
    pub incarnation: u64,
}

impl SubgroupLiveness {
    /// `sender` (of `incarnation`) sent message `index` of `epoch` in
    /// subgroup `subgroup`.
    pub fn sent(
        &mut self,
        subgroup: usize,
        sender: usize,
        incarnation: u64,
        epoch: u64,
        index: u64,
    ) {
        self.sent
            .insert((subgroup, sender, incarnation, epoch, index));
    }

    /// `member` (of `incarnation`) delivered message `index` of `sender`
    /// (of `sender_incarnation`) of `epoch` in subgroup `subgroup`.
    #[allow(clippy::too_many_arguments)]
    pub fn delivered(
        &mut self,
        subgroup: usize,
        member: usize,
        incarnation: u64,
        sender: usize,
        sender_incarnation: u64,
        epoch: u64,
        index: u64,
    ) {
        self.delivered
            .entry((subgroup, member, incarnation))
            .or_default()
            .insert((sender, sender_incarnation, epoch, index));
    }

    /// At the end of a run: subgroup `subgroup`'s view of `epoch` has
    /// `view` as members, every one running, in that view, not wedged and
    /// not ending it (the caller judges only such a view). Every message
    /// a member of the view (its current process) sent in it must be
    /// delivered at every member of it. At most one violation per member.
    pub fn check_final(
        &mut self,
        time_ns: u64,
        subgroup: usize,
        epoch: u64,
        view: &[FinalMember],
    ) -> Vec<Violation> {
        let mut out = Vec::new();
        let mut checked = 0;
        let empty = BTreeSet::new();
        for at in view {
            let got = self
                .delivered
                .get(&(subgroup, at.member, at.incarnation))
                .unwrap_or(&empty);
            let missing: Vec<(usize, u64)> = view
                .iter()
                .flat_map(|s| {
                    self.sent
                        .range(
                            (subgroup, s.member, s.incarnation, epoch, 0)
                                ..=(subgroup, s.member, s.incarnation, epoch, u64::MAX),
                        )
                        .map(|&(_, s, si, e, k)| (s, si, e, k))
                })
                .inspect(|_| checked += 1)
                .filter(|m| !got.contains(m))
                .map(|(s, _, _, k)| (s, k))
                .collect();
            if let Some(&(s, k)) = missing.first() {
                out.push(v(
                    "subgroup delivers every message sent in a healthy view (liveness)",
                    time_ns,
                    format!(
                        "node {} (incarnation {}) never delivered {} message(s) sent in epoch {epoch} of subgroup {subgroup}, \
                         the first message {k} of node {s}, though every member of the view {:?} ran in it at the end",
                        at.member,
                        at.incarnation,
                        missing.len(),
                        view.iter().map(|m| m.member).collect::<Vec<_>>()
                    ),
                ));
            }
        }
        self.checked += checked;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_core::fabric::{Addr, Op, WorkRequest, WrId};
    use verbatim_core::subgroup::subgroup_region;
    use verbatim_core::MemberId;

    #[test]
    fn deliveries_among_members_pass_and_outside_are_caught() {
        let c = SubgroupMembership::new(&[0b1010, 0b0111]);
        assert!(c.delivered(1, 0, 1, 3).is_none());
        assert!(c.delivered(1, 1, 2, 0).is_none());
        let at = c.delivered(1, 0, 0, 3).expect("delivered at a non-member");
        assert_eq!(at.invariant, "subgroup delivers only among its members");
        assert!(at.detail.contains("at node 0"), "{}", at.detail);
        let from = c.delivered(1, 1, 1, 3).expect("from a non-member");
        assert!(from.detail.contains("from node 3"), "{}", from.detail);
        assert!(c.delivered(1, 2, 1, 1).is_some(), "no subgroup in place 2");
    }

    fn post(peer: u8, region: RegionId) -> Action {
        Action::Post(WorkRequest {
            wr_id: WrId(1),
            peer: MemberId(peer),
            op: Op::write_u64(Addr::new(region, 64), 7),
            notify: false,
        })
    }

    #[test]
    fn a_post_into_a_subgroup_region_outside_its_members_is_caught() {
        let mut c = SubgroupBytes::new(&[0b1010, 0b0011]);
        // Among members: fine; other regions are not the checker's.
        assert!(c.executed(1, 1, &post(3, subgroup_region(0))).is_none());
        assert!(c.executed(1, 0, &post(1, subgroup_region(1))).is_none());
        assert!(c.executed(1, 0, &post(2, RegionId(0))).is_none());
        assert_eq!(c.posts, 2);
        // A member posting to a non-member (ranks taken for ids: rank 0
        // of {1, 3} is node 1, not node 0).
        let to = c
            .executed(1, 3, &post(0, subgroup_region(0)))
            .expect("to a non-member");
        assert_eq!(to.invariant, "subgroup bytes stay among its members");
        assert!(to.detail.contains("to node 0"), "{}", to.detail);
        assert!(
            c.executed(2, 3, &post(0, subgroup_region(0))).is_none(),
            "reported once"
        );
        // A non-member posting to a member.
        assert!(c.executed(1, 2, &post(1, subgroup_region(1))).is_some());
        // Into the region of a subgroup that is not declared.
        assert!(c.executed(1, 0, &post(1, subgroup_region(4))).is_some());
        // Access changes move no bytes.
        let access = Action::SetAccess {
            peer: MemberId(0),
            region: subgroup_region(0),
            access: verbatim_core::fabric::Access::Granted,
        };
        assert!(c.executed(1, 1, &access).is_none());
    }

    fn view(members: &[(usize, u64)]) -> Vec<FinalMember> {
        members
            .iter()
            .map(|&(member, incarnation)| FinalMember {
                member,
                incarnation,
            })
            .collect()
    }

    #[test]
    fn everything_sent_in_the_final_view_delivered_everywhere_passes() {
        let mut l = SubgroupLiveness::default();
        for k in 0..3 {
            l.sent(0, 1, 1, 2, k);
            l.sent(0, 3, 5, 2, k);
        }
        // Sent in an earlier epoch, or by an earlier process: the trim
        // may have left it out; not judged here.
        l.sent(0, 1, 1, 1, 0);
        l.sent(0, 3, 4, 2, 9);
        // Another subgroup's message.
        l.sent(1, 1, 1, 2, 0);
        for m in [(1, 1), (3, 5)] {
            for k in 0..3 {
                l.delivered(0, m.0, m.1, 1, 1, 2, k);
                l.delivered(0, m.0, m.1, 3, 5, 2, k);
            }
        }
        assert!(l.check_final(9, 0, 2, &view(&[(1, 1), (3, 5)])).is_empty());
        assert_eq!(l.checked, 2 * 6);
    }

    #[test]
    fn a_message_of_the_final_view_a_member_never_delivered_is_caught() {
        let mut l = SubgroupLiveness::default();
        for k in 0..3 {
            l.sent(0, 1, 1, 2, k);
        }
        for k in 0..3 {
            l.delivered(0, 1, 1, 1, 1, 2, k);
        }
        // Node 3 delivered the first message only.
        l.delivered(0, 3, 5, 1, 1, 2, 0);
        let found = l.check_final(9, 0, 2, &view(&[(1, 1), (3, 5)]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].invariant,
            "subgroup delivers every message sent in a healthy view (liveness)"
        );
        assert!(
            found[0]
                .detail
                .contains("node 3 (incarnation 5) never delivered 2"),
            "{}",
            found[0].detail
        );
        // What an earlier process of node 3 delivered does not count.
        let mut l2 = SubgroupLiveness::default();
        l2.sent(0, 1, 1, 2, 0);
        l2.delivered(0, 1, 1, 1, 1, 2, 0);
        l2.delivered(0, 3, 4, 1, 1, 2, 0);
        assert_eq!(l2.check_final(9, 0, 2, &view(&[(1, 1), (3, 5)])).len(), 1);
    }

    #[test]
    fn regions_name_their_subgroups() {
        assert_eq!(subgroup_of_region(subgroup_region(0)), Some(0));
        assert_eq!(
            subgroup_of_region(subgroup_region(SUBGROUPS_MAX - 1)),
            Some(SUBGROUPS_MAX - 1)
        );
        assert_eq!(subgroup_of_region(RegionId(0)), None);
        assert_eq!(
            subgroup_of_region(RegionId(SUBGROUP_REGION_BASE + SUBGROUPS_MAX as u8)),
            None
        );
    }
}
