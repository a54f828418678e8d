//! Hostile clients and overload, through the real server: clients that never read their streams,
//! one connection trying to take every slot, batches asking for more calls than the server runs
//! at once, hook programs started in bulk, and replies larger than clients accept.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use prost::Message;
use serde_json::json;
use tonic::Code;
use tonic::codegen::Bytes;
use tonic::codegen::http;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use toolgate::config::Config;
use toolgate::pb;
use toolgate::pb::tool_gate_client::ToolGateClient;

use crate::support::*;

/// A raw HTTP/2 connection whose streams have a zero receive window: the server can send them
/// headers but not one byte of data, as from a client that never reads.
struct NonReader {
    send: h2::client::SendRequest<Bytes>,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS as the connection last saw it.
    max_streams: Arc<AtomicUsize>,
    /// Open streams, kept so they are not reset.
    streams: Vec<(h2::client::ResponseFuture, h2::SendStream<Bytes>)>,
}

impl NonReader {
    async fn connect(addr: SocketAddr) -> Self {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(0)
            .handshake(tcp)
            .await
            .unwrap();
        let max_streams = Arc::new(AtomicUsize::new(0));
        let seen = max_streams.clone();
        let mut connection = connection;
        tokio::spawn(futures::future::poll_fn(move |cx| {
            let polled = std::future::Future::poll(Pin::new(&mut connection), cx);
            seen.store(connection.max_concurrent_send_streams(), Ordering::SeqCst);
            polled
        }));
        NonReader {
            send,
            max_streams,
            streams: Vec::new(),
        }
    }

    /// Opens a `DispatchBatch` stream with `request` and never reads it.
    async fn dispatch_batch(&mut self, request: &pb::DispatchBatchRequest) {
        let body = request.encode_to_vec();
        let mut frame = Vec::with_capacity(5 + body.len());
        frame.push(0);
        frame.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
        frame.extend_from_slice(&body);
        let head = http::Request::builder()
            .method("POST")
            .uri("http://toolgate/toolgate.v1.ToolGate/DispatchBatch")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let mut send = self.send.clone().ready().await.unwrap();
        let (response, mut body_tx) = send.send_request(head, false).unwrap();
        body_tx.send_data(Bytes::from(frame), true).unwrap();
        self.streams.push((response, body_tx));
    }
}

async fn toolgate_health(ts: &TestServer) -> ServingStatus {
    let response = HealthClient::new(ts.channel.clone())
        .check(HealthCheckRequest {
            service: "toolgate.v1.ToolGate".into(),
        })
        .await
        .unwrap();
    ServingStatus::try_from(response.into_inner().status).unwrap()
}

/// A few short sleeps: the batch has events to send while it still runs.
fn sleeps() -> pb::DispatchBatchRequest {
    let calls: Vec<_> = (0..5)
        .map(|i| json!({"id": format!("s{i}"), "name": "sleep", "arguments": {"ms": 50}}))
        .collect();
    request(json!(calls))
}

#[tokio::test]
async fn clients_that_never_read_lose_their_slots_and_everyone_else_is_served() {
    let config = Config::from_toml(
        "[server]\nmax_concurrent_batches = 2\nstall_timeout = \"500ms\"\n\
         max_streams_per_connection = 7\nmax_batches_per_connection = 2\n\
         max_batches_per_tenant = 2\nmax_batches_per_identity = 2",
    )
    .unwrap();
    let ts = start_with(config).await;
    let mut hostile = NonReader::connect(ts.server.local_addr()).await;
    eventually(
        "the server to advertise 7 streams per connection",
        async || hostile.max_streams.load(Ordering::SeqCst) == 7,
    )
    .await;
    for _ in 0..2 {
        hostile.dispatch_batch(&sleeps()).await;
    }
    // Both slots are taken by batches whose clients read nothing...
    eventually("the non-readers to hold every slot", async || {
        let status = ts
            .client
            .clone()
            .dispatch(request(json!([{"name": "echo"}])))
            .await;
        matches!(status, Err(s) if s.code() == Code::ResourceExhausted)
    })
    .await;
    assert_eq!(
        toolgate_health(&ts).await,
        ServingStatus::NotServing,
        "overload shows in health"
    );
    // ...until the stall timeout frees them, and then an ordinary client is served again.
    eventually("a reading client to be served", async || {
        let result = ts
            .client
            .clone()
            .dispatch(request(json!([{"name": "echo"}])))
            .await;
        result.is_ok_and(|r| r.into_inner().all_succeeded)
    })
    .await;
    eventually("health to say SERVING again", async || {
        toolgate_health(&ts).await == ServingStatus::Serving
    })
    .await;
    drop(hostile);
}

#[tokio::test]
async fn one_connection_gets_its_share_and_another_connection_still_gets_in() {
    let config = Config::from_toml(
        "[server]\nmax_concurrent_batches = 4\nmax_batches_per_connection = 1\n\
             max_batches_per_tenant = 4\nmax_batches_per_identity = 4",
    )
    .unwrap();
    let ts = start_with(config).await;
    let sleeping = || request(json!([{"name": "wait_cancel"}]));
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = ts
            .client
            .clone()
            .dispatch_batch(sleeping())
            .await
            .unwrap()
            .into_inner();
        let _received = tokio_stream::StreamExt::next(&mut stream).await;
        held.push(stream);
    }
    let status = ts
        .client
        .clone()
        .dispatch(request(json!([{"name": "echo"}])))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        status.message(),
        "this connection has reached its share of a busy server (server.max_batches_per_connection = 1); retry when one finishes"
    );
    let other = ToolGateClient::new(connect(ts.server.local_addr()).await);
    let result = other
        .clone()
        .dispatch(request(json!([{"name": "echo"}])))
        .await
        .unwrap();
    assert!(
        result.into_inner().all_succeeded,
        "a second connection is not starved"
    );
    drop(held);
}

#[tokio::test]
async fn calls_running_at_once_are_bounded_server_wide() {
    let config = Config::from_toml(
        "[server]\nmax_concurrent_calls = 4\nmax_calls_per_connection = 4\n\
         max_calls_per_tenant = 4\nmax_calls_per_identity = 4",
    )
    .unwrap();
    let ts = start_with(config).await;
    // A PARALLEL batch of 8 that asks for 8 at once runs with the 4 call slots there are.
    let calls: Vec<_> = (0..8)
        .map(|i| json!({"id": format!("s{i}"), "name": "sleep", "arguments": {"ms": 300}}))
        .collect();
    let wide = tokio::spawn({
        let client = ts.client.clone();
        async move { client.clone().dispatch(parallel(json!(calls), 8)).await }
    });
    eventually("the wide batch to hold every call slot", async || {
        let other = ts
            .client
            .clone()
            .dispatch(request(json!([{"name": "echo"}])))
            .await;
        matches!(other, Err(s) if s.code() == Code::ResourceExhausted
            && s.message() == "too many calls are running (4 at once); retry later")
    })
    .await;
    let result = wide.await.unwrap().unwrap().into_inner();
    assert!(
        result.all_succeeded,
        "narrowed, not failed: {:?}",
        result.results
    );
    assert_eq!(result.count, 8);
    let after = ts
        .client
        .clone()
        .dispatch(request(json!([{"name": "echo"}])))
        .await
        .unwrap();
    assert!(after.into_inner().all_succeeded, "the slots came back");
}

#[tokio::test]
async fn hook_programs_are_capped_across_batches() {
    let dir = std::env::temp_dir().join(format!("toolgate-hook-cap-{}", std::process::id()));
    let running = dir.join("running");
    std::fs::create_dir_all(&running).unwrap();
    let seen = dir.join("seen");
    let script = format!(
        "cat >/dev/null; touch {r}/$$; ls {r} | wc -l >> {s}; sleep 0.1; rm {r}/$$",
        r = running.display(),
        s = seen.display()
    );
    let config = Config::from_toml(&format!(
        "[limits]\nmax_hook_processes = 2\n\
         [[hooks.command]]\ncommand = [\"sh\", \"-c\", {script:?}]\ntimeout = \"20s\"\n"
    ))
    .unwrap();
    let ts = start_with(config).await;
    let batches = (0..3).map(|b| {
        let calls: Vec<_> = (0..4)
            .map(|i| json!({"id": format!("b{b}c{i}"), "name": "echo", "arguments": {"i": i}}))
            .collect();
        let client = ts.client.clone();
        async move { client.clone().dispatch(parallel(json!(calls), 4)).await }
    });
    for result in futures::future::join_all(batches).await {
        assert!(result.unwrap().into_inner().all_succeeded);
    }
    let counts: Vec<usize> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(counts.len(), 24, "a pre and a post hook run per call");
    assert!(
        counts.iter().all(|&n| n <= 2),
        "at most 2 hook programs at once: {counts:?}"
    );
}

#[tokio::test]
async fn a_reply_larger_than_clients_accept_is_shrunk_not_lost() {
    // No per-call output cap, so the reply limit is what cuts.
    let ts = start_with(Config::from_toml("[output]\nmax_chars = 0").unwrap()).await;
    // 3 MB of arguments: echoed in results, by_id and messages, the reply would be ~15 MB,
    // past the 4 MiB a gRPC client accepts by default (as the generated client here does).
    let big = "y".repeat(3_000_000);
    let req = request(json!([
        {"id": "small", "name": "echo", "arguments": {"n": 1}},
        {"id": "big", "name": "echo", "arguments": {"text": big}},
    ]));
    let result = ts
        .client
        .clone()
        .dispatch(req.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(result.encoded_len() <= 4 * 1024 * 1024);
    assert!(result.all_succeeded);
    let (small, large) = (&result.results[0], &result.results[1]);
    assert!(!small.truncated);
    assert_eq!(json_of(&small.result), json!({"n": 1}));
    assert!(large.truncated);
    assert!(large.content.contains("[truncated:"), "the cut says so");
    let arguments = json_of(&large.arguments);
    assert!(
        arguments
            .as_str()
            .is_some_and(|a| a.starts_with("{\"text\":\"yyy") && a.len() < 3_000_000),
        "echoed arguments become a cut preview of their JSON text"
    );
    assert!(
        large.content.len() > 100_000,
        "kept as much as fits: {}",
        large.content.len()
    );
    // The stream's final event is held to the same bound.
    let (_events, streamed) = dispatch_stream(&ts, req).await;
    assert!(streamed.results[1].truncated && streamed.all_succeeded);
}

#[tokio::test]
async fn ids_and_names_too_long_to_echo_are_refused_before_anything_runs() {
    let ts = start().await;
    // Echoed four times per result, a 1.2 MB id alone would make a reply no client accepts.
    let long_id = "i".repeat(1_200_000);
    let status = ts
        .client
        .clone()
        .dispatch(request(json!([{"id": long_id, "name": "echo"}])))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "call 0: its id is 1200000 bytes; the limit is 256"
    );
    let long_name = "n".repeat(300);
    let status = ts
        .client
        .clone()
        .dispatch(request(
            json!([{"id": "a", "name": "echo"}, {"name": long_name}]),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        status.message(),
        "call 1: its name is 300 bytes; the limit is 256"
    );
}
