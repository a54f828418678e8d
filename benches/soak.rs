//! A soak with injected faults (`scripts/soak`, issue 15): load through the real gRPC port while
//! remotes die, and a check of every reply.
//!
//! It starts toolgate's release binary with a config naming a gRPC worker (the Python example
//! worker, on a fixed port so it can be restarted), an MCP server over stdio (`server-everything`
//! from npm, toolgate's child) and three HTTP tools served here (`/ok`, `/fail` answering 503,
//! `/hang` never answering). Then for `--seconds` it drives `Dispatch` and `DispatchBatch`,
//! PARALLEL and SEQUENTIAL, in named and fresh sessions, from `--concurrency` client tasks over
//! `--connections` HTTP/2 connections, while it kills the worker (SIGKILL, restarted a second
//! later) and the MCP child (SIGKILL; toolgate respawns it), and some batches leave mid-stream,
//! run past their gRPC deadline or past their call timeout. At the end, with load still running,
//! toolgate gets SIGTERM.
//!
//! Every reply is checked: one result per call, in order, with the call's id and (where the
//! tool echoes) the call's own token, an error class that the call's fault allows, exactly one
//! `result` event ending each stream. A call is lost when an accepted batch does not answer it;
//! the report counts calls sent, answered, abandoned by the client on purpose and lost, errors by
//! tool and class, and samples toolgate's RSS, open descriptors, live tasks (its `/metrics`) and
//! child processes at the start, every `--sample-every` seconds and at the end; after the exit it
//! counts the MCP server processes left behind. Output is markdown on stdout; the exit status is
//! non-zero when a call was lost, a reply was wrong, toolgate exited badly or a child was left.
//!
//! About 1,300 lines, its parts marked; output and the connection are in `support/`, shared with
//! `grpc_driver`.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::transport::Channel;
use toolgate::pb;
use toolgate::protojson;

use support::{BoxError, connect, progress, report};
use toolgate::pb::tool_gate_client::ToolGateClient;

#[derive(Parser)]
#[command(name = "soak", about = "a soak with injected faults for toolgate")]
struct Cli {
    /// toolgate's release binary.
    #[arg(long)]
    toolgate: PathBuf,
    /// The Python that runs the example worker (with grpcio installed).
    #[arg(long)]
    python: PathBuf,
    /// examples/python/worker.py.
    #[arg(long)]
    worker: PathBuf,
    /// server-everything's dist/index.js.
    #[arg(long)]
    everything: PathBuf,
    /// A directory for the config and toolgate's log.
    #[arg(long)]
    work: PathBuf,
    /// How long the load runs before the SIGTERM.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Client tasks, each with one batch in flight.
    #[arg(long, default_value_t = 48)]
    concurrency: usize,
    /// HTTP/2 connections the tasks share.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Seconds between samples of toolgate's resources.
    #[arg(long, default_value_t = 10)]
    sample_every: u64,
    /// Seconds between kills of the worker (restarted a second later).
    #[arg(long, default_value_t = 7)]
    worker_kill_every: u64,
    /// Seconds between kills of the MCP server.
    #[arg(long, default_value_t = 11)]
    mcp_kill_every: u64,
    /// Seconds the load keeps running after the SIGTERM.
    #[arg(long, default_value_t = 2)]
    after_sigterm: u64,
    /// Seed of the workload's choices.
    #[arg(long, default_value_t = 15)]
    seed: u64,
}

fn main() -> std::process::ExitCode {
    // `cargo bench` passes `--bench` to every target; it means nothing here.
    let args: Vec<String> = std::env::args().filter(|a| a != "--bench").collect();
    if args.len() == 1 {
        progress("soak: no arguments; run scripts/soak");
        return std::process::ExitCode::SUCCESS;
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            progress(&format!("soak: cannot start the runtime: {e}"));
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(soak(cli)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            progress(&format!("soak: {e}"));
            std::process::ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// the run

async fn soak(cli: Cli) -> Result<bool, BoxError> {
    std::fs::create_dir_all(&cli.work)?;
    let http = TcpListener::bind("127.0.0.1:0").await?;
    let http_addr = http.local_addr()?;
    tokio::spawn(http_tools(http));
    let mut worker = Worker::new(&cli)?;
    worker.start().await?;
    let config = cli.work.join("soak.toml");
    std::fs::write(&config, config_text(&cli, worker.port, http_addr))?;
    let gate = Gate::start(&cli, &config).await?;
    progress(&format!(
        "soak: toolgate {} (admin {}), worker :{}, http tools {http_addr}",
        gate.addr, gate.admin, worker.port
    ));

    let mut channels = Vec::new();
    for _ in 0..cli.connections.max(1) {
        channels.push(connect(&gate.addr).await?);
    }
    let stats = Arc::new(Stats::default());
    let phase = Arc::new(Phase::default());
    let started = Instant::now();
    let mut samples = vec![Sample::take(&gate, 0.0, 0).await];

    let mut load = Vec::new();
    for task in 0..cli.concurrency.max(1) {
        let client = ToolGateClient::new(channels[task % channels.len()].clone());
        let seed = cli.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (task as u64 + 1);
        load.push(tokio::spawn(drive(
            client,
            Rng(seed | 1),
            task,
            stats.clone(),
            phase.clone(),
        )));
    }

    // Faults and samples until the end of the run.
    let end = started + Duration::from_secs(cli.seconds);
    let mut next_sample = started + Duration::from_secs(cli.sample_every.max(1));
    let mut next_worker_kill = started + Duration::from_secs(cli.worker_kill_every.max(1));
    let mut next_mcp_kill = started + Duration::from_secs(cli.mcp_kill_every.max(1));
    let mut restart_worker_at: Option<Instant> = None;
    let mut faults = Faults::default();
    let mut last_answered = 0;
    let mut last_sample = started;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = Instant::now();
        if now >= next_worker_kill && restart_worker_at.is_none() {
            worker.kill().await;
            faults.worker_kills += 1;
            restart_worker_at = Some(now + Duration::from_secs(1));
            next_worker_kill = now + Duration::from_secs(cli.worker_kill_every.max(1));
        }
        if restart_worker_at.is_some_and(|at| now >= at) {
            worker.start().await?;
            restart_worker_at = None;
        }
        if now >= next_mcp_kill {
            let killed = kill_children(gate.pid, &cli.everything);
            faults.mcp_kills += killed;
            if killed == 0 {
                faults.mcp_absent += 1;
            }
            next_mcp_kill = now + Duration::from_secs(cli.mcp_kill_every.max(1));
        }
        if now >= next_sample {
            let answered = stats.answered.load(Ordering::Relaxed);
            let rate =
                (answered - last_answered) as f64 / now.duration_since(last_sample).as_secs_f64();
            samples.push(Sample::take(&gate, started.elapsed().as_secs_f64(), rate as u64).await);
            last_answered = answered;
            last_sample = now;
            next_sample = now + Duration::from_secs(cli.sample_every.max(1));
        }
    }
    if restart_worker_at.is_some() {
        worker.start().await?;
    }
    let answered = stats.answered.load(Ordering::Relaxed);
    let rate = (answered - last_answered) as f64 / last_sample.elapsed().as_secs_f64();
    samples.push(Sample::take(&gate, started.elapsed().as_secs_f64(), rate as u64).await);
    let load_seconds = started.elapsed().as_secs_f64();
    let sent_before_sigterm = stats.sent.load(Ordering::Relaxed);

    // SIGTERM with batches in flight; the load keeps going for a while, then stops.
    let in_flight = stats.in_flight.load(Ordering::Relaxed);
    phase.shutting_down.store(true, Ordering::SeqCst);
    let sigterm_at = Instant::now();
    signal(gate.pid, rustix::process::Signal::TERM);
    let mut child = gate.child;
    let exited = tokio::spawn(async move {
        let exit = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
        let exited_after = sigterm_at.elapsed().as_secs_f64();
        match exit {
            Ok(Ok(status)) => (Some(status), exited_after),
            _ => {
                let _ = child.kill().await;
                (None, exited_after)
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(cli.after_sigterm)).await;
    phase.stop.store(true, Ordering::SeqCst);
    for task in load {
        let _ = task.await;
    }
    let (exit, exited_after) = exited.await.unwrap_or((None, f64::NAN));
    // Give the kernel a moment to reap what the exit killed, then look for survivors.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let survivors = processes_running(&cli.everything);
    worker.kill().await;
    // A panic anywhere in toolgate is logged (and isolated); the soak wants none.
    let log = std::fs::read_to_string(cli.work.join("toolgate.log")).unwrap_or_default();
    let panics = log.lines().filter(|l| l.contains("panic")).count();

    let ok = write_report(Report {
        cli: &cli,
        stats: &stats,
        faults: &faults,
        samples: &samples,
        load_seconds,
        sent_before_sigterm,
        in_flight_at_sigterm: in_flight,
        exit,
        exited_after,
        survivors,
        panics,
    });
    Ok(ok)
}

/// Whether the run is shutting down (SIGTERM sent) or over.
#[derive(Default)]
struct Phase {
    shutting_down: AtomicBool,
    stop: AtomicBool,
}

#[derive(Default)]
struct Faults {
    worker_kills: u64,
    mcp_kills: u64,
    /// MCP kills due while no server process was running (toolgate was respawning it).
    mcp_absent: u64,
}

fn config_text(cli: &Cli, worker_port: u16, http: std::net::SocketAddr) -> String {
    let everything = cli.everything.display();
    let http_tool = |name: &str, path: &str| {
        format!(
            "[[remotes]]\nname = \"{name}\"\nkind = \"http\"\nurl = \"http://{http}/{path}\"\n\
             timeout = \"1s\"\n[remotes.definition]\nname = \"{name}\"\n\n"
        )
    };
    format!(
        r#"# Written by benches/soak.rs.
[log]
level = "warn"

[server]
shutdown_grace = "10s"

# Breakers reopen quickly so calls reach the remotes again soon after a fault.
[breaker]
cooldown = "2s"

# Call deadlines (remote `timeout` bounds connecting and discovery only).
[per_tool.http_hang]
timeout = "1s"

[per_tool."py.word_count"]
timeout = "5s"

[per_tool."ev.echo"]
timeout = "5s"

[[remotes]]
name = "py"
kind = "worker"
endpoint = "http://127.0.0.1:{worker_port}"
prefix = "py."
required = true
timeout = "5s"

[[remotes]]
name = "ev"
kind = "mcp"
prefix = "ev."
required = true
timeout = "5s"
command = ["node", "{everything}", "stdio"]

{}{}{}"#,
        http_tool("http_ok", "ok"),
        http_tool("http_fail", "fail"),
        http_tool("http_hang", "hang"),
    )
}

// ---------------------------------------------------------------------------------------------
// processes

/// The example worker on a fixed port, so a restarted worker is found where the first was.
struct Worker {
    python: PathBuf,
    script: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Worker {
    fn new(cli: &Cli) -> Result<Self, BoxError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        Ok(Worker {
            python: cli.python.clone(),
            script: cli.worker.clone(),
            port,
            child: None,
        })
    }

    async fn start(&mut self) -> Result<(), BoxError> {
        let mut child = Command::new(&self.python)
            .arg(&self.script)
            .args(["--port", &self.port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("the worker has no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let announced = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if line.starts_with("listening on ") {
                    return Ok::<bool, std::io::Error>(true);
                }
            }
            Ok(false)
        })
        .await;
        if !matches!(announced, Ok(Ok(true))) {
            return Err("the worker did not start".into());
        }
        // Keep reading so the worker never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.child = Some(child);
        Ok(())
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

/// toolgate's process and the addresses it announced.
struct Gate {
    child: Child,
    pid: i32,
    addr: String,
    admin: String,
}

impl Gate {
    async fn start(cli: &Cli, config: &Path) -> Result<Self, BoxError> {
        let log = std::fs::File::create(cli.work.join("toolgate.log"))?;
        let mut child = Command::new(&cli.toolgate)
            .arg("--config")
            .arg(config)
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or("toolgate has no pid")?;
        let stdout = child.stdout.take().ok_or("toolgate has no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let (mut addr, mut admin) = (String::new(), String::new());
        let read = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(a) = line.strip_prefix("listening on ") {
                    addr = a.to_owned();
                } else if let Some(a) = line.strip_prefix("admin listening on ") {
                    admin = a.to_owned();
                }
                if !addr.is_empty() && !admin.is_empty() {
                    break;
                }
            }
            Ok::<(), std::io::Error>(())
        })
        .await;
        if !matches!(read, Ok(Ok(()))) || addr.is_empty() || admin.is_empty() {
            return Err(format!(
                "toolgate did not announce its addresses; see {}",
                cli.work.join("toolgate.log").display()
            )
            .into());
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Gate {
            child,
            pid,
            addr,
            admin,
        })
    }
}

fn signal(pid: i32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// toolgate's child processes (from every thread's `children` list).
fn children(pid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return found;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            found.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    found
}

fn command_line(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
        .unwrap_or_default()
}

/// SIGKILLs toolgate's children running `script`; how many.
fn kill_children(gate: i32, script: &Path) -> u64 {
    let script = script.display().to_string();
    let mut killed = 0;
    for child in children(gate) {
        if command_line(child).contains(&script) {
            signal(child, rustix::process::Signal::KILL);
            killed += 1;
        }
    }
    killed
}

/// Processes anywhere on the machine running `script` (after toolgate is gone).
fn processes_running(script: &Path) -> Vec<i32> {
    let script = script.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let line = command_line(*pid);
            line.contains(&script) && !line.contains("--everything")
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// the HTTP tools

/// `/ok` answers `{"echo": <input>}`, `/fail` 503, `/hang` never. HTTP/1.1 with keep-alive, as
/// toolgate's pooled client speaks it.
async fn http_tools(listener: TcpListener) {
    while let Ok((socket, _)) = listener.accept().await {
        tokio::spawn(async move {
            let _ = serve_http(socket).await;
        });
    }
}

async fn serve_http(mut socket: TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if buf.len() > 64 * 1024 || socket.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let length = head
            .lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            if socket.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        }
        let body: Value =
            serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
        buf.drain(..head_end + length);
        let path = head.split_whitespace().nth(1).unwrap_or("/");
        let (status, text) = match path {
            "/ok" => ("200 OK", json!({"echo": body.get("input")}).to_string()),
            "/fail" => (
                "503 Service Unavailable",
                "unavailable on purpose".to_owned(),
            ),
            _ => {
                // Hangs until toolgate gives up and closes the connection.
                let mut rest = [0u8; 1024];
                while socket.read(&mut rest).await? > 0 {}
                return Ok(());
            }
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        socket.write_all(reply.as_bytes()).await?;
    }
}

// ---------------------------------------------------------------------------------------------
// the load

/// xorshift64: the workload's choices, reproducible from `--seed`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What a call runs, which decides the error classes its reply may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Echo,
    Worker,
    Mcp,
    HttpOk,
    HttpFail,
    HttpHang,
    /// `sleep` 400 ms under a 50 ms call timeout.
    SleepTimeout,
    /// `sleep` long enough for the client to leave or its deadline to pass.
    SleepLong,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Echo => "echo (built-in)",
            Kind::Worker => "py.word_count (worker, killed)",
            Kind::Mcp => "ev.echo (MCP stdio, killed)",
            Kind::HttpOk => "http_ok",
            Kind::HttpFail => "http_fail (503)",
            Kind::HttpHang => "http_hang (never answers)",
            Kind::SleepTimeout => "sleep past call_timeout",
            Kind::SleepLong => "sleep, client leaves",
        }
    }

    /// The classes a reply may have while its faults run.
    fn allows(self, class: pb::ErrorClass) -> bool {
        use pb::ErrorClass as C;
        match self {
            Kind::Echo | Kind::HttpOk => class == C::None,
            Kind::Worker | Kind::Mcp => {
                matches!(class, C::None | C::Transport | C::CircuitOpen | C::Timeout)
            }
            Kind::HttpFail => matches!(class, C::ToolError | C::CircuitOpen),
            Kind::HttpHang => matches!(class, C::Timeout | C::Transport | C::CircuitOpen),
            Kind::SleepTimeout => class == C::Timeout,
            Kind::SleepLong => matches!(class, C::None | C::Cancelled | C::Timeout),
        }
    }

    /// The text a successful reply's content must contain, when the tool echoes its input.
    fn echoes(self) -> bool {
        matches!(self, Kind::Echo | Kind::Mcp | Kind::HttpOk)
    }
}

/// One planned call.
struct Call {
    kind: Kind,
    id: String,
    token: String,
    element: Value,
}

/// The scenarios a task picks from, by weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Scenario {
    /// Eight built-in echo calls.
    Echo8,
    /// Echo, the worker, the MCP server and the HTTP tools in one batch.
    Mixed,
    /// A call past its `call_timeout` beside one that finishes.
    CallTimeout,
    /// A stream the client drops after its first event.
    Disconnect,
    /// A batch whose gRPC deadline passes while a call sleeps.
    Deadline,
}

impl Scenario {
    fn pick(rng: &mut Rng) -> Self {
        match rng.below(100) {
            0..60 => Scenario::Echo8,
            60..88 => Scenario::Mixed,
            88..92 => Scenario::CallTimeout,
            92..96 => Scenario::Disconnect,
            _ => Scenario::Deadline,
        }
    }

    /// The calls of one batch of this scenario; ids and tokens unique in the run.
    fn calls(self, rng: &mut Rng, task: usize, seq: u64) -> Vec<Call> {
        let mut kinds = Vec::new();
        match self {
            Scenario::Echo8 => kinds.extend([Kind::Echo; 8]),
            Scenario::Mixed => {
                kinds.extend([
                    Kind::Echo,
                    Kind::Worker,
                    Kind::Mcp,
                    Kind::HttpOk,
                    Kind::Echo,
                ]);
                if rng.below(4) == 0 {
                    kinds.push(Kind::HttpFail);
                }
                if rng.below(20) == 0 {
                    kinds.push(Kind::HttpHang);
                }
            }
            Scenario::CallTimeout => kinds.extend([Kind::SleepTimeout, Kind::Echo]),
            Scenario::Disconnect | Scenario::Deadline => {
                kinds.extend([Kind::Echo, Kind::SleepLong, Kind::Echo]);
            }
        }
        kinds
            .into_iter()
            .enumerate()
            .map(|(i, kind)| {
                let token = format!("t{task}-{seq}-{i}-{}", rng.below(1_000_000));
                let id = format!("c{task}-{seq}-{i}");
                Call {
                    kind,
                    element: element(kind, &id, &token, rng.next()),
                    id,
                    token,
                }
            })
            .collect()
    }

    /// The request for `calls`: a random mode and session, the scenario's deadlines; and
    /// whether it goes as unary `Dispatch` and runs PARALLEL.
    fn request(
        self,
        calls: &[Call],
        rng: &mut Rng,
    ) -> (tonic::Request<pb::DispatchBatchRequest>, bool, bool) {
        let session = if rng.below(2) == 0 {
            format!("soak-{}", rng.below(256))
        } else {
            String::new()
        };
        let parallel = self == Scenario::Disconnect || rng.below(2) == 0;
        let unary = !matches!(self, Scenario::Disconnect) && rng.below(2) == 0;
        let mut options = pb::DispatchOptions {
            mode: if parallel {
                pb::dispatch_options::Mode::Parallel as i32
            } else {
                pb::dispatch_options::Mode::Sequential as i32
            },
            ..Default::default()
        };
        if self == Scenario::CallTimeout {
            options.call_timeout = Some(prost_types::Duration {
                seconds: 0,
                nanos: 50_000_000,
            });
        }
        let body = pb::DispatchBatchRequest {
            session_id: session,
            calls: calls
                .iter()
                .map(|c| protojson::Value::from(c.element.clone()))
                .collect(),
            options: Some(options),
            ..Default::default()
        };
        let mut request = tonic::Request::new(body);
        if self == Scenario::Deadline {
            request.set_timeout(Duration::from_millis(50));
        }
        (request, unary, parallel)
    }
}

/// Counters shared by the client tasks.
#[derive(Default)]
struct Stats {
    sent: AtomicU64,
    batches: AtomicU64,
    /// Calls answered with a result in an OK reply.
    answered: AtomicU64,
    /// Calls of batches the client left on purpose.
    abandoned: AtomicU64,
    /// Calls of batches answered by an RPC status (deadlines, refusals at shutdown).
    by_status: AtomicU64,
    lost: AtomicU64,
    wrong: AtomicU64,
    in_flight: AtomicU64,
    classes: Mutex<BTreeMap<(Kind, i32), u64>>,
    statuses: Mutex<BTreeMap<(Scenario, When, String), u64>>,
    problems: Mutex<Vec<String>>,
    scenarios: Mutex<BTreeMap<Scenario, u64>>,
    /// Batch latencies in microseconds, by scenario.
    latencies: Mutex<BTreeMap<Scenario, Vec<u64>>>,
}

impl Stats {
    fn problem(&self, counter: &AtomicU64, calls: u64, text: String) {
        counter.fetch_add(calls, Ordering::Relaxed);
        let mut problems = self.problems.lock();
        if problems.len() < 30 {
            problems.push(text);
        }
    }
}

async fn drive(
    mut client: ToolGateClient<Channel>,
    mut rng: Rng,
    task: usize,
    stats: Arc<Stats>,
    phase: Arc<Phase>,
) {
    let mut seq: u64 = 0;
    while !phase.stop.load(Ordering::Relaxed) {
        seq += 1;
        let scenario = Scenario::pick(&mut rng);
        let calls = scenario.calls(&mut rng, task, seq);
        let (request, unary, parallel) = scenario.request(&calls, &mut rng);
        let n = calls.len() as u64;
        let shutting_down = phase.shutting_down.load(Ordering::Relaxed);
        stats.sent.fetch_add(n, Ordering::Relaxed);
        stats.batches.fetch_add(1, Ordering::Relaxed);
        *stats.scenarios.lock().entry(scenario).or_default() += 1;
        stats.in_flight.fetch_add(1, Ordering::Relaxed);
        let began = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(60),
            exchange(
                &mut client,
                request,
                unary,
                scenario == Scenario::Disconnect,
            ),
        )
        .await;
        stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        let micros = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
        stats
            .latencies
            .lock()
            .entry(scenario)
            .or_default()
            .push(micros);
        let context = format!("{scenario:?} unary={unary} parallel={parallel}");
        match answer {
            Err(_) => stats.problem(&stats.lost, n, format!("{context}: no answer in 60 s")),
            Ok(Answer::Left) => {
                stats.abandoned.fetch_add(n, Ordering::Relaxed);
            }
            Ok(Answer::Status { status, accepted }) => {
                let when = When::of(shutting_down, phase.shutting_down.load(Ordering::Relaxed));
                *stats
                    .statuses
                    .lock()
                    .entry((scenario, when, format!("{:?}", status.code())))
                    .or_default() += 1;
                let deadline = scenario == Scenario::Deadline
                    && matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled);
                // After the SIGTERM the server refuses new batches (a refused stream or
                // connection: UNAVAILABLE); one it had accepted must still be answered.
                let refused = !accepted
                    && match when {
                        When::Before => false,
                        When::Across => status.code() == Code::Unavailable,
                        When::After => true,
                    };
                if deadline || refused {
                    stats.by_status.fetch_add(n, Ordering::Relaxed);
                } else {
                    stats.problem(
                        &stats.lost,
                        n,
                        format!(
                            "{context} ({when:?} the SIGTERM): status {:?} {} (accepted: {accepted})",
                            status.code(),
                            status.message()
                        ),
                    );
                }
                if when != When::Before {
                    // The server is going away: do not spin on refusals.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Ok(Answer::Result(result)) => check(
                &stats,
                &calls,
                &result,
                scenario,
                late_or(&phase, shutting_down),
                &context,
            ),
            Ok(Answer::Broken(why)) => stats.problem(&stats.lost, n, format!("{context}: {why}")),
        }
    }
}

/// When a batch ran, relative to the SIGTERM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum When {
    /// Started and answered before.
    Before,
    /// Started before, answered after.
    Across,
    /// Started after.
    After,
}

impl When {
    fn of(at_start: bool, at_end: bool) -> Self {
        match (at_start, at_end) {
            (true, _) => When::After,
            (false, true) => When::Across,
            (false, false) => When::Before,
        }
    }
}

fn late_or(phase: &Phase, shutting_down: bool) -> bool {
    shutting_down || phase.shutting_down.load(Ordering::Relaxed)
}

/// The call element in one of the shapes models send.
fn element(kind: Kind, id: &str, token: &str, variant: u64) -> Value {
    let (name, arguments) = match kind {
        Kind::Echo => ("echo", json!({"text": token})),
        Kind::Worker => ("py.word_count", json!({"text": format!("soak {token}")})),
        Kind::Mcp => ("ev.echo", json!({"message": token})),
        Kind::HttpOk => ("http_ok", json!({"text": token})),
        Kind::HttpFail => ("http_fail", json!({"text": token})),
        Kind::HttpHang => ("http_hang", json!({"text": token})),
        // `sleep` takes nothing else; the varied length keeps loop detection quiet.
        Kind::SleepTimeout => ("sleep", json!({"ms": 400 + variant % 1000})),
        Kind::SleepLong => ("sleep", json!({"ms": 300 + variant % 200})),
    };
    match variant % 3 {
        0 => json!({"id": id, "name": name, "arguments": arguments}),
        1 => json!({
            "id": id,
            "type": "function",
            "function": {"name": name, "arguments": arguments.to_string()}
        }),
        _ => json!({"type": "tool_use", "id": id, "name": name, "input": arguments}),
    }
}

/// How a batch ended, as the client saw it.
enum Answer {
    Result(pb::BatchResult),
    /// An RPC status; `accepted` when a stream had delivered events first.
    Status {
        status: tonic::Status,
        accepted: bool,
    },
    /// The client dropped the stream on purpose.
    Left,
    /// A stream that broke the protocol (no result, two results, events after it).
    Broken(String),
}

async fn exchange(
    client: &mut ToolGateClient<Channel>,
    request: tonic::Request<pb::DispatchBatchRequest>,
    unary: bool,
    leave: bool,
) -> Answer {
    if unary {
        return match client.dispatch(request).await {
            Ok(reply) => Answer::Result(reply.into_inner()),
            Err(status) => Answer::Status {
                status,
                accepted: false,
            },
        };
    }
    let mut stream = match client.dispatch_batch(request).await {
        Ok(reply) => reply.into_inner(),
        Err(status) => {
            return Answer::Status {
                status,
                accepted: false,
            };
        }
    };
    let mut events = 0;
    let mut result = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                events += 1;
                if leave {
                    return Answer::Left;
                }
                if result.is_some() {
                    return Answer::Broken("an event after the result".to_owned());
                }
                if let Some(pb::dispatch_event::Event::Result(r)) = event.event {
                    result = Some(r);
                }
            }
            Err(status) => {
                return Answer::Status {
                    status,
                    accepted: events > 0,
                };
            }
        }
    }
    match result {
        Some(result) => Answer::Result(result),
        None => Answer::Broken(format!(
            "the stream ended after {events} events without a result"
        )),
    }
}

/// Checks one OK reply against the calls sent.
fn check(
    stats: &Stats,
    calls: &[Call],
    result: &pb::BatchResult,
    scenario: Scenario,
    late: bool,
    context: &str,
) {
    let n = calls.len() as u64;
    if result.results.len() != calls.len() || result.count as usize != calls.len() {
        stats.problem(
            &stats.lost,
            n.abs_diff(result.results.len() as u64).max(1),
            format!(
                "{context}: {} results for {} calls",
                result.results.len(),
                calls.len()
            ),
        );
        return;
    }
    let completed = result.outcome == pb::batch_result::Outcome::Completed as i32;
    for (i, (call, r)) in calls.iter().zip(&result.results).enumerate() {
        if r.index as usize != i || r.id != call.id {
            stats.problem(
                &stats.wrong,
                1,
                format!(
                    "{context}: result {i} is index {} id {} for call {}",
                    r.index, r.id, call.id
                ),
            );
            continue;
        }
        let class = pb::ErrorClass::try_from(r.error_class).unwrap_or(pb::ErrorClass::None);
        *stats
            .classes
            .lock()
            .entry((call.kind, r.error_class))
            .or_default() += 1;
        stats.answered.fetch_add(1, Ordering::Relaxed);
        let allowed = call.kind.allows(class)
            // A batch ended early skips the calls it had not started.
            || (class == pb::ErrorClass::Skipped && !completed)
            // The gRPC deadline or the shutdown cancels what still runs.
            || (class == pb::ErrorClass::Cancelled && (late || scenario == Scenario::Deadline));
        if !allowed {
            stats.problem(
                &stats.wrong,
                1,
                format!(
                    "{context}: {} got {class:?}: {}",
                    call.kind.label(),
                    r.error
                ),
            );
        } else if r.success != (class == pb::ErrorClass::None) {
            stats.problem(
                &stats.wrong,
                1,
                format!("{context}: success {} with {class:?}", r.success),
            );
        } else if r.success && call.kind.echoes() && !r.content.contains(&call.token) {
            stats.problem(
                &stats.wrong,
                1,
                format!(
                    "{context}: {} answered another call's content: {}",
                    call.kind.label(),
                    r.content
                ),
            );
        }
    }
    for call in calls {
        if !result.by_id.contains_key(&call.id) {
            stats.problem(
                &stats.wrong,
                1,
                format!("{context}: by_id lacks {}", call.id),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// samples and the report

/// toolgate's resources at one moment.
struct Sample {
    at: f64,
    calls_per_s: u64,
    rss: Option<f64>,
    fds: Option<f64>,
    tasks: Option<f64>,
    children: usize,
}

impl Sample {
    async fn take(gate: &Gate, at: f64, calls_per_s: u64) -> Self {
        let metrics = scrape(&gate.admin).await.unwrap_or_default();
        Sample {
            at,
            calls_per_s,
            rss: gauge(&metrics, "process_resident_memory_bytes"),
            fds: gauge(&metrics, "process_open_fds"),
            tasks: gauge(&metrics, "toolgate_runtime_tasks"),
            children: children(gate.pid).len(),
        }
    }
}

/// The admin listener's `/metrics` text.
async fn scrape(admin: &str) -> Result<String, BoxError> {
    let mut socket = TcpStream::connect(admin).await?;
    socket
        .write_all(format!("GET /metrics HTTP/1.0\r\nhost: {admin}\r\n\r\n").as_bytes())
        .await?;
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(5), socket.read_to_string(&mut text)).await??;
    Ok(text)
}

/// The value of an unlabelled gauge (or of its first series).
fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            return None;
        }
        rest.rsplit(' ').next()?.parse().ok()
    })
}

struct Report<'a> {
    cli: &'a Cli,
    stats: &'a Stats,
    faults: &'a Faults,
    samples: &'a [Sample],
    load_seconds: f64,
    sent_before_sigterm: u64,
    in_flight_at_sigterm: u64,
    exit: Option<std::process::ExitStatus>,
    exited_after: f64,
    survivors: Vec<i32>,
    /// Lines of toolgate's log that mention a panic.
    panics: usize,
}

/// Prints the report; whether the run passed.
fn write_report(r: Report<'_>) -> bool {
    let s = r.stats;
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let (sent, answered, abandoned, by_status) = (
        load(&s.sent),
        load(&s.answered),
        load(&s.abandoned),
        load(&s.by_status),
    );
    let (lost, wrong) = (load(&s.lost), load(&s.wrong));
    let unaccounted = sent.saturating_sub(answered + abandoned + by_status + lost + wrong);
    let exit_ok = r.exit.is_some_and(|status| status.success());
    let passed = lost == 0
        && wrong == 0
        && unaccounted == 0
        && exit_ok
        && r.survivors.is_empty()
        && r.panics == 0;

    report(&format!(
        "## Soak: {} s of load, {} client tasks over {} connections, then SIGTERM\n",
        r.cli.seconds, r.cli.concurrency, r.cli.connections
    ));
    report(&format!(
        "- faults: worker SIGKILLed {} times (restarted 1 s later), MCP server SIGKILLed {} times \
         ({} kills found no server: toolgate was still respawning it); HTTP 503s and hangs, \
         clients leaving mid-stream, gRPC deadlines and call timeouts by scenario",
        r.faults.worker_kills, r.faults.mcp_kills, r.faults.mcp_absent
    ));
    report(&format!(
        "- batches: {} ({})",
        load(&s.batches),
        s.scenarios
            .lock()
            .iter()
            .map(|(k, v)| format!("{k:?} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    report(&format!(
        "- calls/s over the load: {:.0} answered, {:.0} sent\n",
        answered as f64 / r.load_seconds,
        r.sent_before_sigterm as f64 / r.load_seconds
    ));
    report("| Calls | Count |\n| --- | ---: |");
    report(&format!(
        "| sent | {sent} ({} after the SIGTERM) |",
        sent - r.sent_before_sigterm
    ));
    report(&format!("| answered with a result, checked | {answered} |"));
    report(&format!(
        "| in batches the client left on purpose | {abandoned} |"
    ));
    report(&format!(
        "| in batches answered by an RPC status (deadlines; refusals after SIGTERM) | {by_status} |"
    ));
    report(&format!(
        "| **lost** (accepted and not answered, or no answer) | **{lost}** |"
    ));
    report(&format!(
        "| wrong (order, id, class or content) | {wrong} |"
    ));
    report(&format!("| unaccounted | {unaccounted} |\n"));

    report("| Tool | Class | Results |\n| --- | --- | ---: |");
    for ((kind, class), count) in s.classes.lock().iter() {
        let class = pb::ErrorClass::try_from(*class)
            .map(|c| c.as_str_name())
            .unwrap_or("?");
        report(&format!("| {} | {class} | {count} |", kind.label()));
    }
    report(
        "\n| Scenario | Batches | p50 (ms) | p99 (ms) | max (ms) |\n| --- | ---: | ---: | ---: | ---: |",
    );
    for (scenario, latencies) in s.latencies.lock().iter_mut() {
        latencies.sort_unstable();
        let at = |q: f64| {
            let i = ((latencies.len() as f64 - 1.0) * q).round() as usize;
            latencies.get(i).map_or(0.0, |&us| us as f64 / 1000.0)
        };
        report(&format!(
            "| {scenario:?} | {} | {:.1} | {:.1} | {:.1} |",
            latencies.len(),
            at(0.5),
            at(0.99),
            at(1.0)
        ));
    }
    report("\n| Scenario | Ran (SIGTERM) | RPC status | Batches |\n| --- | --- | --- | ---: |");
    for ((scenario, when, code), count) in s.statuses.lock().iter() {
        report(&format!("| {scenario:?} | {when:?} | {code} | {count} |"));
    }
    report("\n| t (s) | calls/s | RSS (MiB) | open fds | live tasks | child processes |");
    report("| ---: | ---: | ---: | ---: | ---: | ---: |");
    let mib = |v: Option<f64>| v.map_or("?".to_owned(), |v| format!("{:.1}", v / 1048576.0));
    let num = |v: Option<f64>| v.map_or("?".to_owned(), |v| format!("{v:.0}"));
    for sample in r.samples {
        report(&format!(
            "| {:.0} | {} | {} | {} | {} | {} |",
            sample.at,
            sample.calls_per_s,
            mib(sample.rss),
            num(sample.fds),
            num(sample.tasks),
            sample.children
        ));
    }
    report(&format!(
        "\n- SIGTERM with {} batches in flight; toolgate exited {} after {:.1} s; MCP server \
         processes left: {}; log lines about a panic: {}",
        r.in_flight_at_sigterm,
        r.exit
            .map_or("(killed: no exit within 60 s)".to_owned(), |status| status
                .to_string()),
        r.exited_after,
        r.survivors.len(),
        r.panics
    ));
    let problems = s.problems.lock();
    if !problems.is_empty() {
        report("\nProblems (first 30):");
        for p in problems.iter() {
            report(&format!("- {p}"));
        }
    }
    report(&format!(
        "\n**{}**",
        if passed { "PASSED" } else { "FAILED" }
    ));
    passed
}
