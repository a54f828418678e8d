//! A bare tonic relay for `scripts/bench-remote`: `ToolGate.Dispatch` of one call answered by
//! one `ToolWorker.Invoke`, with none of toolgate's pipeline.
//!
//! It is the floor of "one more gRPC hop" with the libraries toolgate uses (tonic server, tonic
//! client over a `Channel`, prost, mimalloc): the driver measures it like toolgate, so toolgate's
//! added latency splits into the hop and toolgate's own work. `--like-toolgate` sends the worker
//! what toolgate sends (the call's metadata fields, a deadline and a `traceparent`), so the
//! worker's share of the richer request shows too. Any call is relayed to `--tool`.
//!
//! Usage: `grpc_relay --worker HOST:PORT [--tool word_count] [--listen ADDR] [--like-toolgate]`;
//! prints `listening on ADDR` as its first stdout line, stops on SIGINT or SIGTERM.

use std::convert::Infallible;
use std::error::Error;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio_stream::StreamExt;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, http};
use tonic::server::{Grpc, NamedService};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use toolgate::pb::tool_worker_client::ToolWorkerClient;
use toolgate::{pb, protojson};

// The allocator toolgate's binary ships with, so the comparison measures work, not malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A trace context of the shape toolgate sends.
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let stop = async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    };
    let worker = arg("--worker").ok_or("--worker HOST:PORT is required")?;
    // Like toolgate's worker channel: tonic's defaults (TCP_NODELAY on), connected up front.
    let channel = Endpoint::from_shared(format!("http://{worker}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    let relay = Relay {
        client: ToolWorkerClient::new(channel),
        tool: arg("--tool").unwrap_or_else(|| "word_count".to_owned()),
        like_toolgate: std::env::args().any(|a| a == "--like-toolgate"),
    };
    let listener =
        tokio::net::TcpListener::bind(arg("--listen").unwrap_or_else(|| "127.0.0.1:0".to_owned()))
            .await?;
    report(&format!("listening on {}", listener.local_addr()?));
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    Server::builder()
        .add_service(relay)
        .serve_with_incoming_shutdown(incoming, stop)
        .await?;
    Ok(())
}

/// The relay service: routes `Dispatch` by path, like a generated `…Server`.
#[derive(Clone)]
struct Relay {
    client: ToolWorkerClient<Channel>,
    tool: String,
    like_toolgate: bool,
}

impl NamedService for Relay {
    const NAME: &'static str = "toolgate.v1.ToolGate";
}

impl tower::Service<http::Request<Body>> for Relay {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let relay = self.clone();
        match req.uri().path() {
            "/toolgate.v1.ToolGate/Dispatch" => Box::pin(async move {
                let mut grpc = Grpc::new(ProstCodec::default());
                Ok(grpc.unary(relay, req).await)
            }),
            _ => Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}

impl tower::Service<Request<pb::DispatchBatchRequest>> for Relay {
    type Response = Response<pb::BatchResult>;
    type Error = Status;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<pb::DispatchBatchRequest>) -> Self::Future {
        let relay = self.clone();
        Box::pin(async move {
            let call = request.into_inner().calls.into_iter().next();
            let success = relay.invoke(call).await?;
            Ok(Response::new(pb::BatchResult {
                results: vec![pb::CallResult {
                    id: "c".to_owned(),
                    success,
                    ..Default::default()
                }],
                count: 1,
                all_succeeded: success,
                ..Default::default()
            }))
        })
    }
}

impl Relay {
    /// Runs the call's arguments on the worker, reading its stream to the end like toolgate;
    /// answers whether the result was a success.
    async fn invoke(mut self, call: Option<protojson::Value>) -> Result<bool, Status> {
        let call = match call.map(protojson::Value::into_json) {
            Some(serde_json::Value::Object(call)) => call,
            _ => serde_json::Map::new(),
        };
        let input = match call.get("arguments") {
            Some(serde_json::Value::Object(a)) => Some(a.clone()),
            _ => None,
        };
        let mut invoke = pb::InvokeRequest {
            tool: self.tool.clone(),
            call_id: "c".to_owned(),
            input: input.clone().map(protojson::Struct::from),
            ..Default::default()
        };
        if self.like_toolgate {
            invoke.tool_arguments =
                input.map(|i| protojson::Value::from(serde_json::Value::Object(i)));
            invoke.tool_call = Some(protojson::Struct::from(call));
            invoke.tool_name = self.tool.clone();
            invoke.tool_call_id = "c".to_owned();
            invoke.session_id = "0123456789abcdef0123456789abcdef".to_owned();
        }
        let mut request = Request::new(invoke);
        if self.like_toolgate {
            request.set_timeout(Duration::from_secs(30));
            if let Ok(value) = TRACEPARENT.parse() {
                request.metadata_mut().insert("traceparent", value);
            }
        }
        let mut stream = self.client.invoke(request).await?.into_inner();
        let mut success = false;
        while let Some(event) = stream.next().await {
            if let Some(pb::invoke_event::Event::Result(r)) = event?.event {
                success = !r.is_error;
            }
        }
        Ok(success)
    }
}

/// The value after `name` on the command line.
fn arg(name: &str) -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == name {
            return args.next();
        }
    }
    None
}

/// The one stdout line the script waits for.
#[allow(clippy::print_stdout)]
fn report(line: &str) {
    println!("{line}");
}
