//! Interactive approvals: a call that a hook or permission rule answered `ask` for, in a batch
//! that asked for interactive approvals, waits here for a person's answer. `Approvals` is the
//! server's registry of pending approvals (plain state behind one lock, no I/O): a batch opens
//! one and waits on its `Ticket`; `ResolveApproval` answers it; `ListApprovals` and
//! `WatchApprovals` read it. Dropping a ticket (its batch ended or went away) withdraws it.
//! Invariant: an approval is answered at most once, only by a caller of its tenant who sent its
//! batch, is an approver or is an admin; every approval that stops pending is announced once.

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;

use crate::identity::{Caller, Method, Role};

/// How long an answered id is remembered, so answering it again is "already answered" rather
/// than "not found".
const ANSWERED_KEPT: Duration = Duration::from_secs(15 * 60);
/// At most this many answered ids are remembered.
const MAX_ANSWERED: usize = 10_000;
/// Updates buffered per watcher before a slow one misses some (it is told, and lists again).
const UPDATE_BUFFER: usize = 1024;

/// A call waiting for a person's answer, as approvers see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    /// Unguessable (128 random bits).
    pub id: String,
    pub tenant: String,
    pub session_id: String,
    pub index: usize,
    pub call_id: String,
    /// The tool that would run.
    pub tool: String,
    /// The input the tool would get, redacted.
    pub arguments: Value,
    /// What the hook or rule said.
    pub reason: String,
    /// Which hook or rule asked.
    pub source: String,
    pub expires_at: SystemTime,
    /// The identity that sent the batch.
    pub requested_by: String,
    /// Who may see and answer it besides approvers and admins.
    requester: Requester,
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub approve: bool,
    /// Who answered (their identity).
    pub by: String,
    pub reason: String,
    /// Approve only: run with these arguments instead (a JSON object).
    pub updated_arguments: Option<Value>,
    pub remember: Remember,
}

/// Whether an answer also answers later asks of the same source about the same tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Remember {
    #[default]
    Once,
    /// For the rest of the session.
    Session,
}

/// How an approval stopped pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    Answered,
    /// An earlier `Remember::Session` answer answered it; nobody was asked.
    Remembered,
    Expired,
    /// Its batch went away.
    Withdrawn,
}

/// An approval that stopped pending.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// Empty when `Remembered`.
    pub approval_id: String,
    pub tenant: String,
    pub session_id: String,
    pub index: usize,
    pub call_id: String,
    pub tool: String,
    pub source: String,
    /// `Some(true)` approved, `Some(false)` denied, `None` expired or withdrawn.
    pub approved: Option<bool>,
    pub by: String,
    pub reason: String,
    pub how: How,
    pub arguments_updated: bool,
    pub remember: Remember,
    /// Who may see it (the approval's batch's sender).
    requester: Requester,
}

impl Ended {
    /// The end of `approval` (its answer, if any).
    pub fn of_pending(approval: &Approval, how: How, answer: Option<&Answer>) -> Self {
        Ended {
            approval_id: approval.id.clone(),
            tenant: approval.tenant.clone(),
            session_id: approval.session_id.clone(),
            index: approval.index,
            call_id: approval.call_id.clone(),
            tool: approval.tool.clone(),
            source: approval.source.clone(),
            approved: answer.map(|a| a.approve),
            by: answer.map(|a| a.by.clone()).unwrap_or_default(),
            reason: answer.map(|a| a.reason.clone()).unwrap_or_default(),
            how,
            arguments_updated: answer.is_some_and(|a| a.updated_arguments.is_some()),
            remember: answer.map(|a| a.remember).unwrap_or_default(),
            requester: approval.requester.clone(),
        }
    }

    /// A call answered by a remembered decision, without an approval.
    pub fn remembered(request: &Request, approve: bool) -> Self {
        Ended {
            approval_id: String::new(),
            tenant: request.caller.tenant.clone(),
            session_id: request.session_id.clone(),
            index: request.index,
            call_id: request.call_id.clone(),
            tool: request.tool.clone(),
            source: request.source.clone(),
            approved: Some(approve),
            by: "remembered".to_owned(),
            reason: String::new(),
            how: How::Remembered,
            arguments_updated: false,
            remember: Remember::Session,
            requester: Requester::of(&request.caller),
        }
    }
}

/// A change watchers see.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Requested(Approval),
    Ended(Ended),
}

impl Update {
    /// Whether `viewer` may see it.
    pub fn visible_to(&self, viewer: &Caller) -> bool {
        match self {
            Update::Requested(approval) => approval.requester.allows(viewer) == Access::Allowed,
            Update::Ended(ended) => ended.requester.allows(viewer) == Access::Allowed,
        }
    }

    /// The session it is about.
    pub fn session_id(&self) -> &str {
        match self {
            Update::Requested(approval) => &approval.session_id,
            Update::Ended(ended) => &ended.session_id,
        }
    }
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// Unknown, expired, withdrawn, or of another tenant.
    #[error("no pending approval {0}")]
    NotFound(String),
    #[error("approval {0} was already answered")]
    AlreadyAnswered(String),
    #[error(
        "approval {0} may be answered by the identity that sent its batch, an approver or an admin of its tenant"
    )]
    NotAllowed(String),
}

/// What a batch asks a person about.
#[derive(Debug, Clone)]
pub struct Request {
    pub caller: Arc<Caller>,
    pub session_id: String,
    pub index: usize,
    pub call_id: String,
    pub tool: String,
    pub arguments: Value,
    pub reason: String,
    pub source: String,
    /// When it expires unanswered.
    pub until: Instant,
}

/// Who sent an approval's batch: who may see and answer it besides approvers and admins.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requester {
    tenant: String,
    method: Method,
    id: String,
}

#[derive(Debug, PartialEq, Eq)]
enum Access {
    Allowed,
    OtherTenant,
    NotAllowed,
}

impl Requester {
    fn of(caller: &Caller) -> Self {
        Requester {
            tenant: caller.tenant.clone(),
            method: caller.method,
            id: caller.id.clone(),
        }
    }

    /// Whether `viewer` may see and answer its approvals: the same identity (name and
    /// credential kind, so a JWT subject never passes for a token's id), an approver or an
    /// admin, of its tenant.
    fn allows(&self, viewer: &Caller) -> Access {
        if viewer.tenant != self.tenant {
            return Access::OtherTenant;
        }
        let same = viewer.id == self.id && self.method == viewer.method;
        if same || viewer.has(Role::Approver) || viewer.has(Role::Admin) {
            Access::Allowed
        } else {
            Access::NotAllowed
        }
    }
}

struct Pending {
    approval: Approval,
    answer: oneshot::Sender<Answer>,
    /// Order of arrival, for listing oldest first.
    seq: u64,
}

#[derive(Default)]
struct State {
    pending: HashMap<String, Pending>,
    /// Ids answered lately, oldest first, and the same as a set.
    answered: VecDeque<(Instant, String)>,
    answered_ids: HashSet<String>,
    seq: u64,
}

impl State {
    fn note_answered(&mut self, id: String, now: Instant) {
        while let Some((at, _)) = self.answered.front()
            && (now.duration_since(*at) > ANSWERED_KEPT || self.answered.len() >= MAX_ANSWERED)
        {
            if let Some((_, old)) = self.answered.pop_front() {
                self.answered_ids.remove(&old);
            }
        }
        self.answered_ids.insert(id.clone());
        self.answered.push_back((now, id));
    }
}

/// The server's pending approvals. Cheap to clone.
#[derive(Clone)]
pub struct Approvals {
    inner: Arc<Inner>,
}

struct Inner {
    timeout: Duration,
    state: Mutex<State>,
    updates: broadcast::Sender<Update>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("timeout", &self.inner.timeout)
            .field("pending", &self.inner.state.lock().pending.len())
            .finish()
    }
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals::new(Duration::from_secs(300))
    }
}

impl Approvals {
    /// Approvals that expire unanswered after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        let (updates, _) = broadcast::channel(UPDATE_BUFFER);
        Approvals {
            inner: Arc::new(Inner {
                timeout,
                state: Mutex::new(State::default()),
                updates,
            }),
        }
    }

    /// How long an approval waits for an answer at most.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Opens an approval for `request`, announced to watchers; the ticket waits for its answer.
    pub fn open(&self, request: &Request) -> std::io::Result<Ticket> {
        let id = crate::tools::unguessable_name("")?;
        let left = request.until.saturating_duration_since(Instant::now());
        let approval = Approval {
            id: id.clone(),
            tenant: request.caller.tenant.clone(),
            session_id: request.session_id.clone(),
            index: request.index,
            call_id: request.call_id.clone(),
            tool: request.tool.clone(),
            arguments: request.arguments.clone(),
            reason: request.reason.clone(),
            source: request.source.clone(),
            expires_at: SystemTime::now() + left,
            requested_by: request.caller.id.clone(),
            requester: Requester::of(&request.caller),
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.inner.state.lock();
            state.seq += 1;
            let seq = state.seq;
            state.pending.insert(
                id.clone(),
                Pending {
                    approval: approval.clone(),
                    answer: tx,
                    seq,
                },
            );
        }
        let _ = self.inner.updates.send(Update::Requested(approval.clone()));
        Ok(Ticket {
            approvals: self.clone(),
            approval,
            answer: rx,
            until: request.until,
            done: false,
        })
    }

    /// Answers approval `id` as `resolver`; returns the approval as it was pending.
    pub fn resolve(
        &self,
        resolver: &Caller,
        id: &str,
        answer: Answer,
    ) -> Result<Approval, ResolveError> {
        let mut state = self.inner.state.lock();
        let Some(pending) = state.pending.get(id) else {
            return Err(if state.answered_ids.contains(id) {
                ResolveError::AlreadyAnswered(id.to_owned())
            } else {
                ResolveError::NotFound(id.to_owned())
            });
        };
        match pending.approval.requester.allows(resolver) {
            Access::Allowed => {}
            // Another tenant learns nothing, not even that it exists.
            Access::OtherTenant => return Err(ResolveError::NotFound(id.to_owned())),
            Access::NotAllowed => return Err(ResolveError::NotAllowed(id.to_owned())),
        }
        let Some(pending) = state.pending.remove(id) else {
            return Err(ResolveError::NotFound(id.to_owned()));
        };
        state.note_answered(id.to_owned(), Instant::now());
        drop(state);
        let ended = Ended::of_pending(&pending.approval, How::Answered, Some(&answer));
        // The waiter may have gone between the lookup and now: then the answer is moot, but it
        // was given, and the call is withdrawn by its batch anyway.
        let _ = pending.answer.send(answer);
        let _ = self.inner.updates.send(Update::Ended(ended));
        Ok(pending.approval)
    }

    /// The pending approvals `viewer` may answer, of one session or all, oldest first.
    pub fn list(&self, viewer: &Caller, session_id: Option<&str>) -> Vec<Approval> {
        let state = self.inner.state.lock();
        let mut visible: Vec<(u64, Approval)> = state
            .pending
            .values()
            .filter(|p| p.approval.requester.allows(viewer) == Access::Allowed)
            .filter(|p| session_id.is_none_or(|s| p.approval.session_id == s))
            .map(|p| (p.seq, p.approval.clone()))
            .collect();
        visible.sort_by_key(|(seq, _)| *seq);
        visible.into_iter().map(|(_, a)| a).collect()
    }

    /// Every update from now on (a watcher filters with `Update::visible_to`).
    pub fn subscribe(&self) -> broadcast::Receiver<Update> {
        self.inner.updates.subscribe()
    }

    /// Announces an ask answered by a remembered decision.
    pub fn announce(&self, ended: Ended) {
        let _ = self.inner.updates.send(Update::Ended(ended));
    }

    /// How many approvals are pending.
    pub fn pending(&self) -> usize {
        self.inner.state.lock().pending.len()
    }

    /// Takes `id` out of the pending ones (expired or withdrawn), announcing it; `false` when it
    /// was no longer pending (answered meanwhile).
    fn withdraw(&self, approval: &Approval, how: How) -> bool {
        let Some(pending) = self.inner.state.lock().pending.remove(&approval.id) else {
            return false;
        };
        let ended = Ended::of_pending(&pending.approval, how, None);
        let _ = self.inner.updates.send(Update::Ended(ended));
        true
    }
}

/// How waiting for an answer ended.
#[derive(Debug)]
pub enum Waited {
    Answered(Answer),
    /// Nobody answered in time.
    Expired,
}

/// A batch's hold on one open approval: waits for its answer; dropped unanswered, withdraws it.
pub struct Ticket {
    approvals: Approvals,
    approval: Approval,
    answer: oneshot::Receiver<Answer>,
    until: Instant,
    /// Answered or expired: nothing to withdraw.
    done: bool,
}

impl Ticket {
    /// The approval as approvers see it.
    pub fn approval(&self) -> &Approval {
        &self.approval
    }

    /// Waits for the answer, or for the approval to expire. (A caller that stops waiting drops
    /// the ticket: the approval is withdrawn.)
    pub async fn wait(&mut self) -> Waited {
        let waited = tokio::select! {
            answer = &mut self.answer => match answer {
                Ok(answer) => Waited::Answered(answer),
                // The registry dropped it without an answer: only an expiry does that.
                Err(_) => Waited::Expired,
            },
            () = tokio::time::sleep_until(self.until) => {
                if self.approvals.withdraw(&self.approval, How::Expired) {
                    Waited::Expired
                } else {
                    // Answered just as it expired: the answer wins.
                    match self.answer.try_recv() {
                        Ok(answer) => Waited::Answered(answer),
                        Err(_) => Waited::Expired,
                    }
                }
            }
        };
        self.done = true;
        waited
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            self.approvals.withdraw(&self.approval, How::Withdrawn);
        }
    }
}
