//! Retries and recovery: every retry re-runs the whole attempt, and the limits that end them.

use super::*;

#[tokio::test(start_paused = true)]
async fn event_order_for_a_retry_sequence_and_every_retry_refires_everything() {
    let h = harness(
        "order-retry",
        defaults,
        vec![Arc::new(BlockTool("none"))],
        None,
    );
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
    let h = harness("default-one", defaults, vec![], None);
    let (report, kinds) = run(&h, batch(json!([{"id": "a", "name": "plain_fail"}]))).await;
    assert_eq!(report.results[0].attempts, 1);
    assert_eq!(kinds, ["received:a", "pre:a:1", "post:a:1:TOOL_ERROR"]);
    assert_eq!(report.outcome, Outcome::Completed);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_max_retries_softly() {
    let h = harness(
        "max-retries",
        |s: &mut PipelineSettings| s.breaker.failure_threshold = 0,
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
        |s: &mut PipelineSettings| {
            s.breaker.failure_threshold = 0;
            retry_of(s, "broken").max_retries = Some(50);
        },
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
