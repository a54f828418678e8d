//! The worker adapter: tools served by a `toolgate.v1.ToolWorker` gRPC service. The call
//! deadline becomes the gRPC deadline, cancelling the call cancels the `Invoke` stream, progress
//! messages become progress reports, and an unreachable worker is a TRANSPORT error.

use std::sync::Arc;

use serde_json::Value;
use tokio_stream::StreamExt;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

use super::tool::{Invoke, RemoteDefinition, RemoteTool, remote_timeout};
use super::{RemoteError, RemoteSpec, Signal, Signals};
use toolgate_core::tools::{
    Annotations, BoxFuture, ContentPart, ToolContext, ToolError, ToolOutput,
};
use toolgate_proto::pb;
use toolgate_proto::pb::tool_worker_client::ToolWorkerClient;
use toolgate_proto::protojson::{Struct, Value as WireValue};

/// How long a call waits for a worker's trailers after its result.
const TRAILERS_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// A connected worker, shared by its tools.
struct Worker {
    /// The remote's name, for errors and signals.
    remote: String,
    client: ToolWorkerClient<Channel>,
    /// Tells the manager the worker is gone, so it reconnects and re-lists with backoff.
    signals: Signals,
}

/// An error and its causes ("transport error" alone does not say that a certificate was
/// refused).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let part = e.to_string();
        // Wrappers often repeat their source's text; say each thing once.
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
}

/// The endpoint with its host replaced by the first address the registration check resolved
/// it to, and the host; `None` when it was not resolved (an address, or a config remote).
fn pin_endpoint(
    endpoint: &str,
    spec: &RemoteSpec,
) -> Option<Result<(tonic::codegen::http::Uri, String), RemoteError>> {
    let uri: tonic::codegen::http::Uri = endpoint.parse().ok()?;
    let host = uri.host()?.to_ascii_lowercase();
    let address = spec.resolved.get(&host)?.first()?;
    let mut parts = uri.clone().into_parts();
    let authority = address.to_string();
    Some(
        authority
            .parse()
            .map_err(|e| spec.invalid(format!("endpoint '{endpoint}': {e}")))
            .and_then(|authority| {
                parts.authority = Some(authority);
                tonic::codegen::http::Uri::from_parts(parts)
                    .map_err(|e| spec.invalid(format!("endpoint '{endpoint}': {e}")))
            })
            .map(|uri| (uri, host)),
    )
}

/// The TLS client settings of an `https://` worker: its CA file, or the system's roots, and
/// the client certificate shown to it.
async fn tls_config(
    spec: &RemoteSpec,
    tls: &super::TlsSpec,
) -> Result<ClientTlsConfig, RemoteError> {
    let tls = tls.clone();
    let unreadable =
        |key: &str, path: &str, e: std::io::Error| spec.invalid(format!("tls.{key} '{path}': {e}"));
    let mut config = ClientTlsConfig::new();
    config = match &tls.ca_file {
        Some(path) => {
            let pem = tokio::fs::read(path)
                .await
                .map_err(|e| unreadable("ca_file", path, e))?;
            config.ca_certificate(Certificate::from_pem(pem))
        }
        None => config.with_native_roots(),
    };
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        let cert = tokio::fs::read(cert)
            .await
            .map_err(|e| unreadable("cert_file", cert, e))?;
        let key = tokio::fs::read(key)
            .await
            .map_err(|e| unreadable("key_file", key, e))?;
        config = config.identity(Identity::from_pem(cert, key));
    }
    if let Some(domain) = tls.domain {
        config = config.domain_name(domain);
    }
    Ok(config)
}

/// Connects (so an unreachable worker is reported at once) and lists the worker's tools.
pub async fn discover(
    spec: &RemoteSpec,
    signals: Signals,
) -> Result<Vec<Arc<RemoteTool>>, RemoteError> {
    let invalid = |reason: String| spec.invalid(reason);
    let unreachable = |reason: String| spec.unreachable(reason);
    let endpoint = spec
        .endpoint
        .clone()
        .ok_or_else(|| invalid("a worker needs an endpoint".to_owned()))?;
    let mut channel = Endpoint::from_shared(endpoint.clone())
        .map_err(|e| invalid(format!("endpoint '{endpoint}': {e}")))?
        .connect_timeout(spec.timeout);
    let mut tls = spec
        .is_https()
        .then(|| spec.tls.clone().unwrap_or_default());
    // A name the registration check resolved is connected at the address checked (requests
    // still name the endpoint, and TLS still verifies its name), not re-resolved (DNS
    // rebinding).
    if let Some(pinned) = pin_endpoint(&endpoint, spec) {
        let (uri, host) = pinned?;
        let origin = channel.uri().clone();
        channel = Endpoint::from(uri)
            .origin(origin)
            .connect_timeout(spec.timeout);
        if let Some(tls) = tls.as_mut() {
            tls.domain.get_or_insert(host);
        }
    }
    if let Some(tls) = tls {
        channel = channel
            .tls_config(tls_config(spec, &tls).await?)
            .map_err(|e| invalid(format!("tls: {e}")))?;
    }
    let channel = channel
        .connect()
        .await
        .map_err(|e| unreachable(format!("{endpoint}: {}", with_causes(&e))))?;
    let mut client = ToolWorkerClient::new(channel);
    let mut request = tonic::Request::new(pb::WorkerListToolsRequest {});
    request.set_timeout(spec.timeout);
    let listed = tokio::time::timeout(spec.timeout, client.list_tools(request))
        .await
        .map_err(|_| unreachable("ListTools did not answer in time".to_owned()))?
        .map_err(|s| unreachable(format!("ListTools failed: {:?}: {}", s.code(), s.message())))?
        .into_inner();
    let worker: Arc<dyn Invoke> = Arc::new(Worker {
        remote: spec.name.clone(),
        client,
        signals,
    });
    let tools = listed
        .tools
        .into_iter()
        .map(|t| {
            let definition = definition(spec, t)?;
            Ok(Arc::new(RemoteTool::new(definition, worker.clone())))
        })
        .collect::<Result<_, _>>()?;
    Ok(tools)
}

/// What the worker says of one of its tools, as the model sees it; refused when its schema holds
/// what JSON cannot (a schema cut short would accept anything below the cut).
fn definition(spec: &RemoteSpec, tool: pb::WorkerTool) -> Result<RemoteDefinition, RemoteError> {
    let prefix = &spec.prefix;
    let annotations = tool.annotations.unwrap_or_default();
    let input_schema = match tool.input_schema {
        Some(schema) => {
            let at = format_args!("tool '{}': input_schema", tool.name);
            let checked = schema.into_json_checked(&at);
            Value::Object(checked.map_err(|e| spec.invalid(e.to_string()))?)
        }
        None => serde_json::json!({"type": "object"}),
    };
    Ok(RemoteDefinition {
        name: format!("{prefix}{}", tool.name),
        remote_name: tool.name,
        description: tool.description,
        input_schema,
        output_schema: None,
        annotations: Annotations {
            read_only: annotations.read_only,
            destructive: annotations.destructive,
            idempotent: annotations.idempotent,
            open_world: annotations.open_world,
        },
        concurrency_safe: tool.concurrency_safe,
        resource_key: Some(tool.resource_key).filter(|k| !k.is_empty()),
    })
}

impl Worker {
    /// Maps a failed call's status; an unreachable worker is also reported to the manager.
    fn failed(&self, status: &Status) -> ToolError {
        if status.code() == Code::Unavailable {
            self.signals.send(Signal::Lost(self.remote.clone()));
        }
        from_status(&self.remote, status)
    }
}

/// A status from the worker: unreachable and timing failures are TRANSPORT, a rejected input is
/// INVALID_ARGUMENTS, anything else a tool error.
fn from_status(remote: &str, status: &Status) -> ToolError {
    let text = format!(
        "worker '{remote}': {:?}: {}",
        status.code(),
        status.message()
    );
    match status.code() {
        Code::Unavailable
        | Code::Unknown
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Internal => ToolError::transport(text),
        Code::InvalidArgument => ToolError::invalid_input(text),
        _ => ToolError::failed(text),
    }
}

/// The final result as a tool output: the structured result when set, else the content. A
/// structured result JSON cannot hold is a failure, not a result with parts silently dropped.
fn output_of(result: pb::InvokeResult) -> Result<ToolOutput, ToolError> {
    if let Some(structured) = result.structured {
        return structured
            .into_json_checked(&"the worker's structured result")
            .map(ToolOutput::Json)
            .map_err(|e| ToolError::failed(e.to_string()));
    }
    let parts = result
        .content
        .into_iter()
        .filter_map(|p| match p.part {
            Some(pb::content_part::Part::Text(t)) => Some(ContentPart::Text(t)),
            Some(pb::content_part::Part::Image(i)) => Some(ContentPart::Image {
                mime_type: i.mime_type,
                data: i.data,
            }),
            None => None,
        })
        .collect();
    Ok(ToolOutput::from_parts(parts))
}

/// The call's answer: the output, or for a result that is an error, a failure whose message is
/// the text the output reads as.
fn answer(result: pb::InvokeResult) -> Result<ToolOutput, ToolError> {
    let (is_error, retryable) = (result.is_error, result.retryable);
    let output = output_of(result)?;
    if !is_error {
        return Ok(output);
    }
    let text = output.text();
    let error = ToolError::failed(if text.is_empty() {
        "the worker reported an error".to_owned()
    } else {
        text
    });
    Err(if retryable { error.retryable() } else { error })
}

impl Worker {
    async fn call(
        &self,
        tool: &RemoteDefinition,
        input: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let m = &ctx.metadata;
        let mut request = tonic::Request::new(pb::InvokeRequest {
            tool: tool.remote_name.clone(),
            call_id: ctx.call_id.clone(),
            session_id: ctx.session_id.clone(),
            input: match input {
                Value::Object(map) => Some(Struct::from(map)),
                _ => None,
            },
            tool_call: match m.tool_call() {
                Value::Object(map) => Some(Struct::from(map)),
                _ => None,
            },
            tool_name: m.tool_name.clone(),
            tool_arguments: Some(WireValue::from(serde_json::Value::clone(&m.tool_arguments))),
            tool_call_id: m.tool_call_id.clone(),
            tool_call_index: u32::try_from(m.tool_call_index).unwrap_or(u32::MAX),
        });
        // The call's deadline reaches the worker as the gRPC deadline, with a small margin so
        // toolgate's own deadline (which cancels the stream) decides the call's result.
        if let Some(timeout) = remote_timeout(ctx) {
            request.set_timeout(timeout);
        }
        for (key, value) in [
            ("traceparent", ctx.traceparent()),
            ("tracestate", ctx.tracestate()),
        ] {
            if let Some(value) = value.and_then(|v| v.parse().ok()) {
                request.metadata_mut().insert(key, value);
            }
        }
        let mut stream = self
            .client
            .clone()
            .invoke(request)
            .await
            .map_err(|s| self.failed(&s))?
            .into_inner();
        while let Some(message) = stream.next().await {
            let event = message.map_err(|s| self.failed(&s))?;
            match event.event {
                Some(pb::invoke_event::Event::Progress(p)) => {
                    if let Some(sink) = &ctx.progress {
                        let total = (p.total > 0.0).then_some(p.total);
                        sink.report(p.progress, total, &p.message);
                    }
                }
                Some(pb::invoke_event::Event::Result(result)) => {
                    // Read the stream to its end (the trailers) before answering. A stream dropped
                    // before its trailers is reset, the trailers then arrive for a closed stream,
                    // and h2 counts each against its limit of 1024 locally reset streams per
                    // connection, past which it closes the worker's channel (ENHANCE_YOUR_CALM).
                    // Bounded: a worker that never ends its stream must not hold the answer.
                    let _ = tokio::time::timeout(TRAILERS_WAIT, stream.trailers()).await;
                    return answer(result);
                }
                None => {}
            }
        }
        Err(ToolError::transport(format!(
            "worker '{}' ended the call without a result",
            self.remote
        )))
    }
}

impl Invoke for Worker {
    fn invoke<'a>(
        &'a self,
        tool: &'a RemoteDefinition,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(self.call(tool, input, ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(text: &str) -> pb::ContentPart {
        pb::ContentPart {
            part: Some(pb::content_part::Part::Text(text.to_owned())),
        }
    }

    fn failing(content: Vec<pb::ContentPart>) -> pb::InvokeResult {
        pb::InvokeResult {
            content,
            is_error: true,
            ..pb::InvokeResult::default()
        }
    }

    #[track_caller]
    fn check(result: pb::InvokeResult, message: &str) {
        let error = answer(result).unwrap_err();
        assert_eq!(error.message, message);
    }

    #[test]
    fn a_failing_result_reads_as_the_text_of_its_content() {
        check(failing(vec![text("no such user")]), "no such user");
        check(
            failing(vec![text("no such user"), text("tried alice")]),
            "no such user\ntried alice",
        );
        check(failing(Vec::new()), "the worker reported an error");
        let structured = pb::InvokeResult {
            structured: Some(WireValue::from(serde_json::json!({"code": 7}))),
            ..failing(vec![text("ignored")])
        };
        check(structured, r#"{"code":7}"#);
    }

    #[test]
    fn a_structured_result_json_cannot_hold_is_a_failure_not_a_quiet_null() {
        use prost::Message;
        let nan = prost_types::Value {
            kind: Some(prost_types::value::Kind::NumberValue(f64::NAN)),
        };
        let result = pb::InvokeResult {
            structured: Some(WireValue::decode(&*nan.encode_to_vec()).unwrap()),
            ..pb::InvokeResult::default()
        };
        check(
            result,
            "the worker's structured result holds a number that is not finite",
        );
    }
}
