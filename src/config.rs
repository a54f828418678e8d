//! Typed configuration: the embedded default, a TOML file and `TOOLGATE_*` environment variables,
//! merged in that order, then validated with every problem reported at once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::Table;

use crate::duration;
use crate::duration::optional as optional_duration;
use crate::tools::BUILTIN_NAMES;

/// The embedded default configuration, as shipped.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// Prefix of environment variables that override config keys.
pub const ENV_PREFIX: &str = "TOOLGATE_";

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    pub server: ServerConfig,
    pub limits: Limits,
    pub dispatch: DispatchConfig,
    pub sessions: SessionsConfig,
    pub memory: MemoryConfig,
    pub loop_detection: LoopDetectionConfig,
    pub breaker: BreakerSection,
    pub retry: RetrySection,
    pub per_tool: BTreeMap<String, PerTool>,
    pub hooks: HooksConfig,
    pub validation: ValidationConfig,
    pub output: OutputConfig,
    pub redaction: RedactionConfig,
    pub cache: CacheConfig,
    pub unknown_tool: UnknownToolConfig,
    pub permissions: PermissionsConfig,
    pub bindings: BTreeMap<String, BindingConfig>,
    pub remotes: Vec<crate::tools::remote::RemoteSpec>,
    pub remote_registration: RemoteRegistrationConfig,
    pub tools: ToolsConfig,
    pub log: LogConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    pub max_message_bytes: usize,
    pub max_concurrent_batches: usize,
    #[serde(with = "duration")]
    pub shutdown_grace: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub max_calls: u32,
    pub max_calls_ceiling: u32,
    pub max_json_depth: usize,
    /// The highest options.max_concurrency a PARALLEL batch may ask for.
    pub max_concurrency: u32,
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
    /// Empty: a per-server directory under the system temp dir.
    pub scratch_base: PathBuf,
    #[serde(with = "duration")]
    pub idle_ttl: Duration,
    pub max_sessions: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    pub enabled: bool,
    pub max_entries: usize,
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
pub struct BreakerSection {
    pub failure_threshold: u32,
    #[serde(with = "duration")]
    pub cooldown: Duration,
    #[serde(with = "duration")]
    pub probe_lease: Duration,
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
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HooksConfig {
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
    pub action: RuleAction,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub when: Vec<ConditionConfig>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleAction {
    Allow,
    Block,
    Ask,
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
    pub failure_mode: FailureModeConfig,
}

/// `[[hooks.grpc]]`: a remote `toolgate.v1.ToolHooks` service.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcHookConfig {
    #[serde(default)]
    pub name: Option<String>,
    /// `http://host:port`.
    pub endpoint: String,
    #[serde(default = "any_tool")]
    pub tools: String,
    #[serde(default = "grpc_timeout", with = "duration")]
    pub timeout: Duration,
    #[serde(default)]
    pub failure_mode: FailureModeConfig,
}

/// What a hook that fails (crashes, times out, is unreachable) means for the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureModeConfig {
    FailOpen,
    #[default]
    FailClosed,
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
    pub decision: PermissionDecision,
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PermissionDecision {
    Allow,
    Deny,
    Ask,
}

/// `[remote_registration]`: whether clients may add and remove remotes at run time.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteRegistrationConfig {
    pub enabled: bool,
    /// Programs a run-time registered stdio MCP server may run (exact `command[0]` values).
    pub stdio_commands: Vec<String>,
}

/// `[bindings.<name>]`: a model-facing name bound to a registered tool and an input mapping.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindingConfig {
    pub tool: String,
    #[serde(default)]
    pub input: Option<serde_json::Value>,
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
    /// "session" (default) or "global".
    pub scope: Option<String>,
    /// JSON pointer of the path this tool reads.
    pub path: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerToolRetry {
    pub enabled: Option<bool>,
    pub max_retries: Option<u32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerToolLoop {
    pub warn_after: Option<u32>,
    pub stop_after: Option<u32>,
    pub exempt: bool,
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
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub level: String,
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Every problem found in a configuration, one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration:\n  - {}", .problems.join("\n  - "))]
pub struct ConfigError {
    pub problems: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:50051".to_owned(),
            max_message_bytes: 4 * 1024 * 1024,
            max_concurrent_batches: 256,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_calls: 64,
            max_calls_ceiling: 1024,
            max_json_depth: 64,
            max_concurrency: 64,
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
            scratch_base: PathBuf::new(),
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

impl Default for BreakerSection {
    fn default() -> Self {
        BreakerSection {
            failure_threshold: 3,
            cooldown: Duration::from_secs(30),
            probe_lease: Duration::from_secs(30),
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
        CacheConfig { max_entries: 1000 }
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

impl Config {
    /// Loads the embedded default, then `file` (if any), then `TOOLGATE_*` variables from `env`.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
        let mut table = parse_toml(DEFAULT_TOML, "embedded default", &mut problems);
        if let Some(path) = file {
            match std::fs::read_to_string(path) {
                Ok(text) => {
                    let overrides = parse_toml(&text, &path.display().to_string(), &mut problems);
                    merge(&mut table, overrides);
                }
                Err(e) => problems.push(format!("{}: cannot read: {e}", path.display())),
            }
        }
        apply_env(&mut table, env, &mut problems);
        finish(table, problems)
    }

    /// Parses a TOML document on top of the embedded default, without the environment.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
        let mut table = parse_toml(DEFAULT_TOML, "embedded default", &mut problems);
        merge(&mut table, parse_toml(text, "config", &mut problems));
        finish(table, problems)
    }

    /// Checks the values against each other and the server's hard limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }

    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.server.listen.parse::<SocketAddr>().is_err() {
            p.push(format!(
                "server.listen: '{}' is not an address such as 127.0.0.1:50051",
                self.server.listen
            ));
        }
        if self.server.max_message_bytes < 1024 {
            p.push("server.max_message_bytes: must be at least 1024".to_owned());
        }
        if self.server.max_concurrent_batches == 0 {
            p.push("server.max_concurrent_batches: must be at least 1".to_owned());
        }
        let limits = &self.limits;
        if limits.max_calls == 0 {
            p.push("limits.max_calls: must be at least 1".to_owned());
        }
        if limits.max_calls > limits.max_calls_ceiling {
            p.push(format!(
                "limits.max_calls: {} is above limits.max_calls_ceiling ({})",
                limits.max_calls, limits.max_calls_ceiling
            ));
        }
        // Protobuf decoding stops at 100 nested messages; deeper JSON could never arrive anyway.
        if limits.max_concurrency == 0 {
            p.push("limits.max_concurrency: must be at least 1".to_owned());
        }
        if !(1..=100).contains(&limits.max_json_depth) {
            p.push("limits.max_json_depth: must be from 1 to 100".to_owned());
        }
        if self.dispatch.call_timeout.is_zero() {
            p.push("dispatch.call_timeout: must be longer than zero".to_owned());
        }
        if self.dispatch.call_timeout > self.dispatch.max_call_timeout {
            p.push("dispatch.call_timeout: is above dispatch.max_call_timeout".to_owned());
        }
        if self.sessions.max_sessions == 0 {
            p.push("sessions.max_sessions: must be at least 1".to_owned());
        }
        if self.sessions.idle_ttl.is_zero() {
            p.push("sessions.idle_ttl: must be longer than zero".to_owned());
        }
        if self.loop_detection.window == 0 {
            p.push("loop_detection.window: must be at least 1".to_owned());
        }
        if self.retry.base_delay > self.retry.max_delay {
            p.push("retry.base_delay: is above retry.max_delay".to_owned());
        }
        p.extend(self.hooks.problems());
        if !(0.0..=1.0).contains(&self.unknown_tool.suggestion_threshold) {
            p.push("unknown_tool.suggestion_threshold: must be from 0 to 1".to_owned());
        }
        for (i, pattern) in self.redaction.patterns.iter().enumerate() {
            if let Err(e) = regex::Regex::new(&pattern.regex) {
                p.push(format!(
                    "redaction.patterns[{i}]: regex does not compile: {e}"
                ));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, remote) in self.remotes.iter().enumerate() {
            if !names.insert(&remote.name) {
                p.push(format!(
                    "remotes[{i}]: the name '{}' is used twice",
                    remote.name
                ));
            }
            if let Err(reason) = remote.check() {
                p.push(format!("remotes[{i}] ({}): {reason}", remote.name));
            }
        }
        for (name, binding) in &self.bindings {
            match &binding.input {
                None => {}
                Some(input @ serde_json::Value::Object(_)) => {
                    for problem in crate::mapping::problems(input) {
                        p.push(format!("bindings.{name}.{problem}"));
                    }
                }
                Some(_) => p.push(format!("bindings.{name}.input: must be a table")),
            }
        }
        for (name, tool) in &self.per_tool {
            if let Some(scope) = &tool.cache.scope
                && scope != "session"
                && scope != "global"
            {
                p.push(format!(
                    "per_tool.{name}.cache.scope: '{scope}' is not session or global"
                ));
            }
            let pointers = [&tool.cache.path, &tool.invalidates_path];
            for pointer in pointers.into_iter().flatten() {
                if !pointer.is_empty() && !pointer.starts_with('/') {
                    p.push(format!(
                        "per_tool.{name}: pointer '{pointer}' must start with '/'"
                    ));
                }
            }
            if tool.timeout.is_some_and(|t| t.is_zero()) {
                p.push(format!("per_tool.{name}.timeout: must be longer than zero"));
            }
        }
        for name in &self.tools.builtin.exclude {
            if !BUILTIN_NAMES.contains(&name.as_str()) {
                p.push(format!(
                    "tools.builtin.exclude: '{name}' is not a built-in tool (built-ins: {})",
                    BUILTIN_NAMES.join(", ")
                ));
            }
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            p.push(format!(
                "log.level: '{}' is not a valid log filter",
                self.log.level
            ));
        }
        p
    }
}

/// Types the merged table and checks it, adding to the problems found while merging.
fn finish(table: Table, mut problems: Vec<String>) -> Result<Config, ConfigError> {
    let config = from_table(table, &mut problems);
    problems.extend(config.problems());
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError { problems })
    }
}

impl HooksConfig {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            for (j, c) in rule.when.iter().enumerate() {
                let at = format!("hooks.rules[{i}].when[{j}]");
                let tests = [c.equals.is_some(), c.regex.is_some(), c.exists.is_some()];
                if tests.iter().filter(|t| **t).count() != 1 {
                    p.push(format!("{at}: set exactly one of equals, regex, exists"));
                }
                if !c.pointer.is_empty() && !c.pointer.starts_with('/') {
                    p.push(format!(
                        "{at}: pointer '{}' must be empty or start with '/'",
                        c.pointer
                    ));
                }
                if let Some(Err(e)) = c.regex.as_deref().map(regex::Regex::new) {
                    p.push(format!("{at}: regex does not compile: {e}"));
                }
            }
        }
        for (i, hook) in self.command.iter().enumerate() {
            if hook.command.first().is_none_or(String::is_empty) {
                p.push(format!("hooks.command[{i}].command: name a program to run"));
            }
        }
        for (i, hook) in self.grpc.iter().enumerate() {
            let authority = hook
                .endpoint
                .strip_prefix("http://")
                .or_else(|| hook.endpoint.strip_prefix("https://"))
                .unwrap_or("");
            if authority.is_empty() || authority.contains(char::is_whitespace) {
                p.push(format!(
                    "hooks.grpc[{i}].endpoint: '{}' is not a URL such as http://127.0.0.1:7000",
                    hook.endpoint
                ));
            }
        }
        p
    }
}

fn parse_toml(text: &str, origin: &str, problems: &mut Vec<String>) -> Table {
    match text.parse::<Table>() {
        Ok(table) => table,
        Err(e) => {
            problems.push(format!("{origin}: {}", e.to_string().trim_end()));
            Table::new()
        }
    }
}

/// Deep-merges `overrides` into `base`: tables merge key by key, anything else replaces.
fn merge(base: &mut Table, overrides: Table) {
    for (key, value) in overrides {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(into)), toml::Value::Table(from)) => merge(into, from),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// `TOOLGATE_SECTION__KEY=value` sets `section.key`; the value is read as a TOML value when it
/// parses as one (`100`, `true`, `["a"]`) and as a string otherwise. `TOOLGATE_LISTEN` is short
/// for `TOOLGATE_SERVER__LISTEN`. Variables without `__` are not config keys and are ignored.
fn apply_env(
    table: &mut Table,
    env: impl IntoIterator<Item = (String, String)>,
    problems: &mut Vec<String>,
) {
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    vars.sort();
    for (name, raw) in vars {
        let rest = &name[ENV_PREFIX.len()..];
        let path: Vec<String> = if rest == "LISTEN" {
            vec!["server".into(), "listen".into()]
        } else if rest.contains("__") {
            rest.split("__").map(str::to_lowercase).collect()
        } else {
            continue;
        };
        if path.iter().any(String::is_empty) {
            problems.push(format!("{name}: malformed variable name"));
            continue;
        }
        let value = format!("v = {raw}")
            .parse::<Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or(toml::Value::String(raw));
        if let Err(part) = set_path(table, &path, value) {
            problems.push(format!("{name}: '{part}' is not a section"));
        }
    }
}

/// Sets `path` in nested tables, creating them; fails with the segment that is not a table.
fn set_path(table: &mut Table, path: &[String], value: toml::Value) -> Result<(), String> {
    match path {
        [] => Ok(()),
        [last] => {
            table.insert(last.clone(), value);
            Ok(())
        }
        [first, rest @ ..] => {
            let entry = table
                .entry(first.clone())
                .or_insert_with(|| toml::Value::Table(Table::new()));
            match entry {
                toml::Value::Table(next) => set_path(next, rest, value),
                _ => Err(first.clone()),
            }
        }
    }
}

/// Deserializes each section on its own so one bad section does not hide problems in another.
fn from_table(mut table: Table, problems: &mut Vec<String>) -> Config {
    let mut config = Config::default();
    section(&mut table, "server", &mut config.server, problems);
    section(&mut table, "limits", &mut config.limits, problems);
    section(&mut table, "dispatch", &mut config.dispatch, problems);
    section(&mut table, "sessions", &mut config.sessions, problems);
    section(&mut table, "memory", &mut config.memory, problems);
    section(
        &mut table,
        "loop_detection",
        &mut config.loop_detection,
        problems,
    );
    section(&mut table, "breaker", &mut config.breaker, problems);
    section(&mut table, "retry", &mut config.retry, problems);
    section(&mut table, "per_tool", &mut config.per_tool, problems);
    section(&mut table, "hooks", &mut config.hooks, problems);
    section(&mut table, "validation", &mut config.validation, problems);
    section(&mut table, "output", &mut config.output, problems);
    section(&mut table, "redaction", &mut config.redaction, problems);
    section(&mut table, "cache", &mut config.cache, problems);
    section(
        &mut table,
        "unknown_tool",
        &mut config.unknown_tool,
        problems,
    );
    section(&mut table, "permissions", &mut config.permissions, problems);
    section(&mut table, "bindings", &mut config.bindings, problems);
    section(&mut table, "remotes", &mut config.remotes, problems);
    section(
        &mut table,
        "remote_registration",
        &mut config.remote_registration,
        problems,
    );
    section(&mut table, "tools", &mut config.tools, problems);
    section(&mut table, "log", &mut config.log, problems);
    for unknown in table.keys() {
        problems.push(format!(
            "unknown section '{unknown}' (known: server, limits, dispatch, sessions, memory, \
             loop_detection, breaker, retry, per_tool, hooks, validation, output, redaction, cache, \
             unknown_tool, permissions, bindings, remotes, remote_registration, tools, log)"
        ));
    }
    config
}

fn section<T: DeserializeOwned>(
    table: &mut Table,
    name: &str,
    into: &mut T,
    problems: &mut Vec<String>,
) {
    let Some(value) = table.remove(name) else {
        return;
    };
    match value.try_into::<T>() {
        Ok(parsed) => *into = parsed,
        Err(e) => problems.push(format!("[{name}]: {}", e.message().trim_end())),
    }
}

#[cfg(test)]
mod tests;
