//! An accepted connection as h2 sees it: its writes held until h2 flushes, so the frames of
//! several small replies (and a small reply's DATA and its trailers) leave in one write; and its
//! first bytes counted, for the preface timeout.
//!
//! h2 copies a DATA frame into its write buffer only under a threshold: 256 bytes on a
//! connection that takes vectored writes, 1 024 on one that does not. A frame at or over it is
//! kept aside, and while it is, h2 buffers nothing else: the next frame (the same reply's
//! trailers, another stream's reply) waits for a write of its own. A one-call batch result is
//! ~400 bytes, so on a plain `TcpStream` every reply took two writes, and at concurrency 16 the
//! connection made 1.3 writes a reply where a tonic echo of a small value makes 0.4.
//!
//! So this connection reports no vectored writes (h2's threshold becomes 1 024 bytes: replies
//! under it share h2's buffer with what follows them), and tokio's `BufWriter` holds what h2
//! writes until h2 flushes. A larger frame's payload is copied into the same buffer, after its
//! head, so it leaves in one write with what came before it. The tests below pin this through
//! hyper's server as the transport builds it: an upgrade of hyper or h2 that changes the writes
//! a reply takes fails them.
//!
//! Bound: `HOLD` bytes per connection, allocated when the connection opens (h2's own 16 KiB
//! buffer, one 16 KiB reply piece and a frame's head, so a full flush still leaves in one write).
//! A write that would not fit sends what is held first; one as large as `HOLD` goes straight
//! through.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, BufWriter, ReadBuf};
use tonic::transport::server::Connected;

/// The most bytes held per connection between flushes (see the module docs).
const HOLD: usize = 33 * 1024;
/// The HTTP/2 client preface (`PRI * HTTP/2.0…`) is this long.
const PREFACE_BYTES: usize = 24;

/// `inner` with its writes held until a flush and its preface watched (see the module docs).
#[derive(Debug)]
pub(super) struct Wire<T> {
    inner: BufWriter<T>,
    /// Bytes read so far, counted up to the preface's length.
    read: usize,
    /// Set once the preface's bytes have arrived.
    preface: Arc<AtomicBool>,
}

impl<T: AsyncWrite> Wire<T> {
    /// `inner`, holding nothing yet; `preface` is set once the client's first 24 bytes are read.
    pub(super) fn new(inner: T, preface: Arc<AtomicBool>) -> Self {
        Wire {
            inner: BufWriter::with_capacity(HOLD, inner),
            read: 0,
            preface,
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Wire<T> {
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
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    /// No vectored writes, so h2 copies DATA frames under 1 024 bytes into its buffer (see the
    /// module docs); the default `poll_write_vectored` writes the first non-empty slice.
    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The peer's address (and TLS certificates) are the inner connection's.
impl<T: Connected + AsyncWrite> Connected for Wire<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.get_ref().connect_info()
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
    use crate::grpc::transport::{TransportSettings, http2};

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

    fn wire(io: Writes) -> Wire<Writes> {
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
}
