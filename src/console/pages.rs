//! The console's HTML, one function per page or fragment (maud: checked at compile time, every
//! value escaped). Everything shown came from an agent or a remote: it is text in the page,
//! never markup, never a link; bidirectional controls are shown as their code points.

use std::time::SystemTime;

use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

use toolgate_core::approvals::{Approval, Ended};
use toolgate_core::dispatch::Flight;
use toolgate_core::identity::{Caller, Role};
use toolgate_core::safety::breaker::BreakerState;
use toolgate_core::safety::health::{HealthReport, Minute};
use toolgate_core::tools::{Definition, ToolSource};

/// Characters, and lines, of an approval's arguments shown before the rest is folded.
const SHOWN: usize = 1500;
const SHOWN_LINES: usize = 40;

/// A page: the header with who is signed in, the navigation, and `body`.
pub(super) fn page(title: &str, viewer: Option<(&Caller, bool)>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · toolgate" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    span.brand { "toolgate" }
                    @if let Some((caller, signed)) = viewer {
                        nav aria-label="Console" {
                            @for (href, name) in [
                                ("/console/", "Approvals"),
                                ("/console/tools", "Tools"),
                                ("/console/batches", "Batches"),
                                ("/console/sessions", "Sessions"),
                            ] {
                                @if name == "Approvals" || caller.has(Role::Admin) {
                                    a href=(href) aria-current=[(name == title).then_some("page")] { (name) }
                                }
                            }
                        }
                        span.who {
                            (caller.id) " · " (caller.tenant) " · " (caller.role_names())
                        }
                        @if signed {
                            form.inline method="post" action="/console/logout" {
                                (proof_field())
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main #main {
                    noscript { p.notice { "Answers, and every change, need this page's script: it adds your sign-in's proof." } }
                    (body)
                }
            }
        }
    }
}

/// The sign-in page, with what went wrong last time.
pub(super) fn login(problem: Option<&str>) -> Markup {
    page(
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            p { "Use a token or JWT with the approver or admin role, as for gRPC." }
            @if let Some(problem) = problem {
                p.error role="alert" { (problem) }
            }
            form.login method="post" action="/console/login" {
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="off" required;
                button type="submit" { "Sign in" }
            }
        },
    )
}

/// The answer to a sign-in: its proof, for the page's script to keep in this origin's storage
/// before it goes on to the inbox (the only page that ever carries it).
pub(super) fn signed_in(proof: &str) -> Markup {
    page(
        "Signed in",
        None,
        html! {
            h1 { "Signed in" }
            div #proof hidden data-proof=(proof) {}
            p { "Changes need this page's script, which keeps the sign-in's proof for this console. " }
            p { a href="/console/" { "Go to the approvals" } }
        },
    )
}

/// A notice from the last change (`?notice=`), by its code: fixed texts only.
pub(super) fn notice(code: &str) -> Option<&'static str> {
    Some(match code {
        "approved" => "Approved: the call runs.",
        "denied" => "Denied: the call ends with your reason.",
        "gone" => "That approval is no longer pending: it was answered, expired or withdrawn.",
        "accepted" => "Accepted: the new definition is pinned, and the tool runs again.",
        "ended" => "The session ended: its memory and loop window are gone.",
        "not-live" => "No live session of your tenant had that id.",
        _ => return None,
    })
}

/// What an approval card needs besides the approval.
pub(super) struct CardExtras<'a> {
    /// Whether the viewer signed in (its changes then carry the sign-in's proof).
    pub signed: bool,
    /// Whether folded arguments are shown open (the approval's own page).
    pub unfolded: bool,
    /// The tool's input schema, for the page's check of edited arguments.
    pub schema: Option<String>,
    /// A problem with the last answer sent for this approval.
    pub problem: Option<&'a str>,
    /// The arguments that answer carried, shown again.
    pub edited: Option<&'a str>,
}

/// The inbox: pending approvals, then the last decisions.
pub(super) fn inbox(
    viewer: &Caller,
    signed: bool,
    notice: Option<&str>,
    cards: Vec<Markup>,
    more: usize,
    decisions: &[Ended],
) -> Markup {
    page(
        "Approvals",
        Some((viewer, signed)),
        html! {
            h1 { "Approvals" }
            @if let Some(notice) = notice {
                p.notice role="status" { (notice) }
            }
            p #live.live role="status" aria-live="polite" {}
            section aria-labelledby="pending-title" {
                h2 #pending-title { "Pending" }
                p #empty.empty hidden[!cards.is_empty()] { "Nothing waits for an answer." }
                ol #pending.cards {
                    @for card in cards { (card) }
                }
                @if more > 0 {
                    p.notice { (more) " more wait behind these (the oldest are shown first): answer these, then reload the page." }
                }
            }
            section aria-labelledby="decided-title" {
                h2 #decided-title { "Last decisions" }
                ol #decided.decisions {
                    @for ended in decisions { (decision(ended)) }
                }
            }
        },
    )
}

/// One pending approval, with its answers.
pub(super) fn card(approval: &Approval, extras: &CardExtras<'_>) -> Markup {
    let id = &approval.id;
    let arguments = shown(&pretty(&approval.arguments));
    let (head, rest) = fold(&arguments);
    let left = approval
        .expires_at
        .duration_since(SystemTime::now())
        .unwrap_or_default()
        .as_secs();
    let expires = approval
        .expires_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let folded = rest.is_some();
    let approve = html! {
        form.answer method="post" action={"/console/approvals/" (id)} {
            (proof_if(extras.signed))
            input type="hidden" name="decision" value="approve";
            @if approval.remember_allowed {
                label for={"remember-" (id)} { "Remember" }
                select #{"remember-" (id)} name="remember" {
                    option value="once" selected { "Once" }
                    option value="session" { "For the session, any arguments" }
                }
            }
            button.approve type="submit" disabled data-hold { "Approve" }
        }
    };
    // In the box, what cannot be seen is a JSON escape (`\u202e`): the same value once parsed.
    let edit_text = extras
        .edited
        .map(str::to_owned)
        .unwrap_or_else(|| escaped(&pretty(&approval.arguments)));
    let edit = html! {
        details.edit open[extras.edited.is_some()] {
            summary { "Edit" }
            form.answer.edit method="post" action={"/console/approvals/" (id)} {
                (proof_if(extras.signed))
                input type="hidden" name="decision" value="edit";
                label for={"arguments-" (id)} { "Arguments (JSON)" }
                textarea #{"arguments-" (id)} name="arguments" rows="8" spellcheck="false"
                    data-schema=[extras.schema.as_deref()]
                    aria-describedby={"edit-error-" (id)} { (edit_text) }
                p.error.edit-error #{"edit-error-" (id)} role="alert" hidden {}
                button type="submit" disabled data-hold { "Approve with these arguments" }
            }
        }
    };
    html! {
        li.card #{"approval-" (id)} data-approval=(id) {
            h3 { "Call to " code { (shown(&approval.tool)) } }
            dl {
                dt { "Asked by" } dd { (shown(&approval.source)) }
                dt { "Why" } dd { (shown(&approval.reason)) }
                dt { "Session" } dd { code { (shown(&approval.session_id)) } }
                dt { "Caller" } dd { (shown(&approval.requested_by)) }
                dt { "Time left" } dd { span.left data-expires=(expires) { (left) " s" } }
            }
            h4 { "Arguments" @if approval.arguments_cut { " (cut: too long to show whole)" } }
            @if arguments.contains("[REDACTED:") {
                p.redacted {
                    "Some values are hidden by redaction: the tool gets them as the agent sent them (an edit that leaves them as shown keeps them)."
                }
            }
            pre.arguments { (head) }
            // Approve comes after the arguments whole: below the rest, when it is folded.
            @if let Some(rest) = rest {
                details.rest open[extras.unfolded] {
                    summary { "Show the rest" @if !approval.arguments_cut { " (Approve and Edit are below it)" } }
                    pre.arguments { (rest) }
                    @if !approval.arguments_cut { div.answers { (approve) (edit) } }
                }
            }
            @if let Some(problem) = extras.problem {
                p.error role="alert" #{"problem-" (id)} { (problem) }
            }
            @if approval.arguments_cut {
                p.notice {
                    "The arguments are too long to show here. "
                    a href={"/console/approvals/" (id)} { "Read them whole" }
                    " before you approve."
                }
            }
            div.answers {
                @if !approval.arguments_cut && !folded { (approve) }
                form.answer method="post" action={"/console/approvals/" (id)} {
                    (proof_if(extras.signed))
                    input type="hidden" name="decision" value="deny";
                    label for={"reason-" (id)} { "Reason" }
                    input #{"reason-" (id)} type="text" name="reason" maxlength="1000";
                    button.deny type="submit" disabled data-hold { "Deny" }
                }
                @if !approval.arguments_cut && !folded { (edit) }
            }
        }
    }
}

/// One decision in the list of the last ones.
pub(super) fn decision(ended: &Ended) -> Markup {
    let what = match ended.approved {
        Some(true) if ended.arguments_updated => "approved with edits",
        Some(true) => "approved",
        Some(false) => "denied",
        None => ended.how.name(),
    };
    html! {
        li.decision data-approval=(ended.approval_id) {
            strong { (what) } " "
            code { (shown(&ended.tool)) }
            @if !ended.by.is_empty() { " by " (shown(&ended.by)) }
            " · session " code { (shown(&ended.session_id)) }
            @if !ended.reason.is_empty() { " · “" (shown(&ended.reason)) "”" }
        }
    }
}

/// One tool, as the tools page shows it.
pub(super) struct ToolRow<'a> {
    pub name: &'a str,
    pub source: ToolSource,
    /// `PINNED`, `QUARANTINED`, or none (a tool of the server's own).
    pub pin: Option<&'static str>,
    pub health: Option<&'a HealthReport>,
    /// For an admin, a quarantined tool's pinned and changed definitions and the change's
    /// digest.
    pub change: Option<(&'a Definition, Definition, &'a str)>,
}

/// The tools page: every tool with its source, pin, breaker and health, and, for admins, each
/// quarantined tool's change with **Accept**.
pub(super) fn tools(
    viewer: &Caller,
    signed: bool,
    notice: Option<&str>,
    rows: &[ToolRow<'_>],
    may_accept: bool,
) -> Markup {
    page(
        "Tools",
        Some((viewer, signed)),
        html! {
            h1 { "Tools" }
            @if let Some(notice) = notice {
                p.notice role="status" { (notice) }
            }
            div.table {
                table {
                    caption { "Every tool, its breaker and its health since the server started" }
                    thead { tr {
                        th scope="col" { "Tool" } th scope="col" { "Source" } th scope="col" { "Pin" }
                        th scope="col" { "Breaker" } th scope="col" { "Success" }
                        th scope="col" { "Failures in a row" } th scope="col" { "p50" }
                        th scope="col" { "p99" } th scope="col" { "Last 15 minutes" }
                    } }
                    tbody {
                        @for row in rows {
                            tr.quarantined[row.pin == Some("QUARANTINED")] {
                                th scope="row" { code { (shown(row.name)) } }
                                td { (source_name(row.source)) }
                                td { (row.pin.map_or("—", pin_name)) }
                                @match row.health {
                                    Some(h) => {
                                        td { (breaker_name(h.breaker)) }
                                        td { (rate(h)) }
                                        td { (h.consecutive_failures) }
                                        td { (millis(h.p50)) }
                                        td { (millis(h.p99)) }
                                        td { (chart(row.name, &h.recent)) }
                                    }
                                    None => {
                                        td { "closed" } td { "no calls yet" } td { "0" }
                                        td { "—" } td { "—" } td { (chart(row.name, &[])) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @for row in rows {
                @if let Some((pinned, now, digest)) = &row.change {
                    section.change aria-labelledby={"change-" (row.name)} {
                        h2 #{"change-" (row.name)} { "Changed definition of " code { (shown(row.name)) } }
                        p { "The remote now offers another definition; calls are refused QUARANTINED until an admin accepts it. The new text is the remote's word: read it before you accept." }
                        (diff(pinned, now))
                        @if may_accept {
                            form method="post" action={"/console/tools/" (path_part(row.name)) "/accept"} {
                                (proof_if(signed))
                                input type="hidden" name="digest" value=(digest);
                                button.approve type="submit" disabled data-hold { "Accept the new definition" }
                            }
                        } @else {
                            p { "Accepting needs remote_registration.enabled." }
                        }
                    }
                }
            }
        },
    )
}

/// The pinned and the new definition side by side, field by field, the fields that differ
/// marked.
fn diff(pinned: &Definition, now: &Definition) -> Markup {
    let schema = |s: &Option<serde_json::Value>| s.as_ref().map(pretty).unwrap_or_default();
    let fields = [
        (
            "Description",
            pinned.description.clone(),
            now.description.clone(),
        ),
        (
            "Input schema",
            pretty(&pinned.input_schema),
            pretty(&now.input_schema),
        ),
        (
            "Output schema",
            schema(&pinned.output_schema),
            schema(&now.output_schema),
        ),
        (
            "Annotations",
            format!("{:?}", pinned.annotations),
            format!("{:?}", now.annotations),
        ),
        (
            "Runs beside other calls",
            pinned.concurrency_safe.to_string(),
            now.concurrency_safe.to_string(),
        ),
    ];
    html! {
        table.diff {
            thead { tr { th scope="col" { "Field" } th scope="col" { "Pinned" } th scope="col" { "Now" } } }
            tbody {
                @for (name, was, is) in fields {
                    @let changed = was != is;
                    // Changed in characters that look alike (another script's letters): each
                    // side is shown with every character outside ASCII as its code point.
                    @let alike = changed && shown(&was) == shown(&is);
                    @let (was, is) = if alike { (spelled(&was), spelled(&is)) } else { (shown(&was), shown(&is)) };
                    tr.changed[changed] {
                        th scope="row" {
                            (name) @if alike { " (changed in characters that look alike)" } @else if changed { " (changed)" }
                        }
                        td { pre { (was) } }
                        td { @if changed { mark { pre { (is) } } } @else { pre { (is) } } }
                    }
                }
            }
        }
    }
}

/// Attempts and failures per minute as bars (an SVG drawn here; no script), with a text
/// equivalent.
fn chart(tool: &str, minutes: &[Minute]) -> Markup {
    let most = minutes.iter().map(|m| m.calls).max().unwrap_or(0).max(1);
    let total: u32 = minutes.iter().map(|m| m.calls).sum();
    let failed: u32 = minutes.iter().map(|m| m.failures).sum();
    let label = format!("{} calls, {failed} failed, in the last 15 minutes", total);
    let height = |n: u32| u64::from(n) * 24 / u64::from(most);
    html! {
        svg.chart width="90" height="26" viewBox="0 0 90 26" role="img" aria-label=(label) {
            title { (shown(tool)) ": " (label) }
            @for (i, m) in minutes.iter().enumerate() {
                @let x = i * 6;
                @let h = height(m.calls);
                @let f = height(m.failures);
                rect x=(x) y=(25 - h) width="5" height=(h) fill="#8aa1b4" {}
                rect x=(x) y=(25 - f) width="5" height=(f) fill="#a40e26" {}
            }
            line x1="0" y1="25.5" x2="90" y2="25.5" stroke="#4a5560" stroke-width="1" {}
        }
    }
}

fn source_name(source: ToolSource) -> &'static str {
    match source {
        ToolSource::Builtin => "built-in",
        ToolSource::Embedded => "embedded",
        ToolSource::Worker => "worker",
        ToolSource::Mcp => "MCP",
        ToolSource::Http => "HTTP",
    }
}

fn pin_name(pin: &str) -> &'static str {
    match pin {
        "QUARANTINED" => "quarantined",
        _ => "pinned",
    }
}

fn breaker_name(state: BreakerState) -> &'static str {
    match state {
        BreakerState::Closed => "closed",
        BreakerState::HalfOpen => "half-open",
        BreakerState::Open => "open",
    }
}

/// The success rate, as people read it.
fn rate(h: &HealthReport) -> String {
    if h.calls == 0 {
        return "no calls yet".to_owned();
    }
    #[allow(clippy::cast_precision_loss)]
    let rate = 100.0 * h.successes as f64 / h.calls as f64;
    format!("{rate:.1}% of {}", h.calls)
}

fn millis(d: std::time::Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The recent batches of the viewer's tenant, newest first.
pub(super) fn batches(
    viewer: &Caller,
    signed: bool,
    flights: Option<&[std::sync::Arc<Flight>]>,
) -> Markup {
    page(
        "Batches",
        Some((viewer, signed)),
        html! {
            h1 { "Batches" }
            p { "The tenant's most recent batches (up to " (toolgate_core::dispatch::FLIGHTS) " across the server, since it started), from every front." }
            @match flights {
                None => p.empty { "Batches are not recorded on this server (console.record_batches = false)." },
                Some([]) => p.empty { "No batch has run yet." },
                Some(flights) => (batch_table("Recent batches, newest first", flights)),
            }
        },
    )
}

/// Batches as a table, one row each.
fn batch_table(caption: &str, flights: &[std::sync::Arc<Flight>]) -> Markup {
    html! {
        div.table { table {
            caption { (caption) }
            thead { tr {
                th scope="col" { "Batch" } th scope="col" { "Started" } th scope="col" { "Caller" }
                th scope="col" { "Session" } th scope="col" { "Calls" } th scope="col" { "Outcome" }
                th scope="col" { "Took" }
            } }
            tbody { @for flight in flights { (batch_row(flight)) } }
        } }
    }
}

fn batch_row(flight: &Flight) -> Markup {
    html! {
        tr {
            th scope="row" { a href={"/console/batches/" (flight.id)} { "#" (flight.id) } }
            td { (clock(flight.started)) }
            td { (shown(&flight.caller)) }
            td { code { (shown(&flight.session)) } }
            td { ul.calls { @for call in &flight.calls {
                li { code { (shown(&call.name)) } " " span.ok[call.success] { (call.error_class) } }
            } } }
            td { (flight.outcome) }
            td { (millis(flight.duration)) }
        }
    }
}

/// One batch as a timeline of its events.
pub(super) fn batch(viewer: &Caller, signed: bool, flight: &Flight) -> Markup {
    page(
        "Batches",
        Some((viewer, signed)),
        html! {
            h1 { "Batch #" (flight.id) }
            dl {
                dt { "Started" } dd { (clock(flight.started)) }
                dt { "Caller" } dd { (shown(&flight.caller)) }
                dt { "Session" } dd { a href={"/console/sessions?id=" (url_part(&flight.session))} { code { (shown(&flight.session)) } } }
                dt { "Outcome" } dd { (flight.outcome) " in " (millis(flight.duration)) }
            }
            h2 { "Calls" }
            ol.calls { @for call in &flight.calls {
                li { code { (shown(&call.name)) } @if !call.tool.is_empty() && call.tool != call.name { " (" code { (shown(&call.tool)) } ")" }
                     " " span.ok[call.success] { (call.error_class) } " · " (call.attempts) " attempt(s)" }
            } }
            h2 { "Timeline" }
            ol.timeline {
                @for event in &flight.events {
                    li.event data-kind=(event.kind) {
                        span.at { "+" (millis(event.at)) } " "
                        strong { (event.kind) } " "
                        @if let Some(call) = event.call { span.call { "call " (call) } " " }
                        (shown(&event.text))
                    }
                }
                li.event data-kind="result" {
                    span.at { "+" (millis(flight.duration)) } " " strong { "result" } " " (flight.outcome)
                }
            }
            @if flight.events_dropped > 0 {
                p { (flight.events_dropped) " more events were not kept." }
            }
        },
    )
}

/// A session's memory and trajectory (its recent batches), with **End session** for admins.
pub(super) struct SessionView<'a> {
    pub id: &'a str,
    /// Its memory entries; `None`: no such live session.
    pub memory: Option<Vec<String>>,
    pub trajectory: Vec<std::sync::Arc<Flight>>,
    pub may_end: bool,
}

pub(super) fn sessions(
    viewer: &Caller,
    signed: bool,
    notice: Option<&str>,
    view: Option<&SessionView<'_>>,
) -> Markup {
    page(
        "Sessions",
        Some((viewer, signed)),
        html! {
            h1 { "Sessions" }
            @if let Some(notice) = notice {
                p.notice role="status" { (notice) }
            }
            form.lookup method="get" action="/console/sessions" {
                label for="session-id" { "Session id" }
                input #session-id type="text" name="id" value=[view.map(|v| v.id)] required maxlength="256";
                button type="submit" { "Show" }
            }
            @if let Some(view) = view {
                h2 { "Session " code { (shown(view.id)) } }
                @match &view.memory {
                    None => p { "No live session of your tenant has this id." }
                    Some(memory) => {
                        h3 { "Memory" }
                        @if memory.is_empty() { p.empty { "Nothing remembered." } }
                        ol.memory { @for entry in memory { li { pre { (shown(entry)) } } } }
                        @if view.may_end {
                            form method="post" action="/console/sessions/end" {
                                (proof_if(signed))
                                input type="hidden" name="id" value=(view.id);
                                button.deny type="submit" disabled data-hold { "End session" }
                            }
                        }
                    }
                }
                h3 { "Trajectory" }
                @if view.trajectory.is_empty() {
                    p.empty { "No recent batch of this session is kept." }
                } @else {
                    (batch_table("The session's recent batches, newest first", &view.trajectory))
                }
            }
        },
    )
}

/// Wall-clock time, UTC, to the second.
fn clock(at: SystemTime) -> String {
    let secs = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    format!(
        "{} {:02}:{:02}:{:02} UTC",
        date_of(days),
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The civil date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn date_of(days: u64) -> String {
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// `text` as one segment of a URL's path: every byte but letters, digits, `-` and `_`
/// percent-encoded (a tool named `..` stays one segment).
fn path_part(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `text` for a URL's query.
fn url_part(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A page for a refusal (403) or another problem.
pub(super) fn problem(title: &str, text: &str) -> Markup {
    page(title, None, html! { h1 { (title) } p { (text) } })
}

/// The proof field, in a signed-in viewer's form.
fn proof_if(signed: bool) -> Markup {
    html! { @if signed { (proof_field()) } }
}

/// The field a signed-in change carries its sign-in's proof in: empty as served, filled by the
/// page's script from this origin's storage as the form is sent (a page never carries the proof,
/// so a sign-in's cookie replayed from elsewhere reads pages but changes nothing).
fn proof_field() -> Markup {
    html! { input type="hidden" name="csrf" value="" data-proof; }
}

/// JSON as people read it.
fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// `text` with what a reader cannot see shown as code points (`hidden`), so a value cannot
/// hide words from the person reading it or reorder what is shown around it.
pub(super) fn shown(text: &str) -> String {
    each_char(text, hidden, code_point)
}

/// JSON `text` with each character `hidden` would show as a code point written as a JSON
/// escape (`\u202e`, a pair for one past U+FFFF): the same value to a parser, visible to a
/// person. Such characters are only ever inside strings in serde_json's output.
fn escaped(text: &str) -> String {
    each_char(text, hidden, |out, c| {
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            out.push_str(&format!("\\u{unit:04x}"));
        }
    })
}

/// `text` with every character outside printable ASCII (but the line break) as its code point.
fn spelled(text: &str) -> String {
    each_char(
        text,
        |c| !(c == '\n' || c == ' ' || c.is_ascii_graphic()),
        code_point,
    )
}

/// `text` with each character `swap` picks written by `write`, the others as they are.
fn each_char(text: &str, swap: impl Fn(char) -> bool, write: impl Fn(&mut String, char)) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if swap(c) {
            write(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// `<U+202E>`.
fn code_point(out: &mut String, c: char) {
    out.push_str(&format!("<U+{:04X}>", u32::from(c)));
}

/// Whether `c` is shown as its code point: controls but the line break and tab, and the
/// characters a reader cannot see or that reorder what they see — every format character
/// (Unicode category Cf: bidirectional controls and marks, zero-width ones, the soft hyphen,
/// tags, …), variation selectors, fillers that draw nothing, line and paragraph separators,
/// and private-use code points a font may draw as anything.
fn hidden(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{B}'..='\u{1F}' | '\u{7F}'..='\u{9F}'
        // Format characters (Cf), and invisible letters and marks that act like them.
        | '\u{AD}' | '\u{34F}' | '\u{600}'..='\u{605}' | '\u{61C}' | '\u{6DD}' | '\u{70F}'
        | '\u{890}'..='\u{891}' | '\u{8E2}' | '\u{115F}'..='\u{1160}' | '\u{17B4}'..='\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
        | '\u{FFA0}' | '\u{FFF0}'..='\u{FFFB}' | '\u{110BD}' | '\u{110CD}'
        | '\u{13430}'..='\u{1345F}' | '\u{1BCA0}'..='\u{1BCA3}' | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}'
        // Private use.
        | '\u{E000}'..='\u{F8FF}' | '\u{F0000}'..='\u{10FFFF}'
    )
}

/// `text` cut at `SHOWN` characters or `SHOWN_LINES` lines, whichever comes first, and the
/// rest, if any.
fn fold(text: &str) -> (String, Option<String>) {
    let by_chars = text.char_indices().nth(SHOWN).map(|(at, _)| at);
    let by_lines = text
        .match_indices('\n')
        .nth(SHOWN_LINES - 1)
        .map(|(at, _)| at + 1);
    match by_chars.into_iter().chain(by_lines).min() {
        Some(at) if at < text.len() => (text[..at].to_owned(), Some(text[at..].to_owned())),
        _ => (text.to_owned(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_cannot_be_seen_is_a_json_escape_in_the_edit_box_and_parses_back_the_same() {
        let value = serde_json::json!({"a": "x\u{202E}y\u{E0061}z", "b": "Grüße\n"});
        let text = escaped(&pretty(&value));
        assert!(
            text.contains("x\\u202ey\\udb40\\udc61z") && text.contains("Grüße"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
    }

    #[test]
    fn what_cannot_be_seen_is_shown_as_code_points_and_the_rest_as_it_is() {
        // Tags (read by models, drawn by nobody), a bidi mark that reorders digits, fillers,
        // a soft hyphen, a variation selector, a line separator, a carriage return.
        let hidden_words: String = "email me"
            .chars()
            .map(|c| char::from_u32(0xE0000 + u32::from(c)).unwrap())
            .collect();
        let text = format!(
            "ok{hidden_words} 12\u{61C}-34 \u{3164}\u{115F}\u{AD}\u{FE0F}\u{2028}\r\u{E000}"
        );
        let out = shown(&text);
        assert!(out.starts_with("ok<U+E0065><U+E006D>"), "{out}");
        for point in [
            "<U+061C>", "<U+3164>", "<U+115F>", "<U+00AD>", "<U+FE0F>", "<U+2028>",
        ] {
            assert!(out.contains(point), "{point} in {out}");
        }
        assert!(
            out.contains("<U+000D>") && out.contains("<U+E000>"),
            "{out}"
        );
        let plain = "Grüße, 東京, ½ → ok 🙂\n\tindented";
        assert_eq!(shown(plain), plain);
    }
}
