//! What every remote tool shares, whatever its protocol: its definition as the model sees it,
//! the one `Tool` implementation over that definition, and the deadline a call passes on.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::tools::{Annotations, BoxFuture, Tool, ToolContext, ToolError, ToolOutput};

/// A remote tool as the model sees it: the same for a worker, an MCP server and an HTTP tool.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteDefinition {
    /// The name toolgate registers: the remote's prefix, then the remote's own name.
    pub name: String,
    /// The remote's own name for the tool, which a call names on the wire.
    pub remote_name: String,
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
    pub annotations: Annotations,
    /// Whether a call may run beside other calls.
    pub concurrency_safe: bool,
    /// A reference into the input naming the resource a call touches (`arguments.path`).
    pub resource_key: Option<String>,
}

/// One protocol's way of running a call: what each adapter implements.
pub trait Invoke: Send + Sync + 'static {
    /// Runs `tool` on the remote with `input`, under the contract of `Tool::call`.
    fn invoke<'a>(
        &'a self,
        tool: &'a RemoteDefinition,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;
}

/// A tool of a remote: its definition, and the remote that runs it (shared by its tools).
pub struct RemoteTool {
    definition: RemoteDefinition,
    remote: Arc<dyn Invoke>,
}

/// Extra time a remote gets past the call's deadline, so toolgate's own deadline (which cancels
/// the call) decides the result and the remote's clock only stops work that is abandoned.
const REMOTE_DEADLINE_MARGIN: Duration = Duration::from_millis(100);

impl RemoteDefinition {
    /// The resource-key reference (`arguments.path` or `input.path`) resolved against an input.
    fn resource_key_of(&self, input: &Value) -> Option<String> {
        let template = self.resource_key.as_deref()?;
        let path = template
            .strip_prefix("arguments.")
            .or_else(|| template.strip_prefix("input."))?;
        crate::mapping::path(input, path).map(|v| match v {
            Value::String(s) => s.clone(),
            other => crate::json::canonical(other),
        })
    }
}

impl RemoteTool {
    /// The tool `definition`, run by `remote`.
    pub fn new(definition: RemoteDefinition, remote: Arc<dyn Invoke>) -> Self {
        RemoteTool { definition, remote }
    }
}

impl Tool for RemoteTool {
    fn name(&self) -> &str {
        &self.definition.name
    }
    fn description(&self) -> &str {
        &self.definition.description
    }
    fn input_schema(&self) -> Value {
        self.definition.input_schema.clone()
    }
    fn annotations(&self) -> Annotations {
        self.definition.annotations
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        self.definition.concurrency_safe
    }
    fn resource_key(&self, input: &Value) -> Option<String> {
        self.definition.resource_key_of(input)
    }
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        self.remote.invoke(&self.definition, input, ctx)
    }
}

/// How long the remote side may take for this call: the time left before its deadline plus the
/// margin; none without a deadline.
pub fn remote_timeout(ctx: &ToolContext) -> Option<Duration> {
    let deadline = ctx.deadline?;
    Some(deadline.saturating_duration_since(tokio::time::Instant::now()) + REMOTE_DEADLINE_MARGIN)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[track_caller]
    fn check(template: Option<&str>, input: Value, expected: Option<&str>) {
        let definition = RemoteDefinition {
            name: "r.t".into(),
            remote_name: "t".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            annotations: Annotations::default(),
            concurrency_safe: false,
            resource_key: template.map(str::to_owned),
        };
        assert_eq!(definition.resource_key_of(&input).as_deref(), expected);
    }

    #[test]
    fn a_resource_key_names_a_value_of_the_input() {
        check(
            Some("arguments.path"),
            json!({"path": "a.txt"}),
            Some("a.txt"),
        );
        check(Some("input.path"), json!({"path": "a.txt"}), Some("a.txt"));
        check(
            Some("arguments.id"),
            json!({"id": {"b": 1, "a": 2}}),
            Some(r#"{"a":2,"b":1}"#),
        );
        check(Some("arguments.path"), json!({}), None);
        check(Some("ctx.session"), json!({"session": "s"}), None);
        check(None, json!({"path": "a.txt"}), None);
    }
}
