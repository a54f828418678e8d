//! Gemini shape: `{functionCall: {name, args: {...}, id?}}` parts, also spelled `function_call`
//! (what the Python SDK's `to_json_dict()` writes).

use serde_json::{Map, Value};

use super::{Arguments, CallShape, Parsed, string_member};

/// `args` is the arguments; the id is optional (older models send none).
pub(super) fn parse(map: &Map<String, Value>) -> Parsed {
    let mut parsed = Parsed {
        shape: Some(CallShape::Gemini),
        ..Parsed::default()
    };
    match map.get("functionCall").or_else(|| map.get("function_call")) {
        Some(Value::Object(call)) => {
            parsed.id = string_member(call, "id");
            parsed.name = string_member(call, "name");
            parsed.arguments = Arguments::from_member(call.get("args"));
        }
        _ => {
            parsed.malformed = Some("has a 'functionCall' member that is not an object".to_owned())
        }
    }
    parsed
}
