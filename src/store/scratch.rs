//! The scratch tools' `ScratchStore` on Redis: a session's files in a hash and its directories in
//! a set, under the session's hash tag; and the tenant's ledger that bounds what all of its
//! sessions hold together, across the fleet.

use toolgate_core::tools::{BoxFuture, Entry, FileError, ScratchStore, SharedScratch, entry_bytes};

use super::{RedisStore, keys, tenant_scratch};

/// Sessions of a tenant whose charges a full ledger checks (as the session cap's eviction
/// samples): those that ended, expired or were made again give their bytes back.
const LEDGER_SAMPLE: isize = 64;

impl RedisStore {
    /// Runs a scratch script, the store's own failures as `Unavailable`; a write sent whose
    /// answer never came as `OutcomeUnknown` (a read changes nothing either way).
    async fn scratch(
        &self,
        call: redis::ScriptInvocation<'_>,
        writes: bool,
    ) -> Result<Vec<String>, FileError> {
        let reply = self.within(async |c| call.invoke_async(c).await).await;
        let reply = reply.map_err(|e| {
            self.metrics.store_error("scratch");
            match writes && e.maybe_applied {
                true => FileError::OutcomeUnknown(e.to_string()),
                false => FileError::Unavailable(e.to_string()),
            }
        })?;
        answered(reply)
    }

    /// Reserves `most` bytes in `owner`'s tenant's ledger: `most` if granted, 0 if the tenant's
    /// sessions hold its `bound` already, even after the ledger gave back what sessions that
    /// went held.
    async fn reserve(
        &self,
        owner: &SharedScratch,
        most: u64,
        bound: u64,
    ) -> Result<u64, FileError> {
        for attempt in 0..2 {
            let mut call = self.tenant_reserve.prepare_invoke();
            for key in tenant_scratch(&owner.tenant) {
                call.key(key);
            }
            call.arg(&owner.session)
                .arg(&owner.generation)
                .arg(most)
                .arg(bound)
                .arg(self.data_ttl());
            let granted: i64 = self
                .within(async |c| call.invoke_async(c).await)
                .await
                .map_err(|e| {
                    self.metrics.store_error("scratch");
                    FileError::Unavailable(e.to_string())
                })?;
            if granted == 1 {
                return Ok(most);
            }
            if attempt == 0 {
                self.give_back_gone(&owner.tenant).await;
            }
        }
        Ok(0)
    }

    /// Corrects `owner`'s charge by `by` bytes once its write is done. A correction lost (the
    /// store failed meanwhile) leaves the tenant charged too much until the session goes.
    async fn settle(&self, owner: &SharedScratch, by: i64) {
        if by == 0 {
            return;
        }
        let mut call = self.tenant_settle.prepare_invoke();
        for key in tenant_scratch(&owner.tenant) {
            call.key(key);
        }
        call.arg(&owner.session)
            .arg(&owner.generation)
            .arg(by)
            .arg(self.data_ttl());
        let settled: Result<i64, _> = self.within(async |c| call.invoke_async(c).await).await;
        if let Err(error) = settled {
            self.metrics.store_error("scratch");
            tracing::warn!(target: "toolgate::session", %error, "a tenant's scratch charge was not corrected; it holds too much until the session goes");
        }
    }

    /// Gives back what session `id` of `tenant` holds in its ledger, if it is charged as
    /// `generation` (`""`: whichever).
    pub(super) async fn release(
        &self,
        tenant: &str,
        id: &str,
        generation: &str,
    ) -> Result<(), toolgate_core::session::StoreError> {
        let mut call = self.tenant_release.prepare_invoke();
        for key in tenant_scratch(tenant) {
            call.key(key);
        }
        call.arg(id).arg(generation).arg(self.data_ttl());
        let _: i64 = self.within(async |c| call.invoke_async(c).await).await?;
        Ok(())
    }

    /// A full ledger checks a sample of the sessions it charges: one whose meta is gone (ended,
    /// expired, evicted) or names another generation (made again) gives its bytes back. Up to
    /// three round trips, only when a tenant is full.
    async fn give_back_gone(&self, tenant: &str) {
        let [_, generations, _] = tenant_scratch(tenant);
        let mut sample = redis::cmd("HRANDFIELD");
        sample
            .arg(&generations)
            .arg(LEDGER_SAMPLE)
            .arg("WITHVALUES");
        let Ok(sampled) = self
            .within(async |c| sample.query_async::<Vec<String>>(c).await)
            .await
        else {
            return;
        };
        let checks = sampled.chunks_exact(2).map(|pair| async move {
            let (id, charged) = (&pair[0], &pair[1]);
            let mut current = redis::cmd("HGET");
            current.arg(&keys(tenant, id)[0]).arg("generation");
            let current: Option<String> = self
                .within(async |c| current.query_async(c).await)
                .await
                .ok()?;
            if current.as_deref() == Some(charged.as_str()) {
                return None;
            }
            self.release(tenant, id, charged).await.ok()
        });
        let given_back = futures::future::join_all(checks).await;
        let sessions = given_back.iter().flatten().count();
        if sessions > 0 {
            tracing::debug!(target: "toolgate::session", %tenant, sessions, "scratch bytes of sessions that went given back");
        }
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
            let bound = self.settings.tenant_scratch_bytes;
            // The most the write can add: its content, its file's entry and one per directory
            // on its way (what it replaces is known only to the script).
            let dirs = u64::try_from(path.matches('/').count()).unwrap_or(u64::MAX);
            let most = u64::try_from(content.len())
                .unwrap_or(u64::MAX)
                .saturating_add(entry_bytes().saturating_mul(dirs.saturating_add(1)));
            let reserved = match bound {
                0 => 0,
                _ => self.reserve(owner, most, bound).await?,
            };
            // Nothing granted: the tenant is full, and only a write that does not grow the
            // session's files may go on.
            let may_grow = bound == 0 || reserved > 0;
            let [meta, _, _, files, dirs, _] = keys(&owner.tenant, &owner.session);
            let mut call = self.write.prepare_invoke();
            call.key(meta)
                .key(files)
                .key(dirs)
                .arg(path)
                .arg(content)
                .arg(owner.quota)
                .arg(entry_bytes())
                .arg(self.data_ttl())
                .arg(&owner.generation)
                .arg(if may_grow { "0" } else { "1" });
            let written = self.scratch(call, true).await;
            if bound > 0 {
                let grew = match &written {
                    Ok(values) => values.first().and_then(|n| n.parse::<i64>().ok()),
                    // Sent and unanswered, it may have been applied: the reservation stays
                    // charged (too much, never too little) until the session goes.
                    Err(FileError::OutcomeUnknown(_)) => None,
                    Err(_) => Some(0),
                };
                if let Some(grew) = grew {
                    let reserved = i64::try_from(reserved).unwrap_or(i64::MAX);
                    self.settle(owner, grew.saturating_sub(reserved)).await;
                }
            }
            match written {
                Ok(_) => Ok(()),
                Err(FileError::OverQuota { needed, .. }) => Err(FileError::OverQuota {
                    needed,
                    quota: owner.quota,
                }),
                Err(FileError::TenantOverQuota { .. }) => {
                    Err(FileError::TenantOverQuota { quota: bound })
                }
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
            let [_, _, _, files, dirs, _] = keys(&owner.tenant, &owner.session);
            let mut call = self.read.prepare_invoke();
            call.key(files).key(dirs).arg(path);
            let mut values = self.scratch(call, false).await?;
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
            let [_, _, _, files, dirs, _] = keys(&owner.tenant, &owner.session);
            let mut call = self.list.prepare_invoke();
            call.key(files).key(dirs).arg(dir).arg(max);
            let values = self.scratch(call, false).await?;
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

/// A scratch script's answer: `ok` and its values, or why not.
fn answered(reply: Vec<String>) -> Result<Vec<String>, FileError> {
    let mut reply = reply.into_iter();
    match reply.next().as_deref() {
        Some("ok") => Ok(reply.collect()),
        Some("isdir") => Err(FileError::NotAFile),
        Some("notdir") => Err(FileError::NotADirectory),
        Some("missing") => Err(FileError::NotFound),
        Some("gone") => Err(FileError::Ended),
        Some("tenant") => Err(FileError::TenantOverQuota { quota: 0 }),
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
