//! A batch's hold on its session: this server's session (scratch directory, in-use count) and,
//! when the session is shared through a store, the loop window the batch loaded and the changes
//! it makes, saved back when the batch ends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, MutexGuard};

use super::store::{Changes, Loaded};
use super::{Session, memory_entry};
use crate::safety::detector::{LoopDetector, SLOT_BYTES};
use crate::tools::{ScratchDir, SharedScratch};

/// What the pipeline reads and writes of a batch's session.
#[derive(Debug)]
pub struct Lease {
    session: Arc<Session>,
    shared: Option<Shared>,
}

/// A shared session's state for one batch: seeded from the store, journaling what it adds.
#[derive(Debug)]
struct Shared {
    detector: Mutex<LoopDetector>,
    /// Entries this batch remembered (the newest `memory_entries`: the store keeps no more).
    memory: Mutex<VecDeque<String>>,
    memory_entries: usize,
    scratch: Arc<SharedScratch>,
    /// The changes were taken (`take_changes`): a batch saves once.
    taken: AtomicBool,
}

impl Lease {
    /// A session only this server holds.
    pub fn local(session: Arc<Session>) -> Self {
        Lease {
            session,
            shared: None,
        }
    }

    /// A session shared through a store, seeded with what the batch loaded.
    pub(super) fn shared(
        session: Arc<Session>,
        loaded: &Loaded,
        loop_window: usize,
        memory_entries: usize,
        scratch: SharedScratch,
    ) -> Self {
        let window = loaded.window.chunks(SLOT_BYTES);
        Lease {
            session,
            shared: Some(Shared {
                detector: Mutex::new(LoopDetector::shared(loop_window, window)),
                memory: Mutex::new(VecDeque::new()),
                memory_entries,
                scratch: Arc::new(scratch),
                taken: AtomicBool::new(false),
            }),
        }
    }

    /// Where the scratch tools keep a shared session's files; `None` for a local session.
    pub fn shared_scratch(&self) -> Option<Arc<SharedScratch>> {
        self.shared.as_ref().map(|s| s.scratch.clone())
    }

    pub fn id(&self) -> &str {
        &self.session.id
    }

    /// Whether the session is shared through a store (its state is not this server's alone).
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// This server's session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The scratch directory; a scratch tool makes it on first use.
    pub fn scratch(&self) -> &ScratchDir {
        self.session.scratch()
    }

    /// The loop-detection window.
    pub fn detector(&self) -> MutexGuard<'_, LoopDetector> {
        match &self.shared {
            Some(shared) => shared.detector.lock(),
            None => self.session.detector(),
        }
    }

    /// Whether `remember` keeps anything.
    pub(crate) fn keeps_memory(&self) -> bool {
        match &self.shared {
            Some(shared) => shared.memory_entries > 0,
            None => self.session.keeps_memory(),
        }
    }

    /// Remembers a successful call (`Session::remember` for the format).
    pub fn remember(&self, tool: &str, input: &str, result: &str) {
        let Some(shared) = &self.shared else {
            return self.session.remember(tool, input, result);
        };
        if shared.memory_entries == 0 {
            return;
        }
        let mut memory = shared.memory.lock();
        if memory.len() >= shared.memory_entries {
            memory.pop_front();
        }
        memory.push_back(memory_entry(tool, input, result));
    }

    /// The changes to save, for a shared session, even none (a save renews the session's idle
    /// expiry); `None` for a local one, and once they were taken.
    pub fn take_changes(&self) -> Option<Changes> {
        let shared = self.shared.as_ref()?;
        if shared.taken.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(Changes {
            generation: shared.scratch.generation.clone(),
            window: shared.detector.lock().take_changes(),
            memory: std::mem::take(&mut *shared.memory.lock()).into(),
        })
    }
}
