//! Parallel mode: the planner's promises hold at run time.

use proptest::prelude::*;

use super::*;
use toolgate_core::tools::Tool;

/// Sleeps `ms`; concurrency-safe and keyed as its input says.
struct Keyed;

impl Tool for Keyed {
    fn name(&self) -> &str {
        "keyed"
    }
    fn description(&self) -> &str {
        "test tool"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn is_concurrency_safe(&self, input: &Value) -> bool {
        input["safe"].as_bool().unwrap_or(false)
    }
    fn resource_key(&self, input: &Value) -> Option<String> {
        input["key"].as_str().map(str::to_owned)
    }
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let ms = input["ms"].as_u64().unwrap_or(0);
            tokio::select! {
                () = ctx.cancel.cancelled() => Err(ToolError::failed("cancelled")),
                () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(ToolOutput::Json(input)),
            }
        })
    }
}

fn parallel_harness(name: &str, config: impl FnOnce(&mut PipelineSettings)) -> Harness {
    harness_with(name, config, vec![], None, vec![Arc::new(Keyed)])
}

fn parallel(calls: Value, max: usize) -> Batch {
    let mut b = batch(calls);
    b.options.mode = Mode::Parallel {
        max_concurrency: max,
    };
    b
}

/// (first pre, last post) event positions per call index.
fn spans(events: &[Event], n: usize) -> Vec<(usize, usize)> {
    let mut spans = vec![(usize::MAX, 0); n];
    for (at, e) in events.iter().enumerate() {
        match e {
            Event::ToolPre { index, .. } => spans[*index].0 = spans[*index].0.min(at),
            Event::ToolPost { index, .. } => spans[*index].1 = spans[*index].1.max(at),
            _ => {}
        }
    }
    spans
}

#[tokio::test(start_paused = true)]
async fn independent_calls_overlap_and_results_keep_the_models_order() {
    let h = parallel_harness("par-overlap", defaults);
    let calls = json!([
        {"id": "a", "name": "keyed", "arguments": {"safe": true, "ms": 300, "n": 0}},
        {"id": "b", "name": "keyed", "arguments": {"safe": true, "ms": 100, "n": 1}},
        {"id": "c", "name": "keyed", "arguments": {"safe": true, "ms": 200, "n": 2}},
    ]);
    let started = tokio::time::Instant::now();
    let (report, kinds) = run(&h, parallel(calls, 8)).await;
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(300),
        "paused clock: the longest call"
    );
    let ids: Vec<&str> = report.results.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(
        kinds[3..],
        [
            "pre:a:1",
            "pre:b:1",
            "pre:c:1",
            "post:b:1:NONE",
            "post:c:1:NONE",
            "post:a:1:NONE"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn max_concurrency_one_behaves_like_sequential() {
    let h = parallel_harness("par-one", defaults);
    let calls = json!([
        {"id": "a", "name": "keyed", "arguments": {"safe": true, "ms": 300, "n": 0}},
        {"id": "b", "name": "keyed", "arguments": {"safe": true, "ms": 100, "n": 1}},
    ]);
    let (_, kinds) = run(&h, parallel(calls, 1)).await;
    assert_eq!(
        kinds[2..],
        ["pre:a:1", "post:a:1:NONE", "pre:b:1", "post:b:1:NONE"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_hard_error_cancels_running_siblings_and_skips_the_rest() {
    let h = parallel_harness("par-hard", |s: &mut PipelineSettings| {
        s.policy.loop_thresholds.stop_after = 1
    });
    // Prime the loop window: one echo{x:1} recorded, so the next one is stopped.
    run(
        &h,
        named_batch(
            "p",
            json!([{"id": "prime", "name": "echo", "arguments": {"x": 1}}]),
        ),
    )
    .await;
    let mut b = named_batch(
        "p",
        json!([
            {"id": "slow", "name": "keyed", "arguments": {"safe": true, "ms": 60000, "n": 0}},
            {"id": "loop", "name": "echo", "arguments": {"x": 1}},
            {"id": "later", "name": "keyed", "arguments": {"safe": false, "ms": 1, "n": 2}},
        ]),
    );
    b.options.mode = Mode::Parallel { max_concurrency: 8 };
    let started = tokio::time::Instant::now();
    let (report, kinds) = run(&h, b).await;
    let classes: Vec<ErrorClass> = report.results.iter().map(|r| r.error_class).collect();
    assert_eq!(
        classes,
        [
            ErrorClass::Cancelled,
            ErrorClass::LoopStopped,
            ErrorClass::Skipped
        ]
    );
    assert_eq!(report.outcome, Outcome::LoopDetected);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the slow sibling was cancelled, not awaited"
    );
    assert!(
        kinds.contains(&"post:slow:1:CANCELLED".to_owned()),
        "{kinds:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn concurrent_calls_share_one_half_open_probe() {
    let h = parallel_harness("par-probe", |s: &mut PipelineSettings| {
        s.breaker.failure_threshold = 1;
        s.breaker.cooldown = Duration::from_secs(10);
        s.middleware
            .tool_timeouts
            .insert("keyed".into(), Duration::from_millis(20));
    });
    let fail =
        json!([{"id": "f", "name": "keyed", "arguments": {"safe": true, "ms": 5000, "n": 0}}]);
    run(&h, batch(fail)).await; // one TIMEOUT opens the breaker (keyed is not retried)
    tokio::time::advance(Duration::from_secs(10)).await;
    let calls: Vec<Value> = (1..=4)
        .map(|n| json!({"id": format!("c{n}"), "name": "keyed", "arguments": {"safe": true, "ms": 10, "n": n}}))
        .collect();
    let (report, _) = run(&h, parallel(Value::Array(calls), 8)).await;
    let classes: Vec<ErrorClass> = report.results.iter().map(|r| r.error_class).collect();
    assert_eq!(
        classes.iter().filter(|c| **c == ErrorClass::None).count(),
        1,
        "{classes:?}"
    );
    assert_eq!(
        classes
            .iter()
            .filter(|c| **c == ErrorClass::CircuitOpen)
            .count(),
        3,
        "{classes:?}"
    );
}

#[derive(Debug, Clone)]
struct Spec {
    safe: bool,
    key: Option<u8>,
    ms: u64,
    same_as_previous: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        any::<bool>(),
        proptest::option::of(0u8..3),
        0u64..500,
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(safe, key, ms, same_as_previous)| Spec {
            safe,
            key,
            ms,
            same_as_previous,
        })
}

fn input(spec: &Spec, n: usize) -> Value {
    let mut v = json!({"safe": spec.safe, "ms": spec.ms, "n": n});
    if let Some(k) = spec.key {
        v["key"] = json!(format!("k{k}"));
    }
    v
}

fn check_parallel(specs: Vec<Spec>, max: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        static CASE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = CASE.fetch_add(1, Ordering::Relaxed);
        let h = parallel_harness(&format!("par-prop-{n}"), |s: &mut PipelineSettings| {
            s.policy.loop_enabled = false
        });
        // Inputs: an occasional exact repeat of the previous call (the same operation).
        let mut inputs: Vec<Value> = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            let v = if s.same_as_previous && i > 0 {
                inputs[i - 1].clone()
            } else {
                input(s, i)
            };
            inputs.push(v);
        }
        let calls: Vec<Value> = inputs
            .iter()
            .enumerate()
            .map(|(i, v)| json!({"id": format!("c{i}"), "name": "keyed", "arguments": v}))
            .collect();
        let recorder = Recorder::default();
        let report = h
            .dispatcher
            .run(
                parallel(Value::Array(calls), max),
                &recorder,
                &Cancel::new(),
            )
            .await
            .unwrap();
        assert_eq!(report.results.len(), specs.len());
        for (i, r) in report.results.iter().enumerate() {
            assert_eq!((r.index, r.id.clone()), (i, format!("c{i}")));
            assert!(r.success, "{r:?}");
        }
        let events = recorder.events.lock().unwrap().clone();
        let spans = spans(&events, specs.len());
        let conflict = |i: usize, j: usize| {
            let (a, b) = (&inputs[i], &inputs[j]);
            !a["safe"].as_bool().unwrap()
                || !b["safe"].as_bool().unwrap()
                || (a.get("key").is_some() && a.get("key") == b.get("key"))
                || a == b
        };
        for j in 0..specs.len() {
            for i in 0..j {
                if conflict(i, j) {
                    assert!(
                        spans[i].1 < spans[j].0,
                        "calls {i} and {j} conflict but overlapped or reordered"
                    );
                }
            }
        }
        // Never more than `max` attempts open at once.
        let mut open = 0usize;
        for e in &events {
            match e {
                Event::ToolPre { .. } => {
                    open += 1;
                    assert!(open <= max, "{open} calls ran at once; the limit is {max}");
                }
                Event::ToolPost { .. } => open -= 1,
                _ => {}
            }
        }
        h.dispatcher.sessions().remove_all();
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn conflicting_calls_never_overlap_or_reorder(
        specs in proptest::collection::vec(spec(), 0..14),
        max in 1usize..6,
    ) {
        check_parallel(specs, max);
    }
}
