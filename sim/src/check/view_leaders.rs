//! View-named leaders (issue 14, item 4(b)). Two invariants:
//!
//! * **view-named leader**: a member that leads a term because a view
//!   started its campaign (log mode) or took it over (primary-backup
//!   mode) was named leader of that term by a view the coordinators
//!   decided: no member leads on a view that was only proposed, or on a
//!   view of another term.
//! * **campaigns by view**: while views can be decided at a member, it
//!   leads only by a view; DARE's own election is the fallback for when
//!   they cannot (which lasts: a majority of coordinators gone, or every
//!   slot used, is never undone).
//!
//! Together with election safety (one leader per term) and leader
//! completeness, which hold for every leader however it was chosen, this
//! is what "the coordinators decide the next leader" means.

use super::Violation;
use std::collections::{BTreeMap, BTreeSet};
use verbatim_core::views::View;

/// The checker (one per run).
#[derive(Default, Debug)]
pub struct ViewLeaders {
    /// Term → the members decided views named leader of it.
    named: BTreeMap<u64, BTreeSet<usize>>,
    /// (member, term) reported already.
    reported: BTreeSet<(usize, u64)>,
    /// Terms led by a view (for the run report).
    pub led: BTreeSet<u64>,
}

impl ViewLeaders {
    /// A view was decided (any member learnt it).
    pub fn view(&mut self, view: View) {
        self.named
            .entry(view.log_term)
            .or_default()
            .insert(usize::from(view.leader.0));
    }

    /// `node` leads `term`, by a view if `by_view`; `views_usable` says
    /// whether views can be decided at it now.
    pub fn observe_leader(
        &mut self,
        time_ns: u64,
        node: usize,
        term: u64,
        by_view: bool,
        views_usable: bool,
    ) -> Option<Violation> {
        if !by_view {
            if views_usable && self.reported.insert((node, term)) {
                return Some(Violation {
                    invariant: "campaigns by view",
                    time_ns,
                    detail: format!(
                        "node {node} leads term {term} by an election of its own while views can be decided"
                    ),
                });
            }
            return None;
        }
        self.led.insert(term);
        let named = self.named.get(&term);
        if named.is_some_and(|n| n.contains(&node)) || !self.reported.insert((node, term)) {
            return None;
        }
        Some(Violation {
            invariant: "view-named leader",
            time_ns,
            detail: match named {
                Some(n) => format!(
                    "node {node} leads term {term} by a view, but the views decided for that term name {n:?}"
                ),
                None => format!(
                    "node {node} leads term {term} by a view, but no view was decided for that term"
                ),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_view as view;

    #[test]
    fn a_leader_named_by_a_decided_view_passes() {
        let mut c = ViewLeaders::default();
        c.view(view(1, 4));
        assert_eq!(c.observe_leader(10, 1, 4, true, true), None);
        // An elected leader needs no view once views cannot be decided.
        assert_eq!(c.observe_leader(11, 2, 5, false, false), None);
    }

    #[test]
    fn an_elected_leader_while_views_can_be_decided_is_reported() {
        let mut c = ViewLeaders::default();
        let v = c.observe_leader(10, 2, 5, false, true).expect("violation");
        assert_eq!(v.invariant, "campaigns by view");
        assert_eq!(c.observe_leader(11, 2, 5, false, true), None, "once");
    }

    #[test]
    fn a_view_leader_of_a_term_no_view_was_decided_for_is_reported() {
        let mut c = ViewLeaders::default();
        c.view(view(1, 4));
        let v = c.observe_leader(10, 1, 5, true, true).expect("violation");
        assert_eq!(v.invariant, "view-named leader");
        assert!(v.detail.contains("no view was decided"), "{}", v.detail);
        // Once per member and term.
        assert_eq!(c.observe_leader(11, 1, 5, true, true), None);
    }

    #[test]
    fn a_view_leader_the_view_of_its_term_does_not_name_is_reported() {
        let mut c = ViewLeaders::default();
        c.view(view(1, 4));
        let v = c.observe_leader(10, 2, 4, true, false).expect("violation");
        assert!(v.detail.contains("name {1}"), "{}", v.detail);
    }
}
