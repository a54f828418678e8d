//! Traces: the W3C trace context a request arrives with, the spans toolgate makes over the
//! OpenTelemetry API, and the `traceparent` it sends on to workers, HTTP tools and MCP servers.
//!
//! A [`Tracer`] is either on (any OpenTelemetry API tracer, boxed: the server hands it the SDK's,
//! whose spans are sampled, recorded and exported by `telemetry::traces`) or off. Off, spans are not recorded, but each still gets its own span id
//! in the client's trace (or a new one), so remote calls and log lines carry ids either way and a
//! disabled tracer costs an id and a small allocation per span. Attributes and events are built
//! by closures that run only for a recording span, so an unsampled call pays for no attribute.
//! The attribute names live in [`attr`]; which span carries which is decided by the layer that
//! makes it (`grpc` the RPC span, `dispatch` the batch and execution spans).

use std::borrow::Cow;
use std::hash::BuildHasher;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::{
    SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};

/// Attribute and event names, in one place: OpenTelemetry semantic conventions where one exists
/// (RPC, GenAI tool execution, errors), `toolgate.*` otherwise.
pub mod attr {
    pub const RPC_SYSTEM: &str = "rpc.system";
    pub const RPC_SERVICE: &str = "rpc.service";
    pub const RPC_METHOD: &str = "rpc.method";
    pub const RPC_GRPC_STATUS_CODE: &str = "rpc.grpc.status_code";
    pub const PEER_ADDRESS: &str = "network.peer.address";
    pub const PEER_PORT: &str = "network.peer.port";
    pub const ERROR_TYPE: &str = "error.type";
    pub const NETWORK_TRANSPORT: &str = "network.transport";

    /// The MCP front's server spans (OpenTelemetry's MCP conventions).
    pub const MCP_METHOD: &str = "mcp.method.name";
    pub const MCP_SESSION_ID: &str = "mcp.session.id";
    pub const MCP_PROTOCOL_VERSION: &str = "mcp.protocol.version";
    pub const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";

    pub const OPERATION: &str = "gen_ai.operation.name";
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    pub(crate) const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    pub(crate) const TOOL_TYPE: &str = "gen_ai.tool.type";
    pub(crate) const TOOL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
    pub(crate) const TOOL_RESULT: &str = "gen_ai.tool.call.result";

    pub(crate) const SESSION: &str = "toolgate.session.id";
    pub(crate) const TURN: &str = "toolgate.batch.turn";
    pub const CALLS: &str = "toolgate.batch.calls";
    pub(crate) const MODE: &str = "toolgate.batch.mode";
    pub(crate) const OUTCOME: &str = "toolgate.batch.outcome";
    pub(crate) const CALL_INDEX: &str = "toolgate.call.index";
    pub(crate) const ATTEMPT: &str = "toolgate.attempt";
    pub(crate) const CACHED: &str = "toolgate.cached";
    pub(crate) const TRUNCATED: &str = "toolgate.truncated";
    pub(crate) const SOURCE: &str = "toolgate.tool.source";
    pub(crate) const REMOTE: &str = "toolgate.remote.name";
    pub(crate) const TARGET: &str = "toolgate.tool.target";

    /// Span events: hook verdicts, retries, loop warnings and stops, breaker changes, approvals.
    pub(crate) const EVENT_HOOK: &str = "toolgate.hook";
    pub(crate) const EVENT_RETRY: &str = "toolgate.retry";
    pub(crate) const EVENT_LOOP_WARNING: &str = "toolgate.loop.warning";
    pub(crate) const EVENT_LOOP_STOP: &str = "toolgate.loop.stop";
    pub(crate) const EVENT_BREAKER: &str = "toolgate.breaker";
    pub(crate) const EVENT_APPROVAL: &str = "toolgate.approval";
    pub(crate) const APPROVAL_ID: &str = "toolgate.approval.id";
    pub(crate) const APPROVAL_DECISION: &str = "toolgate.approval.decision";
    pub(crate) const APPROVAL_HOW: &str = "toolgate.approval.how";
    pub(crate) const APPROVAL_BY: &str = "toolgate.approval.by";
    pub(crate) const HOOK: &str = "toolgate.hook.name";
    pub(crate) const VERDICT: &str = "toolgate.hook.verdict";
    pub(crate) const REASON: &str = "toolgate.reason";
    pub(crate) const DELAY_MS: &str = "toolgate.retry.delay_ms";
    pub(crate) const REPEATS: &str = "toolgate.loop.repeats";
    pub(crate) const FROM: &str = "toolgate.breaker.from";
    pub(crate) const TO: &str = "toolgate.breaker.to";
}

/// Makes spans, or only span ids when tracing is off. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Tracer {
    inner: Option<Arc<On>>,
}

#[derive(Debug)]
struct On {
    tracer: BoxedTracer,
    /// Opt-in: the longest argument or result text put on a span; `None` puts none.
    content_chars: Option<usize>,
}

impl Tracer {
    /// A tracer that records nothing (ids only).
    pub fn off() -> Self {
        Tracer::default()
    }

    /// Spans recorded by `tracer`; arguments and results are put on them (cut to
    /// `content_chars`) only when that is `Some`.
    pub fn new<T>(tracer: T, content_chars: Option<usize>) -> Self
    where
        T: opentelemetry::trace::Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        Tracer {
            inner: Some(Arc::new(On {
                tracer: BoxedTracer::new(Box::new(tracer)),
                content_chars,
            })),
        }
    }

    /// The longest argument or result text spans carry, when content capture is on.
    pub fn content_chars(&self) -> Option<usize> {
        self.inner.as_ref().and_then(|on| on.content_chars)
    }

    /// Starts a span named `name()` under `parent` (a remote or local span, or nothing for a new
    /// trace). `name` runs only when tracing is on, `attributes` only when the span is recorded.
    pub fn start<N: Into<Cow<'static, str>>>(
        &self,
        name: impl FnOnce() -> N,
        kind: SpanKind,
        parent: &Context,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Span {
        let cx = match &self.inner {
            Some(on) => {
                let span = on
                    .tracer
                    .build_with_context(SpanBuilder::from_name(name()).with_kind(kind), parent);
                let cx = parent.with_span(span);
                if cx.span().is_recording() {
                    cx.span().set_attributes(attributes());
                }
                cx
            }
            None => parent.with_remote_span_context(untraced_child(parent)),
        };
        Span { cx }
    }
}

/// A span context for a span nobody records: the parent's trace (or a new one, not sampled),
/// a new span id.
fn untraced_child(parent: &Context) -> SpanContext {
    let span = parent.span();
    let of_parent = span.span_context();
    let (trace_id, flags, state) = if of_parent.is_valid() {
        (
            of_parent.trace_id(),
            of_parent.trace_flags(),
            of_parent.trace_state().clone(),
        )
    } else {
        (new_trace_id(), TraceFlags::default(), TraceState::NONE)
    };
    SpanContext::new(trace_id, new_span_id(), flags, false, state)
}

/// 64 or 128 unpredictable bits for ids: a keyed hash (SipHash, its key drawn once per process)
/// of a counter, as session ids are made; never all zero (an invalid id).
fn id_bits(part: u8) -> u64 {
    static KEY: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let key = KEY.get_or_init(Default::default);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    key.hash_one((n, part)).max(1)
}

fn new_trace_id() -> TraceId {
    let high = u128::from(id_bits(0)) << 64;
    TraceId::from(high | u128::from(id_bits(1)))
}

fn new_span_id() -> SpanId {
    SpanId::from(id_bits(2))
}

/// A started span (or, tracing off, just its ids). Ends on [`Span::end`] or when the last clone
/// of its context is dropped.
#[derive(Clone, Debug, Default)]
pub struct Span {
    cx: Context,
}

impl Span {
    /// Whether the span is recorded (tracing on and the trace sampled).
    pub(crate) fn is_recording(&self) -> bool {
        self.cx.span().is_recording()
    }

    /// No span: children of it start a new trace.
    pub fn none() -> Self {
        Span::default()
    }

    /// A span that arrived with a request (its `traceparent`): the parent of what toolgate makes.
    pub fn remote(context: SpanContext) -> Self {
        Span {
            cx: Context::new().with_remote_span_context(context),
        }
    }

    /// The context to start children in and to run the span's work under (log lines read it).
    pub fn context(&self) -> &Context {
        &self.cx
    }

    /// This span's ids, for propagation.
    pub(crate) fn span_context(&self) -> SpanContext {
        self.cx.span().span_context().clone()
    }

    /// Adds attributes; `attributes` runs only when the span is recorded.
    pub fn set(&self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        let span = self.cx.span();
        if span.is_recording() {
            span.set_attributes(attributes());
        }
    }

    /// Adds an event; `attributes` runs only when the span is recorded.
    pub fn event(&self, name: &'static str, attributes: impl FnOnce() -> Vec<KeyValue>) {
        let span = self.cx.span();
        if span.is_recording() {
            span.add_event(name, attributes());
        }
    }

    /// Marks the span failed: `error.type` and an error status with `message`.
    pub fn fail(&self, error_type: &'static str, message: &str) {
        let span = self.cx.span();
        if span.is_recording() {
            span.set_attribute(KeyValue::new(attr::ERROR_TYPE, error_type));
            span.set_status(Status::error(message.to_owned()));
        }
    }

    /// Ends the span now (later calls do nothing).
    pub fn end(&self) {
        self.cx.span().end();
    }
}

/// Parses the client's `traceparent` (`00-<trace-id>-<parent-id>-<flags>`) and `tracestate`;
/// `None` for a malformed or all-zero `traceparent` (a malformed `tracestate` is dropped alone).
pub fn parse_traceparent(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let parts: Vec<&str> = traceparent.trim().split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let [version, trace_id, parent_id, flags] = parts.as_slice() else {
        return None;
    };
    // Version 00 has exactly four fields; a later version may add fields, which we never see
    // here (four parts matched), and ff is invalid.
    if !hex(version, 2) || version.eq_ignore_ascii_case("ff") {
        return None;
    }
    if !hex(trace_id, 32) || !hex(parent_id, 16) || !hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(parent_id).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let state = tracestate
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags & 1),
        true,
        state,
    ))
}

/// The `traceparent` header for a span context; `None` for an invalid one.
pub fn traceparent(context: &SpanContext) -> Option<String> {
    context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    })
}

/// The `tracestate` header for a span context; `None` when it is empty.
pub fn tracestate(context: &SpanContext) -> Option<String> {
    let header = context.trace_state().header();
    (context.is_valid() && !header.is_empty()).then_some(header)
}

/// The trace and span id of the span the current task runs in, for log lines.
pub fn current_ids() -> Option<(TraceId, SpanId)> {
    Context::map_current(|cx| {
        let span = cx.span();
        let context = span.span_context();
        context
            .is_valid()
            .then(|| (context.trace_id(), context.span_id()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_parse_round_trip_and_reject_malformed() {
        let parsed = parse_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            Some("vendor=a,other=b"),
        )
        .unwrap();
        assert_eq!(
            traceparent(&parsed).unwrap(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        assert_eq!(tracestate(&parsed).unwrap(), "vendor=a,other=b");
        assert!(parsed.is_remote() && parsed.is_sampled());
        for bad in [
            "",
            "00-abc-def-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",
        ] {
            assert_eq!(parse_traceparent(bad, None), None, "{bad}");
        }
        // A malformed tracestate is dropped, the traceparent kept.
        let kept = parse_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
            Some("not a list entry"),
        )
        .unwrap();
        assert_eq!(tracestate(&kept), None);
        assert!(!kept.is_sampled());
    }

    #[test]
    fn an_off_tracer_still_gives_each_span_its_own_id_in_the_parents_trace() {
        let tracer = Tracer::off();
        let parent = Span::remote(
            parse_traceparent(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                None,
            )
            .unwrap(),
        );
        let a = tracer.start(|| "a", SpanKind::Internal, parent.context(), Vec::new);
        let b = tracer.start(|| "b", SpanKind::Internal, a.context(), Vec::new);
        let (a, b) = (a.span_context(), b.span_context());
        assert_eq!(a.trace_id(), parent.span_context().trace_id());
        assert_eq!(b.trace_id(), a.trace_id());
        assert_ne!(a.span_id(), b.span_id());
        assert_ne!(a.span_id(), parent.span_context().span_id());
        assert!(a.is_sampled(), "the client's sampling decision passes on");
        // Without a parent, a new trace that nobody samples.
        let fresh = tracer.start(
            || "c",
            SpanKind::Internal,
            Span::none().context(),
            || unreachable!("attributes are never built for an unrecorded span"),
        );
        assert!(fresh.span_context().is_valid() && !fresh.span_context().is_sampled());
        assert!(!fresh.is_recording());
    }
}
