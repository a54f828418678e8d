//! An accepted connection as h2 sees it: its small writes held until h2 flushes, so the frames
//! of several small replies (and a small reply's DATA and its trailers) leave in one write; and
//! its first bytes counted, for the preface timeout.
//!
//! h2 copies a DATA frame into its write buffer only under a threshold: 256 bytes on a
//! connection that takes vectored writes, 1 024 on one that does not. A frame at or over it is
//! kept aside, and while it is, h2 buffers nothing else: the next frame (the same reply's
//! trailers, another stream's reply) waits for a write of its own. A one-call batch result is
//! ~400 bytes, so on a plain `TcpStream` every reply took two writes, and at concurrency 16 the
//! connection made 1.3 writes a reply where a tonic echo of a small value makes 0.4.
//!
//! So this connection reports no vectored writes (h2's threshold becomes 1 024 bytes: replies
//! under it share h2's buffer with what follows them) and holds the writes h2 makes until it
//! flushes. A larger frame's payload, which h2 then writes apart from its buffer, leaves in one
//! vectored write with the bytes held before it, not copied. The tests at the end pin this
//! through hyper's server as the transport builds it: an upgrade of hyper or h2 that changes the
//! writes a reply takes fails them.
//!
//! Why not tokio's `BufWriter` in a non-vectored newtype (the same writes): its buffer is taken
//! when the connection opens and never given back, and 1 000 idle connections that each made one
//! call measured 81-87 KiB each against 37 KiB with this one (docs/design/transport-audit.md).
//!
//! Bounds: at most `LIMIT` bytes are held (a small write that would not fit sends what is held
//! first; a first write as large goes straight through), so a client that stops reading pins at
//! most that beyond h2's own 16 KiB buffer; once written, a buffer larger than `KEEP` is released.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// The most bytes held per connection between flushes.
const LIMIT: usize = 64 * 1024;
/// The most buffer a connection keeps once what it held is written: h2's buffer (16 KiB) and a
/// frame's head, so a busy connection does not allocate per flush.
const KEEP: usize = 24 * 1024;
/// A write after held bytes at least this long is a DATA payload h2 kept aside (see the module
/// docs): written with the held bytes in one vectored write instead of copied.
const WRITE_THROUGH: usize = 1024;
/// The HTTP/2 client preface (`PRI * HTTP/2.0…`) is this long.
const PREFACE_BYTES: usize = 24;

/// `inner` with its writes held until a flush and its preface watched (see the module docs).
#[derive(Debug)]
pub(super) struct Wire<T> {
    inner: T,
    held: Vec<u8>,
    /// How much of `held` is already written.
    sent: usize,
    /// Bytes read so far, counted up to the preface's length.
    read: usize,
    /// Set once the preface's bytes have arrived.
    preface: Arc<AtomicBool>,
}

impl<T> Wire<T> {
    /// `inner`, holding nothing yet; `preface` is set once the client's first 24 bytes are read.
    pub(super) fn new(inner: T, preface: Arc<AtomicBool>) -> Self {
        Wire {
            inner,
            held: Vec::new(),
            sent: 0,
            read: 0,
            preface,
        }
    }

    /// Empties `held` once all of it is written, releasing a large buffer.
    fn written(&mut self) {
        if self.held.capacity() > KEEP {
            self.held = Vec::new();
        } else {
            self.held.clear();
        }
        self.sent = 0;
    }
}

impl<T: AsyncWrite + Unpin> Wire<T> {
    /// Writes what is held; `Ready(Ok)` once all of it is written.
    fn poll_send_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.held.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.held[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.written();
        Poll::Ready(Ok(()))
    }

    /// Writes what is held and then as much of `data` as the connection takes, in vectored
    /// writes; `Ready(Ok(n))` with `n` bytes of `data` taken (at least one) once every held
    /// byte is written.
    fn poll_write_after_held(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let held = &self.held[self.sent..];
            if held.is_empty() {
                self.written();
                return Pin::new(&mut self.inner).poll_write(cx, data);
            }
            let slices = [IoSlice::new(held), IoSlice::new(data)];
            let n = ready!(Pin::new(&mut self.inner).poll_write_vectored(cx, &slices))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n <= held.len() {
                self.sent += n;
                continue;
            }
            let taken = n - held.len();
            self.written();
            return Poll::Ready(Ok(taken));
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Wire<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.read < PREFACE_BYTES {
            self.read += buf.filled().len() - before;
            if self.read >= PREFACE_BYTES {
                self.preface.store(true, Ordering::Relaxed);
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Wire<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let held = this.held.len() - this.sent;
        if held > 0 && data.len() >= WRITE_THROUGH {
            return this.poll_write_after_held(cx, data);
        }
        if held > 0 && this.held.len() + data.len() > LIMIT {
            ready!(this.poll_send_held(cx))?;
        }
        if this.held.is_empty() && data.len() >= LIMIT {
            return Pin::new(&mut this.inner).poll_write(cx, data);
        }
        // h2 writes once or twice a flush: growing to the exact size keeps `held` under `LIMIT`.
        this.held.reserve_exact(data.len());
        this.held.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    /// No vectored writes, so h2 copies DATA frames under 1 024 bytes into its buffer (see the
    /// module docs); the default `poll_write_vectored` writes the first non-empty slice.
    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_send_held(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_send_held(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The peer's address (and TLS certificates) are the inner connection's.
impl<T: Connected> Connected for Wire<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::Duration;

    use bytes::Bytes;
    use http_body::Frame;
    use hyper_util::rt::TokioIo;
    use parking_lot::Mutex;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tonic::codegen::http;

    use super::*;
    use crate::front::budget::ByteBudget;
    use crate::grpc::bodies::{PIECE, Replies, Reply};
    use crate::grpc::transport::{TransportSettings, http2};

    /// What the connection under test does with its next write.
    enum Step {
        /// Takes at most this many bytes.
        Take(usize),
        /// Not writable now (and wakes the task at once, as a socket that drained would).
        Pending,
        Fail,
    }

    /// Keeps each write that reaches it apart; follows `script`, then takes up to `room` bytes a
    /// write, as a socket with that much room would.
    struct Recorder {
        writes: Vec<Vec<u8>>,
        flushes: usize,
        script: std::collections::VecDeque<Step>,
        room: usize,
    }

    impl Recorder {
        fn new(room: usize, script: impl IntoIterator<Item = Step>) -> Self {
            Recorder {
                writes: Vec::new(),
                flushes: 0,
                script: script.into_iter().collect(),
                room,
            }
        }

        fn sent(&self) -> Vec<u8> {
            self.writes.concat()
        }
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.poll_write_vectored(cx, &[IoSlice::new(data)])
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            slices: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let room = match self.script.pop_front() {
                Some(Step::Take(n)) => n,
                Some(Step::Pending) => {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Some(Step::Fail) => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                None => self.room,
            };
            let gathered: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
            let n = gathered.len().min(room);
            self.writes.push(gathered[..n].to_vec());
            Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn numbered(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[tokio::test]
    async fn writes_are_held_until_a_flush_then_leave_together_in_order() {
        let mut io = wire(Recorder::new(usize::MAX, []));
        io.write_all(b"headers").await.unwrap();
        io.write_all(b"data").await.unwrap();
        io.write_all(b"trailers").await.unwrap();
        assert!(io.inner.writes.is_empty());
        io.flush().await.unwrap();
        assert_eq!(io.inner.writes, vec![b"headersdatatrailers".to_vec()]);
        assert_eq!(io.inner.flushes, 1);
    }

    #[tokio::test]
    async fn a_large_write_after_held_bytes_leaves_with_them_in_one_write_uncopied() {
        let mut io = wire(Recorder::new(usize::MAX, []));
        let payload = numbered(2_000);
        io.write_all(b"frame head").await.unwrap();
        io.write_all(&payload).await.unwrap();
        assert_eq!(
            io.inner.writes,
            vec![[b"frame head".as_slice(), &payload].concat()]
        );
        assert!(io.held.capacity() < payload.len(), "the payload was copied");
        io.flush().await.unwrap();
        assert_eq!(io.inner.writes.len(), 1);
    }

    #[tokio::test]
    async fn partial_and_pending_writes_resume_and_nothing_is_lost_or_repeated() {
        use Step::{Pending, Take};
        let script = [
            Pending,
            Take(3),
            Pending,
            Take(2),
            Take(10),
            Pending,
            Take(1),
        ];
        let mut io = wire(Recorder::new(1_000, script));
        let small = numbered(2_500);
        let payload = numbered(3_000);
        // Held (a first write), then a small one held after it, then a payload written with them.
        io.write_all(&small).await.unwrap();
        io.write_all(b"tail").await.unwrap();
        io.write_all(&payload).await.unwrap();
        io.write_all(b"trailers").await.unwrap();
        io.flush().await.unwrap();
        let expected = [small.as_slice(), b"tail", &payload, b"trailers"].concat();
        assert_eq!(io.inner.sent(), expected);
        assert!(io.held.is_empty());
    }

    #[tokio::test]
    async fn a_failed_write_leaves_the_unsent_bytes_held_for_a_retry() {
        let script = [Step::Take(3), Step::Fail];
        let mut io = wire(Recorder::new(usize::MAX, script));
        io.write_all(b"headers").await.unwrap();
        assert!(io.flush().await.is_err());
        io.flush().await.unwrap();
        assert_eq!(io.inner.sent(), b"headers");
    }

    #[tokio::test]
    async fn held_bytes_stay_under_the_limit_and_a_large_first_write_goes_straight_through() {
        let mut io = wire(Recorder::new(1_000, []));
        io.write_all(&vec![1; LIMIT - 10]).await.unwrap();
        assert!(io.inner.writes.is_empty());
        // A small write that would not fit: what is held is sent first.
        io.write_all(&[2; 20]).await.unwrap();
        assert_eq!(io.inner.sent().len(), LIMIT - 10);
        assert_eq!(io.held, vec![2; 20]);
        // The buffer the first write grew was released once written.
        assert!(io.held.capacity() < KEEP);
        io.flush().await.unwrap();
        let before = io.inner.writes.len();
        // As large as the limit with nothing held: not copied, written as the socket takes it.
        let n = io.write(&vec![3; LIMIT]).await.unwrap();
        assert_eq!(n, 1_000);
        assert_eq!(io.inner.writes.len(), before + 1);
        assert!(io.held.is_empty());
    }

    /// A connection that takes vectored writes, like a `TcpStream`, and keeps each write that
    /// reaches it apart, so a test sees where h2 flushed.
    struct Writes {
        inner: tokio::io::DuplexStream,
        seen: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl AsyncRead for Writes {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Writes {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, data))?;
            self.seen.lock().push(data[..n].to_vec());
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            slices: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let gathered: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
            self.poll_write(cx, &gathered)
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// A unary gRPC reply as tonic's encoder yields it: one DATA frame, then trailers.
    struct Unary(Option<Bytes>, bool);

    impl http_body::Body for Unary {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            if let Some(data) = self.0.take() {
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            if std::mem::take(&mut self.1) {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
            Poll::Ready(None)
        }
    }

    /// The size of a one-call batch result: at least h2's 256-byte threshold for vectored
    /// connections, under its 1 024 for the others.
    const SMALL: usize = 500;
    /// A reply over both thresholds, under one frame (16 KiB).
    const LARGE: usize = 2_000;

    /// Serves `requests` HTTP/2 requests, sent together, through hyper's server built as the
    /// transport builds it, over `io`, each answered with `size` bytes of `x` and trailers as
    /// tonic answers a unary call; returns what reached the connection, write by write, from the
    /// first reply's HEADERS on. Fails, rather than hangs, if bytes are left unsent.
    async fn replies<T>(
        wrap: impl FnOnce(Writes) -> T,
        size: usize,
        requests: usize,
    ) -> Vec<Vec<u8>>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (client, server) = tokio::io::duplex(1 << 20);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let io = wrap(Writes {
            inner: server,
            seen: seen.clone(),
        });
        let settings = TransportSettings::from_config(&crate::config::ServerConfig::default());
        let service = hyper::service::service_fn(move |_request| async move {
            let body = Unary(Some(Bytes::from(vec![b'x'; size])), true);
            Ok::<_, Infallible>(http::Response::new(body))
        });
        let server = tokio::spawn(http2(&settings).serve_connection(TokioIo::new(io), service));
        let exchange = async {
            let (send, connection) = h2::client::handshake(client).await.unwrap();
            let driver = tokio::spawn(connection);
            let mut send = send.ready().await.unwrap();
            // The server's SETTINGS and acknowledgements are written before any reply.
            tokio::task::yield_now().await;
            seen.lock().clear();
            let mut responses = Vec::new();
            for _ in 0..requests {
                let request = http::Request::post("http://toolgate/x").body(()).unwrap();
                responses.push(send.send_request(request, true).unwrap().0);
                send = send.ready().await.unwrap();
            }
            for response in responses {
                let mut body = response.await.unwrap().into_body();
                let mut read = 0;
                while let Some(chunk) = body.data().await {
                    let chunk = chunk.unwrap();
                    read += chunk.len();
                    body.flow_control().release_capacity(chunk.len()).unwrap();
                }
                assert_eq!(read, size);
                assert!(body.trailers().await.unwrap().is_some());
            }
            driver.abort();
        };
        tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .expect("the replies never arrived in full: bytes were left unsent");
        server.abort();
        let _ = server.await;
        let writes = seen.lock().clone();
        // Only writes that carry a reply's frames: the SETTINGS acknowledgement and window
        // updates (types 4 and 8) that may trail the handshake are not replies.
        writes
            .into_iter()
            .filter(|w| frames(w).any(|kind| kind == 0x0 || kind == 0x1))
            .collect()
    }

    /// The types of the frames a write starts with and carries whole.
    fn frames(write: &[u8]) -> impl Iterator<Item = u8> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let head = write.get(at..at + 9)?;
            let length =
                usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            at += 9 + length;
            Some(head[3])
        })
    }

    /// The write that carried the reply's payload whole, and where in it the payload starts.
    fn payload_write(writes: &[Vec<u8>], size: usize) -> (&[u8], usize) {
        let body = vec![b'x'; size];
        writes
            .iter()
            .find_map(|w| {
                let at = w
                    .windows(size)
                    .position(|window| window == body.as_slice())?;
                Some((w.as_slice(), at))
            })
            .expect("no write carried the whole reply payload")
    }

    /// Whether the frame after the payload, in the same write, is the trailers (HEADERS with
    /// END_STREAM: a 9-byte frame header, type at 3, flags at 4).
    fn trailers_left_with_the_data(writes: &[Vec<u8>], size: usize) -> bool {
        let (write, at) = payload_write(writes, size);
        let end = at + size;
        write.len() > end + 9 && write[end + 3] == 0x1 && write[end + 4] & 0x1 == 0x1
    }

    /// Whether the DATA frame's 9-byte header (length `size`, type 0) is in the payload's write.
    fn head_left_with_the_payload(writes: &[Vec<u8>], size: usize) -> bool {
        let (write, at) = payload_write(writes, size);
        let Some(head) = at.checked_sub(9).map(|start| &write[start..at]) else {
            return false;
        };
        let length = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        length == size && head[3] == 0x0
    }

    fn wire<T>(io: T) -> Wire<T> {
        Wire::new(io, Arc::default())
    }

    #[tokio::test]
    async fn a_small_reply_leaves_in_one_write_with_its_headers_and_trailers() {
        let writes = replies(wire, SMALL, 1).await;
        assert_eq!(writes.len(), 1, "one write a reply: {writes:?}");
        assert!(trailers_left_with_the_data(&writes, SMALL));
    }

    /// Why this wrapper exists: without it h2 sends such a reply's trailers in a write of their
    /// own. If this fails, h2 stopped doing that and the wrapper may be dropped.
    #[tokio::test]
    async fn without_it_h2_writes_the_trailers_of_a_small_reply_apart() {
        let writes = replies(|io| io, SMALL, 1).await;
        assert!(writes.len() >= 2, "{writes:?}");
        assert!(!trailers_left_with_the_data(&writes, SMALL));
    }

    /// A reply h2 keeps aside still leaves in one write with its frame's head, and in at most
    /// two with its trailers.
    #[tokio::test]
    async fn a_larger_reply_leaves_with_its_frame_head_in_at_most_two_writes() {
        let writes = replies(wire, LARGE, 1).await;
        assert!(head_left_with_the_payload(&writes, LARGE));
        assert!(writes.len() <= 2, "{writes:?}");
    }

    /// Replies made together share writes: never more writes than replies.
    #[tokio::test]
    async fn replies_made_together_take_at_most_one_write_each() {
        let writes = replies(wire, SMALL, 16).await;
        assert!(writes.len() <= 16, "{} writes for 16 replies", writes.len());
    }

    #[tokio::test]
    async fn the_preface_is_seen_once_its_bytes_arrive_and_bytes_pass_through() {
        let (mut client, server) = tokio::io::duplex(64);
        let seen = Arc::new(AtomicBool::new(false));
        let mut io = Wire::new(server, seen.clone());
        client.write_all(&[b'p'; 23]).await.unwrap();
        let mut got = [0u8; 23];
        io.read_exact(&mut got).await.unwrap();
        assert!(
            !seen.load(Ordering::Relaxed),
            "23 bytes are not the preface"
        );
        client.write_all(b"!").await.unwrap();
        io.read_exact(&mut got[..1]).await.unwrap();
        assert!(seen.load(Ordering::Relaxed));
        io.write_all(b"pong").await.unwrap();
        io.shutdown().await.unwrap();
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"pong");
    }

    /// What hyper and h2 take of replies whose client stops reading its socket: each stream's
    /// reply leaves the byte budget's count only as far as hyper's send buffer (`SEND_BUFFER`,
    /// which `transport::http2` sets), the one piece hyper keeps in hand, and the connection's
    /// own buffers allow. The flow-control windows are wide open, so they are not what bounds
    /// it. hyper's default send buffer (~400 KiB a stream) lets far more through: the canary.
    #[tokio::test]
    async fn replies_to_a_client_that_stops_reading_are_taken_only_as_far_as_the_send_buffers() {
        use crate::grpc::transport::SEND_BUFFER;
        const STREAMS: u32 = 16;
        const SIZE: usize = 1 << 20;
        const SOCKET: usize = 64 << 10;
        let taken = |send_buffer: usize| async move {
            let (mut client, server) = tokio::io::duplex(SOCKET);
            let budget = ByteBudget::new(0, 0, Arc::default(), ["c", "s"]);
            let registry: Arc<Replies<()>> = Arc::default();
            let share = budget.share();
            let service = hyper::service::service_fn(move |_request| {
                let (share, registry) = (share.clone(), registry.clone());
                async move {
                    let body = Unary(Some(Bytes::from(vec![b'x'; SIZE])), true);
                    let body = tonic::body::Body::new(body);
                    Ok::<_, Infallible>(http::Response::new(Reply::new(body, share, (), &registry)))
                }
            });
            let settings = TransportSettings::from_config(&crate::config::ServerConfig::default());
            let mut builder = http2(&settings);
            builder.max_send_buf_size(send_buffer);
            let io = TokioIo::new(Wire::new(server, Arc::default()));
            let served = tokio::spawn(async move { builder.serve_connection(io, service).await });
            // Written by hand and never read: the preface, windows of 2 MiB a stream and 32 MiB
            // more for the connection, then STREAMS requests (HPACK: POST, http, /x).
            let mut frames = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
            frames.extend_from_slice(&[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 4, 0, 0x20, 0, 0]);
            frames.extend_from_slice(&[0, 0, 4, 8, 0, 0, 0, 0, 0, 0x02, 0, 0, 0]);
            for n in 0..STREAMS {
                let block = [0x83, 0x86, 0x04, 0x02, b'/', b'x'];
                frames.extend_from_slice(&[0, 0, block.len() as u8, 1, 0x5]);
                frames.extend_from_slice(&(2 * n + 1).to_be_bytes());
                frames.extend_from_slice(&block);
            }
            client.write_all(&frames).await.unwrap();
            // Until the server has taken all it can: what it holds stops changing.
            let mut held = usize::MAX;
            for round in 0.. {
                assert!(round < 100, "what the server holds never settled");
                tokio::time::sleep(Duration::from_millis(100)).await;
                let now = budget.used();
                if now == held && now > 0 {
                    break;
                }
                held = now;
            }
            served.abort();
            STREAMS as usize * SIZE - held
        };
        // The duplex and the connection's own buffers (the socket's room, `LIMIT` held, h2's
        // 16 KiB), then per stream the send buffer and one piece in hyper's hand.
        let bound = SOCKET + LIMIT + (17 << 10) + STREAMS as usize * (SEND_BUFFER + PIECE);
        let with_ours = taken(SEND_BUFFER).await;
        assert!(with_ours <= bound, "{with_ours} bytes taken, over {bound}");
        let with_hypers_default = taken(400 << 10).await;
        assert!(
            with_hypers_default > bound,
            "the canary: hyper's default took {with_hypers_default}, within {bound}"
        );
    }
}
