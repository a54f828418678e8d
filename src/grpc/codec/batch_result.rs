//! A `BatchResult` written with each call's result encoded once. prost writes the same result
//! twice (`results` and `by_id`) and measures it more often still (the reply's length, then each
//! nested message's again at every level as it writes it). Here each result is encoded once and
//! `results` and `by_id` carry those bytes: an embedded message and a `bytes` field are the same
//! on the wire (and a map is a repeated entry message), so the output decodes to the same
//! `BatchResult`.

use prost::Message;
use prost::bytes::Bytes;

use crate::pb;

/// `toolgate.v1.BatchResult` with its results already encoded: same tags, same wire types.
#[derive(Clone, PartialEq, Message)]
pub struct WireBatchResult {
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
pub struct ByIdEntry {
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
        let by_id = by_id
            .into_iter()
            .map(|(id, value)| {
                // The conversion fills `by_id` from the result at the value's own index; anything
                // else is encoded on its own.
                let at = usize::try_from(value.index).unwrap_or(usize::MAX);
                let value = match results.get(at) {
                    Some(result) if *result == value => encoded[at].clone(),
                    _ => Bytes::from(value.encode_to_vec()),
                };
                ByIdEntry { key: id, value }
            })
            .collect();
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

    #[test]
    fn a_one_call_reply_is_byte_for_byte_what_prost_writes() {
        let one = result(0, "call_1", "hi");
        let reply = reply(vec![one.clone()], [("call_1".to_owned(), one)].into());
        let wire = WireBatchResult::from(reply.clone());
        assert_eq!(wire.encoded_len(), reply.encoded_len());
        assert_eq!(wire.encode_to_vec(), reply.encode_to_vec());
    }

    #[test]
    fn replies_decode_to_what_was_encoded() {
        // Repeated ids (by_id keeps the first), an empty id, a by_id value that is no result at
        // its index, a default value, and no results at all.
        let results = vec![
            result(0, "a", "one"),
            result(1, "a", "two"),
            result(2, "", "three"),
        ];
        let by_id: HashMap<String, pb::CallResult> = [
            ("a".to_owned(), results[0].clone()),
            (String::new(), results[2].clone()),
            ("stray".to_owned(), result(7, "stray", "elsewhere")),
            (
                "moved".to_owned(),
                result(1, "moved", "not the result at 1"),
            ),
            ("default".to_owned(), pb::CallResult::default()),
        ]
        .into();
        for reply in [
            reply(results, by_id),
            pb::BatchResult::default(),
            reply(Vec::new(), HashMap::new()),
        ] {
            let wire = WireBatchResult::from(reply.clone());
            let bytes = wire.encode_to_vec();
            assert_eq!(bytes.len(), reply.encoded_len());
            assert_eq!(pb::BatchResult::decode(bytes.as_slice()).unwrap(), reply);
        }
    }

    #[test]
    fn the_encoder_writes_results_and_events_as_prost_does() {
        let one = result(0, "call_1", "hi");
        let reply = reply(vec![one.clone()], [("call_1".to_owned(), one)].into());
        let written = |item: &dyn Fn(&mut Vec<u8>)| {
            let mut buf = Vec::new();
            item(&mut buf);
            buf
        };
        assert_eq!(
            written(&|buf| super::super::encode_reply(reply.clone(), buf)),
            reply.encode_to_vec()
        );
        let last = pb::DispatchEvent {
            event: Some(pb::dispatch_event::Event::Result(reply.clone())),
        };
        assert_eq!(
            written(&|buf| super::super::encode_reply(last.clone(), buf)),
            last.encode_to_vec()
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
