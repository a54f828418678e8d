//! Batch cancellation: a token plus the first reason given, so results can say why.

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

/// Cancels a batch (or every batch of a server, as a parent) and remembers why.
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    token: CancellationToken,
    reason: Arc<OnceLock<String>>,
    parent_reason: Option<Arc<OnceLock<String>>>,
}

impl Cancel {
    pub fn new() -> Self {
        Cancel::default()
    }

    /// A cancel that also fires when `self` does, inheriting its reason.
    pub fn child(&self) -> Cancel {
        Cancel {
            token: self.token.child_token(),
            reason: Arc::new(OnceLock::new()),
            parent_reason: Some(self.reason.clone()),
        }
    }

    /// Fires the cancel; the first reason given is kept.
    pub fn cancel(&self, reason: impl Into<String>) {
        let _ = self.reason.set(reason.into());
        self.token.cancel();
    }

    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    pub async fn cancelled(&self) {
        self.token.cancelled().await;
    }

    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Why the batch was cancelled ("cancelled" when nobody said).
    pub fn reason(&self) -> String {
        self.reason
            .get()
            .or_else(|| self.parent_reason.as_ref().and_then(|p| p.get()))
            .cloned()
            .unwrap_or_else(|| "cancelled".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_fire_with_their_parent_and_inherit_its_reason() {
        let server = Cancel::new();
        let batch = server.child();
        assert!(!batch.is_cancelled());
        server.cancel("server shutting down");
        assert!(batch.is_cancelled());
        assert_eq!(batch.reason(), "server shutting down");
        let own = Cancel::new().child();
        own.cancel("client went away");
        own.cancel("second reason is ignored");
        assert_eq!(own.reason(), "client went away");
    }
}
