//! What runs a controller beside its reconciles: its start-up (client, metrics, probes,
//! leadership), its instance name and its bounded shutdown.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryFuture, TryFutureExt};
use kube::runtime::controller::{Action, Controller};
use serde::de::DeserializeOwned;
pub use tokio_util::sync::CancellationToken;

use crate::client::{RequestCounts, counting_client};
use crate::identity::ControllerIdentity;
use crate::leader::{LeaderElector, LeaseTimings};
use crate::options::RuntimeOptions;
use crate::probes::{Readiness, ServeError, serve_http};
use crate::telemetry::Metrics;
use crate::telemetry::logs::reconcile_span;

/// What a controller process holds once it may reconcile.
pub struct Started {
    pub client: kube::Client,
    pub counts: RequestCounts,
    pub metrics: Arc<Metrics>,
    /// Present with `--enable-leader-election`; this process leads.
    pub elector: Option<LeaderElector>,
    /// The pod (or host) name events and the Lease carry.
    pub instance: String,
}

/// Why a controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("unable to build the kube client: {0}")]
    Client(#[source] kube::Error),
    /// The probe or metrics server could not listen.
    #[error(transparent)]
    Serve(#[from] ServeError),
}

/// Builds the counting client, serves metrics and probes, and with leader election waits
/// until this process leads. `None`: a shutdown signal came first.
pub async fn start(
    config: kube::Config,
    identity: &ControllerIdentity,
    runtime: &RuntimeOptions,
) -> Result<Option<Started>, StartError> {
    let (client, counts) = counting_client(config).map_err(StartError::Client)?;
    let mut metrics = Metrics::new(identity);
    metrics.register_api_requests(counts.clone());
    metrics.runtime.set_max_concurrent(runtime.concurrent);
    let metrics = Arc::new(metrics);
    let readiness = Readiness::default();
    serve_http(&runtime.metrics_addr, Some(metrics.clone()), readiness.clone()).await?;
    serve_http(&runtime.health_addr, None, readiness.clone()).await?;

    let instance = instance_name(identity);
    let elector = runtime.enable_leader_election.then(|| {
        LeaderElector::new(
            client.clone(),
            &runtime.runtime_namespace,
            runtime.lease_name(identity),
            instance.clone(),
            LeaseTimings {
                lease_duration: runtime.leader_election_lease_duration,
                renew_deadline: runtime.leader_election_renew_deadline,
                retry_period: runtime.leader_election_retry_period,
            },
            counts.write_fence(),
        )
    });
    // Ready means "able to serve": a standby replica is ready too, as with Flux.
    readiness.set(true);
    if let Some(elector) = &elector {
        tokio::select! {
            () = elector.acquire() => {}
            () = shutdown_signal() => return Ok(None),
        }
    }
    Ok(Some(Started {
        client,
        counts,
        metrics,
        elector,
        instance,
    }))
}

/// Runs `work` (the controllers) to its end, while this process keeps its leadership when
/// elected; `false`: leadership was lost first. With `release_on_cancel`, a leader that
/// finishes gives its Lease up at once instead of letting it expire.
pub async fn lead_while(
    elector: Option<&LeaderElector>,
    release_on_cancel: bool,
    work: impl Future<Output = ()>,
) -> bool {
    let Some(elector) = elector else {
        work.await;
        return true;
    };
    // The renewals run in a task of their own: polled beside `work`, they would wait for
    // every synchronous stretch of the reconciles, and on a loaded machine those can add up
    // past the renew deadline.
    let mut renewals = tokio::spawn({
        let elector = elector.clone();
        async move { elector.hold().await }
    });
    let stop_renewals = AbortOnDrop(renewals.abort_handle());
    tokio::select! {
        () = work => {
            // Stopped before the release, or a renewal could take the released Lease back.
            drop(stop_renewals);
            let _ = renewals.await;
            if release_on_cancel {
                elector.release().await;
            }
            true
        }
        _ = &mut renewals => false,
    }
}

/// Aborts a task when dropped, so a caller that stops waiting does not leave it running.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The pod name when running in a cluster, else the host name; events and the Lease carry it.
pub fn instance_name(identity: &ControllerIdentity) -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("{}-{}", identity.component, std::process::id()))
}

/// Returns on SIGTERM or SIGINT, once it has said so in the log.
pub async fn shutdown_signal() {
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!(
        "shutting down: canceling running reconciles, exiting within {}s",
        GRACEFUL_SHUTDOWN.as_secs()
    );
}

/// Runs `controller`'s reconciles until `shutdown` is canceled. Then no reconcile starts and
/// the running ones are dropped where they are, as Flux's end when the manager cancels their
/// context: a canceled pass applies, deletes and writes nothing more. The errors are the
/// error policy's to log; what else the controller reports is debug detail.
pub async fn run_until<K, Ctx, F>(
    identity: &'static ControllerIdentity,
    controller: Controller<K>,
    shutdown: CancellationToken,
    mut reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> F,
    error_policy: impl Fn(Arc<K>, &F::Error, Arc<Ctx>) -> Action,
    ctx: Arc<Ctx>,
) where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Debug + Unpin,
    F: TryFuture<Ok = Action> + Send + 'static,
    F::Error: std::error::Error + Send + 'static,
{
    let stopping = shutdown.clone().cancelled_owned();
    let cancelable = move |object: Arc<K>, ctx: Arc<Ctx>| {
        let pass = TryFutureExt::into_future(reconcile(object.clone(), ctx));
        canceled_at_shutdown(identity, shutdown.clone(), object, pass)
    };
    controller
        .graceful_shutdown_on(stopping)
        .run(cancelable, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "controller event");
            }
        })
        .await;
}

/// `pass` of `object`, or, once `shutdown` is canceled, nothing more of it: it ends with no
/// error (there is nothing to retry in a process that exits) and says so in the log.
async fn canceled_at_shutdown<K: kube::Resource, E>(
    identity: &'static ControllerIdentity,
    shutdown: CancellationToken,
    object: Arc<K>,
    pass: impl Future<Output = Result<Action, E>>,
) -> Result<Action, E> {
    if let Some(done) = shutdown.run_until_cancelled(pass).await {
        return done;
    }
    let meta = object.meta();
    let (namespace, name) = (meta.namespace.as_deref(), meta.name.as_deref());
    let span = reconcile_span(identity, namespace.unwrap_or(""), name.unwrap_or(""));
    span.in_scope(|| tracing::info!("reconciliation canceled: the controller is shutting down"));
    Ok(Action::await_change())
}

/// How long running reconciles get after SIGTERM: controller-runtime's default graceful
/// shutdown timeout, which Flux's controllers keep (their Deployments allow 60 s).
pub const GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(30);

/// How a controller's run ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It finished, its running reconciles done.
    Finished,
    /// The graceful period after the signal ran out with reconciles still running.
    GracePeriodOver,
}

/// Runs `run` (the controllers, stopped by `shutdown`) until `signal`, then cancels
/// `shutdown` and gives `run` `grace` to finish. Canceled reconciles end at once; what runs
/// on beyond the period (a request the kube client holds, a build on a blocking thread that
/// checks for cancellation too seldom) must not keep the process alive.
pub async fn run_with_grace(
    signal: impl Future<Output = ()>,
    grace: Duration,
    shutdown: &CancellationToken,
    run: impl Future<Output = ()>,
) -> Stopped {
    tokio::pin!(run, signal);
    tokio::select! {
        () = &mut run => return Stopped::Finished,
        () = &mut signal => {}
    }
    shutdown.cancel();
    tokio::select! {
        () = run => Stopped::Finished,
        () = tokio::time::sleep(grace) => Stopped::GracePeriodOver,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before, SIGTERM waited for running reconciles forever: a controller whose API server
    /// was gone was still alive 10 minutes later. A run that never ends is left after the
    /// graceful period (the outer bound only turns a hang into a failure, in paused time).
    #[tokio::test(start_paused = true)]
    async fn a_run_that_never_ends_is_left_after_the_graceful_period() {
        let started = tokio::time::Instant::now();
        let signal = tokio::time::sleep(Duration::from_secs(5));
        let shutdown = CancellationToken::new();
        let run = async {
            shutdown.cancelled().await;
            std::future::pending::<()>().await
        };
        let bounded = tokio::time::timeout(
            Duration::from_secs(3600),
            run_with_grace(signal, Duration::from_secs(30), &shutdown, run),
        );
        assert_eq!(bounded.await, Ok(Stopped::GracePeriodOver));
        assert_eq!(started.elapsed(), Duration::from_secs(35));
    }

    #[tokio::test(start_paused = true)]
    async fn runs_finishing_within_the_period_are_waited_for() {
        let started = tokio::time::Instant::now();
        let signal = tokio::time::sleep(Duration::from_secs(5));
        let shutdown = CancellationToken::new();
        let run = async {
            shutdown.cancelled().await;
            tokio::time::sleep(Duration::from_secs(10)).await;
        };
        let stopped = run_with_grace(signal, Duration::from_secs(30), &shutdown, run).await;
        assert_eq!(stopped, Stopped::Finished);
        assert_eq!(started.elapsed(), Duration::from_secs(15));
        // Without a signal, the run is not stopped.
        let untouched = CancellationToken::new();
        let run = tokio::time::sleep(Duration::from_secs(1));
        let stopped = run_with_grace(std::future::pending(), Duration::ZERO, &untouched, run).await;
        assert_eq!(stopped, Stopped::Finished);
        assert!(!untouched.is_cancelled());
    }

    fn config_map() -> Arc<k8s_openapi::api::core::v1::ConfigMap> {
        let mut object = k8s_openapi::api::core::v1::ConfigMap::default();
        object.metadata.name = Some("app".into());
        object.metadata.namespace = Some("apps".into());
        Arc::new(object)
    }

    /// Before, a reconcile went on after SIGTERM until it ended by itself (a build of a
    /// remote base that took minutes held the process for the whole graceful period); now
    /// it is dropped when shutdown begins, and what it would have done after is not done.
    #[tokio::test(start_paused = true)]
    async fn a_running_reconcile_ends_when_shutdown_begins() {
        let identity = &crate::identity::testing::KUSTOMIZATION;
        let shutdown = CancellationToken::new();
        let went_on = std::sync::atomic::AtomicBool::new(false);
        let pass = async {
            tokio::time::sleep(Duration::from_secs(600)).await;
            went_on.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, std::fmt::Error>(Action::requeue(Duration::from_secs(60)))
        };
        let started = tokio::time::Instant::now();
        let stop = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            shutdown.cancel();
        };
        let (ended, ()) = tokio::join!(
            canceled_at_shutdown(identity, shutdown.clone(), config_map(), pass),
            stop
        );
        assert_eq!(ended, Ok(Action::await_change()));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(!went_on.load(std::sync::atomic::Ordering::SeqCst));

        // Without shutdown, the pass's own result.
        let quick = async { Ok::<_, std::fmt::Error>(Action::requeue(Duration::from_secs(60))) };
        let ended = canceled_at_shutdown(identity, CancellationToken::new(), config_map(), quick);
        assert_eq!(ended.await, Ok(Action::requeue(Duration::from_secs(60))));
    }
}
