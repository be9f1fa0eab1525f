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
