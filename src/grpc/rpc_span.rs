//! The server span of each RPC (OpenTelemetry RPC semantic conventions): started under the
//! client's W3C `traceparent`/`tracestate` (or a new trace), ended with the gRPC status code the
//! client got, or CANCELLED when the client left before the answer.

use std::net::SocketAddr;

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use tonic::{Code, Status};

use toolgate_core::trace::{Span, Tracer, attr};

/// The service every span names.
const SERVICE: &str = "toolgate.v1.ToolGate";

/// An RPC's span; ends with the status given to [`RpcSpan::finish`], or CANCELLED when dropped
/// unfinished (the client went away).
pub(super) struct RpcSpan {
    span: Span,
    finished: bool,
}

impl RpcSpan {
    /// Starts the span of `method`, a child of the request's trace context.
    pub(super) fn start(
        tracer: &Tracer,
        method: &'static str,
        headers: &http::HeaderMap,
        peer: Option<SocketAddr>,
    ) -> Self {
        let text = |key: &str| headers.get(key).and_then(|v| v.to_str().ok());
        let parent = match text("traceparent")
            .and_then(|tp| toolgate_core::trace::parse_traceparent(tp, text("tracestate")))
        {
            Some(remote) => Span::remote(remote),
            None => Span::none(),
        };
        let span = tracer.start(
            || format!("{SERVICE}/{method}"),
            SpanKind::Server,
            parent.context(),
            || {
                let mut attributes = vec![
                    KeyValue::new(attr::RPC_SYSTEM, "grpc"),
                    KeyValue::new(attr::RPC_SERVICE, SERVICE),
                    KeyValue::new(attr::RPC_METHOD, method),
                ];
                if let Some(peer) = peer {
                    attributes.push(KeyValue::new(attr::PEER_ADDRESS, peer.ip().to_string()));
                    attributes.push(KeyValue::new(attr::PEER_PORT, i64::from(peer.port())));
                }
                attributes
            },
        );
        RpcSpan {
            span,
            finished: false,
        }
    }

    /// The span, to run the RPC's work under.
    pub(super) fn span(&self) -> &Span {
        &self.span
    }

    /// Records the status the client gets and ends the span. Server errors (the codes the
    /// conventions count as such) mark it failed.
    pub(super) fn finish(mut self, code: Code, message: &str) {
        self.end(code, message);
    }

    /// Ends the span with the status `result` carries, and hands `result` back.
    pub(super) fn finish_with<T>(self, result: Result<T, Status>) -> Result<T, Status> {
        match &result {
            Ok(_) => self.finish(Code::Ok, ""),
            Err(status) => self.finish(status.code(), status.message()),
        }
        result
    }

    fn end(&mut self, code: Code, message: &str) {
        self.finished = true;
        self.span
            .set(|| vec![KeyValue::new(attr::RPC_GRPC_STATUS_CODE, code as i64)]);
        if is_server_error(code) {
            self.span.fail(code_name(code), message);
        }
        self.span.end();
    }
}

impl Drop for RpcSpan {
    fn drop(&mut self) {
        if !self.finished {
            self.end(Code::Cancelled, "the client went away before the answer");
        }
    }
}

/// Codes a server span counts as its own failure (semantic conventions for gRPC servers).
fn is_server_error(code: Code) -> bool {
    matches!(
        code,
        Code::Unknown
            | Code::DeadlineExceeded
            | Code::Unimplemented
            | Code::Internal
            | Code::Unavailable
            | Code::DataLoss
    )
}

/// The code's name as gRPC spells it, for `error.type`.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
