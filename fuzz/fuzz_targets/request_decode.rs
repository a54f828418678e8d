//! The request path: protobuf bytes decoded as a `DispatchBatchRequest`, then converted under
//! the default rules: never panics, and a converted batch has one call per request element (or
//! per element found in the assistant message).
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use toolgate::config::Config;
use toolgate::grpc::convert::{RequestRules, batch_from_request, json_from_value};
use toolgate::pb::DispatchBatchRequest;
use toolgate_core::calls::extract_calls;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = DispatchBatchRequest::decode(data) else {
        return;
    };
    let config = Config::default();
    let rules = RequestRules {
        limits: config.limits,
        dispatch: config.dispatch,
    };
    let elements = expected_calls(&request, &rules);
    if let (Ok(batch), Some(elements)) = (
        batch_from_request(
            request,
            std::sync::Arc::new(toolgate_core::identity::Caller::local()),
            &rules,
        ),
        elements,
    ) {
        assert_eq!(batch.calls.len(), elements);
    }
});

/// The calls a request holds: its `calls`, or those its assistant message carries (items
/// intake cannot place are answered too, as `INVALID_CALL`, so none is dropped silently).
fn expected_calls(request: &DispatchBatchRequest, rules: &RequestRules) -> Option<usize> {
    match &request.assistant_message {
        Some(message) if request.calls.is_empty() => {
            let message =
                json_from_value(message.clone(), rules.limits.max_json_depth, &"m").ok()?;
            extract_calls(&message).ok().map(|calls| calls.len())
        }
        _ => Some(request.calls.len()),
    }
}
