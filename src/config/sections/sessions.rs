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
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            scratch_base: None,
            idle_ttl: Duration::from_secs(30 * 60),
            max_sessions: 10_000,
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
            enabled: true,
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
