//! A bare tonic unary echo server: the baseline `scripts/bench-grpc` measures toolgate against.
//!
//! Two unary methods, written by hand the way tonic codegen writes them (there is no .proto):
//! `/bench.Echo/Echo` answers the request (a `google.protobuf.Value`) unchanged and counts it;
//! `/bench.Echo/Count` ignores its request and answers the number of echoes served so far as a
//! `Value` number, so the script can check that every request h2load saw answered was echoed.
//!
//! Usage: `grpc_echo [--listen ADDR] [--store redis://HOST:PORT/DB [--store-ping]]` (default
//! `127.0.0.1:0`). Prints `listening on ADDR` as its first stdout line, accepts connections with
//! TCP_NODELAY like toolgate, stops on SIGINT or SIGTERM. Other arguments (`cargo bench` passes
//! `--bench`) are ignored.
//!
//! With `--store`, every echo also does what a 1-call named batch asks of toolgate's Redis
//! session store, through the store itself (`toolgate::store::RedisStore`): a load, then a save
//! of one loop-window slot and one memory entry, in session `bench:echo`. That is the floor of a
//! Redis-backed batch through tonic on this machine: tonic, redis-rs and Redis, no toolgate
//! pipeline. With `--store-ping` the two round trips are the store's `PING` instead, the floor
//! of redis-rs and Redis alone (no scripts).

use std::convert::Infallible;
use std::error::Error;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use prost_types::Value;
use prost_types::value::Kind;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tonic::body::Body;
use tonic::codegen::{BoxFuture, http};
use tonic::server::{Grpc, NamedService};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use toolgate::store::{RedisSettings, RedisStore};
use toolgate_core::safety::detector::{Change, SLOT_BYTES};
use toolgate_core::session::{Changes, SessionStore, StoreError};

// The allocator toolgate's binary ships with, so the ratio measures toolgate's work, not malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    // Handlers first: a SIGTERM sent as soon as `listening on` appears must stop us cleanly.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let stop = async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    };
    let listener = tokio::net::TcpListener::bind(listen_addr()).await?;
    report(&format!("listening on {}", listener.local_addr()?));
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let echo = Echo {
        served: Arc::default(),
        store: store()?.map(Arc::new),
    };
    Server::builder()
        .add_service(echo)
        .serve_with_incoming_shutdown(incoming, stop)
        .await?;
    Ok(())
}

/// The `bench.Echo` service: routes by path, like a generated `…Server`.
#[derive(Clone)]
struct Echo {
    served: Arc<AtomicU64>,
    store: Option<Arc<Store>>,
}

/// A Redis session store, and what each echo asks of it.
struct Store {
    redis: RedisStore,
    ping_only: bool,
}

impl Store {
    /// A 1-call named batch's two round trips (or two `PING`s).
    async fn batch(&self) -> Result<(), Status> {
        if self.ping_only {
            self.redis.ping().await;
            self.redis.ping().await;
            return if self.redis.reachable() {
                Ok(())
            } else {
                Err(Status::unavailable("redis did not answer PING"))
            };
        }
        let unavailable = |e: StoreError| Status::unavailable(e.to_string());
        let loaded = self
            .redis
            .load("bench", "echo")
            .await
            .map_err(unavailable)?;
        let changes = Changes {
            generation: loaded.generation,
            window: vec![Change::Pushed([b's'; SLOT_BYTES])],
            memory: vec![
                r#"tool=echo; input={"text":"hello from h2load"}; result={"text":"hello from h2load"}"#
                    .to_owned(),
            ],
        };
        self.redis
            .save("bench", "echo", changes)
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

/// The store `--store URL` names (with the embedded default config's session settings), if any.
fn store() -> Result<Option<Store>, Box<dyn Error>> {
    let Some(url) = flag("--store") else {
        return Ok(None);
    };
    let settings = RedisSettings {
        url: url::Url::parse(&url)?,
        password: None,
        cluster: false,
        ca: None,
        timeout: Duration::from_secs(2),
        idle_ttl: Duration::from_secs(1800),
        loop_window: 100,
        memory_entries: 100,
        max_sessions: 10_000,
        tenant_scratch_bytes: 64 * 1024 * 1024,
        tenant_memory_bytes: 32 * 1024 * 1024,
    };
    Ok(Some(Store {
        redis: RedisStore::new(settings, Arc::default())?,
        ping_only: std::env::args().any(|a| a == "--store-ping"),
    }))
}

impl NamedService for Echo {
    const NAME: &'static str = "bench.Echo";
}

impl tower::Service<http::Request<Body>> for Echo {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let served = Arc::clone(&self.served);
        let store = self.store.clone();
        match req.uri().path() {
            "/bench.Echo/Echo" => Box::pin(async move {
                if let Some(store) = store
                    && let Err(status) = store.batch().await
                {
                    return Ok(status.into_http());
                }
                let mut grpc = Grpc::new(ProstCodec::default());
                Ok(grpc.unary(EchoMethod(served), req).await)
            }),
            "/bench.Echo/Count" => Box::pin(async move {
                let mut grpc = Grpc::new(ProstCodec::default());
                Ok(grpc.unary(CountMethod(served), req).await)
            }),
            _ => Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}

/// `/bench.Echo/Echo`: the request back, counted.
struct EchoMethod(Arc<AtomicU64>);

impl tower::Service<Request<Value>> for EchoMethod {
    type Response = Response<Value>;
    type Error = Status;
    type Future = Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Value>) -> Self::Future {
        self.0.fetch_add(1, Ordering::Relaxed);
        ready(Ok(Response::new(request.into_inner())))
    }
}

/// `/bench.Echo/Count`: the echoes served so far (exact up to 2^53).
struct CountMethod(Arc<AtomicU64>);

impl tower::Service<Request<Value>> for CountMethod {
    type Response = Response<Value>;
    type Error = Status;
    type Future = Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    #[allow(clippy::cast_precision_loss)]
    fn call(&mut self, _request: Request<Value>) -> Self::Future {
        let served = self.0.load(Ordering::Relaxed) as f64;
        ready(Ok(Response::new(Value {
            kind: Some(Kind::NumberValue(served)),
        })))
    }
}

/// `--listen ADDR` or `--listen=ADDR`, else any free port on loopback.
fn listen_addr() -> String {
    flag("--listen").unwrap_or_else(|| "127.0.0.1:0".to_owned())
}

/// The value of `NAME VALUE` or `NAME=VALUE` on the command line.
fn flag(name: &str) -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == name {
            return args.next();
        } else if let Some(value) = arg.strip_prefix(name).and_then(|v| v.strip_prefix('=')) {
            return Some(value.to_owned());
        }
    }
    None
}

/// The one stdout line the script waits for.
#[allow(clippy::print_stdout)]
fn report(line: &str) {
    println!("{line}");
}
