//! Redaction of arbitrary text with the built-in patterns (and entropy on): never panics, and
//! what it returns redacts to itself (a second pass finds nothing new).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use toolgate_core::middleware::Redactor;

/// Built once: compiling the patterns per input would leave no time for the inputs.
static REDACTOR: OnceLock<Option<Redactor>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(redactor) = REDACTOR.get_or_init(|| Redactor::new(&[], true).ok()) else {
        return;
    };
    let once = redactor.redact(text).into_owned();
    let twice = redactor.redact(&once);
    assert_eq!(once, twice, "redaction is not stable");
});
