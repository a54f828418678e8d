//! A remote's definition, the same shape in `[[remotes]]` and in `RegisterRemote`: how toolgate
//! reaches it (worker, MCP over stdio or HTTP, HTTP tool) and the checks that need no connection.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

/// How toolgate reaches a remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RemoteKind {
    /// A `toolgate.v1.ToolWorker` gRPC service.
    Worker,
    /// One tool behind an HTTP endpoint.
    Http,
    /// A Model Context Protocol server, over stdio (`command`) or streamable HTTP (`url`).
    Mcp,
}

/// A remote's definition: the same shape in `[[remotes]]` and in `RegisterRemote`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSpec {
    /// Unique among remotes; names the remote in errors and logs.
    pub name: String,
    pub kind: RemoteKind,
    /// Worker: `http://host:port`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Prepended to every tool name the remote offers (for example "py.").
    #[serde(default)]
    pub prefix: String,
    /// Globs over the remote's own tool names; only matching tools are registered.
    #[serde(default = "everything")]
    pub tools: Vec<String>,
    /// Connect and discovery timeout; calls are bounded by the call deadline.
    #[serde(default = "ten_seconds", with = "crate::duration")]
    pub timeout: Duration,
    /// Http: the URL the tool is POSTed to.
    #[serde(default)]
    pub url: Option<String>,
    /// Http and Mcp over HTTP: headers sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Http: the tool's definition.
    #[serde(default)]
    pub definition: Option<HttpToolDefinition>,
    /// Mcp over stdio: the program and its arguments (no shell).
    #[serde(default)]
    pub command: Vec<String>,
    /// Mcp over stdio: environment variables set for the server's process, over `env_allow`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Mcp over stdio: the server's own environment variables the process gets; unset: the
    /// default allowlist (`child::DEFAULT_ENV_ALLOW`). Config only: `RegisterRemote` refuses it.
    #[serde(default)]
    pub env_allow: Option<Vec<String>>,
    /// Mcp over stdio: the working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Accept changed tool definitions on refresh instead of quarantining the tools.
    #[serde(default)]
    pub accept_changes: bool,
    /// Http: follow redirects (same origin only). Off: a redirect is the tool's failure.
    #[serde(default)]
    pub follow_redirects: bool,
    /// From the config: `true` stops the start when the remote cannot be reached; `false` starts
    /// without its tools and keeps trying in the background, with backoff.
    #[serde(default)]
    pub required: bool,
    /// Worker over `https://`: how the worker's certificate is verified.
    #[serde(default)]
    pub tls: Option<TlsSpec>,
}

/// `[remotes.tls]`: TLS settings of a worker reached over `https://`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSpec {
    /// PEM file of the CA certificates that verify the worker; unset: the system's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// The name the worker's certificate must carry; unset: the endpoint's host.
    #[serde(default)]
    pub domain: Option<String>,
}

/// `[remotes.definition]` of an HTTP remote: the one tool it is.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpToolDefinition {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "any_object")]
    pub input_schema: Value,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub destructive: bool,
    #[serde(default)]
    pub idempotent: bool,
    #[serde(default)]
    pub open_world: bool,
    #[serde(default)]
    pub concurrency_safe: bool,
    /// A reference into the input naming the resource a call touches (`arguments.path`).
    #[serde(default)]
    pub resource_key: Option<String>,
}

fn any_object() -> Value {
    json!({"type": "object"})
}

impl RemoteSpec {
    /// This remote is invalid: a definition or configuration problem (INVALID_ARGUMENT).
    pub fn invalid(&self, reason: impl Into<String>) -> super::RemoteError {
        super::RemoteError::Invalid {
            name: self.name.clone(),
            reason: reason.into(),
        }
    }

    /// This remote cannot be reached now (UNAVAILABLE; a config remote is retried).
    pub fn unreachable(&self, reason: impl Into<String>) -> super::RemoteError {
        super::RemoteError::Unreachable {
            name: self.name.clone(),
            reason: reason.into(),
        }
    }

    /// Checks what can be checked without connecting.
    pub fn check(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("a remote needs a name".to_owned());
        }
        crate::child::check_env(self.env_allow().iter().copied(), &self.env)?;
        if self.tls.is_some() && !(self.kind == RemoteKind::Worker && self.is_https()) {
            return Err("tls applies only to a worker with an https:// endpoint".to_owned());
        }
        let url = match self.kind {
            RemoteKind::Worker => match self.endpoint.as_deref() {
                // Workers speak gRPC through tonic, which has a TLS client in this build.
                Some(e) if e.starts_with("https://") => return Ok(()),
                Some(e) => e,
                None => return Err("a worker needs an endpoint".to_owned()),
            },
            RemoteKind::Http => match (self.url.as_deref(), &self.definition) {
                (Some(u), Some(_)) => u,
                (None, _) => return Err("an http remote needs a url".to_owned()),
                (_, None) => return Err("an http remote needs a definition of its tool".to_owned()),
            },
            RemoteKind::Mcp => match (self.command.is_empty(), self.url.as_deref()) {
                (false, None) => return Ok(()),
                (true, Some(u)) => u,
                (false, Some(_)) => {
                    return Err("set either command (stdio) or url (HTTP), not both".to_owned());
                }
                (true, None) => {
                    return Err("an mcp remote needs a command (stdio) or a url (HTTP)".to_owned());
                }
            },
        };
        for (name, value) in &self.headers {
            reqwest::header::HeaderName::try_from(name.as_str())
                .map_err(|_| format!("'{name}' is not a valid HTTP header name"))?;
            reqwest::header::HeaderValue::try_from(value.as_str())
                .map_err(|_| format!("header '{name}' has a value that is not valid in HTTP"))?;
        }
        plain_http(url)
    }

    /// The names of the server's environment variables a stdio process gets.
    pub fn env_allow(&self) -> Vec<&str> {
        match &self.env_allow {
            Some(names) => names.iter().map(String::as_str).collect(),
            None => crate::child::DEFAULT_ENV_ALLOW.to_vec(),
        }
    }

    /// A worker endpoint that asks for TLS.
    pub fn is_https(&self) -> bool {
        self.endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("https://"))
    }
}

/// HTTP tool and MCP URLs are plain `http://`: their HTTP client has no TLS in this build, and
/// an `https://` URL that fails on first use would be worse than a refusal now.
fn plain_http(url: &str) -> Result<(), String> {
    if url.starts_with("http://") {
        Ok(())
    } else if url.starts_with("https://") {
        Err(format!(
            "'{url}': https is not supported by this build (no TLS client); use http:// on loopback or a private network"
        ))
    } else {
        Err(format!(
            "'{url}' is not a URL such as http://127.0.0.1:7001"
        ))
    }
}

fn everything() -> Vec<String> {
    vec!["*".to_owned()]
}

fn ten_seconds() -> Duration {
    Duration::from_secs(10)
}
