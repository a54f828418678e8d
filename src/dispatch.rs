//! Batch dispatch: answers every call of a batch exactly once, in the model's order.
//! Invariant: `run` returns one `CallResult` per received call, at the call's index, stamped with
//! the call's id, whatever the tools do; a tool can only produce soft errors.

mod call;
mod cancel;
mod events;
mod messages;
pub mod plan;
mod result;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::{Map, Value};
use tokio::time::Instant;
use tracing::{Instrument, field};

use crate::calls::Received;
use crate::json;
use crate::middleware::{self, Budget, MiddlewareConfig, Redactor, ToolService};
use crate::safety::detector::{Check, Operation};
use crate::safety::health::Health;
use crate::safety::hooks::Hooks;
use crate::safety::policy::Policy;
use crate::safety::recovery::{DefaultReflector, Reflector};
use crate::session::{Session, Sessions};
use crate::tools::ToolRegistry;

pub use call::readable;
pub use cancel::Cancel;
pub use events::{Event, NoObserver, Observer};
pub use messages::{MessageFormat, tool_messages};
pub use result::{CallResult, ErrorClass, content_of};

/// One batch of received calls and how to run it.
#[derive(Debug, Clone)]
pub struct Batch {
    /// A validated session id; empty means a fresh session for this batch only.
    pub session_id: String,
    pub calls: Vec<Received>,
    /// The request context that input references read.
    pub context: Map<String, Value>,
    pub options: BatchOptions,
    pub turn: u32,
}

/// Per-batch settings, already resolved against server defaults.
#[derive(Debug, Clone, Copy)]
pub struct BatchOptions {
    pub message_format: MessageFormat,
    /// The request's own per-call timeout; `None` uses the tool's or the server's.
    pub call_timeout: Option<Duration>,
    /// The request's deadline (from gRPC); no call runs past it.
    pub deadline: Option<Instant>,
    pub mode: Mode,
}

/// How the calls of a batch are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// One call at a time, in the model's order.
    #[default]
    Sequential,
    /// Calls that do not conflict run together, at most `max_concurrency` at once.
    Parallel { max_concurrency: usize },
}

/// How a batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    FailedFast,
    Cancelled,
    LoopDetected,
    RecoveryExhausted,
}

/// Everything a batch produced.
#[derive(Debug, Clone)]
pub struct BatchReport {
    pub session_id: String,
    /// One per call, in the model's order.
    pub results: Vec<CallResult>,
    /// Tool messages in the requested format.
    pub messages: Vec<Map<String, Value>>,
    pub outcome: Outcome,
    pub outcome_reason: String,
    pub duration: Duration,
}

impl BatchReport {
    /// Number of results with success false.
    pub fn errors(&self) -> usize {
        self.results.iter().filter(|r| !r.success).count()
    }

    pub fn all_succeeded(&self) -> bool {
        self.errors() == 0
    }
}

/// The safety pipeline's parts, shared by every call of a server.
#[derive(Clone)]
pub struct Pipeline {
    pub hooks: Hooks,
    pub health: Arc<Health>,
    pub policy: Arc<Policy>,
    pub reflector: Arc<dyn Reflector>,
    /// The middleware stack around every tool invocation.
    pub service: ToolService,
    /// Also applied to memory and event arguments.
    pub redactor: Arc<Redactor>,
    /// Characters shared by all results of a batch (0 = none).
    pub batch_budget_chars: usize,
    pub suggestion_threshold: f64,
}

impl Pipeline {
    /// A pipeline with no hooks, the built-in reflector and the middleware `config` describes.
    pub fn new(
        registry: Arc<ToolRegistry>,
        health: Arc<Health>,
        policy: Policy,
        config: &MiddlewareConfig,
    ) -> Self {
        Pipeline {
            hooks: Hooks::default(),
            health,
            policy: Arc::new(policy),
            reflector: Arc::new(DefaultReflector),
            service: middleware::stack(config, registry),
            redactor: config.redactor.clone(),
            batch_budget_chars: 0,
            suggestion_threshold: config.suggestion_threshold,
        }
    }
}

/// Runs batches against a registry of tools.
#[derive(Clone)]
pub struct Dispatcher {
    registry: Arc<ToolRegistry>,
    sessions: Arc<Sessions>,
    pipeline: Pipeline,
}

impl Dispatcher {
    pub fn new(registry: Arc<ToolRegistry>, sessions: Arc<Sessions>, pipeline: Pipeline) -> Self {
        Dispatcher {
            registry,
            sessions,
            pipeline,
        }
    }

    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// A shared handle to the sessions (the server removes their directories on stop).
    pub fn sessions_handle(&self) -> Arc<Sessions> {
        self.sessions.clone()
    }

    pub fn health(&self) -> &Health {
        &self.pipeline.health
    }

    /// Runs the batch sequentially. Cancellation ends it early: the running call is answered
    /// CANCELLED and calls that never started are SKIPPED.
    pub async fn run(&self, batch: Batch, observer: &dyn Observer, cancel: &Cancel) -> BatchReport {
        let started = Instant::now();
        let session = self.sessions.open(&batch.session_id);
        // Released on every exit, including when the caller drops this future mid-batch.
        let _release = Release {
            sessions: &self.sessions,
            session: &session,
        };
        let span = tracing::info_span!(
            "batch",
            session = %session.id,
            calls = batch.calls.len(),
            turn = batch.turn,
            outcome = field::Empty,
            duration_ms = field::Empty,
        );
        let work = async {
            // Every call is announced before anything executes, including calls that will not run.
            for received in batch.calls.iter().filter(|_| observer.wants_events()) {
                let call = &received.call;
                let mut arguments = call.arguments.clone();
                self.pipeline.redactor.redact_value(&mut arguments);
                observer
                    .on_event(Event::CallReceived {
                        index: call.index,
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments,
                    })
                    .await;
            }
            // Both modes share one executor: sequential is a chain with a limit of one.
            let (plan, limit) = match batch.options.mode {
                Mode::Parallel { max_concurrency } if batch.calls.len() >= 2 => (
                    plan::plan(&self.slots(&batch.calls)),
                    max_concurrency.max(1),
                ),
                _ => (plan::chain(batch.calls.len()), 1),
            };
            let budget = (self.pipeline.batch_budget_chars > 0)
                .then(|| Arc::new(Budget::new(self.pipeline.batch_budget_chars)));
            let scope = BatchScope {
                session: &session,
                options: &batch.options,
                observer,
                turn: batch.turn,
                budget,
            };
            self.execute(&batch.calls, &plan, limit, &scope, cancel)
                .await
        };
        let (results, outcome, outcome_reason) = work.instrument(span.clone()).await;
        let duration = started.elapsed();
        span.record("outcome", field::debug(outcome));
        span.record("duration_ms", duration.as_millis());
        span.in_scope(|| {
            tracing::info!(
                outcome = ?outcome,
                calls = results.len(),
                errors = results.iter().filter(|r| !r.success).count(),
                duration_ms = duration.as_millis(),
                "batch finished"
            );
        });
        let messages = tool_messages(&results, batch.options.message_format);
        BatchReport {
            session_id: session.id.clone(),
            results,
            messages,
            outcome,
            outcome_reason,
            duration,
        }
    }
}

impl Dispatcher {
    /// `tool 'x' is not available`; recorded for loop detection so a model hammering a missing
    /// tool is stopped too.
    fn unknown_tool(&self, call: &crate::calls::ToolCall, session: &Session) -> call::Answered {
        let input = json::canonical(&call.arguments);
        if let Some(th) = self.pipeline.policy.loop_thresholds(&call.name) {
            let check = session.detector().check(&call.name, &input, th);
            if let Check::Stop { repeats, pattern } = check {
                session.detector().clear(&call.name, &input);
                let reason = format!("Loop detected: {pattern} repeated {repeats} times");
                let message = format!("dispatch refused before execution: {reason}");
                return call::Answered {
                    result: CallResult::refused(call, ErrorClass::LoopStopped, message),
                    hard: Some((Outcome::LoopDetected, reason)),
                };
            }
        }
        let mut message = format!("tool '{}' is not available", call.name);
        if let Some(candidate) = middleware::suggest(
            &call.name,
            &self.registry,
            self.pipeline.suggestion_threshold,
        ) {
            message.push_str(&format!(". Did you mean '{candidate}'?"));
        }
        let result = CallResult::refused(call, ErrorClass::UnknownTool, message);
        if let Some(th) = self.pipeline.policy.loop_thresholds(&call.name) {
            let op = Operation {
                tool: call.name.clone(),
                input,
                result: call::result_hash(&result),
            };
            let _ = session.detector().record(op, th);
        }
        call::Answered { result, hard: None }
    }
}

/// What every call of a batch shares.
struct BatchScope<'a> {
    session: &'a Session,
    options: &'a BatchOptions,
    observer: &'a dyn Observer,
    turn: u32,
    budget: Option<Arc<Budget>>,
}

impl Dispatcher {
    /// What the planner needs about each call.
    fn slots(&self, calls: &[Received]) -> Vec<plan::Slot> {
        calls
            .iter()
            .map(|received| {
                let call = &received.call;
                let tool = self
                    .registry
                    .get(&call.name)
                    .filter(|_| received.rejection.is_none());
                plan::Slot {
                    runs: tool.is_some(),
                    concurrency_safe: tool
                        .is_some_and(|t| t.tool.is_concurrency_safe(&call.arguments)),
                    resource_key: tool.and_then(|t| t.tool.resource_key(&call.arguments)),
                    operation: format!("{}\u{0}{}", call.name, json::canonical(&call.arguments)),
                }
            })
            .collect()
    }

    /// Starts each call once everything it waits for has finished, at most `limit` at once,
    /// always preferring the earliest ready call. The first hard error cancels the running
    /// siblings (their tokens fire, their futures drop) and nothing new starts; calls that
    /// never started are answered SKIPPED.
    async fn execute(
        &self,
        calls: &[Received],
        plan: &plan::Plan,
        limit: usize,
        scope: &BatchScope<'_>,
        cancel: &Cancel,
    ) -> (Vec<CallResult>, Outcome, String) {
        let n = calls.len();
        let group = cancel.child();
        let mut results: Vec<Option<CallResult>> = vec![None; n];
        let mut started = vec![false; n];
        let mut finished = vec![false; n];
        let mut hard: Option<(Outcome, String)> = None;
        let mut running = FuturesUnordered::new();
        loop {
            if hard.is_none() && cancel.is_cancelled() {
                hard = Some((Outcome::Cancelled, cancel.reason()));
            }
            if hard.is_none() {
                for i in 0..n {
                    if running.len() >= limit {
                        break;
                    }
                    if started[i] || !plan.waits_for[i].iter().all(|&j| finished[j]) {
                        continue;
                    }
                    started[i] = true;
                    let answer = self.answer(&calls[i], scope, &group);
                    running.push(async move { (i, answer.await) });
                }
            }
            let Some((i, answered)) = running.next().await else {
                break;
            };
            finished[i] = true;
            if let Some((outcome, reason)) = answered.hard
                && hard.is_none()
            {
                group.cancel(format!(
                    "call '{}' ended the batch: {reason}",
                    calls[i].call.id
                ));
                hard = Some((outcome, reason));
            }
            results[i] = Some(answered.result);
        }
        let (outcome, reason) = hard.unwrap_or((Outcome::Completed, String::new()));
        let results = results
            .into_iter()
            .zip(calls)
            .map(|(result, received)| result.unwrap_or_else(|| skipped(&received.call, outcome)))
            .collect();
        (results, outcome, reason)
    }

    /// Answers one call: a refusal from intake, an unknown tool, or the pipeline.
    async fn answer(
        &self,
        received: &Received,
        scope: &BatchScope<'_>,
        cancel: &Cancel,
    ) -> call::Answered {
        let call = &received.call;
        match (&received.rejection, self.registry.get(&call.name)) {
            (Some((rejection, message)), _) => call::Answered {
                result: CallResult::refused(call, (*rejection).into(), message.clone()),
                hard: None,
            },
            // Unknown names are answered here and never dispatched.
            (None, None) => self.unknown_tool(call, scope.session),
            (None, Some(registered)) => {
                let call_scope = call::CallScope {
                    session: scope.session,
                    options: scope.options,
                    observer: scope.observer,
                    cancel,
                    pipeline: &self.pipeline,
                    turn: scope.turn,
                    budget: scope.budget.clone(),
                };
                call::execute(call, registered, &call_scope).await
            }
        }
    }
}

/// Ends a batch's use of its session when dropped.
struct Release<'a> {
    sessions: &'a Sessions,
    session: &'a Session,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.sessions.release(self.session);
    }
}

/// The answer for a call that never started because the batch had already ended.
fn skipped(call: &crate::calls::ToolCall, outcome: Outcome) -> CallResult {
    let why = match outcome {
        Outcome::Cancelled => "the batch was cancelled",
        Outcome::FailedFast => "an earlier call failed and on_error is FAIL_FAST",
        Outcome::LoopDetected => "loop detection stopped the batch",
        Outcome::RecoveryExhausted => "an earlier call exhausted its retries",
        Outcome::Completed => "the batch ended",
    };
    CallResult::refused(
        call,
        ErrorClass::Skipped,
        format!("call skipped: {why} before it started"),
    )
}

#[cfg(test)]
mod tests;
