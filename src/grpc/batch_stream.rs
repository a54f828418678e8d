//! The `DispatchBatch` response stream: the batch runs inside the stream, driven by the transport
//! reading it, so the events a batch produces together leave in one write.
//! Invariant: the final result is the last item, after every event the batch emitted.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;
use tonic::Status;

use crate::pb;

/// What the stream yields.
pub type Item = Result<pb::DispatchEvent, Status>;

/// The running batch: it sends events into the channel and ends with the final result event.
pub type Run = Pin<Box<dyn Future<Output = pb::DispatchEvent> + Send>>;

/// Events of a running batch, then its result.
///
/// Running the batch on a task of its own and forwarding events through a channel cost a
/// cross-thread wake-up per event and a write per event; here the task that writes the response
/// also runs the batch. Dropping the stream (the client left) drops the batch, whose drop guard
/// cancels it, so tools see their tokens fire.
pub struct BatchStream {
    /// `None` once the batch has finished.
    run: Option<Run>,
    events: mpsc::Receiver<Item>,
    /// The final result, held back until every event has been yielded.
    result: Option<pb::DispatchEvent>,
}

impl BatchStream {
    /// A stream over `run`, which sends its events on the sender paired with `events`.
    pub fn new(run: Run, events: mpsc::Receiver<Item>) -> Self {
        BatchStream {
            run: Some(run),
            events,
            result: None,
        }
    }
}

impl Stream for BatchStream {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        // Events already queued go first, in order.
        if let Ok(event) = self.events.try_recv() {
            return Poll::Ready(Some(event));
        }
        // Nothing queued: let the batch work until it waits (for a tool, or for room in the
        // channel, which the items yielded above make).
        if let Some(run) = self.run.as_mut()
            && let Poll::Ready(result) = run.as_mut().poll(cx)
        {
            // Dropping the finished batch drops its sender, so the channel ends after the rest.
            self.run = None;
            self.result = Some(result);
        }
        if let Ok(event) = self.events.try_recv() {
            return Poll::Ready(Some(event));
        }
        match self.run {
            Some(_) => Poll::Pending,
            None => Poll::Ready(self.result.take().map(Ok)),
        }
    }
}

#[cfg(test)]
mod tests {
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

    #[tokio::test]
    async fn events_come_in_order_and_the_result_last_even_past_the_buffer() {
        let (tx, rx) = mpsc::channel(2);
        let run: Run = Box::pin(async move {
            for i in 0..5 {
                tx.send(Ok(event(&i.to_string()))).await.unwrap();
                tokio::task::yield_now().await;
            }
            event("result")
        });
        let ids: Vec<String> = BatchStream::new(run, rx)
            .map(|item| id_of(&item))
            .collect()
            .await;
        assert_eq!(ids, ["0", "1", "2", "3", "4", "result"]);
    }

    #[tokio::test]
    async fn dropping_the_stream_drops_the_batch() {
        let (_tx, rx) = mpsc::channel(1);
        let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
        let run: Run = Box::pin(async move {
            let _dropped = dropped_tx;
            std::future::pending::<()>().await;
            event("never")
        });
        let mut stream = BatchStream::new(run, rx);
        let polled = futures::poll!(stream.next());
        assert!(polled.is_pending());
        drop(stream);
        assert!(dropped_rx.await.is_err(), "the batch future was dropped");
    }
}
