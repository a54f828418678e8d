//! The hostile review's findings (issue 27), each through the real `toolgate` binary on a real
//! port with real clients: grpcurl, the generated client over a real connection, raw HTTP/2.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{Value, json};
use tokio_stream::StreamExt;
use toolgate::pb;
use toolgate::pb::tool_gate_client::ToolGateClient;

use crate::peers::{Binary, testenv};
use crate::support::*;

/// A fresh folder for one test's files.
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// grpcurl (plaintext) with `args`, the address and the method, `body` on stdin: (exited 0,
/// stdout and stderr).
async fn grpcurl(args: &[&str], addr: &str, method: &str, body: &Value) -> (bool, String) {
    let mut child = tokio::process::Command::new(testenv().join("venv/bin/grpcurl"))
        .arg("-plaintext")
        .args(args)
        .args(["-d", "@", addr, method])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, body.to_string().as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// One call of `tool` with `arguments` through `Dispatch`, by grpcurl; the result's JSON.
async fn dispatch_one(addr: &str, tool: &str, arguments: Value) -> Value {
    let body = json!({"calls": [{"id": "c", "name": tool, "arguments": arguments}]});
    let (ok, out) = grpcurl(&[], addr, "toolgate.v1.ToolGate/Dispatch", &body).await;
    assert!(ok, "{out}");
    let result: Value = serde_json::from_str(&out).unwrap();
    result["results"][0].clone()
}

/// An HTTP tool's server: `{"mode": "fail"}` answers 500, `"bad"` 400, `"slow"` answers after
/// 3 s, anything else at once.
async fn http_tool_server() -> std::net::SocketAddr {
    let app = axum::Router::new().route(
        "/tool",
        post(|Json(body): Json<Value>| async move {
            match body["input"]["mode"].as_str() {
                Some("fail") => (StatusCode::INTERNAL_SERVER_ERROR, "down".to_owned()),
                Some("bad") => (StatusCode::BAD_REQUEST, "no such city".to_owned()),
                Some("slow") => {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    (StatusCode::OK, "{\"slow\": true}".to_owned())
                }
                _ => (StatusCode::OK, "{\"ok\": true}".to_owned()),
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The binary with one HTTP tool, `flaky`, whose breaker opens after 3 failures for 1 s.
async fn breaker_server(name: &str) -> Binary {
    let tool = http_tool_server().await;
    let dir = folder(name);
    let config = write(
        &dir,
        "toolgate.toml",
        &format!(
            r#"
            [breaker]
            failure_threshold = 3
            cooldown = "1s"
            [[remotes]]
            name = "flaky"
            kind = "http"
            url = "http://{tool}/tool"
            [remotes.definition]
            name = "flaky"
            input_schema = {{ type = "object" }}
            "#
        ),
    );
    Binary::start(&["--config", &config])
}

async fn open_the_breaker(addr: &str) {
    for _ in 0..3 {
        let failed = dispatch_one(addr, "flaky", json!({"mode": "fail"})).await;
        assert_eq!(failed["errorClass"], "TOOL_ERROR", "{failed}");
    }
    let refused = dispatch_one(addr, "flaky", json!({})).await;
    assert_eq!(refused["errorClass"], "CIRCUIT_OPEN", "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_probe_cut_short_by_its_callers_deadline_frees_the_breaker_at_once() {
    let server = breaker_server("probe-deadline").await;
    open_the_breaker(&server.addr).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The probe's tool takes 3 s; its caller gives up after 0.7 s.
    let body = json!({"calls": [{"id": "p", "name": "flaky", "arguments": {"mode": "slow"}}]});
    let (ok, out) = grpcurl(
        &["-max-time", "0.7"],
        &server.addr,
        "toolgate.v1.ToolGate/Dispatch",
        &body,
    )
    .await;
    assert!(!ok, "the caller gave up: {out}");
    // The next call, right after, is the next probe: no lease to wait out, no new cooldown.
    let next = dispatch_one(&server.addr, "flaky", json!({})).await;
    assert_eq!(next["success"], true, "{next}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_probe_whose_caller_resets_the_stream_frees_the_breaker_at_once() {
    let server = breaker_server("probe-reset").await;
    open_the_breaker(&server.addr).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let channel = connect(server.addr.parse().unwrap()).await;
    let mut client = ToolGateClient::new(channel);
    let mut stream = client
        .dispatch_batch(request(
            json!([{"id": "p", "name": "flaky", "arguments": {"mode": "slow"}}]),
        ))
        .await
        .unwrap()
        .into_inner();
    // Once the probe runs, the client leaves: dropping the stream resets it.
    loop {
        let event = stream.next().await.unwrap().unwrap().event.unwrap();
        if matches!(event, pb::dispatch_event::Event::ToolPre(_)) {
            break;
        }
    }
    drop(stream);
    eventually("the next call is admitted as the probe", async || {
        dispatch_one(&server.addr, "flaky", json!({})).await["success"] == true
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_callers_bad_requests_do_not_open_the_shared_breaker() {
    let server = breaker_server("client-fault").await;
    for _ in 0..4 {
        let bad = dispatch_one(&server.addr, "flaky", json!({"mode": "bad"})).await;
        assert_eq!(bad["errorClass"], "INVALID_ARGUMENTS", "{bad}");
        assert!(
            bad["error"]
                .as_str()
                .unwrap()
                .starts_with("HTTP 400: no such city"),
            "{bad}"
        );
    }
    let next = dispatch_one(&server.addr, "flaky", json!({})).await;
    assert_eq!(next["success"], true, "{next}");
    let (ok, health) = grpcurl(
        &["-emit-defaults"],
        &server.addr,
        "toolgate.v1.ToolGate/GetToolHealth",
        &json!({"tool": "flaky"}),
    )
    .await;
    assert!(ok, "{health}");
    let health: Value = serde_json::from_str(&health).unwrap();
    let flaky = &health["tools"][0];
    assert_eq!(
        (&flaky["breaker"], &flaky["failures"]),
        (&json!("CLOSED"), &json!("0")),
        "{health}"
    );
}
