//! Input references: a binding's `input` mapping resolved against one call and the request
//! context. Pure and table-tested. Strings resolve as `arguments[.path]`, `call[.path]`,
//! `tool_name`, `tool_call_id`, `ctx.path`, else the context's top-level key of that name, else
//! the literal string; `{"$literal": v}` is always `v` itself. Invariant: a path resolves
//! completely or gives JSON null, never a parent object; a selected value is copied as-is and
//! never read again as a reference.

use serde_json::{Map, Value};

/// The key of the explicit literal form `{"$literal": <value>}`.
pub(crate) const LITERAL: &str = "$literal";

/// What references read.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The normalized call: `{id, index, name, arguments, raw_arguments?}`.
    pub call: &'a Value,
    pub arguments: &'a Value,
    pub tool_name: &'a str,
    pub tool_call_id: &'a str,
    pub context: &'a Map<String, Value>,
}

/// Resolves a mapping: objects and arrays member by member, strings as references, other
/// values unchanged.
pub fn resolve(spec: &Value, scope: &Scope<'_>) -> Value {
    match spec {
        Value::String(reference) => resolve_str(reference, scope),
        Value::Array(items) => Value::Array(items.iter().map(|v| resolve(v, scope)).collect()),
        Value::Object(map) => {
            if let Some(literal) = literal(map) {
                return literal.clone();
            }
            Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), resolve(v, scope)))
                    .collect(),
            )
        }
        other => other.clone(),
    }
}

/// `{"$literal": v}` with no other key.
fn literal(map: &Map<String, Value>) -> Option<&Value> {
    if map.len() == 1 {
        map.get(LITERAL)
    } else {
        None
    }
}

fn resolve_str(reference: &str, scope: &Scope<'_>) -> Value {
    let at = |root: &Value, rest: &str| path(root, rest).cloned().unwrap_or(Value::Null);
    match reference {
        "arguments" => scope.arguments.clone(),
        "call" => scope.call.clone(),
        "tool_name" => Value::String(scope.tool_name.to_owned()),
        "tool_call_id" => Value::String(scope.tool_call_id.to_owned()),
        _ => {
            if let Some(rest) = reference.strip_prefix("arguments.") {
                at(scope.arguments, rest)
            } else if let Some(rest) = reference.strip_prefix("call.") {
                at(scope.call, rest)
            } else if let Some(rest) = reference.strip_prefix("ctx.") {
                context_path(scope.context, rest)
                    .cloned()
                    .unwrap_or(Value::Null)
            } else if let Some(value) = scope.context.get(reference) {
                value.clone()
            } else {
                Value::String(reference.to_owned())
            }
        }
    }
}

fn context_path<'v>(context: &'v Map<String, Value>, rest: &str) -> Option<&'v Value> {
    let (root, tail) = match rest.split_once('.') {
        Some((root, tail)) => (root, Some(tail)),
        None => (rest, None),
    };
    let value = context.get(root).filter(|_| !root.is_empty())?;
    match tail {
        None => Some(value),
        Some(tail) => path(value, tail),
    }
}

/// Follows a dotted path; every segment must exist. An empty path, an empty segment or a
/// trailing dot resolves to nothing. On an array a segment must be a plain index (`0`, `12`: no
/// sign, no leading zero); on an object it is a key (so `"0"` keys stay reachable).
pub fn path<'v>(root: &'v Value, dotted: &str) -> Option<&'v Value> {
    if dotted.is_empty() {
        return None;
    }
    let mut current = root;
    for segment in dotted.split('.') {
        if segment.is_empty() {
            return None;
        }
        current = match current {
            Value::Object(map) => map.get(segment)?,
            Value::Array(items) => items.get(index(segment)?)?,
            _ => return None,
        };
    }
    Some(current)
}

fn index(segment: &str) -> Option<usize> {
    let digits = segment.bytes().all(|b| b.is_ascii_digit());
    let canonical = segment == "0" || !segment.starts_with('0');
    if digits && canonical {
        segment.parse().ok()
    } else {
        None
    }
}

/// Problems that make a mapping meaningless, so nothing may use it: a `$literal` object with
/// other keys.
pub fn problems(spec: &Value) -> Vec<String> {
    let mut found = Found::default();
    check(spec, "input", &mut found);
    found.problems
}

/// References that are malformed but still resolve, to null, as the source text says ("empty
/// path segments resolve to JSON null ... Missing values do not fail dispatch by themselves"):
/// an empty segment or a trailing dot. Worth a warning, never a refusal.
pub fn warnings(spec: &Value) -> Vec<String> {
    let mut found = Found::default();
    check(spec, "input", &mut found);
    found.warnings
}

#[derive(Default)]
struct Found {
    problems: Vec<String>,
    warnings: Vec<String>,
}

fn check(spec: &Value, at: &str, found: &mut Found) {
    match spec {
        Value::String(reference) => {
            for prefix in ["arguments.", "call.", "ctx."] {
                if let Some(rest) = reference.strip_prefix(prefix)
                    && (rest.is_empty() || rest.split('.').any(str::is_empty))
                {
                    found.warnings.push(format!(
                        "{at}: '{reference}' has an empty path segment or a trailing dot, so it \
                         always resolves to null"
                    ));
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check(item, &format!("{at}[{i}]"), found);
            }
        }
        Value::Object(map) => {
            if map.contains_key(LITERAL) && map.len() > 1 {
                found.problems.push(format!(
                    "{at}: a {{\"{LITERAL}\": ...}} object must have no other key"
                ));
                return;
            }
            if literal(map).is_some() {
                return;
            }
            for (key, value) in map {
                check(value, &format!("{at}.{key}"), found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
