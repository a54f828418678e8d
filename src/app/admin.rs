//! The admin HTTP listener, for operators and their tools rather than agents: `GET /metrics`
//! (Prometheus text), `/livez` and `/readyz` (plain-HTTP probes); and the gauges read from the
//! running server at each collection.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use opentelemetry::KeyValue;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::front::http1::{self, Limits};
use crate::front::tls::Tls;
use crate::grpc::ServiceState;
use crate::telemetry::metrics::MetricsPipeline;
use toolgate_remotes::Remotes;

/// What the admin endpoints read.
#[derive(Clone)]
struct Admin {
    metrics: Arc<MetricsPipeline>,
    state: Arc<ServiceState>,
}

/// Connections the admin listener serves at once; more are closed as they arrive.
const MAX_CONNECTIONS: usize = 64;
/// Connections it serves at once from one address, so one client cannot take them all (and
/// with them the probes).
const MAX_PER_ADDRESS: usize = 8;
/// How long a client has to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves the admin endpoints on `listener` until `stop` fires. One request per connection,
/// whose headers must arrive within `HEADER_TIMEOUT`, at most `MAX_CONNECTIONS` at once: the
/// listener is unauthenticated, so a client holding sockets open must not starve the probes
/// and the scraper (1 500 partial requests were held open by axum's server, which has no
/// header timeout): at most `MAX_PER_ADDRESS` from one address.
///
/// With `console`, the web console is served beside them (`/console/`); with `tls`, all of it
/// over TLS. On a loopback address, a request must name a loopback host or one of
/// `console_hosts` (DNS rebinding). Each request carries its connection (`Accepted`), for the
/// console's callers.
pub(super) async fn serve(
    listener: TcpListener,
    metrics: Arc<MetricsPipeline>,
    state: Arc<ServiceState>,
    console: Option<Router>,
    console_hosts: Vec<String>,
    tls: Option<Tls>,
    stop: CancellationToken,
) {
    let mut router = Router::new()
        .route("/metrics", get(prometheus))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(Admin { metrics, state });
    // On loopback, only this machine's names (and the console's) are answered: a page of
    // another site whose name was made to point here (DNS rebinding) reads no metrics. Off
    // loopback, probes and scrapers name the address they reach.
    let local = listener.local_addr().ok().filter(|a| a.ip().is_loopback());
    if let Some(local) = local {
        let mut names = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
            local.ip().to_string(),
        ];
        names.extend(console_hosts);
        if let Some(hosts) = crate::front::hosts::allowed(&names) {
            router = router.layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let allowed = crate::front::hosts::check(request.headers(), Some(&hosts));
                    async move {
                        match allowed {
                            // An HTTP/1.0 probe names no host; a browser always does.
                            Ok(()) | Err(crate::front::hosts::HostRefused::Missing) => {
                                next.run(request).await
                            }
                            Err(_) => (
                                StatusCode::FORBIDDEN,
                                "the Host header names a host this listener does not go by\n",
                            )
                                .into_response(),
                        }
                    }
                },
            ));
        }
    }
    if let Some(console) = console {
        router = router.merge(console);
    }
    let limits = Limits {
        name: "admin",
        max_connections: MAX_CONNECTIONS,
        max_per_address: MAX_PER_ADDRESS,
        header_timeout: HEADER_TIMEOUT,
        keep_alive: false,
        close_grace: HEADER_TIMEOUT,
    };
    http1::serve(listener, tls, limits, stop, move |accepted| {
        router.clone().layer(axum::Extension(accepted))
    })
    .await;
}

async fn prometheus(State(admin): State<Admin>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        admin.metrics.prometheus_text(),
    )
}

/// Ready while the server accepts batches: not draining, and not at capacity. An unreachable
/// session store is said but does not fail readiness: every replica shares the store, so
/// failing would take the whole fleet out of its Service at once (batches without a session
/// too) for what each batch naming a session is already told, `UNAVAILABLE`, and retries.
async fn ready(State(admin): State<Admin>) -> (StatusCode, &'static str) {
    if admin.state.entry.tracker.is_closed() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else if *admin.state.entry.admission.overloaded().borrow() {
        (StatusCode::SERVICE_UNAVAILABLE, "overloaded\n")
    } else if admin.state.dispatcher.store_reachable() == Some(false) {
        (
            StatusCode::OK,
            "ready; the session store is unreachable, so batches naming a session are refused\n",
        )
    } else {
        (StatusCode::OK, "ready\n")
    }
}

/// Registers the gauges observed at collection time: capacity in use, overload, live
/// sessions, each tool's breaker state and each remote's connection; and the process's own
/// resident memory, open file descriptors and live runtime tasks (what a soak watches for leaks).
pub(super) fn register_gauges(
    pipeline: &MetricsPipeline,
    state: &Arc<ServiceState>,
    remotes: &Arc<Remotes>,
) {
    let meter = pipeline.meter();
    let s = state.clone();
    meter
        .u64_observable_gauge("toolgate.batches.in_flight")
        .with_description("Batches running now")
        .with_callback(move |o| o.observe(count(s.entry.admission.in_use().0), &[]))
        .build();
    let s = state.clone();
    meter
        .u64_observable_gauge("toolgate.calls.in_flight")
        .with_description("Call slots held by running batches")
        .with_callback(move |o| o.observe(count(s.entry.admission.in_use().1), &[]))
        .build();
    let s = state.clone();
    meter
        .u64_observable_gauge("toolgate.overloaded")
        .with_description("1 while batch or call capacity is exhausted")
        .with_callback(move |o| o.observe(u64::from(*s.entry.admission.overloaded().borrow()), &[]))
        .build();
    let s = state.clone();
    meter
        .u64_observable_gauge("toolgate.sessions.live")
        .with_description("Live named sessions")
        .with_callback(move |o| o.observe(count(s.dispatcher.sessions().len()), &[]))
        .build();
    let s = state.clone();
    meter
        .u64_observable_gauge("toolgate.session.memory.bytes")
        .with_description("Bytes of memory entries all sessions hold (bounded by memory.max_bytes)")
        .with_callback(move |o| o.observe(count(s.dispatcher.sessions().memory_bytes()), &[]))
        .build();
    let s = state.clone();
    meter
        .u64_observable_gauge("toolgate.session_store.up")
        .with_description("1 while the shared session store answers, 0 after an operation failed (absent with sessions.store = \"memory\")")
        .with_callback(move |o| {
            if let Some(up) = s.dispatcher.store_reachable() {
                o.observe(u64::from(up), &[]);
            }
        })
        .build();
    let s = state.clone();
    meter
        .u64_observable_gauge("toolgate.connections.open")
        .with_description("Client connections open now (bounded by server.max_connections)")
        .with_callback(move |o| o.observe(count(s.connections.open()), &[]))
        .build();
    let s = state.clone();
    meter
        .u64_observable_gauge("toolgate.breaker.state")
        .with_description("Circuit breaker state per tool: 0 closed, 1 half-open, 2 open")
        .with_callback(move |o| {
            for report in s.dispatcher.health().report(tokio::time::Instant::now()) {
                use toolgate_core::safety::breaker::BreakerState;
                let value = match report.breaker {
                    BreakerState::Closed => 0,
                    BreakerState::HalfOpen => 1,
                    BreakerState::Open => 2,
                };
                o.observe(value, &[KeyValue::new("gen_ai.tool.name", report.tool)]);
            }
        })
        .build();
    register_process_gauges(&meter);
    let r = remotes.clone();
    meter
        .u64_observable_gauge("toolgate.remote.connected")
        .with_description("1 while a remote is connected, 0 while it is being reconnected")
        .with_callback(move |o| {
            for (name, connected) in r.connection_states() {
                o.observe(
                    u64::from(connected),
                    &[KeyValue::new("toolgate.remote", name)],
                );
            }
        })
        .build();
}

/// The process gauges, under the names Prometheus clients use for them
/// (`process_resident_memory_bytes`, `process_open_fds`). Linux `/proc`; elsewhere they report
/// nothing.
fn register_process_gauges(meter: &opentelemetry::metrics::Meter) {
    meter
        .u64_observable_gauge("process.resident_memory.bytes")
        .with_description("Resident memory of the process")
        .with_callback(|o| {
            if let Some(bytes) = resident_bytes() {
                o.observe(bytes, &[]);
            }
        })
        .build();
    meter
        .u64_observable_gauge("process.open_fds")
        .with_description("File descriptors the process has open")
        .with_callback(|o| {
            if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
                o.observe(count(entries.count()), &[]);
            }
        })
        .build();
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        meter
            .u64_observable_gauge("toolgate.runtime.tasks")
            .with_description("Tasks alive on the server's runtime")
            .with_callback(move |o| o.observe(count(runtime.metrics().num_alive_tasks()), &[]))
            .build();
    }
}

/// Resident set size, from `VmRSS` in `/proc/self/status` (kB).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}
