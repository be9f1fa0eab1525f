//! Every input a fuzz target once crashed on, kept in
//! `fuzz/regressions/<target>/`, run through the same property as the
//! target, in the normal test suite (no libFuzzer, no nightly).

use std::path::PathBuf;
use verbatim_client::manifest::Manifest;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        out.push((path, bytes));
    }
    out.sort();
    assert!(!out.is_empty(), "no regression inputs in {}", dir.display());
    out
}

/// The `manifest` target's property: any text gives a manifest that
/// validates and round-trips, or an error naming a field.
#[test]
fn manifest_regressions_hold() {
    for (path, data) in inputs("manifest") {
        let text = String::from_utf8_lossy(&data);
        let (first, rest) = text.split_once('\n').unwrap_or(("", &text));
        let overrides: Vec<String> = if first.contains('=') && !first.starts_with('[') {
            vec![first.to_string()]
        } else {
            Vec::new()
        };
        let body = if overrides.is_empty() {
            &text[..]
        } else {
            rest
        };
        match Manifest::parse(body, &overrides) {
            Ok(m) => {
                let back = Manifest::parse(&m.to_toml(), &[]).expect("a valid manifest re-parses");
                assert_eq!(back, m, "{}", path.display());
            }
            Err(e) => assert!(
                !e.field.is_empty(),
                "{}: an error that names no field: {e}",
                path.display()
            ),
        }
    }
}

/// The `snapshot_restore` target's property: bytes that restore give a
/// state whose own snapshot restores to the same state, of the same length.
#[test]
fn snapshot_restore_regressions_hold() {
    use verbatim_core::kv::{KvLimits, KvStateMachine};
    use verbatim_core::service::KvAndStreams;
    use verbatim_core::sm::{restore_in_pieces, StateMachine};
    use verbatim_core::snapshot::{SliceSink, SliceSource};
    use verbatim_core::stream::StreamStateMachine;
    use verbatim_host::replica::storage::{HashBackend, StreamMap};
    type Service = KvAndStreams<KvStateMachine<HashBackend>, StreamStateMachine<StreamMap>>;
    // The same limits as fuzz_targets/snapshot_restore.rs.
    let all_limits = [
        KvLimits {
            key_bytes_max: 4,
            value_bytes_max: 8,
        },
        KvLimits {
            key_bytes_max: 64,
            value_bytes_max: 256,
        },
    ];
    let service = |limits: KvLimits| -> Service {
        KvAndStreams::new(
            KvStateMachine::new(HashBackend::new(64), limits),
            StreamStateMachine::new(StreamMap::new(64), limits),
        )
    };
    for (path, data) in inputs("snapshot_restore") {
        let Some((&select, bytes)) = data.split_first() else {
            continue;
        };
        let limits = all_limits[usize::from(select) % all_limits.len()];
        let mut scratch = vec![0u8; 4096];
        let mut s = service(limits);
        let whole = s.restore(&mut SliceSource::new(bytes), &mut scratch);
        // In pieces, as the fuzz target does.
        let budget = 1 + u64::from(select / 2) * 8;
        let mut p = service(limits);
        let pieces = restore_in_pieces(&mut p, &mut SliceSource::new(bytes), &mut scratch, budget);
        assert_eq!(
            whole,
            pieces.map(|_| ()),
            "{}: pieces decide as one call",
            path.display()
        );
        if whole.is_err() {
            continue;
        }
        let mut out = vec![0u8; bytes.len() + 64];
        let mut sink = SliceSink::new(&mut out);
        s.snapshot(&mut sink)
            .unwrap_or_else(|e| panic!("{}: snapshot: {e:?}", path.display()));
        let n = sink.len();
        let mut out_pieces = vec![0u8; bytes.len() + 64];
        let mut sink = SliceSink::new(&mut out_pieces);
        p.snapshot(&mut sink).unwrap();
        // The same state (its snapshot's length and sizes: the backends'
        // iteration order differs between two tables).
        assert_eq!(sink.len(), n, "{}", path.display());
        assert_eq!(p.kv.backend().len(), s.kv.backend().len());
        assert_eq!(
            p.streams.backend().entry_count(),
            s.streams.backend().entry_count()
        );
        let mut t = service(limits);
        t.restore(&mut SliceSource::new(&out[..n]), &mut scratch)
            .unwrap_or_else(|e| {
                panic!("{}: a state's own snapshot restores: {e:?}", path.display())
            });
        let mut again = vec![0u8; n + 64];
        let mut sink = SliceSink::new(&mut again);
        t.snapshot(&mut sink).unwrap();
        assert_eq!(sink.len(), n, "{}", path.display());
        assert_eq!(t.kv.backend().len(), s.kv.backend().len());
        assert_eq!(
            t.streams.backend().entry_count(),
            s.streams.backend().entry_count()
        );
    }
}
