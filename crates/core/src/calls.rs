//! Call intake: provider tool-call shapes in, normalized `ToolCall`s out, one per element.
//! Pure and synchronous. Every element of the model's list yields exactly one `Received`, either
//! runnable or carrying the soft error that answers it; nothing is silently dropped.

mod anthropic;
mod gemini;
mod normalized;
mod openai;

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::json;

/// Which provider family a call came in as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallShape {
    OpenAiChat,
    OpenAiResponses,
    Anthropic,
    Gemini,
    Normalized,
}

/// One normalized tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Position in the model's list.
    pub index: usize,
    /// The model's id, or a generated one (see `id_generated`).
    pub id: String,
    /// True when the model sent no usable id and intake made one up.
    pub id_generated: bool,
    /// The requested tool name (empty when the element had none).
    pub name: String,
    /// Parsed arguments: always a JSON object for a runnable call, `Null` when unparsable.
    /// Shared, not copied, by the call's metadata, its tool input and its result.
    pub arguments: Arc<Value>,
    /// The arguments' JSON text, when the model sent text.
    pub raw_arguments: Option<String>,
    pub shape: Option<CallShape>,
}

/// Why intake answered a call without running it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    InvalidCall,
    InvalidArguments,
    DuplicateId,
}

/// One element of the model's list after intake.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub call: ToolCall,
    /// `Some` when the call must not run; the message is what the model reads.
    pub rejection: Option<(Rejection, String)>,
}

/// Longest call id or tool name a front accepts (provider ids are about 40 bytes, names at most
/// 64): they are echoed several times per result and can never be cut to fit a reply.
pub const MAX_ID_BYTES: usize = 256;

/// Limits intake enforces on each call.
#[derive(Debug, Clone, Copy)]
pub struct IntakeLimits {
    /// Maximum nesting depth of parsed arguments.
    pub max_json_depth: usize,
}

/// What one provider adapter read from an element, before batch-level rules apply.
#[derive(Debug, Default)]
struct Parsed {
    shape: Option<CallShape>,
    id: Option<String>,
    name: Option<String>,
    arguments: Arguments,
    /// Set when the element carries a call marker but its structure is broken.
    malformed: Option<String>,
}

/// The arguments as the provider sent them.
#[derive(Debug, Default)]
enum Arguments {
    #[default]
    Absent,
    Text(String),
    Json(Value),
}

impl Arguments {
    fn from_member(value: Option<&Value>) -> Self {
        match value {
            None | Some(Value::Null) => Arguments::Absent,
            Some(Value::String(text)) => Arguments::Text(text.clone()),
            Some(other) => Arguments::Json(other.clone()),
        }
    }
}

/// Normalizes the elements of `DispatchBatchRequest.calls`, in order.
pub fn intake(elements: &[Value], limits: IntakeLimits) -> Vec<Received> {
    let parsed: Vec<Parsed> = elements.iter().map(parse_element).collect();
    let ids = assign_ids(&parsed);
    parsed
        .into_iter()
        .zip(ids)
        .enumerate()
        .map(|(index, (p, id))| finish(p, index, id, limits))
        .collect()
}

/// A call's id: the model's, or generated when it sent none.
struct Id {
    id: String,
    generated: bool,
    /// An earlier call of the batch has the same (model-given) id.
    duplicate: bool,
}

/// Every call's id. The sets are built only when needed: ids to avoid only when one must be
/// generated, ids seen only when there are two calls to compare.
fn assign_ids(parsed: &[Parsed]) -> Vec<Id> {
    let explicit: HashSet<&str> = if parsed.iter().any(|p| p.id.is_none()) {
        parsed.iter().filter_map(|p| p.id.as_deref()).collect()
    } else {
        HashSet::new()
    };
    let mut seen: HashSet<&str> = HashSet::new();
    let mut generated: HashSet<String> = HashSet::new();
    let compare = parsed.len() > 1;
    let mut ids = Vec::with_capacity(parsed.len());
    for (index, p) in parsed.iter().enumerate() {
        ids.push(match &p.id {
            Some(id) => Id {
                id: id.clone(),
                generated: false,
                duplicate: compare && !seen.insert(id),
            },
            None => {
                let id = generate_id(index, &explicit, &generated);
                generated.insert(id.clone());
                Id {
                    id,
                    generated: true,
                    duplicate: false,
                }
            }
        });
    }
    ids
}

/// Extracts the call elements from a whole assistant message or a Responses output list.
/// Nothing is dropped silently: items that are neither a call nor a known non-call part (text,
/// thinking, reasoning, images, ...) are kept as elements, so intake answers them INVALID_CALL;
/// and a message with no call and no text at all is an error.
pub fn extract_calls(message: &Value) -> Result<Vec<Value>, UnreadableMessage> {
    let found = match message {
        // A Responses output list (or Anthropic blocks / Gemini parts given bare).
        Value::Array(items) => sort_items(items),
        Value::Object(map) => {
            if let Some(calls) = map.get("tool_calls") {
                let elements = match calls {
                    Value::Array(items) => items.clone(),
                    Value::Null => Vec::new(),
                    other => {
                        return Err(UnreadableMessage::ToolCallsNotArray(json::type_name(other)));
                    }
                };
                let text = map.get("content").is_some_and(has_text);
                Found { elements, text }
            } else {
                match ["content", "parts", "output"]
                    .iter()
                    .find_map(|k| map.get(*k))
                {
                    Some(Value::Array(items)) => sort_items(items),
                    // An assistant message that asked for no tools: text content only.
                    Some(content) if map.contains_key("role") && has_text(content) => {
                        return Ok(Vec::new());
                    }
                    _ if map.contains_key("role") => return Err(UnreadableMessage::NoCallNoText),
                    _ => return Err(UnreadableMessage::Unrecognised),
                }
            }
        }
        _ => return Err(UnreadableMessage::Unrecognised),
    };
    if found.elements.is_empty() && !found.text {
        return Err(UnreadableMessage::NoCallNoText);
    }
    Ok(found.elements)
}

/// The items of a message that intake must answer, and whether the message says anything.
struct Found {
    elements: Vec<Value>,
    text: bool,
}

fn sort_items(items: &[Value]) -> Found {
    let mut found = Found {
        elements: Vec::new(),
        text: false,
    };
    for item in items {
        if detect(item).is_some() || !is_known_non_call(item) {
            found.elements.push(item.clone());
        } else {
            found.text |= has_text(item);
        }
    }
    found
}

/// A part or block every provider sends beside calls: Anthropic and Responses items carry a
/// `type`; Gemini parts are keyed by what they hold.
fn is_known_non_call(item: &Value) -> bool {
    const GEMINI_PARTS: &[&str] = &[
        "text",
        "thought",
        "thoughtSignature",
        "thought_signature",
        "inlineData",
        "inline_data",
        "fileData",
        "file_data",
        "executableCode",
        "executable_code",
        "codeExecutionResult",
        "code_execution_result",
        "functionResponse",
        "function_response",
        "videoMetadata",
        "video_metadata",
    ];
    let Some(map) = item.as_object() else {
        return false;
    };
    map.get("type").is_some_and(Value::is_string)
        || map.keys().any(|k| GEMINI_PARTS.contains(&k.as_str()))
}

/// Whether content holds any text: a string, a text part, or a message with text parts.
fn has_text(content: &Value) -> bool {
    match content {
        Value::String(text) => !text.trim().is_empty(),
        Value::Array(items) => items.iter().any(has_text),
        Value::Object(map) => {
            map.get("text").is_some_and(has_text)
                || map.get("content").is_some_and(has_text)
                || map.get("parts").is_some_and(has_text)
        }
        _ => false,
    }
}

/// An `assistant_message` intake cannot read calls from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnreadableMessage {
    #[error("assistant_message.tool_calls must be an array, got {0}")]
    ToolCallsNotArray(&'static str),
    #[error(
        "assistant_message has no tool call and no text: nothing to dispatch and nothing the \
         model said (send the calls themselves in `calls`, or the whole assistant message)"
    )]
    NoCallNoText,
    #[error(
        "assistant_message is not a recognised assistant message: expected an OpenAI chat \
         message with tool_calls, an Anthropic message with content blocks, a Gemini content \
         with parts, or an OpenAI Responses output list"
    )]
    Unrecognised,
}

/// Arguments a call cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadArguments {
    #[error("arguments are not valid JSON: {0}")]
    NotJson(String),
    #[error("arguments must be a JSON object, got {0}")]
    NotObject(&'static str),
    #[error("arguments nest {depth} levels deep; the limit is {limit}")]
    TooDeep { depth: usize, limit: usize },
}

/// The `type`s a normalized call may carry (frameworks' own call shapes: LangChain's
/// `tool_call`). Any other typed item with a `name` is the provider's, not the agent's, to run:
/// Responses' `mcp_call`, `mcp_approval_request` and `custom_tool_call`, Anthropic's
/// `server_tool_use` and `mcp_tool_use`. Read as a call, it would run a local tool of the same
/// name (again) and answer an id the provider never asked the agent about.
const NORMALIZED_TYPES: &[&str] = &["function", "tool_call"];

/// Which adapter an element belongs to, from its marker keys alone.
fn detect(element: &Value) -> Option<CallShape> {
    let map = element.as_object()?;
    let kind = map.get("type").and_then(Value::as_str);
    // Gemini parts in either spelling: the SDKs write `function_call` (proto field names) as
    // readily as `functionCall` (the JSON mapping).
    let gemini_snake = kind.is_none() && map.get("function_call").is_some_and(Value::is_object);
    if map.contains_key("functionCall") || gemini_snake {
        Some(CallShape::Gemini)
    } else if kind == Some("tool_use") {
        Some(CallShape::Anthropic)
    } else if kind == Some("function_call") {
        Some(CallShape::OpenAiResponses)
    } else if map.contains_key("function") {
        Some(CallShape::OpenAiChat)
    } else if map.contains_key("name") && kind.is_none_or(|k| NORMALIZED_TYPES.contains(&k)) {
        Some(CallShape::Normalized)
    } else {
        None
    }
}

fn parse_element(element: &Value) -> Parsed {
    let Some(map) = element.as_object() else {
        return Parsed::default();
    };
    let mut parsed = match detect(element) {
        None => Parsed::default(),
        Some(CallShape::Gemini) => gemini::parse(map),
        Some(CallShape::Anthropic) => anthropic::parse(map),
        Some(CallShape::OpenAiResponses) => openai::parse_responses(map),
        Some(CallShape::OpenAiChat) => openai::parse_chat(map),
        Some(CallShape::Normalized) => normalized::parse(map),
    };
    if parsed.id.is_none() && parsed.shape.is_none() {
        parsed.id = string_member(map, "id");
    }
    parsed
}

/// A non-empty string member, or `None`.
fn string_member(map: &Map<String, Value>, key: &str) -> Option<String> {
    map.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// `call_<index>`, suffixed `_1`, `_2`, ... until it collides with no id in the batch.
fn generate_id(index: usize, explicit: &HashSet<&str>, generated: &HashSet<String>) -> String {
    let base = format!("call_{index}");
    let mut candidate = base.clone();
    let mut suffix = 0;
    while explicit.contains(candidate.as_str()) || generated.contains(&candidate) {
        suffix += 1;
        candidate = format!("{base}_{suffix}");
    }
    candidate
}

fn finish(p: Parsed, index: usize, id: Id, limits: IntakeLimits) -> Received {
    let Id {
        id,
        generated: id_generated,
        duplicate,
    } = id;
    // Text moves into the call as sent; arguments are checked after the call's other checks.
    let (json, raw_arguments) = match p.arguments {
        Arguments::Absent => (None, None),
        Arguments::Text(text) => (None, Some(text)),
        Arguments::Json(value) => (Some(value), None),
    };
    let mut call = ToolCall {
        index,
        id,
        id_generated,
        name: p.name.unwrap_or_default(),
        arguments: Arc::new(Value::Null),
        raw_arguments,
        shape: p.shape,
    };
    let reject = |call: ToolCall, kind: Rejection, message: String| Received {
        call,
        rejection: Some((kind, message)),
    };
    let Some(_) = p.shape else {
        let message = format!(
            "element at index {index} is not a tool call: expected an OpenAI chat tool call, an \
             OpenAI Responses function_call item, an Anthropic tool_use block, a Gemini \
             functionCall part or {{\"id\", \"name\", \"arguments\"}}"
        );
        return reject(call, Rejection::InvalidCall, message);
    };
    if let Some(problem) = &p.malformed {
        return reject(
            call,
            Rejection::InvalidCall,
            format!("tool call at index {index} {problem}"),
        );
    }
    if call.name.is_empty() {
        let message = format!("tool call at index {index} has no tool name");
        return reject(call, Rejection::InvalidCall, message);
    }
    let parsed = match json {
        Some(value) => checked(value, limits),
        None => parse_text(call.raw_arguments.as_deref().unwrap_or_default(), limits),
    };
    match parsed {
        Ok(arguments) => call.arguments = Arc::new(arguments),
        Err(problem) => return reject(call, Rejection::InvalidArguments, problem.to_string()),
    }
    if duplicate {
        let message = format!(
            "duplicate tool call id '{}': an earlier call in this batch has the same id, so this \
             call was not run",
            call.id
        );
        return reject(call, Rejection::DuplicateId, message);
    }
    Received {
        call,
        rejection: None,
    }
}

/// Strict parse: text must be one JSON object; absent (no text), null or blank arguments mean
/// `{}`.
fn parse_text(text: &str, limits: IntakeLimits) -> Result<Value, BadArguments> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let value =
        serde_json::from_str::<Value>(text).map_err(|e| BadArguments::NotJson(e.to_string()))?;
    checked(value, limits)
}

/// Parsed arguments must be an object no deeper than the limit.
fn checked(value: Value, limits: IntakeLimits) -> Result<Value, BadArguments> {
    if !value.is_object() {
        return Err(BadArguments::NotObject(json::type_name(&value)));
    }
    let depth = json::depth(&value);
    if depth > limits.max_json_depth {
        let limit = limits.max_json_depth;
        return Err(BadArguments::TooDeep { depth, limit });
    }
    Ok(value)
}

#[cfg(test)]
mod tests;
