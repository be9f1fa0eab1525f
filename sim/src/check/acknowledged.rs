//! A write is acknowledged only once committed: uKharon-KV's primary
//! executes a request in parallel with its replication but replies only
//! once the RDMA WRITE completed (§7.3), and a log leader replies once the
//! entry is committed (DARE §3.3). Checked on every reply a member gives,
//! against that member's own commit point at that instant; whether the
//! commit itself was sound is the other checkers' business.

use super::Violation;

/// Checks one reply: member `node` acknowledged the entry at `index`
/// while its commit index (the index of the first entry not known
/// committed) was `commit_index`.
pub fn check_reply(time_ns: u64, node: usize, index: u64, commit_index: u64) -> Option<Violation> {
    (index >= commit_index).then(|| Violation {
        invariant: "a write is acknowledged only once committed",
        time_ns,
        detail: format!(
            "node {node} replied to entry {index} with its commit index at {commit_index}"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_below_the_commit_point_passes() {
        assert!(check_reply(1, 0, 6, 7).is_none());
        assert!(check_reply(1, 0, 1, 100).is_none());
    }

    #[test]
    fn a_reply_at_or_past_the_commit_point_is_a_violation() {
        let v = check_reply(5, 2, 7, 7).expect("the entry at the commit point is not committed");
        assert_eq!(v.invariant, "a write is acknowledged only once committed");
        assert!(v.detail.contains("node 2") && v.detail.contains("entry 7"));
        assert!(check_reply(5, 2, 9, 7).is_some());
    }
}
