//! When an object is reconciled again: after failures, with exponential backoff; after a
//! success, at its interval with Flux's jitter.

use std::time::Duration;

/// Exponential backoff from `min` doubling per consecutive failure, capped at `max` (Flux:
/// `--min-retry-delay` 750 ms, `--max-retry-delay` 15 minutes).
pub fn backoff(failures: u32, min: Duration, max: Duration) -> Duration {
    min.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(20)))
        .min(max)
}

/// The interval with Flux's jitter: uniformly within ± `percent` %.
pub fn jittered(interval: Duration, percent: u8, random: f64) -> Duration {
    let spread = interval.as_secs_f64() * f64::from(percent) / 100.0;
    Duration::from_secs_f64((interval.as_secs_f64() + spread * (2.0 * random - 1.0)).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_750ms_up_to_15m() {
        let backoff = |failures| backoff(failures, Duration::from_millis(750), Duration::from_secs(900));
        assert_eq!(backoff(1), Duration::from_millis(750));
        assert_eq!(backoff(2), Duration::from_millis(1500));
        assert_eq!(backoff(5), Duration::from_millis(12000));
        assert_eq!(backoff(40), Duration::from_secs(900));
    }

    #[test]
    fn jitter_stays_within_the_percentage() {
        let interval = Duration::from_secs(600);
        assert_eq!(jittered(interval, 5, 0.0), Duration::from_secs(570));
        assert_eq!(jittered(interval, 5, 0.5), Duration::from_secs(600));
        assert_eq!(jittered(interval, 5, 1.0), Duration::from_secs(630));
        assert_eq!(jittered(interval, 0, 0.9), interval);
    }
}
