//! Interactive approvals: a call that a hook or permission rule answered `ask` for, in a batch
//! that asked for interactive approvals, waits here for a person's answer. `Approvals` is the
//! server's registry of pending approvals (plain state behind one lock, no I/O): a batch opens
//! one and waits on its `Ticket`; `ResolveApproval` answers it; `ListApprovals` and
//! `WatchApprovals` read it. Dropping a ticket (its batch ended or went away) withdraws it.
//! With servers sharing a session store, an `ApprovalRelay` (the store's) records the pending
//! approvals for every server to list, claims each answer once wherever it is given, and carries
//! answers and updates to the other servers; a waiting call also polls it for its answer.
//! Invariant: an approval is answered at most once, only by an approver or an admin of its
//! tenant, or by the identity that sent its batch where the asking hook or rule's `AskPolicy`
//! lets it (off by default: an ask its asker can answer is no gate); every approval that stops
//! pending is announced once.

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;

use crate::identity::{Caller, Method, Role};
use crate::json;
use crate::session::StoreError;
use crate::tools::BoxFuture;

/// How often a call waiting on a relayed approval asks the store for its answer, in case the
/// message carrying it was missed.
const POLL: Duration = Duration::from_secs(2);

/// How long an answered id is remembered, so answering it again is "already answered" rather
/// than "not found".
const ANSWERED_KEPT: Duration = Duration::from_secs(15 * 60);
/// At most this many answered ids are remembered.
const MAX_ANSWERED: usize = 10_000;
/// Updates buffered per watcher before a slow one misses some (it is told, and lists again).
const UPDATE_BUFFER: usize = 1024;
/// Bytes of an approval's arguments (as JSON text) that watchers are sent: the update buffer
/// holds `UPDATE_BUFFER` of them for the slowest watcher, so each is kept small; the whole
/// arguments are had by id from `ListApprovals`.
pub const PREVIEW_BYTES: usize = 2048;

/// A call waiting for a person's answer, as approvers see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Whether that identity may answer it itself (`AskPolicy::requester_may_answer`); absent
    /// in a record of an older server: no.
    #[serde(default)]
    pub requester_may_answer: bool,
    /// Whether an answer may be remembered for the session (`AskPolicy::remember`).
    #[serde(default = "yes")]
    pub remember_allowed: bool,
    /// `arguments` is a preview (their JSON text, cut): see `Approval::preview`.
    #[serde(default)]
    pub arguments_cut: bool,
    /// Who may see it besides approvers and admins.
    requester: Requester,
}

fn yes() -> bool {
    true
}

impl Approval {
    /// The approval as watchers are sent it: arguments whose JSON text is longer than
    /// `PREVIEW_BYTES` become that text, cut (`arguments_cut`); the whole arguments are not
    /// copied.
    pub fn preview(&self) -> Approval {
        let (arguments, cut) = match cut_arguments(&self.arguments, PREVIEW_BYTES) {
            Some(preview) => (preview, true),
            None => (self.arguments.clone(), self.arguments_cut),
        };
        Approval {
            id: self.id.clone(),
            tenant: self.tenant.clone(),
            session_id: self.session_id.clone(),
            index: self.index,
            call_id: self.call_id.clone(),
            tool: self.tool.clone(),
            arguments,
            reason: self.reason.clone(),
            source: self.source.clone(),
            expires_at: self.expires_at,
            requested_by: self.requested_by.clone(),
            requester_may_answer: self.requester_may_answer,
            remember_allowed: self.remember_allowed,
            arguments_cut: cut,
            requester: self.requester.clone(),
        }
    }
}

/// `arguments` as a preview of at most `max` bytes of JSON text, or `None` when they fit.
fn cut_arguments(arguments: &Value, max: usize) -> Option<Value> {
    // Cheap first: most arguments are far under the bound.
    if json::held_bytes(arguments) <= max {
        return None;
    }
    let text = json::preview(arguments, max);
    (text.len() > max).then_some(Value::String(text))
}

/// What the operator allows for the asks of one hook or rule (`[approvals]`, and a rule's own
/// `requester_may_answer` and `remember`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AskPolicy {
    /// The identity that sent the batch may answer its own approvals, as well as approvers and
    /// admins. Off by default: with it, an agent steered by what it read can approve its own
    /// call; it fits only a person at the agent's own terminal.
    pub requester_may_answer: bool,
    /// An answer may be remembered for the rest of the session (`remember = SESSION`).
    pub remember: bool,
}

impl Default for AskPolicy {
    fn default() -> Self {
        AskPolicy {
            requester_may_answer: false,
            remember: true,
        }
    }
}

/// The `AskPolicy` of each hook or rule, by the name it asks under, and the one for the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AskPolicies {
    default: AskPolicy,
    by_source: HashMap<String, AskPolicy>,
    /// What the hook or rule under each name is configured as (`version`).
    versions: HashMap<String, String>,
}

impl AskPolicies {
    /// `default` for every hook and rule until `set` says otherwise.
    pub fn new(default: AskPolicy) -> Self {
        AskPolicies {
            default,
            by_source: HashMap::new(),
            versions: HashMap::new(),
        }
    }

    /// The hook or rule under `source` is configured as `version` (a digest of its settings):
    /// its remembered answers are kept under both, so an answer given to one rule is not taken
    /// for another's once the config changes what the name means.
    pub fn version(&mut self, source: impl Into<String>, version: impl Into<String>) {
        self.versions.insert(source.into(), version.into());
    }

    /// The name an answer to `source`'s asks is remembered under.
    pub fn remembered_as(&self, source: &str) -> String {
        match self.versions.get(source) {
            Some(version) => format!("{source}@{version}"),
            None => source.to_owned(),
        }
    }

    /// The asks recorded under `source` follow `policy` (the stricter of the two, if two hooks
    /// or rules share the name).
    pub fn set(&mut self, source: impl Into<String>, policy: AskPolicy) {
        let entry = self.by_source.entry(source.into()).or_insert(policy);
        *entry = entry.stricter(policy);
    }

    /// The policy of the asks recorded under `source`.
    pub fn of(&self, source: &str) -> AskPolicy {
        self.by_source.get(source).copied().unwrap_or(self.default)
    }
}

impl AskPolicy {
    /// The stricter of two policies (two hooks or rules recorded under one name).
    pub fn stricter(self, other: AskPolicy) -> AskPolicy {
        AskPolicy {
            requester_may_answer: self.requester_may_answer && other.requester_may_answer,
            remember: self.remember && other.remember,
        }
    }
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Remember {
    #[default]
    Once,
    /// For the rest of the session.
    Session,
}

/// How an approval stopped pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum How {
    Answered,
    /// An earlier `Remember::Session` answer answered it; nobody was asked.
    Remembered,
    Expired,
    /// Its batch went away.
    Withdrawn,
}

impl How {
    /// As logs and spans name it.
    pub fn name(self) -> &'static str {
        match self {
            How::Answered => "answered",
            How::Remembered => "remembered",
            How::Expired => "expired",
            How::Withdrawn => "withdrawn",
        }
    }
}

/// An approval that stopped pending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
            Update::Requested(approval) => approval.requester.shows_to(viewer),
            Update::Ended(ended) => ended.requester.shows_to(viewer),
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
    /// The caller sent the approval's batch, and its asker does not let the requester answer.
    #[error(
        "approval {0} may be answered only by an approver or an admin of its tenant, not by the identity that sent its batch"
    )]
    OwnApproval(String),
    /// `remember = SESSION` for an ask whose hook or rule forbids remembering.
    #[error(
        "approval {0} may not be remembered for the session: its rule forbids it; answer it with remember = ONCE"
    )]
    RememberForbidden(String),
    /// A deny reason longer than `MAX_REASON_CHARS` (the model reads it; logs and lists keep it).
    #[error("the reason for approval {0} is {1} characters; at most {MAX_REASON_CHARS} are taken")]
    ReasonTooLong(String, usize),
    /// The store the servers share approvals through cannot be reached (the cause, which is
    /// logged, not sent).
    #[error("the session store is down: approvals of other servers cannot be reached; retry later")]
    StoreDown(String),
}

/// Where approvals meet across servers (the shared session store).
pub trait ApprovalRelay: Send + Sync {
    /// Records a pending approval, for every server to list, until it expires.
    fn open<'a>(&'a self, approval: &'a Approval) -> BoxFuture<'a, Result<(), StoreError>>;
    /// A pending approval, wherever it waits.
    fn peek<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Approval>, StoreError>>;
    /// Takes the approval out of the pending ones, once, with `answer` (kept for the waiting
    /// server to find) or, with `None`, unanswered (expired, withdrawn).
    fn claim<'a>(
        &'a self,
        approval: &'a Approval,
        answer: Option<&'a Answer>,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;
    /// The answer an approval was given, if it was.
    fn answered<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Answer>, StoreError>>;
    /// Every pending approval of `tenant`, previewed: a listing reads whole (`whole`) only
    /// those it carries, so listing a tenant with many large approvals holds their previews.
    fn pending<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, Result<Vec<Previewed>, StoreError>>;
    /// The pending approvals `ids`, whole, in that order (`None`: no longer pending).
    fn whole<'a>(
        &'a self,
        ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Option<Approval>>, StoreError>>;
    /// Tells the other servers.
    fn publish<'a>(&'a self, message: &'a Relayed) -> BoxFuture<'a, Result<(), StoreError>>;
    /// A session's remembered answer for asks about `tool`; `source` names the hook or rule
    /// that asked and the identity that sent the batch.
    fn remembered<'a>(
        &'a self,
        tenant: &'a str,
        session: &'a str,
        tool: &'a str,
        source: &'a str,
    ) -> BoxFuture<'a, Result<Option<bool>, StoreError>>;
    /// Remembers one, with the session's other state.
    fn remember<'a>(
        &'a self,
        tenant: &'a str,
        session: &'a str,
        tool: &'a str,
        source: &'a str,
        approve: bool,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// What claiming an approval found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// It was pending: this claim took it.
    Claimed,
    /// It was answered already.
    Answered,
    /// It is not pending (expired, withdrawn, or never was).
    Missing,
}

/// A message between servers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Relayed {
    /// The server that sent it (its own come back and are skipped).
    pub from: String,
    pub update: RelayedUpdate,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RelayedUpdate {
    /// For watchers.
    Requested(Approval),
    /// For watchers.
    Ended(Ended),
    /// For the server whose batch waits on approval `id`.
    Answered { id: String, answer: Answer },
}

/// A pending approval as the relay lists it: its preview, and how many bytes its whole
/// arguments hold (as `json::held_bytes` counts them).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Previewed {
    pub preview: Approval,
    pub whole_bytes: usize,
}

impl Previewed {
    pub fn of(approval: &Approval) -> Self {
        Previewed {
            preview: approval.preview(),
            whole_bytes: json::held_bytes(&approval.arguments),
        }
    }
}

/// Which pending approvals a listing takes, and how much of their arguments it carries.
#[derive(Debug, Clone, Default)]
pub struct Listing<'a> {
    /// Only this session's.
    pub session_id: Option<&'a str>,
    /// Only this one.
    pub approval_id: Option<&'a str>,
    /// Bytes of whole arguments (as `json::held_bytes` counts them) it carries, oldest first;
    /// the approvals past them come as previews (`Approval::preview`). 0: previews only.
    pub whole_bytes: usize,
}

impl Listing<'_> {
    fn takes(&self, approval: &Approval, viewer: &Caller) -> bool {
        approval.requester.shows_to(viewer)
            && self.session_id.is_none_or(|s| approval.session_id == s)
            && self.approval_id.is_none_or(|id| approval.id == id)
    }

    /// `approval`, whole while `left` holds its arguments (taken from `left`), else previewed.
    fn carry(&self, approval: &Approval, left: &mut usize) -> Approval {
        let bytes = json::held_bytes(&approval.arguments);
        if bytes <= *left {
            *left -= bytes;
            return approval.clone();
        }
        *left = 0;
        approval.preview()
    }
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Requester {
    tenant: String,
    method: Method,
    id: String,
}

#[derive(Debug, PartialEq, Eq)]
enum Access {
    Allowed,
    /// The identity that sent the batch, without the approver or admin role: it may see the
    /// approval, and answer it only where its policy lets it.
    Requester,
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

    /// What `viewer` may do with its approvals: an approver or an admin of its tenant sees and
    /// answers them; the same identity (name and credential kind, so a JWT subject never passes
    /// for a token's id) sees them.
    fn allows(&self, viewer: &Caller) -> Access {
        if viewer.tenant != self.tenant {
            return Access::OtherTenant;
        }
        if viewer.has(Role::Approver) || viewer.has(Role::Admin) {
            Access::Allowed
        } else if viewer.id == self.id && self.method == viewer.method {
            Access::Requester
        } else {
            Access::NotAllowed
        }
    }

    /// Whether `viewer` may see its approvals.
    fn shows_to(&self, viewer: &Caller) -> bool {
        matches!(self.allows(viewer), Access::Allowed | Access::Requester)
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
    /// Who may answer, and what may be remembered, per asking hook or rule.
    policies: AskPolicies,
    state: Mutex<State>,
    updates: broadcast::Sender<Update>,
    /// The store approvals are shared through, when servers share sessions.
    relay: std::sync::OnceLock<Arc<dyn ApprovalRelay>>,
    /// This server, in relayed messages (random).
    server: String,
    /// `WatchApprovals` streams open, in all and per tenant and identity.
    watchers: Mutex<Watchers>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("timeout", &self.inner.timeout)
            .field("pending", &self.inner.state.lock().pending.len())
            .field("relayed", &self.inner.relay.get().is_some())
            .finish()
    }
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals::new(Duration::from_secs(300))
    }
}

impl Approvals {
    /// Approvals that expire unanswered after `timeout`, with the default `AskPolicy`.
    pub fn new(timeout: Duration) -> Self {
        Approvals::with_policies(timeout, AskPolicies::default())
    }

    /// Approvals that expire unanswered after `timeout`, each asker's under `policies`.
    pub fn with_policies(timeout: Duration, policies: AskPolicies) -> Self {
        let (updates, _) = broadcast::channel(UPDATE_BUFFER);
        let server = crate::tools::unguessable_name("")
            .unwrap_or_else(|_| format!("pid-{}-{:?}", std::process::id(), SystemTime::now()));
        Approvals {
            inner: Arc::new(Inner {
                timeout,
                policies,
                state: Mutex::new(State::default()),
                updates,
                relay: std::sync::OnceLock::new(),
                server,
                watchers: Mutex::default(),
            }),
        }
    }

    /// Shares approvals with the other servers through `relay` (once, at start).
    pub fn attach(&self, relay: Arc<dyn ApprovalRelay>) {
        let _ = self.inner.relay.set(relay);
    }

    /// The relay, when approvals are shared.
    pub(crate) fn relay(&self) -> Option<&Arc<dyn ApprovalRelay>> {
        self.inner.relay.get()
    }

    /// The policy of the asks recorded under `source`.
    pub fn policy(&self, source: &str) -> AskPolicy {
        self.inner.policies.of(source)
    }

    /// The name an answer to `source`'s asks is remembered under (`AskPolicies::remembered_as`).
    pub fn remembered_as(&self, source: &str) -> String {
        self.inner.policies.remembered_as(source)
    }

    /// How long an approval waits for an answer at most.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Tells this server's watchers, and the other servers'. A requested approval goes out as
    /// its preview: the update buffer keeps what the slowest watcher has not read.
    fn notify(&self, update: Update) {
        let _ = self.inner.updates.send(update.clone());
        if let Some(relay) = self.relay().cloned() {
            let message = Relayed {
                from: self.inner.server.clone(),
                update: match update {
                    Update::Requested(approval) => RelayedUpdate::Requested(approval),
                    Update::Ended(ended) => RelayedUpdate::Ended(ended),
                },
            };
            spawn_quietly(async move { relay.publish(&message).await });
        }
    }

    /// Opens an approval for `request`, announced to watchers; the ticket waits for its answer.
    /// Shared, it is recorded in the store before this returns, so any server lists it.
    pub async fn open(&self, request: &Request) -> Result<Ticket, OpenError> {
        let id = crate::tools::unguessable_name("").map_err(OpenError::Random)?;
        let left = request.until.saturating_duration_since(Instant::now());
        let policy = self.policy(&request.source);
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
            requester_may_answer: policy.requester_may_answer,
            remember_allowed: policy.remember,
            arguments_cut: false,
            requester: Requester::of(&request.caller),
        };
        if let Some(relay) = self.relay() {
            // A batch that goes away while this is recorded leaves nothing behind in the store.
            let mut unheld = Unheld {
                relay: relay.clone(),
                approval: Some(approval.clone()),
            };
            relay.open(&approval).await.map_err(OpenError::Store)?;
            unheld.approval = None;
        }
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
        self.notify(Update::Requested(approval.preview()));
        Ok(Ticket {
            approvals: self.clone(),
            approval,
            answer: rx,
            until: request.until,
            done: false,
        })
    }

    /// Answers approval `id`, pending on this server, as `resolver`; returns the approval as it
    /// was pending. (`resolve_anywhere` also reaches the other servers'.)
    pub fn resolve(
        &self,
        resolver: &Caller,
        id: &str,
        answer: Answer,
    ) -> Result<Approval, ResolveError> {
        let approval = {
            let state = self.inner.state.lock();
            match state.pending.get(id) {
                Some(pending) => pending.approval.clone(),
                None if state.answered_ids.contains(id) => {
                    return Err(ResolveError::AlreadyAnswered(id.to_owned()));
                }
                None => return Err(ResolveError::NotFound(id.to_owned())),
            }
        };
        allowed(&approval, resolver, &answer)?;
        if self.deliver(id, answer) {
            return Ok(approval);
        }
        // Answered or withdrawn between the two looks.
        Err(match self.inner.state.lock().answered_ids.contains(id) {
            true => ResolveError::AlreadyAnswered(id.to_owned()),
            false => ResolveError::NotFound(id.to_owned()),
        })
    }

    /// Answers approval `id` as `resolver`, wherever its batch waits: claimed once in the
    /// store, then delivered here or relayed to the server it waits on.
    pub async fn resolve_anywhere(
        &self,
        resolver: &Caller,
        id: &str,
        answer: Answer,
    ) -> Result<Approval, ResolveError> {
        let Some(relay) = self.relay().cloned() else {
            return self.resolve(resolver, id, answer);
        };
        let local = self.local(id);
        let approval = match local {
            Some(approval) => approval,
            None => match relay.peek(id).await.map_err(down)? {
                Some(approval) => approval,
                None => {
                    let answered = relay.answered(id).await.map_err(down)?;
                    return Err(match answered {
                        Some(_) => ResolveError::AlreadyAnswered(id.to_owned()),
                        None => ResolveError::NotFound(id.to_owned()),
                    });
                }
            },
        };
        allowed(&approval, resolver, &answer)?;
        match relay.claim(&approval, Some(&answer)).await.map_err(down)? {
            Claim::Claimed => {}
            Claim::Answered => return Err(ResolveError::AlreadyAnswered(id.to_owned())),
            Claim::Missing => return Err(ResolveError::NotFound(id.to_owned())),
        }
        if !self.deliver(id, answer.clone()) {
            let message = Relayed {
                from: self.inner.server.clone(),
                update: RelayedUpdate::Answered {
                    id: id.to_owned(),
                    answer,
                },
            };
            // Missed, the waiting server's poll finds the answer in the store.
            if let Err(error) = relay.publish(&message).await {
                tracing::warn!(target: "toolgate::approvals", %error, approval = id, "an answer was not relayed; its server finds it in the store");
            }
        }
        Ok(approval)
    }

    /// A pending approval of this server.
    fn local(&self, id: &str) -> Option<Approval> {
        let state = self.inner.state.lock();
        state.pending.get(id).map(|p| p.approval.clone())
    }

    /// Gives approval `id`, pending here, its answer; `false` when it is not pending here.
    fn deliver(&self, id: &str, answer: Answer) -> bool {
        let pending = {
            let mut state = self.inner.state.lock();
            let Some(pending) = state.pending.remove(id) else {
                return false;
            };
            state.note_answered(id.to_owned(), Instant::now());
            pending
        };
        let ended = Ended::of_pending(&pending.approval, How::Answered, Some(&answer));
        // The waiter may have gone meanwhile: then the answer is moot.
        let _ = pending.answer.send(answer);
        self.notify(Update::Ended(ended));
        true
    }

    /// A message from another server: an answer for a call waiting here, or news for watchers.
    pub fn receive(&self, relayed: Relayed) {
        if relayed.from == self.inner.server {
            return;
        }
        match relayed.update {
            RelayedUpdate::Answered { id, answer } => {
                self.deliver(&id, answer);
            }
            RelayedUpdate::Requested(approval) => {
                // Previewed by its server already, unless that one is older.
                let _ = self
                    .inner
                    .updates
                    .send(Update::Requested(approval.preview()));
            }
            RelayedUpdate::Ended(ended) => {
                let _ = self.inner.updates.send(Update::Ended(ended));
            }
        }
    }

    /// The pending approvals `viewer` may see on this server, of one session or all, oldest
    /// first, whole.
    pub fn list(&self, viewer: &Caller, session_id: Option<&str>) -> Vec<Approval> {
        let listing = Listing {
            session_id,
            whole_bytes: usize::MAX,
            ..Listing::default()
        };
        self.list_here(viewer, &listing)
    }

    /// The pending approvals `viewer` may see on this server that `listing` takes, oldest first.
    fn list_here(&self, viewer: &Caller, listing: &Listing<'_>) -> Vec<Approval> {
        let state = self.inner.state.lock();
        let mut visible: Vec<(u64, &Approval)> = state
            .pending
            .values()
            .filter(|p| listing.takes(&p.approval, viewer))
            .map(|p| (p.seq, &p.approval))
            .collect();
        visible.sort_by_key(|(seq, _)| *seq);
        // Copied under the lock, so only what the listing carries is copied.
        let mut left = listing.whole_bytes;
        visible
            .into_iter()
            .map(|(_, approval)| listing.carry(approval, &mut left))
            .collect()
    }

    /// The pending approvals `viewer` may see that `listing` takes, with the other servers'
    /// too when approvals are shared (soonest to expire first: the order they arrived in, but
    /// for those the request's deadline cut short).
    pub async fn list_anywhere(
        &self,
        viewer: &Caller,
        listing: &Listing<'_>,
    ) -> Result<Vec<Approval>, ResolveError> {
        let mut listed = self.list_here(viewer, listing);
        let Some(relay) = self.relay() else {
            return Ok(listed);
        };
        // One named approval is read alone, not with every pending one of the tenant.
        if let Some(id) = listing.approval_id {
            if listed.is_empty()
                && let Some(found) = relay.peek(id).await.map_err(down)?
                && listing.takes(&found, viewer)
            {
                let mut left = listing.whole_bytes;
                listed.push(listing.carry(&found, &mut left));
            }
            return Ok(listed);
        }
        let seen: HashSet<String> = listed.iter().map(|a| a.id.clone()).collect();
        let mut shared: Vec<Previewed> = relay
            .pending(&viewer.tenant)
            .await
            .map_err(down)?
            .into_iter()
            .filter(|p| !seen.contains(&p.preview.id) && listing.takes(&p.preview, viewer))
            .collect();
        // Oldest first take what is left of the listing's whole bytes; only those whose
        // preview was cut are read again, whole.
        shared.sort_by_key(|p| p.preview.expires_at);
        let mut left = listing
            .whole_bytes
            .saturating_sub(listed.iter().map(|a| json::held_bytes(&a.arguments)).sum());
        let mut wanted = Vec::new();
        for (at, previewed) in shared.iter().enumerate() {
            if previewed.whole_bytes > left {
                break;
            }
            left -= previewed.whole_bytes;
            if previewed.preview.arguments_cut {
                wanted.push(at);
            }
        }
        let ids: Vec<String> = wanted
            .iter()
            .map(|&at| shared[at].preview.id.clone())
            .collect();
        let wholes = if ids.is_empty() {
            Vec::new()
        } else {
            relay.whole(&ids).await.map_err(down)?
        };
        let mut gone = HashSet::new();
        for (&at, whole) in wanted.iter().zip(wholes) {
            match whole {
                Some(whole) if whole.id == shared[at].preview.id => shared[at].preview = whole,
                // Answered or expired since it was listed: no longer pending.
                _ => {
                    gone.insert(at);
                }
            }
        }
        listed.extend(
            shared
                .into_iter()
                .enumerate()
                .filter(|(at, _)| !gone.contains(at))
                .map(|(_, p)| p.preview),
        );
        listed.sort_by_key(|a| a.expires_at);
        Ok(listed)
    }

    /// A place for one more watcher of `caller`'s: at most `MAX_WATCHES` watch at once, one
    /// identity at most `IDENTITY_WATCHES`, and once half of them do, a tenant at most
    /// `TENANT_WATCHES` (as batches share the server), so one caller holding many watches
    /// leaves room for its tenant's approvers and for other tenants.
    pub fn watch_slot(&self, caller: &Caller) -> Result<WatchSlot, WatchesFull> {
        // The parts kept apart (no text joins them ambiguously: a tenant may hold a '/').
        let identity = format!(
            "{}\u{0}{}\u{0}{}",
            caller.method.name(),
            caller.tenant,
            caller.id
        );
        let mut watchers = self.inner.watchers.lock();
        if watchers.total >= MAX_WATCHES {
            return Err(WatchesFull::Server(MAX_WATCHES));
        }
        let held = |map: &HashMap<String, usize>, key: &str| map.get(key).copied().unwrap_or(0);
        // Always: one identity (an agent) cannot take its own tenant's approvers' places.
        if held(&watchers.identities, &identity) >= IDENTITY_WATCHES {
            return Err(WatchesFull::Identity(IDENTITY_WATCHES));
        }
        if watchers.total >= MAX_WATCHES / 2
            && held(&watchers.tenants, &caller.tenant) >= TENANT_WATCHES
        {
            return Err(WatchesFull::Tenant(TENANT_WATCHES));
        }
        watchers.total += 1;
        *watchers.tenants.entry(caller.tenant.clone()).or_default() += 1;
        *watchers.identities.entry(identity.clone()).or_default() += 1;
        Ok(WatchSlot {
            approvals: self.clone(),
            tenant: caller.tenant.clone(),
            identity,
        })
    }

    /// Every update from now on (a watcher filters with `Update::visible_to`).
    pub fn subscribe(&self) -> broadcast::Receiver<Update> {
        self.inner.updates.subscribe()
    }

    /// Announces an ask answered by a remembered decision.
    pub fn announce(&self, ended: Ended) {
        self.notify(Update::Ended(ended));
    }

    /// How many approvals are pending here.
    pub fn pending(&self) -> usize {
        self.inner.state.lock().pending.len()
    }

    /// Takes `approval` out of the pending ones (expired or withdrawn), announcing it; `false`
    /// when it was no longer pending (answered meanwhile).
    fn withdraw(&self, approval: &Approval, how: How) -> bool {
        let Some(pending) = self.inner.state.lock().pending.remove(&approval.id) else {
            return false;
        };
        let ended = Ended::of_pending(&pending.approval, how, None);
        self.notify(Update::Ended(ended));
        true
    }

    /// Takes an answer found in the store (missed as a message) for a call waiting here.
    fn take_found(&self, approval: &Approval, answer: &Answer) {
        let removed = {
            let mut state = self.inner.state.lock();
            let removed = state.pending.remove(&approval.id).is_some();
            if removed {
                state.note_answered(approval.id.clone(), Instant::now());
            }
            removed
        };
        if removed {
            let ended = Ended::of_pending(approval, How::Answered, Some(answer));
            self.notify(Update::Ended(ended));
        }
    }
}

/// The store could not be reached: logged with its cause.
fn down(error: StoreError) -> ResolveError {
    tracing::warn!(target: "toolgate::approvals", %error, "the session store did not answer for approvals");
    ResolveError::StoreDown(error.to_string())
}

/// Whether `resolver` may answer `approval` with `answer`.
fn allowed(approval: &Approval, resolver: &Caller, answer: &Answer) -> Result<(), ResolveError> {
    match approval.requester.allows(resolver) {
        Access::Allowed => {}
        Access::Requester if approval.requester_may_answer => {}
        // Seen, but not the asker's to answer: told so, since it may see the approval anyway.
        Access::Requester => return Err(ResolveError::OwnApproval(approval.id.clone())),
        // Another tenant learns nothing, not even that it exists.
        Access::OtherTenant => return Err(ResolveError::NotFound(approval.id.clone())),
        Access::NotAllowed => return Err(ResolveError::NotAllowed(approval.id.clone())),
    }
    if answer.remember == Remember::Session && !approval.remember_allowed {
        return Err(ResolveError::RememberForbidden(approval.id.clone()));
    }
    let reason = answer.reason.chars().count();
    if reason > MAX_REASON_CHARS {
        return Err(ResolveError::ReasonTooLong(approval.id.clone(), reason));
    }
    Ok(())
}

/// Runs a store operation in the background, logging a failure.
fn spawn_quietly(op: impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            if let Err(error) = op.await {
                tracing::warn!(target: "toolgate::approvals", %error, "an approval update was not shared with the other servers");
            }
        });
    }
}

/// An approval recorded in the store that no ticket holds yet: taken out again if dropped.
struct Unheld {
    relay: Arc<dyn ApprovalRelay>,
    approval: Option<Approval>,
}

impl Drop for Unheld {
    fn drop(&mut self) {
        if let Some(approval) = self.approval.take() {
            let relay = self.relay.clone();
            spawn_quietly(async move { relay.claim(&approval, None).await.map(|_| ()) });
        }
    }
}

/// The longest reason an answer may give, in characters: the model reads it, and the audit
/// line, the last decisions and every watcher carry it.
pub const MAX_REASON_CHARS: usize = 1000;

/// How many `WatchApprovals` streams a server serves at once.
pub const MAX_WATCHES: usize = 256;
/// How many one tenant holds once half of `MAX_WATCHES` are taken.
pub const TENANT_WATCHES: usize = 128;
/// How many one identity (within its tenant and credential kind) holds at once.
pub const IDENTITY_WATCHES: usize = 32;

/// `WatchApprovals` streams open.
#[derive(Debug, Default)]
struct Watchers {
    total: usize,
    tenants: HashMap<String, usize>,
    identities: HashMap<String, usize>,
}

impl Watchers {
    fn leave(&mut self, tenant: &str, identity: &str) {
        self.total = self.total.saturating_sub(1);
        for (map, key) in [
            (&mut self.tenants, tenant),
            (&mut self.identities, identity),
        ] {
            if let Some(n) = map.get_mut(key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

/// Why no place for a watcher was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WatchesFull {
    #[error("this server already serves {0} WatchApprovals streams; close one, or list instead")]
    Server(usize),
    #[error(
        "this tenant already holds {0} WatchApprovals streams, its share while the server is half full; close one, or list instead"
    )]
    Tenant(usize),
    #[error(
        "this identity already holds {0} WatchApprovals streams, its share; close one, or list instead"
    )]
    Identity(usize),
}

/// A watcher's place; freed when dropped.
pub struct WatchSlot {
    approvals: Approvals,
    tenant: String,
    identity: String,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut watchers = self.approvals.inner.watchers.lock();
        watchers.leave(&self.tenant, &self.identity);
    }
}

/// Why an approval could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("no randomness for its id: {0}")]
    Random(#[source] std::io::Error),
    /// The cause is for the log: the text reaches the model.
    #[error("the session store is down")]
    Store(#[source] StoreError),
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
    /// the ticket: the approval is withdrawn.) Shared, it also asks the store now and then, in
    /// case the message with its answer was missed, and claims its own expiry there, so an
    /// answer given at the last moment is never lost.
    pub async fn wait(&mut self) -> Waited {
        let relay = self.approvals.relay().cloned();
        let mut poll = tokio::time::interval_at(Instant::now() + POLL, POLL);
        let waited = loop {
            tokio::select! {
                answer = &mut self.answer => break match answer {
                    Ok(answer) => Waited::Answered(answer),
                    // The registry dropped it without an answer: only an expiry does that.
                    Err(_) => Waited::Expired,
                },
                _ = poll.tick(), if relay.is_some() => {
                    if let Some(relay) = &relay
                        && let Ok(Some(answer)) = relay.answered(&self.approval.id).await
                    {
                        self.approvals.take_found(&self.approval, &answer);
                        break Waited::Answered(answer);
                    }
                }
                () = tokio::time::sleep_until(self.until) => break self.expire(relay.as_ref()).await,
            }
        };
        self.done = true;
        waited
    }

    /// The approval's time is up: unless it was answered meanwhile, here or in the store.
    async fn expire(&mut self, relay: Option<&Arc<dyn ApprovalRelay>>) -> Waited {
        if let Some(relay) = relay {
            match relay.claim(&self.approval, None).await {
                Ok(Claim::Answered) => {
                    if let Ok(Some(answer)) = relay.answered(&self.approval.id).await {
                        self.approvals.take_found(&self.approval, &answer);
                        return Waited::Answered(answer);
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(target: "toolgate::approvals", %error, approval = %self.approval.id, "an expired approval could not be taken out of the store; it expires there too");
                }
            }
        }
        if self.approvals.withdraw(&self.approval, How::Expired) {
            Waited::Expired
        } else {
            // Answered here just as it expired: the answer wins.
            match self.answer.try_recv() {
                Ok(answer) => Waited::Answered(answer),
                Err(_) => Waited::Expired,
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if self.approvals.withdraw(&self.approval, How::Withdrawn)
            && let Some(relay) = self.approvals.relay().cloned()
        {
            let approval = self.approval.clone();
            spawn_quietly(async move { relay.claim(&approval, None).await.map(|_| ()) });
        }
    }
}
