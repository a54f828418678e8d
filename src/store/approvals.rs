//! The engine's `ApprovalRelay` on Redis: pending approvals recorded under one hash tag
//! (`{approvals}`) so any replica lists and answers them, each answer claimed once by a script,
//! and a pub/sub channel that carries answers and updates to every replica (the one whose batch
//! waits delivers the answer; the others tell their watchers). A session's remembered answers
//! live with its other keys.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use toolgate_core::approvals::{
    Answer, Approval, ApprovalRelay, Approvals, Claim, Previewed, Relayed,
};
use toolgate_core::session::StoreError;
use toolgate_core::tools::BoxFuture;

use super::{RedisStore, keys, millis};

/// The channel every replica publishes approval updates on and listens to. Every key and the
/// channel carry the relay's version (`v2`: who may answer is decided by the asking rule's
/// policy): a replica of an earlier release, during a rolling upgrade, neither sees nor
/// answers the approvals of this one, since it would let an agent answer its own.
const CHANNEL: &str = "toolgate:{approvals}:v2:updates";
/// How long an answered id is kept, so answering it again is "already answered".
const ANSWERED_KEPT: Duration = Duration::from_secs(15 * 60);
/// How long a tenant's index of pending approvals outlives its last change.
const INDEX_KEPT: Duration = Duration::from_secs(24 * 3600);
/// The fields of a pending approval's hash.
const WHOLE: &str = "whole";
const PREVIEW: &str = "preview";

/// A pending approval: a hash of its record whole (`WHOLE`) and its preview with the size of
/// its whole arguments (`PREVIEW`), so listing a tenant reads previews only.
fn pending_key(id: &str) -> String {
    format!("toolgate:{{approvals}}:v2:pending:{id}")
}

fn answered_key(id: &str) -> String {
    format!("toolgate:{{approvals}}:v2:answered:{id}")
}

fn index_key(tenant: &str) -> String {
    format!("toolgate:{{approvals}}:v2:tenant:{tenant}")
}

/// A session's remembered answers, under its hash tag (dropped with its other keys).
fn answers_key(tenant: &str, session: &str) -> String {
    keys(tenant, session)[5].clone()
}

fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(StoreError::new)
}

fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(StoreError::new)
}

/// A pending approval's record, or `None` when it cannot be read (another version's): one
/// unreadable record does not hide the rest.
fn readable<T: serde::de::DeserializeOwned>(id: &str, text: String) -> Option<T> {
    decode(&text)
        .inspect_err(|error| {
            tracing::warn!(target: "toolgate::approvals", %error, approval = %id, "a pending approval in the store could not be read");
        })
        .ok()
}

impl ApprovalRelay for RedisStore {
    fn open<'a>(&'a self, approval: &'a Approval) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let left = approval
                .expires_at
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            let index = index_key(&approval.tenant);
            let key = pending_key(&approval.id);
            let mut open = redis::pipe();
            // One transaction: a record never outlives its expiry for want of a PEXPIRE.
            open.atomic()
                .hset_multiple(
                    &key,
                    &[
                        (WHOLE, encode(approval)?),
                        (PREVIEW, encode(&Previewed::of(approval))?),
                    ],
                )
                .ignore()
                .pexpire(&key, millis(left + Duration::from_secs(1)) as i64)
                .ignore()
                .sadd(&index, &approval.id)
                .ignore()
                .pexpire(&index, millis(INDEX_KEPT) as i64)
                .ignore();
            self.within(async |c| open.query_async::<()>(c).await).await
        })
    }

    fn peek<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Approval>, StoreError>> {
        Box::pin(async move {
            let mut get = redis::cmd("HGET");
            get.arg(pending_key(id)).arg(WHOLE);
            let text: Option<String> = self.within(async |c| get.query_async(c).await).await?;
            text.as_deref().map(decode).transpose()
        })
    }

    fn whole<'a>(
        &'a self,
        ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Option<Approval>>, StoreError>> {
        Box::pin(async move {
            let mut get = redis::pipe();
            for id in ids {
                get.hget(pending_key(id), WHOLE);
            }
            let found: Vec<Option<String>> =
                self.within(async |c| get.query_async(c).await).await?;
            Ok(ids
                .iter()
                .zip(found)
                .map(|(id, text)| readable::<Approval>(id, text?))
                .collect())
        })
    }

    fn claim<'a>(
        &'a self,
        approval: &'a Approval,
        answer: Option<&'a Answer>,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(async move {
            let answer = match answer {
                Some(answer) => encode(answer)?,
                None => String::new(),
            };
            let mut call = self.approval_claim.prepare_invoke();
            call.key(pending_key(&approval.id))
                .key(answered_key(&approval.id))
                .key(index_key(&approval.tenant))
                .arg(answer)
                .arg(millis(ANSWERED_KEPT))
                .arg(&approval.id);
            let claimed: i64 = self.within(async |c| call.invoke_async(c).await).await?;
            Ok(match claimed {
                1 => Claim::Claimed,
                2 => Claim::Answered,
                _ => Claim::Missing,
            })
        })
    }

    fn answered<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Answer>, StoreError>> {
        Box::pin(async move {
            let mut get = redis::cmd("GET");
            get.arg(answered_key(id));
            let text: Option<String> = self.within(async |c| get.query_async(c).await).await?;
            text.as_deref().map(decode).transpose()
        })
    }

    fn pending<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, Result<Vec<Previewed>, StoreError>> {
        Box::pin(async move {
            let index = index_key(tenant);
            let mut members = redis::cmd("SMEMBERS");
            members.arg(&index);
            let ids: Vec<String> = self.within(async |c| members.query_async(c).await).await?;
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let mut get = redis::pipe();
            for id in &ids {
                get.hget(pending_key(id), PREVIEW);
            }
            let found: Vec<Option<String>> =
                self.within(async |c| get.query_async(c).await).await?;
            let mut previews = Vec::new();
            let mut gone = Vec::new();
            for (id, text) in ids.iter().zip(found) {
                match text {
                    Some(text) => previews.extend(readable::<Previewed>(id, text)),
                    // Expired, with the server that held it gone: the index forgets it.
                    None => gone.push(id),
                }
            }
            if !gone.is_empty() {
                let mut forget = redis::cmd("SREM");
                forget.arg(&index).arg(gone);
                let _: i64 = self.within(async |c| forget.query_async(c).await).await?;
            }
            Ok(previews)
        })
    }

    fn publish<'a>(&'a self, message: &'a Relayed) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut publish = redis::cmd("PUBLISH");
            publish.arg(CHANNEL).arg(encode(message)?);
            let _: i64 = self.within(async |c| publish.query_async(c).await).await?;
            Ok(())
        })
    }

    fn remembered<'a>(
        &'a self,
        tenant: &'a str,
        session: &'a str,
        tool: &'a str,
        source: &'a str,
    ) -> BoxFuture<'a, Result<Option<bool>, StoreError>> {
        Box::pin(async move {
            let mut get = redis::cmd("HGET");
            get.arg(answers_key(tenant, session))
                .arg(format!("{tool}\u{0}{source}"));
            let kept: Option<String> = self.within(async |c| get.query_async(c).await).await?;
            Ok(kept.map(|k| k == "approve"))
        })
    }

    fn remember<'a>(
        &'a self,
        tenant: &'a str,
        session: &'a str,
        tool: &'a str,
        source: &'a str,
        approve: bool,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let key = answers_key(tenant, session);
            let mut set = redis::pipe();
            set.hset(
                &key,
                format!("{tool}\u{0}{source}"),
                if approve { "approve" } else { "deny" },
            )
            .ignore()
            .pexpire(&key, self.data_ttl() as i64)
            .ignore();
            self.within(async |c| set.query_async::<()>(c).await).await
        })
    }
}

impl RedisStore {
    /// Listens to the other replicas' approval updates and hands them to `approvals`, for as
    /// long as the process runs: reconnecting with backoff after the store goes away (answers
    /// missed meanwhile still arrive: a waiting call also polls for its answer).
    pub fn relay_approvals(self: Arc<Self>, approvals: Approvals) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(target: "toolgate::approvals", "no runtime to listen to other replicas' approval updates on");
            return;
        };
        runtime.spawn(async move {
            let mut backoff = Duration::from_millis(100);
            loop {
                match self.listen(&approvals).await {
                    Ok(()) => backoff = Duration::from_millis(100),
                    Err(error) => {
                        tracing::warn!(target: "toolgate::approvals", %error, "approval updates from other replicas are not arriving; reconnecting");
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        });
    }

    /// One subscription, until it breaks.
    async fn listen(&self, approvals: &Approvals) -> Result<(), StoreError> {
        let connect = self.pubsub.get_async_pubsub();
        let mut pubsub = tokio::time::timeout(self.settings.timeout, connect)
            .await
            .map_err(|_| StoreError::new("no answer connecting for approval updates"))?
            .map_err(StoreError::new)?;
        pubsub.subscribe(CHANNEL).await.map_err(StoreError::new)?;
        let mut messages = pubsub.on_message();
        while let Some(message) = messages.next().await {
            let Ok(text) = message.get_payload::<String>() else {
                continue;
            };
            match decode::<Relayed>(&text) {
                Ok(relayed) => approvals.receive(relayed),
                Err(error) => {
                    tracing::warn!(target: "toolgate::approvals", %error, "an approval update that is not one was ignored");
                }
            }
        }
        Ok(())
    }
}
