//! The gRPC request body as the server reads it: length-prefixed frames split into arbitrary
//! HTTP/2 DATA chunks, read by tonic's `Streaming` through toolgate's codec (prost with its
//! nesting limit, errors as INVALID_ARGUMENT) under the default message-size limit, then
//! converted. Never panics; a decoded request converts to one call per element or is refused.
#![no_main]

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http_body::{Body, Frame};
use libfuzzer_sys::fuzz_target;
use tonic::Code;
use tonic::codec::{Codec, Streaming};
use toolgate::config::Config;
use toolgate::grpc::convert::{RequestRules, batch_from_request, json_from_value};
use toolgate::pb::{DispatchBatchRequest, DispatchEvent};
use toolgate_core::calls::extract_calls;
use toolgate_proto::codec::ToolgateCodec;

/// A request body that hands out its bytes in the chunks the input chose.
struct Chunks(VecDeque<Bytes>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, body)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);
    let chunks = body.chunks(chunk).map(Bytes::copy_from_slice).collect();
    let config = Config::default();
    let mut codec = ToolgateCodec::<DispatchEvent, DispatchBatchRequest>::default();
    let mut stream = Streaming::new_request(
        codec.decoder(),
        Chunks(chunks),
        None,
        Some(config.server.max_message_bytes),
    );
    let rules = RequestRules {
        limits: config.limits,
        dispatch: config.dispatch,
    };
    let mut cx = Context::from_waker(Waker::noop());
    // A body that is always ready answers every poll at once; a few messages are enough.
    for _ in 0..4 {
        let next = std::pin::pin!(stream.message());
        let Poll::Ready(next) = next.poll(&mut cx) else {
            panic!("a ready body left the decoder pending");
        };
        match next {
            Ok(Some(request)) => {
                let elements = match &request.assistant_message {
                    Some(message) if request.calls.is_empty() => {
                        json_from_value(message.clone(), rules.limits.max_json_depth, &"m")
                            .ok()
                            .and_then(|m| extract_calls(&m).ok())
                            .map(|calls| calls.len())
                    }
                    _ => Some(request.calls.len()),
                };
                if let (Ok(batch), Some(elements)) = (
                    batch_from_request(
                        request,
                        std::sync::Arc::new(toolgate_core::identity::Caller::local()),
                        &rules,
                    ),
                    elements,
                ) {
                    assert_eq!(batch.calls.len(), elements);
                }
            }
            Ok(None) => break,
            Err(status) => {
                // A malformed body is the client's error (INVALID_ARGUMENT), a framing error
                // (INTERNAL) or a message over the size limit (OUT_OF_RANGE, as docs/api.md
                // says), never a crash.
                assert!(
                    matches!(
                        status.code(),
                        Code::InvalidArgument | Code::Internal | Code::OutOfRange
                    ),
                    "unexpected status {status:?}"
                );
                break;
            }
        }
    }
});
