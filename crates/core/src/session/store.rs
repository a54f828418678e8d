//! Where a named session's shared state lives when any of several servers may serve its next
//! batch: the `SessionStore` trait (the server crate implements it on Redis), what a batch loads
//! from it and what it saves back.
//! Invariant: a batch saves changes, never a whole state it read earlier, so two batches of one
//! session running at once on two servers both count.

use std::error::Error;

use crate::safety::detector::Change;
use crate::tools::{BoxFuture, ScratchStore};

/// A named session's shared state: its loop window, memory and scratch files, kept where every
/// server reaches it. Keyed by tenant and id, which no other tenant can name.
pub trait SessionStore: ScratchStore {
    /// Opens (or creates) the session for a batch, renewing its idle expiry if little of it is
    /// left; one round trip as a rule.
    fn load<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Loaded, StoreError>>;

    /// Applies a batch's changes atomically: the window's in order, then the memory entries,
    /// and renews the session's idle expiry (called for every batch, changes or none); true. A
    /// session that is no longer the one the batch loaded (ended, evicted or expired meanwhile,
    /// perhaps made again) keeps nothing: false.
    fn save<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
        changes: Changes,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// The session's memory entries, oldest first; `None` if it is not live.
    fn memory<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<String>>, StoreError>>;

    /// Ends the session everywhere; true if it was live.
    fn end<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Whether the last operation reached the store (for metrics).
    fn reachable(&self) -> bool;

    /// Asks the store whether it is up, so `reachable` follows it between batches too.
    fn probe(&self) -> BoxFuture<'_, ()>;
}

/// What a batch reads at its start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The loop window's slots, oldest first, one after another (`detector::SLOT_BYTES`
    /// each).
    pub window: Vec<u8>,
    /// Which instance of the session this is: drawn when it was made, named by every write
    /// the batch makes.
    pub generation: String,
}

/// What a batch changed, to be applied on the store's copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// The session's generation as the batch loaded it.
    pub generation: String,
    /// The loop window's changes, oldest first.
    pub window: Vec<Change>,
    /// Memory entries to append, oldest first.
    pub memory: Vec<String>,
}

/// The session store could not be reached or did not answer in time. A batch naming a session
/// is refused rather than run on a blank loop window.
#[derive(Debug, thiserror::Error)]
#[error("the session store is unavailable: {source}")]
pub struct StoreError {
    #[source]
    pub source: Box<dyn Error + Send + Sync>,
    /// The operation was sent and no answer came (a timeout, a connection lost meanwhile): the
    /// store may have applied it. False: it was not (refused, or never sent).
    pub maybe_applied: bool,
}

impl StoreError {
    /// An operation the store did not apply.
    pub fn new(source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        StoreError {
            source: source.into(),
            maybe_applied: false,
        }
    }

    /// An operation sent to the store whose answer never came: it may have been applied.
    pub fn in_flight(source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        StoreError {
            maybe_applied: true,
            ..StoreError::new(source)
        }
    }
}
