//! The MCP front door: toolgate as an MCP server over streamable HTTP (rmcp's server, served on
//! our own hyper), so that any MCP client gets the tools toolgate guards. `tools/call` runs one
//! call through the pipeline `DispatchBatch` runs, as a batch of one, admitted through the same
//! entry (`front::entry`) and judged by the same `[auth]` (`front::auth`); `tools/list` shows
//! the tools the caller may call, as `ListTools` names them. See docs/mcp.md.

pub(crate) mod approvals;
mod fast;
mod gate;
pub(crate) mod handler;
mod listener;
mod owners;
pub(crate) mod shape;

use std::sync::Arc;

use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::front::auth::Authenticator;
use crate::front::budget::ByteBudget;
use crate::front::entry::Entry;
use crate::front::tls::Tls;
use crate::store::mcp::McpSessions;
use toolgate_core::calls::IntakeLimits;
use toolgate_core::dispatch::Dispatcher;
use toolgate_core::identity::{Caller, Method, Role};
use toolgate_core::metrics::Metrics;
use toolgate_core::trace::Tracer;

/// What rmcp answers an HTTP request with, and so what the gate and the fast path answer with.
type Reply =
    http::Response<http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>>;

/// What the MCP front is served with (over stdio, `auth` and `tls` are not used).
pub struct McpParts {
    pub dispatcher: Dispatcher,
    pub entry: Arc<Entry>,
    pub metrics: Arc<Metrics>,
    pub tracer: Tracer,
    /// With `sessions.store`: 2025-11-25 sessions and their owners, shared with the other
    /// replicas.
    pub shared: Option<Arc<McpSessions>>,
    /// Request bytes being received, server-wide (the gRPC transport's budget).
    pub requests: Arc<ByteBudget>,
    pub auth: Arc<Authenticator>,
    pub tls: Option<Tls>,
}

/// The handler's shared state for `config`.
fn shared(
    config: &Config,
    parts: &McpParts,
    stdio_caller: Option<Arc<Caller>>,
) -> Arc<handler::Shared> {
    Arc::new(handler::Shared {
        dispatcher: parts.dispatcher.clone(),
        entry: parts.entry.clone(),
        metrics: parts.metrics.clone(),
        tracer: parts.tracer.clone(),
        intake: IntakeLimits {
            max_json_depth: config.limits.max_json_depth,
        },
        page_size: config.mcp.page_size,
        parked: approvals::Parked::new(
            config.approvals.timeout,
            config.dispatch.max_call_timeout,
            parts.shared.clone(),
        ),
        asking: Default::default(),
        store: parts.shared.clone(),
        stdio_caller,
    })
}

/// Serves MCP on `listener` until `stop` fires.
pub async fn serve(
    listener: TcpListener,
    config: &Config,
    parts: McpParts,
    stop: CancellationToken,
) {
    let mcp = &config.mcp;
    let shared = shared(config, &parts, None);
    // A stateless request whose handler sends nothing before its result is answered as one
    // JSON body rather than an event stream (it falls back to a stream when progress or a
    // question comes first).
    let mut http = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_cancellation_token(stop.child_token())
        .with_max_request_body_bytes(config.server.max_message_bytes);
    http = if mcp.allowed_hosts.iter().any(|h| h == "*") {
        http.disable_allowed_hosts()
    } else {
        http.with_allowed_hosts(mcp.allowed_hosts.iter().cloned())
    };
    http = http
        .with_allowed_origins(mcp.allowed_origins.iter().cloned())
        .enforce_origin_validation();
    if let Some(shared) = &parts.shared {
        http.session_store = Some(shared.clone());
    }
    let sessions = Arc::new(LocalSessionManager::default());
    let front = handler::Front(shared);
    let made = front.clone();
    let service = StreamableHttpService::new(move || Ok(made.clone()), sessions.clone(), http);
    let gates = Arc::new(gate::Gates {
        auth: parts.auth,
        path: mcp.path.clone(),
        resource: mcp.resource.clone(),
        authorization_servers: mcp.authorization_servers.clone(),
        service,
        front,
        sessions,
        owners: Default::default(),
        shared: parts.shared.clone(),
        max_sessions: mcp.max_sessions,
        allowed_hosts: crate::front::hosts::allowed(&mcp.allowed_hosts),
        requests: parts.requests.clone(),
        entry: parts.entry.clone(),
        max_body: config.server.max_message_bytes,
        stall: config.server.stall_timeout,
    });
    let bounds = listener::Bounds {
        max_connections: config.server.max_connections,
        max_connections_per_address: config.server.max_connections_per_address,
    };
    listener::serve(listener, parts.tls, gates, bounds, stop).await;
}

/// Why MCP over stdio ended other than by the client closing stdin.
#[derive(Debug, thiserror::Error)]
#[error("MCP over stdio: {0}")]
pub struct StdioError(String);

/// Serves MCP over this process's stdin and stdout (`toolgate mcp --config`) until the client
/// closes stdin. The caller is whoever started the process: `[auth]`'s anonymous tenant and
/// roles. Nothing but MCP messages is written to stdout.
pub async fn serve_stdio(config: &Config, parts: &McpParts) -> Result<(), StdioError> {
    use rmcp::ServiceExt as _;
    let caller = Arc::new(Caller {
        id: "stdio".to_owned(),
        tenant: config.auth.anonymous_tenant.clone(),
        roles: config
            .auth
            .anonymous_roles
            .iter()
            .filter_map(|name| Role::parse(name))
            .collect(),
        method: Method::Anonymous,
    });
    let front = handler::Front(shared(config, parts, Some(caller)));
    let running = front
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| StdioError(e.to_string()))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| StdioError(e.to_string()))
}
