//! The engine's `SessionStore` on Redis: a batch's load and save, memory, the end of a session,
//! and each tenant's session cap.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use toolgate_core::safety::detector::{Change, SLOT_BYTES};
use toolgate_core::session::{Changes, Loaded, SessionStore, StoreError};
use toolgate_core::tools::BoxFuture;

use super::ledger::Ledger;
use super::{RedisStore, keys, millis, tenant_index};

/// A value no other session made anywhere has: 128 random bits drawn once per process, and a
/// counter (a generation needs to be unique, not secret, and a draw per batch was a system
/// call per batch).
fn fresh_generation() -> Result<String, StoreError> {
    static PROCESS: OnceLock<String> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let process = match PROCESS.get() {
        Some(drawn) => drawn,
        None => {
            let drawn = toolgate_core::tools::unguessable_name("").map_err(StoreError::new)?;
            PROCESS.get_or_init(|| drawn)
        }
    };
    Ok(format!(
        "{process}-{}",
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Sessions of a tenant the cap's eviction samples: the least recently used among them goes.
const EVICTION_SAMPLE: isize = 16;

/// The least a session's memory allowance grows by at once in its tenant's ledger: a few dozen
/// entries, so most saves find room and only a session's first entries, and then every chunk of
/// growth, cost a reservation.
const MEMORY_CHUNK: u64 = 32 * 1024;

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
            let keys = keys(tenant, id);
            let ttl = millis(self.settings.idle_ttl);
            // The store keeps up to twice the window (the save trims lazily): only the newest
            // slots count, and only they are read.
            let keep = self.settings.loop_window.max(1) * SLOT_BYTES;
            let newest = -isize::try_from(keep).unwrap_or(isize::MAX);
            // Most batches find their session live, with data keys that outlive the meta's
            // renewed expiry: then reads alone open it, no script (the LOAD script cost Redis
            // about as much as the rest of a 1-call batch's load; BENCHMARKS.md §24). The script
            // runs when the session must be made, or its data keys' expiry renewed (once per
            // idle TTL at most). Nothing here writes before that is known, so a load cut short
            // never leaves a meta outliving its data keys.
            let mut read = redis::pipe();
            read.cmd("HMGET")
                .arg(&keys[0])
                .arg("generation")
                .arg("data_until")
                .pttl(&keys[0])
                .getrange(&keys[1], newest, -1);
            let ((generation, data_until), left, window): (
                (Option<String>, Option<String>),
                i64,
                Vec<u8>,
            ) = self.within(async |c| read.query_async(c).await).await?;
            let data_left = data_until
                .and_then(|until| until.parse::<u64>().ok())
                .map_or(0, |until| until.saturating_sub(now));
            let making = generation.is_none();
            // A meta that has used an eighth of its TTL is renewed as the batch loads (the save
            // renews it when the batch ends, and the batch could outlast what it has left):
            // by a command, when the data keys outlive the renewed meta with an eighth of a TTL
            // to spare (for the time the command takes to land), else by the script.
            let renew = (0..i64::try_from(ttl - ttl / 8).unwrap_or(i64::MAX)).contains(&left);
            let needed = if renew { ttl + ttl / 8 } else { ttl };
            if let Some(generation) = generation.filter(|_| data_left >= needed) {
                if renew {
                    let mut pexpire = redis::cmd("PEXPIRE");
                    pexpire
                        .arg(&keys[0])
                        .arg(i64::try_from(ttl).unwrap_or(i64::MAX));
                    let _: i64 = self.within(async |c| pexpire.query_async(c).await).await?;
                }
                return Ok(Loaded { window, generation });
            }
            let mut call = evalsha(&self.load, &keys);
            call.arg(ttl)
                .arg(now)
                .arg(tenant)
                .arg(id)
                .arg(fresh_generation()?)
                .arg(self.data_ttl());
            let mut load = redis::pipe();
            load.add_command(call).getrange(&keys[1], newest, -1);
            // A session the reads did not find is likely made now: it is counted in its tenant's
            // index in the same round trip (one made meanwhile by another replica is there
            // already, and stays as it is).
            let counting = async {
                match making {
                    true => self.count(tenant, id, now).await.map(Some),
                    false => Ok(None),
                }
            };
            let (loaded, counted) = futures::join!(
                self.within(async |c| loading(&self.load, c, &load).await),
                counting
            );
            let ((created, generation), window): ((i64, String), Vec<u8>) = loaded?;
            // Made although the reads found it (ended or evicted meanwhile): counted now.
            let counted = match counted {
                Ok(None) if created == 1 => self.count(tenant, id, now).await.map(Some),
                counted => counted,
            };
            // Only a session made now can take its tenant past the cap.
            let evicted = match counted {
                Ok(Some(live)) if created == 1 && live > self.settings.max_sessions => {
                    self.evict_past_cap(tenant, id, live).await
                }
                Ok(_) => Ok(()),
                Err(error) => Err(error),
            };
            if let Err(error) = evicted {
                self.metrics.store_error("cap");
                tracing::warn!(target: "toolgate::session", %error, "the tenant's session cap was not applied");
            }
            Ok(Loaded { window, generation })
        })
    }

    fn save<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        changes: Changes,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let bound = self.settings.tenant_memory_bytes;
            if bound == 0 {
                return Ok(self.save_once(tenant, id, &changes, 0, "free").await? == 1);
            }
            let saved = self.save_once(tenant, id, &changes, 0, "keep").await?;
            if saved >= 0 {
                return Ok(saved == 1);
            }
            // The session's memory outgrows what the tenant's ledger granted it: a chunk more,
            // if the tenant has it (a session's first entries, then every chunk of growth).
            let missing = saved.unsigned_abs();
            let want = missing.max(MEMORY_CHUNK);
            let session = (id, changes.generation.as_str());
            if self
                .reserve(Ledger::Memory, tenant, session, want, bound)
                .await?
            {
                let saved = self.save_once(tenant, id, &changes, want, "keep").await?;
                if saved >= 0 {
                    return Ok(saved == 1);
                }
            }
            // The tenant holds its bound of memory: the batch's entries are not kept, the rest
            // of its changes are.
            let dropped = u64::try_from(changes.memory.len()).unwrap_or(u64::MAX);
            self.metrics
                .evicted("session_memory", "tenant_memory_bytes", dropped);
            tracing::debug!(target: "toolgate::session", session = %id, %tenant, dropped, "memory entries not kept: the tenant holds tenant_memory_bytes");
            Ok(self.save_once(tenant, id, &changes, 0, "drop").await? == 1)
        })
    }

    fn memory<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<String>>, StoreError>> {
        Box::pin(async move {
            let [meta, _, memory, _, _, _] = keys(tenant, id);
            let mut call = self.memory.prepare_invoke();
            call.key(meta)
                .key(memory)
                .arg(self.settings.memory_entries.max(1));
            self.within(async |c| call.invoke_async(c).await).await
        })
    }

    fn end<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut del = redis::cmd("DEL");
            del.arg(&keys(tenant, id)[..]);
            let removed: i64 = self.within(async |c| del.query_async(c).await).await?;
            self.forget(&tenant_index(tenant), id).await?;
            self.release(Ledger::Scratch, tenant, id, "").await?;
            self.release(Ledger::Memory, tenant, id, "").await?;
            Ok(removed > 0)
        })
    }

    fn reachable(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    fn probe(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.ping())
    }
}

/// `EVALSHA` of `script` on `keys`, its arguments to follow: built directly, where a
/// `ScriptInvocation` keeps every key and argument apart and copies them all once more into
/// the command it sends (a batch's two calls go through here).
fn evalsha(script: &redis::Script, keys: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    cmd
}

/// Sends `pipe`, which calls `script` by its hash; when Redis does not know the script (it
/// restarted, failed over or flushed its scripts), loads it and sends `pipe` again, as
/// `ScriptInvocation::invoke_async` does for a script called alone.
async fn loading<T: redis::FromRedisValue>(
    script: &redis::Script,
    c: &mut super::Connection,
    pipe: &redis::Pipeline,
) -> redis::RedisResult<T> {
    match pipe.query_async(c).await {
        Err(error)
            if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
        {
            script.load_async(c).await?;
            pipe.query_async(c).await
        }
        answer => answer,
    }
}

impl RedisStore {
    /// One `SAVE` of `changes` (`scripts.rs` says what `grant` and `mode` are): 1 saved, 0 the
    /// session is gone, negative the memory bytes the session's allowance lacks.
    async fn save_once(
        &self,
        tenant: &str,
        id: &str,
        changes: &Changes,
        grant: u64,
        mode: &str,
    ) -> Result<i64, StoreError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, millis);
        let mut call = evalsha(&self.save, &keys(tenant, id));
        call.arg(&changes.generation)
            .arg(millis(self.settings.idle_ttl))
            .arg(now)
            .arg(self.data_ttl())
            .arg(self.settings.loop_window.max(1))
            .arg(self.settings.memory_entries.max(1))
            .arg(SLOT_BYTES)
            .arg(grant)
            .arg(mode)
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
        let mut save = redis::pipe();
        save.add_command(call);
        let (saved,): (i64,) = self
            .within(async |c| loading(&self.save, c, &save).await)
            .await?;
        Ok(saved)
    }

    /// Counts session `id` in its tenant's index if it is not there yet; how many the index
    /// holds.
    async fn count(&self, tenant: &str, id: &str, now: u64) -> Result<usize, StoreError> {
        let index = tenant_index(tenant);
        let mut add = redis::pipe();
        add.cmd("ZADD")
            .arg(&index)
            .arg("NX")
            .arg(now)
            .arg(id)
            .ignore()
            .zcard(&index);
        let (live,): (usize,) = self.within(async |c| add.query_async(c).await).await?;
        Ok(live)
    }

    /// Past the cap (`live` sessions counted, session `id` just made among them): samples the
    /// tenant's sessions at random (as Redis's own LRU eviction does), forgets those that
    /// expired or ended, and evicts the least recently used of the rest (the least time left:
    /// every batch renews its meta to the idle TTL, which every replica should share). Up to four
    /// more round trips, only for a session made past the cap.
    async fn evict_past_cap(&self, tenant: &str, id: &str, live: usize) -> Result<(), StoreError> {
        let index = tenant_index(tenant);
        let mut sample = redis::cmd("ZRANDMEMBER");
        sample.arg(&index).arg(EVICTION_SAMPLE);
        let sampled: Vec<String> = self.within(async |c| sample.query_async(c).await).await?;
        // How long each has left, asked all at once (each key of its own session, so its own
        // slot): every batch's save renews its meta's expiry to the idle TTL, so the least
        // left is the least recently used.
        let time_left = sampled.iter().filter(|o| *o != id).map(|other| async move {
            let mut left = redis::cmd("PTTL");
            left.arg(&keys(tenant, other)[0]);
            let left: i64 = self.within(async |c| left.query_async(c).await).await?;
            Ok::<_, StoreError>((other, left))
        });
        let mut gone = Vec::new();
        let mut idle: Option<(i64, &String)> = None;
        for answer in futures::future::join_all(time_left).await {
            match answer? {
                // Expired or ended elsewhere (no key: -2): it no longer counts.
                (other, -2) => gone.push(other),
                // No expiry (-1): kept on purpose by an operator, never evicted.
                (_, -1) => {}
                (other, left) if idle.is_none_or(|(l, _)| left < l) => {
                    idle = Some((left, other));
                }
                _ => {}
            }
        }
        let evict = idle.filter(|_| live.saturating_sub(gone.len()) > self.settings.max_sessions);
        let mut forget = redis::cmd("ZREM");
        forget.arg(&index).arg(&gone);
        if let Some((_, evicted)) = evict {
            let mut del = redis::cmd("DEL");
            del.arg(&keys(tenant, evicted)[..]);
            let _: i64 = self.within(async |c| del.query_async(c).await).await?;
            forget.arg(evicted);
            self.metrics.evicted("sessions", "capacity", 1);
            tracing::debug!(target: "toolgate::session", session = %evicted, %tenant, "session evicted: max_sessions reached");
        }
        if !gone.is_empty() || evict.is_some() {
            let _: i64 = self.within(async |c| forget.query_async(c).await).await?;
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
}
