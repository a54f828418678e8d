//! Who owns each live MCP session on this replica, and how many each identity holds: so that a
//! session is refused to anyone but the identity that opened it, and no identity opens more
//! than its share of `mcp.max_sessions`.

use std::collections::HashMap;

use toolgate_core::identity::Caller;

/// Sessions by id, with their owners, and the count per owner.
#[derive(Debug, Default)]
pub(super) struct Owners {
    by_session: HashMap<String, String>,
    per_owner: HashMap<String, usize>,
}

impl Owners {
    pub(super) fn get(&self, session: &str) -> Option<&str> {
        self.by_session.get(session).map(String::as_str)
    }

    pub(super) fn len(&self) -> usize {
        self.by_session.len()
    }

    /// Sessions `owner` holds.
    pub(super) fn held_by(&self, owner: &str) -> usize {
        self.per_owner.get(owner).copied().unwrap_or(0)
    }

    pub(super) fn insert(&mut self, session: String, owner: String) {
        if let Some(previous) = self.by_session.insert(session, owner.clone()) {
            self.release(&previous);
        }
        *self.per_owner.entry(owner).or_default() += 1;
    }

    pub(super) fn remove(&mut self, session: &str) {
        if let Some(owner) = self.by_session.remove(session) {
            self.release(&owner);
        }
    }

    /// Forgets the sessions `live` does not hold (rmcp closed them: idle, or deleted).
    pub(super) fn keep_only(&mut self, live: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self
            .by_session
            .keys()
            .filter(|id| !live(id))
            .cloned()
            .collect();
        for id in gone {
            self.remove(&id);
        }
    }

    fn release(&mut self, owner: &str) {
        if let Some(count) = self.per_owner.get_mut(owner) {
            *count -= 1;
            if *count == 0 {
                self.per_owner.remove(owner);
            }
        }
    }
}

/// Whose a session or a `request_state` is: the caller's credential, tenant and identity.
pub(super) fn owner_key(caller: &Caller) -> String {
    format!("{}:{}/{}", caller.method.name(), caller.tenant, caller.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_inserts_removals_and_pruning() {
        let mut owners = Owners::default();
        owners.insert("s1".into(), "a".into());
        owners.insert("s2".into(), "a".into());
        owners.insert("s3".into(), "b".into());
        assert_eq!(
            (owners.held_by("a"), owners.held_by("b"), owners.len()),
            (2, 1, 3)
        );
        owners.remove("s1");
        assert_eq!(owners.held_by("a"), 1);
        owners.keep_only(|id| id != "s3");
        assert_eq!((owners.held_by("b"), owners.len()), (0, 1));
        assert_eq!(owners.get("s2"), Some("a"));
        // A session id seen again (restored) is counted once.
        owners.insert("s2".into(), "a".into());
        assert_eq!(owners.held_by("a"), 1);
    }
}
