//! The server around the API: health, reflection, graceful shutdown, client cancellation.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;
use tokio_stream::StreamExt;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use toolgate::config::Config;
use toolgate::pb;
use toolgate::pb::dispatch_event::Event;

use crate::support::*;

async fn health(ts: &TestServer, service: &str) -> ServingStatus {
    let response = HealthClient::new(ts.channel.clone())
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .expect("health answers");
    ServingStatus::try_from(response.into_inner().status).expect("known status")
}

/// Opens a stream and reads until the first `tool_pre`, so the batch is known to be running.
async fn running(ts: &TestServer, calls: serde_json::Value) -> tonic::Streaming<pb::DispatchEvent> {
    let mut stream = ts
        .client
        .clone()
        .dispatch_batch(request(calls))
        .await
        .unwrap()
        .into_inner();
    while let Some(message) = stream.next().await {
        if let Some(Event::ToolPre(_)) = message.unwrap().event {
            return stream;
        }
    }
    panic!("stream ended before a tool started");
}

async fn rest(mut stream: tonic::Streaming<pb::DispatchEvent>) -> (Vec<Event>, pb::BatchResult) {
    let mut events = Vec::new();
    while let Some(message) = stream.next().await {
        match message.unwrap().event.unwrap() {
            Event::Result(result) => return (events, result),
            other => events.push(other),
        }
    }
    panic!("no result event");
}

#[tokio::test]
async fn health_is_serving_for_the_server_and_the_service() {
    let ts = start().await;
    assert_eq!(health(&ts, "").await, ServingStatus::Serving);
    assert_eq!(
        health(&ts, "toolgate.v1.ToolGate").await,
        ServingStatus::Serving
    );
}

#[tokio::test]
async fn reflection_lists_services_in_v1_and_v1alpha() {
    use tonic_reflection::pb::{v1, v1alpha};
    let ts = start().await;
    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut client = v1::server_reflection_client::ServerReflectionClient::new(ts.channel.clone());
    let mut responses = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        responses.next().await.unwrap().unwrap().message_response
    else {
        panic!("list services response")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"toolgate.v1.ToolGate".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"grpc.health.v1.Health".to_owned()),
        "{names:?}"
    );

    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::FileContainingSymbol(
                "toolgate.v1.ToolGate".into(),
            ),
        ),
    };
    let mut client =
        v1alpha::server_reflection_client::ServerReflectionClient::new(ts.channel.clone());
    let mut responses = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.next().await.unwrap().unwrap().message_response;
    assert!(
        matches!(
            response,
            Some(v1alpha::server_reflection_response::MessageResponse::FileDescriptorResponse(_))
        ),
        "{response:?}"
    );
}

#[tokio::test]
async fn shutdown_lets_in_flight_batches_finish_and_refuses_new_ones() {
    let ts = start().await;
    let stream = running(&ts, json!([{"id": "s", "name": "sleep", "arguments": {"ms": 300}}, {"id": "e", "name": "echo"}])).await;
    ts.server.shutdown_handle().shutdown();
    eventually("health goes NOT_SERVING", async || {
        health(&ts, "toolgate.v1.ToolGate").await == ServingStatus::NotServing
    })
    .await;
    assert_eq!(health(&ts, "").await, ServingStatus::NotServing);
    let status = ts
        .client
        .clone()
        .dispatch(request(json!([{"name": "echo"}])))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(status.message(), "the server is shutting down");
    let (_events, result) = rest(stream).await;
    assert_eq!(result.outcome, pb::batch_result::Outcome::Completed as i32);
    assert!(result.all_succeeded);
    ts.server.wait().await.unwrap();
}

#[tokio::test]
async fn shutdown_cancels_batches_still_running_after_the_grace_period() {
    let config = Config::from_toml("[server]\nshutdown_grace = \"100ms\"").unwrap();
    let ts = start_with(config).await;
    let stream = running(
        &ts,
        json!([{"id": "w", "name": "wait_cancel"}, {"id": "e", "name": "echo"}]),
    )
    .await;
    ts.server.shutdown_handle().shutdown();
    let (events, result) = rest(stream).await;
    assert_eq!(result.outcome, pb::batch_result::Outcome::Cancelled as i32);
    assert_eq!(result.outcome_reason, "the server is shutting down");
    assert_eq!(result.results.len(), 2, "every call is still answered");
    assert_eq!(class(&result.results[0]), pb::ErrorClass::Cancelled);
    assert_eq!(class(&result.results[1]), pb::ErrorClass::Skipped);
    let Some(Event::ToolPost(post)) = events.last() else {
        panic!("terminal tool_post: {events:?}")
    };
    assert_eq!(
        (post.id.as_str(), post.error_class),
        ("w", pb::ErrorClass::Cancelled as i32)
    );
    assert!(
        ts.saw_cancel.load(Ordering::SeqCst),
        "the tool's token fired"
    );
    ts.server.wait().await.unwrap();
}

#[tokio::test]
async fn a_client_dropping_the_stream_cancels_the_running_tool() {
    let ts = start().await;
    let stream = running(&ts, json!([{"id": "w", "name": "wait_cancel"}])).await;
    drop(stream);
    let flag = ts.saw_cancel.clone();
    eventually("the tool sees its cancellation", async || {
        flag.load(Ordering::SeqCst)
    })
    .await;
    // The server is fine and serves the next batch.
    assert!(
        dispatch(&ts, request(json!([{"name": "echo"}])))
            .await
            .all_succeeded
    );
}

#[tokio::test]
async fn a_grpc_deadline_cancels_a_streaming_batch() {
    let ts = start().await;
    let mut req = tonic::Request::new(request(json!([{"id": "w", "name": "wait_cancel"}])));
    req.set_timeout(Duration::from_millis(200));
    // Either the call or the stream ends with a deadline status, or the server's final result
    // reports the cancel; a stream that just stops says nothing and fails the test.
    let deadline_status = |status: &tonic::Status| {
        assert!(
            matches!(
                status.code(),
                tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
            ),
            "{status:?}"
        );
    };
    match ts.client.clone().dispatch_batch(req).await {
        Err(status) => deadline_status(&status),
        Ok(response) => {
            let mut stream = response.into_inner();
            let mut result = None;
            let mut error = None;
            while let Some(message) = stream.next().await {
                match message {
                    Ok(message) => {
                        if let Some(Event::Result(r)) = message.event {
                            result = Some(r);
                        }
                    }
                    Err(status) => {
                        error = Some(status);
                        break;
                    }
                }
            }
            match (result, error) {
                (Some(result), _) => {
                    assert_eq!(result.outcome, pb::batch_result::Outcome::Cancelled as i32);
                    assert_eq!(result.outcome_reason, "the request deadline passed");
                    assert_eq!(class(&result.results[0]), pb::ErrorClass::Cancelled);
                }
                (None, Some(status)) => deadline_status(&status),
                (None, None) => panic!("the stream ended with neither a result nor an error"),
            }
        }
    }
    let flag = ts.saw_cancel.clone();
    eventually("the deadline cancels the tool", async || {
        flag.load(Ordering::SeqCst)
    })
    .await;
}

/// Runs `toolgate health` with these arguments and extra environment; returns whether it exited
/// 0 and what it printed. Asynchronous, so the in-process server keeps answering meanwhile.
async fn health_command(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("health")
        .args(args)
        .env_remove("TOOLGATE_CONFIG")
        .env_remove("TOOLGATE_LISTEN")
        .env_remove("TOOLGATE_SERVER__LISTEN")
        .env_remove("TOOLGATE_SERVER__INSECURE")
        .envs(env.iter().copied())
        .output()
        .await
        .expect("toolgate runs");
    let mut printed = String::from_utf8_lossy(&output.stdout).into_owned();
    printed.push_str(&String::from_utf8_lossy(&output.stderr));
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{:?}: {printed}",
        output.status
    );
    (output.status.success(), printed)
}

#[tokio::test]
async fn the_health_command_exits_0_for_a_serving_server_and_1_for_none() {
    let ts = start().await;
    let addr = ts.server.local_addr().to_string();
    let (ok, printed) = health_command(&["--addr", &addr], &[]).await;
    assert!(ok, "{printed}");
    assert_eq!(printed.trim(), format!("{addr}: SERVING"));

    // Without --addr it asks the configured address, on loopback for 0.0.0.0 (a container).
    let listen = format!("0.0.0.0:{}", ts.server.local_addr().port());
    let env = [
        ("TOOLGATE_LISTEN", listen.as_str()),
        ("TOOLGATE_SERVER__INSECURE", "true"),
    ];
    let (ok, printed) = health_command(&[], &env).await;
    assert!(ok, "{printed}");

    // A TLS listener is not probed in plaintext: the command says so instead of "unreachable".
    let tls = [
        ("TOOLGATE_TLS__CERT_FILE", "/etc/toolgate/cert.pem"),
        ("TOOLGATE_TLS__KEY_FILE", "/etc/toolgate/key.pem"),
    ];
    let (ok, printed) = health_command(&[], &tls).await;
    assert!(!ok);
    assert!(printed.contains("serves TLS"), "{printed}");

    let (ok, printed) = health_command(&["--addr", &addr, "--service", "no.Such"], &[]).await;
    assert!(!ok);
    assert!(printed.contains("SERVICE_UNKNOWN ('no.Such')"), "{printed}");

    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nothing = free.local_addr().unwrap().to_string();
    drop(free);
    let (ok, printed) = health_command(&["--addr", &nothing, "--timeout", "2s"], &[]).await;
    assert!(!ok);
    assert!(
        printed.starts_with(&format!("{nothing}: unreachable: ")),
        "{printed}"
    );
}

#[tokio::test]
async fn the_health_command_exits_1_while_the_server_drains() {
    let ts = start().await;
    let stream = running(&ts, json!([{"id": "w", "name": "wait_cancel"}])).await;
    ts.server.shutdown_handle().shutdown();
    eventually("health goes NOT_SERVING", async || {
        health(&ts, "").await == ServingStatus::NotServing
    })
    .await;
    let addr = ts.server.local_addr().to_string();
    let (ok, printed) = health_command(&["--addr", &addr], &[]).await;
    assert!(!ok);
    assert_eq!(printed.trim(), format!("{addr}: NOT_SERVING"));
    // The client leaving cancels the batch, so the drain ends without waiting out the grace.
    drop(stream);
    ts.server.wait().await.unwrap();
}

/// A gauge's value from the admin listener's `/metrics`.
async fn gauge(ts: &TestServer, name: &str) -> f64 {
    let text = metrics_text(ts).await;
    text.lines()
        .find(|l| l.starts_with(name) && l.as_bytes().get(name.len()) == Some(&b' '))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_client_leaving_mid_batch_leaves_no_task_no_process_and_a_usable_session() {
    let dir = std::env::temp_dir().join(format!("toolgate-disconnect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("hook.pid");
    // A pre-tool hook on `sleep` that writes its pid and hangs: the call waits in it.
    let config = Config::from_toml(&format!(
        "[[hooks.command]]\nname = \"slow\"\ntools = \"sleep\"\ncommand = [\"sh\", \"-c\", \"echo $$ > {}; exec sleep 60\"]\ntimeout = \"120s\"",
        pid_file.display()
    ))
    .unwrap();
    let ts = start_with(config).await;
    let mut first = request(json!([{"id": "e", "name": "echo", "arguments": {"n": 1}}]));
    first.session_id = "kept".into();
    assert!(dispatch(&ts, first).await.all_succeeded);
    let baseline = gauge(&ts, "toolgate_runtime_tasks").await;

    // A PARALLEL batch in the same session: one call in a tool, one in its hook's process.
    let mut leaving = request(json!([
        {"id": "w", "name": "wait_cancel"},
        {"id": "s", "name": "sleep", "arguments": {"ms": 60000}},
    ]));
    leaving.session_id = "kept".into();
    leaving.options = Some(pb::DispatchOptions {
        mode: pb::dispatch_options::Mode::Parallel as i32,
        ..Default::default()
    });
    let stream = ts
        .client
        .clone()
        .dispatch_batch(leaving)
        .await
        .unwrap()
        .into_inner();
    let file = pid_file.clone();
    // The shell makes the file before it writes the pid into it: wait for the pid.
    eventually("the hook started", async || {
        std::fs::read_to_string(&file).is_ok_and(|pid| pid.trim().parse::<u32>().is_ok())
    })
    .await;
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    let during = gauge(&ts, "toolgate_runtime_tasks").await;
    assert!(
        during > baseline,
        "the batch runs tasks: {during} vs {baseline}"
    );

    drop(stream);
    let flag = ts.saw_cancel.clone();
    eventually("the running tool's token fires", async || {
        flag.load(Ordering::SeqCst)
    })
    .await;
    eventually("the hook's process is gone", async || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    })
    .await;
    let mut settled = f64::MAX;
    for _ in 0..100 {
        settled = gauge(&ts, "toolgate_runtime_tasks").await;
        if settled <= baseline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        settled <= baseline,
        "no task outlives the batch: {settled} vs {baseline} before it"
    );
    assert_eq!(gauge(&ts, "toolgate_batches_in_flight").await, 0.0);

    // The session is consistent: its memory is intact and it serves the next batch.
    let memory = ts
        .client
        .clone()
        .get_session_memory(pb::GetSessionMemoryRequest {
            session_id: "kept".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert_eq!(memory.len(), 1, "{memory:?}");
    let mut next = request(json!([{"id": "e2", "name": "echo", "arguments": {"n": 2}}]));
    next.session_id = "kept".into();
    assert!(dispatch(&ts, next).await.all_succeeded);
    let _ = std::fs::remove_dir_all(&dir);
}
