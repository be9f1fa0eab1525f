//! Derecho's atomic multicast (§3.4), checked on what members deliver:
//!
//! * **stability**: a member delivers message `k` of a sender only once
//!   every member of the group has received it (some incarnation of each
//!   member took it from its ring before the delivery);
//! * **integrity**: what is delivered is what the sender sent, under the
//!   index it was sent with;
//! * **total order**: every member of one group (one set of pinned
//!   incarnations) delivers the same sequence: each member's sequence is a
//!   prefix of the longest one;
//! * **round robin, no gaps or duplicates**: within a member's sequence,
//!   (index, sender) strictly grows, and no message a sender sent between
//!   two of its delivered ones is skipped.
//!
//! Members are identified by (member, incarnation): a restarted process is
//! a new one.

use super::Violation;
use std::collections::{BTreeMap, HashMap};

type Proc = (usize, u64);
/// (sender, sender's incarnation, index).
type MsgId = (usize, u64, u64);

/// The multicast history of a run.
#[derive(Debug, Default)]
pub struct McastOrder {
    members: usize,
    /// Data messages sent, per sender process: index → payload.
    sent: HashMap<Proc, BTreeMap<u64, Vec<u8>>>,
    /// Per receiving process, per sender process: messages received.
    received: HashMap<Proc, HashMap<Proc, u64>>,
    /// Per group (digest): the longest delivered sequence.
    canonical: HashMap<u64, Vec<MsgId>>,
    /// Per delivering process: its group and sequence so far.
    delivered: HashMap<Proc, (u64, Vec<MsgId>)>,
    /// Data messages sent and delivered (all processes), for reports.
    pub sent_total: u64,
    /// See `sent_total`.
    pub delivered_total: u64,
}

/// One delivery as a member reported it.
#[derive(Clone, Copy, Debug)]
pub struct Delivered<'a> {
    /// The delivering process.
    pub member: usize,
    /// Its incarnation.
    pub incarnation: u64,
    /// Its group (the digest of the incarnations it pinned).
    pub digest: u64,
    /// The sender.
    pub sender: usize,
    /// The sender's incarnation.
    pub sender_incarnation: u64,
    /// The index in the sender's stream.
    pub index: u64,
    /// The payload.
    pub payload: &'a [u8],
}

impl McastOrder {
    /// A history for a group of `members`.
    pub fn new(members: usize) -> McastOrder {
        McastOrder {
            members,
            ..McastOrder::default()
        }
    }

    /// `sender` (of `incarnation`) sent a data message under `index`.
    pub fn sent(&mut self, sender: usize, incarnation: u64, index: u64, payload: &[u8]) {
        self.sent_total += 1;
        self.sent
            .entry((sender, incarnation))
            .or_default()
            .insert(index, payload.to_vec());
    }

    /// `member` (of `incarnation`) has received `count` messages of
    /// `sender` (of `sender_incarnation`) by now.
    pub fn received(
        &mut self,
        member: usize,
        incarnation: u64,
        sender: usize,
        sender_incarnation: u64,
        count: u64,
    ) {
        let c = self
            .received
            .entry((member, incarnation))
            .or_default()
            .entry((sender, sender_incarnation))
            .or_default();
        *c = (*c).max(count);
    }

    /// Whether some incarnation of `member` received `msg`.
    fn received_by(&self, member: usize, msg: MsgId) -> bool {
        self.received.iter().any(|(&(m, _), per_sender)| {
            m == member && per_sender.get(&(msg.0, msg.1)).is_some_and(|&c| c > msg.2)
        })
    }

    /// A delivery; returns the violations it shows.
    pub fn delivered(&mut self, time_ns: u64, d: Delivered<'_>) -> Vec<Violation> {
        self.delivered_total += 1;
        let mut out = Vec::new();
        let msg: MsgId = (d.sender, d.sender_incarnation, d.index);
        let who = format!("node {} (incarnation {})", d.member, d.incarnation);
        let what = format!(
            "message {} of node {} (incarnation {})",
            d.index, d.sender, d.sender_incarnation
        );
        let v = |invariant: &'static str, detail: String| Violation {
            invariant,
            time_ns,
            detail,
        };
        let missing: Vec<usize> = (0..self.members)
            .filter(|&m| !self.received_by(m, msg))
            .collect();
        if !missing.is_empty() {
            out.push(v(
                "multicast delivers only stable messages",
                format!("{who} delivered {what}, which nodes {missing:?} had not received"),
            ));
        }
        let sent = self.sent.get(&(d.sender, d.sender_incarnation));
        match sent.and_then(|s| s.get(&d.index)) {
            Some(p) if p.as_slice() == d.payload => {}
            Some(_) => out.push(v(
                "multicast delivers what was sent",
                format!("{who} delivered {what} with another payload"),
            )),
            None => out.push(v(
                "multicast delivers what was sent",
                format!("{who} delivered {what}, which was never sent"),
            )),
        }
        let (digest, seq) = self
            .delivered
            .entry((d.member, d.incarnation))
            .or_insert((d.digest, Vec::new()));
        if *digest != d.digest {
            out.push(v(
                "multicast total order",
                format!("{who} delivered in two groups"),
            ));
        }
        if let Some(&(ls, _, lk)) = seq.last() {
            if (d.index, d.sender) <= (lk, ls) {
                out.push(v(
                    "multicast round-robin order",
                    format!("{who} delivered {what} after message {lk} of node {ls}"),
                ));
            }
        }
        let previous = seq
            .iter()
            .rev()
            .find(|m| (m.0, m.1) == (msg.0, msg.1))
            .map(|m| m.2);
        if let Some(sent) = sent {
            let from = previous.map_or(0, |p| p + 1);
            if let Some((&gap, _)) = sent.range(from..d.index).next() {
                out.push(v(
                    "multicast delivers every message of a sender, in order",
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
                    format!(
                        "{who} delivered {what} at position {position}, where another member delivered message {} of node {}",
                        other.2, other.0
                    ),
                ));
            }
        } else {
            canonical.push(msg);
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
            sender,
            sender_incarnation: 1,
            index,
            payload,
        }
    }

    fn group() -> McastOrder {
        let mut h = McastOrder::new(2);
        h.sent(0, 1, 0, b"a");
        h.sent(1, 1, 0, b"b");
        h.sent(0, 1, 2, b"c");
        for m in 0..2 {
            for s in 0..2 {
                h.received(m, 1, s, 1, 3);
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
        let mut h = McastOrder::new(2);
        h.sent(0, 1, 0, b"a");
        h.received(0, 1, 0, 1, 1);
        let v = h.delivered(1, d(0, 0, 0, b"a"));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].invariant, "multicast delivers only stable messages");
        // Another incarnation of node 1 received it: stable.
        h.received(1, 5, 0, 1, 1);
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
}
