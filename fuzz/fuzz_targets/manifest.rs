//! The cluster manifest (TOML plus `--set` overrides): any text gives a
//! manifest that validates, or an error naming a field; never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use verbatim_client::manifest::Manifest;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The first line, if it looks like an override, is applied as one.
    let (first, rest) = text.split_once('\n').unwrap_or(("", &text));
    let overrides: Vec<String> = if first.contains('=') && !first.starts_with('[') {
        vec![first.to_string()]
    } else {
        Vec::new()
    };
    let body = if overrides.is_empty() { &text[..] } else { rest };
    match Manifest::parse(body, &overrides) {
        Ok(m) => {
            // A valid manifest round-trips and yields valid core configs.
            let back = Manifest::parse(&m.to_toml(), &[]).expect("a valid manifest re-parses");
            assert_eq!(back, m);
            for id in 0..m.member_count() {
                assert!(m.core_config(id).validate().is_ok());
            }
        }
        Err(e) => assert!(!e.field.is_empty()),
    }
});
