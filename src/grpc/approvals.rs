//! The approval RPCs, `ResolveApproval`, `ListApprovals` and `WatchApprovals`: requests turned
//! into the registry's terms (`toolgate_core::approvals`), which decides who may see and answer
//! what; every answer is an audit line.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio::sync::broadcast::error::RecvError;
use tonic::Status;

use super::convert;
use super::status::RequestError;
use toolgate_core::approvals::{Answer, Approvals, Listing, Remember, Update, WatchSlot};
use toolgate_core::dispatch::Cancel;
use toolgate_core::identity::Caller;
use toolgate_proto::pb;
use toolgate_proto::pb::resolve_approval_request::{Decision, Remember as PbRemember};

/// The RPC audit lines name.
const RESOLVE: &str = "ResolveApproval";

/// The `WatchApprovals` stream.
pub(super) type WatchStream =
    Pin<Box<dyn Stream<Item = Result<pb::WatchApprovalsResponse, Status>> + Send>>;

/// Answers an approval as `caller`.
pub(super) async fn resolve(
    approvals: &Approvals,
    caller: &Caller,
    request: pb::ResolveApprovalRequest,
    max_depth: usize,
) -> Result<pb::ResolveApprovalResponse, RequestError> {
    if request.approval_id.is_empty() {
        return Err(RequestError::Invalid("approval_id is required".to_owned()));
    }
    checked_approval_id(&request.approval_id)?;
    let approve = match Decision::try_from(request.decision) {
        Ok(Decision::Approve) => true,
        Ok(Decision::Deny) => false,
        Ok(Decision::Unspecified) => {
            return Err(RequestError::Invalid(
                "decision is required: APPROVE or DENY".to_owned(),
            ));
        }
        Err(_) => {
            return Err(RequestError::Invalid(format!(
                "decision: unknown value {}",
                request.decision
            )));
        }
    };
    let remember = match PbRemember::try_from(request.remember) {
        Ok(PbRemember::Once) => Remember::Once,
        Ok(PbRemember::Session) => Remember::Session,
        Err(_) => {
            return Err(RequestError::Invalid(format!(
                "remember: unknown value {}",
                request.remember
            )));
        }
    };
    let updated_arguments = match request.updated_arguments {
        Some(_) if !approve => {
            return Err(RequestError::Invalid(
                "updated_arguments: only an approval runs the call, with or without them"
                    .to_owned(),
            ));
        }
        Some(arguments) => Some(serde_json::Value::Object(
            arguments.into_json_checked(&"updated_arguments")?,
        )),
        None => None,
    };
    if let Some(arguments) = &updated_arguments
        && toolgate_core::json::depth(arguments) > max_depth
    {
        return Err(RequestError::Invalid(format!(
            "updated_arguments: nested deeper than limits.max_json_depth ({max_depth})"
        )));
    }
    let answer = Answer {
        approve,
        by: caller.id.clone(),
        reason: request.reason,
        updated_arguments,
        remember,
    };
    let outcome = approvals
        .resolve_anywhere(caller, &request.approval_id, answer)
        .await;
    let decision = if approve { "approve" } else { "deny" };
    match &outcome {
        Ok(approval) => tracing::info!(
            target: "toolgate::audit",
            rpc = RESOLVE,
            outcome = "answered",
            approval = approval.id.as_str(),
            identity = caller.id.as_str(),
            tenant = caller.tenant.as_str(),
            method = caller.method.name(),
            session = approval.session_id.as_str(),
            tool = approval.tool.as_str(),
            decision,
            "approval answered"
        ),
        Err(refused) => tracing::warn!(
            target: "toolgate::audit",
            rpc = RESOLVE,
            outcome = "refused",
            approval = request.approval_id.as_str(),
            identity = caller.id.as_str(),
            tenant = caller.tenant.as_str(),
            method = caller.method.name(),
            decision,
            reason = %refused,
            "approval not answered"
        ),
    }
    let approval = outcome?;
    Ok(pb::ResolveApprovalResponse {
        approval: Some(convert::approval(approval)),
    })
}

/// What every approval id is (32 hexadecimal digits): nothing else reaches the store's keys or
/// the audit log.
fn checked_approval_id(id: &str) -> Result<(), RequestError> {
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(RequestError::Invalid(
            "approval_id: not an approval id (32 hexadecimal digits)".to_owned(),
        ));
    }
    Ok(())
}

/// The pending approvals `caller` may see, of one session or all, or the one named: arguments
/// whole up to `whole_bytes` (half a reply), oldest first, the rest as previews.
pub(super) async fn list(
    approvals: &Approvals,
    caller: &Caller,
    request: pb::ListApprovalsRequest,
    whole_bytes: usize,
) -> Result<pb::ListApprovalsResponse, RequestError> {
    if !request.approval_id.is_empty() {
        checked_approval_id(&request.approval_id)?;
    }
    let listing = Listing {
        session_id: Some(request.session_id.as_str()).filter(|s| !s.is_empty()),
        approval_id: Some(request.approval_id.as_str()).filter(|s| !s.is_empty()),
        // One named approval comes whole: it is at most what its batch sent.
        whole_bytes: match request.approval_id.is_empty() {
            true => whole_bytes,
            false => usize::MAX,
        },
    };
    let approvals = approvals.list_anywhere(caller, &listing).await?;
    Ok(pb::ListApprovalsResponse {
        approvals: approvals.into_iter().map(convert::approval).collect(),
    })
}

/// What a watcher has seen: the backlog's ids, so an approval requested between subscribing and
/// listing is sent once.
struct Watch {
    updates: tokio::sync::broadcast::Receiver<Update>,
    caller: Arc<Caller>,
    session: Option<String>,
    sent: std::collections::HashSet<String>,
    shutdown: Cancel,
    /// Its place among the server's watchers, freed when the stream goes.
    _slot: WatchSlot,
}

/// The pending approvals `caller` may answer, then each change, until the client leaves, the
/// server shuts down, or the watcher falls too far behind (`ABORTED`: watch again).
pub(super) async fn watch(
    approvals: &Approvals,
    caller: Arc<Caller>,
    request: pb::WatchApprovalsRequest,
    shutdown: Cancel,
) -> Result<WatchStream, RequestError> {
    let slot = approvals.watch_slot(&caller)?;
    // Subscribed before listing: nothing requested in between is missed.
    let updates = approvals.subscribe();
    let session = Some(request.session_id).filter(|s| !s.is_empty());
    // Previews, as the updates that follow: a backlog of large arguments is not copied whole
    // for every watcher.
    let listing = Listing {
        session_id: session.as_deref(),
        ..Listing::default()
    };
    let backlog = approvals.list_anywhere(&caller, &listing).await?;
    let sent = backlog.iter().map(|a| a.id.clone()).collect();
    let backlog = backlog.into_iter().map(|approval| {
        Ok(pb::WatchApprovalsResponse {
            update: Some(pb::watch_approvals_response::Update::Requested(
                convert::approval(approval),
            )),
        })
    });
    let watch = Watch {
        updates,
        caller,
        session,
        sent,
        shutdown,
        _slot: slot,
    };
    let live = futures::stream::unfold(Some(watch), |watch| async move {
        let mut watch = watch?;
        loop {
            let update = tokio::select! {
                () = watch.shutdown.cancelled() => return None,
                update = watch.updates.recv() => update,
            };
            let update = match update {
                Ok(update) => update,
                Err(RecvError::Closed) => return None,
                Err(RecvError::Lagged(missed)) => {
                    let status = Status::aborted(format!(
                        "this watch fell {missed} updates behind and was ended; watch again (the pending approvals come first)"
                    ));
                    return Some((Err(status), None));
                }
            };
            if !update.visible_to(&watch.caller)
                || watch
                    .session
                    .as_deref()
                    .is_some_and(|s| s != update.session_id())
            {
                continue;
            }
            use pb::watch_approvals_response::Update as Pb;
            let reply = match update {
                Update::Requested(approval) => {
                    if watch.sent.remove(&approval.id) {
                        continue;
                    }
                    Pb::Requested(convert::approval(approval))
                }
                Update::Ended(ended) => {
                    watch.sent.remove(&ended.approval_id);
                    Pb::Resolved(convert::approval_ended(ended))
                }
            };
            let reply = pb::WatchApprovalsResponse {
                update: Some(reply),
            };
            return Some((Ok(reply), Some(watch)));
        }
    });
    Ok(Box::pin(futures::stream::iter(backlog).chain(live)))
}
