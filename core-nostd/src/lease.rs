//! Leased active views (uKharon §6, Algorithm 2).
//!
//! A *view* is one decided value of the coordinators' consensus sequence
//! (epoch `k` lives in consensus slot `k`): the members, their roles (the
//! log leader, the KV primary) and the lease length. A process may act in
//! view `k` (serve a read locally as its leader, commit as its primary)
//! only while `k` is *active*: no newer view can be in force at the same
//! time anywhere. [`LeaseKeeper::active`] answers that from local state in
//! a few loads and one comparison, never from the network; the poll loop
//! keeps the lease fresh in the background:
//!
//! 1. [`LeaseKeeper::renewal_due`] says when to check again;
//! 2. [`LeaseKeeper::begin_renewal`] stamps the check with the local time
//!    *before* anything is read;
//! 3. the caller READs consensus slot `k + 1` at the coordinators;
//! 4. [`LeaseKeeper::finish_renewal`] takes the result once a majority
//!    answered: `true` when every answer was an empty slot (no view newer
//!    than `k` can have been decided before the check began).
//!
//! ## Why the times are what they are
//!
//! A check on view `k - 1` that found slot `k` empty at a majority was
//! issued before view `k` was decided (the majority that decided `k`
//! intersects the majority read). Any process that leases view `k` learnt
//! of it after its decision, so its own check was issued later still. The
//! first check on `k` therefore starts the lease only `wait` after it was
//! issued (Algorithm 2, line 7: `tstart = t + δ`): by then every lease on
//! `k - 1` has run out. A lease is extended to `hold` after the issue of
//! the check that extends it, never after its completion.
//!
//! Clocks are not synchronised, only their rates are bounded: each runs at
//! `1 ± ρ` of real time, with ρ = `drift_ppm / 10⁶` (Appendix C measured
//! far less than the allowance a config would give). A lease is held for
//! `hold = δ − a` of local time and a new view waits `wait = δ + a`, with
//! the allowance `a = ⌈δ·ρ⌉`. In real time a holder stops by
//! `hold·(1 + ρ)` and a newcomer starts after `wait·(1 − ρ)` at the
//! earliest, and `(δ − a)(1 + ρ) ≤ (δ + a)(1 − ρ)` holds exactly when
//! `a ≥ δ·ρ`. Drift does not accumulate: every extension measures from a
//! fresh local timestamp.
//!
//! ## Compatible views (adaptive leases, §6.3)
//!
//! A view that differs from its predecessor only in its lease length is
//! *compatible*: acting in both at once is harmless. A process that held
//! an active lease on `k - 1` moves to a compatible `k` without waiting
//! (every lease older than `k - 1` had already run out when its own lease
//! on `k - 1` started). Without such a lease it waits as for any view.

/// Lease parameters, the same at every member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Nominal lease length δ, in nanoseconds of local time.
    pub lease_ns: u64,
    /// Bound on any clock's rate error against real time, in parts per
    /// million (ρ · 10⁶).
    pub drift_ppm: u32,
    /// A renewal starts when less than this is left of the lease, so a
    /// view that does not change is never without one (uKharon renews in
    /// the background, §6.2). At most `lease_ns`.
    pub renew_margin_ns: u64,
    /// A deliberately broken rule, for mutation tests only.
    #[cfg(feature = "mutation-testing")]
    pub mutation: crate::config::Mutation,
}

/// What is wrong with a [`LeaseConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseConfigError {
    /// `lease_ns` is 0.
    ZeroLease,
    /// `drift_ppm` is 10⁶ or more: no lease could be held at all.
    DriftTooLarge,
    /// The allowance eats the whole lease (`lease_ns · drift_ppm / 10⁶ ≥
    /// lease_ns`): raise `lease_ns` or lower `drift_ppm`.
    AllowanceExceedsLease,
    /// `renew_margin_ns` exceeds `lease_ns`.
    MarginExceedsLease,
}

impl LeaseConfig {
    /// A configuration (check it with [`LeaseConfig::validate`]).
    pub const fn new(lease_ns: u64, drift_ppm: u32, renew_margin_ns: u64) -> Self {
        LeaseConfig {
            lease_ns,
            drift_ppm,
            renew_margin_ns,
            #[cfg(feature = "mutation-testing")]
            mutation: crate::config::Mutation::None,
        }
    }

    /// Checks the fields (see [`LeaseConfigError`]).
    pub fn validate(&self) -> Result<(), LeaseConfigError> {
        if self.lease_ns == 0 {
            return Err(LeaseConfigError::ZeroLease);
        }
        if self.drift_ppm >= 1_000_000 {
            return Err(LeaseConfigError::DriftTooLarge);
        }
        if self.allowance_ns() >= self.lease_ns {
            return Err(LeaseConfigError::AllowanceExceedsLease);
        }
        if self.renew_margin_ns > self.lease_ns {
            return Err(LeaseConfigError::MarginExceedsLease);
        }
        Ok(())
    }

    /// The drift allowance `a = ⌈δ·ρ⌉`, in nanoseconds.
    pub fn allowance_ns(&self) -> u64 {
        #[cfg(feature = "mutation-testing")]
        if self.mutation == crate::config::Mutation::LeaseWithoutDriftAllowance {
            return 0;
        }
        let scaled = u128::from(self.lease_ns) * u128::from(self.drift_ppm);
        // At most u64::MAX · 10⁶ / 10⁶: fits.
        scaled.div_ceil(1_000_000) as u64
    }

    /// How long a check keeps a lease, in local time: `δ − a`.
    pub fn hold_ns(&self) -> u64 {
        self.lease_ns.saturating_sub(self.allowance_ns())
    }

    /// How long a new (incompatible) view waits before it is active, in
    /// local time: `δ + a`.
    pub fn wait_ns(&self) -> u64 {
        self.lease_ns.saturating_add(self.allowance_ns())
    }
}

/// A decided view as the lease sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeasedView {
    /// Its consensus slot (views are numbered by the slot that decided
    /// them, from 1).
    pub epoch: u64,
    /// It differs from view `epoch - 1` only in its lease length.
    pub compatible_with_previous: bool,
    /// The caller knows that no process holds a lease on any older view
    /// (the only possible holder of view `epoch - 1`'s is known dead, and
    /// every older one ran out): the first check starts the lease at once,
    /// without the wait. See [`crate::views`] for when that is known.
    pub older_leases_ended: bool,
}

/// A check in flight: the view it is about and the local time it was
/// issued at. Hand it back to [`LeaseKeeper::finish_renewal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// The view checked (its next slot is what the caller READs).
    pub epoch: u64,
    /// Local time stamped before the first READ was posted.
    pub issued_ns: u64,
}

/// What [`LeaseKeeper::finish_renewal`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenewalOutcome {
    /// First lease on the view: active from `start_ns` (local time), once
    /// a later check extends it.
    Started {
        /// When the view may become active.
        start_ns: u64,
    },
    /// The lease now runs until `end_ns` (local time).
    Extended {
        /// The new end.
        end_ns: u64,
    },
    /// A newer view may have been decided: the lease is not extended and
    /// the keeper stops renewing this view.
    Superseded,
    /// The check was about a view the keeper no longer follows (the
    /// caller moved to a newer one meanwhile): ignored.
    Stale,
}

/// Holds the lease on the newest view a process knows (Algorithm 2's
/// `leased_membership`, `tstart`, `tend`).
#[derive(Clone, Debug)]
pub struct LeaseKeeper {
    cfg: LeaseConfig,
    /// The view followed; `None` before the first.
    view: Option<LeasedView>,
    /// A check on `view` succeeded once: `start_ns` is meaningful.
    leased: bool,
    start_ns: u64,
    /// Active in `[start_ns, end_ns)`; `end_ns <= start_ns` means not yet.
    end_ns: u64,
    /// A check found a newer slot filled: never renew this view again.
    superseded: bool,
    /// A check in flight on `view`.
    in_flight: Option<Renewal>,
    /// The epoch of the view before `view`, if this process held it
    /// active when it moved on (a compatible move needs no wait).
    previous_active_epoch: Option<u64>,
}

impl LeaseKeeper {
    /// A keeper with no view yet. The configuration must be valid.
    pub fn new(cfg: LeaseConfig) -> Result<Self, LeaseConfigError> {
        cfg.validate()?;
        Ok(LeaseKeeper {
            cfg,
            view: None,
            leased: false,
            start_ns: 0,
            end_ns: 0,
            superseded: false,
            in_flight: None,
            previous_active_epoch: None,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// Whether `epoch` is the active view at local time `now_ns`
    /// (uKharon's `Active`). Local state only: a few loads and compares.
    #[inline]
    pub fn active(&self, epoch: u64, now_ns: u64) -> bool {
        match self.view {
            Some(v) => {
                v.epoch == epoch && self.leased && now_ns >= self.start_ns && now_ns < self.end_ns
            }
            None => false,
        }
    }

    /// The view followed, if any.
    pub fn view(&self) -> Option<LeasedView> {
        self.view
    }

    /// Nanoseconds of lease left at `now_ns` on the followed view (0 when
    /// it is not active), for status displays.
    pub fn remaining_ns(&self, now_ns: u64) -> u64 {
        match self.view {
            Some(v) if self.active(v.epoch, now_ns) => self.end_ns - now_ns,
            _ => 0,
        }
    }

    /// The process learnt a newly decided view. Views only move forward:
    /// an epoch at or below the followed one is ignored (returns false).
    pub fn follow(&mut self, view: LeasedView, now_ns: u64) -> bool {
        if let Some(v) = self.view {
            if view.epoch <= v.epoch {
                return false;
            }
            self.previous_active_epoch = self.active(v.epoch, now_ns).then_some(v.epoch);
        }
        self.view = Some(view);
        self.leased = false;
        self.start_ns = 0;
        self.end_ns = 0;
        self.superseded = false;
        self.in_flight = None;
        true
    }

    /// Whether a check should be issued now: a view is followed, not
    /// superseded, no check is in flight, and the lease is missing or ends
    /// within the renewal margin. A lease that has not started yet "ends"
    /// at its start: the check that opens it is issued before the wait is
    /// over, so the view is active as soon as it may be.
    pub fn renewal_due(&self, now_ns: u64) -> bool {
        if self.view.is_none() || self.superseded || self.in_flight.is_some() {
            return false;
        }
        !self.leased || now_ns.saturating_add(self.cfg.renew_margin_ns) >= self.end_ns
    }

    /// The local time from which [`LeaseKeeper::renewal_due`] holds
    /// (0: now), or `None` while no check can be due (no view, superseded,
    /// one in flight). For a poll loop's deadline.
    pub fn renewal_due_at(&self) -> Option<u64> {
        if self.view.is_none() || self.superseded || self.in_flight.is_some() {
            return None;
        }
        if !self.leased {
            return Some(0);
        }
        Some(self.end_ns.saturating_sub(self.cfg.renew_margin_ns))
    }

    /// Stamps a check on the followed view with the local time, before the
    /// caller posts its READs of the next slot. `None` when no view is
    /// followed or one is already in flight.
    pub fn begin_renewal(&mut self, now_ns: u64) -> Option<Renewal> {
        let v = self.view?;
        if self.in_flight.is_some() || self.superseded {
            return None;
        }
        let r = Renewal {
            epoch: v.epoch,
            issued_ns: now_ns,
        };
        self.in_flight = Some(r);
        Some(r)
    }

    /// The check's READs are back from a majority of coordinators.
    /// `next_slot_empty`: each of them found the slot after the view
    /// empty. A filled slot may hold a newer decided view: the lease is
    /// not extended and this view is never renewed again. Too few answers
    /// prove nothing either way: call [`LeaseKeeper::abandon_renewal`]
    /// instead and try again.
    pub fn finish_renewal(&mut self, r: Renewal, next_slot_empty: bool) -> RenewalOutcome {
        if self.in_flight != Some(r) || self.view.map(|v| v.epoch) != Some(r.epoch) {
            return RenewalOutcome::Stale;
        }
        self.in_flight = None;
        let view = self.view.expect("checked above");
        if !next_slot_empty {
            self.superseded = true;
            return RenewalOutcome::Superseded;
        }
        if !self.leased {
            let compatible_move = view.older_leases_ended
                || (view.compatible_with_previous
                    && self.previous_active_epoch == Some(view.epoch - 1));
            self.leased = true;
            self.start_ns = if compatible_move {
                r.issued_ns
            } else {
                r.issued_ns.saturating_add(self.cfg.wait_ns())
            };
            if compatible_move {
                // Nothing to wait for: this check already extends it.
                self.end_ns = r.issued_ns.saturating_add(self.cfg.hold_ns());
                return RenewalOutcome::Extended {
                    end_ns: self.end_ns,
                };
            }
            self.end_ns = self.start_ns;
            return RenewalOutcome::Started {
                start_ns: self.start_ns,
            };
        }
        // Algorithm 2, line 11, also for a check issued during the wait:
        // no view newer than ours was decided before it was issued, and
        // any newer one waits `wait > hold` after its own, later, first
        // check. The lease is active from `start_ns` until this end.
        let end = r.issued_ns.saturating_add(self.cfg.hold_ns());
        if end > self.end_ns {
            self.end_ns = end;
        }
        RenewalOutcome::Extended {
            end_ns: self.end_ns,
        }
    }

    /// The READs of the check in flight failed to return (the caller gave
    /// up on it): a new one may start.
    pub fn abandon_renewal(&mut self) {
        self.in_flight = None;
    }

    /// Marks the followed view superseded without a check (the process
    /// learnt of a newer slot being filled some other way).
    pub fn supersede(&mut self) {
        self.superseded = true;
        self.in_flight = None;
    }
}

/// Intervals of real time during which a process held a view active, and
/// the check that no two of them conflict (uKharon §6.1: no two
/// overlapping active views; after a view is active, no older view
/// becomes active). Used by the simulator's harness and by tests.
pub mod check {
    /// One process's lease on one view, in real (global) nanoseconds.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct ActiveInterval {
        /// Which process.
        pub process: u32,
        /// The view.
        pub epoch: u64,
        /// First real instant the view was active there.
        pub start_real_ns: f64,
        /// First real instant it no longer was.
        pub end_real_ns: f64,
    }

    /// A pair of intervals that breaks the rule.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct Overlap {
        /// The older view's interval.
        pub older: ActiveInterval,
        /// The newer view's interval, which began before the older ended.
        pub newer: ActiveInterval,
    }

    /// Checks every pair: an interval of view `e` and one of a newer view
    /// `f` must not overlap in real time, unless every view from `e + 1`
    /// to `f` is compatible with its predecessor (`compatible(k)`: view
    /// `k` is compatible with `k - 1`). Reports the first conflict.
    /// Quadratic: for test histories.
    pub fn no_overlapping_views(
        intervals: &[ActiveInterval],
        compatible: impl Fn(u64) -> bool,
    ) -> Result<(), Overlap> {
        for a in intervals {
            for b in intervals {
                if a.epoch >= b.epoch || a.end_real_ns <= a.start_real_ns {
                    continue;
                }
                if b.end_real_ns <= b.start_real_ns {
                    continue;
                }
                let chain = (a.epoch + 1..=b.epoch).all(&compatible);
                if chain {
                    continue;
                }
                // b is newer: it must start only after a ended.
                if b.start_real_ns < a.end_real_ns {
                    return Err(Overlap {
                        older: *a,
                        newer: *b,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
