//! How the controller's watches list and retry. Lists ask for the newest state; retries wait
//! kube's default delays (from 0.8 s, doubling to 30 s, plus up to as much again of jitter),
//! except after a watch expired.
//!
//! A watch expires (410 Gone) when the API server no longer keeps the version it resumes
//! from; that is how a watch learns to list afresh, not a sign of a failing server. After an
//! API server restart every watch expires on its first reconnect, which comes while the delay
//! is still doubled from the outage: waiting that delay once more before the list would add up
//! to a minute before a source's new revision is seen. The list after an expiry waits the
//! shortest delay instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff};

/// The settings of every watch. Its lists, first and after an expiry, ask for the newest state
/// rather than any version the API server has cached: a cache still catching up after a
/// restart can answer with a version older than it keeps, which the resumed watch then finds
/// expired at once.
pub(crate) fn config() -> watcher::Config {
    watcher::Config::default()
}

/// `events` with the retry delays above.
pub(crate) fn with_backoff<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send {
    let expired = Arc::new(AtomicBool::new(false));
    let seen = expired.clone();
    events
        .inspect(move |item| {
            if is_expiry(item) {
                seen.store(true, Ordering::Relaxed);
            }
        })
        .backoff(ExpiryRestarts {
            delays: DefaultBackoff::default(),
            expired,
        })
}

fn is_expiry<K>(item: &Result<watcher::Event<K>, watcher::Error>) -> bool {
    matches!(item, Err(watcher::Error::WatchError(status)) if status.code == 410)
}

/// The default delays, started over when the error they follow was an expiry.
struct ExpiryRestarts {
    delays: DefaultBackoff,
    expired: Arc<AtomicBool>,
}

impl Iterator for ExpiryRestarts {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.expired.swap(false, Ordering::Relaxed) {
            self.delays.reset();
        }
        self.delays.next()
    }
}

impl Backoff for ExpiryRestarts {
    fn reset(&mut self) {
        self.delays.reset();
    }
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use kube::core::Status;

    use super::*;

    fn failure() -> Result<watcher::Event<()>, watcher::Error> {
        Err(watcher::Error::NoResourceVersion)
    }

    fn expiry() -> Result<watcher::Event<()>, watcher::Error> {
        let status = Status::failure("too old resource version: 238 (381)", "Expired").with_code(410);
        Err(watcher::Error::WatchError(Box::new(status)))
    }

    /// The delay after the last of `items` before the stream ends, on tokio's paused clock.
    async fn delay_after_last(items: Vec<Result<watcher::Event<()>, watcher::Error>>) -> Duration {
        let count = items.len();
        let mut events = std::pin::pin!(with_backoff(stream::iter(items)));
        for _ in 0..count {
            let _ = events.next().await.expect("an item");
        }
        let last = tokio::time::Instant::now();
        assert!(events.next().await.is_none());
        last.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn an_expiry_is_followed_by_the_shortest_delay_and_other_errors_by_doubling_ones() {
        // The sixth failure in a row waits 25.6 s, plus up to as much of jitter.
        let failing = delay_after_last((0..6).map(|_| failure()).collect()).await;
        assert!(failing >= Duration::from_secs_f64(25.6), "{failing:?}");
        let mut items: Vec<_> = (0..5).map(|_| failure()).collect();
        items.push(expiry());
        let expired = delay_after_last(items).await;
        assert!(
            (Duration::from_millis(800)..=Duration::from_millis(1600)).contains(&expired),
            "an expiry waits the first delay: {expired:?}"
        );
    }
}
