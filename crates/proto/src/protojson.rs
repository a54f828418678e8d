//! The protobuf well-known `Value` and `Struct` carried as JSON: every protobuf boundary (the
//! public API, the worker protocol, the hook protocol) decodes them straight into `serde_json`
//! and encodes them straight from it (`wire`), with no intermediate protobuf tree.

mod meter;
mod wire;

pub use meter::{Metered, metered, prepay_fields};

use std::fmt::Display;

use serde_json::{Map, Number};

/// The deepest JSON (objects within objects, `depth`) a reply can carry and still be
/// decoded: every object level is several nested protobuf messages (`Value`, `Struct`, its map
/// entry), and protobuf decoders stop at 100 nested messages (prost, upb in Python). Measured
/// with the Python client on a `DispatchEvent`: 32 decodes, 33 does not.
pub const MAX_REPLY_DEPTH: usize = 32;

/// The deepest JSON this server decodes from the wire. Nesting past it is skipped, not recursed
/// into, and marks the value too deep (`Value::into_json_within` refuses it); it is above every
/// `limits.max_json_depth` a configuration may set (at most `MAX_REPLY_DEPTH`).
pub const MAX_DECODE_DEPTH: usize = 64;

/// The most bytes (as `held_bytes` counts them) the JSON values of one message may hold once
/// decoded. Small objects cost far more decoded than on the wire (`{"k":1}` is a few bytes
/// there and a whole map node here), so a message under the size limit could otherwise decode
/// to hundreds of MiB; past this its decoding stops (`meter`), and the server refuses it with
/// RESOURCE_EXHAUSTED.
pub const MAX_DECODED_BYTES: usize = 64 << 20;

/// Nesting depth of arrays and objects, as `Found` counts it: a scalar is 0, `{}` and `[]` are
/// 1, `{"a":[1]}` is 2 (the engine's `json::depth`; this crate stands apart from the engine).
pub fn depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Largest integer magnitude a protobuf double carries exactly (2^53).
const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// `google.protobuf.Value`, held as the JSON it stands for. Numbers are doubles on the wire:
/// integral numbers within ±2^53 decode as JSON integers, and JSON numbers encode as doubles.
///
/// JSON cannot hold everything the wire can: a number that is not finite decodes as `null`, and
/// nesting past `MAX_DECODE_DEPTH` as an empty array or object. Such a value remembers it, and
/// `into_json_within` refuses it; `into_json` takes it as decoded. What is remembered is what was
/// sent: a later field of the same message that replaces the part (protobuf's merge: the last
/// oneof field wins) does not clear it, so the check never depends on which copy came last.
///
/// On the wire a `Value` always has its field set (`null` is written as `null_value`), as every
/// value prost's own types make from JSON does; only an empty message decodes to `null` unset.
#[derive(Clone, Debug, Default)]
pub struct Value {
    json: serde_json::Value,
    found: Option<Found>,
}

/// `google.protobuf.Struct`, held as the JSON object it stands for (under `Value`'s rules).
#[derive(Clone, Debug, Default)]
pub struct Struct {
    fields: Map<String, serde_json::Value>,
    found: Option<Found>,
}

/// What decoding saw that the JSON alone does not say; `None` for a value made from JSON.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Found {
    /// The deepest nesting decoded (`depth` of the result, or past `MAX_DECODE_DEPTH`).
    depth: usize,
    /// A number that was NaN or infinite (decoded as `null`).
    not_finite: bool,
    /// Nesting past `MAX_DECODE_DEPTH` (skipped).
    too_deep: bool,
}

impl Found {
    /// What a value made from JSON already holds: its depth, and nothing JSON cannot hold.
    fn of(json: &serde_json::Value) -> Self {
        Found {
            depth: depth(json),
            ..Found::default()
        }
    }

    /// `of` for an object, given its fields.
    fn of_fields(fields: &Map<String, serde_json::Value>) -> Self {
        Found {
            depth: 1 + fields.values().map(depth).max().unwrap_or(0),
            ..Found::default()
        }
    }

    fn check(self, max_depth: usize, path: &dyn Display) -> Result<(), Unrepresentable> {
        if self.not_finite {
            return Err(Unrepresentable::NotFinite {
                path: path.to_string(),
            });
        }
        if self.too_deep || self.depth > max_depth {
            return Err(Unrepresentable::TooDeep {
                path: path.to_string(),
                max_depth,
            });
        }
        Ok(())
    }
}

/// A `Value` a boundary refuses: what it held cannot be JSON, or is nested deeper than allowed.
/// The text names the field's path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unrepresentable {
    #[error("{path} holds a number that is not finite")]
    NotFinite { path: String },
    #[error("{path} nests deeper than {max_depth} levels")]
    TooDeep { path: String, max_depth: usize },
}

/// Values compare as the JSON they hold.
impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json
    }
}

/// Structs compare as the JSON objects they hold.
impl PartialEq for Struct {
    fn eq(&self, other: &Self) -> bool {
        self.fields == other.fields
    }
}

impl Value {
    /// The JSON this value holds.
    pub fn json(&self) -> &serde_json::Value {
        &self.json
    }

    /// The JSON, as decoded (see the type's note on what JSON cannot hold).
    pub fn into_json(self) -> serde_json::Value {
        self.json
    }

    /// The JSON, refused (with a message naming `path`) past `max_depth` levels of nesting or
    /// when it held a number that is not finite.
    pub fn into_json_within(
        self,
        max_depth: usize,
        path: &dyn Display,
    ) -> Result<serde_json::Value, Unrepresentable> {
        let found = self.found.unwrap_or_else(|| Found::of(&self.json));
        found.check(max_depth, path)?;
        Ok(self.json)
    }

    /// The JSON a peer sent, refused only for what JSON cannot hold (a number that is not finite,
    /// nesting past `MAX_DECODE_DEPTH`): for a boundary with no depth limit of its own.
    pub fn into_json_checked(
        self,
        path: &dyn Display,
    ) -> Result<serde_json::Value, Unrepresentable> {
        self.into_json_within(MAX_DECODE_DEPTH, path)
    }
}

impl From<serde_json::Value> for Value {
    fn from(json: serde_json::Value) -> Self {
        Self { json, found: None }
    }
}

impl Struct {
    /// The JSON object this struct holds.
    pub fn fields(&self) -> &Map<String, serde_json::Value> {
        &self.fields
    }

    /// The JSON object, as decoded (see `Value`'s note on what JSON cannot hold).
    pub fn into_json(self) -> Map<String, serde_json::Value> {
        self.fields
    }

    /// The JSON object, under the rules of `Value::into_json_within`.
    pub fn into_json_within(
        self,
        max_depth: usize,
        path: &dyn Display,
    ) -> Result<Map<String, serde_json::Value>, Unrepresentable> {
        let found = self.found.unwrap_or_else(|| Found::of_fields(&self.fields));
        found.check(max_depth, path)?;
        Ok(self.fields)
    }

    /// The JSON object, under the rules of `Value::into_json_checked`.
    pub fn into_json_checked(
        self,
        path: &dyn Display,
    ) -> Result<Map<String, serde_json::Value>, Unrepresentable> {
        self.into_json_within(MAX_DECODE_DEPTH, path)
    }
}

impl From<Map<String, serde_json::Value>> for Struct {
    fn from(fields: Map<String, serde_json::Value>) -> Self {
        Self {
            fields,
            found: None,
        }
    }
}

/// A protobuf double as JSON: integral numbers within ±2^53 as integers; `None` when it is not
/// finite.
fn json_number(n: f64) -> Option<serde_json::Value> {
    if !n.is_finite() {
        return None;
    }
    if n.fract() == 0.0 && n.abs() <= MAX_EXACT_INTEGER {
        // Exact: |n| <= 2^53 fits an i64 without rounding.
        #[allow(clippy::cast_possible_truncation)]
        return Some(serde_json::Value::Number(Number::from(n as i64)));
    }
    Number::from_f64(n).map(serde_json::Value::Number)
}

#[cfg(test)]
mod tests;
