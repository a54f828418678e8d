//! Driver tests without gRPC, on paused time so no test sleeps for real: the seed's guarantees,
//! each named after it, plus cancellation, deadlines and session release.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::calls::{IntakeLimits, intake};
use crate::config::Config;
use crate::safety::breaker::BreakerConfig;
use crate::safety::hooks::{Decision, Hook, PreToolUse};
use crate::safety::recovery::Failure;
use crate::session::SessionLimits;
use crate::tools::{
    Annotations, BoxFuture, FnTool, ToolContext, ToolError, ToolOutput, ToolSource, builtin_tools,
};

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<Event>>,
}

impl Observer for Recorder {
    fn on_event(&self, event: Event) -> BoxFuture<'_, ()> {
        self.events.lock().unwrap().push(event);
        Box::pin(async {})
    }
}

impl Recorder {
    fn kinds(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| match e {
                Event::CallReceived { id, .. } => format!("received:{id}"),
                Event::ToolPre { id, attempt, .. } => format!("pre:{id}:{attempt}"),
                Event::ToolPost {
                    id,
                    attempt,
                    error_class,
                    ..
                } => format!("post:{id}:{attempt}:{}", error_class.name()),
                Event::GateDecision { id, record, .. } => {
                    format!("gate:{id}:{}", verdict(&record.decision))
                }
                Event::RetryScheduled {
                    id, attempt, delay, ..
                } => format!("retry:{id}:{attempt}:{}ms", delay.as_millis()),
                Event::LoopDetected {
                    id, stop, repeats, ..
                } => {
                    format!(
                        "loop:{id}:{}:{repeats}",
                        if *stop { "stop" } else { "warn" }
                    )
                }
                Event::Progress { id, progress, .. } => format!("progress:{id}:{progress}"),
                Event::BreakerChanged { tool, from, to, .. } => {
                    format!("breaker:{tool}:{from:?}->{to:?}")
                }
            })
            .collect()
    }
}

fn verdict(d: &Decision) -> &'static str {
    match d {
        Decision::Allow => "allow",
        Decision::Block(_) => "block",
        Decision::Ask(_) => "ask",
        Decision::Modify(_) => "modify",
    }
}

/// A hook blocking one tool by name.
struct BlockTool(&'static str);

impl Hook for BlockTool {
    fn name(&self) -> &str {
        "block-test"
    }
    fn applies_to(&self, _tool: &str) -> bool {
        true
    }
    fn pre_tool_use<'a>(&'a self, call: &'a PreToolUse<'a>) -> BoxFuture<'a, (Decision, String)> {
        Box::pin(async move {
            if call.tool == self.0 {
                (Decision::Block("not today".into()), "not today".into())
            } else {
                (Decision::Allow, String::new())
            }
        })
    }
}

/// A reflector that always retries (to reach the hard ceiling).
struct AlwaysRetry;

impl Reflector for AlwaysRetry {
    fn reflect<'a>(
        &'a self,
        _failure: &'a Failure<'a>,
    ) -> BoxFuture<'a, crate::safety::recovery::Verdict> {
        Box::pin(async {
            crate::safety::recovery::Verdict::Retry {
                reason: "always".into(),
                correction: None,
            }
        })
    }
}

struct Harness {
    dispatcher: Dispatcher,
    base: std::path::PathBuf,
    /// Executions of the `flaky` and `broken` tools.
    runs: Arc<AtomicU32>,
}

const IDEMPOTENT: Annotations = Annotations {
    read_only: false,
    destructive: false,
    idempotent: true,
    open_world: false,
};

fn harness(
    name: &str,
    config: &str,
    hooks: Vec<Arc<dyn Hook>>,
    reflector: Option<Arc<dyn Reflector>>,
) -> Harness {
    harness_with(name, config, hooks, reflector, Vec::new())
}

/// A harness with extra tools registered next to the built-ins and the test tools.
fn harness_with(
    name: &str,
    config: &str,
    hooks: Vec<Arc<dyn Hook>>,
    reflector: Option<Arc<dyn Reflector>>,
    extra: Vec<Arc<dyn crate::tools::Tool>>,
) -> Harness {
    let config = Config::from_toml(config).unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let mut registry = ToolRegistry::default();
    for tool in builtin_tools(&[]) {
        registry.register(tool, ToolSource::Builtin).unwrap();
    }
    // Writes a file into its scratch directory, then waits forever.
    let write_then_hang = FnTool::new(
        "write_then_hang",
        "test tool",
        |_input, ctx: ToolContext| async move {
            std::fs::write(ctx.scratch.create().await.unwrap().join("f"), "x")
                .map_err(|e| ToolError::failed(e.to_string()))?;
            std::future::pending().await
        },
    );
    // Fails retryably on its first two executions, then succeeds.
    let counter = runs.clone();
    let flaky = FnTool::new("flaky", "test tool", move |_input, _ctx| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            if n <= 2 {
                Err(ToolError::failed(format!("glitch {n}")).retryable())
            } else {
                Ok(ToolOutput::Text("ok".into()))
            }
        }
    })
    .annotations(IDEMPOTENT);
    // Always fails retryably with the same text.
    let counter = runs.clone();
    let broken = FnTool::new("broken", "test tool", move |_input, _ctx| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Err(ToolError::failed("down").retryable()) }
    })
    .annotations(IDEMPOTENT);
    // Fails without marking the error retryable, on a tool that is not idempotent.
    let plain = FnTool::new("plain_fail", "test tool", |_input, _ctx| async {
        Err(ToolError::failed("nope"))
    });
    for tool in [
        Arc::new(write_then_hang) as Arc<dyn crate::tools::Tool>,
        Arc::new(flaky),
        Arc::new(broken),
        Arc::new(plain),
    ] {
        registry.register(tool, ToolSource::Embedded).unwrap();
    }
    let base = std::env::temp_dir().join(format!(
        "toolgate-dispatch-test-{name}-{}",
        std::process::id()
    ));
    let limits = SessionLimits {
        loop_window: config.loop_detection.window,
        ..SessionLimits::default()
    };
    let sessions = Arc::new(Sessions::new(base.clone(), true, limits));
    let health = Arc::new(Health::new(BreakerConfig {
        failure_threshold: config.breaker.failure_threshold,
        cooldown: config.breaker.cooldown,
        probe_lease: config.breaker.probe_lease,
    }));
    for tool in extra {
        registry.register(tool, ToolSource::Embedded).unwrap();
    }
    let registry = Arc::new(crate::tools::Catalog::new(registry));
    let middleware = crate::app::middleware_config(&config).unwrap();
    let mut pipeline = Pipeline::new(
        registry.clone(),
        health,
        Policy::from_config(&config),
        &middleware,
    );
    pipeline.hooks = Hooks::new(hooks);
    if let Some(r) = reflector {
        pipeline.reflector = r;
    }
    Harness {
        dispatcher: Dispatcher::new(registry, sessions, pipeline),
        base,
        runs,
    }
}

fn batch(calls: Value) -> Batch {
    named_batch("", calls)
}

fn named_batch(session: &str, calls: Value) -> Batch {
    let Value::Array(calls) = calls else {
        panic!("array")
    };
    Batch {
        session_id: session.into(),
        calls: intake(&calls, IntakeLimits { max_json_depth: 64 }),
        context: Map::new(),
        bindings: std::collections::BTreeMap::new(),
        options: BatchOptions {
            message_format: MessageFormat::OpenAiChat,
            call_timeout: None,
            deadline: None,
            mode: Mode::Sequential,
            fail_fast: false,
        },
        turn: 0,
        trace: None,
    }
}

async fn run(h: &Harness, batch: Batch) -> (BatchReport, Vec<String>) {
    let recorder = Recorder::default();
    let report = h.dispatcher.run(batch, &recorder, &Cancel::new()).await;
    (report, recorder.kinds())
}

#[tokio::test(start_paused = true)]
async fn event_order_for_a_success() {
    let h = harness("order-success", "", vec![Arc::new(BlockTool("none"))], None);
    let (report, kinds) = run(&h, batch(json!([{"id": "a", "name": "echo"}]))).await;
    assert!(report.all_succeeded());
    assert_eq!(
        kinds,
        ["received:a", "pre:a:1", "gate:a:allow", "post:a:1:NONE"]
    );
}

#[tokio::test(start_paused = true)]
async fn event_order_for_a_block() {
    let h = harness("order-block", "", vec![Arc::new(BlockTool("echo"))], None);
    let (report, kinds) = run(&h, batch(json!([{"id": "a", "name": "echo"}]))).await;
    let r = &report.results[0];
    assert_eq!(
        (r.error_class, r.error.as_str(), r.attempts),
        (ErrorClass::Blocked, "not today", 0)
    );
    assert_eq!(
        kinds,
        ["received:a", "pre:a:1", "gate:a:block", "post:a:1:BLOCKED"]
    );
}

#[tokio::test(start_paused = true)]
async fn event_order_for_a_breaker_refusal_and_breaker_sequences() {
    let h = harness(
        "order-breaker",
        "[breaker]\nfailure_threshold = 2\ncooldown = \"30s\"",
        vec![],
        None,
    );
    let calls = json!([{"id": "a", "name": "plain_fail"}, {"id": "b", "name": "plain_fail"}, {"id": "c", "name": "plain_fail"}]);
    let (report, kinds) = run(&h, batch(calls)).await;
    let classes: Vec<ErrorClass> = report.results.iter().map(|r| r.error_class).collect();
    assert_eq!(
        classes,
        [
            ErrorClass::ToolError,
            ErrorClass::ToolError,
            ErrorClass::CircuitOpen
        ]
    );
    let refusal = &report.results[2];
    assert_eq!(
        refusal.error,
        "tool temporarily unavailable: circuit breaker open"
    );
    assert_eq!((refusal.duration, refusal.attempts), (Duration::ZERO, 0));
    assert_eq!(
        kinds,
        [
            "received:a",
            "received:b",
            "received:c",
            "pre:a:1",
            "post:a:1:TOOL_ERROR",
            "pre:b:1",
            "post:b:1:TOOL_ERROR",
            "breaker:plain_fail:Closed->Open",
            "pre:c:1",
            "post:c:1:CIRCUIT_OPEN",
        ]
    );
    // After the cooldown one probe runs; its failure re-opens the breaker.
    tokio::time::advance(Duration::from_secs(30)).await;
    let (_, kinds) = run(
        &h,
        batch(json!([{"id": "d", "name": "plain_fail"}, {"id": "e", "name": "plain_fail"}])),
    )
    .await;
    assert_eq!(
        kinds,
        [
            "received:d",
            "received:e",
            "pre:d:1",
            "breaker:plain_fail:Open->HalfOpen",
            "post:d:1:TOOL_ERROR",
            "breaker:plain_fail:HalfOpen->Open",
            "pre:e:1",
            "post:e:1:CIRCUIT_OPEN",
        ]
    );
    let health = h.dispatcher.health().report(tokio::time::Instant::now());
    assert_eq!(
        health[0].failures, 3,
        "refusals are not recorded as failures"
    );
}

#[tokio::test(start_paused = true)]
async fn a_successful_probe_closes_the_breaker() {
    let h = harness(
        "probe-close",
        "[breaker]\nfailure_threshold = 1\ncooldown = \"10s\"",
        vec![],
        None,
    );
    run(&h, batch(json!([{"id": "a", "name": "plain_fail"}]))).await;
    tokio::time::advance(Duration::from_secs(10)).await;
    // echo shares nothing with plain_fail: breakers are per tool.
    let (report, _) = run(&h, batch(json!([{"id": "b", "name": "echo"}]))).await;
    assert!(report.all_succeeded());
    let h2 = harness(
        "probe-close-2",
        "[breaker]\nfailure_threshold = 2\ncooldown = \"10s\"",
        vec![],
        None,
    );
    let (_, kinds) = run(&h2, batch(json!([{"id": "a", "name": "flaky"}]))).await;
    // flaky fails twice (opening the breaker after the second), so the retry is refused.
    assert!(
        kinds.contains(&"breaker:flaky:Closed->Open".to_owned()),
        "{kinds:?}"
    );
    tokio::time::advance(Duration::from_secs(10)).await;
    let (report, kinds) = run(&h2, batch(json!([{"id": "b", "name": "flaky"}]))).await;
    assert!(report.all_succeeded(), "{kinds:?}");
    assert!(
        kinds.contains(&"breaker:flaky:HalfOpen->Closed".to_owned()),
        "{kinds:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn event_order_for_a_retry_sequence_and_every_retry_refires_everything() {
    let h = harness("order-retry", "", vec![Arc::new(BlockTool("none"))], None);
    let (report, kinds) = run(&h, batch(json!([{"id": "a", "name": "flaky"}]))).await;
    let r = &report.results[0];
    assert!(r.success);
    assert_eq!((r.attempts, r.content.as_str()), (3, "ok"));
    assert_eq!(
        kinds,
        [
            "received:a",
            "pre:a:1",
            "gate:a:allow",
            "post:a:1:TOOL_ERROR",
            "retry:a:2:100ms",
            "pre:a:2",
            "gate:a:allow",
            "post:a:2:TOOL_ERROR",
            "retry:a:3:200ms",
            "pre:a:3",
            "gate:a:allow",
            "post:a:3:NONE",
        ]
    );
    let health = h.dispatcher.health().report(tokio::time::Instant::now());
    assert_eq!(
        (health[0].calls, health[0].failures),
        (3, 2),
        "health records every attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn the_default_gives_one_attempt() {
    let h = harness("default-one", "", vec![], None);
    let (report, kinds) = run(&h, batch(json!([{"id": "a", "name": "plain_fail"}]))).await;
    assert_eq!(report.results[0].attempts, 1);
    assert_eq!(kinds, ["received:a", "pre:a:1", "post:a:1:TOOL_ERROR"]);
    assert_eq!(report.outcome, Outcome::Completed);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_max_retries_softly() {
    let h = harness(
        "max-retries",
        "[breaker]\nfailure_threshold = 0",
        vec![],
        None,
    );
    let (report, _) = run(
        &h,
        batch(json!([{"id": "a", "name": "broken"}, {"id": "b", "name": "echo"}])),
    )
    .await;
    assert_eq!(
        report.results[0].attempts, 4,
        "one run plus max_retries = 3"
    );
    assert_eq!(report.results[0].error_class, ErrorClass::ToolError);
    assert!(report.results[1].success);
    assert_eq!(report.outcome, Outcome::Completed);
}

#[tokio::test(start_paused = true)]
async fn recovery_exhaustion_ends_the_batch_after_six_executions() {
    let h = harness(
        "exhaust",
        "[breaker]\nfailure_threshold = 0\n[per_tool.broken.retry]\nmax_retries = 50",
        vec![],
        Some(Arc::new(AlwaysRetry)),
    );
    let (report, kinds) = run(
        &h,
        batch(json!([{"id": "a", "name": "broken"}, {"id": "b", "name": "echo"}])),
    )
    .await;
    assert_eq!(h.runs.load(Ordering::SeqCst), 6);
    let r = &report.results[0];
    assert_eq!((r.error_class, r.attempts), (ErrorClass::ToolError, 6));
    assert_eq!(report.results[1].error_class, ErrorClass::Skipped);
    assert_eq!(report.outcome, Outcome::RecoveryExhausted);
    assert!(
        report
            .outcome_reason
            .starts_with("tool 'broken' failed 6 times"),
        "{}",
        report.outcome_reason
    );
    // Five retries were scheduled; the ceiling is checked before a sixth wait.
    assert_eq!(kinds.iter().filter(|k| k.starts_with("retry:")).count(), 5);
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("post:a:6:TOOL_ERROR")
    );
}

#[tokio::test(start_paused = true)]
async fn detection_counts_attempts() {
    // Retries of an identical failure record identical operations: 4 attempts reach warn_after 3.
    let h = harness(
        "detect-attempts",
        "[breaker]\nfailure_threshold = 0",
        vec![],
        None,
    );
    let (report, kinds) = run(&h, batch(json!([{"id": "a", "name": "broken"}]))).await;
    assert!(kinds.contains(&"loop:a:warn:3".to_owned()), "{kinds:?}");
    assert!(
        report.results[0]
            .content
            .contains("[toolgate] warning: broken({}) has returned the same result 3 times")
    );
}

#[tokio::test(start_paused = true)]
async fn a_loop_stop_refuses_the_repeating_call_and_ends_the_batch_across_batches() {
    let h = harness(
        "loop-stop",
        "[loop_detection]\nwarn_after = 2\nstop_after = 3",
        vec![],
        None,
    );
    let echo = |id: &str| json!({"id": id, "name": "echo", "arguments": {"x": 1}});
    let (first, kinds) = run(&h, named_batch("s", json!([echo("e1"), echo("e2")]))).await;
    assert_eq!(first.outcome, Outcome::Completed);
    assert!(kinds.contains(&"loop:e2:warn:2".to_owned()), "{kinds:?}");
    assert!(
        first.results[1]
            .content
            .contains("(it will be refused after 3 repeats)")
    );
    // Third call completes (3 repeats recorded), the fourth would repeat it again: stopped.
    let other = json!({"id": "o", "name": "echo", "arguments": {"x": 2}});
    let (second, kinds) = run(
        &h,
        named_batch(
            "s",
            json!([echo("e3"), other, echo("e4"), {"id": "o2", "name": "echo"}]),
        ),
    )
    .await;
    let classes: Vec<ErrorClass> = second.results.iter().map(|r| r.error_class).collect();
    assert_eq!(
        classes,
        [
            ErrorClass::None,
            ErrorClass::None,
            ErrorClass::LoopStopped,
            ErrorClass::Skipped
        ]
    );
    assert_eq!(second.outcome, Outcome::LoopDetected);
    assert_eq!(
        second.outcome_reason,
        "Loop detected: echo({\"x\":1}) repeated 3 times"
    );
    assert_eq!(
        second.results[2].error,
        "dispatch refused before execution: Loop detected: echo({\"x\":1}) repeated 3 times"
    );
    assert!(kinds.contains(&"loop:e4:stop:3".to_owned()), "{kinds:?}");
    // The stop used the pattern up: the next batch proceeds.
    let (third, _) = run(&h, named_batch("s", json!([echo("e5")]))).await;
    assert!(third.all_succeeded());
}

#[tokio::test(start_paused = true)]
async fn hammering_a_blocked_or_unknown_tool_is_stopped() {
    let h = harness(
        "loop-refused",
        "[loop_detection]\nstop_after = 3",
        vec![Arc::new(BlockTool("echo"))],
        None,
    );
    let calls: Vec<Value> = (0..5)
        .map(|i| json!({"id": format!("b{i}"), "name": "echo"}))
        .collect();
    let (report, _) = run(&h, named_batch("s", Value::Array(calls))).await;
    let classes: Vec<ErrorClass> = report.results.iter().map(|r| r.error_class).collect();
    assert_eq!(classes[..3], [ErrorClass::Blocked; 3]);
    assert_eq!(classes[3], ErrorClass::LoopStopped);
    assert_eq!(report.outcome, Outcome::LoopDetected);
    let calls: Vec<Value> = (0..5)
        .map(|i| json!({"id": format!("u{i}"), "name": "ghost"}))
        .collect();
    let (report, _) = run(&h, named_batch("t", Value::Array(calls))).await;
    assert_eq!(report.results[3].error_class, ErrorClass::LoopStopped);
}

#[tokio::test(start_paused = true)]
async fn memory_keeps_successful_calls_only() {
    let h = harness("memory", "", vec![], None);
    run(&h, named_batch("m", json!([{"id": "a", "name": "echo", "arguments": {"k": "v"}}, {"id": "b", "name": "plain_fail"}]))).await;
    let memory = h.dispatcher.sessions().get("m").unwrap().memory();
    assert_eq!(memory, [r#"tool=echo; input={"k":"v"}; result={"k":"v"}"#]);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_gets_its_post_and_the_batch_goes_on() {
    let h = harness(
        "timeout",
        "[per_tool.sleep.retry]\nenabled = false",
        vec![],
        None,
    );
    let mut b = batch(
        json!([{"id": "s", "name": "sleep", "arguments": {"ms": 5000}}, {"id": "e", "name": "echo"}]),
    );
    b.options.call_timeout = Some(Duration::from_millis(1500));
    let (report, kinds) = run(&h, b).await;
    assert_eq!(report.results[0].error_class, ErrorClass::Timeout);
    assert_eq!(report.results[0].error, "Tool 'sleep' timed out after 1.5s");
    assert_eq!(report.results[0].duration, Duration::from_millis(1500));
    assert!(report.results[1].success);
    assert_eq!(report.outcome, Outcome::Completed);
    assert_eq!(report.results[0].attempts, 1);
    assert_eq!(
        kinds,
        [
            "received:s",
            "received:e",
            "pre:s:1",
            "post:s:1:TIMEOUT",
            "pre:e:1",
            "post:e:1:NONE"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn timeouts_of_a_read_only_tool_are_retried_until_the_breaker_refuses() {
    let h = harness("timeout-retry", "", vec![], None);
    let mut b = batch(json!([{"id": "s", "name": "sleep", "arguments": {"ms": 5000}}]));
    b.options.call_timeout = Some(Duration::from_millis(100));
    let (report, kinds) = run(&h, b).await;
    // Three timeouts open the breaker (threshold 3); the third retry is refused, not retried.
    let r = &report.results[0];
    assert_eq!((r.error_class, r.attempts), (ErrorClass::CircuitOpen, 3));
    assert_eq!(kinds.iter().filter(|k| k.starts_with("retry:")).count(), 3);
    assert!(kinds.contains(&"breaker:sleep:Closed->Open".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn event_order_for_a_cancel() {
    let h = harness("cancel", "", vec![], None);
    let recorder = Recorder::default();
    let cancel = Cancel::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        trigger.cancel("the client went away");
    });
    let calls = json!([{"id": "a", "name": "echo"}, {"id": "s", "name": "sleep", "arguments": {"ms": 60000}}, {"id": "b", "name": "echo"}]);
    let report = h.dispatcher.run(batch(calls), &recorder, &cancel).await;
    let classes: Vec<ErrorClass> = report.results.iter().map(|r| r.error_class).collect();
    assert_eq!(
        classes,
        [ErrorClass::None, ErrorClass::Cancelled, ErrorClass::Skipped]
    );
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert_eq!(report.outcome_reason, "the client went away");
    assert_eq!(
        report.results[2].error,
        "call skipped: the batch was cancelled before it started"
    );
    assert_eq!(
        recorder.kinds(),
        [
            "received:a",
            "received:s",
            "received:b",
            "pre:a:1",
            "post:a:1:NONE",
            "pre:s:1",
            "post:s:1:CANCELLED"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_during_backoff_is_honoured_at_once() {
    let h = harness(
        "cancel-backoff",
        "[retry]\nbase_delay = \"10s\"\nmax_delay = \"10s\"",
        vec![],
        None,
    );
    let cancel = Cancel::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        trigger.cancel("shutdown");
    });
    let started = tokio::time::Instant::now();
    let report = h
        .dispatcher
        .run(
            batch(json!([{"id": "a", "name": "broken"}])),
            &NoObserver,
            &cancel,
        )
        .await;
    assert_eq!(report.results[0].error_class, ErrorClass::Cancelled);
    assert!(
        report.results[0]
            .error
            .contains("while waiting to retry after: down")
    );
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "did not wait out the backoff"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_releases_its_slot() {
    let h = harness(
        "cancel-probe",
        "[breaker]\nfailure_threshold = 1\ncooldown = \"5s\"",
        vec![],
        None,
    );
    let fail_sleep = json!([{"id": "t", "name": "sleep", "arguments": {"ms": -1}}]);
    run(&h, batch(fail_sleep)).await; // INVALID_ARGUMENTS: neutral, the breaker stays closed
    let mut b = batch(json!([{"id": "s", "name": "sleep", "arguments": {"ms": 5000}}]));
    b.options.call_timeout = Some(Duration::from_millis(100));
    let h1 = harness(
        "cancel-probe-1",
        "[breaker]\nfailure_threshold = 1\ncooldown = \"5s\"\n[per_tool.sleep.retry]\nenabled = false",
        vec![],
        None,
    );
    run(&h1, b).await; // TIMEOUT: opens the breaker
    tokio::time::advance(Duration::from_secs(5)).await;
    let cancel = Cancel::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        trigger.cancel("client left");
    });
    let probe = batch(json!([{"id": "p", "name": "sleep", "arguments": {"ms": 60000}}]));
    let report = h1.dispatcher.run(probe, &NoObserver, &cancel).await;
    assert_eq!(report.results[0].error_class, ErrorClass::Cancelled);
    // The slot is free at once: the next call probes instead of waiting out the 30 s lease.
    let (report, kinds) = run(
        &h1,
        batch(json!([{"id": "q", "name": "sleep", "arguments": {"ms": 1}}])),
    )
    .await;
    assert!(report.all_succeeded(), "{kinds:?}");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_batch_still_removes_its_ephemeral_scratch_directory() {
    let h = harness("drop", "", vec![], None);
    let cancel = Cancel::new();
    let run = h.dispatcher.run(
        batch(json!([{"id": "w", "name": "write_then_hang"}])),
        &NoObserver,
        &cancel,
    );
    let outcome = tokio::time::timeout(Duration::from_secs(1), run).await;
    assert!(outcome.is_err(), "the tool hangs");
    let leftovers: Vec<_> = std::fs::read_dir(&h.base)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(
        leftovers.is_empty(),
        "scratch directories left behind: {leftovers:?}"
    );
    let _ = std::fs::remove_dir_all(&h.base);
}

#[tokio::test]
async fn the_model_id_is_on_every_result_in_order() {
    let h = harness("ids", "", vec![], None);
    let (report, _) = run(&h, batch(json!([{"id": "z", "name": "echo"}, {"id": "y", "name": "nope"}, "junk", {"id": "z", "name": "echo"}]))).await;
    let ids: Vec<(usize, &str)> = report
        .results
        .iter()
        .map(|r| (r.index, r.id.as_str()))
        .collect();
    assert_eq!(ids, [(0, "z"), (1, "y"), (2, "call_2"), (3, "z")]);
    assert_eq!(report.errors(), 3);
    assert_eq!(report.messages.len(), 4);
}

mod properties {
    //! Random sequential batches: whatever the tools do and whenever the cancel comes, every call
    //! is answered exactly once, in order, with its own id, and every tool_pre has its tool_post.

    use std::sync::atomic::AtomicU64;

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Kind {
        Succeed,
        Fail,
        RetryThenFail,
        Panic,
        Sleep(u64),
        Unknown,
        Malformed,
        Blocked,
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Succeed),
            Just(Kind::Fail),
            Just(Kind::RetryThenFail),
            Just(Kind::Panic),
            (0u64..3000).prop_map(Kind::Sleep),
            Just(Kind::Unknown),
            Just(Kind::Malformed),
            Just(Kind::Blocked),
        ]
    }

    fn element(i: usize, kind: &Kind) -> Value {
        let id = format!("c{i}");
        match kind {
            Kind::Succeed => json!({"id": id, "name": "echo", "arguments": {"i": i}}),
            Kind::Fail => json!({"id": id, "name": "plain_fail"}),
            Kind::RetryThenFail => json!({"id": id, "name": "broken"}),
            Kind::Panic => json!({"id": id, "name": "explode"}),
            Kind::Sleep(ms) => json!({"id": id, "name": "sleep", "arguments": {"ms": ms}}),
            Kind::Unknown => json!({"id": id, "name": "ghost"}),
            Kind::Malformed => {
                json!({"id": id, "function": {"name": "echo", "arguments": "{oops"}})
            }
            Kind::Blocked => json!({"id": id, "name": "now"}),
        }
    }

    static CASE: AtomicU64 = AtomicU64::new(0);

    fn check_case(
        kinds: Vec<Kind>,
        cancel_after: Option<u64>,
        session: bool,
        parallel: Option<usize>,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let n = CASE.fetch_add(1, Ordering::Relaxed);
            let config = "[loop_detection]\nwarn_after = 2\nstop_after = 3\n[breaker]\nfailure_threshold = 4\ncooldown = \"2s\"";
            let explode = FnTool::new("explode", "panics", |_input, _ctx| async { panic!("boom") });
            let h = harness_with(
                &format!("prop-{n}"),
                config,
                vec![Arc::new(BlockTool("now"))],
                None,
                vec![Arc::new(explode)],
            );

            let elements: Vec<Value> = kinds.iter().enumerate().map(|(i, k)| element(i, k)).collect();
            let mut b = named_batch(if session { "prop" } else { "" }, Value::Array(elements));
            if let Some(max_concurrency) = parallel {
                b.options.mode = Mode::Parallel { max_concurrency };
            }
            let recorder = Recorder::default();
            let cancel = Cancel::new();
            if let Some(ms) = cancel_after {
                let trigger = cancel.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    trigger.cancel("random cancel");
                });
            }
            let report = h.dispatcher.run(b, &recorder, &cancel).await;

            // Exactly one result per call, in order, with its own id.
            assert_eq!(report.results.len(), kinds.len());
            for (i, r) in report.results.iter().enumerate() {
                assert_eq!((r.index, r.id.as_str()), (i, format!("c{i}").as_str()));
            }
            assert_eq!(report.messages.len(), kinds.len());
            // Hard errors end the batch: everything after the first one is SKIPPED, nothing before.
            let skipped: Vec<bool> = report.results.iter().map(|r| r.error_class == ErrorClass::Skipped).collect();
            // In sequential mode SKIPPED is a suffix; in parallel a later independent call may
            // have finished before an earlier one that waited was skipped.
            if let Some(first) = skipped.iter().position(|s| *s) {
                assert_ne!(report.outcome, Outcome::Completed);
                if parallel.is_none() {
                    assert!(skipped[first..].iter().all(|s| *s), "{skipped:?}");
                }
            }
            if report.outcome == Outcome::Completed {
                assert!(!skipped.iter().any(|s| *s));
            }
            // Every call is received before anything runs; every pre has exactly one post after
            // it (paired by id and attempt), and in sequential mode no two attempts overlap.
            let events = recorder.events.lock().unwrap().clone();
            let received = events.iter().take_while(|e| matches!(e, Event::CallReceived { .. })).count();
            assert_eq!(received, kinds.len());
            let mut open: Vec<(String, u32)> = Vec::new();
            for e in &events[received..] {
                match e {
                    Event::CallReceived { .. } => panic!("call_received after execution started"),
                    Event::ToolPre { id, attempt, .. } => {
                        assert!(parallel.is_some() || open.is_empty(), "overlapping attempts: {open:?} and {id}");
                        assert!(!open.contains(&(id.clone(), *attempt)), "a second pre for {id}/{attempt}");
                        open.push((id.clone(), *attempt));
                    }
                    Event::ToolPost { id, attempt, .. } => {
                        let at = open.iter().position(|o| *o == (id.clone(), *attempt));
                        assert!(at.is_some(), "a post without its pre: {id}/{attempt}");
                        open.retain(|o| *o != (id.clone(), *attempt));
                    }
                    _ => {}
                }
            }
            assert!(open.is_empty(), "pres without their posts: {open:?}");
            h.dispatcher.sessions().remove_all();
        });
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn every_call_is_answered_once_in_order_and_every_pre_has_its_post(
            kinds in proptest::collection::vec(kind(), 0..12),
            cancel_after in proptest::option::of(0u64..4000),
            session in any::<bool>(),
        ) {
            check_case(kinds, cancel_after, session, None);
        }

        #[test]
        fn in_parallel_too_every_call_is_answered_once_in_order_and_every_pre_has_its_post(
            kinds in proptest::collection::vec(kind(), 0..12),
            cancel_after in proptest::option::of(0u64..4000),
            session in any::<bool>(),
            max in 1usize..8,
        ) {
            check_case(kinds, cancel_after, session, Some(max));
        }
    }
}

mod parallel {
    //! Parallel mode: the planner's promises hold at run time.

    use proptest::prelude::*;

    use super::*;
    use crate::tools::Tool;

    /// Sleeps `ms`; concurrency-safe and keyed as its input says.
    struct Keyed;

    impl Tool for Keyed {
        fn name(&self) -> &str {
            "keyed"
        }
        fn description(&self) -> &str {
            "test tool"
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn is_concurrency_safe(&self, input: &Value) -> bool {
            input["safe"].as_bool().unwrap_or(false)
        }
        fn resource_key(&self, input: &Value) -> Option<String> {
            input["key"].as_str().map(str::to_owned)
        }
        fn call<'a>(
            &'a self,
            input: Value,
            ctx: &'a ToolContext,
        ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
            Box::pin(async move {
                let ms = input["ms"].as_u64().unwrap_or(0);
                tokio::select! {
                    () = ctx.cancel.cancelled() => Err(ToolError::failed("cancelled")),
                    () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(ToolOutput::Json(input)),
                }
            })
        }
    }

    fn parallel_harness(name: &str, config: &str) -> Harness {
        harness_with(name, config, vec![], None, vec![Arc::new(Keyed)])
    }

    fn parallel(calls: Value, max: usize) -> Batch {
        let mut b = batch(calls);
        b.options.mode = Mode::Parallel {
            max_concurrency: max,
        };
        b
    }

    /// (first pre, last post) event positions per call index.
    fn spans(events: &[Event], n: usize) -> Vec<(usize, usize)> {
        let mut spans = vec![(usize::MAX, 0); n];
        for (at, e) in events.iter().enumerate() {
            match e {
                Event::ToolPre { index, .. } => spans[*index].0 = spans[*index].0.min(at),
                Event::ToolPost { index, .. } => spans[*index].1 = spans[*index].1.max(at),
                _ => {}
            }
        }
        spans
    }

    #[tokio::test(start_paused = true)]
    async fn independent_calls_overlap_and_results_keep_the_models_order() {
        let h = parallel_harness("par-overlap", "");
        let calls = json!([
            {"id": "a", "name": "keyed", "arguments": {"safe": true, "ms": 300, "n": 0}},
            {"id": "b", "name": "keyed", "arguments": {"safe": true, "ms": 100, "n": 1}},
            {"id": "c", "name": "keyed", "arguments": {"safe": true, "ms": 200, "n": 2}},
        ]);
        let started = tokio::time::Instant::now();
        let (report, kinds) = run(&h, parallel(calls, 8)).await;
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(300),
            "paused clock: the longest call"
        );
        let ids: Vec<&str> = report.results.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(
            kinds[3..],
            [
                "pre:a:1",
                "pre:b:1",
                "pre:c:1",
                "post:b:1:NONE",
                "post:c:1:NONE",
                "post:a:1:NONE"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn max_concurrency_one_behaves_like_sequential() {
        let h = parallel_harness("par-one", "");
        let calls = json!([
            {"id": "a", "name": "keyed", "arguments": {"safe": true, "ms": 300, "n": 0}},
            {"id": "b", "name": "keyed", "arguments": {"safe": true, "ms": 100, "n": 1}},
        ]);
        let (_, kinds) = run(&h, parallel(calls, 1)).await;
        assert_eq!(
            kinds[2..],
            ["pre:a:1", "post:a:1:NONE", "pre:b:1", "post:b:1:NONE"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hard_error_cancels_running_siblings_and_skips_the_rest() {
        let h = parallel_harness("par-hard", "[loop_detection]\nstop_after = 1");
        // Prime the loop window: one echo{x:1} recorded, so the next one is stopped.
        run(
            &h,
            named_batch(
                "p",
                json!([{"id": "prime", "name": "echo", "arguments": {"x": 1}}]),
            ),
        )
        .await;
        let mut b = named_batch(
            "p",
            json!([
                {"id": "slow", "name": "keyed", "arguments": {"safe": true, "ms": 60000, "n": 0}},
                {"id": "loop", "name": "echo", "arguments": {"x": 1}},
                {"id": "later", "name": "keyed", "arguments": {"safe": false, "ms": 1, "n": 2}},
            ]),
        );
        b.options.mode = Mode::Parallel { max_concurrency: 8 };
        let started = tokio::time::Instant::now();
        let (report, kinds) = run(&h, b).await;
        let classes: Vec<ErrorClass> = report.results.iter().map(|r| r.error_class).collect();
        assert_eq!(
            classes,
            [
                ErrorClass::Cancelled,
                ErrorClass::LoopStopped,
                ErrorClass::Skipped
            ]
        );
        assert_eq!(report.outcome, Outcome::LoopDetected);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "the slow sibling was cancelled, not awaited"
        );
        assert!(
            kinds.contains(&"post:slow:1:CANCELLED".to_owned()),
            "{kinds:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_calls_share_one_half_open_probe() {
        let h = parallel_harness(
            "par-probe",
            "[breaker]\nfailure_threshold = 1\ncooldown = \"10s\"",
        );
        let fail =
            json!([{"id": "f", "name": "keyed", "arguments": {"safe": true, "ms": 5000, "n": 0}}]);
        let mut b = batch(fail);
        b.options.call_timeout = Some(Duration::from_millis(10));
        run(&h, b).await; // one TIMEOUT opens the breaker (keyed is not retried)
        tokio::time::advance(Duration::from_secs(10)).await;
        let calls: Vec<Value> = (1..=4)
            .map(|n| json!({"id": format!("c{n}"), "name": "keyed", "arguments": {"safe": true, "ms": 10, "n": n}}))
            .collect();
        let (report, _) = run(&h, parallel(Value::Array(calls), 8)).await;
        let classes: Vec<ErrorClass> = report.results.iter().map(|r| r.error_class).collect();
        assert_eq!(
            classes.iter().filter(|c| **c == ErrorClass::None).count(),
            1,
            "{classes:?}"
        );
        assert_eq!(
            classes
                .iter()
                .filter(|c| **c == ErrorClass::CircuitOpen)
                .count(),
            3,
            "{classes:?}"
        );
    }

    #[derive(Debug, Clone)]
    struct Spec {
        safe: bool,
        key: Option<u8>,
        ms: u64,
        same_as_previous: bool,
    }

    fn spec() -> impl Strategy<Value = Spec> {
        (
            any::<bool>(),
            proptest::option::of(0u8..3),
            0u64..500,
            proptest::bool::weighted(0.1),
        )
            .prop_map(|(safe, key, ms, same_as_previous)| Spec {
                safe,
                key,
                ms,
                same_as_previous,
            })
    }

    fn input(spec: &Spec, n: usize) -> Value {
        let mut v = json!({"safe": spec.safe, "ms": spec.ms, "n": n});
        if let Some(k) = spec.key {
            v["key"] = json!(format!("k{k}"));
        }
        v
    }

    fn check_parallel(specs: Vec<Spec>, max: usize) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            static CASE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = CASE.fetch_add(1, Ordering::Relaxed);
            let h = parallel_harness(
                &format!("par-prop-{n}"),
                "[loop_detection]\nenabled = false",
            );
            // Inputs: an occasional exact repeat of the previous call (the same operation).
            let mut inputs: Vec<Value> = Vec::new();
            for (i, s) in specs.iter().enumerate() {
                let v = if s.same_as_previous && i > 0 {
                    inputs[i - 1].clone()
                } else {
                    input(s, i)
                };
                inputs.push(v);
            }
            let calls: Vec<Value> = inputs
                .iter()
                .enumerate()
                .map(|(i, v)| json!({"id": format!("c{i}"), "name": "keyed", "arguments": v}))
                .collect();
            let recorder = Recorder::default();
            let report = h
                .dispatcher
                .run(
                    parallel(Value::Array(calls), max),
                    &recorder,
                    &Cancel::new(),
                )
                .await;
            assert_eq!(report.results.len(), specs.len());
            for (i, r) in report.results.iter().enumerate() {
                assert_eq!((r.index, r.id.clone()), (i, format!("c{i}")));
                assert!(r.success, "{r:?}");
            }
            let events = recorder.events.lock().unwrap().clone();
            let spans = spans(&events, specs.len());
            let conflict = |i: usize, j: usize| {
                let (a, b) = (&inputs[i], &inputs[j]);
                !a["safe"].as_bool().unwrap()
                    || !b["safe"].as_bool().unwrap()
                    || (a.get("key").is_some() && a.get("key") == b.get("key"))
                    || a == b
            };
            for j in 0..specs.len() {
                for i in 0..j {
                    if conflict(i, j) {
                        assert!(
                            spans[i].1 < spans[j].0,
                            "calls {i} and {j} conflict but overlapped or reordered"
                        );
                    }
                }
            }
            // Never more than `max` attempts open at once.
            let mut open = 0usize;
            for e in &events {
                match e {
                    Event::ToolPre { .. } => {
                        open += 1;
                        assert!(open <= max, "{open} calls ran at once; the limit is {max}");
                    }
                    Event::ToolPost { .. } => open -= 1,
                    _ => {}
                }
            }
            h.dispatcher.sessions().remove_all();
        });
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn conflicting_calls_never_overlap_or_reorder(
            specs in proptest::collection::vec(spec(), 0..14),
            max in 1usize..6,
        ) {
            check_parallel(specs, max);
        }
    }
}
