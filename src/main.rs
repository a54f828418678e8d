//! The `toolgate` binary: parse the command line and config, start logging, serve until a signal.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use toolgate::config::Config;

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
}

#[derive(clap::Args, Clone, Default)]
struct ServeArgs {
    /// Address to listen on, e.g. 127.0.0.1:50051 (port 0 = any free port).
    #[arg(long, env = "TOOLGATE_LISTEN")]
    listen: Option<String>,
    /// TOML config file; its keys override the embedded default.
    #[arg(long, env = "TOOLGATE_CONFIG")]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::CheckConfig { file }) => check_config(&file),
        Some(Command::Serve(args)) => serve(args),
        None => serve(cli.serve),
    }
}

fn check_config(file: &std::path::Path) -> ExitCode {
    match Config::load(Some(file), std::env::vars()) {
        Ok(_) => {
            report(&format!("{}: ok", file.display()));
            ExitCode::SUCCESS
        }
        Err(e) => {
            report_error(&format!("{}: {e}", file.display()));
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let mut config = match Config::load(args.config.as_deref(), std::env::vars()) {
        Ok(config) => config,
        Err(e) => {
            report_error(&e.to_string());
            return ExitCode::FAILURE;
        }
    };
    if let Some(listen) = args.listen {
        config.server.listen = listen;
    }
    if let Err(e) = config.validate() {
        report_error(&e.to_string());
        return ExitCode::FAILURE;
    }
    if let Err(e) = toolgate::telemetry::init(&config.log) {
        report_error(&e.to_string());
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            report_error(&format!("cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "server failed");
            report_error(&format!("error: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> anyhow::Result<()> {
    let server = toolgate::Server::new(config).start().await?;
    report(&format!("listening on {}", server.local_addr()));
    let handle = server.shutdown_handle();
    tokio::spawn(async move {
        wait_for_signal().await;
        handle.shutdown();
    });
    server.wait().await?;
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(term) => term,
            Err(e) => {
                tracing::warn!(error = %e, "sigterm handler unavailable; only ctrl-c stops the server");
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// The one stdout line scripts wait for (`listening on <addr>`) and check-config's verdict.
#[allow(clippy::print_stdout)]
fn report(line: &str) {
    println!("{line}");
}

#[allow(clippy::print_stderr)]
fn report_error(text: &str) {
    eprintln!("{text}");
}
