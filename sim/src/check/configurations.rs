//! Group configurations (DARE §3.4): the configuration a CONFIG entry
//! commits is the same on every member that applies that entry, each
//! member applies configurations in log order, and each phase follows
//! from the one before it by a step the protocol allows (one member in or
//! out, extended to transitional to stable, transitional to stable).
//! Two leaders in one term, whatever majorities elected them, are the
//! election checker's to catch.

use super::Violation;
use std::collections::BTreeMap;
use verbatim_core::membership::{ConfigState, Configuration};

/// Agreement and order of the configurations members apply.
#[derive(Default, Debug)]
pub struct ConfigurationAgreement {
    /// CONFIG entry index → the configuration, who applied it first, when.
    by_index: BTreeMap<u64, (Configuration, usize, u64)>,
    /// Per member (this process): the last configuration index applied.
    last_applied: BTreeMap<usize, u64>,
}

impl ConfigurationAgreement {
    /// `member` applied the CONFIG entry at `index`, carrying `c`.
    pub fn observe_applied(
        &mut self,
        time_ns: u64,
        member: usize,
        index: u64,
        c: Configuration,
    ) -> Vec<Violation> {
        let mut out = Vec::new();
        match self.by_index.get(&index) {
            Some(&(other, first, at)) if other != c => out.push(Violation {
                invariant: "configuration agreement",
                time_ns,
                detail: format!(
                    "member {member} applied {c:?} at index {index}; member {first} applied {other:?} there at {:.3} ms",
                    at as f64 / 1e6
                ),
            }),
            Some(_) => {}
            None => {
                self.by_index.insert(index, (c, member, time_ns));
            }
        }
        let last = self.last_applied.insert(member, index);
        if let Some(last) = last.filter(|&l| l >= index) {
            out.push(Violation {
                invariant: "configuration agreement",
                time_ns,
                detail: format!(
                    "member {member} applied the configuration of index {index} after that of index {last}"
                ),
            });
        }
        // The step from the configuration committed before this one.
        let before = self
            .by_index
            .range(..index)
            .next_back()
            .map(|(_, &(b, _, _))| b);
        if let Some(b) = before {
            if !allowed_step(&b, &c) {
                out.push(Violation {
                    invariant: "configuration agreement",
                    time_ns,
                    detail: format!(
                        "index {index}: {c:?} does not follow from {b:?} by one phase of DARE §3.4"
                    ),
                });
            }
        }
        out
    }

    /// The configuration the group starts in (index 0).
    pub fn initial(c: Configuration) -> Self {
        let mut a = ConfigurationAgreement::default();
        a.by_index.insert(0, (c, 0, 0));
        a
    }

    /// `member` restarted with empty memory: it applies from its snapshot
    /// on (which may be behind what the previous process applied).
    pub fn restarted(&mut self, member: usize) {
        self.last_applied.remove(&member);
    }

    /// The configuration committed last (highest index), if any.
    pub fn latest(&self) -> Option<Configuration> {
        self.by_index.values().next_back().map(|&(c, _, _)| c)
    }
}

/// True when `b` to `c` is one phase of a DARE §3.4 operation (committed
/// configurations follow each other by such steps; an operation's phases
/// may also be cut short by nothing but a new leader finishing them).
pub fn allowed_step(b: &Configuration, c: &Configuration) -> bool {
    use ConfigState::*;
    let flipped = b.active.0 ^ c.active.0;
    let away_kept = c.away == b.away;
    let flipped_member = verbatim_core::MemberId(flipped.trailing_zeros() as u8);
    let flipped = flipped.count_ones();
    match (b.state, c.state) {
        // Remove or add one member in a slot below P. A removal may mark
        // it away (a zombie); an addition clears its mark.
        (Stable, Stable) => {
            c.size == b.size
                && flipped == 1
                && if c.active.contains(flipped_member) {
                    c.away == b.away.without(flipped_member)
                } else {
                    away_kept || c.away == b.away.with(flipped_member)
                }
        }
        // A full group takes one member into slot P.
        (Stable, Extended) => {
            c.size == b.size
                && c.new_size == b.size + 1
                && flipped == 1
                && c.active.contains(verbatim_core::MemberId(b.size))
                && away_kept
        }
        // Shrinking starts.
        (Stable, Transitional) => {
            c.size == b.size && c.new_size < b.size && flipped == 0 && away_kept
        }
        (Extended, Transitional) => {
            c.size == b.size && c.new_size == b.new_size && flipped == 0 && away_kept
        }
        // Both groups agreed: the new size alone decides; the members
        // beyond it are out, and so are their marks.
        (Transitional, Stable) => {
            let kept = (1u32 << b.new_size) - 1;
            c.size == b.new_size && c.active.0 == b.active.0 & kept && c.away.0 == b.away.0 & kept
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_core::sst::MemberMask;

    fn stable(size: u8, active: u32) -> Configuration {
        Configuration {
            state: ConfigState::Stable,
            size,
            new_size: size,
            active: MemberMask(active),
            away: MemberMask::NONE,
        }
    }

    #[test]
    fn members_that_apply_different_configurations_at_one_index_are_caught() {
        let mut c = ConfigurationAgreement::default();
        assert!(c.observe_applied(1, 0, 5, stable(3, 0b011)).is_empty());
        assert!(c.observe_applied(2, 1, 5, stable(3, 0b011)).is_empty());
        let v = c.observe_applied(3, 2, 5, stable(3, 0b110));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].invariant, "configuration agreement");
    }

    #[test]
    fn applying_out_of_log_order_is_caught_but_not_after_a_restart() {
        let mut c = ConfigurationAgreement::default();
        assert!(c.observe_applied(1, 0, 5, stable(3, 0b011)).is_empty());
        assert!(c.observe_applied(2, 0, 9, stable(3, 0b111)).is_empty());
        assert_eq!(c.observe_applied(3, 0, 5, stable(3, 0b011)).len(), 1);
        c.restarted(0);
        assert!(c.observe_applied(4, 0, 9, stable(3, 0b111)).is_empty());
    }

    #[test]
    fn a_configuration_that_skips_a_phase_is_caught() {
        let mut c = ConfigurationAgreement::default();
        assert!(c.observe_applied(1, 0, 5, stable(3, 0b111)).is_empty());
        // 3 to 4 members without the extended and transitional phases.
        let v = c.observe_applied(2, 0, 9, stable(4, 0b1111));
        assert_eq!(v.len(), 1, "{v:?}");
        // Two members out in one step.
        let mut c = ConfigurationAgreement::default();
        assert!(c.observe_applied(1, 0, 5, stable(5, 0b11111)).is_empty());
        assert_eq!(c.observe_applied(2, 0, 9, stable(5, 0b00111)).len(), 1);
    }

    #[test]
    fn every_phase_of_dare_is_an_allowed_step() {
        let s3 = stable(3, 0b111);
        let ext = Configuration {
            state: ConfigState::Extended,
            size: 3,
            new_size: 4,
            active: MemberMask(0b1111),
            away: MemberMask::NONE,
        };
        let tr = Configuration {
            state: ConfigState::Transitional,
            ..ext
        };
        let s4 = stable(4, 0b1111);
        assert!(allowed_step(&s3, &ext));
        assert!(allowed_step(&ext, &tr));
        assert!(allowed_step(&tr, &s4));
        let shrink = Configuration {
            state: ConfigState::Transitional,
            size: 4,
            new_size: 2,
            active: MemberMask(0b1111),
            away: MemberMask::NONE,
        };
        assert!(allowed_step(&s4, &shrink));
        assert!(allowed_step(&shrink, &stable(2, 0b11)));
        assert!(!allowed_step(&shrink, &stable(2, 0b1111)));
        assert!(allowed_step(&s3, &stable(3, 0b101)));
        assert!(!allowed_step(&s3, &s4));
    }

    /// Zombies: a removal may mark the member away and its addition
    /// clears the mark; no other step may touch the marks.
    #[test]
    fn away_marks_change_only_with_their_member() {
        let s3 = stable(3, 0b111);
        let away2 = Configuration {
            away: MemberMask(0b100),
            ..stable(3, 0b011)
        };
        assert!(allowed_step(&s3, &away2), "removed as a zombie");
        assert!(allowed_step(&away2, &s3), "added back");
        let still_away = Configuration {
            away: MemberMask(0b100),
            ..s3
        };
        assert!(!allowed_step(&away2, &still_away), "added but still away");
        // Member 3 was removed by an operator; removing 2 must not mark 3.
        let wrong = Configuration {
            away: MemberMask(0b1000),
            ..stable(4, 0b0011)
        };
        assert!(
            !allowed_step(&stable(4, 0b0111), &wrong),
            "a member other than the one removed is marked"
        );
        let marked_alone = Configuration {
            away: MemberMask(0b001),
            ..stable(3, 0b011)
        };
        assert!(!allowed_step(&away2, &marked_alone));
        let shrink = Configuration {
            state: ConfigState::Transitional,
            new_size: 2,
            ..away2
        };
        assert!(allowed_step(&away2, &shrink));
        assert!(
            allowed_step(&shrink, &stable(2, 0b011)),
            "slot 2 is gone, and its mark"
        );
        assert!(!allowed_step(&shrink, &away2));
    }
}

/// Zombies return (DARE §3.3.2 with `zombie_remove_ns`): at the end of a
/// run whose group could make progress, no member the committed
/// configuration marks away is running: a member removed as silent that
/// runs again has been added back.
pub fn check_zombies_returned(
    time_ns: u64,
    committed: &Configuration,
    running: verbatim_core::sst::MemberMask,
) -> Vec<Violation> {
    committed
        .away
        .and(running)
        .iter()
        .map(|m| Violation {
            invariant: "zombies return",
            time_ns,
            detail: format!(
                "member {} runs but is still away from the group (removed as silent, never added back): {committed:?}",
                m.0
            ),
        })
        .collect()
}

#[cfg(test)]
mod zombie_tests {
    use super::*;
    use verbatim_core::sst::MemberMask;

    #[test]
    fn a_running_member_left_away_is_caught() {
        let c = Configuration {
            state: ConfigState::Stable,
            size: 3,
            new_size: 3,
            active: MemberMask(0b011),
            away: MemberMask(0b100),
        };
        let v = check_zombies_returned(7, &c, MemberMask(0b111));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].invariant, "zombies return");
        assert!(v[0].detail.contains("member 2"));
        // Still silent (crashed, stopped): nothing to add back yet.
        assert!(check_zombies_returned(7, &c, MemberMask(0b011)).is_empty());
        // Added back: nothing away.
        let back = Configuration {
            active: MemberMask(0b111),
            away: MemberMask::NONE,
            ..c
        };
        assert!(check_zombies_returned(7, &back, MemberMask(0b111)).is_empty());
    }
}
