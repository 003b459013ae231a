//! The one classification every reconcile step's error carries, in every controller. Each
//! step (source, build, apply, prune, health, ...) has its own error type; the driver never
//! re-maps them by hand, it reads this: the condition reason and message, and what retrying
//! can do.

use std::time::Duration;

/// What the driver does after a step failed, following Flux's requeue rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// A configuration error: Ready=False and Stalled=True, no requeue until the object (a
    /// Kustomization, ...) or what it reads changes.
    Terminal,
    /// Requeue after `spec.retryInterval`, without backoff (most failures: a new revision or a
    /// fix elsewhere in the cluster may arrive at any time).
    RetryInterval,
    /// Requeue after `--requeue-dependency`: something the object reads is not ready.
    Dependency,
    /// Hand the error back to the controller: exponential backoff (`--min-retry-delay` ..
    /// `--max-retry-delay`), for transient faults of the API server or the network.
    Backoff,
}

/// Implemented by the error of every reconcile step.
pub trait StepError: std::error::Error + Send + Sync + 'static {
    /// The Ready condition reason, Flux's.
    fn reason(&self) -> &'static str;

    /// What retrying can do. Flux requeues a failure inside its reconcile (build, apply, prune,
    /// health) after `spec.retryInterval`, so that is the default.
    fn retry(&self) -> Retry {
        Retry::RetryInterval
    }

    /// The Ready condition message. `Display` unless Flux words the condition differently
    /// (for example stating the requeue delay instead of the details).
    fn condition_message(&self, _requeue_dependency: Duration) -> String {
        self.to_string()
    }

    /// Whether the failure is announced with a Warning event (Flux stays quiet about a
    /// source or artifact that does not exist yet).
    fn warns(&self) -> bool {
        true
    }

    fn is_terminal(&self) -> bool {
        self.retry() == Retry::Terminal
    }
}
