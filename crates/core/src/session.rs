//! Sessions: per-session state keyed by tenant and a validated id: the loop-detection window, the
//! memory of successful calls, and the scratch directory. Bounded by an idle TTL, a maximum
//! count and a total of memory bytes. At a bound, the tenant holding the most gives way (its
//! least recently used session, or its oldest memory), so one tenant's flood never evicts
//! another's state while it holds more; a session in use by a batch is never evicted or
//! removed.
//! Invariant: two tenants using the same session id never share state, and a batch without a
//! session id runs in a session no request can name (its id is `batch-` and 128 bits of a keyed
//! hash, and client ids may not start with `batch-`). A session's scratch directory is
//! `<base>/toolgate-<128 random bits>/`, never derived from an id.
//! With a shared store (`store.rs`), a named session's loop window and memory live there and a
//! batch holds them in its `Lease`; this table then keeps only its scratch directory.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::safety::detector::LoopDetector;
use crate::tools::ScratchDir;

mod lease;
pub mod store;

pub use lease::Lease;
pub use store::{Changes, Loaded, SessionStore, StoreError};

/// Longest session id accepted.
pub(crate) const MAX_SESSION_ID_LEN: usize = 128;

/// Characters of input and of result kept per memory entry.
pub(crate) const MEMORY_FIELD_CHARS: usize = 500;

/// The prefix of the ids of sessions made for one batch; reserved.
const EPHEMERAL_PREFIX: &str = "batch-";

/// A client-supplied session id that cannot be used; the text says what is allowed (and shows
/// at most 64 characters of the id).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSessionId {
    #[error(
        "session_id '{}' is invalid: ids starting with '{EPHEMERAL_PREFIX}' name the sessions of batches sent without a session id, which no request can address",
        crate::json::truncate_chars(.0, 64)
    )]
    Reserved(String),
    #[error(
        "session_id '{}' is invalid: ids starting with '{FRONT_PREFIX}' name the sessions the MCP front door keeps for its clients, which no request can address",
        crate::json::truncate_chars(.0, 64)
    )]
    FrontReserved(String),
    #[error(
        "session_id '{}' is invalid: use 1 to {MAX_SESSION_ID_LEN} ASCII letters, digits, '-', '_' or '.'",
        crate::json::truncate_chars(.0, 64)
    )]
    Malformed(String),
}

/// Whether `id` names a session made for one batch (sent without a session id).
pub fn is_ephemeral(id: &str) -> bool {
    id.starts_with(EPHEMERAL_PREFIX)
}

/// The prefix of the sessions a front door names for its clients (an MCP session's, or a
/// caller's own on the stateless revision): derived from what the client cannot choose, so no
/// other caller may name one.
pub const FRONT_PREFIX: &str = "mcp-";

/// Checks a client-supplied session id; the error says what is allowed.
pub fn validate_session_id(id: &str) -> Result<(), InvalidSessionId> {
    if id.starts_with(EPHEMERAL_PREFIX) {
        return Err(InvalidSessionId::Reserved(id.to_owned()));
    }
    if id.starts_with(FRONT_PREFIX) {
        return Err(InvalidSessionId::FrontReserved(id.to_owned()));
    }
    validate_session_name(id)
}

/// Checks the characters and length of a session id a front door derives (see
/// `FRONT_PREFIX`), which may carry it.
pub fn validate_session_name(id: &str) -> Result<(), InvalidSessionId> {
    let valid_chars = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if id.len() > MAX_SESSION_ID_LEN || !valid_chars || id == "." || id == ".." {
        return Err(InvalidSessionId::Malformed(id.to_owned()));
    }
    Ok(())
}

/// Bounds and sizes of session state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// A session unused for this long is dropped.
    pub idle_ttl: Duration,
    /// Most live named sessions; opening one more evicts the least recently used idle one.
    pub max_sessions: usize,
    /// Operations remembered for loop detection.
    pub loop_window: usize,
    /// Memory entries kept per session (oldest dropped first); 0 switches memory off.
    pub memory_entries: usize,
    /// Bytes of memory entries kept across all sessions; past it, the tenant holding the most
    /// loses its least recently used sessions' memory. 0: no bound.
    pub max_memory_bytes: usize,
    /// Bytes a session's scratch directory may hold; 0: no quota.
    pub scratch_quota_bytes: u64,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            idle_ttl: Duration::from_secs(30 * 60),
            max_sessions: 10_000,
            loop_window: 100,
            memory_entries: 100,
            max_memory_bytes: 64 * 1024 * 1024,
            scratch_quota_bytes: crate::tools::DEFAULT_QUOTA_BYTES,
        }
    }
}

/// One session's state.
#[derive(Debug)]
pub struct Session {
    pub id: String,
    /// The tenant whose session this is.
    pub tenant: String,
    /// `tenant/id`: the key in the sessions' map (`/` is in neither).
    key: String,
    scratch: ScratchDir,
    /// A session made for one batch; everything goes when the batch ends.
    ephemeral: bool,
    detector: Mutex<LoopDetector>,
    memory: Mutex<VecDeque<String>>,
    memory_entries: usize,
    /// Where its memory bytes are counted: its own, its tenant's, the server's.
    ledger: Arc<Ledger>,
    tenant_memory: Arc<AtomicUsize>,
    memory_bytes: AtomicUsize,
    last_used: Mutex<Instant>,
    in_use: AtomicUsize,
    /// Its key in `Live::order` (changed only under the sessions' lock).
    stamp: AtomicU64,
    /// Ended or evicted while in use: the directory goes when the last batch releases it.
    ended: AtomicBool,
    /// Approval answers given with `remember = SESSION`, by (tool, the hook or rule that
    /// asked and the identity that sent the batch): `true` approved. At most `MAX_REMEMBERED_ANSWERS`.
    answers: Mutex<HashMap<(String, String), bool>>,
}

/// Remembered approval answers per session (one per tool and asking rule: a handful).
const MAX_REMEMBERED_ANSWERS: usize = 256;

impl Session {
    /// The remembered answer for asks by `source` about `tool`, if one was given.
    pub fn remembered_answer(&self, tool: &str, source: &str) -> Option<bool> {
        let answers = self.answers.lock();
        answers.get(&(tool.to_owned(), source.to_owned())).copied()
    }

    /// Remembers an answer for later asks by `source` about `tool` in this session; past the
    /// bound the new one replaces nothing and is not kept (the next ask asks again).
    pub fn remember_answer(&self, tool: &str, source: &str, approve: bool) {
        let mut answers = self.answers.lock();
        let key = (tool.to_owned(), source.to_owned());
        if answers.len() < MAX_REMEMBERED_ANSWERS || answers.contains_key(&key) {
            answers.insert(key, approve);
        }
    }

    /// The scratch directory; a scratch tool makes it on first use, nothing else touches disk.
    pub fn scratch(&self) -> &ScratchDir {
        &self.scratch
    }

    /// The loop-detection window (lock poisoning cannot fail a call: the state is kept).
    pub fn detector(&self) -> MutexGuard<'_, LoopDetector> {
        self.detector.lock()
    }

    /// Whether `remember` keeps anything: memory is on and the session is named.
    pub(crate) fn keeps_memory(&self) -> bool {
        self.memory_entries > 0
    }

    /// Remembers a successful call as `tool={name}; input={…}; result={…}`.
    pub fn remember(&self, tool: &str, input: &str, result: &str) {
        if !self.keeps_memory() {
            return;
        }
        let entry = memory_entry(tool, input, result);
        let added = entry_bytes(&entry);
        let mut memory = self.memory.lock();
        // A session that left the table keeps nothing: nobody can read it, and its bytes were
        // already given back.
        if self.ended.load(Ordering::SeqCst) {
            return;
        }
        let mut dropped = 0;
        if memory.len() >= self.memory_entries {
            dropped = memory.pop_front().map_or(0, |e| entry_bytes(&e));
        } else if memory.len() == memory.capacity() {
            // Grow by doubling but stop at the bound, not at the next power of two above it.
            let room = memory.len().max(4).min(self.memory_entries - memory.len());
            memory.reserve_exact(room);
        }
        memory.push_back(entry);
        // Counted under the lock, so `forget` never gives back bytes not yet counted.
        self.count_memory(added, dropped);
        drop(memory);
        self.ledger.settle();
    }

    /// Counts `added` bytes in and `dropped` out, in the session, its tenant and the server.
    fn count_memory(&self, added: usize, dropped: usize) {
        for counter in [&self.memory_bytes, &*self.tenant_memory, &self.ledger.used] {
            counter.fetch_add(added, Ordering::Relaxed);
            counter.fetch_sub(dropped, Ordering::Relaxed);
        }
    }

    /// Drops every memory entry and gives their bytes back.
    fn forget(&self) {
        let mut memory = self.memory.lock();
        let bytes: usize = memory.iter().map(entry_bytes).sum();
        *memory = VecDeque::new();
        self.count_memory(0, bytes);
    }

    /// Memory entries, oldest first.
    pub fn memory(&self) -> Vec<String> {
        let memory = self.memory.lock();
        memory.iter().cloned().collect()
    }

    fn touch(&self, now: Instant) {
        *self.last_used.lock() = now;
    }

    fn idle_since(&self) -> Instant {
        *self.last_used.lock()
    }

    fn busy(&self) -> bool {
        self.in_use.load(Ordering::SeqCst) > 0
    }
}

/// All live sessions of one server.
#[derive(Debug)]
pub struct Sessions {
    /// Named sessions' loop windows and memory live in a shared store: this table keeps none.
    shared: bool,
    base: PathBuf,
    /// Whether the base directory is this server's own (removed on stop) or an operator's.
    owns_base: bool,
    limits: SessionLimits,
    live: Arc<Mutex<Live>>,
    ledger: Arc<Ledger>,
}

/// The named sessions and their recency, so finding the least recently used one to evict does
/// not scan them all (at capacity every new session evicts one).
#[derive(Debug, Default)]
struct Live {
    by_id: HashMap<String, Arc<Session>>,
    /// Last use (a stamp from `clock`) → id, oldest first.
    order: BTreeMap<u64, String>,
    clock: u64,
    /// What each tenant holds, so a bound takes from the tenant holding the most.
    tenants: HashMap<String, Tenant>,
    /// Scratch directories of sessions gone from the table, to remove once the lock is
    /// released (removing a tree is disk work no other batch should wait for), and those whose
    /// removal failed, tried again at each sweep and at stop, so nothing a session wrote
    /// outlives the server.
    doomed: Vec<ScratchDir>,
}

/// One tenant's live named sessions and their memory bytes.
#[derive(Debug, Default)]
struct Tenant {
    sessions: usize,
    memory: Arc<AtomicUsize>,
}

/// The memory bytes of every session of a server, against their bound. Sessions count into it
/// as they remember; one that takes it past the bound makes room at once (`settle`).
#[derive(Debug)]
struct Ledger {
    used: AtomicUsize,
    limit: usize,
    /// The table, to find whose memory goes; weak, as the table holds the sessions.
    live: Weak<Mutex<Live>>,
    metrics: Arc<Metrics>,
}

impl Live {
    /// Marks `session` as just used.
    fn touch(&mut self, session: &Session) {
        self.clock += 1;
        let previous = session.stamp.swap(self.clock, Ordering::Relaxed);
        self.order.remove(&previous);
        self.order.insert(self.clock, session.key.clone());
    }

    /// The counter of `tenant`'s memory bytes, counting one more session of it.
    fn join(&mut self, tenant: &str) -> Arc<AtomicUsize> {
        let entry = self.tenants.entry(tenant.to_owned()).or_default();
        entry.sessions += 1;
        entry.memory.clone()
    }

    /// Takes the session out of the table: it is retired (its memory given back, its directory
    /// removed once no batch uses it).
    fn remove(&mut self, id: &str) -> Option<Arc<Session>> {
        let session = self.by_id.remove(id)?;
        self.order.remove(&session.stamp.load(Ordering::Relaxed));
        if let Some(tenant) = self.tenants.get_mut(&session.tenant) {
            tenant.sessions -= 1;
            if tenant.sessions == 0 {
                self.tenants.remove(&session.tenant);
            }
        }
        retire(&session);
        // A session in use is removed by its last batch's release.
        if !session.busy() {
            self.doomed.push(session.scratch.clone());
        }
        Some(session)
    }

    /// The tenant holding the most by `measure`, if any.
    fn heaviest(&self, measure: impl Fn(&Tenant) -> usize) -> Option<String> {
        self.tenants
            .iter()
            .max_by_key(|(_, tenant)| measure(tenant))
            .map(|(name, _)| name.clone())
    }

    /// The least recently used session no batch is using, of `tenant` if given and it has one.
    /// Busy sessions are at most the running batches, so this skips few entries.
    fn least_recent_idle(&self, tenant: Option<&str>) -> Option<String> {
        let idle = |id: &&String| self.by_id.get(*id).is_some_and(|s| !s.busy());
        let of_tenant = |id: &&String| {
            tenant.is_none_or(|t| self.by_id.get(*id).is_some_and(|s| s.tenant == t))
        };
        self.order
            .values()
            .find(|id| of_tenant(id) && idle(id))
            .or_else(|| self.order.values().find(idle))
            .cloned()
    }

    /// Evicts a session to make room for one more: the least recently used idle session of the
    /// tenant with the most sessions, so one tenant opening thousands evicts its own.
    fn evict_for_room(&mut self, metrics: &Metrics) {
        let heaviest = self.heaviest(|t| t.sessions);
        if let Some(id) = self.least_recent_idle(heaviest.as_deref())
            && self.remove(&id).is_some()
        {
            tracing::debug!(target: "toolgate::session", session = %id, "session evicted: max_sessions reached");
            metrics.evicted("sessions", "capacity", 1);
        }
    }

    /// Forgets memory until the server's memory bytes are at most `target`: all of the least
    /// recently used session (idle or not: memory is a record, not state a call relies on) of
    /// the tenant holding the most, then the next.
    fn forget_memory(&mut self, used: &AtomicUsize, target: usize, metrics: &Metrics) {
        while used.load(Ordering::Relaxed) > target {
            let Some(heaviest) = self.heaviest(|t| t.memory.load(Ordering::Relaxed)) else {
                return;
            };
            let holder = self.order.values().find_map(|id| {
                let s = self.by_id.get(id)?;
                (s.tenant == heaviest && s.memory_bytes.load(Ordering::Relaxed) > 0)
                    .then(|| s.clone())
            });
            let Some(session) = holder else {
                return;
            };
            session.forget();
            metrics.evicted("session_memory", "memory_bytes", 1);
        }
    }
}

impl Ledger {
    /// Makes room when the sessions' memory is past its bound: down to seven eighths of it, so
    /// a server at the bound does not evict on every call.
    fn settle(&self) {
        if self.used.load(Ordering::Relaxed) <= self.limit {
            return;
        }
        let Some(live) = self.live.upgrade() else {
            return;
        };
        let target = self.limit - self.limit / 8;
        live.lock().forget_memory(&self.used, target, &self.metrics);
    }
}

impl Sessions {
    /// Sessions whose scratch directories live under `base`; `owns_base` means the base itself
    /// is removed on stop (a per-server temp directory), otherwise only session directories are.
    pub fn new(base: PathBuf, owns_base: bool, limits: SessionLimits) -> Self {
        Sessions::with_metrics(base, owns_base, limits, Arc::default())
    }

    /// The same, counting evictions in `metrics`.
    pub fn with_metrics(
        base: PathBuf,
        owns_base: bool,
        limits: SessionLimits,
        metrics: Arc<Metrics>,
    ) -> Self {
        let live = Arc::new(Mutex::new(Live::default()));
        let ledger = Arc::new(Ledger {
            used: AtomicUsize::new(0),
            limit: match limits.max_memory_bytes {
                0 => usize::MAX,
                n => n,
            },
            live: Arc::downgrade(&live),
            metrics,
        });
        Sessions {
            shared: false,
            base,
            owns_base,
            limits,
            live,
            ledger,
        }
    }

    /// The same table for sessions whose loop windows and memory a shared store holds: its
    /// sessions keep only their scratch directories (`open_shared` seeds the rest per batch).
    pub fn sharing(mut self) -> Self {
        self.shared = true;
        self
    }

    /// Opens `tenant`'s named session for a batch with the state it loaded from the shared
    /// `store`, which also holds its scratch files. Pair with `release` of `lease.session()`.
    pub fn open_shared(
        &self,
        tenant: &str,
        id: &str,
        loaded: &Loaded,
        store: Arc<dyn SessionStore>,
    ) -> Lease {
        let session = self.open(tenant, id);
        let scratch = crate::tools::SharedScratch {
            store,
            tenant: tenant.to_owned(),
            session: id.to_owned(),
            quota: self.limits.scratch_quota_bytes,
            generation: loaded.generation.clone(),
        };
        Lease::shared(
            session,
            loaded,
            self.limits.loop_window,
            self.limits.memory_entries,
            scratch,
        )
    }

    /// Bytes of memory entries all sessions hold.
    pub fn memory_bytes(&self) -> usize {
        self.ledger.used.load(Ordering::Relaxed)
    }

    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Removes the directories the table let go of, with its lock released; keeps those that
    /// fail for the next sweep.
    fn dispose(&self, doomed: Vec<ScratchDir>) {
        let failed: Vec<ScratchDir> = doomed.into_iter().filter(|d| !d.remove()).collect();
        if !failed.is_empty() {
            self.lock().doomed.extend(failed);
        }
    }

    /// Opens `tenant`'s named session for a batch (created on first use), or a fresh ephemeral
    /// one for an empty id. The id must have passed `validate_session_id`. Pair with `release`.
    pub fn open(&self, tenant: &str, id: &str) -> Arc<Session> {
        let now = Instant::now();
        if id.is_empty() {
            let id = ephemeral_id();
            let session = Arc::new(self.make(tenant, id, true, now, Arc::default()));
            session.in_use.fetch_add(1, Ordering::SeqCst);
            return session;
        }
        let key = key(tenant, id);
        let mut live = self.lock();
        let session = match live.by_id.get(&key) {
            Some(session) => session.clone(),
            None => {
                if live.by_id.len() >= self.limits.max_sessions {
                    live.evict_for_room(&self.ledger.metrics);
                }
                let tenant_memory = live.join(tenant);
                let made = Arc::new(self.make(tenant, id.to_owned(), false, now, tenant_memory));
                live.by_id.insert(key, made.clone());
                made
            }
        };
        session.in_use.fetch_add(1, Ordering::SeqCst);
        session.touch(now);
        live.touch(&session);
        let doomed = std::mem::take(&mut live.doomed);
        drop(live);
        if !doomed.is_empty() {
            self.dispose(doomed);
        }
        session
    }

    /// A batch is done with `session`.
    pub fn release(&self, session: &Session) {
        session.touch(Instant::now());
        if !session.ephemeral {
            let mut live = self.lock();
            // Only the live session of that id: an ended one must not reappear in the order.
            if live
                .by_id
                .get(&session.key)
                .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), session))
            {
                live.touch(session);
            }
        }
        let remaining = session
            .in_use
            .fetch_sub(1, Ordering::SeqCst)
            .saturating_sub(1);
        if remaining == 0 && (session.ephemeral || session.ended.load(Ordering::SeqCst)) {
            self.dispose(vec![session.scratch.clone()]);
        }
    }

    /// `tenant`'s live named session, if any (an ephemeral one never).
    pub fn get(&self, tenant: &str, id: &str) -> Option<Arc<Session>> {
        self.lock().by_id.get(&key(tenant, id)).cloned()
    }

    /// Drops `tenant`'s session; true if it was live. A batch still using it keeps its state
    /// until it ends.
    pub fn end(&self, tenant: &str, id: &str) -> bool {
        let mut live = self.lock();
        let ended = live.remove(&key(tenant, id)).is_some();
        let doomed = std::mem::take(&mut live.doomed);
        drop(live);
        self.dispose(doomed);
        ended
    }

    /// Drops sessions idle for longer than the TTL; returns how many.
    pub fn sweep(&self, now: Instant) -> usize {
        let ttl = self.limits.idle_ttl;
        let mut live = self.lock();
        let expired: Vec<String> = live
            .by_id
            .iter()
            .filter(|(_, s)| !s.busy() && now.saturating_duration_since(s.idle_since()) >= ttl)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            if let Some(session) = live.remove(id) {
                tracing::debug!(target: "toolgate::session", session = %session.id, tenant = %session.tenant, "session expired");
            }
        }
        let doomed = std::mem::take(&mut live.doomed);
        drop(live);
        self.dispose(doomed);
        expired.len()
    }

    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().by_id.is_empty()
    }

    /// Removes every scratch directory (server stop).
    pub fn remove_all(&self) {
        let mut live = self.lock();
        let mut doomed = std::mem::take(&mut live.doomed);
        for session in live.by_id.values() {
            session.forget();
            doomed.push(session.scratch.clone());
        }
        *live = Live::default();
        drop(live);
        let left = doomed.into_iter().filter(|d| !d.remove()).count();
        if self.owns_base {
            if let Err(error) = crate::tools::remove_tree(&self.base) {
                tracing::warn!(target: "toolgate::session", path = %self.base.display(), %error, "scratch base not removed");
            }
        } else if left > 0 {
            tracing::warn!(target: "toolgate::session",
                directories = left,
                "scratch directories not removed at stop"
            );
        }
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        self.live.lock()
    }

    fn make(
        &self,
        tenant: &str,
        id: String,
        ephemeral: bool,
        now: Instant,
        tenant_memory: Arc<AtomicUsize>,
    ) -> Session {
        let scratch = ScratchDir::under(self.base.clone(), self.limits.scratch_quota_bytes);
        Session {
            key: key(tenant, &id),
            tenant: tenant.to_owned(),
            id,
            scratch,
            ephemeral,
            detector: Mutex::new(LoopDetector::new(self.limits.loop_window)),
            memory: Mutex::new(VecDeque::new()),
            // Memory is read only through GetSessionMemory, which never finds an ephemeral session:
            // one would keep entries nobody can read. A shared session's are in the store.
            memory_entries: if ephemeral || self.shared {
                0
            } else {
                self.limits.memory_entries
            },
            ledger: self.ledger.clone(),
            tenant_memory,
            memory_bytes: AtomicUsize::new(0),
            last_used: Mutex::new(now),
            in_use: AtomicUsize::new(0),
            stamp: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            answers: Mutex::new(HashMap::new()),
        }
    }
}

/// The map key of `tenant`'s session `id`.
fn key(tenant: &str, id: &str) -> String {
    let mut key = String::with_capacity(tenant.len() + 1 + id.len());
    key.push_str(tenant);
    key.push('/');
    key.push_str(id);
    key
}

/// A fresh session's id: the prefix and 128 bits of a keyed hash (SipHash, its key drawn once per
/// process) of a counter. As unguessable as the 128 random bits it replaced, which were a
/// `getrandom` system call per batch, and it gives away neither the counter (how many batches the
/// process served) nor other batches' ids. No request can address it (`validate_session_id`
/// refuses the prefix).
fn ephemeral_id() -> String {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let key = KEY.get_or_init(RandomState::new);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let (high, low) = (key.hash_one((n, 0u8)), key.hash_one((n, 1u8)));
    let mut id = String::with_capacity(EPHEMERAL_PREFIX.len() + 32);
    id.push_str(EPHEMERAL_PREFIX);
    crate::hash::push_hex(&mut id, &high.to_be_bytes());
    crate::hash::push_hex(&mut id, &low.to_be_bytes());
    id
}

/// A memory entry: `tool={name}; input={…}; result={…}`, each field cut to
/// `MEMORY_FIELD_CHARS`.
fn memory_entry(tool: &str, input: &str, result: &str) -> String {
    let fields = input.len().min(4 * MEMORY_FIELD_CHARS) + result.len().min(4 * MEMORY_FIELD_CHARS);
    let mut entry = String::with_capacity(tool.len() + fields + 32);
    entry.push_str("tool=");
    entry.push_str(tool);
    entry.push_str("; input=");
    crate::json::push_truncated(&mut entry, input, MEMORY_FIELD_CHARS);
    entry.push_str("; result=");
    crate::json::push_truncated(&mut entry, result, MEMORY_FIELD_CHARS);
    entry
}

/// A session left the map: its memory is given back now (its directory is removed by the
/// caller, or by its last batch's release).
fn retire(session: &Session) {
    // Set under the memory lock, so a `remember` racing with this either ran before (and is
    // forgotten below) or sees the session ended and keeps nothing.
    {
        let _memory = session.memory.lock();
        session.ended.store(true, Ordering::SeqCst);
    }
    session.forget();
}

/// What a memory entry costs: its allocation and the `String` that holds it.
fn entry_bytes(entry: &String) -> usize {
    entry.capacity() + std::mem::size_of::<String>()
}

#[cfg(test)]
mod tests;
