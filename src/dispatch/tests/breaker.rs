//! The breaker in the driver: refusals, their event order, and probes after the cooldown.

use super::*;

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
