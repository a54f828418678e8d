//! One server's metrics pipeline: an OpenTelemetry meter provider that `toolgate_core::metrics`
//! records into, read on demand by a manual reader and written as Prometheus text (exposition
//! format 0.0.4) for the admin listener's `/metrics`, and, when a collector is configured, pushed
//! periodically over OTLP/gRPC by the SDK's periodic reader (its own thread, so a slow or
//! unreachable collector never delays a batch).
//!
//! Names follow the Prometheus conventions for OpenTelemetry data: dots become underscores, a
//! unit of seconds adds `_seconds`, counters end in `_total`, histograms are `_bucket` / `_sum` /
//! `_count` with cumulative `le` buckets.

use std::fmt::Write as _;
use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{
    InstrumentKind, ManualReader, PeriodicReader, Pipeline, SdkMeterProvider, Temporality,
};

use toolgate_core::metrics::Metrics;

/// The metrics of one server and the means to read them.
pub(crate) struct MetricsPipeline {
    provider: SdkMeterProvider,
    reader: Arc<ManualReader>,
    metrics: Arc<Metrics>,
}

/// Where and how metrics are pushed over OTLP.
#[derive(Debug, Clone)]
pub(crate) struct OtlpExport {
    /// The collector; `None` lets the exporter read `OTEL_EXPORTER_OTLP_*ENDPOINT`.
    pub endpoint: Option<String>,
    pub service_name: String,
    pub interval: Duration,
    pub timeout: Duration,
}

impl OtlpExport {
    /// The export `config` asks for: its endpoint, else the standard variables; `None` when
    /// neither names a collector.
    pub(crate) fn from_config(config: &crate::config::TelemetryConfig) -> Option<Self> {
        let from_env = [
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]
        .iter()
        .any(|var| std::env::var(var).is_ok_and(|v| !v.is_empty()));
        let endpoint = config
            .otlp_endpoint
            .as_ref()
            .map(|url| url.as_str().to_owned());
        (endpoint.is_some() || from_env).then(|| OtlpExport {
            endpoint,
            service_name: config.service_name.clone(),
            interval: config.metrics_interval,
            timeout: config.export_timeout,
        })
    }
}

impl MetricsPipeline {
    /// Metrics for the Prometheus endpoint only.
    pub(crate) fn new() -> Self {
        Self::build(None)
    }

    /// Metrics also pushed over OTLP as `export` says. Must run inside a Tokio runtime (the
    /// exporter's channel is created here).
    pub(crate) fn with_otlp(export: &OtlpExport) -> Result<Self, super::ExporterError> {
        let builder = opentelemetry_otlp::MetricExporter::builder().with_tonic();
        let exporter = super::otlp(builder, export.endpoint.as_ref(), export.timeout)
            .build()
            .map_err(super::ExporterError::Metrics)?;
        let reader = PeriodicReader::builder(exporter)
            .with_interval(export.interval)
            .build();
        Ok(Self::build(Some((
            reader,
            super::resource(&export.service_name),
        ))))
    }

    fn build(otlp: Option<(PeriodicReader<opentelemetry_otlp::MetricExporter>, Resource)>) -> Self {
        let reader = Arc::new(ManualReader::builder().build());
        let mut builder = SdkMeterProvider::builder().with_reader(SharedReader(reader.clone()));
        if let Some((periodic, resource)) = otlp {
            builder = builder.with_reader(periodic).with_resource(resource);
        }
        let provider = builder.build();
        let metrics = Arc::new(Metrics::new(&provider.meter("toolgate")));
        MetricsPipeline {
            provider,
            reader,
            metrics,
        }
    }

    /// The instruments to record into.
    pub(crate) fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// The meter, for gauges observed at collection time.
    pub(crate) fn meter(&self) -> Meter {
        self.provider.meter("toolgate")
    }

    /// Pushes what is left to the collector and stops the exporter; blocks, so call it off the
    /// runtime's worker threads.
    pub(crate) fn shutdown(&self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::debug!(%error, "metrics provider shut down");
        }
    }

    /// Everything recorded so far, as Prometheus text.
    pub(crate) fn prometheus_text(&self) -> String {
        let mut collected = ResourceMetrics::default();
        if let Err(error) = self.reader.collect(&mut collected) {
            tracing::warn!(%error, "metrics could not be collected");
        }
        render(&collected)
    }
}

impl Default for MetricsPipeline {
    fn default() -> Self {
        MetricsPipeline::new()
    }
}

/// The manual reader, shared between the provider (which owns its readers) and the scrape.
#[derive(Debug)]
struct SharedReader(Arc<ManualReader>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline);
    }

    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

/// Prometheus text for every metric in `collected`, families sorted by name.
pub fn render(collected: &ResourceMetrics) -> String {
    let mut families: Vec<&Metric> = collected
        .scope_metrics()
        .flat_map(|scope| scope.metrics())
        .collect();
    families.sort_by(|a, b| a.name().cmp(b.name()));
    let mut out = String::new();
    for metric in families {
        match metric.data() {
            AggregatedMetrics::F64(data) => family(&mut out, metric, data, |v| format_f64(*v)),
            AggregatedMetrics::U64(data) => family(&mut out, metric, data, u64::to_string),
            AggregatedMetrics::I64(data) => family(&mut out, metric, data, i64::to_string),
        }
    }
    out
}

fn family<T: Copy>(
    out: &mut String,
    metric: &Metric,
    data: &MetricData<T>,
    number: impl Fn(&T) -> String,
) {
    let base = prometheus_name(metric.name(), metric.unit());
    let help = metric
        .description()
        .replace('\\', "\\\\")
        .replace('\n', "\\n");
    match data {
        MetricData::Gauge(gauge) => {
            header(out, &base, &help, "gauge");
            for point in gauge.data_points() {
                sample(
                    out,
                    &base,
                    point.attributes(),
                    None,
                    &number(&point.value()),
                );
            }
        }
        MetricData::Sum(sum) => {
            // A monotonic sum is a counter; any other sum is a gauge.
            let (name, kind) = if sum.is_monotonic() {
                (format!("{base}_total"), "counter")
            } else {
                (base.clone(), "gauge")
            };
            header(out, &name, &help, kind);
            for point in sum.data_points() {
                sample(
                    out,
                    &name,
                    point.attributes(),
                    None,
                    &number(&point.value()),
                );
            }
        }
        MetricData::Histogram(histogram) => {
            header(out, &base, &help, "histogram");
            let bucket = format!("{base}_bucket");
            for point in histogram.data_points() {
                let mut cumulative = 0u64;
                for (bound, count) in point.bounds().zip(point.bucket_counts()) {
                    cumulative += count;
                    let le = format_f64(bound);
                    sample(
                        out,
                        &bucket,
                        point.attributes(),
                        Some(&le),
                        &cumulative.to_string(),
                    );
                }
                let total = point.count();
                sample(
                    out,
                    &bucket,
                    point.attributes(),
                    Some("+Inf"),
                    &total.to_string(),
                );
                let sum = number(&point.sum());
                sample(out, &format!("{base}_sum"), point.attributes(), None, &sum);
                sample(
                    out,
                    &format!("{base}_count"),
                    point.attributes(),
                    None,
                    &total.to_string(),
                );
            }
        }
        // Not configured anywhere in toolgate; skipped rather than written wrongly.
        MetricData::ExponentialHistogram(_) => {}
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample<'a>(
    out: &mut String,
    name: &str,
    attributes: impl Iterator<Item = &'a KeyValue>,
    le: Option<&str>,
    value: &str,
) {
    let mut labels: Vec<(String, String)> = attributes
        .map(|kv| (sanitize(kv.key.as_str()), label_value(&kv.value)))
        .collect();
    labels.sort();
    if let Some(le) = le {
        labels.push(("le".to_owned(), le.to_owned()));
    }
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (key, value)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{key}=\"{}\"", escape(value));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// `gen_ai.execute_tool.duration` in seconds → `gen_ai_execute_tool_duration_seconds`.
fn prometheus_name(name: &str, unit: &str) -> String {
    let mut out = sanitize(name);
    let suffix = match unit {
        "s" => "_seconds",
        "By" => "_bytes",
        _ => "",
    };
    if !suffix.is_empty() && !out.ends_with(suffix) {
        out.push_str(suffix);
    }
    out
}

/// A metric or label name: letters, digits and underscores, not starting with a digit.
fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

fn label_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.as_str().to_owned(),
        other => other.to_string(),
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn format_f64(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if v.is_nan() {
        "NaN".to_owned()
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_histograms_and_gauges_render_in_prometheus_text() {
        let pipeline = MetricsPipeline::new();
        let m = pipeline.metrics();
        m.call("echo", "NONE");
        m.call("echo", "NONE");
        m.call("unknown", "UNKNOWN_TOOL");
        m.execution("echo", None, Duration::from_millis(3));
        m.hook_decision("guard \"x\"", "block");
        let _gauge = pipeline
            .meter()
            .u64_observable_gauge("toolgate.sessions.live")
            .with_description("Live named sessions")
            .with_callback(|o| o.observe(7, &[]))
            .build();
        let text = pipeline.prometheus_text();
        for expected in [
            "# TYPE toolgate_calls_total counter",
            "toolgate_calls_total{gen_ai_tool_name=\"echo\",toolgate_error_class=\"NONE\"} 2",
            "toolgate_calls_total{gen_ai_tool_name=\"unknown\",toolgate_error_class=\"UNKNOWN_TOOL\"} 1",
            "# TYPE gen_ai_execute_tool_duration_seconds histogram",
            "gen_ai_execute_tool_duration_seconds_bucket{gen_ai_tool_name=\"echo\",le=\"0.0025\"} 0",
            "gen_ai_execute_tool_duration_seconds_bucket{gen_ai_tool_name=\"echo\",le=\"0.005\"} 1",
            "gen_ai_execute_tool_duration_seconds_bucket{gen_ai_tool_name=\"echo\",le=\"+Inf\"} 1",
            "gen_ai_execute_tool_duration_seconds_count{gen_ai_tool_name=\"echo\"} 1",
            "toolgate_hook_decisions_total{toolgate_hook=\"guard \\\"x\\\"\",toolgate_verdict=\"block\"} 1",
            "# TYPE toolgate_sessions_live gauge",
            "toolgate_sessions_live 7",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
    }
}
