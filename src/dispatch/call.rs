//! The per-call driver: runs one call's attempt with panic isolation, a deadline and
//! cancellation, and emits its `tool_pre` / `tool_post` pair.
//! Invariant: every `tool_pre` is followed by exactly one `tool_post`, and the result carries the
//! model's call id whatever the tool returned.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use tokio::time::Instant;

use futures::FutureExt;
use tracing::{Instrument, field};

use super::BatchOptions;
use super::cancel::Cancel;
use super::events::{Event, Observer};
use super::result::{CallResult, ErrorClass};
use crate::calls::ToolCall;
use crate::session::Session;
use crate::tools::registry::Registered;
use crate::tools::{ToolContext, ToolError, ToolErrorKind, ToolOutput};

/// What a call needs from its batch.
pub(super) struct CallScope<'a> {
    pub session: &'a Session,
    pub options: &'a BatchOptions,
    pub observer: &'a dyn Observer,
    pub cancel: &'a Cancel,
}

/// How one attempt ended.
enum Attempt {
    Returned(Result<ToolOutput, ToolError>),
    Panicked(String),
    TimedOut(Duration),
    Cancelled,
}

/// Runs a call to a registered tool and answers it.
pub(super) async fn execute(
    call: &ToolCall,
    registered: &Registered,
    scope: &CallScope<'_>,
) -> CallResult {
    let tool_name = registered.tool.name().to_owned();
    let span = tracing::info_span!(
        "call",
        call.id = %call.id,
        tool = %tool_name,
        index = call.index,
        outcome = field::Empty,
        duration_ms = field::Empty,
    );
    async {
        let attempt = 1;
        scope
            .observer
            .on_event(Event::ToolPre {
                index: call.index,
                id: call.id.clone(),
                attempt,
                tool: tool_name.clone(),
            })
            .await;
        let started = Instant::now();
        let outcome = run_attempt(call, registered, scope).await;
        let duration = started.elapsed();
        let mut result = answer(call, &tool_name, outcome);
        // The model's id is stamped last, whatever the tool or a layer put there.
        result.id.clone_from(&call.id);
        result.attempts = attempt;
        result.duration = duration;
        scope
            .observer
            .on_event(Event::ToolPost {
                index: call.index,
                id: call.id.clone(),
                attempt,
                tool: tool_name.clone(),
                error_class: result.error_class,
                duration,
                cached: result.cached,
            })
            .await;
        let span = tracing::Span::current();
        span.record("outcome", field::debug(result.error_class));
        span.record("duration_ms", duration.as_millis());
        if result.error_class == ErrorClass::Panic {
            tracing::error!(error = %result.error, "tool panicked");
        }
        tracing::debug!(outcome = ?result.error_class, duration_ms = duration.as_millis(), "call finished");
        result
    }
    .instrument(span)
    .await
}

/// Races the tool against cancellation (checked first) and its deadline; catches panics.
async fn run_attempt(call: &ToolCall, registered: &Registered, scope: &CallScope<'_>) -> Attempt {
    let ctx = ToolContext {
        session_id: scope.session.id.clone(),
        call_id: call.id.clone(),
        index: call.index,
        cancel: scope.cancel.token().child_token(),
        scratch_dir: scope.session.scratch_dir(),
    };
    let timeout = scope.options.call_timeout;
    let running =
        AssertUnwindSafe(registered.tool.call(call.arguments.clone(), &ctx)).catch_unwind();
    let attempt = tokio::select! {
        biased;
        () = scope.cancel.cancelled() => Attempt::Cancelled,
        finished = tokio::time::timeout(timeout, running) => match finished {
            Err(_) => Attempt::TimedOut(timeout),
            Ok(Err(payload)) => Attempt::Panicked(panic_message(payload.as_ref())),
            Ok(Ok(returned)) => Attempt::Returned(returned),
        },
    };
    // The tool's future is gone by now; its token fires so any work it spawned stops too.
    ctx.cancel.cancel();
    attempt
}

fn answer(call: &ToolCall, tool: &str, attempt: Attempt) -> CallResult {
    match attempt {
        Attempt::Returned(Ok(output)) => CallResult::succeeded(call, tool, output),
        Attempt::Returned(Err(error)) => {
            let class = match error.kind {
                ToolErrorKind::InvalidInput => ErrorClass::InvalidArguments,
                ToolErrorKind::Failed => ErrorClass::ToolError,
            };
            CallResult::failed(call, tool, class, error.message, error.output)
        }
        Attempt::Panicked(message) => CallResult::failed(
            call,
            tool,
            ErrorClass::Panic,
            format!("tool '{tool}' panicked: {message}"),
            None,
        ),
        Attempt::TimedOut(after) => CallResult::failed(
            call,
            tool,
            ErrorClass::Timeout,
            format!("Tool '{tool}' timed out after {}", readable(after)),
            None,
        ),
        Attempt::Cancelled => CallResult::failed(
            call,
            tool,
            ErrorClass::Cancelled,
            format!("tool '{tool}' was cancelled"),
            None,
        ),
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(no message)".to_owned()
    }
}

/// A duration for people: `250ms`, `1.5s`, `2m`, `1m30s`.
pub(crate) fn readable(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms < 60_000 {
        let text = format!("{:.3}", d.as_secs_f64());
        let text = text.trim_end_matches('0').trim_end_matches('.');
        return format!("{text}s");
    }
    let (m, s) = (d.as_secs() / 60, d.as_secs() % 60);
    if s == 0 {
        format!("{m}m")
    } else {
        format!("{m}m{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well_below_a_second_too() {
        assert_eq!(readable(Duration::from_millis(250)), "250ms");
        assert_eq!(readable(Duration::from_millis(1500)), "1.5s");
        assert_eq!(readable(Duration::from_secs(1)), "1s");
        assert_eq!(readable(Duration::from_secs(60)), "1m");
        assert_eq!(readable(Duration::from_secs(90)), "1m30s");
        assert_eq!(readable(Duration::from_micros(1)), "0ms");
    }
}
