//! The result cache: opt-in per tool. Keys compare the tool and the canonical input exactly (no
//! hash-only equality), scoped to the session unless configured global; entries live for a number
//! of turns and/or seconds; the cache is bounded (least recently used evicted). A configured write
//! tool's success evicts entries whose path matches the path in its input. A hit skips the inner
//! layers and comes back `cached = true`; the driver never counts it as tool health.
//! With a shared cache (`cache/shared.rs`, a session store's) the entries and invalidations live
//! there instead, so every server sees them.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::Either;
use parking_lot::Mutex;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::{Invocation, Invoked, LayerFuture, Reply, answered};
use crate::json;
use crate::metrics::Metrics;
use crate::tools::ToolOutput;

mod shared;

pub use shared::{CacheKey, Cached, Lookup, SharedCache};

/// What an entry costs beyond its texts and output: the key and entry structs, the map's and
/// the recency order's slots.
const ENTRY_OVERHEAD: usize = 256;

/// Whose calls share entries (`scope = "session" | "global"` in config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    /// Entries are per session (the safe default: tools may read session state).
    #[default]
    Session,
    /// Entries are shared by every session of the caller's tenant (never across tenants).
    Global,
}

/// How one tool is cached.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheRule {
    pub ttl: Option<Duration>,
    /// Entries expire once the turn advances by this much (0 = within the same turn only).
    pub ttl_turns: Option<u32>,
    pub scope: CacheScope,
    /// JSON pointer of the path this tool reads, for invalidation by writes.
    pub path: Option<String>,
}

/// An entry's identity. Equality compares every part exactly; the hash is taken once, when the
/// key is made, so a miss and its insert hash the input text once instead of three times.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    /// SipHash of the parts below under keys drawn once per process (inputs come from the
    /// model, so the table must not be floodable with chosen collisions).
    hash: u64,
    scope: String,
    tool: String,
    input: Arc<str>,
}

impl Key {
    fn new(scope: String, tool: String, input: Arc<str>) -> Self {
        static KEYS: OnceLock<RandomState> = OnceLock::new();
        let hash = KEYS
            .get_or_init(RandomState::new)
            .hash_one((&scope, &tool, &*input));
        Key {
            hash,
            scope,
            tool,
            input,
        }
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// Hands a `Key`'s own hash to the table unchanged.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (by `Key::hash`); fold anything else in rather than drop it.
        self.0 = crate::hash::fnv1a_extend(self.0 ^ crate::hash::FNV1A_OFFSET, bytes);
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

#[derive(Debug, Clone)]
struct Entry {
    /// The map's own key, for the recency order.
    key: Arc<Key>,
    output: ToolOutput,
    stored_at: Instant,
    turn: u32,
    path: Option<String>,
    used: u64,
    /// What it counts against `max_bytes`.
    bytes: usize,
}

/// Entries plus their recency order (use stamp → key), so eviction is O(log n).
#[derive(Debug, Default)]
struct Store {
    entries: HashMap<Arc<Key>, Entry, BuildHasherDefault<Prehashed>>,
    /// Shares the keys of `entries`: a use re-stamps without copying the key.
    order: BTreeMap<u64, Arc<Key>>,
    clock: u64,
    /// Bytes of every entry.
    bytes: usize,
}

impl Store {
    fn touch(&mut self, key: &Key) -> u64 {
        self.clock += 1;
        let stamp = self.clock;
        if let Some(entry) = self.entries.get_mut(key) {
            self.order.remove(&entry.used);
            entry.used = stamp;
            self.order.insert(stamp, entry.key.clone());
        }
        stamp
    }

    fn remove(&mut self, key: &Key) {
        if let Some(entry) = self.entries.remove(key) {
            self.order.remove(&entry.used);
            self.bytes -= entry.bytes;
        }
    }

    /// Drops the least recently used entry; false when there is none.
    fn evict_oldest(&mut self) -> bool {
        let Some((_, oldest)) = self.order.pop_first() else {
            return false;
        };
        if let Some(entry) = self.entries.remove(&oldest) {
            self.bytes -= entry.bytes;
        }
        true
    }
}

/// The shared store, bounded by entries and by bytes (least recently used evicted first).
#[derive(Debug)]
pub(crate) struct ResultCache {
    max_entries: usize,
    max_bytes: usize,
    store: Mutex<Store>,
    metrics: Arc<Metrics>,
    /// Advances on every invalidation; a result computed across one is not stored.
    epoch: AtomicU64,
}

impl ResultCache {
    /// At most `max_entries` entries and `max_bytes` bytes (0: no byte bound); an output
    /// larger than an eighth of `max_bytes` is not kept, so one call cannot empty the cache.
    pub(crate) fn new(max_entries: usize, max_bytes: usize, metrics: Arc<Metrics>) -> Self {
        ResultCache {
            max_entries,
            max_bytes: if max_bytes == 0 {
                usize::MAX
            } else {
                max_bytes
            },
            store: Mutex::default(),
            metrics,
            epoch: AtomicU64::new(0),
        }
    }

    /// Bytes all entries hold.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Store> {
        self.store.lock()
    }

    fn get(&self, key: &Key, rule: &CacheRule, turn: u32, now: Instant) -> Option<ToolOutput> {
        let mut store = self.lock();
        let entry = store.entries.get(key)?;
        let too_old = rule
            .ttl
            .is_some_and(|ttl| now.saturating_duration_since(entry.stored_at) >= ttl);
        let too_many_turns = rule
            .ttl_turns
            .is_some_and(|t| turn.saturating_sub(entry.turn) > t);
        if too_old || too_many_turns {
            store.remove(key);
            return None;
        }
        let output = entry.output.clone();
        store.touch(key);
        Some(output)
    }

    fn put(&self, key: Key, output: ToolOutput, turn: u32, path: Option<String>, now: Instant) {
        if self.max_entries == 0 {
            return;
        }
        let bytes = ENTRY_OVERHEAD
            + key.scope.len()
            + key.tool.len()
            + key.input.len()
            + path.as_ref().map_or(0, String::len)
            + output.heap_bytes();
        if bytes > self.max_bytes / 8 {
            self.metrics.evicted("cache", "entry_too_large", 1);
            return;
        }
        let mut store = self.lock();
        store.remove(&key);
        let mut evicted = 0;
        while store.entries.len() >= self.max_entries {
            store.evict_oldest();
            evicted += 1;
        }
        if evicted > 0 {
            self.metrics.evicted("cache", "max_entries", evicted);
        }
        evicted = 0;
        while store.bytes + bytes > self.max_bytes && store.evict_oldest() {
            evicted += 1;
        }
        if evicted > 0 {
            self.metrics.evicted("cache", "max_bytes", evicted);
        }
        store.bytes += bytes;
        store.clock += 1;
        let stamp = store.clock;
        let key = Arc::new(key);
        store.order.insert(stamp, key.clone());
        let entry = Entry {
            key: key.clone(),
            output,
            stored_at: now,
            turn,
            path,
            used: stamp,
            bytes,
        };
        store.entries.insert(key, entry);
    }

    fn invalidate(&self, path: &str) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        let mut store = self.lock();
        let doomed: Vec<Arc<Key>> = store
            .entries
            .iter()
            .filter(|(_, e)| e.path.as_deref() == Some(path))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &doomed {
            store.remove(key);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

/// Applies `Cache`.
#[derive(Debug, Clone)]
pub(crate) struct CacheLayer {
    cache: Arc<ResultCache>,
    shared: Option<Arc<dyn SharedCache>>,
    rules: Arc<BTreeMap<String, CacheRule>>,
    invalidators: Arc<BTreeMap<String, String>>,
}

/// Serves repeated calls of cached tools from the store.
#[derive(Debug, Clone)]
pub struct Cache<S> {
    inner: S,
    cache: Arc<ResultCache>,
    /// When set, entries live there, not in `cache`.
    shared: Option<Arc<dyn SharedCache>>,
    rules: Arc<BTreeMap<String, CacheRule>>,
    invalidators: Arc<BTreeMap<String, String>>,
}

impl CacheLayer {
    pub(crate) fn new(
        cache: Arc<ResultCache>,
        shared: Option<Arc<dyn SharedCache>>,
        rules: BTreeMap<String, CacheRule>,
        invalidators: BTreeMap<String, String>,
    ) -> Self {
        CacheLayer {
            cache,
            shared,
            rules: Arc::new(rules),
            invalidators: Arc::new(invalidators),
        }
    }
}

impl<S> Layer<S> for CacheLayer {
    type Service = Cache<S>;
    fn layer(&self, inner: S) -> Cache<S> {
        Cache {
            inner,
            cache: self.cache.clone(),
            shared: self.shared.clone(),
            rules: self.rules.clone(),
            invalidators: self.invalidators.clone(),
        }
    }
}

fn pointer_str(input: &serde_json::Value, pointer: &str) -> Option<String> {
    input
        .pointer(pointer)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

impl<S> Service<Invocation> for Cache<S>
where
    S: Service<Invocation, Response = Invoked, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Invoked;
    type Error = Infallible;
    type Future = LayerFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, inv: Invocation) -> Self::Future {
        let invalidates = self
            .invalidators
            .get(inv.name())
            .and_then(|p| pointer_str(&inv.input, p));
        if let Some(shared) = &self.shared {
            return self.call_shared(shared.clone(), inv, invalidates);
        }
        let rules = self.rules.clone();
        let Some(rule) = rules.get(inv.name()) else {
            // Neither cached nor invalidating: nothing to do with the answer.
            let Some(path) = invalidates else {
                return Either::Left(self.inner.call(inv));
            };
            let running = self.inner.call(inv);
            let cache = self.cache.clone();
            return Either::Right(Box::pin(async move {
                let Ok(invoked) = running.await;
                if let Reply::Output(_) = &invoked.reply {
                    cache.invalidate(&path);
                }
                Ok(invoked)
            }));
        };
        let key = Key::new(
            scope_of(rule, &inv),
            inv.name().to_owned(),
            inv.canonical
                .clone()
                .unwrap_or_else(|| json::canonical(&inv.input).into()),
        );
        let now = Instant::now();
        if let Some(output) = self.cache.get(&key, rule, inv.turn, now) {
            let mut invoked = Invoked::reply(Reply::Output(output));
            invoked.cached = true;
            return answered(invoked);
        }
        let path = rule
            .path
            .as_deref()
            .and_then(|p| pointer_str(&inv.input, p));
        let turn = inv.turn;
        let cache = self.cache.clone();
        let epoch = cache.epoch.load(Ordering::SeqCst);
        let running = self.inner.call(inv);
        Either::Right(Box::pin(async move {
            let Ok(invoked) = running.await;
            // Only successes are stored, and only if no write invalidated anything meanwhile.
            if let Reply::Output(output) = &invoked.reply
                && cache.epoch.load(Ordering::SeqCst) == epoch
            {
                cache.put(key, output.clone(), turn, path, Instant::now());
            }
            if let (Some(path), Reply::Output(_)) = (&invalidates, &invoked.reply) {
                cache.invalidate(path);
            }
            Ok(invoked)
        }))
    }
}

/// Whose entries a call shares. Entries never cross tenants: "global" means every session of
/// the caller's tenant.
fn scope_of(rule: &CacheRule, inv: &Invocation) -> String {
    let tenant = &inv.ctx.caller.tenant;
    match rule.scope {
        CacheScope::Session => format!("{tenant}/{}", inv.ctx.session_id),
        CacheScope::Global => tenant.clone(),
    }
}

impl<S> Cache<S>
where
    S: Service<Invocation, Response = Invoked, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    /// The same decisions against the shared cache: a lookup before the call, the result
    /// stored after it unless its path was invalidated in between (on any server), and a
    /// write's invalidation everywhere. A store that cannot be reached is a miss, never a
    /// failed call.
    fn call_shared(
        &mut self,
        shared: Arc<dyn SharedCache>,
        inv: Invocation,
        invalidates: Option<String>,
    ) -> LayerFuture<S::Future> {
        // A batch without a session id has a session nobody can name again: its session-scoped
        // entries could never be hit, so they are not kept; and max_entries = 0 is caching off.
        let rule = self.rules.get(inv.name()).filter(|rule| {
            self.cache.max_entries > 0
                && !(rule.scope == CacheScope::Session
                    && crate::session::is_ephemeral(&inv.ctx.session_id))
        });
        let entry = rule.map(|rule| SharedEntry::of(rule, &inv));
        if entry.is_none() && invalidates.is_none() {
            return Either::Left(self.inner.call(inv));
        }
        let mut inner = self.inner.clone();
        let metrics = self.cache.metrics.clone();
        let max_entry_bytes = self.cache.max_bytes / 8;
        Either::Right(Box::pin(async move {
            let turn = inv.turn;
            let mut epoch = None;
            if let Some(entry) = &entry {
                match shared.get(&entry.key(), entry.path.as_deref()).await {
                    Ok(Lookup {
                        entry: found,
                        epoch: now,
                    }) => {
                        if let Some(hit) = found.filter(|e| entry.fresh(e, turn)) {
                            let mut invoked = Invoked::reply(Reply::Output(hit.output));
                            invoked.cached = true;
                            return Ok(invoked);
                        }
                        epoch = Some(now);
                    }
                    Err(error) => {
                        metrics.store_error("cache_get");
                        tracing::debug!(target: "toolgate::middleware", %error, "shared cache lookup failed: a miss");
                    }
                }
            }
            let Ok(invoked) = inner.call(inv).await;
            let Reply::Output(output) = &invoked.reply else {
                return Ok(invoked);
            };
            if let (Some(entry), Some(epoch)) = (&entry, epoch) {
                // The local cache's bound on one entry holds for the shared one too.
                if output.heap_bytes() > max_entry_bytes {
                    metrics.evicted("cache", "entry_too_large", 1);
                } else {
                    let cached = Cached {
                        output: output.clone(),
                        turn,
                        path: entry.path.clone(),
                    };
                    let key = entry.key();
                    if shared
                        .put(&key, cached, epoch, entry.rule.ttl)
                        .await
                        .is_err()
                    {
                        metrics.store_error("cache_put");
                    }
                }
            }
            if let Some(path) = &invalidates
                && let Err(error) = shared.invalidate(path).await
            {
                metrics.store_error("cache_invalidate");
                tracing::warn!(target: "toolgate::middleware", %error, "shared cache invalidation failed: entries of the path may be stale until they expire");
            }
            Ok(invoked)
        }))
    }
}

/// What a cached call's shared entry is: its rule, identity and the path it reads.
struct SharedEntry {
    rule: CacheRule,
    scope: String,
    tool: String,
    input: Arc<str>,
    path: Option<String>,
}

impl SharedEntry {
    fn of(rule: &CacheRule, inv: &Invocation) -> Self {
        SharedEntry {
            rule: rule.clone(),
            scope: scope_of(rule, inv),
            tool: inv.name().to_owned(),
            input: inv
                .canonical
                .clone()
                .unwrap_or_else(|| json::canonical(&inv.input).into()),
            path: rule
                .path
                .as_deref()
                .and_then(|p| pointer_str(&inv.input, p)),
        }
    }

    fn key(&self) -> CacheKey<'_> {
        CacheKey {
            scope: &self.scope,
            tool: &self.tool,
            input: &self.input,
        }
    }

    /// Within the rule's turns (its time the store's expiry keeps).
    fn fresh(&self, cached: &Cached, turn: u32) -> bool {
        self.rule
            .ttl_turns
            .is_none_or(|t| turn.saturating_sub(cached.turn) <= t)
    }
}
