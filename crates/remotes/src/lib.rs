//! Remote tools and hooks: tools served by another process, and the pre/post-tool hook answered
//! by a gRPC service (`hook`). Remote tools: `spec` is a remote's definition, `manager`
//! the registry of connected remotes, `tool` what every remote tool shares (its definition and
//! the one `Tool` impl), and each protocol has one adapter (`worker`, `mcp`, `http`) that turns
//! a call into that protocol and its answer back into a tool output (`sse` is MCP's older
//! HTTP+SSE transport), and `signals` carries what adapters tell the manager. `tls` builds every HTTP client's TLS settings, `credentials` the bearer
//! token of a remote over HTTP (a variable, a file, OAuth client credentials).

mod assertion;
pub mod credentials;
pub mod hook;
pub mod http;
mod manager;
pub mod mcp;
mod mcp_http;
mod policy;
mod signals;
mod spec;
mod sse;
pub mod tls;
mod tool;
pub mod worker;

use toolgate_core::tools::RegistryError;

pub use hook::{GrpcHook, InvalidEndpoint};
pub use manager::{Contributed, Remotes};
pub use policy::{
    CommandRule, EgressRule, EgressRuleError, PatternError, RegistrationPolicy,
    RegistrationRefusal, anchored,
};
pub use signals::{Signal, Signals};
pub use spec::{
    AuthSpec, HttpToolDefinition, McpTransport, OAuthSpec, RemoteKind, RemoteSpec, SpecError,
    TlsSpec,
};

/// Why a remote could not be registered or removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    #[error("remote '{0}' is already registered")]
    Duplicate(String),
    #[error("no remote '{0}' is registered")]
    Unknown(String),
    #[error("remote '{name}' is invalid: {reason}")]
    Invalid { name: String, reason: String },
    #[error("remote '{name}' is unreachable: {reason}")]
    Unreachable { name: String, reason: String },
    #[error("remote '{name}': {source}")]
    Registry { name: String, source: RegistryError },
    #[error("tool '{0}' has no definition change awaiting approval")]
    NothingToAccept(String),
    /// The change awaiting approval is not the one the admin named.
    #[error(
        "tool '{tool}' now awaits approval of definition {awaiting}, not {reviewed}; review it again"
    )]
    ChangedSinceReview {
        tool: String,
        awaiting: String,
        reviewed: String,
    },
}
