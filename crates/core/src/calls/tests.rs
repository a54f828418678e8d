//! Table tests for call intake: every provider shape and every batch-level rule.

use serde_json::{Value, json};

use super::*;

const LIMITS: IntakeLimits = IntakeLimits { max_json_depth: 64 };

/// (id, name, arguments, rejection kind) for each element.
type Expected<'a> = (&'a str, &'a str, Value, Option<Rejection>);

#[track_caller]
fn check(elements: Value, expected: &[Expected<'_>]) {
    let Value::Array(elements) = elements else {
        panic!("elements must be an array")
    };
    let got = intake(&elements, LIMITS);
    assert_eq!(
        got.len(),
        expected.len(),
        "one result per element: {got:#?}"
    );
    for (i, (received, (id, name, arguments, rejection))) in got.iter().zip(expected).enumerate() {
        assert_eq!(received.call.index, i);
        assert_eq!(received.call.id, *id, "id of element {i}");
        assert_eq!(received.call.name, *name, "name of element {i}");
        assert_eq!(
            &*received.call.arguments, arguments,
            "arguments of element {i}"
        );
        assert_eq!(
            received.rejection.as_ref().map(|r| r.0),
            *rejection,
            "element {i}: {received:?}"
        );
    }
}

fn message_of(element: Value) -> String {
    let got = intake(&[element], LIMITS);
    got[0].rejection.clone().map(|r| r.1).unwrap_or_default()
}

#[test]
fn openai_chat_arguments_text_is_parsed() {
    check(
        json!([{"id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"n\":2}"}}]),
        &[("c1", "get_weather", json!({"city": "Paris", "n": 2}), None)],
    );
}

#[test]
fn openai_chat_keeps_raw_arguments_text() {
    let got = intake(
        &[json!({"id": "c1", "function": {"name": "t", "arguments": " {\"a\":1} "}})],
        LIMITS,
    );
    assert_eq!(got[0].call.raw_arguments.as_deref(), Some(" {\"a\":1} "));
    assert_eq!(got[0].call.shape, Some(CallShape::OpenAiChat));
}

#[test]
fn openai_responses_id_is_call_id() {
    check(
        json!([{"type": "function_call", "id": "fc_1", "call_id": "call_abc",
                "name": "t", "arguments": "{\"x\":true}"}]),
        &[("call_abc", "t", json!({"x": true}), None)],
    );
}

#[test]
fn anthropic_input_is_the_arguments() {
    check(
        json!([{"type": "tool_use", "id": "toolu_01", "name": "t", "input": {"city": "Paris"}}]),
        &[("toolu_01", "t", json!({"city": "Paris"}), None)],
    );
}

#[test]
fn gemini_args_are_the_arguments_and_id_is_optional() {
    check(
        json!([{"functionCall": {"name": "t", "args": {"a": 1}, "id": "g1"}},
               {"functionCall": {"name": "u", "args": {"b": 2}}}]),
        &[
            ("g1", "t", json!({"a": 1}), None),
            ("call_1", "u", json!({"b": 2}), None),
        ],
    );
}

#[test]
fn normalized_accepts_object_or_text_and_raw_arguments() {
    check(
        json!([{"id": "a", "name": "t", "arguments": {"k": "v"}},
               {"id": "b", "name": "t", "arguments": "{\"k\":1}"},
               {"id": "c", "name": "t", "raw_arguments": "{\"k\":2}"}]),
        &[
            ("a", "t", json!({"k": "v"}), None),
            ("b", "t", json!({"k": 1}), None),
            ("c", "t", json!({"k": 2}), None),
        ],
    );
}

#[test]
fn absent_null_or_blank_arguments_are_an_empty_object() {
    check(
        json!([{"id": "a", "name": "t"},
               {"id": "b", "function": {"name": "t", "arguments": null}},
               {"id": "c", "function": {"name": "t", "arguments": "  "}},
               {"type": "tool_use", "id": "d", "name": "t"}]),
        &[
            ("a", "t", json!({}), None),
            ("b", "t", json!({}), None),
            ("c", "t", json!({}), None),
            ("d", "t", json!({}), None),
        ],
    );
}

#[test]
fn malformed_arguments_text_does_not_run_and_says_where() {
    let element = json!({"id": "c1", "function": {"name": "t", "arguments": "{\"city\": \"Par"}});
    check(
        json!([element.clone()]),
        &[("c1", "t", Value::Null, Some(Rejection::InvalidArguments))],
    );
    let message = message_of(element);
    assert!(
        message.starts_with("arguments are not valid JSON: "),
        "{message}"
    );
    assert!(message.contains("line 1 column"), "{message}");
}

#[test]
fn trailing_garbage_is_not_valid_json() {
    let element = json!({"id": "c1", "function": {"name": "t", "arguments": "{\"a\":1}{"}});
    assert!(message_of(element).contains("trailing characters"));
}

#[test]
fn non_object_arguments_are_rejected_with_their_type() {
    let element = json!({"id": "c1", "function": {"name": "t", "arguments": "[1,2]"}});
    assert_eq!(
        message_of(element),
        "arguments must be a JSON object, got an array"
    );
    let element = json!({"id": "c1", "name": "t", "arguments": 42});
    assert_eq!(
        message_of(element),
        "arguments must be a JSON object, got a number"
    );
}

#[test]
fn arguments_deeper_than_the_limit_are_rejected() {
    let mut deep = json!(1);
    for _ in 0..70 {
        deep = json!({ "a": deep });
    }
    let element = json!({"id": "c1", "name": "t", "arguments": deep});
    assert_eq!(
        message_of(element),
        "arguments nest 70 levels deep; the limit is 64"
    );
}

#[test]
fn missing_ids_are_generated_deterministically_without_collisions() {
    check(
        json!([{"name": "t"}, {"id": "call_0", "name": "t"}, {"name": "t"}, {"id": "call_2_1", "name": "t"},
               {"id": 7, "name": "t"}, {"id": "", "name": "t"}]),
        &[
            ("call_0_1", "t", json!({}), None),
            ("call_0", "t", json!({}), None),
            ("call_2", "t", json!({}), None),
            ("call_2_1", "t", json!({}), None),
            ("call_4", "t", json!({}), None),
            ("call_5", "t", json!({}), None),
        ],
    );
    let got = intake(&[json!({"name": "t"})], LIMITS);
    assert!(got[0].call.id_generated);
}

#[test]
fn generated_id_skips_an_explicit_id_later_in_the_batch() {
    check(
        json!([{"name": "t"}, {"id": "call_0", "name": "t"}, {"id": "call_0_1", "name": "t"}]),
        &[
            ("call_0_2", "t", json!({}), None),
            ("call_0", "t", json!({}), None),
            ("call_0_1", "t", json!({}), None),
        ],
    );
}

#[test]
fn repeated_id_first_runs_later_ones_are_duplicates() {
    check(
        json!([{"id": "x", "name": "a"}, {"id": "x", "name": "b"}, {"id": "y", "name": "c"}, {"id": "x", "name": "d"}]),
        &[
            ("x", "a", json!({}), None),
            ("x", "b", json!({}), Some(Rejection::DuplicateId)),
            ("y", "c", json!({}), None),
            ("x", "d", json!({}), Some(Rejection::DuplicateId)),
        ],
    );
    let got = intake(
        &[
            json!({"id": "x", "name": "a"}),
            json!({"id": "x", "name": "b"}),
        ],
        LIMITS,
    );
    let message = got[1].rejection.clone().unwrap().1;
    assert!(
        message.starts_with("duplicate tool call id 'x'"),
        "{message}"
    );
}

#[test]
fn unrecognisable_elements_get_invalid_call_at_their_position() {
    check(
        json!(["junk", {"id": "k", "foo": 1}, 5, null, {"id": "ok", "name": "t"}]),
        &[
            ("call_0", "", Value::Null, Some(Rejection::InvalidCall)),
            ("k", "", Value::Null, Some(Rejection::InvalidCall)),
            ("call_2", "", Value::Null, Some(Rejection::InvalidCall)),
            ("call_3", "", Value::Null, Some(Rejection::InvalidCall)),
            ("ok", "t", json!({}), None),
        ],
    );
    assert!(message_of(json!("junk")).starts_with("element at index 0 is not a tool call"));
}

#[test]
fn a_call_without_a_name_is_invalid() {
    check(
        json!([{"id": "a", "function": {"arguments": "{}"}}, {"id": "b", "name": 5},
               {"functionCall": "oops"}, {"id": "d", "function": "nope"}]),
        &[
            ("a", "", Value::Null, Some(Rejection::InvalidCall)),
            ("b", "", Value::Null, Some(Rejection::InvalidCall)),
            ("call_2", "", Value::Null, Some(Rejection::InvalidCall)),
            ("d", "", Value::Null, Some(Rejection::InvalidCall)),
        ],
    );
    assert_eq!(
        message_of(json!({"id": "a", "name": ""})),
        "tool call at index 0 has no tool name"
    );
    assert_eq!(
        message_of(json!({"functionCall": 1})),
        "tool call at index 0 has a 'functionCall' member that is not an object"
    );
}

#[test]
fn mixed_shapes_in_one_batch_keep_their_order() {
    check(
        json!([{"type": "tool_use", "id": "t1", "name": "a", "input": {}},
               {"id": "c2", "function": {"name": "b", "arguments": "{}"}},
               {"functionCall": {"name": "c", "args": {}}}]),
        &[
            ("t1", "a", json!({}), None),
            ("c2", "b", json!({}), None),
            ("call_2", "c", json!({}), None),
        ],
    );
}

#[track_caller]
fn check_extract(message: Value, expected_ids: &[&str]) {
    let elements = extract_calls(&message).expect("recognised message");
    let got = intake(&elements, LIMITS);
    let ids: Vec<&str> = got.iter().map(|r| r.call.id.as_str()).collect();
    assert_eq!(ids, expected_ids);
}

#[test]
fn assistant_messages_of_every_provider_yield_their_calls() {
    check_extract(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{}"}}]}),
        &["c1", "c2"],
    );
    check_extract(
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "a", "input": {}},
            {"type": "tool_use", "id": "toolu_2", "name": "b", "input": {"x": 1}}]}),
        &["toolu_1", "toolu_2"],
    );
    check_extract(
        json!({"role": "model", "parts": [{"text": "ok"},
            {"functionCall": {"name": "a", "args": {}}}, {"functionCall": {"name": "b", "args": {}}}]}),
        &["call_0", "call_1"],
    );
    check_extract(
        json!([{"type": "reasoning", "id": "rs_1", "summary": []},
               {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "a", "arguments": "{}"},
               {"type": "message", "role": "assistant", "content": []}]),
        &["call_a"],
    );
    check_extract(
        json!({"output": [{"type": "function_call", "call_id": "call_b", "name": "b", "arguments": "{}"}]}),
        &["call_b"],
    );
    check_extract(
        json!({"role": "assistant", "content": "no tools needed"}),
        &[],
    );
}

#[test]
fn a_malformed_call_inside_an_assistant_message_is_answered_not_dropped() {
    let elements = extract_calls(&json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "input": {}}]}))
    .unwrap();
    let got = intake(&elements, LIMITS);
    assert_eq!(
        got[0].rejection.as_ref().map(|r| r.0),
        Some(Rejection::InvalidCall)
    );
}

#[test]
fn unrecognised_assistant_messages_are_errors() {
    assert!(extract_calls(&json!("hello")).is_err());
    assert!(extract_calls(&json!({"foo": 1})).is_err());
    assert!(
        extract_calls(&json!({"tool_calls": "x"}))
            .unwrap_err()
            .to_string()
            .contains("must be an array")
    );
}

#[test]
fn gemini_parts_are_read_in_either_spelling() {
    check(
        json!([{"function_call": {"name": "get_weather", "args": {"city": "Paris"}, "id": "g1"}},
               {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}]),
        &[
            ("g1", "get_weather", json!({"city": "Paris"}), None),
            ("call_1", "get_weather", json!({"city": "Rome"}), None),
        ],
    );
    // `Content.to_json_dict()` of google-genai.
    check_extract(
        json!({"role": "model", "parts": [
            {"function_call": {"name": "a", "args": {"x": 1}}},
            {"function_call": {"name": "b", "args": {}}}]}),
        &["call_0", "call_1"],
    );
}

#[test]
fn args_is_the_arguments_of_a_normalized_call() {
    // What google-genai's `response.function_calls` dump as.
    check(
        json!([{"id": "c1", "name": "get_weather", "args": {"city": "Paris"}}]),
        &[("c1", "get_weather", json!({"city": "Paris"}), None)],
    );
}

#[test]
fn arguments_under_another_key_are_refused_not_dropped() {
    for key in ["input", "parameters", "params"] {
        let element = json!({"id": "c1", "name": "t", key: {"city": "Paris"}});
        check(
            json!([element.clone()]),
            &[("c1", "t", Value::Null, Some(Rejection::InvalidCall))],
        );
        assert!(message_of(element).contains(&format!("'{key}'")), "{key}");
    }
}

#[test]
fn nothing_in_an_assistant_message_is_dropped_silently() {
    // An unknown part is answered (INVALID_CALL), not skipped.
    let elements = extract_calls(&json!({"role": "model", "parts": [
        {"functionCall": {"name": "a", "args": {}}}, {"mystery": {"name": "b"}}]}))
    .unwrap();
    assert_eq!(elements.len(), 2);
    assert_eq!(
        intake(&elements, LIMITS)[1].rejection.as_ref().map(|r| r.0),
        Some(Rejection::InvalidCall)
    );
    // No call and no text: there is nothing to answer and nothing the model said.
    for message in [
        json!({"role": "model", "parts": []}),
        json!({"role": "assistant", "content": null, "tool_calls": []}),
        json!({"role": "assistant"}),
        json!([{"type": "reasoning", "id": "rs", "summary": []}]),
    ] {
        let err = extract_calls(&message).unwrap_err().to_string();
        assert!(err.contains("no tool call and no text"), "{message}: {err}");
    }
    // Text alone is an answer without tools.
    for message in [
        json!({"role": "model", "parts": [{"text": "Paris is sunny."}]}),
        json!({"role": "assistant", "content": [{"type": "text", "text": "Done."}]}),
        json!([{"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": "Done."}]}]),
    ] {
        assert_eq!(
            extract_calls(&message).unwrap(),
            Vec::<Value>::new(),
            "{message}"
        );
    }
}

#[test]
fn a_call_the_provider_runs_itself_is_not_the_agents_to_run() {
    // A Responses output with a hosted MCP call (already run by OpenAI) and an approval request
    // beside the agent's own function call: only the function call is dispatched.
    let elements = extract_calls(&json!([
        {"type": "mcp_call", "id": "mcp_1", "name": "echo", "server_label": "s",
         "arguments": "{\"text\":\"ran already\"}", "output": "ran already"},
        {"type": "mcp_approval_request", "id": "mcpr_1", "name": "echo", "server_label": "s",
         "arguments": "{}"},
        {"type": "function_call", "call_id": "call_1", "name": "now", "arguments": "{}"},
    ]))
    .expect("recognised output");
    check(
        Value::Array(elements),
        &[("call_1", "now", json!({}), None)],
    );
    // Anthropic's server tools (web search) run on Anthropic's side.
    let elements = extract_calls(&json!({"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}},
    ]}))
    .expect("recognised message");
    check(
        Value::Array(elements),
        &[("toolu_1", "now", json!({}), None)],
    );
    // Sent in `calls` itself, such an item is answered, not run.
    check(
        json!([{"type": "mcp_call", "id": "mcp_1", "name": "echo", "arguments": "{}"}]),
        &[("mcp_1", "", Value::Null, Some(Rejection::InvalidCall))],
    );
    // A framework's typed call still is one.
    check(
        json!([{"type": "tool_call", "id": "lc_1", "name": "now", "args": {}}]),
        &[("lc_1", "now", json!({}), None)],
    );
}
