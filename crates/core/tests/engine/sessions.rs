//! What a batch leaves in its session: memory of successful calls only, and no scratch
//! directory once a batch is gone, even when it was dropped mid-call.

use super::*;

#[tokio::test(start_paused = true)]
async fn memory_keeps_successful_calls_only() {
    let h = harness("memory", defaults, vec![], None);
    run(&h, named_batch("m", json!([{"id": "a", "name": "echo", "arguments": {"k": "v"}}, {"id": "b", "name": "plain_fail"}]))).await;
    let memory = h
        .dispatcher
        .sessions()
        .get("default", "m")
        .unwrap()
        .memory();
    assert_eq!(memory, [r#"tool=echo; input={"k":"v"}; result={"k":"v"}"#]);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_batch_still_removes_its_ephemeral_scratch_directory() {
    let h = harness("drop", defaults, vec![], None);
    let cancel = Cancel::new();
    let run = h.dispatcher.run(
        batch(json!([{"id": "w", "name": "write_then_hang"}])),
        &NoObserver,
        &cancel,
    );
    let outcome = tokio::time::timeout(Duration::from_secs(1), run).await;
    assert!(outcome.is_err(), "the tool hangs");
    let leftovers: Vec<_> = std::fs::read_dir(&h.base)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(
        leftovers.is_empty(),
        "scratch directories left behind: {leftovers:?}"
    );
    let _ = std::fs::remove_dir_all(&h.base);
}

/// A shared store whose saves wait for `release`; counts the saves begun and finished.
#[derive(Default)]
struct GatedStore {
    release: tokio::sync::Notify,
    begun: AtomicU32,
    saved: AtomicU32,
}

impl toolgate_core::tools::ScratchStore for GatedStore {
    fn write<'a>(
        &'a self,
        _owner: &'a toolgate_core::tools::SharedScratch,
        _path: &'a str,
        _content: &'a str,
    ) -> BoxFuture<'a, Result<(), toolgate_core::tools::FileError>> {
        Box::pin(async { Err(toolgate_core::tools::FileError::NotFound) })
    }

    fn read<'a>(
        &'a self,
        _owner: &'a toolgate_core::tools::SharedScratch,
        _path: &'a str,
    ) -> BoxFuture<'a, Result<String, toolgate_core::tools::FileError>> {
        Box::pin(async { Err(toolgate_core::tools::FileError::NotFound) })
    }

    fn list<'a>(
        &'a self,
        _owner: &'a toolgate_core::tools::SharedScratch,
        _dir: &'a str,
        _max: usize,
    ) -> BoxFuture<'a, Result<Vec<toolgate_core::tools::Entry>, toolgate_core::tools::FileError>>
    {
        Box::pin(async { Ok(Vec::new()) })
    }
}

impl toolgate_core::session::SessionStore for GatedStore {
    fn load<'a>(
        &'a self,
        _tenant: &'a str,
        _id: &'a str,
    ) -> BoxFuture<'a, Result<toolgate_core::session::Loaded, toolgate_core::session::StoreError>>
    {
        Box::pin(async {
            Ok(toolgate_core::session::Loaded {
                window: Vec::new(),
                generation: "g".into(),
            })
        })
    }

    fn save<'a>(
        &'a self,
        _tenant: &'a str,
        _id: &'a str,
        _changes: toolgate_core::session::Changes,
    ) -> BoxFuture<'a, Result<bool, toolgate_core::session::StoreError>> {
        self.begun.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            self.release.notified().await;
            self.saved.fetch_add(1, Ordering::SeqCst);
            Ok(true)
        })
    }

    fn memory<'a>(
        &'a self,
        _tenant: &'a str,
        _id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<String>>, toolgate_core::session::StoreError>> {
        Box::pin(async { Ok(None) })
    }

    fn end<'a>(
        &'a self,
        _tenant: &'a str,
        _id: &'a str,
    ) -> BoxFuture<'a, Result<bool, toolgate_core::session::StoreError>> {
        Box::pin(async { Ok(false) })
    }

    fn reachable(&self) -> bool {
        true
    }

    fn probe(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_dropped_while_its_session_saves_still_saves_and_no_event_follows_finishing() {
    let h = harness("gated", defaults, vec![], None);
    let store = Arc::new(GatedStore::default());
    let dispatcher = h.dispatcher.with_store(store.clone());
    let recorder = Recorder::default();
    let cancel = Cancel::new();
    let run = dispatcher.run(
        named_batch(
            "s",
            json!([{"id": "a", "name": "echo", "arguments": {"k": "v"}}]),
        ),
        &recorder,
        &cancel,
    );
    // The call finishes and the save starts; the batch's future is dropped while it waits.
    let outcome = tokio::time::timeout(Duration::from_millis(100), run).await;
    assert!(outcome.is_err(), "the save is held");
    let events = recorder.events.lock().unwrap().len();
    assert!(events > 0);
    assert_eq!(*recorder.finishing_after.lock().unwrap(), Some(events));
    assert_eq!(store.saved.load(Ordering::SeqCst), 0);
    // The save goes on in the background and lands once the store answers.
    store.release.notify_one();
    dispatcher.finish_saves(Duration::from_secs(1)).await;
    assert_eq!(store.saved.load(Ordering::SeqCst), 1);
    // Once: the drop of the batch's future hands its save on, and does not save again.
    assert_eq!(store.begun.load(Ordering::SeqCst), 1);
}
