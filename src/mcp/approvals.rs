//! Approvals put to the person at the MCP client: an `ask` becomes an elicitation in form mode
//! (`elicitation/create` on a 2025-11-25 session; an `InputRequiredResult` on 2026-07-28), when
//! the client declared elicitation and the operator lets the identity that sent a call answer
//! its own approvals (`requester_may_answer`). The approvals registry still decides whether the
//! answer counts: what the client sends is an answer by the caller, nothing more.
//!
//! On 2026-07-28 the call keeps running (waiting for the answer) after the first request ends;
//! its `request_state` is sealed (HMAC, a TTL, and bound to the caller as associated data), names
//! the approval, and is redeemed once: the retry that carries the person's answer takes the
//! call's result.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData};
use rmcp::model::{RequestStateCodec, SealOptions};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use toolgate_core::approvals::{Answer, Approval, Remember};
use toolgate_core::dispatch::CallResult;
use toolgate_core::identity::Caller;

/// The key of the one input request an approval becomes.
pub(super) const INPUT_KEY: &str = "approval";
/// How long a parked call's result is kept after the call ends, for a retry that comes late.
const KEPT_AFTER_END: Duration = Duration::from_secs(60);
/// Characters of the arguments the person is shown in the question.
const SHOWN_ARGUMENTS: usize = 2000;

/// What a sealed `request_state` says.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    /// The approval the call waits on.
    approval: String,
}

/// Calls that wait for an answer after their first request ended (2026-07-28), by approval id.
pub(super) struct Parked {
    codec: RequestStateCodec,
    /// How long a `request_state` stays good: the approvals' timeout.
    ttl: Duration,
    calls: Mutex<HashMap<String, JoinHandle<Option<CallResult>>>>,
}

impl Parked {
    /// A registry sealing with a fresh random key: a `request_state` is good on this server
    /// only, as the call it names runs here.
    pub(super) fn new(ttl: Duration) -> Arc<Self> {
        let mut key = [0u8; 32];
        // An unavailable system RNG leaves the key zero; sealing is then no protection, so it
        // is logged loudly (it does not happen on a working Linux).
        if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key).is_err() {
            tracing::error!("the system RNG failed: MCP request_state keys are not secret");
        }
        Arc::new(Parked {
            codec: RequestStateCodec::new_unchecked(key.to_vec()),
            ttl,
            calls: Mutex::new(HashMap::new()),
        })
    }

    /// Parks `call`, which waits on `approval`, and returns the `request_state` that redeems it
    /// for `caller` alone. The parked call is forgotten `KEPT_AFTER_END` after it ends.
    pub(super) fn park(
        self: &Arc<Self>,
        approval: &Approval,
        caller: &Caller,
        call: JoinHandle<Option<CallResult>>,
    ) -> Result<String, ErrorData> {
        let owner = owner_key(caller);
        let sealed = self
            .codec
            .seal_json_with(
                &State {
                    approval: approval.id.clone(),
                },
                &SealOptions::new()
                    .associated_data(owner.as_bytes())
                    .ttl(self.ttl),
            )
            .map_err(|e| ErrorData::internal_error(format!("request_state: {e}"), None))?;
        self.calls.lock().insert(approval.id.clone(), call);
        let parked = self.clone();
        let id = approval.id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(parked.ttl + KEPT_AFTER_END).await;
            if let Some(call) = parked.calls.lock().remove(&id) {
                call.abort();
            }
        });
        Ok(sealed)
    }

    /// The approval a `request_state` names, if it was sealed here for `caller` and is not
    /// past its time.
    pub(super) fn open(&self, sealed: &str, caller: &Caller) -> Result<String, ErrorData> {
        let owner = owner_key(caller);
        self.codec
            .open_json_with::<State>(sealed, owner.as_bytes())
            .map(|state| state.approval)
            .map_err(|_| {
                ErrorData::invalid_params(
                    "request_state is not one this server gave this caller, or it expired",
                    None,
                )
            })
    }

    /// Takes the parked call waiting on `approval` (once: a second redemption finds nothing).
    pub(super) fn take(&self, approval: &str) -> Option<JoinHandle<Option<CallResult>>> {
        self.calls.lock().remove(approval)
    }
}

/// Who may redeem a `request_state`: the caller's credential, tenant and identity.
fn owner_key(caller: &Caller) -> String {
    format!("{}:{}/{}", caller.method.name(), caller.tenant, caller.id)
}

/// What a person is asked about: the call and who asked why.
pub(crate) struct Asked<'a> {
    pub tool: &'a str,
    pub arguments: &'a Value,
    pub source: &'a str,
    pub reason: &'a str,
}

impl<'a> From<&'a Approval> for Asked<'a> {
    fn from(approval: &'a Approval) -> Self {
        Asked {
            tool: &approval.tool,
            arguments: &approval.arguments,
            source: &approval.source,
            reason: &approval.reason,
        }
    }
}

/// The form the person at the client is asked to fill.
pub(crate) fn question(asked: Asked<'_>) -> Result<ElicitRequestParams, ErrorData> {
    let arguments =
        toolgate_core::json::truncate_chars(&asked.arguments.to_string(), SHOWN_ARGUMENTS);
    let message = format!(
        "toolgate: the agent wants to call '{}' with {arguments}. {} asks: {}. Approve this call?",
        asked.tool, asked.source, asked.reason
    );
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {
                    "type": "boolean",
                    "title": "Approve",
                    "description": "Let the call run"
                },
                "reason": {
                    "type": "string",
                    "title": "Reason",
                    "description": "Why (the agent reads it when the call is denied)"
                },
                "arguments": {
                    "type": "string",
                    "title": "Edited arguments",
                    "description": "A JSON object to run the call with instead (optional)"
                }
            },
            "required": ["approve"]
        }
    }))
    .map_err(|e| ErrorData::internal_error(format!("the approval form: {e}"), None))
}

/// The person's answer, from what the client returned for the form. Declining or cancelling
/// denies the call; edited arguments must be a JSON object (they are checked again against the
/// tool's schema, permissions and hooks before the call runs).
pub(crate) fn answer(result: &ElicitResult, by: &Caller) -> Result<Answer, ErrorData> {
    let deny = |reason: &str| Answer {
        approve: false,
        by: by.id.clone(),
        reason: reason.to_owned(),
        updated_arguments: None,
        remember: Remember::Once,
    };
    match result.action {
        ElicitationAction::Accept => {}
        ElicitationAction::Decline => return Ok(deny("the person at the client declined")),
        _ => return Ok(deny("the person at the client cancelled")),
    }
    let content = result.content.clone().unwrap_or(Value::Null);
    let approve = content["approve"].as_bool().ok_or_else(|| {
        ErrorData::invalid_params("the approval form's answer has no boolean 'approve'", None)
    })?;
    let reason = content["reason"].as_str().unwrap_or_default().to_owned();
    let updated_arguments = match content["arguments"].as_str().map(str::trim) {
        None | Some("") => None,
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => Some(value),
            _ => {
                return Err(ErrorData::invalid_params(
                    "the edited arguments are not a JSON object",
                    None,
                ));
            }
        },
    };
    Ok(Answer {
        approve,
        by: by.id.clone(),
        reason,
        updated_arguments: updated_arguments.filter(|_| approve),
        remember: Remember::Once,
    })
}

/// The answer a 2026-07-28 retry carries for the approval form.
pub(super) fn answer_of(
    responses: Option<&rmcp::model::InputResponses>,
    by: &Caller,
) -> Result<Answer, ErrorData> {
    let response = responses.and_then(|r| r.get(INPUT_KEY)).ok_or_else(|| {
        ErrorData::invalid_params(format!("inputResponses has no '{INPUT_KEY}'"), None)
    })?;
    let result: ElicitResult = serde_json::from_value(response.clone())
        .map_err(|e| ErrorData::invalid_params(format!("inputResponses.{INPUT_KEY}: {e}"), None))?;
    answer(&result, by)
}
