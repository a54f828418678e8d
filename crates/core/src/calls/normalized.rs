//! toolgate's normalized shape: `{id, name, arguments, raw_arguments?}`; `args` is accepted for
//! `arguments` (what the Gemini SDK's `function_calls` dump as).

use serde_json::{Map, Value};

use super::{Arguments, CallShape, Parsed, string_member};

/// Keys other shapes put arguments under: in a normalized call they would be lost, so a call that
/// uses one instead of `arguments` is answered INVALID_CALL rather than run with `{}`.
const MISPLACED: &[&str] = &["input", "parameters", "params", "kwargs"];

/// `arguments` (or `args`) is an object or JSON text; `raw_arguments` is read only when neither
/// is there.
pub(super) fn parse(map: &Map<String, Value>) -> Parsed {
    let given = |key: &str| map.get(key).filter(|v| !v.is_null());
    let arguments = match given("arguments").or_else(|| given("args")) {
        Some(present) => Arguments::from_member(Some(present)),
        None => Arguments::from_member(map.get("raw_arguments")),
    };
    let malformed = match (&arguments, MISPLACED.iter().find(|k| map.contains_key(**k))) {
        (Arguments::Absent, Some(key)) => Some(format!(
            "puts its arguments under '{key}'; a call in the normalized shape takes them in \
             'arguments'"
        )),
        _ => None,
    };
    Parsed {
        shape: Some(CallShape::Normalized),
        id: string_member(map, "id"),
        name: string_member(map, "name"),
        arguments,
        malformed,
    }
}
