//! The `toolgate approvals` command (a client, so it lives at the gRPC boundary): list, watch, approve and deny a running server's pending approvals, for
//! a person at a terminal. A thin client of the public API (`ListApprovals`, `WatchApprovals`,
//! `ResolveApproval`), over plaintext or TLS (with a client certificate), with a bearer token
//! read from an environment variable.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use toolgate_proto::pb;
use toolgate_proto::pb::resolve_approval_request::{Decision, Remember};
use toolgate_proto::pb::tool_gate_client::ToolGateClient;

/// Why the command could not do what it was asked; its text is what the person at the terminal
/// reads.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{addr}: not an address: {reason}")]
    Address { addr: String, reason: String },
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--tls-cert and --tls-key go together")]
    HalfIdentity,
    #[error("TLS: {0}")]
    Tls(#[source] tonic::transport::Error),
    #[error("{addr}: cannot connect: {reason}")]
    Connect { addr: String, reason: String },
    #[error("${0} is not set")]
    TokenUnset(String),
    #[error("${0} does not hold a usable token")]
    TokenUnusable(String),
    #[error("--arguments must be a JSON object")]
    ArgumentsNotObject,
    #[error("--arguments is not JSON: {0}")]
    ArgumentsNotJson(#[source] serde_json::Error),
    /// The server refused or failed the request.
    #[error("{:?}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
}

/// How to reach the server.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// `host:port`.
    pub addr: String,
    /// The name of an environment variable holding a bearer token.
    pub token_env: Option<String>,
    /// PEM CA certificates that verify the server (TLS on).
    pub tls_ca: Option<PathBuf>,
    /// A PEM client certificate and key (mTLS).
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// The name the server's certificate is checked against (default: the address's host).
    pub tls_server_name: Option<String>,
    pub timeout: Duration,
}

/// What to do.
#[derive(Debug, Clone)]
pub enum Action {
    List {
        session: Option<String>,
    },
    Watch {
        session: Option<String>,
    },
    Resolve {
        id: String,
        approve: bool,
        reason: String,
        /// A JSON object the call runs with instead (approve only).
        arguments: Option<String>,
        remember_session: bool,
    },
}

/// Runs `action` against `target`, printing what it finds; the error is what went wrong.
pub async fn run(
    target: &Target,
    action: Action,
    out: &mut dyn FnMut(&str),
) -> Result<(), CliError> {
    let mut client = client(target).await?;
    match action {
        Action::List { session } => {
            let request = pb::ListApprovalsRequest {
                session_id: session.unwrap_or_default(),
                ..Default::default()
            };
            let listed = client.list_approvals(request).await?;
            let approvals = listed.into_inner().approvals;
            if approvals.is_empty() {
                out("no pending approvals");
            }
            for approval in &approvals {
                out(&describe(approval));
            }
            Ok(())
        }
        Action::Watch { session } => {
            let request = pb::WatchApprovalsRequest {
                session_id: session.unwrap_or_default(),
            };
            let mut updates = client.watch_approvals(request).await?.into_inner();
            while let Some(update) = updates.next().await {
                use pb::watch_approvals_response::Update;
                match update?.update {
                    Some(Update::Requested(approval)) => out(&describe(&approval)),
                    Some(Update::Resolved(ended)) => out(&ended_line(&ended)),
                    None => {}
                }
            }
            Ok(())
        }
        Action::Resolve {
            id,
            approve,
            reason,
            arguments,
            remember_session,
        } => {
            let updated_arguments = match arguments {
                None => None,
                Some(text) => match serde_json::from_str::<serde_json::Value>(&text) {
                    Ok(serde_json::Value::Object(map)) => {
                        Some(toolgate_proto::protojson::Struct::from(map))
                    }
                    Ok(_) => return Err(CliError::ArgumentsNotObject),
                    Err(e) => return Err(CliError::ArgumentsNotJson(e)),
                },
            };
            let decision = if approve {
                Decision::Approve
            } else {
                Decision::Deny
            };
            let remember = if remember_session {
                Remember::Session
            } else {
                Remember::Once
            };
            let request = pb::ResolveApprovalRequest {
                approval_id: id.clone(),
                decision: decision.into(),
                reason,
                updated_arguments,
                remember: remember.into(),
            };
            let resolved = client.resolve_approval(request).await?;
            let verb = if approve { "approved" } else { "denied" };
            match resolved.into_inner().approval {
                Some(a) => out(&format!(
                    "{verb} {id}: {} (call {}, session {})",
                    a.tool, a.id, a.session_id
                )),
                None => out(&format!("{verb} {id}")),
            }
            Ok(())
        }
    }
}

/// Sends `authorization: Bearer <token>` on every call, when there is a token.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", token.clone());
        }
        Ok(request)
    }
}

/// A `ToolGate` client of `target`, sending its token.
pub type Client = ToolGateClient<InterceptedService<Channel, Bearer>>;

/// Connects to `target`, with the token its variable holds.
pub async fn client(target: &Target) -> Result<Client, CliError> {
    let channel = connect(target).await?;
    let token = match &target.token_env {
        Some(var) => {
            let token = std::env::var(var).map_err(|_| CliError::TokenUnset(var.clone()))?;
            let value: MetadataValue<_> = format!("Bearer {token}")
                .parse()
                .map_err(|_| CliError::TokenUnusable(var.clone()))?;
            Some(value)
        }
        None => None,
    };
    Ok(ToolGateClient::with_interceptor(channel, Bearer(token)))
}

async fn connect(target: &Target) -> Result<Channel, CliError> {
    let tls = target.tls_ca.is_some() || target.tls_cert.is_some();
    let scheme = if tls { "https" } else { "http" };
    let uri = format!("{scheme}://{}", target.addr);
    let mut endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| CliError::Address {
            addr: target.addr.clone(),
            reason: e.to_string(),
        })?
        .connect_timeout(target.timeout);
    if tls {
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &target.tls_ca {
            config = config.ca_certificate(Certificate::from_pem(read(ca)?));
        } else {
            config = config.with_native_roots();
        }
        match (&target.tls_cert, &target.tls_key) {
            (Some(cert), Some(key)) => {
                config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            (None, None) => {}
            _ => return Err(CliError::HalfIdentity),
        }
        if let Some(name) = &target.tls_server_name {
            config = config.domain_name(name.clone());
        }
        endpoint = endpoint.tls_config(config).map_err(CliError::Tls)?;
    }
    endpoint.connect().await.map_err(|e| CliError::Connect {
        addr: target.addr.clone(),
        reason: crate::telemetry::error_chain(&e),
    })
}

fn read(path: &PathBuf) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|source| CliError::Read {
        path: path.clone(),
        source,
    })
}

/// One pending approval, on one line.
fn describe(approval: &pb::Approval) -> String {
    let arguments = approval
        .arguments
        .as_ref()
        .map_or_else(|| "null".to_owned(), |v| v.json().to_string());
    let left = approval
        .expires_at
        .and_then(|t| SystemTime::try_from(t).ok())
        .and_then(|t| t.duration_since(SystemTime::now()).ok())
        .map_or_else(
            || "expiring".to_owned(),
            |d| {
                format!(
                    "expires in {}",
                    toolgate_core::duration::readable(Duration::from_secs(d.as_secs()))
                )
            },
        );
    format!(
        "{}  session={} call={} tool={} asked_by={} ({}), {left}\n    reason: {}\n    arguments: {arguments}",
        approval.approval_id,
        approval.session_id,
        approval.id,
        approval.tool,
        approval.source,
        approval.requested_by,
        approval.reason,
    )
}

/// How an approval ended, on one line.
fn ended_line(ended: &pb::ApprovalResolved) -> String {
    use pb::approval_resolved::How;
    let how = match How::try_from(ended.how) {
        Ok(How::Answered) => match Decision::try_from(ended.decision) {
            Ok(Decision::Approve) => format!("approved by {}", ended.resolved_by),
            _ => format!("denied by {}", ended.resolved_by),
        },
        Ok(How::Remembered) => "answered by a remembered decision".to_owned(),
        Ok(How::Expired) => "expired".to_owned(),
        Ok(How::Withdrawn) | Err(_) => "withdrawn (its batch went away)".to_owned(),
    };
    let id = if ended.approval_id.is_empty() {
        "-"
    } else {
        &ended.approval_id
    };
    format!(
        "{id}  {how}: session={} call={} tool={}",
        ended.session_id, ended.id, ended.tool
    )
}
