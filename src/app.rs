//! Wiring shared by `main` and embedders: config -> registry -> dispatcher -> gRPC server.
//! This is the library's embedding API: build a `Server` with extra Rust tools, start it, and get
//! its address and a shutdown handle back.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, ConfigError};
use crate::dispatch::{Binding, Cancel, Dispatcher, Pipeline};
use crate::grpc::server::ServeSettings;
use crate::grpc::{RequestRules, ServeError, ServiceState};
use crate::middleware::{CacheRule, MiddlewareConfig, PermissionRule, Redactor};
use crate::safety::breaker::BreakerConfig;
use crate::safety::health::Health;
use crate::safety::hooks::{CommandHook, GrpcHook, Hook, Hooks, RuleHook};
use crate::safety::recovery::{DefaultReflector, Reflector};
use crate::session::{SessionLimits, Sessions};
use crate::tools::remote::{RemoteError, Remotes};
use crate::tools::{Catalog, RegistryError, Tool, ToolRegistry, ToolSource, builtin_tools};

/// Distinguishes the default scratch bases of servers in one process.
static SERVER_SERIAL: AtomicU64 = AtomicU64::new(1);

/// A toolgate server to be started: its config plus in-process tools, hooks and reflector.
pub struct Server {
    config: Config,
    tools: Vec<Arc<dyn Tool>>,
    hooks: Vec<Arc<dyn Hook>>,
    reflector: Arc<dyn Reflector>,
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// A hook, a redaction pattern or another pipeline part could not be built.
    #[error("{0}")]
    Hooks(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

/// A running server. Dropping it does not stop the server; call `shutdown`.
pub struct RunningServer {
    addr: SocketAddr,
    trigger: CancellationToken,
    task: JoinHandle<Result<(), ServeError>>,
}

/// Starts a graceful shutdown of a running server; cheap to clone.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    trigger: CancellationToken,
}

impl Server {
    /// A server with `config` and, if enabled there, the built-in tools.
    pub fn new(config: Config) -> Self {
        Server {
            config,
            tools: Vec::new(),
            hooks: Vec::new(),
            reflector: Arc::new(DefaultReflector),
        }
    }

    /// Adds an in-process tool (listed with source EMBEDDED).
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Adds an in-process hook, consulted after the configured ones.
    pub fn hook(mut self, hook: impl Hook + 'static) -> Self {
        self.hooks.push(Arc::new(hook));
        self
    }

    /// Replaces the built-in reflector that judges failed attempts.
    pub fn reflector(mut self, reflector: impl Reflector + 'static) -> Self {
        self.reflector = Arc::new(reflector);
        self
    }

    /// Starts on the config's `server.listen` address.
    pub async fn start(self) -> Result<RunningServer, StartError> {
        let addr = self.config.server.listen.clone();
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        self.start_on(listener).await
    }

    /// Starts on `127.0.0.1:0` (any free port): the usual choice for tests.
    pub async fn start_local(self) -> Result<RunningServer, StartError> {
        let listener =
            TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|source| StartError::Bind {
                    addr: "127.0.0.1:0".to_owned(),
                    source,
                })?;
        self.start_on(listener).await
    }

    /// Starts on an already bound listener.
    pub async fn start_on(self, listener: TcpListener) -> Result<RunningServer, StartError> {
        // The one validation on the start path: configs from `Config::load` were checked there,
        // but an embedder's config may have been built or changed in code.
        self.config.validate()?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: "listener".to_owned(),
            source,
        })?;
        let dispatcher = self.build()?;
        let sessions = dispatcher.sessions_handle();
        // Remotes from the config are connected before serving; one that cannot be reached is
        // connected in the background (or stops the start when it is `required`).
        let remotes = Remotes::new(dispatcher.catalog().clone());
        for spec in &self.config.remotes {
            remotes.register_at_start(spec.clone()).await?;
        }
        let max_batches = self.config.server.max_concurrent_batches;
        let state = Arc::new(ServiceState {
            dispatcher,
            rules: RequestRules {
                limits: self.config.limits,
                dispatch: self.config.dispatch,
            },
            tracker: TaskTracker::new(),
            shutdown: Cancel::new(),
            batch_permits: Arc::new(Semaphore::new(max_batches)),
            max_batches,
            remotes: remotes.clone(),
            allow_registration: self.config.remote_registration.enabled,
            stdio_commands: self.config.remote_registration.stdio_commands.clone(),
        });
        let settings = ServeSettings {
            max_message_bytes: self.config.server.max_message_bytes,
            shutdown_grace: self.config.server.shutdown_grace,
        };
        let trigger = CancellationToken::new();
        let serve = crate::grpc::serve(listener, state, settings, trigger.clone());
        let sweeper = tokio::spawn(sweep_sessions(
            sessions.clone(),
            self.config.sessions.idle_ttl,
        ));
        let task = tokio::spawn(async move {
            let result = serve.await;
            sweeper.abort();
            sessions.remove_all();
            remotes.close();
            result
        });
        tracing::info!(%addr, "listening");
        Ok(RunningServer {
            addr,
            trigger,
            task,
        })
    }

    /// The dispatcher this server would run, without the gRPC layer: for running batches
    /// in-process (benchmarks, embedders that call `Dispatcher::run` directly).
    pub fn dispatcher(&self) -> Result<Dispatcher, StartError> {
        self.config.validate()?;
        self.build()
    }

    /// The dispatcher from a config already validated.
    fn build(&self) -> Result<Dispatcher, StartError> {
        let registry = Arc::new(Catalog::new(self.registry()?));
        let sessions = Arc::new(sessions(&self.config));
        let pipeline = self.pipeline(registry.clone())?;
        let bindings = self
            .config
            .bindings
            .iter()
            .map(|(name, b)| {
                (
                    name.clone(),
                    Binding {
                        tool: b.tool.clone(),
                        input: b.input.clone(),
                    },
                )
            })
            .collect();
        Dispatcher::new(registry, sessions, pipeline)
            .with_bindings(bindings)
            .map_err(|problems| {
                StartError::Config(ConfigError {
                    problems: vec![problems],
                })
            })
    }

    fn pipeline(&self, registry: Arc<Catalog>) -> Result<Pipeline, StartError> {
        let c = &self.config;
        let health = Arc::new(Health::new(BreakerConfig {
            failure_threshold: c.breaker.failure_threshold,
            cooldown: c.breaker.cooldown,
            probe_lease: c.breaker.probe_lease,
        }));
        let mut hooks = configured_hooks(c).map_err(StartError::Hooks)?;
        hooks.extend(self.hooks.iter().cloned());
        let middleware = middleware_config(c).map_err(StartError::Hooks)?;
        let mut pipeline = Pipeline::new(registry, health, c.policy(), &middleware);
        pipeline.hooks = Hooks::new(hooks);
        pipeline.reflector = self.reflector.clone();
        pipeline.batch_budget_chars = c.output.batch_budget_chars;
        pipeline.preview_chars = c.output.event_preview_chars;
        pipeline.max_error_chars = c.output.max_error_chars;
        Ok(pipeline)
    }

    fn registry(&self) -> Result<ToolRegistry, RegistryError> {
        let mut registry = ToolRegistry::default();
        if self.config.tools.builtin.enabled {
            for tool in builtin_tools(&self.config.tools.builtin.exclude) {
                registry.register(tool, ToolSource::Builtin)?;
            }
        }
        for tool in &self.tools {
            registry.register(tool.clone(), ToolSource::Embedded)?;
        }
        Ok(registry)
    }
}

/// The middleware settings from the config: global values plus per-tool overrides.
pub(crate) fn middleware_config(c: &Config) -> Result<MiddlewareConfig, String> {
    let redactor = if c.redaction.enabled {
        let custom: Vec<(String, String)> = c
            .redaction
            .patterns
            .iter()
            .map(|p| (p.kind.clone(), p.regex.clone()))
            .collect();
        Redactor::new(&custom, c.redaction.entropy)?
    } else {
        Redactor::disabled()
    };
    let permissions = c
        .permissions
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| PermissionRule {
            id: r.id.clone().unwrap_or_else(|| format!("rules[{i}]")),
            tools: r.tools.clone(),
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

/// Hooks from the config, in the documented order: rules, command hooks, gRPC hooks.
fn configured_hooks(config: &Config) -> Result<Vec<Arc<dyn Hook>>, String> {
    let mut hooks: Vec<Arc<dyn Hook>> = Vec::new();
    for (i, rule) in config.hooks.rules.iter().enumerate() {
        let conditions = rule
            .when
            .iter()
            .enumerate()
            .map(|(j, c)| {
                c.condition()
                    .map_err(|problem| format!("hooks.rules[{i}].when[{j}]: {problem}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let id = rule.id.clone().unwrap_or_else(|| format!("rules[{i}]"));
        hooks.push(Arc::new(RuleHook::new(
            id,
            rule.tools.clone(),
            conditions,
            rule.action,
            rule.reason.clone(),
        )));
    }
    for (i, h) in config.hooks.command.iter().enumerate() {
        let name = h.name.clone().unwrap_or_else(|| format!("command[{i}]"));
        let hook = CommandHook::new(name, &h.command, h.tools.clone(), h.timeout, h.failure_mode)
            .ok_or_else(|| format!("hooks.command[{i}]: name a program to run"))?;
        hooks.push(Arc::new(hook));
    }
    for (i, h) in config.hooks.grpc.iter().enumerate() {
        let name = h.name.clone().unwrap_or_else(|| format!("grpc[{i}]"));
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

/// Removes the scratch bases (`toolgate-<pid>-<serial>`) that servers left in `temp` when they
/// were killed: only that naming pattern, and only when the owning process is gone. Where
/// processes cannot be looked up (no `/proc`), nothing is removed.
fn remove_stale_bases(temp: &Path) {
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
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => {
                tracing::info!(path = %entry.path().display(), pid, "removed a stale scratch base")
            }
            Err(error) => {
                tracing::debug!(path = %entry.path().display(), %error, "stale scratch base not removed")
            }
        }
    }
}

/// The owning pid of a scratch base name `toolgate-<pid>-<serial>`; `None` for anything else.
fn stale_base_owner(name: &str) -> Option<u32> {
    let (pid, serial) = name.strip_prefix("toolgate-")?.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(serial) {
        return None;
    }
    pid.parse().ok()
}

fn sessions(config: &Config) -> Sessions {
    let limits = SessionLimits {
        idle_ttl: config.sessions.idle_ttl,
        max_sessions: config.sessions.max_sessions,
        loop_window: config.loop_detection.window,
        memory_entries: if config.memory.enabled {
            config.memory.max_entries
        } else {
            0
        },
    };
    let configured = &config.sessions.scratch_base;
    if configured.as_os_str().is_empty() {
        let temp = std::env::temp_dir();
        remove_stale_bases(&temp);
        let serial = SERVER_SERIAL.fetch_add(1, Ordering::Relaxed);
        let base: PathBuf = temp.join(format!("toolgate-{}-{serial}", std::process::id()));
        Sessions::new(base, true, limits)
    } else {
        Sessions::new(configured.clone(), false, limits)
    }
}

/// Drops idle sessions, checking four times per TTL (at most once a minute, at least every 10 ms).
async fn sweep_sessions(sessions: Arc<Sessions>, idle_ttl: Duration) {
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

impl RunningServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle that starts a graceful shutdown from anywhere.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            trigger: self.trigger.clone(),
        }
    }

    /// Starts a graceful shutdown and waits until the server has stopped.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        self.trigger.cancel();
        self.wait().await
    }

    /// Waits until the server stops (after a shutdown handle fired, or a transport failure).
    /// A server task that panicked or was aborted is `ServeError::TaskFailed`, never `Ok`.
    pub async fn wait(self) -> Result<(), ServeError> {
        self.task.await.map_err(ServeError::TaskFailed)?
    }
}

impl ShutdownHandle {
    /// Starts a graceful shutdown; returns at once.
    pub fn shutdown(&self) {
        self.trigger.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_scratch_bases_of_dead_processes_are_removed() {
        assert_eq!(stale_base_owner("toolgate-123-0"), Some(123));
        for other in [
            "toolgate-abc-0",
            "toolgate-12",
            "toolgate-12-",
            "toolgate--1",
            "mine-1-2",
        ] {
            assert_eq!(stale_base_owner(other), None, "{other}");
        }
        let temp = std::env::temp_dir().join(format!("toolgate-stale-test-{}", std::process::id()));
        std::fs::create_dir_all(&temp).unwrap();
        // pid 4194304 is above Linux's pid_max, so it is never alive.
        let dead = temp.join("toolgate-4194304-0");
        let alive = temp.join(format!("toolgate-{}-9", std::process::id()));
        let unrelated = temp.join("toolgate-notes");
        for dir in [&dead, &alive, &unrelated] {
            std::fs::create_dir_all(dir.join("session")).unwrap();
        }
        remove_stale_bases(&temp);
        let proc_exists = Path::new("/proc/self").exists();
        assert_eq!(dead.exists(), !proc_exists, "a dead process's base goes");
        assert!(
            alive.exists() && unrelated.exists(),
            "nothing else is touched"
        );
        std::fs::remove_dir_all(&temp).unwrap();
    }

    #[tokio::test]
    async fn an_aborted_server_task_is_an_error() {
        let server = Server::new(Config::default()).start_local().await.unwrap();
        server.task.abort();
        let error = server.wait().await.unwrap_err();
        assert!(
            matches!(&error, ServeError::TaskFailed(join) if join.is_cancelled()),
            "{error}"
        );
        assert!(
            error.to_string().starts_with("the server task failed: "),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_panicked_server_task_is_an_error() {
        let server = RunningServer {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            trigger: CancellationToken::new(),
            task: tokio::spawn(async { panic!("the server broke") }),
        };
        let error = server.wait().await.unwrap_err();
        assert!(
            matches!(&error, ServeError::TaskFailed(join) if join.is_panic()),
            "{error}"
        );
        assert!(error.to_string().contains("the server broke"), "{error}");
    }
}
