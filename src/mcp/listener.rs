//! The MCP listener: the shared HTTP/1.1 listener (`front::http1`: plain or TLS, bounded by
//! `server.max_connections` and `server.max_connections_per_address`, 10 s for a request's
//! headers), each connection served through a gate of its own. Streamable HTTP is plain HTTP/1.1
//! to every MCP client in use.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::gate::{Gate, Gates};
use super::handler::Connection;
use crate::front::http1::{self, Accepted, Limits};
use crate::front::tls::Tls;

/// The listener's connection bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub max_connections: usize,
    pub max_connections_per_address: usize,
}

/// Serves MCP on `listener` until `stop` fires, then gives open connections 5 s.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<Tls>,
    gates: Arc<Gates>,
    bounds: Bounds,
    stop: CancellationToken,
) {
    let limits = Limits {
        name: "mcp",
        max_connections: bounds.max_connections,
        max_per_address: bounds.max_connections_per_address,
        header_timeout: Duration::from_secs(10),
        keep_alive: true,
        close_grace: Duration::from_secs(5),
    };
    http1::serve(listener, tls, limits, stop, move |accepted: Accepted| {
        Gate {
            shared: gates.clone(),
            connection: Connection {
                peer: accepted.peer,
                local: accepted.local,
            },
            certificates: accepted.certificates,
            tls: accepted.tls,
            share: gates.requests.share(),
        }
    })
    .await;
}
