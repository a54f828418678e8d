//! Byte budgets with two levels, the server's and each connection's share: what a connection
//! holds in request bytes not yet decoded, or in reply bytes not yet handed to the transport,
//! counts against both, so one client (or one that stopped reading) cannot hold more than its
//! share, and all of them together no more than the server's.
//! Invariant: a `Held` gives back exactly what it took, when it is dropped or shrunk.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use toolgate_core::metrics::Metrics;

/// One kind of bytes the server holds for its clients, bounded server-wide.
#[derive(Debug)]
pub struct ByteBudget {
    /// The most all connections hold together.
    limit: usize,
    /// The most one connection holds.
    per_connection: usize,
    used: AtomicUsize,
    /// Where refusals are counted, under `{name}_connection` or `{name}_server`.
    metrics: Arc<Metrics>,
    labels: [&'static str; 2],
}

/// One connection's share of a `ByteBudget`.
#[derive(Debug)]
pub struct Share {
    budget: Arc<ByteBudget>,
    used: AtomicUsize,
}

/// Bytes taken from a share (and its budget); given back when dropped.
#[derive(Debug)]
pub struct Held {
    share: Arc<Share>,
    bytes: usize,
}

/// Which level was full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The connection's share: `per_connection` bytes.
    Connection(usize),
    /// The server's: `limit` bytes.
    Server(usize),
}

impl ByteBudget {
    /// At most `limit` bytes in all, `per_connection` of them on one connection (0: no bound).
    /// A refusal is counted in `metrics` as `labels[0]` (the connection's share was full) or
    /// `labels[1]` (the server's).
    pub fn new(
        limit: usize,
        per_connection: usize,
        metrics: Arc<Metrics>,
        labels: [&'static str; 2],
    ) -> Arc<Self> {
        Arc::new(ByteBudget {
            limit: if limit == 0 { usize::MAX } else { limit },
            per_connection: if per_connection == 0 {
                usize::MAX
            } else {
                per_connection
            },
            used: AtomicUsize::new(0),
            metrics,
            labels,
        })
    }

    /// A new connection's share, holding nothing.
    pub fn share(self: &Arc<Self>) -> Arc<Share> {
        Arc::new(Share {
            budget: self.clone(),
            used: AtomicUsize::new(0),
        })
    }

    /// Bytes held by every connection now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

impl Share {
    /// Takes `bytes`, or says which level has no room for them.
    pub fn take(self: &Arc<Self>, bytes: usize) -> Result<Held, Full> {
        let budget = &self.budget;
        if add_within(&self.used, bytes, budget.per_connection).is_err() {
            budget.metrics.refused(budget.labels[0]);
            return Err(Full::Connection(budget.per_connection));
        }
        if add_within(&budget.used, bytes, budget.limit).is_err() {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
            budget.metrics.refused(budget.labels[1]);
            return Err(Full::Server(budget.limit));
        }
        Ok(Held {
            share: self.clone(),
            bytes,
        })
    }

    /// Bytes this connection holds now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

impl Held {
    /// Gives back `bytes` of what is held (all of it at most).
    pub fn release(&mut self, bytes: usize) {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        self.share.used.fetch_sub(bytes, Ordering::Relaxed);
        self.share.budget.used.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Takes `bytes` more from the same share.
    pub(crate) fn grow(&mut self, bytes: usize) -> Result<(), Full> {
        let mut more = self.share.take(bytes)?;
        // Moved into this one: `more` gives back nothing when it drops.
        self.bytes += std::mem::take(&mut more.bytes);
        Ok(())
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release(self.bytes);
    }
}

/// Adds `bytes` to `counter` unless that would pass `limit`.
fn add_within(counter: &AtomicUsize, bytes: usize, limit: usize) -> Result<(), ()> {
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            used.checked_add(bytes).filter(|total| *total <= limit)
        })
        .map(drop)
        .map_err(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_takes_its_share_and_all_take_the_servers() {
        let budget = ByteBudget::new(100, 60, Arc::default(), ["c", "s"]);
        let (a, b) = (budget.share(), budget.share());
        let held_a = a.take(60).unwrap();
        assert_eq!(a.take(1).unwrap_err(), Full::Connection(60));
        let mut held_b = b.take(40).unwrap();
        assert_eq!(b.take(1).unwrap_err(), Full::Server(100));
        assert_eq!(b.used(), 40, "a refusal takes nothing");
        held_b.release(10);
        assert_eq!((b.used(), budget.used()), (30, 90));
        held_b.grow(10).unwrap();
        assert_eq!(held_b.grow(1).unwrap_err(), Full::Server(100));
        drop(held_a);
        drop(held_b);
        assert_eq!((a.used(), b.used(), budget.used()), (0, 0, 0));
    }

    #[test]
    fn zero_means_no_bound() {
        let budget = ByteBudget::new(0, 0, Arc::default(), ["c", "s"]);
        let held = budget.share().take(usize::MAX / 2).unwrap();
        assert_eq!(held.bytes(), usize::MAX / 2);
    }
}
