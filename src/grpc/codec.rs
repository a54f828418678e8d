//! The ToolGate service codec: prost encoding, with undecodable requests reported as
//! INVALID_ARGUMENT (a malformed or too deeply nested request is the client's error) instead of
//! tonic-prost's INTERNAL.

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

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

impl<T, U> Codec for ToolgateCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ToolgateDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.inner.encoder()
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
        self.inner.decode(buf).map_err(|status| {
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
