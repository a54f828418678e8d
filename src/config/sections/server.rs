//! `[server]`, `[limits]` and `[dispatch]`: the gRPC listener, its capacity, the bounds on one
//! request and call deadlines.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;

use super::parse;
use toolgate_core::duration;

/// `[server]`: the gRPC listener, its capacity and its connections.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The gRPC listener's address (`--listen` and `TOOLGATE_LISTEN` override it).
    #[serde(deserialize_with = "parse::server_listen")]
    pub listen: SocketAddr,
    /// Largest request message decoded, in bytes.
    pub max_message_bytes: usize,
    /// Batches running at once across all clients.
    pub max_concurrent_batches: usize,
    /// Calls running at once across all batches (a PARALLEL batch takes its concurrency).
    pub max_concurrent_calls: usize,
    /// The share of one connection: batches it may run at once.
    pub max_batches_per_connection: usize,
    /// The share of one connection: calls it may run at once.
    pub max_calls_per_connection: usize,
    /// The share of one tenant: batches and calls its callers may run at once.
    pub max_batches_per_tenant: usize,
    pub max_calls_per_tenant: usize,
    /// The share of one identity (a token, a JWT subject, a certificate, anonymous callers):
    /// batches and calls it may run at once, over all its connections.
    pub max_batches_per_identity: usize,
    pub max_calls_per_identity: usize,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS` advertised to every client.
    pub max_streams_per_connection: u32,
    /// Connections open at once; more are closed as they arrive.
    pub max_connections: usize,
    /// Connections open at once from one address; 0: no bound.
    pub max_connections_per_address: usize,
    /// A connection that has not sent the HTTP/2 preface this long after it opened (after its
    /// TLS handshake, with TLS) is closed.
    #[serde(with = "duration")]
    pub preface_timeout: Duration,
    /// A connection with no open stream for this long is asked to close (GOAWAY); zero: never.
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// A `DispatchBatch` whose client has not read its stream for this long is cancelled and its
    /// capacity freed.
    #[serde(with = "duration")]
    pub stall_timeout: Duration,
    /// HTTP/2 PING interval that finds dead connections; zero turns it off.
    #[serde(with = "duration")]
    pub keepalive_interval: Duration,
    /// How long a PING may go unanswered before its connection is closed as dead.
    #[serde(with = "duration")]
    pub keepalive_timeout: Duration,
    /// How long in-flight batches may take to finish on SIGINT/SIGTERM before they are cancelled.
    #[serde(with = "duration")]
    pub shutdown_grace: Duration,
    /// Listening on a non-loopback address without TLS needs this set: plaintext and
    /// unauthenticated are fine only where nothing else can connect.
    pub insecure: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 50051)),
            max_message_bytes: 4 * 1024 * 1024,
            max_concurrent_batches: 256,
            max_concurrent_calls: 1024,
            max_batches_per_connection: 64,
            max_calls_per_connection: 256,
            max_batches_per_tenant: 128,
            max_calls_per_tenant: 512,
            max_batches_per_identity: 64,
            max_calls_per_identity: 256,
            max_streams_per_connection: 100,
            max_connections: 1024,
            max_connections_per_address: 64,
            preface_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5 * 60),
            stall_timeout: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(20),
            shutdown_grace: Duration::from_secs(10),
            insecure: false,
        }
    }
}

/// `[limits]`: bounds on one request and on what the server holds at once.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Calls one request may carry unless its options ask for more (up to the ceiling).
    pub max_calls: u32,
    /// The most calls any request may carry.
    pub max_calls_ceiling: u32,
    /// Deepest nesting of a call's JSON arguments.
    pub max_json_depth: usize,
    /// The highest options.max_concurrency a PARALLEL batch may ask for.
    pub max_concurrency: u32,
    /// Largest reply message; a bigger reply has its largest results shrunk (and marked
    /// truncated) until it fits.
    pub max_reply_bytes: usize,
    /// Hook programs running at once across the server; more wait (within their timeout).
    pub max_hook_processes: usize,
    /// Request bytes received and not yet decoded, across all connections.
    pub max_buffered_request_bytes: usize,
    /// The same, on one connection.
    pub max_buffered_request_bytes_per_connection: usize,
    /// Reply bytes made and not yet taken by the transport (replies clients have not read),
    /// across all connections.
    pub max_unread_reply_bytes: usize,
    /// The same, on one connection.
    pub max_unread_reply_bytes_per_connection: usize,
    /// What running batches' requests hold once decoded, server-wide (0: no bound).
    pub max_decoded_bytes: usize,
    /// The same, per tenant, per identity and per connection (0: no bound).
    pub max_decoded_bytes_per_tenant: usize,
    pub max_decoded_bytes_per_identity: usize,
    pub max_decoded_bytes_per_connection: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_calls: 64,
            max_calls_ceiling: 1024,
            max_json_depth: 32,
            max_concurrency: 64,
            max_reply_bytes: 4 * 1024 * 1024,
            max_hook_processes: 32,
            max_buffered_request_bytes: 64 * 1024 * 1024,
            max_buffered_request_bytes_per_connection: 16 * 1024 * 1024,
            max_unread_reply_bytes: 64 * 1024 * 1024,
            max_unread_reply_bytes_per_connection: 16 * 1024 * 1024,
            max_decoded_bytes: 128 * 1024 * 1024,
            max_decoded_bytes_per_tenant: 96 * 1024 * 1024,
            max_decoded_bytes_per_identity: 64 * 1024 * 1024,
            max_decoded_bytes_per_connection: 48 * 1024 * 1024,
        }
    }
}

/// `[dispatch]`: call deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DispatchConfig {
    /// A call's deadline unless the request or `per_tool` sets one.
    #[serde(with = "duration")]
    pub call_timeout: Duration,
    /// The longest deadline a request may ask for.
    #[serde(with = "duration")]
    pub max_call_timeout: Duration,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            call_timeout: toolgate_core::middleware::DEFAULTS.call_timeout,
            max_call_timeout: Duration::from_secs(3600),
        }
    }
}
