//! Wiring shared by `main` and embedders: config -> registry -> dispatcher -> gRPC server.
//! This is the library's embedding API: build a `Server` with extra Rust tools, start it, and get
//! its address and a shutdown handle back.

mod admin;
pub(crate) mod build;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError};
use crate::front::admission::{Admission, Capacity};
use crate::front::auth::Authenticator;
use crate::front::decoded::{DecodedBudget, DecodedLimits};
use crate::front::entry::Entry;
use crate::front::tls::{Tls, TlsSettings};
use crate::grpc::StallWatch;
use crate::grpc::server::ServeSettings;
use crate::grpc::transport::{Budgets, Connections, TransportSettings};
use crate::grpc::{RequestRules, ServeError, ServiceState};
use crate::telemetry::metrics::{MetricsPipeline, OtlpExport};
use crate::telemetry::traces::{TraceExport, TracePipeline};
use build::{configured_hooks, sessions, sweep_sessions};
use toolgate_core::dispatch::{Dispatcher, Pipeline};
use toolgate_core::safety::hooks::Hook;
use toolgate_core::safety::recovery::{DefaultReflector, Reflector};
use toolgate_core::tools::{Catalog, RegistryError, Tool, ToolRegistry, ToolSource, builtin_tools};
use toolgate_core::trace::Tracer;
use toolgate_remotes::{RemoteError, Remotes};

/// How long stopping waits for the last span and metrics exports.
/// How often the shared session store is asked whether it is up.
const STORE_PROBE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long cancelled calls get to end once stdin closed and the grace passed.
const STDIO_CANCEL_SETTLE: std::time::Duration = std::time::Duration::from_secs(5);
const METRICS_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// A toolgate server to be started: its config plus in-process tools, hooks and reflector.
pub struct Server {
    config: Config,
    tools: Vec<Arc<dyn Tool>>,
    hooks: Vec<Arc<dyn Hook>>,
    reflector: Arc<dyn Reflector>,
    /// What this server's metrics are recorded into and read from.
    metrics: Arc<MetricsPipeline>,
    /// Where its spans go: set at start when a collector is configured, else off.
    traces: Option<Arc<TracePipeline>>,
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
    /// A configured hook could not be built.
    #[error(transparent)]
    Hooks(#[from] build::HookError),
    /// A redaction pattern does not compile.
    #[error(transparent)]
    Redaction(#[from] toolgate_core::middleware::PatternError),
    /// An OTLP exporter could not be built.
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::ExporterError),
    /// The server's scratch base could not be named.
    #[error(transparent)]
    ScratchBase(#[from] build::ScratchBaseError),
    /// TLS files that cannot be used (unreadable, malformed, not matching).
    #[error(transparent)]
    Tls(#[from] crate::front::tls::TlsError),
    /// `[auth]` settings that cannot be used (an unreadable token or JWKS file).
    #[error(transparent)]
    Auth(#[from] crate::front::auth::AuthError),
    #[error(transparent)]
    Stdio(#[from] crate::mcp::StdioError),
    /// `sessions.store` cannot be used (its URL, or an unreadable password file or variable).
    #[error(transparent)]
    SessionStore(#[from] build::SessionStoreError),
    /// `[remote_registration]` rules that cannot be used.
    #[error(transparent)]
    Registration(#[from] crate::config::RegistrationConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

/// A running server. Dropping it does not stop the server; call `shutdown`.
pub struct RunningServer {
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    mcp_addr: Option<SocketAddr>,
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
            metrics: Arc::new(MetricsPipeline::new()),
            traces: None,
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

    /// Starts on the config's `server.listen` address (and the admin listener on
    /// `admin.listen`, unless that is off).
    pub async fn start(self) -> Result<RunningServer, StartError> {
        let listener = bind(self.config.server.listen).await?;
        let admin = self.admin_listener(None).await?;
        let mcp = self.mcp_listener(None).await?;
        self.start_with(listener, admin, mcp).await
    }

    /// Starts on `127.0.0.1:0` (any free port), and the admin listener too when it is on: the
    /// usual choice for tests.
    pub async fn start_local(self) -> Result<RunningServer, StartError> {
        let any_port = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let listener = bind(any_port).await?;
        let admin = self.admin_listener(Some(any_port)).await?;
        let mcp = self.mcp_listener(Some(any_port)).await?;
        self.start_with(listener, admin, mcp).await
    }

    /// Starts on an already bound listener (and the admin listener on `admin.listen`, unless
    /// that is off).
    pub async fn start_on(self, listener: TcpListener) -> Result<RunningServer, StartError> {
        let admin = self.admin_listener(None).await?;
        let mcp = self.mcp_listener(None).await?;
        self.start_with(listener, admin, mcp).await
    }

    /// The MCP listener, on `addr` instead of the configured address when given; `None` when
    /// `mcp.listen` is off.
    async fn mcp_listener(
        &self,
        addr: Option<SocketAddr>,
    ) -> Result<Option<TcpListener>, StartError> {
        let Some(configured) = self.config.mcp.listen else {
            return Ok(None);
        };
        Ok(Some(bind(addr.unwrap_or(configured)).await?))
    }

    /// The admin listener, on `addr` instead of the configured address when given; `None` when
    /// `admin.listen` is off.
    async fn admin_listener(
        &self,
        addr: Option<SocketAddr>,
    ) -> Result<Option<TcpListener>, StartError> {
        let Some(configured) = self.config.admin.listen else {
            return Ok(None);
        };
        Ok(Some(bind(addr.unwrap_or(configured)).await?))
    }

    async fn start_with(
        mut self,
        listener: TcpListener,
        admin: Option<TcpListener>,
        mcp: Option<TcpListener>,
    ) -> Result<RunningServer, StartError> {
        // The one validation on the start path: configs from `Config::load` were checked there,
        // but an embedder's config may have been built or changed in code.
        self.config.validate()?;
        // With a collector configured, the metrics are also pushed over OTLP; the pipeline is
        // made here, inside the runtime its exporter needs, before anything records into it.
        if let Some(export) = OtlpExport::from_config(&self.config.telemetry) {
            let pipeline = MetricsPipeline::with_otlp(&export)?;
            tracing::info!(endpoint = ?export.endpoint, "exporting metrics over OTLP");
            self.metrics = Arc::new(pipeline);
        }
        if let Some(export) = TraceExport::from_config(&self.config.telemetry) {
            let traces = TracePipeline::start(&export, self.metrics.metrics())?;
            tracing::info!(endpoint = ?export.endpoint, "exporting traces over OTLP");
            self.traces = Some(Arc::new(traces));
        }
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: "listener".to_owned(),
            source,
        })?;
        let (dispatcher, shared_store) = self.build_with_store()?;
        let sessions = dispatcher.sessions_handle();
        let auth = Arc::new(Authenticator::from_config(&self.config.auth).await?);
        let tls = match TlsSettings::from_config(&self.config.tls) {
            Some(settings) => Some(Tls::load(settings)?),
            None => None,
        };
        // Remotes from the config are connected before serving; one that cannot be reached is
        // connected in the background (or stops the start when it is `required`).
        let remotes = Remotes::new(dispatcher.catalog().clone(), self.metrics.metrics());
        for spec in &self.config.remotes {
            remotes.register_at_start(spec.clone()).await?;
        }
        let server = &self.config.server;
        let mut transport = TransportSettings::from_config(server);
        transport.max_connections = build::connection_cap(server.max_connections);
        let budgets = Budgets::from_config(&self.config.limits, &self.metrics.metrics());
        // The MCP front's request bodies count against gRPC's request-bytes budget.
        let requests = budgets.requests.clone();
        let state = Arc::new(ServiceState {
            connections: Connections::new(transport, self.metrics.metrics()),
            dispatcher,
            rules: RequestRules {
                limits: self.config.limits,
                dispatch: self.config.dispatch,
            },
            entry: Arc::new(Entry::new(
                Admission::new(Capacity::from(&self.config.server)),
                DecodedBudget::new(DecodedLimits::from(&self.config.limits)),
                self.metrics.metrics(),
            )),
            stalls: StallWatch::new(self.config.server.stall_timeout),
            metrics: self.metrics.metrics(),
            tracer: self.tracer(),
            auth: auth.clone(),
            remotes: remotes.clone(),
            allow_registration: self.config.remote_registration.enabled,
            registration: Arc::new(self.config.remote_registration.policy()?),
        });
        admin::register_gauges(&self.metrics, &state, &remotes);
        let settings = ServeSettings {
            transport,
            budgets,
            shutdown_grace: self.config.server.shutdown_grace,
        };
        let trigger = CancellationToken::new();
        // The admin listener outlives draining, so `/readyz` says "shutting down" meanwhile.
        let stop_admin = CancellationToken::new();
        let admin_addr = match admin {
            Some(listener) => {
                let admin_addr = listener.local_addr().ok();
                let admin_tls = if self.config.admin.tls {
                    tls.clone()
                } else {
                    None
                };
                let console = self.config.console.enabled.then(|| {
                    crate::console::Console::new(
                        state.dispatcher.clone(),
                        state.allow_registration.then(|| state.remotes.clone()),
                        auth.clone(),
                        &self.config.console,
                        admin_tls.is_some(),
                        self.config.limits.max_json_depth,
                    )
                    .router()
                });
                tokio::spawn(admin::serve(
                    listener,
                    self.metrics.clone(),
                    state.clone(),
                    console,
                    self.config.console.allowed_hosts.clone(),
                    admin_tls,
                    stop_admin.clone(),
                ));
                admin_addr
            }
            None => None,
        };
        // The MCP listener, like the admin one, outlives draining: its running calls are the
        // entry's, and drain with the gRPC ones.
        let mcp_addr = match mcp {
            Some(listener) => {
                let mcp_addr = listener.local_addr().ok();
                let parts = crate::mcp::McpParts {
                    dispatcher: state.dispatcher.clone(),
                    entry: state.entry.clone(),
                    metrics: state.metrics.clone(),
                    tracer: state.tracer.clone(),
                    shared: shared_store
                        .clone()
                        .map(|store| Arc::new(crate::store::mcp::McpSessions::new(store))),
                    requests: requests.clone(),
                    auth: auth.clone(),
                    tls: tls.clone(),
                };
                let config = self.config.clone();
                let stop = stop_admin.clone();
                tokio::spawn(
                    async move { crate::mcp::serve(listener, &config, parts, stop).await },
                );
                mcp_addr
            }
            None => None,
        };
        let dispatcher = state.dispatcher.clone();
        // The store's gauge follows it between batches (every 5 s).
        let prober = tokio::spawn(async move {
            dispatcher.probe_store(STORE_PROBE).await;
        });
        let serve = crate::grpc::serve(listener, tls, state, settings, trigger.clone());
        let sweeper = tokio::spawn(sweep_sessions(
            sessions.clone(),
            self.config.sessions.idle_ttl,
        ));
        let metrics = self.metrics.clone();
        let traces = self.traces.clone();
        let task = tokio::spawn(async move {
            let result = serve.await;
            stop_admin.cancel();
            sweeper.abort();
            prober.abort();
            sessions.remove_all();
            remotes.close();
            // The last figures go to the collector. The SDK's shutdown blocks (up to the export
            // timeout when the collector is gone): it gets a short while, then is left behind.
            let flushed = tokio::task::spawn_blocking(move || {
                if let Some(traces) = traces {
                    traces.shutdown();
                }
                metrics.shutdown();
            });
            let _ = tokio::time::timeout(METRICS_FLUSH, flushed).await;
            result
        });
        tracing::info!(%addr, admin = ?admin_addr, mcp = ?mcp_addr, "listening");
        Ok(RunningServer {
            addr,
            admin_addr,
            mcp_addr,
            trigger,
            task,
        })
    }

    /// Serves MCP over stdin and stdout with the engine in this process (`toolgate mcp
    /// --config`): the config's remotes are connected, then calls run through the pipeline
    /// until the client closes stdin. No listener is opened.
    pub async fn serve_mcp_stdio(self) -> Result<(), StartError> {
        self.config.validate()?;
        let dispatcher = self.build()?;
        let remotes = Remotes::new(dispatcher.catalog().clone(), self.metrics.metrics());
        for spec in &self.config.remotes {
            remotes.register_at_start(spec.clone()).await?;
        }
        let entry = Arc::new(Entry::new(
            Admission::new(Capacity::from(&self.config.server)),
            DecodedBudget::new(DecodedLimits::from(&self.config.limits)),
            self.metrics.metrics(),
        ));
        let parts = crate::mcp::McpParts {
            dispatcher,
            entry: entry.clone(),
            metrics: self.metrics.metrics(),
            tracer: self.tracer(),
            auth: Arc::new(Authenticator::from_config(&self.config.auth).await?),
            tls: None,
            shared: None,
            requests: Budgets::from_config(&self.config.limits, &self.metrics.metrics()).requests,
        };
        let served = crate::mcp::serve_stdio(&self.config, &parts).await;
        // Running calls get the shutdown grace, then are cancelled.
        entry.tracker.close();
        if tokio::time::timeout(self.config.server.shutdown_grace, entry.tracker.wait())
            .await
            .is_err()
        {
            entry.shutdown.cancel("the MCP client closed stdin");
            let _ = tokio::time::timeout(STDIO_CANCEL_SETTLE, entry.tracker.wait()).await;
        }
        remotes.close();
        served.map_err(StartError::from)
    }

    /// The dispatcher this server would run, without the gRPC layer: for running batches
    /// in-process (benchmarks, embedders that call `Dispatcher::run` directly).
    pub fn dispatcher(&self) -> Result<Dispatcher, StartError> {
        self.config.validate()?;
        self.build()
    }

    /// The dispatcher from a config already validated.
    fn build(&self) -> Result<Dispatcher, StartError> {
        self.build_with_store().map(|(dispatcher, _)| dispatcher)
    }

    /// The dispatcher, and the shared store it uses when `sessions.store` names one.
    fn build_with_store(
        &self,
    ) -> Result<(Dispatcher, Option<Arc<crate::store::RedisStore>>), StartError> {
        let registry = Arc::new(Catalog::new(self.registry()?));
        let store = build::session_store(&self.config, self.metrics.metrics())?;
        let mut sessions = sessions(&self.config, self.metrics.metrics())?;
        if store.is_some() {
            sessions = sessions.sharing();
        }
        let shared_cache = store
            .clone()
            .map(|s| s as Arc<dyn toolgate_core::middleware::SharedCache>);
        let pipeline = self.pipeline(shared_cache)?;
        // Approvals are answered through any server sharing the store.
        if let Some(store) = &store {
            pipeline.approvals().attach(store.clone());
            store.clone().relay_approvals(pipeline.approvals().clone());
        }
        let bindings = self.config.bindings.clone();
        let mut dispatcher = Dispatcher::new(registry, Arc::new(sessions), pipeline);
        if let Some(store) = &store {
            dispatcher = dispatcher.with_store(store.clone());
        }
        // The console shows the recent batches with their events.
        let console = &self.config.console;
        if console.enabled && console.record_batches && self.config.admin.listen.is_some() {
            dispatcher = dispatcher.with_flights();
        }
        let dispatcher = dispatcher.with_bindings(bindings).map_err(|problems| {
            StartError::Config(ConfigError {
                problems: vec![problems.to_string()],
            })
        })?;
        Ok((dispatcher, store))
    }

    fn pipeline(
        &self,
        shared_cache: Option<Arc<dyn toolgate_core::middleware::SharedCache>>,
    ) -> Result<Pipeline, StartError> {
        let c = &self.config;
        let mut hooks = configured_hooks(c)?;
        hooks.extend(self.hooks.iter().cloned());
        let settings = build::pipeline_settings(c, self.metrics.metrics())?;
        let mut pipeline = Pipeline::builder(settings)
            .hooks(hooks)
            .reflector(self.reflector.clone())
            .metrics(self.metrics.metrics())
            .tracer(self.tracer());
        if let Some(cache) = shared_cache {
            pipeline = pipeline.shared_cache(cache);
        }
        Ok(pipeline.build())
    }

    /// The tracer spans are made with: the export pipeline's, or off.
    fn tracer(&self) -> Tracer {
        self.traces
            .as_ref()
            .map_or_else(Tracer::off, |traces| traces.tracer())
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

impl RunningServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP listener's address, when it is on.
    pub fn mcp_addr(&self) -> Option<SocketAddr> {
        self.mcp_addr
    }

    /// The admin listener's address (`/metrics`, `/livez`, `/readyz`), when it is on.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
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

/// A listener on `addr`.
async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind {
            addr: addr.to_string(),
            source,
        })
}

impl ShutdownHandle {
    /// Starts a graceful shutdown; returns at once.
    pub fn shutdown(&self) {
        self.trigger.cancel();
    }
}

#[cfg(test)]
mod tests;
