//! Traces through a real server into a real OTLP receiver (`tests/otel/otlp_receiver.py`, on the
//! official `opentelemetry-proto` stubs): the span tree of a batch that succeeded, retried, was
//! blocked and named an unknown tool, under the client's `traceparent`; and one trace across a
//! Python worker that traces with the OpenTelemetry Python SDK.

use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use toolgate::config::Config;

use crate::observability::Receiver;
use crate::support::*;

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

/// The value of attribute `key` on a span or event, as JSON (`intValue` is a string in proto3
/// JSON; it is returned as a number here).
fn attr(item: &Value, key: &str) -> Value {
    let Some(found) = item["attributes"]
        .as_array()
        .and_then(|a| a.iter().find(|kv| kv["key"] == key))
    else {
        return Value::Null;
    };
    let value = &found["value"];
    if let Some(n) = value["intValue"].as_str() {
        return json!(n.parse::<i64>().unwrap());
    }
    for kind in ["stringValue", "boolValue", "doubleValue"] {
        if !value[kind].is_null() {
            return value[kind].clone();
        }
    }
    Value::Null
}

fn named<'s>(spans: &'s [Value], name: &str) -> Vec<&'s Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn traced(metadata: &mut tonic::metadata::MetadataMap) {
    metadata.insert(
        "traceparent",
        format!("00-{TRACE_ID}-{CLIENT_SPAN}-01").parse().unwrap(),
    );
    metadata.insert("tracestate", "vendor=opaque".parse().unwrap());
}

#[tokio::test]
async fn a_batch_is_a_tree_of_spans_under_the_clients_traceparent() {
    crate::peers::require_peers!(TestEnv);
    let mut receiver = Receiver::start().await;
    let config = Config::from_toml(&format!(
        r#"
        [telemetry]
        otlp_endpoint = "http://{}"
        service_name = "toolgate-traced"
        capture_content = true
        [retry]
        base_delay = "1ms"
        [[hooks.rules]]
        id = "no-clocks"
        tools = "now"
        action = "block"
        reason = "no clocks today"
        "#,
        receiver.addr
    ))
    .unwrap();
    let ts = start_with(config).await;
    let secret = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_Ab3dEf6hIj9kL";
    let mut req = tonic::Request::new(request(json!([
        {"id": "a", "name": "echo", "arguments": {"key": secret}},
        {"id": "b", "name": "flaky"},
        {"id": "c", "name": "now"},
        {"id": "d", "name": "made_up_tool_xyz"},
    ])));
    traced(req.metadata_mut());
    let mut stream = ts
        .client
        .clone()
        .dispatch_batch(req)
        .await
        .unwrap()
        .into_inner();
    while stream.message().await.unwrap().is_some() {}

    // RPC + batch + echo + three flaky attempts + the blocked call + the unknown tool.
    let spans = receiver.spans_until(|s| s.len() >= 8).await;
    assert_eq!(spans.len(), 8, "{spans:#?}");
    for span in &spans {
        assert_eq!(span["traceId"], TRACE_ID, "one trace: {span:#}");
        assert_eq!(span["service"], "toolgate-traced");
    }

    let rpc = named(&spans, "toolgate.v1.ToolGate/DispatchBatch");
    let [rpc] = rpc.as_slice() else {
        panic!("one RPC span: {spans:#?}")
    };
    assert_eq!(
        rpc["parentSpanId"], CLIENT_SPAN,
        "the client's span is the parent"
    );
    assert_eq!(rpc["kind"], "SPAN_KIND_SERVER");
    assert_eq!(attr(rpc, "rpc.system"), "grpc");
    assert_eq!(attr(rpc, "rpc.method"), "DispatchBatch");
    assert_eq!(attr(rpc, "rpc.grpc.status_code"), 0);
    assert_eq!(attr(rpc, "network.peer.address"), "127.0.0.1");
    assert_eq!(rpc["traceState"], "vendor=opaque");

    let batch = named(&spans, "toolgate.batch");
    let [batch] = batch.as_slice() else {
        panic!("one batch span: {spans:#?}")
    };
    assert_eq!(batch["parentSpanId"], rpc["spanId"]);
    assert_eq!(attr(batch, "toolgate.batch.calls"), 4);
    assert_eq!(attr(batch, "toolgate.batch.mode"), "SEQUENTIAL");
    assert_eq!(attr(batch, "toolgate.batch.outcome"), "COMPLETED");

    // Every call's spans are children of the batch span.
    let calls: Vec<&Value> = spans
        .iter()
        .filter(|s| attr(s, "gen_ai.operation.name") == "execute_tool")
        .collect();
    assert_eq!(calls.len(), 6, "{spans:#?}");
    for span in &calls {
        assert_eq!(span["parentSpanId"], batch["spanId"], "{span:#}");
        assert_eq!(attr(span, "gen_ai.tool.type"), "function");
    }

    let echo = named(&spans, "execute_tool echo");
    let [echo] = echo.as_slice() else {
        panic!("one echo span: {spans:#?}")
    };
    assert_eq!(attr(echo, "gen_ai.tool.name"), "echo");
    assert_eq!(attr(echo, "gen_ai.tool.call.id"), "a");
    assert_eq!(attr(echo, "toolgate.tool.source"), "BUILTIN");
    assert_eq!(attr(echo, "toolgate.attempt"), 1);
    assert_eq!(attr(echo, "toolgate.cached"), false);
    assert_eq!(attr(echo, "error.type"), Value::Null);
    let arguments = attr(echo, "gen_ai.tool.call.arguments").to_string();
    assert!(
        !arguments.contains(secret) && arguments.contains("REDACTED"),
        "captured arguments are redacted: {arguments}"
    );
    assert!(
        !attr(echo, "gen_ai.tool.call.result")
            .to_string()
            .contains(secret)
    );

    let mut flaky = named(&spans, "execute_tool flaky");
    flaky.sort_by_key(|s| attr(s, "toolgate.attempt").as_i64());
    let attempts: Vec<Value> = flaky.iter().map(|s| attr(s, "toolgate.attempt")).collect();
    assert_eq!(
        attempts,
        [json!(1), json!(2), json!(3)],
        "a span per attempt"
    );
    for failed in &flaky[..2] {
        assert_eq!(attr(failed, "error.type"), "TOOL_ERROR", "{failed:#}");
        assert_eq!(failed["status"]["code"], "STATUS_CODE_ERROR");
        let retry = &failed["events"][0];
        assert_eq!(retry["name"], "toolgate.retry", "{failed:#}");
        assert!(attr(retry, "toolgate.retry.delay_ms").is_i64());
    }
    assert_eq!(attr(flaky[2], "error.type"), Value::Null);

    let blocked = named(&spans, "execute_tool now");
    let [blocked] = blocked.as_slice() else {
        panic!("one span for the blocked call: {spans:#?}")
    };
    assert_eq!(attr(blocked, "error.type"), "BLOCKED");
    let hook = &blocked["events"][0];
    assert_eq!(hook["name"], "toolgate.hook");
    assert_eq!(attr(hook, "toolgate.hook.name"), "no-clocks");
    assert_eq!(attr(hook, "toolgate.hook.verdict"), "block");
    assert_eq!(attr(hook, "toolgate.reason"), "no clocks today");

    // A name the model made up is an attribute, never a span name.
    let unknown: Vec<&Value> = calls
        .iter()
        .copied()
        .filter(|s| attr(s, "error.type") == "UNKNOWN_TOOL")
        .collect();
    let [unknown] = unknown.as_slice() else {
        panic!("one span for the unknown tool: {spans:#?}")
    };
    assert_eq!(unknown["name"], "execute_tool");
    assert_eq!(attr(unknown, "gen_ai.tool.name"), "made_up_tool_xyz");
    assert_eq!(attr(unknown, "toolgate.attempt"), 0);
}

#[tokio::test]
async fn without_a_traceparent_a_batch_starts_its_own_trace() {
    crate::peers::require_peers!(TestEnv);
    let mut receiver = Receiver::start().await;
    let config = Config::from_toml(&format!(
        "[telemetry]\notlp_endpoint = \"http://{}\"",
        receiver.addr
    ))
    .unwrap();
    let ts = start_with(config).await;
    dispatch(&ts, request(json!([{"id": "a", "name": "echo"}]))).await;
    let spans = receiver.spans_until(|s| s.len() >= 3).await;
    let rpc = named(&spans, "toolgate.v1.ToolGate/Dispatch");
    let [rpc] = rpc.as_slice() else {
        panic!("one RPC span: {spans:#?}")
    };
    assert!(
        rpc["parentSpanId"].as_str().unwrap_or("").is_empty(),
        "a root: {rpc:#}"
    );
    let trace = rpc["traceId"].as_str().unwrap();
    assert_eq!(trace.len(), 32);
    assert!(spans.iter().all(|s| s["traceId"] == trace), "{spans:#?}");
}

#[tokio::test]
async fn a_trace_crosses_into_a_worker_that_traces_with_the_python_sdk() {
    crate::peers::require_peers!(TestEnv);
    let mut receiver = Receiver::start().await;
    // The example worker, tracing into the same receiver with the OpenTelemetry Python SDK.
    let env = crate::peers::testenv();
    let endpoint = format!("http://{}", receiver.addr);
    let mut worker = tokio::process::Command::new(env.join("venv/bin/python"))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/python/worker.py"
        ))
        .args(["--port", "0"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_SERVICE_NAME", "py-worker")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the worker starts");
    let mut lines = tokio::io::BufReader::new(worker.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().expect("a listening line");
    let worker_addr = line
        .strip_prefix("listening on ")
        .expect("listening on ADDR");
    let config = Config::from_toml(&format!(
        "[telemetry]\notlp_endpoint = \"{endpoint}\"\n[[remotes]]\nname = \"py\"\nkind = \"worker\"\nendpoint = \"http://{worker_addr}\"\nprefix = \"py.\""
    ))
    .unwrap();
    let ts = start_with(config).await;
    let mut req = tonic::Request::new(request(json!([{"id": "w", "name": "py.whoami"}])));
    traced(req.metadata_mut());
    let result = ts.client.clone().dispatch(req).await.unwrap().into_inner();
    let seen = json_of(&result.results[0].result);
    assert_eq!(
        seen["trace_id"], TRACE_ID,
        "the worker's own span is in the client's trace: {seen}"
    );
    assert_eq!(seen["tracestate"], "vendor=opaque");

    let spans = receiver
        .spans_until(|s| s.iter().any(|s| s["service"] == "py-worker") && s.len() >= 4)
        .await;
    let attempt = named(&spans, "execute_tool py.whoami");
    let [attempt] = attempt.as_slice() else {
        panic!("one execution span: {spans:#?}")
    };
    assert_eq!(attr(attempt, "toolgate.tool.source"), "WORKER");
    assert_eq!(attr(attempt, "toolgate.remote.name"), "py");
    let traceparent = seen["traceparent"].as_str().unwrap();
    assert_eq!(
        traceparent,
        format!("00-{TRACE_ID}-{}-01", attempt["spanId"].as_str().unwrap()),
        "the traceparent the worker got is the execution span's context"
    );
    let invoke = named(&spans, "invoke whoami");
    let [invoke] = invoke.as_slice() else {
        panic!("one worker span: {spans:#?}")
    };
    assert_eq!(invoke["service"], "py-worker");
    assert_eq!(invoke["traceId"], TRACE_ID);
    assert_eq!(
        invoke["parentSpanId"], attempt["spanId"],
        "the worker's span hangs under toolgate's execution span"
    );
}

/// A TCP relay in front of the receiver that reads the HTTP/2 frames toolgate sends and notes,
/// for each gRPC message that starts a DATA frame, its compressed flag (the first byte of the
/// gRPC message prefix).
async fn frame_watching_relay(
    upstream: String,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let flags = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = flags.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
            let (mut client_rx, mut client_tx) = client.into_split();
            let (mut server_rx, mut server_tx) = server.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut server_rx, &mut client_tx).await });
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut pending: Vec<u8> = Vec::new();
                let mut chunk = [0u8; 16384];
                // The client preface, then frames: 3-byte length, type, flags, stream id.
                let mut skip = 24;
                while let Ok(n) = client_rx.read(&mut chunk).await {
                    if n == 0 || server_tx.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                    pending.extend_from_slice(&chunk[..n]);
                    loop {
                        if skip > 0 {
                            let cut = skip.min(pending.len());
                            pending.drain(..cut);
                            skip -= cut;
                            if skip > 0 {
                                break;
                            }
                        }
                        if pending.len() < 9 {
                            break;
                        }
                        let length = usize::from(pending[0]) << 16
                            | usize::from(pending[1]) << 8
                            | usize::from(pending[2]);
                        if pending.len() < 9 + length {
                            break;
                        }
                        // A DATA frame (type 0) whose payload starts a gRPC message.
                        if pending[3] == 0 && length >= 5 {
                            seen.lock().unwrap().push(pending[9]);
                        }
                        pending.drain(..9 + length);
                    }
                }
            });
        }
    });
    (addr, flags)
}

#[tokio::test]
async fn exports_are_gzip_compressed() {
    crate::peers::require_peers!(TestEnv);
    let mut receiver = Receiver::start().await;
    let (relay, flags) = frame_watching_relay(receiver.addr.clone()).await;
    let config = Config::from_toml(&format!(
        "[telemetry]\notlp_endpoint = \"http://{relay}\"\nmetrics_interval = \"1s\""
    ))
    .unwrap();
    let ts = start_with(config).await;
    dispatch(&ts, request(json!([{"id": "a", "name": "echo"}]))).await;
    receiver.spans_until(|s| s.len() >= 3).await;
    receiver
        .export_containing("metrics", "gen_ai.execute_tool.duration")
        .await;
    let flags = flags.lock().unwrap().clone();
    assert!(flags.len() >= 2, "a span and a metrics export: {flags:?}");
    assert!(
        flags.iter().all(|&f| f == 1),
        "every exported message is compressed: {flags:?}"
    );
}
