//! Tool messages in each provider's chat format, one per call, in the model's order.

use serde_json::{Map, Value, json};

use super::result::CallResult;
use crate::tools::ContentPart;

/// Which conversation format the agent wants its tool messages in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MessageFormat {
    #[default]
    OpenAiChat,
    Anthropic,
    OpenAiResponses,
    Gemini,
}

/// The messages to append to the conversation after the assistant's tool-call message.
pub fn tool_messages(results: &[CallResult], format: MessageFormat) -> Vec<Map<String, Value>> {
    let values: Vec<Value> = match format {
        MessageFormat::OpenAiChat => results
            .iter()
            .map(|r| json!({"role": "tool", "tool_call_id": r.id, "content": r.content}))
            .collect(),
        MessageFormat::OpenAiResponses => results
            .iter()
            .map(|r| json!({"type": "function_call_output", "call_id": r.id, "output": r.content}))
            .collect(),
        MessageFormat::Anthropic if results.is_empty() => Vec::new(),
        MessageFormat::Anthropic => {
            let blocks: Vec<Value> = results.iter().map(anthropic_block).collect();
            vec![json!({"role": "user", "content": blocks})]
        }
        MessageFormat::Gemini if results.is_empty() => Vec::new(),
        MessageFormat::Gemini => {
            let parts: Vec<Value> = results.iter().map(gemini_part).collect();
            vec![json!({"role": "user", "parts": parts})]
        }
    };
    values
        .into_iter()
        .filter_map(|v| match v {
            Value::Object(map) => Some(map),
            _ => None,
        })
        .collect()
}

/// A `tool_result` block; multipart output with images keeps the images as image blocks.
fn anthropic_block(r: &CallResult) -> Value {
    let has_image = r
        .parts
        .iter()
        .any(|p| matches!(p, ContentPart::Image { .. }));
    let content = if has_image {
        let blocks: Vec<Value> = r
            .parts
            .iter()
            .map(|part| match part {
                ContentPart::Text(text) => json!({"type": "text", "text": text}),
                ContentPart::Image { mime_type, data } => json!({
                    "type": "image",
                    "source": {"type": "base64", "media_type": mime_type, "data": data}
                }),
            })
            .collect();
        Value::Array(blocks)
    } else {
        Value::String(r.content.clone())
    };
    json!({"type": "tool_result", "tool_use_id": r.id, "content": content, "is_error": !r.success})
}

/// A `functionResponse` part: `{output: result}` on success, `{error: text}` on failure.
/// The id is echoed only when the model sent one.
fn gemini_part(r: &CallResult) -> Value {
    let response = if r.success {
        json!({"output": r.result})
    } else {
        json!({"error": r.content})
    };
    let mut function_response = json!({"name": r.name, "response": response});
    if !r.id_generated {
        function_response["id"] = Value::String(r.id.clone());
    }
    json!({"functionResponse": function_response})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::ToolCall;
    use crate::tools::ErrorClass;
    use crate::tools::ToolOutput;

    fn results() -> Vec<CallResult> {
        let call = |index, id: &str, generated| ToolCall {
            index,
            id: id.into(),
            id_generated: generated,
            name: "t".into(),
            arguments: json!({}).into(),
            raw_arguments: None,
            shape: None,
        };
        vec![
            CallResult::succeeded(
                &call(0, "a", false),
                "t",
                ToolOutput::Json(json!({"x": 1})),
                None,
            ),
            CallResult::refused(
                &call(1, "call_1", true),
                ErrorClass::UnknownTool,
                "tool 't' is not available".into(),
            ),
        ]
    }

    #[track_caller]
    fn check(format: MessageFormat, expected: Value) {
        let got: Vec<Value> = tool_messages(&results(), format)
            .into_iter()
            .map(Value::Object)
            .collect();
        assert_eq!(Value::Array(got), expected);
    }

    #[test]
    fn every_format_answers_every_call_in_order() {
        check(
            MessageFormat::OpenAiChat,
            json!([{"role": "tool", "tool_call_id": "a", "content": "{\"x\":1}"},
                   {"role": "tool", "tool_call_id": "call_1", "content": "tool 't' is not available"}]),
        );
        check(
            MessageFormat::OpenAiResponses,
            json!([{"type": "function_call_output", "call_id": "a", "output": "{\"x\":1}"},
                   {"type": "function_call_output", "call_id": "call_1", "output": "tool 't' is not available"}]),
        );
        check(
            MessageFormat::Anthropic,
            json!([{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "{\"x\":1}", "is_error": false},
                {"type": "tool_result", "tool_use_id": "call_1", "content": "tool 't' is not available", "is_error": true}]}]),
        );
        check(
            MessageFormat::Gemini,
            json!([{"role": "user", "parts": [
                {"functionResponse": {"name": "t", "id": "a", "response": {"output": {"x": 1}}}},
                {"functionResponse": {"name": "t", "response": {"error": "tool 't' is not available"}}}]}]),
        );
    }

    #[test]
    fn anthropic_keeps_images_as_blocks() {
        let call = ToolCall {
            index: 0,
            id: "a".into(),
            id_generated: false,
            name: "t".into(),
            arguments: json!({}).into(),
            raw_arguments: None,
            shape: None,
        };
        let r = CallResult::succeeded(
            &call,
            "t",
            ToolOutput::Parts(vec![
                ContentPart::Text("chart".into()),
                ContentPart::Image {
                    mime_type: "image/png".into(),
                    data: "AAA=".into(),
                },
            ]),
            None,
        );
        let got = tool_messages(&[r], MessageFormat::Anthropic);
        assert_eq!(
            got[0]["content"][0]["content"],
            json!([{"type": "text", "text": "chart"},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA="}}])
        );
    }

    #[test]
    fn an_empty_batch_has_no_messages() {
        for format in [
            MessageFormat::OpenAiChat,
            MessageFormat::Anthropic,
            MessageFormat::Gemini,
            MessageFormat::OpenAiResponses,
        ] {
            assert!(tool_messages(&[], format).is_empty());
        }
    }
}
