//! What a batch leaves in its session: memory of successful calls only, and no scratch
//! directory once a batch is gone, even when it was dropped mid-call.

use super::*;

#[tokio::test(start_paused = true)]
async fn memory_keeps_successful_calls_only() {
    let h = harness("memory", "", vec![], None);
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
    let h = harness("drop", "", vec![], None);
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
