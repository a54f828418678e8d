//! The per-call driver: every attempt of a call runs the pipeline in exactly this order, written
//! once here and used by every dispatch mode:
//! tool_pre → pre-tool hooks → loop pre-check → breaker gate → cancel-or-run → stamp the id →
//! loop record → tool_post → post-tool hooks → health → memory → recovery (a retry loops back).
//! Invariant: every `tool_pre` is followed by exactly one `tool_post`, and the result carries the
//! model's call id whatever the tool returned.

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;
use tower::ServiceExt;
use tracing::{Instrument, field};

use super::batch::{BatchOptions, Outcome};
use super::cancel::Cancel;
use super::events::{Event, Observer};
use super::pipeline::Pipeline;
use super::result::CallResult;
use crate::calls::ToolCall;
use crate::middleware::{Budget, Invocation, Invoked, Reply};
use crate::safety::backoff::RETRY_CEILING;
use crate::safety::breaker::{Admission, Transition};
use crate::safety::detector::{Check, Operation};
use crate::safety::health::HealthOutcome;
use crate::safety::hooks::{Gate, PostToolUse, PreToolUse};
use crate::safety::recovery::{Failure, Verdict};
use crate::session::Session;
use crate::tools::ErrorClass;
use crate::tools::registry::Registered;
use crate::tools::{CallMetadata, ToolContext};
use crate::{hash, json};

/// What a call needs from its batch.
pub(super) struct CallScope<'a> {
    pub session: &'a Session,
    pub options: &'a BatchOptions,
    pub observer: &'a dyn Observer,
    pub cancel: &'a Cancel,
    pub pipeline: &'a Pipeline,
    pub turn: u32,
    pub budget: Option<Arc<Budget>>,
    pub trace: Option<&'a Arc<crate::trace::TraceContext>>,
}

/// How a call ended: a result, and whether it ends the batch.
pub(super) struct Answered {
    pub result: CallResult,
    /// A hard error: the batch ends with this outcome and reason.
    pub hard: Option<(Outcome, String)>,
}

/// Runs a call to a registered tool, attempt after attempt, and answers it.
pub(super) async fn execute(
    call: &ToolCall,
    registered: &Registered,
    input: Arc<Value>,
    metadata: Arc<CallMetadata>,
    scope: &CallScope<'_>,
) -> Answered {
    let tool = registered.tool.name().to_owned();
    // DEBUG, not INFO: an enabled span per call cost ~5% of throughput at the default level.
    let span = tracing::debug_span!(
        "call",
        call.id = %call.id,
        tool = %tool,
        index = call.index,
        outcome = field::Empty,
        attempts = field::Empty,
        duration_ms = field::Empty,
    );
    let started = Instant::now();
    let answered = attempts(call, registered, &tool, input, &metadata, scope)
        .instrument(span.clone())
        .await;
    let r = &answered.result;
    span.record("outcome", field::debug(r.error_class));
    span.record("attempts", r.attempts);
    span.record("duration_ms", started.elapsed().as_millis());
    span.in_scope(
        || tracing::debug!(outcome = ?r.error_class, attempts = r.attempts, "call finished"),
    );
    answered
}

/// The attempt loop. Each step says why it sits where it is.
async fn attempts(
    call: &ToolCall,
    registered: &Registered,
    tool: &str,
    mut input: Arc<Value>,
    metadata: &Arc<CallMetadata>,
    scope: &CallScope<'_>,
) -> Answered {
    let p = scope.pipeline;
    let mut attempt: u32 = 0;
    // A loop warning raised by any attempt rides on the call's final result.
    let mut loop_note: Option<String> = None;
    loop {
        attempt += 1;
        let step = Step {
            call,
            tool,
            attempt,
            scope,
        };

        // 1. Observers first: every later decision of this attempt happens inside its pre/post frame.
        if step.wants_events() {
            step.emit(Event::ToolPre {
                index: call.index,
                id: call.id.clone(),
                attempt,
                tool: tool.to_owned(),
            })
            .await;
        }

        // 2. Hooks before anything else decides: a policy refusal must not touch loop counts of
        //    executions or the breaker, and a modified input is what detection and the tool see.
        let hook_call = PreToolUse {
            session_id: &scope.session.id,
            call_id: &call.id,
            index: call.index,
            tool,
            input: &input,
            attempt,
        };
        let (gate, records) = p.hooks.pre_tool_use(&hook_call).await;
        // The digest is only needed for gate events; computed once, when there is one to send.
        let digest = if step.wants_events() && !records.is_empty() {
            json::digest(&input)
        } else {
            String::new()
        };
        for mut record in records {
            record.reason = p.redactor.redact(&record.reason).into_owned();
            step.emit(Event::GateDecision {
                index: call.index,
                id: call.id.clone(),
                attempt,
                tool: tool.to_owned(),
                record,
                args_digest: digest.clone(),
            })
            .await;
        }
        // A refused call still goes through the loop pre-check, so hammering a blocked tool stops.
        let refusal = match gate {
            Gate::Proceed(modified) => {
                if let Some(next) = modified {
                    input = Arc::new(next);
                }
                None
            }
            Gate::Refuse(message) => Some(message),
        };
        let canonical_input = json::canonical(&input);

        // 3. Loop pre-check: refuses only the call that would repeat a looping operation.
        let thresholds = p.policy.loop_thresholds(tool);
        if let Some(th) = thresholds {
            let check = scope.session.detector().check(tool, &canonical_input, th);
            if let Check::Stop { repeats, pattern } = check {
                scope.session.detector().clear(tool, &canonical_input);
                step.emit(Event::LoopDetected {
                    index: call.index,
                    id: call.id.clone(),
                    attempt,
                    tool: tool.to_owned(),
                    stop: true,
                    pattern: pattern.clone(),
                    repeats,
                })
                .await;
                let reason = format!("Loop detected: {pattern} repeated {repeats} times");
                let message = format!("dispatch refused before execution: {reason}");
                let mut result =
                    CallResult::failed(call, tool, ErrorClass::LoopStopped, message, None);
                result.attempts = attempt - 1;
                step.post(&result).await;
                return Answered {
                    result,
                    hard: Some((Outcome::LoopDetected, reason)),
                };
            }
        }
        if let Some(message) = refusal {
            let result = step.refused(ErrorClass::Blocked, message, &canonical_input);
            return step.finish_soft(result).await;
        }

        // 4. Breaker gate, keyed by the tool that runs (the same key health records under).
        let (admission, transition) = p.health.admit(tool, Instant::now());
        step.breaker_changed(transition).await;
        if admission == Admission::Refused {
            let message = "tool temporarily unavailable: circuit breaker open".to_owned();
            let result = step.refused(ErrorClass::CircuitOpen, message, &canonical_input);
            return step.finish_soft(result).await;
        }
        let probe = admission == Admission::Probe;

        // 5. Cancel-or-run, biased to cancel. The middleware stack (deadline, permissions,
        //    validation, cache, redaction, output cap) wraps the tool itself.
        let started = Instant::now();
        let invoked = run_once(call, &input, tool, metadata, &step).await;
        let duration = started.elapsed();
        if let Some(invoked) = invoked
            .as_ref()
            .filter(|i| step.wants_events() && !i.gates.is_empty())
        {
            let digest = if digest.is_empty() {
                json::digest(&input)
            } else {
                digest.clone()
            };
            for record in &invoked.gates {
                step.emit(Event::GateDecision {
                    index: call.index,
                    id: call.id.clone(),
                    attempt,
                    tool: tool.to_owned(),
                    record: record.clone(),
                    args_digest: digest.clone(),
                })
                .await;
            }
        }
        let retryable = matches!(
            &invoked,
            Some(Invoked {
                reply: Reply::Error {
                    retryable: true,
                    ..
                },
                ..
            })
        );

        // 6. Stamp the model's id, whatever the tool or a layer put there.
        let mut result = answer(call, tool, invoked);
        result.id.clone_from(&call.id);
        result.attempts = attempt;
        result.duration = duration;

        // A timeout at the request's deadline is the deadline passing: that cancels the batch.
        let deadline_passed = scope.options.deadline.is_some_and(|d| Instant::now() >= d);
        if result.error_class == ErrorClass::Timeout && deadline_passed {
            scope.cancel.cancel("the request deadline passed");
            result.error_class = ErrorClass::Cancelled;
            result.error = format!("tool '{tool}' was cancelled: the request deadline passed");
            result.content.clone_from(&result.error);
        }
        if result.error_class == ErrorClass::Cancelled {
            // A cancelled attempt says nothing about the tool; a probe frees its slot at once.
            let transition = p
                .health
                .record(tool, HealthOutcome::Neutral, probe, Instant::now());
            step.post(&result).await;
            step.breaker_changed(transition).await;
            return Answered {
                result,
                hard: Some((Outcome::Cancelled, scope.cancel.reason())),
            };
        }

        // 7. Detection records before observers see the result, so they see the state that includes it.
        if let Some(th) = thresholds {
            let op = Operation {
                tool,
                input: &canonical_input,
                result: result_hash(&result),
            };
            let warning = scope.session.detector().record(op, th);
            if let Some(w) = warning {
                step.emit(Event::LoopDetected {
                    index: call.index,
                    id: call.id.clone(),
                    attempt,
                    tool: tool.to_owned(),
                    stop: false,
                    pattern: w.pattern.clone(),
                    repeats: w.repeats,
                })
                .await;
                if p.policy.append_loop_warning {
                    loop_note = Some(loop_warning(&w.pattern, w.repeats, th.stop_after));
                }
            }
        }

        if let Some(line) = &loop_note {
            result.content.push_str(line);
        }

        // 8. Observers.
        step.post(&result).await;

        // 9. Post-tool hooks: notified of every executed attempt.
        p.hooks
            .post_tool_use(&PostToolUse {
                session_id: &scope.session.id,
                call_id: &call.id,
                index: call.index,
                tool,
                input: &input,
                attempt,
                content: &result.content,
                is_error: !result.success,
                error_class: result.error_class.name(),
                duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            })
            .await;

        // 10. Health: only outcomes that say something about the tool count.
        let transition = p
            .health
            .record(tool, health_outcome(&result), probe, Instant::now());
        step.breaker_changed(transition).await;

        // 11. Memory: successful calls only; it can never fail the call.
        if result.success && p.policy.memory_enabled {
            // The result is already redacted by the stack; the input is redacted here.
            let input_text = p.redactor.redact(&canonical_input);
            scope.session.remember(tool, &input_text, &result.content);
        }
        if result.success {
            return Answered { result, hard: None };
        }

        // 12. Recovery.
        let failure = Failure {
            tool,
            annotations: registered.tool.annotations(),
            input: &input,
            class: result.error_class,
            message: &result.error,
            retryable,
            attempt,
            retry_enabled: p.policy.retry_enabled(tool),
        };
        let (reason, correction) = match p.reflector.reflect(&failure).await {
            Verdict::GiveUp { .. } => return Answered { result, hard: None },
            Verdict::Retry { reason, correction } => (reason, correction),
        };
        // The hard ceiling is checked before sleeping: no wait is wasted on a call that cannot run.
        if attempt > RETRY_CEILING {
            let why = format!(
                "tool '{tool}' failed {attempt} times (the last: {}); no call is retried more than {RETRY_CEILING} times",
                json::truncate_chars(&result.error, 200)
            );
            return Answered {
                result,
                hard: Some((Outcome::RecoveryExhausted, why)),
            };
        }
        if attempt > p.policy.max_retries(tool) {
            return Answered { result, hard: None };
        }
        let delay = p
            .policy
            .backoff
            .delay(attempt - 1, entropy(call.index, attempt));
        step.emit(Event::RetryScheduled {
            index: call.index,
            id: call.id.clone(),
            attempt: attempt + 1,
            tool: tool.to_owned(),
            delay,
            reason,
        })
        .await;
        let cancelled = tokio::select! {
            biased;
            () = scope.cancel.cancelled() => true,
            () = tokio::time::sleep(delay) => false,
        };
        if cancelled {
            let message = format!(
                "tool '{tool}' was cancelled while waiting to retry after: {}",
                result.error
            );
            let mut cancelled =
                CallResult::failed(call, tool, ErrorClass::Cancelled, message, None);
            cancelled.attempts = attempt;
            cancelled.duration = result.duration;
            return Answered {
                result: cancelled,
                hard: Some((Outcome::Cancelled, scope.cancel.reason())),
            };
        }
        if let Some(fixed) = correction.filter(Value::is_object) {
            input = Arc::new(fixed);
        }
    }
}

/// One attempt's identity, for emitting its events.
struct Step<'a> {
    call: &'a ToolCall,
    tool: &'a str,
    attempt: u32,
    scope: &'a CallScope<'a>,
}

impl Step<'_> {
    async fn emit(&self, event: Event) {
        if self.scope.observer.wants_events() {
            self.scope.observer.on_event(event).await;
        }
    }

    fn wants_events(&self) -> bool {
        self.scope.observer.wants_events()
    }

    /// The terminal event of the attempt.
    async fn post(&self, result: &CallResult) {
        if !self.wants_events() {
            return;
        }
        let limit = self.scope.pipeline.preview_chars;
        self.emit(Event::ToolPost {
            preview: crate::json::truncate_chars(&result.content, limit),
            index: self.call.index,
            id: self.call.id.clone(),
            attempt: self.attempt,
            tool: self.tool.to_owned(),
            error_class: result.error_class,
            duration: result.duration,
            cached: result.cached,
        })
        .await;
    }

    async fn progress(&self, report: crate::tools::Progress) {
        self.emit(Event::Progress {
            index: self.call.index,
            id: self.call.id.clone(),
            attempt: self.attempt,
            tool: self.tool.to_owned(),
            progress: report.progress,
            total: report.total,
            message: report.message,
        })
        .await;
    }

    async fn breaker_changed(&self, transition: Option<Transition>) {
        if let Some(t) = transition {
            tracing::info!(tool = %self.tool, from = ?t.from, to = ?t.to, "breaker changed");
            self.emit(Event::BreakerChanged {
                id: self.call.id.clone(),
                tool: self.tool.to_owned(),
                from: t.from,
                to: t.to,
            })
            .await;
        }
    }

    /// A refusal before execution: recorded for loop detection, so hammering a refused tool stops.
    fn refused(&self, class: ErrorClass, message: String, canonical_input: &str) -> CallResult {
        let mut result = CallResult::failed(self.call, self.tool, class, message, None);
        result.attempts = self.attempt - 1;
        if let Some(th) = self.scope.pipeline.policy.loop_thresholds(self.tool) {
            let op = Operation {
                tool: self.tool,
                input: canonical_input,
                result: result_hash(&result),
            };
            // A refusal is never retried, so a warning here has no later result to ride on;
            // the stop is what matters and it comes from the pre-check of the next identical call.
            let _ = self.scope.session.detector().record(op, th);
        }
        result
    }

    async fn finish_soft(&self, result: CallResult) -> Answered {
        self.post(&result).await;
        Answered { result, hard: None }
    }
}

/// Runs the middleware stack, raced against the batch's cancel (checked first). `None` means
/// cancelled; the tool's token fires either way once its future is gone.
async fn run_once(
    call: &ToolCall,
    input: &Arc<Value>,
    tool: &str,
    metadata: &Arc<CallMetadata>,
    step: &Step<'_>,
) -> Option<Invoked> {
    let scope = step.scope;
    // Progress reports travel to the observer while the tool runs; no channel when nobody listens.
    let (progress_tx, mut progress_rx) = match step.wants_events() {
        true => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        }
        false => (None, None),
    };
    let ctx = ToolContext {
        session_id: scope.session.id.clone(),
        call_id: call.id.clone(),
        index: call.index,
        cancel: scope.cancel.token().child_token(),
        scratch: scope.session.scratch().clone(),
        metadata: metadata.clone(),
        deadline: None,
        progress: progress_tx,
        trace: scope.trace.cloned(),
    };
    let token = ctx.cancel.clone();
    let invocation = Invocation {
        tool: tool.to_owned(),
        input: input.clone(),
        ctx,
        turn: scope.turn,
        requested_timeout: scope.options.call_timeout,
        deadline: scope.options.deadline,
        budget: scope.budget.clone(),
    };
    let running = scope.pipeline.service.clone().oneshot(invocation);
    tokio::pin!(running);
    let invoked = loop {
        tokio::select! {
            biased;
            () = scope.cancel.cancelled() => break None,
            done = &mut running => {
                let Ok(invoked) = done;
                break Some(invoked);
            }
            Some(report) = next_progress(&mut progress_rx) => step.progress(report).await,
        }
    };
    token.cancel();
    // Reports sent just before the tool returned still reach the observer, in order.
    if let Some(rx) = progress_rx.as_mut() {
        while let Ok(report) = rx.try_recv() {
            step.progress(report).await;
        }
    }
    invoked
}

/// The next progress report, or never when nobody listens.
async fn next_progress(
    rx: &mut Option<tokio::sync::mpsc::UnboundedReceiver<crate::tools::Progress>>,
) -> Option<crate::tools::Progress> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

fn answer(call: &ToolCall, tool: &str, invoked: Option<Invoked>) -> CallResult {
    let Some(invoked) = invoked else {
        return CallResult::failed(
            call,
            tool,
            ErrorClass::Cancelled,
            format!("tool '{tool}' was cancelled"),
            None,
        );
    };
    let mut result = match invoked.reply {
        Reply::Output(output) => CallResult::succeeded(call, tool, output),
        Reply::Error {
            class,
            message,
            output,
            ..
        } => CallResult::failed(call, tool, class, message, output),
    };
    result.cached = invoked.cached;
    result.truncated = invoked.truncated;
    result
}

fn health_outcome(result: &CallResult) -> HealthOutcome {
    // A cache hit says nothing about the tool: it did not run.
    if result.cached {
        return HealthOutcome::Neutral;
    }
    match result.error_class {
        ErrorClass::None => HealthOutcome::Success(result.duration),
        ErrorClass::ToolError | ErrorClass::Timeout | ErrorClass::Transport | ErrorClass::Panic => {
            HealthOutcome::Failure(result.duration)
        }
        _ => HealthOutcome::Neutral,
    }
}

/// The result's identity for loop detection: class and content, FNV-1a.
pub(super) fn result_hash(result: &CallResult) -> u64 {
    let hash = hash::fnv1a_extend(hash::FNV1A_OFFSET, result.error_class.name().as_bytes());
    let hash = hash::fnv1a_extend(hash, &[0]);
    hash::fnv1a_extend(hash, result.content.as_bytes())
}

/// The one line appended to a result when its call starts to loop.
fn loop_warning(pattern: &str, repeats: u32, stop_after: u32) -> String {
    let mut line = format!(
        "\n[toolgate] warning: {pattern} has returned the same result {repeats} times; change the arguments or try another approach"
    );
    if stop_after > 0 {
        line.push_str(&format!(" (it will be refused after {stop_after} repeats)"));
    }
    line
}

/// Varies jitter between calls and attempts.
fn entropy(index: usize, attempt: u32) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::from(d.subsec_nanos()))
        .unwrap_or(0);
    nanos ^ ((index as u64) << 32) ^ u64::from(attempt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_warning_is_one_line() {
        let w = loop_warning("t({})", 3, 10);
        assert_eq!(w.lines().filter(|l| !l.is_empty()).count(), 1);
        assert!(w.ends_with("(it will be refused after 10 repeats)"), "{w}");
    }
}
