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
//!
//! Across replicas (`sessions.store`), the answer may reach another replica than the one the
//! call runs on. Every replica seals with the key the store holds, a redemption is marked in the
//! store, the answer travels as any approval's answer does (`resolve_anywhere`), and the parked
//! call's result is put in the store for the retry that waits for it elsewhere. A 2025-11-25
//! elicitation's answer is found the same way (`Asking`, and the gate's `answer_elsewhere`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::model::{
    CallToolResult, ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData,
};
use rmcp::model::{RequestStateCodec, SealOptions};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{OnceCell, oneshot};

use crate::store::mcp::McpSessions;
use toolgate_core::approvals::{Answer, Approval, Remember};
use toolgate_core::identity::Caller;

/// The key of the one input request an approval becomes.
pub(super) const INPUT_KEY: &str = "approval";
/// How long a parked call's result is kept after the call ends, for a retry that comes late.
const KEPT_AFTER_END: Duration = Duration::from_secs(60);
/// Characters of the arguments the person is shown in the question.
const SHOWN_ARGUMENTS: usize = 2000;
/// How often, at most, a retry on another replica looks for its call's result in the store.
const RESULT_POLL: Duration = Duration::from_millis(500);

/// What a parked call ends with: the `tools/call` answer its retry takes.
pub(super) type Answered = Result<CallToolResult, ErrorData>;

/// What a sealed `request_state` says.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    /// The approval the call waits on.
    approval: String,
}

/// A parked call, as its retry finds it.
pub(super) enum Slot {
    /// Still running: its answer comes on this.
    Running(oneshot::Receiver<Answered>),
    /// Ended before its retry came.
    Ended(Answered),
}

/// Calls that wait for an answer after their first request ended (2026-07-28), by approval id.
pub(super) struct Parked {
    /// Sealing key: a fresh random one on a server of its own; the fleet's with a store.
    codec: OnceCell<RequestStateCodec>,
    /// How long a `request_state` stays good: the approvals' timeout.
    ttl: Duration,
    /// The longest a retry waits for a call running elsewhere: `ttl` and the longest call.
    longest: Duration,
    calls: Mutex<HashMap<String, Slot>>,
    /// With `sessions.store`: the other replicas.
    store: Option<Arc<McpSessions>>,
}

impl Parked {
    /// A registry whose `request_state`s are good for `ttl`, on this server alone or, with
    /// `store`, on every replica sharing it. A retry waits at most `ttl + longest_call` for a
    /// call running on another replica.
    pub(super) fn new(
        ttl: Duration,
        longest_call: Duration,
        store: Option<Arc<McpSessions>>,
    ) -> Arc<Self> {
        Arc::new(Parked {
            codec: OnceCell::new(),
            ttl,
            longest: ttl.saturating_add(longest_call),
            calls: Mutex::new(HashMap::new()),
            store,
        })
    }

    /// The codec, its key made (or, with a store, agreed with the other replicas) at first use.
    async fn codec(&self) -> Result<&RequestStateCodec, ErrorData> {
        self.codec
            .get_or_try_init(|| async {
                let fresh = random_key();
                let key = match &self.store {
                    None => fresh,
                    Some(store) => store.state_key(&fresh).await.map_err(|error| {
                        super::shape::server_error(format!("the session store is down ({error}): approvals at the client cannot be sealed; retry later"))
                    })?,
                };
                Ok(RequestStateCodec::new_unchecked(key.into_bytes()))
            })
            .await
    }

    /// Parks `call`, which waits on `approval`, and returns the `request_state` that redeems it
    /// for `caller` alone. The call's answer is kept `KEPT_AFTER_END` after it ends when no
    /// retry took it yet (and put in the store, for a retry on another replica).
    pub(super) async fn park<F>(
        self: &Arc<Self>,
        approval: &Approval,
        caller: &Caller,
        call: F,
    ) -> Result<String, ErrorData>
    where
        F: Future<Output = Answered> + Send + 'static,
    {
        let owner = super::owners::owner_key(caller);
        let sealed = self
            .codec()
            .await?
            .seal_json_with(
                &State {
                    approval: approval.id.clone(),
                },
                &SealOptions::new()
                    .associated_data(owner.as_bytes())
                    .ttl(self.ttl),
            )
            .map_err(|e| ErrorData::internal_error(format!("request_state: {e}"), None))?;
        let (answer, answered) = oneshot::channel();
        let id = approval.id.clone();
        self.calls
            .lock()
            .insert(id.clone(), Slot::Running(answered));
        let parked = self.clone();
        tokio::spawn(async move {
            let ended = call.await;
            // A retry took the slot: it waits for this answer. Otherwise the answer is kept.
            let kept = {
                let mut calls = parked.calls.lock();
                match calls.get_mut(&id) {
                    Some(slot @ Slot::Running(_)) => {
                        *slot = Slot::Ended(ended.clone());
                        true
                    }
                    _ => false,
                }
            };
            if !kept {
                let _ = answer.send(ended);
                return;
            }
            if let Some(store) = &parked.store {
                let text = serde_json::to_string(&ended).unwrap_or_default();
                if let Err(error) = store.put_result(&id, &text, KEPT_AFTER_END).await {
                    tracing::warn!(approval = %id, %error, "a parked MCP call's result was not stored; a retry on another replica does not find it");
                }
            }
            tokio::time::sleep(KEPT_AFTER_END).await;
            parked.calls.lock().remove(&id);
        });
        Ok(sealed)
    }

    /// The approval a `request_state` names, if it was sealed (here or, with a store, by a
    /// replica) for `caller` and is not past its time.
    pub(super) async fn open(&self, sealed: &str, caller: &Caller) -> Result<String, ErrorData> {
        let owner = super::owners::owner_key(caller);
        self.codec()
            .await?
            .open_json_with::<State>(sealed, owner.as_bytes())
            .map(|state| state.approval)
            .map_err(|_| {
                ErrorData::invalid_params(
                    "request_state is not one this server gave this caller, or it expired",
                    None,
                )
            })
    }

    /// Marks the `request_state` naming `approval` redeemed, once across the replicas; an
    /// error for the second redemption. On a server of its own, taking the slot is the mark.
    pub(super) async fn redeem_once(&self, approval: &str) -> Result<(), ErrorData> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        match store.redeem_once(approval, self.longest).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(redeemed()),
            Err(error) => Err(super::shape::server_error(format!(
                "the session store is down ({error}); retry later"
            ))),
        }
    }

    /// The answer of the call waiting on `approval` (once: a second redemption finds nothing):
    /// from this server, or, with a store, from the replica it runs on, waiting for it to end
    /// until `gone` fires or `ttl` and the longest call passed.
    pub(super) async fn answer(&self, approval: &str, gone: impl Future<Output = ()>) -> Answered {
        let slot = self.calls.lock().remove(approval);
        match slot {
            Some(Slot::Ended(answered)) => return answered,
            Some(Slot::Running(answered)) => {
                return answered.await.unwrap_or_else(|_| {
                    Err(ErrorData::internal_error(
                        "the call's task ended abnormally",
                        None,
                    ))
                });
            }
            None => {}
        }
        let Some(store) = &self.store else {
            return Err(redeemed());
        };
        let look = async {
            let mut every = Duration::from_millis(25);
            loop {
                match store.take_result(approval).await {
                    Ok(Some(text)) => {
                        return serde_json::from_str::<Answered>(&text).unwrap_or_else(|e| {
                            Err(ErrorData::internal_error(
                                format!("a stored call result is not readable: {e}"),
                                None,
                            ))
                        });
                    }
                    Ok(None) => {}
                    Err(error) => {
                        tracing::warn!(%approval, %error, "a parked MCP call's result could not be read; trying again");
                    }
                }
                tokio::time::sleep(every).await;
                every = (every * 2).min(RESULT_POLL);
            }
        };
        tokio::select! {
            answered = look => answered,
            () = gone => Err(ErrorData::internal_error("the client left", None)),
            () = tokio::time::sleep(self.longest) => Err(ErrorData::internal_error(
                "the call's result never came from the replica it runs on",
                None,
            )),
        }
    }
}

/// The error for a `request_state` redeemed already, or whose call ended long ago.
fn redeemed() -> ErrorData {
    ErrorData::invalid_params(
        "this request_state was redeemed already, or its call ended long ago",
        None,
    )
}

/// A fresh random sealing key, as hex.
fn random_key() -> String {
    let mut key = [0u8; 32];
    // An unavailable system RNG leaves the key zero; sealing is then no protection, so it is
    // logged loudly (it does not happen on a working Linux).
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key).is_err() {
        tracing::error!("the system RNG failed: MCP request_state keys are not secret");
    }
    let mut hex = String::with_capacity(64);
    toolgate_core::hash::push_hex(&mut hex, &key);
    hex
}

/// The 2025-11-25 elicitations this replica has out, by session and JSON-RPC request id: an
/// answer for one of them is rmcp's to deliver here; an answer for another may be for one a
/// replica sent (`sessions.store`).
#[derive(Default)]
pub(super) struct Asking {
    out: Mutex<HashSet<(String, String)>>,
}

impl Asking {
    /// Whether this replica sent elicitation `request` on `session`.
    pub(super) fn here(&self, session: &str, request: &str) -> bool {
        self.out
            .lock()
            .contains(&(session.to_owned(), request.to_owned()))
    }
}

/// An elicitation out on a session, noted here (and in the store) until dropped.
pub(super) struct Out {
    asking: Arc<Asking>,
    store: Option<Arc<McpSessions>>,
    key: (String, String),
}

impl Out {
    /// Notes elicitation `request` on `session`, asking about `approval` of `caller`, for
    /// `ttl`: here, and in the store for the replica its answer may reach.
    pub(super) async fn note(
        asking: &Arc<Asking>,
        store: Option<&Arc<McpSessions>>,
        session: &str,
        request: &str,
        approval: &Approval,
        caller: &Caller,
        ttl: Duration,
    ) -> Self {
        let key = (session.to_owned(), request.to_owned());
        asking.out.lock().insert(key.clone());
        if let Some(store) = store {
            let asked = crate::store::mcp::Asked {
                approval: approval.id.clone(),
                owner: super::owners::owner_key(caller),
            };
            if let Err(error) = store.ask(session, request, &asked, ttl).await {
                tracing::warn!(approval = %approval.id, %error, "an MCP elicitation was not stored; an answer reaching another replica is lost");
            }
        }
        Out {
            asking: asking.clone(),
            store: store.cloned(),
            key,
        }
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        self.asking.out.lock().remove(&self.key);
        if let Some(store) = self.store.take() {
            let (session, request) = std::mem::take(&mut self.key);
            tokio::spawn(async move {
                let _ = store.forget_asked(&session, &request).await;
            });
        }
    }
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
