//! The sections the per-call pipeline reads: loop detection, retry, validation, output caps,
//! redaction, the cache, unknown-tool suggestions, permissions and per-tool overrides.

use std::time::Duration;

use serde::Deserialize;

use toolgate_core::approvals::AskPolicy;
use toolgate_core::dispatch;
use toolgate_core::duration;
use toolgate_core::duration::optional as optional_duration;
use toolgate_core::middleware::{self, CacheScope, PermissionVerdict};
use toolgate_core::safety::policy::{PerToolLoop, PerToolRetry, Policy};
use toolgate_core::session::SessionLimits;

/// `[loop_detection]`: repeating operations per session.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoopDetectionConfig {
    pub enabled: bool,
    /// Operations remembered per session.
    pub window: usize,
    /// Repeats at which a `loop_detected` warning fires; 0 never warns.
    pub warn_after: u32,
    /// Repeats after which the next repeat is refused and the batch ends; 0 never stops.
    pub stop_after: u32,
    /// Append a one-line warning to the result at `warn_after`.
    pub append_warning: bool,
}

impl Default for LoopDetectionConfig {
    fn default() -> Self {
        let policy = Policy::default();
        LoopDetectionConfig {
            enabled: policy.loop_enabled,
            window: SessionLimits::default().loop_window,
            warn_after: policy.loop_thresholds.warn_after,
            stop_after: policy.loop_thresholds.stop_after,
            append_warning: policy.append_loop_warning,
        }
    }
}

/// `[retry]`: retries of failures the reflector judges retryable, and their backoff.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySection {
    pub max_retries: u32,
    /// The first delay, doubled per retry.
    #[serde(with = "duration")]
    pub base_delay: Duration,
    /// The cap on one delay.
    #[serde(with = "duration")]
    pub max_delay: Duration,
    /// Spread each delay over [delay/2, delay].
    pub jitter: bool,
}

impl Default for RetrySection {
    fn default() -> Self {
        let policy = Policy::default();
        RetrySection {
            max_retries: policy.max_retries,
            base_delay: policy.backoff.base,
            max_delay: policy.backoff.max,
            jitter: policy.backoff.jitter,
        }
    }
}

/// `[validation]`: arguments checked against each tool's input schema.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ValidationConfig {
    pub enabled: bool,
}

impl Default for ValidationConfig {
    fn default() -> Self {
        ValidationConfig {
            enabled: middleware::DEFAULTS.validate,
        }
    }
}

/// `[output]`: caps on what the model reads.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// Most characters of content per call; 0: no cap.
    pub max_chars: usize,
    /// Characters shared by all results of one batch; 0: no batch budget.
    pub batch_budget_chars: usize,
    /// Longest error text in a result or a fail-fast reason.
    pub max_error_chars: usize,
    /// Longest argument or result preview carried by an event.
    pub event_preview_chars: usize,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            max_chars: middleware::DEFAULTS.max_output_chars,
            batch_budget_chars: dispatch::DEFAULTS.batch_budget_chars,
            max_error_chars: dispatch::DEFAULTS.max_error_chars,
            event_preview_chars: dispatch::DEFAULTS.preview_chars,
        }
    }
}

/// `[redaction]`: secrets removed from everything that leaves a tool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedactionConfig {
    pub enabled: bool,
    /// Also redact long runs of high-entropy token characters.
    pub entropy: bool,
    /// Extra patterns, each with the kind named in `[REDACTED:<kind>]`.
    pub patterns: Vec<RedactionPattern>,
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

impl RedactionConfig {
    /// The redactor this section describes (one that changes nothing when it is off).
    pub fn redactor(
        &self,
    ) -> Result<toolgate_core::middleware::Redactor, toolgate_core::middleware::PatternError> {
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

/// `[[redaction.patterns]]`: one extra secret pattern.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionPattern {
    pub kind: String,
    pub regex: String,
}

/// `[cache]`: the result cache of tools that turn it on in `per_tool`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    pub max_entries: usize,
    /// Bytes all entries may hold (0: no bound); an output over an eighth of it is not kept.
    pub max_bytes: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_entries: middleware::DEFAULTS.cache_max_entries,
            max_bytes: middleware::DEFAULTS.cache_max_bytes,
        }
    }
}

/// `[unknown_tool]`: the "Did you mean" suggestion.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UnknownToolConfig {
    /// How similar (0 to 1) a registered name must be to be suggested.
    pub suggestion_threshold: f64,
}

impl Default for UnknownToolConfig {
    fn default() -> Self {
        UnknownToolConfig {
            suggestion_threshold: middleware::DEFAULTS.suggestion_threshold,
        }
    }
}

/// `[approvals]`: how long a call an ask paused (in a batch with interactive approvals) waits
/// for a person, and who that person may be.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// Unanswered this long, the call ends APPROVAL_TIMEOUT (never past the request's deadline).
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// The identity that sent a batch may answer its own approvals (every hook and rule that
    /// does not say otherwise); off: only approvers and admins of the tenant.
    pub requester_may_answer: bool,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        ApprovalsConfig {
            timeout: dispatch::DEFAULTS.approval_timeout,
            requester_may_answer: AskPolicy::default().requester_may_answer,
        }
    }
}

impl ApprovalsConfig {
    /// The policy of a hook or rule that sets `requester_may_answer` (unset: this section's)
    /// and `remember`.
    pub fn policy(
        &self,
        requester_may_answer: Option<bool>,
        remember: bool,
    ) -> toolgate_core::approvals::AskPolicy {
        toolgate_core::approvals::AskPolicy {
            requester_may_answer: requester_may_answer.unwrap_or(self.requester_may_answer),
            remember,
        }
    }
}

/// The default of a rule's or hook's `remember`: answers may be remembered.
pub(crate) fn remember_default() -> bool {
    true
}

/// `[permissions]`: rules on who may run which tool; none by default.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PermissionsConfig {
    /// The first rule that matches decides; no match allows.
    pub rules: Vec<PermissionRuleConfig>,
}

impl PermissionRuleConfig {
    /// The name the `i`th rule decides and asks under (`PermissionRule::source_of` adds the
    /// section).
    pub fn name(&self, i: usize) -> String {
        self.id.clone().unwrap_or_else(|| format!("rules[{i}]"))
    }
}

/// `[[permissions.rules]]`: one rule.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionRuleConfig {
    /// The gate decision's source; default `rules[<n>]`.
    #[serde(default)]
    pub id: Option<String>,
    /// Tool-name glob.
    #[serde(default = "super::any_tool")]
    pub tools: String,
    /// Only for these callers (globs of identities, of tenants; role names); empty: everyone.
    #[serde(default)]
    pub identities: Vec<String>,
    #[serde(default)]
    pub tenants: Vec<String>,
    #[serde(default)]
    pub roles: Vec<String>,
    pub decision: PermissionVerdict,
    /// The reason the model reads.
    #[serde(default)]
    pub reason: String,
    /// Whether the identity that sent the batch may answer this rule's asks; unset: the
    /// `[approvals]` value.
    #[serde(default)]
    pub requester_may_answer: Option<bool>,
    /// `false`: an answer to this rule's asks is never remembered for the session.
    #[serde(default = "remember_default")]
    pub remember: bool,
}

/// Overrides for one tool, under `[per_tool.<name>]`; unset keys take the global settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerTool {
    /// This tool's call deadline.
    #[serde(with = "optional_duration")]
    pub timeout: Option<Duration>,
    /// This tool's content cap.
    pub max_output_chars: Option<usize>,
    pub retry: PerToolRetry,
    pub loop_detection: PerToolLoop,
    pub cache: PerToolCache,
    /// JSON pointer of the path this tool writes: its success evicts cached entries of that path.
    pub invalidates_path: Option<String>,
    /// `false`: JSON objects this tool returns pass through whole (no result selection).
    pub select_result: Option<bool>,
}

/// `[per_tool.<name>.cache]`: caching of one tool's results (off unless enabled).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PerToolCache {
    pub enabled: bool,
    /// An entry expires after this long; `None`: no time limit.
    #[serde(with = "optional_duration")]
    pub ttl: Option<Duration>,
    /// An entry expires once the request's turn advances by this much; `None`: no turn limit.
    pub ttl_turns: Option<u32>,
    pub scope: CacheScope,
    /// JSON pointer of the path this tool reads.
    pub path: Option<String>,
}
