//! Validation: the values checked against each other and the server's hard limits, every
//! problem listed at once. The only place config values are judged: `RULES` is the list of
//! rules, each a short function in `validate/rules.rs` adding the problems it finds. What the
//! types refuse as they are read (addresses, URLs, the sampler, closed sets) never gets here.

mod rules;

use std::fmt::Display;
use std::time::Duration;

use super::{Anonymous, Config, ConfigError};

impl Config {
    /// Checks the values against each other and the server's hard limits.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }

    /// What every rule finds, in the order of `RULES`.
    pub(super) fn problems(&self) -> Vec<String> {
        let mut problems = Problems::default();
        for rule in RULES {
            rule(self, &mut problems);
        }
        problems.0
    }
}

/// One rule: reads the config and adds the problems it finds.
type Rule = fn(&Config, &mut Problems);

/// Every rule, in the order their problems are listed.
const RULES: &[Rule] = &[
    // Export, capacity, request limits and timeouts.
    rules::telemetry_export,
    rules::server_capacity,
    rules::shares_within_totals,
    rules::connection_timeouts,
    rules::request_limits,
    // (Here, not with the security rules, so problems list in the order they always did.)
    rules::permission_identities,
    rules::byte_budgets,
    rules::call_deadlines,
    rules::approvals,
    rules::sessions,
    rules::loop_window,
    rules::retry_backoff,
    // What runs around a call: hooks, redaction, remotes, bindings, per-tool settings, logs.
    rules::distinct_names,
    rules::hook_conditions,
    rules::hook_environment,
    rules::command_hooks,
    rules::grpc_hook_endpoints,
    rules::suggestion_threshold,
    rules::redaction_patterns,
    rules::remotes,
    rules::bindings,
    rules::per_tool,
    rules::builtin_exclusions,
    rules::log_level,
    // Who may call: TLS and authentication complete and consistent, never plaintext on a public
    // address unless `server.insecure` says so, permission rules that name a credential, and
    // what run-time registration may ask for.
    rules::tls_files,
    rules::plaintext_needs_insecure,
    rules::anonymous_callers,
    rules::tokens,
    rules::jwt,
    rules::certificates,
    rules::someone_can_get_in,
    rules::remote_registration,
    rules::mcp_front,
    rules::console,
];

/// The problems found so far, with the checks rules share.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    /// Adds `problem` unless `ok`.
    fn check(&mut self, ok: bool, problem: impl Display) {
        if !ok {
            self.add(problem);
        }
    }

    /// Adds `problem`.
    fn add(&mut self, problem: impl Display) {
        self.0.push(problem.to_string());
    }

    /// A count that must not be zero.
    fn at_least_one<T: Default + PartialEq>(&mut self, key: &str, value: T) {
        self.check(
            value != T::default(),
            format_args!("{key}: must be at least 1"),
        );
    }

    /// A duration that must not be zero.
    fn longer_than_zero(&mut self, key: &str, value: Duration) {
        self.check(
            !value.is_zero(),
            format_args!("{key}: must be longer than zero"),
        );
    }

    /// Role names the server knows.
    fn known_roles(&mut self, at: &str, names: &[String]) {
        for name in names {
            let known = toolgate_core::identity::Role::parse(name).is_some();
            self.check(
                known,
                format_args!("{at}: unknown role '{name}' (known: agent, admin)"),
            );
        }
    }

    /// A tenant name the server accepts.
    fn valid_tenant(&mut self, at: &str, tenant: &str) {
        if let Err(problem) = toolgate_core::identity::validate_tenant(tenant) {
            self.add(format_args!("{at}: {problem}"));
        }
    }
}

impl Config {
    /// Whether the gRPC listener is reachable from other hosts.
    fn public_listen(&self) -> bool {
        !self.server.listen.ip().is_loopback()
    }

    /// What is allowed but probably not meant: binding references that always resolve to null,
    /// a connection share as large as the whole server (one client could then take it all), a
    /// remote reached in plaintext off loopback or given a credential inline in `headers`.
    /// `check-config` prints these; the server logs them at start.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        let server = &self.server;
        for (share, key, whole, whole_key) in [
            (
                server.max_batches_per_connection,
                "max_batches_per_connection",
                server.max_concurrent_batches,
                "max_concurrent_batches",
            ),
            (
                server.max_calls_per_connection,
                "max_calls_per_connection",
                server.max_concurrent_calls,
                "max_concurrent_calls",
            ),
        ] {
            if share >= whole {
                w.push(format!(
                    "server.{key}: {share} is not below server.{whole_key} ({whole}), so one connection can take the whole server"
                ));
            }
        }
        if self.public_listen() {
            if self.auth.anonymous == Anonymous::Any {
                w.push(format!(
                    "server.listen: {} is not a loopback address and auth.anonymous = \"any\": anyone who can reach it gets {}",
                    self.server.listen,
                    self.auth.anonymous_roles.join(", ")
                ));
            }
            if !self.tls.enabled() {
                w.push(format!(
                    "server.listen: {} serves plaintext (server.insecure = true): tokens and results cross the network unencrypted",
                    self.server.listen
                ));
            }
            if self.remote_registration.enabled {
                w.push("remote_registration.enabled on a non-loopback address: callers with the admin role can make the server start programs and reach addresses".to_owned());
            }
        }
        let anonymous_admin = self.auth.anonymous != Anonymous::None
            && self.auth.anonymous_roles.iter().any(|r| r == "admin");
        if anonymous_admin {
            w.push(format!(
                "auth.anonymous_roles: callers without credentials ({}) get the admin role: they can register remotes (if enabled), accept changed tools and read tool health. \"loopback\" trusts the connection's address: behind a local proxy or a sidecar (Istio's inbound comes from 127.0.0.6) every caller looks local. Set auth.anonymous_roles = [\"agent\"] or auth.anonymous = \"none\" unless this machine is yours alone",
                match self.auth.anonymous {
                    Anonymous::Any => "from anywhere",
                    _ => "from this machine",
                }
            ));
        }
        if let Some(mcp) = self.mcp.listen.filter(|addr| !addr.ip().is_loopback()) {
            if self.auth.anonymous == Anonymous::Any {
                w.push(format!(
                    "mcp.listen: {mcp} is not a loopback address and auth.anonymous = \"any\": any MCP client that can reach it gets {}",
                    self.auth.anonymous_roles.join(", ")
                ));
            }
            if !self.tls.enabled() {
                w.push(format!(
                    "mcp.listen: {mcp} serves plaintext (server.insecure = true): tokens and results cross the network unencrypted"
                ));
            }
        }
        if let Some(admin) = self.admin.listen.filter(|addr| !addr.ip().is_loopback()) {
            w.push(format!(
                "admin.listen: {admin} is not a loopback address; /metrics, /livez and /readyz have no authentication"
            ));
        }
        for (i, remote) in self.remotes.iter().enumerate() {
            for warning in remote.warnings() {
                w.push(format!("remotes[{i}] ({}): {warning}", remote.name));
            }
        }
        for (name, binding) in &self.bindings {
            if let Some(input) = &binding.input {
                for warning in toolgate_core::mapping::warnings(input) {
                    w.push(format!("bindings.{name}.{warning}"));
                }
            }
        }
        w
    }
}
