//! The per-tool circuit breaker as a plain state machine: no clock, no locks, no async.
//! Callers pass `now`; the driver carries out its decisions.

use std::time::Duration;

use tokio::time::Instant;

/// Breaker thresholds (the `[breaker]` config section).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker; 0 never opens it.
    pub failure_threshold: u32,
    /// How long an open breaker refuses before it admits one probe.
    #[serde(with = "crate::duration")]
    pub cooldown: Duration,
    /// How long a probe may run before its slot is considered lost.
    #[serde(with = "crate::duration")]
    pub probe_lease: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_threshold: 3,
            cooldown: Duration::from_secs(30),
            probe_lease: Duration::from_secs(30),
        }
    }
}

/// What the breaker looks like from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    /// The state's name in metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// The answer to "may this call run?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerDecision {
    Allowed,
    /// Allowed as the single half-open probe; its outcome decides the breaker.
    Probe,
    Refused,
}

/// A state change, for `breaker_changed` events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub from: BreakerState,
    pub to: BreakerState,
}

/// One tool's breaker.
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    config: BreakerConfig,
    state: BreakerState,
    consecutive_failures: u32,
    /// When the cooldown started (the last failure, or the end of a lost probe's lease).
    opened_at: Option<Instant>,
    probe_started: Option<Instant>,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Breaker {
            config,
            state: BreakerState::Closed,
            consecutive_failures: 0,
            opened_at: None,
            probe_started: None,
        }
    }

    /// The state as of `now` (a half-open breaker whose probe lease ran out reads as open).
    pub(crate) fn state(&self, now: Instant) -> BreakerState {
        match (self.state, self.probe_started) {
            (BreakerState::HalfOpen, Some(started)) if now >= started + self.config.probe_lease => {
                BreakerState::Open
            }
            (state, _) => state,
        }
    }

    pub(crate) fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// Decides whether a call may run; may grant the single probe slot.
    pub(crate) fn admit(&mut self, now: Instant) -> (BreakerDecision, Option<Transition>) {
        let before = self.state;
        let admission = match self.state {
            BreakerState::Closed => BreakerDecision::Allowed,
            BreakerState::HalfOpen => {
                let lease_end = self.probe_started.map(|s| s + self.config.probe_lease);
                match lease_end {
                    Some(end) if now < end => BreakerDecision::Refused,
                    // The probe was lost: the cooldown restarts from the end of its lease.
                    _ => {
                        self.state = BreakerState::Open;
                        self.opened_at = lease_end.or(Some(now));
                        self.probe_started = None;
                        self.admit_open(now)
                    }
                }
            }
            BreakerState::Open => self.admit_open(now),
        };
        (admission, self.transition_from(before))
    }

    fn admit_open(&mut self, now: Instant) -> BreakerDecision {
        let cooled = self
            .opened_at
            .is_none_or(|at| now >= at + self.config.cooldown);
        if cooled {
            self.state = BreakerState::HalfOpen;
            self.probe_started = Some(now);
            BreakerDecision::Probe
        } else {
            BreakerDecision::Refused
        }
    }

    /// A call that ran succeeded. A success reported while open is stale and ignored.
    pub(crate) fn record_success(&mut self, now: Instant) -> Option<Transition> {
        let before = self.state;
        match self.state(now) {
            BreakerState::Open => {}
            BreakerState::Closed | BreakerState::HalfOpen => {
                self.state = BreakerState::Closed;
                self.consecutive_failures = 0;
                self.probe_started = None;
                self.opened_at = None;
            }
        }
        self.transition_from(before)
    }

    /// A call that ran failed in a way that says something about the tool's health.
    pub(crate) fn record_failure(&mut self, now: Instant) -> Option<Transition> {
        let before = self.state;
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.probe_started = None;
        match self.state {
            BreakerState::Closed => {
                let threshold = self.config.failure_threshold;
                if threshold > 0 && self.consecutive_failures >= threshold {
                    self.state = BreakerState::Open;
                    self.opened_at = Some(now);
                }
            }
            // A failed probe re-opens; a failure while open restarts the cooldown.
            BreakerState::HalfOpen | BreakerState::Open => {
                self.state = BreakerState::Open;
                self.opened_at = Some(now);
            }
        }
        self.transition_from(before)
    }

    /// The probe ended without telling anything (cancelled, refused by policy): its slot is
    /// released at once so the next call can probe without waiting for the lease.
    pub(crate) fn release_probe(&mut self) -> Option<Transition> {
        let before = self.state;
        if self.state == BreakerState::HalfOpen {
            self.state = BreakerState::Open;
            self.probe_started = None;
        }
        self.transition_from(before)
    }

    fn transition_from(&self, before: BreakerState) -> Option<Transition> {
        (before != self.state).then_some(Transition {
            from: before,
            to: self.state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    /// One step of a breaker script: an event at an offset (seconds) and the expected outcome.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        Admit(u64, BreakerDecision),
        Success(u64),
        Failure(u64),
        Release,
        State(u64, BreakerState),
    }

    #[track_caller]
    fn check(config: BreakerConfig, steps: &[Step]) {
        let start = Instant::now();
        let at = |s: u64| start + SEC * u32::try_from(s).unwrap();
        let mut b = Breaker::new(config);
        for (i, step) in steps.iter().enumerate() {
            match *step {
                Step::Admit(t, expected) => {
                    assert_eq!(b.admit(at(t)).0, expected, "step {i}: {step:?}")
                }
                Step::Success(t) => {
                    b.record_success(at(t));
                }
                Step::Failure(t) => {
                    b.record_failure(at(t));
                }
                Step::Release => {
                    b.release_probe();
                }
                Step::State(t, expected) => {
                    assert_eq!(b.state(at(t)), expected, "step {i}: {step:?}")
                }
            }
        }
    }

    use BreakerDecision::{Allowed, Probe, Refused};
    use BreakerState::{Closed, HalfOpen, Open};
    use Step::*;

    #[test]
    fn opens_after_three_consecutive_failures() {
        check(
            BreakerConfig::default(),
            &[
                Failure(0),
                Failure(0),
                State(0, Closed),
                Failure(0),
                State(0, Open),
                Admit(1, Refused),
            ],
        );
    }

    #[test]
    fn a_success_resets_the_failure_count() {
        check(
            BreakerConfig::default(),
            &[
                Failure(0),
                Failure(0),
                Success(0),
                Failure(0),
                Failure(0),
                State(0, Closed),
                Admit(0, Allowed),
            ],
        );
    }

    #[test]
    fn half_open_admits_exactly_one_probe() {
        check(
            BreakerConfig::default(),
            &[
                Failure(0),
                Failure(0),
                Failure(0),
                Admit(29, Refused),
                Admit(30, Probe),
                State(30, HalfOpen),
                Admit(31, Refused),
            ],
        );
    }

    #[test]
    fn a_successful_probe_closes_and_a_failed_one_reopens() {
        let open = [Failure(0), Failure(0), Failure(0), Admit(30, Probe)];
        let mut close = open.to_vec();
        close.extend([Success(31), State(31, Closed), Admit(31, Allowed)]);
        check(BreakerConfig::default(), &close);
        let mut reopen = open.to_vec();
        reopen.extend([
            Failure(31),
            State(31, Open),
            Admit(60, Refused),
            Admit(61, Probe),
        ]);
        check(BreakerConfig::default(), &reopen);
    }

    #[test]
    fn a_success_while_open_is_stale() {
        check(
            BreakerConfig::default(),
            &[
                Failure(0),
                Failure(0),
                Failure(0),
                Success(1),
                State(1, Open),
                Admit(2, Refused),
            ],
        );
    }

    #[test]
    fn a_lost_probe_is_recovered_after_its_lease_and_a_cooldown() {
        check(
            BreakerConfig::default(),
            &[
                Failure(0),
                Failure(0),
                Failure(0),
                Admit(30, Probe),
                Admit(59, Refused),
                State(60, Open),
                // The cooldown restarts at the end of the lease (60): refused until 90.
                Admit(60, Refused),
                Admit(90, Probe),
            ],
        );
    }

    #[test]
    fn a_released_probe_frees_its_slot_at_once() {
        check(
            BreakerConfig::default(),
            &[
                Failure(0),
                Failure(0),
                Failure(0),
                Admit(30, Probe),
                Release,
                State(30, Open),
                Admit(30, Probe),
            ],
        );
    }

    #[test]
    fn a_failure_while_open_restarts_the_cooldown() {
        check(
            BreakerConfig::default(),
            &[
                Failure(0),
                Failure(0),
                Failure(0),
                Failure(20),
                Admit(30, Refused),
                Admit(50, Probe),
            ],
        );
    }

    #[test]
    fn threshold_zero_never_opens() {
        let config = BreakerConfig {
            failure_threshold: 0,
            ..BreakerConfig::default()
        };
        check(
            config,
            &[
                Failure(0),
                Failure(0),
                Failure(0),
                Failure(0),
                State(0, Closed),
                Admit(0, Allowed),
            ],
        );
    }

    #[test]
    fn transitions_are_reported() {
        let now = Instant::now();
        let mut b = Breaker::new(BreakerConfig {
            failure_threshold: 1,
            ..BreakerConfig::default()
        });
        assert_eq!(
            b.record_failure(now),
            Some(Transition {
                from: Closed,
                to: Open
            })
        );
        assert_eq!(
            b.admit(now + SEC * 30),
            (
                Probe,
                Some(Transition {
                    from: Open,
                    to: HalfOpen
                })
            )
        );
        assert_eq!(
            b.record_success(now + SEC * 31),
            Some(Transition {
                from: HalfOpen,
                to: Closed
            })
        );
        assert_eq!(b.record_success(now + SEC * 32), None);
    }
}
