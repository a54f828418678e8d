//! The config's section types, one per `[section]`, with their defaults. Values are typed as they
//! are read (`parse.rs`): addresses are `SocketAddr`, URLs `Url`, the trace sampler an enum, and
//! a setting whose `""` means "off" or "unset" in the file is an `Option`. Where the code has a
//! type for a setting, the section holds that type itself (no mirror types): breaker, bindings,
//! rule actions, hook failure modes, permission verdicts, cache scopes, per-tool loop and retry.
//! Over 400 lines because it is one small type per section with its `Default`: the defaults sit
//! next to their fields, where the test pinning them to `config/default.toml` points.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use super::parse;
use toolgate_core::duration;
use toolgate_core::duration::optional as optional_duration;
use toolgate_core::middleware::{CacheScope, PermissionVerdict};
use toolgate_core::safety::hooks::{Action, Condition, FailureMode};
use toolgate_core::safety::policy::{PerToolLoop, PerToolRetry};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The gRPC listener's address (`--listen` and `TOOLGATE_LISTEN` override it).
    #[serde(deserialize_with = "parse::server_listen")]
    pub listen: SocketAddr,
    pub max_message_bytes: usize,
    pub max_concurrent_batches: usize,
    /// Calls running at once across all batches (a PARALLEL batch takes its concurrency).
    pub max_concurrent_calls: usize,
    /// The share of one connection: batches it may run at once.
    pub max_batches_per_connection: usize,
    /// The share of one connection: calls it may run at once.
    pub max_calls_per_connection: usize,
    /// The share of one tenant: batches and calls its callers may run at once.
    pub max_batches_per_tenant: usize,
    pub max_calls_per_tenant: usize,
    /// The share of one identity (a token, a JWT subject, a certificate, anonymous callers):
    /// batches and calls it may run at once, over all its connections.
    pub max_batches_per_identity: usize,
    pub max_calls_per_identity: usize,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS` advertised to every client.
    pub max_streams_per_connection: u32,
    /// Connections open at once; more are closed as they arrive.
    pub max_connections: usize,
    /// Connections open at once from one address; 0: no bound.
    pub max_connections_per_address: usize,
    /// A connection that has not sent the HTTP/2 preface this long after it opened (after its
    /// TLS handshake, with TLS) is closed.
    #[serde(with = "duration")]
    pub preface_timeout: Duration,
    /// A connection with no open stream for this long is asked to close (GOAWAY); zero: never.
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// A `DispatchBatch` whose client has not read its stream for this long is cancelled and its
    /// capacity freed.
    #[serde(with = "duration")]
    pub stall_timeout: Duration,
    /// HTTP/2 PING interval that finds dead connections; zero turns it off.
    #[serde(with = "duration")]
    pub keepalive_interval: Duration,
    #[serde(with = "duration")]
    pub shutdown_grace: Duration,
    /// Listening on a non-loopback address without TLS needs this set: plaintext and
    /// unauthenticated are fine only where nothing else can connect.
    pub insecure: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub max_calls: u32,
    pub max_calls_ceiling: u32,
    pub max_json_depth: usize,
    /// The highest options.max_concurrency a PARALLEL batch may ask for.
    pub max_concurrency: u32,
    /// Largest reply message; a bigger reply has its largest results shrunk (and marked
    /// truncated) until it fits.
    pub max_reply_bytes: usize,
    /// Hook programs running at once across the server; more wait (within their timeout).
    pub max_hook_processes: usize,
    /// Request bytes received and not yet decoded, across all connections.
    pub max_buffered_request_bytes: usize,
    /// The same, on one connection.
    pub max_buffered_request_bytes_per_connection: usize,
    /// Reply bytes made and not yet taken by the transport (replies clients have not read),
    /// across all connections.
    pub max_unread_reply_bytes: usize,
    /// The same, on one connection.
    pub max_unread_reply_bytes_per_connection: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DispatchConfig {
    #[serde(with = "duration")]
    pub call_timeout: Duration,
    #[serde(with = "duration")]
    pub max_call_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// Where session directories go; `None` (`""` in the file): a per-server directory under
    /// the system temp dir, removed when the server stops.
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub scratch_base: Option<PathBuf>,
    #[serde(with = "duration")]
    pub idle_ttl: Duration,
    pub max_sessions: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    pub enabled: bool,
    pub max_entries: usize,
    /// Bytes of memory entries kept across all sessions (0: no bound).
    pub max_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoopDetectionConfig {
    pub enabled: bool,
    pub window: usize,
    pub warn_after: u32,
    pub stop_after: u32,
    pub append_warning: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySection {
    pub max_retries: u32,
    #[serde(with = "duration")]
    pub base_delay: Duration,
    #[serde(with = "duration")]
    pub max_delay: Duration,
    pub jitter: bool,
}

/// Pre- and post-tool hooks, consulted in this order: rules, then command hooks, then gRPC hooks.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HooksConfig {
    /// The server's environment variables command hooks get (their own `env` comes on top).
    pub env_allow: Vec<String>,
    pub rules: Vec<RuleConfig>,
    pub command: Vec<CommandHookConfig>,
    pub grpc: Vec<GrpcHookConfig>,
}

/// `[[hooks.rules]]`: when the tool matches and every condition holds, take the action.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Shown as the gate decision's source; default `rules[<n>]`.
    #[serde(default)]
    pub id: Option<String>,
    /// Tool-name glob (`*`, `?`).
    #[serde(default = "any_tool")]
    pub tools: String,
    pub action: Action,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub when: Vec<ConditionConfig>,
}

/// One condition: a JSON pointer into the input and exactly one test.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionConfig {
    pub pointer: String,
    #[serde(default)]
    pub equals: Option<serde_json::Value>,
    #[serde(default)]
    pub regex: Option<String>,
    #[serde(default)]
    pub exists: Option<bool>,
}

/// `[[hooks.command]]`: a program run per call with the call as JSON on stdin.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandHookConfig {
    #[serde(default)]
    pub name: Option<String>,
    /// Program and arguments (no shell).
    pub command: Vec<String>,
    #[serde(default = "any_tool")]
    pub tools: String,
    #[serde(default = "command_timeout", with = "duration")]
    pub timeout: Duration,
    #[serde(default)]
    pub failure_mode: FailureMode,
    /// Environment variables set for this hook's program, over `hooks.env_allow`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// `[[hooks.grpc]]`: a remote `toolgate.v1.ToolHooks` service.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcHookConfig {
    #[serde(default)]
    pub name: Option<String>,
    /// `http://host:port`: text handed to the hook's channel, checked by validation so that
    /// the problem names the entry (`hooks.grpc[<n>].endpoint`), as remotes' endpoints are.
    pub endpoint: String,
    #[serde(default = "any_tool")]
    pub tools: String,
    #[serde(default = "grpc_timeout", with = "duration")]
    pub timeout: Duration,
    #[serde(default)]
    pub failure_mode: FailureMode,
}

impl ConditionConfig {
    /// The condition this entry describes; `Err` says why it describes none (the one place the
    /// shape is checked: validation lists the error, the server builds from the `Ok`).
    pub fn condition(&self) -> Result<Condition, String> {
        if !self.pointer.is_empty() && !self.pointer.starts_with('/') {
            return Err(format!(
                "pointer '{}' must be empty or start with '/'",
                self.pointer
            ));
        }
        let pointer = toolgate_core::json::Pointer::new(&self.pointer);
        match (&self.equals, &self.regex, self.exists) {
            (Some(value), None, None) => Ok(Condition::Equals {
                pointer,
                value: value.clone(),
            }),
            (None, Some(re), None) => regex::Regex::new(re)
                .map(|regex| Condition::Matches { pointer, regex })
                .map_err(|e| format!("regex does not compile: {e}")),
            (None, None, Some(exists)) => Ok(Condition::Exists { pointer, exists }),
            _ => Err("set exactly one of equals, regex, exists".to_owned()),
        }
    }
}

fn any_tool() -> String {
    "*".to_owned()
}

fn command_timeout() -> Duration {
    Duration::from_secs(10)
}

fn grpc_timeout() -> Duration {
    Duration::from_secs(2)
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ValidationConfig {
    pub enabled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    pub max_chars: usize,
    pub batch_budget_chars: usize,
    /// Longest error text in a result or a fail-fast reason.
    pub max_error_chars: usize,
    /// Longest argument or result preview carried by an event.
    pub event_preview_chars: usize,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedactionConfig {
    pub enabled: bool,
    pub entropy: bool,
    pub patterns: Vec<RedactionPattern>,
}

impl RedactionConfig {
    /// The redactor this section describes (one that changes nothing when it is off).
    pub fn redactor(&self) -> Result<toolgate_core::middleware::Redactor, String> {
        if !self.enabled {
            return Ok(toolgate_core::middleware::Redactor::disabled());
        }
        let custom: Vec<(String, String)> = self
            .patterns
            .iter()
            .map(|p| (p.kind.clone(), p.regex.clone()))
            .collect();
        toolgate_core::middleware::Redactor::new(&custom, self.entropy)
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionPattern {
    pub kind: String,
    pub regex: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    pub max_entries: usize,
    /// Bytes all entries may hold (0: no bound); an output over an eighth of it is not kept.
    pub max_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UnknownToolConfig {
    pub suggestion_threshold: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PermissionsConfig {
    pub rules: Vec<PermissionRuleConfig>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionRuleConfig {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default = "any_tool")]
    pub tools: String,
    /// Only for these callers (globs of identities, of tenants; role names); empty: everyone.
    #[serde(default)]
    pub identities: Vec<String>,
    #[serde(default)]
    pub tenants: Vec<String>,
    #[serde(default)]
    pub roles: Vec<String>,
    pub decision: PermissionVerdict,
    #[serde(default)]
    pub reason: String,
}

/// `[remote_registration]`: whether clients may add and remove remotes at run time.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteRegistrationConfig {
    pub enabled: bool,
    /// Programs a stdio MCP server registered at run time may run, each pinned to its argv.
    pub commands: Vec<CommandConfig>,
    /// Addresses (blocks such as `10.0.0.0/8`, or single addresses) and host names registered
    /// remotes may reach beyond the default (which refuses loopback, link-local, metadata,
    /// unspecified, multicast and broadcast addresses).
    pub egress_allow: Vec<String>,
    /// Let a registration set `follow_redirects` on an HTTP tool.
    pub allow_redirects: bool,
}

impl RemoteRegistrationConfig {
    /// The policy run-time registrations are checked against.
    pub fn policy(&self) -> Result<toolgate_remotes::RegistrationPolicy, String> {
        use toolgate_remotes::{CommandRule, EgressRule, RegistrationPolicy, anchored};
        let mut commands = Vec::new();
        for (i, c) in self.commands.iter().enumerate() {
            if c.argv.is_empty() {
                return Err(format!("remote_registration.commands[{i}].argv: required"));
            }
            let args =
                match &c.args_pattern {
                    None => None,
                    Some(pattern) => Some(anchored(pattern).map_err(|e| {
                        format!("remote_registration.commands[{i}].args_pattern: {e}")
                    })?),
                };
            commands.push(CommandRule {
                argv: c.argv.clone(),
                args,
                env_keys: c.env_keys.clone(),
                cwd: c.cwd.clone(),
            });
        }
        let egress_allow = self
            .egress_allow
            .iter()
            .map(|e| {
                EgressRule::parse(e).map_err(|p| format!("remote_registration.egress_allow: {p}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(RegistrationPolicy {
            commands,
            egress_allow,
            allow_redirects: self.allow_redirects,
        })
    }
}

/// `[[remote_registration.commands]]`: one allowlisted stdio program.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    /// The whole argv, or its prefix when `args_pattern` is set.
    pub argv: Vec<String>,
    /// A regex each argument after `argv` must match whole; `None` (`""` in the file): no
    /// further arguments.
    #[serde(default, deserialize_with = "parse::empty_as_none")]
    pub args_pattern: Option<String>,
    /// Environment keys a registration may set.
    #[serde(default)]
    pub env_keys: Vec<String>,
    /// Working directories a registration may use.
    #[serde(default)]
    pub cwd: Vec<String>,
}

/// Overrides for one tool, under `[per_tool.<name>]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerTool {
    #[serde(with = "optional_duration")]
    pub timeout: Option<Duration>,
    pub max_output_chars: Option<usize>,
    pub retry: PerToolRetry,
    pub loop_detection: PerToolLoop,
    pub cache: PerToolCache,
    /// JSON pointer of the path this tool writes: its success evicts cached entries of that path.
    pub invalidates_path: Option<String>,
    /// `false`: JSON objects this tool returns pass through whole (no result selection).
    pub select_result: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerToolCache {
    pub enabled: bool,
    #[serde(with = "optional_duration")]
    pub ttl: Option<Duration>,
    pub ttl_turns: Option<u32>,
    pub scope: CacheScope,
    /// JSON pointer of the path this tool reads.
    pub path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    pub builtin: BuiltinConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BuiltinConfig {
    pub enabled: bool,
    pub exclude: Vec<String>,
    /// Bytes a session's scratch directory may hold (each file and directory counts 4096 more);
    /// 0: no quota.
    pub scratch_quota_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub level: String,
    pub format: LogFormat,
}

/// The log filter of `directives` (`log.level`, or `RUST_LOG`). A field value in a directive
/// (`target[span{field=value}]=level`) matches as plain text, not as a regular expression:
/// tracing-subscriber builds a full DFA for such a pattern, which took seconds for a 366-byte
/// value the config fuzzer found (and grows exponentially with it).
pub fn log_filter(directives: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    tracing_subscriber::EnvFilter::builder()
        .with_regex(false)
        .parse(directives)
        .map_err(|e| e.to_string())
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Address of the admin HTTP listener; `None` (`""` in the file) turns it off.
    #[serde(deserialize_with = "parse::admin_listen")]
    pub listen: Option<SocketAddr>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// OTLP/gRPC collector, such as `http://127.0.0.1:4317`. `None` (`""` in the file):
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) when set, else
    /// nothing is exported.
    #[serde(deserialize_with = "parse::otlp_endpoint")]
    pub otlp_endpoint: Option<Url>,
    /// The `service.name` resource attribute; `OTEL_SERVICE_NAME` wins.
    pub service_name: String,
    /// How often metrics are pushed to the collector.
    #[serde(with = "duration")]
    pub metrics_interval: Duration,
    /// How long one export may take before it is abandoned.
    #[serde(with = "duration")]
    pub export_timeout: Duration,
    /// Export traces when a collector is configured (`OTEL_TRACES_EXPORTER=none` also turns
    /// them off).
    pub traces: bool,
    /// Which traces are recorded; `OTEL_TRACES_SAMPLER` wins.
    #[serde(deserialize_with = "parse::sampler")]
    pub sampler: TraceSampler,
    /// The ratio of the `*traceidratio` samplers, 0 to 1; `OTEL_TRACES_SAMPLER_ARG` wins.
    pub sampler_ratio: f64,
    /// Finished spans waiting for export at most; more are dropped (and counted).
    pub max_queued_spans: usize,
    /// Opt-in: put each call's arguments and result on its span (`gen_ai.tool.call.arguments`
    /// and `.result`), redacted and cut to `content_max_chars`.
    pub capture_content: bool,
    pub content_max_chars: usize,
}

/// Which traces are recorded, by `OTEL_TRACES_SAMPLER` name (`TraceSampler::name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceSampler {
    /// `always_on`.
    AlwaysOn,
    /// `always_off`.
    AlwaysOff,
    /// `traceidratio`: `sampler_ratio` of the traces.
    TraceIdRatio,
    /// `parentbased_always_on`: follow the client's decision, record new traces.
    #[default]
    ParentBasedAlwaysOn,
    /// `parentbased_always_off`.
    ParentBasedAlwaysOff,
    /// `parentbased_traceidratio`.
    ParentBasedTraceIdRatio,
}

impl TraceSampler {
    /// Every sampler, in the order an error lists their names.
    pub const ALL: [TraceSampler; 6] = [
        TraceSampler::AlwaysOn,
        TraceSampler::AlwaysOff,
        TraceSampler::TraceIdRatio,
        TraceSampler::ParentBasedAlwaysOn,
        TraceSampler::ParentBasedAlwaysOff,
        TraceSampler::ParentBasedTraceIdRatio,
    ];

    /// The `OTEL_TRACES_SAMPLER` name, as the file spells it.
    pub fn name(self) -> &'static str {
        match self {
            TraceSampler::AlwaysOn => "always_on",
            TraceSampler::AlwaysOff => "always_off",
            TraceSampler::TraceIdRatio => "traceidratio",
            TraceSampler::ParentBasedAlwaysOn => "parentbased_always_on",
            TraceSampler::ParentBasedAlwaysOff => "parentbased_always_off",
            TraceSampler::ParentBasedTraceIdRatio => "parentbased_traceidratio",
        }
    }

    /// The sampler of that name.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 50051)),
            insecure: false,
            max_message_bytes: 4 * 1024 * 1024,
            max_concurrent_batches: 256,
            max_concurrent_calls: 1024,
            max_batches_per_connection: 64,
            max_calls_per_connection: 256,
            max_batches_per_tenant: 128,
            max_calls_per_tenant: 512,
            max_batches_per_identity: 64,
            max_calls_per_identity: 256,
            max_streams_per_connection: 100,
            max_connections: 1024,
            max_connections_per_address: 64,
            preface_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5 * 60),
            stall_timeout: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_calls: 64,
            max_calls_ceiling: 1024,
            max_json_depth: 32,
            max_concurrency: 64,
            max_reply_bytes: 4 * 1024 * 1024,
            max_hook_processes: 32,
            max_buffered_request_bytes: 64 * 1024 * 1024,
            max_buffered_request_bytes_per_connection: 16 * 1024 * 1024,
            max_unread_reply_bytes: 64 * 1024 * 1024,
            max_unread_reply_bytes_per_connection: 16 * 1024 * 1024,
        }
    }
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            call_timeout: Duration::from_secs(60),
            max_call_timeout: Duration::from_secs(3600),
        }
    }
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

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            enabled: true,
            max_entries: 100,
            max_bytes: 64 * 1024 * 1024,
        }
    }
}

impl Default for LoopDetectionConfig {
    fn default() -> Self {
        LoopDetectionConfig {
            enabled: true,
            window: 100,
            warn_after: 3,
            stop_after: 10,
            append_warning: true,
        }
    }
}

impl Default for RetrySection {
    fn default() -> Self {
        RetrySection {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(30),
            jitter: false,
        }
    }
}

impl Default for HooksConfig {
    fn default() -> Self {
        HooksConfig {
            env_allow: toolgate_core::child::DEFAULT_ENV_ALLOW
                .map(str::to_owned)
                .into(),
            rules: Vec::new(),
            command: Vec::new(),
            grpc: Vec::new(),
        }
    }
}

impl Default for ValidationConfig {
    fn default() -> Self {
        ValidationConfig { enabled: true }
    }
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            max_chars: 100_000,
            batch_budget_chars: 0,
            max_error_chars: 2000,
            event_preview_chars: 1024,
        }
    }
}

impl Default for RedactionConfig {
    fn default() -> Self {
        RedactionConfig {
            enabled: true,
            entropy: false,
            patterns: Vec::new(),
        }
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_entries: 1000,
            max_bytes: 64 * 1024 * 1024,
        }
    }
}

impl Default for UnknownToolConfig {
    fn default() -> Self {
        UnknownToolConfig {
            suggestion_threshold: 0.4,
        }
    }
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

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: "toolgate".to_owned(),
            metrics_interval: Duration::from_secs(60),
            export_timeout: Duration::from_secs(10),
            traces: true,
            sampler: TraceSampler::ParentBasedAlwaysOn,
            sampler_ratio: 1.0,
            max_queued_spans: 2048,
            capture_content: false,
            content_max_chars: 1024,
        }
    }
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 9464))),
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// `[tls]`: the server's certificate, and client certificates (mTLS).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain; with `key_file`, the server speaks TLS only. `None` (`""` in the
    /// file): TLS is off.
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub key_file: Option<PathBuf>,
    /// PEM CA bundle: clients presenting a certificate must chain to it. `None`: no client
    /// certificates.
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub client_ca_file: Option<PathBuf>,
    /// With `client_ca_file`: refuse connections without a client certificate.
    pub require_client_cert: bool,
    /// How often the files are checked for changes (SIGHUP reloads at once); zero: only SIGHUP.
    #[serde(with = "duration")]
    pub reload_interval: Duration,
    /// How long a client may take for the TLS handshake.
    #[serde(with = "duration")]
    pub handshake_timeout: Duration,
}

impl TlsConfig {
    /// Whether the server speaks TLS (validation has checked the key comes with it).
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            require_client_cert: true,
            reload_interval: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// `[auth]`: how callers prove who they are, and what unauthenticated callers may do.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Which callers without credentials are let in as `anonymous` with `anonymous_roles`.
    pub anonymous: Anonymous,
    pub anonymous_tenant: String,
    pub anonymous_roles: Vec<String>,
    pub tokens: Vec<TokenConfig>,
    pub jwt: JwtConfig,
    pub certificates: Vec<CertificateIdentity>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            anonymous: Anonymous::Loopback,
            anonymous_tenant: toolgate_core::identity::DEFAULT_TENANT.to_owned(),
            anonymous_roles: vec!["agent".to_owned()],
            tokens: Vec::new(),
            jwt: JwtConfig::default(),
            certificates: Vec::new(),
        }
    }
}

/// Who may call without credentials (`anonymous = "loopback" | "any" | "none"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Anonymous {
    /// Callers connecting from a loopback address (this machine).
    #[default]
    Loopback,
    /// Anyone who can reach the port.
    Any,
    /// Nobody: every RPC needs credentials.
    None,
}

/// A bearer token and the identity it stands for. Exactly one of `sha256`, `file`, `env`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The identity (shown in logs and audit lines; the token never is).
    pub id: String,
    #[serde(default = "default_tenant")]
    pub tenant: String,
    #[serde(default = "agent_role")]
    pub roles: Vec<String>,
    /// Hex SHA-256 of the token (`printf %s "$TOKEN" | sha256sum`).
    #[serde(default)]
    pub sha256: String,
    /// A file holding the token (trailing whitespace ignored).
    #[serde(default)]
    pub file: String,
    /// An environment variable holding the token.
    #[serde(default)]
    pub env: String,
}

/// JWT bearer tokens, checked against a JWKS (file or URL) with issuer, audience and expiry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JwtConfig {
    /// A JWKS file, read at start. `None` (`""` in the file): none.
    #[serde(deserialize_with = "parse::empty_as_none")]
    pub jwks_file: Option<PathBuf>,
    /// Fetched at start and every `jwks_refresh` (and when a token names an unknown key id).
    /// `None` (`""` in the file): none.
    #[serde(deserialize_with = "parse::jwks_url")]
    pub jwks_url: Option<Url>,
    #[serde(with = "duration")]
    pub jwks_refresh: Duration,
    /// Required `iss`.
    pub issuer: String,
    /// Required `aud` (one of).
    pub audience: String,
    /// The claim naming the tenant; a token without it is refused.
    pub tenant_claim: String,
    /// The claim listing roles (an array, or a space-separated string).
    pub roles_claim: String,
    /// Roles of a token without the roles claim.
    pub default_roles: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    #[serde(with = "duration")]
    pub leeway: Duration,
}

impl JwtConfig {
    /// Whether JWTs are accepted: a JWKS file or URL is given.
    pub fn enabled(&self) -> bool {
        self.jwks_file.is_some() || self.jwks_url.is_some()
    }
}

impl Default for JwtConfig {
    fn default() -> Self {
        JwtConfig {
            jwks_file: None,
            jwks_url: None,
            jwks_refresh: Duration::from_secs(600),
            issuer: String::new(),
            audience: String::new(),
            tenant_claim: "tenant".to_owned(),
            roles_claim: "roles".to_owned(),
            default_roles: agent_role(),
            leeway: Duration::from_secs(30),
        }
    }
}

/// A client certificate name (a DNS subject alternative name the certificate is valid for) and
/// the identity it stands for.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateIdentity {
    pub name: String,
    #[serde(default = "default_tenant")]
    pub tenant: String,
    #[serde(default = "agent_role")]
    pub roles: Vec<String>,
}

fn default_tenant() -> String {
    toolgate_core::identity::DEFAULT_TENANT.to_owned()
}

fn agent_role() -> Vec<String> {
    vec!["agent".to_owned()]
}
