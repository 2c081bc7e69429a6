//! Retry delays: exponential, capped, jittered, computed with the `backoff` crate.

use backoff::backoff::Backoff;
use backoff::ExponentialBackoff;
use chime_common::RetryPolicy;
use std::time::Duration;

/// Jitter applied to each delay (±10 %), so retries of many firings that
/// failed together do not return together.
pub const JITTER: f64 = 0.1;

/// The delay before the attempt after `failed_attempt` (1 for the first retry).
///
/// The k-th retry waits `min(initial × multiplier^(k−1), max)`, randomised by ±[`JITTER`].
pub fn retry_delay(policy: &RetryPolicy, failed_attempt: u32) -> Duration {
    let mut backoff = ExponentialBackoff {
        current_interval: policy.initial,
        initial_interval: policy.initial,
        randomization_factor: JITTER,
        multiplier: policy.multiplier,
        max_interval: policy.max,
        max_elapsed_time: None,
        ..ExponentialBackoff::default()
    };
    let mut delay = policy.initial;
    for _ in 0..failed_attempt.max(1) {
        delay = backoff.next_backoff().unwrap_or(policy.max);
    }
    let ceiling = Duration::try_from_secs_f64(policy.max.as_secs_f64() * (1.0 + JITTER))
        .unwrap_or(Duration::MAX);
    delay.min(ceiling)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            initial: Duration::from_secs(1),
            max: Duration::from_secs(5),
            multiplier: 2.0,
        }
    }

    fn within(d: Duration, expected_secs: f64) -> bool {
        let s = d.as_secs_f64();
        s >= expected_secs * (1.0 - JITTER) - 1e-9 && s <= expected_secs * (1.0 + JITTER) + 1e-9
    }

    #[test]
    fn delays_grow_exponentially_then_cap() {
        let p = policy();
        assert!(within(retry_delay(&p, 1), 1.0));
        assert!(within(retry_delay(&p, 2), 2.0));
        assert!(within(retry_delay(&p, 3), 4.0));
        assert!(within(retry_delay(&p, 4), 5.0));
        assert!(within(retry_delay(&p, 9), 5.0));
    }

    #[test]
    fn delays_are_jittered() {
        let p = policy();
        let samples: std::collections::HashSet<u128> =
            (0..20).map(|_| retry_delay(&p, 2).as_micros()).collect();
        assert!(samples.len() > 1, "no jitter in {samples:?}");
    }
}
