//! The load driver of `scripts/bench-mcp`: `tools/call` of `echo` over MCP streamable HTTP
//! (toolgate's `/mcp`, or any MCP server) and toolgate's gRPC `Dispatch`, in interleaved slices.
//!
//! `mcp_driver --plan FILE` reads a JSON plan (`targets`: label, kind, addr, optional pid and
//! concurrency levels; `concurrency`, `slices`, `slice_seconds`, `warmup_seconds`). At each
//! concurrency C it opens C keep-alive connections per target, one per worker (each worker a
//! reqwest client of its own, HTTP/1.1; a tonic channel for gRPC), warms every target up, then
//! runs `slices` rounds, each a slice of every target in turn (forwards, then backwards, so a
//! steady drift of the machine's speed cancels in a median). A worker makes one call at a time
//! until the slice's time is up. Every reply is checked (`support/echo_targets.rs`); a failed
//! call is counted and the worker goes on, so a run with errors is reported, not hidden.
//!
//! Output is JSON lines on stdout: one `slice` record per slice (calls, errors, calls/s,
//! latency percentiles and maximum, the server's and the driver's CPU seconds) and one `cell`
//! record per target and concurrency (latencies pooled over its slices, their mean, and the
//! established connections to the target's port seen after each slice). Progress goes to
//! stderr.
//! `cargo bench` runs every bench target with `--bench`: without `--plan` the driver exits.

mod support;
#[path = "support/echo_targets.rs"]
mod targets;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;

use support::{BoxError, progress, report};
use targets::{Conn, Kind};

/// What to measure.
#[derive(Deserialize)]
struct Plan {
    targets: Vec<Target>,
    concurrency: Vec<usize>,
    slices: usize,
    slice_seconds: f64,
    warmup_seconds: f64,
}

/// One server endpoint and how to call it.
#[derive(Deserialize)]
struct Target {
    label: String,
    kind: Kind,
    /// An MCP URL, or host:port for gRPC.
    addr: String,
    /// The server's process, whose CPU time is read around each slice.
    pid: Option<u32>,
    /// The concurrency levels this target runs at; all of the plan's when absent.
    concurrency: Option<Vec<usize>>,
}

/// A target at one concurrency: its workers' connections and what its slices measured.
struct Cell<'a> {
    target: &'a Target,
    conns: Vec<Arc<Conn>>,
    latencies: Vec<Duration>,
    calls: u64,
    errors: u64,
    reasons: BTreeSet<String>,
    sockets: BTreeSet<usize>,
}

/// What one slice measured.
struct Slice {
    latencies: Vec<Duration>,
    errors: u64,
    reasons: BTreeSet<String>,
    seconds: f64,
    server_cpu: Option<f64>,
    driver_cpu: Option<f64>,
}

/// The most distinct error texts kept per slice.
const REASONS_KEPT: usize = 3;

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let plan = match (args.next().as_deref(), args.next()) {
        (Some("--plan"), Some(path)) => path,
        (None, _) => {
            progress("mcp_driver: no --plan FILE; see scripts/bench-mcp");
            return std::process::ExitCode::SUCCESS;
        }
        _ => {
            progress("usage: mcp_driver --plan FILE");
            return std::process::ExitCode::from(2);
        }
    };
    let outcome = tokio::runtime::Runtime::new()
        .map_err(BoxError::from)
        .and_then(|runtime| runtime.block_on(run(&plan)));
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            progress(&format!("mcp_driver: {e}"));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(path: &str) -> Result<(), BoxError> {
    let plan: Plan = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let slice = Duration::from_secs_f64(plan.slice_seconds);
    let warmup = Duration::from_secs_f64(plan.warmup_seconds);
    // One counter for every call of the run: each input (and JSON-RPC id) is distinct.
    let counter = Arc::new(AtomicU64::new(1));
    for &concurrency in &plan.concurrency {
        let mut cells = Vec::new();
        for target in &plan.targets {
            if target
                .concurrency
                .as_ref()
                .is_some_and(|levels| !levels.contains(&concurrency))
            {
                continue;
            }
            let conns = Conn::open(target.kind, &target.addr, concurrency)
                .await
                .map_err(|e| format!("{} at {concurrency}: connecting: {e}", target.label))?;
            cells.push(Cell {
                target,
                conns: conns.into_iter().map(Arc::new).collect(),
                latencies: Vec::new(),
                calls: 0,
                errors: 0,
                reasons: BTreeSet::new(),
                sockets: BTreeSet::new(),
            });
        }
        for cell in &mut cells {
            let warmed = run_slice(cell, warmup, &counter).await;
            progress(&format!(
                "{} at {concurrency}: warm-up {} calls, {} errors",
                cell.target.label,
                warmed.latencies.len(),
                warmed.errors
            ));
            cell.errors += warmed.errors;
            cell.reasons.extend(warmed.reasons);
        }
        for round in 0..plan.slices {
            let order: Vec<usize> = if round % 2 == 0 {
                (0..cells.len()).collect()
            } else {
                (0..cells.len()).rev().collect()
            };
            for index in order {
                let cell = &mut cells[index];
                let measured = run_slice(cell, slice, &counter).await;
                if let Some(open) = open_sockets(&cell.target.addr) {
                    cell.sockets.insert(open);
                }
                report_slice(cell, concurrency, round, &measured);
                cell.calls += measured.latencies.len() as u64;
                cell.errors += measured.errors;
                cell.reasons.extend(measured.reasons);
                cell.latencies.extend(measured.latencies);
            }
        }
        for cell in &mut cells {
            for conn in &cell.conns {
                conn.close().await;
            }
            report_cell(cell, concurrency);
        }
    }
    Ok(())
}

/// Every worker of `cell` calls, one call at a time, until `length` is up.
async fn run_slice(cell: &Cell<'_>, length: Duration, counter: &Arc<AtomicU64>) -> Slice {
    let server_before = cell.target.pid.and_then(cpu_seconds);
    let driver_before = cpu_seconds(std::process::id());
    let started = Instant::now();
    let deadline = started + length;
    let mut workers = tokio::task::JoinSet::new();
    for conn in &cell.conns {
        let conn = conn.clone();
        let counter = counter.clone();
        workers.spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            let mut reasons = BTreeSet::new();
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let t0 = Instant::now();
                match conn.call(n).await {
                    Ok(()) => latencies.push(t0.elapsed()),
                    Err(reason) => {
                        errors += 1;
                        if reasons.len() < REASONS_KEPT {
                            reasons.insert(reason);
                        }
                        // A refused connection fails at once: do not spin on it.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            (latencies, errors, reasons)
        });
    }
    let mut slice = Slice {
        latencies: Vec::new(),
        errors: 0,
        reasons: BTreeSet::new(),
        seconds: 0.0,
        server_cpu: None,
        driver_cpu: None,
    };
    while let Some(joined) = workers.join_next().await {
        match joined {
            Ok((latencies, errors, reasons)) => {
                slice.latencies.extend(latencies);
                slice.errors += errors;
                slice.reasons.extend(reasons);
            }
            Err(e) => {
                slice.errors += 1;
                slice
                    .reasons
                    .insert(format!("worker ended abnormally: {e}"));
            }
        }
    }
    slice.seconds = started.elapsed().as_secs_f64();
    let after = cell.target.pid.and_then(cpu_seconds);
    slice.server_cpu = server_before.zip(after).map(|(b, a)| a - b);
    let driver_after = cpu_seconds(std::process::id());
    slice.driver_cpu = driver_before.zip(driver_after).map(|(b, a)| a - b);
    slice.latencies.sort_unstable();
    slice
}

fn report_slice(cell: &Cell<'_>, concurrency: usize, round: usize, slice: &Slice) {
    let calls = slice.latencies.len();
    report(
        &json!({
            "type": "slice",
            "target": cell.target.label,
            "concurrency": concurrency,
            "slice": round,
            "calls": calls,
            "errors": slice.errors,
            "seconds": slice.seconds,
            "rate": calls as f64 / slice.seconds,
            "p50_us": micros(percentile(&slice.latencies, 50.0)),
            "p90_us": micros(percentile(&slice.latencies, 90.0)),
            "p99_us": micros(percentile(&slice.latencies, 99.0)),
            "p999_us": micros(percentile(&slice.latencies, 99.9)),
            "max_us": micros(slice.latencies.last().copied().unwrap_or_default()),
            "server_cpu_s": slice.server_cpu,
            "driver_cpu_s": slice.driver_cpu,
            "error_samples": slice.reasons,
        })
        .to_string(),
    );
}

fn report_cell(cell: &mut Cell<'_>, concurrency: usize) {
    cell.latencies.sort_unstable();
    let latencies = &cell.latencies;
    progress(&format!(
        "{} at {concurrency}: {} calls, {} errors, p50 {:.0} µs",
        cell.target.label,
        cell.calls,
        cell.errors,
        micros(percentile(latencies, 50.0))
    ));
    report(
        &json!({
            "type": "cell",
            "target": cell.target.label,
            "concurrency": concurrency,
            "calls": cell.calls,
            "errors": cell.errors,
            "p50_us": micros(percentile(latencies, 50.0)),
            "p90_us": micros(percentile(latencies, 90.0)),
            "p99_us": micros(percentile(latencies, 99.0)),
            "p999_us": micros(percentile(latencies, 99.9)),
            "max_us": micros(latencies.last().copied().unwrap_or_default()),
            "mean_us": micros(mean(latencies)),
            "open_connections_seen": cell.sockets,
            "error_samples": cell.reasons,
        })
        .to_string(),
    );
}

/// Nearest-rank percentile of sorted latencies.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The mean latency: far above the p50 when a few calls stall (a delayed ACK is 40 ms).
fn mean(latencies: &[Duration]) -> Duration {
    let total: Duration = latencies.iter().sum();
    total / u32::try_from(latencies.len().max(1)).unwrap_or(u32::MAX)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// User plus system CPU seconds of process `pid` so far (/proc/PID/stat; Linux reports them in
/// USER_HZ, 100 a second).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields follow its last `)`.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Established IPv4 TCP connections to the port of `addr` (a URL or host:port), from any local
/// process: the driver is the only client, so this is how many connections its workers hold.
fn open_sockets(addr: &str) -> Option<usize> {
    let authority = addr
        .split("://")
        .last()?
        .split('/')
        .next()?
        .rsplit_once(':')?;
    let port: u16 = authority.1.parse().ok()?;
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let wanted = format!(":{port:04X}");
    let open = table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // Remote address, then state (01 = ESTABLISHED): connections *to* the port.
            fields
                .get(2)
                .is_some_and(|remote| remote.ends_with(&wanted))
                && fields.get(3) == Some(&"01")
        })
        .count();
    Some(open)
}
