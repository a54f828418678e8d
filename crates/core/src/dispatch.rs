//! Batch dispatch: answers every call of a batch exactly once, in the model's order.
//! Invariant: `run` returns one `CallResult` per received call, at the call's index, stamped with
//! the call's id, whatever the tools do; a tool can only produce soft errors.

mod batch;
mod call;
mod cancel;
mod events;
mod flight;
mod messages;
mod pipeline;
pub mod plan;
mod result;
mod traced;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::FuturesUnordered;
use futures::{FutureExt as _, StreamExt};
use serde_json::Value;
use tokio::time::Instant;
use traced::BatchTrace;

use crate::calls::Received;
use crate::json;
use crate::mapping;
use crate::middleware::CharBudget;
use crate::safety::health::Health;
use crate::session::{Lease, SessionStore, Sessions, StoreError};
use crate::tools::registry::Registered;
use crate::tools::{CallMetadata, Catalog, ToolRegistry};

pub use crate::tools::ErrorClass;

pub use batch::{Batch, BatchOptions, BatchReport, Binding, Mode, Outcome};
pub use cancel::Cancel;
pub use events::{Event, NoObserver, Observer};
pub use flight::{FLIGHT_EVENTS, FLIGHTS, Flight, FlightCall, FlightEvent, FlightRecorder};
pub use messages::{MessageFormat, tool_messages};
pub use pipeline::{DEFAULTS, Pipeline, PipelineBuilder, PipelineDefaults, PipelineSettings};
pub use result::CallResult;

/// Bindings that cannot be used: every problem found, each naming its binding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct BindingProblems(pub Vec<String>);

/// Runs batches against a registry of tools.
#[derive(Clone)]
pub struct Dispatcher {
    catalog: Arc<Catalog>,
    sessions: Arc<Sessions>,
    /// Where named sessions' loop windows and memory live when several servers share them;
    /// `None`: in `sessions`, this server's alone.
    store: Option<Arc<dyn SessionStore>>,
    /// Saves of batches dropped mid-run, so shutdown can wait for them.
    saves: tokio_util::task::TaskTracker,
    pipeline: Pipeline,
    /// The server's bindings (from the config), already checked.
    bindings: Arc<BTreeMap<String, Binding>>,
    /// The recent batches and their events, when kept (`with_flights`).
    flights: Option<Arc<FlightRecorder>>,
}

/// One call, ready to run: the tool it targets and the input that tool receives.
struct Prepared {
    /// Resolved once, from the batch's registry snapshot: everything downstream uses this one.
    registered: Option<Arc<Registered>>,
    input: Arc<Value>,
    metadata: Arc<CallMetadata>,
}

impl Dispatcher {
    pub fn new(catalog: Arc<Catalog>, sessions: Arc<Sessions>, pipeline: Pipeline) -> Self {
        Dispatcher {
            catalog,
            sessions,
            store: None,
            saves: tokio_util::task::TaskTracker::new(),
            pipeline,
            bindings: Arc::default(),
            flights: None,
        }
    }

    /// Keeps the recent batches with their events (`flights`), for people to look at. Every
    /// batch's events are then built, whether its front wants them or not.
    pub fn with_flights(mut self) -> Self {
        self.flights = Some(Arc::default());
        self
    }

    /// The recent batches, when they are kept.
    pub fn flights(&self) -> Option<&FlightRecorder> {
        self.flights.as_deref()
    }

    /// Keeps named sessions' loop windows and memory in `store` (the table given to `new`
    /// should be made `sharing`: it then keeps only scratch directories).
    pub fn with_store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Installs the server's bindings after checking them.
    pub fn with_bindings(
        mut self,
        bindings: BTreeMap<String, Binding>,
    ) -> Result<Self, BindingProblems> {
        self.check_bindings(&bindings)?;
        self.bindings = Arc::new(bindings);
        Ok(self)
    }

    /// Checks bindings before any call uses them: no name is a registered tool's unless the
    /// binding runs that tool itself (a binding `echo → now` would run `now` when the model
    /// calls `echo`; `echo → echo` only maps its input), every target is registered
    /// and every mapping is an object whose `$literal`s stand alone. Lists every problem. (A
    /// malformed reference is not one: it resolves to null.)
    pub fn check_bindings(
        &self,
        bindings: &BTreeMap<String, Binding>,
    ) -> Result<(), BindingProblems> {
        let registry = self.catalog.snapshot();
        let mut problems = Vec::new();
        for (name, binding) in bindings {
            if *name != binding.tool && registry.get(name).is_some() {
                problems.push(format!(
                    "binding '{name}': '{name}' is a registered tool's name, which a binding to \
                     another tool ('{}') may not shadow",
                    binding.tool
                ));
            }
            if registry.get(&binding.tool).is_none() {
                problems.push(format!(
                    "binding '{name}': tool '{}' is not registered",
                    binding.tool
                ));
            }
            match &binding.input {
                None => {}
                Some(Value::Object(_)) => {
                    let input = binding
                        .input
                        .as_ref()
                        .map(mapping::problems)
                        .unwrap_or_default();
                    problems.extend(input.into_iter().map(|p| format!("binding '{name}': {p}")));
                }
                Some(_) => problems.push(format!("binding '{name}': input must be an object")),
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(BindingProblems(problems))
        }
    }

    /// The tools as they are now.
    pub fn registry(&self) -> Arc<ToolRegistry> {
        self.catalog.snapshot()
    }

    /// The pending approvals of this server's batches.
    pub fn approvals(&self) -> &crate::approvals::Approvals {
        &self.pipeline.approvals
    }

    /// The shared catalog, for registering and removing tools at run time.
    /// Whether `caller` may call `tool` at all: no permission rule denies it (a rule that asks
    /// still lets it be offered). What a front lists to a caller.
    pub fn may_call(&self, tool: &str, caller: &crate::identity::Caller) -> bool {
        !self
            .pipeline
            .permissions
            .deciding(tool, caller)
            .is_some_and(|(rule, _)| rule.verdict == crate::middleware::PermissionVerdict::Deny)
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
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

    /// Waits up to `limit` for the saves of batches dropped mid-run (server stop).
    pub async fn finish_saves(&self, limit: std::time::Duration) {
        self.saves.close();
        let _ = tokio::time::timeout(limit, self.saves.wait()).await;
    }

    /// Whether the shared session store answered its last operation; `None` without one.
    pub fn store_reachable(&self) -> Option<bool> {
        self.store.as_ref().map(|store| store.reachable())
    }

    /// Asks the shared session store whether it is up, every `every`, for ever (a task of the
    /// server's); returns at once without one.
    pub async fn probe_store(&self, every: std::time::Duration) {
        let Some(store) = &self.store else {
            return;
        };
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            store.probe().await;
        }
    }

    /// `tenant`'s session `id`'s memory entries, oldest first; `None` if it is not live.
    pub async fn session_memory(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<Vec<String>>, StoreError> {
        match &self.store {
            Some(store) => (store.memory(tenant, id).await)
                .inspect_err(|_| self.pipeline.metrics.store_error("memory")),
            None => Ok(self.sessions.get(tenant, id).map(|s| s.memory())),
        }
    }

    /// Ends `tenant`'s session `id` (everywhere, with a shared store); true if it was live.
    pub async fn end_session(&self, tenant: &str, id: &str) -> Result<bool, StoreError> {
        let here = self.sessions.end(tenant, id);
        match &self.store {
            Some(store) => (store.end(tenant, id).await)
                .inspect_err(|_| self.pipeline.metrics.store_error("end")),
            None => Ok(here),
        }
    }

    /// Runs the batch. Cancellation ends it early: the running call is answered CANCELLED and
    /// calls that never started are SKIPPED. Fails only when the batch names a session and the
    /// shared store holding it cannot be reached: nothing has run then.
    pub async fn run(
        &self,
        batch: Batch,
        observer: &dyn Observer,
        cancel: &Cancel,
    ) -> Result<BatchReport, StoreError> {
        let started = Instant::now();
        let caller = batch.caller.clone();
        let (tenant, id) = (&caller.tenant, &batch.session_id);
        let session = match &self.store {
            // Loop detection is a safety feature: a named session never runs on a blank window.
            Some(store) if !id.is_empty() => {
                let loaded = (store.load(tenant, id).await)
                    .inspect_err(|_| self.pipeline.metrics.store_error("load"))?;
                self.sessions
                    .open_shared(tenant, id, &loaded, store.clone())
            }
            _ => Lease::local(self.sessions.open(tenant, id)),
        };
        // Released (and a shared session's changes saved) on every exit, including when the
        // caller drops this future mid-batch.
        let _release = Release {
            dispatcher: self,
            session: &session,
            tenant,
        };
        let report = match &self.flights {
            None => {
                self.run_in(&session, batch, observer, cancel, started)
                    .await
            }
            Some(flights) => {
                let recording = flights.recording(observer);
                let report = self
                    .run_in(&session, batch, &recording, cancel, started)
                    .await;
                flights.keep(recording, &caller, &report);
                report
            }
        };
        // Saved before the batch is answered, so the agent's next batch sees it on any server;
        // unless a call of the batch found the store failing: a save awaited then would hold the
        // answer for another `store_timeout` (a write that timed out was answered after two).
        if let Some(saving) = self.saving(&session, tenant) {
            if met_a_failing_store(&report) {
                in_background(&self.saves, saving);
            } else {
                observer.finishing();
                Finishing::new(saving, &self.saves).await;
            }
        }
        Ok(report)
    }

    /// The save of a shared session (taken once): its changes, and the renewal of its idle TTL,
    /// so a batch that changed nothing saves too. A failed save loses this batch's changes, not
    /// its results (the tools ran): it is logged and counted.
    fn saving(
        &self,
        session: &Lease,
        tenant: &str,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        let store = self.store.clone()?;
        let changes = session.take_changes()?;
        let (tenant, id) = (tenant.to_owned(), session.id().to_owned());
        let metrics = self.pipeline.metrics.clone();
        Some(async move {
            match store.save(&tenant, &id, changes).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::info!(target: "toolgate::session", session = %id, "the session ended or expired while a batch ran: what the batch recorded in it was dropped");
                }
                Err(error) => {
                    metrics.store_error("save");
                    tracing::warn!(target: "toolgate::session", session = %id, %error, "session state perhaps not saved (a save that timed out may still have been applied)");
                }
            }
        })
    }

    async fn run_in(
        &self,
        session: &Lease,
        batch: Batch,
        observer: &dyn Observer,
        cancel: &Cancel,
        started: Instant,
    ) -> BatchReport {
        let p = &self.pipeline;
        let trace = BatchTrace::open(&p.tracer, &p.redactor, &batch, session.id());
        let work = async {
            // Every call is announced before anything executes, including calls that will not run.
            for received in batch.calls.iter().filter(|_| observer.wants_events()) {
                let call = &received.call;
                let mut arguments = Value::clone(&call.arguments);
                self.pipeline.redactor.redact_value(&mut arguments);
                // Events carry a bounded preview; the result carries the arguments whole.
                let text = json::canonical(&arguments);
                if text.chars().count() > self.pipeline.preview_chars {
                    arguments =
                        Value::String(json::truncate_chars(&text, self.pipeline.preview_chars));
                }
                let received = Event::CallReceived {
                    index: call.index,
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments,
                };
                events::deliver(observer, received).await;
            }
            // One snapshot for the whole batch: a registration meanwhile does not change it.
            let registry = self.catalog.snapshot();
            let prepared = self.prepare(&registry, &batch);
            // Both modes share one executor: sequential is a chain with a limit of one.
            let (plan, limit) = match batch.options.mode {
                Mode::Parallel { max_concurrency } if batch.calls.len() >= 2 => {
                    (plan::plan(&slots(&prepared)), max_concurrency.max(1))
                }
                _ => (plan::chain(batch.calls.len()), 1),
            };
            let budget = (self.pipeline.batch_budget_chars > 0)
                .then(|| Arc::new(CharBudget::new(self.pipeline.batch_budget_chars)));
            let scope = BatchScope {
                session,
                options: &batch.options,
                observer,
                turn: batch.turn,
                budget,
                trace: &trace,
                caller: &batch.caller,
                registry: &registry,
            };
            let executed = self
                .execute(&batch.calls, &prepared, &plan, limit, &scope, cancel)
                .await;
            for (result, target) in executed.0.iter().zip(&prepared) {
                let tool = target
                    .registered
                    .as_ref()
                    .map_or(crate::metrics::UNKNOWN_TOOL, |r| r.name());
                self.pipeline.metrics.call(tool, result.error_class.name());
            }
            executed
        };
        let (results, outcome, outcome_reason) = trace.run(work).await;
        let duration = started.elapsed();
        self.pipeline.metrics.batch(outcome.name(), duration);
        trace.close(outcome, &outcome_reason);
        // DEBUG, not INFO: a line per batch at the default level costs throughput (BENCHMARKS.md
        // §17).
        tracing::debug!(target: "toolgate::dispatch",
            session = %session.id(),
            outcome = outcome.name(),
            calls = results.len(),
            errors = results.iter().filter(|r| !r.success).count(),
            duration_ms = duration.as_millis(),
            "batch finished"
        );
        let messages = tool_messages(&results, batch.options.message_format);
        BatchReport {
            session_id: session.id().to_owned(),
            results,
            messages,
            outcome,
            outcome_reason,
            duration,
            message_format: batch.options.message_format,
        }
    }
}

/// What every call of a batch shares.
struct BatchScope<'a> {
    session: &'a Lease,
    options: &'a BatchOptions,
    observer: &'a dyn Observer,
    turn: u32,
    budget: Option<Arc<CharBudget>>,
    /// The batch's trace, parent of every call's.
    trace: &'a BatchTrace<'a>,
    caller: &'a Arc<crate::identity::Caller>,
    /// The registry as the batch began: the one snapshot its calls are resolved (and unknown
    /// names answered) against.
    registry: &'a ToolRegistry,
}

impl Dispatcher {
    /// Resolves each call's binding: the tool it runs and the input that tool receives.
    fn prepare(&self, registry: &ToolRegistry, batch: &Batch) -> Vec<Prepared> {
        batch
            .calls
            .iter()
            .map(|received| {
                let call = &received.call;
                let metadata = Arc::new(CallMetadata {
                    tool_name: call.name.clone(),
                    tool_call_id: call.id.clone(),
                    tool_call_index: call.index,
                    tool_arguments: call.arguments.clone(),
                    raw_arguments: call.raw_arguments.clone(),
                });
                if received.rejection.is_some() {
                    return Prepared {
                        registered: None,
                        input: Arc::new(Value::Null),
                        metadata,
                    };
                }
                // A registered tool's name runs that tool, whatever binding was checked
                // against an older registry (a remote may add the name later).
                let binding = batch
                    .bindings
                    .get(&call.name)
                    .or_else(|| self.bindings.get(&call.name))
                    .filter(|b| b.tool == call.name || registry.get(&call.name).is_none());
                let target = binding.map_or(call.name.as_str(), |b| b.tool.as_str());
                let input = match binding.and_then(|b| b.input.as_ref()) {
                    Some(spec) => {
                        let tool_call = metadata.tool_call();
                        let scope = mapping::Scope {
                            call: &tool_call,
                            arguments: &call.arguments,
                            tool_name: &call.name,
                            tool_call_id: &call.id,
                            context: &batch.context,
                        };
                        Arc::new(mapping::resolve(spec, &scope))
                    }
                    None => call.arguments.clone(),
                };
                Prepared {
                    registered: registry.get(target).cloned(),
                    input,
                    metadata,
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
        prepared: &[Prepared],
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
                    let answer = self.answer(&calls[i], &prepared[i], scope, &group);
                    // Boxed: the call's future is large, and the set moves what it is given
                    // into its task more than once. `map`, not an `async` block awaiting it:
                    // the block would hold the call's future twice (before and while awaited).
                    running.push(Box::pin(answer.map(move |answered| (i, answered))));
                }
            }
            let Some((i, answered)) = running.next().await else {
                break;
            };
            finished[i] = true;
            let result = self.finish(answered.result);
            if let Some((outcome, reason)) = answered.hard
                && hard.is_none()
            {
                group.cancel(format!(
                    "call '{}' ended the batch: {reason}",
                    calls[i].call.id
                ));
                hard = Some((outcome, reason));
            }
            // FAIL_FAST: nothing new starts after a failure; running calls finish normally.
            if scope.options.fail_fast && !result.success && hard.is_none() {
                let tool = if result.tool.is_empty() {
                    &result.name
                } else {
                    &result.tool
                };
                let reason = format!(
                    "call {} (id '{}', tool '{}') failed: {}",
                    result.index, result.id, tool, result.error
                );
                hard = Some((Outcome::FailedFast, reason));
            }
            results[i] = Some(result);
        }
        let (outcome, reason) = hard.unwrap_or((Outcome::Completed, String::new()));
        let results = results
            .into_iter()
            .zip(calls.iter().zip(prepared))
            .map(|(result, (received, target))| {
                result.unwrap_or_else(|| {
                    let result = skipped(&received.call, outcome);
                    let known = target.registered.is_some();
                    scope.trace.skipped(&received.call, known, &result);
                    result
                })
            })
            .collect();
        (results, outcome, reason)
    }

    /// The last word on a result: its error text redacted and bounded (with a marker), and the
    /// content too when it is that text.
    fn finish(&self, mut result: CallResult) -> CallResult {
        if result.error.is_empty() {
            return result;
        }
        let redacted = self.pipeline.redactor.redact(&result.error).into_owned();
        let bounded = bound(&redacted, self.pipeline.max_error_chars);
        if result.content == result.error {
            result.content.clone_from(&bounded);
        }
        result.error = bounded;
        result
    }

    /// Answers one call: a refusal from intake, an unknown tool, or the pipeline.
    async fn answer(
        &self,
        received: &Received,
        prepared: &Prepared,
        scope: &BatchScope<'_>,
        cancel: &Cancel,
    ) -> call::Answered {
        let call = &received.call;
        let trace = scope.trace.call(call, prepared.registered.is_some());
        let answered = match (&received.rejection, &prepared.registered) {
            (Some((rejection, message)), _) => {
                let result = CallResult::refused(call, (*rejection).into(), message.clone());
                call::Answered { result, hard: None }
            }
            // Unknown names are answered here and never dispatched.
            (None, None) => call::unknown_tool(call, scope.session, &self.pipeline, scope.registry),
            (None, Some(registered)) => {
                let call_scope = call::CallScope {
                    session: scope.session,
                    options: scope.options,
                    observer: scope.observer,
                    cancel,
                    pipeline: &self.pipeline,
                    turn: scope.turn,
                    budget: scope.budget.clone(),
                    trace: &trace,
                    caller: scope.caller,
                };
                let input = prepared.input.clone();
                call::execute(
                    call,
                    registered,
                    input,
                    prepared.metadata.clone(),
                    &call_scope,
                )
                .await
            }
        };
        trace.answered(&answered.result);
        answered
    }
}

/// Cuts `text` to `max` characters (0 = no limit), ending with a marker that says how much went.
fn bound(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if max == 0 || total <= max {
        return text.to_owned();
    }
    let marker = format!(" [... {} of {total} characters cut]", total - max);
    let head: String = text.chars().take(max).collect();
    format!("{head}{marker}")
}

/// What the planner needs about each call: the tool it targets and the input that tool gets.
fn slots(prepared: &[Prepared]) -> Vec<plan::Slot> {
    prepared
        .iter()
        .map(|p| {
            let tool = p.registered.as_deref();
            plan::Slot {
                runs: tool.is_some(),
                concurrency_safe: tool.is_some_and(|t| t.tool.is_concurrency_safe(&p.input)),
                resource_key: tool.and_then(|t| t.tool.resource_key(&p.input)),
                operation: format!(
                    "{}\u{0}{}",
                    tool.map_or("", |t| t.tool.name()),
                    json::canonical(&p.input)
                ),
            }
        })
        .collect()
}

/// Ends a batch's use of its session when dropped.
struct Release<'a> {
    dispatcher: &'a Dispatcher,
    session: &'a Lease,
    tenant: &'a str,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.dispatcher.sessions.release(self.session.session());
        // A batch dropped mid-run (its client left) still saves what it did, in the
        // background, as the memory store keeps it: a loop cannot hide behind cancelled
        // batches.
        if let Some(saving) = self.dispatcher.saving(self.session, self.tenant) {
            in_background(&self.dispatcher.saves, saving);
        }
    }
}

/// Whether a call of the batch was answered with the session store failing under it.
fn met_a_failing_store(report: &BatchReport) -> bool {
    report.results.iter().any(|r| {
        matches!(
            r.error_class,
            ErrorClass::StoreUnavailable | ErrorClass::OutcomeUnknown
        )
    })
}

/// Finishes `saving` on a task tracked by `saves` (`finish_saves` waits for it at stop); outside
/// a runtime there is nothing to run it on, and it is dropped.
fn in_background(
    saves: &tokio_util::task::TaskTracker,
    saving: impl Future<Output = ()> + Send + 'static,
) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        saves.spawn_on(saving, &runtime);
    }
}

/// A save awaited in place, which finishes in the background (tracked by `saves`) if the
/// batch's future is dropped first: a client leaving meanwhile does not cut it short, and the
/// usual case costs no task of its own (a spawn per batch was a wake-up of another worker).
struct Finishing<'a> {
    saving: Option<Pin<Box<dyn Future<Output = ()> + Send + 'static>>>,
    saves: &'a tokio_util::task::TaskTracker,
}

impl<'a> Finishing<'a> {
    fn new(
        saving: impl Future<Output = ()> + Send + 'static,
        saves: &'a tokio_util::task::TaskTracker,
    ) -> Self {
        Finishing {
            saving: Some(Box::pin(saving)),
            saves,
        }
    }
}

impl Future for Finishing<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(saving) = self.saving.as_mut() else {
            return Poll::Ready(());
        };
        std::task::ready!(saving.as_mut().poll(cx));
        self.saving = None;
        Poll::Ready(())
    }
}

impl Drop for Finishing<'_> {
    fn drop(&mut self) {
        if let Some(rest) = self.saving.take() {
            in_background(self.saves, rest);
        }
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
