//! The `ToolGate` gRPC service: a thin adapter from the public API to the dispatcher.
//! It admits a request (shutdown, load, parsing), runs the batch, and converts the report.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::FutureExt as _;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::access;
use super::approvals;
use super::batch_stream::{BatchStream, Events};
use super::convert::{self, RequestRules};
use super::reply;
use super::rpc_span::RpcSpan;
use super::stall::{StallWatch, Watched};
use super::status::RequestError;
use crate::front::admission::{Holder, Ticket};
use crate::front::auth::Authenticator;
use crate::front::decoded::Decoded;
use crate::front::entry::Entry;
use toolgate_core::dispatch::{Batch, Cancel, Dispatcher, Event, Mode, NoObserver, Observer};
use toolgate_core::identity::Caller;
use toolgate_core::metrics::Metrics;
use toolgate_core::tools::BoxFuture;
use toolgate_core::trace::Tracer;
use toolgate_proto::pb;
use toolgate_proto::pb::tool_gate_server::ToolGate;
use toolgate_remotes::{Contributed, RegistrationPolicy, RemoteSpec, Remotes};

/// Events buffered per stream before the batch waits for the client to read.
const EVENT_BUFFER: usize = 64;
/// The longest a `DispatchBatch` response's headers wait for its first item (see
/// `dispatch_batch`).
const FIRST_ITEM_WAIT: Duration = Duration::from_millis(50);

/// State shared by every request of one server.
pub struct ServiceState {
    pub dispatcher: Dispatcher,
    pub rules: RequestRules,
    /// Draining, capacity and decoded bytes: the entry every front admits batches through.
    pub entry: Arc<Entry>,
    /// The watchdog over `DispatchBatch` streams whose clients stopped reading.
    pub stalls: Arc<StallWatch>,
    /// The open connections (the transport admits and counts them).
    pub connections: Arc<crate::grpc::transport::Connections>,
    /// Where refusals for capacity are counted.
    pub metrics: Arc<Metrics>,
    /// Where each RPC's server span is made (the batch's and the calls' are the dispatcher's).
    pub tracer: Tracer,
    /// Who the caller of each RPC is: the access layer in front of the services judges with it
    /// (`access.rs`); handlers read the caller it admitted (`access::caller`).
    pub auth: Arc<Authenticator>,
    pub remotes: Arc<Remotes>,
    /// Whether `RegisterRemote` / `UnregisterRemote` are allowed.
    pub allow_registration: bool,
    /// What a run-time registration may ask for.
    pub registration: Arc<RegistrationPolicy>,
}

/// The `toolgate.v1.ToolGate` implementation.
#[derive(Clone)]
pub(super) struct ToolGateService {
    state: Arc<ServiceState>,
}

impl ToolGateService {
    pub(super) fn new(state: Arc<ServiceState>) -> Self {
        ToolGateService { state }
    }

    /// The current definitions of the tools a remote contributed, as `caller` may see them.
    fn definitions_of(
        &self,
        contributed: &[Contributed],
        caller: &Caller,
    ) -> pb::RegisterRemoteResponse {
        let registry = self.state.dispatcher.registry();
        let tools = contributed
            .iter()
            .filter_map(|c| registry.get(&c.name))
            .filter_map(|registered| convert::tool_definition(registered, caller))
            .collect();
        pb::RegisterRemoteResponse { tools }
    }

    fn registration_allowed(&self) -> Result<(), RequestError> {
        if self.state.allow_registration {
            Ok(())
        } else {
            Err(RequestError::PermissionDenied(
                "registering remotes at run time is off: set [remote_registration] enabled = true"
                    .to_owned(),
            ))
        }
    }

    /// The server span of `method`, under the request's trace context.
    fn rpc<T>(&self, method: &'static str, request: &Request<T>) -> RpcSpan {
        RpcSpan::start(
            &self.state.tracer,
            method,
            request.metadata().as_ref(),
            request.remote_addr(),
        )
    }

    /// Refuses the request while draining, parses it, then admits it against the server's
    /// capacity (a PARALLEL batch may be narrowed to the call slots that are free).
    fn admit(
        &self,
        connection: Option<SocketAddr>,
        caller: Arc<toolgate_core::identity::Caller>,
        request: pb::DispatchBatchRequest,
    ) -> Result<(Batch, Ticket, Decoded), RequestError> {
        // A full server refuses before parsing: refusals under load stay cheap. Arguments sent
        // as JSON text are weighed as parsed.
        let holder = Holder::new(connection, &caller);
        let decoded = self
            .state
            .entry
            .open(&holder, convert::decoded_weight(&request))?;
        let mut batch = convert::batch_from_request(request, caller, &self.state.rules)?;
        self.state.dispatcher.check_bindings(&batch.bindings)?;
        let wanted = match batch.options.mode {
            Mode::Parallel { max_concurrency } if batch.calls.len() >= 2 => {
                max_concurrency.min(batch.calls.len())
            }
            _ => 1,
        };
        let ticket = self.state.entry.admit(holder, wanted)?;
        if let Mode::Parallel { max_concurrency } = &mut batch.options.mode {
            *max_concurrency = (*max_concurrency).min(ticket.calls());
        }
        Ok((batch, ticket, decoded))
    }
}

/// A batch admitted by `Dispatch` or `DispatchBatch`, ready to run.
struct Started {
    /// The RPC's server span, ended with the status the client gets.
    rpc: RpcSpan,
    batch: Batch,
    /// The batch's capacity, given back when dropped.
    ticket: Ticket,
    /// What its request holds once decoded, given back when dropped.
    decoded: Decoded,
    /// The client's `grpc-timeout`.
    deadline: Option<Duration>,
    /// The batch's cancel, a child of the server's shutdown.
    cancel: Cancel,
}

impl ToolGateService {
    /// What both dispatch RPCs do first: the span, the caller, admission, the deadline. A
    /// refusal ends the span with its status.
    fn start(
        &self,
        method: &'static str,
        request: Request<pb::DispatchBatchRequest>,
    ) -> Result<Started, Status> {
        let rpc = self.rpc(method, &request);
        let deadline = grpc_timeout(request.metadata());
        let connection = request.remote_addr();
        let admitted = access::caller(&request).and_then(|caller| {
            let (metadata, _, mut body) = request.into_parts();
            body.session_id = convert::session_named(body.session_id, &metadata)?;
            self.admit(connection, caller, body)
        });
        let (mut batch, ticket, decoded) = match admitted {
            Ok(admitted) => admitted,
            Err(error) => return rpc.finish_with(Err(error.into())),
        };
        batch.options.deadline = deadline.map(|d| tokio::time::Instant::now() + d);
        batch.trace = rpc.span().clone();
        Ok(Started {
            rpc,
            batch,
            ticket,
            decoded,
            deadline,
            cancel: self.state.entry.cancel(),
        })
    }
}

/// The session store failed: its cause is logged here, once; the client reads what to do.
fn store_down(error: toolgate_core::session::StoreError) -> RequestError {
    tracing::warn!(target: "toolgate::session", error = %error, "session store unavailable");
    RequestError::SessionStore(error)
}

/// Forwards batch events to the response stream (a full buffer makes the batch wait).
struct StreamObserver {
    events: Arc<Events>,
}

impl Observer for StreamObserver {
    fn on_event(&self, event: Event) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.events.push(Ok(convert::event(event))).await })
    }

    fn try_event(&self, event: Event) -> Option<Event> {
        self.events
            .try_push(event, |event| Ok(convert::event(event)))
            .err()
    }

    fn finishing(&self) {
        self.events.hold();
    }
}

#[tonic::async_trait]
impl ToolGate for ToolGateService {
    type DispatchBatchStream = BatchStream;

    async fn dispatch_batch(
        &self,
        request: Request<pb::DispatchBatchRequest>,
    ) -> Result<Response<Self::DispatchBatchStream>, Status> {
        let Started {
            rpc,
            batch,
            ticket,
            decoded,
            deadline,
            cancel,
        } = self.start("DispatchBatch", request)?;
        let events = Events::new(EVENT_BUFFER);
        let queue = events.clone();
        let dispatcher = self.state.dispatcher.clone();
        let max_reply = self.state.rules.limits.max_reply_bytes;
        let context = rpc.span().context().clone();
        let run = async move {
            let _held = (ticket, decoded);
            // The stream owns this future: a client that leaves drops it, and the guard then
            // fires the batch's cancel so tool tokens fire too (and the span ends CANCELLED).
            let _guard = cancel.token().clone().drop_guard();
            let observer = StreamObserver { events: queue };
            let report = tokio::select! {
                report = dispatcher.run(batch, &observer, &cancel) => report,
                never = expire(&cancel, deadline) => match never {},
            };
            let reply = report
                .map_err(store_down)
                .and_then(|report| reply::batch_result_within(&report, max_reply))
                .map_err(Status::from);
            let reply = rpc.finish_with(reply)?;
            Ok(pb::DispatchEvent {
                event: Some(pb::dispatch_event::Event::Result(reply)),
            })
        };
        let run = self
            .state
            .entry
            .tracker
            .track_future(run.with_context(context));
        let mut stream = BatchStream::new(Box::pin(run), events, &self.state.stalls);
        // The response's headers leave with its first item, not in a write of their own while
        // a named session loads; but a slow first item does not hold them long, and never to
        // the client's deadline, which stays the batch's to answer (`expire`), not the
        // transport's (it answers a handler still running at the deadline with a bare status).
        let wait = deadline.map_or(FIRST_ITEM_WAIT, |d| (d / 2).min(FIRST_ITEM_WAIT));
        let _ = tokio::time::timeout(wait, stream.first_item()).await;
        Ok(Response::new(stream))
    }

    async fn dispatch(
        &self,
        request: Request<pb::DispatchBatchRequest>,
    ) -> Result<Response<pb::BatchResult>, Status> {
        let Started {
            rpc,
            batch,
            ticket: _ticket,
            decoded: _decoded,
            cancel,
            ..
        } = self.start("Dispatch", request)?;
        // The transport drops this future when the client goes or its deadline passes
        // (`transport.rs`); the guard then fires the batch's cancel so tool tokens fire too
        // (and the span ends CANCELLED).
        let _guard = cancel.token().clone().drop_guard();
        let run = self.state.dispatcher.run(batch, &NoObserver, &cancel);
        let context = rpc.span().context().clone();
        let report = self
            .state
            .entry
            .tracker
            .track_future(run.with_context(context))
            .await;
        let max_reply = self.state.rules.limits.max_reply_bytes;
        let reply = report
            .map_err(store_down)
            .and_then(|report| reply::batch_result_within(&report, max_reply))
            .map_err(Status::from);
        rpc.finish_with(reply).map(Response::new)
    }

    async fn get_tool_health(
        &self,
        request: Request<pb::GetToolHealthRequest>,
    ) -> Result<Response<pb::GetToolHealthResponse>, Status> {
        let wanted = request.into_inner().tool;
        let tools = self
            .state
            .dispatcher
            .health()
            .report(tokio::time::Instant::now())
            .iter()
            .filter(|r| wanted.is_empty() || r.tool == wanted)
            .map(convert::tool_health)
            .collect();
        Ok(Response::new(pb::GetToolHealthResponse { tools }))
    }

    async fn get_session_memory(
        &self,
        request: Request<pb::GetSessionMemoryRequest>,
    ) -> Result<Response<pb::GetSessionMemoryResponse>, Status> {
        let caller = access::caller(&request)?;
        let (metadata, _, body) = request.into_parts();
        let id = checked_session_id(convert::session_named(body.session_id, &metadata)?)?;
        // Only the caller's tenant's sessions exist for it.
        let memory = self.state.dispatcher.session_memory(&caller.tenant, &id);
        let Some(entries) = memory.await.map_err(store_down)? else {
            return Err(RequestError::UnknownSession(id).into());
        };
        Ok(Response::new(pb::GetSessionMemoryResponse { entries }))
    }

    async fn end_session(
        &self,
        request: Request<pb::EndSessionRequest>,
    ) -> Result<Response<pb::EndSessionResponse>, Status> {
        let caller = access::caller(&request)?;
        let (metadata, _, body) = request.into_parts();
        let id = checked_session_id(convert::session_named(body.session_id, &metadata)?)?;
        let ended = self.state.dispatcher.end_session(&caller.tenant, &id);
        let ended = ended.await.map_err(store_down)?;
        Ok(Response::new(pb::EndSessionResponse { ended }))
    }

    async fn resolve_approval(
        &self,
        request: Request<pb::ResolveApprovalRequest>,
    ) -> Result<Response<pb::ResolveApprovalResponse>, Status> {
        let caller = access::caller(&request)?;
        let depth = self.state.rules.limits.max_json_depth;
        let approvals = self.state.dispatcher.approvals();
        let resolved = approvals::resolve(approvals, &caller, request.into_inner(), depth).await?;
        Ok(Response::new(resolved))
    }

    async fn list_approvals(
        &self,
        request: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        let caller = access::caller(&request)?;
        let approvals = self.state.dispatcher.approvals();
        // Half a reply of whole arguments: the listing's other fields and previews fit beside.
        let whole_bytes = self.state.rules.limits.max_reply_bytes / 2;
        let request = request.into_inner();
        let listed = approvals::list(approvals, &caller, request, whole_bytes).await?;
        Ok(Response::new(listed))
    }

    type WatchApprovalsStream = approvals::WatchStream;

    async fn watch_approvals(
        &self,
        request: Request<pb::WatchApprovalsRequest>,
    ) -> Result<Response<Self::WatchApprovalsStream>, Status> {
        let caller = access::caller(&request)?;
        let approvals = self.state.dispatcher.approvals();
        let shutdown = self.state.entry.shutdown.clone();
        let stream = approvals::watch(approvals, caller, request.into_inner(), shutdown).await?;
        // A watcher that stops reading is ended as a batch stream is: it would hold its place
        // and keep every update it has not read in the shared buffer.
        let stream = Watched::new(stream, &self.state.stalls, "watches");
        Ok(Response::new(Box::pin(stream)))
    }

    async fn register_remote(
        &self,
        request: Request<pb::RegisterRemoteRequest>,
    ) -> Result<Response<pb::RegisterRemoteResponse>, Status> {
        self.registration_allowed()?;
        let caller = access::caller(&request)?;
        let definition = request.into_inner().definition.unwrap_or_default();
        let definition = definition
            .into_json_checked(&"definition")
            .map(serde_json::Value::Object)
            .map_err(RequestError::from)?;
        let mut spec: RemoteSpec = serde_json::from_value(definition)
            .map_err(|e| RequestError::Invalid(format!("definition: {e}")))?;
        // A malformed definition is the caller's mistake (INVALID_ARGUMENT) before anything is
        // judged; then a registration may start a program or reach an address only as the
        // policy allows.
        spec.check().map_err(RequestError::Definition)?;
        spec.resolved = self
            .state
            .registration
            .check(&spec)
            .await
            .map_err(RequestError::Refused)?;
        let contributed = self
            .state
            .remotes
            .register(spec)
            .await
            .map_err(RequestError::from)?;
        Ok(Response::new(self.definitions_of(&contributed, &caller)))
    }

    async fn unregister_remote(
        &self,
        request: Request<pb::UnregisterRemoteRequest>,
    ) -> Result<Response<pb::UnregisterRemoteResponse>, Status> {
        self.registration_allowed()?;
        let name = request.into_inner().name;
        let tools = self
            .state
            .remotes
            .unregister(&name)
            .map_err(RequestError::from)?;
        Ok(Response::new(pb::UnregisterRemoteResponse { tools }))
    }

    async fn refresh_remote(
        &self,
        request: Request<pb::RefreshRemoteRequest>,
    ) -> Result<Response<pb::RegisterRemoteResponse>, Status> {
        self.registration_allowed()?;
        let caller = access::caller(&request)?;
        let name = request.into_inner().name;
        let contributed = self
            .state
            .remotes
            .refresh(&name)
            .await
            .map_err(RequestError::from)?;
        Ok(Response::new(self.definitions_of(&contributed, &caller)))
    }

    async fn accept_tool_change(
        &self,
        request: Request<pb::AcceptToolChangeRequest>,
    ) -> Result<Response<pb::ToolDefinition>, Status> {
        self.registration_allowed()?;
        let caller = access::caller(&request)?;
        let pb::AcceptToolChangeRequest { tool, digest } = request.into_inner();
        let reviewed = Some(digest.as_str()).filter(|d| !d.is_empty());
        self.state
            .remotes
            .accept(&tool, reviewed)
            .map_err(RequestError::from)?;
        let registry = self.state.dispatcher.registry();
        let shown = registry
            .get(&tool)
            .and_then(|registered| convert::tool_definition(registered, &caller))
            .ok_or_else(|| RequestError::Invalid(format!("no tool '{tool}'")))?;
        Ok(Response::new(shown))
    }

    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let caller = access::caller(&request)?;
        let tools = self
            .state
            .dispatcher
            .registry()
            .iter()
            .filter_map(|registered| convert::tool_definition(registered, &caller))
            .collect();
        Ok(Response::new(pb::ListToolsResponse { tools }))
    }
}

/// A session id an RPC names: required and well-formed.
fn checked_session_id(id: String) -> Result<String, RequestError> {
    if id.is_empty() {
        return Err(RequestError::Invalid("session_id is required".to_owned()));
    }
    toolgate_core::session::validate_session_id(&id)?;
    Ok(id)
}

/// Cancels the batch when the request's deadline passes (the batch then answers CANCELLED);
/// never returns.
async fn expire(cancel: &Cancel, deadline: Option<Duration>) -> Infallible {
    if let Some(after) = deadline {
        tokio::time::sleep(after).await;
        cancel.cancel("the request deadline passed");
    }
    std::future::pending().await
}

/// The client's `grpc-timeout` header, if any.
fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    super::transport::parse_grpc_timeout(metadata.get("grpc-timeout")?.to_str().ok()?)
}

#[cfg(test)]
mod tests;
