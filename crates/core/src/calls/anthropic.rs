//! Anthropic shape: `{type: "tool_use", id, name, input: {...}}` content blocks.

use serde_json::{Map, Value};

use super::{Arguments, CallShape, Parsed, string_member};

/// `input` is the arguments; text input (as accumulated from a stream) is parsed as JSON.
pub(super) fn parse(map: &Map<String, Value>) -> Parsed {
    Parsed {
        shape: Some(CallShape::Anthropic),
        id: string_member(map, "id"),
        name: string_member(map, "name"),
        arguments: Arguments::from_member(map.get("input")),
        malformed: None,
    }
}
