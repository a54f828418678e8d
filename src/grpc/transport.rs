//! The transport: accepts connections (plain or TLS), bounds them, and serves each with hyper's
//! HTTP/2 server in front of tonic's routes. Owned here rather than left to tonic's server,
//! which sets none of these bounds and hides hyper's send buffer:
//! - at most `max_connections` open, `max_connections_per_address` from one address; more are
//!   closed at once, counted;
//! - a connection that has not sent the HTTP/2 preface (after its TLS handshake, if any) within
//!   `preface_timeout` is closed; a TLS client must send its whole ClientHello within
//!   `HELLO_TIMEOUT` before it takes one of the handshake slots, and one address runs at most
//!   `HANDSHAKES_PER_ADDRESS` handshakes;
//! - a connection with no open stream for `idle_timeout` is sent GOAWAY;
//! - per stream, hyper buffers at most `SEND_BUFFER` bytes of a reply; request and reply bytes
//!   the server holds are counted against byte budgets (`bodies.rs`).

use std::collections::HashSet;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use parking_lot::Mutex;
use slab::Slab;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::service::Routes;
use tonic::transport::server::Connected;

use super::access::Authorized;
use super::bodies::{Received, Replies, Reply};
use super::wire::Wire;
use crate::front::budget::{ByteBudget, Share};
use crate::front::per_address::{AddressTurn, PerAddress};
use crate::front::tls::Tls;
use toolgate_core::metrics::Metrics;

/// What a TLS client has to send its whole ClientHello in: clients send it as soon as TCP
/// connects (a few hundred bytes, one round trip), so a socket that has not by then (silent, or
/// sending a byte at a time) is dropped without ever holding a handshake slot.
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// TLS handshakes in progress at most, server-wide (they cost CPU).
const MAX_HANDSHAKES: usize = 256;
/// TLS handshakes in progress at most from one address, so one client cannot take the rest
/// (32 addresses of stalled handshakes fill the server's bound).
const HANDSHAKES_PER_ADDRESS: usize = 8;
/// Under pressure (a handshake waits for a slot), a handshake that has held its slot this long
/// is dropped, so clients that stall after their ClientHello cannot keep the slots from the
/// ones that finish in a few round trips; while no one waits, a slow client (a long round trip)
/// keeps its slot up to the handshake timeout.
const PRESSURED_HANDSHAKE: Duration = Duration::from_millis(300);
/// How often a handshake in progress looks at the pressure.
const PRESSURE_CHECK: Duration = Duration::from_millis(50);
/// Bytes of one stream's reply hyper buffers at most (its default is 400 KiB): with replies
/// handed over in pieces, what the transport holds for a stream nobody reads stays small (this
/// and one piece, 32 KiB, per stream sending a reply).
pub(super) const SEND_BUFFER: usize = 16 * 1024;
/// How long a connection asked to close (GOAWAY) may take to finish its streams before it is
/// dropped: a client that never acknowledges the GOAWAY's PING would otherwise keep it.
const CLOSE_GRACE: Duration = Duration::from_secs(10);
/// RPCs served whatever the byte budgets hold: health checks are tiny, and a budget filled by
/// one client must not fail every liveness probe.
const EXEMPT_PREFIX: &str = "/grpc.health.v1.Health/";

/// The transport's bounds (`[server]`).
#[derive(Debug, Clone, Copy)]
pub struct TransportSettings {
    pub max_connections: usize,
    /// 0: no bound per address.
    pub max_connections_per_address: usize,
    pub preface_timeout: Duration,
    /// Zero: never.
    pub idle_timeout: Duration,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`.
    pub max_streams: u32,
    /// HTTP/2 PING interval for finding dead connections; `None` sends none.
    pub keepalive: Option<Duration>,
    /// How long a PING may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// How long an incomplete request message or an untaken reply may wait on its client.
    pub stall_timeout: Duration,
    /// The largest request message the services decode.
    pub max_message_bytes: usize,
}

/// The byte budgets every connection takes a share of.
#[derive(Debug, Clone)]
pub struct Budgets {
    /// Request bytes received and not yet decoded.
    pub requests: Arc<ByteBudget>,
    /// Reply bytes made and not yet handed to the transport.
    pub replies: Arc<ByteBudget>,
}

/// A handshake waiting for a slot, counted in `Connections::waiting` while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The open connections: how many, from where; shared by the accept loop and the connections.
#[derive(Debug)]
pub struct Connections {
    settings: TransportSettings,
    open: AtomicUsize,
    by_address: Arc<PerAddress>,
    handshakes: Arc<Semaphore>,
    /// Handshakes waiting for one of `handshakes`' slots.
    waiting: AtomicUsize,
    handshaking: Arc<PerAddress>,
    metrics: Arc<Metrics>,
    /// The connections being served, for closing an idle one when the table is full.
    live: Mutex<Slab<Weak<Live>>>,
}

/// A connection being served, as the table sees it: whether it has streams, and how to close
/// it.
struct Live {
    streams: Arc<Streams>,
    /// The address it is counted under (`per_address::client_of`).
    client: IpAddr,
    /// Set once it was picked to make room (it funds exactly one new connection).
    evicted: AtomicBool,
    evict: tokio::sync::Notify,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("streams", &self.streams.open.load(Ordering::Relaxed))
            .field("evicted", &self.evicted.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// One open connection's place; given back when it closes.
struct Slot {
    connections: Arc<Connections>,
    _address: AddressTurn,
}

/// What a connection's streams share: their count, for the idle timeout, and what their
/// replies hold, for evicting what a client does not read.
struct Streams {
    open: AtomicUsize,
    /// Whether any stream was ever opened: a connection that never served one goes first when
    /// room is made.
    served: AtomicBool,
    /// When the last stream ended (or the connection opened), while none is open.
    idle_since: Mutex<Instant>,
    replies: Arc<Replies<StreamGuard>>,
}

/// Counts one open stream until dropped (it lives in the stream's reply).
struct StreamGuard(Arc<Streams>);

/// Why a connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectionRefusal {
    Connections,
    ConnectionsPerAddress,
    Handshakes,
}

impl ConnectionRefusal {
    fn capacity(self) -> &'static str {
        match self {
            ConnectionRefusal::Connections => "connections",
            ConnectionRefusal::ConnectionsPerAddress => "connections_per_address",
            ConnectionRefusal::Handshakes => "tls_handshakes_per_address",
        }
    }
}

impl TransportSettings {
    /// The bounds `[server]` sets (the connection cap as configured: the binary lowers it to
    /// what its file limit allows).
    pub(crate) fn from_config(server: &crate::config::ServerConfig) -> Self {
        TransportSettings {
            max_connections: server.max_connections,
            max_connections_per_address: server.max_connections_per_address,
            preface_timeout: server.preface_timeout,
            idle_timeout: server.idle_timeout,
            max_streams: server.max_streams_per_connection,
            keepalive: (!server.keepalive_interval.is_zero()).then_some(server.keepalive_interval),
            keepalive_timeout: server.keepalive_timeout,
            stall_timeout: server.stall_timeout,
            max_message_bytes: server.max_message_bytes,
        }
    }
}

impl Budgets {
    /// The budgets `[limits]` sets; refusals are counted in `metrics`.
    pub(crate) fn from_config(limits: &crate::config::Limits, metrics: &Arc<Metrics>) -> Self {
        Budgets {
            requests: ByteBudget::new(
                limits.max_buffered_request_bytes,
                limits.max_buffered_request_bytes_per_connection,
                metrics.clone(),
                ["request_bytes_connection", "request_bytes_server"],
            ),
            replies: ByteBudget::new(
                limits.max_unread_reply_bytes,
                limits.max_unread_reply_bytes_per_connection,
                metrics.clone(),
                ["reply_bytes_connection", "reply_bytes_server"],
            ),
        }
    }
}

impl Connections {
    /// `handshake`, given up (`None`) once it has held its slot for `PRESSURED_HANDSHAKE` while
    /// another handshake waits for one.
    async fn under_pressure<F: Future>(&self, handshake: F) -> Option<F::Output> {
        let held_since = Instant::now();
        tokio::pin!(handshake);
        let mut checks = tokio::time::interval(PRESSURE_CHECK);
        loop {
            tokio::select! {
                done = &mut handshake => return Some(done),
                _ = checks.tick() => {
                    let pressed = self.waiting.load(Ordering::Relaxed) > 0;
                    if pressed && held_since.elapsed() >= PRESSURED_HANDSHAKE {
                        return None;
                    }
                }
            }
        }
    }

    /// Counts a handshake waiting for a slot until the guard drops.
    fn waiting_for_handshake(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(&self.waiting)
    }

    pub fn new(settings: TransportSettings, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Connections {
            settings,
            open: AtomicUsize::new(0),
            by_address: Arc::default(),
            handshakes: Arc::new(Semaphore::new(MAX_HANDSHAKES)),
            waiting: AtomicUsize::new(0),
            handshaking: Arc::default(),
            metrics,
            live: Mutex::default(),
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// A place for a connection from `ip`, or why there is none. With every place taken, the
    /// connection idle longest (no stream open) is closed to make room, as proxies shorten idle
    /// timeouts under pressure: connections that open and then idle cannot keep real clients
    /// out, whatever `idle_timeout` is.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, ConnectionRefusal> {
        let settings = &self.settings;
        let client = crate::front::per_address::client_of(ip);
        // The address's bound first, so a connection refused there closes nobody's: an address
        // at its bound makes room only from its own connections, and the place that frees in
        // the table is the one it takes. Each victim funds one connection, over the bounds only
        // until it has closed.
        let Some(address) = self
            .by_address
            .take(ip, settings.max_connections_per_address)
        else {
            if !self.evict_idlest(Some(client)) {
                return Err(ConnectionRefusal::ConnectionsPerAddress);
            }
            let address = self
                .by_address
                .take(ip, 0)
                .ok_or(ConnectionRefusal::ConnectionsPerAddress)?;
            self.open.fetch_add(1, Ordering::Relaxed);
            return Ok(Slot {
                connections: self.clone(),
                _address: address,
            });
        };
        let admitted = self
            .open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |open| {
                (open < settings.max_connections).then_some(open + 1)
            });
        if admitted.is_err() {
            if !self.evict_idlest(None) {
                return Err(ConnectionRefusal::Connections);
            }
            self.open.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Slot {
            connections: self.clone(),
            _address: address,
        })
    }

    /// Closes a connection with no stream open, if there is one (`client`: one of that
    /// address's); whether there was. Those of the address holding the most connections go
    /// first (a flood comes from few addresses, and anything it sends makes its connections
    /// look used), then those that never served a stream, then the one idle longest.
    fn evict_idlest(&self, client: Option<IpAddr>) -> bool {
        let live = self.live.lock();
        let idlest = live
            .iter()
            .filter_map(|(_, weak)| weak.upgrade())
            .filter(|c| client.is_none_or(|ip| c.client == ip))
            .filter(|c| !c.evicted.load(Ordering::Relaxed))
            .filter(|c| c.streams.open.load(Ordering::Relaxed) == 0)
            .min_by_key(|c| {
                let held = self.by_address.held(&c.client);
                let served = c.streams.served.load(Ordering::Relaxed);
                (
                    std::cmp::Reverse(held),
                    served,
                    *c.streams.idle_since.lock(),
                )
            });
        let Some(idlest) = idlest else {
            return false;
        };
        if idlest.evicted.swap(true, Ordering::Relaxed) {
            return false;
        }
        idlest.evict.notify_one();
        true
    }

    fn refuse(&self, refusal: ConnectionRefusal, peer: SocketAddr) {
        self.metrics.refused(refusal.capacity());
        tracing::debug!(%peer, capacity = refusal.capacity(), "connection refused");
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connections.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Streams {
    fn begin(self: &Arc<Self>) -> StreamGuard {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.served.store(true, Ordering::Relaxed);
        StreamGuard(self.clone())
    }

    /// Drops what replies hold that their client has not taken for `stall`; how many.
    fn evict_stalled(&self, now: Instant, stall: Duration) -> usize {
        let replies = self.replies.lock();
        replies
            .iter()
            .filter_map(|(_, weak)| weak.upgrade())
            .filter(|pending| pending.lock().evict_if_stalled(now, stall))
            .count()
    }

    /// How long no stream has been open, as of `now`; zero while one is.
    fn idle_for(&self, now: Instant) -> Duration {
        if self.open.load(Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        now.saturating_duration_since(*self.idle_since.lock())
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut idle_since = self.0.idle_since.lock();
        if self.0.open.fetch_sub(1, Ordering::Relaxed) == 1 {
            *idle_since = Instant::now();
        }
    }
}

/// Accepts connections on `listener` and serves `routes` on each until `stop`; then stops
/// accepting, asks every connection to finish (GOAWAY) and waits for them to close.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<Tls>,
    routes: Authorized<Routes>,
    connections: Arc<Connections>,
    budgets: Budgets,
    streaming: Arc<HashSet<String>>,
    stop: CancellationToken,
) {
    let tracker = TaskTracker::new();
    let served = Arc::new(Served {
        routes,
        budgets,
        streaming,
        builder: http2(&connections.settings),
        stall_timeout: connections.settings.stall_timeout,
        exempt: ByteBudget::new(0, 0, Arc::default(), ["", ""]).share(),
    });
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = accept(&listener) => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, most likely: wait instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = match connections.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(refusal) => {
                connections.refuse(refusal, peer);
                continue;
            }
        };
        let connection = Connection {
            served: served.clone(),
            connections: connections.clone(),
            peer,
            stop: stop.clone(),
            _slot: slot,
        };
        tracker.spawn(connection.run(stream, tls.clone()));
    }
    // The listening socket closes now: new clients are refused by the kernel, not left hanging.
    drop(listener);
    tracker.close();
    tracker.wait().await;
}

/// The next connection, with `TCP_NODELAY` on: without it, the small frames that end a response
/// (the last DATA frame and the trailers) wait for the client's delayed ACK, about 40 ms per
/// streamed batch on Linux.
async fn accept(listener: &TcpListener) -> std::io::Result<(TcpStream, SocketAddr)> {
    let (stream, peer) = listener.accept().await?;
    let _ = stream.set_nodelay(true);
    Ok((stream, peer))
}

/// What every connection serves, and how.
struct Served {
    /// Every service, behind the access rules.
    routes: Authorized<Routes>,
    budgets: Budgets,
    streaming: Arc<HashSet<String>>,
    builder: hyper::server::conn::http2::Builder<TokioExecutor>,
    stall_timeout: Duration,
    /// A share of no budget, for the RPCs the budgets do not bound (`EXEMPT_PREFIX`).
    exempt: Arc<Share>,
}

/// What a client may send on one stream, and on the connection, before the server reads it
/// (each stream's window is what the request byte budgets count against).
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 1 << 20;
/// The largest frame accepted, and the largest header list.
const MAX_FRAME: u32 = 16 << 10;
const MAX_HEADER_LIST: u32 = 16 << 10;

/// hyper's HTTP/2 server with the transport's settings. Every value is set here, hyper's
/// defaults included, so an upgrade that changes a default changes nothing
/// (`it transport::a_connection_is_offered_the_settings_the_budgets_assume` pins what is sent).
pub(super) fn http2(
    settings: &TransportSettings,
) -> hyper::server::conn::http2::Builder<TokioExecutor> {
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(settings.max_streams)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_header_list_size(MAX_HEADER_LIST)
        .keep_alive_interval(settings.keepalive)
        .keep_alive_timeout(settings.keepalive_timeout)
        .max_send_buf_size(SEND_BUFFER);
    builder
}

/// One accepted connection, until it closes.
struct Connection {
    served: Arc<Served>,
    connections: Arc<Connections>,
    peer: SocketAddr,
    stop: CancellationToken,
    _slot: Slot,
}

impl Connection {
    async fn run(self, stream: TcpStream, tls: Option<Tls>) {
        let Some(tls) = tls else {
            let deadline = Instant::now() + self.connections.settings.preface_timeout;
            return self.serve(stream, deadline).await;
        };
        let handshake_deadline = Instant::now() + tls.handshake_timeout();
        if let Some(stream) = self.handshake(stream, &tls, handshake_deadline).await {
            // The preface is due once the handshake is done. Its writes are held like a plain
            // connection's (`Wire`): one held flush is one TLS record and one write.
            let deadline = Instant::now() + self.connections.settings.preface_timeout;
            self.serve(stream, deadline).await;
        }
    }

    /// The TLS handshake, bounded: its ClientHello within `HELLO_TIMEOUT` (before it takes a
    /// slot), all of it by `deadline`, a few at once per address. `None`: the connection is
    /// dropped.
    async fn handshake(
        &self,
        stream: TcpStream,
        tls: &Tls,
        deadline: Instant,
    ) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
        let peer = self.peer;
        let hello_by = (Instant::now() + HELLO_TIMEOUT).min(deadline);
        let hello =
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
        let start = match tokio::time::timeout_at(hello_by, hello).await {
            Ok(Ok(start)) => start,
            Ok(Err(error)) => {
                tracing::debug!(%peer, %error, "not a TLS ClientHello");
                return None;
            }
            Err(_) => {
                tracing::debug!(%peer, "no TLS ClientHello in time");
                return None;
            }
        };
        let turn = self
            .connections
            .handshaking
            .take(peer.ip(), HANDSHAKES_PER_ADDRESS);
        let _turn = match turn {
            Some(turn) => turn,
            None => {
                self.connections.refuse(ConnectionRefusal::Handshakes, peer);
                return None;
            }
        };
        let permit = {
            let _waiting = self.connections.waiting_for_handshake();
            tokio::time::timeout_at(
                deadline,
                self.connections.handshakes.clone().acquire_owned(),
            )
            .await
        };
        let Ok(Ok(_permit)) = permit else {
            tracing::debug!(%peer, "no TLS handshake slot in time");
            return None;
        };
        let handshake = self
            .connections
            .under_pressure(start.into_stream(tls.config()));
        match tokio::time::timeout_at(deadline, handshake).await {
            Ok(Some(Ok(stream))) => Some(stream),
            Ok(Some(Err(error))) => {
                tracing::debug!(%peer, %error, "a TLS handshake failed");
                None
            }
            Ok(None) => {
                tracing::debug!(%peer, "a slow TLS handshake dropped under pressure");
                self.connections
                    .metrics
                    .connection_closed("handshake_pressure");
                None
            }
            Err(_) => {
                tracing::debug!(%peer, "a TLS handshake timed out");
                None
            }
        }
    }

    /// Serves HTTP/2 on `io` until it closes, the preface is late, it idles out, or the server
    /// stops (then it is asked to finish: GOAWAY, running streams complete).
    async fn serve<IO>(self, io: IO, preface_deadline: Instant)
    where
        IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
        IO::ConnectInfo: Clone + Send + Sync + 'static,
    {
        let settings = self.connections.settings;
        let info = io.connect_info();
        let preface = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Streams {
            open: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            idle_since: Mutex::new(Instant::now()),
            replies: Arc::default(),
        });
        let service = ConnectionService {
            served: self.served.clone(),
            info,
            requests: self.served.budgets.requests.share(),
            replies: self.served.budgets.replies.share(),
            streams: streams.clone(),
        };
        let io = TokioIo::new(Wire::new(io, preface.clone()));
        let connection = self.served.builder.serve_connection(io, service);
        tokio::pin!(connection);
        let live = Arc::new(Live {
            streams: streams.clone(),
            client: crate::front::per_address::client_of(self.peer.ip()),
            evicted: AtomicBool::new(false),
            evict: tokio::sync::Notify::new(),
        });
        let _listed = Listed::new(&self.connections, &live);
        let period = check_period(&settings);
        // Set once the connection was asked to finish: it is dropped if it has not by then.
        let mut closing: Option<Instant> = None;
        loop {
            tokio::select! {
                result = &mut connection => {
                    if let Err(error) = result {
                        tracing::debug!(peer = %self.peer, %error, "connection ended with an error");
                    }
                    return;
                }
                () = self.stop.cancelled(), if closing.is_none() => {
                    connection.as_mut().graceful_shutdown();
                    closing = Some(Instant::now() + CLOSE_GRACE);
                }
                () = live.evict.notified() => {
                    self.connections.metrics.connection_closed("evicted_idle");
                    // Idle when picked: closed at once, its place goes to the new connection.
                    // A stream that began since is let finish, as on shutdown.
                    if streams.open.load(Ordering::Relaxed) == 0 {
                        tracing::debug!(peer = %self.peer, "idle connection closed to make room");
                        return;
                    }
                    if closing.is_none() {
                        connection.as_mut().graceful_shutdown();
                        closing = Some(Instant::now() + CLOSE_GRACE);
                    }
                }
                () = tokio::time::sleep(period) => {
                    let now = Instant::now();
                    if closing.is_some_and(|by| now >= by) {
                        tracing::debug!(peer = %self.peer, "connection did not finish after GOAWAY; dropped");
                        return;
                    }
                    if !preface.load(Ordering::Relaxed) && now >= preface_deadline {
                        tracing::debug!(peer = %self.peer, "no HTTP/2 preface in time; closing");
                        self.connections.metrics.connection_closed("preface_timeout");
                        return;
                    }
                    let evicted = streams.evict_stalled(now, settings.stall_timeout);
                    if evicted > 0 {
                        tracing::warn!(peer = %self.peer, replies = evicted, "dropped replies the client did not read");
                        self.connections.metrics.evicted("replies", "stall_timeout", evicted as u64);
                    }
                    let idle = streams.idle_for(now);
                    if closing.is_none() && !settings.idle_timeout.is_zero() && idle >= settings.idle_timeout {
                        tracing::debug!(peer = %self.peer, "connection idle; closing");
                        self.connections.metrics.connection_closed("idle");
                        connection.as_mut().graceful_shutdown();
                        closing = Some(now + CLOSE_GRACE);
                    }
                }
            }
        }
    }
}

/// A connection's entry in the table of live ones; leaves it when dropped.
struct Listed<'c> {
    connections: &'c Connections,
    slot: usize,
}

impl<'c> Listed<'c> {
    fn new(connections: &'c Connections, live: &Arc<Live>) -> Self {
        let slot = connections.live.lock().insert(Arc::downgrade(live));
        Listed { connections, slot }
    }
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.connections.live.lock().try_remove(self.slot);
    }
}

/// How often a connection checks its deadlines (preface, idle, unread replies): a fraction of
/// the shortest.
fn check_period(settings: &TransportSettings) -> Duration {
    let mut shortest = settings.preface_timeout.min(settings.stall_timeout);
    if !settings.idle_timeout.is_zero() {
        shortest = shortest.min(settings.idle_timeout);
    }
    (shortest / 4).clamp(Duration::from_millis(10), Duration::from_secs(5))
}

/// One connection's service: tonic's routes with the connection's info in each request (as
/// tonic's own server puts it there: `remote_addr`, peer certificates), its bodies counted.
struct ConnectionService<I> {
    served: Arc<Served>,
    info: I,
    requests: Arc<Share>,
    replies: Arc<Share>,
    streams: Arc<Streams>,
}

type Answer = http::Response<Reply<StreamGuard>>;

impl<I> hyper::service::Service<http::Request<Incoming>> for ConnectionService<I>
where
    I: Clone + Send + Sync + 'static,
{
    type Response = Answer;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, std::convert::Infallible>> + Send>>;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        let guard = self.streams.begin();
        let path = request.uri().path();
        let unary = !self.served.streaming.contains(path);
        let (requests, replies) = match path.starts_with(EXEMPT_PREFIX) {
            true => (self.served.exempt.clone(), self.served.exempt.clone()),
            false => (self.requests.clone(), self.replies.clone()),
        };
        let stall = self.served.stall_timeout;
        let mut request =
            request.map(|body| tonic::body::Body::new(Received::new(body, requests, stall)));
        request.extensions_mut().insert(self.info.clone());
        // The client's deadline bounds the call as tonic's own server bounds it: the call's
        // future is dropped when it passes (its batch cancelled by its drop guard).
        let deadline = request
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout);
        let routes = self.served.routes.clone();
        let streams = self.streams.clone();
        Box::pin(async move {
            let answering = tower::ServiceExt::oneshot(routes, request);
            let answered = match deadline {
                Some(deadline) => tokio::time::timeout(deadline, answering).await,
                None => Ok(answering.await),
            };
            let Ok(Ok(response)) = answered else {
                let reply =
                    Reply::new(tonic::body::Body::empty(), replies, guard, &streams.replies);
                return Ok(reply.refused(tonic::Status::cancelled("Timeout expired")));
            };
            let (parts, body) = response.into_parts();
            let mut reply = Reply::new(body, replies, guard, &streams.replies);
            // A unary reply is made (encoded, counted) now: left to the transport, one the
            // client never reads would stay unencoded and uncounted.
            if unary && let Err(status) = reply.prefetch().await {
                return Ok(reply.refused(status));
            }
            Ok(http::Response::from_parts(parts, reply))
        })
    }
}

/// A `grpc-timeout` value (`<digits><unit>`, units H M S m u n). tonic parses the header only
/// inside its own server, which this transport replaces; no crate exports it.
pub(super) fn parse_grpc_timeout(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    // The spec's TimeoutValue: one to eight ASCII digits (tonic refuses more, so do we).
    if !(1..=8).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = accept(&listener).await.unwrap();
        assert!(accepted.nodelay().unwrap());
    }

    fn settings(max: usize, per_address: usize) -> TransportSettings {
        TransportSettings {
            max_connections: max,
            max_connections_per_address: per_address,
            preface_timeout: Duration::from_secs(5),
            idle_timeout: Duration::ZERO,
            max_streams: 100,
            keepalive: None,
            keepalive_timeout: Duration::from_secs(20),
            stall_timeout: Duration::from_secs(30),
            max_message_bytes: 1024,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_handshake_is_dropped_only_while_another_waits_for_a_slot() {
        let connections = Connections::new(settings(3, 2), Arc::default());
        // Alone, a handshake far slower than `PRESSURED_HANDSHAKE` keeps its slot.
        let alone = connections.under_pressure(std::future::pending::<()>());
        assert!(
            tokio::time::timeout(Duration::from_secs(5), alone)
                .await
                .is_err()
        );
        // Once another waits, it is dropped after `PRESSURED_HANDSHAKE`, not before.
        let started = Instant::now();
        let waiting = connections.waiting_for_handshake();
        let pressed = connections.under_pressure(std::future::pending::<()>());
        assert_eq!(pressed.await, None);
        let held = started.elapsed();
        assert!(held >= PRESSURED_HANDSHAKE && held <= PRESSURED_HANDSHAKE + PRESSURE_CHECK);
        drop(waiting);
        assert_eq!(connections.waiting.load(Ordering::Relaxed), 0);
        // One that finishes is never dropped.
        let _waiting = connections.waiting_for_handshake();
        assert_eq!(connections.under_pressure(async { 7 }).await, Some(7));
    }

    #[test]
    fn connections_are_capped_in_all_and_per_address() {
        let connections = Connections::new(settings(3, 2), Arc::default());
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let first = connections.admit(a).unwrap();
        let _second = connections.admit(a).unwrap();
        assert_eq!(
            connections.admit(a).err(),
            Some(ConnectionRefusal::ConnectionsPerAddress)
        );
        let _third = connections.admit(b).unwrap();
        assert_eq!(
            connections.admit(b).err(),
            Some(ConnectionRefusal::Connections)
        );
        assert_eq!(connections.open(), 3);
        drop(first);
        assert_eq!(connections.open(), 2);
        let _again = connections.admit(a).unwrap();
        assert_eq!(connections.by_address.addresses(), 2);
    }

    #[test]
    fn one_address_takes_a_few_handshake_turns() {
        let connections = Connections::new(settings(1000, 0), Arc::default());
        let ip = IpAddr::from([10, 0, 0, 1]);
        let turn = || connections.handshaking.take(ip, HANDSHAKES_PER_ADDRESS);
        let turns: Vec<_> = (0..HANDSHAKES_PER_ADDRESS)
            .map(|_| turn().unwrap())
            .collect();
        assert!(turn().is_none());
        let other = IpAddr::from([10, 0, 0, 2]);
        assert!(
            connections
                .handshaking
                .take(other, HANDSHAKES_PER_ADDRESS)
                .is_some()
        );
        drop(turns);
        assert!(turn().is_some());
        assert_eq!(connections.handshaking.addresses(), 0);
    }
}
