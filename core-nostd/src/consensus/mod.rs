//! One-sided Paxos through RDMA compare-and-swap: uKharon's consensus
//! engine (Guerraoui et al., §5 and Appendix A), the first step of
//! membership and leases (issue 14).
//!
//! # The protocol
//!
//! Acceptors are memory only: each exposes one 8-byte word per slot of a
//! ring (`min_proposal | accepted_proposal | lap | accepted_value`, see
//! [`word`] and "Recycled slots" below) and, per proposer, a proposal area
//! of one record per word (see [`record`]).
//! Proposers run Paxos's two phases against those words with the
//! CAS-based RPC of Algorithm 1: know (READ) or guess the acceptor's
//! state, apply the acceptor's rule locally ([`word::prepare_step`],
//! [`word::accept_step`]), and CAS the state from what was expected to
//! what the rule produces. A CAS that finds another word changes nothing
//! (Lemma A.2); its result is a fresh READ of the word.
//!
//! * **Prepare** (proposal `b`): at every acceptor CAS `w → w` with
//!   `min_proposal = b`, allowed when `b > w.min_proposal`. A majority of
//!   landed CASes is a majority of promises; the value accepted under the
//!   highest `accepted_proposal` among them is adopted (its record is
//!   READ from an acceptor that reported it, unless it is our own).
//! * **Accept**: WRITE the record `(slot, b, value)` into our proposal area
//!   at the acceptor, then, on the same reliable connection, CAS
//!   `w → (b, b, ref)`, allowed when `b ≥ w.min_proposal`. RC is FIFO, so
//!   an acceptor whose word names our record holds the record. A majority
//!   of landed accept CASes decides.
//! * An acceptor whose word forbids our proposal nacks: the attempt
//!   aborts and is retried with a proposal above everything seen, after a
//!   randomized backoff that doubles per abort (from `backoff_min_ns` to
//!   `backoff_max_ns`). A CAS that found a word that still allows our
//!   proposal (our guess was stale) is tried once more with that word.
//! * **Predicted state** (A.5): the leader guesses instead of READing: for
//!   a fresh slot, the empty word on the ring's first lap and, a lap on,
//!   the word its own decision of the slot a lap before left; for the
//!   first slot after it took over, the word the previous leader's
//!   pre-preparation left (its first proposal promised, nothing
//!   accepted). A right guess saves the READ; a wrong one costs the CAS,
//!   whose result is the READ (and no try). Other proposers READ first.
//!   Words of this member's own acceptor are read in place.
//! * **Pre-preparation** (§5.3.1): while slot `k` is in its accept phase,
//!   the leader prepares `k + 1` (and keeps the frontier prepared while
//!   idle), so a stable leader decides a proposal in one round trip: one
//!   record WRITE and one CAS per acceptor, pipelined.
//! * **Leader**: the lowest-indexed proposer not reported down
//!   ([`Engine::handle_peer_down`](crate::engine::Engine::handle_peer_down)). Any proposer may propose; a
//!   non-leader waits a randomized backoff first. Two leaders (a partial
//!   partition) cannot break safety, only slow each other down.
//! * **Learning**: any member READs a slot's word at every acceptor; a
//!   value accepted by a majority under one proposal is decided, and its
//!   record is READ ([`ConsensusEngine::learn`]).
//!
//! ## Why adopting a later record of the same proposer is safe
//!
//! A proposer has one record per slot at each acceptor, overwritten by
//! each of its accepts (and, a lap on, by those of a later slot: a record
//! names its slot, and one of another slot is never taken), so the record behind `(owner, b)` may by now hold
//! `owner`'s later proposal `c > b`. Such a record is still adoptable:
//! a record is written only once its proposal's prepare completed, with
//! the value Paxos allows there, so its value is safe at `c`. Let `b` be
//! the highest proposal accepted among our majority `Q`, which promised
//! our `p`. Any value chosen under some `d < p` was chosen under `d ≤ b`
//! (a majority that accepted `d` meets `Q`, whose members accepted
//! nothing in `(b, p)`, and accept nothing below `p` any more); if
//! `d < c` then the chosen value is `c`'s value because `c`'s value is
//! safe at `c`, and `d = c` means `c = b` and the record is the one named.
//! The same argument lets a learner take a later record of the proposer
//! that owns the chosen proposal. Records naming an earlier proposal than
//! the word (a stale record) are refused; the next acceptor is asked.
//!
//! ## Recycled slots
//!
//! The slot words (and each proposer's records, and the decided records)
//! are a ring of `slot_count`: slot `s` lives in word `s mod slot_count`,
//! and the word carries the slot's *lap* `s / slot_count` (16 bits,
//! wrapping; see [`word`]). A word of an older lap holds nothing of the
//! slot asked about: a proposer takes it as the empty state of its own
//! lap and CASes from the word as it is, which recycles it. A word of a
//! newer lap means the slot is over: the proposal or learn is given up
//! with [`ConsensusEvent::Recycled`], naming the later slot seen.
//!
//! Safety does not depend on how slots are used: for the older slot, a
//! recycled word is an acceptor that answers no more (its promises and
//! accepts are gone, and nobody counts a word of another lap), and Paxos
//! is safe with any acceptor silent. A majority that promised in the old
//! lap meets every majority that accepted there in an acceptor still in
//! that lap, since laps never go back. What the caller provides is that
//! a word is recycled only once its old slot is decided: it proposes slot
//! `k` only once it knows `k − 1` decided (the view engine does), and the
//! leader pre-prepares one slot ahead, so a touched slot `s` means `s − 2`
//! is decided and, with `slot_count ≥ 4`, so is the slot a lap before. A
//! member that meets a later lap knows every slot two before the later
//! one decided, and goes on from there (what it missed may be gone).
//!
//! ## Coordinators back
//!
//! A restarted acceptor lost what it promised and accepted. Its words hold
//! an invalid word from before its memory is published, so nobody counts
//! it or CASes it, and peers ask it again as soon as it is reported back
//! ([`Engine::handle_peer_up`](crate::engine::Engine::handle_peer_up)).
//! It rejoins ([`ConsensusEngine::rejoin_own_acceptor`]) in three steps:
//!
//! 1. **Scan**: it READs every word of a majority of the *other*
//!    acceptors. A slot decided before the restart was accepted at a
//!    majority, which meets the one read in an acceptor other than
//!    itself, holding that slot's word or a later lap's: the highest slot
//!    touched there, `t`, is at least every slot decided then, so every
//!    slot it may have touched (two past a decided one, see above) is at
//!    most `bound = t + 2`.
//! 2. **Wait** until slots up to `bound` are decided (its own proposals
//!    and learning move its frontier; the others decide without it).
//! 3. **Fence**: one lap of words, ending at the frontier, is written:
//!    [`SlotWord::fenced`] where the slot is at most `bound` (every
//!    proposal refused, nothing accepted: no answer for that slot, only
//!    ever a decided one), empty beyond (slots never touched here: it
//!    answers for them as a new acceptor, and a slot among them that the
//!    others decided without it is adopted from the deciding majority's
//!    member in any majority it is in). A
//!    slot of an earlier lap meets a later lap's word there, whose slot is
//!    at most the frontier, so two before it is decided; a slot of a
//!    later lap recycles the word like any other. Then it counts again
//!    ([`ConsensusEvent::AcceptorRejoined`]).
//!
//! The failures a group tolerates count restarts until then, and a slot
//! decided with a restarted acceptor's accept may need every other member
//! of that majority to be learnt. The mutation `rejoin-without-fence`
//! (back at once with empty words) is caught by the harness.
//!
//! ## Limits (left to the wiring of issue 14)
//!
//! * Laps are 16 bits and compare by wrapping difference, so two laps
//!   2^15 or more apart are misread: a coordinator whose words no CAS
//!   touched for 2^15 laps of the ring, and a member that starts over
//!   from slot 0 (a restart, whose learner and rejoin scan count from
//!   there) once the group has gone round the ring 2^15 times. That is
//!   134 million views with the default 4096 slots, 131,072 with the
//!   smallest ring of 4 (see [`word::lap_order`]). A restarted member
//!   that learnt the current lap first would lift the second case; not
//!   built.
//! * Proposal numbers are 16 bits (as in the paper). When the next one
//!   would overflow, the engine reports
//!   [`ConsensusEvent::ProposalSpaceExhausted`]; A.6's fallback to
//!   two-sided RPCs is not implemented, so the caller must act.
//! * A member that is its own acceptor CASes its own word through the
//!   fabric (a loopback request), because a CPU atomic is not atomic with
//!   the NIC's. Every fabric serves such requests (the verbs fabric
//!   through a QP connected to itself); one that refuses them (a device
//!   that cannot connect that QP) makes the engine count that acceptor as
//!   no answer: safe, but then it does not help a majority.
//! * The engine reconnects a broken channel to an acceptor itself. It
//!   shares the control channel with the log engine, which does the same;
//!   the driver must make a reconnect of a healthy channel harmless.
//! * The two regions take the ids [`ConsensusConfig::DEFAULT_SHARED_REGION`]
//!   and [`ConsensusConfig::DEFAULT_LOCAL_REGION`] unless configured; they
//!   are not yet part of [`crate::layout::Layout::regions`].
//!
//! # Driving contract
//!
//! | kind | methods |
//! |---|---|
//! | getters | [`ConsensusEngine::decided`], [`ConsensusEngine::frontier`], [`ConsensusEngine::is_leader`], [`ConsensusEngine::status`] |
//! | inputs | [`Engine::handle_completion`](crate::engine::Engine::handle_completion), [`Engine::handle_timeout`](crate::engine::Engine::handle_timeout), [`Engine::handle_peer_down`](crate::engine::Engine::handle_peer_down), [`Engine::handle_peer_up`](crate::engine::Engine::handle_peer_up) |
//! | commands | [`ConsensusEngine::propose`], [`ConsensusEngine::learn`] |
//! | outputs | [`Engine::poll_action`](crate::engine::Engine::poll_action), [`ConsensusEngine::poll_event`], [`Engine::next_deadline`](crate::engine::Engine::next_deadline) |
//!
//! ```ignore
//! loop {
//!     let now = clock.now_ns();
//!     while let Some(c) = fabric.poll_completion() {
//!         engine.handle_completion(now, c);       // tag removed by the driver
//!     }
//!     if let Some((slot, view)) = membership.next_view() {
//!         let _ = engine.propose(now, slot, &view);
//!     }
//!     engine.handle_timeout(now);                 // backoffs, pre-preparation
//!     while let Some(action) = engine.poll_action() {
//!         fabric.execute(&action)?;
//!     }
//!     while let Some(ConsensusEvent::Decided { slot, value, .. }) = engine.poll_event() {
//!         membership.install(slot, &value);
//!     }
//!     idle_until(engine.next_deadline());
//! }
//! ```
//!
//! The rules of [`crate`]'s contract hold: drain actions and events after
//! every call, execute actions in order, and every posted work request
//! completes exactly once (error completions count as no answer from that
//! acceptor).

pub mod engine;
pub mod layout;
pub mod record;
pub mod word;

#[cfg(test)]
mod test_check;
#[cfg(test)]
mod test_harness;
#[cfg(test)]
mod tests;

pub use engine::{
    ConsensusEngine, ConsensusEvent, ConsensusStatus, LearnError, ProposeError,
    CONSENSUS_ACTION_QUEUE_CAP, CONSENSUS_EVENT_QUEUE_CAP,
};
pub use layout::{ConsensusConfig, ConsensusConfigError, ConsensusLayout};
pub use record::{Value, VALUE_BYTES_CAP};
pub use word::{ProposalSpaceExhausted, SlotWord, ValueRef, WordError};
