//! A gRPC load driver for `scripts/bench-remote`: remote-tool overhead and server memory.
//!
//! `overhead` calls one cheap tool of each remote it is given at concurrency 1 and 16, first
//! directly with a comparable client (a tonic `ToolWorker` client reading `Invoke` to its result;
//! an rmcp client over stdio or streamable HTTP), then through toolgate (unary `Dispatch` of one
//! call), in the same process and run, and prints p50, p99 and calls/s of both and the added
//! latency. `memory` sends one-call `Dispatch` batches of the built-in `echo` through a running
//! toolgate, fresh or cycling over K named sessions, reads the server's VmRSS at checkpoints and
//! at the end how many memory entries the last session holds. Every reply is checked to be a
//! real success; any failure makes the exit status non-zero.
//!
//! Output is markdown on stdout; progress goes to stderr. `cargo bench` runs every bench target
//! with `--bench`: that argument is ignored, and without a subcommand the driver exits at once.
//! About 700 lines; the `overhead` and `memory` parts are marked and share only the connection
//! and output helpers (`support/`, shared with `soak`).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value, json};
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use toolgate::pb;
use toolgate::protojson;

use support::{BoxError, connect, progress, report};
use toolgate::pb::tool_gate_client::ToolGateClient;
use toolgate::pb::tool_worker_client::ToolWorkerClient;

#[derive(Parser)]
#[command(
    name = "grpc_driver",
    about = "remote-tool overhead and memory driver for toolgate"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Latency of a no-op remote tool called directly and through toolgate.
    Overhead(OverheadArgs),
    /// Server memory (VmRSS) over many one-call batches.
    Memory(MemoryArgs),
}

#[derive(Args)]
struct OverheadArgs {
    /// toolgate's address (host:port).
    #[arg(long)]
    gate: String,
    /// A Python worker's address (host:port); its tool is also registered in toolgate.
    #[arg(long)]
    worker: Option<String>,
    /// The worker's tool and the prefix toolgate registers it under.
    #[arg(long, default_value = "word_count")]
    worker_tool: String,
    #[arg(long, default_value = "py.")]
    worker_prefix: String,
    /// The stdio MCP server's command line, split on whitespace (the driver starts its own copy;
    /// toolgate starts another from its config).
    #[arg(long)]
    mcp_stdio: Option<String>,
    #[arg(long, default_value = "evs.")]
    mcp_stdio_prefix: String,
    /// The streamable HTTP MCP server's URL.
    #[arg(long)]
    mcp_http: Option<String>,
    #[arg(long, default_value = "evh.")]
    mcp_http_prefix: String,
    /// The MCP tool both MCP servers are called with (server-everything's `echo`).
    #[arg(long, default_value = "echo")]
    mcp_tool: String,
    /// Concurrency levels, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    concurrency: Vec<usize>,
    /// Measured calls per level and way, unless `--seconds` runs out first.
    #[arg(long, default_value_t = 5000)]
    calls: u64,
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Unmeasured calls before each measurement, at the same concurrency.
    #[arg(long, default_value_t = 300)]
    warmup: u64,
    /// Skips the built-in `echo` reference rows (for a `--gate` that is not toolgate, such as
    /// the bare relay `benches/grpc_relay.rs`).
    #[arg(long)]
    no_reference: bool,
}

#[derive(Args)]
struct MemoryArgs {
    /// toolgate's address (host:port).
    #[arg(long)]
    gate: String,
    /// toolgate's process id, whose /proc/PID/status is read.
    #[arg(long)]
    pid: u32,
    /// Batch counts at which the RSS is read, comma-separated, ascending; the last is the total.
    #[arg(long, value_delimiter = ',', default_value = "100000,1000000")]
    checkpoints: Vec<u64>,
    /// Batches in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// 0: every batch in a fresh session (no session id); K: session ids cycle over K names.
    #[arg(long, default_value_t = 0)]
    sessions: u64,
}

fn main() -> std::process::ExitCode {
    // `cargo bench` passes `--bench` to every target; it means nothing here.
    let args = std::env::args().filter(|a| a != "--bench");
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return std::process::ExitCode::from(2);
        }
    };
    let Some(command) = cli.command else {
        progress("grpc_driver: no subcommand (overhead | memory); see scripts/bench-remote");
        return std::process::ExitCode::SUCCESS;
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            progress(&format!("grpc_driver: cannot start the runtime: {e}"));
            return std::process::ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        match command {
            Command::Overhead(args) => overhead(args).await,
            Command::Memory(args) => memory(args).await,
        }
    });
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            progress(&format!("grpc_driver: {e}"));
            std::process::ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// overhead

/// One way of making the call: directly to the remote, or through toolgate.
enum Target {
    Worker {
        client: ToolWorkerClient<Channel>,
        tool: String,
        input: protojson::Struct,
    },
    Mcp {
        service: RunningService<RoleClient, ()>,
        tool: String,
        arguments: Map<String, Value>,
    },
    Gate {
        client: ToolGateClient<Channel>,
        tool: String,
        arguments: Value,
    },
}

impl Target {
    /// Makes one call; an error is any reply that is not the tool's success.
    async fn call(&self) -> Result<(), String> {
        match self {
            Target::Worker {
                client,
                tool,
                input,
            } => {
                let request = pb::InvokeRequest {
                    tool: tool.clone(),
                    call_id: "bench".to_owned(),
                    input: Some(input.clone()),
                    ..Default::default()
                };
                let mut stream = client
                    .clone()
                    .invoke(request)
                    .await
                    .map_err(|s| format!("Invoke: {s}"))?
                    .into_inner();
                // Read to the end, as toolgate does: the result is the last message.
                let mut result = None;
                while let Some(event) = stream.next().await {
                    let event = event.map_err(|s| format!("Invoke stream: {s}"))?;
                    if let Some(pb::invoke_event::Event::Result(r)) = event.event {
                        result = Some(r);
                    }
                }
                match result {
                    Some(r) if !r.is_error => Ok(()),
                    Some(r) => Err(format!("worker tool failed: {:?}", r.content)),
                    None => Err("Invoke ended without a result".to_owned()),
                }
            }
            Target::Mcp {
                service,
                tool,
                arguments,
            } => {
                let params =
                    CallToolRequestParams::new(tool.clone()).with_arguments(arguments.clone());
                let result = service
                    .call_tool(params)
                    .await
                    .map_err(|e| format!("tools/call: {e}"))?;
                if result.is_error.unwrap_or(false) {
                    return Err(format!("mcp tool failed: {:?}", result.content));
                }
                Ok(())
            }
            Target::Gate {
                client,
                tool,
                arguments,
            } => {
                let call = json!({"id": "c", "name": tool, "arguments": arguments});
                let request = pb::DispatchBatchRequest {
                    calls: vec![protojson::Value::from(call.clone())],
                    ..Default::default()
                };
                let result = client
                    .clone()
                    .dispatch(request)
                    .await
                    .map_err(|s| format!("Dispatch: {s}"))?
                    .into_inner();
                match result.results.as_slice() {
                    [r] if r.success && result.all_succeeded => Ok(()),
                    [r] => Err(format!(
                        "toolgate call failed: {} ({})",
                        r.error, r.error_class
                    )),
                    _ => Err(format!("{} results for one call", result.results.len())),
                }
            }
        }
    }
}

/// How much to measure at one concurrency level.
#[derive(Clone, Copy)]
struct Plan {
    warmup: u64,
    calls: u64,
    limit: Duration,
}

/// Latencies of one measurement.
struct Stats {
    calls: u64,
    p50: Duration,
    p99: Duration,
    rate: f64,
}

/// Runs `calls` calls (or until the time limit) with `concurrency` loops each making one call
/// at a time, after an unmeasured warm-up at the same concurrency.
async fn measure(target: &Arc<Target>, concurrency: usize, plan: Plan) -> Result<Stats, BoxError> {
    run_loops(target, concurrency, plan.warmup, Duration::MAX).await?;
    let started = Instant::now();
    let mut latencies = run_loops(target, concurrency, plan.calls, plan.limit).await?;
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let calls = latencies.len() as u64;
    Ok(Stats {
        calls,
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        rate: calls as f64 / elapsed.as_secs_f64(),
    })
}

/// The latencies of up to `calls` calls made by `concurrency` loops; stops early at `limit`.
/// A failed call ends its loop and the measurement fails, naming each distinct failure in the
/// order they came back (the later ones are often consequences of the first, such as an opened
/// breaker): figures over failures mean nothing.
async fn run_loops(
    target: &Arc<Target>,
    concurrency: usize,
    calls: u64,
    limit: Duration,
) -> Result<Vec<Duration>, BoxError> {
    let issued = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let target = target.clone();
        let issued = issued.clone();
        loops.spawn(async move {
            let mut latencies = Vec::new();
            while issued.fetch_add(1, Ordering::Relaxed) < calls && started.elapsed() < limit {
                let t0 = Instant::now();
                if let Err(e) = target.call().await {
                    return Err((Instant::now(), e));
                }
                latencies.push(t0.elapsed());
            }
            Ok(latencies)
        });
    }
    let mut all = Vec::new();
    let mut failures: Vec<(Instant, String)> = Vec::new();
    while let Some(joined) = loops.join_next().await {
        match joined? {
            Ok(latencies) => all.extend(latencies),
            Err(failure) => failures.push(failure),
        }
    }
    if failures.is_empty() {
        return Ok(all);
    }
    failures.sort();
    let mut reasons: Vec<String> = Vec::new();
    for (_, reason) in failures {
        if !reasons.contains(&reason) {
            reasons.push(reason);
        }
    }
    Err(reasons.join("; then: ").into())
}

/// Nearest-rank percentile of sorted latencies.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One remote: its direct client and toolgate's name for the same tool.
struct Remote {
    label: String,
    direct: Arc<Target>,
    gate: Arc<Target>,
}

async fn overhead(args: OverheadArgs) -> Result<(), BoxError> {
    let gate_client = ToolGateClient::new(connect(&args.gate).await?);
    let gate = |tool: String, arguments: Value| {
        Arc::new(Target::Gate {
            client: gate_client.clone(),
            tool,
            arguments,
        })
    };
    let mut remotes = Vec::new();
    if let Some(addr) = &args.worker {
        let arguments = json!({"text": "the quick brown fox"});
        let Value::Object(input) = &arguments else {
            return Err("worker arguments must be an object".into());
        };
        remotes.push(Remote {
            label: format!("worker (Python grpcio) `{}`", args.worker_tool),
            direct: Arc::new(Target::Worker {
                client: ToolWorkerClient::new(connect(addr).await?),
                tool: args.worker_tool.clone(),
                input: protojson::Struct::from(input.clone()),
            }),
            gate: gate(
                format!("{}{}", args.worker_prefix, args.worker_tool),
                arguments,
            ),
        });
    }
    let mcp_arguments = json!({"message": "hi"});
    let Value::Object(mcp_map) = &mcp_arguments else {
        return Err("mcp arguments must be an object".into());
    };
    if let Some(command) = &args.mcp_stdio {
        remotes.push(Remote {
            label: format!("MCP stdio (server-everything) `{}`", args.mcp_tool),
            direct: Arc::new(Target::Mcp {
                service: mcp_stdio(command).await?,
                tool: args.mcp_tool.clone(),
                arguments: mcp_map.clone(),
            }),
            gate: gate(
                format!("{}{}", args.mcp_stdio_prefix, args.mcp_tool),
                mcp_arguments.clone(),
            ),
        });
    }
    if let Some(url) = &args.mcp_http {
        remotes.push(Remote {
            label: format!(
                "MCP streamable HTTP (server-everything) `{}`",
                args.mcp_tool
            ),
            direct: Arc::new(Target::Mcp {
                service: mcp_http(url).await?,
                tool: args.mcp_tool.clone(),
                arguments: mcp_map.clone(),
            }),
            gate: gate(
                format!("{}{}", args.mcp_http_prefix, args.mcp_tool),
                mcp_arguments.clone(),
            ),
        });
    }
    if remotes.is_empty() {
        return Err("give at least one of --worker, --mcp-stdio, --mcp-http".into());
    }
    let plan = Plan {
        warmup: args.warmup,
        calls: args.calls,
        limit: Duration::from_secs_f64(args.seconds),
    };
    let echo = gate("echo".to_owned(), mcp_arguments.clone());
    report(
        "| Remote | Conc. | Direct p50 | Direct p99 | Direct calls/s | toolgate p50 | toolgate p99 | toolgate calls/s | Added p50 | Added p99 |",
    );
    report("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    // A measurement that fails is reported in its row and fails the run at the end, so one
    // broken remote does not hide the others' figures.
    let mut failures = Vec::new();
    // The same RPC with a built-in tool: what toolgate costs without any remote hop.
    let references = if args.no_reference {
        &[][..]
    } else {
        &args.concurrency[..]
    };
    for &concurrency in references {
        let through = measure(&echo, concurrency, plan).await;
        let label = "toolgate only: built-in `echo` (reference)";
        report(&format!(
            "| {label} | {concurrency} | — | — | — | {} | — | — |",
            cells(&through)
        ));
        if let Err(e) = through {
            failures.push(format!("{label} at {concurrency}: {e}"));
        }
    }
    for remote in &remotes {
        for &concurrency in &args.concurrency {
            let started = Instant::now();
            let direct = measure(&remote.direct, concurrency, plan).await;
            let through = measure(&remote.gate, concurrency, plan).await;
            let count = |o: &Result<Stats, BoxError>| o.as_ref().map_or(0, |s| s.calls);
            progress(&format!(
                "{} at concurrency {concurrency}: {} + {} calls in {:.1} s",
                remote.label,
                count(&direct),
                count(&through),
                started.elapsed().as_secs_f64()
            ));
            let added = match (&direct, &through) {
                (Ok(d), Ok(t)) => format!(
                    "**{:+.0} µs** | **{:+.0} µs**",
                    micros(t.p50) - micros(d.p50),
                    micros(t.p99) - micros(d.p99)
                ),
                _ => "— | —".to_owned(),
            };
            report(&format!(
                "| {} | {concurrency} | {} | {} | {added} |",
                remote.label,
                cells(&direct),
                cells(&through)
            ));
            for (way, outcome) in [("direct", direct), ("through toolgate", through)] {
                if let Err(e) = outcome {
                    failures.push(format!("{} {way} at {concurrency}: {e}", remote.label));
                }
            }
        }
    }
    for remote in remotes {
        if let Ok(Target::Mcp { service, .. }) = Arc::try_unwrap(remote.direct) {
            // Ends the session cleanly and, for stdio, stops the child.
            let _ = service.cancel().await;
        }
    }
    if failures.is_empty() {
        return Ok(());
    }
    report("");
    for failure in &failures {
        report(&format!("- FAILED: {failure}"));
    }
    Err(format!("{} measurements failed", failures.len()).into())
}

/// The p50, p99 and calls/s cells of a measurement, or why it failed.
fn cells(outcome: &Result<Stats, BoxError>) -> String {
    match outcome {
        Ok(s) => format!(
            "{:.0} µs | {:.0} µs | {:.0}",
            micros(s.p50),
            micros(s.p99),
            s.rate
        ),
        Err(_) => "failed | — | —".to_owned(),
    }
}

/// Starts the stdio MCP server (killed when the service drops) and initializes.
async fn mcp_stdio(command: &str) -> Result<RunningService<RoleClient, ()>, BoxError> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let Some((program, rest)) = words.split_first() else {
        return Err("--mcp-stdio is empty".into());
    };
    let mut command = tokio::process::Command::new(program);
    command.args(rest).kill_on_drop(true);
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::null())
        .spawn()?;
    Ok(().serve(transport).await?)
}

/// Connects to a streamable HTTP MCP server with a pooled, TCP_NODELAY client, like toolgate's.
async fn mcp_http(url: &str) -> Result<RunningService<RoleClient, ()>, BoxError> {
    let client =
        toolgate_remotes::tls::client_builder(None, std::time::Duration::from_secs(10))?.build()?;
    let transport = StreamableHttpClientTransport::with_client(
        client,
        StreamableHttpClientTransportConfig::with_uri(url),
    );
    Ok(().serve(transport).await?)
}

// ---------------------------------------------------------------------------------------------
// memory

/// VmRSS and VmHWM of a process, in KiB.
fn rss_kib(pid: u32) -> Result<(u64, u64), BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64, BoxError> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .ok_or_else(|| format!("no {name} in /proc/{pid}/status"))?;
        let kib = line
            .trim_start_matches(name)
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()?;
        Ok(kib)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// One `echo` batch; `n` makes every input distinct, so loop detection (which watches repeats
/// of the same tool, input and result in a session) never stops a named session.
async fn echo_batch(client: &mut ToolGateClient<Channel>, n: u64, sessions: u64) -> bool {
    let call = json!({"id": "c", "name": "echo", "arguments": {"n": n}});
    let session_id = if sessions == 0 {
        String::new()
    } else {
        format!("bench-{}", n % sessions)
    };
    let request = pb::DispatchBatchRequest {
        session_id,
        calls: vec![protojson::Value::from(call.clone())],
        ..Default::default()
    };
    let Ok(result) = client.dispatch(request).await else {
        return false;
    };
    let result = result.into_inner();
    // A real success: one result, succeeded, and the echo of exactly this input.
    match result.results.as_slice() {
        [r] => r.success && result.all_succeeded && r.content == format!("{{\"n\":{n}}}"),
        _ => false,
    }
}

/// Sends batches `from..to` with `concurrency` loops; answers the number that failed.
async fn run_batches(
    client: &ToolGateClient<Channel>,
    range: std::ops::Range<u64>,
    concurrency: usize,
    sessions: u64,
) -> Result<u64, BoxError> {
    let next = Arc::new(AtomicU64::new(range.start));
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let mut client = client.clone();
        let next = next.clone();
        let end = range.end;
        loops.spawn(async move {
            let mut failed = 0u64;
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= end {
                    break;
                }
                if !echo_batch(&mut client, n, sessions).await {
                    failed += 1;
                }
            }
            failed
        });
    }
    let mut failed = 0;
    while let Some(joined) = loops.join_next().await {
        failed += joined?;
    }
    Ok(failed)
}

async fn memory(args: MemoryArgs) -> Result<(), BoxError> {
    let client = ToolGateClient::new(connect(&args.gate).await?);
    let sessions = if args.sessions == 0 {
        "fresh (no id)".to_owned()
    } else {
        format!("{} named ids", args.sessions)
    };
    let (start_rss, _) = rss_kib(args.pid)?;
    progress(&format!(
        "memory: {sessions}, concurrency {}, RSS at start {:.1} MiB",
        args.concurrency,
        mib(start_rss)
    ));
    report(
        "| Sessions | Batches | VmRSS | Δ from start | VmHWM | Batches/s (segment) | Failures |",
    );
    report("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    report(&format!(
        "| {sessions} | 0 | {:.1} MiB | — | — | — | — |",
        mib(start_rss)
    ));
    let mut done = 0u64;
    let mut failures = 0u64;
    for &checkpoint in &args.checkpoints {
        if checkpoint <= done {
            return Err("checkpoints must be ascending".into());
        }
        let started = Instant::now();
        failures += run_batches(&client, done..checkpoint, args.concurrency, args.sessions).await?;
        let rate = (checkpoint - done) as f64 / started.elapsed().as_secs_f64();
        done = checkpoint;
        let (rss, hwm) = rss_kib(args.pid)?;
        progress(&format!(
            "memory: {done} batches, {:.1} s for the segment",
            started.elapsed().as_secs_f64()
        ));
        report(&format!(
            "| {sessions} | {done} | {:.1} MiB | {:+.1} MiB | {:.1} MiB | {rate:.0} | {failures} |",
            mib(rss),
            mib(rss) - mib(start_rss),
            mib(hwm),
        ));
    }
    if args.sessions > 0 {
        // The per-session bound, seen from outside: how much the last session used remembers.
        let id = format!("bench-{}", (done - 1) % args.sessions);
        let entries = client
            .clone()
            .get_session_memory(pb::GetSessionMemoryRequest {
                session_id: id.clone(),
            })
            .await
            .map(|r| r.into_inner().entries.len().to_string())
            .unwrap_or_else(|s| format!("{:?}", s.code()));
        report("");
        report(&format!(
            "Memory entries of session `{id}` at the end: {entries}."
        ));
    }
    if failures > 0 {
        return Err(format!("{failures} of {done} batches did not succeed").into());
    }
    Ok(())
}
