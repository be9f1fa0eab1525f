use super::*;

fn view() -> View {
    View {
        leader: MemberId(2),
        log_term: 7,
        lease_ns: 20_000,
        members: 0,
    }
}

#[test]
fn a_view_round_trips_and_bad_bytes_are_refused() {
    let v = view();
    let bytes = v.encode();
    assert_eq!(View::decode(&bytes, 3), Ok(v));
    assert_eq!(View::decode(&bytes[..23], 3), Err(ViewError::Length));
    assert_eq!(View::decode(&bytes, 2), Err(ViewError::Leader));
    let mut b = bytes;
    b[0] = 9;
    assert_eq!(View::decode(&b, 3), Err(ViewError::Version));
    let mut b = bytes;
    b[5] = 1;
    assert_eq!(View::decode(&b, 3), Err(ViewError::Malformed));
    let zero_term = View { log_term: 0, ..v }.encode();
    assert_eq!(View::decode(&zero_term, 3), Err(ViewError::Malformed));
    // Primary-backup member sets: within the group, with their leader.
    let pb = View {
        members: 0b101,
        ..v
    };
    assert_eq!(View::decode(&pb.encode(), 3), Ok(pb));
    let outside = View {
        members: 0b1100,
        ..v
    };
    assert_eq!(View::decode(&outside.encode(), 3), Err(ViewError::Members));
    let without_leader = View {
        members: 0b011,
        ..v
    };
    assert_eq!(
        View::decode(&without_leader.encode(), 3),
        Err(ViewError::Members)
    );
    let all_eight = View { members: 0xFF, ..v };
    assert_eq!(View::decode(&all_eight.encode(), 8), Ok(all_eight));
}

#[test]
fn only_a_lease_or_member_change_is_compatible() {
    let v = view();
    assert!(View {
        lease_ns: 40_000,
        ..v
    }
    .compatible_with(&v));
    assert!(View {
        members: 0b100,
        ..v
    }
    .compatible_with(&v));
    assert!(!View { log_term: 8, ..v }.compatible_with(&v));
    assert!(!View {
        leader: MemberId(0),
        ..v
    }
    .compatible_with(&v));
}

#[test]
fn coordinators_accept_and_every_member_proposes() {
    let mut c = Config::new(5, MemberId(4));
    assert!(consensus_config(&c).is_none(), "views are off by default");
    c.lease_ns = 50_000;
    let cc = consensus_config(&c).expect("views on");
    assert_eq!(
        cc.acceptors.as_slice(),
        &[MemberId(0), MemberId(1), MemberId(2)]
    );
    assert_eq!(cc.proposers.len(), 5);
    assert_eq!(cc.value_bytes_max as usize, VIEW_BYTES);
    let layout = Layout::new(&c).expect("valid");
    let cl = layout.consensus.expect("consensus regions");
    assert!(layout.regions().any(|r| r.id == cl.shared_region));
    assert!(layout.regions().any(|r| r.id == cl.local_region));
    c.coordinator_count = 6;
    assert!(c.validate().is_err(), "more coordinators than members");
}

/// What a lease check makes of one coordinator's word of the next slot
/// (Algorithm 2 over a ring of slots): nothing accepted in its lap (or an
/// older lap's word) is empty; something accepted, or a later lap, is
/// filled; a restarted coordinator's fence is no answer, since it may
/// have accepted the slot before it lost its memory.
#[test]
fn a_lease_check_reads_laps_and_fences() {
    use crate::consensus::{SlotWord, ValueRef};
    let count = |raw: u64| {
        let mut round = RenewalRound {
            renewal: crate::lease::Renewal {
                epoch: 9,
                issued_ns: 0,
            },
            generation: 1,
            lap: 2,
            asked: [false; MAX_MEMBERS],
            empty: 0,
            failed: 0,
            filled: false,
        };
        ViewEngine::<crate::test_memory::TestMemory>::count_word(&mut round, raw, 3);
        (round.empty, round.failed, round.filled)
    };
    let accepted = |lap| {
        SlotWord {
            min_proposal: 4,
            accepted_proposal: 4,
            value: Some(ValueRef {
                owner: 1,
                proposal: 4,
                digest: 7,
            }),
            lap,
        }
        .encode()
    };
    assert_eq!(count(SlotWord::empty(2).encode()), (1, 0, false));
    assert_eq!(count(accepted(1)), (1, 0, false), "an older lap's slot");
    assert_eq!(count(accepted(2)), (0, 0, true));
    assert_eq!(
        count(SlotWord::empty(3).encode()),
        (0, 0, true),
        "a later lap"
    );
    assert_eq!(count(SlotWord::fenced(2).encode()), (0, 1, false));
    assert_eq!(
        count(SlotWord::fenced(1).encode()),
        (1, 0, false),
        "an older lap's fence"
    );
    assert_eq!(count(UNTRUSTED_SLOT_WORD), (0, 1, false));
}
