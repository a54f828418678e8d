//! `[hooks]`: rule, command and gRPC hooks, asked before and after each tool runs.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use toolgate_core::duration;
use toolgate_core::safety::hooks::{Action, Condition, FailureMode};

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

/// `[[hooks.rules]]`: when the tool matches and every condition holds, take the action.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Shown as the gate decision's source; default `rules[<n>]`.
    #[serde(default)]
    pub id: Option<String>,
    /// Tool-name glob (`*`, `?`).
    #[serde(default = "super::any_tool")]
    pub tools: String,
    pub action: Action,
    /// The reason the model reads.
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub when: Vec<ConditionConfig>,
    /// Whether the identity that sent the batch may answer this hook's asks; unset: the
    /// `[approvals]` value.
    #[serde(default)]
    pub requester_may_answer: Option<bool>,
    /// `false`: an answer to this hook's asks is never remembered for the session.
    #[serde(default = "super::pipeline::remember_default")]
    pub remember: bool,
}

impl RuleConfig {
    /// The name the `i`th rule decides and asks under.
    pub fn name(&self, i: usize) -> String {
        self.id.clone().unwrap_or_else(|| format!("rules[{i}]"))
    }
}

impl CommandHookConfig {
    /// The name the `i`th command hook decides and asks under.
    pub fn name(&self, i: usize) -> String {
        self.name.clone().unwrap_or_else(|| format!("command[{i}]"))
    }
}

impl GrpcHookConfig {
    /// The name the `i`th gRPC hook decides and asks under.
    pub fn name(&self, i: usize) -> String {
        self.name.clone().unwrap_or_else(|| format!("grpc[{i}]"))
    }
}

/// What a hook or rule is configured as, in a few characters (a digest of its settings): an
/// answer remembered for a session is kept under its name and this, so once the entry under a
/// name changes (edited, or rules reordered so a position names another), it is asked again.
pub fn fingerprint(entry: &impl std::fmt::Debug) -> String {
    toolgate_core::json::digest(&serde_json::Value::String(format!("{entry:?}")))
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

/// `[[hooks.command]]`: a program run per call with the call as JSON on stdin.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandHookConfig {
    /// The gate decision's source; default `command[<n>]`.
    #[serde(default)]
    pub name: Option<String>,
    /// Program and arguments (no shell).
    pub command: Vec<String>,
    /// Tool-name glob.
    #[serde(default = "super::any_tool")]
    pub tools: String,
    /// Past this the run is a hook failure; default 10s.
    #[serde(default = "command_timeout", with = "duration")]
    pub timeout: Duration,
    #[serde(default)]
    pub failure_mode: FailureMode,
    /// Environment variables set for this hook's program, over `hooks.env_allow`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Whether the identity that sent the batch may answer this hook's asks; unset: the
    /// `[approvals]` value.
    #[serde(default)]
    pub requester_may_answer: Option<bool>,
    /// `false`: an answer to this hook's asks is never remembered for the session.
    #[serde(default = "super::pipeline::remember_default")]
    pub remember: bool,
}

fn command_timeout() -> Duration {
    Duration::from_secs(10)
}

/// `[[hooks.grpc]]`: a remote `toolgate.v1.ToolHooks` service.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcHookConfig {
    /// The gate decision's source; default `grpc[<n>]`.
    #[serde(default)]
    pub name: Option<String>,
    /// `http://host:port`: text handed to the hook's channel, checked by validation so that
    /// the problem names the entry (`hooks.grpc[<n>].endpoint`), as remotes' endpoints are.
    pub endpoint: String,
    /// Tool-name glob.
    #[serde(default = "super::any_tool")]
    pub tools: String,
    /// Default 2s.
    #[serde(default = "grpc_timeout", with = "duration")]
    pub timeout: Duration,
    #[serde(default)]
    pub failure_mode: FailureMode,
    /// Whether the identity that sent the batch may answer this hook's asks; unset: the
    /// `[approvals]` value.
    #[serde(default)]
    pub requester_may_answer: Option<bool>,
    /// `false`: an answer to this hook's asks is never remembered for the session.
    #[serde(default = "super::pipeline::remember_default")]
    pub remember: bool,
}

fn grpc_timeout() -> Duration {
    Duration::from_secs(2)
}
