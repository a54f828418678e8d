//! The catalog: the server's current registry, replaceable at run time (remote tools come and
//! go). Readers take a cheap snapshot; writers clone, change and swap, so a batch that took a
//! snapshot is never disturbed by a registration.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use super::registry::ToolRegistry;

/// The current registry and a generation that changes with every update.
#[derive(Debug, Default)]
pub struct Catalog {
    current: RwLock<Arc<ToolRegistry>>,
    generation: AtomicU64,
}

impl Catalog {
    pub fn new(registry: ToolRegistry) -> Self {
        Catalog {
            current: RwLock::new(Arc::new(registry)),
            generation: AtomicU64::new(0),
        }
    }

    /// The registry as it is now.
    pub(crate) fn snapshot(&self) -> Arc<ToolRegistry> {
        self.current.read().clone()
    }

    /// Changes with every successful update (for caches of per-tool data).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
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
        self.generation.fetch_add(1, Ordering::AcqRel);
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
        assert_eq!(
            (before.len(), catalog.snapshot().len(), catalog.generation()),
            (0, 1, 1)
        );
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
        assert_eq!(catalog.generation(), 1);
    }
}
