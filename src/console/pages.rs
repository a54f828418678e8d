//! The console's HTML, one function per page or fragment (maud: checked at compile time, every
//! value escaped). Everything shown came from an agent or a remote: it is text in the page,
//! never markup, never a link; bidirectional controls are shown as their code points.

use std::time::SystemTime;

use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

use toolgate_core::approvals::{Approval, Ended};
use toolgate_core::identity::Caller;

/// Characters of an approval's arguments shown before the rest is folded.
const SHOWN: usize = 1500;

/// A page: the header with who is signed in, the navigation, and `body`.
pub(super) fn page(title: &str, viewer: Option<(&Caller, Option<&str>)>, body: Markup) -> Markup {
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
                    @if let Some((caller, csrf)) = viewer {
                        nav aria-label="Console" {
                            a href="/console/" aria-current="page" { "Approvals" }
                        }
                        span.who {
                            (caller.id) " · " (caller.tenant) " · " (caller.role_names())
                        }
                        @if let Some(csrf) = csrf {
                            form.inline method="post" action="/console/logout" {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main #main { (body) }
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

/// A notice from the last change (`?notice=`), by its code: fixed texts only.
pub(super) fn notice(code: &str) -> Option<&'static str> {
    Some(match code {
        "approved" => "Approved: the call runs.",
        "denied" => "Denied: the call ends with your reason.",
        "gone" => "That approval is no longer pending: it was answered, expired or withdrawn.",
        _ => return None,
    })
}

/// What an approval card needs besides the approval.
pub(super) struct CardExtras<'a> {
    pub csrf: Option<&'a str>,
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
    csrf: Option<&str>,
    notice: Option<&str>,
    cards: Vec<Markup>,
    decisions: &[Ended],
) -> Markup {
    page(
        "Approvals",
        Some((viewer, csrf)),
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
    let edit_text = extras
        .edited
        .map(str::to_owned)
        .unwrap_or_else(|| pretty(&approval.arguments));
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
            pre.arguments { (head) }
            @if let Some(rest) = rest {
                details { summary { "Show the rest" } pre.arguments { (rest) } }
            }
            @if let Some(problem) = extras.problem {
                p.error role="alert" #{"problem-" (id)} { (problem) }
            }
            div.answers {
                form.answer method="post" action={"/console/approvals/" (id)} {
                    (hidden_csrf(extras.csrf))
                    input type="hidden" name="decision" value="approve";
                    @if approval.remember_allowed {
                        label for={"remember-" (id)} { "Remember" }
                        select #{"remember-" (id)} name="remember" {
                            option value="once" selected { "Once" }
                            option value="session" { "For the session" }
                        }
                    }
                    button.approve type="submit" { "Approve" }
                }
                form.answer method="post" action={"/console/approvals/" (id)} {
                    (hidden_csrf(extras.csrf))
                    input type="hidden" name="decision" value="deny";
                    label for={"reason-" (id)} { "Reason" }
                    input #{"reason-" (id)} type="text" name="reason" maxlength="1000";
                    button.deny type="submit" { "Deny" }
                }
                details.edit open[extras.edited.is_some()] {
                    summary { "Edit" }
                    form.answer.edit method="post" action={"/console/approvals/" (id)} {
                        (hidden_csrf(extras.csrf))
                        input type="hidden" name="decision" value="edit";
                        label for={"arguments-" (id)} { "Arguments (JSON)" }
                        textarea #{"arguments-" (id)} name="arguments" rows="8" spellcheck="false"
                            data-schema=[extras.schema.as_deref()]
                            aria-describedby={"edit-error-" (id)} { (edit_text) }
                        p.error.edit-error #{"edit-error-" (id)} role="alert" hidden {}
                        button type="submit" { "Approve with these arguments" }
                    }
                }
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

/// A page for a refusal (403) or another problem.
pub(super) fn problem(title: &str, text: &str) -> Markup {
    page(title, None, html! { h1 { (title) } p { (text) } })
}

fn hidden_csrf(csrf: Option<&str>) -> Markup {
    html! {
        @if let Some(csrf) = csrf { input type="hidden" name="csrf" value=(csrf); }
    }
}

/// JSON as people read it.
fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// `text` with bidirectional and other invisible format controls shown as code points, so a
/// value cannot reorder what is shown around it.
pub(super) fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}'
            | '\u{FEFF}' => out.push_str(&format!("<U+{:04X}>", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// `text` cut at `SHOWN` characters, and the rest, if any.
fn fold(text: &str) -> (String, Option<String>) {
    match text.char_indices().nth(SHOWN) {
        None => (text.to_owned(), None),
        Some((at, _)) => (text[..at].to_owned(), Some(text[at..].to_owned())),
    }
}
