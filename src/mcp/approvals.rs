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

use parking_lot::{Mutex, RwLock};
use rmcp::model::{
    CallToolResult, ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData,
};
use rmcp::model::{RequestStateCodec, SealOptions};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::oneshot;

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
/// How long a parked call's mark in the store lasts unless its replica renews it (a third as
/// often): a replica that dies leaves its calls' retries waiting this long at most.
const PARKED_MARK: Duration = Duration::from_secs(30);
/// How often a replica looks whether a session's turn to ask is free.
const ASKING_POLL: Duration = Duration::from_millis(250);

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
    /// Sealing key: a fresh random one on a server of its own; the fleet's with a store (read
    /// again when a state does not open, in case the store lost it and another was made).
    codec: RwLock<Option<Arc<RequestStateCodec>>>,
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
            codec: RwLock::new(None),
            ttl,
            longest: ttl.saturating_add(longest_call),
            calls: Mutex::new(HashMap::new()),
            store,
        })
    }

    /// The codec, its key made (or, with a store, agreed with the other replicas) at first use,
    /// or read again from the store (`fresh`).
    async fn codec(&self, fresh: bool) -> Result<Arc<RequestStateCodec>, ErrorData> {
        if !fresh && let Some(codec) = self.codec.read().clone() {
            return Ok(codec);
        }
        let made = random_key();
        let key = match &self.store {
            None => match self.codec.read().clone() {
                Some(codec) => return Ok(codec),
                None => made,
            },
            Some(store) => store.state_key(&made).await.map_err(|error| {
                super::shape::server_error(format!("the session store is down ({error}): approvals at the client cannot be sealed or opened; retry later"))
            })?,
        };
        let mut codec = self.codec.write();
        // Without a store, the first key made stays: a racing first use does not replace it.
        if self.store.is_none()
            && let Some(kept) = codec.clone()
        {
            return Ok(kept);
        }
        let made = Arc::new(RequestStateCodec::new_unchecked(key.into_bytes()));
        *codec = Some(made.clone());
        Ok(made)
    }

    /// The `request_state` that redeems the call waiting on `approval`, for `caller` alone.
    pub(super) async fn seal(
        &self,
        approval: &Approval,
        caller: &Caller,
    ) -> Result<String, ErrorData> {
        let owner = super::owners::owner_key(caller);
        self.codec(false)
            .await?
            .seal_json_with(
                &State {
                    approval: approval.id.clone(),
                },
                &SealOptions::new()
                    .associated_data(owner.as_bytes())
                    .ttl(self.ttl),
            )
            .map_err(|e| ErrorData::internal_error(format!("request_state: {e}"), None))
    }

    /// Parks `call`, which waits on `approval` (its `request_state` sealed already). The call's
    /// answer is kept `KEPT_AFTER_END` after it ends when no retry took it yet, and, with a
    /// store, put there for a retry on another replica, which meanwhile sees the call running
    /// (a mark this replica renews).
    pub(super) async fn park<F>(self: &Arc<Self>, approval: &Approval, call: F)
    where
        F: Future<Output = Answered> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        let id = approval.id.clone();
        self.calls
            .lock()
            .insert(id.clone(), Slot::Running(answered));
        if let Some(store) = &self.store
            && let Err(error) = store.mark_parked(&id, PARKED_MARK).await
        {
            tracing::warn!(approval = %id, %error, "a parked MCP call was not marked in the store; a retry on another replica may not find it");
        }
        let parked = self.clone();
        tokio::spawn(async move {
            let mut call = std::pin::pin!(call);
            let mut renew = tokio::time::interval(PARKED_MARK / 3);
            renew.tick().await;
            let ended = loop {
                tokio::select! {
                    ended = &mut call => break ended,
                    _ = renew.tick() => {
                        if let Some(store) = &parked.store {
                            let _ = store.mark_parked(&id, PARKED_MARK).await;
                        }
                    }
                }
            };
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
            if let Some(store) = &parked.store {
                let text = match kept {
                    true => serde_json::to_string(&ended).unwrap_or_default(),
                    // Taken here: the store is only told the call ended.
                    false => String::new(),
                };
                if let Err(error) = store.put_result(&id, &text, KEPT_AFTER_END).await {
                    tracing::warn!(approval = %id, %error, "a parked MCP call's result was not stored; a retry on another replica does not find it");
                }
            }
            if !kept {
                let _ = answer.send(ended);
                return;
            }
            tokio::time::sleep(KEPT_AFTER_END).await;
            parked.calls.lock().remove(&id);
        });
    }

    /// The approval a `request_state` names, if it was sealed (here or, with a store, by a
    /// replica) for `caller` and is not past its time.
    pub(super) async fn open(&self, sealed: &str, caller: &Caller) -> Result<String, ErrorData> {
        let owner = super::owners::owner_key(caller);
        let open = |codec: &RequestStateCodec| {
            codec
                .open_json_with::<State>(sealed, owner.as_bytes())
                .map(|state| state.approval)
        };
        if let Ok(approval) = open(&*self.codec(false).await?) {
            return Ok(approval);
        }
        // The fleet's key may have changed (the store lost it and a replica made another).
        if self.store.is_some()
            && let Ok(approval) = open(&*self.codec(true).await?)
        {
            return Ok(approval);
        }
        Err(ErrorData::invalid_params(
            "request_state is not one this server gave this caller, or it expired",
            None,
        ))
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
    /// while it runs there (its mark renewed), until `gone` fires, and at most `ttl` and the
    /// longest call.
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
                // The result first, then the mark: the replica puts the one and clears the
                // other at once, so a call seen ended has its result seen before.
                match store.take_result(approval).await {
                    Ok(Some(text)) => return stored(&text),
                    Ok(None) => {}
                    Err(error) => {
                        tracing::warn!(%approval, %error, "a parked MCP call's result could not be read; trying again");
                    }
                }
                if let Ok(false) = store.is_parked(approval).await {
                    return match store.take_result(approval).await {
                        Ok(Some(text)) => stored(&text),
                        _ => Err(redeemed()),
                    };
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

/// A result a replica stored: empty when a retry there took it.
fn stored(text: &str) -> Answered {
    if text.is_empty() {
        return Err(redeemed());
    }
    serde_json::from_str::<Answered>(text).unwrap_or_else(|e| {
        Err(ErrorData::internal_error(
            format!("a stored call result is not readable: {e}"),
            None,
        ))
    })
}

/// The error for a `request_state` redeemed already, or whose call ended long ago.
fn redeemed() -> ErrorData {
    ErrorData::invalid_params(
        "this request_state was redeemed already, or its call ended long ago",
        None,
    )
}

/// A fresh random key, as hex.
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
pub(super) struct Asking {
    out: Mutex<HashSet<(String, String)>>,
    /// This replica, as the store's notes name it.
    replica: String,
}

impl Default for Asking {
    fn default() -> Self {
        Asking {
            out: Mutex::default(),
            replica: random_key(),
        }
    }
}

impl Asking {
    /// Whether this replica sent elicitation `request` on `session`.
    pub(super) fn here(&self, session: &str, request: &str) -> bool {
        self.out
            .lock()
            .contains(&(session.to_owned(), request.to_owned()))
    }

    /// Whether `replica` is another replica than this one.
    pub(super) fn elsewhere(&self, replica: &str) -> bool {
        replica != self.replica
    }
}

/// This replica's turn to put a form to a session's person, and the form once it is out:
/// noted here and in the store until dropped.
pub(super) struct Out {
    asking: Arc<Asking>,
    store: Option<Arc<McpSessions>>,
    session: String,
    request: Option<String>,
}

impl Out {
    /// Waits for this replica's turn to put a form on `session` (with a store, one at a time
    /// across the fleet, held at most `ttl`); polled until it comes, so the caller bounds the
    /// wait. Without a store the turn is at once.
    pub(super) async fn turn(
        asking: &Arc<Asking>,
        store: Option<&Arc<McpSessions>>,
        session: &str,
        ttl: Duration,
    ) -> Self {
        if let Some(store) = store {
            loop {
                match store.take_asking_turn(session, &asking.replica, ttl).await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(%error, "an MCP session's turn to ask could not be taken; trying again");
                    }
                }
                tokio::time::sleep(ASKING_POLL).await;
            }
        }
        Out {
            asking: asking.clone(),
            store: store.cloned(),
            session: session.to_owned(),
            request: None,
        }
    }

    /// Notes elicitation `request`, asking about `approval` of `caller`, for `ttl`: here, and
    /// in the store for the replica its answer may reach.
    pub(super) async fn note(
        &mut self,
        request: &str,
        approval: &Approval,
        caller: &Caller,
        ttl: Duration,
    ) {
        self.asking
            .out
            .lock()
            .insert((self.session.clone(), request.to_owned()));
        self.request = Some(request.to_owned());
        if let Some(store) = &self.store {
            let asked = crate::store::mcp::Asked {
                approval: approval.id.clone(),
                owner: super::owners::owner_key(caller),
                replica: self.asking.replica.clone(),
            };
            if let Err(error) = store.ask(&self.session, request, &asked, ttl).await {
                tracing::warn!(approval = %approval.id, %error, "an MCP elicitation was not stored; an answer reaching another replica is lost");
            }
        }
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        let request = self.request.take().unwrap_or_default();
        self.asking
            .out
            .lock()
            .remove(&(self.session.clone(), request.clone()));
        if let Some(store) = self.store.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let session = std::mem::take(&mut self.session);
            let replica = self.asking.replica.clone();
            runtime.spawn(async move {
                if let Err(error) = store.done_asking(&session, &request, &replica).await {
                    tracing::warn!(%error, "an MCP session's turn to ask was not given up; it lapses with its approval");
                }
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
