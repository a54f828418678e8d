//! The ToolGate service codec: prost encoding, with undecodable requests reported as
//! INVALID_ARGUMENT (a malformed or too deeply nested request is the client's error) instead of
//! tonic-prost's INTERNAL, and replies written without a length walk over the whole reply first
//! (a `BatchResult` with each call's result encoded once, `batch_result`).

mod batch_result;

pub use batch_result::written_len;

use std::any::Any;
use std::marker::PhantomData;

use prost::Message;
use prost::bytes::{Buf, BufMut};
use prost::encoding::{WireType, encode_key, encode_varint};
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic_prost::{ProstCodec, ProstDecoder};

use self::batch_result::WireBatchResult;
use crate::pb;
use crate::pb::dispatch_event::Event;
use crate::protojson;

/// `ProstCodec` with decode errors mapped to INVALID_ARGUMENT.
#[derive(Debug, Clone, Default)]
pub struct ToolgateCodec<T, U> {
    inner: ProstCodec<T, U>,
}

/// `ProstDecoder` with decode errors mapped to INVALID_ARGUMENT.
#[derive(Debug)]
pub struct ToolgateDecoder<U> {
    inner: ProstDecoder<U>,
}

/// Writes a reply with `encode_raw`. `ProstEncoder` calls `Message::encode`, which first walks
/// the whole message for its length only to check the buffer's room; tonic's buffer grows as it
/// is written (its room is `usize::MAX` less its length), so the check cannot fail and the walk
/// would be a second pass over every reply (BENCHMARKS.md §18).
/// `encode_raw` is the method every prost `Message` implements and `encode` calls; prost marks it
/// for implementations' use, so a prost upgrade is checked against this encoder by the codec
/// fuzz target and every gRPC test (prost is pinned by `Cargo.lock`).
///
/// The batch result, alone (`Dispatch`) or as the last event of `DispatchBatch`, is written as
/// a `WireBatchResult`: the same bytes on the wire, each call's result encoded once.
#[derive(Debug)]
pub struct ToolgateEncoder<T>(PhantomData<T>);

/// The tag of `DispatchEvent.result`.
const EVENT_RESULT_TAG: u32 = 15;

impl<T: Message + 'static> Encoder for ToolgateEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        encode_reply(item, buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// Writes one reply message: a batch result (alone or as the stream's last event) as a
/// `WireBatchResult`, anything else with prost's `encode_raw`.
pub fn encode_reply<T: Message + 'static>(item: T, buf: &mut impl BufMut) {
    let mut item = Some(item);
    let any: &mut dyn Any = &mut item;
    if let Some(reply) = any
        .downcast_mut::<Option<pb::BatchResult>>()
        .and_then(Option::take)
    {
        WireBatchResult::from(reply).encode_raw(buf);
        return;
    }
    if let Some(Some(pb::DispatchEvent {
        event: Some(Event::Result(reply)),
    })) = any.downcast_mut::<Option<pb::DispatchEvent>>()
    {
        let wire = WireBatchResult::from(std::mem::take(reply));
        encode_key(EVENT_RESULT_TAG, WireType::LengthDelimited, buf);
        encode_varint(wire.encoded_len() as u64, buf);
        wire.encode_raw(buf);
        return;
    }
    if let Some(item) = item {
        item.encode_raw(buf);
    }
}

impl<T, U> Codec for ToolgateCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ToolgateEncoder<T>;
    type Decoder = ToolgateDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ToolgateEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ToolgateDecoder {
            inner: self.inner.decoder(),
        }
    }
}

impl<U: Message + Default> Decoder for ToolgateDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let limit = protojson::MAX_DECODED_BYTES;
        let (decoded, cost) = protojson::metered(limit, || {
            // The message's own elements first: empty ones never reach the value decoders.
            let whole = buf.chunk().len() == buf.remaining();
            if whole && !protojson::prepay_fields(buf.chunk()) {
                return Ok(None);
            }
            self.inner.decode(buf)
        });
        if cost.exceeded {
            return Err(Status::resource_exhausted(format!(
                "the request's JSON values would hold more than {} MiB once decoded (small \
                 objects cost far more decoded than on the wire); send less per request",
                limit >> 20
            )));
        }
        decoded.map_err(|status| {
            Status::invalid_argument(format!(
                "the message could not be decoded (malformed, or nested deeper than 100 \
                 protobuf messages): {}",
                status.message()
            ))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.inner.buffer_settings()
    }
}
