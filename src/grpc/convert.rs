//! Translation between the wire types of `toolgate.v1` and the domain types, in both directions.
//! Requests are parsed once here ("parse, don't validate"); nothing past this file sees prost.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::{Map, Value};

use super::status::RequestError;
use crate::config::{DispatchConfig, Limits};
use toolgate_core::calls::{self, IntakeLimits};
use toolgate_core::dispatch::{
    Batch, BatchOptions, BatchReport, Binding, CallResult, ErrorClass, Event, MessageFormat,
    Outcome,
};
use toolgate_core::identity::Caller;
use toolgate_core::safety::breaker::BreakerState;
use toolgate_core::safety::health::{HealthReport, Status};
use toolgate_core::safety::hooks::Decision;
use toolgate_core::session::validate_session_id;
use toolgate_core::tools::{ContentPart, Definition, Registered, ToolSource};
use toolgate_proto::pb;
use toolgate_proto::protojson;

/// Concurrency of a PARALLEL batch that does not say.
const DEFAULT_MAX_CONCURRENCY: u32 = 8;

/// Server settings a request is checked against.
#[derive(Debug, Clone, Copy)]
pub struct RequestRules {
    pub limits: Limits,
    pub dispatch: DispatchConfig,
}

pub(crate) use toolgate_core::calls::MAX_ID_BYTES;

/// The metadata a client may also name its session in, so that a balancer can keep a session's
/// requests on one replica (nginx `hash $http_x_toolgate_session consistent`, HAProxy
/// `balance hdr(x-toolgate-session)`, Envoy ring hash).
pub(crate) const SESSION_METADATA: &str = "x-toolgate-session";

/// The session a request names: its body's `session_id`, or the `x-toolgate-session` metadata
/// when the body names none; when both are set they must be the same id. Empty: no session.
pub(crate) fn session_named(
    body: String,
    metadata: &tonic::metadata::MetadataMap,
) -> Result<String, RequestError> {
    let Some(value) = metadata.get(SESSION_METADATA) else {
        return Ok(body);
    };
    let Ok(header) = value.to_str() else {
        return Err(RequestError::Invalid(format!(
            "the {SESSION_METADATA} metadata is not text"
        )));
    };
    if body.is_empty() || body == header {
        return Ok(header.to_owned());
    }
    Err(RequestError::Invalid(format!(
        "session_id '{}' and the {SESSION_METADATA} metadata '{}' name different sessions",
        toolgate_core::json::truncate_chars(&body, 64),
        toolgate_core::json::truncate_chars(header, 64)
    )))
}

/// Parses and checks a dispatch request; nothing has run when this fails.
/// What `request`'s JSON holds once decoded, and once its argument texts are parsed
/// (`json::held_bytes_if_parsed`): what `batch_from_request` would make of it, weighed before.
pub fn decoded_weight(request: &pb::DispatchBatchRequest) -> usize {
    use toolgate_core::json::held_bytes_if_parsed as weigh;
    let calls: usize = request.calls.iter().map(|c| weigh(c.json())).sum();
    let message = request
        .assistant_message
        .as_ref()
        .map_or(0, |m| weigh(m.json()));
    let context = request
        .context
        .as_ref()
        .map_or(0, |c| weigh_fields(c.fields()));
    let bindings: usize = request
        .bindings
        .values()
        .filter_map(|b| b.input.as_ref())
        .map(|input| weigh_fields(input.fields()))
        .sum();
    calls + message + context + bindings
}

/// `held_bytes_if_parsed` of an object's members.
fn weigh_fields(fields: &Map<String, Value>) -> usize {
    fields
        .iter()
        .map(|(k, v)| 64 + k.len() + toolgate_core::json::held_bytes_if_parsed(v))
        .sum()
}

pub fn batch_from_request(
    request: pb::DispatchBatchRequest,
    caller: std::sync::Arc<toolgate_core::identity::Caller>,
    rules: &RequestRules,
) -> Result<Batch, RequestError> {
    let pb::DispatchBatchRequest {
        session_id,
        calls,
        assistant_message,
        context,
        options,
        turn,
        bindings: requested_bindings,
    } = request;
    if !session_id.is_empty() {
        validate_session_id(&session_id)?;
    }
    let options = options.unwrap_or_default();
    let (batch_options, max_calls) = options_from(&options, rules)?;
    let depth = rules.limits.max_json_depth;
    let elements = match (calls.is_empty(), assistant_message) {
        (false, Some(_)) => {
            return Err(RequestError::Invalid(
                "set either calls or assistant_message, not both".to_owned(),
            ));
        }
        (_, None) => calls
            .into_iter()
            .enumerate()
            .map(|(i, v)| json_from_value(v, depth, &format_args!("calls[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
        (true, Some(message)) => {
            let message = json_from_value(message, depth, &"assistant_message")?;
            calls::extract_calls(&message).map_err(|e| RequestError::Invalid(e.to_string()))?
        }
    };
    if elements.len() > max_calls as usize {
        return Err(RequestError::TooManyCalls {
            count: elements.len(),
            limit: max_calls,
        });
    }
    let context = match context {
        Some(context) => json_from_struct(context, depth, &"context")?,
        None => Map::new(),
    };
    let mut bindings = BTreeMap::new();
    for (name, binding) in requested_bindings {
        if binding.tool.is_empty() {
            return Err(RequestError::Invalid(format!(
                "bindings['{name}'].tool is required"
            )));
        }
        let input = match binding.input {
            Some(input) => {
                let at = format_args!("bindings['{name}'].input");
                Some(Value::Object(json_from_struct(input, depth, &at)?))
            }
            None => None,
        };
        bindings.insert(
            name,
            Binding {
                tool: binding.tool,
                input,
            },
        );
    }
    let received = calls::intake(
        &elements,
        IntakeLimits {
            max_json_depth: depth,
        },
    );
    // Ids and names are echoed several times per result and can never be cut to fit a reply.
    for r in &received {
        for (field, text) in [("id", &r.call.id), ("name", &r.call.name)] {
            if text.len() > MAX_ID_BYTES {
                return Err(RequestError::Invalid(format!(
                    "call {}: its {field} is {} bytes; the limit is {MAX_ID_BYTES}",
                    r.call.index,
                    text.len()
                )));
            }
        }
    }
    Ok(Batch {
        session_id,
        calls: received,
        context,
        bindings,
        options: batch_options,
        turn,
        caller,
        trace: toolgate_core::trace::Span::none(),
    })
}

fn options_from(
    options: &pb::DispatchOptions,
    rules: &RequestRules,
) -> Result<(BatchOptions, u32), RequestError> {
    use pb::dispatch_options::{MessageFormat as Format, Mode, OnError};
    let unknown = |field: &str, value: i32| {
        RequestError::Invalid(format!("options.{field} {value} is not a known value"))
    };
    let mode = match Mode::try_from(options.mode).map_err(|_| unknown("mode", options.mode))? {
        Mode::Sequential => toolgate_core::dispatch::Mode::Sequential,
        Mode::Parallel => {
            let ceiling = rules.limits.max_concurrency;
            let max_concurrency = match options.max_concurrency {
                0 => DEFAULT_MAX_CONCURRENCY.min(ceiling),
                n if n > ceiling => {
                    return Err(RequestError::Invalid(format!(
                        "options.max_concurrency {n} is above this server's ceiling of {ceiling}"
                    )));
                }
                n => n,
            };
            toolgate_core::dispatch::Mode::Parallel {
                max_concurrency: max_concurrency as usize,
            }
        }
    };
    let fail_fast = match OnError::try_from(options.on_error)
        .map_err(|_| unknown("on_error", options.on_error))?
    {
        OnError::Continue => false,
        OnError::FailFast => true,
    };
    let message_format = match Format::try_from(options.message_format)
        .map_err(|_| unknown("message_format", options.message_format))?
    {
        Format::OpenaiChat => MessageFormat::OpenAiChat,
        Format::Anthropic => MessageFormat::Anthropic,
        Format::OpenaiResponses => MessageFormat::OpenAiResponses,
        Format::Gemini => MessageFormat::Gemini,
    };
    let max_calls = match options.max_calls {
        0 => rules.limits.max_calls,
        n if n > rules.limits.max_calls_ceiling => {
            return Err(RequestError::Invalid(format!(
                "options.max_calls {n} is above this server's ceiling of {}",
                rules.limits.max_calls_ceiling
            )));
        }
        n => n,
    };
    // Unset (or zero) leaves the tool's timeout or the server default to the timeout layer.
    let call_timeout = match &options.call_timeout {
        None => None,
        Some(d) if d.seconds == 0 && d.nanos == 0 => None,
        Some(d) => {
            let timeout = Duration::try_from(*d).map_err(|_| {
                RequestError::Invalid("options.call_timeout must be a positive duration".to_owned())
            })?;
            if timeout > rules.dispatch.max_call_timeout {
                return Err(RequestError::Invalid(format!(
                    "options.call_timeout {}s is above this server's maximum of {}s",
                    timeout.as_secs(),
                    rules.dispatch.max_call_timeout.as_secs()
                )));
            }
            Some(timeout)
        }
    };
    Ok((
        BatchOptions {
            mode,
            message_format,
            call_timeout,
            deadline: None,
            fail_fast,
            interactive_approvals: options.interactive_approvals,
        },
        max_calls,
    ))
}

/// A protobuf `Value` as JSON, refused past `max_depth` levels of nesting or for a number JSON
/// cannot hold.
pub fn json_from_value(
    value: protojson::Value,
    max_depth: usize,
    path: &dyn std::fmt::Display,
) -> Result<Value, RequestError> {
    Ok(value.into_json_within(max_depth, path)?)
}

fn json_from_struct(
    value: protojson::Struct,
    max_depth: usize,
    path: &dyn std::fmt::Display,
) -> Result<Map<String, Value>, RequestError> {
    Ok(value.into_json_within(max_depth, path)?)
}

pub fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

pub fn error_class(class: ErrorClass) -> pb::ErrorClass {
    match class {
        ErrorClass::None => pb::ErrorClass::None,
        ErrorClass::InvalidCall => pb::ErrorClass::InvalidCall,
        ErrorClass::InvalidArguments => pb::ErrorClass::InvalidArguments,
        ErrorClass::DuplicateId => pb::ErrorClass::DuplicateId,
        ErrorClass::UnknownTool => pb::ErrorClass::UnknownTool,
        ErrorClass::Blocked => pb::ErrorClass::Blocked,
        ErrorClass::PermissionDenied => pb::ErrorClass::PermissionDenied,
        ErrorClass::CircuitOpen => pb::ErrorClass::CircuitOpen,
        ErrorClass::Timeout => pb::ErrorClass::Timeout,
        ErrorClass::Cancelled => pb::ErrorClass::Cancelled,
        ErrorClass::ToolError => pb::ErrorClass::ToolError,
        ErrorClass::Panic => pb::ErrorClass::Panic,
        ErrorClass::Transport => pb::ErrorClass::Transport,
        ErrorClass::LoopStopped => pb::ErrorClass::LoopStopped,
        ErrorClass::Skipped => pb::ErrorClass::Skipped,
        ErrorClass::Quarantined => pb::ErrorClass::Quarantined,
        ErrorClass::ApprovalDenied => pb::ErrorClass::ApprovalDenied,
        ErrorClass::ApprovalTimeout => pb::ErrorClass::ApprovalTimeout,
        ErrorClass::StoreUnavailable => pb::ErrorClass::StoreUnavailable,
        ErrorClass::OutcomeUnknown => pb::ErrorClass::OutcomeUnknown,
    }
}

/// A pending approval as the API shows it.
pub fn approval(approval: toolgate_core::approvals::Approval) -> pb::Approval {
    pb::Approval {
        approval_id: approval.id,
        session_id: approval.session_id,
        index: index(approval.index),
        id: approval.call_id,
        tool: approval.tool,
        arguments: Some(protojson::Value::from(approval.arguments)),
        reason: approval.reason,
        source: approval.source,
        expires_at: Some(prost_types::Timestamp::from(approval.expires_at)),
        requested_by: approval.requested_by,
        requester_may_answer: approval.requester_may_answer,
        remember_allowed: approval.remember_allowed,
        arguments_cut: approval.arguments_cut,
    }
}

/// An approval's end as the API shows it.
pub fn approval_ended(ended: toolgate_core::approvals::Ended) -> pb::ApprovalResolved {
    use pb::approval_resolved::How as PbHow;
    use pb::resolve_approval_request::{Decision, Remember};
    use toolgate_core::approvals::{How, Remember as Kept};
    let decision = match ended.approved {
        Some(true) => Decision::Approve,
        Some(false) => Decision::Deny,
        None => Decision::Unspecified,
    };
    let how = match ended.how {
        How::Answered => PbHow::Answered,
        How::Remembered => PbHow::Remembered,
        How::Expired => PbHow::Expired,
        How::Withdrawn => PbHow::Withdrawn,
    };
    let remember = match ended.remember {
        Kept::Once => Remember::Once,
        Kept::Session => Remember::Session,
    };
    pb::ApprovalResolved {
        approval_id: ended.approval_id,
        index: index(ended.index),
        id: ended.call_id,
        tool: ended.tool,
        decision: decision.into(),
        resolved_by: ended.by,
        reason: ended.reason,
        how: how.into(),
        arguments_updated: ended.arguments_updated,
        remember: remember.into(),
        source: ended.source,
        session_id: ended.session_id,
    }
}

/// JSON as a `Value` a client can always decode: JSON deeper than `MAX_REPLY_DEPTH` is carried as
/// its canonical text (a JSON string) instead.
fn value_for_reply(value: &Value) -> protojson::Value {
    if toolgate_core::json::depth(value) > protojson::MAX_REPLY_DEPTH {
        let text = toolgate_core::json::canonical(value);
        return protojson::Value::from(Value::String(text));
    }
    protojson::Value::from(value.clone())
}

fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

pub(crate) fn call_result(r: &CallResult) -> pb::CallResult {
    pb::CallResult {
        index: index(r.index),
        id: r.id.clone(),
        name: r.name.clone(),
        tool: r.tool.clone(),
        success: r.success,
        // Arguments passed intake's depth limit (at most MAX_REPLY_DEPTH); only a tool's result
        // can be deeper than a reply carries.
        arguments: Some(protojson::Value::from(Value::clone(&r.arguments))),
        result: Some(value_for_reply(&r.result)),
        content: r.content.clone(),
        error: r.error.clone(),
        error_class: error_class(r.error_class).into(),
        attempts: r.attempts,
        duration: Some(duration(r.duration)),
        cached: r.cached,
        truncated: r.truncated,
        parts: r.parts.iter().map(content_part).collect(),
    }
}

fn content_part(part: &ContentPart) -> pb::ContentPart {
    let part = match part {
        ContentPart::Text(text) => pb::content_part::Part::Text(text.clone()),
        ContentPart::Image { mime_type, data } => pb::content_part::Part::Image(pb::Image {
            mime_type: mime_type.clone(),
            data: data.clone(),
        }),
    };
    pb::ContentPart { part: Some(part) }
}

pub fn batch_result(report: &BatchReport) -> pb::BatchResult {
    use pb::batch_result::Outcome as PbOutcome;
    let results: Vec<pb::CallResult> = report.results.iter().map(call_result).collect();
    let outcome = match report.outcome {
        Outcome::Completed => PbOutcome::Completed,
        Outcome::FailedFast => PbOutcome::FailedFast,
        Outcome::Cancelled => PbOutcome::Cancelled,
        Outcome::LoopDetected => PbOutcome::LoopDetected,
        Outcome::RecoveryExhausted => PbOutcome::RecoveryExhausted,
    };
    pb::BatchResult {
        count: index(results.len()),
        errors: index(report.errors()),
        all_succeeded: report.all_succeeded(),
        messages: report
            .messages
            .iter()
            .map(|m| protojson::Struct::from(m.clone()))
            .collect(),
        // Written by the codec from `results` (each id's first result, the same bytes), so the
        // reply never holds a second copy of every result (`codec::batch_result`).
        by_id: HashMap::new(),
        results,
        outcome: outcome.into(),
        outcome_reason: report.outcome_reason.clone(),
        duration: Some(duration(report.duration)),
        session_id: report.session_id.clone(),
    }
}

pub fn event(event: Event) -> pb::DispatchEvent {
    use pb::dispatch_event::Event as E;
    let inner = match event {
        Event::CallReceived {
            index: i,
            id,
            name,
            arguments,
        } => E::CallReceived(pb::CallReceived {
            index: index(i),
            id,
            name,
            arguments: Some(protojson::Value::from(arguments)),
        }),
        Event::ToolPre {
            index: i,
            id,
            attempt,
            tool,
        } => E::ToolPre(pb::ToolPre {
            id,
            attempt,
            tool,
            index: index(i),
        }),
        Event::ToolPost {
            index: i,
            id,
            attempt,
            tool,
            error_class: class,
            duration: d,
            cached,
            preview,
        } => E::ToolPost(pb::ToolPost {
            id,
            attempt,
            tool,
            is_error: class != ErrorClass::None,
            error_class: error_class(class).into(),
            duration: Some(duration(d)),
            cached,
            index: index(i),
            result_preview: preview,
        }),
        Event::GateDecision {
            index: i,
            id,
            attempt,
            tool,
            record,
            args_digest,
        } => {
            use pb::gate_decision::Verdict;
            let verdict = match record.decision {
                Decision::Allow => Verdict::Allow,
                Decision::Block(_) => Verdict::Block,
                Decision::Ask(_) => Verdict::Ask,
                Decision::Modify(_) => Verdict::Modify,
            };
            E::GateDecision(pb::GateDecision {
                id,
                attempt,
                tool,
                verdict: verdict.into(),
                source: record.source,
                reason: record.reason,
                args_digest,
                index: index(i),
            })
        }
        Event::RetryScheduled {
            index: i,
            id,
            attempt,
            tool,
            delay,
            reason,
        } => E::RetryScheduled(pb::RetryScheduled {
            id,
            attempt,
            delay: Some(duration(delay)),
            reason,
            tool,
            index: index(i),
        }),
        Event::LoopDetected {
            index: i,
            id,
            attempt,
            tool,
            stop,
            pattern,
            repeats,
        } => {
            use pb::loop_detected::Action;
            let action = if stop { Action::Stop } else { Action::Warn };
            E::LoopDetected(pb::LoopDetected {
                id,
                attempt,
                tool,
                action: action.into(),
                pattern,
                repeats,
                index: index(i),
            })
        }
        Event::Progress {
            index: i,
            id,
            attempt,
            tool,
            progress,
            total,
            message,
        } => E::Progress(pb::Progress {
            id,
            attempt,
            tool,
            progress,
            total: total.unwrap_or(0.0),
            message,
            index: index(i),
        }),
        Event::ApprovalRequested(approval) => E::ApprovalRequested(self::approval(approval)),
        Event::ApprovalResolved(ended) => E::ApprovalResolved(approval_ended(ended)),
        Event::BreakerChanged { id, tool, from, to } => E::BreakerChanged(pb::BreakerChanged {
            tool,
            from: breaker_state(from).into(),
            to: breaker_state(to).into(),
            id,
        }),
    };
    pb::DispatchEvent { event: Some(inner) }
}

pub(crate) fn breaker_state(state: BreakerState) -> pb::BreakerState {
    match state {
        BreakerState::Closed => pb::BreakerState::Closed,
        BreakerState::Open => pb::BreakerState::Open,
        BreakerState::HalfOpen => pb::BreakerState::HalfOpen,
    }
}

pub fn tool_health(report: &HealthReport) -> pb::ToolHealth {
    use pb::tool_health::Status as PbStatus;
    let status = match report.status {
        Status::Healthy => PbStatus::Healthy,
        Status::Degraded => PbStatus::Degraded,
        Status::Unhealthy => PbStatus::Unhealthy,
    };
    pb::ToolHealth {
        tool: report.tool.clone(),
        calls: report.calls,
        successes: report.successes,
        failures: report.failures,
        mean_duration: Some(duration(report.mean_duration)),
        max_duration: Some(duration(report.max_duration)),
        ewma_success: report.ewma_success,
        score: report.score,
        status: status.into(),
        breaker: breaker_state(report.breaker).into(),
        consecutive_failures: report.consecutive_failures,
    }
}

/// A registered tool as `viewer` may see it (`Registered::shown_to`).
pub fn tool_definition(registered: &Registered, viewer: &Caller) -> Option<pb::ToolDefinition> {
    let shown = registered.shown_to(viewer)?;
    Some(definition(
        registered,
        shown.definition,
        shown.changed_digest,
        shown.change,
    ))
}

/// `tool_definition` for a definition decided on.
fn definition(
    registered: &Registered,
    shown: Definition,
    changed_digest: String,
    change: String,
) -> pb::ToolDefinition {
    use pb::tool_definition::Source;
    let schema = match shown.input_schema {
        Value::Object(map) => protojson::Struct::from(map),
        _ => protojson::Struct::default(),
    };
    let a = shown.annotations;
    let source = match registered.source {
        ToolSource::Builtin => Source::Builtin,
        ToolSource::Embedded => Source::Embedded,
        ToolSource::Worker => Source::Worker,
        ToolSource::Mcp => Source::Mcp,
        ToolSource::Http => Source::Http,
    };
    let pin = registered.pin.as_ref();
    pb::ToolDefinition {
        name: registered.tool.name().to_owned(),
        description: shown.description,
        input_schema: Some(schema),
        annotations: Some(pb::ToolAnnotations {
            read_only: a.read_only,
            destructive: a.destructive,
            idempotent: a.idempotent,
            open_world: a.open_world,
        }),
        concurrency_safe: shown.concurrency_safe,
        source: source.into(),
        status: match pin {
            None => pb::tool_definition::Status::Local,
            Some(p) if p.changed_to.is_some() => pb::tool_definition::Status::Quarantined,
            Some(_) => pb::tool_definition::Status::Pinned,
        }
        .into(),
        digest: pin.map(|p| p.digest.clone()).unwrap_or_default(),
        changed_digest,
        remote: pin.map(|p| p.remote.clone()).unwrap_or_default(),
        change,
    }
}

#[cfg(test)]
mod tests;
