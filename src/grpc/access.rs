//! Authorization as one layer in front of every service: each request is judged against the
//! rule for its method path before any service sees it, and its caller rides in the request's
//! extensions. A path with no rule is refused (deny by default), so a new RPC that nobody gave
//! a rule is closed, not open.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{Either, Ready, ready};
use tonic::body::Body;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tonic::{Request, Status};

use super::rpc_span::RpcSpan;
use super::status::RequestError;
use crate::front::auth::{Authenticator, Credentials};
use toolgate_core::identity::{Caller, Role};
use toolgate_core::trace::Tracer;

/// Who may make an RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, with or without credentials (health checks, reflection).
    Open,
    /// A caller with this role (an admin may do everything an agent may).
    Role(Role),
    /// A caller with either role (or an admin).
    Either(Role, Role),
}

/// The rule for one method path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub path: &'static str,
    pub access: Access,
    /// Whether an allowed call is an audit line (`toolgate::audit`, "admin action").
    pub audited: bool,
    /// Whether the method has a server span (the dispatch RPCs), which a refusal here ends.
    pub traced: bool,
}

impl Rule {
    /// The method's name, for audit lines: the path's last segment.
    pub fn name(&self) -> &'static str {
        self.path.rsplit('/').next().unwrap_or(self.path)
    }
}

const fn rule(path: &'static str, access: Access, audited: bool) -> Rule {
    Rule {
        path,
        access,
        audited,
        traced: false,
    }
}

/// A dispatch RPC: an agent's, with a server span.
const fn traced(path: &'static str) -> Rule {
    Rule {
        traced: true,
        ..rule(path, AGENT, false)
    }
}

const AGENT: Access = Access::Role(Role::Agent);
/// An agent (for its own batches' approvals) or an approver; the registry decides which
/// approvals each may see and answer.
const APPROVALS: Access = Access::Either(Role::Agent, Role::Approver);
const ADMIN: Access = Access::Role(Role::Admin);

/// Every method toolgate serves, and who may call it. The one place access is decided.
pub(crate) const RULES: &[Rule] = &[
    traced("/toolgate.v1.ToolGate/DispatchBatch"),
    traced("/toolgate.v1.ToolGate/Dispatch"),
    rule("/toolgate.v1.ToolGate/ListTools", AGENT, false),
    rule("/toolgate.v1.ToolGate/GetSessionMemory", AGENT, false),
    rule("/toolgate.v1.ToolGate/EndSession", AGENT, false),
    rule("/toolgate.v1.ToolGate/GetToolHealth", ADMIN, false),
    rule("/toolgate.v1.ToolGate/RegisterRemote", ADMIN, true),
    rule("/toolgate.v1.ToolGate/UnregisterRemote", ADMIN, true),
    rule("/toolgate.v1.ToolGate/RefreshRemote", ADMIN, true),
    rule("/toolgate.v1.ToolGate/AcceptToolChange", ADMIN, true),
    rule("/toolgate.v1.ToolGate/ResolveApproval", APPROVALS, false),
    rule("/toolgate.v1.ToolGate/ListApprovals", APPROVALS, false),
    rule("/toolgate.v1.ToolGate/WatchApprovals", APPROVALS, false),
    rule("/grpc.health.v1.Health/Check", Access::Open, false),
    rule("/grpc.health.v1.Health/Watch", Access::Open, false),
    rule(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        Access::Open,
        false,
    ),
    rule(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        Access::Open,
        false,
    ),
];

/// The rule for `path`, if it has one.
pub(crate) fn rule_for(path: &str) -> Option<&'static Rule> {
    RULES.iter().find(|rule| rule.path == path)
}

/// A request's credentials, with the connection the transport recorded in its extensions
/// (plain or TLS, as tonic's own server records it).
fn credentials_of<B>(request: &http::Request<B>) -> Credentials<'_> {
    let extensions = request.extensions();
    let tls = extensions.get::<TlsConnectInfo<TcpConnectInfo>>();
    let peer = extensions
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| tls.and_then(|info| info.get_ref().remote_addr()));
    Credentials::new(
        request.headers(),
        peer,
        tls.and_then(TlsConnectInfo::peer_certs),
    )
}

/// The caller the access layer admitted `request` as. A request that did not pass through the
/// layer has none and is refused: a handler never runs for an unknown caller.
pub fn caller<T>(request: &Request<T>) -> Result<Arc<Caller>, RequestError> {
    request
        .extensions()
        .get::<Arc<Caller>>()
        .cloned()
        .ok_or_else(|| RequestError::Unauthenticated("no authenticated caller".to_owned()))
}

/// `inner` behind the access rules.
#[derive(Clone)]
pub(crate) struct Authorized<S> {
    inner: S,
    auth: Arc<Authenticator>,
    /// Where the span of a refused dispatch RPC is made (an admitted one's is the service's).
    tracer: Tracer,
}

impl<S> Authorized<S> {
    pub(crate) fn new(inner: S, auth: Arc<Authenticator>, tracer: Tracer) -> Self {
        Authorized {
            inner,
            auth,
            tracer,
        }
    }
}

impl<S> tower::Service<http::Request<Body>> for Authorized<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, Ready<Result<http::Response<Body>, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        // No rule: answered as tonic answers a method it does not have.
        let Some(rule) = rule_for(request.uri().path()) else {
            return Either::Right(ready(Ok(Status::unimplemented("").into_http())));
        };
        let needs: &[Role] = match &rule.access {
            Access::Open => return Either::Left(self.inner.call(request)),
            Access::Role(role) => std::slice::from_ref(role),
            Access::Either(one, other) => &[*one, *other],
        };
        let credentials = credentials_of(&request);
        match self
            .auth
            .authorize(&credentials, rule.name(), needs, rule.audited)
        {
            Ok(caller) => {
                request.extensions_mut().insert(caller);
                Either::Left(self.inner.call(request))
            }
            Err(refused) => {
                let status = Status::from(RequestError::from(refused));
                if rule.traced {
                    let span = RpcSpan::start(
                        &self.tracer,
                        rule.name(),
                        request.headers(),
                        credentials.peer(),
                    );
                    span.finish(status.code(), status.message());
                }
                Either::Right(ready(Ok(status.into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests;
