//! RDMC (Derecho's large-message multicast, `verbatim_core::rdmc`),
//! checked on what each member delivered:
//!
//! * **order**: per sender, a member delivers indices 0, 1, 2, … with no
//!   gap, duplicate or reordering (RDMC delivers each sender's messages in
//!   the sender's order, each once);
//! * **integrity**: the bytes delivered for `(sender, index)` are the
//!   bytes the sender sent as its message `index`;
//! * **wedge**: once a member's session is wedged (or the member crashed)
//!   it delivers nothing more (Derecho: "once wedged, RDMC ceases to
//!   report newly received messages");
//! * **liveness**: in a run without a crash, a link cut or a wedge asked
//!   by the layer above, and in any run where no member wedged, every
//!   member delivers every message every sender was asked to send, and
//!   every sender sent all of them. (A failed WRITE wedges RDMC's session
//!   for good, even over a cut that heals: the next epoch is the atomic
//!   multicast's business, so a wedge is what excuses missing messages.)
//!
//! Message contents are a function of (sender, index, length)
//! ([`payload`]), so a history needs to keep only lengths and digests.

use super::Violation;
use verbatim_core::checksum::{mix64, Checksum};

/// The bytes of `sender`'s message `index` of `len_bytes` bytes: distinct
/// per (sender, index, length) and almost never zero, so a slot that still
/// holds an earlier message (or nothing) never passes for this one.
pub fn payload(sender: u8, index: u64, len_bytes: usize) -> Vec<u8> {
    let base =
        mix64(0x5244_4D43_5041_594C ^ (u64::from(sender) << 56) ^ (index << 24) ^ len_bytes as u64);
    let mut out = Vec::with_capacity(len_bytes + 8);
    let mut word = 0u64;
    while out.len() < len_bytes {
        out.extend_from_slice(&mix64(base.wrapping_add(word)).to_le_bytes());
        word += 1;
    }
    out.truncate(len_bytes);
    out
}

/// The digest a history keeps of a message's bytes.
pub fn digest(bytes: &[u8]) -> u64 {
    let mut c = Checksum::new(0x5244_4D43_4447); // "RDMCDG"
    c.bytes(bytes);
    c.finish()
}

/// One message a member delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmcDelivered {
    /// When (simulated ns).
    pub time_ns: u64,
    /// Its sender (member id).
    pub sender: u8,
    /// Its index among the sender's messages.
    pub index: u64,
    /// Bytes delivered.
    pub len_bytes: u64,
    /// [`digest`] of the bytes delivered.
    pub digest: u64,
}

impl RdmcDelivered {
    /// The delivery of exactly what `sender` sent as message `index` of
    /// `len_bytes` bytes (for tests and scenario builders).
    pub fn of_sent(time_ns: u64, sender: u8, index: u64, len_bytes: usize) -> RdmcDelivered {
        RdmcDelivered {
            time_ns,
            sender,
            index,
            len_bytes: len_bytes as u64,
            digest: digest(&payload(sender, index, len_bytes)),
        }
    }
}

/// When a member's session wedged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmcWedged {
    /// When (simulated ns).
    pub time_ns: u64,
    /// Deliveries the member had made when it wedged: every later entry
    /// of its list came after the wedge (deliveries within one simulated
    /// nanosecond are ordered by position).
    pub after_deliveries: usize,
    /// Why (the engine's reason, for reports).
    pub cause: String,
}

/// One member's side of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RdmcMemberHistory {
    /// What it delivered, in order.
    pub deliveries: Vec<RdmcDelivered>,
    /// When it wedged, if it did.
    pub wedged: Option<RdmcWedged>,
    /// When it crashed, if it did (it delivers nothing after).
    pub crashed_at_ns: Option<u64>,
}

/// What a run did, as the checkers judge it. Index = member id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RdmcHistory {
    /// Per sender: the length of each message it sent, by index.
    pub sent_bytes: Vec<Vec<u64>>,
    /// Per sender: how many messages the workload asked it to send.
    pub planned: Vec<u64>,
    /// Per member.
    pub members: Vec<RdmcMemberHistory>,
    /// The run had neither a crash, a link cut nor an asked wedge:
    /// nothing excuses a member that did not deliver everything, or that
    /// wedged.
    pub fault_free: bool,
    /// When the run ended (simulated ns).
    pub end_ns: u64,
}

/// Every checker over a history.
pub fn check_all(h: &RdmcHistory) -> Vec<Violation> {
    let mut out = check_order(h);
    out.extend(check_integrity(h));
    out.extend(check_wedge(h));
    out.extend(check_liveness(h));
    out
}

/// Invariant name of [`check_order`].
pub const ORDER: &str = "rdmc per-sender order";
/// Invariant name of [`check_integrity`].
pub const INTEGRITY: &str = "rdmc delivers the bytes sent";
/// Invariant name of [`check_wedge`].
pub const WEDGE: &str = "rdmc nothing delivered after a wedge";
/// Invariant name of [`check_liveness`].
pub const LIVENESS: &str = "rdmc liveness";

/// (a) Per sender, each member delivers indices 0, 1, 2, … in turn.
pub fn check_order(h: &RdmcHistory) -> Vec<Violation> {
    let mut out = Vec::new();
    for (m, mh) in h.members.iter().enumerate() {
        // Next index expected per sender id (any u8 a history may hold).
        let mut next = [0u64; 256];
        for d in &mh.deliveries {
            let want = &mut next[usize::from(d.sender)];
            if d.index != *want {
                let what = if d.index < *want {
                    "a duplicate or out of order"
                } else {
                    "a gap"
                };
                out.push(Violation {
                    invariant: ORDER,
                    time_ns: d.time_ns,
                    detail: format!(
                        "member {m} delivered message {} of sender {} where {} was next ({what})",
                        d.index, d.sender, *want
                    ),
                });
            }
            // Go on from what it delivered, so one slip is reported once.
            *want = (*want).max(d.index + 1);
        }
    }
    out
}

/// (b) The bytes delivered are the bytes the sender sent at that index.
pub fn check_integrity(h: &RdmcHistory) -> Vec<Violation> {
    let mut out = Vec::new();
    for (m, mh) in h.members.iter().enumerate() {
        for d in &mh.deliveries {
            let sent = h
                .sent_bytes
                .get(usize::from(d.sender))
                .and_then(|s| s.get(d.index as usize));
            let Some(&len_bytes) = sent else {
                out.push(Violation {
                    invariant: INTEGRITY,
                    time_ns: d.time_ns,
                    detail: format!(
                        "member {m} delivered message {} of sender {}, which it never sent",
                        d.index, d.sender
                    ),
                });
                continue;
            };
            let want = digest(&payload(d.sender, d.index, len_bytes as usize));
            if d.len_bytes != len_bytes || d.digest != want {
                out.push(Violation {
                    invariant: INTEGRITY,
                    time_ns: d.time_ns,
                    detail: format!(
                        "member {m} delivered message {} of sender {} as {} bytes (digest {:#018x}); \
                         the sender sent {len_bytes} bytes (digest {want:#018x})",
                        d.index, d.sender, d.len_bytes, d.digest
                    ),
                });
            }
        }
    }
    out
}

/// (c) Nothing is delivered after the member wedged or crashed.
pub fn check_wedge(h: &RdmcHistory) -> Vec<Violation> {
    let mut out = Vec::new();
    for (m, mh) in h.members.iter().enumerate() {
        if let Some(w) = &mh.wedged {
            for d in mh.deliveries.iter().skip(w.after_deliveries) {
                out.push(Violation {
                    invariant: WEDGE,
                    time_ns: d.time_ns,
                    detail: format!(
                        "member {m} delivered message {} of sender {} after it wedged at {} ns ({})",
                        d.index, d.sender, w.time_ns, w.cause
                    ),
                });
            }
        }
        if let Some(t) = mh.crashed_at_ns {
            for d in mh.deliveries.iter().filter(|d| d.time_ns > t) {
                out.push(Violation {
                    invariant: WEDGE,
                    time_ns: d.time_ns,
                    detail: format!(
                        "member {m} delivered message {} of sender {} after it crashed at {t} ns",
                        d.index, d.sender
                    ),
                });
            }
        }
    }
    out
}

/// (d) In a fault-free run (no crash, cut or asked wedge), or one in which
/// nobody wedged, every sender sent its whole workload and every member
/// delivered all of it; in a fault-free run, nobody wedged either.
pub fn check_liveness(h: &RdmcHistory) -> Vec<Violation> {
    let mut out = Vec::new();
    let nobody_wedged = h.members.iter().all(|m| m.wedged.is_none());
    let crashed = h.members.iter().any(|m| m.crashed_at_ns.is_some());
    if !h.fault_free && (crashed || !nobody_wedged) {
        return out;
    }
    let why = if h.fault_free {
        "in a run without crash, cut or asked wedge"
    } else {
        "in a run where nobody wedged"
    };
    for (m, mh) in h.members.iter().enumerate() {
        if let Some(w) = &mh.wedged {
            out.push(Violation {
                invariant: LIVENESS,
                time_ns: w.time_ns,
                detail: format!("member {m} wedged ({}) {why}", w.cause),
            });
        }
    }
    for (s, &planned) in h.planned.iter().enumerate() {
        let sent = h.sent_bytes.get(s).map_or(0, |v| v.len() as u64);
        if sent < planned {
            out.push(Violation {
                invariant: LIVENESS,
                time_ns: h.end_ns,
                detail: format!("sender {s} sent {sent} of its {planned} messages {why}"),
            });
        }
    }
    for (m, mh) in h.members.iter().enumerate() {
        for (s, sent) in h.sent_bytes.iter().enumerate() {
            let got = mh
                .deliveries
                .iter()
                .filter(|d| usize::from(d.sender) == s)
                .count();
            if got < sent.len() {
                out.push(Violation {
                    invariant: LIVENESS,
                    time_ns: h.end_ns,
                    detail: format!(
                        "member {m} delivered {got} of the {} messages of sender {s} by the end {why}",
                        sent.len()
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two members, each sending two messages, everybody delivering
    /// everything in order: a valid fault-free history.
    fn valid() -> RdmcHistory {
        let lens = [[0usize, 700], [64, 65]];
        let sent_bytes = lens
            .iter()
            .map(|l| l.iter().map(|&b| b as u64).collect())
            .collect();
        let members = (0..2)
            .map(|_| RdmcMemberHistory {
                deliveries: vec![
                    RdmcDelivered::of_sent(10, 0, 0, lens[0][0]),
                    RdmcDelivered::of_sent(11, 1, 0, lens[1][0]),
                    RdmcDelivered::of_sent(12, 0, 1, lens[0][1]),
                    RdmcDelivered::of_sent(13, 1, 1, lens[1][1]),
                ],
                wedged: None,
                crashed_at_ns: None,
            })
            .collect();
        RdmcHistory {
            sent_bytes,
            planned: vec![2, 2],
            members,
            fault_free: true,
            end_ns: 100,
        }
    }

    fn invariants(v: &[Violation]) -> Vec<&'static str> {
        v.iter().map(|v| v.invariant).collect()
    }

    #[test]
    fn a_valid_history_passes_every_checker() {
        assert_eq!(check_all(&valid()), vec![]);
    }

    #[test]
    fn the_payload_depends_on_sender_index_and_length() {
        assert_ne!(payload(0, 0, 64), payload(1, 0, 64));
        assert_ne!(payload(0, 0, 64), payload(0, 1, 64));
        assert_ne!(payload(0, 0, 64)[..63], payload(0, 0, 63)[..]);
        assert_ne!(payload(0, 3, 64), vec![0u8; 64]);
        assert_eq!(payload(2, 5, 0), Vec::<u8>::new());
        assert_eq!(payload(2, 5, 13).len(), 13);
    }

    #[test]
    fn a_gap_is_an_order_violation() {
        let mut h = valid();
        // Member 1 skips sender 0's message 0.
        h.members[1].deliveries.remove(0);
        let v = check_order(&h);
        assert_eq!(invariants(&v), vec![ORDER]);
        assert!(v[0].detail.contains("a gap"), "{}", v[0].detail);
    }

    #[test]
    fn a_duplicate_is_an_order_violation() {
        let mut h = valid();
        let again = h.members[0].deliveries[2];
        h.members[0].deliveries.push(again);
        let v = check_order(&h);
        assert_eq!(invariants(&v), vec![ORDER]);
        assert!(v[0].detail.contains("duplicate"), "{}", v[0].detail);
    }

    #[test]
    fn out_of_order_deliveries_are_order_violations() {
        let mut h = valid();
        // Sender 1's messages swapped at member 0.
        h.members[0].deliveries.swap(1, 3);
        let v = check_order(&h);
        assert_eq!(invariants(&v), vec![ORDER, ORDER]);
        // The bytes are still each message's own.
        assert_eq!(check_integrity(&h), vec![]);
    }

    #[test]
    fn wrong_bytes_are_an_integrity_violation() {
        let mut h = valid();
        // Member 1 delivers sender 0's message 1 with stale (zero) bytes.
        h.members[1].deliveries[2].digest = digest(&[0u8; 700]);
        let v = check_integrity(&h);
        assert_eq!(invariants(&v), vec![INTEGRITY]);
        assert!(v[0].detail.contains("member 1"), "{}", v[0].detail);
        // The previous message of the same slot is wrong too.
        let mut h = valid();
        h.members[0].deliveries[3].digest = digest(&payload(1, 0, 65));
        assert_eq!(invariants(&check_integrity(&h)), vec![INTEGRITY]);
    }

    #[test]
    fn a_wrong_length_or_a_message_never_sent_is_an_integrity_violation() {
        let mut h = valid();
        h.members[0].deliveries[1].len_bytes = 63;
        assert_eq!(invariants(&check_integrity(&h)), vec![INTEGRITY]);
        let mut h = valid();
        h.members[0]
            .deliveries
            .push(RdmcDelivered::of_sent(20, 1, 2, 10));
        let v = check_integrity(&h);
        assert_eq!(invariants(&v), vec![INTEGRITY]);
        assert!(v[0].detail.contains("never sent"), "{}", v[0].detail);
    }

    #[test]
    fn a_delivery_after_the_wedge_is_a_violation() {
        let mut h = valid();
        h.fault_free = false;
        h.members[0].wedged = Some(RdmcWedged {
            time_ns: 11,
            after_deliveries: 2,
            cause: "PeerDown(MemberId(1))".into(),
        });
        let v = check_wedge(&h);
        assert_eq!(invariants(&v), vec![WEDGE, WEDGE]);
        // Wedged after its last delivery: nothing to report.
        h.members[0].wedged.as_mut().unwrap().after_deliveries = 4;
        assert_eq!(check_wedge(&h), vec![]);
    }

    #[test]
    fn a_delivery_after_a_crash_is_a_violation() {
        let mut h = valid();
        h.fault_free = false;
        h.members[1].crashed_at_ns = Some(12);
        let v = check_wedge(&h);
        assert_eq!(invariants(&v), vec![WEDGE]);
        assert_eq!(v[0].time_ns, 13);
    }

    #[test]
    fn a_missing_delivery_in_a_fault_free_run_is_a_liveness_violation() {
        let mut h = valid();
        h.members[1].deliveries.pop();
        let v = check_liveness(&h);
        assert_eq!(invariants(&v), vec![LIVENESS]);
        assert!(v[0].detail.contains("member 1 delivered 1 of the 2"));
        // The same with a cut in the run, but nobody wedged: still owed.
        h.fault_free = false;
        assert_eq!(invariants(&check_liveness(&h)), vec![LIVENESS]);
        // A cut that wedged someone excuses it.
        h.members[0].wedged = Some(RdmcWedged {
            time_ns: 50,
            after_deliveries: 4,
            cause: "WriteFailed(MemberId(1))".into(),
        });
        assert_eq!(check_liveness(&h), vec![]);
    }

    #[test]
    fn an_unsent_message_or_a_wedge_in_a_fault_free_run_is_a_liveness_violation() {
        let mut h = valid();
        h.planned[1] = 3;
        let v = check_liveness(&h);
        assert_eq!(invariants(&v), vec![LIVENESS]);
        assert!(v[0].detail.contains("sender 1 sent 2 of its 3"));
        let mut h = valid();
        h.members[0].wedged = Some(RdmcWedged {
            time_ns: 50,
            after_deliveries: 4,
            cause: "Asked".into(),
        });
        assert_eq!(invariants(&check_liveness(&h)), vec![LIVENESS]);
    }
}
