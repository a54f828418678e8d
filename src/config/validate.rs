//! Validation: the values checked against each other and the server's hard limits, every
//! problem listed at once. The only place config values are judged; what the types refuse as
//! they are read (addresses, URLs, the sampler, closed sets) never gets here.

use std::collections::BTreeMap;

use super::{Config, ConfigError, HooksConfig};
use toolgate_core::tools::BUILTIN_NAMES;

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

    pub(super) fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let t = &self.telemetry;
        if t.metrics_interval < std::time::Duration::from_secs(1) {
            p.push("telemetry.metrics_interval: must be at least 1s".to_owned());
        }
        if t.export_timeout.is_zero() {
            p.push("telemetry.export_timeout: must be longer than zero".to_owned());
        }
        if !(0.0..=1.0).contains(&t.sampler_ratio) {
            p.push("telemetry.sampler_ratio: must be between 0 and 1".to_owned());
        }
        if t.max_queued_spans == 0 {
            p.push("telemetry.max_queued_spans: must be at least 1".to_owned());
        }
        if t.capture_content && t.content_max_chars == 0 {
            p.push(
                "telemetry.content_max_chars: must be at least 1 when capture_content is on"
                    .to_owned(),
            );
        }
        if self.server.max_message_bytes < 1024 {
            p.push("server.max_message_bytes: must be at least 1024".to_owned());
        }
        let server = &self.server;
        for (key, value) in [
            ("max_concurrent_batches", server.max_concurrent_batches),
            ("max_concurrent_calls", server.max_concurrent_calls),
            (
                "max_batches_per_connection",
                server.max_batches_per_connection,
            ),
            ("max_calls_per_connection", server.max_calls_per_connection),
            ("max_batches_per_tenant", server.max_batches_per_tenant),
            ("max_calls_per_tenant", server.max_calls_per_tenant),
            ("max_batches_per_identity", server.max_batches_per_identity),
            ("max_calls_per_identity", server.max_calls_per_identity),
        ] {
            if value == 0 {
                p.push(format!("server.{key}: must be at least 1"));
            }
        }
        if server.max_streams_per_connection == 0 {
            p.push("server.max_streams_per_connection: must be at least 1".to_owned());
        }
        if server.max_connections == 0 {
            p.push("server.max_connections: must be at least 1".to_owned());
        }
        // Shorter would close connections of clients on slow or distant links.
        if server.preface_timeout < std::time::Duration::from_millis(100) {
            p.push("server.preface_timeout: must be at least 100ms".to_owned());
        }
        // Shorter would cancel healthy streams whose transport is merely busy.
        if server.stall_timeout < std::time::Duration::from_millis(100) {
            p.push("server.stall_timeout: must be at least 100ms".to_owned());
        }
        let limits = &self.limits;
        if limits.max_calls == 0 {
            p.push("limits.max_calls: must be at least 1".to_owned());
        }
        if limits.max_calls > limits.max_calls_ceiling {
            p.push(format!(
                "limits.max_calls: {} is above limits.max_calls_ceiling ({})",
                limits.max_calls, limits.max_calls_ceiling
            ));
        }
        // Protobuf decoding stops at 100 nested messages; deeper JSON could never arrive anyway.
        if limits.max_concurrency == 0 {
            p.push("limits.max_concurrency: must be at least 1".to_owned());
        }
        // Deeper arguments could be accepted but never answered: the reply would nest deeper
        // than protobuf decoders accept.
        let deepest = toolgate_proto::protojson::MAX_REPLY_DEPTH;
        if !(1..=deepest).contains(&limits.max_json_depth) {
            p.push(format!(
                "limits.max_json_depth: must be from 1 to {deepest} (a reply nests deeper than protobuf decoders accept past {deepest})"
            ));
        }
        // A reply has to carry at least the envelope of each call's result.
        if limits.max_reply_bytes < 64 * 1024 {
            p.push("limits.max_reply_bytes: must be at least 65536".to_owned());
        }
        if limits.max_hook_processes == 0 {
            p.push("limits.max_hook_processes: must be at least 1".to_owned());
        }
        // Each bound must hold the largest message it counts, or that message could never pass.
        for (i, rule) in self.permissions.rules.iter().enumerate() {
            for identity in &rule.identities {
                let scoped = identity.split_once(':').is_some_and(|(method, _)| {
                    ["token", "jwt", "certificate", "anonymous"].contains(&method)
                });
                if !scoped {
                    p.push(format!(
                        "permissions.rules[{i}].identities: '{identity}' names no credential: write token:{identity}, jwt:{identity}, certificate:{identity} or anonymous:*, so a JWT subject cannot pass for a token's id"
                    ));
                }
            }
        }
        let (message, reply) = (self.server.max_message_bytes, limits.max_reply_bytes);
        for (key, value, least, what) in [
            (
                "max_buffered_request_bytes",
                limits.max_buffered_request_bytes,
                message,
                "server.max_message_bytes",
            ),
            (
                "max_buffered_request_bytes_per_connection",
                limits.max_buffered_request_bytes_per_connection,
                message,
                "server.max_message_bytes",
            ),
            (
                "max_unread_reply_bytes",
                limits.max_unread_reply_bytes,
                reply,
                "limits.max_reply_bytes",
            ),
            (
                "max_unread_reply_bytes_per_connection",
                limits.max_unread_reply_bytes_per_connection,
                reply,
                "limits.max_reply_bytes",
            ),
        ] {
            if value < least {
                p.push(format!("limits.{key}: must be at least {what} ({least})"));
            }
        }
        if self.dispatch.call_timeout.is_zero() {
            p.push("dispatch.call_timeout: must be longer than zero".to_owned());
        }
        if self.dispatch.call_timeout > self.dispatch.max_call_timeout {
            p.push("dispatch.call_timeout: is above dispatch.max_call_timeout".to_owned());
        }
        if self.sessions.max_sessions == 0 {
            p.push("sessions.max_sessions: must be at least 1".to_owned());
        }
        if self.sessions.idle_ttl.is_zero() {
            p.push("sessions.idle_ttl: must be longer than zero".to_owned());
        }
        if self.loop_detection.window == 0 {
            p.push("loop_detection.window: must be at least 1".to_owned());
        }
        if self.retry.base_delay > self.retry.max_delay {
            p.push("retry.base_delay: is above retry.max_delay".to_owned());
        }
        p.extend(self.hooks.problems());
        if !(0.0..=1.0).contains(&self.unknown_tool.suggestion_threshold) {
            p.push("unknown_tool.suggestion_threshold: must be from 0 to 1".to_owned());
        }
        for (i, pattern) in self.redaction.patterns.iter().enumerate() {
            if let Err(e) = regex::Regex::new(&pattern.regex) {
                p.push(format!(
                    "redaction.patterns[{i}]: regex does not compile: {e}"
                ));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, remote) in self.remotes.iter().enumerate() {
            if !names.insert(&remote.name) {
                p.push(format!(
                    "remotes[{i}]: the name '{}' is used twice",
                    remote.name
                ));
            }
            if let Err(reason) = remote.check() {
                p.push(format!("remotes[{i}] ({}): {reason}", remote.name));
            }
        }
        for (name, binding) in &self.bindings {
            match &binding.input {
                None => {}
                Some(input @ serde_json::Value::Object(_)) => {
                    for problem in toolgate_core::mapping::problems(input) {
                        p.push(format!("bindings.{name}.{problem}"));
                    }
                }
                Some(_) => p.push(format!("bindings.{name}.input: must be a table")),
            }
        }
        for (name, tool) in &self.per_tool {
            let pointers = [&tool.cache.path, &tool.invalidates_path];
            for pointer in pointers.into_iter().flatten() {
                if !pointer.is_empty() && !pointer.starts_with('/') {
                    p.push(format!(
                        "per_tool.{name}: pointer '{pointer}' must start with '/'"
                    ));
                }
            }
            if tool.timeout.is_some_and(|t| t.is_zero()) {
                p.push(format!("per_tool.{name}.timeout: must be longer than zero"));
            }
        }
        for name in &self.tools.builtin.exclude {
            if !BUILTIN_NAMES.contains(&name.as_str()) {
                p.push(format!(
                    "tools.builtin.exclude: '{name}' is not a built-in tool (built-ins: {})",
                    BUILTIN_NAMES.join(", ")
                ));
            }
        }
        if let Err(e) = super::log_filter(&self.log.level) {
            p.push(format!(
                "log.level: '{}' is not a valid log filter: {e}",
                self.log.level
            ));
        }
        p.extend(self.security_problems());
        if let Err(problem) = self.remote_registration.policy() {
            p.push(problem);
        }
        p
    }

    /// TLS and authentication settings: complete, consistent, and never plaintext on a public
    /// address unless `server.insecure` says so.
    fn security_problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let tls = &self.tls;
        if tls.cert_file.is_some() != tls.key_file.is_some() {
            p.push("tls: cert_file and key_file go together".to_owned());
        }
        if tls.client_ca_file.is_some() && !tls.enabled() {
            p.push(
                "tls.client_ca_file: client certificates need tls.cert_file and tls.key_file"
                    .to_owned(),
            );
        }
        if tls.enabled() && tls.handshake_timeout.is_zero() {
            p.push("tls.handshake_timeout: must be longer than zero".to_owned());
        }
        if self.public_listen() && !tls.enabled() && !self.server.insecure {
            p.push(format!(
                "server.listen: {} is not a loopback address and TLS is off; set tls.cert_file and tls.key_file, or server.insecure = true to serve plaintext anyway",
                self.server.listen
            ));
        }
        let auth = &self.auth;
        let roles = |at: &str, names: &[String], p: &mut Vec<String>| {
            for name in names {
                if toolgate_core::identity::Role::parse(name).is_none() {
                    p.push(format!("{at}: unknown role '{name}' (known: agent, admin)"));
                }
            }
        };
        let tenant = |at: &str, tenant: &str, p: &mut Vec<String>| {
            if let Err(problem) = toolgate_core::identity::validate_tenant(tenant) {
                p.push(format!("{at}: {problem}"));
            }
        };
        tenant("auth.anonymous_tenant", &auth.anonymous_tenant, &mut p);
        roles("auth.anonymous_roles", &auth.anonymous_roles, &mut p);
        for (i, token) in auth.tokens.iter().enumerate() {
            let at = format!("auth.tokens[{i}]");
            if token.id.is_empty() {
                p.push(format!(
                    "{at}.id: required (the identity the token stands for)"
                ));
            }
            tenant(&format!("{at}.tenant"), &token.tenant, &mut p);
            roles(&format!("{at}.roles"), &token.roles, &mut p);
            let sources = [&token.sha256, &token.file, &token.env]
                .iter()
                .filter(|s| !s.is_empty())
                .count();
            if sources != 1 {
                p.push(format!("{at}: give exactly one of sha256, file, env"));
            }
            let hex =
                token.sha256.len() == 64 && token.sha256.bytes().all(|b| b.is_ascii_hexdigit());
            if !token.sha256.is_empty() && !hex {
                p.push(format!(
                    "{at}.sha256: 64 hex digits (printf %s \"$TOKEN\" | sha256sum)"
                ));
            }
        }
        let jwt = &auth.jwt;
        if jwt.jwks_file.is_some() && jwt.jwks_url.is_some() {
            p.push("auth.jwt: give jwks_file or jwks_url, not both".to_owned());
        }
        if jwt.enabled() {
            if jwt.issuer.is_empty() {
                p.push("auth.jwt.issuer: required (tokens from any issuer would pass)".to_owned());
            }
            if jwt.audience.is_empty() {
                p.push(
                    "auth.jwt.audience: required (tokens meant for any service would pass)"
                        .to_owned(),
                );
            }
            if jwt.jwks_refresh < std::time::Duration::from_secs(10) {
                p.push("auth.jwt.jwks_refresh: must be at least 10s".to_owned());
            }
            roles("auth.jwt.default_roles", &jwt.default_roles, &mut p);
        }
        for (i, cert) in auth.certificates.iter().enumerate() {
            let at = format!("auth.certificates[{i}]");
            if rustls::pki_types::ServerName::try_from(cert.name.as_str()).is_err() {
                p.push(format!(
                    "{at}.name: '{}' is not a DNS name or IP address",
                    cert.name
                ));
            }
            tenant(&format!("{at}.tenant"), &cert.tenant, &mut p);
            roles(&format!("{at}.roles"), &cert.roles, &mut p);
        }
        if !auth.certificates.is_empty() && tls.client_ca_file.is_none() {
            p.push("auth.certificates: client certificates need tls.client_ca_file".to_owned());
        }
        let can_authenticate =
            !auth.tokens.is_empty() || jwt.enabled() || !auth.certificates.is_empty();
        if auth.anonymous == super::Anonymous::None && !can_authenticate {
            p.push("auth.anonymous = \"none\" but no tokens, JWT keys or certificates are configured: no caller could get in".to_owned());
        }
        p
    }

    /// Whether the gRPC listener is reachable from other hosts.
    fn public_listen(&self) -> bool {
        !self.server.listen.ip().is_loopback()
    }
}

impl Config {
    /// What is allowed but probably not meant: binding references that always resolve to null,
    /// a connection share as large as the whole server (one client could then take it all).
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
            if self.auth.anonymous == super::Anonymous::Any {
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
        let anonymous_admin = self.auth.anonymous != super::Anonymous::None
            && self.auth.anonymous_roles.iter().any(|r| r == "admin");
        if anonymous_admin {
            w.push(format!(
                "auth.anonymous_roles: callers without credentials ({}) get the admin role: they can register remotes (if enabled), accept changed tools and read tool health. \"loopback\" trusts the connection's address: behind a local proxy or a sidecar (Istio's inbound comes from 127.0.0.6) every caller looks local. Set auth.anonymous_roles = [\"agent\"] or auth.anonymous = \"none\" unless this machine is yours alone",
                match self.auth.anonymous {
                    super::Anonymous::Any => "from anywhere",
                    _ => "from this machine",
                }
            ));
        }
        if let Some(admin) = self.admin.listen.filter(|addr| !addr.ip().is_loopback()) {
            w.push(format!(
                "admin.listen: {admin} is not a loopback address; /metrics, /livez and /readyz have no authentication"
            ));
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

impl HooksConfig {
    pub(super) fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            for (j, c) in rule.when.iter().enumerate() {
                if let Err(problem) = c.condition() {
                    p.push(format!("hooks.rules[{i}].when[{j}]: {problem}"));
                }
            }
        }
        let allow = self.env_allow.iter().map(String::as_str);
        if let Err(problem) = toolgate_core::child::check_env(allow, &BTreeMap::new()) {
            p.push(format!("hooks.env_allow: {problem}"));
        }
        for (i, hook) in self.command.iter().enumerate() {
            if hook.command.first().is_none_or(String::is_empty) {
                p.push(format!("hooks.command[{i}].command: name a program to run"));
            }
            if let Err(problem) = toolgate_core::child::check_env([], &hook.env) {
                p.push(format!("hooks.command[{i}].env: {problem}"));
            }
        }
        for (i, hook) in self.grpc.iter().enumerate() {
            let authority = hook
                .endpoint
                .strip_prefix("http://")
                .or_else(|| hook.endpoint.strip_prefix("https://"))
                .unwrap_or("");
            if authority.is_empty() || authority.contains(char::is_whitespace) {
                p.push(format!(
                    "hooks.grpc[{i}].endpoint: '{}' is not a URL such as http://127.0.0.1:7000",
                    hook.endpoint
                ));
            }
        }
        p
    }
}
