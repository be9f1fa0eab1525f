//! Large multicast messages are whole where the total order delivers them
//! (Derecho §3.3: RDMC carries a large message's data, the SST orders it,
//! and a message counts as received only once its data is whole, so
//! stability means every member has the payload). A member whose total
//! order reaches a large message's reference while its RDMC session lacks
//! the payload has nothing to hand the application: the driver counts it
//! (`DriverCounters::large_missing`) and the member leaves the group
//! rather than skip the message. Only a member that broke the protocol
//! gets there, so every such count is a violation.
//!
//! Checked on each step of a member's driver, against its count before
//! the step (a restarted process starts a new driver, counting from 0).

use super::Violation;
use verbatim_driver::DriverCounters;

/// Member `node`'s driver had the counters `before` a step and `after`
/// it, its multicast engine in `epoch` after it: a violation if the step
/// met a large message without its payload.
pub fn check_large_whole(
    time_ns: u64,
    node: usize,
    epoch: u64,
    before: &DriverCounters,
    after: &DriverCounters,
) -> Option<Violation> {
    let (missing_before, missing_after) = (before.large_missing, after.large_missing);
    (missing_after > missing_before).then(|| Violation {
        invariant: "multicast delivers large messages whole",
        time_ns,
        detail: format!(
            "node {node}: the total order of epoch {epoch} reached {} large message(s) whose RDMC \
             payload it does not have whole ({missing_after} in all); it left the multicast group",
            missing_after - missing_before
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing(large_missing: u64) -> DriverCounters {
        DriverCounters {
            large_missing,
            // Other counters do not matter.
            access_changes: 7,
            ..DriverCounters::default()
        }
    }

    #[test]
    fn a_member_with_every_large_payload_passes() {
        assert!(check_large_whole(1, 0, 0, &missing(0), &missing(0)).is_none());
        // What an earlier step reported is not reported again.
        assert!(check_large_whole(2, 1, 3, &missing(2), &missing(2)).is_none());
    }

    #[test]
    fn a_large_reference_delivered_without_its_payload_is_a_violation() {
        let v = check_large_whole(5, 2, 4, &missing(0), &missing(1)).expect("a violation");
        assert_eq!(v.invariant, "multicast delivers large messages whole");
        assert!(
            v.detail.contains("node 2") && v.detail.contains("epoch 4"),
            "{}",
            v.detail
        );
        assert!(v.detail.contains("1 large message(s)"), "{}", v.detail);
        // A later one at the same member is a violation of its own.
        let again = check_large_whole(9, 2, 5, &missing(1), &missing(3)).expect("a violation");
        assert!(
            again.detail.contains("2 large message(s)") && again.detail.contains("3 in all"),
            "{}",
            again.detail
        );
    }
}
