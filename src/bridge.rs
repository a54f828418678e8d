//! `toolgate mcp --connect`: MCP over stdio in front of a running toolgate's gRPC API, for MCP
//! clients that launch a command (Claude Desktop). Tools are the server's `ListTools`, a call
//! is a `DispatchBatch` of one (interactive approvals on) in one session per bridge run, so the
//! server's shared sessions, approvals, identities and bounds all apply; the bridge holds none.
//! An approval the server lets the bridge's identity answer is put to the person at the client
//! as an elicitation, and their answer sent back with `ResolveApproval`.

use std::sync::Arc;

use futures::StreamExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use crate::grpc::cli::{CliError, Client, Target, client};
use crate::mcp::approvals::{self, Asked};
use crate::mcp::handler::server_info;
use toolgate_core::identity::{Caller, Method};
use toolgate_proto::pb;
use toolgate_proto::protojson;

/// Why the bridge stopped other than by the client closing stdin.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Connect(#[from] CliError),
    #[error("MCP over stdio: {0}")]
    Stdio(String),
}

/// Serves MCP over stdin and stdout, each call sent to `target` as a `DispatchBatch` in
/// `session` (default: `stdio-bridge-<random>`, one per run), until the client closes stdin.
pub async fn serve_stdio(target: Target, session: Option<String>) -> Result<(), BridgeError> {
    use rmcp::ServiceExt as _;
    let client = client(&target).await?;
    let session = match session {
        Some(session) => session,
        None => toolgate_core::tools::unguessable_name("stdio-bridge-")
            .map_err(|e| BridgeError::Stdio(e.to_string()))?,
    };
    let bridge = Bridge(Arc::new(Inner { client, session }));
    let running = bridge
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| BridgeError::Stdio(e.to_string()))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| BridgeError::Stdio(e.to_string()))
}

struct Inner {
    client: Client,
    session: String,
}

#[derive(Clone)]
struct Bridge(Arc<Inner>);

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        server_info()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let listed = self
            .0
            .client
            .clone()
            .list_tools(pb::ListToolsRequest::default())
            .await
            .map_err(status)?
            .into_inner();
        Ok(ListToolsResult::with_all_items(
            listed.tools.into_iter().map(tool).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = json!({
            "id": match &context.id {
                rmcp::model::NumberOrString::Number(n) => n.to_string(),
                rmcp::model::NumberOrString::String(s) => s.to_string(),
            },
            "name": request.name,
            "arguments": Value::Object(request.arguments.unwrap_or_default()),
        });
        let batch = pb::DispatchBatchRequest {
            session_id: self.0.session.clone(),
            calls: vec![protojson::Value::from(call)],
            options: Some(pb::DispatchOptions {
                interactive_approvals: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut client = self.0.client.clone();
        // Dropping the stream (the client cancelled) cancels the batch on the server.
        let mut stream = tokio::select! {
            biased;
            () = context.ct.cancelled() => return Err(cancelled()),
            opened = client.dispatch_batch(batch) => opened.map_err(status)?.into_inner(),
        };
        let token = context.meta.get_progress_token();
        loop {
            let message = tokio::select! {
                biased;
                () = context.ct.cancelled() => return Err(cancelled()),
                message = stream.next() => message,
            };
            let Some(message) = message else {
                return Err(ErrorData::internal_error(
                    "the server ended the stream without a result",
                    None,
                ));
            };
            match message.map_err(status)?.event {
                Some(pb::dispatch_event::Event::Result(result)) => {
                    let first = result.results.into_iter().next().ok_or_else(|| {
                        ErrorData::internal_error("the batch gave no result for its call", None)
                    })?;
                    return Ok(CallToolResponse::Complete(call_result(first)));
                }
                Some(pb::dispatch_event::Event::Progress(progress)) => {
                    if let Some(token) = &token {
                        let mut param =
                            ProgressNotificationParam::new(token.clone(), progress.progress);
                        if progress.total > 0.0 {
                            param = param.with_total(progress.total);
                        }
                        if !progress.message.is_empty() {
                            param = param.with_message(progress.message);
                        }
                        let _ = context.peer.notify_progress(param).await;
                    }
                }
                Some(pb::dispatch_event::Event::ApprovalRequested(approval)) => {
                    self.ask(&context, &approval).await;
                }
                _ => {}
            }
        }
    }
}

impl Bridge {
    /// Puts an approval the server lets this identity answer to the person at the client, and
    /// sends their answer with `ResolveApproval`; otherwise it waits for the server's approvers.
    async fn ask(&self, context: &RequestContext<RoleServer>, approval: &pb::Approval) {
        let can_elicit = context
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some());
        if !approval.requester_may_answer || !can_elicit {
            return;
        }
        let arguments = approval
            .arguments
            .as_ref()
            .map_or(Value::Null, |a| a.json().clone());
        let Ok(question) = approvals::question(Asked {
            tool: &approval.tool,
            arguments: &arguments,
            source: &approval.source,
            reason: &approval.reason,
        }) else {
            return;
        };
        let Ok(result) = context.peer.create_elicitation(question).await else {
            return;
        };
        // Whoever answers, the server judges the answer by the bridge's credential.
        let person = Caller {
            id: "mcp-client".to_owned(),
            tenant: String::new(),
            roles: Vec::new(),
            method: Method::Anonymous,
        };
        let Ok(answer) = approvals::answer(&result, &person) else {
            return;
        };
        use pb::resolve_approval_request::Decision;
        let resolve = pb::ResolveApprovalRequest {
            approval_id: approval.approval_id.clone(),
            decision: if answer.approve {
                Decision::Approve
            } else {
                Decision::Deny
            } as i32,
            reason: answer.reason,
            updated_arguments: answer.updated_arguments.and_then(|v| match v {
                Value::Object(map) => Some(protojson::Struct::from(map)),
                _ => None,
            }),
            ..Default::default()
        };
        if let Err(error) = self.0.client.clone().resolve_approval(resolve).await {
            tracing::info!(approval = %approval.approval_id, error = %error.message(), "the client's answer was not taken");
        }
    }
}

/// A tool as the server listed it, in MCP's shape.
fn tool(definition: pb::ToolDefinition) -> Tool {
    let schema = match definition.input_schema {
        Some(schema) => schema.into_json(),
        None => Map::new(),
    };
    let mut tool = Tool::new_with_raw(
        definition.name,
        Some(definition.description.into()),
        Arc::new(schema),
    );
    if let Some(a) = definition.annotations {
        tool = tool.with_annotations(
            ToolAnnotations::new()
                .read_only(a.read_only)
                .destructive(a.destructive)
                .idempotent(a.idempotent)
                .open_world(a.open_world),
        );
    }
    tool
}

/// A call's result as the server gave it, in MCP's shape (as the HTTP front gives it).
fn call_result(result: pb::CallResult) -> CallToolResult {
    let content: Vec<ContentBlock> = if result.parts.is_empty() {
        vec![ContentBlock::text(result.content)]
    } else {
        result
            .parts
            .into_iter()
            .filter_map(|part| match part.part? {
                pb::content_part::Part::Text(text) => Some(ContentBlock::text(text)),
                pb::content_part::Part::Image(image) => {
                    Some(ContentBlock::image(image.data, image.mime_type))
                }
            })
            .collect()
    };
    let mut answer = if result.success {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    let value = result.result.map(protojson::Value::into_json);
    if result.success && value.as_ref().is_some_and(Value::is_object) {
        answer.structured_content = value;
    }
    let class = pb::ErrorClass::try_from(result.error_class)
        .map(|c| c.as_str_name())
        .unwrap_or("UNKNOWN");
    answer.meta = Some(crate::mcp::shape::run_meta(
        class,
        result.attempts,
        result.cached,
        result.truncated,
        &result.tool,
    ));
    answer
}

/// A gRPC refusal as a JSON-RPC error, its text the server's.
fn status(status: tonic::Status) -> ErrorData {
    crate::mcp::shape::server_error(format!("{:?}: {}", status.code(), status.message()))
}

fn cancelled() -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode(-32800),
        "the request was cancelled",
        None,
    )
}
