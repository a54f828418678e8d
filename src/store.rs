//! The session store on Redis (or Valkey): each named session's loop window, memory and metadata
//! under one hash tag, read in one script call when a batch starts and changed in one when it
//! ends, so any replica serves any batch of a session.
//! Invariant: every operation is one atomic script (or command) on the session's own keys, and
//! every key of a session shares its hash tag `{tenant:id}`, so Redis Cluster keeps a session
//! on one shard and no update is lost to a read-modify-write race.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Script, Value};
use toolgate_core::metrics::Metrics;
use toolgate_core::middleware::{CacheKey, Cached, Lookup, SharedCache};
use toolgate_core::safety::detector::Change;
use toolgate_core::session::{Changes, Loaded, SessionStore, StoreError};
use toolgate_core::tools::{
    BoxFuture, ContentPart, Entry, FileError, ScratchStore, SharedScratch, ToolOutput,
};

/// Opens the session, refreshes the expiry of its keys and returns whether it was made now and
/// its loop window. KEYS: meta, loop, memory, files, dirs. ARGV: idle TTL (ms), now (ms since
/// the epoch), tenant, id.
const LOAD: &str = r"
local created = redis.call('HSETNX', KEYS[1], 'created_ms', ARGV[2])
redis.call('HSET', KEYS[1], 'tenant', ARGV[3], 'id', ARGV[4], 'used_ms', ARGV[2])
for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
return {created, redis.call('LRANGE', KEYS[2], 0, -1)}
";

/// Sessions of a tenant the cap's eviction looks at, oldest made first: the least recently
/// used among them goes (sampled, as Redis's own LRU eviction is).
const EVICTION_SAMPLE: isize = 16;

/// Replays a batch's window changes in order ('p' + slot: append; 'c' + call: remove that
/// call's slots), trims the window, appends the memory entries and trims them, refreshes the
/// expiry. A session ended meanwhile (no meta) keeps nothing.
/// KEYS: meta, loop, memory, files, dirs. ARGV: idle TTL (ms), window, memory entries kept, the
/// number of window changes, the changes, then the memory entries.
const SAVE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local n = tonumber(ARGV[4])
for i = 5, 4 + n do
  local kind, body = string.sub(ARGV[i], 1, 1), string.sub(ARGV[i], 2)
  if kind == 'p' then
    redis.call('RPUSH', KEYS[2], body)
  else
    local kept = {}
    for _, slot in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
      if string.sub(slot, 1, 16) ~= body then kept[#kept + 1] = slot end
    end
    redis.call('DEL', KEYS[2])
    for j = 1, #kept, 500 do
      redis.call('RPUSH', KEYS[2], unpack(kept, j, math.min(j + 499, #kept)))
    end
  end
end
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)
if #ARGV >= 5 + n then
  for j = 5 + n, #ARGV, 500 do
    redis.call('RPUSH', KEYS[3], unpack(ARGV, j, math.min(j + 499, #ARGV)))
  end
  redis.call('LTRIM', KEYS[3], -tonumber(ARGV[3]), -1)
end
for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
return 1
";

/// The memory entries of a live session, or nil. KEYS: meta, memory.
const MEMORY: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('LRANGE', KEYS[2], 0, -1)
";

/// Writes a scratch file within the session's quota (content bytes plus one entry's bytes per
/// file and per directory, as on disk), making its parent directories.
/// KEYS: meta, files, dirs. ARGV: path, content, quota (0: none), entry bytes, idle TTL (ms).
const WRITE: &str = r"
local path, content = ARGV[1], ARGV[2]
local quota, entry = tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('SISMEMBER', KEYS[3], path) == 1 then return {'isdir'} end
local new_dirs, at = {}, 0
while true do
  at = string.find(path, '/', at + 1, true)
  if not at then break end
  local parent = string.sub(path, 1, at - 1)
  if redis.call('HEXISTS', KEYS[2], parent) == 1 then return {'notdir'} end
  if redis.call('SISMEMBER', KEYS[3], parent) == 0 then new_dirs[#new_dirs + 1] = parent end
end
local used = tonumber(redis.call('HGET', KEYS[1], 'scratch_bytes') or '0')
local needed = used - redis.call('HSTRLEN', KEYS[2], path) + #content + #new_dirs * entry
if redis.call('HEXISTS', KEYS[2], path) == 0 then needed = needed + entry end
-- As on disk, a write that takes no more than it replaces is never refused.
if quota > 0 and needed > used and needed > quota then return {'quota', tostring(needed)} end
redis.call('HSET', KEYS[2], path, content)
if #new_dirs > 0 then redis.call('SADD', KEYS[3], unpack(new_dirs)) end
redis.call('HSET', KEYS[1], 'scratch_bytes', needed)
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
return {'ok'}
";

/// Reads a scratch file. KEYS: files, dirs. ARGV: path.
const READ: &str = r"
local content = redis.call('HGET', KEYS[1], ARGV[1])
if content then return {'ok', content} end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return {'isdir'} end
return {'missing'}
";

/// Lists a scratch directory's entries as name, kind pairs, at most ARGV[2] of them.
/// KEYS: files, dirs. ARGV: the directory ('' for the root), the most entries.
const LIST: &str = r"
local dir, max = ARGV[1], tonumber(ARGV[2])
if dir ~= '' and redis.call('SISMEMBER', KEYS[2], dir) == 0 then
  if redis.call('HEXISTS', KEYS[1], dir) == 1 then return {'notdir'} end
  return {'missing'}
end
local prefix = dir == '' and '' or dir .. '/'
local out = {'ok'}
local function take(names, kind)
  for _, path in ipairs(names) do
    if #out > max * 2 then return end
    if string.sub(path, 1, #prefix) == prefix then
      local rest = string.sub(path, #prefix + 1)
      if not string.find(rest, '/', 1, true) then
        out[#out + 1] = rest
        out[#out + 1] = kind
      end
    end
  end
end
take(redis.call('HKEYS', KEYS[1]), 'file')
take(redis.call('SMEMBERS', KEYS[2]), 'dir')
return out
";

/// A cache entry and the invalidation epoch. KEYS: entry, epoch.
const CACHE_GET: &str = r"
return {redis.call('GET', KEYS[1]) or '', redis.call('GET', KEYS[2]) or '0'}
";

/// Stores a cache entry unless the epoch moved, and indexes it under its path.
/// KEYS: entry, epoch, [path index]. ARGV: the entry, the epoch it was looked up at, TTL (ms).
const CACHE_PUT: &str = r"
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
if KEYS[3] then
  redis.call('SADD', KEYS[3], KEYS[1])
  if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[3], ARGV[3]) end
end
return 1
";

/// Drops every entry indexed under a path and moves the epoch, so a result computed across
/// this on any server is not stored. KEYS: path index, epoch. (The entries share their tag.)
const CACHE_INVALIDATE: &str = r"
redis.call('INCR', KEYS[2])
local entries = redis.call('SMEMBERS', KEYS[1])
for i = 1, #entries, 500 do
  redis.call('DEL', unpack(entries, i, math.min(i + 499, #entries)))
end
redis.call('DEL', KEYS[1])
return #entries
";

/// How the store is reached and what it keeps per session.
#[derive(Debug, Clone)]
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
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(settings.timeout))
                .set_response_timeout(Some(settings.timeout))
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
            up: AtomicBool::new(true),
            load: Script::new(LOAD),
            save: Script::new(SAVE),
            memory: Script::new(MEMORY),
            write: Script::new(WRITE),
            read: Script::new(READ),
            list: Script::new(LIST),
            cache_get: Script::new(CACHE_GET),
            cache_put: Script::new(CACHE_PUT),
            cache_invalidate: Script::new(CACHE_INVALIDATE),
        })
    }

    /// The URL without its password, for logs.
    pub fn describe(&self) -> String {
        let mut url = self.settings.url.clone();
        if url.password().is_some() {
            let _ = url.set_password(Some("***"));
        }
        url.to_string()
    }

    /// Runs `op` on a connection within the timeout (connecting included), noting whether the
    /// store answered.
    async fn within<T>(
        &self,
        op: impl AsyncFnOnce(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        let run = async {
            let mut connection = self.redis.connection().await?;
            op(&mut connection).await
        };
        let answer = match tokio::time::timeout(self.settings.timeout, run).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(StoreError::new(error)),
            Err(_) => Err(StoreError::new(format!(
                "no answer within {}",
                toolgate_core::duration::readable(self.settings.timeout)
            ))),
        };
        self.up.store(answer.is_ok(), Ordering::Relaxed);
        answer
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
/// both are validated to `[A-Za-z0-9._-]`): meta, loop, memory, files, dirs.
fn keys(tenant: &str, id: &str) -> [String; 5] {
    let tag = format!("toolgate:{{{tenant}:{id}}}");
    ["meta", "loop", "memory", "files", "dirs"].map(|part| format!("{tag}:{part}"))
}

/// TLS that verifies the server against `ca` (PEM) rather than the system roots.
fn trusting(ca: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    }
}

/// A tenant's index of its live sessions (id → when made), for the cap; its own hash tag.
fn tenant_index(tenant: &str) -> String {
    format!("toolgate:{{tenant:{tenant}}}:sessions")
}

/// A scratch script's answer: `ok` and its values, or why not.
fn answered(reply: Vec<String>) -> Result<Vec<String>, FileError> {
    let mut reply = reply.into_iter();
    match reply.next().as_deref() {
        Some("ok") => Ok(reply.collect()),
        Some("isdir") => Err(FileError::NotAFile),
        Some("notdir") => Err(FileError::NotADirectory),
        Some("missing") => Err(FileError::NotFound),
        Some("quota") => Err(FileError::OverQuota {
            needed: reply
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(u64::MAX),
            quota: 0,
        }),
        other => Err(FileError::Unavailable(format!(
            "unexpected answer from the store: {other:?}"
        ))),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl SessionStore for RedisStore {
    fn load<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Loaded, StoreError>> {
        Box::pin(async move {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, millis);
            let mut call = self.load.prepare_invoke();
            call.key(&keys(tenant, id)[..])
                .arg(millis(self.settings.idle_ttl))
                .arg(now)
                .arg(tenant)
                .arg(id);
            let (created, window): (i64, Vec<Vec<u8>>) =
                self.within(async |c| call.invoke_async(c).await).await?;
            // Only a session made now counts toward its tenant's cap: one more round trip once
            // per session, none per batch.
            if created == 1
                && let Err(error) = self.admit(tenant, id, now).await
            {
                tracing::warn!(target: "toolgate::session", %error, "the tenant's session cap was not applied");
            }
            Ok(Loaded { window })
        })
    }

    fn save<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        changes: Changes,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut call = self.save.prepare_invoke();
            call.key(&keys(tenant, id)[..])
                .arg(millis(self.settings.idle_ttl))
                .arg(self.settings.loop_window.max(1))
                .arg(self.settings.memory_entries.max(1))
                .arg(changes.window.len());
            for change in &changes.window {
                let mut arg = Vec::with_capacity(26);
                match change {
                    Change::Pushed(slot) => {
                        arg.push(b'p');
                        arg.extend_from_slice(slot);
                    }
                    Change::Cleared(call) => {
                        arg.push(b'c');
                        arg.extend_from_slice(call);
                    }
                }
                call.arg(arg);
            }
            for entry in &changes.memory {
                call.arg(entry);
            }
            let _saved: i64 = self.within(async |c| call.invoke_async(c).await).await?;
            Ok(())
        })
    }

    fn memory<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<String>>, StoreError>> {
        Box::pin(async move {
            let [meta, _, memory, _, _] = keys(tenant, id);
            let mut call = self.memory.prepare_invoke();
            call.key(meta).key(memory);
            self.within(async |c| call.invoke_async(c).await).await
        })
    }

    fn end<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut del = redis::cmd("DEL");
            del.arg(&keys(tenant, id)[..]);
            let removed: i64 = self.within(async |c| del.query_async(c).await).await?;
            self.forget(&tenant_index(tenant), id).await?;
            Ok(removed > 0)
        })
    }

    fn reachable(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }
}

impl RedisStore {
    /// Counts a session made now in its tenant's index; past the cap, forgets the sampled
    /// sessions that expired or ended and evicts the least recently used of the rest.
    async fn admit(&self, tenant: &str, id: &str, now: u64) -> Result<(), StoreError> {
        let index = tenant_index(tenant);
        let mut add = redis::pipe();
        add.zadd(&index, id, now).ignore().zcard(&index);
        let (live,): (usize,) = self.within(async |c| add.query_async(c).await).await?;
        if live <= self.settings.max_sessions {
            return Ok(());
        }
        let mut sample = redis::cmd("ZRANGE");
        sample.arg(&index).arg(0).arg(EVICTION_SAMPLE - 1);
        let oldest: Vec<String> = self.within(async |c| sample.query_async(c).await).await?;
        let mut idle: Option<(u64, String)> = None;
        let mut freed = 0;
        for other in oldest.into_iter().filter(|o| o != id) {
            let mut used = redis::cmd("HGET");
            used.arg(&keys(tenant, &other)[0]).arg("used_ms");
            let used: Option<u64> = self.within(async |c| used.query_async(c).await).await?;
            match used {
                // Expired or ended elsewhere: it no longer counts.
                None => {
                    self.forget(&index, &other).await?;
                    freed += 1;
                }
                Some(used) if idle.as_ref().is_none_or(|(u, _)| used < *u) => {
                    idle = Some((used, other));
                }
                Some(_) => {}
            }
        }
        if live - freed <= self.settings.max_sessions {
            return Ok(());
        }
        if let Some((_, evicted)) = idle {
            let mut del = redis::cmd("DEL");
            del.arg(&keys(tenant, &evicted)[..]);
            let _: i64 = self.within(async |c| del.query_async(c).await).await?;
            self.forget(&index, &evicted).await?;
            self.metrics.evicted("sessions", "capacity", 1);
            tracing::debug!(target: "toolgate::session", session = %evicted, %tenant, "session evicted: max_sessions reached");
        }
        Ok(())
    }

    /// Takes session `id` out of its tenant's `index`.
    async fn forget(&self, index: &str, id: &str) -> Result<(), StoreError> {
        let mut forget = redis::cmd("ZREM");
        forget.arg(index).arg(id);
        let _: i64 = self.within(async |c| forget.query_async(c).await).await?;
        Ok(())
    }

    /// Runs a scratch script, the store's own failures as `Unavailable`.
    async fn scratch(&self, call: redis::ScriptInvocation<'_>) -> Result<Vec<String>, FileError> {
        let reply = self.within(async |c| call.invoke_async(c).await).await;
        answered(reply.map_err(|e| FileError::Unavailable(e.to_string()))?)
    }
}

impl ScratchStore for RedisStore {
    fn write<'a>(
        &'a self,
        owner: &'a SharedScratch,
        path: &'a str,
        content: &'a str,
    ) -> BoxFuture<'a, Result<(), FileError>> {
        Box::pin(async move {
            let [meta, _, _, files, dirs] = keys(&owner.tenant, &owner.session);
            let mut call = self.write.prepare_invoke();
            call.key(meta)
                .key(files)
                .key(dirs)
                .arg(path)
                .arg(content)
                .arg(owner.quota)
                .arg(toolgate_core::tools::entry_bytes())
                .arg(millis(self.settings.idle_ttl));
            match self.scratch(call).await {
                Ok(_) => Ok(()),
                Err(FileError::OverQuota { needed, .. }) => Err(FileError::OverQuota {
                    needed,
                    quota: owner.quota,
                }),
                Err(other) => Err(other),
            }
        })
    }

    fn read<'a>(
        &'a self,
        owner: &'a SharedScratch,
        path: &'a str,
    ) -> BoxFuture<'a, Result<String, FileError>> {
        Box::pin(async move {
            let [_, _, _, files, dirs] = keys(&owner.tenant, &owner.session);
            let mut call = self.read.prepare_invoke();
            call.key(files).key(dirs).arg(path);
            let mut values = self.scratch(call).await?;
            Ok(values.pop().unwrap_or_default())
        })
    }

    fn list<'a>(
        &'a self,
        owner: &'a SharedScratch,
        dir: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<Entry>, FileError>> {
        Box::pin(async move {
            let [_, _, _, files, dirs] = keys(&owner.tenant, &owner.session);
            let mut call = self.list.prepare_invoke();
            call.key(files).key(dirs).arg(dir).arg(max);
            let values = self.scratch(call).await?;
            let entries = values
                .chunks_exact(2)
                .take(max)
                .map(|pair| Entry {
                    name: pair[0].clone(),
                    kind: if pair[1] == "dir" { "dir" } else { "file" },
                })
                .collect();
            Ok(entries)
        })
    }
}

/// The cache's keys share one tag, so an invalidation reaches every entry of a path in one
/// script (on a cluster, the cache is one shard's).
const CACHE_TAG: &str = "toolgate:{cache}";

/// An entry's key: a digest of its identity (the entry holds the identity itself, compared
/// exactly on every hit).
fn cache_entry_key(key: &CacheKey<'_>) -> String {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [key.scope, key.tool, key.input] {
        digest.update(&(part.len() as u64).to_le_bytes());
        digest.update(part.as_bytes());
    }
    let mut name = format!("{CACHE_TAG}:e:");
    for byte in digest.finish().as_ref() {
        name.push_str(&format!("{byte:02x}"));
    }
    name
}

/// A cached entry as the store keeps it: its identity, turn, path and output, as JSON.
fn encode_cached(key: &CacheKey<'_>, entry: &Cached) -> String {
    let output = match &entry.output {
        ToolOutput::Text(text) => serde_json::json!({"text": text}),
        ToolOutput::Json(value) => serde_json::json!({"json": value}),
        ToolOutput::Parts(parts) => {
            let parts: Vec<serde_json::Value> = parts
                .iter()
                .map(|part| match part {
                    ContentPart::Text(text) => serde_json::json!({"text": text}),
                    ContentPart::Image { mime_type, data } => {
                        serde_json::json!({"image": {"mime_type": mime_type, "data": data}})
                    }
                })
                .collect();
            serde_json::json!({"parts": parts})
        }
    };
    serde_json::json!({
        "scope": key.scope, "tool": key.tool, "input": key.input,
        "turn": entry.turn, "path": entry.path, "output": output,
    })
    .to_string()
}

/// The entry stored as `text`, if it is for exactly `key` (anything else is a miss).
fn decode_cached(key: &CacheKey<'_>, text: &str) -> Option<Cached> {
    let doc: serde_json::Value = serde_json::from_str(text).ok()?;
    let same = doc["scope"] == key.scope && doc["tool"] == key.tool && doc["input"] == key.input;
    if !same {
        return None;
    }
    let output = &doc["output"];
    let output = if let Some(text) = output["text"].as_str() {
        ToolOutput::Text(text.to_owned())
    } else if let Some(parts) = output["parts"].as_array() {
        let parts = parts
            .iter()
            .map(|part| match part["text"].as_str() {
                Some(text) => Some(ContentPart::Text(text.to_owned())),
                None => Some(ContentPart::Image {
                    mime_type: part["image"]["mime_type"].as_str()?.to_owned(),
                    data: part["image"]["data"].as_str()?.to_owned(),
                }),
            })
            .collect::<Option<Vec<_>>>()?;
        ToolOutput::Parts(parts)
    } else {
        ToolOutput::Json(output.get("json")?.clone())
    };
    Some(Cached {
        output,
        turn: u32::try_from(doc["turn"].as_u64()?).ok()?,
        path: doc["path"].as_str().map(str::to_owned),
    })
}

impl SharedCache for RedisStore {
    fn get<'a>(&'a self, key: &'a CacheKey<'a>) -> BoxFuture<'a, Result<Lookup, StoreError>> {
        Box::pin(async move {
            let mut call = self.cache_get.prepare_invoke();
            call.key(cache_entry_key(key))
                .key(format!("{CACHE_TAG}:epoch"));
            let (text, epoch): (String, String) =
                self.within(async |c| call.invoke_async(c).await).await?;
            Ok(Lookup {
                entry: decode_cached(key, &text),
                epoch: epoch.parse().unwrap_or(0),
            })
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a CacheKey<'a>,
        entry: Cached,
        epoch: u64,
        ttl: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut call = self.cache_put.prepare_invoke();
            call.key(cache_entry_key(key))
                .key(format!("{CACHE_TAG}:epoch"));
            if let Some(path) = &entry.path {
                call.key(format!("{CACHE_TAG}:p:{path}"));
            }
            // Without a TTL of its own an entry lives as long as an idle session would.
            call.arg(encode_cached(key, &entry))
                .arg(epoch.to_string())
                .arg(millis(ttl.unwrap_or(self.settings.idle_ttl)));
            let _stored: i64 = self.within(async |c| call.invoke_async(c).await).await?;
            Ok(())
        })
    }

    fn invalidate<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut call = self.cache_invalidate.prepare_invoke();
            call.key(format!("{CACHE_TAG}:p:{path}"))
                .key(format!("{CACHE_TAG}:epoch"));
            let _dropped: i64 = self.within(async |c| call.invoke_async(c).await).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sessions_keys_share_one_hash_tag() {
        let keys = keys("acme", "s-1");
        assert_eq!(keys[0], "toolgate:{acme:s-1}:meta");
        assert_eq!(keys.len(), 5);
        for key in &keys {
            assert!(key.contains("{acme:s-1}"), "{key}");
            assert_eq!(key.matches('{').count(), 1, "{key}");
        }
    }

    #[test]
    fn a_cached_entry_survives_the_store_and_answers_only_its_own_key() {
        let key = CacheKey {
            scope: "acme/s",
            tool: "read",
            input: "{\"p\":1}",
        };
        for output in [
            ToolOutput::Text("t".into()),
            ToolOutput::Json(serde_json::json!({"a": [1, 2]})),
            ToolOutput::Parts(vec![
                ContentPart::Text("x".into()),
                ContentPart::Image {
                    mime_type: "image/png".into(),
                    data: "AA==".into(),
                },
            ]),
        ] {
            let entry = Cached {
                output,
                turn: 3,
                path: Some("/a".into()),
            };
            let text = encode_cached(&key, &entry);
            assert_eq!(decode_cached(&key, &text), Some(entry));
            let other = CacheKey {
                scope: "globex/s",
                ..key
            };
            assert_eq!(decode_cached(&other, &text), None, "another tenant misses");
        }
        assert_ne!(
            cache_entry_key(&key),
            cache_entry_key(&CacheKey {
                input: "{\"p\":2}",
                ..key
            })
        );
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
            },
            Arc::default(),
        )
        .unwrap();
        assert_eq!(store.describe(), "redis://user:***@127.0.0.1:1/0");
    }
}
