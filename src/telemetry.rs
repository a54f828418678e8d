//! Logging: a tracing subscriber writing text or JSON to stderr (stdout is kept for the
//! `listening on` line), and a panic hook that logs panics instead of printing them raw; and the
//! metrics pipeline (`metrics`). The trace context itself lives in `trace`, and the instruments
//! in `crate::metrics`, below every layer that records into them.

pub mod metrics;

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Installs the global subscriber; `RUST_LOG` wins over the configured level.
pub fn init(log: &LogConfig) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::try_new(directives)?,
        _ => EnvFilter::try_new(&log.level)?,
    };
    // Colour codes only for a person at a terminal: in a file or a log shipper they are noise.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let installed = match log.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("logging could not start: {e}"))?;
    // Tool panics are caught and answered as results; log them as structured events.
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(ToString::to_string).unwrap_or_default();
        tracing::error!(%location, panic = %info, "panic");
    }));
    Ok(())
}
