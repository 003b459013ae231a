//! How the controller's watches list and retry. Lists ask for the newest state; retries wait
//! kube's default delays (from 0.8 s, doubling to 30 s, plus up to as much again of jitter),
//! except after a watch expired. Each watch waits alone: one failing never pauses another. A
//! watch whose answer never comes is given up on by the client (`client`), and retried here.
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
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff};

/// The settings of every watch. Its lists, first and after an expiry, ask for the newest state
/// rather than any version the API server has cached: a cache still catching up after a
/// restart can answer with a version older than it keeps, which the resumed watch then finds
/// expired at once.
pub fn config() -> watcher::Config {
    watcher::Config::default()
}

/// A controller of `K` running `concurrency` passes at once, triggered by `objects` and by the
/// watches added to it, each of which must come through [`with_backoff`].
///
/// kube's controller would also wait after an error of any of its watches, reading none of
/// them meanwhile, the delay doubling with each error of any: after an API server restart the
/// watches' reconnect errors left a source's new revision unread for up to minutes.
pub fn controller<K>(
    objects: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    reader: Store<K>,
    concurrency: u16,
) -> Controller<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    Controller::for_stream(objects, reader)
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .trigger_backoff(Undelayed)
}

/// No delay: for the merge of watches that each wait alone.
struct Undelayed;

impl Iterator for Undelayed {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for Undelayed {
    fn reset(&mut self) {}
}

/// `events` with the retry delays above.
pub fn with_backoff<K>(
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
    async fn a_watch_failing_again_and_again_does_not_delay_what_another_watch_brings() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::controller::Action;
        use kube::runtime::reflector::{self, ObjectRef};

        let object: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "a", "namespace": "ns"}}))
                .unwrap();
        let (reader, writer) = reflector::store();
        let listed = [
            watcher::Event::Init,
            watcher::Event::InitApply(object.clone()),
            watcher::Event::InitDone,
        ];
        let objects = reflector::reflector(writer, stream::iter(listed.map(Ok)).chain(stream::pending()))
            .applied_objects();
        let failing = stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((Err::<ConfigMap, _>(watcher::Error::NoResourceVersion), ()))
        });
        let late = Duration::from_secs(20);
        let brought = stream::once(async move {
            tokio::time::sleep(late).await;
            Ok(object)
        })
        .chain(stream::pending());

        let start = tokio::time::Instant::now();
        let passes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let run = controller(objects, reader, 4)
            .watches_stream(failing, |cm: ConfigMap| Some(ObjectRef::from_obj(&cm)))
            .watches_stream(brought, |cm: ConfigMap| Some(ObjectRef::from_obj(&cm)))
            .run(
                move |_, passes: Arc<Arc<std::sync::Mutex<Vec<Duration>>>>| {
                    passes.lock().unwrap().push(start.elapsed());
                    std::future::ready(Ok::<_, std::io::Error>(Action::await_change()))
                },
                |_, _, _| Action::await_change(),
                Arc::new(passes.clone()),
            )
            .for_each(|_| async {});
        let _ = tokio::time::timeout(late + Duration::from_secs(20), run).await;

        let passes = passes.lock().unwrap().clone();
        assert!(
            passes
                .iter()
                .any(|at| (late..late + Duration::from_secs(1)).contains(at)),
            "a pass within a second of the change at {late:?}: {passes:?}"
        );
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
