//! Wiring shared by `main` and embedders: config -> registry -> dispatcher -> gRPC server.
//! This is the library's embedding API: build a `Server` with extra Rust tools, start it, and get
//! its address and a shutdown handle back.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, ConfigError};
use crate::dispatch::{Cancel, Dispatcher};
use crate::grpc::server::ServeSettings;
use crate::grpc::{RequestRules, ServeError, ServiceState};
use crate::session::Sessions;
use crate::tools::{RegistryError, Tool, ToolRegistry, ToolSource, builtin_tools};

/// Distinguishes the default scratch bases of servers in one process.
static SERVER_SERIAL: AtomicU64 = AtomicU64::new(1);

/// A toolgate server to be started: its config plus in-process tools.
pub struct Server {
    config: Config,
    tools: Vec<Arc<dyn Tool>>,
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
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
        }
    }

    /// Adds an in-process tool (listed with source EMBEDDED).
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.tools.push(Arc::new(tool));
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
        self.config.validate()?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: "listener".to_owned(),
            source,
        })?;
        let registry = self.registry()?;
        let sessions = Arc::new(sessions(&self.config));
        let dispatcher = Dispatcher::new(Arc::new(registry), sessions.clone());
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
        });
        let settings = ServeSettings {
            max_message_bytes: self.config.server.max_message_bytes,
            shutdown_grace: self.config.server.shutdown_grace,
        };
        let trigger = CancellationToken::new();
        let serve = crate::grpc::serve(listener, state, settings, trigger.clone());
        let task = tokio::spawn(async move {
            let result = serve.await;
            sessions.remove_all();
            result
        });
        tracing::info!(%addr, "listening");
        Ok(RunningServer {
            addr,
            trigger,
            task,
        })
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

fn sessions(config: &Config) -> Sessions {
    let configured = &config.sessions.scratch_base;
    if configured.as_os_str().is_empty() {
        let serial = SERVER_SERIAL.fetch_add(1, Ordering::Relaxed);
        let base: PathBuf =
            std::env::temp_dir().join(format!("toolgate-{}-{serial}", std::process::id()));
        Sessions::new(base, true)
    } else {
        Sessions::new(configured.clone(), false)
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
    pub async fn wait(self) -> Result<(), ServeError> {
        match self.task.await {
            Ok(result) => result,
            Err(join) => {
                tracing::error!(error = %join, "server task failed");
                Ok(())
            }
        }
    }
}

impl ShutdownHandle {
    /// Starts a graceful shutdown; returns at once.
    pub fn shutdown(&self) {
        self.trigger.cancel();
    }
}
