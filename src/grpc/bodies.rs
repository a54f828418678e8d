//! The bodies of every request and reply on a connection, wrapped so that what the server holds
//! for a client is counted against the connection's share of a byte budget: request bytes
//! received but not yet decoded, reply bytes made but not yet handed to the transport. Past a
//! share, a request fails and a reply is replaced with `RESOURCE_EXHAUSTED`, never buffered.
//!
//! A reply is handed to the transport in pieces of at most `PIECE` bytes: the transport asks for
//! the next piece only when the client's window has room, so what it buffers per stream stays
//! near its own send buffer, and the rest of a reply nobody reads stays here, counted.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tonic::Status;

use super::budget::{Full, Held, Share};
use super::status::RequestError;

/// The most of a reply handed to the transport at once.
pub const PIECE: usize = 16 * 1024;

/// Boxed errors, as hyper and tonic take them.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body whose received bytes are held against the connection's request share until
/// the body is dropped (decoded): at most `cap` bytes, what a decoder buffers for one message.
pub struct Received<B> {
    inner: B,
    share: Arc<Share>,
    held: Option<Held>,
    cap: usize,
    failed: bool,
}

impl<B> Received<B> {
    /// `inner`, counted against `share`; `cap` is the largest message a decoder buffers.
    pub fn new(inner: B, share: Arc<Share>, cap: usize) -> Self {
        Received {
            inner,
            share,
            held: None,
            cap,
            failed: false,
        }
    }

    /// Holds `bytes` more, up to the cap: a stream of messages never holds more than one.
    fn hold(&mut self, bytes: usize) -> Result<(), Full> {
        let already = self.held.as_ref().map_or(0, Held::bytes);
        let more = bytes.min(self.cap.saturating_sub(already));
        if more == 0 {
            return Ok(());
        }
        match &mut self.held {
            Some(held) => held.grow(more),
            None => {
                self.held = Some(self.share.take(more)?);
                Ok(())
            }
        }
    }
}

impl<B> Body for Received<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        let frame = match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(error)) => return Poll::Ready(Some(Err(error.into()))),
            None => return Poll::Ready(None),
        };
        if let Some(data) = frame.data_ref()
            && let Err(full) = self.hold(data.len())
        {
            self.failed = true;
            let status = Status::from(RequestError::RequestBacklog(full));
            return Poll::Ready(Some(Err(Box::new(status))));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A reply body whose bytes are held against the connection's reply share from when they are
/// made until the transport takes them, and handed over in pieces. `guard` lives as long as
/// the reply (the connection counts its open streams with it).
pub struct Reply<G> {
    inner: tonic::body::Body,
    share: Arc<Share>,
    /// Made and not yet handed over, with what it holds of the share.
    pending: Option<(Bytes, Held)>,
    /// The trailers that end the reply, once the inner body gave them (or a refusal made them).
    trailers: Option<HeaderMap>,
    done: bool,
    _guard: G,
}

impl<G> Reply<G> {
    pub fn new(inner: tonic::body::Body, share: Arc<Share>, guard: G) -> Self {
        Reply {
            inner,
            share,
            pending: None,
            trailers: None,
            done: false,
            _guard: guard,
        }
    }

    /// Makes the reply's first bytes now (a unary reply is then encoded, and counted, before
    /// the transport asks for it). `Err` when the connection's share or the server's has no
    /// room: the caller answers with that status instead.
    pub async fn prefetch(&mut self) -> Result<(), Status> {
        std::future::poll_fn(|cx| self.fill(cx)).await
    }

    /// Polls the inner body until a piece is pending, the trailers came, or it ended.
    fn fill(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        if self.pending.is_some() || self.trailers.is_some() || self.done {
            return Poll::Ready(Ok(()));
        }
        match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => match self.share.take(data.len()) {
                    Ok(held) => self.pending = Some((data, held)),
                    Err(full) => return Poll::Ready(Err(RequestError::ReplyBacklog(full).into())),
                },
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        self.trailers = Some(trailers);
                    }
                }
            },
            Some(Err(status)) => return Poll::Ready(Err(status)),
            None => self.done = true,
        }
        Poll::Ready(Ok(()))
    }

    /// The reply as `status` alone, a trailers-only answer: what was made is dropped and given
    /// back.
    pub fn refused(mut self, status: Status) -> http::Response<Self> {
        self.inner = tonic::body::Body::empty();
        self.pending = None;
        self.trailers = None;
        self.done = true;
        let (parts, ()) = status.into_http::<()>().into_parts();
        http::Response::from_parts(parts, self)
    }

    /// Ends the reply with `status` in its trailers (what was sent stays sent). The inner body
    /// goes at once: a stream's batch is dropped, which cancels it.
    fn fail(&mut self, status: &Status) {
        self.inner = tonic::body::Body::empty();
        self.pending = None;
        let mut trailers = HeaderMap::new();
        let _ = status.add_header(&mut trailers);
        self.trailers = Some(trailers);
    }

    /// The next piece of what is pending, giving its bytes back to the share.
    fn piece(&mut self) -> Option<Bytes> {
        let (data, held) = self.pending.as_mut()?;
        let piece = if data.len() > PIECE {
            data.split_to(PIECE)
        } else {
            let whole = std::mem::take(data);
            self.pending = None;
            return Some(whole);
        };
        held.release(piece.len());
        Some(piece)
    }
}

impl<G: Unpin> Body for Reply<G> {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        loop {
            if let Some(piece) = this.piece() {
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            if let Some(trailers) = this.trailers.take() {
                this.done = true;
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            if let Err(status) = ready!(this.fill(cx)) {
                this.fail(&status);
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_none() && self.trailers.is_none()
    }
}

/// The methods whose replies are streams, as `/package.Service/Method`, from the descriptor
/// sets the server serves: every other reply is one message, made as soon as the call returns.
pub fn streaming_methods(sets: &[&[u8]]) -> HashSet<String> {
    let mut methods = HashSet::new();
    for set in sets {
        let Ok(set) = <prost_types::FileDescriptorSet as prost::Message>::decode(*set) else {
            continue;
        };
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    if method.server_streaming() {
                        methods.insert(format!(
                            "/{}.{}/{}",
                            file.package(),
                            service.name(),
                            method.name()
                        ));
                    }
                }
            }
        }
    }
    methods
}
