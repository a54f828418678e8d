//! The watchdog over response streams whose clients stopped reading. The transport stops polling
//! a stream it cannot send on, so such a stream would hold what it produces (a running batch, an
//! approvals watcher's place and the updates it has not sent) for as long as the connection
//! lives. Each stream notes since when it is owed a poll (`Signal`); the watchdog has one that
//! waited past `stall_timeout` give up what it holds (`Stalling::give_up`).

use std::any::Any;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures::Stream;
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::status::RequestError;
use slab::Slab;

/// Whether a stream is owed a poll: since it handed the transport an item (the transport asks
/// for the next one at once unless the client's window is full) or since what it waits on woke
/// it. A transport that cannot send (a client that stopped reading) never polls again.
pub(super) struct Signal {
    /// Milliseconds after `epoch` (at least 1) since when a poll is owed; 0 while none is.
    owed_since: AtomicU64,
    epoch: Instant,
    /// The transport task's waker.
    task: AtomicWaker,
}

impl Signal {
    /// A signal on `watch`'s clock, owed its first poll: a transport that never polls a new
    /// stream at all (one that waits for window before asking for data) is a stall too.
    pub(super) fn new(watch: &StallWatch) -> Arc<Self> {
        let signal = Arc::new(Signal {
            owed_since: AtomicU64::new(0),
            epoch: watch.epoch,
            task: AtomicWaker::new(),
        });
        signal.owe();
        signal
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// A poll is owed from now (unless it already was).
    pub(super) fn owe(&self) {
        // Already owed: keep the earlier time, and skip the clock.
        if self.owed_since.load(Ordering::Relaxed) != 0 {
            return;
        }
        let _ = self.owed_since.compare_exchange(
            0,
            self.now_ms(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// The transport polls: what it owed is paid, and `waker` is the one to wake next.
    pub(super) fn polled(&self, waker: &Waker) {
        self.task.register(waker);
        self.owed_since.store(0, Ordering::Relaxed);
    }

    fn owed_since(&self) -> u64 {
        self.owed_since.load(Ordering::Relaxed)
    }
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.owe();
        self.task.wake();
    }
}

/// A stream the watchdog keeps an eye on.
pub(super) trait Stalling: Send + Sync {
    fn signal(&self) -> &Signal;
    /// Lets go of what the stream holds for its client and marks it stalled (its next poll, if
    /// any, ends it with `RequestError::Stalled`). Answers what to drop once the watchdog's
    /// lock is released (dropping a batch cancels it), or `None` when it held nothing (it is
    /// then not counted) or is being polled right now (then it is not stalled).
    fn give_up(&self) -> Option<Box<dyn Any + Send>>;
    /// What it is, for the log: `batches`, `watches`.
    fn kind(&self) -> &'static str;
}

/// The watchdog over every open stream.
pub struct StallWatch {
    timeout: Duration,
    epoch: Instant,
    /// The open streams, one slot each (a stream empties its slot when it is dropped).
    streams: Mutex<Slab<Weak<dyn Stalling>>>,
}

impl StallWatch {
    pub fn new(timeout: Duration) -> Arc<Self> {
        Arc::new(StallWatch {
            timeout,
            epoch: Instant::now(),
            streams: Mutex::new(Slab::new()),
        })
    }

    /// How long a stream may wait on its client.
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Watches `stream`; answers its slot, for `leave`.
    pub(super) fn enter(&self, stream: Weak<dyn Stalling>) -> usize {
        self.streams.lock().insert(stream)
    }

    /// Stops watching the stream in `slot` (dropped).
    pub(super) fn leave(&self, slot: usize) {
        self.streams.lock().try_remove(slot);
    }

    /// Checks the streams every quarter of the timeout (at most every second) until dropped
    /// by its task's abort.
    pub async fn run(self: Arc<Self>) {
        let period = (self.timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            self.sweep();
        }
    }

    /// Has the streams that waited on their client past the timeout give up what they hold;
    /// answers how many did.
    pub fn sweep(&self) -> usize {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let limit = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        let mut dropped: Vec<(&'static str, Box<dyn Any + Send>)> = Vec::new();
        let streams = self.streams.lock();
        for (_, weak) in streams.iter() {
            // A stream empties its slot before its shared part goes, so this holds only while
            // the stream lives; skipped, not assumed.
            let Some(stream) = weak.upgrade() else {
                continue;
            };
            let since = stream.signal().owed_since();
            if since != 0
                && now.saturating_sub(since) >= limit
                && let Some(held) = stream.give_up()
            {
                dropped.push((stream.kind(), held));
            }
        }
        drop(streams);
        let ended = dropped.len();
        for kind in ["batches", "watches"] {
            let streams = dropped.iter().filter(|(k, _)| *k == kind).count();
            if streams > 0 {
                tracing::warn!(
                    kind,
                    streams,
                    timeout_ms = limit,
                    "ended streams whose clients stopped reading"
                );
            }
        }
        // Dropped outside the lock: a batch's drop releases its capacity and fires its cancel,
        // so its tools see their tokens fire; a watch's frees its place.
        drop(dropped);
        ended
    }

    /// How many streams are watched.
    #[cfg(test)]
    pub(super) fn watched(&self) -> usize {
        self.streams.lock().len()
    }
}

/// Any response stream, watched: a client that stops reading it past the timeout has it
/// dropped (whatever it holds goes with it) and, if the transport ever polls again, ended with
/// `error` (`Stalled`'s counterpart for its RPC).
pub(super) struct Watched<S> {
    shared: Arc<WatchedShared<S>>,
    waker: Waker,
    watch: Arc<StallWatch>,
    slot: usize,
}

struct WatchedShared<S> {
    inner: Mutex<Option<Pin<Box<S>>>>,
    signal: Arc<Signal>,
    stalled: AtomicBool,
    kind: &'static str,
}

impl<S, T> Watched<S>
where
    S: Stream<Item = Result<T, tonic::Status>> + Send + 'static,
    T: Send + 'static,
{
    /// `stream`, watched by `watch`; `kind` names it in the log.
    pub(super) fn new(stream: S, watch: &Arc<StallWatch>, kind: &'static str) -> Self {
        let signal = Signal::new(watch);
        let shared = Arc::new(WatchedShared {
            inner: Mutex::new(Some(Box::pin(stream))),
            signal: signal.clone(),
            stalled: AtomicBool::new(false),
            kind,
        });
        let watched: Arc<dyn Stalling> = shared.clone();
        let slot = watch.enter(Arc::downgrade(&watched));
        Watched {
            shared,
            waker: Waker::from(signal),
            watch: watch.clone(),
            slot,
        }
    }
}

impl<S: Send + 'static> Stalling for WatchedShared<S> {
    fn signal(&self) -> &Signal {
        &self.signal
    }

    fn give_up(&self) -> Option<Box<dyn Any + Send>> {
        // Locked only while the transport polls it, and then it is not stalled.
        let stream = self.inner.try_lock()?.take()?;
        self.stalled.store(true, Ordering::Relaxed);
        Some(Box::new(stream))
    }

    fn kind(&self) -> &'static str {
        self.kind
    }
}

impl<S> Drop for Watched<S> {
    fn drop(&mut self) {
        self.watch.leave(self.slot);
    }
}

impl<S, T> Stream for Watched<S>
where
    S: Stream<Item = Result<T, tonic::Status>> + Send + 'static,
{
    type Item = Result<T, tonic::Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.shared.signal.polled(cx.waker());
        let mut inner = this.shared.inner.lock();
        let Some(stream) = inner.as_mut() else {
            let stalled = this.shared.stalled.swap(false, Ordering::Relaxed);
            let error = RequestError::WatchStalled(this.watch.timeout());
            return Poll::Ready(stalled.then(|| Err(error.into())));
        };
        // Polled with the signal's waker: what the stream waits on waking it owes a poll.
        let item = stream
            .as_mut()
            .poll_next(&mut Context::from_waker(&this.waker));
        match &item {
            Poll::Ready(Some(_)) => this.shared.signal.owe(),
            Poll::Ready(None) => *inner = None,
            Poll::Pending => {}
        }
        item
    }
}
