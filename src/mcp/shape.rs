//! The one translator between MCP's shapes and the engine's: a registered tool as `tools/list`
//! shows it, and a call's result as `tools/call` answers it.

use std::sync::Arc;

use rmcp::model::{
    CallToolResult, ContentBlock, ErrorCode, ErrorData, MetaObject, Tool, ToolAnnotations,
};
use serde_json::{Map, Value, json};

use toolgate_core::dispatch::CallResult;
use toolgate_core::identity::Caller;
use toolgate_core::tools::{ContentPart, Registered};

/// JSON-RPC's implementation-defined server error.
const SERVER_ERROR: ErrorCode = ErrorCode(-32000);

/// A request the server did not serve for a reason of its own (its store down, its capacity
/// taken, a refusal of the gRPC server behind the bridge), saying why.
pub(crate) fn server_error(why: impl Into<String>) -> ErrorData {
    ErrorData::new(SERVER_ERROR, why.into(), None)
}

/// `registered` as `viewer` may see it (the pinned definition for a quarantined tool, nothing
/// when that is not known), with the hints toolgate knows of it.
pub(super) fn tool(registered: &Registered, viewer: &Caller) -> Option<Tool> {
    let shown = registered.shown_to(viewer)?;
    let definition = shown.definition;
    let schema = match definition.input_schema {
        Value::Object(map) => map,
        // An MCP input schema is an object schema; a tool with none takes an empty object.
        _ => Map::from_iter([("type".to_owned(), json!("object"))]),
    };
    let a = definition.annotations;
    let annotations = ToolAnnotations::new()
        .read_only(a.read_only)
        .destructive(a.destructive)
        .idempotent(a.idempotent)
        .open_world(a.open_world);
    let mut tool = Tool::new_with_raw(
        registered.tool.name().to_owned(),
        Some(definition.description.into()),
        Arc::new(schema),
    )
    .with_annotations(annotations);
    // An MCP output schema is an object schema; another kind of schema is not shown.
    if let Some(Value::Object(output)) = definition.output_schema {
        tool.output_schema = Some(Arc::new(output));
    }
    Some(tool)
}

/// The answer to `tools/call`: the content the model reads (the same text `DispatchBatch`
/// gives it), the JSON result as `structuredContent` when it is an object, `isError` for a call
/// that failed, and in `_meta` what toolgate knows of the run.
///
/// A tool that declares an output schema (`structured`) promises structured content that
/// conforms to it: a result toolgate turned into text (cut by an output cap) cannot, and is
/// answered as an error, which clients do not check against the schema.
pub(super) fn call_result(result: CallResult, structured: bool) -> CallToolResult {
    let content = if result.parts.is_empty() {
        vec![ContentBlock::text(result.content)]
    } else {
        result
            .parts
            .into_iter()
            .map(|part| match part {
                ContentPart::Text(text) => ContentBlock::text(text),
                ContentPart::Image { mime_type, data } => ContentBlock::image(data, mime_type),
            })
            .collect()
    };
    let unstructured = structured && result.success && !result.result.is_object();
    let mut answer = if result.success && !unstructured {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    if result.success && result.result.is_object() {
        answer.structured_content = Some(result.result);
    }
    answer.meta = Some(run_meta(
        result.error_class.name(),
        result.attempts,
        result.cached,
        result.truncated,
        &result.tool,
    ));
    answer
}

/// What a result's `_meta` says of its run (the stdio bridge gives the same from gRPC's result).
pub(crate) fn run_meta(
    error_class: &str,
    attempts: u32,
    cached: bool,
    truncated: bool,
    tool: &str,
) -> MetaObject {
    let mut meta = MetaObject::new();
    meta.insert("error_class".to_owned(), json!(error_class));
    meta.insert("attempts".to_owned(), json!(attempts));
    meta.insert("cached".to_owned(), json!(cached));
    meta.insert("truncated".to_owned(), json!(truncated));
    if !tool.is_empty() {
        meta.insert("tool".to_owned(), json!(tool));
    }
    meta
}
