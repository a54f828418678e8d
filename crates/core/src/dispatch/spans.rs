//! The spans of a batch, translated from dispatch types in one place: the batch span, one
//! `execute_tool {name}` span per execution attempt (GenAI semantic conventions), one per call
//! answered without an attempt (refused at intake, unknown tool, skipped), and the events on
//! them (hook verdicts, retries, loop warnings and stops, breaker changes).

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;

use super::batch::{Batch, Mode, Outcome};
use super::result::CallResult;
use crate::calls::ToolCall;
use crate::json::truncate_chars;
use crate::middleware::Redactor;
use crate::safety::breaker::Transition;
use crate::safety::hooks::GateRecord;
use crate::tools::registry::Registered;
use crate::trace::{Span, Tracer, attr};

/// `gen_ai.operation.name` of every execution span.
const EXECUTE_TOOL: &str = "execute_tool";

/// The batch span, under the RPC's span (or a new trace).
pub(super) fn batch(tracer: &Tracer, batch: &Batch, session: &str) -> Span {
    tracer.start(
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
    )
}

/// Records how the batch ended; any outcome but COMPLETED is an error.
pub(super) fn batch_finished(span: &Span, outcome: Outcome, reason: &str) {
    span.set(|| vec![KeyValue::new(attr::OUTCOME, outcome.name())]);
    if outcome != Outcome::Completed {
        span.fail(outcome.name(), reason);
    }
    span.end();
}

/// The span of one execution attempt of a registered tool.
pub(super) fn attempt(
    tracer: &Tracer,
    parent: &Span,
    call: &ToolCall,
    registered: &Registered,
    attempt: u32,
) -> Span {
    let tool = registered.tool.name();
    tracer.start(
        || format!("{EXECUTE_TOOL} {}", call.name),
        SpanKind::Internal,
        parent.context(),
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
    )
}

/// Puts the input the tool receives on the span, when content capture is on (redacted, cut).
pub(super) fn arguments(span: &Span, tracer: &Tracer, redactor: &Redactor, canonical: &str) {
    if let Some(max) = tracer.content_chars() {
        span.set(|| {
            let text = redactor.redact(canonical);
            vec![KeyValue::new(
                attr::TOOL_ARGUMENTS,
                truncate_chars(&text, max),
            )]
        });
    }
}

/// Records an attempt's result: error class and message on failure, whether it came from the
/// cache or was cut, and (content capture on) the content the model reads (already redacted by
/// the stack).
pub(super) fn attempt_finished(span: &Span, tracer: &Tracer, result: &CallResult) {
    span.set(|| {
        let mut attributes = vec![
            KeyValue::new(attr::CACHED, result.cached),
            KeyValue::new(attr::TRUNCATED, result.truncated),
        ];
        if let Some(max) = tracer.content_chars() {
            attributes.push(KeyValue::new(
                attr::TOOL_RESULT,
                truncate_chars(&result.content, max),
            ));
        }
        attributes
    });
    if !result.success {
        span.fail(result.error_class.name(), &result.error);
    }
}

/// A span for a call answered without an execution attempt (refused at intake, unknown tool,
/// skipped), so a trace shows every call the model made. An unknown tool's span is named
/// `execute_tool` alone: span names stay bounded; the name the model used is an attribute.
pub(super) fn answered_without_attempt(
    tracer: &Tracer,
    parent: &Span,
    call: &ToolCall,
    known: bool,
    result: &CallResult,
) {
    let name = || match known {
        true => format!("{EXECUTE_TOOL} {}", call.name),
        false => EXECUTE_TOOL.to_owned(),
    };
    let span = tracer.start(name, SpanKind::Internal, parent.context(), || {
        let mut attributes = call_attributes(call);
        attributes.push(KeyValue::new(attr::ATTEMPT, 0_i64));
        attributes
    });
    attempt_finished(&span, tracer, result);
    span.end();
}

/// A hook's or permission rule's decision, as an event (its reason redacted and cut).
pub(super) fn gate_decisions(span: &Span, records: &[GateRecord], redactor: &Redactor, max: usize) {
    for record in records {
        span.event(attr::EVENT_HOOK, || {
            let reason = redactor.redact(&record.reason);
            vec![
                KeyValue::new(attr::HOOK, record.source.clone()),
                KeyValue::new(attr::VERDICT, record.decision.verdict()),
                KeyValue::new(attr::REASON, truncate_chars(&reason, max)),
            ]
        });
    }
}

/// A retry scheduled after this attempt.
pub(super) fn retry(span: &Span, delay: std::time::Duration, reason: &str) {
    span.event(attr::EVENT_RETRY, || {
        vec![
            KeyValue::new(
                attr::DELAY_MS,
                i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
            ),
            KeyValue::new(attr::REASON, reason.to_owned()),
        ]
    });
}

/// An approval of this call ended (answered, remembered, expired or withdrawn).
pub(super) fn approval(
    span: &Span,
    ended: &crate::approvals::Ended,
    decision: &'static str,
    how: &'static str,
) {
    span.event(attr::EVENT_APPROVAL, || {
        vec![
            KeyValue::new(attr::APPROVAL_ID, ended.approval_id.clone()),
            KeyValue::new(attr::HOOK, ended.source.clone()),
            KeyValue::new(attr::APPROVAL_DECISION, decision),
            KeyValue::new(attr::APPROVAL_HOW, how),
            KeyValue::new(attr::APPROVAL_BY, ended.by.clone()),
            KeyValue::new(attr::REASON, ended.reason.clone()),
        ]
    });
}

/// A loop warning (`stop` false) or the stop that refused this call.
pub(super) fn loop_detected(span: &Span, stop: bool, pattern: &str, repeats: u32) {
    let name = if stop {
        attr::EVENT_LOOP_STOP
    } else {
        attr::EVENT_LOOP_WARNING
    };
    span.event(name, || {
        vec![
            KeyValue::new(attr::REASON, pattern.to_owned()),
            KeyValue::new(attr::REPEATS, i64::from(repeats)),
        ]
    });
}

/// The tool's breaker changed state during this attempt.
pub(super) fn breaker_changed(span: &Span, transition: &Transition) {
    span.event(attr::EVENT_BREAKER, || {
        vec![
            KeyValue::new(attr::FROM, transition.from.name()),
            KeyValue::new(attr::TO, transition.to.name()),
        ]
    });
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
