//! A build's deadline: spec.timeout counted from the start of its pass, or the controller's
//! shutdown, whichever comes first. The loops a tenant's input drives (pack parsing, tree
//! checkout, post-build substitution) check it, and remote fetches end at it, so a build
//! abandoned at its deadline or canceled at shutdown stops on its blocking thread instead of
//! running on unobserved.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::api::duration;

/// When a build must be done, the spec.timeout that set it (for messages), and the
/// controller's shutdown, which stops it sooner.
#[derive(Clone, Debug)]
pub struct Deadline {
    at: Instant,
    timeout: Duration,
    shutdown: CancellationToken,
}

/// Why a running build must stop.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Interrupted {
    /// The deadline passed while the build was running.
    #[error("the build ran out of time (spec.timeout {})", duration::format(*.0))]
    OutOfTime(Duration),
    /// The controller began shutting down: nothing the build makes would be applied.
    #[error("the build was canceled: the controller is shutting down")]
    ShuttingDown,
}

impl Deadline {
    /// `timeout` counted from `start`.
    pub fn from(start: Instant, timeout: Duration) -> Self {
        Deadline {
            at: start.checked_add(timeout).unwrap_or(start),
            timeout,
            shutdown: CancellationToken::new(),
        }
    }

    /// `timeout` counted from now.
    pub fn after(timeout: Duration) -> Self {
        Self::from(Instant::now(), timeout)
    }

    /// This deadline, or `shutdown` when it is canceled first.
    pub fn or_shutdown(self, shutdown: &CancellationToken) -> Self {
        Deadline {
            shutdown: shutdown.clone(),
            ..self
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    pub fn check(&self) -> Result<(), Interrupted> {
        if self.shutdown.is_cancelled() {
            return Err(Interrupted::ShuttingDown);
        }
        if Instant::now() >= self.at {
            return Err(Interrupted::OutOfTime(self.timeout));
        }
        Ok(())
    }

    /// Resolves when shutdown begins: what waits on the network ends there.
    pub async fn shutting_down(&self) {
        self.shutdown.cancelled().await;
    }

    /// `wanted` (a tenant's `?timeout=`, a flag) cut to what is left, and whether it was cut.
    pub fn cap(&self, wanted: Duration) -> (Duration, bool) {
        let left = self.remaining();
        if wanted > left {
            (left, true)
        } else {
            (wanted, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_longer_wish_is_cut_to_what_is_left() {
        let start = Instant::now();
        let deadline = Deadline::from(start, Duration::from_secs(60));
        let (capped, cut) = deadline.cap(Duration::from_secs(3600));
        assert!(cut);
        assert!(capped <= Duration::from_secs(60) && capped > Duration::from_secs(50));
        assert_eq!(
            deadline.cap(Duration::from_secs(5)),
            (Duration::from_secs(5), false)
        );
        assert!(deadline.check().is_ok());
    }

    #[test]
    fn a_passed_deadline_says_so_with_the_timeout() {
        let start = Instant::now() - Duration::from_secs(31);
        let deadline = Deadline::from(start, Duration::from_secs(30));
        assert_eq!(deadline.remaining(), Duration::ZERO);
        assert_eq!(deadline.cap(Duration::from_secs(27)), (Duration::ZERO, true));
        assert_eq!(
            deadline.check().unwrap_err().to_string(),
            "the build ran out of time (spec.timeout 30s)"
        );
    }

    /// Before, SIGTERM left a running build to its deadline (minutes for a slow remote
    /// base); now shutdown stops it at the next check, whatever time is left.
    #[test]
    fn shutdown_stops_a_build_with_time_left() {
        let shutdown = CancellationToken::new();
        let deadline = Deadline::after(Duration::from_secs(600)).or_shutdown(&shutdown);
        let copy = deadline.clone();
        assert!(deadline.check().is_ok());
        shutdown.cancel();
        assert_eq!(copy.check(), Err(Interrupted::ShuttingDown));
        assert_eq!(
            deadline.check().unwrap_err().to_string(),
            "the build was canceled: the controller is shutting down"
        );
        // Shutdown is named first: the deadline passing meanwhile is not why the build stopped.
        let passed = Deadline::from(Instant::now() - Duration::from_secs(31), Duration::from_secs(30));
        assert_eq!(
            passed.or_shutdown(&shutdown).check(),
            Err(Interrupted::ShuttingDown)
        );
        // A deadline of its own knows no shutdown.
        assert!(Deadline::after(Duration::from_secs(600)).check().is_ok());
    }
}
