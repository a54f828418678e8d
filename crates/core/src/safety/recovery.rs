//! Recovery: a reflector judges each failed attempt (retry, maybe with a corrected input, or give
//! up). The built-in one retries only what is safe to retry; embedders can plug in their own.

use serde_json::Value;

use crate::tools::ErrorClass;
use crate::tools::{Annotations, BoxFuture};

/// A failed attempt, as a reflector sees it.
#[derive(Debug, Clone)]
pub struct Failure<'a> {
    /// The tool that ran.
    pub tool: &'a str,
    pub annotations: Annotations,
    /// The input of the failed attempt.
    pub input: &'a Value,
    pub class: ErrorClass,
    pub message: &'a str,
    /// Whether the tool said trying again may succeed.
    pub retryable: bool,
    /// The attempt that failed (1 = the first execution).
    pub attempt: u32,
    /// The operator's per-tool `retry.enabled`, if set.
    pub retry_enabled: Option<bool>,
}

/// A reflector's judgement of a failure.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Run the call again (after backoff), with a corrected input object if given.
    Retry {
        reason: String,
        correction: Option<Value>,
    },
    /// Keep the failure as the call's result.
    GiveUp { reason: String },
}

/// Judges failed attempts. Implementations must be cheap or bounded: the call waits for them.
pub trait Reflector: Send + Sync {
    fn reflect<'a>(&'a self, failure: &'a Failure<'a>) -> BoxFuture<'a, Verdict>;
}

/// The built-in policy: retries TIMEOUT, TRANSPORT, and TOOL_ERROR the tool marked retryable,
/// only for tools annotated idempotent or read-only (and not destructive) or configured
/// `retry.enabled = true`.
/// Policy refusals, invalid input and unknown tools are never retried.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultReflector;

impl Reflector for DefaultReflector {
    fn reflect<'a>(&'a self, failure: &'a Failure<'a>) -> BoxFuture<'a, Verdict> {
        Box::pin(async move { judge(failure) })
    }
}

/// The built-in decision, as a plain function.
pub(crate) fn judge(failure: &Failure<'_>) -> Verdict {
    let give_up = |reason: &str| Verdict::GiveUp {
        reason: reason.to_owned(),
    };
    let reason = match failure.class {
        ErrorClass::Timeout => "the call timed out",
        ErrorClass::Transport => "the tool could not be reached",
        ErrorClass::ToolError if failure.retryable => "the tool marked the error retryable",
        ErrorClass::ToolError => return give_up("the tool did not mark the error retryable"),
        _ => return give_up("this kind of failure is never retried"),
    };
    let a = failure.annotations;
    // A destructive tool is never retried on its annotations alone, even when it also says it is
    // idempotent: only an operator's per-tool `retry.enabled = true` retries it.
    let eligible = failure
        .retry_enabled
        .unwrap_or((a.idempotent || a.read_only) && !a.destructive);
    if !eligible {
        return give_up(if a.destructive {
            "the tool is destructive and retry is not enabled for it"
        } else {
            "the tool is not idempotent or read-only and retry is not enabled for it"
        });
    }
    Verdict::Retry {
        reason: reason.to_owned(),
        correction: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[track_caller]
    fn check(
        class: ErrorClass,
        retryable: bool,
        annotations: Annotations,
        enabled: Option<bool>,
        retries: bool,
    ) {
        let input = json!({});
        let failure = Failure {
            tool: "t",
            annotations,
            input: &input,
            class,
            message: "x",
            retryable,
            attempt: 1,
            retry_enabled: enabled,
        };
        assert_eq!(
            matches!(judge(&failure), Verdict::Retry { .. }),
            retries,
            "{failure:?}"
        );
    }

    const PLAIN: Annotations = Annotations {
        read_only: false,
        destructive: false,
        idempotent: false,
        open_world: false,
    };
    const IDEMPOTENT: Annotations = Annotations {
        idempotent: true,
        ..PLAIN
    };
    const READ_ONLY: Annotations = Annotations {
        read_only: true,
        ..PLAIN
    };

    #[test]
    fn only_safe_failures_of_safe_tools_are_retried() {
        check(ErrorClass::Timeout, false, IDEMPOTENT, None, true);
        check(ErrorClass::Transport, false, READ_ONLY, None, true);
        check(ErrorClass::ToolError, true, IDEMPOTENT, None, true);
        check(ErrorClass::ToolError, false, IDEMPOTENT, None, false);
        check(ErrorClass::Timeout, false, PLAIN, None, false);
        check(ErrorClass::Timeout, false, PLAIN, Some(true), true);
        check(ErrorClass::Timeout, false, IDEMPOTENT, Some(false), false);
        let destructive = Annotations {
            destructive: true,
            ..IDEMPOTENT
        };
        check(ErrorClass::Transport, false, destructive, None, false);
        check(ErrorClass::Transport, false, destructive, Some(true), true);
        for never in [
            ErrorClass::Blocked,
            ErrorClass::PermissionDenied,
            ErrorClass::CircuitOpen,
            ErrorClass::InvalidArguments,
            ErrorClass::InvalidCall,
            ErrorClass::UnknownTool,
            ErrorClass::Panic,
            ErrorClass::Cancelled,
        ] {
            check(never, true, IDEMPOTENT, Some(true), false);
        }
    }
}
