//! Replies a client can accept: a batch result larger than `limits.max_reply_bytes` has its
//! largest results shrunk, and marked truncated, until it fits, rather than failing the batch at
//! the client's message-size limit and losing every result.

use prost::Message;

use super::convert;
use crate::dispatch::BatchReport;
use crate::pb;

/// Room kept for the envelope around the result (the `DispatchEvent` wrapper).
const ENVELOPE: usize = 16;

/// The batch result of `report`, within `max_bytes` when shrinking can make it so.
pub fn batch_result_within(report: &BatchReport, max_bytes: usize) -> pb::BatchResult {
    let limit = max_bytes.saturating_sub(ENVELOPE);
    let full = convert::batch_result(report);
    let size = full.encoded_len();
    if size <= limit {
        return full;
    }
    // The largest per-field size that fits, by bisection: the reply only grows with it.
    let (mut fits, mut too_big) = (0, size);
    let mut best = None;
    while fits + 1 < too_big {
        let mid = fits + (too_big - fits) / 2;
        let candidate = convert::batch_result(&report.shrunk(mid));
        if candidate.encoded_len() <= limit {
            fits = mid;
            best = Some(candidate);
        } else {
            too_big = mid;
        }
    }
    let reply = best.unwrap_or_else(|| convert::batch_result(&report.shrunk(0)));
    let shrunk_to = reply.encoded_len();
    if shrunk_to > limit {
        tracing::warn!(
            bytes = shrunk_to,
            limit = max_bytes,
            calls = report.results.len(),
            "a reply is over limits.max_reply_bytes even with every result emptied"
        );
    } else {
        tracing::info!(
            bytes = size,
            shrunk_to,
            limit = max_bytes,
            per_field = fits,
            "a reply over limits.max_reply_bytes was shrunk to fit"
        );
    }
    reply
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;
    use crate::dispatch::{CallResult, MessageFormat, Outcome, tool_messages};
    use crate::tools::ErrorClass;

    fn result(index: usize, arguments: Value, content: &str) -> CallResult {
        CallResult {
            index,
            id: format!("call_{index}"),
            id_generated: false,
            name: "echo".into(),
            tool: "echo".into(),
            success: true,
            arguments: Arc::new(arguments),
            result: Value::String(content.to_owned()),
            content: content.to_owned(),
            parts: Vec::new(),
            error: String::new(),
            error_class: ErrorClass::None,
            attempts: 1,
            duration: Duration::ZERO,
            cached: false,
            truncated: false,
        }
    }

    fn report(results: Vec<CallResult>) -> BatchReport {
        BatchReport {
            session_id: "s".into(),
            messages: tool_messages(&results, MessageFormat::Anthropic),
            results,
            outcome: Outcome::Completed,
            outcome_reason: String::new(),
            duration: Duration::ZERO,
            message_format: MessageFormat::Anthropic,
        }
    }

    #[test]
    fn a_reply_within_the_limit_is_untouched() {
        let r = report(vec![result(0, json!({"a": 1}), "small")]);
        assert_eq!(batch_result_within(&r, 1 << 20), convert::batch_result(&r));
    }

    #[test]
    fn an_oversized_reply_shrinks_its_large_results_and_keeps_the_small_ones() {
        let big = "x".repeat(600_000);
        let r = report(vec![
            result(0, json!({"text": big}), &big),
            result(1, json!({"n": 2}), "small and whole"),
        ]);
        assert!(convert::batch_result(&r).encoded_len() > 1 << 20);
        let reply = batch_result_within(&r, 1 << 20);
        assert!(reply.encoded_len() <= 1 << 20);
        let (large, small) = (&reply.results[0], &reply.results[1]);
        assert!(
            large.truncated && large.content.contains("[truncated:"),
            "{}",
            &large.content[large.content.len() - 60..]
        );
        assert!(
            large.content.len() > 100_000,
            "only as much cut as needed: {}",
            large.content.len()
        );
        assert_eq!(
            (small.truncated, small.content.as_str()),
            (false, "small and whole")
        );
        assert_eq!(
            reply.by_id["call_0"], *large,
            "by_id carries the same shrunk result"
        );
        let message = format!("{:?}", reply.messages[0]);
        assert!(message.contains("[truncated:") && message.contains("small and whole"));
        assert_eq!(reply.count, 2);
    }
}
