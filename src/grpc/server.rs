//! The gRPC server: ToolGate plus health and reflection (v1 and v1alpha), served until a
//! shutdown trigger, then drained: health NOT_SERVING, new batches refused, in-flight batches
//! given a grace period, then cancelled.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use super::access::Authorized;
use super::bodies::streaming_methods;
use super::service::{ServiceState, ToolGateService};
use super::transport::{self, Budgets, TransportSettings};
use crate::front::tls::Tls;
use toolgate_proto::pb;
use toolgate_proto::pb::tool_gate_server::ToolGateServer;

/// How long open connections (for example health watches) may linger once draining is done.
const CONNECTION_LINGER: Duration = Duration::from_secs(5);
/// How long cancelled batches get to write their final result.
const CANCEL_SETTLE: Duration = Duration::from_secs(5);

/// Transport-level settings of the server.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub transport: TransportSettings,
    /// What connections hold for their clients, counted.
    pub budgets: Budgets,
    pub shutdown_grace: Duration,
}

/// The server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("reflection service could not be built: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The task serving the server panicked or was aborted, so it never finished its shutdown.
    #[error("the server task failed: {0}")]
    TaskFailed(tokio::task::JoinError),
}

/// The services this server answers (reflection lists them; `access.rs` has a rule for each of
/// their methods, which its tests check against this list). The descriptor sets also hold
/// `ToolHooks` and `ToolWorker`, protocols toolgate calls but does not answer.
#[cfg(test)]
pub(crate) const SERVED: &[&str] = &[TOOLGATE, HEALTH, REFLECTION_V1, REFLECTION_V1ALPHA];

const TOOLGATE: &str = "toolgate.v1.ToolGate";
const HEALTH: &str = "grpc.health.v1.Health";
const REFLECTION_V1: &str = "grpc.reflection.v1.ServerReflection";
const REFLECTION_V1ALPHA: &str = "grpc.reflection.v1alpha.ServerReflection";

/// The descriptors of every protocol the server knows.
pub(crate) const DESCRIPTOR_SETS: &[&[u8]] = &[
    pb::FILE_DESCRIPTOR_SET,
    tonic_health::pb::FILE_DESCRIPTOR_SET,
    tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
    tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
];

/// Reflection over what this server serves (`SERVED`): ToolGate, health, and the reflection
/// service `own` (each reflection version lists itself only, as clients of either expect).
fn reflection(own: &'static str) -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name(TOOLGATE)
        .with_service_name(HEALTH)
        .with_service_name(own)
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
    let reflection_v1 = reflection(REFLECTION_V1).build_v1()?;
    // grpcurl 1.8 and other older clients speak only v1alpha.
    let reflection_v1alpha = reflection(REFLECTION_V1ALPHA).build_v1alpha()?;
    let toolgate = ToolGateServer::new(ToolGateService::new(state.clone()))
        .max_decoding_message_size(settings.transport.max_message_bytes);
    // Which replies are streams, from the descriptors of what is served: every other reply is
    // made (and counted) as soon as its call returns.
    let streaming = Arc::new(streaming_methods(DESCRIPTOR_SETS));
    let connections = state.connections.clone();
    let auth = state.auth.clone();
    let tracer = state.tracer.clone();

    let watchdog = tokio::spawn(state.stalls.clone().run());
    let stop_transport = CancellationToken::new();
    let drainer = tokio::spawn(drain(
        state,
        health,
        settings.shutdown_grace,
        trigger,
        stop_transport.clone(),
    ));
    let routes = Routes::new(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(toolgate)
        .prepare();
    let routes = Authorized::new(routes, auth, tracer);
    if let Some(tls) = &tls {
        tokio::spawn(tls.clone().watch(stop_transport.clone()));
    }
    let serving = transport::serve(
        listener,
        tls,
        routes,
        connections,
        settings.budgets,
        streaming,
        stop_transport.clone(),
    );
    let lingering = async {
        stop_transport.cancelled().await;
        tokio::time::sleep(CONNECTION_LINGER).await;
    };
    tokio::select! {
        () = serving => {}
        () = lingering => {
            tracing::warn!("connections still open after shutdown; closing them");
        }
    }
    drainer.abort();
    watchdog.abort();
    Ok(())
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
    let mut overloaded = state.entry.admission.overloaded();
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
                    let (batches, calls) = state.entry.admission.in_use();
                    tracing::warn!(batches, calls, "overloaded: capacity exhausted; health says NOT_SERVING");
                    health.set_not_serving::<ToolGateServer<ToolGateService>>().await;
                } else {
                    tracing::info!("load back under capacity; health says SERVING");
                    health.set_serving::<ToolGateServer<ToolGateService>>().await;
                }
            }
        }
    }
    tracing::info!(running = state.entry.tracker.len(), "shutdown started");
    // From here on, new batches are refused with UNAVAILABLE; health flips after, so a client
    // that sees NOT_SERVING can rely on the refusal.
    state.entry.tracker.close();
    health
        .set_not_serving::<ToolGateServer<ToolGateService>>()
        .await;
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
    if tokio::time::timeout(grace, state.entry.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_ms = grace.as_millis(),
            running = state.entry.tracker.len(),
            "grace period over; cancelling running batches"
        );
        state.entry.shutdown.cancel("the server is shutting down");
        let _ = tokio::time::timeout(CANCEL_SETTLE, state.entry.tracker.wait()).await;
    }
    // Batches that were dropped (their clients left, or cancelled above) save their shared
    // sessions' changes in the background: give them a moment too.
    state.dispatcher.finish_saves(CANCEL_SETTLE).await;
    stop_transport.cancel();
}
