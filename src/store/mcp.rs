//! MCP sessions shared between replicas: what rmcp needs to restore a 2025-11-25 session on
//! another replica (the client's `initialize` parameters, its `SessionStore`), and the identity
//! that opened each session, so that a replica that never saw the session still refuses it to
//! anyone else. One hash per session, kept `sessions.idle_ttl` past its last renewal.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};
use toolgate_core::session::StoreError;

use super::{RedisStore, millis};

/// A session's hash: `state` (rmcp's JSON) and `owner`.
fn session_key(id: &str) -> String {
    format!("toolgate:{{mcp}}:session:{id}")
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
