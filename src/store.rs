//! The session store on Redis (or Valkey): each named session's loop window, memory, scratch
//! files and metadata under one hash tag, read in one round trip when a batch starts (reads of
//! the meta and of the window's newest slots, pipelined; a script only makes the session or
//! renews its data keys' expiry) and changed in one script call when it ends, so any replica
//! serves any batch of a session; and the shared result cache. This file is the connection (one
//! server or a cluster) and the keys; `store/session.rs`, `store/scratch.rs` and
//! `store/cache.rs` implement the engine's traits, and `store/scripts.rs` holds every Lua
//! script.
//! Invariant: every write is one atomic script (or command) on the keys of one session (or of
//! the cache), and every key of a session shares its hash tag `{tenant:id}`, so Redis Cluster
//! keeps a session on one shard and no update is lost to a read-modify-write race. (The load's
//! reads are not atomic with each other or with its script: the window read sees that session
//! or a newer state of it, and a batch whose session ended or was made again meanwhile is
//! refused at its save by the generation.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Script, Value};
use toolgate_core::metrics::Metrics;
use toolgate_core::session::StoreError;

mod approvals;
mod cache;
mod ledger;
pub mod mcp;
mod scratch;
mod scripts;
mod session;

/// How the store is reached and what it keeps per session.
#[derive(Clone)]
pub struct RedisSettings {
    /// `redis://` or `rediss://` (TLS, the system roots), with the database as its path.
    pub url: url::Url,
    /// Replaces the URL's password (read from a file or variable, so it is not in the config).
    pub password: Option<String>,
    /// The URL names one node of a Redis Cluster, from which the client learns the rest.
    pub cluster: bool,
    /// PEM certificates that verify a `rediss://` server instead of the system roots.
    pub ca: Option<Vec<u8>>,
    /// Longest one operation may take, connecting included.
    pub timeout: Duration,
    /// Keys of a session unused this long expire.
    pub idle_ttl: Duration,
    pub loop_window: usize,
    /// Memory entries kept per session; 0: none.
    pub memory_entries: usize,
    /// Live sessions per tenant, across every replica; one more evicts one of the tenant's
    /// least recently used.
    pub max_sessions: usize,
    /// Scratch bytes all of a tenant's sessions may hold together, across every replica; 0: no
    /// bound.
    pub tenant_scratch_bytes: u64,
    /// Memory entry bytes all of a tenant's sessions may hold together; 0: no bound.
    pub tenant_memory_bytes: u64,
}

/// The settings without the password, in the URL or beside it.
impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &without_password(&self.url))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("cluster", &self.cluster)
            .field("ca", &self.ca.is_some())
            .field("timeout", &self.timeout)
            .field("idle_ttl", &self.idle_ttl)
            .finish_non_exhaustive()
    }
}

/// `url` with its password (if any) shown as `***`.
fn without_password(url: &url::Url) -> String {
    let mut url = url.clone();
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    url.to_string()
}

/// The store could not be set up from its settings.
#[derive(Debug, thiserror::Error)]
#[error("sessions.store: {0}")]
pub struct StoreConfigError(#[source] redis::RedisError);

/// A session store on one Redis (or Valkey) server. Connects lazily and reconnects with
/// backoff, so a server starts while Redis is down and serves named sessions once it is back.
pub struct RedisStore {
    redis: Link,
    settings: RedisSettings,
    /// Where evictions for the session cap are counted.
    metrics: Arc<Metrics>,
    /// Whether the last operation reached the store (`/metrics`).
    up: AtomicBool,
    load: Script,
    save: Script,
    memory: Script,
    write: Script,
    read: Script,
    list: Script,
    cache_get: Script,
    cache_put: Script,
    cache_invalidate: Script,
    approval_claim: Script,
    tenant_reserve: Script,
    tenant_settle: Script,
    tenant_release: Script,
    /// Where approval updates are listened to (a connection of its own: a subscribed
    /// connection serves nothing else).
    pubsub: redis::Client,
}

impl RedisStore {
    /// A store for `settings`; nothing is sent until the first batch names a session.
    pub fn new(settings: RedisSettings, metrics: Arc<Metrics>) -> Result<Self, StoreConfigError> {
        let mut info = settings
            .url
            .as_str()
            .into_connection_info()
            .map_err(StoreConfigError)?;
        if let Some(password) = &settings.password {
            let redis = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(redis);
        }
        // A cluster relays PUBLISH to every node, so the node the URL names hears them all.
        let pubsub = match &settings.ca {
            Some(ca) => redis::Client::build_with_tls(info.clone(), trusting(ca)),
            None => redis::Client::open(info.clone()),
        }
        .map_err(StoreConfigError)?;
        let redis = if settings.cluster {
            let mut builder = ClusterClient::builder(vec![info])
                .connection_timeout(settings.timeout)
                .response_timeout(settings.timeout)
                .retries(1);
            if let Some(ca) = &settings.ca {
                builder = builder.certs(trusting(ca));
            }
            let client = builder.build().map_err(StoreConfigError)?;
            Link::Cluster(Box::new(ClusterLink {
                client,
                connection: tokio::sync::Mutex::new(None),
            }))
        } else {
            let client = match &settings.ca {
                Some(ca) => redis::Client::build_with_tls(info, trusting(ca)),
                None => redis::Client::open(info),
            }
            .map_err(StoreConfigError)?;
            // One quick retry, then fail: the operation's own timeout bounds the wait anyway,
            // and a batch should hear that the store is down rather than wait out a backoff.
            // No response timeout of redis-rs's own: `within` bounds every operation already,
            // and a second timer per round trip is measurable (BENCHMARKS.md §23).
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(settings.timeout))
                .set_response_timeout(None)
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_millis(200));
            let manager = ConnectionManager::new_lazy_with_config(client, config)
                .map_err(StoreConfigError)?;
            Link::Single(manager)
        };
        Ok(RedisStore {
            redis,
            settings,
            metrics,
            // Unknown until asked: the first ping or batch says.
            up: AtomicBool::new(false),
            load: Script::new(scripts::LOAD),
            save: Script::new(scripts::SAVE),
            memory: Script::new(scripts::MEMORY),
            write: Script::new(scripts::WRITE),
            read: Script::new(scripts::READ),
            list: Script::new(scripts::LIST),
            cache_get: Script::new(scripts::CACHE_GET),
            cache_put: Script::new(scripts::CACHE_PUT),
            cache_invalidate: Script::new(scripts::CACHE_INVALIDATE),
            approval_claim: Script::new(scripts::APPROVAL_CLAIM),
            tenant_reserve: Script::new(scripts::TENANT_RESERVE),
            tenant_settle: Script::new(scripts::TENANT_SETTLE),
            tenant_release: Script::new(scripts::TENANT_RELEASE),
            pubsub,
        })
    }

    /// The URL without its password, for logs.
    pub fn describe(&self) -> String {
        without_password(&self.settings.url)
    }

    /// Runs `op` on a connection within the timeout (connecting included), noting whether the
    /// store answered.
    /// An error says whether the operation may have been applied: it was handed to a connection
    /// and no answer came (a timeout, a connection lost meanwhile), as opposed to an answer that
    /// refused it, a refused connection, or a timeout before any connection was had.
    async fn within<T>(
        &self,
        op: impl AsyncFnOnce(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        let sent = AtomicBool::new(false);
        let run = async {
            let mut connection = self.redis.connection().await?;
            // From here the command may reach the server whatever becomes of its answer.
            sent.store(true, Ordering::Relaxed);
            op(&mut connection).await
        };
        let (answer, reached) = match tokio::time::timeout(self.settings.timeout, run).await {
            Ok(Ok(value)) => (Ok(value), true),
            // An error the server answered (a script's, a wrong type) says it is up.
            Ok(Err(error)) => {
                let reached = !(error.is_io_error()
                    || error.is_connection_dropped()
                    || error.is_connection_refusal()
                    || error.is_timeout()
                    || error.is_unrecoverable_error());
                // An answer refused it, and a refused connection carried nothing; a connection
                // that broke with the command on it says nothing about whether it ran.
                let lost =
                    sent.load(Ordering::Relaxed) && !reached && !error.is_connection_refusal();
                let error = match lost {
                    true => StoreError::in_flight(error),
                    false => StoreError::new(error),
                };
                (Err(error), reached)
            }
            Err(_) => {
                let why = format!(
                    "no answer within {}",
                    toolgate_core::duration::readable(self.settings.timeout)
                );
                let error = match sent.load(Ordering::Relaxed) {
                    true => StoreError::in_flight(why),
                    false => StoreError::new(why),
                };
                (Err(error), false)
            }
        };
        self.up.store(reached, Ordering::Relaxed);
        answer
    }

    /// Asks the store whether it is up (`PING`), so `toolgate_session_store_up` follows it
    /// between batches too.
    pub async fn ping(&self) {
        let ping = redis::cmd("PING");
        let _ = self
            .within(async |c| ping.query_async::<String>(c).await)
            .await;
    }
}

/// How the store is reached: one server through a connection manager, or a cluster through a
/// cluster connection made on first use (and made again after a failure to make it).
enum Link {
    Single(ConnectionManager),
    Cluster(Box<ClusterLink>),
}

/// A cluster's client and its connection, once made.
struct ClusterLink {
    client: ClusterClient,
    connection: tokio::sync::Mutex<Option<ClusterConnection>>,
}

/// A connection of either kind; both are cheap clones of a shared multiplexed connection.
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Link {
    async fn connection(&self) -> redis::RedisResult<Connection> {
        match self {
            Link::Single(manager) => Ok(Connection::Single(manager.clone())),
            Link::Cluster(link) => {
                let mut made = link.connection.lock().await;
                if let Some(connection) = &*made {
                    return Ok(Connection::Cluster(connection.clone()));
                }
                let connection = link.client.get_async_connection().await?;
                *made = Some(connection.clone());
                Ok(Connection::Cluster(connection))
            }
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

/// A session's keys, sharing the hash tag `{tenant:id}` (neither may hold `:`, `{` or `}`:
/// both are validated to `[A-Za-z0-9._-]`): meta, window, memory, files, dirs, and the answers to
/// approvals remembered for the session.
fn keys(tenant: &str, id: &str) -> [String; 6] {
    // Built by hand: two per batch, and `format!` twice per key was a measurable share.
    let tag = "toolgate:{".len() + tenant.len() + ":".len() + id.len() + "}:".len();
    ["meta", "window", "memory", "files", "dirs", "answers"].map(|part| {
        let mut key = String::with_capacity(tag + part.len());
        key.push_str("toolgate:{");
        key.push_str(tenant);
        key.push(':');
        key.push_str(id);
        key.push_str("}:");
        key.push_str(part);
        key
    })
}

/// TLS that verifies the server against `ca` (PEM) rather than the system roots.
fn trusting(ca: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    }
}

/// A tenant's index of its live sessions (id → when first counted), for the cap; its own hash
/// tag.
fn tenant_index(tenant: &str) -> String {
    format!("toolgate:{{tenant:{tenant}}}:sessions")
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisStore {
    /// How long a session's data keys are kept: twice its meta's, renewed once per idle TTL
    /// (`scripts.rs` `keep_data`), so they never expire before the meta of a live session.
    fn data_ttl(&self) -> u64 {
        millis(self.settings.idle_ttl.saturating_mul(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sessions_keys_share_one_hash_tag() {
        let keys = keys("acme", "s-1");
        assert_eq!(keys[0], "toolgate:{acme:s-1}:meta");
        assert_eq!(keys.len(), 6);
        for key in &keys {
            assert!(key.contains("{acme:s-1}"), "{key}");
            assert_eq!(key.matches('{').count(), 1, "{key}");
        }
    }

    #[tokio::test]
    async fn the_password_never_reaches_a_log_line() {
        let store = RedisStore::new(
            RedisSettings {
                url: url::Url::parse("redis://user:hunter2@127.0.0.1:1/0").unwrap(),
                password: None,
                cluster: false,
                ca: None,
                timeout: Duration::from_millis(10),
                idle_ttl: Duration::from_secs(60),
                loop_window: 100,
                memory_entries: 100,
                max_sessions: 10,
                tenant_scratch_bytes: 0,
                tenant_memory_bytes: 0,
            },
            Arc::default(),
        )
        .unwrap();
        assert_eq!(store.describe(), "redis://user:***@127.0.0.1:1/0");
        let mut settings = store.settings.clone();
        settings.password = Some("hunter3".into());
        let shown = format!("{settings:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("hunter3"),
            "{shown}"
        );
    }
}
