//! Random batches, sequential and parallel: whatever the tools do and whenever the cancel
//! comes, every call is answered exactly once, in order, with its own id, and every tool_pre
//! has its tool_post.

use std::sync::atomic::AtomicU64;

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Kind {
    Succeed,
    Fail,
    RetryThenFail,
    Panic,
    Sleep(u64),
    Unknown,
    Malformed,
    Blocked,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Succeed),
        Just(Kind::Fail),
        Just(Kind::RetryThenFail),
        Just(Kind::Panic),
        (0u64..3000).prop_map(Kind::Sleep),
        Just(Kind::Unknown),
        Just(Kind::Malformed),
        Just(Kind::Blocked),
    ]
}

fn element(i: usize, kind: &Kind) -> Value {
    let id = format!("c{i}");
    match kind {
        Kind::Succeed => json!({"id": id, "name": "echo", "arguments": {"i": i}}),
        Kind::Fail => json!({"id": id, "name": "plain_fail"}),
        Kind::RetryThenFail => json!({"id": id, "name": "broken"}),
        Kind::Panic => json!({"id": id, "name": "explode"}),
        Kind::Sleep(ms) => json!({"id": id, "name": "sleep", "arguments": {"ms": ms}}),
        Kind::Unknown => json!({"id": id, "name": "ghost"}),
        Kind::Malformed => {
            json!({"id": id, "function": {"name": "echo", "arguments": "{oops"}})
        }
        Kind::Blocked => json!({"id": id, "name": "now"}),
    }
}

static CASE: AtomicU64 = AtomicU64::new(0);

fn check_case(kinds: Vec<Kind>, cancel_after: Option<u64>, session: bool, parallel: Option<usize>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let n = CASE.fetch_add(1, Ordering::Relaxed);
        let config = |s: &mut PipelineSettings| {
            s.policy.loop_thresholds.warn_after = 2;
            s.policy.loop_thresholds.stop_after = 3;
            s.breaker.failure_threshold = 4;
            s.breaker.cooldown = Duration::from_secs(2);
        };
        let explode = FnTool::new("explode", "panics", |_input, _ctx| async { panic!("boom") });
        let h = harness_with(
            &format!("prop-{n}"),
            config,
            vec![Arc::new(BlockTool("now"))],
            None,
            vec![Arc::new(explode)],
        );

        let elements: Vec<Value> = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| element(i, k))
            .collect();
        let mut b = named_batch(if session { "prop" } else { "" }, Value::Array(elements));
        if let Some(max_concurrency) = parallel {
            b.options.mode = Mode::Parallel { max_concurrency };
        }
        let recorder = Recorder::default();
        let cancel = Cancel::new();
        if let Some(ms) = cancel_after {
            let trigger = cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                trigger.cancel("random cancel");
            });
        }
        let report = h.dispatcher.run(b, &recorder, &cancel).await.unwrap();

        // Exactly one result per call, in order, with its own id.
        assert_eq!(report.results.len(), kinds.len());
        for (i, r) in report.results.iter().enumerate() {
            assert_eq!((r.index, r.id.as_str()), (i, format!("c{i}").as_str()));
        }
        assert_eq!(report.messages.len(), kinds.len());
        // Hard errors end the batch: everything after the first one is SKIPPED, nothing before.
        let skipped: Vec<bool> = report
            .results
            .iter()
            .map(|r| r.error_class == ErrorClass::Skipped)
            .collect();
        // In sequential mode SKIPPED is a suffix; in parallel a later independent call may
        // have finished before an earlier one that waited was skipped.
        if let Some(first) = skipped.iter().position(|s| *s) {
            assert_ne!(report.outcome, Outcome::Completed);
            if parallel.is_none() {
                assert!(skipped[first..].iter().all(|s| *s), "{skipped:?}");
            }
        }
        if report.outcome == Outcome::Completed {
            assert!(!skipped.iter().any(|s| *s));
        }
        // Every call is received before anything runs; every pre has exactly one post after
        // it (paired by id and attempt), and in sequential mode no two attempts overlap.
        let events = recorder.events.lock().unwrap().clone();
        let received = events
            .iter()
            .take_while(|e| matches!(e, Event::CallReceived { .. }))
            .count();
        assert_eq!(received, kinds.len());
        let mut open: Vec<(String, u32)> = Vec::new();
        for e in &events[received..] {
            match e {
                Event::CallReceived { .. } => panic!("call_received after execution started"),
                Event::ToolPre { id, attempt, .. } => {
                    assert!(
                        parallel.is_some() || open.is_empty(),
                        "overlapping attempts: {open:?} and {id}"
                    );
                    assert!(
                        !open.contains(&(id.clone(), *attempt)),
                        "a second pre for {id}/{attempt}"
                    );
                    open.push((id.clone(), *attempt));
                }
                Event::ToolPost { id, attempt, .. } => {
                    let at = open.iter().position(|o| *o == (id.clone(), *attempt));
                    assert!(at.is_some(), "a post without its pre: {id}/{attempt}");
                    open.retain(|o| *o != (id.clone(), *attempt));
                }
                _ => {}
            }
        }
        assert!(open.is_empty(), "pres without their posts: {open:?}");
        h.dispatcher.sessions().remove_all();
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn every_call_is_answered_once_in_order_and_every_pre_has_its_post(
        kinds in proptest::collection::vec(kind(), 0..12),
        cancel_after in proptest::option::of(0u64..4000),
        session in any::<bool>(),
    ) {
        check_case(kinds, cancel_after, session, None);
    }

    #[test]
    fn in_parallel_too_every_call_is_answered_once_in_order_and_every_pre_has_its_post(
        kinds in proptest::collection::vec(kind(), 0..12),
        cancel_after in proptest::option::of(0u64..4000),
        session in any::<bool>(),
        max in 1usize..8,
    ) {
        check_case(kinds, cancel_after, session, Some(max));
    }
}
