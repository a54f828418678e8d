//! Tool messages and the batch reply: calls from intake, outputs of every kind (text, JSON,
//! parts with images, failures), messages in each chat format, then the reply shrunk to a
//! byte limit. Never panics; one message per result (one message holding one block per result
//! for Anthropic and Gemini) carrying the call's id; a reply that is produced fits the limit and
//! keeps one result per call, in order.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolgate::grpc::reply::batch_result_within;
use toolgate::tools::{ContentPart, ToolOutput};
use toolgate_core::calls::{IntakeLimits, intake};
use toolgate_core::dispatch::{
    BatchReport, CallResult, ErrorClass, MessageFormat, Outcome, tool_messages,
};

const FORMATS: [MessageFormat; 4] = [
    MessageFormat::OpenAiChat,
    MessageFormat::OpenAiResponses,
    MessageFormat::Anthropic,
    MessageFormat::Gemini,
];

/// The tool's output as the input describes it: a string is text, an array is parts (an object
/// with `image` is an image), anything else is JSON.
fn output(value: &Value) -> ToolOutput {
    match value {
        Value::String(text) => ToolOutput::Text(text.clone()),
        Value::Array(items) => ToolOutput::Parts(
            items
                .iter()
                .map(|item| match item.get("image") {
                    Some(data) => ContentPart::Image {
                        mime_type: "image/png".to_owned(),
                        data: data.as_str().unwrap_or_default().to_owned(),
                    },
                    None => ContentPart::Text(item.as_str().unwrap_or_default().to_owned()),
                })
                .collect(),
        ),
        other => ToolOutput::Json(other.clone()),
    }
}

/// The id a message (or block) names its call by, in each format.
fn ids(message: &serde_json::Map<String, Value>, format: MessageFormat) -> Vec<Option<String>> {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    match format {
        MessageFormat::OpenAiChat => vec![text(message.get("tool_call_id"))],
        MessageFormat::OpenAiResponses => vec![text(message.get("call_id"))],
        MessageFormat::Anthropic => message["content"]
            .as_array()
            .map(|blocks| blocks.iter().map(|b| text(b.get("tool_use_id"))).collect())
            .unwrap_or_default(),
        MessageFormat::Gemini => message["parts"]
            .as_array()
            .map(|parts| {
                parts
                    .iter()
                    .map(|p| text(p.pointer("/functionResponse/name")))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, json)) = data.split_first() else {
        return;
    };
    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let format = FORMATS[usize::from(selector % 4)];
    let limit = 64 + usize::from(selector / 4) * 64;
    let elements: Vec<Value> = items
        .iter()
        .map(|item| item.get("call").cloned().unwrap_or(Value::Null))
        .collect();
    let received = intake(&elements, IntakeLimits { max_json_depth: 32 });
    let results: Vec<CallResult> = received
        .iter()
        .zip(&items)
        .map(|(r, item)| {
            let out = item.get("out").map(output);
            match item.get("ok").and_then(Value::as_bool) {
                Some(true) => CallResult::succeeded(
                    &r.call,
                    &r.call.name,
                    out.unwrap_or(ToolOutput::Text(String::new())),
                    None,
                ),
                _ => CallResult::failed(
                    &r.call,
                    &r.call.name,
                    ErrorClass::ToolError,
                    "failed".to_owned(),
                    out,
                ),
            }
        })
        .collect();

    let messages = tool_messages(&results, format);
    let named: Vec<Option<String>> = messages.iter().flat_map(|m| ids(m, format)).collect();
    match format {
        MessageFormat::OpenAiChat | MessageFormat::OpenAiResponses => {
            assert_eq!(messages.len(), results.len());
        }
        MessageFormat::Anthropic | MessageFormat::Gemini => {
            assert_eq!(messages.len(), usize::from(!results.is_empty()));
        }
    }
    assert_eq!(named.len(), results.len());
    for (name, result) in named.iter().zip(&results) {
        let expected = match format {
            MessageFormat::Gemini => &result.name,
            _ => &result.id,
        };
        assert_eq!(name.as_deref(), Some(expected.as_str()));
    }

    let report = BatchReport {
        session_id: "fuzz".to_owned(),
        messages,
        results,
        outcome: Outcome::Completed,
        outcome_reason: String::new(),
        duration: Duration::ZERO,
        message_format: format,
    };
    if let Ok(reply) = batch_result_within(&report, limit) {
        // What is written: `by_id` is written from `results` by the codec.
        assert!(toolgate_proto::codec::written_len(&reply) <= limit);
        assert_eq!(reply.results.len(), report.results.len());
        for (sent, kept) in report.results.iter().zip(&reply.results) {
            assert_eq!(sent.id, kept.id);
        }
    }
});
