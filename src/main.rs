//! The `toolgate` binary: parse the command line and config, start logging, serve until a signal;
//! or check a config file, or ask a running server's health once.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use toolgate::config::Config;
use toolgate::grpc::probe;
use toolgate_core::middleware::Redactor;

// Every request allocates many small, short-lived objects (protobuf values, JSON, strings) across
// worker threads, which glibc's malloc handles poorly (BENCHMARKS.md §18).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A gRPC tool-execution service for LLM agents.
#[derive(Parser)]
#[command(name = "toolgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (the default command).
    Serve(ServeArgs),
    /// Validate a config file without serving; lists every problem.
    CheckConfig {
        /// The TOML file to check (environment overrides apply too).
        file: PathBuf,
    },
    /// Ask a running server's grpc.health.v1 Check once: exit 0 when SERVING, 1 otherwise
    /// (nothing listening, NOT_SERVING, no answer in time). The container image's health check.
    Health(HealthArgs),
    /// Serve MCP over stdin and stdout, for MCP clients that launch a command (Claude Desktop):
    /// with an engine in this process (`--config`), or bridged to a running toolgate over gRPC
    /// (`--connect`), whose sessions, approvals and identities then apply. Logs go to stderr.
    Mcp(McpArgs),
    /// List, watch, approve or deny the pending approvals of a running server (calls that a hook
    /// or permission rule asked about, in batches with interactive approvals).
    Approvals(ApprovalsArgs),
}

#[derive(clap::Args)]
struct McpArgs {
    /// TOML config file of the engine in this process (its keys override the embedded
    /// default); ignored with --connect.
    #[arg(long, env = "TOOLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// A running toolgate to bridge to, host:port (its gRPC listener).
    #[arg(long)]
    connect: Option<String>,
    /// With --connect: an environment variable holding the bearer token to send.
    #[arg(long)]
    token_env: Option<String>,
    /// With --connect: PEM CA certificates that verify the server; turns TLS on.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// With --connect: the name the server's certificate must carry (default: the host).
    #[arg(long)]
    tls_server_name: Option<String>,
    /// With --connect: the toolgate session the calls run in (default: one per bridge run).
    #[arg(long)]
    session: Option<String>,
    /// Log format on stderr.
    #[arg(long, value_enum)]
    log_format: Option<LogFormatArg>,
}

#[derive(clap::Args)]
struct ApprovalsArgs {
    #[command(subcommand)]
    action: ApprovalsAction,
    /// The server, host:port.
    #[arg(long, global = true, default_value = "127.0.0.1:50051")]
    addr: String,
    /// An environment variable holding the bearer token to send (the identity must have sent
    /// the batch, or have the approver or admin role in its tenant).
    #[arg(long, global = true)]
    token_env: Option<String>,
    /// PEM CA certificates that verify the server; turns TLS on.
    #[arg(long, global = true)]
    tls_ca: Option<PathBuf>,
    /// A PEM client certificate for mTLS (with --tls-key); turns TLS on.
    #[arg(long, global = true)]
    tls_cert: Option<PathBuf>,
    /// The client certificate's PEM key.
    #[arg(long, global = true)]
    tls_key: Option<PathBuf>,
    /// The name the server's certificate must carry (default: the address's host).
    #[arg(long, global = true)]
    tls_server_name: Option<String>,
    /// How long to wait for the connection, e.g. 3s.
    #[arg(long, global = true, default_value = "5s", value_parser = toolgate_core::duration::parse)]
    timeout: std::time::Duration,
}

#[derive(Subcommand)]
enum ApprovalsAction {
    /// The pending approvals this identity may answer.
    List {
        /// Only this session's.
        #[arg(long)]
        session: Option<String>,
    },
    /// The pending approvals, then each new one and each that ends, until interrupted.
    Watch {
        /// Only this session's.
        #[arg(long)]
        session: Option<String>,
    },
    /// Let the call run.
    Approve {
        /// The approval id (from list or watch).
        id: String,
        /// Why, for the audit log.
        #[arg(long, default_value = "")]
        reason: String,
        /// Run the call with these arguments instead (a JSON object).
        #[arg(long)]
        arguments: Option<String>,
        /// Answer later asks of the same rule about the same tool in this session the same way.
        #[arg(long)]
        remember_session: bool,
    },
    /// Refuse the call; the model reads the reason.
    Deny {
        /// The approval id (from list or watch).
        id: String,
        /// Why; the model reads it.
        #[arg(long, default_value = "")]
        reason: String,
        /// Deny later asks of the same rule about the same tool in this session too.
        #[arg(long)]
        remember_session: bool,
    },
}

#[derive(clap::Args)]
struct HealthArgs {
    /// Address to ask, e.g. 127.0.0.1:50051; by default the configured server.listen, asked on
    /// loopback when it is 0.0.0.0 or [::].
    #[arg(long)]
    addr: Option<String>,
    /// Service to ask about: "" (the whole server) or toolgate.v1.ToolGate, which also says
    /// NOT_SERVING while the server is overloaded.
    #[arg(long, default_value = "")]
    service: String,
    /// How long to wait for the answer, e.g. 3s or 500ms.
    #[arg(long, default_value = "3s", value_parser = toolgate_core::duration::parse)]
    timeout: std::time::Duration,
    /// TOML config file to read server.listen from (environment overrides apply too).
    #[arg(long, env = "TOOLGATE_CONFIG")]
    config: Option<PathBuf>,
}

#[derive(clap::Args, Clone, Default)]
struct ServeArgs {
    /// Address to listen on, e.g. 127.0.0.1:50051 (port 0 = any free port).
    #[arg(long, env = "TOOLGATE_LISTEN")]
    listen: Option<String>,
    /// Address of the admin HTTP listener (/metrics, /livez, /readyz), e.g. 127.0.0.1:9464;
    /// port 0 = any free port, empty = off.
    #[arg(long)]
    admin_listen: Option<String>,
    /// Address of the MCP listener (streamable HTTP), e.g. 127.0.0.1:8765; port 0 = any free
    /// port, empty = off (the default).
    #[arg(long)]
    mcp_listen: Option<String>,
    /// TOML config file; its keys override the embedded default.
    #[arg(long, env = "TOOLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Log format: `text` for people, `json` (one object per line) for log shippers.
    #[arg(long, value_enum)]
    log_format: Option<LogFormatArg>,
}

#[derive(clap::ValueEnum, Clone, Copy)]
enum LogFormatArg {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::CheckConfig { file }) => check_config(&file),
        Some(Command::Health(args)) => health(args),
        Some(Command::Approvals(args)) => approvals(args),
        Some(Command::Mcp(args)) => mcp(args),
        Some(Command::Serve(args)) => serve(args),
        None => serve(cli.serve),
    }
}

fn check_config(file: &std::path::Path) -> ExitCode {
    match Config::load(Some(file), std::env::vars()) {
        Ok(config) => {
            for warning in config.warnings() {
                report(&format!("{}: warning: {warning}", file.display()));
            }
            report(&format!("{}: ok", file.display()));
            ExitCode::SUCCESS
        }
        Err(e) => {
            report_error(&format!("{}: {e}", file.display()));
            ExitCode::FAILURE
        }
    }
}

fn health(args: HealthArgs) -> ExitCode {
    let addr = match args.addr {
        Some(addr) => addr,
        None => match Config::load(args.config.as_deref(), std::env::vars()) {
            // The probe speaks plaintext; a TLS listener would fail it for the wrong reason.
            Ok(config) if config.tls.enabled() => {
                report_error(&format!(
                    "{}: serves TLS, and toolgate health speaks plaintext: probe GET /livez on the admin listener instead",
                    config.server.listen
                ));
                return ExitCode::FAILURE;
            }
            Ok(config) => probe::local_target(config.server.listen).to_string(),
            Err(e) => {
                report_error(&e.to_string());
                return ExitCode::FAILURE;
            }
        },
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            report_error(&format!("cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let health = runtime.block_on(probe::check(&addr, &args.service, args.timeout));
    if health.is_serving() {
        report(&format!("{addr}: {health}"));
        ExitCode::SUCCESS
    } else {
        report_error(&format!("{addr}: {health}"));
        ExitCode::FAILURE
    }
}

fn approvals(args: ApprovalsArgs) -> ExitCode {
    use toolgate::grpc::cli::{Action, Target};
    let target = Target {
        addr: args.addr,
        token_env: args.token_env,
        tls_ca: args.tls_ca,
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
        tls_server_name: args.tls_server_name,
        timeout: args.timeout,
    };
    let action = match args.action {
        ApprovalsAction::List { session } => Action::List { session },
        ApprovalsAction::Watch { session } => Action::Watch { session },
        ApprovalsAction::Approve {
            id,
            reason,
            arguments,
            remember_session,
        } => Action::Resolve {
            id,
            approve: true,
            reason,
            arguments,
            remember_session,
        },
        ApprovalsAction::Deny {
            id,
            reason,
            remember_session,
        } => Action::Resolve {
            id,
            approve: false,
            reason,
            arguments: None,
            remember_session,
        },
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            report_error(&format!("cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(toolgate::grpc::cli::run(&target, action, &mut |line| {
        report(line)
    })) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report_error(&e.to_string());
            ExitCode::FAILURE
        }
    }
}

fn mcp(args: McpArgs) -> ExitCode {
    let mut vars: Vec<(String, String)> = std::env::vars().collect();
    if let Some(format) = args.log_format {
        let format = match format {
            LogFormatArg::Text => "text",
            LogFormatArg::Json => "json",
        };
        vars.retain(|(name, _)| name != "TOOLGATE_LOG__FORMAT");
        vars.push(("TOOLGATE_LOG__FORMAT".to_owned(), format.to_owned()));
    }
    let config_file = if args.connect.is_some() {
        None
    } else {
        args.config.as_deref()
    };
    let (config, runtime) = match start(config_file, vars) {
        Ok(started) => started,
        Err(code) => return code,
    };
    let outcome: anyhow::Result<()> = runtime.block_on(async {
        match args.connect {
            Some(addr) => {
                let target = toolgate::grpc::cli::Target {
                    addr,
                    token_env: args.token_env,
                    tls_ca: args.ca_file,
                    tls_server_name: args.tls_server_name,
                    timeout: std::time::Duration::from_secs(10),
                    ..Default::default()
                };
                Ok(toolgate::bridge::serve_stdio(target, args.session).await?)
            }
            None => Ok(toolgate::Server::new(config).serve_mcp_stdio().await?),
        }
    });
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report_error(&format!("error: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// What `serve` and `mcp` start with: the config (`file`, then `vars` over it), logging as it
/// says (config warnings logged), and the async runtime; the exit code when one of them fails.
fn start(
    file: Option<&std::path::Path>,
    vars: Vec<(String, String)>,
) -> Result<(Config, tokio::runtime::Runtime), ExitCode> {
    let config = Config::load(file, vars).map_err(|e| {
        report_error(&e.to_string());
        ExitCode::FAILURE
    })?;
    // A pattern that does not compile stops the start later, with the problem named.
    let redactor = config
        .redaction
        .redactor()
        .unwrap_or_else(|_| Redactor::disabled());
    toolgate::telemetry::init(&config.log, redactor).map_err(|e| {
        report_error(&e.to_string());
        ExitCode::FAILURE
    })?;
    for warning in config.warnings() {
        tracing::warn!(%warning, "config warning");
    }
    let runtime = tokio::runtime::Runtime::new().map_err(|e| {
        report_error(&format!("cannot start the async runtime: {e}"));
        ExitCode::FAILURE
    })?;
    Ok((config, runtime))
}

fn serve(args: ServeArgs) -> ExitCode {
    // The command line's settings go in as the last overrides, so one validation covers them.
    let (config, runtime) = match start(args.config.as_deref(), overrides(&args)) {
        Ok(started) => started,
        Err(code) => return code,
    };
    let outcome = runtime.block_on(run(config));
    // The server has drained by now; what is left are idle blocking-pool threads (and any work a
    // drain gave up on), which dropping the runtime would wait for. Exit now instead.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "server failed");
            // Every error's text already holds its causes' (`source()` is for code that walks
            // them), so the outermost is printed alone.
            report_error(&format!("error: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// The environment with the command line's settings added as `TOOLGATE_*` variables that win.
fn overrides(args: &ServeArgs) -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = std::env::vars().collect();
    let mut set = |names: &[&str], value: &str| {
        vars.retain(|(name, _)| !names.contains(&name.as_str()));
        vars.push((names[0].to_owned(), value.to_owned()));
    };
    if let Some(listen) = &args.listen {
        set(&["TOOLGATE_SERVER__LISTEN", "TOOLGATE_LISTEN"], listen);
    }
    if let Some(admin) = &args.admin_listen {
        set(&["TOOLGATE_ADMIN__LISTEN"], admin);
    }
    if let Some(mcp) = &args.mcp_listen {
        set(&["TOOLGATE_MCP__LISTEN"], mcp);
    }
    if let Some(format) = args.log_format {
        let format = match format {
            LogFormatArg::Text => "text",
            LogFormatArg::Json => "json",
        };
        set(&["TOOLGATE_LOG__FORMAT"], format);
    }
    vars
}

async fn run(config: Config) -> anyhow::Result<()> {
    // Handlers are installed before the address is announced: a SIGTERM sent as soon as
    // `listening on` appears must start a graceful shutdown, not kill the process.
    let signals = Signals::install()?;
    let server = toolgate::Server::new(config).start().await?;
    report(&format!("listening on {}", server.local_addr()));
    if let Some(admin) = server.admin_addr() {
        report(&format!("admin listening on {admin}"));
    }
    if let Some(mcp) = server.mcp_addr() {
        report(&format!("mcp listening on {mcp}"));
    }
    let handle = server.shutdown_handle();
    tokio::spawn(async move {
        signals.wait().await;
        handle.shutdown();
    });
    server.wait().await?;
    tracing::info!("stopped");
    Ok(())
}

/// SIGINT and SIGTERM, registered eagerly.
struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    async fn wait(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The stdout lines scripts wait for (`listening on <addr>`, `admin listening on <addr>`) and
/// check-config's verdict. A reader that closed stdout after the line it wanted must not take the
/// server down, so a failed write is ignored (`println!` would panic).
fn report(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

#[allow(clippy::print_stderr)]
fn report_error(text: &str) {
    eprintln!("{text}");
}
