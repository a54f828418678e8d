//! The metrics toolgate records, in one place: every instrument, its name, unit and labels.
//! Recorded once through OpenTelemetry; `telemetry::metrics` exports the same data as
//! Prometheus text (and the OTLP exporter, when configured, pushes it).
//!
//! Label values are bounded: tool names come from the registry (a name the model made up is
//! never a label; such calls count under `unknown`), error classes, outcomes and verdicts are
//! closed sets, hook and remote names come from the operator's config.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};

/// The label for calls whose tool is not registered.
pub const UNKNOWN_TOOL: &str = "unknown";

/// Histogram bounds in seconds: from a cache hit (~10 µs) to a slow remote (minutes).
const SECONDS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Label keys (OpenTelemetry attribute names; Prometheus shows them with `_` for `.`).
const TOOL: &str = "gen_ai.tool.name";
const ERROR_TYPE: &str = "error.type";

/// Every instrument toolgate records into.
#[derive(Debug, Clone)]
pub struct Metrics {
    execute_tool: Histogram<f64>,
    calls: Counter<u64>,
    batches: Counter<u64>,
    batch_duration: Histogram<f64>,
    retries: Counter<u64>,
    loop_detections: Counter<u64>,
    breaker_transitions: Counter<u64>,
    cache_hits: Counter<u64>,
    truncations: Counter<u64>,
    hook_decisions: Counter<u64>,
    redactions: Counter<u64>,
    remote_reconnects: Counter<u64>,
    refusals: Counter<u64>,
    spans_dropped: Counter<u64>,
}

impl Default for Metrics {
    /// Instruments on the global meter provider: no-ops unless one was installed.
    fn default() -> Self {
        Metrics::new(&opentelemetry::global::meter("toolgate"))
    }
}

impl Metrics {
    pub fn new(meter: &Meter) -> Self {
        let counter = |name: &'static str, description: &'static str| {
            meter
                .u64_counter(name)
                .with_description(description)
                .build()
        };
        let seconds = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(SECONDS.to_vec())
                .build()
        };
        Metrics {
            execute_tool: seconds(
                "gen_ai.execute_tool.duration",
                "Duration of each execution of a tool (cache hits and refusals excluded)",
            ),
            calls: counter(
                "toolgate.calls",
                "Calls answered, by tool and error class (NONE for success)",
            ),
            batches: counter("toolgate.batches", "Batches finished, by outcome"),
            batch_duration: seconds("toolgate.batch.duration", "Duration of batches, by outcome"),
            retries: counter("toolgate.retries", "Retries scheduled, by tool"),
            loop_detections: counter(
                "toolgate.loop.detections",
                "Loop warnings and stops, by tool and level",
            ),
            breaker_transitions: counter(
                "toolgate.breaker.transitions",
                "Circuit breaker changes, by tool and the state entered",
            ),
            cache_hits: counter(
                "toolgate.cache.hits",
                "Calls answered from the result cache",
            ),
            truncations: counter(
                "toolgate.output.truncations",
                "Results cut by an output cap or the batch budget",
            ),
            hook_decisions: counter(
                "toolgate.hook.decisions",
                "Pre-tool hook and permission decisions, by source and verdict",
            ),
            redactions: counter("toolgate.redactions", "Secrets redacted, by kind"),
            remote_reconnects: counter(
                "toolgate.remote.reconnects",
                "Reconnections of lost remotes, by remote and result",
            ),
            refusals: counter(
                "toolgate.admission.refusals",
                "Requests refused for capacity, by the capacity that was full",
            ),
            spans_dropped: counter(
                "toolgate.telemetry.spans.dropped",
                "Finished spans not exported, by reason (queue_full, export_failed)",
            ),
        }
    }

    /// One execution of `tool` ended; `error_type` is its error class when it failed.
    pub fn execution(&self, tool: &str, error_type: Option<&'static str>, duration: Duration) {
        let mut labels = vec![KeyValue::new(TOOL, tool.to_owned())];
        if let Some(error) = error_type {
            labels.push(KeyValue::new(ERROR_TYPE, error));
        }
        self.execute_tool.record(duration.as_secs_f64(), &labels);
    }

    /// A call was answered with `class` (`NONE` for success).
    pub fn call(&self, tool: &str, class: &'static str) {
        self.calls.add(
            1,
            &[
                KeyValue::new(TOOL, tool.to_owned()),
                KeyValue::new("toolgate.error_class", class),
            ],
        );
    }

    pub fn batch(&self, outcome: &'static str, duration: Duration) {
        let labels = [KeyValue::new("toolgate.outcome", outcome)];
        self.batches.add(1, &labels);
        self.batch_duration.record(duration.as_secs_f64(), &labels);
    }

    pub fn retry(&self, tool: &str) {
        self.retries.add(1, &[KeyValue::new(TOOL, tool.to_owned())]);
    }

    pub fn loop_detected(&self, tool: &str, stop: bool) {
        let level = if stop { "stop" } else { "warn" };
        self.loop_detections.add(
            1,
            &[
                KeyValue::new(TOOL, tool.to_owned()),
                KeyValue::new("toolgate.level", level),
            ],
        );
    }

    pub fn breaker_changed(&self, tool: &str, to: &'static str) {
        self.breaker_transitions.add(
            1,
            &[
                KeyValue::new(TOOL, tool.to_owned()),
                KeyValue::new("toolgate.state", to),
            ],
        );
    }

    pub fn cache_hit(&self, tool: &str) {
        self.cache_hits
            .add(1, &[KeyValue::new(TOOL, tool.to_owned())]);
    }

    pub fn truncated(&self, tool: &str) {
        self.truncations
            .add(1, &[KeyValue::new(TOOL, tool.to_owned())]);
    }

    /// A hook (or permission rule) named `source` decided `verdict`.
    pub fn hook_decision(&self, source: &str, verdict: &'static str) {
        self.hook_decisions.add(
            1,
            &[
                KeyValue::new("toolgate.hook", source.to_owned()),
                KeyValue::new("toolgate.verdict", verdict),
            ],
        );
    }

    pub fn redacted(&self, kind: &str, count: u64) {
        self.redactions
            .add(count, &[KeyValue::new("toolgate.kind", kind.to_owned())]);
    }

    pub fn remote_reconnect(&self, remote: &str, succeeded: bool) {
        let result = if succeeded { "ok" } else { "failed" };
        self.remote_reconnects.add(
            1,
            &[
                KeyValue::new("toolgate.remote", remote.to_owned()),
                KeyValue::new("toolgate.result", result),
            ],
        );
    }

    /// `count` finished spans were not exported, for `reason`.
    pub fn spans_dropped(&self, reason: &'static str, count: u64) {
        self.spans_dropped
            .add(count, &[KeyValue::new("toolgate.reason", reason)]);
    }

    /// A request was refused because `capacity` was full.
    pub fn refused(&self, capacity: &'static str) {
        self.refusals
            .add(1, &[KeyValue::new("toolgate.capacity", capacity)]);
    }
}
