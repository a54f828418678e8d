//! The per-call driver: every attempt of a call runs the pipeline in exactly the order of
//! `attempt_once` below, one named step per line, written once here and used by every dispatch mode.
//! The steps themselves live in `call/steps.rs`; loop detection's guard and texts in
//! `call/loops.rs`.
//! Invariant: every `tool_pre` is followed by exactly one `tool_post`, and the result carries the
//! model's call id whatever the tool returned.

mod approval;
mod loops;
mod run;
mod steps;

use std::ops::ControlFlow;
use std::sync::Arc;

use serde_json::Value;

use super::batch::{BatchOptions, Outcome};
use super::cancel::Cancel;
use super::events::Observer;
use super::pipeline::Pipeline;
use super::result::CallResult;
use super::traced::CallTrace;
use crate::calls::ToolCall;
use crate::middleware::CharBudget;
use crate::session::Lease;
use crate::tools::registry::Registered;
use crate::tools::{CallMetadata, ErrorClass, ToolRegistry};
use loops::LoopGuard;
use steps::{Recovery, Refusal, Step};

/// What a call needs from its batch.
pub(super) struct CallScope<'a> {
    pub session: &'a Lease,
    pub options: &'a BatchOptions,
    pub observer: &'a dyn Observer,
    pub cancel: &'a Cancel,
    pub pipeline: &'a Pipeline,
    pub turn: u32,
    pub budget: Option<Arc<CharBudget>>,
    /// The call's trace: it opens each attempt's span.
    pub trace: &'a CallTrace<'a>,
    pub caller: &'a Arc<crate::identity::Caller>,
}

/// How a call ended: a result, and whether it ends the batch.
pub(super) struct Answered {
    pub result: CallResult,
    /// A hard error: the batch ends with this outcome and reason.
    pub hard: Option<(Outcome, String)>,
}

impl Answered {
    fn soft(result: CallResult) -> Self {
        Answered { result, hard: None }
    }
}

/// Runs a call to a registered tool, attempt after attempt, and answers it.
pub(super) async fn execute(
    call: &ToolCall,
    registered: &Arc<Registered>,
    input: Arc<Value>,
    metadata: Arc<CallMetadata>,
    scope: &CallScope<'_>,
) -> Answered {
    let tool = registered.tool.name();
    let mut input = input;
    // A loop warning raised by any attempt rides on the call's final result.
    let mut loop_note: Option<String> = None;
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        let step = Step {
            call,
            registered,
            tool,
            attempt,
            scope,
            trace: scope.trace.attempt(registered, attempt),
        };
        let next = step
            .trace
            .run(attempt_once(
                &step,
                registered,
                &mut input,
                &metadata,
                &mut loop_note,
            ))
            .await;
        match next {
            ControlFlow::Break(answered) => {
                tracing::debug!(target: "toolgate::dispatch::call",
                    call = %call.id,
                    tool,
                    outcome = answered.result.error_class.name(),
                    attempts = answered.result.attempts,
                    "call finished"
                );
                return answered;
            }
            ControlFlow::Continue(Some(corrected)) => input = Arc::new(corrected),
            ControlFlow::Continue(None) => {}
        }
    }
}

/// The pipeline for one attempt, one step per line. Each step says why it sits where it is; the
/// numbers are the ones events, docs and tests use. Breaks with the call's answer, or continues with
/// the reflector's corrected input (if any) for the next attempt.
async fn attempt_once(
    step: &Step<'_>,
    registered: &Registered,
    input: &mut Arc<Value>,
    metadata: &Arc<CallMetadata>,
    loop_note: &mut Option<String>,
) -> ControlFlow<Answered, Option<Value>> {
    let (tool, scope) = (step.tool, step.scope);

    // 1. Observers first: every later decision of this attempt happens inside its pre/post
    //    frame.
    step.announce().await;

    // 2. Pre-tool gates before anything else decides: the hooks, then a permission rule that
    //    asks. A policy refusal must not touch the breaker, and a modified input is what
    //    detection and the tool see. Every ask waits here for a person (interactive batches),
    //    before the breaker is asked for a slot, so what follows sees the input as approved.
    let mut approved = None;
    let refusal = match step.pre_tool_gates(input).await {
        Ok(cleared) => {
            if let Some(modified) = cleared.input {
                *input = Arc::new(modified);
            }
            approved = cleared.approved;
            None
        }
        Err(Refusal::Refused(class, message)) => Some((class, message)),
        Err(Refusal::Cancelled(message)) => {
            return ControlFlow::Break(step.cancelled(message).await);
        }
    };

    // 3. Loop pre-check, also for a refused call so hammering a blocked tool stops: refuses
    //    only the call that would repeat a looping operation.
    let guard = LoopGuard::new(scope.session, &scope.pipeline.policy, tool, input);
    if let Some(stop) = guard.stop() {
        return ControlFlow::Break(step.loop_stopped(stop).await);
    }
    if let Some((class, message)) = refusal {
        return ControlFlow::Break(step.refused(class, message, &guard).await);
    }

    // 4. Breaker gate, keyed by the tool that runs (the same key health records under).
    let Some(mut admitted) = step.admit().await else {
        let message = "tool temporarily unavailable: circuit breaker open".to_owned();
        return ControlFlow::Break(step.refused(ErrorClass::CircuitOpen, message, &guard).await);
    };

    // 5. Cancel-or-run, biased to cancel, through the middleware stack (deadline,
    //    permissions, validation, cache, redaction, output cap) around the tool itself;
    //    6. the result is stamped with the model's id, whatever the tool or a layer put there.
    let (mut result, retryable) = step.run(input, &guard.input, metadata, approved).await;
    if let Some(cancelled) = step.settle_cancelled(&mut result, &mut admitted).await {
        return ControlFlow::Break(cancelled);
    }

    // 7. Loop record before observers see the result, so they see the state that includes it.
    if let Some(note) = step.record_loop(&guard, &result).await {
        *loop_note = Some(note);
    }
    if let Some(line) = loop_note {
        result.content.push_str(line);
    }

    // 8. Observers.
    step.post(&result).await;

    // 9. Post-tool hooks: notified of every executed attempt.
    step.post_tool_hooks(input, &result).await;

    // 10. Health: only outcomes that say something about the tool count.
    step.record_health(&result, admitted).await;

    // 11. Memory: successful calls only; it can never fail the call.
    step.remember(&guard, &result);
    if result.success {
        return ControlFlow::Break(Answered::soft(result));
    }

    // 12. Recovery: give up, end the batch, or wait and loop back to step 1.
    match step.recover(registered, input, result, retryable).await {
        Recovery::Answer(answered) => ControlFlow::Break(*answered),
        Recovery::Retry(correction) => ControlFlow::Continue(correction),
    }
}

/// Answers a call whose name no registered tool has: it never runs, but it is recorded for loop
/// detection so a model hammering a missing tool is stopped too.
pub(super) fn unknown_tool(
    call: &ToolCall,
    session: &Lease,
    pipeline: &Pipeline,
    registry: &ToolRegistry,
) -> Answered {
    let guard = LoopGuard::new(session, &pipeline.policy, &call.name, &call.arguments);
    if let Some(stop) = guard.stop() {
        let result = CallResult::refused(call, ErrorClass::LoopStopped, stop.message());
        return Answered {
            result,
            hard: Some((Outcome::LoopDetected, stop.reason())),
        };
    }
    let message = crate::middleware::unknown_tool_message(
        &call.name,
        registry,
        pipeline.suggestion_threshold,
    );
    let result = CallResult::refused(call, ErrorClass::UnknownTool, message);
    guard.record_refusal(&result);
    Answered::soft(result)
}
