//! Not a property of Verbatim: the check of the CI fuzzing step itself.
//! `scripts/fuzz-ci --self-test` plants the one input that crashes this
//! target in a seed directory and runs the same loop CI runs; the step
//! must report the crash (exit 1) and print the input. The normal run
//! skips this target.
#![no_main]
use libfuzzer_sys::fuzz_target;

/// The crashing input (what a regression looks like to CI).
const CANARY: &[u8] = b"verbatim-fuzz-ci-canary";

fuzz_target!(|data: &[u8]| {
    assert!(data != CANARY, "the CI canary input crashes this target");
});
