//! The calls `mcp_driver` measures, one connection each: `tools/call` of `echo` over MCP
//! streamable HTTP (the stateless 2026-07-28 form, or a 2025-11-25 session), and toolgate's
//! `Dispatch` of one `echo` call over gRPC. Every reply is checked to be the echo of exactly the
//! input sent; anything else is an error with a short reason.

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tonic::transport::Channel;
use toolgate::pb;
use toolgate::pb::tool_gate_client::ToolGateClient;
use toolgate::protojson;

use super::support::{BoxError, connect};

/// The stateless revision: one self-contained POST per request.
pub(crate) const STATELESS: &str = "2026-07-28";
/// The last revision with the `initialize` handshake and `Mcp-Session-Id`.
pub(crate) const SESSION: &str = "2025-11-25";
/// The longest a call may take before it counts as an error.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How a target is called.
#[derive(Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// `tools/call` as a 2026-07-28 request: headers and `_meta` carry the revision.
    McpStateless,
    /// `tools/call` in a 2025-11-25 session, opened once per connection.
    McpSession,
    /// toolgate's unary `Dispatch`, one HTTP/2 connection per worker.
    Grpc,
    /// toolgate's unary `Dispatch`, every worker on one shared HTTP/2 connection.
    GrpcShared,
}

/// One worker's way to the server: its own keep-alive connection (or, for `GrpcShared`, a
/// handle on the shared one) and, for a 2025-11-25 session, the session's id.
pub(crate) enum Conn {
    Mcp {
        client: reqwest::Client,
        url: String,
        headers: HeaderMap,
        session: Option<String>,
    },
    Grpc(ToolGateClient<Channel>),
}

impl Conn {
    /// `count` connections to `addr` (an MCP URL, or host:port for gRPC); a session target
    /// opens its sessions here, outside any measurement.
    pub(crate) async fn open(kind: Kind, addr: &str, count: usize) -> Result<Vec<Conn>, BoxError> {
        let mut conns = Vec::with_capacity(count);
        let shared = match kind {
            Kind::GrpcShared => Some(ToolGateClient::new(connect(addr).await?)),
            _ => None,
        };
        for _ in 0..count {
            let conn = match kind {
                Kind::McpStateless => Conn::mcp(addr, STATELESS, None)?,
                Kind::McpSession => {
                    let conn = Conn::mcp(addr, SESSION, None)?;
                    let session = conn.initialize().await?;
                    Conn::mcp(addr, SESSION, Some(session))?
                }
                Kind::Grpc => Conn::Grpc(ToolGateClient::new(connect(addr).await?)),
                Kind::GrpcShared => match &shared {
                    Some(client) => Conn::Grpc(client.clone()),
                    None => return Err("no shared channel".into()),
                },
            };
            conns.push(conn);
        }
        Ok(conns)
    }

    /// A client of its own, so that its pool holds exactly this worker's one connection; kept
    /// idle up to a minute, since the other targets' slices run between this one's.
    fn mcp(url: &str, version: &str, session: Option<String>) -> Result<Conn, BoxError> {
        let client = toolgate_remotes::tls::client_builder(None, Duration::from_secs(5))?
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(1)
            .timeout(CALL_TIMEOUT)
            .build()?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert("mcp-protocol-version", HeaderValue::from_str(version)?);
        if version == STATELESS {
            // SEP-2243: the method and the tool's name ride in headers too, for middleboxes.
            headers.insert("mcp-method", HeaderValue::from_static("tools/call"));
            headers.insert("mcp-name", HeaderValue::from_static("echo"));
        }
        if let Some(id) = &session {
            headers.insert("mcp-session-id", HeaderValue::from_str(id)?);
        }
        Ok(Conn::Mcp {
            client,
            url: url.to_owned(),
            headers,
            session,
        })
    }

    /// The 2025-11-25 handshake: `initialize`, then `notifications/initialized`; the session id.
    async fn initialize(&self) -> Result<String, BoxError> {
        let Conn::Mcp {
            client,
            url,
            headers,
            ..
        } = self
        else {
            return Err("only MCP connections initialize".into());
        };
        let body = json!({
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": SESSION,
                "capabilities": {},
                "clientInfo": {"name": "mcp_driver", "version": "0"},
            },
        });
        let mut plain = headers.clone();
        plain.remove("mcp-protocol-version");
        let reply = client
            .post(url)
            .headers(plain)
            .body(body.to_string())
            .send()
            .await?;
        let session = reply
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or("initialize: no Mcp-Session-Id in the reply")?;
        let text = reply.text().await?;
        let answer = jsonrpc_reply(&text, 0)?;
        if answer.get("result").is_none() {
            return Err(format!("initialize failed: {answer}").into());
        }
        let mut in_session = headers.clone();
        in_session.insert("mcp-session-id", HeaderValue::from_str(&session)?);
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let reply = client
            .post(url)
            .headers(in_session)
            .body(note.to_string())
            .send()
            .await?;
        if !reply.status().is_success() {
            return Err(format!("notifications/initialized: HTTP {}", reply.status()).into());
        }
        Ok(session)
    }

    /// Ends a 2025-11-25 session (DELETE); nothing for the other kinds.
    pub(crate) async fn close(&self) {
        if let Conn::Mcp {
            client,
            url,
            headers,
            session: Some(_),
        } = self
        {
            let _ = client.delete(url).headers(headers.clone()).send().await;
        }
    }

    /// One call of `echo` with input `{"n": n}`; `n` is also the JSON-RPC id. Distinct inputs
    /// keep toolgate's loop detection (repeats of one tool, input and result in a session)
    /// out of the way: all anonymous stateless MCP calls share one toolgate session.
    pub(crate) async fn call(&self, n: u64) -> Result<(), String> {
        match tokio::time::timeout(CALL_TIMEOUT, self.call_once(n)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("no reply within {CALL_TIMEOUT:?}")),
        }
    }

    async fn call_once(&self, n: u64) -> Result<(), String> {
        match self {
            Conn::Mcp {
                client,
                url,
                headers,
                session,
            } => {
                let mut params = json!({"name": "echo", "arguments": {"n": n}});
                if session.is_none() {
                    params["_meta"] = json!({
                        "io.modelcontextprotocol/protocolVersion": STATELESS,
                        "io.modelcontextprotocol/clientInfo": {"name": "mcp_driver", "version": "0"},
                        "io.modelcontextprotocol/clientCapabilities": {},
                    });
                }
                let body =
                    json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params});
                let reply = client
                    .post(url)
                    .headers(headers.clone())
                    .body(body.to_string())
                    .send()
                    .await
                    .map_err(|e| format!("POST: {}", toolgate::telemetry::error_chain(&e)))?;
                let status = reply.status();
                let text = reply.text().await.map_err(|e| {
                    format!(
                        "reading the reply: {}",
                        toolgate::telemetry::error_chain(&e)
                    )
                })?;
                if !status.is_success() {
                    return Err(format!("HTTP {status}: {}", clip(&text)));
                }
                let answer = jsonrpc_reply(&text, n).map_err(|e| e.to_string())?;
                check_echo(&answer, n)
            }
            Conn::Grpc(client) => {
                let call = json!({"id": "c", "name": "echo", "arguments": {"n": n}});
                let request = pb::DispatchBatchRequest {
                    calls: vec![protojson::Value::from(call)],
                    ..Default::default()
                };
                let result = client
                    .clone()
                    .dispatch(request)
                    .await
                    .map_err(|s| format!("Dispatch: {:?}: {}", s.code(), s.message()))?
                    .into_inner();
                match result.results.as_slice() {
                    [r] if r.success && result.all_succeeded && r.content == echoed(n) => Ok(()),
                    [r] if r.success => Err(format!("echo answered {}", clip(&r.content))),
                    [r] => Err(format!("echo failed: {} ({})", r.error, r.error_class)),
                    _ => Err(format!("{} results for one call", result.results.len())),
                }
            }
        }
    }
}

/// What `echo` answers to `{"n": n}`, as toolgate's text content.
fn echoed(n: u64) -> String {
    format!("{{\"n\":{n}}}")
}

/// The JSON-RPC message answering request `id` in a reply body: the body itself (JSON), or
/// the `data` of one of its events (an SSE stream, which may also carry notifications or a
/// priming event without data).
fn jsonrpc_reply(body: &str, id: u64) -> Result<Value, BoxError> {
    let answers = |message: &Value| message.get("id").and_then(Value::as_u64) == Some(id);
    let trimmed = body.trim_start();
    if trimmed.starts_with('{') {
        let message: Value = serde_json::from_str(trimmed)?;
        return if answers(&message) {
            Ok(message)
        } else {
            Err(format!("a reply to another request: {}", clip(body)).into())
        };
    }
    let mut data = String::new();
    // A blank line ends an event; a last event without one ends with the body.
    for line in body.lines().chain(std::iter::once("")) {
        if let Some(field) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(field.strip_prefix(' ').unwrap_or(field));
        } else if line.is_empty() && !data.is_empty() {
            let message: Value = serde_json::from_str(&data)?;
            if answers(&message) {
                return Ok(message);
            }
            data.clear();
        }
    }
    Err(format!("no reply to request {id} in: {}", clip(body)).into())
}

/// Whether a `tools/call` answer is the echo of `{"n": n}`: as `structuredContent`, or as the
/// JSON of its text content.
fn check_echo(answer: &Value, n: u64) -> Result<(), String> {
    if let Some(error) = answer.get("error") {
        return Err(format!("JSON-RPC error: {}", clip(&error.to_string())));
    }
    let Some(result) = answer.get("result") else {
        return Err(format!(
            "neither result nor error: {}",
            clip(&answer.to_string())
        ));
    };
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(format!("isError: {}", clip(&result.to_string())));
    }
    let expected = json!({"n": n});
    if result.get("structuredContent") == Some(&expected) {
        return Ok(());
    }
    let text = result
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .and_then(|t| serde_json::from_str::<Value>(t).ok());
    if text.as_ref() == Some(&expected) {
        return Ok(());
    }
    Err(format!(
        "not the echo of n={n}: {}",
        clip(&result.to_string())
    ))
}

/// At most 200 characters of `text`, for an error message.
fn clip(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
