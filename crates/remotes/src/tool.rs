//! What every remote tool shares, whatever its protocol: its definition as the model sees it,
//! the one `Tool` implementation over that definition, and the deadline a call passes on.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use toolgate_core::tools::{Annotations, BoxFuture, Tool, ToolContext, ToolError, ToolOutput};

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
    /// JSON Schema of the result, when the remote declares one (MCP's `outputSchema`).
    pub output_schema: Option<Value>,
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
    /// SHA-256 of the canonical JSON of every field, in hex: what a pin holds. A digest a remote
    /// could match with another definition would let it swap a pinned tool's description, so
    /// it must resist collisions and second preimages (FNV-1a-64 did not: a collision between a
    /// benign and a malicious description took minutes to find). Every field is covered,
    /// including those that change how calls are scheduled.
    pub fn digest(&self) -> String {
        let a = self.annotations;
        let mut fields = serde_json::json!({
            "name": self.name,
            "remote_name": self.remote_name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": {
                "read_only": a.read_only,
                "destructive": a.destructive,
                "idempotent": a.idempotent,
                "open_world": a.open_world,
            },
            "concurrency_safe": self.concurrency_safe,
            "resource_key": self.resource_key,
        });
        // Only when declared: the pins of tools without one stay what they were.
        if let Some(schema) = &self.output_schema {
            fields["output_schema"] = schema.clone();
        }
        let canonical = toolgate_core::json::canonical(&fields);
        let digest = ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes());
        let mut hex = String::with_capacity(64);
        toolgate_core::hash::push_hex(&mut hex, digest.as_ref());
        hex
    }

    /// The resource-key reference (`arguments.path` or `input.path`) resolved against an input.
    fn resource_key_of(&self, input: &Value) -> Option<String> {
        let template = self.resource_key.as_deref()?;
        let path = template
            .strip_prefix("arguments.")
            .or_else(|| template.strip_prefix("input."))?;
        toolgate_core::mapping::path(input, path).map(|v| match v {
            Value::String(s) => s.clone(),
            other => toolgate_core::json::canonical(other),
        })
    }
}

impl RemoteTool {
    /// The tool `definition`, run by `remote`.
    pub fn new(definition: RemoteDefinition, remote: Arc<dyn Invoke>) -> Self {
        RemoteTool { definition, remote }
    }

    /// The definition as the remote offered it.
    pub fn definition(&self) -> &RemoteDefinition {
        &self.definition
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
    fn output_schema(&self) -> Option<Value> {
        self.definition.output_schema.clone()
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
pub(crate) fn remote_timeout(ctx: &ToolContext) -> Option<Duration> {
    let deadline = ctx.deadline?;
    Some(deadline.saturating_duration_since(tokio::time::Instant::now()) + REMOTE_DEADLINE_MARGIN)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn plain(resource_key: Option<&str>) -> RemoteDefinition {
        RemoteDefinition {
            name: "r.t".into(),
            remote_name: "t".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: Annotations::default(),
            concurrency_safe: false,
            resource_key: resource_key.map(str::to_owned),
        }
    }

    #[track_caller]
    fn check(template: Option<&str>, input: Value, expected: Option<&str>) {
        assert_eq!(plain(template).resource_key_of(&input).as_deref(), expected);
    }

    #[test]
    fn the_digest_is_sha256_of_every_field() {
        let base = plain(None);
        // sha256sum of the canonical JSON, computed apart:
        // {"annotations":{"destructive":false,"idempotent":false,"open_world":false,
        // "read_only":false},"concurrency_safe":false,"description":"","input_schema":
        // {"type":"object"},"name":"r.t","remote_name":"t","resource_key":null}
        // (no `output_schema` key when none is declared: the pins of such tools are what they
        // were before toolgate read output schemas)
        assert_eq!(
            base.digest(),
            "b87c24729ac20e20230a1b1df91052ec35a36d9c9a740acee4c7e1b9f9946fcb"
        );
        let changes: [fn(&mut RemoteDefinition); 9] = [
            |d| d.name.push('x'),
            |d| d.remote_name.push('x'),
            |d| d.description.push('x'),
            |d| d.input_schema = json!({"type": "object", "required": ["x"]}),
            |d| d.annotations.destructive = true,
            |d| d.annotations.open_world = true,
            |d| d.concurrency_safe = true,
            |d| d.resource_key = Some("arguments.path".into()),
            |d| d.output_schema = Some(json!({"type": "object"})),
        ];
        for (n, change) in changes.iter().enumerate() {
            let mut changed = plain(None);
            change(&mut changed);
            assert_ne!(changed.digest(), base.digest(), "change {n}");
        }
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
