//! The HTTP/1.1 listener the fronts that speak it share (the MCP front, the admin endpoints):
//! accepts connections, plain or TLS (each taking the certificate current when it arrives),
//! bounds them (how many at once, from one address, how long a request's headers may take),
//! and serves each with hyper's HTTP/1.1 server through a service made for that connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use rustls::pki_types::CertificateDer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::per_address::PerAddress;
use super::tls::Tls;

/// How a listener bounds its connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// What the logs call it (`mcp`, `admin`).
    pub name: &'static str,
    /// Connections served at once; more are closed as they arrive.
    pub max_connections: usize,
    /// Connections served at once from one address.
    pub max_per_address: usize,
    /// How long a client has to send a request's headers.
    pub header_timeout: Duration,
    /// Whether a connection serves more than one request.
    pub keep_alive: bool,
    /// How long open connections get to finish once the listener stops.
    pub close_grace: Duration,
}

/// A service hyper can serve a connection with: what `serve` asks of the one it makes.
pub(crate) trait Serves:
    tower::Service<
        http::Request<Incoming>,
        Response = http::Response<Self::Body>,
        Future: Send + 'static,
        Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    > + Clone
    + Send
    + 'static
{
    type Body: http_body::Body<Data: Send, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
        + Send
        + 'static;
}

impl<S, B> Serves for S
where
    S: tower::Service<http::Request<Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Body = B;
}

/// A connection, as the service made for it learns of it.
#[derive(Debug, Clone)]
pub(crate) struct Accepted {
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Over TLS: whether it is, and the client's certificate chain when it sent one.
    pub tls: bool,
    pub certificates: Option<Arc<Vec<CertificateDer<'static>>>>,
}

/// Serves `listener` until `stop` fires, then gives open connections `limits.close_grace`. Each
/// connection is served by the service `make` makes for it.
pub(crate) async fn serve<M, S>(
    listener: TcpListener,
    tls: Option<Tls>,
    limits: Limits,
    stop: CancellationToken,
    make: M,
) where
    M: Fn(Accepted) -> S + Send + Sync + 'static,
    S: Serves,
{
    let make = Arc::new(make);
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let by_address: Arc<PerAddress> = Arc::default();
    let tracker = TaskTracker::new();
    let local = listener.local_addr().ok();
    let name = limits.name;
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "the {name} listener could not accept");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // A reply is its headers and a few small writes: without this, Nagle's algorithm holds
        // the last of them for the client's delayed ACK (40 ms per call, measured).
        let _ = stream.set_nodelay(true);
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "a {name} connection was refused: {} are open", limits.max_connections);
            continue;
        };
        let Some(turn) = by_address.take(peer.ip(), limits.max_per_address) else {
            tracing::debug!(%peer, "a {name} connection was refused: {} are open from its address", limits.max_per_address);
            continue;
        };
        let mut accepted = Accepted {
            peer,
            local: local.unwrap_or(peer),
            tls: tls.is_some(),
            certificates: None,
        };
        let tls = tls.clone();
        let stop = stop.clone();
        let make = make.clone();
        tracker.spawn(async move {
            let _held = (permit, turn);
            match tls {
                None => run(stream, make(accepted), &limits, &stop).await,
                Some(tls) => {
                    if let Some(stream) = handshake(stream, &mut accepted, &tls, name).await {
                        run(stream, make(accepted), &limits, &stop).await;
                    }
                }
            }
        });
    }
    drop(listener);
    tracker.close();
    let _ = tokio::time::timeout(limits.close_grace, tracker.wait()).await;
}

/// The TLS handshake, within the configured timeout, offering HTTP/1.1 (the gRPC listener's
/// config offers h2 alone); the connection learns the client's certificates.
async fn handshake(
    stream: TcpStream,
    accepted: &mut Accepted,
    tls: &Tls,
    name: &str,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let mut config = (*tls.config()).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let peer = accepted.peer;
    let stream = match tokio::time::timeout(tls.handshake_timeout(), acceptor.accept(stream)).await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "a {name} TLS handshake failed");
            return None;
        }
        Err(_) => {
            tracing::debug!(%peer, "a {name} TLS handshake timed out");
            return None;
        }
    };
    accepted.certificates = stream
        .get_ref()
        .1
        .peer_certificates()
        .map(|chain| Arc::new(chain.iter().map(|c| c.clone().into_owned()).collect()));
    Some(stream)
}

/// Serves one connection until it closes, or `stop` fires (then it finishes what it serves,
/// within the grace).
async fn run<I, S: Serves>(io: I, service: S, limits: &Limits, stop: &CancellationToken)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(limits.keep_alive);
    let service = hyper_util::service::TowerToHyperService::new(service);
    let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = &mut connection => {}
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.close_grace, connection).await;
        }
    }
}
