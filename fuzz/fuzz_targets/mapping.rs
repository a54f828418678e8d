//! Input mappings: any JSON spec resolved against any arguments and context: never panics
//! (resolution is total: a reference that names nothing is null), and checking the spec for
//! warnings never panics either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use toolgate_core::mapping::{Scope, resolve, warnings};

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Array(parts)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let spec = parts.first().cloned().unwrap_or(Value::Null);
    let arguments = parts.get(1).cloned().unwrap_or(json!({}));
    let context = match parts.get(2) {
        Some(Value::Object(map)) => map.clone(),
        _ => Map::new(),
    };
    let call = json!({"id": "c", "index": 0, "name": "t", "arguments": arguments});
    let scope = Scope {
        call: &call,
        arguments: &arguments,
        tool_name: "t",
        tool_call_id: "c",
        context: &context,
    };
    let _ = resolve(&spec, &scope);
    let _ = warnings(&spec);
});
