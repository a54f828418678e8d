//! What adapters tell the remote manager out of band, through a coalescing queue.
//! Invariant: the queue holds each distinct signal at most once (one per remote and kind),
//! however often a remote sends it, and a remote's tool list is handed out for a refresh at
//! most once per `REFRESH_INTERVAL`: a burst of `tools/list_changed` becomes a refresh at its
//! start and one after it, not one per notification.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The shortest time between two refreshes of one remote's tool list. The first change after a
/// quiet spell is refreshed at once; changes within the interval wait for its end, together.
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// What an adapter tells the remote manager, out of band.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// The remote says its tool list changed (MCP `notifications/tools/list_changed`).
    ListChanged(String),
    /// The remote's connection is gone (a stdio server exited, a worker is unavailable, a config
    /// remote was down at start): reconnect and re-list, with backoff.
    Lost(String),
}

/// Where adapters send signals (cheap to clone; every clone feeds the same queue).
#[derive(Debug, Clone)]
pub struct Signals {
    shared: Arc<Shared>,
}

/// The manager's end: the signals sent since it last looked, each once, list changes spaced
/// by `REFRESH_INTERVAL` per remote.
#[derive(Debug)]
pub(crate) struct Inbox {
    shared: Arc<Shared>,
    /// When each remote's list change was last handed out, within the last interval.
    refreshed: HashMap<String, Instant>,
    /// List changes waiting for their remote's interval to end (when, remote), each remote once.
    held: Vec<(Instant, String)>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Pending signals in the order first sent, without repeats: at most two per remote.
    pending: Mutex<Vec<Signal>>,
    /// Holds a permit while `pending` may have something, so no send is missed.
    ready: Notify,
    closed: AtomicBool,
}

impl Signals {
    /// A queue and its inbox.
    pub(crate) fn channel() -> (Signals, Inbox) {
        let shared = Arc::new(Shared::default());
        let inbox = Inbox {
            shared: shared.clone(),
            refreshed: HashMap::new(),
            held: Vec::new(),
        };
        (Signals { shared }, inbox)
    }

    /// Queues `signal` unless the same one is already waiting. Never waits.
    pub fn send(&self, signal: Signal) {
        {
            let mut pending = self.shared.pending.lock();
            if pending.contains(&signal) {
                return;
            }
            pending.push(signal);
        }
        self.shared.ready.notify_one();
    }

    /// Ends the inbox: `next` answers `None` once the signals already queued are taken (list
    /// changes still held are dropped: nobody is left to refresh).
    pub(crate) fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.ready.notify_one();
    }
}

impl Inbox {
    /// The signals to act on now, oldest first; waits while there is none, and answers `None`
    /// once the queue is closed and nothing is ready.
    pub(crate) async fn next(&mut self) -> Option<Vec<Signal>> {
        loop {
            let ready = self.take(Instant::now());
            if !ready.is_empty() {
                return Some(ready);
            }
            if self.shared.closed.load(Ordering::Acquire) {
                return None;
            }
            match self.held.iter().map(|(at, _)| *at).min() {
                Some(due) => {
                    tokio::select! {
                        () = self.shared.ready.notified() => {}
                        () = tokio::time::sleep_until(due) => {}
                    }
                }
                None => self.shared.ready.notified().await,
            }
        }
    }

    /// What is ready at `now`: held list changes whose interval has ended, then the queued
    /// signals, a list change held instead when its remote was refreshed within the interval.
    fn take(&mut self, now: Instant) -> Vec<Signal> {
        self.refreshed
            .retain(|_, at| now.saturating_duration_since(*at) < REFRESH_INTERVAL);
        let mut ready = Vec::new();
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.held = waiting;
        for (_, name) in due {
            self.refreshed.insert(name.clone(), now);
            ready.push(Signal::ListChanged(name));
        }
        let queued = std::mem::take(&mut *self.shared.pending.lock());
        for signal in queued {
            if ready.contains(&signal) {
                continue;
            }
            let Signal::ListChanged(name) = &signal else {
                ready.push(signal);
                continue;
            };
            if self.held.iter().any(|(_, held)| held == name) {
                continue;
            }
            match self.refreshed.get(name) {
                Some(at) => self.held.push((*at + REFRESH_INTERVAL, name.clone())),
                None => {
                    self.refreshed.insert(name.clone(), now);
                    ready.push(signal);
                }
            }
        }
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn repeats_of_a_waiting_signal_are_one() {
        let (signals, mut inbox) = Signals::channel();
        for _ in 0..10_000 {
            signals.send(Signal::ListChanged("a".into()));
            signals.send(Signal::Lost("b".into()));
            signals.send(Signal::ListChanged("b".into()));
        }
        assert_eq!(
            inbox.next().await,
            Some(vec![
                Signal::ListChanged("a".into()),
                Signal::Lost("b".into()),
                Signal::ListChanged("b".into()),
            ])
        );
        signals.send(Signal::Lost("b".into()));
        signals.close();
        assert_eq!(inbox.next().await, Some(vec![Signal::Lost("b".into())]));
        assert_eq!(inbox.next().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_list_changes_is_refreshed_at_its_start_and_once_after() {
        let (signals, mut inbox) = Signals::channel();
        let start = Instant::now();
        // A remote that notifies 10,000 times over half an interval, a little at a time.
        let burst = tokio::spawn(async move {
            for _ in 0..100 {
                for _ in 0..100 {
                    signals.send(Signal::ListChanged("a".into()));
                }
                tokio::time::sleep(REFRESH_INTERVAL / 200).await;
            }
            signals
        });
        let mut handed_out = Vec::new();
        while handed_out.len() < 2 {
            let batch = inbox.next().await.unwrap();
            assert_eq!(batch, [Signal::ListChanged("a".into())]);
            handed_out.push(Instant::now() - start);
        }
        let signals = burst.await.unwrap();
        signals.close();
        assert_eq!(inbox.next().await, None, "nothing more was held");
        assert_eq!(handed_out, [Duration::ZERO, REFRESH_INTERVAL]);
    }

    #[tokio::test(start_paused = true)]
    async fn another_remote_and_a_lost_connection_are_not_held_back() {
        let (signals, mut inbox) = Signals::channel();
        signals.send(Signal::ListChanged("a".into()));
        assert_eq!(
            inbox.next().await,
            Some(vec![Signal::ListChanged("a".into())])
        );
        let at = Instant::now();
        signals.send(Signal::ListChanged("a".into()));
        signals.send(Signal::ListChanged("b".into()));
        signals.send(Signal::Lost("a".into()));
        assert_eq!(
            inbox.next().await,
            Some(vec![
                Signal::ListChanged("b".into()),
                Signal::Lost("a".into())
            ])
        );
        assert_eq!(Instant::now(), at, "handed out at once");
        assert_eq!(
            inbox.next().await,
            Some(vec![Signal::ListChanged("a".into())])
        );
        assert_eq!(Instant::now() - at, REFRESH_INTERVAL);
    }
}
