//! The safety pipeline through the API: loop stops across batches, the breaker opening and
//! recovering, retries, health, memory, and session expiry and ending.

use std::sync::atomic::Ordering;

use serde_json::json;
use toolgate::config::Config;
use toolgate::pb;
use toolgate::pb::ErrorClass;
use toolgate::pb::dispatch_event::Event;

use crate::support::*;

fn in_session(session: &str, calls: serde_json::Value) -> pb::DispatchBatchRequest {
    let mut req = request(calls);
    req.session_id = session.into();
    req
}

async fn health_of(ts: &TestServer, tool: &str) -> pb::ToolHealth {
    let response = ts
        .client
        .clone()
        .get_tool_health(pb::GetToolHealthRequest { tool: tool.into() })
        .await
        .unwrap()
        .into_inner();
    response
        .tools
        .into_iter()
        .next()
        .expect("the tool has health")
}

#[tokio::test]
async fn a_loop_is_stopped_across_two_batches_of_one_session() {
    let config = Config::from_toml("[loop_detection]\nwarn_after = 2\nstop_after = 3").unwrap();
    let ts = start_with(config).await;
    let same = |id: &str| json!({"id": id, "name": "echo", "arguments": {"q": "same"}});
    let (events, first) = dispatch_stream(
        &ts,
        in_session("loopy", json!([same("a"), same("b"), same("c")])),
    )
    .await;
    assert!(first.all_succeeded);
    let warns: Vec<&pb::LoopDetected> = events
        .iter()
        .filter_map(|e| match e {
            Event::LoopDetected(l) => Some(l),
            _ => None,
        })
        .collect();
    assert_eq!(warns.len(), 1, "one warning per pattern");
    assert_eq!((warns[0].id.as_str(), warns[0].repeats), ("b", 2));
    assert_eq!(warns[0].action, pb::loop_detected::Action::Warn as i32);
    assert!(
        first.results[1]
            .content
            .contains("[toolgate] warning: echo({\"q\":\"same\"})")
    );

    let (events, second) = dispatch_stream(
        &ts,
        in_session("loopy", json!([same("d"), {"id": "e", "name": "echo"}])),
    )
    .await;
    assert_eq!(
        second.outcome,
        pb::batch_result::Outcome::LoopDetected as i32
    );
    assert_eq!(
        second.outcome_reason,
        "Loop detected: echo({\"q\":\"same\"}) repeated 3 times"
    );
    assert_eq!(class(&second.results[0]), ErrorClass::LoopStopped);
    assert_eq!(class(&second.results[1]), ErrorClass::Skipped);
    assert!(events.iter().any(|e| matches!(e, Event::LoopDetected(l) if l.action == pb::loop_detected::Action::Stop as i32)));
    // Another session is not affected, and the stop used the pattern up.
    assert!(
        dispatch(&ts, in_session("other", json!([same("x")])))
            .await
            .all_succeeded
    );
    assert!(
        dispatch(&ts, in_session("loopy", json!([same("y")])))
            .await
            .all_succeeded
    );
}

#[tokio::test]
async fn the_breaker_opens_after_failures_and_recovers_through_a_probe() {
    let config =
        Config::from_toml("[breaker]\nfailure_threshold = 2\ncooldown = \"300ms\"").unwrap();
    let ts = start_with(config).await;
    let calls = json!([{"id": "1", "name": "switch"}, {"id": "2", "name": "switch"}, {"id": "3", "name": "switch"}]);
    let (events, result) = dispatch_stream(&ts, request(calls)).await;
    let classes: Vec<ErrorClass> = result.results.iter().map(class).collect();
    assert_eq!(
        classes,
        [
            ErrorClass::ToolError,
            ErrorClass::ToolError,
            ErrorClass::CircuitOpen
        ]
    );
    assert_eq!(
        result.results[2].error,
        "tool temporarily unavailable: circuit breaker open"
    );
    let changes: Vec<(i32, i32)> = events
        .iter()
        .filter_map(|e| match e {
            Event::BreakerChanged(b) => Some((b.from, b.to)),
            _ => None,
        })
        .collect();
    assert_eq!(
        changes,
        [(
            pb::BreakerState::Closed as i32,
            pb::BreakerState::Open as i32
        )]
    );
    let health = health_of(&ts, "switch").await;
    assert_eq!(health.breaker, pb::BreakerState::Open as i32);
    assert_eq!(
        (health.calls, health.failures),
        (2, 2),
        "the refusal is not a failure"
    );
    assert_eq!(health.status, pb::tool_health::Status::Unhealthy as i32);

    // The tool recovers; after the cooldown one probe runs and closes the breaker.
    ts.switch_ok.store(true, Ordering::SeqCst);
    let mut recovered = None;
    eventually(
        "the breaker lets a probe through after its cooldown",
        async || {
            let (events, result) =
                dispatch_stream(&ts, request(json!([{"id": "p", "name": "switch"}]))).await;
            if !result.all_succeeded {
                return false;
            }
            recovered = Some(events);
            true
        },
    )
    .await;
    let events = recovered.expect("the successful probe's events");
    let changes: Vec<(i32, i32)> = events
        .iter()
        .filter_map(|e| match e {
            Event::BreakerChanged(b) => Some((b.from, b.to)),
            _ => None,
        })
        .collect();
    use pb::BreakerState::{Closed, HalfOpen, Open};
    assert_eq!(
        changes,
        [
            (Open as i32, HalfOpen as i32),
            (HalfOpen as i32, Closed as i32)
        ]
    );
    assert_eq!(health_of(&ts, "switch").await.breaker, Closed as i32);
}

#[tokio::test]
async fn a_flaky_idempotent_tool_is_retried_with_backoff_events() {
    let ts = start().await;
    let (events, result) =
        dispatch_stream(&ts, request(json!([{"id": "f", "name": "flaky"}]))).await;
    let r = &result.results[0];
    assert!(r.success, "{r:?}");
    assert_eq!((r.attempts, r.content.as_str()), (3, "steady"));
    assert_eq!(ts.flaky_runs.load(Ordering::SeqCst), 3);
    let retries: Vec<(u32, u128)> = events
        .iter()
        .filter_map(|e| match e {
            Event::RetryScheduled(r) => {
                let d = r.delay.unwrap();
                Some((
                    r.attempt,
                    (d.seconds as u128) * 1000 + (d.nanos as u128) / 1_000_000,
                ))
            }
            _ => None,
        })
        .collect();
    assert_eq!(retries, [(2, 100), (3, 200)]);
    let posts = events
        .iter()
        .filter(|e| matches!(e, Event::ToolPost(_)))
        .count();
    assert_eq!(posts, 3, "every attempt has its pre and post");
    // A tool that is not idempotent is never retried.
    let result = dispatch(&ts, request(json!([{"id": "x", "name": "fail"}]))).await;
    assert_eq!(result.results[0].attempts, 1);
}

#[tokio::test]
async fn memory_holds_successful_calls_of_a_session() {
    let ts = start().await;
    dispatch(&ts, in_session("mem", json!([{"id": "a", "name": "echo", "arguments": {"k": 1}}, {"id": "b", "name": "fail"}]))).await;
    let memory = ts
        .client
        .clone()
        .get_session_memory(pb::GetSessionMemoryRequest {
            session_id: "mem".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert_eq!(memory, [r#"tool=echo; input={"k":1}; result={"k":1}"#]);
    let status = ts
        .client
        .clone()
        .get_session_memory(pb::GetSessionMemoryRequest {
            session_id: "nobody".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn sessions_expire_when_idle_and_end_on_request() {
    let config = Config::from_toml("[sessions]\nidle_ttl = \"200ms\"").unwrap();
    let ts = start_with(config).await;
    let write = json!([{"id": "w", "name": "scratch_write", "arguments": {"path": "a.txt", "content": "x"}}]);
    assert!(
        dispatch(&ts, in_session("short", write.clone()))
            .await
            .all_succeeded
    );
    let memory_of = |id: &'static str| {
        let mut client = ts.client.clone();
        async move {
            client
                .get_session_memory(pb::GetSessionMemoryRequest {
                    session_id: id.into(),
                })
                .await
        }
    };
    assert!(memory_of("short").await.is_ok());
    eventually("the idle session expires", async || {
        memory_of("short").await.is_err()
    })
    .await;
    // Its scratch file went with it.
    let read = json!([{"id": "r", "name": "scratch_read", "arguments": {"path": "a.txt"}}]);
    let result = dispatch(&ts, in_session("short", read)).await;
    assert_eq!(result.results[0].error, "'a.txt' does not exist");

    assert!(
        dispatch(&ts, in_session("ending", write))
            .await
            .all_succeeded
    );
    let mut client = ts.client.clone();
    let ended = client
        .end_session(pb::EndSessionRequest {
            session_id: "ending".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ended.ended);
    let again = client
        .end_session(pb::EndSessionRequest {
            session_id: "ending".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!again.ended);
    let status = client
        .end_session(pb::EndSessionRequest {
            session_id: "../x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
}

/// (error class, tool, attempts) of each result.
fn ran(result: &pb::BatchResult) -> Vec<(ErrorClass, String, u32)> {
    result
        .results
        .iter()
        .map(|r| (class(r), r.tool.clone(), r.attempts))
        .collect()
}

#[tokio::test]
async fn a_refused_call_says_no_tool_ran() {
    let config = Config::from_toml(
        r#"
        [[hooks.rules]]
        tools = "now"
        action = "block"
        reason = "no clocks today"
        [[permissions.rules]]
        tools = "scratch_write"
        decision = "deny"
        reason = "read-only"
        [breaker]
        failure_threshold = 1
        [per_tool.fail.retry]
        enabled = false
        [loop_detection]
        warn_after = 0
        stop_after = 2
        "#,
    )
    .unwrap();
    let ts = start_with(config).await;
    let refusals = dispatch(
        &ts,
        request(json!([
            {"id": "h", "name": "now"},
            {"id": "p", "name": "scratch_write", "arguments": {"path": "a", "content": "x"}},
            {"id": "v", "name": "sleep", "arguments": {"ms": "soon"}},
            {"id": "f1", "name": "fail"},
            {"id": "f2", "name": "fail"},
        ])),
    )
    .await;
    assert_eq!(
        ran(&refusals),
        [
            (ErrorClass::Blocked, String::new(), 0),
            (ErrorClass::PermissionDenied, String::new(), 0),
            (ErrorClass::InvalidArguments, String::new(), 0),
            (ErrorClass::ToolError, "fail".to_owned(), 1),
            (ErrorClass::CircuitOpen, String::new(), 0),
        ]
    );
    let mut looping = request(json!([
        {"id": "e1", "name": "echo", "arguments": {"a": 1}},
        {"id": "e2", "name": "echo", "arguments": {"a": 1}},
        {"id": "e3", "name": "echo", "arguments": {"a": 1}},
    ]));
    looping.session_id = "loops".into();
    let stopped = dispatch(&ts, looping).await;
    assert_eq!(
        ran(&stopped),
        [
            (ErrorClass::None, "echo".to_owned(), 1),
            (ErrorClass::None, "echo".to_owned(), 1),
            (ErrorClass::LoopStopped, String::new(), 0),
        ]
    );
}

#[tokio::test]
async fn bad_paths_from_one_session_do_not_open_the_breaker_for_everyone() {
    // The default breaker opens after 3 consecutive failures.
    let ts = start().await;
    let mut bad = request(json!([
        {"id": "a", "name": "scratch_read", "arguments": {"path": "missing-1.txt"}},
        {"id": "b", "name": "scratch_read", "arguments": {"path": "missing-2.txt"}},
        {"id": "c", "name": "scratch_read", "arguments": {"path": "bad\u{0}name"}},
        {"id": "d", "name": "scratch_read", "arguments": {"path": "missing-3.txt"}},
    ]));
    bad.session_id = "careless".into();
    let result = dispatch(&ts, bad).await;
    for r in &result.results {
        assert_eq!(class(r), ErrorClass::InvalidArguments, "{r:?}");
    }
    let health = health_of(&ts, "scratch_read").await;
    assert_eq!(health.failures, 0, "{health:?}");
    assert_eq!(health.breaker, pb::BreakerState::Closed as i32);
    // Another session reads its own file as usual.
    let mut good = request(json!([
        {"id": "w", "name": "scratch_write", "arguments": {"path": "n.txt", "content": "hi"}},
        {"id": "r", "name": "scratch_read", "arguments": {"path": "n.txt"}},
    ]));
    good.session_id = "careful".into();
    let result = dispatch(&ts, good).await;
    assert!(result.all_succeeded, "{:?}", result.results);
    assert_eq!(result.results[1].content, "hi");
}

/// A `tonic::Request` carrying `x-toolgate-session`, as a client helping a balancer sends it.
fn with_session_metadata<T>(message: T, session: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("x-toolgate-session", session.parse().unwrap());
    request
}

#[tokio::test]
async fn the_session_may_be_named_in_metadata_too_but_never_differently() {
    let ts = start().await;
    let mut client = ts.client.clone();
    let echo = json!([{"id": "a", "name": "echo", "arguments": {"k": 1}}]);
    // Metadata alone names the session; metadata and body agreeing is the same session.
    client
        .dispatch(with_session_metadata(request(echo.clone()), "routed"))
        .await
        .unwrap();
    client
        .dispatch(with_session_metadata(
            in_session("routed", echo.clone()),
            "routed",
        ))
        .await
        .unwrap();
    let memory = client
        .get_session_memory(with_session_metadata(
            pb::GetSessionMemoryRequest::default(),
            "routed",
        ))
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert_eq!(memory.len(), 2, "{memory:?}");
    // A body naming another session than the metadata is refused before anything runs, on
    // every RPC that names one.
    let status = client
        .dispatch(with_session_metadata(
            in_session("other", echo.clone()),
            "routed",
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "session_id 'other' and the x-toolgate-session metadata 'routed' name different sessions"
    );
    let mut stream = client
        .dispatch_batch(with_session_metadata(in_session("other", echo), "routed"))
        .await;
    let streamed = match &mut stream {
        Ok(response) => response.get_mut().message().await.unwrap_err(),
        Err(status) => status.clone(),
    };
    assert_eq!(streamed.code(), tonic::Code::InvalidArgument);
    let ended = client
        .end_session(with_session_metadata(
            pb::EndSessionRequest {
                session_id: "other".into(),
            },
            "routed",
        ))
        .await
        .unwrap_err();
    assert_eq!(ended.code(), tonic::Code::InvalidArgument);
    // The metadata is held to the session id's rules.
    let bad = client
        .dispatch(with_session_metadata(request(json!([])), "batch-1"))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    let ended = client
        .end_session(with_session_metadata(
            pb::EndSessionRequest::default(),
            "routed",
        ))
        .await
        .unwrap()
        .into_inner()
        .ended;
    assert!(ended, "the session named in metadata alone was ended");
}
