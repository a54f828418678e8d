//! The result cache shared by every server through a store (Redis): entries and their
//! invalidations seen by all, so a write on one server invalidates what another cached.
//! Invariant: a result is stored only if its path was not invalidated since its lookup, on any
//! server (the path's epoch in the store); the local cache does the same with one epoch.

use std::time::Duration;

use crate::session::StoreError;
use crate::tools::{BoxFuture, ToolOutput};

/// A store of cache entries every server reads.
pub trait SharedCache: Send + Sync + 'static {
    /// The entry for `key`, if one is live, and the invalidation epoch of the `path` it reads
    /// (0 without one), to store a result under.
    fn get<'a>(
        &'a self,
        key: &'a CacheKey<'a>,
        path: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Lookup, StoreError>>;

    /// Stores `entry` for `ttl` (or the store's default), unless its path was invalidated
    /// since `epoch` (an entry without a path is never invalidated, so always stored).
    fn put<'a>(
        &'a self,
        key: &'a CacheKey<'a>,
        entry: Cached,
        epoch: u64,
        ttl: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Drops every entry of `path`, everywhere.
    fn invalidate<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;
}

impl std::fmt::Debug for dyn SharedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedCache")
    }
}

/// An entry's identity, compared exactly by the store (never by a hash alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheKey<'a> {
    /// `tenant/session` or `tenant`.
    pub scope: &'a str,
    pub tool: &'a str,
    /// The canonical input.
    pub input: &'a str,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    pub entry: Option<Cached>,
    pub epoch: u64,
}

/// A cached result.
#[derive(Debug, Clone, PartialEq)]
pub struct Cached {
    pub output: ToolOutput,
    /// The model turn it was stored in.
    pub turn: u32,
    /// The path it read, for invalidation.
    pub path: Option<String>,
}
