//! Linearizability of the stream service's histories (`XADD` and whole
//! stream `XRANGE - +` reads), checked per stream.
//!
//! A stream is append-only and its order is its id order (ids grow with
//! every applied `XADD`), so a history is linearizable when there is one
//! sequence of entries that every read saw a prefix of, consistent with
//! real time. The checker verifies, per stream:
//!
//! 1. ids: every acknowledged `XADD` got a distinct id, and an `XADD` that
//!    returned before another was invoked has the smaller id;
//! 2. entries: every entry a read returned is an `XADD` of that stream
//!    (entries carry a unique tag), invoked before the read returned, with
//!    the id its client was given (if it was answered), in id order;
//! 3. prefixes: of any two reads, one saw a prefix of what the other saw;
//! 4. completeness: a read contains every `XADD` acknowledged before it was
//!    invoked, and no acknowledged `XADD` with an id below its last entry
//!    is missing from it (a gap);
//! 5. monotonic reads: a read invoked after another returned saw at least
//!    as many entries.
//!
//! Together these are sufficient: order the entries as the longest read
//! saw them, then the remaining acknowledged ones by id; every `XADD`
//! takes effect at its place in that order and every read right after its
//! prefix's last entry, which rules 1–5 keep inside each operation's
//! interval. Unanswered operations are unconstrained (an unanswered `XADD`
//! may appear in reads or not).

use std::collections::{BTreeMap, HashMap};

use verbatim_core::stream::StreamId;

/// What a client asked of a stream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum StreamInput {
    /// `XADD key * tag <tag>`.
    Add {
        /// The stream.
        key: Vec<u8>,
        /// A tag unique in the history (the entry's only value).
        tag: Vec<u8>,
    },
    /// `XRANGE key - +`.
    Range {
        /// The stream.
        key: Vec<u8>,
    },
}

impl StreamInput {
    /// The stream.
    pub fn key(&self) -> &[u8] {
        match self {
            StreamInput::Add { key, .. } | StreamInput::Range { key } => key,
        }
    }
}

/// What the service answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum StreamOutput {
    /// `XADD`: the new entry's id.
    Id(StreamId),
    /// `XRANGE`: (id, tag) in the order returned.
    Entries(Vec<(StreamId, Vec<u8>)>),
}

/// One stream operation of a history (see [`crate::history::Operation`]
/// for the time conventions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOperation {
    /// The client.
    pub client: u64,
    /// What it asked.
    pub input: StreamInput,
    /// Invocation time.
    pub call_ns: u64,
    /// Response time (`u64::MAX` when unanswered).
    pub return_ns: u64,
    /// The answer, if any.
    pub output: Option<StreamOutput>,
}

/// A broken rule: which stream and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamViolation {
    /// The stream.
    pub key: Vec<u8>,
    /// What was wrong, with the operations involved.
    pub detail: String,
}

/// Checks a history; the first violation found, per stream in key order.
pub fn check_streams(history: &[StreamOperation]) -> Result<(), StreamViolation> {
    let mut by_key: BTreeMap<&[u8], Vec<&StreamOperation>> = BTreeMap::new();
    for op in history {
        by_key.entry(op.input.key()).or_default().push(op);
    }
    for (key, ops) in by_key {
        check_stream(&ops).map_err(|detail| StreamViolation {
            key: key.to_vec(),
            detail,
        })?;
    }
    Ok(())
}

/// A read and the entries it returned.
type Read<'a> = (&'a StreamOperation, &'a [(StreamId, Vec<u8>)]);

fn check_stream(ops: &[&StreamOperation]) -> Result<(), String> {
    let mut adds: HashMap<&[u8], &StreamOperation> = HashMap::new();
    let mut acked: Vec<(StreamId, &StreamOperation)> = Vec::new();
    let mut reads: Vec<Read<'_>> = Vec::new();
    for op in ops {
        match (&op.input, &op.output) {
            (StreamInput::Add { tag, .. }, out) => {
                if adds.insert(tag, op).is_some() {
                    return Err(format!("two XADDs share the tag {tag:?}"));
                }
                match out {
                    Some(StreamOutput::Id(id)) => acked.push((*id, op)),
                    None => {}
                    Some(other) => return Err(format!("XADD answered {other:?}: {op:?}")),
                }
            }
            (StreamInput::Range { .. }, Some(StreamOutput::Entries(e))) => reads.push((op, e)),
            (StreamInput::Range { .. }, None) => {}
            (StreamInput::Range { .. }, Some(other)) => {
                return Err(format!("XRANGE answered {other:?}: {op:?}"))
            }
        }
    }
    // 1. Distinct ids, in real-time order.
    acked.sort_by_key(|(id, _)| *id);
    for w in acked.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(format!(
                "two XADDs got the id {:?}: {:?} and {:?}",
                w[0].0, w[0].1, w[1].1
            ));
        }
    }
    // An XADD that returned before another was invoked has the smaller id:
    // scanning by id, no later id may have returned before an earlier one
    // was invoked.
    let mut earliest_return_after: Vec<u64> = vec![u64::MAX; acked.len() + 1];
    for i in (0..acked.len()).rev() {
        earliest_return_after[i] = earliest_return_after[i + 1].min(acked[i].1.return_ns);
    }
    for i in 0..acked.len() {
        if earliest_return_after[i + 1] <= acked[i].1.call_ns {
            let later = acked[i + 1..]
                .iter()
                .find(|(_, o)| o.return_ns <= acked[i].1.call_ns)
                .expect("found by the scan");
            return Err(format!(
                "XADD {:?} returned before XADD {:?} was invoked but got a larger id",
                later.1, acked[i].1
            ));
        }
    }
    let acked_id: HashMap<&[u8], StreamId> = acked
        .iter()
        .filter_map(|(id, o)| match &o.input {
            StreamInput::Add { tag, .. } => Some((tag.as_slice(), *id)),
            StreamInput::Range { .. } => None,
        })
        .collect();
    // 2. Every entry is a real, earlier XADD, with its id, in id order.
    for (read, entries) in &reads {
        for (k, (id, tag)) in entries.iter().enumerate() {
            let Some(add) = adds.get(tag.as_slice()) else {
                return Err(format!(
                    "a read returned an entry nobody added ({tag:?}): {read:?}"
                ));
            };
            if add.call_ns >= read.return_ns {
                return Err(format!(
                    "a read returned an entry added after it returned: {add:?} in {read:?}"
                ));
            }
            if let Some(given) = acked_id.get(tag.as_slice()) {
                if given != id {
                    return Err(format!(
                        "an entry read with id {id:?} was acknowledged as {given:?}: {read:?}"
                    ));
                }
            }
            if k > 0 && entries[k - 1].0 >= *id {
                return Err(format!("a read returned ids out of order: {read:?}"));
            }
        }
    }
    // 3. Prefixes: sorted by length, each read is a prefix of the next.
    let mut by_len: Vec<&Read<'_>> = reads.iter().collect();
    by_len.sort_by_key(|(_, e)| e.len());
    for w in by_len.windows(2) {
        let (short, long) = (w[0], w[1]);
        if long.1[..short.1.len()] != *short.1 {
            return Err(format!(
                "two reads disagree on the stream's order: {:?} and {:?}",
                short.0, long.0
            ));
        }
    }
    // 4. Completeness and no gaps.
    for (read, entries) in &reads {
        let seen: std::collections::HashSet<&[u8]> =
            entries.iter().map(|(_, t)| t.as_slice()).collect();
        let last = entries.last().map(|(id, _)| *id);
        for (id, add) in &acked {
            let StreamInput::Add { tag, .. } = &add.input else {
                continue;
            };
            if seen.contains(tag.as_slice()) {
                continue;
            }
            if add.return_ns <= read.call_ns {
                return Err(format!(
                    "a read missed an XADD acknowledged before it was invoked: {add:?} not in {read:?}"
                ));
            }
            if last.is_some_and(|l| *id < l) {
                return Err(format!(
                    "a read has a gap: {add:?} (id {id:?}) is missing below its last entry: {read:?}"
                ));
            }
        }
    }
    // 5. Monotonic reads: by return time, the longest read that returned
    // before each read was invoked.
    let mut by_return: Vec<(u64, usize)> =
        reads.iter().map(|(r, e)| (r.return_ns, e.len())).collect();
    by_return.sort_unstable();
    let mut longest_so_far = Vec::with_capacity(by_return.len());
    let mut m = 0;
    for (_, len) in &by_return {
        m = m.max(*len);
        longest_so_far.push(m);
    }
    for (read, entries) in &reads {
        let before = by_return.partition_point(|(ret, _)| *ret <= read.call_ns);
        if before > 0 && longest_so_far[before - 1] > entries.len() {
            return Err(format!(
                "a read saw fewer entries ({}) than one that returned before it was invoked ({}): {read:?}",
                entries.len(),
                longest_so_far[before - 1]
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64) -> StreamId {
        StreamId { ms, seq: 0 }
    }

    fn add(
        client: u64,
        tag: &str,
        call: u64,
        ret: Option<u64>,
        got: Option<u64>,
    ) -> StreamOperation {
        StreamOperation {
            client,
            input: StreamInput::Add {
                key: b"s".to_vec(),
                tag: tag.as_bytes().to_vec(),
            },
            call_ns: call,
            return_ns: ret.unwrap_or(u64::MAX),
            output: got.map(|ms| StreamOutput::Id(id(ms))),
        }
    }

    fn read(client: u64, call: u64, ret: u64, entries: &[(u64, &str)]) -> StreamOperation {
        StreamOperation {
            client,
            input: StreamInput::Range { key: b"s".to_vec() },
            call_ns: call,
            return_ns: ret,
            output: Some(StreamOutput::Entries(
                entries
                    .iter()
                    .map(|(ms, t)| (id(*ms), t.as_bytes().to_vec()))
                    .collect(),
            )),
        }
    }

    fn fails(history: &[StreamOperation], why: &str) {
        let err = check_streams(history).expect_err("a violation");
        assert!(err.detail.contains(why), "{}", err.detail);
    }

    #[test]
    fn a_correct_history_with_concurrency_and_lost_answers_passes() {
        let h = [
            add(1, "a", 0, Some(10), Some(5)),
            add(2, "b", 2, None, None), // unanswered: took effect (seen below)
            add(3, "c", 3, Some(30), Some(20)),
            read(4, 11, 12, &[(5, "a")]),
            read(4, 31, 40, &[(5, "a"), (7, "b"), (20, "c")]),
            add(1, "d", 50, None, None), // unanswered: never seen
            read(2, 41, 45, &[(5, "a"), (7, "b"), (20, "c")]),
        ];
        assert_eq!(check_streams(&h), Ok(()));
    }

    #[test]
    fn ids_against_real_time_are_caught() {
        fails(
            &[
                add(1, "a", 0, Some(10), Some(9)),
                add(2, "b", 11, Some(20), Some(3)),
            ],
            "got a larger id",
        );
        fails(
            &[
                add(1, "a", 0, Some(10), Some(9)),
                add(2, "b", 1, Some(20), Some(9)),
            ],
            "got the id",
        );
    }

    #[test]
    fn phantom_future_and_misnumbered_entries_are_caught() {
        fails(&[read(1, 0, 5, &[(1, "ghost")])], "nobody added");
        fails(
            &[
                add(1, "a", 10, Some(20), Some(1)),
                read(2, 0, 5, &[(1, "a")]),
            ],
            "added after it returned",
        );
        fails(
            &[add(1, "a", 0, Some(5), Some(1)), read(2, 6, 7, &[(2, "a")])],
            "was acknowledged as",
        );
        fails(
            &[
                add(1, "a", 0, None, None),
                add(2, "b", 0, None, None),
                read(3, 1, 2, &[(2, "a"), (1, "b")]),
            ],
            "out of order",
        );
    }

    #[test]
    fn disagreeing_incomplete_gapped_and_regressing_reads_are_caught() {
        fails(
            &[
                add(1, "a", 0, None, None),
                add(2, "b", 0, None, None),
                read(3, 1, 2, &[(1, "a")]),
                read(4, 1, 2, &[(1, "b")]),
            ],
            "disagree",
        );
        fails(
            &[add(1, "a", 0, Some(5), Some(1)), read(2, 6, 7, &[])],
            "missed an XADD",
        );
        fails(
            &[
                add(1, "a", 0, Some(50), Some(1)),
                add(2, "b", 0, None, None),
                read(3, 1, 2, &[(2, "b")]),
            ],
            "gap",
        );
        fails(
            &[
                add(1, "a", 0, None, None),
                read(2, 1, 2, &[(1, "a")]),
                read(3, 3, 4, &[]),
            ],
            "fewer entries",
        );
    }
}
