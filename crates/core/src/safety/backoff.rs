//! The retry schedule: exponential backoff with a cap, optional jitter, and the hard ceiling.

use std::time::Duration;

use crate::hash::mix;

/// Retries after which one more failure ends the batch (RECOVERY_EXHAUSTED), whatever a
/// reflector or the config says: the 6th execution is the last.
pub(crate) const RETRY_CEILING: u32 = 5;

/// Backoff settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
    /// Spread each delay uniformly over [delay/2, delay] so retries of many clients do not align.
    pub jitter: bool,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(30),
            jitter: false,
        }
    }
}

impl Backoff {
    /// The wait before retry number `retry` (0 = the first retry): base·2^retry, capped.
    /// `entropy` is any varying number (used only with jitter).
    pub fn delay(&self, retry: u32, entropy: u64) -> Duration {
        let factor = 2u32.checked_pow(retry.min(31)).unwrap_or(u32::MAX);
        let delay = self.base.saturating_mul(factor).min(self.max);
        if !self.jitter || delay.is_zero() {
            return delay;
        }
        let half = delay / 2;
        let spread = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX).max(1);
        half + Duration::from_nanos(mix(entropy) % spread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_100ms_and_caps_at_30s() {
        let b = Backoff::default();
        let ms: Vec<u128> = (0..6).map(|r| b.delay(r, 0).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200]);
        assert_eq!(b.delay(9, 0), Duration::from_secs(30));
        assert_eq!(b.delay(u32::MAX, 0), Duration::from_secs(30));
    }

    #[test]
    fn jitter_stays_within_half_to_full_delay() {
        let b = Backoff {
            jitter: true,
            ..Backoff::default()
        };
        for seed in 0..200 {
            let d = b.delay(2, seed);
            assert!(
                d >= Duration::from_millis(200) && d <= Duration::from_millis(400),
                "{d:?}"
            );
        }
        assert_ne!(b.delay(2, 1), b.delay(2, 2));
    }
}
