//! The engine's `SessionStore` on Redis: a batch's load and save, memory, the end of a session,
//! and each tenant's session cap.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use toolgate_core::safety::detector::{Change, SLOT_BYTES};
use toolgate_core::session::{Changes, Loaded, SessionStore, StoreError};
use toolgate_core::tools::BoxFuture;

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
            let mut call = evalsha(&self.load, &keys);
            call.arg(millis(self.settings.idle_ttl))
                .arg(now)
                .arg(tenant)
                .arg(id)
                .arg(fresh_generation()?)
                .arg(self.data_ttl());
            // The store keeps up to twice the window (the save trims lazily): only the newest
            // slots count, and only they are read, after the script, in the same round trip.
            let keep = self.settings.loop_window.max(1) * SLOT_BYTES;
            let mut load = redis::pipe();
            load.add_command(call).getrange(
                &keys[1],
                -isize::try_from(keep).unwrap_or(isize::MAX),
                -1,
            );
            let ((created, generation), window): ((i64, String), Vec<u8>) = self
                .within(async |c| loading(&self.load, c, &load).await)
                .await?;
            // Only a session made now counts toward its tenant's cap: one more round trip once
            // per session, none per batch.
            if created == 1
                && let Err(error) = self.admit(tenant, id, now).await
            {
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
            Ok(saved == 1)
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
    /// Counts a session made now in its tenant's index; past the cap, samples the tenant's
    /// sessions at random (as Redis's own LRU eviction does), forgets those that expired or
    /// ended, and evicts the least recently used of the rest. Three more round trips, only
    /// for a session made past the cap.
    async fn admit(&self, tenant: &str, id: &str, now: u64) -> Result<(), StoreError> {
        let index = tenant_index(tenant);
        let mut add = redis::pipe();
        add.zadd(&index, id, now).ignore().zcard(&index);
        let (live,): (usize,) = self.within(async |c| add.query_async(c).await).await?;
        if live <= self.settings.max_sessions {
            return Ok(());
        }
        let mut sample = redis::cmd("ZRANDMEMBER");
        sample.arg(&index).arg(EVICTION_SAMPLE);
        let sampled: Vec<String> = self.within(async |c| sample.query_async(c).await).await?;
        // Their last use, asked all at once (each key of its own session, so its own slot).
        let last_used = sampled.iter().filter(|o| *o != id).map(|other| async move {
            let mut used = redis::cmd("HGET");
            used.arg(&keys(tenant, other)[0]).arg("used_ms");
            let used: Option<u64> = self.within(async |c| used.query_async(c).await).await?;
            Ok::<_, StoreError>((other, used))
        });
        let mut gone = Vec::new();
        let mut idle: Option<(u64, &String)> = None;
        for answer in futures::future::join_all(last_used).await {
            match answer? {
                // Expired or ended elsewhere: it no longer counts.
                (other, None) => gone.push(other),
                (other, Some(used)) if idle.is_none_or(|(u, _)| used < u) => {
                    idle = Some((used, other));
                }
                _ => {}
            }
        }
        let evict = idle.filter(|_| live - gone.len() > self.settings.max_sessions);
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
