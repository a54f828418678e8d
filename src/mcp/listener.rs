//! The MCP listener: accepts connections (plain or TLS), bounds them (how many at once, from one
//! address, how long a request's headers may take), and serves each with hyper's HTTP/1.1 server
//! through the gate. Streamable HTTP is plain HTTP/1.1 to every MCP client in use; each
//! connection takes the TLS certificate current when it arrives, as the gRPC listener does.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::gate::{Gate, Gates};
use super::handler::Connection;
use crate::front::per_address::PerAddress;
use crate::front::tls::Tls;

/// How long a client has to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections get to finish once the listener stops.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The listener's connection bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub max_connections: usize,
    pub max_connections_per_address: usize,
}

/// Serves MCP on `listener` until `stop` fires, then gives open connections `CLOSE_GRACE`.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<Tls>,
    gates: Arc<Gates>,
    bounds: Bounds,
    stop: CancellationToken,
) {
    let open = Arc::new(Semaphore::new(bounds.max_connections));
    let by_address: Arc<PerAddress> = Arc::default();
    let tracker = TaskTracker::new();
    let local = listener.local_addr().ok();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "the MCP listener could not accept");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // A reply is its headers and a few small writes: without this, Nagle's algorithm holds
        // the last of them for the client's delayed ACK (40 ms per call, measured).
        let _ = stream.set_nodelay(true);
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "an MCP connection was refused: server.max_connections are open");
            continue;
        };
        let Some(turn) = by_address.take(peer.ip(), bounds.max_connections_per_address) else {
            tracing::debug!(%peer, "an MCP connection was refused: server.max_connections_per_address are open from its address");
            continue;
        };
        let connection = Connection {
            peer,
            local: local.unwrap_or(peer),
        };
        let gate = Gate {
            shared: gates.clone(),
            connection,
            certificates: None,
            tls: tls.is_some(),
            share: gates.requests.share(),
        };
        let tls = tls.clone();
        let stop = stop.clone();
        tracker.spawn(async move {
            let _held = (permit, turn);
            match tls {
                None => run(stream, gate, &stop).await,
                Some(tls) => {
                    if let Some((stream, gate)) = handshake(stream, gate, &tls).await {
                        run(stream, gate, &stop).await;
                    }
                }
            }
        });
    }
    drop(listener);
    tracker.close();
    let _ = tokio::time::timeout(CLOSE_GRACE, tracker.wait()).await;
}

/// The TLS handshake, within the configured timeout, offering HTTP/1.1 (the gRPC listener's
/// config offers h2 alone); the gate learns the client's certificates.
async fn handshake(
    stream: TcpStream,
    mut gate: Gate,
    tls: &Tls,
) -> Option<(tokio_rustls::server::TlsStream<TcpStream>, Gate)> {
    let mut config = (*tls.config()).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let peer = gate.connection.peer;
    let stream = match tokio::time::timeout(tls.handshake_timeout(), acceptor.accept(stream)).await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "an MCP TLS handshake failed");
            return None;
        }
        Err(_) => {
            tracing::debug!(%peer, "an MCP TLS handshake timed out");
            return None;
        }
    };
    gate.certificates = stream
        .get_ref()
        .1
        .peer_certificates()
        .map(|chain| Arc::new(chain.iter().map(|c| c.clone().into_owned()).collect()));
    Some((stream, gate))
}

/// Serves one connection until it closes, or `stop` fires (then it finishes what it serves).
async fn run<I>(io: I, gate: Gate, stop: &CancellationToken)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(true);
    let service = hyper_util::service::TowerToHyperService::new(gate);
    let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = &mut connection => {}
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(CLOSE_GRACE, connection).await;
        }
    }
}
