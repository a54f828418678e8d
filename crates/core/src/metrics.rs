//! The metrics toolgate records, in one place: every instrument, its name, unit and labels.
//! Recorded once through OpenTelemetry; `telemetry::metrics` exports the same data as
//! Prometheus text (and the OTLP exporter, when configured, pushes it).
//!
//! Label values are bounded: tool names come from the registry (a name the model made up is
//! never a label; such calls count under `unknown`), error classes, outcomes and verdicts are
//! closed sets, hook and remote names come from the operator's config.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, Meter};

use tally::{Spec, Tally};

mod tally;

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
const OUTCOME: &str = "toolgate.outcome";

/// Every instrument toolgate records into. Counters are tallies (atomics read at collection
/// time); the two duration histograms are the SDK's.
#[derive(Debug, Clone)]
pub struct Metrics {
    execute_tool: Histogram<f64>,
    calls: Tally,
    batches: Tally,
    batch_duration: Histogram<f64>,
    retries: Tally,
    loop_detections: Tally,
    breaker_transitions: Tally,
    cache_hits: Tally,
    truncations: Tally,
    hook_decisions: Tally,
    redactions: Tally,
    remote_reconnects: Tally,
    remote_failures: Tally,
    refusals: Tally,
    connections_closed: Tally,
    evictions: Tally,
    store_errors: Tally,
    spans_dropped: Tally,
    approvals: Tally,
    mcp_requests: Tally,
}

impl Default for Metrics {
    /// Instruments on the global meter provider: no-ops unless one was installed.
    fn default() -> Self {
        Metrics::new(&opentelemetry::global::meter("toolgate"))
    }
}

impl Metrics {
    /// The instruments on `meter`. One `Metrics` per meter provider: each registers its
    /// counters' collection callbacks, so a second one on the same provider would report every
    /// counter twice.
    pub fn new(meter: &Meter) -> Self {
        let counter = |name, description, dynamic, fixed| {
            Tally::new(
                meter,
                Spec {
                    name,
                    description,
                    dynamic,
                    fixed,
                },
            )
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
                Some(TOOL),
                Some("toolgate.error_class"),
            ),
            batches: counter(
                "toolgate.batches",
                "Batches finished, by outcome",
                None,
                Some(OUTCOME),
            ),
            batch_duration: seconds("toolgate.batch.duration", "Duration of batches, by outcome"),
            retries: counter(
                "toolgate.retries",
                "Retries scheduled, by tool",
                Some(TOOL),
                None,
            ),
            loop_detections: counter(
                "toolgate.loop.detections",
                "Loop warnings and stops, by tool and level",
                Some(TOOL),
                Some("toolgate.level"),
            ),
            breaker_transitions: counter(
                "toolgate.breaker.transitions",
                "Circuit breaker changes, by tool and the state entered",
                Some(TOOL),
                Some("toolgate.state"),
            ),
            cache_hits: counter(
                "toolgate.cache.hits",
                "Calls answered from the result cache",
                Some(TOOL),
                None,
            ),
            truncations: counter(
                "toolgate.output.truncations",
                "Results cut by an output cap or the batch budget",
                Some(TOOL),
                None,
            ),
            hook_decisions: counter(
                "toolgate.hook.decisions",
                "Pre-tool hook and permission decisions, by source and verdict",
                Some("toolgate.hook"),
                Some("toolgate.verdict"),
            ),
            redactions: counter(
                "toolgate.redactions",
                "Secrets redacted, by kind",
                Some("toolgate.kind"),
                None,
            ),
            remote_reconnects: counter(
                "toolgate.remote.reconnects",
                "Reconnections of lost remotes, by remote and result",
                Some("toolgate.remote"),
                Some("toolgate.result"),
            ),
            remote_failures: counter(
                "toolgate.remote.failures",
                "Remote requests that failed for TLS, credentials or authorization, by remote and reason (tls_certificate, tls_handshake, credentials, oauth_discovery, oauth_refused, token_endpoint, unauthorized, forbidden)",
                Some("toolgate.remote"),
                Some("toolgate.reason"),
            ),
            refusals: counter(
                "toolgate.admission.refusals",
                "Requests refused for capacity, by the capacity that was full",
                None,
                Some("toolgate.capacity"),
            ),
            connections_closed: counter(
                "toolgate.connections.closed",
                "Connections the server closed, by reason (preface_timeout, idle)",
                None,
                Some("toolgate.reason"),
            ),
            evictions: counter(
                "toolgate.evictions",
                "What a bounded store gave up to stay within its bound, by store (sessions, session_memory, cache, replies) and the bound reached",
                Some("toolgate.store"),
                Some("toolgate.reason"),
            ),
            store_errors: counter(
                "toolgate.session_store.errors",
                "Session store operations that failed, by operation (load, save, memory, end, scratch, cap, cache_get, cache_put, cache_invalidate)",
                None,
                Some("toolgate.operation"),
            ),
            approvals: counter(
                "toolgate.approvals",
                "Approvals that ended, by tool and how (approved, denied, remembered_approved, remembered_denied, expired, withdrawn)",
                Some(TOOL),
                Some("toolgate.approval"),
            ),
            mcp_requests: counter(
                "toolgate.mcp.requests",
                "MCP requests answered, by method (mcp.method.name) and outcome (ok, tool_error, input_required, error)",
                Some("mcp.method.name"),
                Some(OUTCOME),
            ),
            spans_dropped: counter(
                "toolgate.telemetry.spans.dropped",
                "Finished spans not exported, by reason (queue_full, export_failed)",
                None,
                Some("toolgate.reason"),
            ),
        }
    }

    /// One execution of `tool` ended; `error_type` is its error class when it failed.
    pub fn execution(&self, tool: &str, error_type: Option<&'static str>, duration: Duration) {
        let tool = KeyValue::new(TOOL, tool.to_owned());
        let seconds = duration.as_secs_f64();
        match error_type {
            Some(error) => self
                .execute_tool
                .record(seconds, &[tool, KeyValue::new(ERROR_TYPE, error)]),
            None => self.execute_tool.record(seconds, &[tool]),
        }
    }

    /// A call was answered with `class` (`NONE` for success).
    pub fn call(&self, tool: &str, class: &'static str) {
        self.calls.add(tool, class, 1);
    }

    pub fn batch(&self, outcome: &'static str, duration: Duration) {
        self.batches.add("", outcome, 1);
        self.batch_duration
            .record(duration.as_secs_f64(), &[KeyValue::new(OUTCOME, outcome)]);
    }

    pub fn retry(&self, tool: &str) {
        self.retries.add(tool, "", 1);
    }

    pub fn loop_detected(&self, tool: &str, stop: bool) {
        self.loop_detections
            .add(tool, if stop { "stop" } else { "warn" }, 1);
    }

    pub(crate) fn breaker_changed(&self, tool: &str, to: &'static str) {
        self.breaker_transitions.add(tool, to, 1);
    }

    pub(crate) fn cache_hit(&self, tool: &str) {
        self.cache_hits.add(tool, "", 1);
    }

    pub fn truncated(&self, tool: &str) {
        self.truncations.add(tool, "", 1);
    }

    /// A hook (or permission rule) named `source` decided `verdict`.
    pub fn hook_decision(&self, source: &str, verdict: &'static str) {
        self.hook_decisions.add(source, verdict, 1);
    }

    pub fn redacted(&self, kind: &str, count: u64) {
        self.redactions.add(kind, "", count);
    }

    pub fn remote_reconnect(&self, remote: &str, succeeded: bool) {
        self.remote_reconnects
            .add(remote, if succeeded { "ok" } else { "failed" }, 1);
    }

    /// A request to `remote` failed for `reason` (TLS, credentials, authorization).
    pub fn remote_failure(&self, remote: &str, reason: &'static str) {
        self.remote_failures.add(remote, reason, 1);
    }

    /// `count` finished spans were not exported, for `reason`.
    pub fn spans_dropped(&self, reason: &'static str, count: u64) {
        self.spans_dropped.add("", reason, count);
    }

    /// `store` gave up `count` entries because `bound` was reached.
    pub fn evicted(&self, store: &'static str, bound: &'static str, count: u64) {
        self.evictions.add(store, bound, count);
    }

    /// A session store operation (`load`, `save`, `memory`, `end`) failed.
    pub fn store_error(&self, operation: &'static str) {
        self.store_errors.add("", operation, 1);
    }

    /// The server closed a connection, for `reason`.
    pub fn connection_closed(&self, reason: &'static str) {
        self.connections_closed.add("", reason, 1);
    }

    /// An approval of a call of `tool` ended `how` (`approved`, `denied`, `remembered_approved`,
    /// `remembered_denied`, `expired`, `withdrawn`).
    pub fn approval(&self, tool: &str, how: &'static str) {
        self.approvals.add(tool, how, 1);
    }

    /// An MCP request of `method` was answered with `outcome`.
    pub fn mcp_request(&self, method: &str, outcome: &'static str) {
        self.mcp_requests.add(method, outcome, 1);
    }

    /// A request was refused because `capacity` was full.
    pub fn refused(&self, capacity: &'static str) {
        self.refusals.add("", capacity, 1);
    }
}
