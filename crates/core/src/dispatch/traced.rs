//! The trace of a batch, kept by one layer: [`BatchTrace`] around the batch (its span, opened
//! before the calls and ended with the outcome), [`CallTrace`] around each call (a call answered
//! without an attempt, refused at intake, unknown or skipped, still gets a span, so a trace shows
//! every call the model made), and [`AttemptTrace`] around each attempt (one `execute_tool {name}`
//! span, GenAI semantic conventions; the attempt's work runs in its context, so log lines and
//! remote calls carry its ids). The driver's steps make no span and add no span event: they emit
//! their events, and [`AttemptTrace::record`] turns each into its span event here. Every
//! translation from dispatch types to span attributes is in this file.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::KeyValue;
use opentelemetry::trace::{FutureExt as _, SpanContext, SpanKind};

use super::batch::{Batch, Mode, Outcome};
use super::events::Event;
use super::result::CallResult;
use crate::calls::ToolCall;
use crate::json::truncate_chars;
use crate::middleware::Redactor;
use crate::tools::registry::Registered;
use crate::trace::{Span, Tracer, attr};

/// `gen_ai.operation.name` of every execution span.
const EXECUTE_TOOL: &str = "execute_tool";

/// The batch's span, parent of every call's (ended when dropped, if `close` did not run).
pub(super) struct BatchTrace<'a> {
    tracer: &'a Tracer,
    redactor: &'a Redactor,
    span: Span,
}

impl<'a> BatchTrace<'a> {
    /// Opens the batch span, under the RPC's span (or a new trace).
    pub(super) fn open(
        tracer: &'a Tracer,
        redactor: &'a Redactor,
        batch: &Batch,
        session: &str,
    ) -> Self {
        let span = tracer.start(
            || "toolgate.batch",
            SpanKind::Internal,
            batch.trace.context(),
            || {
                let mode = match batch.options.mode {
                    Mode::Parallel { .. } => "PARALLEL",
                    Mode::Sequential => "SEQUENTIAL",
                };
                vec![
                    KeyValue::new(attr::SESSION, session.to_owned()),
                    KeyValue::new(attr::TURN, i64::from(batch.turn)),
                    KeyValue::new(attr::CALLS, batch.calls.len() as i64),
                    KeyValue::new(attr::MODE, mode),
                ]
            },
        );
        BatchTrace {
            tracer,
            redactor,
            span,
        }
    }

    /// Runs the batch's work in the span's context: log lines inside it carry its ids. (A
    /// plain function, not an `async` one: the work's future is moved once, not twice.)
    pub(super) fn run<F: Future>(&self, work: F) -> impl Future<Output = F::Output> + use<F> {
        work.with_context(self.span.context().clone())
    }

    /// Ends the span with how the batch ended; any outcome but COMPLETED is an error.
    pub(super) fn close(self, outcome: Outcome, reason: &str) {
        self.span
            .set(|| vec![KeyValue::new(attr::OUTCOME, outcome.name())]);
        if outcome != Outcome::Completed {
            self.span.fail(outcome.name(), reason);
        }
        self.span.end();
    }

    /// The trace of one call; `known`: its name is a registered tool's.
    pub(super) fn call<'b>(&'b self, call: &'b ToolCall, known: bool) -> CallTrace<'b> {
        CallTrace {
            batch: self,
            call,
            known,
            attempted: AtomicBool::new(false),
        }
    }

    /// A call that never started (the batch ended first), answered `result`.
    pub(super) fn skipped(&self, call: &ToolCall, known: bool, result: &CallResult) {
        self.call(call, known).answered(result);
    }
}

/// One call's trace: its attempts' spans, or a span of its own if it made none.
pub(super) struct CallTrace<'a> {
    batch: &'a BatchTrace<'a>,
    call: &'a ToolCall,
    known: bool,
    attempted: AtomicBool,
}

impl CallTrace<'_> {
    /// Opens the span of attempt `attempt`, a child of the batch's.
    pub(super) fn attempt(&self, registered: &Registered, attempt: u32) -> AttemptTrace<'_> {
        self.attempted.store(true, Ordering::Relaxed);
        let (batch, call) = (self.batch, self.call);
        let tool = registered.tool.name();
        let span = batch.tracer.start(
            || format!("{EXECUTE_TOOL} {}", call.name),
            SpanKind::Internal,
            batch.span.context(),
            || {
                let mut attributes = call_attributes(call);
                attributes.push(KeyValue::new(attr::ATTEMPT, i64::from(attempt)));
                attributes.push(KeyValue::new(attr::SOURCE, registered.source.name()));
                if tool != call.name {
                    attributes.push(KeyValue::new(attr::TARGET, tool.to_owned()));
                }
                if let Some(pin) = &registered.pin {
                    attributes.push(KeyValue::new(attr::REMOTE, pin.remote.clone()));
                }
                attributes
            },
        );
        AttemptTrace { batch, span }
    }

    /// The call is answered: a call that made no attempt gets a span of its own now. An unknown
    /// tool's span is named `execute_tool` alone: span names stay bounded; the name the model
    /// used is an attribute.
    pub(super) fn answered(&self, result: &CallResult) {
        if self.attempted.load(Ordering::Relaxed) {
            return;
        }
        let (batch, call) = (self.batch, self.call);
        let name = || match self.known {
            true => format!("{EXECUTE_TOOL} {}", call.name),
            false => EXECUTE_TOOL.to_owned(),
        };
        let span = batch
            .tracer
            .start(name, SpanKind::Internal, batch.span.context(), || {
                let mut attributes = call_attributes(call);
                attributes.push(KeyValue::new(attr::ATTEMPT, 0_i64));
                attributes
            });
        let attempt = AttemptTrace { batch, span };
        attempt.finished(result);
        attempt.span.end();
    }
}

/// One attempt's span (ended when dropped, or when a retry starts waiting).
pub(super) struct AttemptTrace<'a> {
    batch: &'a BatchTrace<'a>,
    span: Span,
}

impl AttemptTrace<'_> {
    /// Runs the attempt's work in the span's context: log lines inside it carry its ids.
    pub(super) fn run<F: Future>(&self, work: F) -> impl Future<Output = F::Output> + use<F> {
        work.with_context(self.span.context().clone())
    }

    /// Whether the span is recorded: if so, the steps build their events for it even when the
    /// batch's client wants none.
    pub(super) fn is_recording(&self) -> bool {
        self.span.is_recording()
    }

    /// The span's ids, for the tool's context (sent on to remote tools as `traceparent`).
    pub(super) fn span_context(&self) -> SpanContext {
        self.span.span_context()
    }

    /// Puts the input the tool receives on the span, when content capture is on (redacted, cut).
    pub(super) fn input(&self, canonical: &str) {
        if let Some(max) = self.batch.tracer.content_chars() {
            self.span.set(|| {
                let text = self.batch.redactor.redact(canonical);
                vec![KeyValue::new(
                    attr::TOOL_ARGUMENTS,
                    truncate_chars(&text, max),
                )]
            });
        }
    }

    /// Records an attempt's result: error class and message on failure, whether it came from
    /// the cache or was cut, and (content capture on) the content the model reads (already
    /// redacted by the stack).
    pub(super) fn finished(&self, result: &CallResult) {
        self.span.set(|| {
            let mut attributes = vec![
                KeyValue::new(attr::CACHED, result.cached),
                KeyValue::new(attr::TRUNCATED, result.truncated),
            ];
            if let Some(max) = self.batch.tracer.content_chars() {
                attributes.push(KeyValue::new(
                    attr::TOOL_RESULT,
                    truncate_chars(&result.content, max),
                ));
            }
            attributes
        });
        if !result.success {
            self.span.fail(result.error_class.name(), &result.error);
        }
    }

    /// An event the attempt emitted, as its span event: a hook's or permission rule's decision
    /// (its reason as the event carries it: redacted and cut by the step), a loop warning or stop, a breaker change, an approval's
    /// end, a retry (the wait belongs to no attempt: the span ends with it). The others (the
    /// attempt's pre and post, progress, an approval's request) are the span itself.
    pub(super) fn record(&self, event: &Event) {
        let span = &self.span;
        match event {
            Event::GateDecision { record, .. } => span.event(attr::EVENT_HOOK, || {
                vec![
                    KeyValue::new(attr::HOOK, record.source.clone()),
                    KeyValue::new(attr::VERDICT, record.decision.verdict()),
                    KeyValue::new(attr::REASON, record.reason.clone()),
                ]
            }),
            Event::LoopDetected {
                stop,
                pattern,
                repeats,
                ..
            } => {
                let name = match stop {
                    true => attr::EVENT_LOOP_STOP,
                    false => attr::EVENT_LOOP_WARNING,
                };
                span.event(name, || {
                    vec![
                        KeyValue::new(attr::REASON, pattern.clone()),
                        KeyValue::new(attr::REPEATS, i64::from(*repeats)),
                    ]
                });
            }
            Event::BreakerChanged { from, to, .. } => span.event(attr::EVENT_BREAKER, || {
                vec![
                    KeyValue::new(attr::FROM, from.name()),
                    KeyValue::new(attr::TO, to.name()),
                ]
            }),
            Event::ApprovalResolved(ended) => span.event(attr::EVENT_APPROVAL, || {
                let decision = match ended.approved {
                    Some(true) => "approve",
                    Some(false) => "deny",
                    None => "none",
                };
                vec![
                    KeyValue::new(attr::APPROVAL_ID, ended.approval_id.clone()),
                    KeyValue::new(attr::HOOK, ended.source.clone()),
                    KeyValue::new(attr::APPROVAL_DECISION, decision),
                    KeyValue::new(attr::APPROVAL_HOW, ended.how.name()),
                    KeyValue::new(attr::APPROVAL_BY, ended.by.clone()),
                    KeyValue::new(attr::REASON, ended.reason.clone()),
                ]
            }),
            Event::RetryScheduled { delay, reason, .. } => {
                span.event(attr::EVENT_RETRY, || {
                    vec![
                        KeyValue::new(
                            attr::DELAY_MS,
                            i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
                        ),
                        KeyValue::new(attr::REASON, reason.clone()),
                    ]
                });
                span.end();
            }
            Event::CallReceived { .. }
            | Event::ToolPre { .. }
            | Event::ToolPost { .. }
            | Event::Progress { .. }
            | Event::ApprovalRequested(_) => {}
        }
    }
}

/// What every execution span says about the call.
fn call_attributes(call: &ToolCall) -> Vec<KeyValue> {
    vec![
        KeyValue::new(attr::OPERATION, EXECUTE_TOOL),
        KeyValue::new(attr::TOOL_NAME, call.name.clone()),
        KeyValue::new(attr::TOOL_CALL_ID, call.id.clone()),
        KeyValue::new(attr::TOOL_TYPE, "function"),
        KeyValue::new(attr::CALL_INDEX, call.index as i64),
    ]
}
