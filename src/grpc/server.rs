//! The gRPC server: ToolGate plus health and reflection (v1 and v1alpha), served until a
//! shutdown trigger, then drained: health NOT_SERVING, new batches refused, in-flight batches
//! given a grace period, then cancelled.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use super::coalesce::Coalesced;
use super::service::{ServiceState, ToolGateService};
use super::tls::Tls;
use crate::pb;
use crate::pb::tool_gate_server::ToolGateServer;
use crate::tools::BoxFuture;

/// How long open connections (for example health watches) may linger once draining is done.
const CONNECTION_LINGER: Duration = Duration::from_secs(5);
/// How long cancelled batches get to write their final result.
const CANCEL_SETTLE: Duration = Duration::from_secs(5);

/// Transport-level settings of the server.
#[derive(Debug, Clone, Copy)]
pub struct ServeSettings {
    pub max_message_bytes: usize,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`.
    pub max_streams_per_connection: u32,
    /// HTTP/2 PING interval for finding dead connections; `None` sends none.
    pub keepalive_interval: Option<Duration>,
    pub shutdown_grace: Duration,
}

/// The server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("reflection service could not be built: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("transport failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The task serving the server panicked or was aborted, so it never finished its shutdown.
    #[error("the server task failed: {0}")]
    TaskFailed(tokio::task::JoinError),
}

/// Reflection over toolgate's protos, listing only what this server serves: the descriptor set
/// also holds `ToolHooks` and `ToolWorker`, protocols toolgate calls but does not answer.
fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name("toolgate.v1.ToolGate")
        .with_service_name("grpc.health.v1.Health")
}

/// Serves on `listener` until `trigger` fires, then shuts down gracefully.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Tls>,
    state: Arc<ServiceState>,
    settings: ServeSettings,
    trigger: CancellationToken,
) -> Result<(), ServeError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<ToolGateServer<ToolGateService>>()
        .await;
    let reflection_v1 = reflection()
        .with_service_name("grpc.reflection.v1.ServerReflection")
        .build_v1()?;
    // grpcurl 1.8 and other older clients speak only v1alpha.
    let reflection_v1alpha = reflection()
        .with_service_name("grpc.reflection.v1alpha.ServerReflection")
        .build_v1alpha()?;
    let toolgate = ToolGateServer::new(ToolGateService::new(state.clone()))
        .max_decoding_message_size(settings.max_message_bytes);

    let watchdog = tokio::spawn(state.stalls.clone().run());
    let stop_transport = CancellationToken::new();
    let drainer = tokio::spawn(drain(
        state,
        health,
        settings.shutdown_grace,
        trigger,
        stop_transport.clone(),
    ));
    let router = Server::builder()
        .max_concurrent_streams(settings.max_streams_per_connection)
        .http2_keepalive_interval(settings.keepalive_interval)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(toolgate);
    let stopped = stop_transport.clone().cancelled_owned();
    let serving: BoxFuture<'static, Result<(), tonic::transport::Error>> = match tls {
        Some(tls) => {
            tokio::spawn(tls.clone().watch(stop_transport.clone()));
            // Coalesced like plain connections (`incoming`): h2 writes to the TLS stream.
            let connections = tls
                .incoming(listener, stop_transport.clone())
                .map(|accepted| accepted.map(Coalesced::new));
            Box::pin(router.serve_with_incoming_shutdown(connections, stopped))
        }
        None => Box::pin(router.serve_with_incoming_shutdown(incoming(listener), stopped)),
    };
    let lingering = async {
        stop_transport.cancelled().await;
        tokio::time::sleep(CONNECTION_LINGER).await;
    };
    let result = tokio::select! {
        result = serving => result.map_err(ServeError::from),
        () = lingering => {
            tracing::warn!("connections still open after shutdown; closing them");
            Ok(())
        }
    };
    drainer.abort();
    watchdog.abort();
    result
}

/// Accepted connections with `TCP_NODELAY` on, their writes coalesced (`Coalesced`, as `serve`
/// wraps TLS connections too). Without nodelay, the small frames that end a response (the last
/// DATA frame and the trailers) wait for the client's delayed ACK: about 40 ms per streamed batch
/// on Linux. A plain `TcpListenerStream` would skip tonic's own nodelay setting.
fn incoming(
    listener: TcpListener,
) -> impl Stream<Item = std::io::Result<Coalesced<TcpStream>>> + Send + 'static {
    TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .map(|accepted| accepted.map(Coalesced::new))
}

/// Until the trigger, reports overload in health (`toolgate.v1.ToolGate` NOT_SERVING while the
/// server's batch or call capacity is exhausted; the overall `""` status stays SERVING, so a
/// liveness probe does not restart a busy server); then drains in-flight batches and stops the
/// transport. One task does both, so an overload change never flips health back after draining
/// started.
async fn drain(
    state: Arc<ServiceState>,
    health: HealthReporter,
    grace: Duration,
    trigger: CancellationToken,
    stop_transport: CancellationToken,
) {
    let mut overloaded = state.admission.overloaded();
    loop {
        tokio::select! {
            () = trigger.cancelled() => break,
            changed = overloaded.changed() => {
                if changed.is_err() {
                    trigger.cancelled().await;
                    break;
                }
                let now = *overloaded.borrow_and_update();
                if now {
                    let (batches, calls) = state.admission.in_use();
                    tracing::warn!(batches, calls, "overloaded: capacity exhausted; health says NOT_SERVING");
                    health.set_not_serving::<ToolGateServer<ToolGateService>>().await;
                } else {
                    tracing::info!("load back under capacity; health says SERVING");
                    health.set_serving::<ToolGateServer<ToolGateService>>().await;
                }
            }
        }
    }
    tracing::info!(running = state.tracker.len(), "shutdown started");
    // From here on, new batches are refused with UNAVAILABLE; health flips after, so a client
    // that sees NOT_SERVING can rely on the refusal.
    state.tracker.close();
    health
        .set_not_serving::<ToolGateServer<ToolGateService>>()
        .await;
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
    if tokio::time::timeout(grace, state.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_ms = grace.as_millis(),
            running = state.tracker.len(),
            "grace period over; cancelling running batches"
        );
        state.shutdown.cancel("the server is shutting down");
        let _ = tokio::time::timeout(CANCEL_SETTLE, state.tracker.wait()).await;
    }
    stop_transport.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = std::pin::pin!(incoming(listener));
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let accepted = incoming.next().await.unwrap().unwrap();
        assert!(accepted.get_ref().nodelay().unwrap());
    }
}
