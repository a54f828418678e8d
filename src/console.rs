//! The web console (docs/console.md), on the admin listener under `/console/`: the approvals
//! inbox for the people who answer approvals, live (server-sent events from the approvals
//! registry's updates, as `WatchApprovals` reads them), with Approve, Deny with a reason, and
//! Approve with edited arguments (checked against the tool's schema in the page and here).
//! Server-rendered HTML (`pages.rs`) and one small script of our own, both built into the
//! binary; a strict Content-Security-Policy on every answer. Who may look: `signin.rs`.

mod pages;
mod signin;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::Uri;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt as _};
use maud::Markup;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::config::ConsoleConfig;
use crate::front::auth::{Authenticator, Denied, audit_text};
use crate::front::http1::Accepted;
use crate::front::per_address::{Turn, Turns};
use signin::{SignIns, Viewer, Who};
use toolgate_core::approvals::{Answer, Ended, How, Listing, Remember, ResolveError, Update};
use toolgate_core::dispatch::Dispatcher;
use toolgate_core::identity::{Caller, Role};
use toolgate_core::tools::Definition;
use toolgate_remotes::Remotes;

/// Decisions kept for "Last decisions", per tenant, and the tenants kept (the one whose last
/// decision is oldest goes first): one tenant's flood does not push out another's.
const DECISIONS_KEPT: usize = 50;
const DECISION_TENANTS: usize = 1000;
/// Decisions shown.
const DECISIONS_SHOWN: usize = 20;
/// Bytes of whole arguments the inbox carries (oldest first); past them, previews.
const WHOLE_BYTES: usize = 1 << 20;
/// Pending approvals the inbox shows at once (oldest first), and a live stream starts with.
const MAX_CARDS: usize = 50;
/// The longest input schema a card carries for the page's check, in bytes.
const MAX_SCHEMA_BYTES: usize = 32 * 1024;
/// The longest edited arguments taken, in bytes.
const MAX_EDIT_BYTES: usize = 256 * 1024;
/// Bytes of whole arguments the page of one approval carries.
const ONE_WHOLE_BYTES: usize = 16 << 20;
/// The longest form a change may send: edited arguments (URL-encoded, up to three bytes for
/// one) and the rest.
const MAX_FORM_BYTES: usize = 3 * MAX_EDIT_BYTES + 16 * 1024;
/// How long a client may take to send a form, whole.
const FORM_DEADLINE: Duration = Duration::from_secs(10);
/// Live inbox streams open at once: the admin listener's other connections stay for the
/// probes, the scraper and pages.
const MAX_STREAMS: usize = 16;
/// How often a live stream with nothing to send asks whether its sign-in still lets it in.
const STREAM_CHECK: Duration = Duration::from_secs(15);
/// Live inbox streams one identity holds at once.
const STREAMS_PER_IDENTITY: usize = 4;
/// How long one live stream lasts; the browser opens another.
const STREAM_LIFETIME: Duration = Duration::from_secs(600);

/// What the console serves with.
pub struct Console {
    dispatcher: Dispatcher,
    /// Where a quarantined tool's change is accepted; `None` unless `remote_registration`
    /// is enabled (as for `AcceptToolChange`).
    remotes: Option<Arc<Remotes>>,
    sign_ins: SignIns,
    decisions: Mutex<Decisions>,
    /// `limits.max_json_depth`, for edited arguments.
    max_depth: usize,
    /// `console.allowed_hosts`; `None`: any.
    hosts: Option<Vec<String>>,
    /// Live inbox streams' places, and how many each identity holds.
    streams: Arc<tokio::sync::Semaphore>,
    streams_held: Arc<Turns<(String, String)>>,
}

impl Console {
    /// The console of `dispatcher`'s approvals, judging callers with `auth`; `tls` when the
    /// admin listener serves TLS. Keeps the last decisions from now on.
    pub fn new(
        dispatcher: Dispatcher,
        remotes: Option<Arc<Remotes>>,
        auth: Arc<Authenticator>,
        config: &ConsoleConfig,
        tls: bool,
        max_depth: usize,
    ) -> Arc<Self> {
        let console = Arc::new(Console {
            sign_ins: SignIns::new(auth, config.session_ttl, config.max_sessions, tls),
            decisions: Mutex::default(),
            max_depth,
            dispatcher,
            remotes,
            hosts: crate::front::hosts::allowed(&config.allowed_hosts),
            streams: Arc::new(tokio::sync::Semaphore::new(MAX_STREAMS)),
            streams_held: Arc::default(),
        });
        let mut updates = console.dispatcher.approvals().subscribe();
        let weak = Arc::downgrade(&console);
        tokio::spawn(async move {
            loop {
                let update = match updates.recv().await {
                    Ok(update) => update,
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                };
                let Some(console) = weak.upgrade() else {
                    return;
                };
                // A person's decisions (and approvals that expired), not the calls a remembered
                // answer let through.
                if let Update::Ended(ended) = update
                    && ended.how != How::Remembered
                {
                    console.decisions.lock().keep(ended);
                }
            }
        });
        console
    }

    /// The console's routes, under `/console/`.
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route(
                "/console",
                get(|| async { Redirect::permanent("/console/") }),
            )
            .route("/console/", get(inbox))
            .route("/console/login", get(login_page).post(login))
            .route("/console/logout", post(logout))
            .route("/console/events", get(events))
            .route("/console/approvals/{id}", get(one_approval).post(answer))
            .route("/console/tools", get(tools))
            .route("/console/batches", get(batches))
            .route("/console/batches/{id}", get(batch))
            .route("/console/sessions", get(sessions))
            .route("/console/sessions/end", post(end_session))
            .route("/console/tools/{name}/accept", post(accept))
            .route("/console/assets/console.js", get(script))
            .route("/console/assets/console.css", get(style))
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                host_guard,
            ))
            .layer(axum::middleware::map_response(secured))
            .with_state(self)
    }

    /// Who sent a request.
    fn who(&self, headers: &HeaderMap, peer: Option<&Accepted>) -> Who {
        self.sign_ins.who(headers, peer.map(|p| p.peer))
    }

    /// The decisions `viewer` may see, newest first.
    fn decisions_for(&self, viewer: &Caller) -> Vec<Ended> {
        let decisions = self.decisions.lock();
        let Some((_, kept)) = decisions.by_tenant.get(&viewer.tenant) else {
            return Vec::new();
        };
        kept.iter()
            .filter(|ended| Update::Ended((*ended).clone()).visible_to(viewer))
            .take(DECISIONS_SHOWN)
            .cloned()
            .collect()
    }

    /// The tool's input schema, as JSON text for the page's check; none past
    /// `MAX_SCHEMA_BYTES` (a remote's word: each card would carry it), which the server alone
    /// checks.
    fn schema_of(&self, tool: &str) -> Option<String> {
        let registry = self.dispatcher.registry();
        let registered = registry.get(tool)?;
        if registered.quarantined().is_some() {
            return None;
        }
        Some(registered.tool.input_schema().to_string())
            .filter(|schema| schema.len() <= MAX_SCHEMA_BYTES)
    }
}

/// Refuses a request whose `Host` is not one the console goes by (DNS rebinding).
async fn host_guard(
    State(console): State<Arc<Console>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match crate::front::hosts::check(request.headers(), console.hosts.as_deref()) {
        Ok(()) => next.run(request).await,
        Err(_) => html(
            StatusCode::FORBIDDEN,
            pages::problem(
                "Forbidden",
                "the Host header names a host this console does not go by (console.allowed_hosts)",
            ),
        ),
    }
}

/// Who looks at a page (with `admin`, a page only admins see: what it is), or the answer
/// turning them away.
fn look(
    console: &Console,
    peer: Option<&Accepted>,
    headers: &HeaderMap,
    admin: Option<&str>,
) -> Result<Viewer, Box<Response>> {
    let viewer = match console.who(headers, peer) {
        Who::Viewer(viewer) => viewer,
        other => return Err(Box::new(turned_away(other, true))),
    };
    if let Some(what) = admin
        && let Some(refused) = admins_only(&viewer, what)
    {
        return Err(Box::new(refused));
    }
    Ok(viewer)
}

/// Who sends a change and its form (read only once the sender is let in), checked for the
/// sign-in's CSRF token and this console's origin (with `admin`, a change only admins make:
/// what it is); or the answer refusing it.
async fn change(
    console: &Console,
    peer: Option<&Accepted>,
    headers: &HeaderMap,
    body: axum::body::Body,
    admin: Option<&str>,
) -> Result<(Viewer, Form), Box<Response>> {
    let viewer = look(console, peer, headers, admin)?;
    let form = Form::read(headers, body).await?;
    if !signin::change_allowed(&viewer, form.get("csrf"), headers) {
        return Err(Box::new(html(
            StatusCode::FORBIDDEN,
            pages::problem(
                "Forbidden",
                "the change did not carry this sign-in's proof (the page's script adds it: \
                 reload the page, or sign in again)",
            ),
        )));
    }
    Ok((viewer, form))
}

/// The answer for a page only admins see, to anyone else.
fn admins_only(viewer: &Viewer, what: &str) -> Option<Response> {
    (!viewer.caller.has(Role::Admin)).then(|| {
        html(
            StatusCode::FORBIDDEN,
            pages::problem("Forbidden", &format!("{what} needs the admin role")),
        )
    })
}

/// A page for a store that could not be reached (the cause is logged, not shown).
fn store_down(error: &dyn std::fmt::Display) -> Response {
    tracing::warn!(%error, "the console could not reach the session store");
    html(
        StatusCode::SERVICE_UNAVAILABLE,
        pages::problem(
            "The session store is down",
            "what this page shows is in the shared store, which did not answer; retry later",
        ),
    )
}

/// The last decisions of each tenant, newest first.
#[derive(Default)]
struct Decisions {
    /// By tenant: when its last decision came (a count), and its decisions.
    by_tenant: std::collections::HashMap<String, (u64, VecDeque<Ended>)>,
    seen: u64,
}

impl Decisions {
    fn keep(&mut self, ended: Ended) {
        self.seen += 1;
        if !self.by_tenant.contains_key(&ended.tenant)
            && self.by_tenant.len() >= DECISION_TENANTS
            && let Some(stalest) = self
                .by_tenant
                .iter()
                .min_by_key(|(_, (last, _))| *last)
                .map(|(tenant, _)| tenant.clone())
        {
            self.by_tenant.remove(&stalest);
        }
        let (last, kept) = self.by_tenant.entry(ended.tenant.clone()).or_default();
        *last = self.seen;
        if kept.len() == DECISIONS_KEPT {
            kept.pop_back();
        }
        kept.push_front(ended);
    }
}

/// The peer of a request, as the admin listener accepted its connection.
type Peer = Option<axum::Extension<Accepted>>;

/// Every answer: a strict Content-Security-Policy (nothing inline, nothing from elsewhere), no
/// framing, no sniffing, no referrer to other sites, no caching.
async fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Not `no-referrer`: under it a browser sends `Origin: null` with a form, and the
        // same-origin check of changes could not tell this console's pages from others.
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// An HTML answer.
fn html(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

/// The answer to a request that is not let in: sign in, or 403 saying why.
fn turned_away(who: Who, wants_html: bool) -> Response {
    match who {
        Who::SignIn if wants_html => Redirect::to("/console/login").into_response(),
        Who::SignIn => (StatusCode::UNAUTHORIZED, "sign in first\n").into_response(),
        Who::Refused(Denied::Unauthenticated(text)) => html(
            StatusCode::UNAUTHORIZED,
            pages::problem("Not signed in", &text),
        ),
        Who::Refused(Denied::PermissionDenied(text)) => {
            html(StatusCode::FORBIDDEN, pages::problem("Forbidden", &text))
        }
        Who::Viewer(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn inbox(
    State(console): State<Arc<Console>>,
    peer: Peer,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let viewer = match look(&console, peer.as_deref(), &headers, None) {
        Ok(viewer) => viewer,
        Err(refused) => return *refused,
    };
    let query = Form::parse(uri.query().unwrap_or_default().as_bytes());
    let notice = query.get("notice").and_then(pages::notice);
    render_inbox(&console, &viewer, notice, None, StatusCode::OK).await
}

/// The inbox for `viewer`, with `problem` (an approval id, the problem, the arguments sent)
/// shown on its card.
async fn render_inbox(
    console: &Console,
    viewer: &Viewer,
    notice: Option<&str>,
    problem: Option<(&str, &str, &str)>,
    status: StatusCode,
) -> Response {
    let listing = Listing {
        session_id: None,
        approval_id: None,
        whole_bytes: WHOLE_BYTES,
    };
    let pending = match console
        .dispatcher
        .approvals()
        .list_anywhere(&viewer.caller, &listing)
        .await
    {
        Ok(pending) => pending,
        Err(error) => return store_down(&error),
    };
    let signed = viewer.csrf.is_some();
    let more = pending.len().saturating_sub(MAX_CARDS);
    let cards = pending
        .iter()
        .take(MAX_CARDS)
        .map(|approval| {
            let mine = problem.filter(|(id, _, _)| *id == approval.id);
            pages::card(
                approval,
                &pages::CardExtras {
                    signed,
                    unfolded: false,
                    schema: console.schema_of(&approval.tool),
                    problem: mine.map(|(_, text, _)| text),
                    edited: mine.map(|(_, _, sent)| sent),
                },
            )
        })
        .collect();
    let decisions = console.decisions_for(&viewer.caller);
    html(
        status,
        pages::inbox(&viewer.caller, signed, notice, cards, more, &decisions),
    )
}

/// The sign-in page, shown to a signed-in person too: one whose browser lost the sign-in's
/// proof (storage cleared, another page's cookie in its place) signs in again here.
async fn login_page() -> Response {
    html(StatusCode::OK, pages::login(None))
}

async fn login(
    State(console): State<Arc<Console>>,
    peer: Peer,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    // A sign-in from another site's page is refused (login CSRF).
    if !signin::same_origin(&headers) {
        return html(
            StatusCode::FORBIDDEN,
            pages::problem(
                "Forbidden",
                "a sign-in must come from this console's own page",
            ),
        );
    }
    let form = match Form::read(&headers, body).await {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let token = form.get("token").unwrap_or_default();
    let addr = peer.as_deref().map(|p| p.peer);
    match console.sign_ins.sign_in(token, addr) {
        Ok(signin::SignedIn {
            caller,
            cookie,
            proof,
        }) => {
            tracing::info!(
                target: "toolgate::audit",
                rpc = signin::RPC,
                outcome = "signed_in",
                identity = audit_text(&caller.id).as_str(),
                tenant = audit_text(&caller.tenant).as_str(),
                method = caller.method.name(),
                peer = ?addr,
                "console sign-in"
            );
            // The proof is handed to the page's script this once, which keeps it for this
            // origin; the page goes on to the inbox.
            let mut response = html(StatusCode::OK, pages::signed_in(&proof));
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(denied) => {
            let (status, text) = match denied {
                Denied::Unauthenticated(text) => (StatusCode::UNAUTHORIZED, text),
                Denied::PermissionDenied(text) => (StatusCode::FORBIDDEN, text),
            };
            html(status, pages::login(Some(&text)))
        }
    }
}

/// Signing out needs no proof (a browser that lost it must still be able to leave), only this
/// console's own page; it ends the sign-ins the request's cookies name.
async fn logout(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if !signin::same_origin(&headers) {
        return html(
            StatusCode::FORBIDDEN,
            pages::problem(
                "Forbidden",
                "signing out must come from this console's own page",
            ),
        );
    }
    let cookie = console.sign_ins.sign_out(&headers);
    let mut response = Redirect::to("/console/login").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// `POST /console/approvals/{id}`: approve, deny with a reason, or approve with edited
/// arguments (checked against the tool's schema here first: a problem is shown on the card and
/// nothing is sent).
async fn answer(
    State(console): State<Arc<Console>>,
    peer: Peer,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let (viewer, form) = match change(&console, peer.as_deref(), &headers, body, None).await {
        Ok(change) => change,
        Err(refused) => return *refused,
    };
    if id.len() > 128 {
        return html(
            StatusCode::BAD_REQUEST,
            pages::problem("Bad request", "that is not an approval id"),
        );
    }
    let reason = form.get("reason").unwrap_or_default().trim();
    let remember = match form.get("remember") {
        Some("session") => Remember::Session,
        _ => Remember::Once,
    };
    let (approve, updated_arguments) = match form.get("decision") {
        Some("approve") => (true, None),
        Some("deny") => (false, None),
        Some("edit") => {
            let sent = form.get("arguments").unwrap_or_default();
            match console.edited(&id, &viewer, sent).await {
                Ok(arguments) => (true, Some(arguments)),
                Err(problem) => {
                    return render_inbox(
                        &console,
                        &viewer,
                        None,
                        Some((&id, &problem, sent)),
                        StatusCode::UNPROCESSABLE_ENTITY,
                    )
                    .await;
                }
            }
        }
        _ => {
            return html(
                StatusCode::BAD_REQUEST,
                pages::problem("Bad request", "the decision is approve, deny or edit"),
            );
        }
    };
    let caller = &viewer.caller;
    let answer = Answer {
        approve,
        by: caller.id.clone(),
        reason: reason.to_owned(),
        updated_arguments,
        remember,
    };
    let edited = answer.updated_arguments.is_some();
    let resolved = console
        .dispatcher
        .approvals()
        .resolve_anywhere(caller, &id, answer)
        .await;
    let outcome = match &resolved {
        Ok(_) => "answered",
        Err(_) => "refused",
    };
    tracing::info!(
        target: "toolgate::audit",
        rpc = signin::RPC,
        outcome,
        identity = audit_text(&caller.id).as_str(),
        tenant = audit_text(&caller.tenant).as_str(),
        method = caller.method.name(),
        approval = audit_text(&id).as_str(),
        decision = if approve { "approve" } else { "deny" },
        edited,
        reason = audit_text(reason).as_str(),
        "console decision"
    );
    match resolved {
        Ok(_) if approve => Redirect::to("/console/?notice=approved").into_response(),
        Ok(_) => Redirect::to("/console/?notice=denied").into_response(),
        Err(ResolveError::NotFound(_) | ResolveError::AlreadyAnswered(_)) => {
            Redirect::to("/console/?notice=gone").into_response()
        }
        Err(error @ ResolveError::StoreDown(_)) => store_down(&error),
        Err(error @ ResolveError::ReasonTooLong(..)) => html(
            StatusCode::UNPROCESSABLE_ENTITY,
            pages::problem("Not taken", &error.to_string()),
        ),
        Err(error) => html(
            StatusCode::FORBIDDEN,
            pages::problem("Not taken", &error.to_string()),
        ),
    }
}

/// `GET /console/approvals/{id}`: one approval with its arguments whole, to read before
/// answering (the inbox shows long ones cut).
async fn one_approval(
    State(console): State<Arc<Console>>,
    peer: Peer,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let viewer = match look(&console, peer.as_deref(), &headers, None) {
        Ok(viewer) => viewer,
        Err(refused) => return *refused,
    };
    let listing = Listing {
        session_id: None,
        approval_id: Some(&id),
        whole_bytes: ONE_WHOLE_BYTES,
    };
    let found = match console
        .dispatcher
        .approvals()
        .list_anywhere(&viewer.caller, &listing)
        .await
    {
        Ok(found) => found,
        Err(error) => return store_down(&error),
    };
    let Some(approval) = found.into_iter().next() else {
        return Redirect::to("/console/?notice=gone").into_response();
    };
    let card = pages::card(
        &approval,
        &pages::CardExtras {
            signed: viewer.csrf.is_some(),
            unfolded: true,
            schema: console.schema_of(&approval.tool),
            problem: None,
            edited: None,
        },
    );
    html(
        StatusCode::OK,
        pages::inbox(
            &viewer.caller,
            viewer.csrf.is_some(),
            None,
            vec![card],
            0,
            &[],
        ),
    )
}

impl Console {
    /// Edited arguments for approval `id`: a JSON object, no deeper than the limit, valid for
    /// the tool's input schema (the engine checks them again, with the rules and hooks).
    async fn edited(&self, id: &str, viewer: &Viewer, sent: &str) -> Result<Value, String> {
        if sent.len() > MAX_EDIT_BYTES {
            return Err(format!(
                "the arguments are {} bytes; at most {MAX_EDIT_BYTES} are taken",
                sent.len()
            ));
        }
        let value: Value =
            serde_json::from_str(sent).map_err(|e| format!("the arguments are not JSON: {e}"))?;
        if !value.is_object() {
            return Err("the arguments must be a JSON object".to_owned());
        }
        if toolgate_core::json::depth(&value) > self.max_depth {
            return Err(format!(
                "the arguments are nested deeper than limits.max_json_depth ({})",
                self.max_depth
            ));
        }
        let listing = Listing {
            session_id: None,
            approval_id: Some(id),
            whole_bytes: 0,
        };
        let tool = self
            .dispatcher
            .approvals()
            .list_anywhere(&viewer.caller, &listing)
            .await
            .ok()
            .and_then(|found| found.into_iter().next())
            .map(|approval| approval.tool)
            .ok_or_else(|| "that approval is no longer pending".to_owned())?;
        let registry = self.dispatcher.registry();
        if let Some(registered) = registry.get(&tool)
            && let Some(problems) = toolgate_core::middleware::violations_of(registered, &value)
        {
            return Err(format!(
                "the arguments do not fit the tool's schema: {problems}"
            ));
        }
        Ok(value)
    }
}

/// `GET /console/tools`: every tool with its source, pin, breaker and health; for admins, each
/// quarantined tool's change, pinned and new side by side.
async fn tools(
    State(console): State<Arc<Console>>,
    peer: Peer,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let viewer = match look(&console, peer.as_deref(), &headers, Some("the tools page")) {
        Ok(viewer) => viewer,
        Err(refused) => return *refused,
    };
    let query = Form::parse(uri.query().unwrap_or_default().as_bytes());
    let notice = query.get("notice").and_then(pages::notice);
    let caller = &viewer.caller;
    let admin = caller.has(Role::Admin);
    let registry = console.dispatcher.registry();
    let health = console
        .dispatcher
        .health()
        .report(tokio::time::Instant::now());
    let rows: Vec<pages::ToolRow<'_>> = registry
        .iter()
        .map(|registered| {
            let quarantined = registered.quarantined();
            let change = match (&registered.pin, admin) {
                (Some(pin), true) => match (&pin.changed_to, &pin.accepted) {
                    (Some(digest), Some(accepted)) => Some((
                        accepted.as_ref(),
                        Definition::of(registered.tool.as_ref()),
                        digest.as_str(),
                    )),
                    _ => None,
                },
                _ => None,
            };
            pages::ToolRow {
                name: registered.name(),
                source: registered.source,
                pin: registered.pin.as_ref().map(|_| match quarantined {
                    Some(_) => "QUARANTINED",
                    None => "PINNED",
                }),
                health: health.iter().find(|h| h.tool == registered.name()),
                change,
            }
        })
        .collect();
    html(
        StatusCode::OK,
        pages::tools(
            caller,
            viewer.csrf.is_some(),
            notice,
            &rows,
            console.remotes.is_some(),
        ),
    )
}

/// `POST /console/tools/{name}/accept`: an admin accepts a quarantined tool's new definition,
/// the one it reviewed (its digest): a change since is refused.
async fn accept(
    State(console): State<Arc<Console>>,
    peer: Peer,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let (viewer, form) = match change(
        &console,
        peer.as_deref(),
        &headers,
        body,
        Some("accepting a tool's change"),
    )
    .await
    {
        Ok(change) => change,
        Err(refused) => return *refused,
    };
    let caller = &viewer.caller;
    let Some(remotes) = &console.remotes else {
        return html(
            StatusCode::FORBIDDEN,
            pages::problem(
                "Forbidden",
                "accepting a tool's change needs remote_registration.enabled",
            ),
        );
    };
    // The change the admin reviewed, by its digest: never whatever came after it.
    let Some(reviewed) = form.get("digest").filter(|d| !d.is_empty()) else {
        return html(
            StatusCode::BAD_REQUEST,
            pages::problem(
                "Bad request",
                "accepting needs the digest of the change you reviewed",
            ),
        );
    };
    let accepted = remotes.accept(&name, Some(reviewed));
    tracing::info!(
        target: "toolgate::audit",
        rpc = signin::RPC,
        outcome = if accepted.is_ok() { "accepted" } else { "refused" },
        identity = audit_text(&caller.id).as_str(),
        tenant = audit_text(&caller.tenant).as_str(),
        method = caller.method.name(),
        tool = audit_text(&name).as_str(),
        digest = audit_text(reviewed).as_str(),
        "console tool change"
    );
    match accepted {
        Ok(()) => Redirect::to("/console/tools?notice=accepted").into_response(),
        Err(error) => html(
            StatusCode::CONFLICT,
            pages::problem("Not accepted", &error.to_string()),
        ),
    }
}

/// `GET /console/batches`: the tenant's recent batches.
async fn batches(State(console): State<Arc<Console>>, peer: Peer, headers: HeaderMap) -> Response {
    let viewer = match look(
        &console,
        peer.as_deref(),
        &headers,
        Some("the batches page"),
    ) {
        Ok(viewer) => viewer,
        Err(refused) => return *refused,
    };
    let flights = console
        .dispatcher
        .flights()
        .map(|f| f.recent(&viewer.caller.tenant));
    html(
        StatusCode::OK,
        pages::batches(&viewer.caller, viewer.csrf.is_some(), flights.as_deref()),
    )
}

/// `GET /console/batches/{id}`: one batch's timeline.
async fn batch(
    State(console): State<Arc<Console>>,
    peer: Peer,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let viewer = match look(
        &console,
        peer.as_deref(),
        &headers,
        Some("the batches page"),
    ) {
        Ok(viewer) => viewer,
        Err(refused) => return *refused,
    };
    let found = id
        .parse::<u64>()
        .ok()
        .and_then(|id| console.dispatcher.flights()?.get(&viewer.caller.tenant, id));
    match found {
        Some(flight) => html(
            StatusCode::OK,
            pages::batch(&viewer.caller, viewer.csrf.is_some(), &flight),
        ),
        None => html(
            StatusCode::NOT_FOUND,
            pages::problem(
                "Not found",
                "no recent batch of your tenant has that number",
            ),
        ),
    }
}

/// `GET /console/sessions?id=`: a session's memory and trajectory.
async fn sessions(
    State(console): State<Arc<Console>>,
    peer: Peer,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let viewer = match look(
        &console,
        peer.as_deref(),
        &headers,
        Some("the sessions page"),
    ) {
        Ok(viewer) => viewer,
        Err(refused) => return *refused,
    };
    let query = Form::parse(uri.query().unwrap_or_default().as_bytes());
    let notice = query.get("notice").and_then(pages::notice);
    let caller = &viewer.caller;
    let id = query.get("id").map(str::trim).filter(|id| !id.is_empty());
    let view = match id {
        None => None,
        Some(id) => {
            if toolgate_core::session::validate_session_name(id).is_err() {
                return html(
                    StatusCode::BAD_REQUEST,
                    pages::problem("Bad request", "that is not a session id"),
                );
            }
            let memory = match console.dispatcher.session_memory(&caller.tenant, id).await {
                Ok(memory) => memory,
                Err(error) => return store_down(&error),
            };
            let trajectory = console
                .dispatcher
                .flights()
                .map(|f| {
                    f.recent(&caller.tenant)
                        .into_iter()
                        .filter(|flight| flight.session == id)
                        .collect()
                })
                .unwrap_or_default();
            Some(pages::SessionView {
                id,
                memory,
                trajectory,
                may_end: caller.has(Role::Admin),
            })
        }
    };
    html(
        StatusCode::OK,
        pages::sessions(caller, viewer.csrf.is_some(), notice, view.as_ref()),
    )
}

/// `POST /console/sessions/end`: an admin ends one of its tenant's sessions.
async fn end_session(
    State(console): State<Arc<Console>>,
    peer: Peer,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let (viewer, form) = match change(
        &console,
        peer.as_deref(),
        &headers,
        body,
        Some("ending a session"),
    )
    .await
    {
        Ok(change) => change,
        Err(refused) => return *refused,
    };
    let caller = &viewer.caller;
    let id = form.get("id").unwrap_or_default();
    if toolgate_core::session::validate_session_name(id).is_err() {
        return html(
            StatusCode::BAD_REQUEST,
            pages::problem("Bad request", "that is not a session id"),
        );
    }
    let ended = console.dispatcher.end_session(&caller.tenant, id).await;
    tracing::info!(
        target: "toolgate::audit",
        rpc = signin::RPC,
        outcome = match &ended { Ok(true) => "ended", Ok(false) => "not_live", Err(_) => "store_down" },
        identity = audit_text(&caller.id).as_str(),
        tenant = audit_text(&caller.tenant).as_str(),
        method = caller.method.name(),
        session = audit_text(id).as_str(),
        "console end session"
    );
    let back = |notice: &str| {
        let id: String = url::form_urlencoded::byte_serialize(id.as_bytes()).collect();
        Redirect::to(&format!("/console/sessions?id={id}&notice={notice}")).into_response()
    };
    match ended {
        Ok(true) => back("ended"),
        Ok(false) => back("not-live"),
        Err(error) => store_down(&error),
    }
}

/// `GET /console/events`: the inbox's changes as they happen, for the viewer: `requested`
/// (the new card's HTML) and `ended` (the approval's id, who ended it and the decision's HTML).
async fn events(State(console): State<Arc<Console>>, peer: Peer, headers: HeaderMap) -> Response {
    let viewer = match console.who(&headers, peer.as_deref()) {
        Who::Viewer(viewer) => viewer,
        other => return turned_away(other, false),
    };
    let approvals = console.dispatcher.approvals();
    let Some(place) = StreamPlace::take(&console, &viewer.caller) else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many live inbox streams are open; the page updates when you reload it\n",
        )
            .into_response();
    };
    let slot = match approvals.watch_slot(&viewer.caller) {
        Ok(slot) => slot,
        Err(full) => return (StatusCode::SERVICE_UNAVAILABLE, format!("{full}\n")).into_response(),
    };
    let updates = approvals.subscribe();
    // What is pending now, after subscribing: an approval raised between the page's listing
    // and this stream comes in one or the other (the page skips a card it has).
    let listing = Listing {
        session_id: None,
        approval_id: None,
        whole_bytes: 0,
    };
    let pending = match approvals.list_anywhere(&viewer.caller, &listing).await {
        Ok(pending) => pending,
        Err(error) => return store_down(&error),
    };
    let now: Vec<Result<Event, Infallible>> = pending
        .iter()
        .take(MAX_CARDS)
        .map(|approval| Ok(requested(&console, &viewer, approval)))
        .collect();
    let asks = Asks {
        headers,
        peer: peer.map(|p| p.peer),
    };
    let stream = futures::stream::iter(now)
        .chain(changes(
            console.clone(),
            viewer,
            asks,
            updates,
            (slot, place),
        ))
        .take_until(tokio::time::sleep(STREAM_LIFETIME));
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// A live inbox stream's place: one of `MAX_STREAMS`, of which one identity holds at most
/// `STREAMS_PER_IDENTITY` (a person's tabs), so one cannot take every place.
struct StreamPlace {
    _place: tokio::sync::OwnedSemaphorePermit,
    _turn: Turn<(String, String)>,
}

impl StreamPlace {
    fn take(console: &Console, caller: &Caller) -> Option<StreamPlace> {
        let who = (caller.tenant.clone(), caller.id.clone());
        let turn = console.streams_held.take_for(who, STREAMS_PER_IDENTITY)?;
        let place = console.streams.clone().try_acquire_owned().ok()?;
        Some(StreamPlace {
            _place: place,
            _turn: turn,
        })
    }
}

/// What a live stream's request presented, asked again before each event: a stream ends when
/// its sign-in does (signed out, expired, its credential no longer accepted).
struct Asks {
    headers: HeaderMap,
    peer: Option<std::net::SocketAddr>,
}

/// The events of `updates` `viewer` may see, while its watch slot is held and its request's
/// credentials still let it in.
fn changes(
    console: Arc<Console>,
    viewer: Viewer,
    asks: Asks,
    updates: tokio::sync::broadcast::Receiver<Update>,
    slot: (toolgate_core::approvals::WatchSlot, StreamPlace),
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(
        (console, viewer, asks, updates, slot),
        |(console, viewer, asks, mut updates, slot)| async move {
            loop {
                let still = || {
                    matches!(
                        console.sign_ins.who(&asks.headers, asks.peer),
                        Who::Viewer(_)
                    )
                };
                // Asked again while nothing happens too, so an ended sign-in frees its place.
                let Ok(received) = tokio::time::timeout(STREAM_CHECK, updates.recv()).await else {
                    if still() {
                        continue;
                    }
                    return None;
                };
                let update = match received {
                    Ok(update) => update,
                    // Missed some: the page reloads the inbox.
                    Err(RecvError::Lagged(_)) => {
                        let event = Event::default().event("stale").data("reload");
                        return Some((Ok(event), (console, viewer, asks, updates, slot)));
                    }
                    Err(RecvError::Closed) => return None,
                };
                let caller = &viewer.caller;
                if !update.visible_to(caller) {
                    continue;
                }
                let event = match &update {
                    Update::Requested(approval) if approval.tenant == caller.tenant => {
                        requested(&console, &viewer, approval)
                    }
                    Update::Ended(ended)
                        if ended.tenant == caller.tenant && ended.how != How::Remembered =>
                    {
                        let data = json!({
                            "id": ended.approval_id,
                            "by": pages::shown(&ended.by),
                            "how": ended.how.name(),
                            "html": pages::decision(ended).into_string(),
                        });
                        Event::default().event("ended").data(data.to_string())
                    }
                    _ => continue,
                };
                if !still() {
                    return None;
                }
                return Some((Ok(event), (console, viewer, asks, updates, slot)));
            }
        },
    )
}

/// The `requested` event of `approval`: its card, for `viewer`.
fn requested(
    console: &Console,
    viewer: &Viewer,
    approval: &toolgate_core::approvals::Approval,
) -> Event {
    let card = pages::card(
        approval,
        &pages::CardExtras {
            signed: viewer.csrf.is_some(),
            unfolded: false,
            schema: console.schema_of(&approval.tool),
            problem: None,
            edited: None,
        },
    );
    Event::default().event("requested").data(card.into_string())
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("console/assets/console.js"),
    )
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("console/assets/console.css"),
    )
}

/// An `application/x-www-form-urlencoded` body.
struct Form(Vec<(String, String)>);

impl Form {
    /// The form a change sent: `application/x-www-form-urlencoded` (415 otherwise), at most
    /// `MAX_FORM_BYTES` (413), sent whole within `FORM_DEADLINE` (408), so a client that
    /// promises a body and trickles it holds its connection that long at most.
    async fn read(headers: &HeaderMap, body: axum::body::Body) -> Result<Form, Box<Response>> {
        let refused = |status: StatusCode, text: &str| {
            Box::new(html(status, pages::problem("Not taken", text)))
        };
        let urlencoded = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                v.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if !urlencoded {
            return Err(refused(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "a change is a form (application/x-www-form-urlencoded)",
            ));
        }
        let too_long = || {
            refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("a form is at most {MAX_FORM_BYTES} bytes"),
            )
        };
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|length| length > MAX_FORM_BYTES as u64) {
            return Err(too_long());
        }
        match tokio::time::timeout(FORM_DEADLINE, axum::body::to_bytes(body, MAX_FORM_BYTES)).await
        {
            Ok(Ok(bytes)) => Ok(Form::parse(&bytes)),
            Ok(Err(_)) => Err(too_long()),
            Err(_) => Err(refused(
                StatusCode::REQUEST_TIMEOUT,
                "the form did not arrive in time",
            )),
        }
    }

    fn parse(body: &[u8]) -> Self {
        Form(url::form_urlencoded::parse(body).into_owned().collect())
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// 256 random bits as hex: sign-in ids and CSRF tokens; `None` when the system RNG fails
/// (then nobody signs in).
fn random_hex() -> Option<String> {
    let mut bytes = [0u8; 32];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).is_err() {
        tracing::error!("the system RNG failed: console sign-ins are refused");
        return None;
    }
    let mut hex = String::with_capacity(64);
    toolgate_core::hash::push_hex(&mut hex, &bytes);
    Some(hex)
}
