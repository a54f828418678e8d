//! OpenAI shapes: chat `tool_calls` entries and Responses `function_call` output items.

use serde_json::{Map, Value};

use super::{Arguments, CallShape, Parsed, string_member};

/// `{id, type: "function", function: {name, arguments: "<JSON text>"}}`.
pub(super) fn parse_chat(map: &Map<String, Value>) -> Parsed {
    let mut parsed = Parsed {
        shape: Some(CallShape::OpenAiChat),
        id: string_member(map, "id"),
        ..Parsed::default()
    };
    match map.get("function") {
        Some(Value::Object(function)) => {
            parsed.name = string_member(function, "name");
            parsed.arguments = Arguments::from_member(function.get("arguments"));
        }
        _ => parsed.malformed = Some("has a 'function' member that is not an object".to_owned()),
    }
    parsed
}

/// `{type: "function_call", id, call_id, name, arguments}`: the call id is `call_id`, not `id`.
pub(super) fn parse_responses(map: &Map<String, Value>) -> Parsed {
    Parsed {
        shape: Some(CallShape::OpenAiResponses),
        id: string_member(map, "call_id"),
        name: string_member(map, "name"),
        arguments: Arguments::from_member(map.get("arguments")),
        malformed: None,
    }
}
