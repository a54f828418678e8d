//! Per-tool health: statistics plus the circuit breaker, behind one lock per server.
//! Only outcomes that say something about the tool count; the driver decides which (see
//! `HealthOutcome`), and gates and records under the same name: the tool that runs.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::{Breaker, BreakerConfig, BreakerDecision, BreakerState, Transition};

/// What an attempt tells about a tool's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthOutcome {
    Success(Duration),
    /// A failure of the tool itself (tool error, timeout, transport, panic).
    Failure(Duration),
    /// Nothing (policy refusal, invalid input, cancellation, cache hit).
    Neutral,
}

/// A coarse verdict from the score and the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Healthy,
    Degraded,
    Unhealthy,
}

/// One tool's health, as reported by `GetToolHealth`.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthReport {
    pub tool: String,
    pub calls: u64,
    pub successes: u64,
    pub failures: u64,
    pub mean_duration: Duration,
    pub max_duration: Duration,
    /// Exponentially weighted success (1.0 = all recent calls succeeded).
    pub ewma_success: f64,
    /// 0.3 × success rate + 0.7 × EWMA.
    pub score: f64,
    pub status: Status,
    pub breaker: BreakerState,
    pub consecutive_failures: u32,
}

#[derive(Debug, Clone)]
struct Entry {
    calls: u64,
    successes: u64,
    failures: u64,
    total: Duration,
    max: Duration,
    ewma: f64,
    breaker: Breaker,
}

/// Health of every tool that has been gated.
#[derive(Debug)]
pub struct Health {
    config: BreakerConfig,
    tools: Mutex<HashMap<String, Entry>>,
}

impl Health {
    pub fn new(config: BreakerConfig) -> Self {
        Health {
            config,
            tools: Mutex::new(HashMap::new()),
        }
    }

    /// The breaker gate for `tool`.
    pub fn admit(&self, tool: &str, now: Instant) -> (BreakerDecision, Option<Transition>) {
        self.with(tool, |e| e.breaker.admit(now))
    }

    /// Records an executed attempt. A neutral outcome of the probe releases its slot.
    pub fn record(
        &self,
        tool: &str,
        outcome: HealthOutcome,
        was_probe: bool,
        now: Instant,
    ) -> Option<Transition> {
        self.with(tool, |e| match outcome {
            HealthOutcome::Success(d) => {
                e.observe(true, d);
                e.breaker.record_success(now)
            }
            HealthOutcome::Failure(d) => {
                e.observe(false, d);
                e.breaker.record_failure(now)
            }
            HealthOutcome::Neutral if was_probe => e.breaker.release_probe(),
            HealthOutcome::Neutral => None,
        })
    }

    /// Every gated tool's health, sorted by name.
    pub fn report(&self, now: Instant) -> Vec<HealthReport> {
        let tools = self.tools.lock();
        let mut out: Vec<HealthReport> =
            tools.iter().map(|(name, e)| e.report(name, now)).collect();
        out.sort_by(|a, b| a.tool.cmp(&b.tool));
        out
    }

    fn with<T>(&self, tool: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut tools = self.tools.lock();
        let entry = tools.entry(tool.to_owned()).or_insert_with(|| Entry {
            calls: 0,
            successes: 0,
            failures: 0,
            total: Duration::ZERO,
            max: Duration::ZERO,
            ewma: 1.0,
            breaker: Breaker::new(self.config),
        });
        f(entry)
    }
}

impl Entry {
    fn observe(&mut self, success: bool, duration: Duration) {
        self.calls += 1;
        if success {
            self.successes += 1;
        } else {
            self.failures += 1;
        }
        self.total = self.total.saturating_add(duration);
        self.max = self.max.max(duration);
        self.ewma = 0.7 * self.ewma + 0.3 * if success { 1.0 } else { 0.0 };
    }

    fn report(&self, tool: &str, now: Instant) -> HealthReport {
        #[allow(clippy::cast_precision_loss)]
        let rate = if self.calls == 0 {
            1.0
        } else {
            self.successes as f64 / self.calls as f64
        };
        let score = 0.3 * rate + 0.7 * self.ewma;
        let breaker = self.breaker.state(now);
        let status = if breaker == BreakerState::Open || score < 0.5 {
            Status::Unhealthy
        } else if score < 0.8 {
            Status::Degraded
        } else {
            Status::Healthy
        };
        let calls = u32::try_from(self.calls).unwrap_or(u32::MAX).max(1);
        HealthReport {
            tool: tool.to_owned(),
            calls: self.calls,
            successes: self.successes,
            failures: self.failures,
            mean_duration: if self.calls == 0 {
                Duration::ZERO
            } else {
                self.total / calls
            },
            max_duration: self.max,
            ewma_success: self.ewma,
            score,
            status,
            breaker,
            consecutive_failures: self.breaker.consecutive_failures(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_and_score_follow_outcomes() {
        let h = Health::new(BreakerConfig::default());
        let now = Instant::now();
        h.record(
            "t",
            HealthOutcome::Success(Duration::from_millis(10)),
            false,
            now,
        );
        h.record(
            "t",
            HealthOutcome::Failure(Duration::from_millis(30)),
            false,
            now,
        );
        h.record("t", HealthOutcome::Neutral, false, now);
        let r = &h.report(now)[0];
        assert_eq!((r.calls, r.successes, r.failures), (2, 1, 1));
        assert_eq!(r.mean_duration, Duration::from_millis(20));
        assert_eq!(r.max_duration, Duration::from_millis(30));
        assert!((r.ewma_success - 0.7).abs() < 1e-9, "{}", r.ewma_success);
        assert!((r.score - (0.3 * 0.5 + 0.7 * 0.7)).abs() < 1e-9);
        assert_eq!(r.status, Status::Degraded);
        assert_eq!(r.breaker, BreakerState::Closed);
    }

    #[test]
    fn a_neutral_probe_releases_the_slot() {
        let h = Health::new(BreakerConfig {
            failure_threshold: 1,
            ..BreakerConfig::default()
        });
        let now = Instant::now();
        h.record("t", HealthOutcome::Failure(Duration::ZERO), false, now);
        let later = now + Duration::from_secs(30);
        assert_eq!(h.admit("t", later).0, BreakerDecision::Probe);
        assert_eq!(h.admit("t", later).0, BreakerDecision::Refused);
        h.record("t", HealthOutcome::Neutral, true, later);
        assert_eq!(h.admit("t", later).0, BreakerDecision::Probe);
        assert_eq!(h.report(later)[0].status, Status::Unhealthy);
    }
}
