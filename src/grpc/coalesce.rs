//! An accepted connection whose writes are gathered until the transport flushes, so the frames of
//! several replies (and a reply's DATA and trailers) leave in one write.
//!
//! h2 copies a DATA frame into its write buffer only below a threshold: 256 bytes on a
//! connection that takes vectored writes, 1 024 on one that does not. A larger frame is kept
//! aside, and while it is, h2 buffers nothing else: the next frame (the same reply's trailers,
//! another stream's reply) waits for a write of its own. A one-call batch result is ~400 bytes,
//! so on a plain `TcpStream` every reply took two writes, and at concurrency 16 the connection
//! made 1.3 writes a reply where a tonic echo of a small value makes 0.4. Reporting no vectored
//! writes raises h2's threshold to 1 024 bytes; the buffer here keeps a larger frame's payload
//! with the bytes before it, so it still leaves in one write.
//!
//! Every write is copied once more (h2's buffer to this one), at most `LIMIT` bytes held per
//! connection: a write that would not fit sends what is held first, and one as large as `LIMIT`
//! goes straight through. Once written, a buffer larger than `KEEP` is released.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// The most bytes held per connection between flushes (h2's own buffer is 16 KiB).
const LIMIT: usize = 64 * 1024;
/// The most buffer a connection keeps once what it held is written.
const KEEP: usize = 16 * 1024;

/// `inner` with its writes held until a flush (see the module docs).
#[derive(Debug)]
pub struct Coalesced<T> {
    inner: T,
    held: Vec<u8>,
    /// How much of `held` is already written.
    sent: usize,
}

impl<T> Coalesced<T> {
    pub fn new(inner: T) -> Self {
        Coalesced {
            inner,
            held: Vec::new(),
            sent: 0,
        }
    }

    /// The connection underneath.
    #[cfg(test)]
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes what is held; `Ready(Ok)` once all of it is written.
    fn poll_send_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.held.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.held[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        if self.held.capacity() > KEEP {
            // A large reply's buffer is not kept by an idle connection.
            self.held = Vec::new();
        } else {
            self.held.clear();
        }
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if !this.held.is_empty() && this.held.len() + data.len() > LIMIT {
            ready!(this.poll_send_held(cx))?;
        }
        if this.held.is_empty() && data.len() >= LIMIT {
            return Pin::new(&mut this.inner).poll_write(cx, data);
        }
        this.held.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    /// No vectored writes, so h2 copies DATA frames up to 1 024 bytes into its buffer (see the
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
impl<T: Connected> Connected for Coalesced<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Counts the writes that reach it.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<Vec<u8>>,
        flushes: usize,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            // At most 1 000 bytes a write, as a socket with little room would take.
            let n = data.len().min(1_000);
            self.writes.push(data[..n].to_vec());
            Poll::Ready(Ok(n))
        }

        fn poll_flush(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn writes_are_held_until_a_flush_then_leave_together_in_order() {
        let mut io = Coalesced::new(Recorder::default());
        io.write_all(b"headers").await.unwrap();
        io.write_all(b"data").await.unwrap();
        io.write_all(b"trailers").await.unwrap();
        assert!(io.inner.writes.is_empty());
        io.flush().await.unwrap();
        assert_eq!(io.inner.writes, vec![b"headersdatatrailers".to_vec()]);
        assert_eq!(io.inner.flushes, 1);
    }

    #[tokio::test]
    async fn a_partial_write_is_resumed_and_nothing_is_lost_or_reordered() {
        let mut io = Coalesced::new(Recorder::default());
        let first: Vec<u8> = (0..2_500u32).map(|i| i as u8).collect();
        io.write_all(&first).await.unwrap();
        io.write_all(b"tail").await.unwrap();
        io.flush().await.unwrap();
        let sent: Vec<u8> = io.inner.writes.concat();
        assert_eq!(sent.len(), 2_504);
        assert_eq!(&sent[..2_500], &first[..]);
        assert_eq!(&sent[2_500..], b"tail");
        assert!(io.held.is_empty());
    }

    #[tokio::test]
    async fn held_bytes_stay_under_the_limit_and_a_large_write_goes_straight_through() {
        let mut io = Coalesced::new(Recorder::default());
        io.write_all(&vec![1; LIMIT - 10]).await.unwrap();
        assert!(io.inner.writes.is_empty());
        // Would not fit: what is held is sent first.
        io.write_all(&[2; 20]).await.unwrap();
        assert_eq!(io.inner.writes.concat().len(), LIMIT - 10);
        assert_eq!(io.held, vec![2; 20]);
        // The buffer the first write grew was released once written.
        assert!(io.held.capacity() < KEEP);
        io.flush().await.unwrap();
        let before = io.inner.writes.len();
        // As large as the limit: not copied, written as the socket takes it.
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
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, data))?;
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

    /// The size of a one-call batch result: above h2's 256-byte threshold for vectored
    /// connections, under its 1 024 for the others.
    const REPLY: usize = 500;

    /// Serves one HTTP/2 request over `io` with a reply of `REPLY` bytes of `x` and trailers,
    /// as tonic answers a unary call, and returns once the client has read it all.
    async fn one_reply<T>(io: T, client: tokio::io::DuplexStream)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        use tonic::codegen::Bytes;
        use tonic::codegen::http;

        let server = tokio::spawn(async move {
            let mut connection = h2::server::handshake(io).await.unwrap();
            let (_request, mut respond) = connection.accept().await.unwrap().unwrap();
            let mut send = respond
                .send_response(http::Response::new(()), false)
                .unwrap();
            send.send_data(Bytes::from(vec![b'x'; REPLY]), false)
                .unwrap();
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            send.send_trailers(trailers).unwrap();
            // Drives the connection until the client leaves.
            while connection.accept().await.is_some() {}
        });
        let (send, connection) = h2::client::handshake(client).await.unwrap();
        let driver = tokio::spawn(connection);
        let mut send = send.ready().await.unwrap();
        let request = http::Request::post("http://toolgate/x").body(()).unwrap();
        let (response, _) = send.send_request(request, true).unwrap();
        let mut body = response.await.unwrap().into_body();
        let mut read = 0;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            read += chunk.len();
            body.flow_control().release_capacity(chunk.len()).unwrap();
        }
        assert_eq!(read, REPLY);
        assert!(body.trailers().await.unwrap().is_some());
        drop(send);
        driver.abort();
        let _ = server.await;
    }

    /// Whether the write that carried the reply's last byte also carried the frame after it,
    /// and that frame is the trailers (HEADERS with END_STREAM).
    fn trailers_left_with_the_data(writes: &[Vec<u8>]) -> bool {
        let body = vec![b'x'; REPLY];
        let write = writes
            .iter()
            .find(|w| w.windows(REPLY).any(|window| window == body.as_slice()))
            .expect("no write carried the whole reply (it is under one frame)");
        let end = write
            .windows(REPLY)
            .position(|window| window == body.as_slice())
            .unwrap_or_default()
            + REPLY;
        // After the DATA payload: a 9-byte frame header, type at 3, flags at 4.
        write.len() > end + 9 && write[end + 3] == 0x1 && write[end + 4] & 0x1 == 0x1
    }

    #[tokio::test]
    async fn a_reply_and_its_trailers_leave_in_one_write() {
        let (client, server) = tokio::io::duplex(1 << 20);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let io = Writes {
            inner: server,
            seen: seen.clone(),
        };
        one_reply(Coalesced::new(io), client).await;
        assert!(trailers_left_with_the_data(&seen.lock()));
    }

    /// Why this wrapper exists: without it h2 sends such a reply's trailers in a write of their
    /// own. If this fails, h2 stopped doing that and the wrapper may be dropped.
    #[tokio::test]
    async fn without_it_h2_writes_the_trailers_of_such_a_reply_apart() {
        let (client, server) = tokio::io::duplex(1 << 20);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let io = Writes {
            inner: server,
            seen: seen.clone(),
        };
        one_reply(io, client).await;
        assert!(!trailers_left_with_the_data(&seen.lock()));
    }

    #[tokio::test]
    async fn reads_and_shutdown_pass_through() {
        let (client, server) = tokio::io::duplex(64);
        let mut io = Coalesced::new(server);
        let mut client = client;
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        io.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        io.write_all(b"pong").await.unwrap();
        io.shutdown().await.unwrap();
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"pong");
    }
}
