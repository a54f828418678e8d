//! HTTP tools: a tool defined by a URL. toolgate POSTs `{call_id, session_id, name, input,
//! metadata}` as JSON and reads the JSON reply as the tool's return value (result selection
//! applies); a non-2xx reply is a TOOL_ERROR with the status and a bounded body; a connection
//! failure or timeout is TRANSPORT. The call deadline bounds the request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{HttpToolDefinition, RemoteError, RemoteSpec};
use crate::tools::{Annotations, BoxFuture, Tool, ToolContext, ToolError, ToolOutput};

/// Characters of a failed reply's body kept in the error.
const BODY_PREVIEW: usize = 500;

/// A tool served over HTTP.
pub struct HttpTool {
    name: String,
    remote: String,
    url: String,
    headers: BTreeMap<String, String>,
    definition: HttpToolDefinition,
    client: reqwest::Client,
}

/// Builds the remote's one tool (nothing to discover: the definition is in the config).
pub fn discover(spec: &RemoteSpec) -> Result<Vec<Arc<dyn Tool>>, RemoteError> {
    let invalid = |reason: String| RemoteError::Invalid {
        name: spec.name.clone(),
        reason,
    };
    let url = spec
        .url
        .clone()
        .ok_or_else(|| invalid("an http remote needs a url".to_owned()))?;
    let definition = spec
        .definition
        .clone()
        .ok_or_else(|| invalid("an http remote needs a [definition] of its tool".to_owned()))?;
    let client = pooled_client(spec.timeout)
        .build()
        .map_err(|e| invalid(format!("http client: {e}")))?;
    Ok(vec![Arc::new(HttpTool {
        name: format!("{}{}", spec.prefix, definition.name),
        remote: spec.name.clone(),
        url,
        headers: spec.headers.clone(),
        definition,
        client,
    })])
}

/// How remote tools reach HTTP servers: one client per remote, whose keep-alive connections
/// are pooled and reused across calls, with `TCP_NODELAY` so a small request or reply never
/// waits for the peer's delayed ACK. An idle connection is dropped after 4 s, before the 5 s
/// keep-alive timeout of Node's and uvicorn's servers closes it under a request already sent.
pub(super) fn pooled_client(connect_timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(4))
}

impl HttpTool {
    async fn post(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let m = &ctx.metadata;
        let body = json!({
            "call_id": ctx.call_id,
            "session_id": ctx.session_id,
            "name": self.definition.name,
            "input": input,
            "metadata": {
                "tool_call": m.tool_call(),
                "tool_name": m.tool_name,
                "tool_arguments": &*m.tool_arguments,
                "tool_call_id": m.tool_call_id,
                "tool_call_index": m.tool_call_index,
            },
        });
        let mut request = self.client.post(&self.url).json(&body);
        for (k, v) in &self.headers {
            request = request.header(k, v);
        }
        if let Some(timeout) = super::remote_timeout(ctx) {
            request = request.timeout(timeout);
        }
        if let Some(traceparent) = ctx.traceparent() {
            request = request.header("traceparent", traceparent);
        }
        let response = request.send().await.map_err(|e| {
            ToolError::transport(format!("http tool '{}' at {}: {e}", self.remote, self.url))
        })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| {
            ToolError::transport(format!(
                "http tool '{}': reading the reply: {e}",
                self.remote
            ))
        })?;
        if !status.is_success() {
            let preview = crate::json::truncate_chars(&text, BODY_PREVIEW);
            let error = ToolError::failed(format!("HTTP {}: {preview}", status.as_u16()));
            // 5xx and 429 may pass; the reflector retries them for idempotent tools.
            return Err(if status.is_server_error() || status.as_u16() == 429 {
                error.retryable()
            } else {
                error
            });
        }
        Ok(match serde_json::from_str::<Value>(&text) {
            Ok(value) => ToolOutput::Json(value),
            Err(_) => ToolOutput::Text(text),
        })
    }
}

impl Tool for HttpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.definition.description
    }
    fn input_schema(&self) -> Value {
        self.definition.input_schema.clone()
    }
    fn annotations(&self) -> Annotations {
        let d = &self.definition;
        Annotations {
            read_only: d.read_only,
            destructive: d.destructive,
            idempotent: d.idempotent,
            open_world: d.open_world,
        }
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        self.definition.concurrency_safe
    }
    fn resource_key(&self, input: &Value) -> Option<String> {
        super::resource_key(self.definition.resource_key.as_deref(), input)
    }
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(self.post(input, ctx))
    }
}
