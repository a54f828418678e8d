//! `[log]`, `[admin]` and `[telemetry]`: logs, the admin listener, and OTLP export.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use super::parse;
use toolgate_core::duration;

/// `[log]`: the log filter and format.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A level or tracing directives (`log_filter`); `RUST_LOG` wins.
    pub level: String,
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// For people.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// The log filter of `directives` (`log.level`, or `RUST_LOG`). A field value in a directive
/// (`target[span{field=value}]=level`) matches as plain text, not as a regular expression:
/// tracing-subscriber builds a full DFA for such a pattern, which took seconds for a 366-byte
/// value the config fuzzer found (and grows exponentially with it).
pub fn log_filter(directives: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    tracing_subscriber::EnvFilter::builder()
        .with_regex(false)
        .parse(directives)
        .map_err(|e| e.to_string())
}

/// `[admin]`: the admin HTTP listener (`/metrics`, `/livez`, `/readyz`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Its address; `None` (`""` in the file) turns it off.
    #[serde(deserialize_with = "parse::admin_listen")]
    pub listen: Option<SocketAddr>,
    /// Serve it over TLS, with `[tls]`'s certificate and key (reloaded with them).
    pub tls: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 9464))),
            tls: false,
        }
    }
}

/// `[console]`: the web console on the admin listener (`/console/`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Serve it.
    pub enabled: bool,
    /// How long a sign-in lasts.
    #[serde(with = "toolgate_core::duration")]
    pub session_ttl: std::time::Duration,
    /// Sign-ins held at once; past it the oldest ends.
    pub max_sessions: usize,
    /// `Host` values (names or `host:port`) the console answers, against DNS rebinding; `["*"]`
    /// any (behind a proxy that checks it).
    pub allowed_hosts: Vec<String>,
    /// Keep the recent batches and their events for the Batches page: every batch then builds
    /// its events, whether its front wants them or not (BENCHMARKS.md prices it).
    pub record_batches: bool,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: true,
            session_ttl: std::time::Duration::from_secs(8 * 3600),
            max_sessions: 1000,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            record_batches: true,
        }
    }
}

/// `[telemetry]`: OpenTelemetry export over OTLP.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// OTLP/gRPC collector, such as `http://127.0.0.1:4317`. `None` (`""` in the file):
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) when set, else
    /// nothing is exported.
    #[serde(deserialize_with = "parse::otlp_endpoint")]
    pub otlp_endpoint: Option<Url>,
    /// The `service.name` resource attribute; `OTEL_SERVICE_NAME` wins.
    pub service_name: String,
    /// How often metrics are pushed to the collector.
    #[serde(with = "duration")]
    pub metrics_interval: Duration,
    /// How long one export may take before it is abandoned.
    #[serde(with = "duration")]
    pub export_timeout: Duration,
    /// Export traces when a collector is configured (`OTEL_TRACES_EXPORTER=none` also turns
    /// them off).
    pub traces: bool,
    /// Which traces are recorded; `OTEL_TRACES_SAMPLER` wins.
    #[serde(deserialize_with = "parse::sampler")]
    pub sampler: TraceSampler,
    /// The ratio of the `*traceidratio` samplers, 0 to 1; `OTEL_TRACES_SAMPLER_ARG` wins.
    pub sampler_ratio: f64,
    /// Finished spans waiting for export at most; more are dropped (and counted).
    pub max_queued_spans: usize,
    /// Opt-in: put each call's arguments and result on its span (`gen_ai.tool.call.arguments`
    /// and `.result`), redacted and cut to `content_max_chars`.
    pub capture_content: bool,
    pub content_max_chars: usize,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: "toolgate".to_owned(),
            metrics_interval: Duration::from_secs(60),
            export_timeout: Duration::from_secs(10),
            traces: true,
            sampler: TraceSampler::ParentBasedAlwaysOn,
            sampler_ratio: 1.0,
            max_queued_spans: 2048,
            capture_content: false,
            content_max_chars: 1024,
        }
    }
}

/// Which traces are recorded, by `OTEL_TRACES_SAMPLER` name (`TraceSampler::name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceSampler {
    /// `always_on`.
    AlwaysOn,
    /// `always_off`.
    AlwaysOff,
    /// `traceidratio`: `sampler_ratio` of the traces.
    TraceIdRatio,
    /// `parentbased_always_on`: follow the client's decision, record new traces.
    #[default]
    ParentBasedAlwaysOn,
    /// `parentbased_always_off`.
    ParentBasedAlwaysOff,
    /// `parentbased_traceidratio`.
    ParentBasedTraceIdRatio,
}

impl TraceSampler {
    /// Every sampler, in the order an error lists their names.
    pub const ALL: [TraceSampler; 6] = [
        TraceSampler::AlwaysOn,
        TraceSampler::AlwaysOff,
        TraceSampler::TraceIdRatio,
        TraceSampler::ParentBasedAlwaysOn,
        TraceSampler::ParentBasedAlwaysOff,
        TraceSampler::ParentBasedTraceIdRatio,
    ];

    /// The `OTEL_TRACES_SAMPLER` name, as the file spells it.
    pub fn name(self) -> &'static str {
        match self {
            TraceSampler::AlwaysOn => "always_on",
            TraceSampler::AlwaysOff => "always_off",
            TraceSampler::TraceIdRatio => "traceidratio",
            TraceSampler::ParentBasedAlwaysOn => "parentbased_always_on",
            TraceSampler::ParentBasedAlwaysOff => "parentbased_always_off",
            TraceSampler::ParentBasedTraceIdRatio => "parentbased_traceidratio",
        }
    }

    /// The sampler of that name.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}
