//! Test harness: starts a server with test tools, builds requests, collects streamed events.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use toolgate::config::Config;
use toolgate::grpc::convert::{to_json, value_from_json};
use toolgate::pb;
use toolgate::pb::tool_gate_client::ToolGateClient;
use toolgate::tools::{BoxFuture, ContentPart, Tool, ToolContext, ToolError, ToolOutput};
use toolgate::{RunningServer, Server};

pub struct TestServer {
    pub server: RunningServer,
    pub client: ToolGateClient<Channel>,
    pub channel: Channel,
    /// Set when the `wait_cancel` tool saw its cancellation token fire.
    pub saw_cancel: Arc<AtomicBool>,
}

pub async fn start() -> TestServer {
    start_with(Config::default()).await
}

pub async fn start_with(config: Config) -> TestServer {
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let server = Server::new(config)
        .tool(Fail)
        .tool(Explode)
        .tool(Picture)
        .tool(WaitCancel {
            saw_cancel: saw_cancel.clone(),
        })
        .start_local()
        .await
        .expect("server starts");
    let channel = connect(server.local_addr()).await;
    TestServer {
        client: ToolGateClient::new(channel.clone()),
        channel,
        server,
        saw_cancel,
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

/// A request with these calls (any JSON shapes) and default options.
pub fn request(calls: Value) -> pb::DispatchBatchRequest {
    let Value::Array(calls) = calls else {
        panic!("calls must be an array")
    };
    pb::DispatchBatchRequest {
        calls: calls.iter().map(value_from_json).collect(),
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

pub fn json_of(value: &Option<prost_types::Value>) -> Value {
    value.as_ref().map(to_json).unwrap_or(Value::Null)
}

pub fn messages_json(result: &pb::BatchResult) -> Value {
    Value::Array(
        result
            .messages
            .iter()
            .map(|m| {
                to_json(&prost_types::Value {
                    kind: Some(prost_types::value::Kind::StructValue(m.clone())),
                })
            })
            .collect(),
    )
}

pub fn class(r: &pb::CallResult) -> pb::ErrorClass {
    pb::ErrorClass::try_from(r.error_class).expect("known class")
}

/// Always fails with a tool error.
struct Fail;

impl Tool for Fail {
    fn name(&self) -> &str {
        "fail"
    }
    fn description(&self) -> &str {
        "fails"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn call<'a>(
        &'a self,
        _input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async { Err(ToolError::failed("disk on fire")) })
    }
}

/// Panics with the input's `message`.
struct Explode;

impl Tool for Explode {
    fn name(&self) -> &str {
        "explode"
    }
    fn description(&self) -> &str {
        "panics"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn call<'a>(
        &'a self,
        input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let message = input["message"].as_str().unwrap_or("boom").to_owned();
            panic!("{message}");
        })
    }
}

/// Returns text and an image.
struct Picture;

impl Tool for Picture {
    fn name(&self) -> &str {
        "picture"
    }
    fn description(&self) -> &str {
        "returns a caption and a 1x1 PNG"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn call<'a>(
        &'a self,
        _input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async {
            Ok(ToolOutput::Parts(vec![
                ContentPart::Text("a red dot".into()),
                ContentPart::Image {
                    mime_type: "image/png".into(),
                    data: "iVBORw0KGgo=".into(),
                },
            ]))
        })
    }
}

/// Waits until cancelled, recording that its token fired.
struct WaitCancel {
    saw_cancel: Arc<AtomicBool>,
}

impl Tool for WaitCancel {
    fn name(&self) -> &str {
        "wait_cancel"
    }
    fn description(&self) -> &str {
        "waits for cancellation"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn call<'a>(
        &'a self,
        _input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let token = ctx.cancel.clone();
        let flag = self.saw_cancel.clone();
        // Watch the token from a detached task: the tool's own future is dropped on cancel.
        tokio::spawn(async move {
            token.cancelled().await;
            flag.store(true, Ordering::SeqCst);
        });
        Box::pin(std::future::pending())
    }
}
