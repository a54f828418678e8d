//! The scratch tools' `ScratchStore` on Redis: a session's files in a hash and its directories in
//! a set, under the session's hash tag; each write reserved in its tenant's ledger
//! (`ledger.rs`) first, so all of the tenant's sessions together stay within its bound.

use toolgate_core::tools::{BoxFuture, Entry, FileError, ScratchStore, SharedScratch, entry_bytes};

use super::ledger::Ledger;
use super::{RedisStore, keys};

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

    /// Settles a write's reservation to what it added (`WRITE` answers it; nothing, when it
    /// was refused). One sent and unanswered may have been applied: its reservation stays
    /// charged, too much and never too little, until the session goes.
    async fn settle_write(
        &self,
        owner: &SharedScratch,
        reserved: u64,
        written: &Result<Vec<String>, FileError>,
    ) {
        let grew = match written {
            Ok(values) => values.first().and_then(|n| n.parse::<i64>().ok()),
            Err(FileError::OutcomeUnknown(_)) => None,
            Err(_) => Some(0),
        };
        if let Some(grew) = grew {
            let by = grew.saturating_sub(i64::try_from(reserved).unwrap_or(i64::MAX));
            let session = (owner.session.as_str(), owner.generation.as_str());
            self.settle(Ledger::Scratch, &owner.tenant, session, by)
                .await;
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
            let session = (owner.session.as_str(), owner.generation.as_str());
            let reserved = match bound {
                0 => 0,
                _ => {
                    let reserving =
                        self.reserve(Ledger::Scratch, &owner.tenant, session, most, bound);
                    let granted = reserving.await.map_err(|e| {
                        self.metrics.store_error("scratch");
                        FileError::Unavailable(e.to_string())
                    })?;
                    if granted { most } else { 0 }
                }
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
                self.settle_write(owner, reserved, &written).await;
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
