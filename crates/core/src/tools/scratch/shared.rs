//! Scratch files of a session shared through a store (Redis): what the scratch tools ask of the
//! store, so a file written on one server is read on another. Paths arrive checked (`confine`),
//! as their names joined by `/`; the store keeps the quota the directory would (content bytes
//! plus `ENTRY_BYTES` per file and per directory).

use std::sync::Arc;

use super::beneath::ENTRY_BYTES;
use crate::tools::BoxFuture;

/// A store of sessions' scratch files. Every operation is atomic on one session's files.
pub trait ScratchStore: Send + Sync + 'static {
    fn write<'a>(
        &'a self,
        owner: &'a SharedScratch,
        path: &'a str,
        content: &'a str,
    ) -> BoxFuture<'a, Result<(), FileError>>;

    fn read<'a>(
        &'a self,
        owner: &'a SharedScratch,
        path: &'a str,
    ) -> BoxFuture<'a, Result<String, FileError>>;

    /// The entries directly in `dir` (`""`: the root), at most `max`.
    fn list<'a>(
        &'a self,
        owner: &'a SharedScratch,
        dir: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<Entry>, FileError>>;
}

/// One session's scratch files in a store.
#[derive(Clone)]
pub struct SharedScratch {
    pub store: Arc<dyn ScratchStore>,
    pub tenant: String,
    pub session: String,
    /// Bytes the files may take; 0: no quota.
    pub quota: u64,
    /// Which instance of the session the batch holds (the store refuses a write to another).
    pub generation: String,
}

impl std::fmt::Debug for SharedScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedScratch")
            .field("tenant", &self.tenant)
            .field("session", &self.session)
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

/// A directory entry: its name and `file` or `dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: &'static str,
}

/// Why a store did not do what a scratch tool asked; the tools turn each into the text the
/// model reads, the same as for a directory on disk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("does not exist")]
    NotFound,
    #[error("is a directory, not a regular file")]
    NotAFile,
    #[error("a name on the way is a file, not a directory")]
    NotADirectory,
    #[error("over quota: {needed} bytes needed, {quota} allowed")]
    OverQuota { needed: u64, quota: u64 },
    /// The tenant's sessions together hold their bound of scratch bytes in the store, and the
    /// write would add to them.
    #[error("over the tenant's quota of {quota} bytes")]
    TenantOverQuota { quota: u64 },
    /// The session ended (or expired, or was evicted) while the call ran.
    #[error("the session ended while the call ran")]
    Ended,
    /// The store refused or could not be reached, and nothing was changed; the text is for
    /// the log, not the model.
    #[error("the session store is unavailable: {0}")]
    Unavailable(String),
    /// A write was sent to the store and no answer came in time: it may have been applied.
    #[error("the session store did not answer; the write may have been applied: {0}")]
    OutcomeUnknown(String),
}

/// What one more entry costs against the quota.
pub const fn entry_bytes() -> u64 {
    ENTRY_BYTES
}
