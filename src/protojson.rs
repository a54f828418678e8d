//! JSON ⇄ the protobuf well-known `Value` and `Struct`: the one conversion every protobuf
//! boundary shares (the public API, the worker protocol, the hook protocol).

use std::fmt::Display;

use prost_types::value::Kind;
use serde_json::{Map, Number, Value};

/// The deepest JSON (objects within objects, `json::depth`) a reply can carry and still be
/// decoded: every object level is several nested protobuf messages (`Value`, `Struct`, its map
/// entry), and protobuf decoders stop at 100 nested messages (prost, upb in Python). Measured
/// with the Python client on a `DispatchEvent`: 32 decodes, 33 does not.
pub const MAX_REPLY_DEPTH: usize = 32;

/// JSON as a protobuf `Value` a client can always decode: JSON deeper than `MAX_REPLY_DEPTH` is
/// carried as its canonical text (a JSON string) instead.
pub fn value_for_reply(value: &Value) -> prost_types::Value {
    if crate::json::depth(value) > MAX_REPLY_DEPTH {
        return value_from_json(&Value::String(crate::json::canonical(value)));
    }
    value_from_json(value)
}

/// Largest integer magnitude a protobuf double carries exactly (2^53).
const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// A protobuf `Value` as JSON, refused (with a message naming `path`) past `max_depth` levels
/// of nesting or for a number that is not finite. Integral numbers within ±2^53 become JSON
/// integers. Takes the value: its strings and keys move into the JSON, uncopied.
pub fn to_json_within(
    value: prost_types::Value,
    max_depth: usize,
    path: &dyn Display,
) -> Result<Value, String> {
    convert_value(value, max_depth, 0, path)
}

/// A protobuf `Struct` as a JSON object, under the same rules as `to_json_within`.
pub fn struct_to_json_within(
    value: prost_types::Struct,
    max_depth: usize,
    path: &dyn Display,
) -> Result<Map<String, Value>, String> {
    convert_struct(value, max_depth, 1, path)
}

fn convert_value(
    value: prost_types::Value,
    max_depth: usize,
    depth: usize,
    path: &dyn Display,
) -> Result<Value, String> {
    Ok(match value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(b),
        Some(Kind::StringValue(s)) => Value::String(s),
        Some(Kind::NumberValue(n)) => {
            json_number(n).ok_or_else(|| format!("{path} holds a number that is not finite"))?
        }
        Some(Kind::StructValue(s)) => Value::Object(convert_struct(s, max_depth, depth + 1, path)?),
        Some(Kind::ListValue(list)) => {
            if depth + 1 > max_depth {
                return Err(format!("{path} nests deeper than {max_depth} levels"));
            }
            let items = list
                .values
                .into_iter()
                .map(|v| convert_value(v, max_depth, depth + 1, path))
                .collect::<Result<Vec<_>, _>>()?;
            Value::Array(items)
        }
    })
}

fn convert_struct(
    value: prost_types::Struct,
    max_depth: usize,
    depth: usize,
    path: &dyn Display,
) -> Result<Map<String, Value>, String> {
    if depth > max_depth {
        return Err(format!("{path} nests deeper than {max_depth} levels"));
    }
    let mut map = Map::new();
    for (key, member) in value.fields {
        map.insert(key, convert_value(member, max_depth, depth, path)?);
    }
    Ok(map)
}

fn json_number(n: f64) -> Option<Value> {
    if !n.is_finite() {
        return None;
    }
    if n.fract() == 0.0 && n.abs() <= MAX_EXACT_INTEGER {
        // Exact: |n| <= 2^53 fits an i64 without rounding.
        #[allow(clippy::cast_possible_truncation)]
        return Some(Value::Number(Number::from(n as i64)));
    }
    Number::from_f64(n).map(Value::Number)
}

/// A protobuf `Value` as JSON for clients (no depth limit beyond protobuf's own).
pub fn to_json(value: prost_types::Value) -> Value {
    convert_value(value, usize::MAX, 0, &"value").unwrap_or(Value::Null)
}

/// A protobuf `Struct` as a JSON object (no depth limit beyond protobuf's own).
pub fn struct_to_json(value: prost_types::Struct) -> Value {
    convert_struct(value, usize::MAX, 1, &"value").map_or(Value::Null, Value::Object)
}

/// JSON as a protobuf `Value` (numbers become doubles).
pub fn value_from_json(value: &Value) -> prost_types::Value {
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(value_from_json).collect(),
        }),
        Value::Object(map) => Kind::StructValue(struct_from_json(map)),
    };
    prost_types::Value { kind: Some(kind) }
}

pub fn struct_from_json(map: &Map<String, Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: map
            .iter()
            .map(|(k, v)| (k.clone(), value_from_json(v)))
            .collect(),
    }
}
