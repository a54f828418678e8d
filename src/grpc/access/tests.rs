//! The access layer: deny by default (a method with no rule never reaches its service), every
//! served method has a rule, and open methods need no credentials.

use std::sync::atomic::{AtomicUsize, Ordering};

use tower::ServiceExt as _;

use super::*;
use crate::config::{Anonymous, AuthConfig};

/// A service toolgate does not have, counting the requests that reach it; it answers OK with
/// the id of the caller the layer admitted, if any, as the status message.
#[derive(Clone, Default)]
struct Fake {
    reached: Arc<AtomicUsize>,
}

impl tonic::server::NamedService for Fake {
    const NAME: &'static str = "toolgate.v1.Fake";
}

impl tower::Service<http::Request<Body>> for Fake {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        self.reached.fetch_add(1, Ordering::SeqCst);
        let caller = request.extensions().get::<Arc<Caller>>();
        let id = caller.map(|c| c.id.clone()).unwrap_or_default();
        ready(Ok(Status::ok(id).into_http()))
    }
}

fn request(path: &str) -> http::Request<Body> {
    http::Request::builder()
        .uri(format!("http://toolgate{path}"))
        .header("content-type", "application/grpc")
        .body(Body::empty())
        .unwrap()
}

/// A request from a loopback client, as the transport records its connection.
fn local(path: &str) -> http::Request<Body> {
    let mut request = request(path);
    request
        .extensions_mut()
        .insert(tonic::transport::server::TcpConnectInfo {
            local_addr: None,
            remote_addr: Some("127.0.0.1:40000".parse().unwrap()),
        });
    request
}

fn grpc_status(response: &http::Response<Body>) -> Option<&str> {
    response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
}

async fn authenticator(anonymous: Anonymous) -> Arc<Authenticator> {
    let config = AuthConfig {
        anonymous,
        ..AuthConfig::default()
    };
    Arc::new(Authenticator::from_config(&config).await.unwrap())
}

#[tokio::test]
async fn a_method_without_a_rule_never_reaches_its_service() {
    let fake = Fake::default();
    let routes = tonic::service::Routes::new(fake.clone()).prepare();
    // The fake is served: without the layer, its method is reached.
    let answered = routes
        .clone()
        .oneshot(local("/toolgate.v1.Fake/Do"))
        .await
        .unwrap();
    assert_eq!(grpc_status(&answered), Some("0"));
    assert_eq!(fake.reached.load(Ordering::SeqCst), 1);

    // Behind it, not even an admin from loopback gets through: no rule, no entry.
    let open = Arc::new(Authenticator::open());
    let gated = Authorized::new(routes, open, Tracer::off());
    let refused = gated.oneshot(local("/toolgate.v1.Fake/Do")).await.unwrap();
    assert_eq!(grpc_status(&refused), Some("12"), "UNIMPLEMENTED");
    assert_eq!(fake.reached.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_caller_is_judged_before_the_service_and_rides_in_the_request() {
    let fake = Fake::default();
    let gated = Authorized::new(
        fake.clone(),
        authenticator(Anonymous::Loopback).await,
        Tracer::off(),
    );
    let dispatched = gated
        .clone()
        .oneshot(local("/toolgate.v1.ToolGate/Dispatch"))
        .await
        .unwrap();
    assert_eq!(grpc_status(&dispatched), Some("0"));
    assert_eq!(
        dispatched.headers().get("grpc-message").unwrap(),
        "anonymous"
    );
    // The anonymous caller is an agent: an admin method is refused before the service.
    let health = gated
        .clone()
        .oneshot(local("/toolgate.v1.ToolGate/GetToolHealth"))
        .await
        .unwrap();
    assert_eq!(grpc_status(&health), Some("7"), "PERMISSION_DENIED");
    // No connection recorded: not loopback, so no anonymous caller.
    let remote = gated
        .clone()
        .oneshot(request("/toolgate.v1.ToolGate/Dispatch"))
        .await
        .unwrap();
    assert_eq!(grpc_status(&remote), Some("16"), "UNAUTHENTICATED");
    assert_eq!(
        fake.reached.load(Ordering::SeqCst),
        1,
        "only the admitted request reached the service"
    );
}

#[tokio::test]
async fn health_and_reflection_need_no_credentials() {
    let gated = Authorized::new(
        Fake::default(),
        authenticator(Anonymous::None).await,
        Tracer::off(),
    );
    for rule in RULES.iter().filter(|r| r.access == Access::Open) {
        let answered = gated.clone().oneshot(request(rule.path)).await.unwrap();
        assert_eq!(grpc_status(&answered), Some("0"), "{}", rule.path);
    }
    let dispatched = gated
        .oneshot(request("/toolgate.v1.ToolGate/Dispatch"))
        .await
        .unwrap();
    assert_eq!(grpc_status(&dispatched), Some("16"), "UNAUTHENTICATED");
}

/// The roles and audit lines each RPC has always had, written out: a change to the table must
/// change this too.
#[test]
fn each_rpc_needs_the_role_it_always_needed() {
    let table: Vec<(&str, Access, bool)> = RULES
        .iter()
        .map(|r| (r.name(), r.access, r.audited))
        .collect();
    let agent = Access::Role(Role::Agent);
    let admin = Access::Role(Role::Admin);
    let approvals = Access::Either(Role::Agent, Role::Approver);
    assert_eq!(
        table,
        [
            ("DispatchBatch", agent, false),
            ("Dispatch", agent, false),
            ("ListTools", agent, false),
            ("GetSessionMemory", agent, false),
            ("EndSession", agent, false),
            ("GetToolHealth", admin, false),
            ("RegisterRemote", admin, true),
            ("UnregisterRemote", admin, true),
            ("RefreshRemote", admin, true),
            ("AcceptToolChange", admin, true),
            ("ResolveApproval", approvals, false),
            ("ListApprovals", approvals, false),
            ("WatchApprovals", approvals, false),
            ("Check", Access::Open, false),
            ("Watch", Access::Open, false),
            ("ServerReflectionInfo", Access::Open, false),
            ("ServerReflectionInfo", Access::Open, false),
        ]
    );
    let traced: Vec<&str> = RULES.iter().filter(|r| r.traced).map(Rule::name).collect();
    assert_eq!(traced, ["DispatchBatch", "Dispatch"]);
}

#[test]
fn every_served_method_has_exactly_one_rule_and_every_rule_a_served_method() {
    let mut served = Vec::new();
    for set in crate::grpc::server::DESCRIPTOR_SETS {
        let set = <prost_types::FileDescriptorSet as prost::Message>::decode(*set).unwrap();
        for file in &set.file {
            for service in &file.service {
                let name = format!("{}.{}", file.package(), service.name());
                if !crate::grpc::server::SERVED.contains(&name.as_str()) {
                    continue;
                }
                for method in &service.method {
                    served.push(format!("/{name}/{}", method.name()));
                }
            }
        }
    }
    served.sort();
    served.dedup();
    let mut ruled: Vec<String> = RULES.iter().map(|r| r.path.to_owned()).collect();
    ruled.sort();
    assert_eq!(served, ruled);
}
