//! Timeouts and cancels: every call still answered, with its post, and a cancelled probe's
//! breaker slot released at once.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_gets_its_post_and_the_batch_goes_on() {
    let h = harness(
        "timeout",
        |s: &mut PipelineSettings| retry_of(s, "sleep").enabled = Some(false),
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
    let h = harness(
        "timeout-retry",
        |s: &mut PipelineSettings| {
            s.middleware
                .tool_timeouts
                .insert("sleep".into(), Duration::from_millis(100));
        },
        vec![],
        None,
    );
    let b = batch(json!([{"id": "s", "name": "sleep", "arguments": {"ms": 5000}}]));
    let (report, kinds) = run(&h, b).await;
    // Three timeouts open the breaker (threshold 3); the third retry is refused, not retried.
    let r = &report.results[0];
    assert_eq!((r.error_class, r.attempts), (ErrorClass::CircuitOpen, 3));
    assert_eq!(kinds.iter().filter(|k| k.starts_with("retry:")).count(), 3);
    assert!(kinds.contains(&"breaker:sleep:Closed->Open".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn timeouts_under_a_deadline_the_client_cut_short_leave_the_breaker_closed() {
    // The tool's own deadline is 60 s; a client asking for 100 ms times out, again and again,
    // without opening the breaker every other caller of the tool depends on.
    let h = harness("client-deadline", defaults, vec![], None);
    for n in 0..3 {
        let mut b = batch(json!([{"id": "s", "name": "sleep", "arguments": {"ms": 5000 + n}}]));
        b.options.call_timeout = Some(Duration::from_millis(100));
        let (report, kinds) = run(&h, b).await;
        let r = &report.results[0];
        assert_eq!(
            (r.error_class, r.attempts),
            (ErrorClass::Timeout, 4),
            "{kinds:?}"
        );
        assert!(
            !kinds.iter().any(|k| k.starts_with("breaker:")),
            "{kinds:?}"
        );
    }
    let (report, _) = run(
        &h,
        batch(json!([{"id": "s", "name": "sleep", "arguments": {"ms": 1}}])),
    )
    .await;
    assert!(report.results[0].success, "{:?}", report.results[0]);
}

#[tokio::test(start_paused = true)]
async fn event_order_for_a_cancel() {
    let h = harness("cancel", defaults, vec![], None);
    let recorder = Recorder::default();
    let cancel = Cancel::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        trigger.cancel("the client went away");
    });
    let calls = json!([{"id": "a", "name": "echo"}, {"id": "s", "name": "sleep", "arguments": {"ms": 60000}}, {"id": "b", "name": "echo"}]);
    let report = h
        .dispatcher
        .run(batch(calls), &recorder, &cancel)
        .await
        .unwrap();
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
        |s: &mut PipelineSettings| {
            s.policy.backoff.base = Duration::from_secs(10);
            s.policy.backoff.max = Duration::from_secs(10);
        },
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
        .await
        .unwrap();
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
        |s: &mut PipelineSettings| {
            s.breaker.failure_threshold = 1;
            s.breaker.cooldown = Duration::from_secs(5);
        },
        vec![],
        None,
    );
    let fail_sleep = json!([{"id": "t", "name": "sleep", "arguments": {"ms": -1}}]);
    run(&h, batch(fail_sleep)).await; // INVALID_ARGUMENTS: neutral, the breaker stays closed
    let mut b = batch(json!([{"id": "s", "name": "sleep", "arguments": {"ms": 5000}}]));
    b.options.call_timeout = Some(Duration::from_millis(100));
    let h1 = harness(
        "cancel-probe-1",
        |s: &mut PipelineSettings| {
            s.breaker.failure_threshold = 1;
            s.breaker.cooldown = Duration::from_secs(5);
            retry_of(s, "sleep").enabled = Some(false);
        },
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
    let report = h1
        .dispatcher
        .run(probe, &NoObserver, &cancel)
        .await
        .unwrap();
    assert_eq!(report.results[0].error_class, ErrorClass::Cancelled);
    // The slot is free at once: the next call probes instead of waiting out the 30 s lease.
    let (report, kinds) = run(
        &h1,
        batch(json!([{"id": "q", "name": "sleep", "arguments": {"ms": 1}}])),
    )
    .await;
    assert!(report.all_succeeded(), "{kinds:?}");
}
