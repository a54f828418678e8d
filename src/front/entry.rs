//! The one way in for a batch, whatever front it came through: refused while the server drains,
//! then admitted against the server's batch and call capacity (shares per connection, tenant and
//! identity) and the bytes its request holds once decoded. Every refusal is counted under the
//! capacity that was full. The gRPC service and the MCP front both call it, so neither front is
//! a way around the bounds the other keeps.

use std::sync::Arc;

use tokio_util::task::TaskTracker;

use super::admission::{Admission, Holder, Refusal, Ticket};
use super::decoded::{Decoded, DecodedBudget, DecodedFull};
use toolgate_core::dispatch::Cancel;
use toolgate_core::metrics::Metrics;

/// What admits batches, shared by every front of one server.
pub struct Entry {
    /// Batch and call capacity, server-wide and per connection, tenant and identity.
    pub admission: Arc<Admission>,
    /// What running batches' requests hold once decoded.
    pub decoded: Arc<DecodedBudget>,
    /// Every running batch, so shutdown can wait for them; closed when the server drains.
    pub tracker: TaskTracker,
    /// Parent of every batch's cancel; fired when the shutdown grace period ends.
    pub shutdown: Cancel,
    /// Where refusals for capacity are counted.
    metrics: Arc<Metrics>,
}

/// Why a batch was turned away at the entry.
#[derive(Debug, thiserror::Error)]
pub enum Turned {
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Overloaded(Refusal),
    #[error(transparent)]
    Decoded(DecodedFull),
}

impl Entry {
    pub fn new(
        admission: Arc<Admission>,
        decoded: Arc<DecodedBudget>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Entry {
            admission,
            decoded,
            tracker: TaskTracker::new(),
            shutdown: Cancel::new(),
            metrics,
        }
    }

    /// Before the request is parsed: refused while draining, then while the server (or the
    /// holder's share of it) is full, so refusals under load stay cheap; then the `weight`
    /// bytes the request will hold once decoded are taken, given back when `Decoded` drops.
    pub(crate) fn open(&self, holder: &Holder, weight: usize) -> Result<Decoded, Turned> {
        if self.tracker.is_closed() {
            return Err(Turned::ShuttingDown);
        }
        self.admission
            .check(holder)
            .map_err(|refusal| self.refused(refusal))?;
        self.decoded.take(holder, weight).map_err(|full| {
            self.metrics.refused(full.capacity_name());
            Turned::Decoded(full)
        })
    }

    /// What a front holds while it parses a request it has buffered: `weight` bytes against
    /// the same decoded-bytes budgets, before anything in it is parsed.
    pub(crate) fn weigh(&self, holder: &Holder, weight: usize) -> Result<Decoded, Turned> {
        self.decoded.take(holder, weight).map_err(|full| {
            self.metrics.refused(full.capacity_name());
            Turned::Decoded(full)
        })
    }

    /// Once parsed: slots for up to `wanted` calls at once (at least one), given back when the
    /// `Ticket` drops.
    pub(crate) fn admit(&self, holder: Holder, wanted: usize) -> Result<Ticket, Turned> {
        self.admission
            .admit(holder, wanted)
            .map_err(|refusal| self.refused(refusal))
    }

    /// The cancel of a new batch: a child of the server's shutdown.
    pub fn cancel(&self) -> Cancel {
        self.shutdown.child()
    }

    fn refused(&self, refusal: Refusal) -> Turned {
        self.metrics.refused(refusal.capacity_name());
        Turned::Overloaded(refusal)
    }
}
