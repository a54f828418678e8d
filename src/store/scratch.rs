//! The scratch tools' `ScratchStore` on Redis: a session's files in a hash and its directories in
//! a set, under the session's hash tag.

use toolgate_core::tools::{BoxFuture, Entry, FileError, ScratchStore, SharedScratch};

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
}

impl ScratchStore for RedisStore {
    fn write<'a>(
        &'a self,
        owner: &'a SharedScratch,
        path: &'a str,
        content: &'a str,
    ) -> BoxFuture<'a, Result<(), FileError>> {
        Box::pin(async move {
            let [meta, _, _, files, dirs, _] = keys(&owner.tenant, &owner.session);
            let mut call = self.write.prepare_invoke();
            call.key(meta)
                .key(files)
                .key(dirs)
                .arg(path)
                .arg(content)
                .arg(owner.quota)
                .arg(toolgate_core::tools::entry_bytes())
                .arg(self.data_ttl())
                .arg(&owner.generation);
            match self.scratch(call, true).await {
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
