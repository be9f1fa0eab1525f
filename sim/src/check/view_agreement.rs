//! One view per epoch (uKharon §5: one decided value per consensus slot,
//! seen from the members): every member that reports view `e` decided
//! (proposed and won, or learnt) reports the same view. The consensus
//! engine's own harness checks the same property on acceptor memory; this
//! one checks it where the views are used, across restarts, laps of the
//! slot ring and every fault the swarm draws.

use super::Violation;
use std::collections::BTreeMap;
use verbatim_core::views::View;

/// The first report of each epoch, and who made it when.
#[derive(Default, Debug)]
pub struct ViewAgreement {
    first: BTreeMap<u64, (View, usize, u64)>,
    /// Epochs with two views reported already (reported once each).
    reported: BTreeMap<u64, ()>,
}

impl ViewAgreement {
    /// The newest view reported decided, with its epoch.
    pub fn newest(&self) -> Option<(u64, View)> {
        self.first.last_key_value().map(|(&e, &(v, _, _))| (e, v))
    }

    /// Member `node` reports `view` decided for `epoch` at `time_ns`.
    pub fn observe(
        &mut self,
        time_ns: u64,
        node: usize,
        epoch: u64,
        view: View,
    ) -> Option<Violation> {
        match self.first.get(&epoch) {
            None => {
                self.first.insert(epoch, (view, node, time_ns));
                None
            }
            Some(&(first, _, _)) if first == view => None,
            Some(&(first, by, at)) => {
                if self.reported.insert(epoch, ()).is_some() {
                    return None;
                }
                Some(Violation {
                    invariant: "one view per epoch",
                    time_ns,
                    detail: format!(
                        "member {node} has view {epoch} = {view:?}; member {by} had {first:?} at {:.3} ms",
                        at as f64 / 1e6
                    ),
                })
            }
        }
    }

    /// Epochs reported.
    pub fn len(&self) -> usize {
        self.first.len()
    }

    /// True when no view was reported.
    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_core::fabric::MemberId;

    fn view(leader: u8, term: u64) -> View {
        View {
            leader: MemberId(leader),
            log_term: term,
            lease_ns: 50_000,
            members: 0,
        }
    }

    #[test]
    fn the_same_view_from_every_member_passes() {
        let mut c = ViewAgreement::default();
        assert!(c.observe(1, 0, 1, view(0, 2)).is_none());
        assert!(c.observe(2, 1, 1, view(0, 2)).is_none());
        assert!(c.observe(3, 2, 2, view(1, 3)).is_none());
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn the_newest_view_reported_never_goes_back() {
        let mut c = ViewAgreement::default();
        assert_eq!(c.newest(), None);
        c.observe(1, 0, 3, view(0, 2));
        c.observe(2, 1, 1, view(1, 1));
        assert_eq!(c.newest(), Some((3, view(0, 2))));
        c.observe(3, 2, 4, view(2, 3));
        c.observe(4, 0, 2, view(0, 1));
        assert_eq!(c.newest(), Some((4, view(2, 3))));
    }

    #[test]
    fn two_views_for_one_epoch_are_caught_once() {
        let mut c = ViewAgreement::default();
        assert!(c.observe(1, 0, 5, view(0, 2)).is_none());
        let v = c.observe(2, 2, 5, view(2, 3)).expect("a violation");
        assert_eq!(v.invariant, "one view per epoch");
        assert!(v.detail.contains("member 2 has view 5"), "{}", v.detail);
        // Reported once, whoever repeats it.
        assert!(c.observe(3, 1, 5, view(2, 3)).is_none());
        // Another epoch is judged on its own.
        assert!(c.observe(4, 1, 6, view(1, 4)).is_none());
        assert!(c.observe(5, 0, 6, view(0, 4)).is_some());
    }
}
