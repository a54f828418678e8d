//! `[sessions]`, `[memory]` and `[tools]`: session state, scratch directories and the built-in
//! tools that write them.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::parse;
use toolgate_core::duration;

/// `[sessions]`: named sessions and their scratch directories.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// Where session directories go; `None` (`""` in the file): a per-server directory under
    /// the system temp dir, removed when the server stops.
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub scratch_base: Option<PathBuf>,
    /// A named session unused for this long is dropped.
    #[serde(with = "duration")]
    pub idle_ttl: Duration,
    /// Most live named sessions.
    pub max_sessions: usize,
    /// Where named sessions' loop windows and memory live.
    #[serde(deserialize_with = "parse::session_store")]
    pub store: SessionStoreUrl,
    /// A file whose first line is the store's password (replacing the URL's).
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub store_password_file: Option<PathBuf>,
    /// An environment variable holding the store's password (replacing the URL's).
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub store_password_env: Option<String>,
    /// PEM certificates that verify a `rediss://` store instead of the system roots.
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub store_ca_file: Option<PathBuf>,
    /// `store` names one node of a Redis Cluster; the client learns the others from it.
    pub store_cluster: bool,
    /// Longest one store operation may take before the batch is refused `UNAVAILABLE`.
    #[serde(with = "duration")]
    pub store_timeout: Duration,
    /// With a Redis store: scratch bytes all of a tenant's sessions may hold together (0: no
    /// bound).
    pub tenant_scratch_bytes: u64,
    /// With a Redis store: memory entry bytes all of a tenant's sessions may hold together (0:
    /// no bound).
    pub tenant_memory_bytes: u64,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            scratch_base: None,
            idle_ttl: Duration::from_secs(30 * 60),
            max_sessions: 10_000,
            store: SessionStoreUrl::Memory,
            store_password_file: None,
            store_password_env: None,
            store_ca_file: None,
            store_cluster: false,
            store_timeout: Duration::from_secs(1),
            tenant_scratch_bytes: 64 * 1024 * 1024,
            tenant_memory_bytes: 32 * 1024 * 1024,
        }
    }
}

/// `sessions.store`: `memory` (this server's alone) or a Redis URL (shared by every replica).
#[derive(Clone, PartialEq, Eq, Default)]
pub enum SessionStoreUrl {
    #[default]
    Memory,
    /// `redis://` or `rediss://`; its password never reaches `Debug` or a log line.
    Redis(url::Url),
}

impl std::fmt::Debug for SessionStoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionStoreUrl::Memory => f.write_str("Memory"),
            SessionStoreUrl::Redis(url) => {
                let mut shown = url.clone();
                if shown.password().is_some() {
                    let _ = shown.set_password(Some("***"));
                }
                write!(f, "Redis({shown})")
            }
        }
    }
}

/// `[memory]`: what each session remembers of its successful calls.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    pub enabled: bool,
    /// Entries kept per session; the oldest goes first.
    pub max_entries: usize,
    /// Bytes of memory entries kept across all sessions (0: no bound).
    pub max_bytes: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            enabled: toolgate_core::safety::policy::Policy::default().memory_enabled,
            max_entries: 100,
            max_bytes: 64 * 1024 * 1024,
        }
    }
}

/// `[tools]`: the tools the server registers itself.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    pub builtin: BuiltinConfig,
}

/// `[tools.builtin]`: echo, sleep, now and the scratch tools.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BuiltinConfig {
    pub enabled: bool,
    /// Built-in tools to leave out, by name.
    pub exclude: Vec<String>,
    /// Bytes a session's scratch directory may hold (each file and directory counts 4096 more);
    /// 0: no quota.
    pub scratch_quota_bytes: u64,
}

impl Default for BuiltinConfig {
    fn default() -> Self {
        BuiltinConfig {
            enabled: true,
            exclude: Vec::new(),
            scratch_quota_bytes: toolgate_core::tools::DEFAULT_QUOTA_BYTES,
        }
    }
}
