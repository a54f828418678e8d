//! The MCP adapter: tools of a Model Context Protocol server, through the official Rust SDK
//! (rmcp) as a client, over stdio (a child process with a scrubbed environment, leading its own
//! process group, killed whole when the remote goes) or HTTP: streamable HTTP, or the older
//! HTTP+SSE (`sse`), both through `mcp_http` (TLS, the bearer token, its retry on `401`). `tools/list` gives the
//! tools (annotations set the defaults: read-only tools are concurrency-safe); `tools/call` runs
//! one: text content is the content, `structuredContent` the result, images stay parts,
//! `isError` is TOOL_ERROR, a closed transport TRANSPORT.
//! Progress notifications become progress reports; a timeout or cancellation sends
//! `notifications/cancelled` to the server.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientNotification, ClientRequest, ContentBlock, ProgressNotificationParam, ProgressToken,
    RequestId, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::Value;

use super::http::Failures;
use super::mcp_http::AuthedHttp;
use super::sse::SseTransport;
use super::tool::{Invoke, RemoteDefinition, RemoteTool, remote_timeout};
use super::{McpTransport, RemoteError, RemoteSpec, Signal, Signals};
use toolgate_core::child::{ChildEnv, ProcessGroup};
use toolgate_core::metrics::Metrics;
use toolgate_core::tools::{
    Annotations, BoxFuture, ContentPart, ProgressSink, ToolContext, ToolError, ToolOutput,
};

type Sinks = Arc<Mutex<HashMap<ProgressToken, ProgressSink>>>;

/// Routes the server's progress notifications to the calls that asked for them, and tells the
/// remote manager when the server's tool list changes.
#[derive(Clone)]
struct Handler {
    sinks: Sinks,
    remote: String,
    signals: Signals,
}

impl ClientHandler for Handler {
    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let sink = self.sinks.lock().get(&params.progress_token).cloned();
        if let Some(sink) = sink {
            let message = params.message.unwrap_or_default();
            sink.report(params.progress, params.total, &message);
        }
        std::future::ready(())
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.signals.send(Signal::ListChanged(self.remote.clone()));
        std::future::ready(())
    }
}

/// One connection to an MCP server, shared by its tools (each call runs on it); closing it (the
/// last tool dropped) ends the session and, for stdio, kills the process.
pub struct Connection {
    service: RunningService<RoleClient, Handler>,
    sinks: Sinks,
    remote: String,
    signals: Signals,
    /// A stdio server's process group: killed when the connection goes (or `stop` is called), so
    /// what the server started goes with it.
    group: Mutex<ProcessGroup>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

/// Connects (spawning the command or opening the URL), initializes and lists the tools.
///
/// The HTTP client (`http::client`) keeps its keep-alive connections pooled, with
/// `TCP_NODELAY`. rmcp's default client keeps no idle connection (`pool_max_idle_per_host(0)`,
/// to dodge delayed-ACK stalls), so every `tools/call` paid a TCP connect and left a socket in
/// TIME_WAIT. With Nagle off the stall does not happen (`scripts/bench-remote` shows none), and
/// rmcp drains a response's SSE stream so the connection goes back to the pool.
pub async fn discover(
    spec: &RemoteSpec,
    signals: Signals,
    metrics: Arc<Metrics>,
) -> Result<(Vec<Arc<RemoteTool>>, Arc<Connection>), RemoteError> {
    let unreachable = |reason: String| spec.unreachable(reason);
    let invalid = |reason: String| spec.invalid(reason);
    let handler = Handler {
        sinks: Sinks::default(),
        remote: spec.name.clone(),
        signals: signals.clone(),
    };
    let sinks = handler.sinks.clone();
    let group = Mutex::new(ProcessGroup::led_by(None));
    let connecting = async {
        if let Some((program, args)) = spec.command.split_first() {
            let env = ChildEnv::new(spec.env_allow(), &spec.env);
            let command = tokio::process::Command::new(program).configure(|c| {
                c.args(args);
                if let Some(dir) = &spec.cwd {
                    c.current_dir(dir);
                }
                env.apply(c);
            });
            let transport = TokioChildProcess::builder(command)
                .stderr(std::process::Stdio::null())
                .spawn()
                .map(|(t, _)| t)
                .map_err(|e| unreachable(format!("cannot start '{program}': {e}")))?;
            // Taken before initialize: a server that fails it is killed with its group too.
            *group.lock() = ProcessGroup::led_by(transport.id());
            handler
                .serve(transport)
                .await
                .map_err(|e| unreachable(format!("initialize failed: {e}")))
        } else if let Some(url) = &spec.url {
            let mut headers = std::collections::HashMap::new();
            for (name, value) in &spec.headers {
                let name = HeaderName::try_from(name.as_str())
                    .map_err(|e| invalid(format!("header name '{name}': {e}")))?;
                let value = HeaderValue::try_from(value.as_str())
                    .map_err(|e| invalid(format!("header '{name}': {e}")))?;
                headers.insert(name, value);
            }
            let http = AuthedHttp {
                client: super::http::client(spec, super::http::same_origin_redirects())?,
                credentials: super::http::credentials(spec)?,
                failures: Failures::new(&spec.name, metrics.clone()),
            };
            let initialize_failed = |e: &(dyn std::error::Error + 'static)| {
                let reason = match super::mcp_http::cause_of(e) {
                    Some((_, _, detail)) => detail,
                    None => e.to_string(),
                };
                unreachable(format!("{url}: initialize failed: {reason}"))
            };
            match spec.mcp_transport() {
                McpTransport::StreamableHttp => {
                    let transport = StreamableHttpClientTransport::with_client(
                        http,
                        StreamableHttpClientTransportConfig::with_uri(url.as_str())
                            .custom_headers(headers),
                    );
                    handler
                        .serve(transport)
                        .await
                        .map_err(|e| initialize_failed(&e))
                }
                McpTransport::Sse => {
                    let headers = headers.into_iter().collect();
                    let transport = SseTransport::connect(http, url, headers)
                        .await
                        .map_err(|e| initialize_failed(&e))?;
                    handler
                        .serve(transport)
                        .await
                        .map_err(|e| initialize_failed(&e))
                }
            }
        } else {
            Err(invalid(
                "an mcp remote needs a command (stdio) or a url (streamable HTTP)".to_owned(),
            ))
        }
    };
    let service = tokio::time::timeout(spec.timeout, connecting)
        .await
        .map_err(|_| unreachable("the server did not initialize in time".to_owned()))??;
    let connection = Arc::new(Connection {
        service,
        sinks,
        remote: spec.name.clone(),
        signals,
        group,
    });
    let tools = list(spec, &connection).await?;
    Ok((tools, connection))
}

/// Lists the tools over an open connection (a tool list change keeps the session's state).
pub async fn list(
    spec: &RemoteSpec,
    connection: &Arc<Connection>,
) -> Result<Vec<Arc<RemoteTool>>, RemoteError> {
    let unreachable = |reason: String| spec.unreachable(reason);
    let listed = tokio::time::timeout(spec.timeout, connection.service.peer().list_all_tools())
        .await
        .map_err(|_| unreachable("tools/list did not answer in time".to_owned()))?
        .map_err(|e| unreachable(format!("tools/list failed: {e}")))?;
    let remote: Arc<dyn Invoke> = connection.clone();
    let tools = listed
        .into_iter()
        .map(|t| {
            Arc::new(RemoteTool::new(
                definition(&spec.prefix, &t),
                remote.clone(),
            ))
        })
        .collect();
    Ok(tools)
}

/// What the server lists of a tool, as the model sees it. Read-only MCP tools are safe to run
/// beside other calls.
fn definition(prefix: &str, tool: &rmcp::model::Tool) -> RemoteDefinition {
    let a = tool.annotations.clone().unwrap_or_default();
    let read_only = a.read_only_hint.unwrap_or(false);
    RemoteDefinition {
        name: format!("{prefix}{}", tool.name),
        remote_name: tool.name.to_string(),
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        input_schema: Value::Object((*tool.input_schema).clone()),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|schema| Value::Object((**schema).clone())),
        annotations: Annotations {
            read_only,
            // MCP's default for destructiveHint is true, but only for tools that are not
            // read-only.
            destructive: a.destructive_hint.unwrap_or(!read_only),
            idempotent: a.idempotent_hint.unwrap_or(false),
            open_world: a.open_world_hint.unwrap_or(true),
        },
        concurrency_safe: read_only,
        resource_key: None,
    }
}

/// Ends a request's bookkeeping however the call ends: its progress sink leaves the routing
/// table, and a request dropped before it answered gets `notifications/cancelled`.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
    sinks: Sinks,
    token: ProgressToken,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.sinks.lock().remove(&self.token);
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        let notification = CancelledNotification::new(CancelledNotificationParam::new(
            Some(id),
            Some("cancelled by toolgate (deadline or client)".to_owned()),
        ));
        // Drop cannot wait; the runtime sends it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer
                    .send_notification(ClientNotification::CancelledNotification(notification))
                    .await;
            });
        }
    }
}

fn from_service_error(remote: &str, error: &ServiceError) -> ToolError {
    // A refusal (401, 403, no credentials) or a TLS failure reads as what it is; the log gets
    // the detail (it may name the server), the model the short text.
    if let Some((answer, short, detail)) = super::mcp_http::cause_of(error) {
        tracing::warn!(target: "toolgate::tools::remote::mcp", remote, error = %detail, "mcp server refused the request");
        let text = format!("mcp server '{remote}': {short}");
        return if answer {
            ToolError::failed(text)
        } else {
            ToolError::transport(text)
        };
    }
    let text = format!("mcp server '{remote}': {error}");
    match error {
        // The transport's own errors can carry the server's URL: the log gets them, the model
        // a fixed text.
        ServiceError::TransportSend(_) | ServiceError::TransportClosed => {
            tracing::warn!(target: "toolgate::tools::remote::mcp", remote, %error, "mcp server unreachable");
            let what = match error {
                ServiceError::TransportClosed => "the connection closed",
                _ => "the request could not be sent",
            };
            ToolError::transport(format!("mcp server '{remote}': {what}"))
        }
        // The server says the arguments were wrong: the caller's fault, not the server's, so it
        // is not counted against the tool's health.
        ServiceError::McpError(e) if e.code == rmcp::model::ErrorCode::INVALID_PARAMS => {
            ToolError::invalid_input(text)
        }
        ServiceError::McpError(_) => ToolError::failed(text),
        _ => ToolError::transport(text),
    }
}

impl Connection {
    /// Kills a stdio server's process group now, whoever still holds the connection (the
    /// server stops: nothing may outlive it). Its calls then fail as a closed transport.
    pub fn stop(&self) {
        self.group.lock().kill();
    }

    async fn call(
        &self,
        tool: &RemoteDefinition,
        input: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let arguments = match input {
            Value::Object(map) => Some(map),
            _ => None,
        };
        let mut params = CallToolRequestParams::new(tool.remote_name.clone());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut options = PeerRequestOptions::no_options();
        options.timeout = remote_timeout(ctx);
        if let Some(traceparent) = ctx.traceparent() {
            let mut meta = serde_json::Map::new();
            meta.insert("traceparent".to_owned(), Value::String(traceparent));
            if let Some(tracestate) = ctx.tracestate() {
                meta.insert("tracestate".to_owned(), Value::String(tracestate));
            }
            options.meta = Some(rmcp::model::RequestMetaObject(rmcp::model::MetaObject(
                meta,
            )));
        }
        let peer = self.service.peer().clone();
        let handle = match peer.send_cancellable_request(request, options).await {
            Ok(handle) => handle,
            Err(e) => {
                // The server is gone (a stdio server exited): the manager reconnects, with backoff.
                if matches!(
                    e,
                    ServiceError::TransportClosed | ServiceError::TransportSend(_)
                ) {
                    self.signals.send(Signal::Lost(self.remote.clone()));
                }
                return Err(from_service_error(&self.remote, &e));
            }
        };
        let token = handle.progress_token.clone();
        if let Some(sink) = &ctx.progress {
            self.sinks.lock().insert(token.clone(), sink.clone());
        }
        let mut guard = CancelOnDrop {
            peer,
            id: Some(handle.id.clone()),
            sinks: self.sinks.clone(),
            token,
        };
        let answer = handle.await_response().await;
        guard.id = None;
        drop(guard);
        if matches!(answer, Err(ServiceError::TransportClosed)) {
            self.signals.send(Signal::Lost(self.remote.clone()));
        }
        match answer.map_err(|e| from_service_error(&self.remote, &e))? {
            ServerResult::CallToolResult(result) => {
                if result.is_error.unwrap_or(false) {
                    // The error reads as the content; a structured result does not replace it.
                    let text = output_of(&result.content, None).text();
                    let message = if text.is_empty() {
                        "the MCP tool reported an error".to_owned()
                    } else {
                        text
                    };
                    return Err(ToolError::failed(message));
                }
                Ok(output_of(&result.content, result.structured_content))
            }
            _ => Err(ToolError::failed(format!(
                "mcp server '{}': unexpected reply to tools/call",
                self.remote
            ))),
        }
    }
}

/// `structuredContent` is the result when present; otherwise the content blocks.
fn output_of(content: &[ContentBlock], structured: Option<Value>) -> ToolOutput {
    if let Some(value) = structured {
        return ToolOutput::Json(value);
    }
    let parts = content
        .iter()
        .filter_map(|c| {
            if let Some(t) = c.as_text() {
                Some(ContentPart::Text(t.text.clone()))
            } else {
                c.as_image().map(|i| ContentPart::Image {
                    mime_type: i.mime_type.clone(),
                    data: i.data.clone(),
                })
            }
        })
        .collect();
    ToolOutput::from_parts(parts)
}

impl Invoke for Connection {
    fn invoke<'a>(
        &'a self,
        tool: &'a RemoteDefinition,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(self.call(tool, input, ctx))
    }
}
