//! Event order for the plain cases, and results keeping the model's ids and order.

use super::*;

#[tokio::test(start_paused = true)]
async fn event_order_for_a_success() {
    let h = harness("order-success", "", vec![Arc::new(BlockTool("none"))], None);
    let (report, kinds) = run(&h, batch(json!([{"id": "a", "name": "echo"}]))).await;
    assert!(report.all_succeeded());
    assert_eq!(
        kinds,
        ["received:a", "pre:a:1", "gate:a:allow", "post:a:1:NONE"]
    );
}

#[tokio::test(start_paused = true)]
async fn event_order_for_a_block() {
    let h = harness("order-block", "", vec![Arc::new(BlockTool("echo"))], None);
    let (report, kinds) = run(&h, batch(json!([{"id": "a", "name": "echo"}]))).await;
    let r = &report.results[0];
    assert_eq!(
        (r.error_class, r.error.as_str(), r.attempts),
        (ErrorClass::Blocked, "not today", 0)
    );
    assert_eq!(
        kinds,
        ["received:a", "pre:a:1", "gate:a:block", "post:a:1:BLOCKED"]
    );
}

#[tokio::test]
async fn the_model_id_is_on_every_result_in_order() {
    let h = harness("ids", "", vec![], None);
    let (report, _) = run(&h, batch(json!([{"id": "z", "name": "echo"}, {"id": "y", "name": "nope"}, "junk", {"id": "z", "name": "echo"}]))).await;
    let ids: Vec<(usize, &str)> = report
        .results
        .iter()
        .map(|r| (r.index, r.id.as_str()))
        .collect();
    assert_eq!(ids, [(0, "z"), (1, "y"), (2, "call_2"), (3, "z")]);
    assert_eq!(report.errors(), 3);
    assert_eq!(report.messages.len(), 4);
}
