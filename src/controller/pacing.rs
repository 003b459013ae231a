//! How long the steps of a pass may take, and when its progress is worth telling.

use std::future::Future;
use std::time::Duration;

use crate::api::conditions::reason;
use crate::api::duration;
use crate::error::StepError;

/// How long new work runs before its progress is written. A pass that parks or concludes
/// sooner writes its next status straight away: a progress status replaced within a second
/// is one write of the Kustomization (validated against Flux's CRD, sent to every watcher)
/// that nobody could have read.
pub(crate) const PROGRESS_DELAY: Duration = Duration::from_secs(1);

/// Runs `work`, and `write` (the progress) beside it once `work` has run for `delay`. The
/// write, once begun, is finished before this returns: it must never land after the pass's
/// next write.
pub(crate) async fn progress_after<T, W>(
    delay: Duration,
    write: Option<impl Future<Output = W>>,
    work: impl Future<Output = T>,
) -> (T, Option<W>) {
    let Some(write) = write else {
        return (work.await, None);
    };
    tokio::pin!(work);
    tokio::select! {
        done = &mut work => return (done, None),
        () = tokio::time::sleep(delay) => {}
    }
    let (done, written) = tokio::join!(work, write);
    (done, Some(written))
}

/// The build on the blocking pool did not return a result.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BuildStopped {
    #[error("build panicked: {0}")]
    Panicked(#[from] tokio::task::JoinError),
    /// Not finished within spec.timeout, counted from the start of the pass.
    #[error("build timed out: not finished within spec.timeout ({})", duration::format(*.0))]
    TimedOut(Duration),
    /// spec.timeout was used up by the steps before the build (an API server holding their
    /// requests): the build is not started, and not blamed.
    #[error("spec.timeout ({}) ran out before the build began", duration::format(*.0))]
    NoTimeLeft(Duration),
}

impl StepError for BuildStopped {
    fn reason(&self) -> &'static str {
        reason::BUILD_FAILED
    }
}

/// Runs `build` on the blocking pool (it is CPU-bound) for at most `budget`, what is left of
/// `timeout`. A blocking thread cannot be stopped, so one that runs over finishes unobserved
/// (its input is bounded by the engine's limits) while the pass fails before anything is
/// applied or pruned.
pub(crate) async fn build_within<T: Send + 'static>(
    budget: Duration,
    timeout: Duration,
    build: impl FnOnce() -> T + Send + 'static,
) -> Result<T, BuildStopped> {
    if budget.is_zero() {
        return Err(BuildStopped::NoTimeLeft(timeout));
    }
    match tokio::time::timeout(budget, tokio::task::spawn_blocking(build)).await {
        Ok(joined) => Ok(joined?),
        Err(_) => Err(BuildStopped::TimedOut(timeout)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn work_done_within_the_delay_writes_no_progress() {
        let (done, written) = progress_after(Duration::from_secs(1), Some(async { "progress" }), async {
            tokio::time::sleep(Duration::from_millis(900)).await;
            7
        })
        .await;
        assert_eq!((done, written), (7, None));
    }

    #[tokio::test(start_paused = true)]
    async fn longer_work_writes_progress_and_waits_for_the_write() {
        let write_finished = AtomicBool::new(false);
        let (done, written) = progress_after(
            Duration::from_secs(1),
            Some(async {
                // Slower than the work itself: still finished before the pass goes on.
                tokio::time::sleep(Duration::from_secs(5)).await;
                write_finished.store(true, Ordering::SeqCst);
                "progress"
            }),
            async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                7
            },
        )
        .await;
        assert_eq!((done, written), (7, Some("progress")));
        assert!(write_finished.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn without_new_work_nothing_is_written() {
        let (done, written) =
            progress_after(Duration::from_secs(1), None::<std::future::Ready<&str>>, async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                7
            })
            .await;
        assert_eq!((done, written), (7, None));
    }

    #[tokio::test]
    async fn a_build_past_its_budget_is_abandoned_with_the_timeout_named() {
        let started = std::time::Instant::now();
        let slow = build_within(Duration::from_millis(50), Duration::from_secs(30), || {
            std::thread::sleep(Duration::from_secs(1));
        });
        let err = slow.await.unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(500), "not waited for");
        assert!(matches!(err, BuildStopped::TimedOut(_)));
        assert_eq!(err.reason(), "BuildFailed");
        assert_eq!(
            err.to_string(),
            "build timed out: not finished within spec.timeout (30s)"
        );

        let late = build_within(Duration::ZERO, Duration::from_secs(30), || 7);
        assert_eq!(
            late.await.unwrap_err().to_string(),
            "spec.timeout (30s) ran out before the build began"
        );

        let quick = build_within(Duration::from_secs(5), Duration::from_secs(30), || 7);
        assert_eq!(quick.await.unwrap(), 7);
    }
}
