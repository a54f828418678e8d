//! The registry of connected remotes: discovery, glob filtering, prefixing, pinning and
//! quarantine, and one background task that refreshes changed tool lists and reconnects lost
//! remotes. Discovery happens before anything is registered, and a remote's tools enter the
//! catalog in one update, so an unreachable or conflicting remote leaves nothing behind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::tool::RemoteTool;
use super::{RemoteError, RemoteKind, RemoteSpec, Signal, Signals, http, mcp, worker};
use parking_lot::Mutex;
use toolgate_core::glob::glob_match;
use toolgate_core::metrics::Metrics;
use toolgate_core::tools::{Catalog, Definition, RegistryError, Tool, ToolPin, ToolSource};

/// An accepted definition.
#[derive(Debug, Clone)]
struct Pinned {
    digest: String,
    definition: Arc<Definition>,
}

/// A tool a remote contributed, with what `ListTools` reports about its origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contributed {
    pub name: String,
    pub source: ToolSource,
}

/// First and longest wait before reconnecting a lost remote.
const RECONNECT_FIRST: Duration = Duration::from_millis(500);
const RECONNECT_MAX: Duration = Duration::from_secs(30);

/// Every connected remote and the tools it contributed.
#[derive(Debug)]
pub struct Remotes {
    catalog: Arc<Catalog>,
    live: Mutex<BTreeMap<String, (RemoteSpec, Vec<String>)>>,
    /// Tool name → digest of the accepted definition and the definition itself (what agents
    /// are shown while a change waits), for the server's lifetime: a tool that comes back
    /// changed (on refresh or re-registration) is quarantined.
    pins: Mutex<BTreeMap<String, Pinned>>,
    signals: Signals,
    /// Open MCP sessions by remote, so a tool list change is re-listed on the same session.
    mcp: Mutex<BTreeMap<String, Arc<mcp::Connection>>>,
    /// Remotes with a reconnect loop running.
    reconnecting: Mutex<std::collections::BTreeSet<String>>,
    metrics: Arc<Metrics>,
}

impl Remotes {
    /// The manager and its background task, which refreshes remotes that report a changed tool
    /// list and reconnects lost ones with exponential backoff. The task ends with the manager.
    pub fn new(catalog: Arc<Catalog>, metrics: Arc<Metrics>) -> Arc<Self> {
        let (signals, mut inbox) = Signals::channel();
        let remotes = Arc::new(Remotes {
            catalog,
            live: Mutex::default(),
            pins: Mutex::default(),
            signals,
            mcp: Mutex::default(),
            reconnecting: Mutex::default(),
            metrics,
        });
        let weak = Arc::downgrade(&remotes);
        // Signals coalesce while a refresh runs: a remote that sends `tools/list_changed` in a
        // burst is refreshed at most twice (the refresh running and one after it), not once per
        // notification, each of which re-lists the remote and swaps its tools in.
        tokio::spawn(async move {
            while let Some(batch) = inbox.next().await {
                for signal in batch {
                    let Some(remotes) = weak.upgrade() else {
                        return;
                    };
                    remotes.signalled(signal).await;
                }
            }
        });
        remotes
    }

    /// Carries out one signal: a lost remote gets its reconnect loop, a changed tool list a
    /// refresh.
    async fn signalled(self: Arc<Self>, signal: Signal) {
        match signal {
            Signal::Lost(name) => {
                // One reconnect loop per remote, each on its own task, so a remote that stays
                // down never delays another's reconnect or list refresh.
                let fresh = self.reconnecting.lock().insert(name.clone());
                if fresh {
                    tokio::spawn(reconnect(Arc::downgrade(&self), name));
                }
            }
            Signal::ListChanged(name) => match self.refresh(&name).await {
                Ok(_) => {}
                // A server may announce a change while it is still being discovered
                // (server-everything does, during initialize): discovery lists the tools itself,
                // so there is nothing to refresh yet and nothing to warn about.
                Err(RemoteError::Unknown(_)) => {
                    tracing::debug!(target: "toolgate::tools::remote::manager", remote = %name, "tool list changed before registration");
                }
                Err(error) => {
                    tracing::warn!(target: "toolgate::tools::remote::manager", remote = %name, %error, "refresh after a tool list change failed");
                }
            },
        }
    }

    /// Connects, discovers the remote's tools and registers them all, or nothing.
    pub async fn register(&self, spec: RemoteSpec) -> Result<Vec<Contributed>, RemoteError> {
        spec.check()
            .map_err(|reason| spec.invalid(reason.to_string()))?;
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
        tracing::info!(target: "toolgate::tools::remote::manager", remote = %spec.name, tools = names.len(), "remote registered");
        live.insert(spec.name.clone(), (spec, names.clone()));
        Ok(names
            .into_iter()
            .map(|name| Contributed { name, source })
            .collect())
    }

    /// Registers a remote from the config. One that cannot be reached (yet), or whose tools
    /// cannot be registered (a name the remote offers is invalid or taken: the remote's word,
    /// not the config's), is kept and connected again in the background with backoff unless it
    /// is `required`; a bad definition is always an error.
    pub async fn register_at_start(
        &self,
        spec: RemoteSpec,
    ) -> Result<Vec<Contributed>, RemoteError> {
        let required = spec.required;
        let pending = spec.clone();
        match self.register(spec).await {
            Err(RemoteError::Unreachable { name, reason }) if !required => {
                tracing::warn!(target: "toolgate::tools::remote::manager", remote = %name, %reason, "remote unreachable at start; connecting in the background");
                self.lock().insert(name.clone(), (pending, Vec::new()));
                self.signals.send(Signal::Lost(name));
                Ok(Vec::new())
            }
            Err(RemoteError::Registry { name, source }) if !required => {
                let reason = source.to_string().escape_debug().to_string();
                tracing::warn!(target: "toolgate::tools::remote::manager", remote = %name, %reason, "the remote's tools could not be registered at start; trying again in the background");
                self.lock().insert(name.clone(), (pending, Vec::new()));
                self.signals.send(Signal::Lost(name));
                Ok(Vec::new())
            }
            other => other,
        }
    }

    /// Removes every remote: its tools leave the catalog and MCP sessions close, and every stdio
    /// server's process group is killed at once, even one a call still holds. Called when the
    /// server stops.
    pub fn close(&self) {
        let open = std::mem::take(&mut *self.mcp.lock());
        for connection in open.values() {
            connection.stop();
        }
        for name in self.names() {
            let _ = self.unregister(&name);
        }
    }

    /// Removes a remote and its tools; returns the tools' names. A stdio server's process group
    /// is killed when the last call using it ends (at once when none is running).
    pub fn unregister(&self, name: &str) -> Result<Vec<String>, RemoteError> {
        self.mcp.lock().remove(name);
        let Some((_, names)) = self.lock().remove(name) else {
            return Err(RemoteError::Unknown(name.to_owned()));
        };
        self.remove_tools(&names);
        tracing::info!(target: "toolgate::tools::remote::manager", remote = %name, tools = names.len(), "remote unregistered");
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
            self.mcp.lock().remove(name);
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
        let pinned: Vec<(Arc<dyn Tool>, ToolPin)> = tools
            .into_iter()
            .filter(|t| {
                let own = &t.definition().remote_name;
                spec.tools.iter().any(|g| glob_match(g, own))
            })
            .map(|t| {
                let pin = self.pin(spec, &t);
                (t as Arc<dyn Tool>, pin)
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

    /// Accepts a quarantined tool's new definition: it is pinned and runs again. With
    /// `reviewed`, only while the change awaiting approval has that digest.
    pub fn accept(&self, tool: &str, reviewed: Option<&str>) -> Result<(), RemoteError> {
        let nothing = || RemoteError::NothingToAccept(tool.to_owned());
        let accepted = self.catalog.update(|registry| {
            let current = Arc::unwrap_or_clone(registry.get(tool).cloned().ok_or_else(nothing)?);
            let pin = current
                .pin
                .clone()
                .filter(|p| p.changed_to.is_some())
                .ok_or_else(nothing)?;
            let digest = pin.changed_to.clone().unwrap_or_default();
            if let Some(reviewed) = reviewed
                && reviewed != digest
            {
                return Err(RemoteError::ChangedSinceReview {
                    tool: tool.to_owned(),
                    awaiting: digest,
                    reviewed: reviewed.to_owned(),
                });
            }
            registry.remove(tool);
            let pin = ToolPin {
                digest: digest.clone(),
                changed_to: None,
                accepted: None,
                ..pin
            };
            let definition = Arc::new(Definition::of(current.tool.as_ref()));
            registry
                .register_pinned(current.tool, current.source, Some(pin))
                .map_err(|source| RemoteError::Registry {
                    name: tool.to_owned(),
                    source,
                })?;
            Ok(Pinned { digest, definition })
        })?;
        self.pins.lock().insert(tool.to_owned(), accepted);
        tracing::info!(target: "toolgate::tools::remote::manager", tool, "changed tool definition accepted");
        Ok(())
    }

    /// The pin for a discovered tool: new tools are pinned; a changed definition is quarantined
    /// unless the remote accepts changes.
    fn pin(&self, spec: &RemoteSpec, tool: &RemoteTool) -> ToolPin {
        let definition = tool.definition();
        let digest = definition.digest();
        let name = &definition.name;
        let mut pins = self.pins.lock();
        let seen = || Pinned {
            digest: digest.clone(),
            definition: Arc::new(Definition::of(tool)),
        };
        let pinned = pins.entry(name.clone()).or_insert_with(seen).clone();
        let remote = spec.name.clone();
        if pinned.digest == digest {
            return ToolPin {
                remote,
                digest,
                changed_to: None,
                accepted: None,
            };
        }
        if spec.accept_changes {
            tracing::info!(target: "toolgate::tools::remote::manager", tool = %name, from = %pinned.digest, to = %digest, "tool definition changed; accepted by configuration");
            pins.insert(name.clone(), seen());
            return ToolPin {
                remote,
                digest,
                changed_to: None,
                accepted: None,
            };
        }
        tracing::warn!(target: "toolgate::tools::remote::manager", tool = %name, from = %pinned.digest, to = %digest, "tool definition changed; quarantined");
        ToolPin {
            remote,
            digest: pinned.digest,
            changed_to: Some(digest),
            accepted: Some(pinned.definition),
        }
    }

    /// Each registered remote and whether it is connected (false while it is being
    /// reconnected).
    pub fn connection_states(&self) -> Vec<(String, bool)> {
        let reconnecting = self.reconnecting.lock().clone();
        self.names()
            .into_iter()
            .map(|name| {
                let connected = !reconnecting.contains(&name);
                (name, connected)
            })
            .collect()
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

    fn lock(&self) -> parking_lot::MutexGuard<'_, BTreeMap<String, (RemoteSpec, Vec<String>)>> {
        self.live.lock()
    }

    /// The remote's tools: MCP re-lists over an open session when there is one.
    async fn discover(
        &self,
        spec: &RemoteSpec,
    ) -> Result<(Vec<Arc<RemoteTool>>, ToolSource), RemoteError> {
        match spec.kind {
            RemoteKind::Worker => Ok((
                worker::discover(spec, self.signals.clone()).await?,
                ToolSource::Worker,
            )),
            RemoteKind::Http => Ok((
                http::discover(spec, self.metrics.clone())?,
                ToolSource::Http,
            )),
            RemoteKind::Mcp => {
                let open = self.mcp.lock().get(&spec.name).cloned();
                if let Some(connection) = open {
                    return Ok((mcp::list(spec, &connection).await?, ToolSource::Mcp));
                }
                let (tools, connection) =
                    mcp::discover(spec, self.signals.clone(), self.metrics.clone()).await?;
                self.mcp.lock().insert(spec.name.clone(), connection);
                Ok((tools, ToolSource::Mcp))
            }
        }
    }
}

impl Drop for Remotes {
    /// Ends the background task: adapters may still hold senders, but nobody is left to act.
    fn drop(&mut self) {
        self.signals.close();
    }
}

/// Rediscovers a lost remote with exponential backoff until it answers, is unregistered, or the
/// manager is gone. Losses reported while the loop runs are absorbed by it: they come from calls
/// on the connection being replaced. Losses are reported by failing calls, so a new connection
/// that dies is reported again by the next call that uses it.
async fn reconnect(remotes: std::sync::Weak<Remotes>, name: String) {
    let mut delay = RECONNECT_FIRST;
    loop {
        tracing::warn!(target: "toolgate::tools::remote::manager", remote = %name, delay_ms = delay.as_millis(), "remote lost; reconnecting");
        tokio::time::sleep(delay).await;
        let Some(manager) = remotes.upgrade() else {
            return;
        };
        let done = match manager.rediscover(&name, true).await {
            Ok(tools) => {
                tracing::info!(target: "toolgate::tools::remote::manager", remote = %name, tools = tools.len(), "remote reconnected");
                manager.metrics.remote_reconnect(&name, true);
                true
            }
            Err(RemoteError::Unknown(_)) => true,
            Err(error) => {
                tracing::warn!(target: "toolgate::tools::remote::manager", remote = %name, %error, "reconnect failed");
                manager.metrics.remote_reconnect(&name, false);
                false
            }
        };
        if done {
            manager.reconnecting.lock().remove(&name);
            return;
        }
        delay = (delay * 2).min(RECONNECT_MAX);
    }
}
