//! Typed configuration: the embedded default, a TOML file and `TOOLGATE_*` environment variables,
//! merged in that order (`load.rs`), typed into the section types (`sections.rs`; addresses, URLs,
//! the sampler and "off" values are typed as they are read, `parse.rs`), then validated with
//! every problem reported at once (`validate.rs`, a list of rules). The list of sections is
//! written once, below: it makes the `Config` struct, the reader and the list of known names.

mod load;
mod parse;
mod sections;
mod validate;

use std::collections::BTreeMap;

use toml::Table;

use toolgate_core::dispatch::Binding;
use toolgate_core::safety::breaker::BreakerConfig;
use toolgate_core::safety::policy::{Policy, ToolOverrides};
use toolgate_core::safety::{backoff::Backoff, detector::Thresholds};
use toolgate_remotes::RemoteSpec;

pub use sections::*;
/// The type of the config's URLs (`telemetry.otlp_endpoint`, `auth.jwt.jwks_url`), for
/// embedders that set them in code.
pub use url::Url;

/// The embedded default configuration, as shipped.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// Prefix of environment variables that override config keys.
pub const ENV_PREFIX: &str = "TOOLGATE_";

/// Declares the sections once: the `Config` struct, `SECTIONS` and the per-section reader.
macro_rules! sections {
    ($($(#[$doc:meta])* $name:ident: $ty:ty,)*) => {
        /// The whole configuration.
        #[derive(Debug, Clone, PartialEq, Default)]
        pub struct Config {
            $($(#[$doc])* pub $name: $ty,)*
        }

        /// The section names, in the order the reader takes them.
        pub const SECTIONS: &[&str] = &[$(stringify!($name)),*];

        impl Config {
            /// Types each section on its own; what is left over is an unknown section.
            fn read_sections(mut table: Table, problems: &mut Vec<String>) -> Config {
                let mut config = Config::default();
                $(load::section(&mut table, stringify!($name), &mut config.$name, problems);)*
                for unknown in table.keys() {
                    problems.push(format!(
                        "unknown section '{unknown}' (known: {})",
                        SECTIONS.join(", ")
                    ));
                }
                config
            }
        }
    };
}

sections! {
    server: ServerConfig,
    limits: Limits,
    dispatch: DispatchConfig,
    sessions: SessionsConfig,
    memory: MemoryConfig,
    loop_detection: LoopDetectionConfig,
    breaker: BreakerConfig,
    retry: RetrySection,
    per_tool: BTreeMap<String, PerTool>,
    hooks: HooksConfig,
    validation: ValidationConfig,
    output: OutputConfig,
    redaction: RedactionConfig,
    cache: CacheConfig,
    unknown_tool: UnknownToolConfig,
    permissions: PermissionsConfig,
    /// How long a call waits for a person's approval.
    approvals: ApprovalsConfig,
    /// Model-facing names bound to registered tools (`[bindings.<name>]`).
    bindings: BTreeMap<String, Binding>,
    /// Remote tool sources connected at start (`[[remotes]]`).
    remotes: Vec<RemoteSpec>,
    remote_registration: RemoteRegistrationConfig,
    tools: ToolsConfig,
    log: LogConfig,
    /// The admin HTTP listener: `/metrics`, `/livez`, `/readyz`.
    admin: AdminConfig,
    /// The web console on the admin listener.
    console: ConsoleConfig,
    /// The MCP front door: toolgate as an MCP server over streamable HTTP.
    mcp: McpConfig,
    /// OpenTelemetry export over OTLP.
    telemetry: TelemetryConfig,
    /// Server TLS and client certificates (`[tls]`).
    tls: TlsConfig,
    /// Who may call: bearer tokens, JWTs, client certificates, anonymous callers (`[auth]`).
    auth: AuthConfig,
}

/// Every problem found in a configuration, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration:\n  - {}", .problems.join("\n  - "))]
pub struct ConfigError {
    pub problems: Vec<String>,
}

impl Config {
    /// The pipeline's policy: loop detection, memory and retry settings with per-tool overrides.
    pub fn policy(&self) -> Policy {
        let loops = &self.loop_detection;
        Policy {
            loop_enabled: loops.enabled,
            append_loop_warning: loops.append_warning,
            loop_thresholds: Thresholds {
                warn_after: loops.warn_after,
                stop_after: loops.stop_after,
            },
            memory_enabled: self.memory.enabled,
            backoff: Backoff {
                base: self.retry.base_delay,
                max: self.retry.max_delay,
                jitter: self.retry.jitter,
            },
            max_retries: self.retry.max_retries,
            per_tool: self
                .per_tool
                .iter()
                .map(|(name, tool)| {
                    let overrides = ToolOverrides {
                        loop_detection: tool.loop_detection,
                        retry: tool.retry,
                    };
                    (name.clone(), overrides)
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
