//! MCP sessions shared between replicas: what rmcp needs to restore a 2025-11-25 session on
//! another replica (the client's `initialize` parameters, its `SessionStore`), and the identity
//! that opened each session, so that a replica that never saw the session still refuses it to
//! anyone else. One hash per session, kept `sessions.idle_ttl` past its last renewal.
//!
//! And what lets an approval asked of the person at a client be answered through any replica:
//! the key every replica seals a 2026-07-28 `request_state` with, which approval each
//! 2025-11-25 elicitation asks about (for the replica its answer reaches), a `request_state`'s
//! one redemption, and the result of a parked call for the replica its retry reaches.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};
use toolgate_core::session::StoreError;

use super::{RedisStore, millis};

/// A session's hash: `state` (rmcp's JSON) and `owner`.
fn session_key(id: &str) -> String {
    format!("toolgate:{{mcp}}:session:{id}")
}

/// The key `request_state`s are sealed with, shared by the replicas.
const STATE_KEY: &str = "toolgate:{mcp}:state-key";

/// Which approval elicitation `request` of session `session` asks about.
fn asked_key(session: &str, request: &str) -> String {
    format!("toolgate:{{mcp}}:asked:{session}:{request}")
}

/// Set once a `request_state` naming `approval` was redeemed.
fn redeemed_key(approval: &str) -> String {
    format!("toolgate:{{mcp}}:redeemed:{approval}")
}

/// The result of the parked call waiting on `approval`, for a retry on another replica.
fn result_key(approval: &str) -> String {
    format!("toolgate:{{mcp}}:result:{approval}")
}

/// An elicitation a replica sent: the approval it asks about, and who was asked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Asked {
    pub approval: String,
    /// The session owner's key (`method:tenant/id`).
    pub owner: String,
}

/// rmcp's session store, and the sessions' owners, on the shared Redis.
pub struct McpSessions {
    store: Arc<RedisStore>,
}

impl McpSessions {
    pub fn new(store: Arc<RedisStore>) -> Self {
        McpSessions { store }
    }

    /// Who opened session `id`, if the store knows it.
    pub async fn owner(&self, id: &str) -> Result<Option<String>, StoreError> {
        let key = session_key(id);
        self.store
            .within(async |c| {
                redis::cmd("HGET")
                    .arg(&key)
                    .arg("owner")
                    .query_async(c)
                    .await
            })
            .await
    }

    /// Records that `owner` opened session `id` (or renews it), for `sessions.idle_ttl`.
    pub async fn set_owner(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        let key = session_key(id);
        let ttl = millis(self.store.settings.idle_ttl);
        self.store
            .within(async |c| {
                redis::pipe()
                    .atomic()
                    .hset(&key, "owner", owner)
                    .ignore()
                    .cmd("PEXPIRE")
                    .arg(&key)
                    .arg(ttl)
                    .ignore()
                    .query_async(c)
                    .await
            })
            .await
    }
}

impl McpSessions {
    /// The replicas' key for sealing `request_state`s: the one the store holds, or `fresh`,
    /// which becomes it when the store holds none.
    pub async fn state_key(&self, fresh: &str) -> Result<String, StoreError> {
        self.store
            .within(async |c| {
                let (key,): (String,) = redis::pipe()
                    .cmd("SET")
                    .arg(STATE_KEY)
                    .arg(fresh)
                    .arg("NX")
                    .ignore()
                    .get(STATE_KEY)
                    .query_async(c)
                    .await?;
                Ok(key)
            })
            .await
    }

    /// Records that elicitation `request` of `session` asks `asked`, for `ttl`.
    pub async fn ask(
        &self,
        session: &str,
        request: &str,
        asked: &Asked,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let key = asked_key(session, request);
        let text = serde_json::to_string(asked).unwrap_or_default();
        self.store
            .within(async |c| {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(&text)
                    .arg("PX")
                    .arg(millis(ttl))
                    .query_async::<()>(c)
                    .await
            })
            .await
    }

    /// What elicitation `request` of `session` asks, taken (once) by the replica its answer
    /// reached; `None` when no replica asked it (or its time is past).
    pub async fn take_asked(
        &self,
        session: &str,
        request: &str,
    ) -> Result<Option<Asked>, StoreError> {
        let key = asked_key(session, request);
        let text: Option<String> = self
            .store
            .within(async |c| redis::cmd("GETDEL").arg(&key).query_async(c).await)
            .await?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// Forgets elicitation `request` of `session` (answered where it was asked, or withdrawn).
    pub async fn forget_asked(&self, session: &str, request: &str) -> Result<(), StoreError> {
        let key = asked_key(session, request);
        self.store
            .within(async |c| redis::cmd("DEL").arg(&key).query_async::<()>(c).await)
            .await
    }

    /// Marks the `request_state` naming `approval` redeemed; `false` when it was already.
    pub async fn redeem_once(&self, approval: &str, ttl: Duration) -> Result<bool, StoreError> {
        let key = redeemed_key(approval);
        let set: Option<String> = self
            .store
            .within(async |c| {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(1)
                    .arg("NX")
                    .arg("PX")
                    .arg(millis(ttl))
                    .query_async(c)
                    .await
            })
            .await?;
        Ok(set.is_some())
    }

    /// Keeps the result of the parked call waiting on `approval` for `ttl`.
    pub async fn put_result(
        &self,
        approval: &str,
        result: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let key = result_key(approval);
        self.store
            .within(async |c| {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(result)
                    .arg("PX")
                    .arg(millis(ttl))
                    .query_async::<()>(c)
                    .await
            })
            .await
    }

    /// Takes the result of the parked call waiting on `approval`, once it is there.
    pub async fn take_result(&self, approval: &str) -> Result<Option<String>, StoreError> {
        let key = result_key(approval);
        self.store
            .within(async |c| redis::cmd("GETDEL").arg(&key).query_async(c).await)
            .await
    }
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, SessionStoreError>> + Send + 'a>>;

impl SessionStore for McpSessions {
    fn load<'a, 'b, 't>(&'a self, session_id: &'b str) -> Boxed<'t, Option<SessionState>>
    where
        'a: 't,
        'b: 't,
        Self: 't,
    {
        Box::pin(async move {
            let key = session_key(session_id);
            let state: Option<String> = self
                .store
                .within(async |c| {
                    redis::cmd("HGET")
                        .arg(&key)
                        .arg("state")
                        .query_async(c)
                        .await
                })
                .await?;
            match state {
                Some(text) => Ok(Some(serde_json::from_str(&text)?)),
                None => Ok(None),
            }
        })
    }

    fn store<'a, 'b, 'c, 't>(
        &'a self,
        session_id: &'b str,
        state: &'c SessionState,
    ) -> Boxed<'t, ()>
    where
        'a: 't,
        'b: 't,
        'c: 't,
        Self: 't,
    {
        Box::pin(async move {
            let key = session_key(session_id);
            let text = serde_json::to_string(state)?;
            let ttl = millis(self.store.settings.idle_ttl);
            self.store
                .within(async |c| {
                    redis::pipe()
                        .atomic()
                        .hset(&key, "state", &text)
                        .ignore()
                        .cmd("PEXPIRE")
                        .arg(&key)
                        .arg(ttl)
                        .ignore()
                        .query_async::<()>(c)
                        .await
                })
                .await?;
            Ok(())
        })
    }

    fn delete<'a, 'b, 't>(&'a self, session_id: &'b str) -> Boxed<'t, ()>
    where
        'a: 't,
        'b: 't,
        Self: 't,
    {
        Box::pin(async move {
            let key = session_key(session_id);
            self.store
                .within(async |c| redis::cmd("DEL").arg(&key).query_async::<()>(c).await)
                .await?;
            Ok(())
        })
    }
}
