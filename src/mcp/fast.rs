//! The fast path of a stateless `tools/call` (2026-07-28): a request that rmcp would answer
//! with one JSON reply and nothing before it (no session, no `progressToken`) is parsed once and
//! answered here, without rmcp's per-request service (its second parse, its copy of the message
//! as a JSON value, its tasks). The fast path takes only requests rmcp would accept as they are:
//! anything else (another method, a doubtful header, a malformed body) goes to rmcp, which
//! answers it as it always does. The call itself is served by the handler (`serve_call`), the
//! same as one rmcp hands over, and the reply is rmcp's message type, serialized as rmcp would.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use rmcp::model::{
    CallToolRequestParams, ErrorCode, ErrorData, ProtocolVersion, RequestId, ServerJsonRpcMessage,
    ServerResult,
};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::Reply;
use super::handler::{Front, Site};
use toolgate_core::identity::Caller;

/// The revision the fast path serves.
const REVISION: &str = "2026-07-28";

/// A `tools/call` the fast path takes.
pub(super) struct FastCall {
    id: RequestId,
    params: CallToolRequestParams,
    can_elicit: bool,
}

/// The JSON-RPC request, as the fast path reads it.
#[derive(Deserialize)]
struct Message {
    jsonrpc: String,
    id: RequestId,
    method: String,
    params: CallToolRequestParams,
}

impl FastCall {
    /// The call `body` carries, if the request is one the fast path takes: a stateless
    /// 2026-07-28 `tools/call` POST whose headers agree with its body, as rmcp checks them.
    pub(super) fn take(parts: &http::request::Parts, body: &[u8]) -> Option<FastCall> {
        let headers = &parts.headers;
        if parts.method != Method::POST
            // Sessions, `Origin` checks and `Mcp-Param-*` headers are rmcp's.
            || headers.contains_key("mcp-session-id")
            || headers.contains_key(header::ORIGIN)
            || headers
                .keys()
                .any(|name| name.as_str().starts_with("mcp-param-"))
            || one(headers, "mcp-protocol-version")? != REVISION
            || one(headers, "mcp-method")? != "tools/call"
            || !accepts_json_and_events(headers)
            || !is_json(headers)
        {
            return None;
        }
        let message: Message = serde_json::from_slice(body).ok()?;
        if message.jsonrpc != "2.0"
            || message.method != "tools/call"
            // A name that needs Base64 in its header is left to rmcp's decoding.
            || one(headers, "mcp-name")? != message.params.name
        {
            return None;
        }
        let meta = message.params.meta.as_ref()?;
        if meta.protocol_version() != Some(ProtocolVersion::V_2026_07_28)
            || meta.0.contains_key("progressToken")
        {
            return None;
        }
        let capabilities = meta.client_capabilities()?;
        Some(FastCall {
            id: message.id,
            can_elicit: capabilities.elicitation.is_some(),
            params: message.params,
        })
    }

    /// Serves the call as `caller` and answers it as rmcp would. The call runs on a task of
    /// its own: a client that leaves cancels it (its events paired), rather than dropping it.
    pub(super) async fn serve(
        self,
        front: &Front,
        parts: http::request::Parts,
        caller: Arc<Caller>,
    ) -> Reply {
        let ct = CancellationToken::new();
        let leaving = ct.clone().drop_guard();
        let front = front.clone();
        let id = self.id.clone();
        let served = tokio::spawn(async move {
            let FastCall {
                id,
                mut params,
                can_elicit,
            } = self;
            let meta = params.meta.take().unwrap_or_default();
            let site = Site {
                caller,
                parts: Some(&parts),
                id: &id,
                meta: &meta.0.0,
                version: Some(ProtocolVersion::V_2026_07_28),
                can_elicit,
                progress: None,
                ct: &ct,
                peer: None,
            };
            front.serve_call(params, site).await
        })
        .await;
        leaving.disarm();
        let message = match served {
            Ok(Ok(response)) => ServerJsonRpcMessage::response(ServerResult::from(response), id),
            Ok(Err(error)) => ServerJsonRpcMessage::error(error, Some(id)),
            Err(_) => ServerJsonRpcMessage::error(
                ErrorData::internal_error("the call's task ended abnormally", None),
                Some(id),
            ),
        };
        reply(&message)
    }
}

/// The one value of header `name`, as text; `None` when it is absent, repeated or not text.
fn one<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

/// Whether `Accept` names both JSON and event streams, without parameters (weights are left to
/// rmcp's parsing).
fn accepts_json_and_events(headers: &HeaderMap) -> bool {
    let Some(accept) = one(headers, "accept") else {
        return false;
    };
    let (mut json, mut events) = (false, false);
    for entry in accept.split(',').map(str::trim) {
        if entry.contains(';') {
            return false;
        }
        json |= entry.eq_ignore_ascii_case("application/json");
        events |= entry.eq_ignore_ascii_case("text/event-stream");
    }
    json && events
}

/// Whether the body is declared JSON.
fn is_json(headers: &HeaderMap) -> bool {
    one(headers, "content-type").is_some_and(|value| {
        let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
        essence.trim().eq_ignore_ascii_case("application/json")
    })
}

/// The reply carrying `message`, with the HTTP status rmcp gives it on the stateless revision.
fn reply(message: &ServerJsonRpcMessage) -> Reply {
    let status = match message {
        ServerJsonRpcMessage::Error(error) => match error.error.code {
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
            | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
            ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            _ => StatusCode::OK,
        },
        _ => StatusCode::OK,
    };
    let body = match serde_json::to_vec(message) {
        Ok(body) => body,
        Err(error) => {
            let mut reply = Response::new(
                Full::new(Bytes::from(format!(
                    "the reply could not be written: {error}\n"
                )))
                .boxed(),
            );
            *reply.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            return reply;
        }
    };
    let mut reply = Response::new(Full::new(Bytes::from(body)).boxed());
    *reply.status_mut() = status;
    reply.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> http::request::Parts {
        let mut builder = http::Request::builder().method("POST").uri("/mcp");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    const HEADERS: [(&str, &str); 5] = [
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];

    fn body(meta: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"n": 1}, "_meta": meta},
        }))
        .unwrap()
    }

    fn meta() -> serde_json::Value {
        serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        })
    }

    #[test]
    fn a_plain_stateless_call_is_taken() {
        let call = FastCall::take(&request(&HEADERS), &body(meta())).expect("taken");
        assert_eq!(call.id, RequestId::Number(7));
        assert!(call.can_elicit);
    }

    #[test]
    fn anything_doubtful_is_left_to_rmcp() {
        let mut with_progress = meta();
        with_progress["progressToken"] = serde_json::json!(1);
        assert!(FastCall::take(&request(&HEADERS), &body(with_progress)).is_none());
        let mut old = meta();
        old["io.modelcontextprotocol/protocolVersion"] = serde_json::json!("2025-11-25");
        assert!(FastCall::take(&request(&HEADERS), &body(old)).is_none());
        let mut no_capabilities = meta();
        no_capabilities
            .as_object_mut()
            .unwrap()
            .remove("io.modelcontextprotocol/clientCapabilities");
        assert!(FastCall::take(&request(&HEADERS), &body(no_capabilities)).is_none());
        for (name, value) in [
            ("mcp-session-id", "s"),
            ("origin", "http://localhost"),
            ("mcp-param-region", "x"),
            ("mcp-name", "other"),
            ("mcp-method", "tools/list"),
        ] {
            let mut headers: Vec<(&str, &str)> = HEADERS
                .iter()
                .copied()
                .filter(|(n, _)| *n != name)
                .collect();
            headers.push((name, value));
            assert!(
                FastCall::take(&request(&headers), &body(meta())).is_none(),
                "{name}: {value}"
            );
        }
        let mut weighted = HEADERS.to_vec();
        weighted[0] = ("accept", "application/json;q=0, text/event-stream");
        assert!(FastCall::take(&request(&weighted), &body(meta())).is_none());
        let mut repeated = HEADERS.to_vec();
        repeated.push(("mcp-name", "echo"));
        assert!(FastCall::take(&request(&repeated), &body(meta())).is_none());
        assert!(FastCall::take(&request(&HEADERS), b"{not json").is_none());
    }
}
