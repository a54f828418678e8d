//! The breaker in the driver: refusals, their event order, and probes after the cooldown.

use super::*;

#[tokio::test(start_paused = true)]
async fn event_order_for_a_breaker_refusal_and_breaker_sequences() {
    let h = harness(
        "order-breaker",
        |s: &mut PipelineSettings| {
            s.breaker.failure_threshold = 2;
            s.breaker.cooldown = Duration::from_secs(30);
        },
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
        |s: &mut PipelineSettings| {
            s.breaker.failure_threshold = 1;
            s.breaker.cooldown = Duration::from_secs(10);
        },
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
        |s: &mut PipelineSettings| {
            s.breaker.failure_threshold = 2;
            s.breaker.cooldown = Duration::from_secs(10);
        },
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

/// `hang_fail` fails while `failing` is set; otherwise it waits until cancelled.
/// `deadline_fail` fails on its first run; later runs fail as a remote's own timer would, at
/// the deadline the stack gave the call.
fn cut_probe_harness(name: &str) -> (Harness, Arc<std::sync::atomic::AtomicBool>) {
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = failing.clone();
    let hang_fail = FnTool::new("hang_fail", "test tool", move |_input, ctx: ToolContext| {
        let fail = flag.load(Ordering::SeqCst);
        async move {
            if fail {
                return Err(ToolError::failed("down"));
            }
            ctx.cancel.cancelled().await;
            Err(ToolError::failed("cancelled"))
        }
    });
    let runs = Arc::new(AtomicU32::new(0));
    let deadline_fail = FnTool::new(
        "deadline_fail",
        "test tool",
        move |_input, ctx: ToolContext| {
            let first = runs.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    return Err(ToolError::failed("down"));
                }
                if let Some(deadline) = ctx.deadline {
                    tokio::time::sleep_until(deadline).await;
                }
                Err(ToolError::transport("operation timed out"))
            }
        },
    );
    let h = harness_with(
        name,
        |s: &mut PipelineSettings| {
            s.breaker.failure_threshold = 1;
            s.breaker.cooldown = Duration::from_secs(1);
        },
        vec![],
        None,
        vec![Arc::new(hang_fail), Arc::new(deadline_fail)],
    );
    (h, failing)
}

#[tokio::test(start_paused = true)]
async fn a_probe_dropped_with_its_batch_frees_the_slot_at_once() {
    let (h, failing) = cut_probe_harness("probe-dropped");
    run(&h, batch(json!([{"id": "a", "name": "hang_fail"}]))).await;
    tokio::time::advance(Duration::from_secs(1)).await;
    failing.store(false, Ordering::SeqCst);
    // The probe runs, and its batch is dropped mid-call (the client reset its stream).
    let recorder = Recorder::default();
    let cancel = Cancel::new();
    {
        let probe = h.dispatcher.run(
            batch(json!([{"id": "p", "name": "hang_fail"}])),
            &recorder,
            &cancel,
        );
        tokio::select! {
            _ = probe => panic!("the probe never returns on its own"),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    assert!(
        recorder
            .kinds()
            .contains(&"breaker:hang_fail:Open->HalfOpen".to_owned())
    );
    // No lease to wait out, and no new cooldown: the next call is the probe.
    failing.store(true, Ordering::SeqCst);
    let (report, kinds) = run(&h, batch(json!([{"id": "n", "name": "hang_fail"}]))).await;
    assert_eq!(
        report.results[0].error_class,
        ErrorClass::ToolError,
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&"breaker:hang_fail:Open->HalfOpen".to_owned()),
        "{kinds:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_probe_cut_by_the_request_deadline_is_neutral_whichever_timer_fires_first() {
    let (h, _) = cut_probe_harness("probe-deadline");
    run(&h, batch(json!([{"id": "a", "name": "deadline_fail"}]))).await;
    tokio::time::advance(Duration::from_secs(1)).await;
    // The tool's own timer, set to the deadline the stack gave it, fails the call just as the
    // stack's timeout would have.
    let mut cut = batch(json!([{"id": "p", "name": "deadline_fail"}]));
    cut.options.deadline = Some(tokio::time::Instant::now() + Duration::from_millis(700));
    let (report, kinds) = run(&h, cut).await;
    let result = &report.results[0];
    assert_eq!(result.error_class, ErrorClass::Cancelled, "{kinds:?}");
    assert_eq!(
        result.error,
        "tool 'deadline_fail' was cancelled: the request deadline passed"
    );
    assert_eq!(report.outcome, Outcome::Cancelled);
    // The slot is free at once and no cooldown started: the next call probes.
    let (_, kinds) = run(&h, batch(json!([{"id": "n", "name": "deadline_fail"}]))).await;
    assert!(
        kinds.contains(&"breaker:deadline_fail:Open->HalfOpen".to_owned()),
        "{kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| k.contains("CIRCUIT_OPEN")),
        "{kinds:?}"
    );
}
