//! Call intake on arbitrary JSON: never panics, and answers exactly one entry per element, in
//! the model's order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate_core::calls::{IntakeLimits, intake};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let elements = match value {
        serde_json::Value::Array(items) => items,
        other => vec![other],
    };
    let received = intake(&elements, IntakeLimits { max_json_depth: 32 });
    assert_eq!(received.len(), elements.len());
    for (i, r) in received.iter().enumerate() {
        assert_eq!(r.call.index, i);
    }
});
