//! Driver tests without gRPC: event pairing, cancellation, deadlines and session release, on
//! paused time so no test sleeps for real.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::calls::{IntakeLimits, intake};
use crate::tools::{BoxFuture, FnTool, ToolContext, ToolError, ToolSource, builtin_tools};

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
                Event::ToolPre { id, .. } => format!("pre:{id}"),
                Event::ToolPost {
                    id, error_class, ..
                } => format!("post:{id}:{error_class:?}"),
            })
            .collect()
    }
}

fn dispatcher(name: &str) -> (Dispatcher, std::path::PathBuf) {
    let mut registry = ToolRegistry::default();
    for tool in builtin_tools(&[]) {
        registry.register(tool, ToolSource::Builtin).unwrap();
    }
    // Writes a file into its scratch directory, then waits forever.
    let write_then_hang = FnTool::new(
        "write_then_hang",
        "test tool",
        |_input, ctx: ToolContext| async move {
            std::fs::write(ctx.scratch_dir.join("f"), "x")
                .map_err(|e| ToolError::failed(e.to_string()))?;
            std::future::pending().await
        },
    );
    registry
        .register(Arc::new(write_then_hang), ToolSource::Embedded)
        .unwrap();
    let base = std::env::temp_dir().join(format!(
        "toolgate-dispatch-test-{name}-{}",
        std::process::id()
    ));
    let sessions = Arc::new(Sessions::new(base.clone(), true));
    (Dispatcher::new(Arc::new(registry), sessions), base)
}

fn batch(calls: Value, timeout: Duration) -> Batch {
    let Value::Array(calls) = calls else {
        panic!("array")
    };
    Batch {
        session_id: String::new(),
        calls: intake(&calls, IntakeLimits { max_json_depth: 64 }),
        context: Map::new(),
        options: BatchOptions {
            message_format: MessageFormat::OpenAiChat,
            call_timeout: timeout,
        },
        turn: 0,
    }
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_gets_its_post_and_the_batch_goes_on() {
    let (dispatcher, _) = dispatcher("timeout");
    let recorder = Recorder::default();
    let report = dispatcher
        .run(
            batch(json!([{"id": "s", "name": "sleep", "arguments": {"ms": 5000}}, {"id": "e", "name": "echo"}]), Duration::from_millis(1500)),
            &recorder,
            &Cancel::new(),
        )
        .await;
    assert_eq!(report.results[0].error_class, ErrorClass::Timeout);
    assert_eq!(report.results[0].error, "Tool 'sleep' timed out after 1.5s");
    assert_eq!(report.results[0].duration, Duration::from_millis(1500));
    assert!(report.results[1].success);
    assert_eq!(report.outcome, Outcome::Completed);
    assert_eq!(
        recorder.kinds(),
        [
            "received:s",
            "received:e",
            "pre:s",
            "post:s:Timeout",
            "pre:e",
            "post:e:None"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_answers_the_running_call_and_skips_the_rest() {
    let (dispatcher, _) = dispatcher("cancel");
    let recorder = Recorder::default();
    let cancel = Cancel::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        trigger.cancel("the client went away");
    });
    let report = dispatcher
        .run(
            batch(json!([{"id": "a", "name": "echo"}, {"id": "s", "name": "sleep", "arguments": {"ms": 60000}}, {"id": "b", "name": "echo"}]), Duration::from_secs(60)),
            &recorder,
            &cancel,
        )
        .await;
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
            "pre:a",
            "post:a:None",
            "pre:s",
            "post:s:Cancelled"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_batch_still_removes_its_ephemeral_scratch_directory() {
    let (dispatcher, base) = dispatcher("drop");
    let cancel = Cancel::new();
    let run = dispatcher.run(
        batch(
            json!([{"id": "w", "name": "write_then_hang"}]),
            Duration::from_secs(60),
        ),
        &NoObserver,
        &cancel,
    );
    // Poll until the tool has written its file, then drop the whole batch future.
    let outcome = tokio::time::timeout(Duration::from_secs(1), run).await;
    assert!(outcome.is_err(), "the tool hangs");
    let leftovers: Vec<_> = std::fs::read_dir(&base)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(
        leftovers.is_empty(),
        "scratch directories left behind: {leftovers:?}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[tokio::test]
async fn the_model_id_is_on_every_result_in_order() {
    let (dispatcher, _) = dispatcher("ids");
    let report = dispatcher
        .run(
            batch(json!([{"id": "z", "name": "echo"}, {"id": "y", "name": "nope"}, "junk", {"id": "z", "name": "echo"}]), Duration::from_secs(5)),
            &NoObserver,
            &Cancel::new(),
        )
        .await;
    let ids: Vec<(usize, &str)> = report
        .results
        .iter()
        .map(|r| (r.index, r.id.as_str()))
        .collect();
    assert_eq!(ids, [(0, "z"), (1, "y"), (2, "call_2"), (3, "z")]);
    assert_eq!(report.errors(), 3);
    assert_eq!(report.messages.len(), 4);
}
