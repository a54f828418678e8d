//! `[mcp]`: the MCP front door (streamable HTTP), read by `mcp/`.

use std::net::SocketAddr;

use serde::Deserialize;
use url::Url;

use super::parse;

/// `[mcp]`: toolgate as an MCP server over streamable HTTP, on a listener of its own.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Its address; `None` (`""` in the file, the default) turns the MCP front off.
    #[serde(deserialize_with = "parse::mcp_listen")]
    pub listen: Option<SocketAddr>,
    /// The endpoint's path, such as `/mcp`.
    pub path: String,
    /// `Host` values (names or `host:port`) requests may carry: DNS rebinding protection.
    /// `["*"]` accepts any host (behind a proxy that checks it).
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`https://app.example.com:443`, `http://localhost:*`) allowed to call; a
    /// request with any other `Origin` is refused with 403. Requests without `Origin` (programs
    /// rather than browsers) are not affected.
    pub allowed_origins: Vec<String>,
    /// The endpoint's canonical URL (RFC 8707 resource indicator), such as
    /// `https://tools.example.com/mcp`. When set, it is the `resource` of the protected-resource
    /// metadata and JWTs presented at the endpoint must name it in `aud`. `None` (`""`): the
    /// metadata names the URL the client used, and JWTs are checked against `auth.jwt.audience`.
    #[serde(deserialize_with = "parse::mcp_resource")]
    pub resource: Option<Url>,
    /// Authorization servers named in `/.well-known/oauth-protected-resource` (RFC 9728), where
    /// clients get tokens for this endpoint (each an http(s) URL).
    pub authorization_servers: Vec<String>,
    /// Tools per `tools/list` page.
    pub page_size: usize,
    /// MCP sessions (2025-11-25) open at once; an identity holds at most a quarter of them.
    pub max_sessions: usize,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            listen: None,
            path: "/mcp".to_owned(),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            allowed_origins: Vec::new(),
            resource: None,
            authorization_servers: Vec::new(),
            page_size: 100,
            max_sessions: 1000,
        }
    }
}
