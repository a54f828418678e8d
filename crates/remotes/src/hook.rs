//! The remote hook adapter: a `Hook` that asks a `toolgate.v1.ToolHooks` service over gRPC.
//! The channel connects lazily and reconnects by itself; every request has a deadline, and an
//! unreachable or slow service is handled by the hook's failure mode.

use std::time::Duration;

use serde_json::Value;
use tonic::transport::{Channel, Endpoint};

use toolgate_core::glob::glob_match;
use toolgate_core::safety::hooks::{Decision, FailureMode, Hook, PostToolUse, PreToolUse};
use toolgate_core::tools::BoxFuture;
use toolgate_proto::pb;
use toolgate_proto::pb::pre_tool_use_response::Decision as Wire;
use toolgate_proto::pb::tool_hooks_client::ToolHooksClient;
use toolgate_proto::protojson::Struct;

/// A hook served by a remote `ToolHooks` service.
#[derive(Debug, Clone)]
pub struct GrpcHook {
    name: String,
    tools: String,
    timeout: Duration,
    failure_mode: FailureMode,
    client: ToolHooksClient<Channel>,
}

/// A gRPC hook's endpoint that is not a URI.
#[derive(Debug, thiserror::Error)]
#[error("hook '{hook}': endpoint '{endpoint}' is invalid: {source}")]
pub struct InvalidEndpoint {
    hook: String,
    endpoint: String,
    source: tonic::transport::Error,
}

impl GrpcHook {
    /// Prepares the channel without connecting; fails only for a malformed endpoint.
    pub fn new(
        name: String,
        endpoint: &str,
        tools: String,
        timeout: Duration,
        failure_mode: FailureMode,
    ) -> Result<Self, InvalidEndpoint> {
        let channel = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|source| InvalidEndpoint {
                hook: name.clone(),
                endpoint: endpoint.to_owned(),
                source,
            })?
            .connect_timeout(timeout)
            .connect_lazy();
        Ok(GrpcHook {
            name,
            tools,
            timeout,
            failure_mode,
            client: ToolHooksClient::new(channel),
        })
    }

    fn failed(&self, why: &str) -> (Decision, String) {
        self.failure_mode.decide(&self.name, why)
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.timeout);
        request
    }
}

fn input_struct(input: &Value) -> Option<Struct> {
    input.as_object().cloned().map(Struct::from)
}

impl Hook for GrpcHook {
    fn name(&self) -> &str {
        &self.name
    }
    fn applies_to(&self, tool: &str) -> bool {
        glob_match(&self.tools, tool)
    }
    fn pre_tool_use<'a>(&'a self, call: &'a PreToolUse<'a>) -> BoxFuture<'a, (Decision, String)> {
        Box::pin(async move {
            let request = self.request(pb::PreToolUseRequest {
                session_id: call.session_id.to_owned(),
                call_id: call.call_id.to_owned(),
                index: u32::try_from(call.index).unwrap_or(u32::MAX),
                tool: call.tool.to_owned(),
                input: input_struct(call.input),
                attempt: call.attempt,
            });
            let answer =
                tokio::time::timeout(self.timeout, self.client.clone().pre_tool_use(request)).await;
            let response = match answer {
                Err(_) => {
                    return self.failed(&format!(
                        "no answer within {}",
                        toolgate_core::duration::readable(self.timeout)
                    ));
                }
                Ok(Err(status)) => {
                    return self.failed(&format!("{:?}: {}", status.code(), status.message()));
                }
                Ok(Ok(response)) => response.into_inner(),
            };
            let reason = response.reason.clone();
            let decision = match Wire::try_from(response.decision) {
                Ok(Wire::Allow) => Decision::Allow,
                Ok(Wire::Block) => Decision::Block(if reason.is_empty() {
                    format!("blocked by hook '{}'", self.name)
                } else {
                    reason.clone()
                }),
                Ok(Wire::Ask) => Decision::Ask(reason.clone()),
                Ok(Wire::Modify) => match response
                    .modified_input
                    .map(|s| s.into_json_checked(&"modified_input"))
                {
                    Some(Ok(input)) => Decision::Modify(Value::Object(input)),
                    Some(Err(why)) => return self.failed(&why.to_string()),
                    None => return self.failed("MODIFY without modified_input"),
                },
                Err(_) => return self.failed(&format!("unknown decision {}", response.decision)),
            };
            (decision, reason)
        })
    }
    fn post_tool_use<'a>(&'a self, notice: &'a PostToolUse<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let request = self.request(pb::PostToolUseRequest {
                session_id: notice.session_id.to_owned(),
                call_id: notice.call_id.to_owned(),
                index: u32::try_from(notice.index).unwrap_or(u32::MAX),
                tool: notice.tool.to_owned(),
                input: input_struct(notice.input),
                attempt: notice.attempt,
                content: notice.content.to_owned(),
                is_error: notice.is_error,
                error_class: notice.error_class.to_owned(),
                duration_ms: notice.duration_ms,
            });
            let sent =
                tokio::time::timeout(self.timeout, self.client.clone().post_tool_use(request))
                    .await;
            if !matches!(sent, Ok(Ok(_))) {
                tracing::warn!(target: "toolgate::safety::hooks::grpc", hook = %self.name, "post-tool grpc hook did not answer");
            }
        })
    }
}
