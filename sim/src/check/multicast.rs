//! Derecho's atomic multicast and its view changes (§3.4), checked on
//! what members deliver and the views they install:
//!
//! * **stability**: outside a view change a member delivers message `k`
//!   of a sender only once every member of its view has received it
//!   (some incarnation of each member took it from its ring before the
//!   delivery); a message delivered while an epoch ends (inside the
//!   ragged trim) was received by every member of the next view;
//! * **integrity**: what is delivered is what the sender sent, under the
//!   epoch and index it was sent with;
//! * **total order**: every member of one view (one digest: epoch,
//!   members, incarnations) delivers the same sequence: each member's
//!   sequence is a prefix of the longest one;
//! * **round robin, no gaps or duplicates**: within a member's sequence of
//!   one epoch, (index, sender) strictly grows, and no message a sender
//!   sent between two of its delivered ones is skipped;
//! * **virtual synchrony**: every member that installs the view after
//!   epoch `e` delivered the same sequence in `e`, all of them install
//!   the same next view (no split brain), under the same trim, and nobody
//!   delivered in `e` a message outside that trim.
//!
//! Members are identified by (member, incarnation): a restarted process is
//! a new one.

use super::Violation;
use std::collections::{BTreeMap, HashMap};

type Proc = (usize, u64);
/// (sender, sender's incarnation, epoch, index).
type MsgId = (usize, u64, u64, u64);

/// How an epoch ended, as its first installer reported it.
#[derive(Debug)]
struct Ended {
    sequence: Vec<MsgId>,
    next_digest: u64,
    next_view: u64,
    trim: Vec<u64>,
    by: Proc,
}

/// The multicast history of a run.
#[derive(Debug, Default)]
pub struct McastOrder {
    /// Data messages sent, per sender process: (epoch, index) → payload.
    sent: HashMap<Proc, BTreeMap<(u64, u64), Vec<u8>>>,
    /// Per receiving process, per (sender process, epoch): messages
    /// received.
    received: HashMap<Proc, HashMap<(Proc, u64), u64>>,
    /// Per group (digest): the longest delivered sequence.
    canonical: HashMap<u64, Vec<MsgId>>,
    /// Per delivering process: its group and sequence in it so far.
    delivered: HashMap<Proc, (u64, Vec<MsgId>)>,
    /// Per ended group (digest): how it ended.
    ended: HashMap<u64, Ended>,
    /// Messages delivered while an epoch ended, to check at the install.
    /// Per process.
    in_trim: HashMap<Proc, Vec<MsgId>>,
    /// Data messages sent and delivered (all processes), for reports.
    pub sent_total: u64,
    /// See `sent_total`.
    pub delivered_total: u64,
    /// Views installed after a view change (all processes).
    pub installs: u64,
}

/// One delivery as a member reported it.
#[derive(Clone, Copy, Debug)]
pub struct Delivered<'a> {
    /// The delivering process.
    pub member: usize,
    /// Its incarnation.
    pub incarnation: u64,
    /// Its view (the digest of its epoch, members and incarnations).
    pub digest: u64,
    /// The view's members (a bit per member id).
    pub view: u64,
    /// Delivered while the epoch ended (inside the decided trim).
    pub ending: bool,
    /// The sender.
    pub sender: usize,
    /// The sender's incarnation.
    pub sender_incarnation: u64,
    /// The epoch.
    pub epoch: u64,
    /// The index in the sender's stream of that epoch.
    pub index: u64,
    /// The payload.
    pub payload: &'a [u8],
}

/// A member installed the view after an epoch.
#[derive(Clone, Debug)]
pub struct Installed {
    /// The installing process.
    pub member: usize,
    /// Its incarnation.
    pub incarnation: u64,
    /// The view that ended (digest).
    pub ended_digest: u64,
    /// The new view (digest) and its members.
    pub digest: u64,
    /// See `digest`.
    pub view: u64,
    /// The trim it ended with (per sender).
    pub trim: Vec<u64>,
    /// The member the next view adds (a new process: it received nothing
    /// of the ended epoch).
    pub joiner: Option<usize>,
}

fn v(invariant: &'static str, time_ns: u64, detail: String) -> Violation {
    Violation {
        invariant,
        time_ns,
        detail,
    }
}

fn members_of(mask: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |m| mask & (1 << m) != 0)
}

impl McastOrder {
    /// A history.
    pub fn new() -> McastOrder {
        McastOrder::default()
    }

    /// `sender` (of `incarnation`) sent a data message under `index` in
    /// `epoch`.
    pub fn sent(
        &mut self,
        sender: usize,
        incarnation: u64,
        epoch: u64,
        index: u64,
        payload: &[u8],
    ) {
        self.sent_total += 1;
        self.sent
            .entry((sender, incarnation))
            .or_default()
            .insert((epoch, index), payload.to_vec());
    }

    /// `member` (of `incarnation`) has received `count` messages of
    /// `sender` (of `sender_incarnation`) in `epoch` by now.
    pub fn received(
        &mut self,
        member: usize,
        incarnation: u64,
        sender: usize,
        sender_incarnation: u64,
        epoch: u64,
        count: u64,
    ) {
        let c = self
            .received
            .entry((member, incarnation))
            .or_default()
            .entry(((sender, sender_incarnation), epoch))
            .or_default();
        *c = (*c).max(count);
    }

    /// Whether some incarnation of `member` received `msg`.
    fn received_by(&self, member: usize, msg: MsgId) -> bool {
        self.received.iter().any(|(&(m, _), per_sender)| {
            m == member
                && per_sender
                    .get(&((msg.0, msg.1), msg.2))
                    .is_some_and(|&c| c > msg.3)
        })
    }

    /// A delivery; returns the violations it shows.
    pub fn delivered(&mut self, time_ns: u64, d: Delivered<'_>) -> Vec<Violation> {
        self.delivered_total += 1;
        let mut out = Vec::new();
        let msg: MsgId = (d.sender, d.sender_incarnation, d.epoch, d.index);
        let proc = (d.member, d.incarnation);
        let who = format!("node {} (incarnation {})", d.member, d.incarnation);
        let what = format!(
            "message {} of node {} (incarnation {}) in epoch {}",
            d.index, d.sender, d.sender_incarnation, d.epoch
        );
        if d.ending {
            self.in_trim.entry(proc).or_default().push(msg);
        } else {
            let missing: Vec<usize> = members_of(d.view)
                .filter(|&m| !self.received_by(m, msg))
                .collect();
            if !missing.is_empty() {
                out.push(v(
                    "multicast delivers only stable messages",
                    time_ns,
                    format!("{who} delivered {what}, which nodes {missing:?} had not received"),
                ));
            }
        }
        let sent = self.sent.get(&(d.sender, d.sender_incarnation));
        match sent.and_then(|s| s.get(&(d.epoch, d.index))) {
            Some(p) if p.as_slice() == d.payload => {}
            Some(_) => out.push(v(
                "multicast delivers what was sent",
                time_ns,
                format!("{who} delivered {what} with another payload"),
            )),
            None => out.push(v(
                "multicast delivers what was sent",
                time_ns,
                format!("{who} delivered {what}, which was never sent"),
            )),
        }
        let (digest, seq) = self.delivered.entry(proc).or_insert((d.digest, Vec::new()));
        if *digest != d.digest {
            out.push(v(
                "multicast total order",
                time_ns,
                format!("{who} delivered in another view without installing it"),
            ));
            *digest = d.digest;
            seq.clear();
        }
        if let Some(&(ls, _, _, lk)) = seq.last() {
            if (d.index, d.sender) <= (lk, ls) {
                out.push(v(
                    "multicast round-robin order",
                    time_ns,
                    format!("{who} delivered {what} after message {lk} of node {ls}"),
                ));
            }
        }
        let previous = seq
            .iter()
            .rev()
            .find(|m| (m.0, m.1, m.2) == (msg.0, msg.1, msg.2))
            .map(|m| m.3);
        if let Some(sent) = sent {
            let from = previous.map_or(0, |p| p + 1);
            if let Some((&(_, gap), _)) = sent.range((d.epoch, from)..(d.epoch, d.index)).next() {
                out.push(v(
                    "multicast delivers every message of a sender, in order",
                    time_ns,
                    format!("{who} delivered {what} but skipped message {gap} of that sender"),
                ));
            }
        }
        let position = seq.len();
        seq.push(msg);
        let canonical = self.canonical.entry(*digest).or_default();
        if position < canonical.len() {
            if canonical[position] != msg {
                let other = canonical[position];
                out.push(v(
                    "multicast total order",
                    time_ns,
                    format!(
                        "{who} delivered {what} at position {position}, where another member delivered message {} of node {}",
                        other.3, other.0
                    ),
                ));
            }
        } else {
            canonical.push(msg);
        }
        out
    }

    /// A member installed the view after its epoch; returns the
    /// violations it shows (virtual synchrony).
    pub fn installed(&mut self, time_ns: u64, i: Installed) -> Vec<Violation> {
        self.installs += 1;
        let mut out = Vec::new();
        let proc = (i.member, i.incarnation);
        let who = format!("node {} (incarnation {})", i.member, i.incarnation);
        let sequence = match self.delivered.get_mut(&proc) {
            Some((digest, seq)) if *digest == i.ended_digest => {
                let s = core::mem::take(seq);
                *digest = i.digest;
                s
            }
            Some((digest, seq)) => {
                // Nothing delivered in the ended view (what it holds is
                // of an earlier one, checked when that one ended).
                *digest = i.digest;
                seq.clear();
                Vec::new()
            }
            None => {
                self.delivered.insert(proc, (i.digest, Vec::new()));
                Vec::new()
            }
        };
        for &m in &sequence {
            let (s, e, k) = (m.0, m.2, m.3);
            if i.trim.get(s).is_none_or(|&c| k >= c) {
                out.push(v(
                    "multicast delivers nothing outside the trim",
                    time_ns,
                    format!(
                        "{who} delivered message {k} of node {s} in epoch {e}, outside the trim {:?} it ended the epoch with",
                        i.trim
                    ),
                ));
            }
        }
        for m in self.in_trim.remove(&proc).unwrap_or_default() {
            let missing: Vec<usize> = members_of(i.view)
                .filter(|&r| Some(r) != i.joiner && !self.received_by(r, m))
                .collect();
            if !missing.is_empty() {
                out.push(v(
                    "multicast delivers only stable messages",
                    time_ns,
                    format!(
                        "{who} delivered message {} of node {} inside the trim, which nodes {missing:?} of the next view had not received",
                        m.3, m.0
                    ),
                ));
            }
        }
        // Whatever any member delivered in the epoch (the longest
        // sequence of that view) is delivered by every member that goes
        // on: a delivered message was stable, so it is inside any trim.
        let longest = self.canonical.get(&i.ended_digest).map_or(0, Vec::len);
        if longest > sequence.len() {
            out.push(v(
                "multicast virtual synchrony",
                time_ns,
                format!(
                    "{who} ended the epoch after {} messages, where a member had delivered {longest}",
                    sequence.len()
                ),
            ));
        }
        match self.ended.get(&i.ended_digest) {
            None => {
                self.ended.insert(
                    i.ended_digest,
                    Ended {
                        sequence,
                        next_digest: i.digest,
                        next_view: i.view,
                        trim: i.trim,
                        by: proc,
                    },
                );
            }
            Some(e) => {
                let other = format!("node {} (incarnation {})", e.by.0, e.by.1);
                if e.next_digest != i.digest {
                    out.push(v(
                        "multicast installs one view after an epoch",
                        time_ns,
                        format!(
                            "{who} installed view {:#x} after the epoch where {other} installed view {:#x}",
                            i.view, e.next_view
                        ),
                    ));
                }
                if e.trim != i.trim {
                    out.push(v(
                        "multicast virtual synchrony",
                        time_ns,
                        format!(
                            "{who} ended the epoch with trim {:?}, {other} with {:?}",
                            i.trim, e.trim
                        ),
                    ));
                }
                if e.sequence != sequence {
                    let at = e
                        .sequence
                        .iter()
                        .zip(&sequence)
                        .position(|(a, b)| a != b)
                        .unwrap_or(e.sequence.len().min(sequence.len()));
                    out.push(v(
                        "multicast virtual synchrony",
                        time_ns,
                        format!(
                            "{who} delivered {} messages in the ended epoch, {other} {}; they differ from position {at}",
                            sequence.len(),
                            e.sequence.len()
                        ),
                    ));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(member: usize, sender: usize, index: u64, payload: &[u8]) -> Delivered<'_> {
        Delivered {
            member,
            incarnation: 1,
            digest: 7,
            view: 0b11,
            ending: false,
            sender,
            sender_incarnation: 1,
            epoch: 0,
            index,
            payload,
        }
    }

    fn group() -> McastOrder {
        let mut h = McastOrder::new();
        h.sent(0, 1, 0, 0, b"a");
        h.sent(1, 1, 0, 0, b"b");
        h.sent(0, 1, 0, 2, b"c");
        for m in 0..2 {
            for s in 0..2 {
                h.received(m, 1, s, 1, 0, 3);
            }
        }
        h
    }

    #[test]
    fn the_same_sequence_everywhere_passes() {
        let mut h = group();
        for m in 0..2 {
            assert!(h.delivered(1, d(m, 0, 0, b"a")).is_empty());
            assert!(h.delivered(2, d(m, 1, 0, b"b")).is_empty());
            assert!(h.delivered(3, d(m, 0, 2, b"c")).is_empty());
        }
    }

    #[test]
    fn delivering_what_a_member_has_not_received_is_caught() {
        let mut h = McastOrder::new();
        h.sent(0, 1, 0, 0, b"a");
        h.received(0, 1, 0, 1, 0, 1);
        let v = h.delivered(1, d(0, 0, 0, b"a"));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].invariant, "multicast delivers only stable messages");
        // Another incarnation of node 1 received it: stable.
        h.received(1, 5, 0, 1, 0, 1);
        assert!(h.delivered(2, d(1, 0, 0, b"a")).is_empty());
    }

    #[test]
    fn a_changed_or_invented_payload_is_caught() {
        let mut h = group();
        let v = h.delivered(1, d(0, 0, 0, b"x"));
        assert!(v
            .iter()
            .any(|v| v.invariant == "multicast delivers what was sent"));
        let mut h = group();
        let v = h.delivered(1, d(0, 1, 1, b"b"));
        assert!(v.iter().any(|v| v.detail.contains("never sent")));
    }

    #[test]
    fn two_members_that_disagree_on_the_order_are_caught() {
        let mut h = group();
        assert!(h.delivered(1, d(0, 0, 0, b"a")).is_empty());
        assert!(h.delivered(1, d(0, 1, 0, b"b")).is_empty());
        let v = h.delivered(2, d(1, 1, 0, b"b"));
        assert!(
            v.iter().any(|v| v.invariant == "multicast total order"),
            "{v:?}"
        );
    }

    #[test]
    fn going_back_in_round_robin_order_is_caught() {
        let mut h = group();
        assert!(h.delivered(1, d(0, 1, 0, b"b")).is_empty());
        let v = h.delivered(2, d(0, 0, 0, b"a"));
        assert!(v
            .iter()
            .any(|v| v.invariant == "multicast round-robin order"));
    }

    #[test]
    fn skipping_a_message_of_a_sender_is_caught() {
        let mut h = group();
        let v = h.delivered(1, d(0, 0, 2, b"c"));
        assert!(
            v.iter()
                .any(|v| v.invariant == "multicast delivers every message of a sender, in order"),
            "{v:?}"
        );
    }

    #[test]
    fn separate_groups_have_separate_orders() {
        let mut h = group();
        assert!(h.delivered(1, d(0, 0, 0, b"a")).is_empty());
        let mut other = d(1, 1, 0, b"b");
        other.digest = 8;
        other.incarnation = 2;
        assert!(h.delivered(2, other).is_empty());
    }

    /// Nodes 0 and 1 end the view of digest 7 (members 0, 1, 2) and
    /// install digest 9 (members 0, 1).
    fn install(member: usize, trim: Vec<u64>, digest: u64) -> Installed {
        Installed {
            member,
            incarnation: 1,
            ended_digest: 7,
            digest,
            view: 0b011,
            trim,
            joiner: None,
        }
    }

    fn three() -> McastOrder {
        let mut h = McastOrder::new();
        h.sent(0, 1, 0, 0, b"a");
        h.sent(1, 1, 0, 0, b"b");
        h.sent(2, 1, 0, 0, b"c");
        for m in 0..3 {
            for s in 0..3 {
                h.received(m, 1, s, 1, 0, 1);
            }
        }
        h
    }

    fn d3(member: usize, sender: usize, payload: &[u8]) -> Delivered<'_> {
        Delivered {
            view: 0b111,
            ..d(member, sender, 0, payload)
        }
    }

    #[test]
    fn members_that_end_an_epoch_alike_pass() {
        let mut h = three();
        for m in 0..2 {
            assert!(h.delivered(1, d3(m, 0, b"a")).is_empty());
            assert!(h.delivered(2, d3(m, 1, b"b")).is_empty());
            assert!(h.installed(3, install(m, vec![1, 1, 0], 9)).is_empty());
        }
        assert_eq!(h.installs, 2);
    }

    #[test]
    fn members_that_end_an_epoch_with_different_sequences_are_caught() {
        let mut h = three();
        assert!(h.delivered(1, d3(0, 0, b"a")).is_empty());
        assert!(h.delivered(2, d3(0, 1, b"b")).is_empty());
        assert!(h.installed(3, install(0, vec![1, 1, 0], 9)).is_empty());
        // Node 1 delivered a prefix only (a trim acted on alone).
        assert!(h.delivered(1, d3(1, 0, b"a")).is_empty());
        let v = h.installed(3, install(1, vec![1, 0, 0], 9));
        assert!(
            v.iter()
                .any(|v| v.invariant == "multicast virtual synchrony"
                    && v.detail.contains("position 1")),
            "{v:?}"
        );
    }

    #[test]
    fn ending_an_epoch_without_what_another_member_delivered_is_caught() {
        let mut h = three();
        // Node 2 delivered two messages, then crashed; node 0 ends the
        // epoch with one.
        assert!(h.delivered(1, d3(2, 0, b"a")).is_empty());
        assert!(h.delivered(2, d3(2, 1, b"b")).is_empty());
        assert!(h.delivered(3, d3(0, 0, b"a")).is_empty());
        let v = h.installed(4, install(0, vec![1, 0, 0], 9));
        assert!(
            v.iter()
                .any(|v| v.invariant == "multicast virtual synchrony"
                    && v.detail.contains("had delivered 2")),
            "{v:?}"
        );
    }

    #[test]
    fn two_next_views_after_one_epoch_are_caught() {
        let mut h = three();
        assert!(h.installed(3, install(0, vec![0, 0, 0], 9)).is_empty());
        let mut other = install(1, vec![0, 0, 0], 10);
        other.view = 0b111;
        let v = h.installed(3, other);
        assert!(
            v.iter()
                .any(|v| v.invariant == "multicast installs one view after an epoch"),
            "{v:?}"
        );
    }

    #[test]
    fn a_delivery_outside_the_trim_is_caught() {
        let mut h = three();
        assert!(h.delivered(1, d3(0, 0, b"a")).is_empty());
        let v = h.installed(3, install(0, vec![0, 1, 1], 9));
        assert!(
            v.iter()
                .any(|v| v.invariant == "multicast delivers nothing outside the trim"),
            "{v:?}"
        );
    }

    #[test]
    fn a_trim_delivery_the_next_view_did_not_receive_is_caught() {
        let mut h = McastOrder::new();
        h.sent(2, 1, 0, 0, b"c");
        // Only node 0 (and the sender) received it.
        h.received(0, 1, 2, 1, 0, 1);
        h.received(2, 1, 2, 1, 0, 1);
        let mut e = d3(0, 2, b"c");
        e.ending = true;
        assert!(h.delivered(1, e).is_empty(), "checked at the install");
        let v = h.installed(2, install(0, vec![0, 0, 1], 9));
        assert!(
            v.iter()
                .any(|v| v.invariant == "multicast delivers only stable messages"
                    && v.detail.contains("[1]")),
            "{v:?}"
        );
    }

    #[test]
    fn delivering_in_a_new_view_without_installing_it_is_caught() {
        let mut h = three();
        assert!(h.delivered(1, d3(0, 0, b"a")).is_empty());
        let mut later = d3(0, 1, b"b");
        later.digest = 9;
        let v = h.delivered(2, later);
        assert!(
            v.iter().any(|v| v.detail.contains("without installing")),
            "{v:?}"
        );
    }
}

/// Derecho's persistent mode: a message is delivered only once it is on
/// disk at every member whose row counted it (every member of its view,
/// or for a delivery inside a ragged trim, every member of the ended view
/// that the next view keeps). Fed each member's completed syncs (what a
/// crash cannot take back) and every delivery.
#[derive(Default)]
pub struct McastDurable {
    /// (member, epoch, sender) → messages on that member's disk.
    durable: BTreeMap<(usize, u64, usize), u64>,
}

impl McastDurable {
    /// A sync of `member` completed: per sender, the first `counts[s]`
    /// messages of `epoch` are on its disk.
    pub fn synced(&mut self, member: usize, epoch: u64, counts: &[u64]) {
        for (s, &c) in counts.iter().enumerate() {
            if c > 0 {
                let d = self.durable.entry((member, epoch, s)).or_insert(0);
                *d = (*d).max(c);
            }
        }
    }

    /// `member` delivered message `index` of `sender` in `epoch`; every
    /// member in `required` (a bit per member) must have it on disk.
    pub fn delivered(
        &self,
        time_ns: u64,
        member: usize,
        epoch: u64,
        sender: usize,
        index: u64,
        required: u64,
    ) -> Option<Violation> {
        let missing: Vec<usize> = members_of(required)
            .filter(|&m| {
                self.durable
                    .get(&(m, epoch, sender))
                    .is_none_or(|&c| c <= index)
            })
            .collect();
        (!missing.is_empty()).then(|| {
            v(
                "multicast delivers only persisted messages",
                time_ns,
                format!(
                    "node {member} delivered message {index} of node {sender} in epoch {epoch}, \
                     not on the disk of node(s) {missing:?}"
                ),
            )
        })
    }
}

#[cfg(test)]
mod durable_tests {
    use super::McastDurable;

    #[test]
    fn a_delivery_before_every_member_synced_it_is_a_violation() {
        let mut d = McastDurable::default();
        d.synced(0, 3, &[2, 5, 0]);
        d.synced(1, 3, &[2, 4, 0]);
        // Message 4 of node 1: on node 0's disk, not yet on node 1's.
        let v = d.delivered(10, 0, 3, 1, 4, 0b011).expect("a violation");
        assert!(v.detail.contains("node(s) [1]"), "{}", v.detail);
        // Message 3 is on both.
        assert!(d.delivered(10, 0, 3, 1, 3, 0b011).is_none());
        // Another epoch's syncs do not count; a member never synced is
        // missing.
        assert!(d.delivered(10, 0, 4, 1, 0, 0b001).is_some());
        assert!(d.delivered(10, 0, 3, 0, 1, 0b111).is_some());
        // Syncs only add: an older mark after a newer one keeps the newer.
        d.synced(1, 3, &[1, 1, 0]);
        assert!(d.delivered(10, 0, 3, 1, 3, 0b011).is_none());
        // Outside the required members nothing is asked.
        assert!(d.delivered(10, 0, 3, 1, 4, 0b001).is_none());
    }
}

/// Derecho's total restart (persistent mode): one message per sequence
/// number of an epoch, whoever delivered it and whenever (before a total
/// failure, from a log's tail after it, or in the restarted group), and a
/// restart rolls back nothing delivered before the failure: the epoch it
/// restarts from is the last anyone delivered in, and its cut reaches
/// every sequence number delivered in it.
#[derive(Default)]
pub struct McastRestarts {
    /// (epoch, sequence number) → (sender, index, payload) delivered.
    at: BTreeMap<(u64, u64), (usize, u64, Vec<u8>)>,
    /// Per epoch, the sequence numbers delivered (`0 .. most`), so far.
    most: BTreeMap<u64, u64>,
    /// `most` as the last total failure found it.
    before_failure: Option<BTreeMap<u64, u64>>,
    /// Restart cuts delivered (one per member that restarted into the
    /// restarted group).
    pub restarts: u64,
}

impl McastRestarts {
    /// `member` delivered message `index` of `sender` as sequence number
    /// `seq` of `epoch`.
    #[allow(clippy::too_many_arguments)]
    pub fn delivered(
        &mut self,
        time_ns: u64,
        member: usize,
        epoch: u64,
        seq: u64,
        sender: usize,
        index: u64,
        payload: &[u8],
    ) -> Option<Violation> {
        let most = self.most.entry(epoch).or_insert(0);
        *most = (*most).max(seq + 1);
        match self.at.get(&(epoch, seq)) {
            None => {
                self.at
                    .insert((epoch, seq), (sender, index, payload.to_vec()));
                None
            }
            Some((s, k, p)) if (*s, *k, p.as_slice()) == (sender, index, payload) => None,
            Some((s, k, _)) => Some(v(
                "multicast one message per sequence number",
                time_ns,
                format!(
                    "node {member} delivered message {index} of node {sender} as sequence number \
                     {seq} of epoch {epoch}, where message {k} of node {s} was delivered"
                ),
            )),
        }
    }

    /// Every multicast member's process died.
    pub fn crashed_all(&mut self) {
        self.before_failure = Some(self.most.clone());
    }

    /// `member` restarts from epoch `epoch`'s cut, which ends at sequence
    /// number `end`.
    pub fn restarted(
        &mut self,
        time_ns: u64,
        member: usize,
        epoch: u64,
        end: u64,
    ) -> Vec<Violation> {
        self.restarts += 1;
        let Some(before) = &self.before_failure else {
            return Vec::new();
        };
        before
            .iter()
            .filter(|&(&e, &most)| (e > epoch && most > 0) || (e == epoch && most > end))
            .map(|(&e, &most)| {
                v(
                    "multicast total restart rolls back nothing",
                    time_ns,
                    format!(
                        "node {member} restarted from epoch {epoch} cut at sequence number {end}, \
                         but sequence numbers up to {} of epoch {e} were delivered before the failure",
                        most - 1
                    ),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod restart_tests {
    use super::McastRestarts;

    #[test]
    fn two_messages_at_one_sequence_number_are_a_violation() {
        let mut r = McastRestarts::default();
        assert!(r.delivered(1, 0, 2, 5, 1, 1, b"a").is_none());
        assert!(
            r.delivered(2, 1, 2, 5, 1, 1, b"a").is_none(),
            "the same message"
        );
        assert!(
            r.delivered(3, 1, 3, 5, 0, 1, b"b").is_none(),
            "another epoch"
        );
        let v = r.delivered(4, 2, 2, 5, 0, 2, b"a").expect("a violation");
        assert_eq!(v.invariant, "multicast one message per sequence number");
        assert!(
            r.delivered(5, 2, 2, 5, 1, 1, b"x").is_some(),
            "another payload"
        );
    }

    #[test]
    fn a_restart_cut_short_of_what_was_delivered_is_a_violation() {
        let mut r = McastRestarts::default();
        for seq in 0..8 {
            assert!(r.delivered(1, 0, 4, seq, 0, seq, b"m").is_none());
        }
        assert!(r.delivered(1, 1, 3, 0, 0, 0, b"m").is_none());
        // Before any failure a restart (a replica's alone) is not judged.
        assert!(r.restarted(2, 0, 4, 0).is_empty());
        r.crashed_all();
        // Deliveries after the failure do not move what it found.
        assert!(r.delivered(3, 0, 5, 0, 0, 0, b"m").is_none());
        assert!(r.restarted(4, 1, 4, 8).is_empty(), "a cut at 8 keeps 0..8");
        assert!(r.restarted(4, 1, 4, 9).is_empty());
        let short = r.restarted(5, 2, 4, 7);
        assert_eq!(short.len(), 1);
        assert!(
            short[0].detail.contains("up to 7 of epoch 4"),
            "{}",
            short[0].detail
        );
        let earlier = r.restarted(6, 2, 3, 1);
        assert_eq!(earlier.len(), 1, "epoch 4 was delivered in: {earlier:?}");
        assert_eq!(r.restarts, 5);
    }
}
