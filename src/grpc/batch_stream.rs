//! The `DispatchBatch` response stream: the batch runs inside the stream, driven by the transport
//! reading it, so the events a batch produces together leave in one write. A client that stops
//! reading would hold its batch forever (the transport stops polling a stream it cannot send on),
//! so a watchdog cancels batches whose stream has waited on the client past `stall_timeout`.
//! Invariant: the final result is the last item, after every event the batch emitted.

use std::any::Any;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use parking_lot::Mutex;
use tonic::Status;

use super::stall::{Signal, StallWatch, Stalling};
use super::status::RequestError;
use toolgate_proto::pb;

/// What the stream yields.
pub(super) type Item = Result<pb::DispatchEvent, Status>;

/// The running batch: it pushes events into its `Events` and ends with the final result event
/// (or the status that ends the stream instead).
pub(super) type Run = Pin<Box<dyn Future<Output = Item> + Send>>;

/// The events a running batch produced that its stream has not yielded yet, at most `capacity`:
/// a batch that fills the queue waits in `push` until the stream has yielded some.
///
/// A waiting push keeps its waker and `pop` wakes it once there is room: the push may sit in a
/// combinator (each call of a batch is a child of a `FuturesUnordered`, which polls again only
/// the children whose own waker fired), so the stream polling the batch again is not enough.
/// (A channel would do the same with a semaphore and atomic hand-offs per event; here the batch
/// and the stream share a task and a lock taken per event. BENCHMARKS.md §18 has the cost.)
#[derive(Debug)]
pub(super) struct Events {
    queue: Mutex<Queue>,
    capacity: usize,
    /// The batch's calls are done (`Observer::finishing`): what is queued waits for the result,
    /// so the events and the result leave in one write rather than two.
    held: AtomicBool,
}

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Item>,
    /// Pushes waiting for room, one waker each (at most one per call of the batch).
    waiting: Vec<Waker>,
}

impl Events {
    /// An empty queue holding at most `capacity` events (at least one).
    pub(super) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Events {
            queue: Mutex::new(Queue::default()),
            capacity: capacity.max(1),
            held: AtomicBool::new(false),
        })
    }

    /// Keeps what is queued for the batch's result (see `held`).
    pub(super) fn hold(&self) {
        self.held.store(true, Ordering::Relaxed);
    }

    /// Queues `item`, waiting while the queue is full.
    pub(super) async fn push(&self, item: Item) {
        let mut item = Some(item);
        std::future::poll_fn(|cx| {
            let mut queue = self.queue.lock();
            if queue.items.len() >= self.capacity {
                if !queue.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                    queue.waiting.push(cx.waker().clone());
                }
                return Poll::Pending;
            }
            queue.items.extend(item.take());
            Poll::Ready(())
        })
        .await;
    }

    /// Queues `item` made from `event` if there is room now; hands `event` back if not.
    pub(super) fn try_push<E>(&self, event: E, make: impl FnOnce(E) -> Item) -> Result<(), E> {
        let mut queue = self.queue.lock();
        if queue.items.len() >= self.capacity {
            return Err(event);
        }
        queue.items.push_back(make(event));
        Ok(())
    }

    /// Drops every queued event (the stream's client stopped reading); how many.
    fn clear(&self) -> usize {
        let mut queue = self.queue.lock();
        let cleared = queue.items.len();
        queue.items = VecDeque::new();
        let waiting = std::mem::take(&mut queue.waiting);
        drop(queue);
        for waker in waiting {
            waker.wake();
        }
        cleared
    }

    /// The oldest event; taking one makes room, so every waiting push is woken.
    fn pop(&self) -> Option<Item> {
        let mut queue = self.queue.lock();
        let item = queue.items.pop_front()?;
        let waiting = std::mem::take(&mut queue.waiting);
        drop(queue);
        for waker in waiting {
            waker.wake();
        }
        Some(item)
    }
}

/// Events of a running batch, then its result.
///
/// Running the batch on a task of its own and forwarding events through a channel cost a
/// cross-thread wake-up per event and a write per event; here the task that writes the response
/// also runs the batch. Dropping the stream (the client left) drops the batch, whose drop guard
/// cancels it, so tools see their tokens fire.
pub(super) struct BatchStream {
    /// An item taken before the response was handed to the transport (`first_item`).
    first: Option<Option<Item>>,
    shared: Arc<Shared>,
    /// Wakes the transport's task through `shared.signal`, noting that a poll is owed.
    waker: Waker,
    events: Arc<Events>,
    /// Where the watchdog keeps this stream (and its timeout), left when the stream is dropped.
    watch: Arc<StallWatch>,
    slot: usize,
}

/// The part of a stream the watchdog reaches.
struct Shared {
    /// The running batch; `None` once it finished or the watchdog dropped it.
    run: Mutex<Option<Run>>,
    /// The final result, held back until every event has been yielded; the watchdog drops it
    /// for a client that stopped reading.
    result: Mutex<Option<Item>>,
    /// The events not yet yielded (the watchdog empties the queue too).
    events: Arc<Events>,
    signal: Arc<Signal>,
    /// The watchdog cancelled the batch.
    stalled: AtomicBool,
}

impl BatchStream {
    /// A stream over `run`, which pushes its events into `events`.
    pub(super) fn new(run: Run, events: Arc<Events>, watch: &Arc<StallWatch>) -> Self {
        let signal = Signal::new(watch);
        let shared = Arc::new(Shared {
            run: Mutex::new(Some(run)),
            result: Mutex::new(None),
            events: events.clone(),
            signal: signal.clone(),
            stalled: AtomicBool::new(false),
        });
        let watched: Arc<dyn Stalling> = shared.clone();
        let slot = watch.enter(Arc::downgrade(&watched));
        BatchStream {
            first: None,
            shared,
            waker: Waker::from(signal),
            events,
            watch: watch.clone(),
            slot,
        }
    }

    /// Runs the batch until the stream has an item to yield (an event, or the result), and
    /// keeps it for the first `poll_next`: the handler awaits this so that the response's
    /// headers and first item leave together (with a named session on a shared store, the
    /// load comes first, and the headers otherwise took a write of their own).
    pub(super) async fn first_item(&mut self) {
        if self.first.is_some() {
            return;
        }
        let item = std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await;
        self.first = Some(item);
    }

    fn next_item(&mut self) -> Poll<Option<Item>> {
        // Events already queued go first, in order (unless held for the result, below).
        if !self.events.held.load(Ordering::Relaxed)
            && let Some(event) = self.events.pop()
        {
            return Poll::Ready(Some(event));
        }
        // Nothing queued: let the batch work until it waits (for a tool, or for room in the
        // queue, which the items yielded above made).
        let running = {
            let mut run = self.shared.run.lock();
            let mut cx = Context::from_waker(&self.waker);
            if let Some(batch) = run.as_mut()
                && let Poll::Ready(result) = batch.as_mut().poll(&mut cx)
            {
                // The finished batch pushes nothing more: the queue ends with what it holds.
                *run = None;
                *self.shared.result.lock() = Some(result);
            }
            run.is_some()
        };
        if running && self.events.held.load(Ordering::Relaxed) {
            return Poll::Pending;
        }
        if let Some(event) = self.events.pop() {
            return Poll::Ready(Some(event));
        }
        if running {
            return Poll::Pending;
        }
        if let Some(result) = self.shared.result.lock().take() {
            return Poll::Ready(Some(result));
        }
        if self.shared.stalled.swap(false, Ordering::Relaxed) {
            let error = RequestError::Stalled(self.watch.timeout());
            return Poll::Ready(Some(Err(error.into())));
        }
        Poll::Ready(None)
    }
}

impl Drop for BatchStream {
    fn drop(&mut self) {
        // Leaving at once frees the stream's shared part now: forgotten only at the next sweep,
        // a second's worth of finished streams stayed allocated (tens of thousands under load).
        self.watch.leave(self.slot);
    }
}

impl Stream for BatchStream {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(first);
        }
        self.shared.signal.polled(cx.waker());
        let item = self.next_item();
        if let Poll::Ready(Some(_)) = item {
            self.shared.signal.owe();
        }
        item
    }
}

impl Stalling for Shared {
    fn signal(&self) -> &Signal {
        &self.signal
    }

    fn give_up(&self) -> Option<Box<dyn Any + Send>> {
        // Locked only while the transport polls it, and then it is not stalled.
        let mut run = self.run.try_lock()?;
        // Everything held for the client goes: the batch (which gives its capacity back), the
        // events it queued and its result, if it finished.
        let batch = run.take();
        let result = self.result.lock().take();
        let queued = self.events.clear();
        if batch.is_none() && result.is_none() && queued == 0 {
            return None;
        }
        self.stalled.store(true, Ordering::Relaxed);
        Some(Box::new(batch))
    }

    fn kind(&self) -> &'static str {
        "batches"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    use futures::StreamExt;

    use super::*;

    fn event(id: &str) -> pb::DispatchEvent {
        pb::DispatchEvent {
            event: Some(pb::dispatch_event::Event::ToolPre(pb::ToolPre {
                id: id.to_owned(),
                ..Default::default()
            })),
        }
    }

    fn id_of(item: &Item) -> String {
        match &item.as_ref().unwrap().event {
            Some(pb::dispatch_event::Event::ToolPre(pre)) => pre.id.clone(),
            other => format!("{other:?}"),
        }
    }

    fn watch() -> Arc<StallWatch> {
        StallWatch::new(Duration::from_secs(30))
    }

    #[tokio::test]
    async fn events_come_in_order_and_the_result_last_even_past_the_buffer() {
        // With and without the batch yielding between events: without, it fills the queue
        // within one poll and waits for the stream to drain it.
        for yielding in [true, false] {
            let events = Events::new(2);
            let tx = events.clone();
            let run: Run = Box::pin(async move {
                for i in 0..5 {
                    tx.push(Ok(event(&i.to_string()))).await;
                    if yielding {
                        tokio::task::yield_now().await;
                    }
                }
                Ok(event("result"))
            });
            let ids: Vec<String> = BatchStream::new(run, events, &watch())
                .map(|item| id_of(&item))
                .collect()
                .await;
            assert_eq!(ids, ["0", "1", "2", "3", "4", "result"], "{yielding}");
        }
    }

    #[tokio::test]
    async fn pushes_from_concurrent_children_past_the_capacity_all_arrive() {
        // The shape of a batch: each call is a child of a FuturesUnordered, which polls again
        // only the children whose own waker fired. A push waiting for room must be woken.
        let events = Events::new(2);
        let tx = events.clone();
        let run: Run = Box::pin(async move {
            let mut calls: futures::stream::FuturesUnordered<_> = (0..10)
                .map(|call| {
                    let tx = tx.clone();
                    async move {
                        for step in 0..3 {
                            tx.push(Ok(event(&format!("{call}.{step}")))).await;
                        }
                    }
                })
                .collect();
            while calls.next().await.is_some() {}
            Ok(event("result"))
        });
        let ids: Vec<String> = tokio::time::timeout(
            Duration::from_secs(10),
            BatchStream::new(run, events, &watch())
                .map(|item| id_of(&item))
                .collect(),
        )
        .await
        .expect("every push was woken");
        assert_eq!(ids.len(), 31);
        assert_eq!(ids.last().map(String::as_str), Some("result"));
        for call in 0..10 {
            let steps: Vec<&String> = ids
                .iter()
                .filter(|id| id.starts_with(&format!("{call}.")))
                .collect();
            assert_eq!(
                steps,
                [
                    &format!("{call}.0"),
                    &format!("{call}.1"),
                    &format!("{call}.2")
                ]
            );
        }
    }

    #[tokio::test]
    async fn a_full_queue_holds_the_batch_until_the_stream_takes_events() {
        let events = Events::new(1);
        let tx = events.clone();
        let pushed = Arc::new(AtomicU64::new(0));
        let counted = pushed.clone();
        let run: Run = Box::pin(async move {
            for i in 0..3 {
                tx.push(Ok(event(&i.to_string()))).await;
                counted.fetch_add(1, Ordering::Relaxed);
            }
            Ok(event("result"))
        });
        let mut stream = BatchStream::new(run, events, &watch());
        assert_eq!(id_of(&stream.next().await.unwrap()), "0");
        // The first event taken, the second push still waits for room.
        assert_eq!(pushed.load(Ordering::Relaxed), 1);
        assert_eq!(id_of(&stream.next().await.unwrap()), "1");
        assert_eq!(id_of(&stream.next().await.unwrap()), "2");
        assert_eq!(id_of(&stream.next().await.unwrap()), "result");
        assert!(stream.next().await.is_none());
    }

    #[tokio::test]
    async fn try_push_takes_an_event_only_while_there_is_room() {
        let events = Events::new(1);
        assert!(events.try_push("a", |id| Ok(event(id))).is_ok());
        assert_eq!(events.try_push("b", |id| Ok(event(id))), Err("b"));
        assert_eq!(id_of(&events.pop().unwrap()), "a");
        assert!(events.try_push("b", |id| Ok(event(id))).is_ok());
        assert_eq!(id_of(&events.pop().unwrap()), "b");
        assert!(events.pop().is_none());
    }

    /// A batch future that reports when it is dropped.
    fn pending_run() -> (Run, tokio::sync::oneshot::Receiver<()>) {
        let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
        let run: Run = Box::pin(async move {
            let _dropped = dropped_tx;
            std::future::pending::<()>().await;
            Ok(event("never"))
        });
        (run, dropped_rx)
    }

    #[tokio::test]
    async fn dropping_the_stream_drops_the_batch() {
        let (run, dropped) = pending_run();
        let mut stream = BatchStream::new(run, Events::new(1), &watch());
        let polled = futures::poll!(stream.next());
        assert!(polled.is_pending());
        drop(stream);
        assert!(dropped.await.is_err(), "the batch future was dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_the_client_stopped_reading_has_its_batch_dropped_after_the_timeout() {
        let watch = StallWatch::new(Duration::from_secs(30));
        let events = Events::new(4);
        events.push(Ok(event("first"))).await;
        let (run, mut dropped) = pending_run();
        let mut stream = BatchStream::new(run, events, &watch);
        // The transport takes one item, then stops asking (the client's window is full).
        assert_eq!(id_of(&stream.next().await.unwrap()), "first");
        tokio::time::advance(Duration::from_secs(29)).await;
        assert_eq!(watch.sweep(), 0, "not yet");
        assert!(dropped.try_recv().is_err());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(watch.sweep(), 1);
        assert!(
            dropped.await.is_err(),
            "the batch was dropped without the stream"
        );
        // A transport that comes back reads the error, then the end.
        let status = stream.next().await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert!(stream.next().await.is_none());
        drop(stream);
        watch.sweep();
        assert_eq!(watch.watched(), 0, "a dropped stream leaves");
    }

    #[tokio::test]
    async fn a_dropped_stream_leaves_the_watch_at_once_and_its_slot_is_reused() {
        let watch = watch();
        let first = BatchStream::new(pending_run().0, Events::new(1), &watch);
        let second = BatchStream::new(pending_run().0, Events::new(1), &watch);
        assert_eq!(watch.watched(), 2);
        let slot = first.slot;
        drop(first);
        // No sweep ran: the stream's shared part is gone already.
        assert_eq!(watch.watched(), 1);
        let third = BatchStream::new(pending_run().0, Events::new(1), &watch);
        assert_eq!(third.slot, slot, "the freed slot is reused");
        drop((second, third));
        assert_eq!(watch.watched(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_waiting_on_its_tool_is_not_stalled() {
        let watch = StallWatch::new(Duration::from_secs(30));
        let (run, mut dropped) = pending_run();
        let mut stream = BatchStream::new(run, Events::new(4), &watch);
        assert!(futures::poll!(stream.next()).is_pending());
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(watch.sweep(), 0);
        assert!(dropped.try_recv().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_woken_but_never_polled_again_is_stalled() {
        // The transport holds an item it cannot send, so it never polls again, even when the
        // batch wakes it because its tool finished.
        let watch = StallWatch::new(Duration::from_secs(30));
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
        let run: Run = Box::pin(async move {
            let _dropped = dropped_tx;
            let _ = done_rx.await;
            std::future::pending::<()>().await;
            Ok(event("never"))
        });
        let mut stream = BatchStream::new(run, Events::new(4), &watch);
        assert!(futures::poll!(stream.next()).is_pending());
        done_tx.send(()).unwrap();
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(watch.sweep(), 1);
        assert!(dropped_rx.await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_the_transport_never_polls_is_stalled_too() {
        let watch = StallWatch::new(Duration::from_secs(30));
        let (run, dropped) = pending_run();
        let _stream = BatchStream::new(run, Events::new(4), &watch);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(watch.sweep(), 1);
        assert!(dropped.await.is_err());
    }
}
