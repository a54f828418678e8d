//! The rules `RULES` lists, one short function each and in its order: what a rule checks is
//! its name, and each problem it adds names the key. A rule only reads the config. Over 400
//! lines because it is one piece: the whole list, each rule a few lines (a rule left out of
//! `RULES` is dead code, which the lint run refuses).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::Problems;
use crate::config::{Anonymous, Config};
use toolgate_core::tools::BUILTIN_NAMES;

pub(super) fn telemetry_export(c: &Config, p: &mut Problems) {
    let t = &c.telemetry;
    // A file cannot give another scheme (it is refused as it is read); a config built in code can.
    if let Some(url) = &t.otlp_endpoint
        && !matches!(url.scheme(), "http" | "https")
    {
        p.add(format_args!(
            "telemetry.otlp_endpoint: '{url}' is not a URL such as http://127.0.0.1:4317"
        ));
    }
    p.check(
        t.metrics_interval >= Duration::from_secs(1),
        "telemetry.metrics_interval: must be at least 1s",
    );
    p.longer_than_zero("telemetry.export_timeout", t.export_timeout);
    p.check(
        (0.0..=1.0).contains(&t.sampler_ratio),
        "telemetry.sampler_ratio: must be between 0 and 1",
    );
    p.at_least_one("telemetry.max_queued_spans", t.max_queued_spans);
    p.check(
        !t.capture_content || t.content_max_chars > 0,
        "telemetry.content_max_chars: must be at least 1 when capture_content is on",
    );
}

pub(super) fn server_capacity(c: &Config, p: &mut Problems) {
    let s = &c.server;
    p.check(
        s.max_message_bytes >= 1024,
        "server.max_message_bytes: must be at least 1024",
    );
    for (key, value) in [
        ("server.max_concurrent_batches", s.max_concurrent_batches),
        ("server.max_concurrent_calls", s.max_concurrent_calls),
        (
            "server.max_batches_per_connection",
            s.max_batches_per_connection,
        ),
        (
            "server.max_calls_per_connection",
            s.max_calls_per_connection,
        ),
        ("server.max_batches_per_tenant", s.max_batches_per_tenant),
        ("server.max_calls_per_tenant", s.max_calls_per_tenant),
        (
            "server.max_batches_per_identity",
            s.max_batches_per_identity,
        ),
        ("server.max_calls_per_identity", s.max_calls_per_identity),
    ] {
        p.at_least_one(key, value);
    }
    p.at_least_one(
        "server.max_streams_per_connection",
        s.max_streams_per_connection,
    );
    p.at_least_one("server.max_connections", s.max_connections);
}

/// A share (what one connection, tenant, identity or address may hold) is at most its total:
/// shares are absolute, so one left at its default above a lowered total would not bound
/// anything (`max_batches_per_tenant = 128` of `max_concurrent_batches = 8` lets one tenant take
/// all 8), and the operator must say what each share is.
pub(super) fn shares_within_totals(c: &Config, p: &mut Problems) {
    let (s, l) = (&c.server, &c.limits);
    let batches = ("server.max_concurrent_batches", s.max_concurrent_batches);
    let calls = ("server.max_concurrent_calls", s.max_concurrent_calls);
    let buffered = (
        "limits.max_buffered_request_bytes",
        l.max_buffered_request_bytes,
    );
    let unread = ("limits.max_unread_reply_bytes", l.max_unread_reply_bytes);
    let decoded = ("limits.max_decoded_bytes", l.max_decoded_bytes);
    for (key, share, (total_key, total)) in [
        (
            "server.max_batches_per_connection",
            s.max_batches_per_connection,
            batches,
        ),
        (
            "server.max_batches_per_tenant",
            s.max_batches_per_tenant,
            batches,
        ),
        (
            "server.max_batches_per_identity",
            s.max_batches_per_identity,
            batches,
        ),
        (
            "server.max_calls_per_connection",
            s.max_calls_per_connection,
            calls,
        ),
        ("server.max_calls_per_tenant", s.max_calls_per_tenant, calls),
        (
            "server.max_calls_per_identity",
            s.max_calls_per_identity,
            calls,
        ),
        (
            // 0: no bound.
            "server.max_connections_per_address",
            s.max_connections_per_address,
            ("server.max_connections", s.max_connections),
        ),
        (
            "limits.max_buffered_request_bytes_per_connection",
            l.max_buffered_request_bytes_per_connection,
            buffered,
        ),
        (
            "limits.max_unread_reply_bytes_per_connection",
            l.max_unread_reply_bytes_per_connection,
            unread,
        ),
        (
            "limits.max_decoded_bytes_per_tenant",
            l.max_decoded_bytes_per_tenant,
            decoded,
        ),
        (
            "limits.max_decoded_bytes_per_identity",
            l.max_decoded_bytes_per_identity,
            decoded,
        ),
        (
            "limits.max_decoded_bytes_per_connection",
            l.max_decoded_bytes_per_connection,
            decoded,
        ),
    ] {
        // A total of 0 is refused on its own (`server_capacity`).
        p.check(
            total == 0 || share <= total,
            format_args!(
                "{key}: {share} is above {total_key} ({total}); a share cannot exceed its \
                 total, lower it to at most {total} too"
            ),
        );
    }
}

pub(super) fn connection_timeouts(c: &Config, p: &mut Problems) {
    // Shorter would close connections of clients on slow or distant links.
    p.check(
        c.server.preface_timeout >= Duration::from_millis(100),
        "server.preface_timeout: must be at least 100ms",
    );
    // Shorter would cancel healthy streams whose transport is merely busy.
    p.check(
        c.server.stall_timeout >= Duration::from_millis(100),
        "server.stall_timeout: must be at least 100ms",
    );
    // Shorter would close healthy connections on a busy or distant link.
    p.check(
        c.server.keepalive_timeout >= Duration::from_millis(100),
        "server.keepalive_timeout: must be at least 100ms",
    );
}

pub(super) fn request_limits(c: &Config, p: &mut Problems) {
    let l = &c.limits;
    p.at_least_one("limits.max_calls", l.max_calls);
    p.check(
        l.max_calls <= l.max_calls_ceiling,
        format_args!(
            "limits.max_calls: {} is above limits.max_calls_ceiling ({})",
            l.max_calls, l.max_calls_ceiling
        ),
    );
    p.at_least_one("limits.max_concurrency", l.max_concurrency);
    // Deeper arguments could be accepted but never answered: the reply would nest deeper than
    // protobuf decoders accept.
    let deepest = toolgate_proto::protojson::MAX_REPLY_DEPTH;
    p.check(
        (1..=deepest).contains(&l.max_json_depth),
        format_args!(
            "limits.max_json_depth: must be from 1 to {deepest} (a reply nests deeper than protobuf decoders accept past {deepest})"
        ),
    );
    // A reply has to carry at least the envelope of each call's result.
    p.check(
        l.max_reply_bytes >= 64 * 1024,
        "limits.max_reply_bytes: must be at least 65536",
    );
    p.at_least_one("limits.max_hook_processes", l.max_hook_processes);
}

/// Each byte budget must hold the largest message it counts, or that message could never pass.
pub(super) fn byte_budgets(c: &Config, p: &mut Problems) {
    let l = &c.limits;
    let (message, reply) = (c.server.max_message_bytes, l.max_reply_bytes);
    for (key, value, least, what) in [
        (
            "max_buffered_request_bytes",
            l.max_buffered_request_bytes,
            message,
            "server.max_message_bytes",
        ),
        (
            "max_buffered_request_bytes_per_connection",
            l.max_buffered_request_bytes_per_connection,
            message,
            "server.max_message_bytes",
        ),
        (
            "max_unread_reply_bytes",
            l.max_unread_reply_bytes,
            reply,
            "limits.max_reply_bytes",
        ),
        (
            "max_unread_reply_bytes_per_connection",
            l.max_unread_reply_bytes_per_connection,
            reply,
            "limits.max_reply_bytes",
        ),
    ] {
        p.check(
            value >= least,
            format_args!("limits.{key}: must be at least {what} ({least})"),
        );
    }
}

pub(super) fn call_deadlines(c: &Config, p: &mut Problems) {
    let d = &c.dispatch;
    p.longer_than_zero("dispatch.call_timeout", d.call_timeout);
    p.check(
        d.call_timeout <= d.max_call_timeout,
        "dispatch.call_timeout: is above dispatch.max_call_timeout",
    );
}

pub(super) fn approvals(c: &Config, p: &mut Problems) {
    p.longer_than_zero("approvals.timeout", c.approvals.timeout);
    // A person answers within hours; a longer wait would hold a call slot for days.
    p.check(
        c.approvals.timeout <= Duration::from_secs(24 * 3600),
        "approvals.timeout: must be at most 24h",
    );
}

pub(super) fn sessions(c: &Config, p: &mut Problems) {
    p.at_least_one("sessions.max_sessions", c.sessions.max_sessions);
    p.longer_than_zero("sessions.idle_ttl", c.sessions.idle_ttl);
    p.longer_than_zero("sessions.store_timeout", c.sessions.store_timeout);
    // A Redis store keeps every session's files in its memory, shared by the fleet.
    let shared = c.sessions.store != crate::config::SessionStoreUrl::Memory;
    p.check(
        !(shared && c.tools.builtin.scratch_quota_bytes == 0),
        "tools.builtin.scratch_quota_bytes: 0 (no quota) cannot be used with a Redis sessions.store: every session's scratch files live in its memory",
    );
}

pub(super) fn loop_window(c: &Config, p: &mut Problems) {
    p.at_least_one("loop_detection.window", c.loop_detection.window);
}

pub(super) fn retry_backoff(c: &Config, p: &mut Problems) {
    p.check(
        c.retry.base_delay <= c.retry.max_delay,
        "retry.base_delay: is above retry.max_delay",
    );
}

/// Each rule condition describes exactly one test (`ConditionConfig::condition` says why not).
/// Every hook and every permission rule decides, asks and has its answers remembered under its
/// name: two under one name would share a session's remembered answers and policy.
pub(super) fn distinct_names(c: &Config, p: &mut Problems) {
    let hooks = c
        .hooks
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name(i), format!("hooks.rules[{i}]")));
    let commands = c
        .hooks
        .command
        .iter()
        .enumerate()
        .map(|(i, h)| (h.name(i), format!("hooks.command[{i}]")));
    let grpc = c
        .hooks
        .grpc
        .iter()
        .enumerate()
        .map(|(i, h)| (h.name(i), format!("hooks.grpc[{i}]")));
    let permissions = c
        .permissions
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name(i), format!("permissions.rules[{i}]")));
    for (kind, entries) in [
        (
            "hooks",
            hooks.chain(commands).chain(grpc).collect::<Vec<_>>(),
        ),
        ("permission rules", permissions.collect()),
    ] {
        let mut first: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, at) in &entries {
            if let Some(before) = first.get(name.as_str()) {
                p.add(format!("{at}: the name '{name}' is also {before}'s; {kind} need distinct names (approvals and their remembered answers are kept under them)"));
            } else {
                first.insert(name, at);
            }
        }
    }
}

pub(super) fn hook_conditions(c: &Config, p: &mut Problems) {
    for (i, rule) in c.hooks.rules.iter().enumerate() {
        for (j, condition) in rule.when.iter().enumerate() {
            if let Err(problem) = condition.condition() {
                p.add(format!("hooks.rules[{i}].when[{j}]: {problem}"));
            }
        }
    }
}

pub(super) fn hook_environment(c: &Config, p: &mut Problems) {
    let allow = c.hooks.env_allow.iter().map(String::as_str);
    if let Err(problem) = toolgate_core::child::check_env(allow, &BTreeMap::new()) {
        p.add(format!("hooks.env_allow: {problem}"));
    }
}

pub(super) fn command_hooks(c: &Config, p: &mut Problems) {
    for (i, hook) in c.hooks.command.iter().enumerate() {
        p.check(
            hook.command
                .first()
                .is_some_and(|program| !program.is_empty()),
            format_args!("hooks.command[{i}].command: name a program to run"),
        );
        if let Err(problem) = toolgate_core::child::check_env([], &hook.env) {
            p.add(format!("hooks.command[{i}].env: {problem}"));
        }
    }
}

pub(super) fn grpc_hook_endpoints(c: &Config, p: &mut Problems) {
    for (i, hook) in c.hooks.grpc.iter().enumerate() {
        let authority = hook
            .endpoint
            .strip_prefix("http://")
            .or_else(|| hook.endpoint.strip_prefix("https://"))
            .unwrap_or("");
        p.check(
            !authority.is_empty() && !authority.contains(char::is_whitespace),
            format_args!(
                "hooks.grpc[{i}].endpoint: '{}' is not a URL such as http://127.0.0.1:7000",
                hook.endpoint
            ),
        );
    }
}

pub(super) fn suggestion_threshold(c: &Config, p: &mut Problems) {
    p.check(
        (0.0..=1.0).contains(&c.unknown_tool.suggestion_threshold),
        "unknown_tool.suggestion_threshold: must be from 0 to 1",
    );
}

pub(super) fn redaction_patterns(c: &Config, p: &mut Problems) {
    for (i, pattern) in c.redaction.patterns.iter().enumerate() {
        if let Err(e) = regex::Regex::new(&pattern.regex) {
            p.add(format!(
                "redaction.patterns[{i}]: regex does not compile: {e}"
            ));
        }
    }
}

/// Names are unique, and each entry is whole for its kind (`RemoteSpec::check`, no connecting).
pub(super) fn remotes(c: &Config, p: &mut Problems) {
    let mut names = BTreeSet::new();
    for (i, remote) in c.remotes.iter().enumerate() {
        p.check(
            names.insert(&remote.name),
            format_args!("remotes[{i}]: the name '{}' is used twice", remote.name),
        );
        if let Err(reason) = remote.check() {
            p.add(format!("remotes[{i}] ({}): {reason}", remote.name));
        }
    }
}

/// A binding's input is a table of references that can resolve, and its name is not a
/// built-in tool's unless it runs that tool (it would shadow it; other tools' names are
/// checked at start, once the remotes are known).
pub(super) fn bindings(c: &Config, p: &mut Problems) {
    for (name, binding) in &c.bindings {
        let builtin = c.tools.builtin.enabled
            && *name != binding.tool
            && BUILTIN_NAMES.contains(&name.as_str())
            && !c.tools.builtin.exclude.contains(name);
        if builtin {
            p.add(format!(
                "bindings.{name}: '{name}' is a built-in tool's name, which a binding to \
                 another tool ('{}') may not shadow",
                binding.tool
            ));
        }
        match &binding.input {
            None => {}
            Some(input @ serde_json::Value::Object(_)) => {
                for problem in toolgate_core::mapping::problems(input) {
                    p.add(format!("bindings.{name}.{problem}"));
                }
            }
            Some(_) => p.add(format!("bindings.{name}.input: must be a table")),
        }
    }
}

pub(super) fn per_tool(c: &Config, p: &mut Problems) {
    for (name, tool) in &c.per_tool {
        let pointers = [&tool.cache.path, &tool.invalidates_path];
        for pointer in pointers.into_iter().flatten() {
            p.check(
                pointer.is_empty() || pointer.starts_with('/'),
                format_args!("per_tool.{name}: pointer '{pointer}' must start with '/'"),
            );
        }
        p.check(
            !tool.timeout.is_some_and(|t| t.is_zero()),
            format_args!("per_tool.{name}.timeout: must be longer than zero"),
        );
    }
}

pub(super) fn builtin_exclusions(c: &Config, p: &mut Problems) {
    for name in &c.tools.builtin.exclude {
        p.check(
            BUILTIN_NAMES.contains(&name.as_str()),
            format_args!(
                "tools.builtin.exclude: '{name}' is not a built-in tool (built-ins: {})",
                BUILTIN_NAMES.join(", ")
            ),
        );
    }
}

pub(super) fn log_level(c: &Config, p: &mut Problems) {
    if let Err(e) = crate::config::log_filter(&c.log.level) {
        p.add(format!(
            "log.level: '{}' is not a valid log filter: {e}",
            c.log.level
        ));
    }
}

pub(super) fn tls_files(c: &Config, p: &mut Problems) {
    let tls = &c.tls;
    p.check(
        tls.cert_file.is_some() == tls.key_file.is_some(),
        "tls: cert_file and key_file go together",
    );
    p.check(
        tls.client_ca_file.is_none() || tls.enabled(),
        "tls.client_ca_file: client certificates need tls.cert_file and tls.key_file",
    );
    if tls.enabled() {
        p.longer_than_zero("tls.handshake_timeout", tls.handshake_timeout);
    }
}

pub(super) fn plaintext_needs_insecure(c: &Config, p: &mut Problems) {
    p.check(
        !c.public_listen() || c.tls.enabled() || c.server.insecure,
        format_args!(
            "server.listen: {} is not a loopback address and TLS is off; set tls.cert_file and tls.key_file, or server.insecure = true to serve plaintext anyway",
            c.server.listen
        ),
    );
}

pub(super) fn anonymous_callers(c: &Config, p: &mut Problems) {
    p.valid_tenant("auth.anonymous_tenant", &c.auth.anonymous_tenant);
    p.known_roles("auth.anonymous_roles", &c.auth.anonymous_roles);
}

pub(super) fn tokens(c: &Config, p: &mut Problems) {
    for (i, token) in c.auth.tokens.iter().enumerate() {
        let at = format!("auth.tokens[{i}]");
        p.check(
            !token.id.is_empty(),
            format_args!("{at}.id: required (the identity the token stands for)"),
        );
        p.valid_tenant(&format!("{at}.tenant"), &token.tenant);
        p.known_roles(&format!("{at}.roles"), &token.roles);
        let sources = [&token.sha256, &token.file, &token.env]
            .iter()
            .filter(|s| !s.is_empty())
            .count();
        p.check(
            sources == 1,
            format_args!("{at}: give exactly one of sha256, file, env"),
        );
        let hex = token.sha256.len() == 64 && token.sha256.bytes().all(|b| b.is_ascii_hexdigit());
        p.check(
            token.sha256.is_empty() || hex,
            format_args!("{at}.sha256: 64 hex digits (printf %s \"$TOKEN\" | sha256sum)"),
        );
    }
}

pub(super) fn jwt(c: &Config, p: &mut Problems) {
    let jwt = &c.auth.jwt;
    if let Some(url) = &jwt.jwks_url
        && !matches!(url.scheme(), "http" | "https")
    {
        p.add(format_args!(
            "auth.jwt.jwks_url: '{url}' is not an http(s) URL"
        ));
    }
    p.check(
        jwt.jwks_file.is_none() || jwt.jwks_url.is_none(),
        "auth.jwt: give jwks_file or jwks_url, not both",
    );
    if !jwt.enabled() {
        return;
    }
    p.check(
        !jwt.issuer.is_empty(),
        "auth.jwt.issuer: required (tokens from any issuer would pass)",
    );
    p.check(
        !jwt.audience.is_empty(),
        "auth.jwt.audience: required (tokens meant for any service would pass)",
    );
    p.check(
        jwt.jwks_refresh >= Duration::from_secs(10),
        "auth.jwt.jwks_refresh: must be at least 10s",
    );
    p.known_roles("auth.jwt.default_roles", &jwt.default_roles);
}

pub(super) fn certificates(c: &Config, p: &mut Problems) {
    for (i, cert) in c.auth.certificates.iter().enumerate() {
        let at = format!("auth.certificates[{i}]");
        p.check(
            rustls::pki_types::ServerName::try_from(cert.name.as_str()).is_ok(),
            format_args!("{at}.name: '{}' is not a DNS name or IP address", cert.name),
        );
        p.valid_tenant(&format!("{at}.tenant"), &cert.tenant);
        p.known_roles(&format!("{at}.roles"), &cert.roles);
    }
    p.check(
        c.auth.certificates.is_empty() || c.tls.client_ca_file.is_some(),
        "auth.certificates: client certificates need tls.client_ca_file",
    );
}

/// With anonymous callers refused, some credential must be configured.
pub(super) fn someone_can_get_in(c: &Config, p: &mut Problems) {
    let auth = &c.auth;
    let can_authenticate =
        !auth.tokens.is_empty() || auth.jwt.enabled() || !auth.certificates.is_empty();
    p.check(
        auth.anonymous != Anonymous::None || can_authenticate,
        "auth.anonymous = \"none\" but no tokens, JWT keys or certificates are configured: no caller could get in",
    );
}

/// An identity glob names its credential, so a JWT subject cannot pass for a token's id.
pub(super) fn permission_identities(c: &Config, p: &mut Problems) {
    for (i, rule) in c.permissions.rules.iter().enumerate() {
        for identity in &rule.identities {
            let scoped = identity.split_once(':').is_some_and(|(method, _)| {
                ["token", "jwt", "certificate", "anonymous"].contains(&method)
            });
            p.check(
                scoped,
                format_args!(
                    "permissions.rules[{i}].identities: '{identity}' names no credential: write token:{identity}, jwt:{identity}, certificate:{identity} or anonymous:*, so a JWT subject cannot pass for a token's id"
                ),
            );
        }
    }
}

/// The policy run-time registrations are checked against can be made.
pub(super) fn remote_registration(c: &Config, p: &mut Problems) {
    if let Err(problem) = c.remote_registration.policy() {
        p.add(problem);
    }
}

/// The admin listener's TLS needs `[tls]`; the console, off loopback, needs the admin listener's
/// TLS (it carries tokens and session cookies).
pub(super) fn console(c: &Config, p: &mut Problems) {
    p.check(
        !c.admin.tls || c.tls.enabled(),
        "admin.tls: needs tls.cert_file and tls.key_file, the certificate it serves",
    );
    p.check(
        c.console.session_ttl >= std::time::Duration::from_secs(60),
        "console.session_ttl: must be at least 1m",
    );
    p.check(
        c.console.max_sessions >= 1,
        "console.max_sessions: must be at least 1",
    );
    if let Some(listen) = c.admin.listen
        && c.console.enabled
    {
        p.check(
            listen.ip().is_loopback() || c.admin.tls,
            format_args!(
                "console.enabled: the admin listener ({listen}) is not on loopback and serves plaintext; set admin.tls = true (with [tls]'s certificate), or console.enabled = false"
            ),
        );
    }
}

pub(super) fn mcp_front(c: &Config, p: &mut Problems) {
    let mcp = &c.mcp;
    p.check(
        mcp.path.starts_with('/') && !mcp.path.starts_with("/.well-known/"),
        format_args!(
            "mcp.path: '{}' must start with '/' and not be under /.well-known/",
            mcp.path
        ),
    );
    p.check(mcp.page_size >= 1, "mcp.page_size: must be at least 1");
    p.check(
        mcp.max_sessions >= 4,
        "mcp.max_sessions: must be at least 4",
    );
    for (i, server) in mcp.authorization_servers.iter().enumerate() {
        let url = url::Url::parse(server).ok();
        p.check(
            url.is_some_and(|u| matches!(u.scheme(), "http" | "https")),
            format_args!("mcp.authorization_servers[{i}]: '{server}' is not an http(s) URL"),
        );
    }
    let Some(listen) = mcp.listen else {
        return;
    };
    p.check(
        listen.ip().is_loopback() || c.tls.enabled() || c.server.insecure,
        format_args!(
            "mcp.listen: {listen} is not a loopback address and TLS is off; set tls.cert_file and tls.key_file, or server.insecure = true to serve plaintext anyway"
        ),
    );
    for (other, key) in [
        (Some(c.server.listen), "server.listen"),
        (c.admin.listen, "admin.listen"),
    ] {
        p.check(
            other != Some(listen) || listen.port() == 0,
            format_args!("mcp.listen: {listen} is also {key}"),
        );
    }
}
