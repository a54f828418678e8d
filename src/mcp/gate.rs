//! The HTTP gate in front of rmcp's streamable HTTP service: the protected-resource metadata
//! (RFC 9728), who calls (the `[auth]` every front shares: 401 with `resource_metadata`, 403),
//! and which caller owns each MCP session, so a session id learnt by another identity leads
//! nowhere. The caller it admitted and the connection go into the request's extensions for the
//! handler.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use parking_lot::Mutex;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rustls::pki_types::CertificateDer;
use url::Url;

use super::fast::FastCall;
use super::handler::{Connection, Front};
use super::owners::Owners;
use crate::front::admission::Holder;
use crate::front::auth::{Authenticator, Credentials, Denied};
use crate::front::budget::{ByteBudget, Full as BudgetFull, Held, Share};
use crate::front::entry::Entry;
use crate::front::hosts::{self, HostRefused};
use crate::store::mcp::McpSessions;
use toolgate_core::identity::Role;

use super::Reply;

/// Where the protected-resource metadata of a resource is (RFC 9728 §3.1).
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// What every connection's gate shares.
pub(super) struct Gates {
    pub auth: Arc<Authenticator>,
    pub path: String,
    /// `mcp.resource`: the endpoint's canonical URL, when configured.
    pub resource: Option<Url>,
    pub authorization_servers: Vec<String>,
    pub service: StreamableHttpService<Front, LocalSessionManager>,
    /// The handler, for an elicitation's answer another replica asked for.
    pub front: Front,
    pub sessions: Arc<LocalSessionManager>,
    /// Each live MCP session's owner (`method:tenant/id`), as this replica knows it.
    pub owners: Mutex<Owners>,
    /// The owners every replica knows, with `sessions.store`.
    pub shared: Option<Arc<McpSessions>>,
    /// The most MCP sessions open at once.
    pub max_sessions: usize,
    /// `mcp.allowed_hosts`; `None`: any host (`["*"]`).
    pub allowed_hosts: Option<Vec<String>>,
    /// Request bytes being received, server-wide (shared with gRPC) and per connection.
    pub requests: Arc<ByteBudget>,
    /// What requests hold once parsed, and the server's draining: the entry every front shares.
    pub entry: Arc<Entry>,
    /// The most a request body may be (`server.max_message_bytes`).
    pub max_body: usize,
    /// How long a request body may stop arriving (`server.stall_timeout`).
    pub stall: Duration,
}

/// The gate of one connection.
#[derive(Clone)]
pub(super) struct Gate {
    pub shared: Arc<Gates>,
    pub connection: Connection,
    /// The client's certificate chain, over TLS with client certificates.
    pub certificates: Option<Arc<Vec<CertificateDer<'static>>>>,
    /// Whether the connection is TLS (for the URLs the gate names).
    pub tls: bool,
    /// This connection's share of the request bytes being received.
    pub share: Arc<Share>,
}

impl<B> tower::Service<Request<B>> for Gate
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::fmt::Display,
{
    type Response = Reply;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Reply, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let gate = self.clone();
        Box::pin(async move { Ok(gate.serve(request).await) })
    }
}

impl Gate {
    async fn serve<B>(self, request: Request<B>) -> Reply
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        let shared = &self.shared;
        // Before anything answers with a URL made from it (the challenge, the metadata): a Host
        // this server does not go by is refused, as rmcp would refuse it on the endpoint.
        if let Some(refused) = self.host_refused(&request) {
            return refused;
        }
        let path = request.uri().path();
        if path == METADATA_PATH || path.strip_prefix(METADATA_PATH) == Some(shared.path.as_str()) {
            return self.metadata(&request);
        }
        if path != shared.path {
            return plain(
                StatusCode::NOT_FOUND,
                "not found: the MCP endpoint is elsewhere",
            );
        }
        let credentials = Credentials::new(
            request.headers(),
            Some(self.connection.peer),
            self.certificates.clone(),
        );
        let audience = shared.resource.as_ref().map(Url::as_str);
        let caller =
            match shared
                .auth
                .authorize_for(&credentials, audience, "mcp", &[Role::Agent], false)
            {
                Ok(caller) => caller,
                Err(denied) => return self.denied(&request, denied),
            };
        let owner = super::owners::owner_key(&caller);
        let session = request
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // A session another identity opened is, to this caller, a session that does not exist.
        if let Some(id) = &session
            && !self.owned_by(id, &owner).await
        {
            return plain(StatusCode::NOT_FOUND, "session not found");
        }
        let deleting = request.method() == Method::DELETE;
        // The body is read here, within the request-bytes budgets and the stall timeout, and
        // weighed as the decoded-bytes budgets weigh a gRPC request, before rmcp parses it.
        let (mut parts, body) = request.into_parts();
        let (body, received) = match self.read_body(&parts, body).await {
            Ok(read) => read,
            Err(reply) => return reply,
        };
        let holder = Holder::new(Some(self.connection.peer), &caller);
        // rmcp holds the parsed message and a copy of it as a JSON value.
        let weight = match std::str::from_utf8(&body) {
            Ok(text) => 2 * toolgate_core::json::text_held_bytes(text),
            Err(_) => body.len(),
        };
        let parsing = match shared.entry.weigh(&holder, weight) {
            Ok(parsing) => parsing,
            Err(turned) => return plain(StatusCode::SERVICE_UNAVAILABLE, &turned.to_string()),
        };
        // With a store, the answer to an elicitation another replica sent is taken here: rmcp
        // knows only the ones this replica sent.
        if let Some(id) = &session
            && shared.shared.is_some()
            && parts.method == Method::POST
            && let Some((request, answer)) = elicitation_answer(&body)
            && shared
                .front
                .answer_elsewhere(id, &request, &answer, &caller)
                .await
        {
            let mut reply = Response::new(full(String::new()));
            *reply.status_mut() = StatusCode::ACCEPTED;
            drop((parsing, received));
            return reply;
        }
        parts.extensions.insert(self.connection);
        // A stateless `tools/call` rmcp would answer with one JSON reply is served without it.
        if session.is_none()
            && let Some(call) = FastCall::take(&parts, &body)
        {
            drop(body);
            let reply = call.serve(&shared.front, parts, caller).await;
            drop((parsing, received));
            return reply;
        }
        parts.extensions.insert(caller);
        let request = Request::from_parts(parts, Full::new(body));
        let mut service = shared.service.clone();
        let reply = match tower::Service::call(&mut service, request).await {
            Ok(reply) => reply,
            Err(never) => match never {},
        };
        drop((parsing, received));
        match session {
            None => {
                if let Some(id) = reply
                    .headers()
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
                    && let Err(full) = self.admit_session(&id, &owner).await
                {
                    return full;
                }
            }
            Some(id) if deleting && reply.status().is_success() => {
                shared.owners.lock().remove(&id);
            }
            Some(_) => {}
        }
        reply
    }

    /// Whether session `id` is `owner`'s, or unknown (rmcp then answers 404). With a shared
    /// store, a session this replica has not seen is judged by the owner the store holds: one
    /// the store does not know, or cannot be asked about, is refused.
    async fn owned_by(&self, id: &str, owner: &str) -> bool {
        let shared = &self.shared;
        if let Some(known) = shared.owners.lock().get(id) {
            return known == owner;
        }
        let Some(store) = &shared.shared else {
            return true;
        };
        match store.owner(id).await {
            Ok(Some(stored)) if stored == owner => {
                shared.owners.lock().insert(id.to_owned(), stored);
                true
            }
            Ok(_) => false,
            Err(error) => {
                tracing::warn!(%error, "an MCP session's owner could not be read; the request is refused");
                false
            }
        }
    }

    /// Reads a request's body: at most `server.max_message_bytes` (413 beyond), each part
    /// arriving within `server.stall_timeout` (408 otherwise), every byte held against this
    /// connection's share and the server's request-bytes budget while it is read and parsed (503
    /// when one is full).
    async fn read_body<B>(
        &self,
        parts: &http::request::Parts,
        mut body: B,
    ) -> Result<(Bytes, Held), Reply>
    where
        B: http_body::Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let max = self.shared.max_body;
        let too_large = || {
            plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the request body is over {max} bytes (server.max_message_bytes)"),
            )
        };
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > max) {
            return Err(too_large());
        }
        let backlog = |full: BudgetFull| {
            let text = match full {
                BudgetFull::Connection(n) => format!(
                    "this connection's requests being received hold {n} bytes, its share (limits.max_buffered_request_bytes_per_connection)"
                ),
                BudgetFull::Server(n) => format!(
                    "the server holds {n} bytes of requests being received (limits.max_buffered_request_bytes); retry later"
                ),
            };
            plain(StatusCode::SERVICE_UNAVAILABLE, &text)
        };
        let mut held = self.share.take(0).map_err(backlog)?;
        let mut read = BytesMut::with_capacity(declared.unwrap_or(0).min(max));
        loop {
            let frame = match tokio::time::timeout(self.shared.stall, body.frame()).await {
                Ok(None) => break,
                Ok(Some(Ok(frame))) => frame,
                Ok(Some(Err(error))) => {
                    return Err(plain(
                        StatusCode::BAD_REQUEST,
                        &format!("the request body could not be read: {error}"),
                    ));
                }
                Err(_) => {
                    return Err(plain(
                        StatusCode::REQUEST_TIMEOUT,
                        &format!(
                            "the request body stopped arriving for {} (server.stall_timeout)",
                            toolgate_core::duration::readable(self.shared.stall)
                        ),
                    ));
                }
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if read.len() + data.len() > max {
                return Err(too_large());
            }
            held.grow(data.len()).map_err(backlog)?;
            read.extend_from_slice(&data);
        }
        Ok((read.freeze(), held))
    }

    /// Takes the session rmcp just opened (`initialize`) for `owner`, or closes it at once and
    /// answers 503 when it is one too many: past `mcp.max_sessions` on this replica, or past
    /// an identity's share of them (a quarter), so that one identity cannot take them all.
    /// Checked after the fact, whatever the request's headers claimed it was.
    async fn admit_session(&self, id: &str, owner: &str) -> Result<(), Reply> {
        let shared = &self.shared;
        let share = (shared.max_sessions / 4).max(1);
        let full = {
            let live = shared.sessions.sessions.read().await;
            let mut owners = shared.owners.lock();
            if owners.len() >= shared.max_sessions || owners.held_by(owner) >= share {
                owners.keep_only(|session| live.contains_key(session));
            }
            let full = live.len() > shared.max_sessions
                || owners.len() >= shared.max_sessions
                || owners.held_by(owner) >= share;
            if !full {
                owners.insert(id.to_owned(), owner.to_owned());
            }
            full
        };
        if full {
            let session: rmcp::transport::streamable_http_server::SessionId = id.into();
            let _ = rmcp::transport::streamable_http_server::SessionManager::close_session(
                shared.sessions.as_ref(),
                &session,
            )
            .await;
            return Err(plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many MCP sessions are open (mcp.max_sessions, a quarter per identity); end sessions you no longer use (DELETE), or retry later",
            ));
        }
        if let Some(store) = &shared.shared
            && let Err(error) = store.set_owner(id, owner).await
        {
            // Another replica then cannot tell whose the session is, and refuses it.
            tracing::warn!(%error, "an MCP session's owner was not stored");
        }
        Ok(())
    }

    /// The refusal of a request whose `Host` is not a name this server goes by
    /// (`mcp.allowed_hosts`, against DNS rebinding) or, whatever the list, does not look like a
    /// host: it is written into URLs.
    fn host_refused<B>(&self, request: &Request<B>) -> Option<Reply> {
        let allowed = self.shared.allowed_hosts.as_deref();
        match hosts::check(request.headers(), allowed) {
            Ok(()) => None,
            // As rmcp refuses it when it checks hosts.
            Err(HostRefused::Missing) => Some(plain(
                StatusCode::BAD_REQUEST,
                "the request has no Host header",
            )),
            Err(HostRefused::Malformed) => Some(plain(
                StatusCode::BAD_REQUEST,
                "the Host header is not a host",
            )),
            Err(HostRefused::NotListed) => Some(plain(
                StatusCode::FORBIDDEN,
                "the Host header names a host this server does not go by (mcp.allowed_hosts)",
            )),
        }
    }

    /// The resource's canonical URL: `mcp.resource`, else the URL the client used.
    fn resource(&self, request: &Request<impl Sized>) -> String {
        if let Some(resource) = &self.shared.resource {
            return resource.to_string();
        }
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| request.uri().authority().map(|a| a.to_string()))
            .unwrap_or_else(|| self.connection.local.to_string());
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{host}{}", self.shared.path)
    }

    /// Where the metadata of the resource is: the well-known path with the resource's path
    /// after it (RFC 9728 §3.1).
    fn metadata_url(&self, request: &Request<impl Sized>) -> String {
        let resource = self.resource(request);
        match Url::parse(&resource) {
            Ok(url) => {
                let path = url.path().trim_end_matches('/');
                format!(
                    "{}{METADATA_PATH}{path}",
                    url.origin().ascii_serialization()
                )
            }
            Err(_) => resource,
        }
    }

    /// The protected-resource metadata document (RFC 9728 §2).
    fn metadata(&self, request: &Request<impl Sized>) -> Reply {
        if request.method() != Method::GET {
            let mut reply = plain(StatusCode::METHOD_NOT_ALLOWED, "GET only");
            reply
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET"));
            return reply;
        }
        let document = serde_json::json!({
            "resource": self.resource(request),
            "authorization_servers": self.shared.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "toolgate",
        });
        let mut reply = Response::new(full(document.to_string()));
        reply.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        reply
    }

    /// 401 with where to learn how to get a token, or 403 (MCP authorization; RFC 6750 §3).
    fn denied(&self, request: &Request<impl Sized>, denied: Denied) -> Reply {
        let sent_token = request.headers().contains_key(header::AUTHORIZATION);
        let metadata = self.metadata_url(request);
        let (status, text, challenge) = match denied {
            Denied::Unauthenticated(text) => {
                let error = if sent_token {
                    ", error=\"invalid_token\""
                } else {
                    ""
                };
                (
                    StatusCode::UNAUTHORIZED,
                    text,
                    format!("Bearer resource_metadata=\"{metadata}\"{error}"),
                )
            }
            Denied::PermissionDenied(text) => (
                StatusCode::FORBIDDEN,
                text,
                format!("Bearer error=\"insufficient_scope\", resource_metadata=\"{metadata}\""),
            ),
        };
        let mut reply = plain(status, &text);
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            reply.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        }
        reply
    }
}

/// Who owns a session: the caller's credential, tenant and identity.
/// The request id and result of a JSON-RPC response (what a client answers a server's request
/// with), if `body` is one.
fn elicitation_answer(body: &[u8]) -> Option<(String, serde_json::Value)> {
    #[derive(serde::Deserialize)]
    struct Peek {
        id: Option<rmcp::model::RequestId>,
        method: Option<serde::de::IgnoredAny>,
        result: Option<serde_json::Value>,
    }
    let peek: Peek = serde_json::from_slice(body).ok()?;
    match peek {
        Peek {
            id: Some(id),
            method: None,
            result: Some(result),
        } => Some((super::handler::request_key(&id), result)),
        _ => None,
    }
}

fn full(text: String) -> BoxBody<Bytes, Infallible> {
    Full::new(Bytes::from(text)).boxed()
}

/// A plain-text reply.
fn plain(status: StatusCode, text: &str) -> Reply {
    let mut reply = Response::new(full(format!("{text}\n")));
    *reply.status_mut() = status;
    reply.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    reply
}
