//! toolgate's normalized shape: `{id, name, arguments, raw_arguments?}`.

use serde_json::{Map, Value};

use super::{Arguments, CallShape, Parsed, string_member};

/// `arguments` is an object or JSON text; `raw_arguments` is read only when `arguments` is absent.
pub(super) fn parse(map: &Map<String, Value>) -> Parsed {
    let arguments = match map.get("arguments") {
        None | Some(Value::Null) => Arguments::from_member(map.get("raw_arguments")),
        present => Arguments::from_member(present),
    };
    Parsed {
        shape: Some(CallShape::Normalized),
        id: string_member(map, "id"),
        name: string_member(map, "name"),
        arguments,
        malformed: None,
    }
}
