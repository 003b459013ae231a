//! How long the steps of a pass may take, and when its progress is worth telling.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::api::conditions::reason;
use crate::api::duration;
use crate::deadline::Deadline;
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
    /// An earlier build of this Kustomization, abandoned at its deadline, has not returned.
    #[error("the previous build, abandoned at spec.timeout, is still running: no second one is started")]
    StillRunning,
}

impl StepError for BuildStopped {
    fn reason(&self) -> &'static str {
        reason::BUILD_FAILED
    }
}

/// The Kustomizations (by key) with a build on the blocking pool, abandoned or not.
#[derive(Debug, Default)]
pub(crate) struct Builds {
    running: Mutex<HashSet<String>>,
    /// Told whenever a build returns.
    returned: Notify,
}

/// One Kustomization's build running: its key is released when the build returns.
struct Running {
    builds: Arc<Builds>,
    key: String,
}

impl Builds {
    fn running(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn start(self: &Arc<Self>, key: &str) -> Option<Running> {
        self.running().insert(key.to_string()).then(|| Running {
            builds: self.clone(),
            key: key.to_string(),
        })
    }

    /// Resolves once no build runs.
    pub(crate) async fn all_returned(&self) {
        loop {
            let returned = self.returned.notified();
            tokio::pin!(returned);
            // Listening before looking: a build returning in between is not missed.
            returned.as_mut().enable();
            if self.running().is_empty() {
                return;
            }
            returned.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.builds.running().remove(&self.key);
        self.builds.returned.notify_waiters();
    }
}

/// Runs `build` of the Kustomization `key` on the blocking pool (it is CPU-bound) until
/// `deadline`. A blocking thread cannot be stopped from outside: the pass fails at the
/// deadline before anything is applied or pruned, and the build, which checks the same
/// deadline in its loops, stops soon after. Until it has, no other build of `key` starts:
/// retries must not pile up threads behind a build that ignores its deadline.
pub(crate) async fn build_within<T: Send + 'static>(
    builds: &Arc<Builds>,
    key: &str,
    deadline: Deadline,
    build: impl FnOnce() -> T + Send + 'static,
) -> Result<T, BuildStopped> {
    let budget = deadline.remaining();
    if budget.is_zero() {
        return Err(BuildStopped::NoTimeLeft(deadline.timeout()));
    }
    let running = builds.start(key).ok_or(BuildStopped::StillRunning)?;
    let build = move || {
        let _running = running;
        build()
    };
    match tokio::time::timeout(budget, tokio::task::spawn_blocking(build)).await {
        Ok(joined) => Ok(joined?),
        Err(_) => Err(BuildStopped::TimedOut(deadline.timeout())),
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

    fn deadline(timeout: Duration) -> Deadline {
        Deadline::after(timeout)
    }

    #[tokio::test]
    async fn a_build_past_its_deadline_is_abandoned_with_the_timeout_named() {
        let builds = Arc::new(Builds::default());
        let started = std::time::Instant::now();
        // spec.timeout 30s, of which 50 ms are left.
        let nearly_over = Deadline::from(started - Duration::from_millis(29_950), Duration::from_secs(30));
        let slow = build_within(&builds, "a/slow", nearly_over, || {
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

        let passed = Deadline::from(
            std::time::Instant::now() - Duration::from_secs(31),
            Duration::from_secs(30),
        );
        let late = build_within(&builds, "a/late", passed, || 7);
        assert_eq!(
            late.await.unwrap_err().to_string(),
            "spec.timeout (30s) ran out before the build began"
        );

        let quick = build_within(&builds, "a/quick", deadline(Duration::from_secs(5)), || 7);
        assert_eq!(quick.await.unwrap(), 7);
    }

    /// Before, each retry after a build abandoned at spec.timeout started another one beside
    /// it (threads 5 -> 7 in 90 s); now the Kustomization waits for its abandoned build.
    #[tokio::test]
    async fn no_second_build_of_a_kustomization_starts_while_one_runs() {
        let builds = Arc::new(Builds::default());
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let (returned, done) = std::sync::mpsc::channel::<()>();
        let held = build_within(&builds, "a/app", deadline(Duration::from_millis(20)), move || {
            let _ = hold.recv();
            let _ = returned.send(());
        });
        assert!(matches!(held.await, Err(BuildStopped::TimedOut(_))));

        let again = build_within(&builds, "a/app", deadline(Duration::from_secs(5)), || 7);
        let err = again.await.unwrap_err();
        assert!(matches!(err, BuildStopped::StillRunning), "{err}");
        assert_eq!(err.retry(), crate::error::Retry::RetryInterval);
        let other = build_within(&builds, "a/other", deadline(Duration::from_secs(5)), || 8);
        assert_eq!(other.await.unwrap(), 8, "other Kustomizations still build");

        release.send(()).unwrap();
        done.recv_timeout(Duration::from_secs(30)).unwrap();
        // The abandoned build returned on its thread: its key is released right after.
        let mut left = 100;
        let built = loop {
            match build_within(&builds, "a/app", deadline(Duration::from_secs(5)), || 7).await {
                Err(BuildStopped::StillRunning) if left > 0 => left -= 1,
                other => break other,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(built.unwrap(), 7);
    }

    /// At shutdown the controller waits for builds canceled on their threads: they remove
    /// their work directories (decrypted sources among them) before the process exits.
    #[tokio::test]
    async fn all_returned_waits_for_every_running_build() {
        let builds = Arc::new(Builds::default());
        builds.all_returned().await;
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let held = build_within(&builds, "a/app", deadline(Duration::from_millis(20)), move || {
            let _ = hold.recv();
        });
        assert!(matches!(held.await, Err(BuildStopped::TimedOut(_))));
        let waiting = tokio::spawn({
            let builds = builds.clone();
            async move { builds.all_returned().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "returned while a build runs");
        release.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("all_returned after the last build returned")
            .unwrap();
    }
}
