//! The catalog: the server's current registry, replaceable at run time (remote tools come and
//! go). Readers take a cheap snapshot; writers clone, change and swap, so a batch that took a
//! snapshot is never disturbed by a registration. Every change bumps a generation that front
//! doors watch, to tell their clients the tool list changed.

use std::sync::Arc;

use parking_lot::RwLock;
use tokio::sync::watch;

use super::registry::ToolRegistry;

/// The current registry.
#[derive(Debug)]
pub struct Catalog {
    current: RwLock<Arc<ToolRegistry>>,
    /// How many changes were installed.
    generation: watch::Sender<u64>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog::new(ToolRegistry::default())
    }
}

impl Catalog {
    pub fn new(registry: ToolRegistry) -> Self {
        Catalog {
            current: RwLock::new(Arc::new(registry)),
            generation: watch::Sender::new(0),
        }
    }

    /// Follows the changes: the receiver sees each installed change (or the latest of several).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// The registry as it is now.
    pub(crate) fn snapshot(&self) -> Arc<ToolRegistry> {
        self.current.read().clone()
    }

    /// Applies `change` to a copy and installs it only if `change` succeeds: nothing
    /// half-applied ever becomes visible.
    pub fn update<T, E>(
        &self,
        change: impl FnOnce(&mut ToolRegistry) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut current = self.current.write();
        let mut next = (**current).clone();
        let out = change(&mut next)?;
        *current = Arc::new(next);
        drop(current);
        self.generation.send_modify(|n| *n += 1);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{ToolSource, builtin_tools};

    #[test]
    fn updates_are_all_or_nothing_and_snapshots_stay_stable() {
        let catalog = Catalog::new(ToolRegistry::default());
        let before = catalog.snapshot();
        let tools = builtin_tools(&[]);
        catalog
            .update(|r| r.register(tools[0].clone(), ToolSource::Builtin))
            .unwrap();
        assert_eq!((before.len(), catalog.snapshot().len()), (0, 1));
        let failed: Result<(), _> = catalog.update(|r| {
            r.register(tools[1].clone(), ToolSource::Builtin)?;
            r.register(tools[0].clone(), ToolSource::Builtin)
        });
        assert!(failed.is_err());
        assert_eq!(
            catalog.snapshot().len(),
            1,
            "nothing half-registered stays behind"
        );
    }
}
