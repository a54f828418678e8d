//! The recent batches, for the people who watch the server (the console's Batches page): a
//! bounded ring of what each batch was (who sent it, its session, its calls and their outcomes)
//! with the timeline of its events, each a line of bounded text. Every front's batches are
//! recorded, as they run through `Dispatcher::run`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::time::Instant;

use super::batch::BatchReport;
use super::events::{Event, Observer};
use crate::identity::Caller;
use crate::tools::BoxFuture;

/// Batches kept.
pub const FLIGHTS: usize = 200;
/// Events kept of one batch; past them, counted.
pub const FLIGHT_EVENTS: usize = 100;
/// Characters of one event's text.
const EVENT_CHARS: usize = 300;

/// One recent batch.
#[derive(Debug, Clone)]
pub struct Flight {
    /// This server's number for it, from 1.
    pub id: u64,
    pub started: SystemTime,
    pub tenant: String,
    /// The identity that sent it.
    pub caller: String,
    pub session: String,
    pub calls: Vec<FlightCall>,
    pub outcome: &'static str,
    pub duration: Duration,
    pub events: Vec<FlightEvent>,
    /// Events past `FLIGHT_EVENTS`, not kept.
    pub events_dropped: usize,
}

/// One call of a recent batch.
#[derive(Debug, Clone)]
pub struct FlightCall {
    pub name: String,
    pub tool: String,
    pub success: bool,
    pub error_class: &'static str,
    pub attempts: u32,
}

/// One event of a recent batch.
#[derive(Debug, Clone)]
pub struct FlightEvent {
    /// Since the batch started.
    pub at: Duration,
    /// `received`, `pre`, `gate`, `post`, `retry`, `loop`, `progress`, `approval`, `breaker`.
    pub kind: &'static str,
    /// The call it is about (its index in the batch), if one.
    pub call: Option<usize>,
    pub text: String,
}

/// The ring of recent batches.
#[derive(Debug, Default)]
pub struct FlightRecorder {
    ring: Mutex<VecDeque<Arc<Flight>>>,
    next: AtomicU64,
}

impl FlightRecorder {
    /// `tenant`'s recent batches, newest first.
    pub fn recent(&self, tenant: &str) -> Vec<Arc<Flight>> {
        self.ring
            .lock()
            .iter()
            .rev()
            .filter(|flight| flight.tenant == tenant)
            .cloned()
            .collect()
    }

    /// `tenant`'s batch `id`, while it is kept.
    pub fn get(&self, tenant: &str, id: u64) -> Option<Arc<Flight>> {
        self.ring
            .lock()
            .iter()
            .find(|flight| flight.id == id && flight.tenant == tenant)
            .cloned()
    }

    /// An observer that notes a batch's events and passes them on to `inner`.
    pub(super) fn recording<'a>(&self, inner: &'a dyn Observer) -> Recording<'a> {
        Recording {
            inner,
            started: Instant::now(),
            wall: SystemTime::now(),
            events: Mutex::new((Vec::new(), 0)),
        }
    }

    /// Keeps the batch `recording` watched, which ended with `report`.
    pub(super) fn keep(&self, recording: Recording<'_>, caller: &Caller, report: &BatchReport) {
        let (events, events_dropped) = recording.events.into_inner();
        let flight = Flight {
            id: self.next.fetch_add(1, Ordering::Relaxed) + 1,
            started: recording.wall,
            tenant: caller.tenant.clone(),
            caller: caller.id.clone(),
            session: report.session_id.clone(),
            calls: report
                .results
                .iter()
                .map(|r| FlightCall {
                    name: r.name.clone(),
                    tool: r.tool.clone(),
                    success: r.success,
                    error_class: r.error_class.name(),
                    attempts: r.attempts,
                })
                .collect(),
            outcome: report.outcome.name(),
            duration: report.duration,
            events,
            events_dropped,
        };
        let mut ring = self.ring.lock();
        if ring.len() == FLIGHTS {
            ring.pop_front();
        }
        ring.push_back(Arc::new(flight));
    }
}

/// The observer of a recorded batch: notes each event, then hands it to the front's observer
/// (or drops it, when that one wants none).
pub(super) struct Recording<'a> {
    inner: &'a dyn Observer,
    started: Instant,
    wall: SystemTime,
    events: Mutex<(Vec<FlightEvent>, usize)>,
}

impl Recording<'_> {
    fn note(&self, event: &Event) {
        let mut events = self.events.lock();
        if events.0.len() >= FLIGHT_EVENTS {
            events.1 += 1;
            return;
        }
        let (kind, call, text) = summary(event);
        events.0.push(FlightEvent {
            at: self.started.elapsed(),
            kind,
            call,
            text: crate::json::truncate_chars(&text, EVENT_CHARS),
        });
    }

    /// Whether the front's observer takes `event` at all.
    fn passes(&self, event: &Event) -> bool {
        self.inner.wants_events()
            || (self.inner.wants_approvals()
                && matches!(
                    event,
                    Event::ApprovalRequested(_) | Event::ApprovalResolved(_)
                ))
    }
}

impl Observer for Recording<'_> {
    fn on_event(&self, event: Event) -> BoxFuture<'_, ()> {
        self.inner.on_event(event)
    }

    fn try_event(&self, event: Event) -> Option<Event> {
        self.note(&event);
        if self.passes(&event) {
            self.inner.try_event(event)
        } else {
            None
        }
    }

    fn finishing(&self) {
        self.inner.finishing();
    }
}

/// An event as one line: its kind, its call, and what happened.
fn summary(event: &Event) -> (&'static str, Option<usize>, String) {
    match event {
        Event::CallReceived {
            index,
            id,
            name,
            arguments,
        } => (
            "received",
            Some(*index),
            format!(
                "{name} (id {id}) with {}",
                crate::json::preview(arguments, EVENT_CHARS)
            ),
        ),
        Event::ToolPre {
            index,
            attempt,
            tool,
            ..
        } => ("pre", Some(*index), format!("{tool}: attempt {attempt}")),
        Event::GateDecision {
            index,
            tool,
            record,
            ..
        } => (
            "gate",
            Some(*index),
            format!(
                "{tool}: {} said {:?}: {}",
                record.source, record.decision, record.reason
            ),
        ),
        Event::ToolPost {
            index,
            attempt,
            tool,
            error_class,
            duration,
            cached,
            preview,
            ..
        } => (
            "post",
            Some(*index),
            format!(
                "{tool}: attempt {attempt} {} in {:.1} ms{}: {preview}",
                error_class.name(),
                duration.as_secs_f64() * 1000.0,
                if *cached { " (cached)" } else { "" }
            ),
        ),
        Event::RetryScheduled {
            index,
            attempt,
            tool,
            delay,
            reason,
            ..
        } => (
            "retry",
            Some(*index),
            format!(
                "{tool}: attempt {attempt} in {:.0} ms: {reason}",
                delay.as_secs_f64() * 1000.0
            ),
        ),
        Event::LoopDetected {
            index,
            tool,
            stop,
            pattern,
            repeats,
            ..
        } => (
            "loop",
            Some(*index),
            format!(
                "{tool}: {} after {repeats} repeats of {pattern}",
                if *stop { "stopped" } else { "warned" }
            ),
        ),
        Event::Progress {
            index,
            tool,
            progress,
            total,
            message,
            ..
        } => (
            "progress",
            Some(*index),
            match total {
                Some(total) => format!("{tool}: {progress}/{total} {message}"),
                None => format!("{tool}: {progress} {message}"),
            },
        ),
        Event::ApprovalRequested(approval) => (
            "approval",
            Some(approval.index),
            format!(
                "{}: asked by {}: {}",
                approval.tool, approval.source, approval.reason
            ),
        ),
        Event::ApprovalResolved(ended) => (
            "approval",
            Some(ended.index),
            format!(
                "{}: {} by {}{}",
                ended.tool,
                match ended.approved {
                    Some(true) => "approved",
                    Some(false) => "denied",
                    None => ended.how.name(),
                },
                if ended.by.is_empty() {
                    "nobody"
                } else {
                    &ended.by
                },
                if ended.reason.is_empty() {
                    String::new()
                } else {
                    format!(": {}", ended.reason)
                }
            ),
        ),
        Event::BreakerChanged { tool, from, to, .. } => {
            ("breaker", None, format!("{tool}: {from:?} → {to:?}"))
        }
    }
}
