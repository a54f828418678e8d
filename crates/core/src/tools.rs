//! The `Tool` trait every tool implements, its output and error types, and the registry.
//! A tool never sees gRPC types: it gets JSON input and a `ToolContext`, and returns `ToolOutput`.

mod builtin;
mod catalog;
mod function;
mod outcome;
mod progress;
pub(crate) mod registry;
mod scratch;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use catalog::Catalog;
pub use function::FnTool;
pub use outcome::ErrorClass;
pub(crate) use outcome::content_of;
pub use progress::{PROGRESS_QUEUE, Progress, ProgressReceiver, ProgressSink};
pub use registry::{
    Definition, Registered, RegistryError, Shown, ToolPin, ToolRegistry, ToolSource,
};
pub use scratch::{DEFAULT_QUOTA_BYTES, remove_tree, unguessable_name};
pub use scratch::{Entry, FileError, ScratchDir, ScratchStore, SharedScratch, entry_bytes};

/// Names of every built-in tool, for config validation.
pub const BUILTIN_NAMES: &[&str] = &[
    "echo",
    "now",
    "scratch_list",
    "scratch_read",
    "scratch_write",
    "sleep",
];

/// The built-in tools minus the excluded names.
pub fn builtin_tools(exclude: &[String]) -> Vec<Arc<dyn Tool>> {
    [
        builtin::ECHO,
        builtin::SLEEP,
        builtin::NOW,
        scratch::SCRATCH_WRITE,
        scratch::SCRATCH_READ,
        scratch::SCRATCH_LIST,
    ]
    .into_iter()
    .filter(|t| !exclude.iter().any(|e| e == t.name))
    .map(|t| Arc::new(t) as Arc<dyn Tool>)
    .collect()
}

/// The boxed future a tool returns; `'a` lets it borrow the tool and its context.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A tool the pipeline can run. Implementations must be cheap to call concurrently.
pub trait Tool: Send + Sync + 'static {
    /// The unique name models call the tool by.
    fn name(&self) -> &str;
    /// What the tool does, for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the input object.
    fn input_schema(&self) -> Value;
    /// JSON Schema of the result, when the tool declares one (an MCP server's `outputSchema`).
    fn output_schema(&self) -> Option<Value> {
        None
    }
    /// Behaviour hints (read-only, destructive, idempotent, open-world).
    fn annotations(&self) -> Annotations {
        Annotations::default()
    }
    /// Whether a call with this input may run concurrently with other calls.
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        false
    }
    /// The resource this input touches; calls with the same key never run together.
    fn resource_key(&self, _input: &Value) -> Option<String> {
        None
    }
    /// Runs the tool. It should return promptly once `ctx.cancel` fires; its future may be dropped.
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}

/// Behaviour hints, as in MCP tool annotations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Annotations {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

/// What a tool learns about the call it serves.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolContext {
    pub session_id: String,
    /// The model's call id.
    pub call_id: String,
    /// Position of the call in the model's list.
    pub index: usize,
    /// Fires when the call is cancelled or times out.
    pub cancel: CancellationToken,
    /// The session's private scratch directory, made the first time a tool calls `create`.
    pub scratch: ScratchDir,
    /// Where the scratch tools keep a shared session's files instead (a session store), so
    /// every server reads them; `None` for a session only this server holds.
    pub shared_scratch: Option<Arc<SharedScratch>>,
    /// The call this execution serves, as the model made it.
    pub metadata: Arc<CallMetadata>,
    /// When the call must be done (remote tools pass it on to the remote side).
    pub deadline: Option<tokio::time::Instant>,
    /// Where the tool may report progress; `None` when nobody listens.
    pub progress: Option<ProgressSink>,
    /// The span of this execution (its ids only): `traceparent()` and `tracestate()` make the
    /// headers for a call this tool makes, so a remote's own spans join the trace under it.
    pub trace: opentelemetry::trace::SpanContext,
    /// Who sent the batch (its tenant namespaces the session and the cache).
    pub caller: Arc<crate::identity::Caller>,
}

/// What a tool learns about the model's call besides its (possibly mapped) input.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallMetadata {
    /// The name the model called (a binding may run another tool under it).
    pub tool_name: String,
    pub tool_call_id: String,
    pub tool_call_index: usize,
    /// The model's parsed arguments (shared with the call).
    pub tool_arguments: Arc<Value>,
    /// The arguments' JSON text, when the model sent text.
    pub raw_arguments: Option<String>,
}

impl CallMetadata {
    /// The normalized call: `{id, index, name, arguments, raw_arguments?}`.
    pub fn tool_call(&self) -> Value {
        let mut call = serde_json::json!({
            "id": self.tool_call_id,
            "index": self.tool_call_index,
            "name": self.tool_name,
            "arguments": &*self.tool_arguments,
        });
        if let Some(raw) = &self.raw_arguments {
            call["raw_arguments"] = Value::String(raw.clone());
        }
        call
    }
}

impl ToolContext {
    /// A context for running a tool outside the pipeline (tests, embedders).
    pub fn new(session_id: &str, call_id: &str, index: usize, scratch_dir: PathBuf) -> Self {
        ToolContext {
            session_id: session_id.to_owned(),
            call_id: call_id.to_owned(),
            index,
            cancel: CancellationToken::new(),
            scratch: ScratchDir::new(scratch_dir),
            shared_scratch: None,
            metadata: Arc::new(CallMetadata {
                tool_call_id: call_id.to_owned(),
                tool_call_index: index,
                ..CallMetadata::default()
            }),
            deadline: None,
            progress: None,
            trace: opentelemetry::trace::SpanContext::empty_context(),
            caller: Arc::new(crate::identity::Caller::local()),
        }
    }

    /// The W3C `traceparent` for a call this tool makes: this execution's span is the parent.
    /// Made on demand, so tools that call nothing pay nothing.
    pub fn traceparent(&self) -> Option<String> {
        crate::trace::traceparent(&self.trace)
    }

    /// The W3C `tracestate` the client sent, passed on with `traceparent()`.
    pub fn tracestate(&self) -> Option<String> {
        crate::trace::tracestate(&self.trace)
    }
}

/// A successful tool return value.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutput {
    Text(String),
    Json(Value),
    /// Text and images, in order.
    Parts(Vec<ContentPart>),
}

/// One piece of multipart output.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentPart {
    Text(String),
    /// Base64-encoded image bytes with their MIME type.
    Image {
        mime_type: String,
        data: String,
    },
}

/// What kind of failure a tool reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolErrorKind {
    /// The tool ran and failed.
    Failed,
    /// The input was unusable (the model should fix its arguments).
    InvalidInput,
    /// A remote tool could not be reached (the breaker counts it; idempotent tools are retried).
    Transport,
    /// The session store the tool keeps its data in failed, and nothing was changed: not the
    /// tool's failure, so the breaker does not count it.
    StoreUnavailable,
    /// A change was sent to the session store and its answer never came: it may have been
    /// applied. Not the tool's failure either.
    OutcomeUnknown,
}

/// A tool failure; its message is what the model reads.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    pub kind: ToolErrorKind,
    pub message: String,
    /// Whether trying again may succeed (read by recovery).
    pub retryable: bool,
    /// Output the tool produced before failing, if any.
    pub output: Option<ToolOutput>,
}

impl ToolError {
    /// The tool ran and failed with this message.
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError {
            kind: ToolErrorKind::Failed,
            message: message.into(),
            retryable: false,
            output: None,
        }
    }

    /// The input was unusable; the message says how to fix it.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        ToolError {
            kind: ToolErrorKind::InvalidInput,
            ..ToolError::failed(message)
        }
    }

    /// A remote tool could not be reached.
    pub fn transport(message: impl Into<String>) -> Self {
        ToolError {
            kind: ToolErrorKind::Transport,
            ..ToolError::failed(message)
        }
    }

    /// The session store failed and the call changed nothing.
    pub fn store_unavailable(message: impl Into<String>) -> Self {
        ToolError {
            kind: ToolErrorKind::StoreUnavailable,
            ..ToolError::failed(message)
        }
    }

    /// A change was sent to the session store and may or may not have been applied.
    pub fn outcome_unknown(message: impl Into<String>) -> Self {
        ToolError {
            kind: ToolErrorKind::OutcomeUnknown,
            ..ToolError::failed(message)
        }
    }

    /// Marks the failure as worth retrying.
    pub fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    /// Attaches output produced before the failure.
    pub fn with_output(mut self, output: ToolOutput) -> Self {
        self.output = Some(output);
        self
    }
}

/// Reads an optional string member of a tool input, or says what is wrong with it.
pub(crate) fn input_str<'a>(input: &'a Value, key: &str) -> Result<Option<&'a str>, ToolError> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ToolError::invalid_input(format!(
            "'{key}' must be a string, got {}",
            crate::json::type_name(other)
        ))),
    }
}
