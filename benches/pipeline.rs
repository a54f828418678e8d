//! Benchmarks: the added cost per call of the full pipeline over calling a tool directly, and
//! the wall time of parallel dispatch against the ideal. Run with `cargo bench --bench pipeline`;
//! BENCHMARKS.md records the figures and how to read them.
// Bench setup fails loudly, like a test.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use toolgate::Server;
use toolgate::config::Config;
use toolgate::tools::{BoxFuture, FnTool, ToolContext, ToolOutput, builtin_tools};
use toolgate_core::calls::{IntakeLimits, intake};
use toolgate_core::dispatch::{
    Batch, BatchOptions, Cancel, Dispatcher, Event, MessageFormat, Mode, NoObserver, Observer,
};

// The allocator the `toolgate` binary ships with (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Every layer and every pipeline stage switched on, with settings that make each one do work.
const ALL_LAYERS: &str = r#"
[[hooks.rules]]
id = "audit"
tools = "*"
action = "allow"
[[hooks.rules.when]]
pointer = "/text"
exists = true

[[permissions.rules]]
id = "all"
tools = "*"
decision = "allow"

[redaction]
enabled = true

[output]
max_chars = 100000
batch_budget_chars = 1000000

[per_tool.echo.cache]
enabled = true
ttl = "60s"
scope = "global"
"#;

/// Consumes every event, as the DispatchBatch stream does (without the network).
#[derive(Default)]
struct Counting {
    seen: AtomicU64,
}

impl Observer for Counting {
    fn on_event(&self, event: Event) -> BoxFuture<'_, ()> {
        black_box(event);
        self.seen.fetch_add(1, Ordering::Relaxed);
        Box::pin(async {})
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn batch(elements: Vec<Value>, session: &str, mode: Mode) -> Batch {
    Batch {
        session_id: session.to_owned(),
        calls: intake(&elements, IntakeLimits { max_json_depth: 64 }),
        context: serde_json::Map::new(),
        bindings: std::collections::BTreeMap::new(),
        options: BatchOptions {
            message_format: MessageFormat::OpenAiChat,
            call_timeout: None,
            deadline: None,
            mode,
            fail_fast: false,
            interactive_approvals: false,
        },
        turn: 1,
        caller: std::sync::Arc::new(toolgate_core::identity::Caller::local()),
        trace: toolgate_core::trace::Span::none(),
    }
}

/// A distinct call each time, so the cache misses and loop detection sees progress: the full path.
fn echo_call(n: u64) -> Value {
    json!({"id": format!("call_{n}"), "type": "function",
           "function": {"name": "echo", "arguments": format!("{{\"text\":\"hello world\",\"n\":{n}}}")}})
}

fn per_call_cost(c: &mut Criterion) {
    let rt = runtime();
    let build = |toml: &str| -> Dispatcher {
        let config = Config::from_toml(toml).expect("bench config");
        rt.block_on(async { Server::new(config).dispatcher() })
            .expect("dispatcher")
    };
    // The default config: the console is on, so the dispatcher keeps a flight recorder.
    let dispatcher = build(ALL_LAYERS);
    // The same without the console: no flight recorder, no events built for nobody.
    let unrecorded = build(&format!("{ALL_LAYERS}\n[console]\nenabled = false\n"));
    assert!(dispatcher.flights().is_some() && unrecorded.flights().is_none());
    let echo = builtin_tools(&[])
        .into_iter()
        .find(|t| t.name() == "echo")
        .expect("echo");
    let ctx = ToolContext::new("bench", "call_0", 0, std::env::temp_dir());
    let counter = AtomicU64::new(0);

    let mut group = c.benchmark_group("per_call");
    // Inputs, calls and batches are built in untimed setup: only the work under test is timed.
    group.bench_function("direct_tool_call", |b| {
        b.to_async(&rt).iter_batched(
            || json!({"text": "hello world", "n": counter.fetch_add(1, Ordering::Relaxed)}),
            |input| async { black_box(echo.call(input, &ctx).await.expect("echo")) },
            BatchSize::SmallInput,
        );
    });
    let one_call = || {
        batch(
            vec![echo_call(counter.fetch_add(1, Ordering::Relaxed))],
            "bench",
            Mode::Sequential,
        )
    };
    for (name, dispatcher) in [
        ("full_pipeline_one_call_batch", &dispatcher),
        ("full_pipeline_one_call_batch_console_off", &unrecorded),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_batched(
                one_call,
                |batch| async {
                    black_box(dispatcher.run(batch, &NoObserver, &Cancel::new()).await)
                },
                BatchSize::SmallInput,
            );
        });
    }
    group.bench_function("full_pipeline_one_call_batch_with_events", |b| {
        b.to_async(&rt).iter_batched(
            one_call,
            |batch| async {
                black_box(
                    dispatcher
                        .run(batch, &Counting::default(), &Cancel::new())
                        .await,
                )
            },
            BatchSize::SmallInput,
        );
    });
    for (name, dispatcher) in [
        ("full_pipeline_16_call_batch", &dispatcher),
        ("full_pipeline_16_call_batch_console_off", &unrecorded),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_batched(
                || {
                    let calls: Vec<Value> = (0..16)
                        .map(|_| echo_call(counter.fetch_add(1, Ordering::Relaxed)))
                        .collect();
                    batch(calls, "bench", Mode::Sequential)
                },
                |batch| async {
                    black_box(dispatcher.run(batch, &NoObserver, &Cancel::new()).await)
                },
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

fn parallel_wall_time(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let work = FnTool::new("work", "sleeps 50 ms", |_input: Value, _ctx| async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(ToolOutput::Text("done".into()))
    })
    .concurrency_safe(true);
    let dispatcher = rt
        .block_on(async { Server::new(Config::default()).tool(work).dispatcher() })
        .expect("dispatcher");
    let mut group = c.benchmark_group("parallel");
    group.sample_size(20);
    group.bench_function("32_calls_of_50ms_at_concurrency_8", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let calls: Vec<Value> = (0..32)
                    .map(|n| json!({"id": format!("w{n}"), "name": "work", "arguments": {"n": n}}))
                    .collect();
                let started = Instant::now();
                let report = rt.block_on(dispatcher.run(
                    batch(calls, "", Mode::Parallel { max_concurrency: 8 }),
                    &NoObserver,
                    &Cancel::new(),
                ));
                total += started.elapsed();
                assert!(report.is_ok_and(|r| r.all_succeeded()));
            }
            total
        });
    });
    group.finish();
}

fn components(c: &mut Criterion) {
    let redactor = toolgate_core::middleware::Redactor::new(&[], false).expect("redactor");
    let mut group = c.benchmark_group("components");
    group.bench_function("redact_short_clean_text", |b| {
        b.iter(|| black_box(redactor.redact(black_box("{\"n\":42,\"text\":\"hello world\"}"))));
    });
    // A tool's text output: log lines with a few non-ASCII characters, and base64 data.
    let log: String = (0..60)
        .map(|i| {
            format!(
                "2024-05-01T12:00:{:02}Z INFO ✓ café request id=550e8400-e29b-41d4-a716-44665544{i:04} \
                 path=/api/v1/users/{i} status=200 took={i}ms\n",
                i % 60
            )
        })
        .collect();
    group.bench_function("redact_8k_log_text", |b| {
        b.iter(|| black_box(redactor.redact(black_box(&log))));
    });
    let base64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg"
        .repeat(700);
    group.bench_function("redact_56k_base64_text", |b| {
        b.iter(|| black_box(redactor.redact(black_box(&base64))));
    });
    group.bench_function("canonical_json", |b| {
        let v = json!({"text": "hello world", "n": 42});
        b.iter(|| black_box(toolgate_core::json::canonical(black_box(&v))));
    });
    group.finish();
}

criterion_group!(benches, per_call_cost, parallel_wall_time, components);
criterion_main!(benches);
