//! Observer events of a batch and the `Observer` trait the gRPC stream implements.

use std::time::Duration;

use serde_json::Value;

use crate::safety::breaker::BreakerState;
use crate::safety::hooks::GateRecord;
use crate::tools::BoxFuture;
use crate::tools::ErrorClass;

/// Something that happened while a batch ran. Events of one call pair by (id, attempt).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Once per call, before anything executes, also for calls that will not run.
    CallReceived {
        index: usize,
        id: String,
        name: String,
        arguments: Value,
    },
    /// Before each attempt.
    ToolPre {
        index: usize,
        id: String,
        attempt: u32,
        tool: String,
    },
    /// After each attempt, whatever its outcome.
    ToolPost {
        index: usize,
        id: String,
        attempt: u32,
        tool: String,
        error_class: ErrorClass,
        duration: Duration,
        cached: bool,
        /// The attempt's content (or error text), cut to a bounded preview.
        preview: String,
    },
    /// A pre-tool hook decided, between the attempt's pre and post.
    GateDecision {
        index: usize,
        id: String,
        attempt: u32,
        tool: String,
        record: GateRecord,
        /// FNV-1a digest of the canonical input the hook saw.
        args_digest: String,
    },
    /// A failed attempt will run again after `delay`.
    RetryScheduled {
        index: usize,
        id: String,
        /// The attempt that will run next.
        attempt: u32,
        tool: String,
        delay: Duration,
        reason: String,
    },
    /// A repeating operation was seen (warn) or refused (stop).
    LoopDetected {
        index: usize,
        id: String,
        attempt: u32,
        tool: String,
        stop: bool,
        pattern: String,
        repeats: u32,
    },
    /// A running call reported progress.
    Progress {
        index: usize,
        id: String,
        attempt: u32,
        tool: String,
        progress: f64,
        total: Option<f64>,
        message: String,
    },
    /// A call waits for a person's answer (interactive approvals).
    ApprovalRequested(crate::approvals::Approval),
    /// A call's approval ended: answered, answered by a remembered decision, or expired.
    ApprovalResolved(crate::approvals::Ended),
    /// A tool's breaker changed state because of this call's attempt.
    BreakerChanged {
        id: String,
        tool: String,
        from: BreakerState,
        to: BreakerState,
    },
}

/// Receives a batch's events in order. Awaiting applies back-pressure to the batch.
pub trait Observer: Send + Sync {
    fn on_event(&self, event: Event) -> BoxFuture<'_, ()>;
    /// Takes `event` at once if that needs no waiting (`None`), or hands it back for
    /// `on_event`. The driver tries this first: most events find room, and then no future is
    /// made for them.
    fn try_event(&self, event: Event) -> Option<Event> {
        Some(event)
    }
    /// Whether events are wanted at all; when not, the driver does not build them.
    fn wants_events(&self) -> bool {
        true
    }
    /// Whether an approval's events (`ApprovalRequested`, `ApprovalResolved`) are wanted even
    /// when no other event is: a front that puts asks to its client must hear of them, and
    /// needs nothing else.
    fn wants_approvals(&self) -> bool {
        self.wants_events()
    }
    /// Every call of the batch is done and no event follows; what is left before the result is
    /// bookkeeping (saving a shared session: one store round trip, bounded by its timeout). An
    /// observer that writes events may keep the ones it has not written for the result's write.
    fn finishing(&self) {}
}

/// Hands `event` to `observer`, waiting only when it cannot take it at once.
pub(super) async fn deliver(observer: &dyn Observer, event: Event) {
    if let Some(event) = observer.try_event(event) {
        observer.on_event(event).await;
    }
}

/// An observer that drops every event (unary `Dispatch`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_event(&self, _event: Event) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    fn wants_events(&self) -> bool {
        false
    }
}
