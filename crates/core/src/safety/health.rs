//! Per-tool health: statistics plus the circuit breaker, behind one lock per server.
//! Only outcomes that say something about the tool count; the driver decides which (see
//! `HealthOutcome`), and gates and records under the same name: the tool that runs.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
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
    /// Median and 99th-percentile duration of the attempts recorded (within a quarter of a
    /// doubling: what a log histogram of 4 buckets per doubling tells).
    pub p50: Duration,
    pub p99: Duration,
    /// Attempts and failures in each of the last `RECENT_MINUTES` minutes, oldest first (the
    /// current minute last).
    pub recent: Vec<Minute>,
}

/// Minutes of attempts a report carries.
pub const RECENT_MINUTES: usize = 15;

/// One minute of a tool's attempts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Minute {
    pub calls: u32,
    pub failures: u32,
}

/// Buckets of the latency histogram: 4 per doubling from 1 µs, past an hour in the last.
const BUCKETS: usize = 4 * 32;

/// Attempt durations, counted in log-scale buckets (fixed size, whatever the traffic).
#[derive(Debug, Clone)]
struct Latencies {
    counts: Box<[u32; BUCKETS]>,
    total: u64,
}

impl Latencies {
    fn new() -> Self {
        Latencies {
            counts: Box::new([0; BUCKETS]),
            total: 0,
        }
    }

    /// The bucket of `d`: ⌊4·log2(µs)⌋.
    fn bucket(d: Duration) -> usize {
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let index = (4.0 * (micros as f64).log2()).floor() as usize;
        index.min(BUCKETS - 1)
    }

    /// The upper bound of bucket `i`.
    fn bound(i: usize) -> Duration {
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let micros = 2f64.powf((i + 1) as f64 / 4.0).round() as u64;
        Duration::from_micros(micros)
    }

    fn observe(&mut self, d: Duration) {
        let bucket = &mut self.counts[Self::bucket(d)];
        *bucket = bucket.saturating_add(1);
        self.total += 1;
    }

    /// The duration below which a fraction `q` of the attempts fell (zero before any).
    fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let rank = ((q * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, count) in self.counts.iter().enumerate() {
            seen += u64::from(*count);
            if seen >= rank {
                return Self::bound(i);
            }
        }
        Self::bound(BUCKETS - 1)
    }
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
    latencies: Latencies,
    /// The last `RECENT_MINUTES` minutes' attempts, by minute since the health began.
    minutes: VecDeque<(u64, Minute)>,
}

/// Health of every tool that has been gated.
#[derive(Debug)]
pub struct Health {
    config: BreakerConfig,
    tools: Mutex<HashMap<String, Entry>>,
    /// Where minutes are counted from.
    began: Instant,
}

impl Health {
    pub fn new(config: BreakerConfig) -> Self {
        Health {
            config,
            tools: Mutex::new(HashMap::new()),
            began: Instant::now(),
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
        let minute = self.minute(now);
        self.with(tool, |e| match outcome {
            HealthOutcome::Success(d) => {
                e.observe(true, d, minute);
                e.breaker.record_success(now)
            }
            HealthOutcome::Failure(d) => {
                e.observe(false, d, minute);
                e.breaker.record_failure(now)
            }
            HealthOutcome::Neutral if was_probe => e.breaker.release_probe(),
            HealthOutcome::Neutral => None,
        })
    }

    /// Every gated tool's health, sorted by name.
    pub fn report(&self, now: Instant) -> Vec<HealthReport> {
        let minute = self.minute(now);
        let tools = self.tools.lock();
        let mut out: Vec<HealthReport> = tools
            .iter()
            .map(|(name, e)| e.report(name, now, minute))
            .collect();
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
            latencies: Latencies::new(),
            minutes: VecDeque::with_capacity(RECENT_MINUTES),
        });
        f(entry)
    }

    /// The minute `now` falls in, counted from when the health began.
    fn minute(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.began).as_secs() / 60
    }
}

impl Entry {
    fn observe(&mut self, success: bool, duration: Duration, minute: u64) {
        self.latencies.observe(duration);
        // Attempts recorded out of order (their minute taken before the lock) count in the
        // newest minute: the minutes stay in order, each once.
        let minute = self
            .minutes
            .back()
            .map_or(minute, |(at, _)| minute.max(*at));
        match self.minutes.back_mut() {
            Some((at, _)) if *at == minute => {}
            _ => {
                if self.minutes.len() == RECENT_MINUTES {
                    self.minutes.pop_front();
                }
                self.minutes.push_back((minute, Minute::default()));
            }
        }
        if let Some((_, counts)) = self.minutes.back_mut() {
            counts.calls = counts.calls.saturating_add(1);
            if !success {
                counts.failures = counts.failures.saturating_add(1);
            }
        }
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

    fn report(&self, tool: &str, now: Instant, minute: u64) -> HealthReport {
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
            p50: self.latencies.quantile(0.5),
            p99: self.latencies.quantile(0.99),
            recent: (0..RECENT_MINUTES as u64)
                .rev()
                .map(|ago| {
                    let at = minute.checked_sub(ago);
                    self.minutes
                        .iter()
                        .find(|(m, _)| Some(*m) == at)
                        .map(|(_, counts)| *counts)
                        .unwrap_or_default()
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_minutes_follow_the_attempts() {
        let h = Health::new(BreakerConfig::default());
        let start = Instant::now();
        for ms in 1..=100u64 {
            h.record(
                "t",
                HealthOutcome::Success(Duration::from_millis(ms)),
                false,
                start,
            );
        }
        h.record(
            "t",
            HealthOutcome::Failure(Duration::from_secs(5)),
            false,
            start + Duration::from_secs(120),
        );
        let r = &h.report(start + Duration::from_secs(130))[0];
        // Within a quarter of a doubling (19%) above the true value.
        let near = |got: Duration, want: Duration| got >= want && got <= want.mul_f64(1.19);
        assert!(near(r.p50, Duration::from_millis(50)), "{:?}", r.p50);
        assert!(near(r.p99, Duration::from_millis(100)), "{:?}", r.p99);
        assert_eq!(r.recent.len(), RECENT_MINUTES);
        let last = r.recent[RECENT_MINUTES - 1];
        assert_eq!((last.calls, last.failures), (1, 1));
        let first_minute = r.recent[RECENT_MINUTES - 3];
        assert_eq!((first_minute.calls, first_minute.failures), (100, 0));
        assert_eq!(r.recent[RECENT_MINUTES - 2], Minute::default());
    }

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
