//! When an object is reconciled again: after failures, with exponential backoff; after a
//! success, at its interval with Flux's jitter.

use std::collections::HashMap;
use std::fmt::Display;
use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::identity::ControllerIdentity;
use crate::options::RuntimeOptions;
use crate::status_writes::object_key;
use crate::telemetry::RuntimeMetrics;
use crate::telemetry::logs::reconcile_span;

/// Consecutive failures per key (`namespace/name`): what a backoff doubles with.
#[derive(Debug, Default)]
pub struct Failures(Mutex<HashMap<String, u32>>);

impl Failures {
    /// One more failure of `key`: how many in a row now.
    pub fn failed(&self, key: &str) -> u32 {
        let mut counts = self.0.lock().expect("failure counts lock");
        let count = counts.entry(key.to_string()).or_default();
        *count += 1;
        *count
    }

    /// `key` succeeded, or is gone: its count starts over.
    pub fn reset(&self, key: &str) {
        self.0.lock().expect("failure counts lock").remove(key);
    }

    /// [`Self::failed`] after a failure; after a success, [`Self::reset`] and 0.
    pub fn record(&self, key: &str, failed: bool) -> u32 {
        if failed {
            self.failed(key)
        } else {
            self.reset(key);
            0
        }
    }
}

/// The error policy of every controller here, for an error its reconcile handed back:
/// `terminal` waits for a change of the object; any other counts one more failure in
/// `failures` and a retry in `retries`, and backs off exponentially (`--min-retry-delay` ..
/// `--max-retry-delay`). The reconcile resets `failures` when it succeeds.
pub fn after_error<K: Resource>(
    identity: &ControllerIdentity,
    object: &K,
    error: &impl Display,
    terminal: bool,
    failures: &Failures,
    retries: &RuntimeMetrics,
    runtime: &RuntimeOptions,
) -> Action {
    let span = reconcile_span(
        identity,
        &object.namespace().unwrap_or_default(),
        &object.name_any(),
    );
    let _entered = span.enter();
    if terminal {
        tracing::error!(%error, "Reconciler error: waiting for a change of the object");
        return Action::await_change();
    }
    let failed = failures.failed(&object_key(object));
    retries.record_retry();
    tracing::error!(%error, "Reconciler error");
    Action::requeue(backoff(failed, runtime.min_retry_delay, runtime.max_retry_delay))
}

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
    fn failures_count_in_a_row_per_key_until_a_success() {
        let failures = Failures::default();
        assert_eq!(failures.failed("apps/a"), 1);
        assert_eq!(failures.failed("apps/a"), 2);
        assert_eq!(failures.record("apps/b", true), 1);
        assert_eq!(failures.record("apps/a", false), 0);
        assert_eq!(failures.failed("apps/a"), 1, "a success starts the count over");
        assert_eq!(failures.failed("apps/b"), 2, "each key counts alone");
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
