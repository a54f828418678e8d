//! One server's trace export: an OpenTelemetry SDK tracer provider with the configured sampler,
//! and a batch span processor exporting over OTLP/gRPC (gzip) on its own thread, so a slow or
//! unreachable collector never delays a batch. Its queue is bounded: a span that finds it full
//! is dropped and counted (`toolgate.telemetry.spans.dropped`, reason `queue_full`), as are the
//! spans of an export that failed (reason `export_failed`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};

use super::resource;
use crate::config::{TelemetryConfig, TraceSampler};
use toolgate_core::metrics::Metrics;
use toolgate_core::trace::Tracer;

/// How traces are exported, from the config and the standard variables.
#[derive(Debug, Clone)]
pub(crate) struct TraceExport {
    /// The collector; `None` lets the exporter read `OTEL_EXPORTER_OTLP_*ENDPOINT`.
    pub endpoint: Option<String>,
    pub service_name: String,
    pub timeout: Duration,
    /// `None`: `OTEL_TRACES_SAMPLER` is set and the SDK reads it (with its `_ARG`).
    pub sampler: Option<Sampler>,
    pub max_queued: usize,
    pub content_chars: Option<usize>,
}

impl TraceExport {
    /// The export `config` asks for; `None` when traces are off or no collector is named.
    pub(crate) fn from_config(config: &TelemetryConfig) -> Option<Self> {
        let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.is_empty());
        let disabled = std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.trim() == "none");
        let from_env =
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") || set("OTEL_EXPORTER_OTLP_ENDPOINT");
        let endpoint = config
            .otlp_endpoint
            .as_ref()
            .map(|url| url.as_str().to_owned());
        if !config.traces || disabled || (endpoint.is_none() && !from_env) {
            return None;
        }
        let sampler =
            (!set("OTEL_TRACES_SAMPLER")).then(|| sampler(config.sampler, config.sampler_ratio));
        Some(TraceExport {
            endpoint,
            service_name: config.service_name.clone(),
            timeout: config.export_timeout,
            sampler,
            max_queued: config.max_queued_spans.max(1),
            content_chars: config.capture_content.then_some(config.content_max_chars),
        })
    }
}

/// The SDK sampler of a `telemetry.sampler`.
fn sampler(kind: TraceSampler, ratio: f64) -> Sampler {
    let ratio = ratio.clamp(0.0, 1.0);
    match kind {
        TraceSampler::AlwaysOn => Sampler::AlwaysOn,
        TraceSampler::AlwaysOff => Sampler::AlwaysOff,
        TraceSampler::TraceIdRatio => Sampler::TraceIdRatioBased(ratio),
        TraceSampler::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        TraceSampler::ParentBasedAlwaysOff => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        TraceSampler::ParentBasedTraceIdRatio => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)))
        }
    }
}

/// The tracer provider of one server.
pub(crate) struct TracePipeline {
    provider: SdkTracerProvider,
    tracer: Tracer,
}

impl TracePipeline {
    /// Starts exporting as `export` says. Must run inside a Tokio runtime (the exporter's
    /// channel is created here).
    pub(crate) fn start(
        export: &TraceExport,
        metrics: Arc<Metrics>,
    ) -> Result<Self, super::ExporterError> {
        let builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
        let exporter = super::otlp(builder, export.endpoint.as_ref(), export.timeout)
            .build()
            .map_err(super::ExporterError::Spans)?;
        let queued = Arc::new(AtomicUsize::new(0));
        let counted = CountingExporter {
            inner: exporter,
            queued: queued.clone(),
            metrics: metrics.clone(),
        };
        // The SDK's queue gets room to spare: the count in front of it decides what is dropped.
        let batch = BatchSpanProcessor::builder(counted)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(export.max_queued.saturating_mul(2))
                    .with_max_export_batch_size(export.max_queued.min(512))
                    .with_scheduled_delay(Duration::from_secs(1))
                    .build(),
            )
            .build();
        let processor = BoundedProcessor {
            inner: batch,
            queued,
            capacity: export.max_queued,
            metrics,
        };
        let mut builder = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource(&export.service_name));
        if let Some(sampler) = &export.sampler {
            builder = builder.with_sampler(sampler.clone());
        }
        let provider = builder.build();
        let tracer = Tracer::new(provider.tracer("toolgate"), export.content_chars);
        Ok(TracePipeline { provider, tracer })
    }

    pub(crate) fn tracer(&self) -> Tracer {
        self.tracer.clone()
    }

    /// Exports what is queued and stops; blocks (up to the export timeout when the collector
    /// is gone), so call it off the runtime's worker threads.
    pub(crate) fn shutdown(&self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::debug!(%error, "tracer provider shut down");
        }
    }
}

/// Drops a finished span when `capacity` spans already wait for export, and counts it.
#[derive(Debug)]
struct BoundedProcessor {
    inner: BatchSpanProcessor,
    /// Spans handed on and not yet taken by an export.
    queued: Arc<AtomicUsize>,
    capacity: usize,
    metrics: Arc<Metrics>,
}

impl SpanProcessor for BoundedProcessor {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            self.metrics.spans_dropped("queue_full", 1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// Takes exported spans off the queue count, and counts the spans of failed exports.
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    queued: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        self.queued.fetch_sub(n, Ordering::AcqRel);
        let result = self.inner.export(batch).await;
        if result.is_err() {
            self.metrics.spans_dropped("export_failed", n as u64);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}
