//! Loop detection around one call: the guard that checks and records its operation, and the
//! texts a stopped or warned loop produces, written once for executed, refused and unknown calls.

use std::sync::Arc;

use serde_json::Value;

use crate::dispatch::result::CallResult;
use crate::json;
use crate::safety::detector::{Check, Operation, Thresholds, Warning};
use crate::safety::policy::Policy;
use crate::session::Lease;

/// One call's operation as loop detection sees it: the tool and the canonical input.
pub(super) struct LoopGuard<'a> {
    session: &'a Lease,
    tool: &'a str,
    /// Canonical JSON of the input; memory records it too, and the cache keys on it.
    pub input: Arc<str>,
    /// `None` when loop detection is off for this tool.
    pub thresholds: Option<Thresholds>,
}

/// A loop the pre-check stopped.
pub(super) struct LoopStop {
    pub repeats: u32,
    pub pattern: String,
}

impl LoopStop {
    /// Why the batch ends (`outcome_reason`).
    pub(super) fn reason(&self) -> String {
        format!(
            "Loop detected: {} repeated {} times",
            self.pattern, self.repeats
        )
    }

    /// What the model reads in the refused call's result.
    pub(super) fn message(&self) -> String {
        format!("dispatch refused before execution: {}", self.reason())
    }
}

impl<'a> LoopGuard<'a> {
    pub(super) fn new(session: &'a Lease, policy: &Policy, tool: &'a str, input: &Value) -> Self {
        LoopGuard {
            session,
            tool,
            input: json::canonical(input).into(),
            thresholds: policy.loop_thresholds(tool),
        }
    }

    /// The pre-check: `Some` when this call would repeat an operation at or past the stop
    /// threshold. A stop uses the pattern up, so the next batch may try again.
    pub(super) fn stop(&self) -> Option<LoopStop> {
        let th = self.thresholds?;
        let mut detector = self.session.detector();
        let Check::Stop { repeats, pattern } = detector.check(self.tool, &self.input, th) else {
            return None;
        };
        detector.clear(self.tool, &self.input);
        Some(LoopStop { repeats, pattern })
    }

    /// Records the attempt's operation; the warning comes once per pattern.
    pub(super) fn record(&self, result: &CallResult) -> Option<Warning> {
        let th = self.thresholds?;
        let op = Operation {
            tool: self.tool,
            input: &self.input,
            result: result_hash(result),
        };
        self.session.detector().record(op, th)
    }

    /// Records a refusal. It is never retried, so a warning has no later result to ride on; the
    /// stop is what matters, and it comes from the pre-check of the next identical call.
    pub(super) fn record_refusal(&self, result: &CallResult) {
        let _ = self.record(result);
    }
}

/// The result's identity for loop detection: class and content, FNV-1a.
fn result_hash(result: &CallResult) -> u64 {
    use crate::hash::{FNV1A_OFFSET, fnv1a_extend};
    let hash = fnv1a_extend(FNV1A_OFFSET, result.error_class.name().as_bytes());
    fnv1a_extend(fnv1a_extend(hash, &[0]), result.content.as_bytes())
}

/// The one line appended to a result when its call starts to loop.
pub(super) fn loop_warning(pattern: &str, repeats: u32, stop_after: u32) -> String {
    let mut line = format!(
        "\n[toolgate] warning: {pattern} has returned the same result {repeats} times; change the arguments or try another approach"
    );
    if stop_after > 0 {
        line.push_str(&format!(" (it will be refused after {stop_after} repeats)"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_warning_is_one_line() {
        let w = loop_warning("t({})", 3, 10);
        assert_eq!(w.lines().filter(|l| !l.is_empty()).count(), 1);
        assert!(w.ends_with("(it will be refused after 10 repeats)"), "{w}");
    }

    #[test]
    fn a_stop_reads_the_same_everywhere() {
        let stop = LoopStop {
            repeats: 10,
            pattern: "t({})".into(),
        };
        assert_eq!(stop.reason(), "Loop detected: t({}) repeated 10 times");
        assert_eq!(
            stop.message(),
            "dispatch refused before execution: Loop detected: t({}) repeated 10 times"
        );
    }
}
