//! Loop detection in the driver: warnings, stops across batches, hammering refused calls.

use super::*;

#[tokio::test(start_paused = true)]
async fn detection_counts_attempts() {
    // Retries of an identical failure record identical operations: 4 attempts reach warn_after 3.
    let h = harness(
        "detect-attempts",
        |s: &mut PipelineSettings| s.breaker.failure_threshold = 0,
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
        |s: &mut PipelineSettings| {
            s.policy.loop_thresholds.warn_after = 2;
            s.policy.loop_thresholds.stop_after = 3;
        },
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
        |s: &mut PipelineSettings| s.policy.loop_thresholds.stop_after = 3,
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
