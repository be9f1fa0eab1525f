//! Log matching: if two logs hold an entry with the same index and term,
//! they are identical in every entry up to it (DARE §4.1).

use super::{EntryId, Violation};

/// Checks every pair of logs. Each log is a contiguous run of entries in
/// index order (the part of a member's log from its apply pointer to its
/// tail).
pub fn check_log_matching(time_ns: u64, logs: &[(usize, Vec<EntryId>)]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (i, (na, a)) in logs.iter().enumerate() {
        for (nb, b) in logs.iter().skip(i + 1) {
            if let Some(v) = check_pair(time_ns, *na, a, *nb, b) {
                out.push(v);
            }
        }
    }
    out
}

fn check_pair(
    time_ns: u64,
    na: usize,
    a: &[EntryId],
    nb: usize,
    b: &[EntryId],
) -> Option<Violation> {
    let (Some(a0), Some(b0)) = (a.first(), b.first()) else {
        return None;
    };
    for log in [a, b] {
        if log.windows(2).any(|w| w[1].index != w[0].index + 1) {
            return Some(Violation {
                invariant: "log matching",
                time_ns,
                detail: "a log snapshot is not contiguous".into(),
            });
        }
    }
    let lo = a0.index.max(b0.index);
    let hi = a.last().unwrap().index.min(b.last().unwrap().index);
    if lo > hi {
        return None;
    }
    let at = |log: &[EntryId], first: u64, idx: u64| log[(idx - first) as usize];
    // The highest common index where the terms agree: everything at or
    // below it must be identical.
    let mut matched = None;
    for idx in (lo..=hi).rev() {
        if at(a, a0.index, idx).term == at(b, b0.index, idx).term {
            matched = Some(idx);
            break;
        }
    }
    let top = matched?;
    for idx in lo..=top {
        let (ea, eb) = (at(a, a0.index, idx), at(b, b0.index, idx));
        if ea != eb {
            return Some(Violation {
                invariant: "log matching",
                time_ns,
                detail: format!(
                    "nodes {na} and {nb} agree on index {top} (term {}) but differ at index {idx}: {ea:?} vs {eb:?}",
                    at(a, a0.index, top).term
                ),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u64, term: u64, digest: u64) -> EntryId {
        EntryId {
            index,
            term,
            digest,
        }
    }

    #[test]
    fn diverging_suffixes_are_fine_diverging_prefixes_are_not() {
        let a = vec![e(1, 1, 10), e(2, 1, 11), e(3, 2, 12)];
        let b = vec![e(1, 1, 10), e(2, 1, 11), e(3, 3, 99), e(4, 3, 98)];
        assert!(check_log_matching(0, &[(0, a.clone()), (1, b)]).is_empty());
        // Same index and term at 3, but a different entry at 2.
        let c = vec![e(1, 1, 10), e(2, 1, 77), e(3, 2, 12)];
        let v = check_log_matching(5, &[(0, a.clone()), (2, c)]);
        assert_eq!(v.len(), 1);
        assert!(v[0].detail.contains("index 2"), "{}", v[0].detail);
        // Same index and term, different content.
        let d = vec![e(3, 2, 13)];
        assert_eq!(check_log_matching(5, &[(0, a), (3, d)]).len(), 1);
    }

    #[test]
    fn windows_that_do_not_overlap_are_fine() {
        let a = vec![e(1, 1, 1), e(2, 1, 2)];
        let b = vec![e(5, 2, 5)];
        assert!(check_log_matching(0, &[(0, a), (1, b)]).is_empty());
    }
}
