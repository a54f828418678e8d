//! Every intake shape and id rule, through the public API.

use serde_json::json;
use toolgate::pb;
use toolgate::pb::ErrorClass;
use toolgate::protojson;

use crate::support::*;

#[tokio::test]
async fn every_provider_shape_runs_with_its_own_id_and_arguments() {
    let ts = start().await;
    let result = dispatch(
        &ts,
        request(json!([
            {"id": "chat_1", "type": "function", "function": {"name": "echo", "arguments": "{\"shape\":\"chat\",\"n\":2}"}},
            {"type": "function_call", "id": "fc_9", "call_id": "resp_1", "name": "echo", "arguments": "{\"shape\":\"responses\"}"},
            {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"shape": "anthropic"}},
            {"functionCall": {"name": "echo", "args": {"shape": "gemini"}, "id": "gem_1"}},
            {"id": "norm_1", "name": "echo", "arguments": {"shape": "normalized"}},
        ])),
    )
    .await;
    assert_eq!(result.count, 5);
    assert!(result.all_succeeded, "{result:#?}");
    let ids: Vec<&str> = result.results.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["chat_1", "resp_1", "toolu_1", "gem_1", "norm_1"]);
    let shapes: Vec<serde_json::Value> = result
        .results
        .iter()
        .map(|r| json_of(&r.result)["shape"].clone())
        .collect();
    assert_eq!(
        shapes,
        [
            json!("chat"),
            json!("responses"),
            json!("anthropic"),
            json!("gemini"),
            json!("normalized")
        ]
    );
    // A JSON integer sent as text reaches the tool as an integer.
    assert_eq!(result.results[0].content, r#"{"n":2,"shape":"chat"}"#);
    for (i, r) in result.results.iter().enumerate() {
        assert_eq!(r.index as usize, i);
        assert_eq!(r.tool, "echo");
        assert_eq!(r.attempts, 1);
    }
}

#[tokio::test]
async fn integers_from_protobuf_numbers_stay_integers() {
    let ts = start().await;
    let result = dispatch(
        &ts,
        request(json!([{"id": "a", "name": "echo", "arguments": {"a": 2, "b": 2.5}}])),
    )
    .await;
    assert_eq!(result.results[0].content, r#"{"a":2,"b":2.5}"#);
}

#[tokio::test]
async fn malformed_arguments_are_answered_without_running() {
    let ts = start().await;
    let (events, result) = dispatch_stream(
        &ts,
        request(json!([{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\"city\": \"Par"}}])),
    )
    .await;
    let r = &result.results[0];
    assert!(!r.success);
    assert_eq!(class(r), ErrorClass::InvalidArguments);
    assert!(
        r.error.starts_with("arguments are not valid JSON: "),
        "{}",
        r.error
    );
    assert!(r.error.contains("line 1 column"), "{}", r.error);
    assert_eq!(r.content, r.error);
    assert_eq!(r.attempts, 0);
    // Received, but never executed.
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(matches!(
        events[0],
        pb::dispatch_event::Event::CallReceived(_)
    ));
}

#[tokio::test]
async fn missing_ids_are_generated_and_duplicates_do_not_run() {
    let ts = start().await;
    let (events, result) = dispatch_stream(
        &ts,
        request(json!([
            {"name": "echo", "arguments": {"n": 0}},
            {"id": "call_0", "name": "echo", "arguments": {"n": 1}},
            {"id": "dup", "name": "echo", "arguments": {"n": 2}},
            {"id": "dup", "name": "echo", "arguments": {"n": 3}},
        ])),
    )
    .await;
    let ids: Vec<&str> = result.results.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["call_0_1", "call_0", "dup", "dup"]);
    assert!(result.results[2].success);
    assert_eq!(class(&result.results[3]), ErrorClass::DuplicateId);
    assert_eq!(result.errors, 1);
    // by_id holds the unique ids; the repeated id keeps its first (executed) call.
    assert_eq!(result.by_id.len(), 3);
    assert_eq!(json_of(&result.by_id["dup"].result), json!({"n": 2}));
    let pres = events
        .iter()
        .filter(|e| matches!(e, pb::dispatch_event::Event::ToolPre(_)))
        .count();
    assert_eq!(pres, 3, "the duplicate never runs");
}

#[tokio::test]
async fn unrecognisable_elements_are_answered_in_place() {
    let ts = start().await;
    let result = dispatch(
        &ts,
        request(json!(["junk", {"id": "a", "name": "echo"}, {"id": "b", "weird": true}])),
    )
    .await;
    assert_eq!(result.count, 3);
    assert_eq!(class(&result.results[0]), ErrorClass::InvalidCall);
    assert!(result.results[1].success);
    assert_eq!(class(&result.results[2]), ErrorClass::InvalidCall);
    assert_eq!(result.results[2].id, "b");
    assert_eq!(result.messages.len(), 3);
}

async fn from_message(ts: &TestServer, message: serde_json::Value) -> pb::BatchResult {
    let req = pb::DispatchBatchRequest {
        assistant_message: Some(protojson::Value::from(message.clone())),
        ..Default::default()
    };
    dispatch(ts, req).await
}

#[tokio::test]
async fn assistant_messages_of_every_provider_are_unpacked() {
    let ts = start().await;
    let cases = [
        (
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\"x\":1}"}}]}),
            "c1",
        ),
        (
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_7", "name": "echo", "input": {"x": 1}}]}),
            "toolu_7",
        ),
        (
            json!({"role": "model", "parts": [{"functionCall": {"name": "echo", "args": {"x": 1}, "id": "g7"}}]}),
            "g7",
        ),
        (
            json!([{"type": "reasoning", "id": "rs", "summary": []},
                   {"type": "function_call", "id": "fc", "call_id": "call_r", "name": "echo", "arguments": "{\"x\":1}"}]),
            "call_r",
        ),
    ];
    for (message, id) in cases {
        let result = from_message(&ts, message).await;
        assert_eq!(result.count, 1, "{id}");
        assert_eq!(result.results[0].id, id);
        assert_eq!(result.results[0].content, r#"{"x":1}"#);
    }
}

#[tokio::test]
async fn an_unrecognised_assistant_message_is_invalid_argument() {
    let ts = start().await;
    let req = pb::DispatchBatchRequest {
        assistant_message: Some(protojson::Value::from(json!({"hello": "world"}))),
        ..Default::default()
    };
    let status = ts.client.clone().dispatch(req).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("not a recognised assistant message"),
        "{}",
        status.message()
    );
}

/// JSON text of objects nested `levels` deep.
fn nested_text(levels: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(levels), "}".repeat(levels))
}

#[tokio::test]
async fn every_reply_decodes_whatever_the_depth_of_arguments_and_results() {
    let ts = start().await;
    // The client is the generated one: prost stops decoding at 100 nested messages, as
    // protobuf decoders in other languages do.
    let (events, result) = dispatch_stream(
        &ts,
        request(json!([
            {"id": "ok", "name": "echo", "arguments": nested_text(32)},
            {"id": "too_deep", "name": "echo", "arguments": nested_text(33)},
            {"id": "deep_result", "name": "deep", "arguments": {"levels": 40}},
        ])),
    )
    .await;
    assert!(!events.is_empty());
    let r = &result.results;
    assert!(r[0].success, "{:?}", r[0]);
    assert_eq!(
        (class(&r[1]), r[1].error.as_str()),
        (
            ErrorClass::InvalidArguments,
            "arguments nest 33 levels deep; the limit is 32"
        )
    );
    // A result too deep for the reply comes back as its JSON text, whole.
    assert!(r[2].success, "{:?}", r[2]);
    let text = json_of(&r[2].result);
    let text = text.as_str().expect("carried as text");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(text)
            .unwrap()
            .pointer(&"/a".repeat(40)),
        Some(&json!("bottom"))
    );
}
