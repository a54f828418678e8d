//! Test harness: starts a server with test tools, builds requests, collects streamed events.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use toolgate::config::Config;
use toolgate::pb;
use toolgate::pb::tool_gate_client::ToolGateClient;
use toolgate::protojson;
use toolgate::tools::{Annotations, ContentPart, FnTool, ToolContext, ToolError, ToolOutput};
use toolgate::{RunningServer, Server};

pub struct TestServer {
    pub server: RunningServer,
    pub client: ToolGateClient<Channel>,
    pub channel: Channel,
    /// Set when the `wait_cancel` tool saw its cancellation token fire.
    pub saw_cancel: Arc<AtomicBool>,
    /// While false, the `switch` tool fails (a tool error the breaker counts).
    pub switch_ok: Arc<AtomicBool>,
    /// Executions of the `flaky` tool, which fails retryably on its first two.
    pub flaky_runs: Arc<AtomicU32>,
}

pub async fn start() -> TestServer {
    start_with(Config::default()).await
}

/// A server with `config`; its callers without credentials (the tests, from loopback) are
/// admins unless the config says who anonymous callers are, as the tests manage remotes.
pub async fn start_with(mut config: Config) -> TestServer {
    if config.auth.anonymous_roles == ["agent"] {
        config.auth.anonymous_roles.push("admin".to_owned());
    }
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let switch_ok = Arc::new(AtomicBool::new(false));
    let flaky_runs = Arc::new(AtomicU32::new(0));
    let server = test_tools(
        Server::new(config),
        saw_cancel.clone(),
        switch_ok.clone(),
        flaky_runs.clone(),
    )
    .start_local()
    .await
    .expect("server starts");
    let channel = connect(server.local_addr()).await;
    TestServer {
        client: ToolGateClient::new(channel.clone()),
        channel,
        server,
        saw_cancel,
        switch_ok,
        flaky_runs,
    }
}

pub async fn connect(addr: std::net::SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connects")
}

/// `message` sent with `token` as its bearer credential (none: anonymous).
pub fn as_caller<M>(token: Option<&str>, message: M) -> tonic::Request<M> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        let value = format!("Bearer {token}").parse().expect("a header value");
        request.metadata_mut().insert("authorization", value);
    }
    request
}

/// A request with these calls (any JSON shapes) and default options.
pub fn request(calls: Value) -> pb::DispatchBatchRequest {
    let Value::Array(calls) = calls else {
        panic!("calls must be an array")
    };
    pb::DispatchBatchRequest {
        calls: calls.iter().cloned().map(protojson::Value::from).collect(),
        ..Default::default()
    }
}

pub fn with_format(
    mut req: pb::DispatchBatchRequest,
    format: pb::dispatch_options::MessageFormat,
) -> pb::DispatchBatchRequest {
    let mut options = req.options.unwrap_or_default();
    options.message_format = format.into();
    req.options = Some(options);
    req
}

/// A `PARALLEL` request of these calls (`max` 0: the server's default concurrency).
pub fn parallel(calls: Value, max: u32) -> pb::DispatchBatchRequest {
    let mut req = request(calls);
    req.options = Some(pb::DispatchOptions {
        mode: pb::dispatch_options::Mode::Parallel.into(),
        max_concurrency: max,
        ..Default::default()
    });
    req
}

/// Every tool `ListTools` answers.
pub async fn list_tools(ts: &TestServer) -> Vec<pb::ToolDefinition> {
    ts.client
        .clone()
        .list_tools(pb::ListToolsRequest {})
        .await
        .expect("ListTools answers")
        .into_inner()
        .tools
}

/// How long `eventually` waits in all before it fails the test.
const PATIENCE: Duration = Duration::from_secs(10);
/// How often `eventually` checks its condition.
const POLL_EVERY: Duration = Duration::from_millis(10);

/// Checks `condition` every 10 ms until it holds; fails the test, naming `what`, once 10 s
/// have passed without it. The one way the tests wait for something that happens in the
/// background (a restart, a notification, an expiry).
pub async fn eventually(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if condition().await {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("never happened within {PATIENCE:?}: {what}");
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Waits (up to 10 s) until something listens on the loopback port.
pub async fn wait_for_port(port: u16) {
    eventually(
        &format!("something listens on 127.0.0.1:{port}"),
        async || {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        },
    )
    .await;
}

/// Runs `Dispatch` and returns the result.
pub async fn dispatch(ts: &TestServer, req: pb::DispatchBatchRequest) -> pb::BatchResult {
    ts.client
        .clone()
        .dispatch(req)
        .await
        .expect("dispatch succeeds")
        .into_inner()
}

/// Runs `DispatchBatch`, returning every event before the result, and the result.
pub async fn dispatch_stream(
    ts: &TestServer,
    req: pb::DispatchBatchRequest,
) -> (Vec<pb::dispatch_event::Event>, pb::BatchResult) {
    let mut stream = ts
        .client
        .clone()
        .dispatch_batch(req)
        .await
        .expect("stream opens")
        .into_inner();
    let mut events = Vec::new();
    let mut result = None;
    while let Some(message) = stream.next().await {
        let event = message.expect("stream message").event.expect("event set");
        assert!(result.is_none(), "the result must be the last message");
        match event {
            pb::dispatch_event::Event::Result(r) => result = Some(r),
            other => events.push(other),
        }
    }
    (events, result.expect("a final result event"))
}

pub fn json_of(value: &Option<protojson::Value>) -> Value {
    value.as_ref().map_or(Value::Null, |v| v.json().clone())
}

pub fn messages_json(result: &pb::BatchResult) -> Value {
    Value::Array(
        result
            .messages
            .iter()
            .map(|m| Value::Object(m.fields().clone()))
            .collect(),
    )
}

pub fn class(r: &pb::CallResult) -> pb::ErrorClass {
    pb::ErrorClass::try_from(r.error_class).expect("known class")
}

/// The test tools: `switch` and `flaky` (see `TestServer`), `fail` (tool error), `explode` (panics with `message`), `picture` (text and an
/// image), `wait_cancel` (waits until cancelled, recording that its token fired).
fn test_tools(
    server: Server,
    saw_cancel: Arc<AtomicBool>,
    switch_ok: Arc<AtomicBool>,
    flaky_runs: Arc<AtomicU32>,
) -> Server {
    let idempotent = Annotations {
        idempotent: true,
        ..Annotations::default()
    };
    server
        .tool(FnTool::new(
            "deep",
            "returns JSON nested `levels` objects deep (at most 100)",
            |input: Value, _ctx| async move {
                let levels = input["levels"].as_u64().unwrap_or(1).min(100);
                let mut value = serde_json::json!("bottom");
                for _ in 0..levels {
                    value = serde_json::json!({ "a": value });
                }
                Ok(ToolOutput::Json(value))
            },
        ))
        .tool(FnTool::new(
            "meta",
            "returns its input and the call metadata",
            |input: Value, ctx: ToolContext| async move {
                let m = &ctx.metadata;
                Ok(ToolOutput::Json(serde_json::json!({
                    "input": input,
                    "tool_call": m.tool_call(),
                    "tool_name": m.tool_name,
                    "tool_arguments": m.tool_arguments,
                    "tool_call_id": m.tool_call_id,
                    "tool_call_index": m.tool_call_index,
                    "_internal": "dropped by result selection",
                })))
            },
        ))
        .tool(FnTool::new(
            "switch",
            "fails until the test flips it",
            move |_input, _ctx| {
                let ok = switch_ok.load(Ordering::SeqCst);
                async move {
                    if ok {
                        Ok(ToolOutput::Text("on".into()))
                    } else {
                        Err(ToolError::failed("switched off"))
                    }
                }
            },
        ))
        .tool(
            FnTool::new(
                "flaky",
                "fails retryably twice, then works",
                move |_input, _ctx| {
                    let n = flaky_runs.fetch_add(1, Ordering::SeqCst) + 1;
                    async move {
                        if n <= 2 {
                            Err(ToolError::failed(format!("glitch {n}")).retryable())
                        } else {
                            Ok(ToolOutput::Text("steady".into()))
                        }
                    }
                },
            )
            .annotations(idempotent),
        )
        .tool(FnTool::new("fail", "fails", |_input, _ctx| async {
            Err(ToolError::failed("disk on fire"))
        }))
        .tool(FnTool::new(
            "explode",
            "panics",
            |input: Value, _ctx| async move {
                let message = input["message"].as_str().unwrap_or("boom").to_owned();
                panic!("{message}")
            },
        ))
        .tool(FnTool::new(
            "picture",
            "returns a caption and a 1x1 PNG",
            |_input, _ctx| async {
                Ok(ToolOutput::Parts(vec![
                    ContentPart::Text("a red dot".into()),
                    ContentPart::Image {
                        mime_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into(),
                    },
                ]))
            },
        ))
        .tool(
            FnTool::new(
                "wait_cancel",
                "waits for cancellation",
                move |_input, ctx: ToolContext| {
                    // The driver drops this future on cancel, so the token is watched from a detached task.
                    let flag = saw_cancel.clone();
                    tokio::spawn(async move {
                        ctx.cancel.cancelled().await;
                        flag.store(true, Ordering::SeqCst);
                    });
                    std::future::pending()
                },
            )
            // Safe to run beside other calls, so parallel tests can cancel it as a sibling.
            .concurrency_safe(true),
        )
}

/// A fresh, empty folder for one test's files.
pub fn folder(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `text` to `dir/name`; its path, as text for a command line or a config.
pub fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The SHA-256 of `text` in hex, as `[[auth.tokens]] sha256` takes a token.
pub fn sha256_hex(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// An HTTP GET (the admin listener) on a client with toolgate's TLS settings: reqwest is built
/// without a default crypto provider.
pub async fn http_get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::Response> {
    toolgate_remotes::tls::client_builder(None, std::time::Duration::from_secs(10))
        .expect("the system's TLS settings load")
        .build()?
        .get(url)
        .send()
        .await
}

/// The admin listener's `/metrics` text.
pub async fn metrics_text(ts: &TestServer) -> String {
    let admin = ts.server.admin_addr().expect("the admin listener is on");
    http_get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A CA made at test time that signs server and client certificates.
pub struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub pem: String,
}

impl Ca {
    pub fn new() -> Ca {
        Ca::named("toolgate test CA")
    }

    /// A CA whose subject is `name` (a stranger CA with another name is an unknown issuer; with
    /// the same name, a bad signature).
    pub fn named(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        // A subject of its own: a leaf whose issuer equals its subject reads as self-signed.
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` (host names or IP addresses), signed by this CA:
    /// (certificate PEM, key PEM).
    pub fn sign(&self, names: &[&str]) -> (String, String) {
        self.sign_with(names, |_| {})
    }

    /// A certificate for `names` that expired in 2021.
    pub fn sign_expired(&self, names: &[&str]) -> (String, String) {
        self.sign_with(names, |params| {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        })
    }

    fn sign_with(
        &self,
        names: &[&str],
        adjust: impl FnOnce(&mut rcgen::CertificateParams),
    ) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = rcgen::CertificateParams::new(names.clone()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, names[0].as_str());
        adjust(&mut params);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// Runs a test driver (`command`: a script that prints one JSON object as its last line of
/// output), in a process group of its own and off the test's runtime, and returns that object;
/// fails the test, saying `what` and showing its stderr, when the driver failed.
pub async fn run_json_driver(mut command: std::process::Command, what: &str) -> serde_json::Value {
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    crate::processes::own_group(&mut command);
    let child = command.spawn().expect("the driver starts");
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let value: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|_| panic!("the driver printed no JSON: {stdout}\n{stderr}"));
    assert!(output.status.success(), "{what} failed: {value}\n{stderr}");
    value
}
