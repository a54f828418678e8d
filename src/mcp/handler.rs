//! The MCP server: `tools/list` shows the tools the caller may call as `ListTools` names them,
//! and `tools/call` runs one call through exactly the pipeline `DispatchBatch` runs, as a batch
//! of one admitted through the server's one entry (`front::entry`), in a toolgate session.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, ElicitRequest, ErrorData, Implementation,
    InitializeRequestParams, InitializeResult, InputRequest, InputRequests, InputRequiredResult,
    InputResponses, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::model::{ClientResult, ElicitResult, RequestId, ServerRequest};
use rmcp::service::{
    NotificationContext, PeerRequestOptions, RequestContext, ServiceError, SubscriptionContext,
};
use rmcp::{Peer, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use super::{approvals, shape};
use crate::front::admission::Holder;
use crate::front::entry::{Entry, Turned};
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use tokio::sync::mpsc;
use toolgate_core::approvals::{Approval, ResolveError};
use toolgate_core::calls::{self, IntakeLimits};
use toolgate_core::dispatch::{Batch, BatchOptions, CallResult, Dispatcher, Event, Mode, Observer};
use toolgate_core::identity::Caller;
use toolgate_core::session::FRONT_PREFIX;
use toolgate_core::tools::BoxFuture;
use toolgate_core::trace::{Span, attr};

/// The header naming the toolgate session of a call, as on gRPC.
pub(super) const SESSION_HEADER: &str = "x-toolgate-session";
/// The `_meta` key naming it, for clients that cannot set headers.
pub(super) const SESSION_META: &str = "dev.toolgate/session";
/// How long an answer that reached another replica than the one that asked waits for the
/// asker's note, and how often it looks.
const NOTE_WAIT: Duration = Duration::from_secs(2);
const NOTE_POLL: Duration = Duration::from_millis(50);
/// How often a client waiting for an approver is told it still waits.
const WAITING_REMINDER: std::time::Duration = std::time::Duration::from_secs(10);
/// How often a session's change watcher checks that its session still lives.
const SESSION_CHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// What a request's connection told the front door: put in each request's extensions by the
/// listener.
#[derive(Debug, Clone, Copy)]
pub(super) struct Connection {
    pub peer: std::net::SocketAddr,
    pub local: std::net::SocketAddr,
}

/// What every MCP request is served with; one per server, shared by every session.
pub(super) struct Shared {
    pub dispatcher: Dispatcher,
    pub entry: Arc<Entry>,
    pub intake: IntakeLimits,
    pub page_size: usize,
    pub metrics: Arc<toolgate_core::metrics::Metrics>,
    pub tracer: toolgate_core::trace::Tracer,
    /// 2026-07-28 calls waiting for the answer to an approval the client was asked.
    pub parked: Arc<super::approvals::Parked>,
    /// 2025-11-25 elicitations out on this replica's sessions.
    pub asking: Arc<super::approvals::Asking>,
    /// With `sessions.store`: the other replicas' sessions and elicitations.
    pub store: Option<Arc<crate::store::mcp::McpSessions>>,
    /// Over stdio, the one caller: whoever started the process (`[auth]`'s anonymous tenant
    /// and roles). Over HTTP, `None`: the gate names each request's caller.
    pub stdio_caller: Option<Arc<Caller>>,
}

/// The rmcp server handler: a handle on the shared state (one is made per session).
#[derive(Clone)]
pub(super) struct Front(pub Arc<Shared>);

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        server_info()
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A 2025-11-25 session hears of every change of the tool list while it lives.
        let mut changes = self.0.dispatcher.catalog().changes();
        changes.mark_unchanged();
        let peer = context.peer;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = changes.changed() => {
                        if changed.is_err() || peer.notify_tool_list_changed().await.is_err() {
                            return;
                        }
                    }
                    () = tokio::time::sleep(SESSION_CHECK) => {}
                }
                if peer.is_transport_closed() {
                    return;
                }
            }
        });
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let _ = requested;
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.0.metrics.mcp_request("subscriptions/listen", "ok");
        // 2026-07-28: `subscriptions/listen` carries the changes while the client listens.
        let mut changes = self.0.dispatcher.catalog().changes();
        changes.mark_unchanged();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = changes.changed() => {
                    if changed.is_err() || context.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let span = self.request_span(
            "tools/list",
            None,
            context.extensions.get::<http::request::Parts>(),
            &context.id,
            context.protocol_version().as_ref(),
            &context.meta.0.0,
        );
        let listed = self.list(request, &context);
        let outcome = if listed.is_ok() { "ok" } else { "error" };
        self.0.metrics.mcp_request("tools/list", outcome);
        if let Err(error) = &listed {
            span.fail("jsonrpc_error", &error.message);
        }
        span.end();
        listed
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let answer = self.negotiate_initialize(&request);
        let outcome = if answer.is_ok() { "ok" } else { "error" };
        self.0.metrics.mcp_request("initialize", outcome);
        answer
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.caller_of(&context)?;
        let parts = context.extensions.get::<http::request::Parts>();
        let mut request = request;
        let own_meta = request.meta.take();
        let meta = match &own_meta {
            Some(meta) => &meta.0.0,
            None => &context.meta.0.0,
        };
        let site = Site {
            caller,
            parts,
            id: &context.id,
            meta,
            version: context.protocol_version(),
            can_elicit: context
                .client_capabilities()
                .is_some_and(|c| c.elicitation.is_some()),
            progress: context.meta.get_progress_token(),
            ct: &context.ct,
            peer: Some(&context.peer),
        };
        self.serve_call(request, site).await
    }
}

/// A `tools/call` request as the handler serves it: parsed by rmcp, or by the gate's fast path
/// (`fast.rs`) for a stateless request that can need nothing from the client before its result.
pub(super) struct Site<'a> {
    pub caller: Arc<Caller>,
    /// The HTTP request's head (over stdio, none).
    pub parts: Option<&'a http::request::Parts>,
    pub id: &'a RequestId,
    /// The request's `_meta`.
    pub meta: &'a Map<String, Value>,
    pub version: Option<ProtocolVersion>,
    /// Whether the client declared elicitation.
    pub can_elicit: bool,
    pub progress: Option<ProgressToken>,
    /// Fires when the client cancels the request or leaves.
    pub ct: &'a tokio_util::sync::CancellationToken,
    /// Where progress and elicitations go; none on the fast path, which takes only requests
    /// without a `progressToken` on the stateless revision (which elicits in its result).
    pub peer: Option<&'a Peer<RoleServer>>,
}

impl Front {
    /// `tools/call` under its server span, counted by outcome.
    pub(super) async fn serve_call(
        &self,
        request: CallToolRequestParams,
        site: Site<'_>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The span names a tool only when it is registered: the model picks the name.
        let registered = self.0.dispatcher.registry().get(&request.name).is_some();
        let target = registered.then_some(request.name.as_ref());
        let span = self.request_span(
            "tools/call",
            target,
            site.parts,
            site.id,
            site.version.as_ref(),
            site.meta,
        );
        let answered = self.run_call(request, &site, span.clone()).await;
        self.answered("tools/call", &span, &answered);
        answered
    }
}

impl Front {
    /// `tools/list`: the tools the caller may call, a page at a time.
    fn list(
        &self,
        request: Option<PaginatedRequestParams>,
        context: &RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.caller_of(context)?;
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor.parse::<usize>().map_err(|_| {
                ErrorData::invalid_params(format!("unknown cursor '{cursor:.64}'"), None)
            })?,
        };
        let dispatcher = &self.0.dispatcher;
        let registry = dispatcher.registry();
        let mut visible = registry
            .iter()
            .filter(|registered| dispatcher.may_call(registered.tool.name(), &caller))
            .filter_map(|registered| shape::tool(registered, &caller))
            .skip(start);
        let tools: Vec<_> = visible.by_ref().take(self.0.page_size).collect();
        let mut result = ListToolsResult::with_all_items(tools);
        if visible.next().is_some() {
            result.next_cursor = Some((start + self.0.page_size).to_string());
        }
        // What one caller is shown depends on who it is (permissions, pins).
        result.cache_scope = Some(CacheScope::Private);
        Ok(result)
    }
}

impl Front {
    /// `tools/call`: the call as a batch of one, under `trace`.
    async fn run_call(
        &self,
        request: CallToolRequestParams,
        site: &Site<'_>,
        trace: Span,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = site.caller.clone();
        if let Some(state) = &request.request_state {
            return self
                .redeem(state, request.input_responses.as_ref(), &caller, site.ct)
                .await;
        }
        let parts = site.parts;
        let connection = parts
            .and_then(|p| p.extensions.get::<Connection>())
            .map(|c| c.peer);
        let session_id = session_of(parts, Some(site.meta), &caller)?;
        let id = call_id(site.id);
        for (field, text) in [("request id", id.as_str()), ("tool name", &request.name)] {
            if text.len() > calls::MAX_ID_BYTES {
                return Err(ErrorData::invalid_params(
                    format!(
                        "the {field} is {} bytes; the limit is {}",
                        text.len(),
                        calls::MAX_ID_BYTES
                    ),
                    None,
                ));
            }
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let structured = self
            .0
            .dispatcher
            .registry()
            .get(&request.name)
            .is_some_and(|registered| registered.tool.output_schema().is_some());
        let holder = Holder::new(connection, &caller);
        let shared = &self.0;
        let decoded = shared
            .entry
            .open(&holder, toolgate_core::json::held_bytes(&arguments))
            .map_err(turned)?;
        let element = json!({
            "id": id,
            "name": request.name,
            "arguments": arguments,
        });
        let calls = calls::intake(std::slice::from_ref(&element), shared.intake);
        drop(element);
        let ticket = shared.entry.admit(holder, 1).map_err(turned)?;
        let batch = Batch {
            session_id,
            calls,
            context: Map::new(),
            bindings: Default::default(),
            options: BatchOptions {
                message_format: Default::default(),
                call_timeout: None,
                deadline: None,
                mode: Mode::Sequential,
                fail_fast: false,
                // An ask waits for a person: the one at the client when it can and may answer,
                // else an approver (`ResolveApproval`), up to `[approvals] timeout`.
                interactive_approvals: true,
            },
            turn: 0,
            caller: caller.clone(),
            trace,
        };
        let (notes, mut heard) = mpsc::channel(NOTES);
        let observer = Notes {
            progress: site.progress.is_some(),
            notes,
        };
        let cancel = shared.entry.cancel();
        // The call runs on this request's task; on 2026-07-28 it becomes a task of its own when
        // it must outlive the request, waiting for the person's answer (see `approvals.rs`).
        let dispatcher = shared.dispatcher.clone();
        let batch_cancel = cancel.clone();
        let mut call: Call = Box::pin(shared.entry.tracker.track_future(async move {
            let _held = (ticket, decoded);
            match dispatcher.run(batch, &observer, &batch_cancel).await {
                Ok(report) => report.results.into_iter().next(),
                Err(error) => {
                    tracing::warn!(%error, "an MCP call's session could not be read or written");
                    None
                }
            }
        }));
        let stateless = site
            .version
            .as_ref()
            .is_some_and(|v| *v >= ProtocolVersion::V_2026_07_28);
        let can_elicit = site.can_elicit;
        let progress = site.progress.as_ref();
        let peer = site.peer;
        // While an approver is awaited: what the client is told, and how often it was.
        let mut waiting: Option<String> = None;
        let mut told = 0u32;
        loop {
            let remind = async {
                match &waiting {
                    Some(_) => tokio::time::sleep(WAITING_REMINDER).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                // `notifications/cancelled`, or the client leaving a stateless request: the
                // call is cancelled and still answers, its events paired.
                () = site.ct.cancelled() => {
                    cancel.cancel("the MCP client cancelled the request");
                    break;
                }
                ended = &mut call => {
                    drain(&mut heard, peer, progress).await;
                    return answered(ended, structured).map(CallToolResponse::Complete);
                }
                Some(note) = heard.recv() => match note {
                    Note::Progress { progress: done, total, message } => {
                        notify(peer, progress, done, total, message).await;
                    }
                    Note::Asked(approval) if can_elicit && approval.requester_may_answer => {
                        if stateless {
                            let state = match shared.parked.seal(&approval, &caller).await {
                                Ok(state) => state,
                                Err(error) => {
                                    // The call does not outlive a request that cannot name it:
                                    // cancelled, its events paired.
                                    cancel.cancel("the approval could not be put to the MCP client");
                                    let _ = call.await;
                                    return Err(error);
                                }
                            };
                            shared
                                .parked
                                .park(&approval, async move { answered(call.await, structured) })
                                .await;
                            let question = approvals::question((&*approval).into())?;
                            let request: ElicitRequest = ElicitRequest::new(question);
                            let mut inputs = InputRequests::new();
                            inputs.insert(
                                approvals::INPUT_KEY.to_owned(),
                                InputRequest::Elicitation(request),
                            );
                            return Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
                                Some(inputs),
                                Some(state),
                            )));
                        }
                        // Asked until answered, or until the call ends without it (the approval
                        // expired, or an approver answered): an abandoned form holds nothing.
                        tokio::select! {
                            biased;
                            ended = &mut call => {
                                drain(&mut heard, peer, progress).await;
                                return answered(ended, structured).map(CallToolResponse::Complete);
                            }
                            () = self.ask_at_client(site, &approval, &caller) => {}
                        }
                    }
                    Note::Asked(approval) => {
                        let text = format!(
                            "waiting for an approver to answer approval {} ({}: {})",
                            approval.id, approval.source, approval.reason
                        );
                        told += 1;
                        notify(peer, progress, f64::from(told), None, text.clone()).await;
                        waiting = Some(text);
                    }
                    Note::Resolved => waiting = None,
                },
                // Progress keeps the client (and proxies' idle timers) informed while it waits.
                () = remind => {
                    if let Some(text) = &waiting {
                        told += 1;
                        notify(peer, progress, f64::from(told), None, text.clone()).await;
                    }
                }
            }
        }
        answered(call.await, structured).map(CallToolResponse::Complete)
    }
}

impl Front {
    /// Puts `approval` to the person at the client (2025-11-25: `elicitation/create` on this
    /// request's stream) and gives the registry their answer as the caller's. A client that
    /// fails to answer leaves the approval to approvers and its timeout.
    async fn ask_at_client(&self, site: &Site<'_>, approval: &Approval, caller: &Caller) {
        let Some(peer) = site.peer else {
            return;
        };
        let Ok(question) = approvals::question(approval.into()) else {
            return;
        };
        // No longer than the approval waits.
        let left = approval
            .expires_at
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        // One form at a time on a session across the fleet, noted while out, so that its answer
        // finds the approval on whichever replica it reaches (see the gate). The turn is
        // waited for while the call waits; the call ending drops the wait.
        let session = site
            .parts
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok());
        let mut out = match session {
            Some(session) => Some(
                approvals::Out::turn(&self.0.asking, self.0.store.as_ref(), session, left).await,
            ),
            None => None,
        };
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(question));
        let sent = peer.send_request_with_option(request, PeerRequestOptions::with_timeout(left));
        let handle = match sent.await {
            Ok(handle) => handle,
            Err(error) => {
                tracing::info!(approval = %approval.id, %error, "an approval could not be put to the MCP client; it waits for an approver");
                return;
            }
        };
        if let Some(out) = &mut out {
            out.note(&request_key(&handle.id), approval, caller, left)
                .await;
        }
        let asked = tokio::select! {
            biased;
            () = site.ct.cancelled() => return,
            asked = handle.await_response() => asked.and_then(|result| match result {
                ClientResult::ElicitResult(result) => Ok(result),
                _ => Err(ServiceError::UnexpectedResponse),
            }),
        };
        let answer = match asked.map_err(|e| e.to_string()).and_then(|result| {
            approvals::answer(&result, caller).map_err(|e| e.message.to_string())
        }) {
            Ok(answer) => answer,
            Err(error) => {
                tracing::info!(approval = %approval.id, %error, "the MCP client did not answer an approval; it waits for an approver");
                return;
            }
        };
        let approvals = self.0.dispatcher.approvals();
        if let Err(error) = approvals
            .resolve_anywhere(caller, &approval.id, answer)
            .await
        {
            tracing::info!(approval = %approval.id, %error, "the MCP client's answer was not taken");
        }
    }

    /// A 2026-07-28 retry: the person's answer for the approval its `request_state` names,
    /// given to the registry as the caller's, then the parked call's result (from whichever
    /// replica it runs on, while the client waits: `gone`).
    async fn redeem(
        &self,
        state: &str,
        responses: Option<&InputResponses>,
        caller: &Caller,
        gone: &tokio_util::sync::CancellationToken,
    ) -> Result<CallToolResponse, ErrorData> {
        let parked = &self.0.parked;
        let id = parked.open(state, caller).await?;
        let answer = approvals::answer_of(responses, caller)?;
        match self
            .0
            .dispatcher
            .approvals()
            .resolve_anywhere(caller, &id, answer)
            .await
        {
            // Someone answered first (an approver): the call goes on with their answer.
            Ok(_) | Err(ResolveError::AlreadyAnswered(_) | ResolveError::NotFound(_)) => {}
            // An answer the registry refuses leaves the call waiting for another (an
            // approver's, or a retry's) until its timeout.
            Err(error) => return Err(ErrorData::invalid_params(error.to_string(), None)),
        }
        parked.redeem_once(&id).await?;
        parked
            .answer(&id, gone.cancelled())
            .await
            .map(CallToolResponse::Complete)
    }

    /// The answer to elicitation `request` of MCP session `session`, which reached this
    /// replica though another asked it (`sessions.store`): given to the registry as `caller`'s,
    /// as the replica that asked would. `false` when no replica asked it: rmcp's to deliver.
    pub(super) async fn answer_elsewhere(
        &self,
        session: &str,
        request: &str,
        answer: &Value,
        caller: &Caller,
    ) -> bool {
        if self.0.asking.here(session, request) {
            return false;
        }
        let Some(store) = &self.0.store else {
            return false;
        };
        // The replica that asked notes its form right after sending it: an answer quicker than
        // that waits for the note while that replica's turn lasts.
        let mut waited = Duration::ZERO;
        let asked = loop {
            match store.take_asked(session, request).await {
                Ok(Some(asked)) => break asked,
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(%error, "an answer to an MCP elicitation could not be looked up; it is dropped");
                    return true;
                }
            }
            let asking_elsewhere = matches!(
                store.asking(session).await,
                Ok(Some(replica)) if self.0.asking.elsewhere(&replica)
            );
            if !asking_elsewhere || waited >= NOTE_WAIT {
                return false;
            }
            tokio::time::sleep(NOTE_POLL).await;
            waited += NOTE_POLL;
        };
        // Noted by this replica: a form it withdrew; the answer is moot.
        if !self.0.asking.elsewhere(&asked.replica) {
            return true;
        }
        // The session's owner answers (the gate checked whose session it is); anyone else's
        // answer is dropped.
        if asked.owner != super::owners::owner_key(caller) {
            return true;
        }
        let taken = serde_json::from_value::<ElicitResult>(answer.clone())
            .map_err(|e| e.to_string())
            .and_then(|result| {
                approvals::answer(&result, caller).map_err(|e| e.message.to_string())
            });
        match taken {
            Ok(answer) => {
                if let Err(error) = self
                    .0
                    .dispatcher
                    .approvals()
                    .resolve_anywhere(caller, &asked.approval, answer)
                    .await
                {
                    tracing::info!(approval = %asked.approval, %error, "the MCP client's answer was not taken");
                }
            }
            Err(error) => {
                tracing::info!(approval = %asked.approval, %error, "the MCP client did not answer an approval; it waits for an approver");
            }
        }
        true
    }
}

/// A call running as a batch of one: its first result, or `None` when its session's store was
/// down.
type Call = std::pin::Pin<Box<dyn std::future::Future<Output = Option<CallResult>> + Send>>;

/// The answer to `tools/call` once the call ended (`structured`: the tool declares an output
/// schema).
fn answered(ended: Option<CallResult>, structured: bool) -> approvals::Answered {
    match ended {
        Some(result) => Ok(shape::call_result(result, structured)),
        None => Err(shape::server_error(
            "the session store is down: the session's state cannot be read or written, so nothing ran; retry later",
        )),
    }
}

/// Sends the progress a call sent before it ended, before its result.
async fn drain(
    heard: &mut mpsc::Receiver<Note>,
    peer: Option<&Peer<RoleServer>>,
    token: Option<&ProgressToken>,
) {
    while let Ok(note) = heard.try_recv() {
        if let Note::Progress {
            progress,
            total,
            message,
        } = note
        {
            notify(peer, token, progress, total, message).await;
        }
    }
}

/// Sends a progress notification for `token`, when the client sent one.
async fn notify(
    peer: Option<&Peer<RoleServer>>,
    token: Option<&ProgressToken>,
    progress: f64,
    total: Option<f64>,
    message: String,
) {
    let (Some(peer), Some(token)) = (peer, token) else {
        return;
    };
    let mut param = ProgressNotificationParam::new(token.clone(), progress);
    if let Some(total) = total {
        param = param.with_total(total);
    }
    if !message.is_empty() {
        param = param.with_message(message);
    }
    // A client that went away loses its progress, nothing more.
    let _ = peer.notify_progress(param).await;
}

/// What toolgate tells an MCP client about itself at `initialize` (and `server/discover`).
pub(crate) fn server_info() -> ServerConfig {
    ServerConfig::new(
        ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build(),
    )
    .with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
    .with_instructions(
        "Every tool call runs through toolgate's safety pipeline: hooks, loop detection, \
         breakers, permissions, validation and retries. A refused or failed call comes back \
         as a result with isError set and a text that says why.",
    )
}

impl Front {
    /// The server span of an MCP request (OpenTelemetry's MCP conventions), under the trace
    /// context its `_meta` carries (`traceparent`, `tracestate`), else its HTTP headers'.
    fn request_span(
        &self,
        method: &'static str,
        target: Option<&str>,
        parts: Option<&http::request::Parts>,
        id: &RequestId,
        version: Option<&ProtocolVersion>,
        meta: &Map<String, Value>,
    ) -> Span {
        let header = |name: &str| {
            parts
                .and_then(|p| p.headers.get(name))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let in_meta = |name: &str| meta.get(name).and_then(Value::as_str).map(str::to_owned);
        let (traceparent, tracestate) = match in_meta("traceparent") {
            Some(tp) => (Some(tp), in_meta("tracestate")),
            None => (header("traceparent"), header("tracestate")),
        };
        let parent = traceparent
            .and_then(|tp| toolgate_core::trace::parse_traceparent(&tp, tracestate.as_deref()))
            .map_or_else(Span::none, Span::remote);
        let session = header("mcp-session-id");
        let version = version.map(ToString::to_string);
        // A request id over the limit is refused after this; the span holds a bounded one.
        let id = toolgate_core::json::truncate_chars(&call_id(id), calls::MAX_ID_BYTES);
        let stdio = parts.is_none();
        let target = target.map(str::to_owned);
        let name = match &target {
            Some(target) => format!("{method} {target}"),
            None => method.to_owned(),
        };
        self.0.tracer.start(
            || name,
            SpanKind::Server,
            parent.context(),
            || {
                let mut attributes = vec![
                    KeyValue::new(attr::MCP_METHOD, method),
                    KeyValue::new(attr::JSONRPC_REQUEST_ID, id),
                    KeyValue::new(attr::NETWORK_TRANSPORT, if stdio { "pipe" } else { "tcp" }),
                ];
                if let Some(session) = session {
                    attributes.push(KeyValue::new(attr::MCP_SESSION_ID, session));
                }
                if let Some(version) = version {
                    attributes.push(KeyValue::new(attr::MCP_PROTOCOL_VERSION, version));
                }
                if let Some(tool) = target {
                    attributes.push(KeyValue::new(attr::OPERATION, "execute_tool"));
                    attributes.push(KeyValue::new(attr::TOOL_NAME, tool));
                }
                attributes
            },
        )
    }

    /// Counts a `tools/call`'s answer and ends its span with it.
    fn answered(
        &self,
        method: &'static str,
        span: &Span,
        answered: &Result<CallToolResponse, ErrorData>,
    ) {
        let outcome = match answered {
            Ok(CallToolResponse::InputRequired(_)) => "input_required",
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => "tool_error",
            Ok(_) => "ok",
            Err(error) => {
                span.fail("jsonrpc_error", &error.message);
                "error"
            }
        };
        self.0.metrics.mcp_request(method, outcome);
        span.end();
    }

    /// The caller the HTTP gate admitted the request as (`gate.rs`), or the stdio caller.
    fn caller_of(&self, context: &RequestContext<RoleServer>) -> Result<Arc<Caller>, ErrorData> {
        match context.extensions.get::<http::request::Parts>() {
            Some(parts) => parts.extensions.get::<Arc<Caller>>().cloned(),
            None => self.0.stdio_caller.clone(),
        }
        .ok_or_else(|| ErrorData::internal_error("the request reached no caller", None))
    }
}

/// The toolgate session a call runs in: the one the client names (the `x-toolgate-session`
/// header or the `dev.toolgate/session` `_meta` key, which must agree), else the MCP session
/// (`Mcp-Session-Id`, 2025-11-25 and earlier), else one per caller. Sessions are namespaced by
/// the caller's tenant, as on gRPC.
fn session_of(
    parts: Option<&http::request::Parts>,
    meta: Option<&Map<String, Value>>,
    caller: &Caller,
) -> Result<String, ErrorData> {
    let header = |name: &str| {
        parts
            .and_then(|p| p.headers.get(name))
            .map(|value| {
                value.to_str().map(str::to_owned).map_err(|_| {
                    ErrorData::invalid_params(format!("the {name} header is not text"), None)
                })
            })
            .transpose()
    };
    let named = header(SESSION_HEADER)?;
    let in_meta = match meta.and_then(|m| m.get(SESSION_META)) {
        None => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => {
            return Err(ErrorData::invalid_params(
                format!("_meta.{SESSION_META} is not a string"),
                None,
            ));
        }
    };
    match (named, in_meta) {
        (Some(a), Some(b)) if a != b => Err(ErrorData::invalid_params(
            format!("the {SESSION_HEADER} header and _meta.{SESSION_META} name different sessions"),
            None,
        )),
        (Some(id), _) | (None, Some(id)) => {
            toolgate_core::session::validate_session_id(&id)
                .map_err(|error| ErrorData::invalid_params(error.to_string(), None))?;
            Ok(id)
        }
        // Names the client cannot choose, under the prefix no request may name.
        (None, None) => {
            let id = match header("mcp-session-id")? {
                Some(session) => format!("{FRONT_PREFIX}{session}"),
                None => caller_session(caller),
            };
            toolgate_core::session::validate_session_name(&id)
                .map_err(|error| ErrorData::invalid_params(error.to_string(), None))?;
            Ok(id)
        }
    }
}

/// The session of a caller that names none on a stateless request: one per identity, kept as
/// long as any named session (`sessions.idle_ttl` after its last call).
fn caller_session(caller: &Caller) -> String {
    let who = format!("{}:{}/{}", caller.method.name(), caller.tenant, caller.id);
    format!(
        "mcp-caller-{:016x}",
        toolgate_core::hash::fnv1a(who.as_bytes())
    )
}

/// The call id the pipeline records: the JSON-RPC request's id.
fn call_id(id: &rmcp::model::RequestId) -> String {
    match id {
        rmcp::model::NumberOrString::Number(n) => n.to_string(),
        rmcp::model::NumberOrString::String(s) => s.to_string(),
    }
}

/// A refusal at the entry, as a JSON-RPC error whose text says what was full.
fn turned(turned: Turned) -> ErrorData {
    shape::server_error(turned.to_string())
}

/// Notes a running call passes to its request's handler, which speaks to the client on the
/// request's own stream.
enum Note {
    Progress {
        progress: f64,
        total: Option<f64>,
        message: String,
    },
    Asked(Box<Approval>),
    /// The approval the call waited on ended.
    Resolved,
}

/// Notes buffered between a call and its request's handler.
const NOTES: usize = 16;

/// The observer of an MCP call: progress (when the client asked for it) and approvals.
struct Notes {
    progress: bool,
    notes: mpsc::Sender<Note>,
}

impl Observer for Notes {
    fn on_event(&self, event: Event) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Event::ApprovalRequested(approval) = event {
                // Waited for: the handler must hear of it (once it is gone, nobody listens).
                let _ = self.notes.send(Note::Asked(Box::new(approval))).await;
            }
        })
    }

    fn try_event(&self, event: Event) -> Option<Event> {
        match event {
            Event::Progress {
                progress,
                total,
                message,
                ..
            } if self.progress => {
                // Progress is a hint: dropped when the handler is behind.
                let _ = self.notes.try_send(Note::Progress {
                    progress,
                    total,
                    message,
                });
                None
            }
            Event::ApprovalRequested(_) => Some(event),
            Event::ApprovalResolved(_) => {
                let _ = self.notes.try_send(Note::Resolved);
                None
            }
            _ => None,
        }
    }

    /// Only the client's progress needs the call's events built; approvals come regardless.
    fn wants_events(&self) -> bool {
        self.progress
    }

    fn wants_approvals(&self) -> bool {
        true
    }
}

/// A JSON-RPC request id as text: how the gate and the handler name an elicitation.
pub(super) fn request_key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}
