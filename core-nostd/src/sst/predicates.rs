//! Predicates over the table and the triggers they fire (Derecho §3.2).
//!
//! A predicate is a function of the table (and of a context the engine
//! passes, e.g. its term or the quorum size); its trigger runs when it
//! fires. They are evaluated in the engine's poll, in registration order,
//! at most [`PREDICATES_MAX`] of them, each a bounded function of at most
//! [`crate::fabric::MAX_MEMBERS`] rows. Functions are plain `fn` pointers:
//! no allocation, and the registry is `Copy`.
//!
//! Over SST columns that only grow, a predicate that became true stays
//! true (Derecho's monotonic predicates), so [`Firing::Once`] fires its
//! trigger exactly once. [`Firing::OnRise`] is for predicates that depend
//! on the context too (a term that moves on): it fires on every transition
//! from false to true.

use super::table::Table;

/// Predicates registered at once, at most.
pub const PREDICATES_MAX: usize = 8;

/// When a predicate fires its trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Firing {
    /// The first evaluation that finds it true; then it stays disarmed
    /// until [`Predicates::rearm`].
    Once,
    /// Every evaluation that finds it true after one that found it false
    /// (the first evaluation counts as after a false one).
    OnRise,
}

/// Handle of a registered predicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PredicateId(pub u8);

/// Why a registration or a removal was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredicateError {
    /// [`PREDICATES_MAX`] predicates are registered already.
    Full,
    /// No predicate with that id.
    Unknown,
}

/// The ids that fired in one evaluation (bit `i` is `PredicateId(i)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fired(pub u32);

impl Fired {
    /// True when `id` fired.
    pub fn contains(self, id: PredicateId) -> bool {
        self.0 & (1 << id.0) != 0
    }
    /// True when nothing fired.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// A predicate over the table and a context `C`, and its trigger.
pub struct Predicate<C> {
    /// True when the trigger should run (bounded work: use the table's
    /// reducers).
    pub test: fn(&Table, &C) -> bool,
    /// Runs when the predicate fires.
    pub trigger: fn(&mut C, &Table),
    /// When it fires.
    pub firing: Firing,
}

// Manual impls: fn pointers are Copy whatever `C` is.
impl<C> Clone for Predicate<C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C> Copy for Predicate<C> {}

struct Slot<C> {
    predicate: Predicate<C>,
    /// Once: not fired yet. OnRise: always.
    armed: bool,
    /// Value at the last evaluation.
    was_true: bool,
}

impl<C> Clone for Slot<C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C> Copy for Slot<C> {}

/// The registered predicates of one engine.
pub struct Predicates<C> {
    slots: [Option<Slot<C>>; PREDICATES_MAX],
}

impl<C> Clone for Predicates<C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C> Copy for Predicates<C> {}

impl<C> Default for Predicates<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C> Predicates<C> {
    const FREE: Option<Slot<C>> = None;

    /// No predicate.
    pub const fn new() -> Self {
        Predicates {
            slots: [Self::FREE; PREDICATES_MAX],
        }
    }

    /// Registers `predicate` in the first free slot.
    pub fn register(&mut self, predicate: Predicate<C>) -> Result<PredicateId, PredicateError> {
        let i = self
            .slots
            .iter()
            .position(Option::is_none)
            .ok_or(PredicateError::Full)?;
        self.slots[i] = Some(Slot {
            predicate,
            armed: true,
            was_true: false,
        });
        Ok(PredicateId(i as u8))
    }

    /// Removes a predicate; its slot is free again.
    pub fn remove(&mut self, id: PredicateId) -> Result<(), PredicateError> {
        match self.slots.get_mut(usize::from(id.0)) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(PredicateError::Unknown),
        }
    }

    /// Arms a [`Firing::Once`] predicate again (e.g. for the next term).
    pub fn rearm(&mut self, id: PredicateId) -> Result<(), PredicateError> {
        match self.slots.get_mut(usize::from(id.0)) {
            Some(Some(slot)) => {
                slot.armed = true;
                slot.was_true = false;
                Ok(())
            }
            _ => Err(PredicateError::Unknown),
        }
    }

    /// Predicates registered.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// True when none is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Evaluates every registered predicate once, in id order, and runs
    /// the trigger of each that fires (a trigger sees the context as the
    /// earlier triggers left it). Returns the ids that fired.
    pub fn evaluate(&mut self, table: &Table, ctx: &mut C) -> Fired {
        let mut fired = Fired::default();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(slot) = slot else { continue };
            if !slot.armed {
                continue;
            }
            let now_true = (slot.predicate.test)(table, ctx);
            let fire = now_true && !slot.was_true;
            slot.was_true = now_true;
            if fire {
                if slot.predicate.firing == Firing::Once {
                    slot.armed = false;
                }
                (slot.predicate.trigger)(ctx, table);
                fired.0 |= 1 << i;
            }
        }
        fired
    }
}
