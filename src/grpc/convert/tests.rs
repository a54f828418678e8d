//! Conversion tests: request checks (numbers and nesting are `protojson`'s tests).

use serde_json::json;

use super::*;

fn local() -> std::sync::Arc<toolgate_core::identity::Caller> {
    std::sync::Arc::new(toolgate_core::identity::Caller::local())
}

fn rules() -> RequestRules {
    RequestRules {
        limits: Limits::default(),
        dispatch: DispatchConfig::default(),
    }
}

fn request(calls: Vec<serde_json::Value>) -> pb::DispatchBatchRequest {
    pb::DispatchBatchRequest {
        calls: calls.into_iter().map(protojson::Value::from).collect(),
        ..Default::default()
    }
}

#[test]
fn too_many_calls_names_count_and_limit() {
    let calls = vec![json!({"name": "echo"}); 65];
    let err = batch_from_request(request(calls.clone()), local(), &rules()).unwrap_err();
    assert!(
        matches!(
            err,
            RequestError::TooManyCalls {
                count: 65,
                limit: 64
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "the batch has 65 calls; the limit is 64");
    let mut req = request(calls);
    req.options = Some(pb::DispatchOptions {
        max_calls: 100,
        ..Default::default()
    });
    assert!(batch_from_request(req, local(), &rules()).is_ok());
    let mut req = request(vec![]);
    req.options = Some(pb::DispatchOptions {
        max_calls: 5000,
        ..Default::default()
    });
    assert!(batch_from_request(req, local(), &rules()).is_err());
}

#[test]
fn options_are_resolved_and_unknown_values_rejected_by_name() {
    let mut req = request(vec![]);
    req.options = Some(pb::DispatchOptions {
        mode: 1,
        ..Default::default()
    });
    assert_eq!(
        batch_from_request(req, local(), &rules())
            .unwrap()
            .options
            .mode,
        toolgate_core::dispatch::Mode::Parallel { max_concurrency: 8 }
    );
    let mut req = request(vec![]);
    req.options = Some(pb::DispatchOptions {
        mode: 1,
        max_concurrency: 65,
        ..Default::default()
    });
    let err = batch_from_request(req, local(), &rules())
        .unwrap_err()
        .to_string();
    assert!(err.contains("ceiling of 64"), "{err}");
    let mut req = request(vec![]);
    req.options = Some(pb::DispatchOptions {
        on_error: 1,
        ..Default::default()
    });
    assert!(
        batch_from_request(req, local(), &rules())
            .unwrap()
            .options
            .fail_fast
    );
    let mut req = request(vec![]);
    req.options = Some(pb::DispatchOptions {
        message_format: 9,
        ..Default::default()
    });
    assert!(
        batch_from_request(req, local(), &rules())
            .unwrap_err()
            .to_string()
            .contains("message_format 9")
    );
}

#[test]
fn calls_and_assistant_message_are_exclusive_and_session_ids_checked() {
    let mut req = request(vec![json!({"name": "echo"})]);
    req.assistant_message = Some(protojson::Value::from(
        json!({"role": "assistant", "tool_calls": []}),
    ));
    assert!(
        batch_from_request(req, local(), &rules())
            .unwrap_err()
            .to_string()
            .contains("not both")
    );
    let mut req = request(vec![]);
    req.session_id = "../etc".into();
    // INVALID_ARGUMENT, now as its own variant.
    let refused = batch_from_request(req, local(), &rules()).unwrap_err();
    assert!(matches!(refused, RequestError::SessionId(_)), "{refused:?}");
    assert_eq!(
        tonic::Status::from(refused).code(),
        tonic::Code::InvalidArgument
    );
}

#[test]
fn call_timeout_defaults_and_is_bounded() {
    let mut req = request(vec![]);
    req.options = Some(pb::DispatchOptions {
        call_timeout: Some(prost_types::Duration {
            seconds: 0,
            nanos: 250_000_000,
        }),
        ..Default::default()
    });
    assert_eq!(
        batch_from_request(req, local(), &rules())
            .unwrap()
            .options
            .call_timeout,
        Some(Duration::from_millis(250))
    );
    assert_eq!(
        batch_from_request(request(vec![]), local(), &rules())
            .unwrap()
            .options
            .call_timeout,
        None,
        "unset leaves the choice to the tool's timeout or the server default"
    );
    let mut req = request(vec![]);
    req.options = Some(pb::DispatchOptions {
        call_timeout: Some(prost_types::Duration {
            seconds: -1,
            nanos: 0,
        }),
        ..Default::default()
    });
    assert!(batch_from_request(req, local(), &rules()).is_err());
}

#[test]
fn a_reply_value_past_the_reply_depth_is_carried_as_text() {
    let nested = |levels: usize| {
        let mut v = json!(1);
        for i in 0..levels {
            v = if i % 2 == 0 {
                json!([v])
            } else {
                json!({"k": v})
            };
        }
        v
    };
    let deep = nested(protojson::MAX_REPLY_DEPTH + 1);
    assert_eq!(
        value_for_reply(&deep).into_json(),
        Value::String(toolgate_core::json::canonical(&deep))
    );
    let fits = nested(protojson::MAX_REPLY_DEPTH);
    assert_eq!(value_for_reply(&fits).into_json(), fits);
}
