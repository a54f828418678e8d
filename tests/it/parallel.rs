//! PARALLEL batches through the API: independent calls overlap, conflicting calls serialise in
//! the model's order, results stay in order, and a hard error cancels running siblings.

use std::sync::atomic::Ordering;

use serde_json::json;
use toolgate::config::Config;
use toolgate::pb;
use toolgate::pb::ErrorClass;
use toolgate::pb::dispatch_event::Event;

use crate::support::*;

/// "pre:id" / "post:id" in stream order.
fn timeline(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ToolPre(p) => Some(format!("pre:{}", p.id)),
            Event::ToolPost(p) => Some(format!("post:{}", p.id)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn independent_calls_overlap_and_results_keep_the_models_order() {
    let ts = start().await;
    let calls = json!([
        {"id": "a", "name": "sleep", "arguments": {"ms": 400}},
        {"id": "b", "name": "sleep", "arguments": {"ms": 300}},
        {"id": "c", "name": "sleep", "arguments": {"ms": 200}},
    ]);
    let (events, result) = dispatch_stream(&ts, parallel(calls, 8)).await;
    let t = timeline(&events);
    // All three started before any finished.
    assert_eq!(t[..3], ["pre:a", "pre:b", "pre:c"], "{t:?}");
    let ids: Vec<&str> = result.results.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert!(result.all_succeeded);
    let messages = messages_json(&result);
    assert_eq!(messages[0]["tool_call_id"], json!("a"));
}

#[tokio::test]
async fn conflicting_calls_run_one_after_another_in_the_models_order() {
    let ts = start().await;
    let calls = json!([
        {"id": "w1", "name": "scratch_write", "arguments": {"path": "f.txt", "content": "one"}},
        {"id": "r1", "name": "scratch_read", "arguments": {"path": "f.txt"}},
        {"id": "w2", "name": "scratch_write", "arguments": {"path": "f.txt", "content": "two"}},
        {"id": "r2", "name": "scratch_read", "arguments": {"path": "f.txt"}},
    ]);
    let mut req = parallel(calls, 8);
    req.session_id = "par".into();
    let (events, result) = dispatch_stream(&ts, req).await;
    assert_eq!(
        timeline(&events),
        [
            "pre:w1", "post:w1", "pre:r1", "post:r1", "pre:w2", "post:w2", "pre:r2", "post:r2"
        ]
    );
    assert_eq!(result.results[1].content, "one");
    assert_eq!(result.results[3].content, "two");
}

#[tokio::test]
async fn a_hard_error_cancels_running_siblings() {
    let config = Config::from_toml("[loop_detection]\nstop_after = 1").unwrap();
    let ts = start_with(config).await;
    let mut prime = request(json!([{"id": "p", "name": "echo", "arguments": {"x": 1}}]));
    prime.session_id = "hard".into();
    assert!(dispatch(&ts, prime).await.all_succeeded);
    let mut req = parallel(
        json!([
            {"id": "w", "name": "wait_cancel"},
            {"id": "e", "name": "echo", "arguments": {"x": 1}},
            {"id": "s", "name": "sleep", "arguments": {"ms": 1}},
        ]),
        8,
    );
    req.session_id = "hard".into();
    let (events, result) = dispatch_stream(&ts, req).await;
    assert_eq!(
        result.outcome,
        pb::batch_result::Outcome::LoopDetected as i32
    );
    assert_eq!(class(&result.results[0]), ErrorClass::Cancelled);
    assert_eq!(class(&result.results[1]), ErrorClass::LoopStopped);
    assert!(
        ts.saw_cancel.load(Ordering::SeqCst),
        "the sibling's token fired"
    );
    assert!(events.iter().any(|e| matches!(e, Event::ToolPost(p) if p.id == "w" && p.error_class == ErrorClass::Cancelled as i32)));
    assert_eq!(result.results.len(), 3, "every call answered");
}

#[tokio::test]
async fn max_concurrency_bounds_how_many_run_at_once() {
    let ts = start().await;
    let calls: Vec<serde_json::Value> = (0..6)
        .map(|i| json!({"id": format!("s{i}"), "name": "sleep", "arguments": {"ms": 100 + i}}))
        .collect();
    let (events, result) = dispatch_stream(&ts, parallel(json!(calls), 2)).await;
    assert!(result.all_succeeded);
    let mut open = 0;
    let mut peak = 0;
    for step in timeline(&events) {
        open += if step.starts_with("pre:") { 1 } else { -1 };
        peak = peak.max(open);
    }
    assert_eq!(peak, 2);
}
