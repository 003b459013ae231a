//! A build's deadline: spec.timeout counted from the start of its pass. The loops a tenant's
//! input drives (pack parsing, tree checkout, post-build substitution) check it, and remote
//! fetches are cut to what is left of it, so a build abandoned at its deadline stops on its
//! blocking thread instead of running on unobserved.

use std::time::{Duration, Instant};

use crate::api::duration;

/// When a build must be done, and the spec.timeout that set it (for messages).
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Instant,
    timeout: Duration,
}

/// The deadline passed while the build was running.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the build ran out of time (spec.timeout {})", duration::format(*.0))]
pub struct OutOfTime(pub Duration);

impl Deadline {
    /// `timeout` counted from `start`.
    pub fn from(start: Instant, timeout: Duration) -> Self {
        Deadline {
            at: start.checked_add(timeout).unwrap_or(start),
            timeout,
        }
    }

    /// `timeout` counted from now.
    pub fn after(timeout: Duration) -> Self {
        Self::from(Instant::now(), timeout)
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    pub fn check(&self) -> Result<(), OutOfTime> {
        if Instant::now() >= self.at {
            return Err(OutOfTime(self.timeout));
        }
        Ok(())
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
}
