//! A `BatchResult` written with each call's result encoded once, and `by_id` written from
//! `results`. prost would write every result twice (`results` and `by_id`) and measure it more
//! often still (the reply's length, then each nested message's again at every level as it writes
//! it). Here each result is encoded once and `results` and `by_id` carry those bytes: an embedded
//! message and a `bytes` field are the same on the wire (and a map is a repeated entry message),
//! so the output decodes to a `BatchResult` whose `by_id` holds each id's first result.
//!
//! The conversion (`convert::batch_result`) leaves `by_id` empty for this reason; entries a
//! `BatchResult` does carry in `by_id` are written after the derived ones (on the wire a later
//! map entry replaces an earlier one with its key).

use std::collections::HashSet;

use prost::Message;
use prost::bytes::Bytes;
use prost::encoding::{encoded_len_varint, hash_map, message, string};

use crate::pb;

/// `toolgate.v1.BatchResult` with its results already encoded: same tags, same wire types.
#[derive(Clone, PartialEq, Message)]
pub(super) struct WireBatchResult {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    results: Vec<Bytes>,
    #[prost(uint32, tag = "2")]
    count: u32,
    #[prost(uint32, tag = "3")]
    errors: u32,
    #[prost(bool, tag = "4")]
    all_succeeded: bool,
    #[prost(message, repeated, tag = "5")]
    messages: Vec<crate::protojson::Struct>,
    #[prost(message, repeated, tag = "6")]
    by_id: Vec<ByIdEntry>,
    #[prost(int32, tag = "7")]
    outcome: i32,
    #[prost(string, tag = "8")]
    outcome_reason: String,
    #[prost(message, optional, tag = "9")]
    duration: Option<prost_types::Duration>,
    #[prost(string, tag = "10")]
    session_id: String,
}

/// One entry of the `by_id` map as the wire has it (prost too leaves out an empty key and a
/// default value).
#[derive(Clone, PartialEq, Message)]
pub(super) struct ByIdEntry {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(bytes = "bytes", tag = "2")]
    value: Bytes,
}

impl From<pb::BatchResult> for WireBatchResult {
    fn from(reply: pb::BatchResult) -> Self {
        // Every field named: a field added to the proto fails to compile here instead of
        // silently missing from replies.
        let pb::BatchResult {
            results,
            count,
            errors,
            all_succeeded,
            messages,
            by_id,
            outcome,
            outcome_reason,
            duration,
            session_id,
        } = reply;
        let encoded: Vec<Bytes> = results
            .iter()
            .map(|result| Bytes::from(result.encode_to_vec()))
            .collect();
        let mut entries = Vec::with_capacity(results.len() + by_id.len());
        for at in first_of_each_id(&results) {
            entries.push(ByIdEntry {
                key: results[at].id.clone(),
                value: encoded[at].clone(),
            });
        }
        for (key, value) in by_id {
            entries.push(ByIdEntry {
                key,
                value: Bytes::from(value.encode_to_vec()),
            });
        }
        let by_id = entries;
        WireBatchResult {
            results: encoded,
            count,
            errors,
            all_succeeded,
            messages,
            by_id,
            outcome,
            outcome_reason,
            duration,
            session_id,
        }
    }
}

/// The indices of the results whose id no earlier result has, in order.
fn first_of_each_id(results: &[pb::CallResult]) -> Vec<usize> {
    if let [_] = results {
        return vec![0];
    }
    let mut seen = HashSet::with_capacity(results.len());
    (0..results.len())
        .filter(|&at| seen.insert(results[at].id.as_str()))
        .collect()
}

/// The length `reply` is written at: each result measured once and counted again for the
/// `by_id` entry of each id's first result, as `WireBatchResult` writes it.
pub fn written_len(reply: &pb::BatchResult) -> usize {
    // Every field named, as in `From`: a field added to the proto fails to compile here.
    let pb::BatchResult {
        results,
        count,
        errors,
        all_succeeded,
        messages,
        by_id,
        outcome,
        outcome_reason,
        duration,
        session_id,
    } = reply;
    let lengths: Vec<usize> = results.iter().map(Message::encoded_len).collect();
    let derived: usize = first_of_each_id(results)
        .into_iter()
        .map(|at| {
            // The entry leaves out an empty key and an empty value, as prost does.
            let id = &results[at].id;
            let key = if id.is_empty() {
                0
            } else {
                delimited(id.len())
            };
            let value = if lengths[at] == 0 {
                0
            } else {
                delimited(lengths[at])
            };
            delimited(key + value)
        })
        .sum();
    let scalars = pb::BatchResult {
        count: *count,
        errors: *errors,
        all_succeeded: *all_succeeded,
        outcome: *outcome,
        duration: *duration,
        ..pb::BatchResult::default()
    };
    lengths.iter().map(|&len| delimited(len)).sum::<usize>()
        + derived
        + messages
            .iter()
            .map(|m| delimited(m.encoded_len()))
            .sum::<usize>()
        + hash_map::encoded_len(string::encoded_len, message::encoded_len, 6, by_id)
        + string::encoded_len(8, outcome_reason) * usize::from(!outcome_reason.is_empty())
        + string::encoded_len(10, session_id) * usize::from(!session_id.is_empty())
        + scalars.encoded_len()
}

/// A length-delimited field of `len` bytes with a one-byte key (every tag here is below 16).
fn delimited(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protojson;
    use serde_json::json;
    use std::collections::HashMap;

    fn result(index: u32, id: &str, text: &str) -> pb::CallResult {
        let output = protojson::Value::from(json!({"text": text}));
        pb::CallResult {
            index,
            id: id.to_owned(),
            name: "echo".to_owned(),
            success: true,
            content: format!("{{\"text\":\"{text}\"}}"),
            result: Some(output),
            ..Default::default()
        }
    }

    fn reply(
        results: Vec<pb::CallResult>,
        by_id: HashMap<String, pb::CallResult>,
    ) -> pb::BatchResult {
        pb::BatchResult {
            count: u32::try_from(results.len()).unwrap(),
            errors: 1,
            all_succeeded: false,
            messages: vec![protojson::Struct::from(
                json!({"role": "tool"}).as_object().unwrap().clone(),
            )],
            by_id,
            outcome: 3,
            outcome_reason: "because".to_owned(),
            duration: Some(prost_types::Duration {
                seconds: 1,
                nanos: 5,
            }),
            session_id: "s".to_owned(),
            results,
        }
    }

    /// `reply` as prost would have to hold it: `by_id` filled with each id's first result.
    fn with_by_id(mut reply: pb::BatchResult) -> pb::BatchResult {
        for r in reply.results.clone() {
            reply.by_id.entry(r.id.clone()).or_insert(r);
        }
        reply
    }

    #[test]
    fn a_one_call_reply_is_byte_for_byte_what_prost_writes() {
        let reply = reply(vec![result(0, "call_1", "hi")], HashMap::new());
        let full = with_by_id(reply.clone());
        let wire = WireBatchResult::from(reply.clone());
        assert_eq!(wire.encoded_len(), full.encoded_len());
        assert_eq!(written_len(&reply), full.encoded_len());
        assert_eq!(wire.encode_to_vec(), full.encode_to_vec());
    }

    #[test]
    fn replies_decode_with_by_id_written_from_results() {
        // Repeated ids (by_id keeps the first), an empty id, and no results at all.
        let results = vec![
            result(0, "a", "one"),
            result(1, "a", "two"),
            result(2, "", "three"),
            result(3, "b", "four"),
        ];
        // Entries a reply does carry are written too, after the derived ones, so they win.
        let carried: HashMap<String, pb::CallResult> = [
            ("stray".to_owned(), result(7, "stray", "elsewhere")),
            ("b".to_owned(), result(1, "moved", "not the result at 3")),
            ("default".to_owned(), pb::CallResult::default()),
        ]
        .into();
        for (reply, expected) in [
            (
                reply(results.clone(), HashMap::new()),
                with_by_id(reply(results.clone(), HashMap::new())),
            ),
            (reply(results.clone(), carried.clone()), {
                let mut expected = with_by_id(reply(results, HashMap::new()));
                expected.by_id.extend(carried);
                expected
            }),
            (pb::BatchResult::default(), pb::BatchResult::default()),
            // Results that encode to nothing: their by_id entry has no value field at all.
            (
                reply(vec![pb::CallResult::default(); 2], HashMap::new()),
                with_by_id(reply(vec![pb::CallResult::default(); 2], HashMap::new())),
            ),
            (
                reply(Vec::new(), HashMap::new()),
                reply(Vec::new(), HashMap::new()),
            ),
        ] {
            let bytes = WireBatchResult::from(reply.clone()).encode_to_vec();
            assert_eq!(bytes.len(), written_len(&reply));
            assert_eq!(pb::BatchResult::decode(bytes.as_slice()).unwrap(), expected);
        }
    }

    #[test]
    fn the_encoder_writes_results_and_events_as_prost_does() {
        let reply = reply(vec![result(0, "call_1", "hi")], HashMap::new());
        let full = with_by_id(reply.clone());
        let written = |item: &dyn Fn(&mut Vec<u8>)| {
            let mut buf = Vec::new();
            item(&mut buf);
            buf
        };
        assert_eq!(
            written(&|buf| super::super::encode_reply(reply.clone(), buf)),
            full.encode_to_vec()
        );
        let last = |reply| pb::DispatchEvent {
            event: Some(pb::dispatch_event::Event::Result(reply)),
        };
        assert_eq!(
            written(&|buf| super::super::encode_reply(last(reply.clone()), buf)),
            last(full.clone()).encode_to_vec()
        );
        let pre = pb::DispatchEvent {
            event: Some(pb::dispatch_event::Event::ToolPre(pb::ToolPre {
                index: 1,
                id: "call_2".to_owned(),
                attempt: 1,
                tool: "echo".to_owned(),
            })),
        };
        assert_eq!(
            written(&|buf| super::super::encode_reply(pre.clone(), buf)),
            pre.encode_to_vec()
        );
    }
}
