//! Tool messages in every format, for successes and failures alike, in the model's order.

use serde_json::json;
use toolgate::pb::dispatch_options::MessageFormat;

use crate::support::*;

fn batch() -> toolgate::pb::DispatchBatchRequest {
    request(json!([
        {"id": "ok_1", "name": "echo", "arguments": {"v": 1}},
        {"id": "bad_2", "name": "fail"},
        {"name": "echo", "arguments": {"v": 3}},
    ]))
}

#[tokio::test]
async fn openai_chat_messages() {
    let ts = start().await;
    let result = dispatch(&ts, batch()).await;
    assert_eq!(
        messages_json(&result),
        json!([
            {"role": "tool", "tool_call_id": "ok_1", "content": "{\"v\":1}"},
            {"role": "tool", "tool_call_id": "bad_2", "content": "disk on fire"},
            {"role": "tool", "tool_call_id": "call_2", "content": "{\"v\":3}"},
        ])
    );
}

#[tokio::test]
async fn anthropic_messages() {
    let ts = start().await;
    let result = dispatch(&ts, with_format(batch(), MessageFormat::Anthropic)).await;
    assert_eq!(
        messages_json(&result),
        json!([{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "ok_1", "content": "{\"v\":1}", "is_error": false},
            {"type": "tool_result", "tool_use_id": "bad_2", "content": "disk on fire", "is_error": true},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "{\"v\":3}", "is_error": false},
        ]}])
    );
}

#[tokio::test]
async fn openai_responses_messages() {
    let ts = start().await;
    let result = dispatch(&ts, with_format(batch(), MessageFormat::OpenaiResponses)).await;
    assert_eq!(
        messages_json(&result),
        json!([
            {"type": "function_call_output", "call_id": "ok_1", "output": "{\"v\":1}"},
            {"type": "function_call_output", "call_id": "bad_2", "output": "disk on fire"},
            {"type": "function_call_output", "call_id": "call_2", "output": "{\"v\":3}"},
        ])
    );
}

#[tokio::test]
async fn gemini_messages_echo_ids_only_when_the_model_sent_them() {
    let ts = start().await;
    let result = dispatch(&ts, with_format(batch(), MessageFormat::Gemini)).await;
    assert_eq!(
        messages_json(&result),
        json!([{"role": "user", "parts": [
            {"functionResponse": {"name": "echo", "id": "ok_1", "response": {"output": {"v": 1}}}},
            {"functionResponse": {"name": "fail", "id": "bad_2", "response": {"error": "disk on fire"}}},
            {"functionResponse": {"name": "echo", "response": {"output": {"v": 3}}}},
        ]}])
    );
}

#[tokio::test]
async fn anthropic_messages_carry_images_as_blocks() {
    let ts = start().await;
    let req = with_format(
        request(json!([{"type": "tool_use", "id": "t", "name": "picture", "input": {}}])),
        MessageFormat::Anthropic,
    );
    let result = dispatch(&ts, req).await;
    assert_eq!(
        messages_json(&result)[0]["content"][0]["content"],
        json!([{"type": "text", "text": "a red dot"},
               {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}])
    );
}
