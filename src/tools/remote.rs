//! Remote tools: tools served by another process. `spec` is a remote's definition, `manager`
//! the registry of connected remotes, and each protocol has one adapter (`worker`, `mcp`,
//! `http`) that turns a call into that protocol and its answer back into a tool output.

pub mod http;
mod manager;
pub mod mcp;
mod spec;
pub mod worker;

use std::time::Duration;

use super::RegistryError;

pub use manager::{Contributed, Remotes};
pub use spec::{HttpToolDefinition, RemoteKind, RemoteSpec, TlsSpec};

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
}

/// What an adapter tells the remote manager, out of band.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// The remote says its tool list changed (MCP `notifications/tools/list_changed`).
    ListChanged(String),
    /// The remote's connection is gone (a stdio server exited, a worker is unavailable, a config
    /// remote was down at start): reconnect and re-list, with backoff.
    Lost(String),
}

/// Where adapters send signals.
pub type Signals = tokio::sync::mpsc::UnboundedSender<Signal>;

/// Extra time a remote gets past the call's deadline, so toolgate's own deadline (which cancels
/// the call) decides the result and the remote's clock only stops work that is abandoned.
const REMOTE_DEADLINE_MARGIN: Duration = Duration::from_millis(100);

/// How long the remote side may take for this call: the time left before its deadline plus the
/// margin; none without a deadline.
pub fn remote_timeout(ctx: &crate::tools::ToolContext) -> Option<Duration> {
    let deadline = ctx.deadline?;
    Some(deadline.saturating_duration_since(tokio::time::Instant::now()) + REMOTE_DEADLINE_MARGIN)
}

/// Resolves a resource-key reference (`arguments.path` or `input.path`) against an input.
pub fn resource_key(template: Option<&str>, input: &serde_json::Value) -> Option<String> {
    let template = template?;
    let path = template
        .strip_prefix("arguments.")
        .or_else(|| template.strip_prefix("input."))?;
    crate::mapping::path(input, path).map(|v| match v {
        serde_json::Value::String(s) => s.clone(),
        other => crate::json::canonical(other),
    })
}
