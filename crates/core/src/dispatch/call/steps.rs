//! The steps of one attempt, each a named function the driver (`call.rs`) calls in order: the
//! events each emits, the refusals, detection, health, memory and recovery. The run through the
//! middleware stack (steps 5 and 6) is in `run.rs`.

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;

use super::loops::{LoopGuard, LoopStop, loop_warning};
use super::{Answered, CallScope};
use crate::calls::ToolCall;
use crate::dispatch::batch::Outcome;
use crate::dispatch::events::Event;
use crate::dispatch::result::CallResult;
use crate::dispatch::traced::AttemptTrace;
use crate::json;
use crate::safety::backoff::RETRY_CEILING;
use crate::safety::breaker::{BreakerDecision, Transition};
use crate::safety::health::HealthOutcome;
use crate::safety::hooks::{Decision, Gate, GateRecord, PostToolUse, PreToolUse};
use crate::safety::recovery::{Failure, Verdict};
use crate::tools::ErrorClass;
use crate::tools::registry::Registered;

/// One attempt of one call: what every step needs to act and to emit its events, and the
/// attempt's trace (its span ends when the step is dropped, or when a retry starts waiting).
pub(super) struct Step<'a> {
    pub call: &'a ToolCall,
    /// The tool as the call resolved it (what the stack runs), and its name.
    pub registered: &'a Arc<Registered>,
    pub tool: &'a str,
    pub attempt: u32,
    pub scope: &'a CallScope<'a>,
    pub trace: AttemptTrace<'a>,
}

/// A call the breaker let run, holding the half-open probe slot when it is the probe. The slot
/// is released at once, as a neutral outcome, if the attempt is dropped before its outcome is
/// recorded (its client reset the stream, or tonic dropped a unary call at its deadline):
/// otherwise the breaker would refuse every caller until the probe lease ran out.
pub(super) struct Admitted<'a> {
    pipeline: &'a crate::dispatch::pipeline::Pipeline,
    tool: &'a str,
    /// The probe slot, held until the outcome is recorded.
    probe: bool,
}

/// Why a call does not run, found before it would (a hook's block, an ask refused or denied).
pub(super) enum Refusal {
    /// Answered with this class and the text the model reads.
    Refused(ErrorClass, String),
    /// The batch was cancelled while the call waited for approval: it ends the batch, as a
    /// cancel while running does (class `CANCELLED`).
    Cancelled(String),
}

/// What recovery decided after a failed attempt.
pub(super) enum Recovery {
    /// The call is answered (and maybe the batch ends).
    Answer(Box<Answered>),
    /// Run again, with the reflector's corrected input if it gave one.
    Retry(Option<Value>),
}

/// What step 2 cleared the call with: the input as the hooks (and a person) left it (`None`:
/// as given), and the permission rule whose ask a person approved, which lets the call through
/// the stack's permission layer.
pub(super) struct Cleared {
    pub input: Option<Value>,
    pub approved: Option<Arc<str>>,
}

impl Cleared {
    fn by_hooks(input: Option<Value>) -> Self {
        Cleared {
            input,
            approved: None,
        }
    }

    fn by_person(input: Option<Value>, rule: Arc<str>) -> Self {
        Cleared {
            input,
            approved: Some(rule),
        }
    }
}

impl Step<'_> {
    /// Whether anyone reads this attempt's decisions (gate decisions, loops, breaker changes,
    /// approvals, retries): the batch's client, or its trace.
    pub(super) fn wants_events(&self) -> bool {
        self.client_wants_events() || self.trace.is_recording()
    }

    /// Whether the batch's client reads events (the frame of each attempt, `tool_pre` and
    /// `tool_post`, and progress, are for it alone: the span is that frame).
    pub(super) fn client_wants_events(&self) -> bool {
        self.scope.observer.wants_events()
    }

    /// Every event of the attempt goes out here: onto its span, then to the client.
    pub(super) async fn emit(&self, event: Event) {
        self.trace.record(&event);
        if self.client_wants_events() {
            crate::dispatch::events::deliver(self.scope.observer, event).await;
        }
    }

    /// An approval's event: onto the span, then to the client when it wants events or only
    /// approvals' (`Observer::wants_approvals`).
    pub(super) async fn emit_approval(&self, event: Event) {
        self.trace.record(&event);
        if self.client_wants_events() || self.scope.observer.wants_approvals() {
            crate::dispatch::events::deliver(self.scope.observer, event).await;
        }
    }

    /// Step 1: `tool_pre`.
    pub(super) async fn announce(&self) {
        if self.client_wants_events() {
            self.emit(Event::ToolPre {
                index: self.call.index,
                id: self.call.id.clone(),
                attempt: self.attempt,
                tool: self.tool.to_owned(),
            })
            .await;
        }
    }

    /// Step 2: every gate that decides before the call is admitted. The pre-tool hooks in
    /// order, then the permission rule that decides the call when it asks: one mechanism puts
    /// every ask, whoever raised it, to a person (`ask_person`, interactive batches) before the
    /// breaker is asked for a slot, so no call holds a probe slot while a person decides. An
    /// approved hook's ask lets the hooks after it go on; an input a person edited is a new
    /// input, which every hook sees again from the first (a Block still blocks it, a Modify
    /// still applies), and only an ask about exactly the input a person approved for that hook
    /// or rule counts as answered.
    pub(super) async fn pre_tool_gates(&self, input: &Value) -> Result<Cleared, Refusal> {
        let p = self.scope.pipeline;
        let mut current: Option<Value> = None;
        let mut start = 0;
        // (source, digest of the input a person approved it for).
        let mut approved: Vec<(String, String)> = Vec::new();
        let answered = |approved: &[(String, String)], source: &str, digest: &str| {
            approved.iter().any(|(s, d)| s == source && d == digest)
        };
        loop {
            let seen = current.as_ref().unwrap_or(input);
            let asked = PreToolUse {
                session_id: self.scope.session.id(),
                call_id: &self.call.id,
                index: self.call.index,
                tool: self.tool,
                input: seen,
                attempt: self.attempt,
            };
            let (gate, records) = p.hooks.pre_tool_use_from(&asked, start).await;
            self.gates_decided(records, seen).await;
            // A hook's ask resumes with the hooks after it; a rule's (`resume: None`) is the
            // last gate.
            let (source, message, about, resume) = match gate {
                Gate::Refuse(message) => {
                    return Err(Refusal::Refused(ErrorClass::Blocked, message));
                }
                Gate::Ask {
                    source,
                    message,
                    modified,
                    resume,
                } => (source, message, modified.or(current), Some(resume)),
                Gate::Proceed(modified) => {
                    let proceeding = modified.or(current);
                    let rule = match self.scope.options.interactive_approvals {
                        true => p.permissions.ask(self.tool, self.scope.caller),
                        // Not interactive: the stack's permission layer refuses the ask.
                        false => None,
                    };
                    let Some((source, reason)) = rule else {
                        return Ok(Cleared::by_hooks(proceeding));
                    };
                    let digest = json::digest(proceeding.as_ref().unwrap_or(input));
                    if answered(&approved, &source, &digest) {
                        return Ok(Cleared::by_person(proceeding, source));
                    }
                    let record = GateRecord {
                        source: source.to_string(),
                        decision: Decision::Ask(reason.clone()),
                        reason: reason.clone(),
                    };
                    self.gates_decided(vec![record], proceeding.as_ref().unwrap_or(input))
                        .await;
                    (source.to_string(), reason, proceeding, None::<usize>)
                }
            };
            let about_input = about.as_ref().unwrap_or(input);
            let digest = json::digest(about_input);
            if let Some(resume) = resume
                && answered(&approved, &source, &digest)
            {
                current = about;
                start = resume;
                continue;
            }
            match (
                self.ask_person(&source, &message, about_input).await?,
                resume,
            ) {
                (Some(edited), _) => {
                    approved.push((source, json::digest(&edited)));
                    current = Some(edited);
                    start = 0;
                }
                (None, Some(resume)) => {
                    approved.push((source, digest));
                    current = about;
                    start = resume;
                }
                (None, None) => return Ok(Cleared::by_person(about, source.into())),
            }
        }
    }

    /// Counts and announces gate decisions the pre-tool gates made about `input`, their
    /// reasons redacted.
    async fn gates_decided(&self, mut records: Vec<GateRecord>, input: &Value) {
        let p = self.scope.pipeline;
        self.count_gates(&records);
        if self.wants_events() {
            for record in &mut records {
                record.reason = p.redactor.redact(&record.reason).into_owned();
            }
            self.gate_events(&records, input).await;
        }
    }

    /// Counts hook and permission decisions by source and verdict.
    pub(super) fn count_gates(&self, records: &[GateRecord]) {
        let p = self.scope.pipeline;
        for record in records {
            p.metrics
                .hook_decision(&record.source, record.decision.verdict());
        }
    }

    /// One `gate_decision` per hook or permission decision, with the digest of the input the
    /// decision saw, onto the span and then to the client. Reasons arrive redacted (the hooks'
    /// by `gates_decided`, the permission rules' by the stack's redaction layer) and are cut here.
    pub(super) async fn gate_events(&self, records: &[GateRecord], input: &Value) {
        if !self.wants_events() || records.is_empty() {
            return;
        }
        let digest = json::digest(input);
        let limit = self.scope.pipeline.preview_chars;
        let events: Vec<Event> = records
            .iter()
            .map(|record| {
                // A hook's reason (a command hook's stderr) is bounded like every preview.
                let mut record = record.clone();
                if record.reason.len() > limit {
                    record.reason = json::truncate_chars(&record.reason, limit);
                }
                Event::GateDecision {
                    index: self.call.index,
                    id: self.call.id.clone(),
                    attempt: self.attempt,
                    tool: self.tool.to_owned(),
                    record,
                    args_digest: digest.clone(),
                }
            })
            .collect();
        // All on the span before any is delivered: a batch dropped while the client's queue is
        // full must not leave decisions counted but missing from its trace.
        for event in &events {
            self.trace.record(event);
        }
        if self.client_wants_events() {
            for event in events {
                crate::dispatch::events::deliver(self.scope.observer, event).await;
            }
        }
    }

    /// Step 3, stopped: the call would repeat a looping operation; the batch ends.
    pub(super) async fn loop_stopped(&self, stop: LoopStop) -> Answered {
        self.scope.pipeline.metrics.loop_detected(self.tool, true);
        self.emit(Event::LoopDetected {
            index: self.call.index,
            id: self.call.id.clone(),
            attempt: self.attempt,
            tool: self.tool.to_owned(),
            stop: true,
            pattern: stop.pattern.clone(),
            repeats: stop.repeats,
        })
        .await;
        let mut result = CallResult::failed(
            self.call,
            self.tool,
            ErrorClass::LoopStopped,
            stop.message(),
            None,
        );
        result.set_executions(self.attempt - 1);
        self.post(&result).await;
        Answered {
            result,
            hard: Some((Outcome::LoopDetected, stop.reason())),
        }
    }

    /// The batch was cancelled before the call ran (while it waited for approval): it ends
    /// the batch, as a cancel while running does.
    pub(super) async fn cancelled(&self, message: String) -> Answered {
        let mut result =
            CallResult::failed(self.call, self.tool, ErrorClass::Cancelled, message, None);
        result.set_executions(self.attempt - 1);
        self.post(&result).await;
        Answered {
            result,
            hard: Some((Outcome::Cancelled, self.scope.cancel.reason())),
        }
    }

    /// A refusal before execution (hook, breaker): recorded for loop detection, so hammering a
    /// refused tool stops too.
    pub(super) async fn refused(
        &self,
        class: ErrorClass,
        message: String,
        guard: &LoopGuard<'_>,
    ) -> Answered {
        let mut result = CallResult::failed(self.call, self.tool, class, message, None);
        result.set_executions(self.attempt - 1);
        guard.record_refusal(&result);
        self.post(&result).await;
        Answered::soft(result)
    }

    /// Step 4: the breaker's admission. `None`: refused; `Some(admitted)`: run, holding the
    /// half-open probe slot when the breaker gave it.
    pub(super) async fn admit(&self) -> Option<Admitted<'_>> {
        let (admission, transition) = self.scope.pipeline.health.admit(self.tool, Instant::now());
        self.breaker_changed(transition).await;
        let probe = match admission {
            BreakerDecision::Refused => return None,
            BreakerDecision::Probe => true,
            BreakerDecision::Allowed => false,
        };
        Some(Admitted {
            pipeline: self.scope.pipeline,
            tool: self.tool,
            probe,
        })
    }

    /// After step 6: a failure once the request's deadline has passed is the deadline passing
    /// (whichever fired first: the stack's timeout, or a remote's own timer set to the same
    /// deadline), which cancels the batch; a cancelled attempt says nothing about the tool and
    /// ends the batch.
    pub(super) async fn settle_cancelled(
        &self,
        result: &mut CallResult,
        admitted: &mut Admitted<'_>,
    ) -> Option<Answered> {
        let scope = self.scope;
        let deadline_passed = scope.options.deadline.is_some_and(|d| Instant::now() >= d);
        // An approval the deadline cut short stays what it was: nobody answered in time.
        let settled = matches!(
            result.error_class,
            ErrorClass::Cancelled | ErrorClass::ApprovalTimeout | ErrorClass::ApprovalDenied
        );
        if !result.success && !settled && deadline_passed {
            scope.cancel.cancel("the request deadline passed");
            result.error_class = ErrorClass::Cancelled;
            result.error = format!(
                "tool '{}' was cancelled: the request deadline passed",
                self.tool
            );
            result.content.clone_from(&result.error);
        }
        if result.error_class != ErrorClass::Cancelled {
            return None;
        }
        // A probe frees its slot at once, with no new cooldown.
        let transition = admitted.record(HealthOutcome::Neutral);
        self.post(result).await;
        self.breaker_changed(transition).await;
        Some(Answered {
            result: result.clone(),
            hard: Some((Outcome::Cancelled, scope.cancel.reason())),
        })
    }

    /// Step 7: records the operation; a new warning is emitted and returns the line the
    /// result carries (when the policy appends it).
    pub(super) async fn record_loop(
        &self,
        guard: &LoopGuard<'_>,
        result: &CallResult,
    ) -> Option<String> {
        let warning = guard.record(result)?;
        self.scope.pipeline.metrics.loop_detected(self.tool, false);
        self.emit(Event::LoopDetected {
            index: self.call.index,
            id: self.call.id.clone(),
            attempt: self.attempt,
            tool: self.tool.to_owned(),
            stop: false,
            pattern: warning.pattern.clone(),
            repeats: warning.repeats,
        })
        .await;
        let policy = &self.scope.pipeline.policy;
        let stop_after = guard.thresholds.map_or(0, |th| th.stop_after);
        policy
            .append_loop_warning
            .then(|| loop_warning(&warning.pattern, warning.repeats, stop_after))
    }

    /// Step 8, and the terminal event of every attempt: `tool_post`; and the attempt's metrics
    /// and result on its trace.
    pub(super) async fn post(&self, result: &CallResult) {
        let metrics = &self.scope.pipeline.metrics;
        self.trace.finished(result);
        if result.cached {
            metrics.cache_hit(self.tool);
        } else if result.attempts >= self.attempt {
            // This attempt ran the tool (a refusal counts no execution).
            let error = (!result.success).then(|| result.error_class.name());
            metrics.execution(self.tool, error, result.duration);
        }
        if result.truncated {
            metrics.truncated(self.tool);
        }
        if !self.client_wants_events() {
            return;
        }
        let limit = self.scope.pipeline.preview_chars;
        self.emit(Event::ToolPost {
            preview: json::truncate_chars(&result.content, limit),
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

    /// Step 9.
    pub(super) async fn post_tool_hooks(&self, input: &Value, result: &CallResult) {
        self.scope
            .pipeline
            .hooks
            .post_tool_use(&PostToolUse {
                session_id: self.scope.session.id(),
                call_id: &self.call.id,
                index: self.call.index,
                tool: self.tool,
                input,
                attempt: self.attempt,
                content: &result.content,
                is_error: !result.success,
                error_class: result.error_class.name(),
                duration_ms: u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
            })
            .await;
    }

    /// Step 10.
    pub(super) async fn record_health(&self, result: &CallResult, mut admitted: Admitted<'_>) {
        let transition = admitted.record(health_outcome(result));
        self.breaker_changed(transition).await;
    }

    /// Step 11: successful calls only. The result is already redacted by the stack; the input
    /// is redacted here.
    pub(super) fn remember(&self, guard: &LoopGuard<'_>, result: &CallResult) {
        let p = self.scope.pipeline;
        if result.success && p.policy.memory_enabled && self.scope.session.keeps_memory() {
            let input_text = p.redactor.redact(&guard.input);
            self.scope
                .session
                .remember(self.tool, &input_text, &result.content);
        }
    }

    /// Step 12: asks the reflector, applies the retry limits, and waits out the backoff (or
    /// the batch's cancel).
    pub(super) async fn recover(
        &self,
        registered: &Registered,
        input: &Value,
        result: CallResult,
        retryable: bool,
    ) -> Recovery {
        let (p, tool, attempt) = (self.scope.pipeline, self.tool, self.attempt);
        let failure = Failure {
            tool,
            annotations: registered.tool.annotations(),
            input,
            class: result.error_class,
            message: &result.error,
            retryable,
            attempt,
            retry_enabled: p.policy.retry_enabled(tool),
        };
        let (reason, correction) = match p.reflector.reflect(&failure).await {
            Verdict::GiveUp { .. } => return Recovery::Answer(Box::new(Answered::soft(result))),
            Verdict::Retry { reason, correction } => (reason, correction),
        };
        // The hard ceiling is checked before sleeping: no wait is wasted on a call that cannot
        // run.
        if attempt > RETRY_CEILING {
            let why = format!(
                "tool '{tool}' failed {attempt} times (the last: {}); no call is retried more than {RETRY_CEILING} times",
                json::truncate_chars(&result.error, 200)
            );
            return Recovery::Answer(Box::new(Answered {
                result,
                hard: Some((Outcome::RecoveryExhausted, why)),
            }));
        }
        if attempt > p.policy.max_retries(tool) {
            return Recovery::Answer(Box::new(Answered::soft(result)));
        }
        let delay = p
            .policy
            .backoff
            .delay(attempt - 1, entropy(self.call.index, attempt));
        p.metrics.retry(tool);
        self.emit(Event::RetryScheduled {
            index: self.call.index,
            id: self.call.id.clone(),
            attempt: attempt + 1,
            tool: tool.to_owned(),
            delay,
            reason,
        })
        .await;
        let cancelled = tokio::select! {
            biased;
            () = self.scope.cancel.cancelled() => true,
            () = tokio::time::sleep(delay) => false,
        };
        if cancelled {
            let message = format!(
                "tool '{tool}' was cancelled while waiting to retry after: {}",
                result.error
            );
            let mut cancelled =
                CallResult::failed(self.call, tool, ErrorClass::Cancelled, message, None);
            cancelled.set_executions(attempt);
            cancelled.duration = result.duration;
            return Recovery::Answer(Box::new(Answered {
                result: cancelled,
                hard: Some((Outcome::Cancelled, self.scope.cancel.reason())),
            }));
        }
        Recovery::Retry(correction.filter(Value::is_object))
    }

    async fn breaker_changed(&self, transition: Option<Transition>) {
        if let Some(t) = transition {
            tracing::info!(target: "toolgate::dispatch::call::steps", tool = %self.tool, from = ?t.from, to = ?t.to, "breaker changed");
            self.scope
                .pipeline
                .metrics
                .breaker_changed(self.tool, t.to.name());
            self.emit(Event::BreakerChanged {
                id: self.call.id.clone(),
                tool: self.tool.to_owned(),
                from: t.from,
                to: t.to,
            })
            .await;
        }
    }
}

impl Admitted<'_> {
    /// Records the attempt's outcome under the tool that ran; the probe slot goes with it.
    fn record(&mut self, outcome: HealthOutcome) -> Option<Transition> {
        let probe = std::mem::take(&mut self.probe);
        self.pipeline
            .health
            .record(self.tool, outcome, probe, Instant::now())
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if !self.probe {
            return;
        }
        if let Some(t) = self.record(HealthOutcome::Neutral) {
            tracing::info!(target: "toolgate::dispatch::call::steps", tool = %self.tool, from = ?t.from, to = ?t.to, "breaker changed: the probe's caller left");
            self.pipeline
                .metrics
                .breaker_changed(self.tool, t.to.name());
        }
    }
}

fn health_outcome(result: &CallResult) -> HealthOutcome {
    // A cache hit says nothing about the tool: it did not run.
    if result.cached {
        return HealthOutcome::Neutral;
    }
    match result.error_class {
        ErrorClass::None => HealthOutcome::Success(result.duration),
        // The client's own short deadline passed: nothing learned about the tool, and one
        // impatient caller must not open the breaker for everyone.
        ErrorClass::Timeout if result.client_deadline => HealthOutcome::Neutral,
        ErrorClass::ToolError | ErrorClass::Timeout | ErrorClass::Transport | ErrorClass::Panic => {
            HealthOutcome::Failure(result.duration)
        }
        // The shared session store failed, not the tool: one tenant filling the store must
        // not open a breaker that every tenant's calls of the tool go through.
        ErrorClass::StoreUnavailable | ErrorClass::OutcomeUnknown => HealthOutcome::Neutral,
        _ => HealthOutcome::Neutral,
    }
}

/// Varies jitter between calls and attempts.
fn entropy(index: usize, attempt: u32) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::from(d.subsec_nanos()))
        .unwrap_or(0);
    nanos ^ ((index as u64) << 32) ^ u64::from(attempt)
}
