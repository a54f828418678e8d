//! Replies a client can accept: a batch result larger than `limits.max_reply_bytes` has its
//! largest results shrunk, and marked truncated, until it fits, rather than failing the batch at
//! the client's message-size limit and losing every result.

use super::convert;
use super::status::RequestError;
use toolgate_core::dispatch::{BatchReport, CallResult};
use toolgate_proto::codec::written_len;
use toolgate_proto::pb;

/// Room kept for the envelope around the result (the `DispatchEvent` wrapper).
const ENVELOPE: usize = 16;

/// How many times the reply carries each field a result can be shrunk in: arguments, result
/// and error in `results` and `by_id`, content there and in the tool message.
const COPIES: [usize; 5] = [2, 3, 2, 2, 2];

/// Attempts at a cut before emptying every result.
const ATTEMPTS: usize = 4;

/// The batch result of `report`, within `max_bytes`; an error only when even emptying every
/// result cannot make it fit (ids and names are bounded at intake, so only a very small limit
/// with very many calls gets there).
///
/// The cut is planned from the fields' sizes (one pass, no re-encoding per guess), applied once
/// and measured; a cut that still does not fit is tightened a few times before results are
/// emptied.
pub fn batch_result_within(
    report: &BatchReport,
    max_bytes: usize,
) -> Result<pb::BatchResult, RequestError> {
    let limit = max_bytes.saturating_sub(ENVELOPE);
    let full = convert::batch_result(report);
    let size = written_len(&full);
    if size <= limit {
        return Ok(full);
    }
    drop(full);
    let fields: Vec<[usize; 5]> = report.results.iter().map(field_sizes).collect();
    let mut cut = plan(&fields, size - limit);
    for _ in 0..ATTEMPTS {
        let reply = convert::batch_result(&report.shrunk(cut));
        let shrunk_to = written_len(&reply);
        if shrunk_to <= limit {
            tracing::info!(
                bytes = size,
                shrunk_to,
                limit = max_bytes,
                per_field = cut,
                "a reply over limits.max_reply_bytes was shrunk to fit"
            );
            return Ok(reply);
        }
        if cut == 0 {
            break;
        }
        cut /= 2;
    }
    let emptied = convert::batch_result(&report.shrunk(0));
    let bytes = written_len(&emptied);
    if bytes <= limit {
        return Ok(emptied);
    }
    Err(RequestError::ReplyTooLarge {
        bytes,
        limit: max_bytes,
    })
}

/// Sizes of a result's shrinkable fields, in the order of `COPIES`.
fn field_sizes(r: &CallResult) -> [usize; 5] {
    let arguments = toolgate_core::json::canonical(&r.arguments).len();
    let result = match &r.result {
        serde_json::Value::String(text) => text.len(),
        serde_json::Value::Null => 0,
        // A structured result is about as long as its content, which is its JSON text.
        _ => r.content.len(),
    };
    let parts = r
        .parts
        .iter()
        .map(|p| match p {
            toolgate_core::tools::ContentPart::Text(t) => t.len(),
            toolgate_core::tools::ContentPart::Image { data, .. } => data.len(),
        })
        .sum();
    [arguments, r.content.len(), result, r.error.len(), parts]
}

/// The largest per-field size whose cut saves at least `excess` bytes by the estimate.
fn plan(fields: &[[usize; 5]], excess: usize) -> usize {
    let saved = |cut: usize| -> usize {
        fields
            .iter()
            .flat_map(|sizes| sizes.iter().zip(COPIES))
            .map(|(&len, copies)| len.saturating_sub(cut) * copies)
            .sum()
    };
    let largest = fields.iter().flatten().copied().max().unwrap_or(0);
    // saved() only shrinks as the cut grows: find the last cut that still saves enough.
    let (mut low, mut high) = (0, largest);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if saved(mid) >= excess {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    low
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use prost::Message;
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;
    use toolgate_core::dispatch::{CallResult, MessageFormat, Outcome, tool_messages};
    use toolgate_core::tools::ErrorClass;

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
            client_deadline: false,
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
    fn a_long_error_is_cut_too_and_a_reply_that_cannot_fit_is_an_error() {
        let mut failed = result(0, json!({}), "");
        failed.success = false;
        failed.result = Value::Null;
        failed.error = "e".repeat(900_000);
        failed.content = failed.error.clone();
        let reply = batch_result_within(&report(vec![failed]), 1 << 20).unwrap();
        assert!(written_len(&reply) <= 1 << 20);
        assert!(reply.results[0].truncated && reply.results[0].error.len() < 900_000);
        // 2,000 calls with 200-byte ids cannot fit 64 KiB whatever is cut.
        let many: Vec<CallResult> = (0..2000)
            .map(|i| {
                let mut r = result(i, json!({}), "");
                r.id = format!("{i:0>200}");
                r
            })
            .collect();
        let error = batch_result_within(&report(many), 64 * 1024).unwrap_err();
        assert!(
            matches!(error, RequestError::ReplyTooLarge { .. }),
            "{error}"
        );
    }

    #[test]
    fn a_reply_within_the_limit_is_untouched() {
        let r = report(vec![result(0, json!({"a": 1}), "small")]);
        assert_eq!(
            batch_result_within(&r, 1 << 20).unwrap(),
            convert::batch_result(&r)
        );
    }

    #[test]
    fn an_oversized_reply_shrinks_its_large_results_and_keeps_the_small_ones() {
        let big = "x".repeat(600_000);
        let r = report(vec![
            result(0, json!({"text": big}), &big),
            result(1, json!({"n": 2}), "small and whole"),
        ]);
        assert!(written_len(&convert::batch_result(&r)) > 1 << 20);
        let reply = batch_result_within(&r, 1 << 20).unwrap();
        assert!(written_len(&reply) <= 1 << 20);
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
        let mut written = Vec::new();
        toolgate_proto::codec::encode_reply(reply.clone(), &mut written);
        assert_eq!(written.len(), written_len(&reply));
        let written = pb::BatchResult::decode(written.as_slice()).unwrap();
        assert_eq!(
            written.by_id["call_0"], *large,
            "by_id carries the same shrunk result"
        );
        let message = format!("{:?}", reply.messages[0]);
        assert!(message.contains("[truncated:") && message.contains("small and whole"));
        assert_eq!(reply.count, 2);
    }
}
