//! An ask, answered: in a batch with interactive approvals, a call that a hook or a permission
//! rule asked about (both in step 2, before the breaker admits the call) waits here for a
//! person's answer, or a remembered one; each outcome is an event, an audit line, a span event
//! and a metric.

use serde_json::Value;
use tokio::time::Instant;

use super::steps::{Refusal, Step};
use crate::approvals::{Answer, Ended, How, Remember, Request, Waited};
use crate::dispatch::events::Event;
use crate::json;
use crate::tools::ErrorClass;

impl Step<'_> {
    /// Asks a person whether the call may run, as `source` wanted (`reason`), about `input`.
    /// `Ok(Some)`: approved with edited arguments; `Ok(None)`: approved as is; `Err`: the
    /// refusal (denied, expired, or the batch was cancelled while it waited).
    pub(super) async fn ask_person(
        &self,
        source: &str,
        reason: &str,
        input: &Value,
    ) -> Result<Option<Value>, Refusal> {
        let (scope, tool) = (self.scope, self.tool);
        let p = scope.pipeline;
        if !scope.options.interactive_approvals {
            return Err(Refusal::Refused(
                ErrorClass::Blocked,
                crate::safety::hooks::not_interactive(reason),
            ));
        }
        let mut arguments = input.clone();
        p.redactor.redact_value(&mut arguments);
        let shown = arguments.clone();
        let request = Request {
            caller: scope.caller.clone(),
            session_id: scope.session.id().to_owned(),
            index: self.call.index,
            call_id: self.call.id.clone(),
            tool: tool.to_owned(),
            arguments,
            reason: json::truncate_chars(&p.redactor.redact(reason), p.preview_chars),
            source: source.to_owned(),
            until: self.approval_deadline(),
        };
        let policy = p.approvals.policy(source);
        let remembered = match policy.remember {
            true => self.remembered_answer(source).await,
            // A rule that forbids remembering asks every time, whatever was said before.
            false => None,
        };
        if let Some(approve) = remembered {
            let ended = Ended::remembered(&request, approve);
            self.approval_ended(&ended).await;
            p.approvals.announce(ended);
            return match approve {
                true => Ok(None),
                false => Err(denied(tool, "an earlier answer for this session")),
            };
        }
        let mut ticket = p.approvals.open(&request).await.map_err(|e| {
            let cause = std::error::Error::source(&e).map(ToString::to_string);
            tracing::warn!(target: "toolgate::approvals", error = %e, cause = cause.as_deref().unwrap_or(""), tool, "an approval could not be opened; the call is refused");
            Refusal::Refused(
                ErrorClass::Blocked,
                format!("tool '{tool}' needs approval, and none could be asked for: {e}"),
            )
        })?;
        // Until it ends here, a drop (the client left) still records its end.
        let mut unanswered = Unanswered {
            step: self,
            approval: Some(ticket.approval().clone()),
        };
        self.emit_approval(Event::ApprovalRequested(ticket.approval().clone()))
            .await;
        tracing::info!(target: "toolgate::approvals", approval = %ticket.approval().id, session = %request.session_id, call = %self.call.id, tool, source, "a call waits for approval");
        let waited = tokio::select! {
            biased;
            () = scope.cancel.cancelled() => None,
            waited = ticket.wait() => Some(waited),
        };
        let approval = ticket.approval().clone();
        unanswered.approval = None;
        // Dropped unanswered (the batch was cancelled): withdrawn, and announced as such.
        drop(ticket);
        match waited {
            None => {
                let ended = Ended::of_pending(&approval, How::Withdrawn, None);
                self.approval_ended(&ended).await;
                Err(Refusal::Cancelled(format!(
                    "tool '{tool}' was cancelled while it waited for approval: {}",
                    scope.cancel.reason()
                )))
            }
            Some(Waited::Expired) => {
                let ended = Ended::of_pending(&approval, How::Expired, None);
                self.approval_ended(&ended).await;
                let waited = crate::duration::readable(p.approvals.timeout());
                let text = match scope.options.deadline {
                    Some(deadline) if deadline <= Instant::now() => format!(
                        "Nobody approved the call to tool '{tool}' before the request's deadline; it did not run"
                    ),
                    _ => format!(
                        "Nobody approved the call to tool '{tool}' within {waited}; it did not run"
                    ),
                };
                Err(Refusal::Refused(ErrorClass::ApprovalTimeout, text))
            }
            Some(Waited::Answered(answer)) => {
                let ended = Ended::of_pending(&approval, How::Answered, Some(&answer));
                self.approval_ended(&ended).await;
                let Answer {
                    approve,
                    reason,
                    updated_arguments,
                    remember,
                    ..
                } = answer;
                // Checked again where it is kept: an answer relayed by an older server may ask.
                if remember == Remember::Session && policy.remember {
                    self.remember_answer(source, approve).await;
                }
                if approve {
                    Ok(updated_arguments
                        .filter(Value::is_object)
                        .map(|mut edited| {
                            keep_unseen(&mut edited, &shown, input);
                            edited
                        }))
                } else {
                    let why = if reason.is_empty() {
                        "no reason given".to_owned()
                    } else {
                        reason
                    };
                    Err(denied(tool, &why))
                }
            }
        }
    }

    /// An answer given earlier in the session with `remember = SESSION`: this server's, or the
    /// store's for a shared session (the store unreachable, nothing is remembered: a person is
    /// asked).
    async fn remembered_answer(&self, source: &str) -> Option<bool> {
        let scope = self.scope;
        let source = &remembered_as(source, scope);
        match scope.pipeline.approvals.relay() {
            Some(relay) if scope.session.is_shared() => {
                let tenant = &scope.caller.tenant;
                let asked = relay.remembered(tenant, scope.session.id(), self.tool, source);
                asked.await.unwrap_or_else(|error| {
                    tracing::warn!(target: "toolgate::approvals", %error, "remembered answers could not be read; asking");
                    None
                })
            }
            _ => scope.session.session().remembered_answer(self.tool, source),
        }
    }

    /// Remembers an answer for the rest of the session, where the session lives.
    async fn remember_answer(&self, source: &str, approve: bool) {
        let scope = self.scope;
        let source = &remembered_as(source, scope);
        match scope.pipeline.approvals.relay() {
            Some(relay) if scope.session.is_shared() => {
                let tenant = &scope.caller.tenant;
                let kept = relay.remember(tenant, scope.session.id(), self.tool, source, approve);
                if let Err(error) = kept.await {
                    tracing::warn!(target: "toolgate::approvals", %error, "an answer to remember was not stored; later asks ask again");
                }
            }
            _ => scope
                .session
                .session()
                .remember_answer(self.tool, source, approve),
        }
    }

    /// When an approval of this call expires: `[approvals] timeout` from now, never past the
    /// request's deadline.
    fn approval_deadline(&self) -> Instant {
        let until = Instant::now() + self.scope.pipeline.approvals.timeout();
        match self.scope.options.deadline {
            Some(deadline) => until.min(deadline),
            None => until,
        }
    }

    /// The end of an approval: its event (and span event), audit line and metric.
    async fn approval_ended(&self, ended: &Ended) {
        self.record_ended(ended);
        self.emit_approval(Event::ApprovalResolved(ended.clone()))
            .await;
    }

    /// An approval's end's audit line and metric.
    fn record_ended(&self, ended: &Ended) {
        let p = self.scope.pipeline;
        let decision = match ended.approved {
            Some(true) => "approve",
            Some(false) => "deny",
            None => "none",
        };
        let how = ended.how.name();
        p.metrics.approval(self.tool, outcome_name(ended));
        tracing::info!(
            target: "toolgate::audit",
            action = "approval",
            approval = ended.approval_id.as_str(),
            tenant = ended.tenant.as_str(),
            session = ended.session_id.as_str(),
            call = ended.call_id.as_str(),
            tool = ended.tool.as_str(),
            source = ended.source.as_str(),
            decision,
            how,
            by = ended.by.as_str(),
            reason = ended.reason.as_str(),
            arguments_updated = ended.arguments_updated,
            "approval ended"
        );
    }
}

/// An approval this call waits on: dropped before it ends here (the batch's future went away
/// with its client), its withdrawal is still audited, counted and put on the span.
struct Unanswered<'s, 'a> {
    step: &'s Step<'a>,
    approval: Option<crate::approvals::Approval>,
}

impl Drop for Unanswered<'_, '_> {
    fn drop(&mut self) {
        if let Some(approval) = self.approval.take() {
            let ended = Ended::of_pending(&approval, How::Withdrawn, None);
            self.step.record_ended(&ended);
            // No client is left to tell; the trace still shows the withdrawal.
            self.step.trace.record(&Event::ApprovalResolved(ended));
        }
    }
}

/// What a remembered answer is kept under besides the tool: the hook or rule that asked, as it
/// is configured now, and the identity that sent the batch (an answer for one agent's calls is
/// not another's).
fn remembered_as(source: &str, scope: &super::CallScope<'_>) -> String {
    let caller = scope.caller;
    let source = scope.pipeline.approvals.remembered_as(source);
    format!("{source}\u{0}{}:{}", caller.method.name(), caller.id)
}

/// What the model reads when a person denied the call.
fn denied(tool: &str, why: &str) -> Refusal {
    Refusal::Refused(
        ErrorClass::ApprovalDenied,
        format!("A person denied the call to tool '{tool}': {why}"),
    )
}

/// How an approval ended, as its metric names it.
fn outcome_name(ended: &Ended) -> &'static str {
    match (ended.how, ended.approved) {
        (How::Answered, Some(true)) => "approved",
        (How::Answered, _) => "denied",
        (How::Remembered, Some(true)) => "remembered_approved",
        (How::Remembered, _) => "remembered_denied",
        (How::Expired, _) => "expired",
        (How::Withdrawn, _) => "withdrawn",
    }
}

/// Where edited arguments keep a value as the person was shown it, and what they were shown was
/// redacted, the value the call came with: an edit of other fields does not send a redaction's
/// placeholder to the tool. (A value the person changed is theirs, whatever it says.)
fn keep_unseen(edited: &mut Value, shown: &Value, original: &Value) {
    match (edited, shown, original) {
        (Value::Object(edited), Value::Object(shown), Value::Object(original)) => {
            for (key, value) in edited.iter_mut() {
                if let (Some(shown), Some(original)) = (shown.get(key), original.get(key)) {
                    keep_unseen(value, shown, original);
                }
            }
        }
        (Value::Array(edited), Value::Array(shown), Value::Array(original)) => {
            for (value, (shown, original)) in edited.iter_mut().zip(shown.iter().zip(original)) {
                keep_unseen(value, shown, original);
            }
        }
        (edited, shown, original) => {
            if edited == shown && shown != original {
                *edited = original.clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::keep_unseen;
    use serde_json::json;

    #[test]
    fn an_edit_keeps_the_redacted_values_it_left_alone() {
        let original = json!({"path": "a.txt", "password": "hunter2-secret",
                              "headers": ["Bearer abc.def", "x"], "note": "token=s3cret"});
        let shown = json!({"path": "a.txt", "password": "[REDACTED:secret_field]",
                           "headers": ["Bearer [REDACTED:bearer]", "x"], "note": "[REDACTED:kv]"});
        // The person changed the path and the note, and left the rest as shown.
        let mut edited = json!({"path": "b.txt", "password": "[REDACTED:secret_field]",
                                "headers": ["Bearer [REDACTED:bearer]", "y"], "note": "none",
                                "added": "[REDACTED:secret_field]"});
        keep_unseen(&mut edited, &shown, &original);
        assert_eq!(
            edited,
            json!({"path": "b.txt", "password": "hunter2-secret",
                   "headers": ["Bearer abc.def", "y"], "note": "none",
                   "added": "[REDACTED:secret_field]"})
        );
    }
}
