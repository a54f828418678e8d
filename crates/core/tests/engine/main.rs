//! The engine's driver (`toolgate_core::dispatch`) alone, with a pipeline built from the engine's
//! own settings, on paused time so no test sleeps for real: the harness they share (a dispatcher
//! with test tools, a recorder of events, test hooks), and one file per topic.
// Test harness helpers assert by panicking, like the tests they serve.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};

use toolgate_core::calls::{IntakeLimits, intake};
use toolgate_core::dispatch::*;
use toolgate_core::safety::hooks::{Decision, Hook, PreToolUse};
use toolgate_core::safety::policy::PerToolRetry;
use toolgate_core::safety::recovery::{Failure, Reflector};
use toolgate_core::session::SessionLimits;
use toolgate_core::session::Sessions;
use toolgate_core::tools::ToolRegistry;
use toolgate_core::tools::{
    Annotations, BoxFuture, FnTool, ToolContext, ToolError, ToolOutput, ToolSource, builtin_tools,
};

mod breaker;
mod cancellation;
mod loops;
mod order;
mod parallel;
mod properties;
mod retries;
mod sessions;

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<Event>>,
    /// How many events had arrived when the batch said it was finishing.
    finishing_after: Mutex<Option<usize>>,
}

impl Observer for Recorder {
    fn on_event(&self, event: Event) -> BoxFuture<'_, ()> {
        self.events.lock().unwrap().push(event);
        Box::pin(async {})
    }

    fn finishing(&self) {
        *self.finishing_after.lock().unwrap() = Some(self.events.lock().unwrap().len());
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
                Event::ApprovalRequested(approval) => format!("asked:{}", approval.call_id),
                Event::ApprovalResolved(ended) => format!("answered:{}", ended.call_id),
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
    ) -> BoxFuture<'a, toolgate_core::safety::recovery::Verdict> {
        Box::pin(async {
            toolgate_core::safety::recovery::Verdict::Retry {
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

/// The engine's default settings, unchanged.
fn defaults(_: &mut PipelineSettings) {}

/// `tool`'s retry overrides (`[per_tool.<tool>.retry]`), to change.
fn retry_of<'s>(settings: &'s mut PipelineSettings, tool: &str) -> &'s mut PerToolRetry {
    &mut settings
        .policy
        .per_tool
        .entry(tool.into())
        .or_default()
        .retry
}

fn harness(
    name: &str,
    config: impl FnOnce(&mut PipelineSettings),
    hooks: Vec<Arc<dyn Hook>>,
    reflector: Option<Arc<dyn Reflector>>,
) -> Harness {
    harness_with(name, config, hooks, reflector, Vec::new())
}

/// A harness with extra tools registered next to the built-ins and the test tools; `config`
/// changes the engine's default settings.
fn harness_with(
    name: &str,
    config: impl FnOnce(&mut PipelineSettings),
    hooks: Vec<Arc<dyn Hook>>,
    reflector: Option<Arc<dyn Reflector>>,
    extra: Vec<Arc<dyn toolgate_core::tools::Tool>>,
) -> Harness {
    let mut settings = PipelineSettings::default();
    config(&mut settings);
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
        Arc::new(write_then_hang) as Arc<dyn toolgate_core::tools::Tool>,
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
    let sessions = Arc::new(Sessions::new(base.clone(), true, SessionLimits::default()));
    for tool in extra {
        registry.register(tool, ToolSource::Embedded).unwrap();
    }
    let registry = Arc::new(toolgate_core::tools::Catalog::new(registry));
    let mut pipeline = Pipeline::builder(settings).hooks(hooks);
    if let Some(r) = reflector {
        pipeline = pipeline.reflector(r);
    }
    let pipeline = pipeline.build();
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
            interactive_approvals: false,
        },
        turn: 0,
        caller: std::sync::Arc::new(toolgate_core::identity::Caller::local()),
        trace: toolgate_core::trace::Span::none(),
    }
}

async fn run(h: &Harness, batch: Batch) -> (BatchReport, Vec<String>) {
    let recorder = Recorder::default();
    let report = h
        .dispatcher
        .run(batch, &recorder, &Cancel::new())
        .await
        .unwrap();
    (report, recorder.kinds())
}
