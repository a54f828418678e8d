//! Permissions: allow / deny / ask rules by tool pattern and, optionally, by the caller's
//! identity, tenant or role; the first matching rule decides (`Permissions`, one table the
//! layer and the driver share) and its decision becomes a `gate_decision` naming the rule.
//! In an interactive batch the driver puts a rule's ask to a person before the call is admitted,
//! with every other ask (`Permissions::ask`), and the layer lets through the rule a person
//! approved (`Invocation::approved`); otherwise an `ask` refuses the call.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::Either;
use tower::{Layer, Service};

use super::{Invocation, Invoked, LayerFuture, answered};
use crate::glob::glob_match;
use crate::identity::Caller;
use crate::safety::hooks::{Decision, GateRecord};
use crate::tools::ErrorClass;

/// What a rule decides (`decision = "allow" | "deny" | "ask"` in config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PermissionVerdict {
    Allow,
    Deny,
    Ask,
}

/// `[[permissions.rules]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionRule {
    pub id: String,
    /// Tool-name glob.
    pub tools: String,
    /// Whose calls the rule is about: identities as `<credential>:<glob>` (`token:ci`,
    /// `jwt:alice@*`, `certificate:*.clients.test`, `anonymous:*`), so a JWT subject can never
    /// pass for a token's id; globs of tenants; role names. An empty list matches every caller.
    pub identities: Vec<String>,
    pub tenants: Vec<String>,
    pub roles: Vec<String>,
    pub verdict: PermissionVerdict,
    pub reason: String,
}

impl PermissionRule {
    /// The gate-decision source the rule with `id` is recorded (and asks) under.
    pub fn source_of(id: &str) -> String {
        format!("permissions[{id}]")
    }

    /// Whether the rule is about `caller` calling `tool`.
    pub fn matches(&self, tool: &str, caller: &Caller) -> bool {
        let any = |globs: &[String], value: &str| {
            globs.is_empty() || globs.iter().any(|g| glob_match(g, value))
        };
        let identity = |entry: &String| {
            entry.split_once(':').is_some_and(|(method, glob)| {
                method == caller.method.name() && glob_match(glob, &caller.id)
            })
        };
        glob_match(&self.tools, tool)
            && (self.identities.is_empty() || self.identities.iter().any(identity))
            && any(&self.tenants, &caller.tenant)
            && (self.roles.is_empty()
                || caller
                    .roles
                    .iter()
                    .any(|r| self.roles.iter().any(|name| name == r.name())))
    }
}

/// The permission rules, in order, each with the gate-decision source it is recorded under
/// (`permissions[<id>]`, written once rather than per call).
#[derive(Debug, Default)]
pub struct Permissions {
    rules: Vec<(PermissionRule, Arc<str>)>,
}

impl Permissions {
    pub fn new(rules: Vec<PermissionRule>) -> Self {
        let rules = rules
            .into_iter()
            .map(|rule| {
                let source: Arc<str> = PermissionRule::source_of(&rule.id).into();
                (rule, source)
            })
            .collect();
        Permissions { rules }
    }

    /// The rule that decides `caller` calling `tool` (the first that is about it), and its
    /// source.
    pub fn deciding(&self, tool: &str, caller: &Caller) -> Option<(&PermissionRule, &Arc<str>)> {
        self.rules
            .iter()
            .find(|(rule, _)| rule.matches(tool, caller))
            .map(|(rule, source)| (rule, source))
    }

    /// When the deciding rule asks: its source and reason, for the driver to put to a person.
    pub fn ask(&self, tool: &str, caller: &Caller) -> Option<(Arc<str>, String)> {
        self.deciding(tool, caller)
            .filter(|(rule, _)| rule.verdict == PermissionVerdict::Ask)
            .map(|(rule, source)| (source.clone(), rule.reason.clone()))
    }
}

/// Applies `Permission`.
#[derive(Debug, Clone)]
pub(crate) struct PermissionLayer {
    rules: Arc<Permissions>,
}

/// Refuses calls a rule denies.
#[derive(Debug, Clone)]
pub struct Permission<S> {
    inner: S,
    rules: Arc<Permissions>,
}

impl PermissionLayer {
    pub(crate) fn new(rules: Arc<Permissions>) -> Self {
        PermissionLayer { rules }
    }
}

impl<S> Layer<S> for PermissionLayer {
    type Service = Permission<S>;
    fn layer(&self, inner: S) -> Permission<S> {
        Permission {
            inner,
            rules: self.rules.clone(),
        }
    }
}

impl<S> Service<Invocation> for Permission<S>
where
    S: Service<Invocation, Response = Invoked, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Invoked;
    type Error = Infallible;
    type Future = LayerFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, inv: Invocation) -> Self::Future {
        // The first rule about this caller calling this tool decides.
        let Some((rule, source)) = self.rules.deciding(inv.name(), &inv.ctx.caller) else {
            return Either::Left(self.inner.call(inv));
        };
        let refuse = |decision: Decision, text: String| {
            let mut invoked = Invoked::refused(ErrorClass::PermissionDenied, text);
            invoked.gates.push(GateRecord {
                source: source.to_string(),
                decision,
                reason: rule.reason.clone(),
            });
            invoked
        };
        match rule.verdict {
            PermissionVerdict::Deny => {
                let text = format!(
                    "Permission denied for tool '{}': {}",
                    inv.name(),
                    rule.reason
                );
                let invoked = refuse(Decision::Block(rule.reason.clone()), text);
                answered(invoked)
            }
            PermissionVerdict::Ask if inv.approved.as_deref() != Some(&**source) => {
                let text = format!(
                    "Permission denied for tool '{}': approval required ({}) but the request cannot ask anyone",
                    inv.name(),
                    rule.reason
                );
                answered(refuse(Decision::Ask(rule.reason.clone()), text))
            }
            // Allowed, or asked and approved by a person for this run.
            PermissionVerdict::Allow | PermissionVerdict::Ask => {
                let running = self.inner.call(inv);
                let reason = match rule.verdict {
                    PermissionVerdict::Ask => format!("approved: {}", rule.reason),
                    _ => rule.reason.clone(),
                };
                let record = GateRecord {
                    source: source.to_string(),
                    decision: Decision::Allow,
                    reason,
                };
                Either::Right(Box::pin(async move {
                    let Ok(mut invoked) = running.await;
                    invoked.gates.insert(0, record);
                    Ok(invoked)
                }))
            }
        }
    }
}
