//! Event order for the plain cases, and results keeping the model's ids and order.

use super::*;

#[tokio::test(start_paused = true)]
async fn event_order_for_a_success() {
    let h = harness(
        "order-success",
        defaults,
        vec![Arc::new(BlockTool("none"))],
        None,
    );
    let (report, kinds) = run(&h, batch(json!([{"id": "a", "name": "echo"}]))).await;
    assert!(report.all_succeeded());
    assert_eq!(
        kinds,
        ["received:a", "pre:a:1", "gate:a:allow", "post:a:1:NONE"]
    );
}

#[tokio::test(start_paused = true)]
async fn event_order_for_a_block() {
    let h = harness(
        "order-block",
        defaults,
        vec![Arc::new(BlockTool("echo"))],
        None,
    );
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
    let h = harness("ids", defaults, vec![], None);
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

#[tokio::test]
async fn a_registered_tool_runs_under_its_own_name_whatever_a_binding_says() {
    // A binding checked against an older registry (a remote added `echo` since) does not
    // send the model's `echo` call to `now`.
    let h = harness("shadowed", defaults, vec![], None);
    let mut shadowing = batch(json!([{"id": "a", "name": "echo", "arguments": {"x": 1}}]));
    shadowing.bindings.insert(
        "echo".into(),
        Binding {
            tool: "now".into(),
            input: None,
        },
    );
    let (report, _) = run(&h, shadowing).await;
    let r = &report.results[0];
    assert_eq!(
        (r.name.as_str(), r.tool.as_str()),
        ("echo", "echo"),
        "{r:?}"
    );
}

#[test]
fn a_binding_named_after_a_registered_tool_is_refused() {
    let h = harness("shadow-check", defaults, vec![], None);
    // `now → now` maps only its input, and `clock` is no tool's name: both are fine.
    let bindings = [("echo", "now"), ("now", "now"), ("clock", "now")]
        .into_iter()
        .map(|(name, tool)| {
            (
                name.to_owned(),
                Binding {
                    tool: tool.into(),
                    input: None,
                },
            )
        })
        .collect();
    let problems = h.dispatcher.check_bindings(&bindings).unwrap_err();
    assert_eq!(
        problems.0,
        [
            "binding 'echo': 'echo' is a registered tool's name, which a binding to another tool ('now') may not shadow"
        ]
    );
}
