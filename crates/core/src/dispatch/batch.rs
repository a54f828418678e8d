//! What a batch is (received calls, context, bindings, options) and what it produced.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::time::Instant;

use super::messages::MessageFormat;
use super::result::CallResult;
use crate::calls::Received;

/// One batch of received calls and how to run it.
#[derive(Debug, Clone)]
pub struct Batch {
    /// A validated session id; empty means a fresh session for this batch only.
    pub session_id: String,
    pub calls: Vec<Received>,
    /// The request context that input references read.
    pub context: Map<String, Value>,
    /// The request's bindings; they override the server's bindings of the same name.
    pub bindings: BTreeMap<String, Binding>,
    pub options: BatchOptions,
    pub turn: u32,
    /// Who sent the batch: its tenant namespaces the session, permission rules may match it.
    pub caller: std::sync::Arc<crate::identity::Caller>,
    /// The span the batch runs under (the RPC's, which continues the client's `traceparent`);
    /// `Span::none()` starts a new trace.
    pub trace: crate::trace::Span,
}

/// A model-facing tool name bound to a registered tool and an input mapping (a request's
/// `bindings`, or `[bindings.<name>]` in config).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// The registered tool to run.
    pub tool: String,
    /// The input mapping (see `mapping`); `None` passes the call's arguments.
    #[serde(default)]
    pub input: Option<Value>,
}

/// Per-batch settings, already resolved against server defaults.
#[derive(Debug, Clone, Copy)]
pub struct BatchOptions {
    pub message_format: MessageFormat,
    /// The request's own per-call timeout; `None` uses the tool's or the server's.
    pub call_timeout: Option<Duration>,
    /// The request's deadline (from gRPC); no call runs past it.
    pub deadline: Option<Instant>,
    pub mode: Mode,
    /// Stop at the first failed call: the calls that ran keep their results, the rest are
    /// SKIPPED, and the batch ends FAILED_FAST.
    pub fail_fast: bool,
    /// A call a hook or permission rule asks about waits for a person's answer
    /// (`approvals.rs`) instead of being refused.
    pub interactive_approvals: bool,
}

/// How the calls of a batch are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// One call at a time, in the model's order.
    #[default]
    Sequential,
    /// Calls that do not conflict run together, at most `max_concurrency` at once.
    Parallel { max_concurrency: usize },
}

/// How a batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    FailedFast,
    Cancelled,
    LoopDetected,
    RecoveryExhausted,
}

impl Outcome {
    /// The name used on the wire (`COMPLETED`), for metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Completed => "COMPLETED",
            Outcome::FailedFast => "FAILED_FAST",
            Outcome::Cancelled => "CANCELLED",
            Outcome::LoopDetected => "LOOP_DETECTED",
            Outcome::RecoveryExhausted => "RECOVERY_EXHAUSTED",
        }
    }
}

/// Everything a batch produced.
#[derive(Debug, Clone)]
pub struct BatchReport {
    pub session_id: String,
    /// One per call, in the model's order.
    pub results: Vec<CallResult>,
    /// Tool messages in the requested format.
    pub messages: Vec<Map<String, Value>>,
    pub outcome: Outcome,
    pub outcome_reason: String,
    pub duration: Duration,
    /// The format `messages` are in.
    pub message_format: MessageFormat,
}

impl BatchReport {
    /// This report with every result shrunk to about `max_chars` characters per field (see
    /// `CallResult::shrink_to`) and its messages rebuilt from them.
    pub fn shrunk(&self, max_chars: usize) -> BatchReport {
        let mut results = self.results.clone();
        for result in &mut results {
            result.shrink_to(max_chars);
        }
        BatchReport {
            session_id: self.session_id.clone(),
            messages: super::messages::tool_messages(&results, self.message_format),
            results,
            outcome: self.outcome,
            outcome_reason: self.outcome_reason.clone(),
            duration: self.duration,
            message_format: self.message_format,
        }
    }

    /// Number of results with success false.
    pub fn errors(&self) -> usize {
        self.results.iter().filter(|r| !r.success).count()
    }

    pub fn all_succeeded(&self) -> bool {
        self.errors() == 0
    }
}
