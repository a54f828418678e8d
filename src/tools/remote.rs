//! Remote tools: their definitions (from the config or `RegisterRemote`, the same shape) and the
//! registry of connected remotes. Discovery happens before anything is registered, and a remote's
//! tools enter the catalog in one update, so an unreachable or conflicting remote leaves nothing
//! behind.

pub mod http;
pub mod mcp;
pub mod worker;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;

use super::registry::{Pin, definition_digest};
use super::{Catalog, RegistryError, Tool, ToolSource};
use crate::glob::glob_match;

/// How toolgate reaches a remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RemoteKind {
    /// A `toolgate.v1.ToolWorker` gRPC service.
    Worker,
    /// One tool behind an HTTP endpoint.
    Http,
    /// A Model Context Protocol server, over stdio (`command`) or streamable HTTP (`url`).
    Mcp,
}

/// A remote's definition: the same shape in `[[remotes]]` and in `RegisterRemote`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSpec {
    /// Unique among remotes; names the remote in errors and logs.
    pub name: String,
    pub kind: RemoteKind,
    /// Worker: `http://host:port`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Prepended to every tool name the remote offers (for example "py.").
    #[serde(default)]
    pub prefix: String,
    /// Globs over the remote's own tool names; only matching tools are registered.
    #[serde(default = "everything")]
    pub tools: Vec<String>,
    /// Connect and discovery timeout; calls are bounded by the call deadline.
    #[serde(default = "ten_seconds", with = "crate::duration")]
    pub timeout: Duration,
    /// Http: the URL the tool is POSTed to.
    #[serde(default)]
    pub url: Option<String>,
    /// Http and Mcp over HTTP: headers sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Http: the tool's definition.
    #[serde(default)]
    pub definition: Option<http::HttpToolDefinition>,
    /// Mcp over stdio: the program and its arguments (no shell).
    #[serde(default)]
    pub command: Vec<String>,
    /// Mcp over stdio: extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Mcp over stdio: the working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Accept changed tool definitions on refresh instead of quarantining the tools.
    #[serde(default)]
    pub accept_changes: bool,
    /// From the config: `true` stops the start when the remote cannot be reached; `false` starts
    /// without its tools and keeps trying in the background, with backoff.
    #[serde(default)]
    pub required: bool,
    /// Worker over `https://`: how the worker's certificate is verified.
    #[serde(default)]
    pub tls: Option<TlsSpec>,
}

/// `[remotes.tls]`: TLS settings of a worker reached over `https://`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSpec {
    /// PEM file of the CA certificates that verify the worker; unset: the system's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// The name the worker's certificate must carry; unset: the endpoint's host.
    #[serde(default)]
    pub domain: Option<String>,
}

/// Extra time a remote gets past the call's deadline, so toolgate's own deadline (which cancels
/// the call) decides the result and the remote's clock only stops work that is abandoned.
const REMOTE_DEADLINE_MARGIN: Duration = Duration::from_millis(100);

/// How long the remote side may take for this call: the time left before its deadline plus the
/// margin; none without a deadline.
pub fn remote_timeout(ctx: &super::ToolContext) -> Option<Duration> {
    let deadline = ctx.deadline?;
    Some(deadline.saturating_duration_since(tokio::time::Instant::now()) + REMOTE_DEADLINE_MARGIN)
}

/// Resolves a resource-key reference (`arguments.path` or `input.path`) against an input.
pub fn resource_key(template: Option<&str>, input: &serde_json::Value) -> Option<String> {
    let template = template?;
    let path = template
        .strip_prefix("arguments.")
        .or_else(|| template.strip_prefix("input."))?;
    crate::mapping::path(input, path).map(|v| match v {
        serde_json::Value::String(s) => s.clone(),
        other => crate::json::canonical(other),
    })
}

impl RemoteSpec {
    /// Checks what can be checked without connecting.
    pub fn check(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("a remote needs a name".to_owned());
        }
        if self.tls.is_some() && !(self.kind == RemoteKind::Worker && self.is_https()) {
            return Err("tls applies only to a worker with an https:// endpoint".to_owned());
        }
        let url = match self.kind {
            RemoteKind::Worker => match self.endpoint.as_deref() {
                // Workers speak gRPC through tonic, which has a TLS client in this build.
                Some(e) if e.starts_with("https://") => return Ok(()),
                Some(e) => e,
                None => return Err("a worker needs an endpoint".to_owned()),
            },
            RemoteKind::Http => match (self.url.as_deref(), &self.definition) {
                (Some(u), Some(_)) => u,
                (None, _) => return Err("an http remote needs a url".to_owned()),
                (_, None) => return Err("an http remote needs a definition of its tool".to_owned()),
            },
            RemoteKind::Mcp => match (self.command.is_empty(), self.url.as_deref()) {
                (false, None) => return Ok(()),
                (true, Some(u)) => u,
                (false, Some(_)) => {
                    return Err("set either command (stdio) or url (HTTP), not both".to_owned());
                }
                (true, None) => {
                    return Err("an mcp remote needs a command (stdio) or a url (HTTP)".to_owned());
                }
            },
        };
        for (name, value) in &self.headers {
            reqwest::header::HeaderName::try_from(name.as_str())
                .map_err(|_| format!("'{name}' is not a valid HTTP header name"))?;
            reqwest::header::HeaderValue::try_from(value.as_str())
                .map_err(|_| format!("header '{name}' has a value that is not valid in HTTP"))?;
        }
        plain_http(url)
    }
}

/// Rediscovers a lost remote with exponential backoff until it answers, is unregistered, or the
/// manager is gone. Losses reported while the loop runs are absorbed by it: they come from calls
/// on the connection being replaced. Losses are reported by failing calls, so a new connection
/// that dies is reported again by the next call that uses it.
async fn reconnect(remotes: std::sync::Weak<Remotes>, name: String) {
    let mut delay = RECONNECT_FIRST;
    loop {
        tracing::warn!(remote = %name, delay_ms = delay.as_millis(), "remote lost; reconnecting");
        tokio::time::sleep(delay).await;
        let Some(manager) = remotes.upgrade() else {
            return;
        };
        let done = match manager.rediscover(&name, true).await {
            Ok(tools) => {
                tracing::info!(remote = %name, tools = tools.len(), "remote reconnected");
                true
            }
            Err(RemoteError::Unknown(_)) => true,
            Err(error) => {
                tracing::warn!(remote = %name, %error, "reconnect failed");
                false
            }
        };
        if done {
            manager
                .reconnecting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&name);
            return;
        }
        delay = (delay * 2).min(RECONNECT_MAX);
    }
}

impl RemoteSpec {
    /// A worker endpoint that asks for TLS.
    pub fn is_https(&self) -> bool {
        self.endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("https://"))
    }
}

/// HTTP tool and MCP URLs are plain `http://`: their HTTP client has no TLS in this build, and
/// an `https://` URL that fails on first use would be worse than a refusal now.
fn plain_http(url: &str) -> Result<(), String> {
    if url.starts_with("http://") {
        Ok(())
    } else if url.starts_with("https://") {
        Err(format!(
            "'{url}': https is not supported by this build (no TLS client); use http:// on loopback or a private network"
        ))
    } else {
        Err(format!(
            "'{url}' is not a URL such as http://127.0.0.1:7001"
        ))
    }
}

fn everything() -> Vec<String> {
    vec!["*".to_owned()]
}

fn ten_seconds() -> Duration {
    Duration::from_secs(10)
}

/// Why a remote could not be registered or removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    #[error("remote '{0}' is already registered")]
    Duplicate(String),
    #[error("no remote '{0}' is registered")]
    Unknown(String),
    #[error("remote '{name}' is invalid: {reason}")]
    Invalid { name: String, reason: String },
    #[error("remote '{name}' is unreachable: {reason}")]
    Unreachable { name: String, reason: String },
    #[error("remote '{name}': {source}")]
    Registry { name: String, source: RegistryError },
    #[error("tool '{0}' has no definition change awaiting approval")]
    NothingToAccept(String),
}

/// A tool a remote contributed, with what `ListTools` reports about its origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contributed {
    pub name: String,
    pub source: ToolSource,
}

/// What an adapter tells the remote manager, out of band.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// The remote says its tool list changed (MCP `notifications/tools/list_changed`).
    ListChanged(String),
    /// The remote's connection is gone (a stdio server exited, a worker is unavailable, a config
    /// remote was down at start): reconnect and re-list, with backoff.
    Lost(String),
}

/// Where adapters send signals.
pub type Signals = tokio::sync::mpsc::UnboundedSender<Signal>;

/// First and longest wait before reconnecting a lost remote.
const RECONNECT_FIRST: Duration = Duration::from_millis(500);
const RECONNECT_MAX: Duration = Duration::from_secs(30);

/// Every connected remote and the tools it contributed.
#[derive(Debug)]
pub struct Remotes {
    catalog: Arc<Catalog>,
    live: Mutex<BTreeMap<String, (RemoteSpec, Vec<String>)>>,
    /// Tool name → digest of the accepted definition, for the server's lifetime: a tool that
    /// comes back changed (on refresh or re-registration) is quarantined.
    pins: Mutex<BTreeMap<String, String>>,
    signals: Signals,
    /// Open MCP sessions by remote, so a tool list change is re-listed on the same session.
    mcp: Mutex<BTreeMap<String, Arc<mcp::Connection>>>,
    /// Remotes with a reconnect loop running.
    reconnecting: Mutex<std::collections::BTreeSet<String>>,
}

impl Remotes {
    /// The manager and its background task, which refreshes remotes that report a changed tool
    /// list and reconnects lost ones with exponential backoff. The task ends with the manager.
    pub fn new(catalog: Arc<Catalog>) -> Arc<Self> {
        let (signals, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let remotes = Arc::new(Remotes {
            catalog,
            live: Mutex::default(),
            pins: Mutex::default(),
            signals,
            mcp: Mutex::default(),
            reconnecting: Mutex::default(),
        });
        let weak = Arc::downgrade(&remotes);
        tokio::spawn(async move {
            while let Some(signal) = rx.recv().await {
                let Some(remotes) = weak.upgrade() else { break };
                match signal {
                    Signal::Lost(name) => {
                        // One reconnect loop per remote, each on its own task, so a remote that
                        // stays down never delays another's reconnect or list refresh.
                        let fresh = remotes
                            .reconnecting
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(name.clone());
                        if fresh {
                            tokio::spawn(reconnect(Arc::downgrade(&remotes), name));
                        }
                    }
                    Signal::ListChanged(name) => match remotes.refresh(&name).await {
                        Ok(_) => {}
                        // A server may announce a change while it is still being discovered
                        // (server-everything does, during initialize): discovery lists the tools
                        // itself, so there is nothing to refresh yet and nothing to warn about.
                        Err(RemoteError::Unknown(_)) => {
                            tracing::debug!(remote = %name, "tool list changed before registration");
                        }
                        Err(error) => {
                            tracing::warn!(remote = %name, %error, "refresh after a tool list change failed");
                        }
                    },
                }
            }
        });
        remotes
    }

    /// Connects, discovers the remote's tools and registers them all, or nothing.
    pub async fn register(&self, spec: RemoteSpec) -> Result<Vec<Contributed>, RemoteError> {
        spec.check().map_err(|reason| RemoteError::Invalid {
            name: spec.name.clone(),
            reason,
        })?;
        if self.lock().contains_key(&spec.name) {
            return Err(RemoteError::Duplicate(spec.name));
        }
        let (names, source) = self.install(&spec, &[]).await?;
        let mut live = self.lock();
        if live.contains_key(&spec.name) {
            // Registered concurrently under the same name: undo ours.
            drop(live);
            self.remove_tools(&names);
            return Err(RemoteError::Duplicate(spec.name));
        }
        tracing::info!(remote = %spec.name, tools = names.len(), "remote registered");
        live.insert(spec.name.clone(), (spec, names.clone()));
        Ok(names
            .into_iter()
            .map(|name| Contributed { name, source })
            .collect())
    }

    /// Registers a remote from the config. One that cannot be reached (yet) is kept and
    /// connected in the background with backoff unless it is `required`; a bad definition is
    /// always an error.
    pub async fn register_at_start(
        &self,
        spec: RemoteSpec,
    ) -> Result<Vec<Contributed>, RemoteError> {
        let required = spec.required;
        let pending = spec.clone();
        match self.register(spec).await {
            Err(RemoteError::Unreachable { name, reason }) if !required => {
                tracing::warn!(remote = %name, %reason, "remote unreachable at start; connecting in the background");
                self.lock().insert(name.clone(), (pending, Vec::new()));
                let _ = self.signals.send(Signal::Lost(name));
                Ok(Vec::new())
            }
            other => other,
        }
    }

    /// Removes every remote: its tools leave the catalog and MCP sessions close, so stdio servers
    /// are killed. Called when the server stops.
    pub fn close(&self) {
        for name in self.names() {
            let _ = self.unregister(&name);
        }
    }

    /// Removes a remote and its tools; returns the tools' names.
    pub fn unregister(&self, name: &str) -> Result<Vec<String>, RemoteError> {
        self.mcp
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        let Some((_, names)) = self.lock().remove(name) else {
            return Err(RemoteError::Unknown(name.to_owned()));
        };
        self.remove_tools(&names);
        tracing::info!(remote = %name, tools = names.len(), "remote unregistered");
        Ok(names)
    }

    /// Discovers a registered remote's tools again; tools whose definition changed since they
    /// were pinned are quarantined (unless the remote accepts changes).
    pub async fn refresh(&self, name: &str) -> Result<Vec<Contributed>, RemoteError> {
        self.rediscover(name, false).await
    }

    /// `refresh`, or with `reconnect` a new connection (the old one was lost).
    async fn rediscover(
        &self,
        name: &str,
        reconnect: bool,
    ) -> Result<Vec<Contributed>, RemoteError> {
        if reconnect {
            self.mcp
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(name);
        }
        let Some((spec, old)) = self.lock().get(name).cloned() else {
            return Err(RemoteError::Unknown(name.to_owned()));
        };
        let (names, source) = self.install(&spec, &old).await?;
        if let Some(entry) = self.lock().get_mut(name) {
            entry.1.clone_from(&names);
        }
        Ok(names
            .into_iter()
            .map(|name| Contributed { name, source })
            .collect())
    }

    /// Discovers the remote's tools, keeps those its globs select, pins them and swaps them into
    /// the catalog in place of `replacing`, all or nothing. Answers the registered names.
    async fn install(
        &self,
        spec: &RemoteSpec,
        replacing: &[String],
    ) -> Result<(Vec<String>, ToolSource), RemoteError> {
        let (tools, source) = self.discover(spec).await?;
        let pinned: Vec<(Arc<dyn Tool>, Pin)> = tools
            .into_iter()
            .filter(|t| {
                spec.tools
                    .iter()
                    .any(|g| glob_match(g, remote_name(t.as_ref(), &spec.prefix)))
            })
            .map(|t| {
                let pin = self.pin(spec, t.as_ref());
                (t, pin)
            })
            .collect();
        self.catalog
            .update(|registry| {
                for gone in replacing {
                    registry.remove(gone);
                }
                for (tool, pin) in &pinned {
                    registry.register_pinned(tool.clone(), source, Some(pin.clone()))?;
                }
                Ok::<(), RegistryError>(())
            })
            .map_err(|error| RemoteError::Registry {
                name: spec.name.clone(),
                source: error,
            })?;
        let names = pinned.iter().map(|(t, _)| t.name().to_owned()).collect();
        Ok((names, source))
    }

    /// Accepts a quarantined tool's new definition: it is pinned and runs again.
    pub fn accept(&self, tool: &str) -> Result<(), RemoteError> {
        let nothing = || RemoteError::NothingToAccept(tool.to_owned());
        let accepted = self.catalog.update(|registry| {
            let current = registry.get(tool).cloned().ok_or_else(nothing)?;
            let pin = current
                .pin
                .clone()
                .filter(|p| p.changed_to.is_some())
                .ok_or_else(nothing)?;
            let digest = pin.changed_to.clone().unwrap_or_default();
            registry.remove(tool);
            let pin = Pin {
                digest: digest.clone(),
                changed_to: None,
                ..pin
            };
            registry
                .register_pinned(current.tool, current.source, Some(pin))
                .map_err(|source| RemoteError::Registry {
                    name: tool.to_owned(),
                    source,
                })?;
            Ok(digest)
        })?;
        self.pins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tool.to_owned(), accepted);
        tracing::info!(tool, "changed tool definition accepted");
        Ok(())
    }

    /// The pin for a discovered tool: new tools are pinned; a changed definition is quarantined
    /// unless the remote accepts changes.
    fn pin(&self, spec: &RemoteSpec, tool: &dyn Tool) -> Pin {
        let digest = definition_digest(tool);
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        let pinned = pins
            .entry(tool.name().to_owned())
            .or_insert_with(|| digest.clone())
            .clone();
        let remote = spec.name.clone();
        if pinned == digest {
            return Pin {
                remote,
                digest,
                changed_to: None,
            };
        }
        if spec.accept_changes {
            tracing::info!(tool = tool.name(), from = %pinned, to = %digest, "tool definition changed; accepted by configuration");
            pins.insert(tool.name().to_owned(), digest.clone());
            return Pin {
                remote,
                digest,
                changed_to: None,
            };
        }
        tracing::warn!(tool = tool.name(), from = %pinned, to = %digest, "tool definition changed; quarantined");
        Pin {
            remote,
            digest: pinned,
            changed_to: Some(digest),
        }
    }

    /// The registered remotes' names.
    pub fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    fn remove_tools(&self, names: &[String]) {
        let _ = self.catalog.update(|registry| {
            for name in names {
                registry.remove(name);
            }
            Ok::<(), RegistryError>(())
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (RemoteSpec, Vec<String>)>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The remote's own name for a tool (without the prefix).
fn remote_name<'t>(tool: &'t dyn Tool, prefix: &str) -> &'t str {
    tool.name().strip_prefix(prefix).unwrap_or(tool.name())
}

impl Remotes {
    /// The remote's tools: MCP re-lists over an open session when there is one.
    async fn discover(
        &self,
        spec: &RemoteSpec,
    ) -> Result<(Vec<Arc<dyn Tool>>, ToolSource), RemoteError> {
        match spec.kind {
            RemoteKind::Worker => Ok((
                worker::discover(spec, self.signals.clone()).await?,
                ToolSource::Worker,
            )),
            RemoteKind::Http => Ok((http::discover(spec)?, ToolSource::Http)),
            RemoteKind::Mcp => {
                let open = self
                    .mcp
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&spec.name)
                    .cloned();
                if let Some(connection) = open {
                    return Ok((mcp::list(spec, &connection).await?, ToolSource::Mcp));
                }
                let (tools, connection) = mcp::discover(spec, self.signals.clone()).await?;
                self.mcp
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(spec.name.clone(), connection);
                Ok((tools, ToolSource::Mcp))
            }
        }
    }
}
