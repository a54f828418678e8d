//! What the config makes at start: the middleware settings, the configured hooks and the session
//! table (with stale scratch bases cleared), and the task that expires idle sessions.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::config::{Config, SessionStoreUrl, fingerprint};
use toolgate_core::approvals::AskPolicies;
use toolgate_core::child::ChildEnv;
use toolgate_core::dispatch::PipelineSettings;
use toolgate_core::metrics::Metrics;
use toolgate_core::middleware::{CacheRule, MiddlewareConfig, PermissionRule};
use toolgate_core::safety::hooks::{CommandHook, Hook, RuleHook};
use toolgate_core::session::{SessionLimits, Sessions};
use toolgate_core::tools::unguessable_name;
use toolgate_remotes::GrpcHook;

/// The pipeline's settings from the config: the one place the config is mapped onto the
/// engine's typed settings (whose defaults the config's match). Redactions of tool results are
/// counted into `metrics`.
pub(crate) fn pipeline_settings(
    c: &Config,
    metrics: Arc<Metrics>,
) -> Result<PipelineSettings, toolgate_core::middleware::PatternError> {
    Ok(PipelineSettings {
        breaker: c.breaker,
        policy: c.policy(),
        middleware: middleware_config(c, metrics)?,
        batch_budget_chars: c.output.batch_budget_chars,
        preview_chars: c.output.event_preview_chars,
        max_error_chars: c.output.max_error_chars,
        approval_timeout: c.approvals.timeout,
        ask_policies: ask_policies(c),
    })
}

/// The middleware settings from the config: global values plus per-tool overrides.
fn middleware_config(
    c: &Config,
    metrics: Arc<Metrics>,
) -> Result<MiddlewareConfig, toolgate_core::middleware::PatternError> {
    let redactor = c.redaction.redactor()?.with_metrics(metrics.clone());
    let permissions = c
        .permissions
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| PermissionRule {
            id: r.name(i),
            tools: r.tools.clone(),
            identities: r.identities.clone(),
            tenants: r.tenants.clone(),
            roles: r.roles.clone(),
            verdict: r.decision,
            reason: r.reason.clone(),
        })
        .collect();
    let mut m = MiddlewareConfig {
        default_timeout: c.dispatch.call_timeout,
        permissions,
        validate: c.validation.enabled,
        max_output_chars: c.output.max_chars,
        redactor: Arc::new(redactor),
        cache_max_entries: c.cache.max_entries,
        cache_max_bytes: c.cache.max_bytes,
        metrics,
        suggestion_threshold: c.unknown_tool.suggestion_threshold,
        ..MiddlewareConfig::default()
    };
    for (name, tool) in &c.per_tool {
        if let Some(t) = tool.timeout {
            m.tool_timeouts.insert(name.clone(), t);
        }
        if let Some(chars) = tool.max_output_chars {
            m.tool_output_chars.insert(name.clone(), chars);
        }
        if tool.cache.enabled {
            let rule = CacheRule {
                ttl: tool.cache.ttl,
                ttl_turns: tool.cache.ttl_turns,
                scope: tool.cache.scope,
                path: tool.cache.path.clone(),
            };
            m.cache_rules.insert(name.clone(), rule);
        }
        if let Some(pointer) = &tool.invalidates_path {
            m.cache_invalidators.insert(name.clone(), pointer.clone());
        }
        if tool.select_result == Some(false) {
            m.select_pass_through.insert(name.clone());
        }
    }
    Ok(m)
}

/// Who may answer the asks of each configured hook and permission rule, and whether answers may
/// be remembered, by the name each asks under (`[approvals]` for the rest, and for hooks added
/// in code).
fn ask_policies(c: &Config) -> AskPolicies {
    let approvals = &c.approvals;
    let mut policies = AskPolicies::new(approvals.policy(None, true));
    let mut set = |source: String, policy, fingerprint| {
        policies.set(source.clone(), policy);
        policies.version(source, fingerprint);
    };
    for (i, r) in c.permissions.rules.iter().enumerate() {
        let policy = approvals.policy(r.requester_may_answer, r.remember);
        set(
            PermissionRule::source_of(&r.name(i)),
            policy,
            fingerprint(r),
        );
    }
    let hooks = &c.hooks;
    for (i, r) in hooks.rules.iter().enumerate() {
        let policy = approvals.policy(r.requester_may_answer, r.remember);
        set(r.name(i), policy, fingerprint(r));
    }
    for (i, h) in hooks.command.iter().enumerate() {
        let policy = approvals.policy(h.requester_may_answer, h.remember);
        set(h.name(i), policy, fingerprint(h));
    }
    for (i, h) in hooks.grpc.iter().enumerate() {
        let policy = approvals.policy(h.requester_may_answer, h.remember);
        set(h.name(i), policy, fingerprint(h));
    }
    policies
}

/// A configured hook that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("hooks.rules[{rule}].when[{condition}]: {problem}")]
    Condition {
        rule: usize,
        condition: usize,
        problem: String,
    },
    #[error("hooks.command[{0}]: name a program to run")]
    NoProgram(usize),
    #[error(transparent)]
    Endpoint(#[from] toolgate_remotes::InvalidEndpoint),
}

/// Hooks from the config, in the documented order: rules, command hooks, gRPC hooks.
pub(super) fn configured_hooks(config: &Config) -> Result<Vec<Arc<dyn Hook>>, HookError> {
    let mut hooks: Vec<Arc<dyn Hook>> = Vec::new();
    for (i, rule) in config.hooks.rules.iter().enumerate() {
        let conditions = rule
            .when
            .iter()
            .enumerate()
            .map(|(j, c)| {
                c.condition().map_err(|problem| HookError::Condition {
                    rule: i,
                    condition: j,
                    problem,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let id = rule.name(i);
        hooks.push(Arc::new(RuleHook::new(
            id,
            rule.tools.clone(),
            conditions,
            rule.action,
            rule.reason.clone(),
        )));
    }
    let processes = Arc::new(Semaphore::new(config.limits.max_hook_processes));
    for (i, h) in config.hooks.command.iter().enumerate() {
        let name = h.name(i);
        let env = ChildEnv::new(config.hooks.env_allow.iter().map(String::as_str), &h.env);
        let hook = CommandHook::new(name, &h.command, h.tools.clone(), h.timeout, h.failure_mode)
            .ok_or(HookError::NoProgram(i))?
            .limited_by(processes.clone())
            .with_env(env);
        hooks.push(Arc::new(hook));
    }
    for (i, h) in config.hooks.grpc.iter().enumerate() {
        let name = h.name(i);
        let hook = GrpcHook::new(
            name,
            &h.endpoint,
            h.tools.clone(),
            h.timeout,
            h.failure_mode,
        )?;
        hooks.push(Arc::new(hook));
    }
    Ok(hooks)
}

/// Removes the scratch bases (`toolgate-<pid>-<hex>`) that servers left in `temp` when they
/// were killed: only that naming pattern, and only when the owning process is gone. Where
/// processes cannot be looked up (no `/proc`), nothing is removed.
pub(super) fn remove_stale_bases(temp: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(stale_base_owner) else {
            continue;
        };
        if pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        match toolgate_core::tools::remove_tree(&entry.path()) {
            Ok(()) => {
                tracing::info!(path = %entry.path().display(), pid, "removed a stale scratch base")
            }
            Err(error) => {
                tracing::debug!(path = %entry.path().display(), %error, "stale scratch base not removed")
            }
        }
    }
}

/// The owning pid of a scratch base name `toolgate-<pid>-<hex>` (random now, a serial number
/// before); `None` for anything else, session directories (`toolgate-<hex>`) included.
pub(super) fn stale_base_owner(name: &str) -> Option<u32> {
    let (pid, token) = name.strip_prefix("toolgate-")?.split_once('-')?;
    let digits = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    let hex = !token.is_empty() && token.bytes().all(|b| b.is_ascii_hexdigit());
    if !digits || !hex {
        return None;
    }
    pid.parse().ok()
}

/// The server's scratch base could not be given an unguessable name (no randomness).
#[derive(Debug, thiserror::Error)]
#[error("scratch base: {0}")]
pub struct ScratchBaseError(#[source] std::io::Error);

/// The session table. A server's own base under the temp dir gets an unguessable name, so no
/// other user can make it first (and so own the directory its sessions' directories go in).
pub(super) fn sessions(
    config: &Config,
    metrics: Arc<Metrics>,
) -> Result<Sessions, ScratchBaseError> {
    let limits = SessionLimits {
        idle_ttl: config.sessions.idle_ttl,
        max_sessions: config.sessions.max_sessions,
        loop_window: config.loop_detection.window,
        memory_entries: if config.memory.enabled {
            config.memory.max_entries
        } else {
            0
        },
        max_memory_bytes: config.memory.max_bytes,
        scratch_quota_bytes: config.tools.builtin.scratch_quota_bytes,
    };
    if let Some(configured) = &config.sessions.scratch_base {
        Ok(Sessions::with_metrics(
            configured.clone(),
            false,
            limits,
            metrics,
        ))
    } else {
        let temp = std::env::temp_dir();
        remove_stale_bases(&temp);
        let prefix = format!("toolgate-{}-", std::process::id());
        let name = unguessable_name(&prefix).map_err(ScratchBaseError)?;
        let base: PathBuf = temp.join(name);
        Ok(Sessions::with_metrics(base, true, limits, metrics))
    }
}

/// Why `sessions.store` cannot be used. The texts never hold the password.
#[derive(Debug, thiserror::Error)]
pub enum SessionStoreError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreConfigError),
    #[error("sessions.store_password_file: cannot read {path}: {source}")]
    PasswordFile {
        path: String,
        source: std::io::Error,
    },
    #[error("sessions.store_password_env: the variable {0} is not set (or not UTF-8)")]
    PasswordEnv(String),
    #[error("sessions.store_ca_file: cannot read {path}: {source}")]
    CaFile {
        path: String,
        source: std::io::Error,
    },
}

/// The shared session store `sessions.store` names (which also holds the result cache);
/// `None` for `memory`.
pub(super) fn session_store(
    config: &Config,
    metrics: Arc<Metrics>,
) -> Result<Option<Arc<crate::store::RedisStore>>, SessionStoreError> {
    let s = &config.sessions;
    let SessionStoreUrl::Redis(url) = &s.store else {
        return Ok(None);
    };
    let password = match (&s.store_password_file, &s.store_password_env) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path).map_err(|source| {
                SessionStoreError::PasswordFile {
                    path: path.display().to_string(),
                    source,
                }
            })?;
            Some(text.lines().next().unwrap_or_default().to_owned())
        }
        (None, Some(var)) => {
            Some(std::env::var(var).map_err(|_| SessionStoreError::PasswordEnv(var.clone()))?)
        }
        (None, None) => None,
    };
    let ca = match &s.store_ca_file {
        Some(path) => Some(
            std::fs::read(path).map_err(|source| SessionStoreError::CaFile {
                path: path.display().to_string(),
                source,
            })?,
        ),
        None => None,
    };
    let store = crate::store::RedisStore::new(
        crate::store::RedisSettings {
            url: url.clone(),
            password,
            cluster: s.store_cluster,
            ca,
            timeout: s.store_timeout,
            idle_ttl: s.idle_ttl,
            loop_window: config.loop_detection.window,
            memory_entries: if config.memory.enabled {
                config.memory.max_entries
            } else {
                0
            },
            max_sessions: s.max_sessions,
            tenant_scratch_bytes: s.tenant_scratch_bytes,
            tenant_memory_bytes: s.tenant_memory_bytes,
        },
        metrics,
    )?;
    tracing::info!(store = %store.describe(), "named sessions shared through redis");
    Ok(Some(Arc::new(store)))
}

/// Drops idle sessions, checking four times per TTL (at most once a minute, at least every 10 ms).
pub(super) async fn sweep_sessions(sessions: Arc<Sessions>, idle_ttl: Duration) {
    let every = (idle_ttl / 4).clamp(Duration::from_millis(10), Duration::from_secs(60));
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let expired = sessions.sweep(tokio::time::Instant::now());
        if expired > 0 {
            tracing::debug!(expired, "idle sessions dropped");
        }
    }
}

/// File descriptors kept for everything but client connections: listeners, remotes, hook and
/// MCP processes, scratch files, log and telemetry sockets.
const RESERVED_FILES: u64 = 128;

/// The connection cap the process can honour: the configured one, lowered (with a warning) to
/// what the file limit leaves after `RESERVED_FILES`, once the soft limit is raised to the hard
/// one. Past the file limit, accepting fails and legitimate calls time out; refused at the cap,
/// a client gets a clear close instead.
pub(crate) fn connection_cap(configured: usize) -> usize {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (limit.current, limit.maximum)
        && current < maximum
    {
        let raised = Rlimit {
            current: Some(maximum),
            maximum: Some(maximum),
        };
        if let Err(error) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(%error, "the file limit could not be raised");
        }
    }
    let Some(files) = getrlimit(Resource::Nofile).current else {
        return configured;
    };
    let usable = usize::try_from(files.saturating_sub(RESERVED_FILES).max(1)).unwrap_or(usize::MAX);
    if usable < configured {
        tracing::warn!(
            configured,
            usable,
            file_limit = files,
            "server.max_connections is above what the file limit allows; lowered"
        );
    }
    configured.min(usable)
}
