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

/// Which replica has an elicitation out on `session` (one at a time across the fleet).
fn asking_key(session: &str) -> String {
    format!("toolgate:{{mcp}}:asking:{session}")
}

/// Present while the call waiting on `approval` runs, renewed by its replica.
fn parked_key(approval: &str) -> String {
    format!("toolgate:{{mcp}}:parked:{approval}")
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
    /// The replica that asked.
    pub replica: String,
}

/// Deletes an elicitation's note, then lets the session's next form go, if this replica held it.
const DONE_ASKING: &str = r#"
redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
end
return 1
"#;

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

    /// Takes the turn to put a form to `session`'s person, for `replica`, for at most `ttl`;
    /// `false` while another elicitation is out on the session (on any replica). A JSON-RPC id
    /// is unique only within one replica's worker for the session, so one form at a time lets
    /// an answer name its elicitation wherever it arrives.
    pub async fn take_asking_turn(
        &self,
        session: &str,
        replica: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.set_new(&asking_key(session), replica, ttl).await
    }

    /// The replica with an elicitation out on `session`, if any.
    pub async fn asking(&self, session: &str) -> Result<Option<String>, StoreError> {
        let key = asking_key(session);
        self.store
            .within(async |c| redis::cmd("GET").arg(&key).query_async(c).await)
            .await
    }

    /// Forgets elicitation `request` of `session` (answered, or withdrawn), and gives up the
    /// session's turn if `replica` held it.
    pub async fn done_asking(
        &self,
        session: &str,
        request: &str,
        replica: &str,
    ) -> Result<(), StoreError> {
        let done = redis::Script::new(DONE_ASKING);
        let mut script = done.prepare_invoke();
        script
            .key(asked_key(session, request))
            .key(asking_key(session))
            .arg(replica);
        self.store
            .within(async |c| script.invoke_async::<()>(c).await)
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
        let text = serde_json::to_string(asked).unwrap_or_default();
        self.set(&asked_key(session, request), &text, ttl).await
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

    /// Marks the call waiting on `approval` as running, for `ttl` (renewed while it runs).
    pub async fn mark_parked(&self, approval: &str, ttl: Duration) -> Result<(), StoreError> {
        self.set(&parked_key(approval), "1", ttl).await
    }

    /// Whether the call waiting on `approval` still runs on some replica.
    pub async fn is_parked(&self, approval: &str) -> Result<bool, StoreError> {
        let key = parked_key(approval);
        self.store
            .within(async |c| redis::cmd("EXISTS").arg(&key).query_async(c).await)
            .await
    }

    /// Puts the result of the call waiting on `approval` for `ttl`, and marks it no longer
    /// running (in that order, so a retry that sees it ended finds the result).
    pub async fn put_result(
        &self,
        approval: &str,
        result: &str,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let key = result_key(approval);
        let parked = parked_key(approval);
        self.store
            .within(async |c| {
                redis::pipe()
                    .atomic()
                    .cmd("SET")
                    .arg(&key)
                    .arg(result)
                    .arg("PX")
                    .arg(millis(ttl))
                    .ignore()
                    .del(&parked)
                    .ignore()
                    .query_async::<()>(c)
                    .await
            })
            .await
    }

    /// Marks the `request_state` naming `approval` redeemed; `false` when it was already.
    pub async fn redeem_once(&self, approval: &str, ttl: Duration) -> Result<bool, StoreError> {
        self.set_new(&redeemed_key(approval), "1", ttl).await
    }

    /// Sets `key` to `value` for `ttl`.
    async fn set(&self, key: &str, value: &str, ttl: Duration) -> Result<(), StoreError> {
        self.store
            .within(async |c| {
                redis::cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("PX")
                    .arg(millis(ttl))
                    .query_async::<()>(c)
                    .await
            })
            .await
    }

    /// Sets `key` to `value` for `ttl` unless it is set; whether it was not.
    async fn set_new(&self, key: &str, value: &str, ttl: Duration) -> Result<bool, StoreError> {
        let set: Option<String> = self
            .store
            .within(async |c| {
                redis::cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("NX")
                    .arg("PX")
                    .arg(millis(ttl))
                    .query_async(c)
                    .await
            })
            .await?;
        Ok(set.is_some())
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
