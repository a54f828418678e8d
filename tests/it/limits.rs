//! Request limits: each one a clear status, nothing executed, the server unharmed.

use serde_json::json;
use tonic::Code;
use toolgate::config::Config;
use toolgate::pb;

use crate::support::*;

#[tokio::test]
async fn a_batch_over_max_calls_is_refused_before_anything_runs() {
    let ts = start().await;
    let calls: Vec<serde_json::Value> = (0..65)
        .map(|i| json!({"id": format!("c{i}"), "name": "echo"}))
        .collect();
    let status = ts
        .client
        .clone()
        .dispatch(request(json!(calls)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(status.message(), "the batch has 65 calls; the limit is 64");
    let mut req = request(json!([{"name": "echo"}, {"name": "echo"}, {"name": "echo"}]));
    req.options = Some(pb::DispatchOptions {
        max_calls: 2,
        ..Default::default()
    });
    let status = ts.client.clone().dispatch_batch(req).await.unwrap_err();
    assert_eq!(status.message(), "the batch has 3 calls; the limit is 2");
}

#[tokio::test]
async fn an_oversized_message_is_refused_and_the_server_keeps_serving() {
    let config = Config::from_toml("[server]\nmax_message_bytes = 65536").unwrap();
    let ts = start_with(config).await;
    let big = "x".repeat(100_000);
    let status = ts
        .client
        .clone()
        .dispatch(request(
            json!([{"name": "echo", "arguments": {"big": big}}]),
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(
        dispatch(&ts, request(json!([{"name": "echo"}])))
            .await
            .all_succeeded
    );
}

fn deep(levels: usize) -> serde_json::Value {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!({ "a": v });
    }
    v
}

#[tokio::test]
async fn nesting_past_the_depth_limit_is_invalid_argument() {
    let config = Config::from_toml("[limits]\nmax_json_depth = 5").unwrap();
    let ts = start_with(config).await;
    let status = ts
        .client
        .clone()
        .dispatch(request(json!([{"name": "echo", "arguments": deep(6)}])))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(status.message(), "calls[0] nests deeper than 5 levels");
    // Deeper than protobuf decoding allows at all: still INVALID_ARGUMENT, never a crash.
    let ts = start().await;
    let status = ts
        .client
        .clone()
        .dispatch(request(json!([{"name": "echo", "arguments": deep(200)}])))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        dispatch(&ts, request(json!([{"name": "echo"}])))
            .await
            .all_succeeded
    );
}

/// `DispatchBatchRequest` as any protobuf client may write it: `calls` (field 2) as
/// `prost_types` values, which (unlike JSON) can hold NaN and infinities.
#[derive(Clone, PartialEq, prost::Message)]
struct AnyClientRequest {
    #[prost(message, repeated, tag = "2")]
    calls: Vec<prost_types::Value>,
}

#[tokio::test]
async fn a_number_json_cannot_hold_is_invalid_argument_naming_the_call() {
    use prost_types::value::Kind;
    let ts = start().await;
    let value = |kind| prost_types::Value { kind: Some(kind) };
    let call = |n: f64| {
        value(Kind::StructValue(prost_types::Struct {
            fields: [
                (
                    "name".to_owned(),
                    value(Kind::StringValue("echo".to_owned())),
                ),
                (
                    "arguments".to_owned(),
                    value(Kind::StructValue(prost_types::Struct {
                        fields: [("n".to_owned(), value(Kind::NumberValue(n)))].into(),
                    })),
                ),
            ]
            .into(),
        }))
    };
    for n in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let mut grpc = tonic::client::Grpc::new(ts.channel.clone());
        grpc.ready().await.unwrap();
        let status = grpc
            .unary::<_, pb::BatchResult, _>(
                tonic::Request::new(AnyClientRequest {
                    calls: vec![call(1.0), call(n)],
                }),
                tonic::codegen::http::uri::PathAndQuery::from_static(
                    "/toolgate.v1.ToolGate/Dispatch",
                ),
                tonic_prost::ProstCodec::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "calls[1] holds a number that is not finite"
        );
    }
    // The same client's finite numbers arrive as JSON numbers.
    let mut grpc = tonic::client::Grpc::new(ts.channel.clone());
    grpc.ready().await.unwrap();
    let reply = grpc
        .unary::<_, pb::BatchResult, _>(
            tonic::Request::new(AnyClientRequest {
                calls: vec![call(2.5), call(7.0)],
            }),
            tonic::codegen::http::uri::PathAndQuery::from_static("/toolgate.v1.ToolGate/Dispatch"),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(json_of(&reply.results[0].result), json!({"n": 2.5}));
    assert_eq!(json_of(&reply.results[1].result), json!({"n": 7}));
}

#[tokio::test]
async fn deeply_nested_argument_text_is_a_soft_error() {
    let ts = start().await;
    let text = deep(70).to_string();
    let result = dispatch(
        &ts,
        request(json!([{"id": "d", "function": {"name": "echo", "arguments": text}}])),
    )
    .await;
    assert_eq!(class(&result.results[0]), pb::ErrorClass::InvalidArguments);
    assert_eq!(
        result.results[0].error,
        "arguments nest 70 levels deep; the limit is 32"
    );
}

#[tokio::test]
async fn batches_beyond_the_concurrency_limit_are_resource_exhausted() {
    let config = Config::from_toml(
        "[server]\nmax_concurrent_batches = 1\nmax_batches_per_connection = 1\n\
         max_batches_per_tenant = 1\nmax_batches_per_identity = 1",
    )
    .unwrap();
    let ts = start_with(config).await;
    let mut first = ts
        .client
        .clone()
        .dispatch_batch(request(json!([{"id": "w", "name": "wait_cancel"}])))
        .await
        .unwrap()
        .into_inner();
    // Wait until the first batch is running.
    let _received = tokio_stream::StreamExt::next(&mut first).await;
    let status = ts
        .client
        .clone()
        .dispatch(request(json!([{"name": "echo"}])))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    drop(first);
}

#[tokio::test]
async fn invalid_session_ids_are_refused() {
    let ts = start().await;
    let mut req = request(json!([{"name": "echo"}]));
    req.session_id = "../../tmp".into();
    let status = ts.client.clone().dispatch(req).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .starts_with("session_id '../../tmp' is invalid"),
        "{}",
        status.message()
    );
}
