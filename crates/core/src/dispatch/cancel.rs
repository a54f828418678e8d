//! Batch cancellation: a token plus the first reason given, so results can say why.

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

/// Cancels a batch (or every batch of a server, as a parent) and remembers why.
#[derive(Debug, Clone)]
pub struct Cancel {
    token: CancellationToken,
    /// This cancel's reason first, then each ancestor's, nearest first.
    reasons: Vec<Arc<OnceLock<String>>>,
}

impl Default for Cancel {
    fn default() -> Self {
        Cancel {
            token: CancellationToken::new(),
            reasons: vec![Arc::new(OnceLock::new())],
        }
    }
}

impl Cancel {
    pub fn new() -> Self {
        Cancel::default()
    }

    /// A cancel that also fires when `self` (or an ancestor) does, inheriting the reason.
    pub fn child(&self) -> Cancel {
        let mut reasons = Vec::with_capacity(self.reasons.len() + 1);
        reasons.push(Arc::new(OnceLock::new()));
        reasons.extend(self.reasons.iter().cloned());
        Cancel {
            token: self.token.child_token(),
            reasons,
        }
    }

    /// Fires the cancel; the first reason given is kept.
    pub fn cancel(&self, reason: impl Into<String>) {
        if let Some(own) = self.reasons.first() {
            let _ = own.set(reason.into());
        }
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

    /// Why it was cancelled: the nearest reason given ("cancelled" when nobody said).
    pub fn reason(&self) -> String {
        self.reasons
            .iter()
            .find_map(|r| r.get())
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
        let group = batch.child();
        assert_eq!(
            group.reason(),
            "server shutting down",
            "grandparents' reasons reach"
        );
        let own = Cancel::new().child();
        own.cancel("client went away");
        own.cancel("second reason is ignored");
        assert_eq!(own.reason(), "client went away");
    }
}
