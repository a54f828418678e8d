//! The bodies of every request and reply on a connection, wrapped so that what the server holds
//! for a client is counted against the connection's share of a byte budget: request bytes
//! received but not yet decoded, reply bytes made but not yet handed to the transport. Past a
//! share, a request fails and a reply is replaced with `RESOURCE_EXHAUSTED`, never buffered.
//!
//! A reply is handed to the transport in pieces of at most `PIECE` bytes: the transport asks for
//! the next piece only when the client's window has room, so what it buffers per stream stays
//! near its own send buffer, and the rest of a reply nobody reads stays here, counted.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use tokio::time::Instant;
use tonic::Status;

use super::status::RequestError;
use crate::front::budget::{Full, Held, Share};
use slab::Slab;

/// The most of a reply handed to the transport at once.
pub(super) const PIECE: usize = 16 * 1024;

/// Boxed errors, as hyper and tonic take them.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body whose received bytes are held against the connection's request share while
/// the gRPC message they belong to is incomplete: a message's bytes are given back once its
/// last byte arrived (the decoder takes it then), so a long stream of messages holds at most
/// one. A message left incomplete for `stall` (a client that stopped sending mid-message) fails
/// the request and gives its bytes back.
pub(super) struct Received<B> {
    inner: B,
    share: Arc<Share>,
    /// The incomplete message's bytes, held.
    held: Option<Held>,
    framing: Framing,
    stall: Duration,
    waiting: Option<Pin<Box<tokio::time::Sleep>>>,
    failed: bool,
}

/// Where the body is in gRPC's framing: a 5-byte prefix (flag, length), then the message.
#[derive(Default)]
struct Framing {
    prefix: [u8; 5],
    prefix_len: usize,
    /// Bytes of the message still to come, once its prefix is complete.
    remaining: usize,
}

impl Framing {
    /// Reads `data`; answers how many of its bytes completed messages (the rest belong to the
    /// message still incomplete).
    fn read(&mut self, mut data: &[u8]) -> usize {
        let (mut completed, mut current) = (0, 0);
        while !data.is_empty() {
            if self.prefix_len < 5 {
                let n = (5 - self.prefix_len).min(data.len());
                self.prefix[self.prefix_len..self.prefix_len + n].copy_from_slice(&data[..n]);
                self.prefix_len += n;
                data = &data[n..];
                current += n;
                if self.prefix_len == 5 {
                    let length = [
                        self.prefix[1],
                        self.prefix[2],
                        self.prefix[3],
                        self.prefix[4],
                    ];
                    self.remaining =
                        usize::try_from(u32::from_be_bytes(length)).unwrap_or(usize::MAX);
                }
            } else {
                let n = self.remaining.min(data.len());
                self.remaining -= n;
                data = &data[n..];
                current += n;
            }
            if self.prefix_len == 5 && self.remaining == 0 {
                completed += current;
                current = 0;
                self.prefix_len = 0;
            }
        }
        completed
    }
}

impl<B> Received<B> {
    /// `inner`, counted against `share`; an incomplete message may wait `stall` for more.
    pub(super) fn new(inner: B, share: Arc<Share>, stall: Duration) -> Self {
        Received {
            inner,
            share,
            held: None,
            framing: Framing::default(),
            stall,
            waiting: None,
            failed: false,
        }
    }

    /// Holds the bytes of `data`, then gives back those of the messages it completed.
    fn hold(&mut self, data: &[u8]) -> Result<(), Full> {
        match &mut self.held {
            Some(held) => held.grow(data.len())?,
            None => self.held = Some(self.share.take(data.len())?),
        }
        let completed = self.framing.read(data);
        // A message completed in `data`: everything held up to its end goes back, and only
        // what follows it (the start of the next message) stays.
        if completed > 0
            && let Some(held) = &mut self.held
        {
            let incomplete = data.len() - completed;
            let back = held.bytes().saturating_sub(incomplete);
            held.release(back);
        }
        Ok(())
    }

    fn fail(&mut self, status: Status) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.failed = true;
        self.held = None;
        self.waiting = None;
        Poll::Ready(Some(Err(Box::new(status))))
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
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {
                // Only an incomplete message waits against the clock.
                if self.held.as_ref().is_none_or(|h| h.bytes() == 0) {
                    self.waiting = None;
                    return Poll::Pending;
                }
                let stall = self.stall;
                let waiting = self
                    .waiting
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                if waiting.as_mut().poll(cx).is_ready() {
                    return self.fail(RequestError::RequestStalled(stall).into());
                }
                return Poll::Pending;
            }
        };
        self.waiting = None;
        if let Some(data) = frame.data_ref()
            && let Err(full) = self.hold(data)
        {
            return self.fail(RequestError::RequestBacklog(full).into());
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
/// made until the transport takes them, and handed over in pieces. What is pending sits in a
/// `Pending` the connection can reach: bytes a client has not taken for `stall_timeout` are
/// dropped there (`Pending::evict_if_stalled`), given back, and the reply ends
/// `DEADLINE_EXCEEDED` if the client ever asks for more.
pub(super) struct Reply<G> {
    inner: tonic::body::Body,
    share: Arc<Share>,
    pending: Arc<Mutex<Pending<G>>>,
    /// Where the connection finds `pending`, and its slot there (emptied when the reply goes).
    registry: Arc<Replies<G>>,
    slot: usize,
    /// The trailers that end the reply, once the inner body gave them (or a refusal made them).
    trailers: Option<HeaderMap>,
    done: bool,
}

/// The replies of one connection, for evicting what their clients do not read.
pub(super) type Replies<G> = Mutex<Slab<Weak<Mutex<Pending<G>>>>>;

/// What a reply has made and the transport has not taken yet.
pub(super) struct Pending<G> {
    /// The bytes, with what they hold of the share.
    data: Option<(Bytes, Held)>,
    /// When the transport last took a piece (or the reply began).
    since: Instant,
    /// Dropped for a client that did not read: the status the reply ends with.
    evicted: Option<Duration>,
    /// Counts the stream as open until the reply ends or is evicted.
    guard: Option<G>,
}

impl<G> Pending<G> {
    /// Drops what is pending when the client has not taken any of it for `stall`; true if it
    /// did. The stream no longer counts as open: its connection may idle out.
    pub(super) fn evict_if_stalled(&mut self, now: Instant, stall: Duration) -> bool {
        if self.data.is_none() || now.saturating_duration_since(self.since) < stall {
            return false;
        }
        self.data = None;
        self.evicted = Some(stall);
        self.guard = None;
        true
    }
}

impl<G> Reply<G> {
    /// `inner`, counted against `share`, kept in `registry` while it lives.
    pub(super) fn new(
        inner: tonic::body::Body,
        share: Arc<Share>,
        guard: G,
        registry: &Arc<Replies<G>>,
    ) -> Self {
        let pending = Arc::new(Mutex::new(Pending {
            data: None,
            since: Instant::now(),
            evicted: None,
            guard: Some(guard),
        }));
        let slot = registry.lock().insert(Arc::downgrade(&pending));
        Reply {
            inner,
            share,
            pending,
            registry: registry.clone(),
            slot,
            trailers: None,
            done: false,
        }
    }

    /// Makes the reply's first bytes now (a unary reply is then encoded, and counted, before
    /// the transport asks for it). `Err` when the connection's share or the server's has no
    /// room: the caller answers with that status instead.
    pub(super) async fn prefetch(&mut self) -> Result<(), Status> {
        std::future::poll_fn(|cx| self.fill(cx)).await
    }

    /// Polls the inner body until a piece is pending, the trailers came, or it ended.
    fn fill(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        if self.pending.lock().data.is_some() || self.trailers.is_some() || self.done {
            return Poll::Ready(Ok(()));
        }
        match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => match self.share.take(data.len()) {
                    Ok(held) => {
                        let mut pending = self.pending.lock();
                        pending.data = Some((data, held));
                        pending.since = Instant::now();
                    }
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
    pub(super) fn refused(mut self, status: Status) -> http::Response<Self> {
        self.inner = tonic::body::Body::empty();
        self.pending.lock().data = None;
        self.trailers = None;
        self.done = true;
        let (parts, ()) = status.into_http::<()>().into_parts();
        http::Response::from_parts(parts, self)
    }

    /// Ends the reply with `status` in its trailers (what was sent stays sent). The inner body
    /// goes at once: a stream's batch is dropped, which cancels it.
    fn fail(&mut self, status: &Status) {
        self.inner = tonic::body::Body::empty();
        self.pending.lock().data = None;
        let mut trailers = HeaderMap::new();
        let _ = status.add_header(&mut trailers);
        self.trailers = Some(trailers);
    }

    /// The next piece of what is pending, giving its bytes back to the share; or the status of
    /// an eviction.
    fn piece(&mut self) -> Result<Option<Bytes>, Status> {
        let mut pending = self.pending.lock();
        if let Some(stall) = pending.evicted.take() {
            return Err(RequestError::ReplyStalled(stall).into());
        }
        pending.since = Instant::now();
        let Some((data, held)) = pending.data.as_mut() else {
            return Ok(None);
        };
        if data.len() <= PIECE {
            let whole = std::mem::take(data);
            pending.data = None;
            return Ok(Some(whole));
        }
        let piece = data.split_to(PIECE);
        held.release(piece.len());
        Ok(Some(piece))
    }
}

impl<G> Drop for Reply<G> {
    fn drop(&mut self) {
        self.registry.lock().try_remove(self.slot);
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
            match this.piece() {
                Ok(Some(piece)) => return Poll::Ready(Some(Ok(Frame::data(piece)))),
                Ok(None) => {}
                Err(status) => this.fail(&status),
            }
            if let Some(trailers) = this.trailers.take() {
                this.done = true;
                this.pending.lock().guard = None;
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

    /// Also true for a reply refused before its first message (tonic's status in the headers,
    /// an empty body): hyper then sets END_STREAM on the headers, a trailers-only answer. Sent
    /// as headers and then an empty DATA frame ending the stream, grpc's C core (Python, Ruby,
    /// C++ clients) reads it as "Stream removed" and loses the status.
    fn is_end_stream(&self) -> bool {
        (self.done || self.inner.is_end_stream())
            && self.trailers.is_none()
            && self.pending.lock().data.is_none()
    }
}

/// The methods whose replies are streams, as `/package.Service/Method`, from the descriptor
/// sets the server serves: every other reply is one message, made as soon as the call returns.
pub(super) fn streaming_methods(sets: &[&[u8]]) -> HashSet<String> {
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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::front::budget::ByteBudget;

    /// A body that yields these chunks, then waits forever (or ends, if `end`).
    struct Chunks {
        chunks: VecDeque<Bytes>,
        end: bool,
    }

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            match self.chunks.pop_front() {
                Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
                None if self.end => Poll::Ready(None),
                None => Poll::Pending,
            }
        }
    }

    /// A gRPC message of `n` payload bytes, prefix included.
    fn message(n: usize) -> Vec<u8> {
        let mut bytes = vec![0u8];
        bytes.extend_from_slice(&u32::try_from(n).unwrap().to_be_bytes());
        bytes.extend(std::iter::repeat_n(7u8, n));
        bytes
    }

    async fn next<B: Body + Unpin>(body: &mut B) -> Option<Result<Frame<B::Data>, B::Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
    }

    #[tokio::test]
    async fn a_request_holds_the_bytes_of_its_incomplete_message_only() {
        let budget = ByteBudget::new(0, 0, Arc::default(), ["c", "s"]);
        let share = budget.share();
        // Two whole messages and the first 10 bytes of a third, split unevenly across chunks.
        let mut stream = message(100);
        stream.extend(message(50));
        stream.extend(&message(40)[..10]);
        let chunks = [&stream[..3], &stream[3..120], &stream[120..]]
            .map(Bytes::copy_from_slice)
            .into_iter()
            .collect();
        let mut body = Received::new(
            Chunks { chunks, end: false },
            share.clone(),
            Duration::from_secs(30),
        );
        next(&mut body).await.unwrap().unwrap();
        assert_eq!(share.used(), 3, "a prefix in progress");
        next(&mut body).await.unwrap().unwrap();
        assert_eq!(
            share.used(),
            120 - 105,
            "the first message went back when it completed"
        );
        next(&mut body).await.unwrap().unwrap();
        assert_eq!(
            share.used(),
            10,
            "only the third, incomplete message is held"
        );
        drop(body);
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_left_incomplete_past_the_stall_timeout_fails_the_request() {
        let budget = ByteBudget::new(0, 0, Arc::default(), ["c", "s"]);
        let partial = Bytes::copy_from_slice(&message(1000)[..200]);
        let chunks = VecDeque::from([partial]);
        let mut body = Received::new(
            Chunks { chunks, end: false },
            budget.share(),
            Duration::from_secs(5),
        );
        next(&mut body).await.unwrap().unwrap();
        assert_eq!(budget.used(), 200);
        let error = next(&mut body).await.unwrap().unwrap_err();
        let status = error.downcast::<Status>().unwrap();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert_eq!(budget.used(), 0, "its bytes went back");
        assert!(next(&mut body).await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_nobody_takes_is_evicted_and_ends_deadline_exceeded() {
        let budget = ByteBudget::new(0, 0, Arc::default(), ["c", "s"]);
        let inner = tonic::body::Body::new(Chunks {
            chunks: VecDeque::from([Bytes::from(vec![1u8; 40_000])]),
            end: true,
        });
        let registry: Arc<Replies<()>> = Arc::default();
        let mut reply = Reply::new(inner, budget.share(), (), &registry);
        reply.prefetch().await.unwrap();
        assert_eq!(
            budget.used(),
            40_000,
            "made and counted before anyone asked"
        );
        let pending = registry.lock().iter().next().unwrap().1.upgrade().unwrap();
        let stall = Duration::from_secs(30);
        assert!(!pending.lock().evict_if_stalled(Instant::now(), stall));
        tokio::time::advance(stall).await;
        assert!(pending.lock().evict_if_stalled(Instant::now(), stall));
        assert_eq!(budget.used(), 0, "given back");
        let Some(Ok(frame)) = next(&mut reply).await else {
            panic!("the reply ends with trailers")
        };
        let trailers = frame.into_trailers().unwrap();
        assert_eq!(trailers["grpc-status"], "4", "DEADLINE_EXCEEDED");
        assert!(next(&mut reply).await.is_none());
        drop(pending);
        drop(reply);
        assert_eq!(registry.lock().iter().count(), 0, "a reply leaves its slot");
    }

    #[test]
    fn a_stream_refused_before_its_first_message_ends_with_its_headers() {
        let budget = ByteBudget::new(0, 0, Arc::default(), ["c", "s"]);
        let registry: Arc<Replies<()>> = Arc::default();
        // What tonic gives for a streaming method that returns an error: the status in the
        // headers, an empty body.
        let reply = Reply::new(tonic::body::Body::empty(), budget.share(), (), &registry);
        assert!(
            reply.is_end_stream(),
            "else hyper sends an empty DATA frame after the headers, which grpc's C core refuses"
        );
        let streaming = Reply::new(
            tonic::body::Body::new(Chunks {
                chunks: VecDeque::from([Bytes::from(message(3))]),
                end: true,
            }),
            budget.share(),
            (),
            &registry,
        );
        assert!(!streaming.is_end_stream());
    }
}
