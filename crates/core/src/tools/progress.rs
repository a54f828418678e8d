//! Progress reports from a running tool to the batch's observer, through a bounded queue.
//! Invariant: a sink holds at most `PROGRESS_QUEUE` reports of at most `max_message_chars`
//! characters each, whatever a remote sends; reports past the bound are dropped and counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

/// Reports queued for one execution before more are dropped. A remote that notifies faster than
/// the client reads its stream loses reports, never the server's memory.
pub const PROGRESS_QUEUE: usize = 64;

/// A progress report from a running tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: String,
}

/// Where a tool sends progress reports (cheap to clone; every clone feeds the same queue).
#[derive(Debug, Clone)]
pub struct ProgressSink {
    tx: mpsc::Sender<Progress>,
    max_message_chars: usize,
    dropped: Arc<AtomicU64>,
}

/// The observer's end of a `ProgressSink`.
#[derive(Debug)]
pub struct ProgressReceiver {
    rx: mpsc::Receiver<Progress>,
    dropped: Arc<AtomicU64>,
}

impl ProgressSink {
    /// A sink whose messages are cut to `max_message_chars`, and its receiver.
    pub fn channel(max_message_chars: usize) -> (ProgressSink, ProgressReceiver) {
        let (tx, rx) = mpsc::channel(PROGRESS_QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let sink = ProgressSink {
            tx,
            max_message_chars,
            dropped: dropped.clone(),
        };
        (sink, ProgressReceiver { rx, dropped })
    }

    /// Queues a report, its message cut to the sink's bound; with the queue full (or its
    /// receiver gone) the report is dropped and counted. Never waits.
    pub fn report(&self, progress: f64, total: Option<f64>, message: &str) {
        let report = Progress {
            progress,
            total,
            message: crate::json::truncate_chars(message, self.max_message_chars),
        };
        if self.tx.try_send(report).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl ProgressReceiver {
    /// The next report; `None` once every sink is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<Progress> {
        self.rx.recv().await
    }

    /// A report already queued, without waiting.
    pub fn try_recv(&mut self) -> Option<Progress> {
        self.rx.try_recv().ok()
    }

    /// Reports dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flood_keeps_the_queue_bound_and_counts_what_it_drops() {
        let (sink, mut rx) = ProgressSink::channel(8);
        let huge = "x".repeat(1 << 20);
        for i in 0..10_000 {
            sink.report(f64::from(i), Some(10_000.0), &huge);
        }
        assert_eq!(rx.dropped(), 10_000 - PROGRESS_QUEUE as u64);
        let mut kept = Vec::new();
        while let Some(report) = rx.try_recv() {
            kept.push(report);
        }
        assert_eq!(kept.len(), PROGRESS_QUEUE);
        // The first reports are kept, in order, each message cut to the bound.
        assert_eq!(kept[0].progress, 0.0);
        assert_eq!(
            kept[PROGRESS_QUEUE - 1].progress,
            (PROGRESS_QUEUE - 1) as f64
        );
        assert!(kept.iter().all(|r| r.message == "xxxxxxxx…"));
        // Once read, the queue takes reports again.
        sink.report(1.0, None, "done");
        assert_eq!(rx.recv().await.map(|r| r.message), Some("done".to_owned()));
    }

    #[tokio::test]
    async fn a_report_after_the_receiver_is_gone_is_dropped_quietly() {
        let (sink, rx) = ProgressSink::channel(8);
        let dropped = rx.dropped.clone();
        drop(rx);
        sink.report(1.0, None, "late");
        assert_eq!(dropped.load(Ordering::Relaxed), 1);
    }
}
