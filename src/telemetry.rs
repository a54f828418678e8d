//! Logging: a tracing subscriber writing text or JSON to stderr (stdout is kept for the
//! `listening on` line), every line redacted and stamped with the trace and span id it was
//! logged in, and a panic hook that logs panics instead of printing them raw; and the export
//! pipelines for metrics (`metrics`) and traces (`traces`). Spans are made through
//! `toolgate_core::trace` and instruments live in `toolgate_core::metrics`, below every layer that records.

pub mod metrics;
pub mod traces;

use std::io::IsTerminal;
use std::sync::Arc;

use opentelemetry_sdk::Resource;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use toolgate_core::middleware::Redactor;

use crate::config::{LogConfig, LogFormat, log_filter};

/// `level` with the MCP library's per-session chatter (`client initialized`, each notification)
/// kept to warnings, unless a directive names it.
fn with_quiet_libraries(level: &str) -> String {
    if level.contains("rmcp") {
        level.to_owned()
    } else {
        format!("{level},rmcp=warn")
    }
}

/// An OTLP exporter that could not be built (an endpoint it cannot use).
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    #[error("telemetry: the OTLP metrics exporter could not be built: {0}")]
    Metrics(#[source] opentelemetry_otlp::ExporterBuildError),
    #[error("telemetry: the OTLP span exporter could not be built: {0}")]
    Spans(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// Installs the global subscriber; `RUST_LOG` wins over the configured level. Every line is
/// passed through `redactor` (a hook's stderr or a remote's error may carry a secret), and a
/// line logged inside a span (an RPC, a batch, a tool execution) ends with its trace and span id.
pub fn init(log: &LogConfig, redactor: Redactor) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => log_filter(&directives),
        _ => log_filter(&with_quiet_libraries(&log.level)),
    }
    .map_err(|e| anyhow::anyhow!("log filter: {e}"))?;
    // Colour codes only for a person at a terminal: in a file or a log shipper they are noise.
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let redactor = Arc::new(redactor);
    let installed = match log.format {
        LogFormat::Text => builder
            .event_format(Correlated {
                inner: Format::default().with_ansi(ansi),
                redactor,
                json: false,
            })
            .try_init(),
        LogFormat::Json => builder
            .json()
            .event_format(Correlated {
                inner: Format::default().json(),
                redactor,
                json: true,
            })
            .try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("logging could not start: {e}"))?;
    // Tool panics are caught and answered as results; log them as structured events.
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(ToString::to_string).unwrap_or_default();
        tracing::error!(%location, panic = %info, "panic");
    }));
    Ok(())
}

/// An event format that formats with `inner`, redacts the line, and appends the current span's
/// trace and span id (as `trace_id=… span_id=…`, or as JSON members).
struct Correlated<F> {
    inner: F,
    redactor: Arc<Redactor>,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for Correlated<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let line = self.redactor.redact(&line);
        let body = line.trim_end_matches('\n');
        // A request's ids and texts reach text lines as they came: a newline in a call id must
        // not forge a line. (JSON escapes them; escape codes in fields are already escaped.)
        let escaped;
        let body = if !self.json && body.chars().any(forges_lines) {
            escaped = escape_controls(body);
            escaped.as_str()
        } else {
            body
        };
        let Some((trace_id, span_id)) = toolgate_core::trace::current_ids() else {
            return writeln!(writer, "{body}");
        };
        match body.strip_suffix('}') {
            Some(open) if self.json => {
                writeln!(
                    writer,
                    r#"{open},"trace_id":"{trace_id}","span_id":"{span_id}"}}"#
                )
            }
            _ => writeln!(writer, "{body} trace_id={trace_id} span_id={span_id}"),
        }
    }
}

/// Control characters that could forge or hide a text log line (escape, which colours use,
/// is left to the formatter, which escapes it in field values).
fn forges_lines(c: char) -> bool {
    c.is_control() && c != '\x1b'
}

/// `body` with every line-forging character written as an escape (`\n`, `\r`, `\u{7}`).
fn escape_controls(body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 8);
    for c in body.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if forges_lines(c) => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    out
}

/// The resource every export carries: `service.name` (`OTEL_SERVICE_NAME` wins over the
/// config) and `OTEL_RESOURCE_ATTRIBUTES`.
fn resource(service_name: &str) -> Resource {
    let builder = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty()) {
        builder.build()
    } else {
        builder.with_service_name(service_name.to_owned()).build()
    }
}

/// An OTLP/gRPC exporter builder with gzip, the export timeout and the collector (when the config
/// names one; otherwise the exporter reads the standard `OTEL_EXPORTER_OTLP_*` variables).
fn otlp<B>(builder: B, endpoint: Option<&String>, timeout: std::time::Duration) -> B
where
    B: opentelemetry_otlp::WithExportConfig + opentelemetry_otlp::WithTonicConfig,
{
    let builder = builder
        .with_compression(opentelemetry_otlp::Compression::Gzip)
        .with_timeout(timeout);
    match endpoint {
        Some(endpoint) => builder.with_endpoint(endpoint.clone()),
        None => builder,
    }
}

/// An error and its causes on one line: a transport error's own text (tonic's "transport
/// error", reqwest's "error sending request") hides why.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
