//! Sequential dispatch through the API: ordering, events, soft errors, multipart, timeouts, tools.

use serde_json::json;
use toolgate::pb;
use toolgate::pb::ErrorClass;
use toolgate::pb::dispatch_event::Event;

use crate::support::*;

#[tokio::test]
async fn every_call_is_received_before_any_runs_and_pre_post_pair_in_order() {
    let ts = start().await;
    let (events, result) = dispatch_stream(
        &ts,
        request(json!([
            {"id": "a", "name": "echo", "arguments": {"i": 0}},
            {"id": "b", "name": "missing_tool"},
            {"id": "c", "name": "sleep", "arguments": {"ms": 5}},
        ])),
    )
    .await;
    let kinds: Vec<String> = events
        .iter()
        .map(|e| match e {
            Event::CallReceived(r) => format!("received:{}", r.id),
            Event::ToolPre(p) => format!("pre:{}:{}", p.id, p.attempt),
            Event::ToolPost(p) => format!("post:{}:{}", p.id, p.attempt),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "received:a",
            "received:b",
            "received:c",
            "pre:a:1",
            "post:a:1",
            "pre:c:1",
            "post:c:1"
        ]
    );
    let ids: Vec<&str> = result.results.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(result.outcome, pb::batch_result::Outcome::Completed as i32);
}

#[tokio::test]
async fn an_unknown_tool_is_answered_and_never_dispatched() {
    let ts = start().await;
    let result = dispatch(
        &ts,
        request(json!([{"id": "x", "name": "get_weather", "arguments": {}}])),
    )
    .await;
    let r = &result.results[0];
    assert_eq!(class(r), ErrorClass::UnknownTool);
    assert_eq!(r.error, "tool 'get_weather' is not available");
    assert_eq!(r.tool, "");
    assert_eq!(r.attempts, 0);
    assert!(!result.all_succeeded);
}

#[tokio::test]
async fn a_panicking_tool_is_a_soft_error_and_the_server_lives_on() {
    let ts = start().await;
    let result = dispatch(
        &ts,
        request(json!([
            {"id": "p", "name": "explode", "arguments": {"message": "kaboom"}},
            {"id": "q", "name": "echo", "arguments": {"after": true}},
        ])),
    )
    .await;
    assert_eq!(class(&result.results[0]), ErrorClass::Panic);
    assert_eq!(result.results[0].error, "tool 'explode' panicked: kaboom");
    assert!(result.results[1].success, "later calls still run");
    let again = dispatch(&ts, request(json!([{"id": "r", "name": "echo"}]))).await;
    assert!(again.all_succeeded);
}

#[tokio::test]
async fn a_tool_error_is_a_result_not_a_status() {
    let ts = start().await;
    let (events, result) =
        dispatch_stream(&ts, request(json!([{"id": "f", "name": "fail"}]))).await;
    let r = &result.results[0];
    assert!(!r.success);
    assert_eq!(class(r), ErrorClass::ToolError);
    assert_eq!(
        (r.error.as_str(), r.content.as_str()),
        ("disk on fire", "disk on fire")
    );
    assert_eq!(result.errors, 1);
    let Some(Event::ToolPost(post)) = events.last() else {
        panic!("post last: {events:?}")
    };
    assert!(post.is_error);
    assert_eq!(post.error_class, ErrorClass::ToolError as i32);
}

#[tokio::test]
async fn multipart_output_keeps_text_and_images() {
    let ts = start().await;
    let result = dispatch(&ts, request(json!([{"id": "img", "name": "picture"}]))).await;
    let r = &result.results[0];
    assert_eq!(r.content, "a red dot\n[image: image/png]");
    assert_eq!(r.parts.len(), 2);
    let Some(pb::content_part::Part::Image(image)) = &r.parts[1].part else {
        panic!("image part")
    };
    assert_eq!(image.mime_type, "image/png");
    assert_eq!(json_of(&r.result)[1]["type"], json!("image"));
}

#[tokio::test]
async fn a_call_past_its_deadline_times_out_with_a_readable_message() {
    // Timeouts of read-only tools are retried; this test is about one attempt's deadline.
    let config =
        toolgate::config::Config::from_toml("[per_tool.sleep.retry]\nenabled = false").unwrap();
    let ts = start_with(config).await;
    let mut req = request(json!([{"id": "s", "name": "sleep", "arguments": {"ms": 10000}}]));
    req.options = Some(pb::DispatchOptions {
        call_timeout: Some(prost_types::Duration {
            seconds: 0,
            nanos: 200_000_000,
        }),
        ..Default::default()
    });
    let result = dispatch(&ts, req).await;
    let r = &result.results[0];
    assert_eq!(class(r), ErrorClass::Timeout);
    assert_eq!(r.error, "Tool 'sleep' timed out after 200ms");
    let d = r.duration.unwrap();
    assert!(
        d.seconds == 0 && d.nanos >= 200_000_000,
        "the real elapsed time: {d:?}"
    );
}

#[tokio::test]
async fn scratch_files_persist_within_a_named_session_only() {
    let ts = start().await;
    let mut write = request(
        json!([{"id": "w", "name": "scratch_write", "arguments": {"path": "notes/a.txt", "content": "hello"}}]),
    );
    write.session_id = "s-1".into();
    assert!(dispatch(&ts, write).await.all_succeeded);
    let mut read = request(
        json!([{"id": "r", "name": "scratch_read", "arguments": {"path": "notes/a.txt"}},
                                  {"id": "e", "name": "scratch_read", "arguments": {"path": "../../etc/passwd"}}]),
    );
    read.session_id = "s-1".into();
    let result = dispatch(&ts, read.clone()).await;
    assert_eq!(result.results[0].content, "hello");
    assert_eq!(result.session_id, "s-1");
    assert_eq!(class(&result.results[1]), ErrorClass::InvalidArguments);
    assert!(
        result.results[1]
            .error
            .contains("escapes the scratch directory")
    );
    read.session_id = "s-2".into();
    let other = dispatch(&ts, read).await;
    assert_eq!(other.results[0].error, "'notes/a.txt' does not exist");
}

#[tokio::test]
async fn a_scratch_directory_is_made_only_when_a_scratch_tool_runs() {
    let base = std::env::temp_dir().join(format!("toolgate-it-lazy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let mut config = toolgate::config::Config::default();
    config.sessions.scratch_base = Some(base.clone());
    let ts = start_with(config).await;
    let entries = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&base)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };

    // A fresh session, looked at while its batch is still running.
    let mut stream = ts
        .client
        .clone()
        .dispatch_batch(request(json!([
            {"id": "e", "name": "echo", "arguments": {"x": 1}},
            {"id": "s", "name": "sleep", "arguments": {"ms": 300}},
        ])))
        .await
        .unwrap()
        .into_inner();
    use tokio_stream::StreamExt;
    while let Some(event) = stream.next().await {
        if let Some(Event::ToolPre(pre)) = event.unwrap().event
            && pre.id == "s"
        {
            break;
        }
    }
    assert_eq!(
        entries(),
        Vec::<String>::new(),
        "a running batch made no directory"
    );
    while stream.next().await.is_some() {}

    let mut quiet = request(json!([{"id": "e", "name": "echo", "arguments": {}}]));
    quiet.session_id = "quiet".into();
    assert!(dispatch(&ts, quiet).await.all_succeeded);
    assert_eq!(
        entries(),
        Vec::<String>::new(),
        "echo in a named session made none"
    );

    let mut busy = request(
        json!([{"id": "w", "name": "scratch_write", "arguments": {"path": "a.txt", "content": "x"}}]),
    );
    busy.session_id = "busy".into();
    assert!(dispatch(&ts, busy).await.all_succeeded);
    let made = entries();
    assert_eq!(made.len(), 1, "a scratch tool made its session's: {made:?}");
    assert!(
        made[0].starts_with("toolgate-") && !made[0].contains("busy"),
        "named by random bits, not the session id: {made:?}"
    );
    ts.server.shutdown().await.unwrap();
    assert_eq!(entries(), Vec::<String>::new(), "removed on stop");
    std::fs::remove_dir_all(&base).unwrap();
}

#[tokio::test]
async fn list_tools_describes_every_tool_with_its_source() {
    let ts = start().await;
    let tools = list_tools(&ts).await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "deep",
            "echo",
            "explode",
            "fail",
            "flaky",
            "meta",
            "now",
            "picture",
            "scratch_list",
            "scratch_read",
            "scratch_write",
            "sleep",
            "switch",
            "wait_cancel"
        ]
    );
    let sleep = tools.iter().find(|t| t.name == "sleep").unwrap();
    assert_eq!(sleep.source, pb::tool_definition::Source::Builtin as i32);
    assert!(sleep.concurrency_safe);
    assert!(sleep.annotations.unwrap().read_only);
    let schema = sleep.input_schema.clone().unwrap().into_json();
    assert_eq!(schema["required"], json!(["ms"]));
    let fail = tools.iter().find(|t| t.name == "fail").unwrap();
    assert_eq!(fail.source, pb::tool_definition::Source::Embedded as i32);
}

#[tokio::test]
async fn builtins_can_be_switched_off() {
    let config =
        toolgate::config::Config::from_toml("[tools.builtin]\nexclude = [\"sleep\", \"now\"]")
            .unwrap();
    let ts = start_with(config).await;
    let result = dispatch(
        &ts,
        request(json!([{"id": "s", "name": "sleep", "arguments": {"ms": 1}}])),
    )
    .await;
    assert_eq!(class(&result.results[0]), ErrorClass::UnknownTool);
    let config = toolgate::config::Config::from_toml("[tools.builtin]\nenabled = false").unwrap();
    let ts = start_with(config).await;
    let tools = list_tools(&ts).await;
    assert!(
        tools
            .iter()
            .all(|t| t.source == pb::tool_definition::Source::Embedded as i32)
    );
}

#[tokio::test]
async fn a_streamed_batch_of_the_most_calls_delivers_every_event_and_its_result() {
    // Three events a call, far more than the stream's queue holds (64): each call's push that
    // waits for room must be woken when the stream takes events, sequential and parallel.
    let ts = start().await;
    let max = toolgate::config::Config::default().limits.max_calls;
    let calls = json!(
        (0..max)
            .map(|i| json!({"id": format!("c{i}"), "name": "echo", "arguments": {"i": i}}))
            .collect::<Vec<_>>()
    );
    for req in [request(calls.clone()), parallel(calls, 8)] {
        let (events, result) = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            dispatch_stream(&ts, req),
        )
        .await
        .expect("the stream ends");
        assert_eq!(result.results.len(), max as usize);
        assert!(result.all_succeeded);
        let count = |f: fn(&Event) -> bool| events.iter().filter(|e| f(e)).count();
        assert_eq!(count(|e| matches!(e, Event::CallReceived(_))), max as usize);
        assert_eq!(count(|e| matches!(e, Event::ToolPre(_))), max as usize);
        assert_eq!(count(|e| matches!(e, Event::ToolPost(_))), max as usize);
    }
}
