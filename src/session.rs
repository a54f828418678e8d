//! Sessions: per-session state keyed by tenant and a validated id: the loop-detection window, the
//! memory of successful calls, and the scratch directory. Bounded by an idle TTL and a maximum
//! count (least recently used evicted first); a session in use by a batch is never evicted or
//! removed.
//! Invariant: two tenants using the same session id never share state, and a batch without a
//! session id runs in a session no request can name (its id is `batch-` and 128 bits of a keyed
//! hash, and client ids may not start with `batch-`). A session's scratch directory is
//! `<base>/toolgate-<128 random bits>/`, never derived from an id.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::safety::detector::LoopDetector;
use crate::tools::ScratchDir;

/// Longest session id accepted.
pub const MAX_SESSION_ID_LEN: usize = 128;

/// Characters of input and of result kept per memory entry.
pub const MEMORY_FIELD_CHARS: usize = 500;

/// The prefix of the ids of sessions made for one batch; reserved.
const EPHEMERAL_PREFIX: &str = "batch-";

/// Checks a client-supplied session id; the error says what is allowed.
pub fn validate_session_id(id: &str) -> Result<(), String> {
    if id.starts_with(EPHEMERAL_PREFIX) {
        return Err(format!(
            "session_id '{}' is invalid: ids starting with '{EPHEMERAL_PREFIX}' name the sessions of batches sent without a session id, which no request can address",
            crate::json::truncate_chars(id, 64)
        ));
    }
    let valid_chars = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if id.len() > MAX_SESSION_ID_LEN || !valid_chars || id == "." || id == ".." {
        return Err(format!(
            "session_id '{}' is invalid: use 1 to {MAX_SESSION_ID_LEN} ASCII letters, digits, '-', '_' or '.'",
            crate::json::truncate_chars(id, 64)
        ));
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
    last_used: Mutex<Instant>,
    in_use: AtomicUsize,
    /// Its key in `Live::order` (changed only under the sessions' lock).
    stamp: AtomicU64,
    /// Ended or evicted while in use: the directory goes when the last batch releases it.
    ended: AtomicBool,
}

impl Session {
    /// The scratch directory; a scratch tool makes it on first use, nothing else touches disk.
    pub fn scratch(&self) -> &ScratchDir {
        &self.scratch
    }

    /// The loop-detection window (lock poisoning cannot fail a call: the state is kept).
    pub fn detector(&self) -> MutexGuard<'_, LoopDetector> {
        self.detector.lock()
    }

    /// Whether `remember` keeps anything: memory is on and the session is named.
    pub fn keeps_memory(&self) -> bool {
        self.memory_entries > 0
    }

    /// Remembers a successful call as `tool={name}; input={…}; result={…}`.
    pub fn remember(&self, tool: &str, input: &str, result: &str) {
        if !self.keeps_memory() {
            return;
        }
        let fields =
            input.len().min(4 * MEMORY_FIELD_CHARS) + result.len().min(4 * MEMORY_FIELD_CHARS);
        let mut entry = String::with_capacity(tool.len() + fields + 32);
        entry.push_str("tool=");
        entry.push_str(tool);
        entry.push_str("; input=");
        crate::json::push_truncated(&mut entry, input, MEMORY_FIELD_CHARS);
        entry.push_str("; result=");
        crate::json::push_truncated(&mut entry, result, MEMORY_FIELD_CHARS);
        let mut memory = self.memory.lock();
        if memory.len() >= self.memory_entries {
            memory.pop_front();
        } else if memory.len() == memory.capacity() {
            // Grow by doubling but stop at the bound, not at the next power of two above it.
            let room = memory.len().max(4).min(self.memory_entries - memory.len());
            memory.reserve_exact(room);
        }
        memory.push_back(entry);
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
    base: PathBuf,
    /// Whether the base directory is this server's own (removed on stop) or an operator's.
    owns_base: bool,
    limits: SessionLimits,
    live: Mutex<Live>,
}

/// The named sessions and their recency, so finding the least recently used one to evict does
/// not scan them all (at capacity every new session evicts one).
#[derive(Debug, Default)]
struct Live {
    by_id: HashMap<String, Arc<Session>>,
    /// Last use (a stamp from `clock`) → id, oldest first.
    order: BTreeMap<u64, String>,
    clock: u64,
}

impl Live {
    /// Marks `session` as just used.
    fn touch(&mut self, session: &Session) {
        self.clock += 1;
        let previous = session.stamp.swap(self.clock, Ordering::Relaxed);
        self.order.remove(&previous);
        self.order.insert(self.clock, session.key.clone());
    }

    fn remove(&mut self, id: &str) -> Option<Arc<Session>> {
        let session = self.by_id.remove(id)?;
        self.order.remove(&session.stamp.load(Ordering::Relaxed));
        Some(session)
    }

    /// Evicts the least recently used session that no batch is using. Busy sessions are at
    /// most the running batches, so this skips few entries.
    fn evict_least_recent(&mut self) {
        let oldest = self
            .order
            .values()
            .find(|id| self.by_id.get(*id).is_some_and(|s| !s.busy()))
            .cloned();
        if let Some(id) = oldest
            && let Some(session) = self.remove(&id)
        {
            tracing::debug!(session = %id, "session evicted");
            retire(&session);
        }
    }
}

impl Sessions {
    /// Sessions whose scratch directories live under `base`; `owns_base` means the base itself
    /// is removed on stop (a per-server temp directory), otherwise only session directories are.
    pub fn new(base: PathBuf, owns_base: bool, limits: SessionLimits) -> Self {
        Sessions {
            base,
            owns_base,
            limits,
            live: Mutex::default(),
        }
    }

    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Opens `tenant`'s named session for a batch (created on first use), or a fresh ephemeral
    /// one for an empty id. The id must have passed `validate_session_id`. Pair with `release`.
    pub fn open(&self, tenant: &str, id: &str) -> Arc<Session> {
        let now = Instant::now();
        if id.is_empty() {
            let id = ephemeral_id();
            let session = Arc::new(self.make(tenant, id, true, now));
            session.in_use.fetch_add(1, Ordering::SeqCst);
            return session;
        }
        let key = key(tenant, id);
        let mut live = self.lock();
        if !live.by_id.contains_key(&key) && live.by_id.len() >= self.limits.max_sessions {
            live.evict_least_recent();
        }
        let session = live
            .by_id
            .entry(key)
            .or_insert_with(|| Arc::new(self.make(tenant, id.to_owned(), false, now)))
            .clone();
        session.in_use.fetch_add(1, Ordering::SeqCst);
        session.touch(now);
        live.touch(&session);
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
            session.scratch.remove();
        }
    }

    /// `tenant`'s live named session, if any (an ephemeral one never).
    pub fn get(&self, tenant: &str, id: &str) -> Option<Arc<Session>> {
        self.lock().by_id.get(&key(tenant, id)).cloned()
    }

    /// Drops `tenant`'s session; true if it was live. A batch still using it keeps its state
    /// until it ends.
    pub fn end(&self, tenant: &str, id: &str) -> bool {
        let Some(session) = self.lock().remove(&key(tenant, id)) else {
            return false;
        };
        retire(&session);
        true
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
                tracing::debug!(session = %session.id, tenant = %session.tenant, "session expired");
                retire(&session);
            }
        }
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
        for session in live.by_id.values() {
            session.scratch.remove();
        }
        *live = Live::default();
        if self.owns_base {
            match std::fs::remove_dir_all(&self.base) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::warn!(path = %self.base.display(), %error, "scratch base not removed")
                }
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        self.live.lock()
    }

    fn make(&self, tenant: &str, id: String, ephemeral: bool, now: Instant) -> Session {
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
            // one would keep entries nobody can read.
            memory_entries: if ephemeral {
                0
            } else {
                self.limits.memory_entries
            },
            last_used: Mutex::new(now),
            in_use: AtomicUsize::new(0),
            stamp: AtomicU64::new(0),
            ended: AtomicBool::new(false),
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

/// A session left the map: its directory goes now, or when its last batch releases it.
fn retire(session: &Session) {
    session.ended.store(true, Ordering::SeqCst);
    if !session.busy() {
        session.scratch.remove();
    }
}

#[cfg(test)]
mod tests;
